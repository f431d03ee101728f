"""redis-msglog: a durable, append-only conversation log for LLM agent workers, in Redis.

Quick start::

    import redis
    from redis_msglog import MessageLog

    log = MessageLog(redis.Redis(), "conv-42")
    seq = log.add("user", "hello")
    history = log.all()
"""

from .adapters import to_anthropic, to_langchain, to_openai
from .aio import AsyncMessageLog
from .errors import (
    AppendInDoubtError,
    CodecError,
    CorruptLogError,
    InvalidMessageError,
    MessageLogError,
    MessageTooLargeError,
    OutOfMemoryError,
    ServerUnavailableError,
    StorageError,
    WrongTypeError,
)
from .keys import ConversationKeys
from .models import AgentMessage, Role, StoredMessage, ToolCall
from .sync import MessageLog

__all__ = [
    "AgentMessage",
    "AppendInDoubtError",
    "AsyncMessageLog",
    "CodecError",
    "ConversationKeys",
    "CorruptLogError",
    "InvalidMessageError",
    "MessageLog",
    "MessageLogError",
    "MessageTooLargeError",
    "OutOfMemoryError",
    "Role",
    "ServerUnavailableError",
    "StorageError",
    "StoredMessage",
    "ToolCall",
    "WrongTypeError",
    "to_anthropic",
    "to_langchain",
    "to_openai",
]
__version__ = "0.1.0"
