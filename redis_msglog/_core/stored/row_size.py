"""What a decoded row really costs in memory, from the stored bytes it came from.

The read cache (:mod:`..read.cache`) holds decoded rows within a byte budget, so it accounts
every row by its real size: tool-call ``arguments`` and the values they parse to,
``metadata``, ``extras``, names and ids as much as the text, in bytes, not characters.
The model, from ``tracemalloc`` measurements on CPython 3.11 (rows of every shape;
``tests/contract/test_read_cache.py`` checks that it stays above what the rows really take):

* A row of a role and a text (most rows) is ``_PLAIN`` (the model, its ``__dict__``
  and fields set, seq, commit time, role: 625 bytes measured) plus the text's
  ``sys.getsizeof``, which is exact (1, 2 or 4 bytes a character).
* Any other row: ``_ROW``, ``_PART`` a content part and ``_CALL`` a tool call (each a
  pydantic model too), plus ``getsizeof`` of every text it holds (content, the parts'
  fields, names, ids, ``arguments``), plus an estimate of the Python objects the rest
  of the stored JSON (its keys, and ``args``, ``metadata``, ``extras``) and each
  ``arguments`` text parse to: a byte a byte when the JSON is ASCII without ``\\u``
  escapes, else 4 (one astral character makes a whole ``str`` 4 bytes a character, from
  about 1 byte of UTF-8), plus ``_PER_OBJECT`` for each ``{`` (a dict holding one key:
  184 bytes, plus its key, from 6 bytes of JSON such as ``{"ab":``) and ``_PER_ITEM``
  for each ``[`` and ``,`` (a list, or one more element: its slot, an int, a float, a
  short string).

A ``{``, ``[`` or ``,`` inside a string of the rest counts as structure: the estimate
errs on the large side. Measured, estimate over real: rows of a role and a text 1.1-1.5,
tool calls with large arguments 1.5, many content parts 2, long non-ASCII names and ids
3, large metadata or arrays of numbers and empty containers up to 5.5.
"""

from __future__ import annotations

from sys import getsizeof

from ...models import StoredMessage

_PER_OBJECT = 256
_PER_ITEM = 128
_ROW = 704  # the StoredMessage, its __dict__ (11 fields: 464 B) and fields set, seq, time
_PART = 640  # a content part model, its __dict__ and fields set
_CALL = 640  # a ToolCall model, its __dict__ and fields set
_SLOT = 8  # the row's place in the cache's tuple
_PLAIN = 896  # a row of a role and a text, less its text (measured: 817), and its slot


def row_bytes(row: StoredMessage, body: bytes | str) -> int:
    """An upper estimate of the memory ``row`` holds, decoded from the stored ``body``."""
    content = row.__dict__["content"]
    if type(content) is str and len(row.__pydantic_fields_set__) == 4:  # role, content, seq, at
        return _PLAIN + getsizeof(content)  # most rows: a role and a text, nothing else
    return _row_bytes(row, body)


def _row_bytes(row: StoredMessage, body: bytes | str) -> int:
    fields = row.__dict__
    texts = [v for v in (fields["name"], fields["tool_call_id"], fields["id"]) if v is not None]
    size = _ROW + _SLOT
    content = fields["content"]
    if type(content) is str:
        texts.append(content)
    else:
        size += _PART * len(content)
        texts.extend(v for p in content for v in p.__dict__.values() if type(v) in (str, bytes))
    for call in fields["tool_calls"] or ():
        size += _CALL + getsizeof(call.id) + getsizeof(call.name)
        if call.arguments is not None:  # the text, and the value it parses to
            size += getsizeof(call.arguments) + _json_bytes(call.arguments)
            texts.append(call.arguments)
    size += sum(map(getsizeof, texts))
    # The rest of the body is structure and parsed JSON values: the body less the texts
    # accounted above (each of their characters took at least a byte of the body).
    objects, items = _structure(body)
    for value in texts:
        if type(value) is str:  # bytes are stored as base64: no brackets or commas
            found = _structure(value)
            objects, items = objects - found[0], items - found[1]
    rest = max(len(body) - sum(map(len, texts)), 0)
    return size + _width(body) * rest + _PER_OBJECT * objects + _PER_ITEM * items


def _json_bytes(text: str) -> int:
    """An upper estimate of the Python objects a JSON text parses to."""
    objects, items = _structure(text)
    return _width(text) * len(text) + _PER_OBJECT * objects + _PER_ITEM * items


def _structure(data: bytes | str) -> tuple[int, int]:
    """The ``{`` and the ``[`` plus ``,`` of a stored body or a text."""
    if type(data) is bytes:
        return data.count(b"{"), data.count(b"[") + data.count(b",")
    text = str(data)
    return text.count("{"), text.count("[") + text.count(",")


def _width(data: bytes | str) -> int:
    """Bytes a character of the strings JSON ``data`` holds may take in memory: 1 when
    it is ASCII without ``\\u`` escapes, else up to 4 (one astral character makes a
    whole ``str`` 4 bytes a character)."""
    if type(data) is bytes:
        return 1 if data.isascii() and b"\\u" not in data else _MAX_WIDTH
    text = str(data)
    return 1 if text.isascii() and "\\u" not in text else _MAX_WIDTH


_MAX_WIDTH = 4
