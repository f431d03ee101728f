"""Reading the view of a log that has edits (docs/edits.md), through ``lua/view.lua``.

One script call is a snapshot at one seq. A read longer than a page takes several calls;
each reply carries the view's version (the seq of its last edit), and if an edit lands
between two pages the read starts over, so a view read is always one snapshot. Also the
arguments of the edits, checked before anything is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ... import errors
from ...edits import EditCall, EditEntry, LogView
from ...models import StoredMessage
from ..args import MAX_SEQ, check_text, is_int, shown
from ..steps import Command, Plan, StepFailure
from ..stored.codec import encode_edit
from ..stored.entries import Trimmed

if TYPE_CHECKING:
    from ...edits import Entry, View
    from .roundtrip import Reader

MAX_ATTR_NAME = 256


@dataclass(frozen=True, slots=True)
class Edit:
    """An edit, as the append script takes it: the op, its argument and (fork and attrs
    only) the entry's JSON."""

    op: EditCall
    arg: str = ""
    entry: bytes = b""


@dataclass(frozen=True, slots=True)
class AttrChanges:
    """Checked attribute changes: ``(name, value)`` pairs (``None``: delete) and their
    JSON for the edit entry."""

    pairs: tuple[tuple[str, str | None], ...]
    json: bytes

    @classmethod
    def of(cls, attrs: Mapping[str, str | None]) -> AttrChanges:
        """``attrs`` checked: a non-empty mapping of names (non-empty ``str`` of at most
        256 characters, valid UTF-8) to ``str`` values or ``None``;
        :class:`~redis_msglog.InvalidArgumentError` otherwise."""
        if not isinstance(attrs, Mapping) or not attrs:
            raise errors.InvalidArgumentError(
                f"attrs must be a non-empty mapping, got {shown(attrs)}"
            )
        for name, value in attrs.items():
            check_text("an attribute name", name, max_length=MAX_ATTR_NAME)
            if value is not None and not isinstance(value, str):
                raise errors.InvalidArgumentError(
                    f"attribute {name!r}: a value is a str or None (delete), "
                    f"got {type(value).__name__}"
                )
        pairs = tuple(attrs.items())
        try:
            return cls(pairs, encode_edit(dict(pairs)))
        except errors.CodecError as exc:
            raise errors.CodecError(f"attrs: {exc}") from exc

    def entry(self) -> Edit:
        """The edit entry of a call that changes attributes and nothing else."""
        return Edit("attrs", "", b'{"op":"attrs","attrs":' + self.json + b"}")


MAX_RESTARTS = 8
"""Times a paged view read starts over because an edit landed between its pages."""

VIEW_READ_RUNS = 10_000
"""Runs of rows (of consecutive seqs) one view script call returns: a view read of up to
this many runs is one snapshot (docs/edits.md, "Snapshots")."""

MAX_RETRACT = 256
"""The most seqs one ``retract()`` takes (the append script refuses more too)."""


