"""The only place that encodes and decodes messages (orjson).

Stored form: each stream entry has two fields, ``at`` (commit time, microseconds since
the Unix epoch, written by the server) and ``msg``: the message as compact JSON with the
reference API's camelCase keys and no null fields, e.g.
``{"role":"assistant","content":"","toolCalls":[{"id":"c1","name":"f","args":{}}]}``.

A value whose JSON form would not decode back to an equal value of the same type is
rejected with :class:`CodecError` instead of being silently changed (orjson would write
NaN as ``null``, a tuple as a list, a UUID or datetime as a string...).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
from pydantic import ValidationError

from .errors import CodecError, CorruptEntryError
from .models import AgentMessage, StoredMessage

# Subclasses of str/int/dict/list (enums, named tuples...), dataclasses and datetimes go
# to `default`; there is none, so orjson raises for them instead of reshaping them.
_STRICT = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS
_STRICT |= orjson.OPT_PASSTHROUGH_DATETIME

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def to_document(msg: AgentMessage) -> dict[str, Any]:
    """The stored JSON document of a message (camelCase keys, no null fields)."""
    doc: dict[str, Any] = {"role": msg.role, "content": msg.content}
    if msg.name is not None:
        doc["name"] = msg.name
    if msg.tool_calls is not None:
        doc["toolCalls"] = [{"id": c.id, "name": c.name, "args": c.args} for c in msg.tool_calls]
    if msg.tool_call_id is not None:
        doc["toolCallId"] = msg.tool_call_id
    return doc


def encode_message(msg: AgentMessage) -> bytes:
    """Encode one validated message; raise :class:`CodecError` if it has no exact JSON."""
    doc = to_document(msg)
    try:
        data = orjson.dumps(doc, option=_STRICT)
    except orjson.JSONEncodeError as exc:
        raise CodecError(f"message has no exact JSON form: {exc}") from exc
    if msg.tool_calls:
        _check_args_round_trip(doc["toolCalls"], data)
    return data


def _check_args_round_trip(calls: list[dict[str, Any]], data: bytes) -> None:
    # Only tool-call args can hold arbitrary values; everything else is a validated str.
    # Comparing the decoded value catches what orjson reshapes without raising: NaN and
    # infinities (written as null), tuples (lists), UUIDs and enums (strings). orjson
    # keeps int, float and bool apart, so plain equality is exact here.
    decoded = orjson.loads(data)["toolCalls"]
    for index, (sent, back) in enumerate(zip(calls, decoded, strict=True)):
        if sent["args"] != back["args"]:
            raise CodecError(
                f"tool_calls[{index}].args has no exact JSON form (NaN, infinity, tuple, "
                f"or a non-JSON type such as UUID or Enum): {sent['args']!r}"
            )


_validate_stored = StoredMessage.__pydantic_validator__.validate_python


def decode_entry(seq: int, at_micros: bytes | str, body: bytes | str) -> StoredMessage:
    """Build a :class:`StoredMessage` from one stream entry's fields (the read hot path:
    one ``orjson.loads`` and one validation, nothing else per message). An entry that does
    not decode raises :class:`CorruptEntryError` naming its seq."""
    try:
        doc = orjson.loads(body)
        if type(doc) is not dict:
            raise CorruptEntryError(f"stream entry {seq} is not a JSON object", seq=seq)
        doc["seq"] = seq
        doc["at"] = micros_to_datetime(int(at_micros))
        row: StoredMessage = _validate_stored(doc)
        return row
    except CorruptEntryError:
        raise
    except (ValidationError, ValueError, OverflowError) as exc:  # JSONDecodeError included
        raise CorruptEntryError(
            f"stream entry {seq} does not decode to a message: {exc}", seq=seq
        ) from exc


def encode_row(row: StoredMessage) -> bytes:
    """One line of a JSON Lines export: ``seq``, ``at`` (ISO 8601, UTC) and the document."""
    return orjson.dumps({"seq": row.seq, "at": row.at.isoformat(), **to_document(row)})


def decode_row(line: bytes | str) -> dict[str, Any]:
    """The message document of a JSON Lines export line (``seq`` and ``at`` dropped: an
    import gets new ones). Raises :class:`CodecError` if the line is not a JSON object."""
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise CodecError(f"expected a JSON object, got {type(doc).__name__}")
    doc.pop("seq", None)
    doc.pop("at", None)
    return doc


def micros_to_datetime(at_micros: int) -> datetime:
    """Convert the stored commit time to an aware UTC datetime (``OverflowError`` when it
    is beyond the years 1..9999)."""
    return _EPOCH + timedelta(microseconds=at_micros)
