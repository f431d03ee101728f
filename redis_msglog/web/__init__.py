"""The HTTP face of the log (extra ``web``): an ASGI application serving a resumable
Server-Sent Events stream per conversation, JSON pages, blobs and (if allowed) appends;
mountable in FastAPI or any ASGI app. See docs/web.md.

``redis_msglog`` itself never imports this module (nor Starlette)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from .._core.args import is_number, shown
from ..errors import InvalidArgumentError, MissingExtraError

try:
    from ._app import Action, Api, Authorize, Options, build
    from ._guard import origin_of
    from ._logs import Logs, follower_client
    from ._stream import Hub
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is installed in tests
    if exc.name not in ("starlette", "uvicorn"):
        raise
    raise MissingExtraError(
        "redis_msglog.web needs Starlette: pip install 'redis-msglog[web]'"
    ) from exc

if TYPE_CHECKING:
    from starlette.applications import Starlette

DEFAULT_MAX_QUEUE = 1000
"""Events one slow SSE client may have waiting before its stream ends (``overflow``)."""
DEFAULT_MAX_FOLLOWERS = 64
"""Distinct conversations one app follows at once (a Redis connection each): the next
conversation's event stream is a ``503`` with ``Retry-After``."""
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
"""The largest request body (an append's JSON), in bytes: 16 MiB."""

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_FOLLOWERS",
    "DEFAULT_MAX_QUEUE",
    "Action",
    "Authorize",
    "create_app",
]


def create_app(
    client: Any,
    *,
    authorize: Authorize | None = None,
    allow_appends: bool = False,
    heartbeat: float = 15.0,
    prefix: str = "msglog",
    max_queue: int = DEFAULT_MAX_QUEUE,
    viewer: bool = False,
    max_followers: int = DEFAULT_MAX_FOLLOWERS,
    follower_client: Any = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    cors_origins: Iterable[str] = (),
    allowed_hosts: Iterable[str] | None = None,
    **log_options: Any,
) -> Starlette:
    """An ASGI application serving the conversations of ``client`` (a sync or asyncio
    ``redis`` client, or a ``RedisCluster``): see docs/web.md for the endpoints.

    Args:
        authorize: ``authorize(request, conversation, action) -> bool`` (or an awaitable
            of it), ``action`` one of ``"read"``, ``"append"``, ``"list"``; called before
            any Redis call of every request; anything but ``True`` is a 403. Required:
            there is no default that lets everyone in.
        allow_appends: serve ``POST /conversations/{id}/messages`` (else 405).
        heartbeat: seconds between the event streams' heartbeat comments while idle.
        prefix: the logs' key prefix.
        max_queue: per event-stream client, the most events waiting to be sent; a client
            further behind gets ``event: overflow`` and its stream ends (it resumes from
            its last id), so a slow client cannot make the server hold unbounded memory.
        viewer: also serve the operator's viewer page (``GET /``, ``/static``) and the
            conversation listing (``GET /conversations``); what ``msglog serve`` does.
        max_followers, follower_client, max_body_bytes, cors_origins, allowed_hosts:
            the bounds and request checks of docs/web.md ("Threat model"): conversations
            followed at once (``503`` beyond), the followers' own client (default: a
            copy of ``client`` with a pool of ``max_followers`` connections; required
            for a cluster client), the largest body in bytes (``413``), the origins
            allowed CORS (none by default), the ``Host`` names served (``421`` for others).
        log_options: passed to every :class:`~redis_msglog.MessageLog` the app makes
            (``page_size``, ``retry``, ``max_message_bytes``, ...).
    """
    _check(authorize, heartbeat, max_queue, max_followers, max_body_bytes, allow_appends, viewer)
    logs = Logs(client, options := {"prefix": prefix, **log_options})
    logs.log("-")  # the client and the options checked now, by the log itself
    follow_logs = Logs(follower_client or follower_client_of(client, max_followers), options)
    if follow_logs.sync != logs.sync:
        raise InvalidArgumentError("follower_client must be sync if client is, asyncio if it is")
    settings = Options(
        allow_appends=allow_appends,
        heartbeat=float(heartbeat),
        max_queue=max_queue,
        prefix=prefix,
        max_body_bytes=max_body_bytes,
        cors_origins=_origins(cors_origins),
        allowed_hosts=None if allowed_hosts is None else _texts("allowed_hosts", allowed_hosts),
    )
    hub = Hub(logs, follow_logs, max_followers)
    return build(Api(logs, hub, cast("Authorize", authorize), settings), viewer)


def _check(*args: Any) -> None:
    authorize, heartbeat, max_queue, max_followers, max_body_bytes, appends, viewer = args
    for name, flag in (("allow_appends", appends), ("viewer", viewer)):
        if type(flag) is not bool:
            raise InvalidArgumentError(f"{name} must be a bool, got {shown(flag)}")
    if authorize is None or not callable(authorize):
        raise InvalidArgumentError(
            "create_app needs authorize(request, conversation, action) -> bool: a callable "
            f"deciding each request (got {shown(authorize)})"
        )
    if not is_number(heartbeat) or not 0 < heartbeat <= 3600:
        raise InvalidArgumentError(
            f"heartbeat must be a number of seconds in (0, 3600], got {shown(heartbeat)}"
        )
    for name, number in (
        ("max_queue", max_queue),
        ("max_followers", max_followers),
        ("max_body_bytes", max_body_bytes),
    ):
        if type(number) is not int or number < 1:
            raise InvalidArgumentError(f"{name} must be an int >= 1, got {shown(number)}")


def follower_client_of(client: Any, size: int) -> Any:
    follow = follower_client(client, size)
    if follow is None:
        raise InvalidArgumentError(
            f"create_app cannot copy a {type(client).__name__} with its own pool for the "
            "event streams' followers: give follower_client= a second client like it"
        )
    return follow


def _texts(name: str, values: Iterable[str]) -> tuple[str, ...]:
    if isinstance(values, str) or not all(isinstance(v, str) and v for v in values):
        raise InvalidArgumentError(f"{name} must be a list of non-empty strings")
    return tuple(values)


def _origins(values: Iterable[str]) -> frozenset[str]:
    origins = _texts("cors_origins", values)
    if any(origin.strip() == "*" or "://" not in origin for origin in origins):
        raise InvalidArgumentError(
            "cors_origins lists origins like 'https://app.example.com' (never '*': the "
            "app's answers are per user)"
        )
    return frozenset(origin_of(origin) for origin in origins)
