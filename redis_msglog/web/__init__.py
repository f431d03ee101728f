"""The HTTP face of the log (extra ``web``): an ASGI application serving a resumable
Server-Sent Events stream per conversation, JSON pages, blobs and (if allowed) appends;
mountable in FastAPI or any ASGI app. See docs/web.md.

``redis_msglog`` itself never imports this module (nor Starlette)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core.args import is_number, shown
from ..errors import InvalidArgumentError, MissingExtraError

try:
    from ._app import Action, Api, Authorize, build
    from ._logs import Logs
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

__all__ = ["DEFAULT_MAX_QUEUE", "Action", "Authorize", "create_app"]


def create_app(
    client: Any,
    *,
    authorize: Authorize | None = None,
    allow_appends: bool = False,
    heartbeat: float = 15.0,
    prefix: str = "msglog",
    max_queue: int = DEFAULT_MAX_QUEUE,
    viewer: bool = False,
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
        log_options: passed to every :class:`~redis_msglog.MessageLog` the app makes
            (``page_size``, ``retry``, ``max_message_bytes``, ...).
    """
    if authorize is None or not callable(authorize):
        raise InvalidArgumentError(
            "create_app needs authorize(request, conversation, action) -> bool: a callable "
            f"deciding each request (got {shown(authorize)})"
        )
    if not is_number(heartbeat) or not 0 < heartbeat <= 3600:
        raise InvalidArgumentError(
            f"heartbeat must be a number of seconds in (0, 3600], got {shown(heartbeat)}"
        )
    if type(max_queue) is not int or max_queue < 1:
        raise InvalidArgumentError(f"max_queue must be an int >= 1, got {shown(max_queue)}")
    for name, flag in (("allow_appends", allow_appends), ("viewer", viewer)):
        if type(flag) is not bool:
            raise InvalidArgumentError(f"{name} must be a bool, got {shown(flag)}")
    logs = Logs(client, {"prefix": prefix, **log_options})
    logs.log("-")  # the client and the options checked now, by the log itself
    api = Api(
        logs,
        authorize,
        allow_appends=allow_appends,
        heartbeat=float(heartbeat),
        max_queue=max_queue,
        prefix=prefix,
    )
    return build(api, viewer)
