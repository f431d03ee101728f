"""The log options an integration's constructor takes, with ``ttl`` as the frameworks'
own Redis stores take it: int seconds (``RedisSession(ttl=3600)``,
``RedisChatMessageHistory(ttl=3600)``, ``RedisChatStore(ttl=3600)``) or a ``timedelta``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from .._core.args import shown
from .._io.shell import check_log_options
from ..errors import InvalidArgumentError
from ._filters import covering_copies


def framework_ttl(ttl: object) -> timedelta | None:
    """``ttl`` as the log takes it: ``None`` (no expiry), a ``timedelta``, or a number of
    seconds (an int, or a finite float) of at least 1. Anything else (a bool, a negative
    or zero count, NaN, infinity, a string) is an
    :class:`~redis_msglog.InvalidArgumentError`, raised before anything is written.

    ``0`` is refused rather than read as "no expiry" (as two of the frameworks' stores
    read a falsy ttl) or "expire now" (as the Agents SDK's would): say ``None``."""
    if ttl is None or isinstance(ttl, timedelta):
        return ttl  # the log checks a timedelta's range itself
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise InvalidArgumentError(
            f"ttl must be None, a timedelta or a number of seconds, got {shown(ttl)}"
        )
    if not math.isfinite(ttl) or ttl < 1:
        raise InvalidArgumentError(f"ttl must be at least 1 second, got {shown(ttl)}")
    try:
        return timedelta(seconds=ttl)
    except OverflowError as exc:
        raise InvalidArgumentError(f"ttl {shown(ttl)} is out of range: {exc}") from None


def integration_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` (an integration's ``**log_options``) with ``ttl`` made a ``timedelta``,
    every option checked as :class:`~redis_msglog.MessageLog` would check it, and
    ``before_append`` run over the framework copies the rows carry too (``_filters``)."""
    out = dict(options)
    if "ttl" in out:
        out["ttl"] = framework_ttl(out["ttl"])
    check_log_options(out)
    if out.get("before_append") is not None:
        out["before_append"] = covering_copies(out["before_append"])
    return out
