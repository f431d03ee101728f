"""Drop-in storage for agent frameworks, one module per framework, each behind an extra.

Import the module of your framework (``redis_msglog.integrations.openai_agents``,
``redis_msglog.integrations.langchain``); this package imports none of them, and
``redis_msglog`` itself never imports a framework. See docs/integrations.md.
"""
