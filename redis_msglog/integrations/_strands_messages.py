"""The messages of the Strands repository: one log per agent, the message index kept
exact by compare-and-set appends, reads by seq range (no Strands import here).

Message ``m`` of an agent is the ``m + 1``-th message of its log. While the log holds
only messages its seq is ``m + 1``; a redaction (``update_message``) writes one edit
entry, after which later messages sit that many seqs further. So:

- an append checks its index against the log atomically: it is sent with
  ``expected_seq`` = the last seq at which the log held exactly ``m`` messages (known
  from this process's last write, else read: the last seq and the visible count); if
  anyone wrote since, nothing is written and the check runs again;
- a read of the messages from ``offset`` starts at seq ``offset`` (message ``offset``
  is at a seq above it) and skips the rows before ``offset``, which each carry their
  index: the rows skipped are at most the redactions before ``offset``, so the cost is
  the rows asked for plus the redactions, never the history's length.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .._sync import MessageLog
from ..errors import InvalidArgumentError, LogRewoundError, SeqConflictError
from ..models import StoredMessage
from ._strands_rows import neutral, position

TRIES = 5
"""Compare-and-set attempts of one write before it gives up (other writers kept
winning)."""

REASON = "strands update_message"
"""The reason a redaction entry records (never the content)."""

_KNOWN = 1024  # conversations whose last write this process remembers


def check_index(name: str, value: object, *, optional: bool = False) -> None:
    """``value`` an int from 0 (``None`` too if ``optional``), else a typed error."""
    if optional and value is None:
        return
    if type(value) is not int or value < 0:
        raise InvalidArgumentError(f"{name} must be an int from 0, got {value!r}")


class AgentLogs:
    """The message operations on agent logs; ``log(conversation)`` gives the log."""

    def __init__(
        self, log: Callable[[str], MessageLog], conflict: Callable[[str, int], Exception]
    ) -> None:
        self._log = log
        self._conflict = conflict
        self._lock = threading.Lock()
        # conversation -> (last seq, messages held then), from this process's writes
        self._known: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def append(self, conversation: str, carried: dict[str, Any]) -> int:
        """Append the message ``carried["message_id"]``: only as the next index of the
        log, else ``conflict`` and nothing written. Returns its seq."""
        log = self._log(conversation)
        index = carried["message_id"]
        row = neutral(carried)
        for _ in range(TRIES):
            last_seq, held, cached = self._state(conversation, log)
            if held != index:
                if cached:  # what this process wrote last may be stale: ask the server
                    self._forget(conversation)
                    continue
                raise self._conflict(conversation, held)
            try:
                seq = log.append(row, expected_seq=last_seq)
            except SeqConflictError:
                self._forget(conversation)
                continue
            self._remember(conversation, seq, index + 1)
            return seq
        raise self._conflict(conversation, -1)

    def rows(
        self, conversation: str, offset: int, limit: int | None
    ) -> list[tuple[int, StoredMessage]]:
        """The messages from index ``offset``, at most ``limit``, with their indexes."""
        log = self._log(conversation)
        out: list[tuple[int, StoredMessage]] = []
        after, previous = offset, None
        while limit is None or len(out) < limit:
            want = None if limit is None else limit - len(out)
            try:
                page = log.read(after, want)
            except LogRewoundError:
                # A cursor past the last seq: message ``offset`` would be above it, so
                # there is none (the log's own reads treat that as a rewind).
                if after != offset:
                    raise
                break
            for row in page:
                previous = position(row, previous)
                if previous >= offset:
                    out.append((previous, row))
            if want is None or len(page) < want:
                break
            after = page[-1].seq
        return out if limit is None else out[:limit]

    def row(self, conversation: str, message_id: int) -> StoredMessage | None:
        found = self.rows(conversation, message_id, 1)
        return found[0][1] if found and found[0][0] == message_id else None

    def redact(self, conversation: str, seq: int, carried: dict[str, Any]) -> None:
        """Replace the message at ``seq`` with the row of ``carried``: the original is
        removed from Redis (``log.redact``), one ``redact`` edit entry records it."""
        log = self._log(conversation)
        edit_seq = log.redact(seq, neutral(carried), reason=REASON)
        with self._lock:
            known = self._known.pop(conversation, None)
            if known is not None and known[0] == edit_seq - 1:  # nobody else wrote since
                self._known[conversation] = (edit_seq, known[1])

    def forget(self, conversation: str) -> None:
        """This process's write no longer tells the log's state (an edit was made)."""
        self._forget(conversation)

    # -- what this process knows of a log -------------------------------------------

    def _state(self, conversation: str, log: MessageLog) -> tuple[int, int, bool]:
        """The log's last seq, the messages it held then, and whether that is this
        process's memory (else it was just read)."""
        with self._lock:
            known = self._known.get(conversation)
        if known is not None:
            return (*known, True)
        # The last seq first: a write after it makes the conditional append fail.
        last_seq = log.count()
        return last_seq, log.count(view="visible"), False

    def _remember(self, conversation: str, seq: int, held: int) -> None:
        with self._lock:
            self._known[conversation] = (seq, held)
            self._known.move_to_end(conversation)
            while len(self._known) > _KNOWN:
                self._known.popitem(last=False)

    def _forget(self, conversation: str) -> None:
        with self._lock:
            self._known.pop(conversation, None)
