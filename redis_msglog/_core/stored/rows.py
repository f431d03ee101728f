"""Rows of a page of stored entries: the read hot path.

A page's bodies are decoded with ``orjson`` and validated once. Most stored messages are
a role and a text and nothing else; for those, validation is two exact checks (``role``
one of the four roles, ``content`` a ``str``, no other key: what the model's validator
checks for such a document, in strict mode) and the row is built straight from the
checked values, without a second pass through the model's constructor (``__dict__``
and fields set as pydantic-core would make them: the same attributes, equality, hash,
``model_dump``, immutability). Any other document (parts, tool calls, ids, metadata,
a redacted row's marker, anything malformed) goes through pydantic-core, the page in
one call; any failure there is left to :func:`.codec.decode_entry`, row by row, which
raises the error naming the first bad row's seq.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from datetime import datetime
from typing import Any, get_args

import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from ...models import Role, StoredMessage
from .codec import (
    _binary_from_base64,
    _check_depth,
    _many_brackets,
    decode_entry,
    micros_to_datetime,
)

_ROLES = frozenset(get_args(Role))
_new = object.__new__
# The model's slots, set as pydantic-core sets them (their descriptors: no lookup by name).
_set_fields = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
# A row's fields in the model's order, with their defaults: immutable (None or False), so
# one dict serves every row; a field with another default must not take this path.
_DEFAULTS = {
    name: None if field.is_required() else field.default
    for name, field in StoredMessage.model_fields.items()
}
if any(value is not None and value is not False for value in _DEFAULTS.values()):
    raise RuntimeError("a StoredMessage default is neither None nor False: see rows.py")
_validate_page = TypeAdapter(list[StoredMessage]).validator.validate_python
_GC_PAUSE_ROWS = 100


def decode_page(
    seqs: list[int], ats: Sequence[bytes | str], bodies: Sequence[bytes | str]
) -> list[StoredMessage]:
    """``[decode_entry(s, a, b) for s, a, b in zip(seqs, ats, bodies)]``: the same rows
    and the same error, validated once (see the module).

    The cyclic garbage collector is paused while a large page is built (no I/O, no
    await, no user code runs meanwhile): each row is three container objects (the model,
    its ``__dict__`` and its fields set), none in a cycle, and letting the collector scan
    them, and everything read before them, every few hundred rows was ~40% of the time
    of ``all()`` over 100,000 rows (measured: 490 ms paused per row vs 365 ms per page)."""
    pause = len(bodies) >= _GC_PAUSE_ROWS and gc.isenabled()
    if pause:
        gc.disable()
    try:
        try:
            return _decode_page(seqs, ats, bodies)
        except (ValidationError, ValueError, TypeError, OverflowError, AttributeError):
            pass
        return [decode_entry(s, a, b) for s, a, b in zip(seqs, ats, bodies, strict=True)]
    finally:
        if pause:
            gc.enable()


def _decode_page(
    seqs: list[int], ats: Sequence[bytes | str], bodies: Sequence[bytes | str]
) -> list[StoredMessage]:
    docs = list(map(orjson.loads, bodies))
    times: dict[bytes | str, datetime] = {}  # the rows of one append share their time
    rows: list[Any] = []
    others: list[int] = []  # rows that are not a role and a text: validated by pydantic
    append = rows.append
    for doc, seq, at in zip(docs, seqs, ats, strict=True):
        when = times.get(at)
        if when is None:
            when = times[at] = micros_to_datetime(int(at))
        if len(doc) == 2:  # TypeError unless a dict, list or str: left to the row path
            role = doc.get("role")  # AttributeError unless a dict
            content = doc.get("content")
            if type(content) is str and type(role) is str and role in _ROLES:
                row = _new(StoredMessage)
                fields = row.__dict__  # the instance's own, empty: filled in field order
                fields.update(_DEFAULTS)
                # One store each: a tuple assignment of four builds and unpacks a tuple.
                fields["role"] = role
                fields["content"] = content
                fields["seq"] = seq
                fields["at"] = when
                _set_fields(row, {"role", "content", "seq", "at"})  # as pydantic-core sets
                _set_extra(row, None)
                _set_private(row, None)
                append(row)
                continue
        doc["seq"] = seq  # TypeError unless a dict
        doc["at"] = when
        others.append(len(rows))
        append(doc)
    if others:
        _validate_others(rows, others, bodies)
    return rows


def _validate_others(rows: list[Any], others: list[int], bodies: Sequence[bytes | str]) -> None:
    """Validate, in one pydantic-core call, the documents of ``rows`` at ``others``, and
    put the rows in their places (a ``ValidationError``, ``ValueError``...: the caller
    decodes the page row by row for the error)."""
    docs = [rows[index] for index in others]
    for doc in docs:
        content = doc.get("content")
        if type(content) is list:
            _binary_from_base64(content)
    validated = _validate_page(docs)
    for index, row in zip(others, validated, strict=True):
        rows[index] = row
        if _many_brackets(bodies[index]):
            _check_depth(row)