class ViewReads:
    """The view script's plans, for one log."""

    def __init__(self, reader: Reader) -> None:
        self._reader = reader

    def read_plan(self, view: View, after: int, limit: int | None) -> Plan[list[StoredMessage]]:
        """The rows of ``view`` with seq above ``after``, in view order, at most ``limit``.

        The view script returns the view as runs of seqs (one snapshot), not the rows;
        entries never change, so the rows are read afterwards, a page at a time, and are
        the rows of that snapshot. Only a view of more than :data:`VIEW_READ_RUNS` runs
        takes several script calls, which must all see one version."""
        for _ in range(MAX_RESTARTS):
            runs: list[tuple[int, int]] = []
            wanted = 0
            position, start, version, more = "", 0, None, True
            while more and (limit is None or wanted < limit):
                want = 0 if limit is None else limit - wanted  # 0: no limit
                now, _, flat, more, position, start = yield from self._call(
                    view, "after", want, after, position, start, VIEW_READ_RUNS
                )
                if version is not None and now != version:
                    break  # an edit landed between two calls: start over
                version = now
                pairs = list(zip(map(int, flat[::2]), map(int, flat[1::2]), strict=True))
                runs.extend(pairs)
                wanted += sum(hi - lo + 1 for lo, hi in pairs)
            else:
                try:
                    return (yield from self._rows_of(runs))
                except Trimmed:
                    continue  # a trim removed rows of the snapshot since: read the view again
        raise errors.PagedReadRetryError(
            f"the view of {self._reader.keys.stream} has more than {VIEW_READ_RUNS} runs of "
            f"rows and changed under {MAX_RESTARTS} paged reads in a row (edits faster than "
            "the pages): read it with a limit, or again later"
        )

    def _rows_of(self, runs: list[tuple[int, int]]) -> Plan[list[StoredMessage]]:
        """The rows of ``runs`` (every seq of a run is a message), a page a round trip."""
        page, stream = self._reader.page_size, self._reader.keys.stream
        ranges = [
            (lo, min(hi, lo + page - 1)) for first, hi in runs for lo in range(first, hi + 1, page)
        ]
        rows: list[StoredMessage] = []
        index = 0
        while index < len(ranges):
            batch, size = [ranges[index]], ranges[index][1] - ranges[index][0] + 1
            index += 1
            while index < len(ranges) and size + ranges[index][1] - ranges[index][0] < page:
                batch.append(ranges[index])
                size += ranges[index][1] - ranges[index][0] + 1
                index += 1
            commands = tuple(("XRANGE", stream, str(lo), str(hi)) for lo, hi in batch)
            try:
                *replies, first = yield from self._reader.read_raw(
                    (*commands, self._reader.first_command()), patient=True
                )
            except StepFailure as failure:
                raise self._reader.error_for(failure) from (failure.origin or failure)
            for (lo, hi), entries in zip(batch, replies, strict=True):
                entries = yield from self._reader.filled(entries, lo, hi)  # redacted rows
                found = self._reader.entries.decode_entries(entries)
                if [row.seq for row in found] != list(range(lo, hi + 1)):
                    if self._reader.first_of(first) > lo:
                        raise Trimmed  # trimmed since the snapshot (read after the rows)
                    raise errors.CorruptLogError(
                        f"stream {stream} lacks entries of seqs {lo}..{hi}, rows of its "
                        "view (deleted by hand, or the conversation expired?)"
                    )
                rows.extend(found)
        return rows

    def last_plan(self, view: View, n: int) -> Plan[list[StoredMessage]]:
        """The last ``n`` rows of ``view``, in view order (one call: a snapshot)."""
        _, _, entries, _, _, _ = yield from self._call(view, "last", n)
        return self._reader.entries.decode_entries(entries)

    def count_plan(self, view: View) -> Plan[int]:
        """The number of rows of ``view`` (kept by the edits: a few fields read)."""
        _, _, total, _, _, _ = yield from self._call(view, "count", 0)
        return int(total)

    def _call(self, view: View, mode: str, *args: int | str) -> Plan[list[Any]]:
        keys = self._reader.keys
        # In the order of VIEW_KEY_NAMES and VIEW_ARGV_NAMES, which view.lua binds by name.
        keys_and_args: Command = (
            4, keys.seq, keys.stream, keys.view, keys.hidden, view, mode, *args
        )  # fmt: skip

        def read(command: Command) -> Plan[Any]:
            (reply,) = yield from self._reader.read_raw((command,), patient=True)
            return reply

        try:
            reply = yield from self._reader.runner.run_script("view.lua", keys_and_args, read)
        except StepFailure as failure:
            raise self._reader.error_for(failure) from (failure.origin or failure)
        version, last, body, more, position, start = reply
        return [int(version), int(last), body, bool(more), int(position), int(start)]


def retract_edit(seqs: Iterable[int]) -> Edit:
    """The edit hiding ``seqs``: positive ints, at least one, no repeats."""
    if isinstance(seqs, (str, bytes, Mapping)) or not isinstance(seqs, Iterable):
        raise errors.InvalidArgumentError(
            f"retract: seqs must be an iterable of ints, got {type(seqs).__name__}"
        )
    chosen = list(seqs)
    for seq in chosen:
        if not is_int(seq) or seq < 1:
            raise errors.InvalidEditError(f"retract: {shown(seq)} is not a seq (a positive int)")
        if seq > MAX_SEQ:
            raise errors.InvalidEditError(f"retract: {seq} is beyond any log (seq <= {MAX_SEQ})")
    if not chosen:
        raise errors.InvalidEditError("retract: no seqs given")
    if len(chosen) > MAX_RETRACT:
        raise errors.InvalidEditError(
            f"retract: at most {MAX_RETRACT} seqs in one call, got {len(chosen)}: "
            "retract them in several calls"
        )
    if len(set(chosen)) != len(chosen):
        raise errors.InvalidEditError(f"retract: seqs repeat: {chosen}")
    return Edit("retract", ",".join(map(str, chosen)))


