"""Drop-in storage for agent frameworks: one module per framework, each behind an extra
(``pip install 'redis-msglog[<framework>]'``) and importing its framework; this package
itself imports none. See docs/integrations.md."""
