"""Importing a framework's own Redis history into the log (``msglog import --from``,
:mod:`redis_msglog.integrations.migrate`): the framework-free part.

A framework's Redis store keeps a conversation as one Redis LIST of JSON rows (the
Agents SDK's ``RedisSession``, langchain-community's ``RedisChatMessageHistory``,
LlamaIndex's ``RedisChatStore``). For each key the import

1. reads the whole LIST with one ``LRANGE`` (a consistent snapshot) and decodes every row
   before writing anything: a row that does not decode is a :class:`SourceRowError`
   naming the key and the row's position, and nothing is written for that key;
2. appends the rows not imported yet, in batches, each one ``append_many`` whose
   ``attrs=`` records how many rows of that source are in the log and a digest of them,
   with ``expected_seq`` (a compare-and-set): the messages and the record commit
   together or not at all, so a second run, a run resumed after a crash, or two runs at
   once write every row exactly once, and a later run imports only rows the framework
   appended since;
3. reads the record back and checks it counts every row of the source
   (:class:`ImportCountError` otherwise).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis
import redis.cluster

from .._core.args import check_int, check_text, check_type, shown
from .._sync import MessageLog
from ..errors import InvalidArgumentError, MessageLogError, SeqConflictError
from ..models import AgentMessage

__all__ = [
    "ImportCountError",
    "ImportedKey",
    "SourceChangedError",
    "SourceLayout",
    "SourceRowError",
    "import_keys",
]

SyncClient = redis.Redis | redis.cluster.RedisCluster


class SourceRowError(MessageLogError, ValueError):
    """Nothing was written for this key. A row of the framework's store is not what that
    framework writes (not UTF-8, not JSON, not a message); ``key`` is the source's Redis
    key, ``position`` the row's 0-based position in the conversation's order (``None``:
    the key itself is not a LIST)."""

    def __init__(self, message: str, *, key: str, position: int | None) -> None:
        super().__init__(message)
        self.key = key
        self.position = position


class SourceChangedError(MessageLogError):
    """Nothing was written for this key. The log records more rows of this source than
    the source holds now, or rows other than the ones it holds first: the framework's
    history was rewritten or trimmed since the last import."""


class ImportCountError(MessageLogError):
    """It was written. After the import the log's record of the source does not count
    the source's rows (another writer changed the record meanwhile)."""


@dataclass(frozen=True)
class SourceLayout:
    """Where a framework keeps one conversation, and how a row becomes messages."""

    name: str
    """The framework, as ``msglog import --from`` names it."""
    key: Callable[[str], str]
    """The Redis key of the LIST holding the conversation of an id."""
    newest_first: bool
    """``LPUSH`` stores (LangChain's): the LIST is read in reverse."""
    convert: Callable[[str], list[AgentMessage]]
    """A row's text -> its messages; raises (any ``Exception``) on a row it refuses."""


@dataclass(frozen=True, slots=True)
class ImportedKey:
    """What the import did for one id: the source held ``source_rows`` rows, of which
    ``already_there`` were imported before and ``new`` now; ``imported`` is their sum
    (checked against ``source_rows``)."""

    id: str
    source_key: str
    conversation: str
    source_rows: int
    already_there: int
    new: int

    @property
    def imported(self) -> int:
        return self.already_there + self.new


@dataclass(frozen=True, slots=True)
class _Row:
    raw: bytes
    messages: list[AgentMessage]


def import_keys(
    target: SyncClient,
    source: SyncClient,
    layout: SourceLayout,
    ids: Iterable[str],
    *,
    batch_size: int = 500,
    log_options: dict[str, Any] | None = None,
) -> list[ImportedKey]:
    """Import the conversations ``ids`` of ``layout``'s store on ``source`` into the
    log conversations of the same ids on ``target`` (module docstring). Keys are done
    one after the other; an error stops at its key (the keys before it are complete)."""
    check_int("batch_size", batch_size, lowest=1, highest=100_000)
    for name, client in (("redis", target), ("source", source)):
        check_type(name, client, (redis.Redis, redis.cluster.RedisCluster), "a redis-py client")
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise InvalidArgumentError(f"ids must be a list of ids, got {shown(ids)}")
    wanted = list(ids)
    for one in wanted:
        check_text("id", one)
    return [
        _import_one(target, source, layout, one, batch_size, log_options or {}) for one in wanted
    ]


