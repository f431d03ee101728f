"""What a history provider last saw of each session's log: its newest messages and the
seq they end at, so a save right after a load (the agent's ``before_run`` then
``after_run``) can skip reading the tail again.

Only a hint: a save built on it is an append conditional on that seq, so if anyone wrote
since, the server refuses it (nothing written) and the provider reads the tail. When the
condition holds, the log ends exactly with the remembered messages: the view up to a seq
is fixed, and any later append or edit moves the seq.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from agent_framework import Message

from ..models import StoredMessage

KEPT = 256  # newest messages remembered per session
_SESSIONS = 4096  # sessions remembered per provider


@dataclass(frozen=True)
class Tail:
    """The newest messages of a log (``complete``: all of them) and the seq it ends at."""

    messages: tuple[Message, ...]
    seq: int
    complete: bool

    def covers(self, n: int) -> bool:
        """Whether this holds the log's newest ``n`` messages (or all it has)."""
        return self.complete or len(self.messages) >= n

    def after(self, new: Sequence[Message], seq: int) -> Tail:
        """This tail with ``new`` appended, ending at ``seq``."""
        kept = (*self.messages, *new)
        return Tail(kept[-KEPT:], seq, self.complete and len(kept) <= KEPT)


def read_tail(rows: Sequence[StoredMessage], messages: Sequence[Message], complete: bool) -> Tail:
    """The tail of a read: ``messages`` (those of ``rows``), ending at the last row's seq.
    An empty read is guessed to end at seq 0 (a log with only edits refuses the guess)."""
    seq = rows[-1].seq if rows else 0
    kept = tuple(messages[-KEPT:])
    return Tail(kept, seq, complete and len(messages) <= KEPT)


class Tails:
    """The remembered tail of each session (the newest ``_SESSIONS``)."""

    def __init__(self) -> None:
        self._tails: OrderedDict[str, Tail] = OrderedDict()

    def get(self, conversation: str) -> Tail | None:
        return self._tails.get(conversation)

    def put(self, conversation: str, tail: Tail) -> None:
        self._tails[conversation] = tail
        self._tails.move_to_end(conversation)
        while len(self._tails) > _SESSIONS:
            self._tails.popitem(last=False)

    def drop(self, conversation: str) -> None:
        self._tails.pop(conversation, None)
