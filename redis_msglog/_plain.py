"""The plain lane of a batch: messages of the common shape (a role and a text, and at
most a name, a tool call id and an id, all strings) checked and encoded without
building models (issue 28, decision 4: every append is validated; the cost of doing
so is work).

A message is taken here only when the checks below prove the model would accept it
and store exactly these bytes; anything else (another shape, a value of another type,
a text with no exact JSON form, a message over the size limit) makes the whole batch
go the model route (:mod:`._batch`), which decides, and raises the same typed error as
before. tests/contract/test_plain_lane.py checks, with hypothesis, that both routes
store byte-identical rows and refuse the same inputs with the same errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ._codec import encode_message
from .errors import CodecError
from .models import AgentMessage

_ROLES = frozenset(("system", "user", "assistant", "tool"))  # models.Role
# The optional string fields of a plain message: the input's key, the stored key, in
# the stored order (to_document's: name, toolCallId, id).
_OPTIONAL = (("name", "name"), ("toolCallId", "toolCallId"),
             ("tool_call_id", "toolCallId"), ("id", "id"))  # fmt: skip
_PLAIN_KEYS = frozenset(("role", "content", *(given for given, _ in _OPTIONAL)))


def encode_plain(msgs: Sequence[Any], max_bytes: int) -> tuple[bytes, ...] | None:
    """The stored bytes of every message of ``msgs``, or ``None`` if any one of them is
    not plain (the model route then validates and encodes the batch)."""
    encoded = []
    for msg in msgs:
        if type(msg) is dict:
            doc = _plain_document(msg)
            if doc is None:
                return None
            try:
                data = orjson.dumps(doc)
            except orjson.JSONEncodeError:
                return None  # a lone surrogate: the model route names it
        elif isinstance(msg, AgentMessage):
            model_data = _plain_model(msg)
            if model_data is None:
                return None
            data = model_data
        else:
            return None
        if len(data) > max_bytes:
            return None
        encoded.append(data)
    return tuple(encoded)


def _plain_document(msg: dict[Any, Any]) -> dict[str, str] | None:
    """The stored document of a plain message given as a dict (``None``: not plain)."""
    role = msg.get("role")
    content = msg.get("content")
    if type(role) is not str or role not in _ROLES or type(content) is not str:
        return None
    doc = {"role": role, "content": content}
    if len(msg) == 2:  # role and content, both present: the most common message
        return doc
    if not msg.keys() <= _PLAIN_KEYS or ("toolCallId" in msg and "tool_call_id" in msg):
        return None
    for given, stored in _OPTIONAL:
        value = msg.get(given)
        if value is not None:
            if type(value) is not str:
                return None
            doc[stored] = value
    return doc


def _plain_model(msg: AgentMessage) -> bytes | None:
    """A message already validated (models are frozen): its bytes, when it has no value
    that may nest or hold binaries (those need the depth check and the blob threshold)."""
    fields = msg.__dict__
    if (
        type(fields["content"]) is not str
        or fields["tool_calls"] is not None
        or fields["metadata"] is not None
        or fields["extras"] is not None
    ):
        return None
    try:
        return encode_message(msg)
    except CodecError:
        return None  # the model route names the message
