"""Key and channel names of a conversation.

Layout, for a prefix ``msglog`` and conversation id ``conv-42``::

    msglog:{conv-42}:seq      string: the last assigned seq (the high-water mark)
    msglog:{conv-42}:stream   stream: one entry per message, entry ID "<seq>-0"
    msglog:{conv-42}:events   pub/sub channel: one event per committed append
    msglog:{conv-42}:idem:K   string, expiring: the result of the append made with
                              idempotency key K ("<last_seq> <at> <count> <fingerprint>")

The braces are a Redis Cluster hash tag: every key and the channel of one conversation
hash to the same slot. Ids containing ``{``, ``}`` or ``%`` are percent-escaped
(``%7B``, ``%7D``, ``%25``) so the tag is always the whole id and two different ids never
share keys. The idempotency key K follows the hash tag, so it needs no escaping.
"""

from __future__ import annotations

from dataclasses import dataclass

_ESCAPES = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})


def escape_id(conversation: str) -> str:
    """The conversation id as it appears inside the hash tag."""
    return conversation.translate(_ESCAPES)


@dataclass(frozen=True, slots=True)
class ConversationKeys:
    """The names of one conversation's keys and channel."""

    seq: str
    stream: str
    channel: str

    @classmethod
    def build(cls, prefix: str, conversation: str) -> ConversationKeys:
        """Names for ``conversation`` under ``prefix``; validates both."""
        if not isinstance(conversation, str) or not conversation:
            raise ValueError("conversation id must be a non-empty string")
        if not isinstance(prefix, str) or not prefix:
            raise ValueError("prefix must be a non-empty string")
        if "{" in prefix or "}" in prefix:
            raise ValueError(f"prefix must not contain '{{' or '}}' (hash tag): {prefix!r}")
        base = f"{prefix}:{{{escape_id(conversation)}}}"
        return cls(seq=f"{base}:seq", stream=f"{base}:stream", channel=f"{base}:events")

    def idempotency_record(self, idempotency_key: str) -> str:
        """The key remembering the append made with ``idempotency_key``."""
        return f"{self.seq.removesuffix(':seq')}:idem:{idempotency_key}"
