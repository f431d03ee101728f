"""Drop-in storage for agent frameworks: one module per framework, each behind an extra
(``pip install 'redis-msglog[<framework>]'``) and importing its framework
(``openai_agents``, ``langchain``, ``llama_index``, ``pydantic_ai``,
``agent_framework``); this package imports
none of them, and ``redis_msglog`` itself never imports a framework. See
docs/integrations.md."""
