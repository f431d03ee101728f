"""The only place that encodes and decodes messages (orjson).

Stored form: each stream entry has two fields, ``at`` (commit time, microseconds since
the Unix epoch, written by the server) and ``msg``: the message as compact JSON with the
reference API's camelCase keys and no null fields, e.g.
``{"role":"assistant","content":"","toolCalls":[{"id":"c1","name":"f","args":{}}]}``.

A value whose JSON form would not decode back to an equal value of the same type is
rejected with :class:`CodecError` instead of being silently changed (orjson would write
NaN as ``null``, a tuple as a list, a UUID or datetime as a string...).

Since content parts (:mod:`.parts`), ``content`` may also be a list of part objects
(``{"type":"image","data":"<base64>","media_type":"image/png"}``), and a message may carry
``id``, ``metadata`` and ``extras``; ``toolCalls`` entries may carry ``arguments`` (then
``args`` is not stored: it is what ``arguments`` parses to) and ``extras``. Each key only
appears when used, so a text-only message is stored exactly as before, and every old row
decodes unchanged. A row whose part ``type`` this version does not know (written by a
newer one) is a :class:`CorruptEntryError` naming its seq, never a silent drop.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
from pydantic import ValidationError

from ...edits import EditEntry
from ...errors import CodecError, CorruptEntryError
from ...models import (
    AgentMessage,
    StoredMessage,
    ToolCall,
    Usage,
    describe_errors,
    json_equal,
)
from ...parts import BINARY_PARTS, ContentPart, decode_base64, encode_base64
from ..write.depth import MAX_JSON_DEPTH, value_too_deep

# Subclasses of str/int/dict/list (enums, named tuples...), dataclasses and datetimes go
# to `default`; there is none, so orjson raises for them instead of reshaping them.
_STRICT = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS
_STRICT |= orjson.OPT_PASSTHROUGH_DATETIME

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def to_document(msg: AgentMessage) -> dict[str, Any]:
    """The stored JSON document of a message (camelCase keys, no null fields)."""
    # The hot path: plain dict lookups, and a str content stored as it is.
    fields = msg.__dict__
    content = fields["content"]
    doc: dict[str, Any] = {
        "role": fields["role"],
        "content": content if type(content) is str else [_part_document(p) for p in content],
    }
    if fields["name"] is not None:
        doc["name"] = fields["name"]
    if fields["tool_calls"] is not None:
        doc["toolCalls"] = [_call_document(c) for c in fields["tool_calls"]]
    if fields["tool_call_id"] is not None:
        doc["toolCallId"] = fields["tool_call_id"]
    if fields["id"] is not None or fields["metadata"] is not None or fields["extras"] is not None:
        for key in ("id", "metadata", "extras"):
            if fields[key] is not None:
                doc[key] = fields[key]
    if fields["usage"] is not None:
        doc["usage"] = usage_document(fields["usage"])
    return doc


def usage_document(usage: Usage) -> dict[str, Any]:
    """A usage as stored: camelCase keys, the counts that are not 0, the cost if any."""
    doc: dict[str, Any] = {
        alias: value
        for alias, value in (
            ("inputTokens", usage.input_tokens),
            ("outputTokens", usage.output_tokens),
            ("cachedTokens", usage.cached_tokens),
            ("reasoningTokens", usage.reasoning_tokens),
        )
        if value
    }
    if usage.cost is not None:
        doc["cost"], doc["currency"] = usage.cost, usage.currency
    return doc


def _call_document(call: ToolCall) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": call.id, "name": call.name}
    if call.arguments is not None:
        doc["arguments"] = call.arguments  # args is derived from it on decode
    else:
        doc["args"] = call.args
    if call.extras is not None:
        doc["extras"] = call.extras
    return doc


def _part_document(part: ContentPart) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key, value in part.__dict__.items():  # declared order: type first in the JSON
        if value is not None:
            doc[key] = encode_base64(value) if type(value) is bytes else value
    extras = doc.pop("extras", None)  # type first, extras last: easier to read
    if extras is not None:
        doc["extras"] = extras
    return {"type": doc.pop("type"), **doc}


def encode_message(msg: AgentMessage) -> bytes:
    """Encode one validated message; raise :class:`CodecError` if it has no exact JSON."""
    doc = to_document(msg)
    try:
        data = orjson.dumps(doc, option=_STRICT)
    except orjson.JSONEncodeError as exc:
        raise CodecError(f"message has no exact JSON form: {exc}") from exc
    if len(doc) == 2 and type(doc["content"]) is str:
        return data  # role and text: nothing orjson could have reshaped
    if doc.get("toolCalls"):
        _check_args_round_trip(doc["toolCalls"], data)
    if type(doc["content"]) is not str or "extras" in doc or "metadata" in doc:
        _check_free_values_round_trip(doc, data)
    return data


def _check_free_values_round_trip(doc: dict[str, Any], data: bytes) -> None:
    # Parts' and calls' extras and the metadata hold arbitrary values: the same check as
    # for args (tuples, NaN, non-JSON types are refused rather than reshaped).
    decoded = orjson.loads(data)
    for key in ("content", "metadata", "extras"):
        if key in doc and not json_equal(doc[key], decoded[key]):
            raise CodecError(
                f"{key} has no exact JSON form (NaN, infinity, tuple, or a non-JSON type "
                f"such as UUID or Enum)"
            )


def _check_args_round_trip(calls: list[dict[str, Any]], data: bytes) -> None:
    # Only tool-call args can hold arbitrary values; everything else is a validated str.
    # Comparing the decoded value catches what orjson reshapes without raising: NaN and
    # infinities (written as null), tuples (lists), UUIDs and enums (strings). orjson
    # keeps int, float and bool apart, so plain equality is exact here.
    decoded = orjson.loads(data)["toolCalls"]
    for index, (sent, back) in enumerate(zip(calls, decoded, strict=True)):
        if "extras" in sent and not json_equal(sent["extras"], back["extras"]):
            raise CodecError(f"tool_calls[{index}].extras has no exact JSON form")
        if "args" in sent and sent["args"] != back["args"]:
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
        if type(doc.get("content")) is list:
            _binary_from_base64(doc["content"])
        doc["seq"] = seq
        doc["at"] = micros_to_datetime(int(at_micros))
        row: StoredMessage = _validate_stored(doc)
        if _many_brackets(body):
            _check_depth(row)
        return row
    except CorruptEntryError:
        raise
    except ValidationError as exc:
        raise CorruptEntryError(
            f"stream entry {seq} does not decode to a message: {describe_errors(exc, doc)}",
            seq=seq,
        ) from exc
    except (ValueError, OverflowError) as exc:  # JSONDecodeError included
        raise CorruptEntryError(
            f"stream entry {seq} does not decode to a message: {exc}", seq=seq
        ) from exc


def _many_brackets(body: bytes | str) -> bool:
    """Whether a stored body has more opening brackets than any value in it may nest
    (two C-speed counts: most rows have a handful, and are not walked)."""
    if type(body) is bytes:
        return body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH
    return str(body).count("[") + str(body).count("{") > MAX_JSON_DEPTH


def _check_depth(row: StoredMessage) -> None:
    """A :class:`CorruptEntryError` if a JSON value of a stored row nests deeper than
    ``MAX_JSON_DEPTH``: no version of the library writes one (older ones wrote up to
    orjson's 254 levels), and every reader, exporter and provider SDK must be able to
    walk and encode what a read returns. A tool call's ``arguments`` text is not one of
    them: a deeper text is read as text (``args`` is the string, see
    :func:`~redis_msglog.models.parse_arguments`)."""
    fields = row.__dict__
    found = [name for name in ("metadata", "extras") if value_too_deep(fields[name])]
    for index, call in enumerate(fields["tool_calls"] or ()):
        if call.arguments is None and value_too_deep(call.args):
            found.append(f"tool_calls.{index}.args")
        if value_too_deep(call.extras):
            found.append(f"tool_calls.{index}.extras")
    if type(fields["content"]) is not str:
        for index, part in enumerate(fields["content"]):
            if value_too_deep(part.extras):
                found.append(f"content.{index}.extras")
    if found:
        raise CorruptEntryError(
            f"stream entry {row.seq}: {', '.join(found)} nests deeper than {MAX_JSON_DEPTH} "
            f"levels of objects and arrays (written by hand or an older version; "
            f"retract it to read the rest of the view)",
            seq=row.seq,
        )


def encode_row(row: StoredMessage | EditEntry) -> bytes:
    """One line of a JSON Lines export: ``seq``, ``at`` (ISO 8601, UTC) and the message
    document, or for an edit entry ``edit``: its JSON (docs/edits.md)."""
    if isinstance(row, EditEntry):
        return orjson.dumps({"seq": row.seq, "at": row.at.isoformat(), "edit": edit_document(row)})
    return orjson.dumps({"seq": row.seq, "at": row.at.isoformat(), **row_document(row)})


def row_document(row: StoredMessage) -> dict[str, Any]:
    """A stored row's JSON document: :func:`to_document`, and ``"redacted": true`` for a
    row that replaces a redacted message (docs/lifecycle.md; absent otherwise), and a
    draft's ``"draft"`` id and ``"interrupted": true`` (docs/drafts.md)."""
    doc = to_document(row)
    if row.redacted:
        doc["redacted"] = True
    if row.draft is not None:
        doc["draft"] = row.draft
    if row.interrupted:
        doc["interrupted"] = True
    return doc


def edit_document(entry: EditEntry) -> dict[str, Any]:
    """An edit entry's stored JSON document."""
    return entry.model_dump(by_alias=True, exclude={"seq", "at"}, exclude_none=True, mode="json")


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
    doc.pop("redacted", None)  # imported as a row; the redact entry after it redoes it
    doc.pop("draft", None)  # markers of how the row was written, not of the message
    doc.pop("interrupted", None)
    if isinstance(doc.get("content"), list):
        try:
            _binary_from_base64(doc["content"])
        except ValueError as exc:
            raise CodecError(str(exc)) from exc
    return doc


def _binary_from_base64(parts: list[Any]) -> None:
    """Turn the base64 ``data`` of binary parts (stored JSON) back into bytes, in place."""
    for index, part in enumerate(parts):
        if type(part) is dict and part.get("type") in BINARY_PARTS:
            data = part.get("data")
            if isinstance(data, str):
                try:
                    part["data"] = decode_base64(data)
                except ValueError as exc:
                    raise ValueError(f"content.{index}.data: {exc}") from None


def micros_to_datetime(at_micros: int) -> datetime:
    """Convert the stored commit time to an aware UTC datetime (``OverflowError`` when it
    is beyond the years 1..9999)."""
    return _EPOCH + timedelta(0, 0, at_micros)  # positional: ~30% faster than by keyword


def decode_edit(seq: int, at_micros: bytes | str, body: bytes | str) -> EditEntry:
    """Build an :class:`EditEntry` from an edit entry's fields (``at``, ``edit``); one
    that does not decode raises :class:`CorruptEntryError` naming its seq."""
    try:
        doc = orjson.loads(body)
        if type(doc) is not dict:
            raise CorruptEntryError(f"stream entry {seq} is not a JSON object", seq=seq)
        return EditEntry.model_validate(
            {**doc, "seq": seq, "at": micros_to_datetime(int(at_micros))}
        )
    except CorruptEntryError:
        raise
    except ValidationError as exc:
        raise CorruptEntryError(
            f"stream entry {seq} does not decode to an edit: {describe_errors(exc, doc)}",
            seq=seq,
        ) from exc
    except (ValueError, OverflowError) as exc:
        raise CorruptEntryError(
            f"stream entry {seq} does not decode to an edit: {exc}", seq=seq
        ) from exc


def encode_edit(doc: dict[str, Any]) -> bytes:
    """The stored JSON of an edit entry the client builds (a fork's, attributes); a
    value with no exact JSON form (a lone surrogate) is a :class:`CodecError`."""
    try:
        return orjson.dumps(doc)
    except TypeError as exc:
        raise CodecError(str(exc)) from exc
