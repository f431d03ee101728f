"""Switching keeps history: import what a framework's own Redis store holds into the log,
where the matching integration reads it (docs/integrations.md, "Switching from a
framework's own Redis store"; ``msglog import --from ...`` on the command line).

- :func:`import_from_redis_session`: the Agents SDK's ``RedisSession``
  (``<key_prefix>:<session_id>:messages``, a LIST of items as JSON, oldest first), for
  :class:`~redis_msglog.integrations.openai_agents.MessageLogSession`;
- :func:`import_from_redis_chat_message_history`: langchain-community's
  ``RedisChatMessageHistory`` (``<key_prefix><session_id>``, default prefix
  ``message_store:``, a LIST of ``message_to_dict`` JSON, newest first: ``LPUSH``), for
  :class:`~redis_msglog.integrations.langchain.MessageLogChatHistory`;
- :func:`import_from_redis_chat_store`: LlamaIndex's ``RedisChatStore`` (the chat store
  key itself, a LIST of ``ChatMessage`` JSON, oldest first), for
  :class:`~redis_msglog.integrations.llama_index.MessageLogBaseChatStore` (registered in
  its default scope) and ``MessageLogChatStore``.

Each id becomes the log conversation of the same id. Every row is decoded (with the
framework's own parser) before anything is written for its key; a bad one is a
:class:`SourceRowError` naming the key and position. Rows go in atomic batches that
record, with them, how many rows of the source are in the log, so running an import
again writes nothing twice (and imports only rows added since); the counts are checked
at the end. The source is only read. This module imports a framework only when its
function is called (the Agents SDK's items need none of it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from .._core.args import check_text, check_type, missing_extra, shown
from .._tools.migrate import (
    ImportCountError,
    ImportedKey,
    SourceChangedError,
    SourceLayout,
    SourceRowError,
    SyncClient,
    import_keys,
)
from ..errors import InvalidArgumentError
from ..formats.responses import item_messages
from ..models import AgentMessage
from ._log_options import integration_options

__all__ = [
    "SOURCES",
    "ImportCountError",
    "ImportedKey",
    "SourceChangedError",
    "SourceRowError",
    "import_from",
    "import_from_redis_chat_message_history",
    "import_from_redis_chat_store",
    "import_from_redis_session",
]

SOURCES = ("openai-agents", "langchain", "llama-index")
"""The stores ``msglog import --from`` reads."""


def _agents_row(text: str) -> list[AgentMessage]:
    item = orjson.loads(text)
    if not isinstance(item, dict) or not isinstance(item.get("type", item.get("role")), str):
        raise ValueError("an item is a JSON object with a type or a role")
    return item_messages([item])


def _langchain_row(text: str) -> list[AgentMessage]:
    try:
        from langchain_core.messages import messages_from_dict

        from ..formats.langchain import from_langchain
    except ModuleNotFoundError as exc:
        raise missing_extra("langchain", exc) from exc
    data = orjson.loads(text)
    if not isinstance(data, dict):
        raise ValueError("a message is a JSON object (message_to_dict)")
    return from_langchain(messages_from_dict([data]))


def _llama_index_row(text: str) -> list[AgentMessage]:
    from llama_index.core.base.llms.types import ChatMessage

    from ._llama_index_messages import from_llama_index

    return [from_llama_index(ChatMessage.model_validate_json(text))]


def layout(name: str, key_prefix: str | None = None) -> SourceLayout:
    """The layout of ``name`` (one of :data:`SOURCES`), with its store's key prefix
    (``None``: that store's default)."""
    if name == "openai-agents":
        prefix = "agents:session" if key_prefix is None else key_prefix
        return SourceLayout(name, lambda sid: f"{prefix}:{sid}:messages", False, _agents_row)
    if name == "langchain":
        prefix = "message_store:" if key_prefix is None else key_prefix
        return SourceLayout(name, lambda sid: f"{prefix}{sid}", True, _langchain_row)
    if name == "llama-index":
        if key_prefix:  # RedisChatStore has none: its keys are the chat store keys
            raise _bad("llama-index's RedisChatStore has no key prefix")
        try:
            import llama_index.core  # noqa: F401
        except ModuleNotFoundError as exc:
            raise missing_extra("llama-index", exc) from exc
        return SourceLayout(name, lambda key: key, False, _llama_index_row)
    raise _bad(f"unknown source {shown(name)}; the sources are {', '.join(SOURCES)}")


def _bad(message: str) -> Exception:
    return InvalidArgumentError(message)


def import_from(
    name: str,
    redis: SyncClient,
    ids: Iterable[str],
    *,
    source: SyncClient | None = None,
    key_prefix: str | None = None,
    batch_size: int = 500,
    **log_options: Any,
) -> list[ImportedKey]:
    """Import the conversations ``ids`` of the store ``name`` (:data:`SOURCES`) read on
    ``source`` (default: ``redis``) into the logs of the same ids on ``redis`` (a
    ``redis.Redis`` or ``RedisCluster``); ``**log_options`` as the integrations take
    them (``prefix``, ``scope``, ``ttl``...). One :class:`ImportedKey` per id."""
    options = integration_options(log_options)
    if key_prefix is not None:
        check_type("key_prefix", key_prefix, str, "a str or None")
        if key_prefix:
            check_text("key_prefix", key_prefix)
    found = layout(name, key_prefix)
    return import_keys(
        redis,
        redis if source is None else source,
        found,
        ids,
        batch_size=batch_size,
        log_options=options,
    )


def import_from_redis_session(
    redis: SyncClient, session_ids: Iterable[str], **options: Any
) -> list[ImportedKey]:
    """The Agents SDK ``RedisSession``'s sessions into the log (``key_prefix``: its
    ``key_prefix``, default ``"agents:session"``); :func:`import_from` says the rest."""
    return import_from("openai-agents", redis, session_ids, **options)


def import_from_redis_chat_message_history(
    redis: SyncClient, session_ids: Iterable[str], **options: Any
) -> list[ImportedKey]:
    """langchain-community ``RedisChatMessageHistory``'s sessions into the log
    (``key_prefix``: its ``key_prefix``, default ``"message_store:"``)."""
    return import_from("langchain", redis, session_ids, **options)


def import_from_redis_chat_store(
    redis: SyncClient, keys: Iterable[str], **options: Any
) -> list[ImportedKey]:
    """LlamaIndex ``RedisChatStore``'s keys into the log, registered in
    ``MessageLogBaseChatStore``'s default scope ``("llama-index",)`` unless ``scope=``
    says otherwise (so its ``get_keys`` lists them)."""
    options.setdefault("scope", ("llama-index",))
    return import_from("llama-index", redis, keys, **options)
