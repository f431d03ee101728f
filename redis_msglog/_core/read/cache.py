"""The warm-read cache: ``all()`` of a conversation this client has read before fetches
only what is new, checked against the server in the same round trip.

An agent loop re-reads its whole history every turn; without a cache each turn costs
(and decodes) every message again. With it, a repeat ``all()`` is one round trip of
``XLEN, GET <seq>, XLEN, XRANGE <stream> <last>-0 + COUNT <page>, HGET <view> version``:

- the counter, checked against the stream's length as every read checks it (an entry
  deleted by hand is an error, as without the cache);
- the entry at the cached last seq, which must be, byte for byte, the stored entry the
  cached last row was decoded from (same ID, so same commit time, and same fields): a
  log that was rewound (a failover lost acknowledged appends), deleted, expired or
  recreated fails this and is read again from the start, never served from memory.
  Stored bytes are compared, not decoded rows: comparing rows would walk their JSON
  values recursively, and a deeply nested one written by hand or by an older version
  would raise ``RecursionError``;
- the view's ``version``, which every edit of the conversation changes (the
  ``<prefix>:{id}:view`` hash; absent: no edit ever): a different version drops the
  entry and reads the log again;
- the entries after it: the new rows.

Any other surprise (the counter missing, more new rows than a page) takes the uncached
read. The rows are kept as the server stores them (binaries stored off the rows as
references) and put back per call, so the cache holds no image twice.

Memory: one cache per client object (every log on it shares it), bounded by the
memory its decoded rows take (``DEFAULT_READ_CACHE_BYTES``), least recently read
conversations evicted first. Each row is accounted when it is decoded, from the stored
entry it came from, by :func:`..stored.row_size.row_bytes`: every field counts (tool-call
arguments and what they parse to, metadata, extras, names, ids), in bytes of memory,
not characters. Turn it off, or resize it, with :func:`~redis_msglog.configure_read_cache`.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any, Literal

from ...models import StoredMessage
from ..steps import Plan
from ..stored.entries import EditsPresent, bodies, stored
from ..stored.row_size import row_bytes
from ..write.blobs import BlobMode, check_blob_mode, references
from .plans import Reads

DEFAULT_READ_CACHE_BYTES = 64 * 1024 * 1024
"""The default budget per client: 64 MiB of decoded rows (about 50,000 chat-sized
messages of 300 characters, at about 1.3 KB each in memory)."""

_ENTRY_OVERHEAD = 512  # a conversation's _Entry, its key and chunk tuples (measured: ~350)


@dataclass(frozen=True, slots=True)
class _Entry:
    """A conversation's rows, as chunks (one per read that found new rows), so that a
    read adds its new rows without copying the old ones; the caller's list is the one
    copy a read makes."""

    chunks: tuple[tuple[StoredMessage, ...], ...]  # binaries off the rows as references
    version: Any  # the view's version when the rows were read (None: no view)
    size: int  # bytes of memory, estimated from above (see the module)
    refers: bool  # some row refers to a binary stored off the rows
    stored_last: tuple[Any, bytes]  # the last row's stream entry: ID, digest of its fields

    @property
    def last(self) -> StoredMessage:
        return self.chunks[-1][-1]

    def rows(self) -> list[StoredMessage]:
        """A new list of every row (the caller's to change)."""
        rows = list(self.chunks[0])
        for chunk in self.chunks[1:]:
            rows.extend(chunk)
        return rows

    def with_new(self, rows: list[StoredMessage], decoded: _Decoded) -> _Entry:
        chunks = (*self.chunks, tuple(rows))
        if len(chunks) > _MAX_CHUNKS:  # now and then, one copy to keep rows() quick
            chunks = (tuple(chain.from_iterable(chunks)),)  # C speed: no bytecode a row
        refers = self.refers or bool(references(rows))
        size = self.size + decoded.size
        return _Entry(chunks, self.version, size, refers, decoded.stored_last)

    @staticmethod
    def of(rows: list[StoredMessage], decoded: _Decoded, version: Any) -> _Entry:
        """The entry of a conversation's rows, read whole."""
        size = _ENTRY_OVERHEAD + _STORED_LAST + decoded.size
        return _Entry((tuple(rows),), version, size, bool(references(rows)), decoded.stored_last)


_MAX_CHUNKS = 64


class ReadCache:
    """Rows of recently read conversations, within a byte budget (see the module)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()  # the sync client's logs may share it across threads

    def get(self, key: str) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: str, entry: _Entry) -> None:
        with self._lock:
            self._drop(key)
            if entry.size > self.max_bytes:
                return
            self._entries[key] = entry
            self.size += entry.size
            while self.size > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self.size -= evicted.size

    def drop(self, key: str) -> None:
        with self._lock:
            self._drop(key)

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.size -= entry.size


_CACHES: weakref.WeakKeyDictionary[Any, ReadCache | None] = weakref.WeakKeyDictionary()


LOOKUPS = {"hit": 0, "miss": 0}
"""Reads of ``all()`` with a read cache, in this process: answered from it (``hit``: one
round trip for what is new) or not; ``redis_msglog.telemetry`` reports them."""


def set_read_cache(client: Any, max_bytes: int | None) -> None:
    """The core's half of :func:`~redis_msglog.configure_read_cache` (``_io/shell.py``),
    which checks both arguments first: ``client``'s cache made for ``max_bytes``, or
    turned off (``None`` or 0)."""
    _CACHES[client] = ReadCache(max_bytes) if max_bytes else None


def read_cache(client: Any) -> ReadCache | None:
    """The client's cache (made on first use), or ``None`` when turned off."""
    try:
        return _CACHES[client]
    except KeyError:
        cache = _CACHES[client] = ReadCache(DEFAULT_READ_CACHE_BYTES)
        return cache
    except TypeError:  # not weak-referenceable: no cache
        return None


class _Decoded:
    """``decode_entries`` (the decode step of a read), also keeping what the cache needs
    of the stored entries: the memory of the rows, estimated from their stored bodies,
    and the last entry as stored (for the next read's check)."""

    def __init__(self, decode: Callable[[list[Any]], list[StoredMessage]]) -> None:
        self.decode = decode
        self.size = 0
        self.stored_last: tuple[Any, bytes] = (None, b"")

    def __call__(self, entries: list[Any]) -> list[StoredMessage]:
        rows = self.decode(entries)  # one row per entry, or an error
        self.size += sum(map(row_bytes, rows, bodies(list(map(_second, entries)))))
        if entries:
            self.stored_last = stored(entries[-1])
        return rows


_second = itemgetter(1)
_STORED_LAST = 256  # the ID and digest held for the last row (measured: ~200 bytes)


class CachedReads:
    """``all()`` of one log through the client's cache: the read plans' first round
    trip, or one round trip of the check and the new rows (see the module)."""

    def __init__(self, reads: Reads) -> None:
        self._reads = reads
        self._reader = reads.reader

    def all_plan(
        self,
        cache: ReadCache | None,
        blobs: BlobMode = "hydrate",
        view: Literal["visible", "active"] = "visible",
    ) -> Plan[list[StoredMessage]]:
        """``read_plan(0, None, blobs, view)``, served from ``cache`` when it holds this
        conversation and the server confirms it (see the module). Only a log without
        edits is cached, whose visible and active views are both every message."""
        check_blob_mode(blobs)
        reads, reader = self._reads, self._reader
        if cache is None or reader.edited:  # a view with edits is read by the view script
            return (yield from reads.read_plan(0, None, blobs, view))
        key = reader.keys.stream
        entry = cache.get(key)
        new = None if entry is None else (yield from self._new_rows(entry))
        LOOKUPS["hit" if new is not None else "miss"] += 1
        if entry is None or new is None:
            cache.drop(key)
            # The view's version is read in the first round trip, in front of the entries:
            # an edit made during the read then only costs a re-read.
            decoded = _Decoded(reads.decode_entries)
            version: list[Any] = []
            try:
                rows = yield from reads.range_plan(0, None, decoded, probe=True, version=version)
            except EditsPresent:  # the read found edits: nothing cached, the view read as asked
                reader.edited = True
                return (yield from reads.read_plan(0, None, blobs, view))
            if not rows:
                return rows
            entry = _Entry.of(rows, decoded, version[0])
        elif new[0]:
            entry = entry.with_new(*new)
        cache.put(key, entry)
        if entry.refers and blobs == "hydrate":
            return (yield from reader.with_blobs(entry.rows(), blobs))
        return entry.rows()

    def _new_rows(self, entry: _Entry) -> Plan[tuple[list[StoredMessage], _Decoded] | None]:
        """The rows after the cached ones (and their decoding), or ``None`` when the server
        does not confirm the cached ones (or anything is unusual: then the uncached read
        decides)."""
        reader, last = self._reader, entry.last
        page = reader.page_size
        before, raw_high, length, first, entries, version = yield from reader.read(
            *reader.counter_commands(),
            reader.xrange(last.seq, page + 1),  # from the cached last entry (any commit time)
            ("HGET", reader.keys.view, "version"),
        )
        if raw_high is None or version != entry.version or len(entries) > page:
            return None
        high = reader.checked_counter(raw_high, before, length, first)  # an error, as uncached
        if not entries or stored(entries[0]) != entry.stored_last:
            return None  # rewound, recreated or replaced: read it all again
        decoded = _Decoded(self._reads.decode_entries)
        decoded.stored_last = entry.stored_last
        try:
            fresh = decoded(entries[1:])  # a bad entry is an error, as uncached
        except EditsPresent:
            return None  # an edit since: the uncached read goes to the view
        new = reader.contiguous(fresh, last.seq + 1)
        if (new[-1].seq if new else last.seq) < high:
            return None  # the stream ends before its counter: the uncached read says why
        return new, decoded
