"""The argument checks the core's operations share (a seq, a count, a view, a callable),
raising :class:`~redis_msglog.InvalidArgumentError` before anything is sent."""

from __future__ import annotations

from ..edits import VIEWS
from ..errors import InvalidArgumentError
from .args import check_int, check_seq, shown


def check_view(view: object, *, physical: bool) -> None:
    """InvalidArgumentError unless ``view`` is one of the views (``"physical"`` where a
    physical read is meant to go through its own method)."""
    allowed = VIEWS if physical else tuple(v for v in VIEWS if v != "physical")
    if view not in allowed:
        raise InvalidArgumentError(
            f"view must be one of {', '.join(map(repr, allowed))}; got {shown(view)}"
        )


def require_non_negative(name: str, value: int) -> None:
    """A count (``n``, ``limit``, ``budget``): an int >= 0, no upper bound."""
    check_int(name, value)


def require_callable(name: str, value: object) -> None:
    if not callable(value):
        raise InvalidArgumentError(f"{name} must be callable, got {type(value).__name__}")


def require_seq(name: str, value: int) -> None:
    """A seq (``after``, ``at_seq``, ``expected_seq``): an int from 0 to ``MAX_SEQ``."""
    check_seq(name, value)
