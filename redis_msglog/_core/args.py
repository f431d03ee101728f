"""Checks of public calls' arguments: one place, one error type
(:class:`~redis_msglog.errors.InvalidArgumentError`), each raised before anything is sent.

Messages format values with ``repr`` cut short (an argument may be huge), integers
exactly (never ``1e+20``), and durations and times in words (never a repr such as
``datetime.timedelta(0)``).
"""

from __future__ import annotations

import reprlib
from datetime import date, datetime, timedelta
from typing import Any

from ..errors import InvalidArgumentError, MissingExtraError

MAX_SEQ = 10**15 - 1
"""The largest seq a log can reach: the seq counter holds at most 15 digits (exact in Lua's
doubles). A seq argument above it names no entry of any log."""


class _Repr(reprlib.Repr):
    """``repr`` cut short, with durations and times in words (in a list too)."""

    def repr_timedelta(self, value: timedelta, level: int) -> str:
        return duration(value)

    def repr_datetime(self, value: datetime, level: int) -> str:
        return value.isoformat(sep=" ") + (" (no time zone)" if value.tzinfo is None else "")

    def repr_date(self, value: date, level: int) -> str:
        return value.isoformat()

    def repr_instance(self, value: object, level: int) -> str:
        if type(value).__repr__ is object.__repr__:  # "<module.Kind object at 0x...>"
            return f"an object of type {type(value).__qualname__}"
        return super().repr_instance(value, level)


_REPR = _Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 60, 60


def shown(value: object, limit: int = 80) -> str:
    """``value`` for an error message: an int exactly (never ``1e+20``; one too long to
    print, by its size), a duration in seconds, a time in ISO 8601, an object without a
    repr of its own by its type, anything else by ``repr`` cut short, nesting included
    (a deeply nested argument must not raise ``RecursionError`` here)."""
    if isinstance(value, int) and not isinstance(value, bool):
        bits = value.bit_length()
        return str(value) if bits < 10_000 else f"an int of {bits} bits"
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def duration(value: timedelta) -> str:
    """A duration for a message, exactly: ``"0 seconds"``, ``"1 second"``, ``"1.5
    seconds"``, ``"5400 seconds (1:30:00)"``."""
    micros = value // timedelta(microseconds=1)
    whole, fraction = divmod(abs(micros), 1_000_000)
    number = f"{'-' if micros < 0 else ''}{whole}" + f".{fraction:06d}".rstrip("0").rstrip(".")
    text = f"{number} {'second' if number in ('1', '-1') else 'seconds'}"
    return f"{text} ({value})" if micros >= 60_000_000 else text


def is_int(value: object) -> bool:
    """An ``int`` and not a ``bool`` (``True`` is no count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, lowest: int = 0, highest: int | None = None) -> int:
    """``value`` if it is an int in ``[lowest, highest]``, else InvalidArgumentError."""
    if not is_int(value) or value < lowest or (highest is not None and value > highest):
        bounds = f">= {lowest}" if highest is None else f">= {lowest} and <= {highest}"
        raise InvalidArgumentError(f"{name} must be an int {bounds}, got {shown(value)}")
    return int(value)


def check_seq(name: str, value: Any, *, lowest: int = 0) -> int:
    """A seq argument: an int from ``lowest`` to :data:`MAX_SEQ`."""
    return check_int(name, value, lowest=lowest, highest=MAX_SEQ)


def check_text(name: str, value: Any, *, max_length: int | None = None) -> str:
    """A non-empty ``str`` that is valid UTF-8 (no lone surrogate), of at most
    ``max_length`` characters: what a key name or a stored string needs."""
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{name} must be a non-empty str, got {shown(value)}")
    if max_length is not None and len(value) > max_length:
        raise InvalidArgumentError(
            f"{name} is {len(value)} characters long, over {max_length}: {shown(value)}"
        )
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                f"{name} is not valid UTF-8 ({exc.reason} at {exc.start}): {shown(value)}"
            ) from None
    return value


def check_type(name: str, value: Any, expected: type | tuple[type, ...], what: str) -> None:
    """InvalidArgumentError unless ``isinstance(value, expected)``; ``what`` names it."""
    if not isinstance(value, expected):
        raise InvalidArgumentError(f"{name} must be {what}, got {type(value).__name__}")


def is_number(value: object, lowest: float = 0.0) -> bool:
    """A real ``int`` or ``float`` (not a bool, not NaN) of at least ``lowest``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= lowest


def missing_extra(extra: str, exc: ModuleNotFoundError) -> MissingExtraError:
    """The error for a framework import that failed: it names the extra to install."""
    return MissingExtraError(
        f"{(exc.name or 'a framework').split('.')[0]} is not installed: "
        f"pip install 'redis-msglog[{extra}]' ({exc})",
        name=exc.name,
    )
