"""The Strands repository's names and rows, without Strands: which conversation, scope
and attribute hold what (ids are hostile input: any string maps to safe names), and a
Strands message as a row of the log (a neutral message every reader understands, the
``SessionMessage`` itself carried in ``extras["strands"]`` so it comes back exactly)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson

from ..errors import CodecError
from ..formats._common import usage_of
from ..models import StoredMessage, json_equal

FORMAT = "strands"
"""The key of the carried ``SessionMessage`` in a row's ``extras``."""

_PLAIN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_MAX_ATTR_ID = 240  # an attribute name is at most 256 characters, with its kind


def _digest(value: str) -> str:
    # surrogatepass: an id with a lone surrogate still has a name (the log refuses it
    # later, typed, with nothing written).
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def session_token(session_id: str) -> str:
    """A scope part for ``session_id``: the id itself when it is short and plain (letters,
    digits, ``_.-``), else ``~`` and 160 bits of its SHA-256 (``~`` is not plain, so the
    two forms never meet; the real id is in the session record)."""
    return session_id if _PLAIN.fullmatch(session_id) else "~" + _digest(session_id)


class Names:
    """Where one session lives, under a namespace ``ns`` (a plain scope part):

    - scope ``(<ns>.<token>,)``: every conversation of the session is registered there,
      so ``Directory.erase`` of it erases the session whole;
    - ``<ns>.<token>:session``: the records conversation, whose attributes hold the
      session, agent and multi-agent records (no messages);
    - ``<ns>.<token>:agent:<agent_id>``: one log per agent, its messages only (the agent
      id verbatim: conversation ids are escaped by the log)."""

    def __init__(self, ns: str, session_id: str) -> None:
        self.top = f"{ns}.{session_token(session_id)}"
        self.scope = (self.top,)
        self.records = f"{self.top}:session"

    def agent(self, agent_id: str) -> str:
        return f"{self.top}:agent:{agent_id}"


def attr_name(kind: str, object_id: str) -> str:
    """The records attribute of an agent (``kind`` ``agent``) or a multi-agent
    (``multi``): the id itself when short enough, else ``~`` and its digest."""
    if len(object_id) <= _MAX_ATTR_ID:
        return f"{kind}:{object_id}"
    return f"{kind}~{_digest(object_id)}"


def dumps(record: dict[str, Any]) -> str:
    """A record as the JSON text of an attribute, exactly: a value JSON cannot hold as it
    is (NaN, a 65-bit int, a tuple, a lone surrogate, a non-str key...) is a
    :class:`~redis_msglog.CodecError` before anything is sent."""
    try:
        data = orjson.dumps(record)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise CodecError(f"a Strands record has no exact JSON form: {exc}") from exc
    if not json_equal(orjson.loads(data), record):
        raise CodecError("a Strands record has no exact JSON form (NaN, infinity, tuple...)")
    return data.decode()


def loads(text: str) -> dict[str, Any]:
    value = orjson.loads(text)
    assert isinstance(value, dict)
    return value


# -- messages ----------------------------------------------------------------------


def neutral(carried: dict[str, Any]) -> dict[str, Any]:
    """The row of a ``SessionMessage.to_dict()``: the neutral message of the message it
    shows (``redact_message`` when set), with the dict carried whole in its extras.

    Text blocks become text; ``toolUse`` blocks tool calls; a message holding exactly one
    ``toolResult`` and nothing else a ``tool`` message. Other blocks (images, documents,
    reasoning, cache points...) are in the carried dict only."""
    shown = carried.get("redact_message") or carried.get("message") or {}
    blocks = shown.get("content") if isinstance(shown, dict) else None
    blocks = blocks if isinstance(blocks, list) else []
    texts = [b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)]
    calls = [_call(b["toolUse"]) for b in blocks if isinstance(b, dict) and "toolUse" in b]
    results = [b["toolResult"] for b in blocks if isinstance(b, dict) and "toolResult" in b]
    role = shown.get("role") if isinstance(shown, dict) else None
    row: dict[str, Any] = {
        "role": "assistant" if role == "assistant" else "user",
        "content": "".join(texts),
        "extras": {FORMAT: carried},
    }
    if role == "assistant" and calls and all(c is not None for c in calls):
        row["tool_calls"] = calls
    one = results[0] if len(results) == 1 and len(blocks) == 1 else None
    if isinstance(one, dict) and isinstance(one.get("toolUseId"), str):
        row.update(role="tool", tool_call_id=one["toolUseId"], content=_result_text(one))
    usage = _usage(carried.get("message"))
    if usage:
        row["usage"] = usage
    return row


def _usage(message: Any) -> dict[str, Any] | None:
    """The usage Strands keeps on an assistant message (``metadata.usage``, the model
    call's), of the message as written (a redaction's shown message carries none).
    Strands has no reasoning count; its ``inputTokens`` are what the model provider
    reports (Bedrock's and Anthropic's leave cache reads out, OpenAI's count them)."""
    metadata = message.get("metadata") if isinstance(message, dict) else None
    found = metadata.get("usage") if isinstance(metadata, dict) else None
    if not isinstance(found, dict):
        return None
    return usage_of(
        found.get("inputTokens"), found.get("outputTokens"), found.get("cacheReadInputTokens")
    )


def _call(use: Any) -> dict[str, Any] | None:
    if not isinstance(use, dict):
        return None
    call_id, name = use.get("toolUseId"), use.get("name")
    if not (isinstance(call_id, str) and isinstance(name, str)):
        return None
    return {"id": call_id, "name": name, "args": use.get("input")}


def _result_text(result: dict[str, Any]) -> str:
    out = []
    for block in result.get("content") or []:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            out.append(block["text"])
        elif isinstance(block, dict) and "json" in block:
            out.append(orjson.dumps(block["json"]).decode())
    return "".join(out)


def carried(row: StoredMessage) -> dict[str, Any] | None:
    """The ``SessionMessage`` dict a row carries (``None``: another writer's row)."""
    value = (row.extras or {}).get(FORMAT)
    return value if isinstance(value, dict) else None


def foreign(row: StoredMessage, message_id: int) -> dict[str, Any]:
    """The ``SessionMessage`` dict of a row another writer appended (``log.add``): its
    text as one text block, user or assistant."""
    role = "assistant" if row.role == "assistant" else "user"
    return {
        "message": {"role": role, "content": [{"text": row.text}]},
        "message_id": message_id,
        "redact_message": None,
        "created_at": row.at.isoformat(),
        "updated_at": row.at.isoformat(),
    }


def position(row: StoredMessage, previous: int | None) -> int:
    """The message index of a row: the one it carries, else the one after ``previous``
    (a row another writer appended; the first row read: its seq - 1)."""
    record = carried(row)
    message_id = None if record is None else record.get("message_id")
    if type(message_id) is int:
        return message_id
    return row.seq - 1 if previous is None else previous + 1