def _read(source: SyncClient, layout: SourceLayout, key: str) -> list[_Row]:
    kind = source.type(key)
    kind = kind.decode() if isinstance(kind, bytes) else str(kind)
    if kind == "none":
        return []
    if kind != "list":
        raise SourceRowError(
            f"{layout.name} key {shown(key)} holds a {kind}, not a LIST", key=key, position=None
        )
    raws = [r if isinstance(r, bytes) else str(r).encode() for r in source.lrange(key, 0, -1)]
    if layout.newest_first:
        raws.reverse()
    rows = []
    for position, raw in enumerate(raws):
        try:
            messages = layout.convert(raw.decode("utf-8"))
        except Exception as exc:  # whatever the framework's parser raises: typed here
            why = "".join(c if c.isprintable() else " " for c in " ".join(str(exc).split()))
            raise SourceRowError(
                f"{layout.name} key {shown(key)}, row {position}: not a message its store "
                f"writes ({type(exc).__name__}: {why[:160]}); nothing was imported for "
                "this key",
                key=key,
                position=position,
            ) from exc
        rows.append(_Row(raw, messages))
    return rows


def _hasher(rows: Sequence[_Row]) -> Any:
    """A SHA-256 of ``rows`` (each length-prefixed), open to more rows."""
    h = hashlib.sha256()
    for row in rows:
        h.update(b"%d:" % len(row.raw))
        h.update(row.raw)
    return h


def _digest(rows: Sequence[_Row]) -> str:
    return str(_hasher(rows).hexdigest())


def _record_name(layout: SourceLayout, key: str) -> str:
    """The attribute recording one source key's import (hashed: keys may be long)."""
    return f"import.{layout.name}.{hashlib.sha256(key.encode()).hexdigest()[:24]}"


def _recorded(log: MessageLog, name: str, key: str, rows: Sequence[_Row]) -> tuple[int, int]:
    """(rows of the source imported so far, the log's last seq), checked against the
    source: its first rows must be the ones imported."""
    seen = log.attrs()
    value = seen.values.get(name)
    if value is None:
        return 0, seen.last_seq
    try:
        record = orjson.loads(value)
        done, digest = int(record["rows"]), str(record["digest"])
    except (ValueError, TypeError, KeyError) as exc:
        raise SourceChangedError(
            f"{log.conversation!r}: the record {name!r} of an earlier import is not one "
            f"this library writes ({exc}); nothing was written"
        ) from None
    if done > len(rows) or _digest(rows[:done]) != digest:
        raise SourceChangedError(
            f"{log.conversation!r} holds {done} rows imported from {shown(key)}, which now "
            f"holds {len(rows)} rows that do not start with them: the source was rewritten "
            "or trimmed since; nothing was written"
        )
    return done, seen.last_seq


def _import_one(
    target: SyncClient,
    source: SyncClient,
    layout: SourceLayout,
    one: str,
    batch_size: int,
    log_options: dict[str, Any],
) -> ImportedKey:
    key = layout.key(one)
    rows = _read(source, layout, key)  # every row decoded before anything is written
    log = MessageLog(target, one, **log_options)
    name = _record_name(layout, key)
    done, last = _recorded(log, name, key, rows)
    new, hasher = 0, _hasher(rows[:done])  # extended batch by batch: linear, not quadratic
    while done < len(rows):
        end = min(done + batch_size, len(rows))
        messages = [m for row in rows[done:end] for m in row.messages]
        extended = hasher.copy()
        for row in rows[done:end]:
            extended.update(b"%d:" % len(row.raw))
            extended.update(row.raw)
        record = orjson.dumps({"rows": end, "digest": extended.hexdigest(), "key": key})
        try:
            last = log.append_many(messages, attrs={name: record.decode()}, expected_seq=last)
        except SeqConflictError:  # another writer, or another import: read the record again
            done, last = _recorded(log, name, key, rows)
            hasher = _hasher(rows[:done])
            continue
        new, done, hasher = new + end - done, end, extended
    final, _ = _recorded(log, name, key, rows)
    if final != len(rows):
        raise ImportCountError(
            f"{one!r}: the source holds {len(rows)} rows, the log records {final} imported"
        )
    return ImportedKey(one, key, log.conversation, len(rows), final - new, new)
