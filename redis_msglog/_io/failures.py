"""The translation of redis-py's failures into the core's step outcomes: what the shells
catch around a step (:data:`CLIENT_FAILURES`), and what each failure means to the core
(:func:`step_failure`: sent or not, refused with which error reply)."""

from __future__ import annotations

from redis import exceptions as redis_errors

from .._core.steps import NotSent, Refused, StepFailure

CLIENT_FAILURES = (redis_errors.RedisError, redis_errors.RedisClusterException, OSError)
"""What redis-py raises when a step fails (translated by :func:`step_failure`)."""

REFUSALS = (
    redis_errors.AuthenticationError,  # WRONGPASS, NOAUTH: a ConnectionError in redis-py
    redis_errors.AuthenticationWrongNumberOfArgsError,
    redis_errors.BusyLoadingError,  # LOADING: also a ConnectionError in redis-py
)
"""Error replies that redis-py raises as connection failures: the server answered, and ran
nothing (an append is not in doubt), and a login refused is not an outage to wait out."""

_CONNECTION_FAILURES = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.RedisClusterException,  # no slot table: not a RedisError
    OSError,
)


def step_failure(exc: BaseException) -> StepFailure:
    """The core's outcome for a failure of redis-py (or of the socket under it)."""
    if isinstance(exc, StepFailure):
        return exc
    # Cluster refusals are error replies, but nothing ran: re-sending is safe.
    if isinstance(exc, (redis_errors.TryAgainError, redis_errors.ClusterDownError)):
        return NotSent(f"the Redis Cluster did not serve the slot: {exc}", exc)
    if isinstance(exc, (redis_errors.AuthenticationError, AuthWrongArgs)):
        return Refused(_auth_reply(exc), exc)
    if isinstance(exc, redis_errors.BusyLoadingError):  # the server is loading its data
        return NotSent(f"LOADING {exc}", exc)
    if isinstance(exc, redis_errors.ResponseError):
        return Refused(_error_reply(exc), exc)
    if isinstance(exc, redis_errors.ClusterError):  # redirections that never settled
        return NotSent(f"the Redis Cluster did not serve the slot in time: {exc}", exc)
    if isinstance(exc, _CONNECTION_FAILURES):
        return NotSent(str(exc) or type(exc).__name__, exc)
    return Refused(str(exc) or type(exc).__name__, exc)  # DataError and the like


# redis-py strips these codes from an error reply's text and raises a class instead.
_CODES: tuple[tuple[type[Exception], str], ...] = (
    (redis_errors.NoScriptError, "NOSCRIPT"),
    (redis_errors.OutOfMemoryError, "OOM"),
    (redis_errors.ReadOnlyError, "READONLY"),
    (redis_errors.NoPermissionError, "NOPERM"),
    (redis_errors.BusyLoadingError, "LOADING"),
    (redis_errors.ExecAbortError, "EXECABORT"),
)


AuthWrongArgs = redis_errors.AuthenticationWrongNumberOfArgsError


def _auth_reply(exc: BaseException) -> str:
    """A refused login as the server's reply, its code first: redis-py raises
    ``NOAUTH`` (no credentials where the server needs them) and ``WRONGPASS`` (or an
    older server's ``ERR invalid password``) as one class, without the code."""
    text = str(exc)
    first = text.split(" ", 1)[0]
    if first in ("NOAUTH", "WRONGPASS"):
        return text
    needs_login = "required" in text or "already authenticated" in text
    return f"{'NOAUTH' if needs_login else 'WRONGPASS'} {text}"


def _error_reply(exc: redis_errors.ResponseError) -> str:
    """The server's error reply as sent, its code first (``NOSCRIPT No matching...``)."""
    text = str(exc)
    code = next((code for kind, code in _CODES if isinstance(exc, kind)), None)
    if code is None:
        first = text.split(" ", 1)[0]
        code = None if first.isupper() else "ERR"  # an unknown code stays in the text
    return text if code is None else f"{code} {text}"
