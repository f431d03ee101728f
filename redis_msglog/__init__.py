"""redis-msglog: a durable, append-only conversation log for LLM agent workers, in Redis.

Quick start::

    import redis
    from redis_msglog import MessageLog

    log = MessageLog(redis.Redis(), "conv-42")
    seq = log.add("user", "hello")
    history = log.all()
"""

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names, for type checkers and readers; imported on first use below
    from ._async import AsyncDirectory, AsyncMessageLog
    from ._core.lifecycle.scope import (
        ConversationPage,
        ScopedConversation,
        ScopeErasure,
        SkippedEntry,
    )
    from ._core.read.cache import DEFAULT_READ_CACHE_BYTES
    from ._core.retry import DEFAULT_RETRY, NO_RETRY, RetryPolicy
    from ._core.stored.keys import ConversationKeys
    from ._core.write.depth import MAX_JSON_DEPTH
    from ._core.write.durability import Durability
    from ._io.shell import configure_read_cache
    from ._io.subscription import AsyncSubscription, Subscription
    from ._sync import Directory, MessageLog
    from ._tools.acl import acl_rules, acl_rules_for
    from .adapters import (
        anthropic_system,
        from_anthropic,
        from_langchain,
        from_openai,
        from_responses,
        to_anthropic,
        to_langchain,
        to_langchain_messages,
        to_openai,
        to_responses,
    )
    from .drafts import (
        Draft,
        DraftDelta,
        DraftEnded,
        DraftEvent,
        DraftOutcome,
        DraftStarted,
    )
    from .edits import Attributes, EditEntry, Entry, LogView, MessageView, View
    from .errors import (
        AppendInDoubtError,
        AuthenticationError,
        BatchTooLargeError,
        CodecError,
        ConversationErasedError,
        CorruptEntryError,
        CorruptLogError,
        DraftEndedError,
        DraftTooLargeError,
        DurabilityUnsupportedError,
        EvictionWarning,
        IdempotencyConflictError,
        InvalidArgumentError,
        InvalidEditError,
        InvalidMessageError,
        LogRewoundError,
        MessageLogError,
        MessageTooLargeError,
        MissingExtraError,
        NotDurableError,
        OutOfMemoryError,
        PagedReadRetryError,
        PermissionDeniedError,
        RewriteTooLargeError,
        ScopeErasedError,
        ScopeErasureIncompleteError,
        ScopeMismatchError,
        SeqConflictError,
        ServerUnavailableError,
        StorageError,
        TooManyDraftsError,
        UsageCurrencyError,
        WrongTypeError,
    )
    from .models import AgentMessage, Role, StoredMessage, ToolCall, Usage
    from .parts import (
        AudioPart,
        ContentPart,
        FilePart,
        ImagePart,
        ReasoningPart,
        RedactedThinkingPart,
        RefusalPart,
        TextPart,
        ThinkingPart,
    )

