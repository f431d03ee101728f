"""Large binaries off the row: what the log stores once per conversation instead of
inline, and how a read puts it back.

A binary part (image, audio, file) whose bytes are over the log's ``blob_threshold`` is
stored as a field of the conversation's blobs hash, named by the SHA-256 of the bytes, in
the same atomic script as the message; the row keeps ``"blob": "<sha256>"`` in place of
``data``. The same bytes appended twice are stored once. Reads put the bytes back unless
asked for references. I/O-free: the core carries the commands.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Literal

from ...errors import InvalidArgumentError
from ...models import AgentMessage, StoredMessage
from ...parts import BINARY_PARTS, ContentPart, _Media
from ..args import shown

DEFAULT_BLOB_THRESHOLD = 256 * 1024
BlobMode = Literal["hydrate", "refs"]
"""How a read returns offloaded binaries: ``"hydrate"`` (the bytes, in ``data``) or
``"refs"`` (``blob`` holds the SHA-256; ``data`` is ``None``)."""
BLOB_MODES = ("hydrate", "refs")
_content = attrgetter("content")
_TEXT_ONLY = frozenset((str,))


def check_blob_mode(mode: object) -> None:
    if mode not in BLOB_MODES:
        raise InvalidArgumentError(f"blobs must be 'hydrate' or 'refs', got {shown(mode)}")


def offload(msg: AgentMessage, threshold: int | None) -> tuple[AgentMessage, dict[str, bytes]]:
    """``msg`` as stored (binaries over ``threshold`` replaced by references) and the
    bytes to store, by SHA-256 (hex). ``threshold`` ``None``: everything stays inline."""
    if threshold is None or isinstance(msg.content, str):
        return msg, {}
    blobs: dict[str, bytes] = {}
    parts = []
    for part in msg.content:
        data = getattr(part, "data", None)
        if part.type in BINARY_PARTS and isinstance(data, bytes) and len(data) > threshold:
            digest = hashlib.sha256(data).hexdigest()
            blobs[digest] = data
            part = part.model_copy(update={"data": None, "blob": digest})
        parts.append(part)
    if not blobs:
        return msg, {}
    return msg.model_copy(update={"content": parts}), blobs


def references(rows: Sequence[AgentMessage]) -> list[str]:
    """The distinct SHA-256s the rows refer to, in order of first use."""
    # Most pages are all text: told in C loops, without a Python loop per row.
    if set(map(type, map(_content, rows))) <= _TEXT_ONLY:
        return []
    seen: dict[str, None] = {}
    for row in rows:
        if not isinstance(row.content, str):
            for part in row.content:
                digest = getattr(part, "blob", None)
                if digest is not None:
                    seen[digest] = None
    return list(seen)


def blob_references(index: int, parts: Iterable[ContentPart]) -> list[tuple[int, int, str]]:
    """``(index, part, sha256)`` for each part of message ``index`` holding a reference."""
    found = []
    for position, part in enumerate(parts):
        if isinstance(part, _Media) and part.blob is not None:
            found.append((index, position, part.blob))
    return found


def hydrate(rows: list[StoredMessage], blobs: Mapping[str, bytes]) -> list[StoredMessage]:
    """``rows`` with every reference in ``blobs`` replaced by its bytes (the others stay
    references: a read checks that it has them all first)."""
    out = []
    for row in rows:
        if isinstance(row.content, str) or not any(
            getattr(part, "blob", None) for part in row.content
        ):
            out.append(row)
            continue
        parts = [_hydrated(part, blobs) for part in row.content]
        out.append(row.model_copy(update={"content": parts}))
    return out


def _hydrated(part: ContentPart, blobs: Mapping[str, bytes]) -> ContentPart:
    digest = getattr(part, "blob", None)
    if digest is None or digest not in blobs:  # a batch's rows: bytes it did not bring
        return part
    return part.model_copy(update={"data": blobs[digest], "blob": None})
