"""redis-msglog: a durable, append-only conversation log for LLM agent workers, in Redis.

Quick start::

    import redis
    from redis_msglog import MessageLog

    log = MessageLog(redis.Redis(), "conv-42")
    seq = log.add("user", "hello")
    history = log.all()
"""

from ._aio import AsyncMessageLog
from ._durability import Durability
from ._keys import ConversationKeys, acl_rules
from ._retry import DEFAULT_RETRY, NO_RETRY, RetryPolicy
from ._subscription import AsyncSubscription, Subscription
from ._sync import MessageLog
from .adapters import to_anthropic, to_langchain, to_openai
from .errors import (
    AppendInDoubtError,
    CodecError,
    CorruptEntryError,
    CorruptLogError,
    DurabilityUnsupportedError,
    EvictionWarning,
    IdempotencyConflictError,
    InvalidMessageError,
    LogRewoundError,
    MessageLogError,
    MessageTooLargeError,
    NotDurableError,
    OutOfMemoryError,
    ServerUnavailableError,
    StorageError,
    WrongTypeError,
)
from .models import AgentMessage, Role, StoredMessage, ToolCall

__all__ = [
    "DEFAULT_RETRY",
    "NO_RETRY",
    "AgentMessage",
    "AppendInDoubtError",
    "AsyncMessageLog",
    "AsyncSubscription",
    "CodecError",
    "ConversationKeys",
    "CorruptEntryError",
    "CorruptLogError",
    "Durability",
    "DurabilityUnsupportedError",
    "EvictionWarning",
    "IdempotencyConflictError",
    "InvalidMessageError",
    "LogRewoundError",
    "MessageLog",
    "MessageLogError",
    "MessageTooLargeError",
    "NotDurableError",
    "OutOfMemoryError",
    "RetryPolicy",
    "Role",
    "ServerUnavailableError",
    "StorageError",
    "StoredMessage",
    "Subscription",
    "ToolCall",
    "WrongTypeError",
    "acl_rules",
    "to_anthropic",
    "to_langchain",
    "to_openai",
]
__version__ = "0.1.0"