def through_edit(op: str, through_seq: int, *, zero_ok: bool) -> Edit:
    """A compact or archive edit through ``through_seq`` (0 for "none" where allowed)."""
    lowest = 0 if zero_ok else 1
    if not is_int(through_seq) or not lowest <= through_seq <= MAX_SEQ:
        raise errors.InvalidEditError(
            f"{op}: through_seq must be an int >= {lowest} and <= {MAX_SEQ}, "
            f"got {shown(through_seq)}"
        )
    return Edit("compact" if op == "compact" else "archive", str(through_seq))


def trim_edit(through_seq: int) -> Edit:
    """A trim through ``through_seq`` (a seq >= 1)."""
    if not is_int(through_seq) or not 1 <= through_seq <= MAX_SEQ:
        raise errors.InvalidEditError(
            f"trim: through_seq must be an int >= 1 and <= {MAX_SEQ}, got {shown(through_seq)}"
        )
    return Edit("trim", str(through_seq))


MAX_REASON = 1000
"""The most characters of a redaction's ``reason``."""


def redact_edit(seq: int, replacement: bytes, reason: str | None) -> Edit:
    """A redaction of ``seq`` (a seq >= 1): ``replacement`` is the new row's stored JSON
    (``b""``: the script's marker), ``reason`` goes into the edit entry (never content)."""
    if not is_int(seq) or not 1 <= seq <= MAX_SEQ:
        raise errors.InvalidEditError(
            f"redact: seq must be an int >= 1 and <= {MAX_SEQ}, got {shown(seq)}"
        )
    doc: dict[str, Any] = {"op": "redact", "seqs": [seq]}
    if reason is not None:
        doc["reason"] = check_text("redact: reason", reason, max_length=MAX_REASON)
    row = b"" if not replacement else replacement[:-1] + b',"redacted":true}'
    return Edit("redact", f"{seq} {row.decode()}", encode_edit(doc))


def fork_edit(source: str, source_seq: int, count: int, attrs: AttrChanges | None = None) -> Edit:
    """The first entry of a fork: where it came from and how many messages follow."""
    doc: dict[str, Any] = {"op": "fork", "source": source, "sourceSeq": source_seq}
    doc["count"] = count
    if attrs is not None:
        doc["attrs"] = dict(attrs.pairs)
    return Edit("fork", "end", encode_edit(doc))


def check_fork_point(view: LogView, entries: Sequence[Entry], at_seq: int) -> None:
    """Refuse a fork at ``at_seq`` (``view`` folds ``entries``, seqs 1..``at_seq``) that
    falls inside a compaction keeping rows after its messages, where the view (the
    compacted rows gone, part of the summary, the kept rows) never existed. The error
    names the seqs on either side, for the caller to pick."""
    if not view.mid_compaction:
        return
    entry = next(e for e in reversed(entries) if isinstance(e, EditEntry) and e.count)
    end = entry.seq + (entry.count or 0)
    raise errors.InvalidEditError(
        f"fork: at_seq {at_seq} falls inside the compaction written at seqs {entry.seq}..{end} "
        f"(its entry and its {entry.count} messages, which rows of the view follow): the "
        f"view there never existed. Fork at seq {entry.seq - 1} (before it) or {end} (after "
        "it). Nothing was written."
    )


def window_start(
    rows: list[StoredMessage],
    *,
    turns: int | None = None,
    budget: int | None = None,
    counter: Callable[[StoredMessage], int] | None = None,
) -> int | None:
    """Where the window of ``rows`` (a view's tail) starts: at the ``turns``-th user
    message from the end, or after the longest suffix whose counts fit ``budget`` (moved
    past tool results whose call it cuts off). ``None``: the rows do not reach it."""
    if turns is not None:
        if turns == 0:
            return len(rows)
        seen = 0
        for index in range(len(rows) - 1, -1, -1):
            if rows[index].role == "user":
                seen += 1
                if seen == turns:
                    return index
        return None
    assert budget is not None and counter is not None
    total = 0
    for index in range(len(rows) - 1, -1, -1):
        size = counter(rows[index])
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise errors.InvalidArgumentError(
                f"count_tokens must return an int >= 0, got {shown(size)}"
            )
        total += size
        if total > budget:
            start = index + 1
            while start < len(rows) and rows[start].role == "tool":
                start += 1  # a tool result without its call is no use to a model
            return start
    return None
