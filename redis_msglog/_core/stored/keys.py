"""Key and channel names of a conversation.

Layout, for a prefix ``msglog`` and conversation id ``conv-42``::

    msglog:{conv-42}:seq      string: the last assigned seq (the high-water mark)
    msglog:{conv-42}:stream   stream: one entry per message, entry ID "<seq>-<at>" (at:
                              the commit time, µs since the epoch), field "msg" (an
                              edit: "edit"); earlier versions wrote ID "<seq>-0" and
                              the time in an "at" field, still read
    msglog:{conv-42}:events   pub/sub channel: one event per committed append
    msglog:{conv-42}:blobs    hash: large binaries stored off the rows, field = the
                              SHA-256 (hex) of the bytes, value = the bytes
    msglog:{conv-42}:producers  hash: exactly-once state of the appends made without a
                              key, field = a producer id (one per process), value =
                              "<expires_ms> <count> <dropped>,0 <pseq>,<last_seq> ..." (the
                              results its calls in flight may ask for; see lua/producer_lib.lua)
    msglog:{conv-42}:owner    hash: the scope the conversation belongs to, written once
                              before its first write by a log given a scope: field
                              "scope" (the parts joined by "/"), "created" (the server's
                              TIME in µs, as text); see _core/lifecycle/scope.py for the indexes
    msglog:{conv-42}:idem:K   string, expiring: the result of the append made with
                              idempotency key K ("<last_seq> <at> <count> <fingerprint> <call>")
    msglog:{conv-42}:records  sorted set: the key of each idempotency record, scored with
                              its expiry (ms since the epoch), so that an erasure finds
                              them without SCAN (the append writing a record adds it)
    msglog:{conv-42}:usage    hash: the usage totals of the messages appended (fields
                              input, output, cached, reasoning, cost in billionths of
                              a unit, currency); see _core/stored/usage.py
    msglog:{conv-42}:drafts   hash: the drafts being written and those ended in the last
                              minute, field = a draft id, value = its state (JSON; see
                              lua/draft_lib.lua and docs/drafts.md)
    msglog:{conv-42}:draftfeed  stream: an entry when a draft starts and one when it ends
    msglog:{conv-42}:draft:D  stream: draft D's deltas, entry IDs "0-1", "0-2", ...,
                              field "d" (JSON), expiring (a minute after it ends)
    msglog:{conv-42}:values   hash: values kept in place, with no history (Google ADK's
                              user: and app: state), field = a name, value = its text;
                              see _core/lifecycle/values.py

The braces are a Redis Cluster hash tag: every key and the channel of one conversation
hash to the same slot. Ids containing ``{``, ``}`` or ``%`` are percent-escaped
(``%7B``, ``%7D``, ``%25``) so the tag is always the whole id and two different ids never
share keys. The idempotency key K follows the hash tag, so it needs no escaping. An
append names only keys that exist once the conversation does (the counter, the stream,
the producers hash; the blobs hash only when it uses it; a record only for a caller's
key), so a Redis Cluster serves it in the middle of a slot move.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import InvalidArgumentError
from ..args import check_text

_ESCAPES = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})
_UNESCAPES = {"%25": "%", "%7B": "{", "%7D": "}"}
_GLOB_SPECIAL = str.maketrans({c: "\\" + c for c in "*?[]\\"})


def escape_id(conversation: str) -> str:
    """The conversation id as it appears inside the hash tag."""
    return conversation.translate(_ESCAPES)


def unescape_id(escaped: str) -> str:
    """The inverse of :func:`escape_id`."""
    return re.sub("%(25|7B|7D)", lambda m: _UNESCAPES[m.group(0)], escaped)


def key_pattern(prefix: str, match: str = "*") -> str:
    """A ``SCAN MATCH`` pattern for the seq counters and streams of the conversations
    under ``prefix`` whose (escaped) id matches the glob ``match``, and not their
    idempotency records (it can also match other keys: check with
    :func:`conversation_of`)."""
    return f"{prefix.translate(_GLOB_SPECIAL)}:{{{match}}}:s[et][qr]*"


def conversation_of(prefix: str, key: str, suffix: str = ":seq") -> str | None:
    """The conversation id whose key ending in ``suffix`` (``":seq"`` or ``":stream"``)
    is ``key``, or ``None`` if it is not one (an idempotency record whose key ends in
    ``:seq``, say, or a key this library never writes)."""
    head = f"{prefix}:{{"
    tail = "}" + suffix
    if not (key.startswith(head) and key.endswith(tail)):
        return None
    escaped = key[len(head) : -len(tail)]
    if not escaped or "{" in escaped or "}" in escaped:
        return None
    conversation = unescape_id(escaped)
    # A key this library never writes ("a%ZZ", a stray "%"): its id would name other keys.
    return conversation if escape_id(conversation) == escaped else None


@dataclass(frozen=True, slots=True)
class ConversationKeys:
    """The names of one conversation's keys and channel."""

    seq: str
    stream: str
    channel: str
    blobs: str
    view: str  # the view's segments, archive watermark and version (after an edit)
    hidden: str  # seq ranges no view shows: retracted messages and edit entries
    producers: str  # exactly-once records of the appends made without a key
    owner: str  # the scope the conversation belongs to (hash: scope, created)
    records: str  # the idempotency records' keys (sorted set, score: expiry in ms)
    values: str  # values kept in place, with no history (hash: name, value)
    usage: str  # the usage totals (hash: input, output, cached, reasoning, cost, currency)
    drafts: str  # the drafts being written (hash: draft id, its state as JSON)
    draft_feed: str  # a stream: an entry when a draft starts, one when it ends

    @classmethod
    def build(cls, prefix: str, conversation: str) -> ConversationKeys:
        """Names for ``conversation`` under ``prefix``; validates both."""
        check_text("conversation id", conversation)
        check_text("prefix", prefix)
        if "{" in prefix or "}" in prefix:
            raise InvalidArgumentError(
                f"prefix must not contain '{{' or '}}' (hash tag): {prefix!r}"
            )
        base = f"{prefix}:{{{escape_id(conversation)}}}"
        return cls(
            seq=f"{base}:seq",
            stream=f"{base}:stream",
            channel=f"{base}:events",
            blobs=f"{base}:blobs",
            view=f"{base}:view",
            hidden=f"{base}:hidden",
            producers=f"{base}:producers",
            owner=f"{base}:owner",
            records=f"{base}:records",
            values=f"{base}:values",
            usage=f"{base}:usage",
            drafts=f"{base}:drafts",
            draft_feed=f"{base}:draftfeed",
        )

    def draft(self, draft_id: str) -> str:
        """The stream of the deltas of draft ``draft_id`` (an id of 32 hex digits)."""
        return f"{self.seq.removesuffix(':seq')}:draft:{draft_id}"

    def idempotency_record(self, idempotency_key: str) -> str:
        """The key remembering the append made with ``idempotency_key``."""
        return f"{self.seq.removesuffix(':seq')}:idem:{idempotency_key}"
