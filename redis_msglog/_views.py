"""Reading the view of a log that has edits (docs/edits.md), through ``lua/view.lua``.

One script call is a snapshot at one seq. A read longer than a page takes several calls;
each reply carries the view's version (the seq of its last edit), and if an edit lands
between two pages the read starts over, so a view read is always one snapshot. Also the
arguments of the edits, checked before anything is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from . import errors
from ._args import MAX_SEQ, check_text, is_int, shown
from ._codec import encode_edit
from ._steps import Command, Plan, StepFailure
from .models import StoredMessage

if TYPE_CHECKING:
    from ._core import LogCore
    from .edits import View

EditOp = Literal["retract", "pop", "compact", "archive", "fork", "attrs"]
MAX_ATTR_NAME = 256


@dataclass(frozen=True, slots=True)
class Edit:
    """An edit, as the append script takes it: the op, its argument and (fork and attrs
    only) the entry's JSON."""

    op: EditOp
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


class ViewReads:
    """The view script's plans, for one log."""

    def __init__(self, core: LogCore) -> None:
        self._core = core

    def read_plan(self, view: View, after: int, limit: int | None) -> Plan[list[StoredMessage]]:
        """The rows of ``view`` with seq above ``after``, in view order, at most ``limit``."""
        page = self._core.page_size
        for _ in range(MAX_RESTARTS):
            rows: list[StoredMessage] = []
            segment, start, version = 1, 0, None
            while segment and (limit is None or len(rows) < limit):
                want = page if limit is None else min(page, limit - len(rows))
                now, _, entries, segment, start = yield from self._call(
                    view, "after", want, after, segment, start
                )
                if version is not None and now != version:
                    break  # an edit landed between two pages: start over
                version = now
                rows.extend(self._core.decode_entries(entries))
            else:
                return rows
        raise errors.StorageError(
            f"the view of {self._core.keys.stream} changed under {MAX_RESTARTS} reads in a "
            "row (edits faster than a paged read): read with a limit, or retry"
        )

    def last_plan(self, view: View, n: int) -> Plan[list[StoredMessage]]:
        """The last ``n`` rows of ``view``, in view order (one call: a snapshot)."""
        _, _, entries, _, _ = yield from self._call(view, "last", n, 0, 0, 0)
        return self._core.decode_entries(entries)

    def count_plan(self, view: View) -> Plan[int]:
        """The number of rows of ``view``."""
        _, _, total, _, _ = yield from self._call(view, "count", 0, 0, 0, 0)
        return int(total)

    def _call(self, view: View, mode: str, *args: int) -> Plan[list[Any]]:
        keys = self._core.keys
        keys_and_args: Command = (
            4, keys.seq, keys.stream, keys.view, keys.hidden, view, mode, *args
        )  # fmt: skip

        def read(command: Command) -> Plan[Any]:
            (reply,) = yield from self._core.read_raw((command,), patient=True)
            return reply

        try:
            reply = yield from self._core.run_script("view.lua", keys_and_args, read)
        except StepFailure as failure:
            raise self._core.error_for(failure) from (failure.origin or failure)
        version, last, body, segment, start = reply
        return [int(version), int(last), body, int(segment), int(start)]


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


def fork_edit(source: str, source_seq: int, count: int, attrs: AttrChanges | None = None) -> Edit:
    """The first entry of a fork: where it came from and how many messages follow."""
    doc: dict[str, Any] = {"op": "fork", "source": source, "sourceSeq": source_seq}
    doc["count"] = count
    if attrs is not None:
        doc["attrs"] = dict(attrs.pairs)
    return Edit("fork", "end", encode_edit(doc))


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
