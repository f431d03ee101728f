"""redis-msglog: a durable, append-only conversation log for LLM agent workers, in Redis.

Quick start::

    import redis
    from redis_msglog import MessageLog

    log = MessageLog(redis.Redis(), "conv-42")
    seq = log.add("user", "hello")
    history = log.all()
"""

from ._acl import acl_rules
from ._async import AsyncMessageLog
from ._cache import DEFAULT_READ_CACHE_BYTES, configure_read_cache
from ._depth import MAX_JSON_DEPTH
from ._durability import Durability
from ._keys import ConversationKeys
from ._retry import DEFAULT_RETRY, NO_RETRY, RetryPolicy
from ._subscription import AsyncSubscription, Subscription
from ._sync import MessageLog
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
from .edits import Attributes, EditEntry, Entry, LogView, MessageView, View
from .errors import (
    AppendInDoubtError,
    AuthenticationError,
    CodecError,
    CorruptEntryError,
    CorruptLogError,
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
    SeqConflictError,
    ServerUnavailableError,
    StorageError,
    WrongTypeError,
)
from .models import AgentMessage, Role, StoredMessage, ToolCall
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

__all__ = [
    "DEFAULT_READ_CACHE_BYTES",
    "DEFAULT_RETRY",
    "MAX_JSON_DEPTH",
    "NO_RETRY",
    "AgentMessage",
    "AppendInDoubtError",
    "AsyncMessageLog",
    "AsyncSubscription",
    "Attributes",
    "AudioPart",
    "AuthenticationError",
    "CodecError",
    "ContentPart",
    "ConversationKeys",
    "CorruptEntryError",
    "CorruptLogError",
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
    "Role",
    "SeqConflictError",
    "ServerUnavailableError",
    "StorageError",
    "StoredMessage",
    "Subscription",
    "TextPart",
    "ThinkingPart",
    "ToolCall",
    "View",
    "WrongTypeError",
    "acl_rules",
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