# Each public name's module. Imported on first use (PEP 562), so that ``import
# redis_msglog.testing`` (the pytest plugin, loaded in every pytest run of a project that
# installs the package) does not import redis-py, pydantic and every client module: ~250 ms.
# tests/no_server/test_layout.py checks that this table, the imports above and __all__ agree.
_EXPORTS = {
    "._tools.acl": ("acl_rules", "acl_rules_for"),
    "._async": ("AsyncDirectory", "AsyncMessageLog"),
    "._core.read.cache": ("DEFAULT_READ_CACHE_BYTES",),
    "._io.shell": ("configure_read_cache",),
    "._core.write.depth": ("MAX_JSON_DEPTH",),
    "._core.write.durability": ("Durability",),
    "._core.stored.keys": ("ConversationKeys",),
    "._core.retry": ("DEFAULT_RETRY", "NO_RETRY", "RetryPolicy"),
    "._core.lifecycle.scope": (
        "ConversationPage",
        "ScopedConversation",
        "ScopeErasure",
        "SkippedEntry",
    ),
    "._io.subscription": ("AsyncSubscription", "Subscription"),
    "._sync": ("Directory", "MessageLog"),
    ".adapters": (
        "anthropic_system",
        "from_anthropic",
        "from_langchain",
        "from_openai",
        "from_responses",
        "to_anthropic",
        "to_langchain",
        "to_langchain_messages",
        "to_openai",
        "to_responses",
    ),
    ".drafts": (
        "Draft",
        "DraftDelta",
        "DraftEnded",
        "DraftEvent",
        "DraftOutcome",
        "DraftStarted",
    ),
    ".edits": ("Attributes", "EditEntry", "Entry", "LogView", "MessageView", "View"),
    ".errors": (
        "AppendInDoubtError",
        "AuthenticationError",
        "BatchTooLargeError",
        "CodecError",
        "ConversationErasedError",
        "CorruptEntryError",
        "CorruptLogError",
        "DraftEndedError",
        "DraftTooLargeError",
        "DurabilityUnsupportedError",
        "EvictionWarning",
        "IdempotencyConflictError",
        "InvalidArgumentError",
        "InvalidEditError",
        "InvalidMessageError",
        "LogRewoundError",
        "MessageLogError",
        "MessageTooLargeError",
        "MissingExtraError",
        "NotDurableError",
        "OutOfMemoryError",
        "PagedReadRetryError",
        "PermissionDeniedError",
        "RewriteTooLargeError",
        "ScopeErasedError",
        "ScopeErasureIncompleteError",
        "ScopeMismatchError",
        "SeqConflictError",
        "ServerUnavailableError",
        "StorageError",
        "TooManyDraftsError",
        "UsageCurrencyError",
        "WrongTypeError",
    ),
    ".models": ("AgentMessage", "Role", "StoredMessage", "ToolCall", "Usage"),
    ".parts": (
        "AudioPart",
        "ContentPart",
        "FilePart",
        "ImagePart",
        "ReasoningPart",
        "RedactedThinkingPart",
        "RefusalPart",
        "TextPart",
        "ThinkingPart",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    """The public name ``name`` (imported from its module on first use and kept), or a
    public submodule (``redis_msglog.adapters``), as the eager imports used to give."""
    module = _MODULE_OF.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value  # later lookups are plain attribute reads
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "DEFAULT_READ_CACHE_BYTES",
    "DEFAULT_RETRY",
    "MAX_JSON_DEPTH",
    "NO_RETRY",
    "AgentMessage",
    "AppendInDoubtError",
    "AsyncDirectory",
    "AsyncMessageLog",
    "AsyncSubscription",
    "Attributes",
    "AudioPart",
    "AuthenticationError",
    "BatchTooLargeError",
    "CodecError",
    "ContentPart",
    "ConversationErasedError",
    "ConversationKeys",
    "ConversationPage",
    "CorruptEntryError",
    "CorruptLogError",
    "Directory",
    "Draft",
    "DraftDelta",
    "DraftEnded",
    "DraftEndedError",
    "DraftEvent",
    "DraftOutcome",
    "DraftStarted",
    "DraftTooLargeError",
    "Durability",
    "DurabilityUnsupportedError",
    "EditEntry",
    "Entry",
    "EvictionWarning",
    "FilePart",
    "IdempotencyConflictError",
    "ImagePart",
    "InvalidArgumentError",
    "InvalidEditError",
    "InvalidMessageError",
    "LogRewoundError",
    "LogView",
    "MessageLog",
    "MessageLogError",
    "MessageTooLargeError",
    "MessageView",
    "MissingExtraError",
    "NotDurableError",
    "OutOfMemoryError",
    "PagedReadRetryError",
    "PermissionDeniedError",
    "ReasoningPart",
    "RedactedThinkingPart",
    "RefusalPart",
    "RetryPolicy",
    "RewriteTooLargeError",
    "Role",
    "ScopeErasedError",
    "ScopeErasure",
    "ScopeErasureIncompleteError",
    "ScopeMismatchError",
    "ScopedConversation",
    "SeqConflictError",
    "ServerUnavailableError",
    "SkippedEntry",
    "StorageError",
    "StoredMessage",
    "Subscription",
    "TextPart",
    "ThinkingPart",
    "TooManyDraftsError",
    "ToolCall",
    "Usage",
    "UsageCurrencyError",
    "View",
    "WrongTypeError",
    "acl_rules",
    "acl_rules_for",
    "anthropic_system",
    "configure_read_cache",
    "from_anthropic",
    "from_langchain",
    "from_openai",
    "from_responses",
    "to_anthropic",
    "to_langchain",
    "to_langchain_messages",
    "to_openai",
    "to_responses",
]
__version__ = "0.1.0"
