"""What the I/O-free core and the shells say to each other.

Every operation of the core is a *plan*: a generator that yields the steps it needs
(:class:`Read`, :class:`Write`, :class:`Pause`), receives each step's reply, and returns
its result. When a step fails, the shell throws one of the outcomes below into the plan:
never a client library's exception. The core decides what each outcome means (retry,
which error to raise); the shells only carry steps to the server and translate their
client library's failures (``_io/failures.py``: ``step_failure``).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
Command = tuple[str | bytes | int, ...]


@dataclass(frozen=True, slots=True)
class Read:
    """Commands to run in one round trip (pipelined when there are several). Reads are
    idempotent. The reply is the list of their raw replies, not reshaped by the client
    library (the core parses stream entries itself, which is most of a read's cost).
    ``route``: a key of the slot the commands' keys share when it is not the log's own
    (a scope's index, or an idempotent script on it): the shell sends them to its node."""

    commands: tuple[Command, ...]
    route: str | None = None


# Not frozen (one per append: a frozen dataclass's __init__ costs ~0.15 µs a field);
# never changed after construction.
@dataclass(slots=True)
class Write:
    """One command to send exactly once (a blind re-send of an append writes it twice;
    re-sends are the core's decision). The reply is the raw server reply.

    ``then`` is sent right behind it, in the same write on the same connection (``WAIT``
    and ``WAITAOF`` count that connection's writes); the reply is then the pair of
    replies, the second possibly a :class:`Refused`.

    ``split``: the command's first ``split`` arguments are the same call after call (an
    append's first try): the shell packs those from a cache (``_io/routing.py``,
    ``pack_split``); 0: none, the whole command is packed as it is sent."""

    command: Command
    then: Command | None = None
    split: int = 0


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait this many seconds (between retries). The reply is ``None``."""

    seconds: float


Step = Read | Write | Pause
Plan = Generator[Step, Any, T]


class StepFailure(Exception):
    """Why a step failed, as the shell saw it. ``origin`` is the client library's
    exception, kept so that the error the core raises can name it as its cause."""

    def __init__(self, text: str, origin: BaseException | None = None) -> None:
        super().__init__(text)
        self.text = text
        self.origin = origin


class NotSent(StepFailure):
    """The command did not run: no connection could carry it, a read's connection failed
    (reads are idempotent), or a Redis Cluster refused it without running it
    (``CLUSTERDOWN`` during a failover, ``TRYAGAIN`` during a slot migration, redirections
    that never settled). Sending it again is safe."""


class ReplyLost(StepFailure):
    """The connection failed after a :class:`Write` was sent: the server may have run it."""


class Refused(StepFailure):
    """The server answered with an error reply. ``code`` is its first word (``NOSCRIPT``,
    ``WRONGTYPE``, ``OOM``, ``NOPERM``, ``MSGLOG_BADSEQ``, ...), or ``ERR``."""

    @property
    def code(self) -> str:
        return self.text.split(" ", 1)[0] if self.text else "ERR"
