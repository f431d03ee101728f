"""The routes of :func:`redis_msglog.web.create_app` (docs/web.md)."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from .. import adapters, errors, telemetry
from .._core.args import MAX_SEQ
from .._core.drafts.cursor import Resume, parse_resume
from ..edits import EditEntry, Entry
from . import _aisdk as aisdk
from . import _guard
from ._encodings import ENCODINGS, entry_data
from ._errors import HttpError, error_response, json_response
from ._listing import listing_page, scope_page
from ._logs import Logs
from ._stream import Hub, event_stream

Action = Literal["read", "append", "list"]
Authorize = Callable[[Request, str, Action], "bool | Awaitable[bool]"]

MAX_PAGE = 1000
"""The largest ``limit`` of one page of ``GET .../messages``."""
DEFAULT_PAGE = 100
VIEWS = ("visible", "active", "archived", "physical")
FORMATS = {"openai": adapters.to_openai, "anthropic": adapters.to_anthropic}
FORMATS["responses"] = adapters.to_responses
SHA256 = re.compile(r"[0-9a-f]{64}")
MEDIA_TYPE = re.compile(r"[a-z]+/[a-z0-9][a-z0-9.+-]{0,100}")
STATIC = Path(__file__).parent / "static"
RETRY_AFTER = 10
"""Seconds a refused event stream is told to wait (``Retry-After``) before trying again."""
MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
    (b"%PDF-", "application/pdf"),
)


def sniffed(data: bytes) -> str:
    """The media type of a blob fetched without ``?type=``: the common images by their
    first bytes, else ``application/octet-stream``."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next(
        (kind for magic, kind in MAGIC if data.startswith(magic)), "application/octet-stream"
    )


def seq_of(name: str, text: str | None, default: int | None = None) -> int:
    if text is None or text == "":
        if default is None:
            raise errors.InvalidArgumentError(f"{name} is required")
        return default
    if not text.isascii() or not text.isdigit() or len(text) > 19 or int(text) > MAX_SEQ:
        raise errors.InvalidArgumentError(
            f"{name} must be a seq (an integer from 0 to {MAX_SEQ}), got {text!r}"
        )
    return int(text)


def _resume_of(request: Request) -> tuple[Resume, bool]:
    """Where an event stream starts: a reconnecting ``EventSource``'s ``Last-Event-ID``,
    else ``?after=`` (each a seq or a resume id, docs/drafts.md), else the start; and
    whether the client resumes (it was sent what came before)."""
    header = request.headers.get("last-event-id")  # a reconnecting EventSource's
    if header:
        return _parsed("Last-Event-ID", header), True
    after = request.query_params.get("after")
    if after is None:
        return Resume(0), False
    return _parsed("after", after), True


def _parsed(name: str, text: str) -> Resume:
    try:
        return parse_resume(text)
    except errors.InvalidArgumentError:
        raise errors.InvalidArgumentError(
            f"{name} must be a seq or a resume id (docs/drafts.md), got {text[:100]!r}"
        ) from None


def choice(name: str, text: str | None, allowed: tuple[str, ...], default: str) -> str:
    value = default if text is None else text
    if value not in allowed:
        raise errors.InvalidArgumentError(f"{name} must be one of {', '.join(allowed)}")
    return value


@dataclass(frozen=True)
class Options:
    """The app's settings (:func:`redis_msglog.web.create_app`'s arguments)."""

    allow_appends: bool
    heartbeat: float
    max_queue: int
    prefix: str
    max_body_bytes: int
    cors_origins: frozenset[str]
    allowed_hosts: tuple[str, ...] | None


class Api:
    """The endpoints, over one client (and the followers' own, in ``hub``)."""

    def __init__(self, logs: Logs, hub: Hub, authorize: Authorize, options: Options) -> None:
        self.logs, self.hub, self.options = logs, hub, options
        self._authorize = authorize
        self.allow_appends, self.heartbeat = options.allow_appends, options.heartbeat
        self.max_queue, self.prefix = options.max_queue, options.prefix

    async def check(self, request: Request, conversation: str, action: Action) -> None:
        """``authorize``, before any Redis call: anything but ``True`` is a 403."""
        allowed = self._authorize(request, conversation, action)
        if inspect.isawaitable(allowed):
            allowed = await allowed
        if allowed is not True:
            raise HttpError(403, "Forbidden", f"not authorized to {action} {conversation!r}")

    async def events(self, request: Request) -> Response:
        conversation = request.path_params["conversation"]
        await self.check(request, conversation, "read")
        resume, resumed = _resume_of(request)
        protocol = request.query_params.get("protocol", "msglog")
        encoding = ENCODINGS.get(protocol)
        if encoding is None:
            raise HttpError(
                400, "BadRequest", f"protocol must be one of {sorted(ENCODINGS)}, got {protocol!r}"
            )
        self.logs.log(conversation)  # a bad id is a 400 now, not a broken stream
        # One read before the stream starts: a conversation the app's Redis user may not
        # read (another tenant's) is a 403 now, and takes no follower's place.
        count = await self.logs.call(conversation, "count")
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        if protocol == aisdk.PROTOCOL:
            headers.update(aisdk.HEADERS)
            if not resume.drafts:  # the answer in progress, from its first delta
                drafts = await self.logs.call(conversation, "drafts")
                if not any(d.role == "assistant" for d in drafts):
                    return Response(status_code=204, headers=headers)  # no active stream
                resume, resumed = Resume(count), False
        if not self.hub.admit(conversation):
            raise HttpError(
                503,
                "TooManyFollowers",
                f"{self.hub.limit} conversations are followed already (max_followers): "
                "try again later",
                retry_after=RETRY_AFTER,
            )
        stream = event_stream(
            self.hub,
            self.logs,
            conversation,
            resume,
            bound=self.max_queue,
            heartbeat=self.heartbeat,
            encoding=encoding,
            resumed=resumed,
        )
        response = EventStream(stream, media_type="text/event-stream", headers=headers)
        response.release = lambda: self.hub.release(conversation)
        return response

    async def messages(self, request: Request) -> Response:
        conversation = request.path_params["conversation"]
        await self.check(request, conversation, "read")
        query = request.query_params
        view = choice("view", query.get("view"), VIEWS, "visible")
        fmt = choice("format", query.get("format"), ("neutral", *FORMATS), "neutral")
        after = seq_of("after", query.get("after"), 0)
        limit = seq_of("limit", query.get("limit"), DEFAULT_PAGE)
        if not 1 <= limit <= MAX_PAGE:
            raise errors.InvalidArgumentError(f"limit must be 1 to {MAX_PAGE}, got {limit}")
        if fmt != "neutral" and view == "physical":
            raise errors.InvalidArgumentError("the physical view has edits: format=neutral only")
        blobs = "refs" if fmt == "neutral" else "hydrate"  # the exporters need the bytes
        rows: list[Entry] = await self.logs.call(
            conversation, "read", after, limit, blobs=blobs, view=view
        )
        last_seq = await self.logs.call(conversation, "count")
        if fmt == "neutral":
            body: list[Any] = [entry_data(row) for row in rows]
        else:
            body = FORMATS[fmt]([row for row in rows if not isinstance(row, EditEntry)])
        return json_response(
            {
                "conversation": conversation,
                "messages": body,
                "last_seq": last_seq,
                "next_after": rows[-1].seq if len(rows) == limit else None,
            }
        )

    async def usage(self, request: Request) -> Response:
        """The conversation's usage totals (docs/usage.md), one read."""
        conversation = request.path_params["conversation"]
        await self.check(request, conversation, "read")
        totals = await self.logs.call(conversation, "usage")
        return json_response({"conversation": conversation, "usage": totals.model_dump()})

    async def blob(self, request: Request) -> Response:
        conversation, digest = request.path_params["conversation"], request.path_params["sha"]
        await self.check(request, conversation, "read")
        if not SHA256.fullmatch(digest):
            raise errors.InvalidArgumentError("a blob is named by its SHA-256, 64 hex digits")
        media_type = request.query_params.get("type")
        if media_type is not None and not MEDIA_TYPE.fullmatch(media_type):
            raise errors.InvalidArgumentError(f"type is not a media type: {media_type!r}")
        data = await self.logs.blob(conversation, digest)
        if data is None:
            raise HttpError(404, "NotFound", f"no blob {digest} in {conversation!r}")
        media_type = media_type or sniffed(data)
        headers = {
            "Cache-Control": "private, max-age=31536000, immutable",  # named by its content
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox; default-src 'none'",  # an SVG runs nothing
        }
        return Response(data, media_type=media_type, headers=headers)

    async def append(self, request: Request) -> Response:
        conversation = request.path_params["conversation"]
        if not self.allow_appends:
            raise HttpError(405, "MethodNotAllowed", "appends are off (allow_appends=False)")
        _guard.check_same_origin(request, self.options.cors_origins)
        _guard.require_json(request)  # a form or text/plain POST needs no CORS preflight
        await self.check(request, conversation, "append")
        key = request.headers.get("idempotency-key") or None
        match = request.headers.get("if-match")
        expected = None if match is None else seq_of("If-Match", match.strip('" '))
        data = await _guard.read_body(request, self.options.max_body_bytes)
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise errors.CodecError(f"the body is not JSON: {exc}") from exc
        messages = body if isinstance(body, list) else [body]
        last_seq = await self.logs.call(
            conversation, "append_many", messages, idempotency_key=key, expected_seq=expected
        )
        return json_response({"last_seq": last_seq}, 201, {"ETag": f'"{last_seq}"'})

    async def conversations(self, request: Request) -> Response:
        """The operator listing (viewer mode): a page of conversations, by ``SCAN``, or of
        one scope's (``?scope=``), from its index."""
        scope = request.query_params.get("scope")
        await self.check(request, scope or "", "list")
        if not self.logs.sync:
            raise HttpError(501, "NotImplemented", "the listing needs a sync redis client")
        limit = seq_of("limit", request.query_params.get("limit"), DEFAULT_PAGE)
        if not 1 <= limit <= MAX_PAGE:
            raise errors.InvalidArgumentError(f"limit must be 1 to {MAX_PAGE}, got {limit}")
        cursor = request.query_params.get("cursor")
        client, prefix = self.logs.client, self.prefix
        infos, after = await asyncio.to_thread(
            listing_page if scope is None else partial(scope_page, scope=scope),
            client, prefix, cursor=cursor, limit=limit,
        )  # fmt: skip
        listed = [
            {"conversation": i.conversation, "count": i.count, "last_at": _iso(i.last_at)}
            for i in infos
        ]
        return json_response({"conversations": listed, "next_cursor": after})


def _iso(value: Any) -> Any:
    return value.isoformat() if value is not None else None


def handled(endpoint: Callable[[Request], Awaitable[Response]], route: str) -> Callable[..., Any]:
    """The endpoint with bad input and failing servers as JSON errors, one span each
    (``redis_msglog.telemetry``; ``route`` names it)."""

    async def run(request: Request) -> Response:
        conversation = request.path_params.get("conversation")
        with telemetry.serving(route, request.method, conversation) as responded:
            try:
                response = await endpoint(request)
            except (HttpError, errors.MessageLogError) as exc:
                response = error_response(exc)
            responded(response.status_code)
            return response

    return run


def routes(api: Api, viewer: bool) -> list[Any]:
    one = "/conversations/{conversation:path}"
    found: list[Any] = [
        Route(f"{one}/events", handled(api.events, f"{one}/events")),
        Route(f"{one}/messages", handled(api.messages, f"{one}/messages")),
        Route(f"{one}/messages", handled(api.append, f"{one}/messages"), methods=["POST"]),
        Route(f"{one}/blobs/{{sha}}", handled(api.blob, f"{one}/blobs/{{sha}}")),
        Route(f"{one}/usage", handled(api.usage, f"{one}/usage")),
    ]
    if viewer:
        found += [
            Route("/conversations", handled(api.conversations, "/conversations")),
            Route("/", lambda request: FileResponse(STATIC / "viewer.html")),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]
    return found


def build(api: Api, viewer: bool) -> Starlette:
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        yield
        await api.hub.close()

    options, middleware = api.options, []
    if options.allowed_hosts is not None:  # first: a foreign Host gets nothing else
        middleware.append(Middleware(_guard.HostCheck, allowed=options.allowed_hosts))
    if options.cors_origins:
        middleware.append(Middleware(_guard.cors, origins=sorted(options.cors_origins)))
    app = Starlette(routes=routes(api, viewer), lifespan=lifespan, middleware=middleware)
    app.state.msglog = api
    return app


class EventStream(StreamingResponse):
    """An event stream that gives its follower place back (``release``) when it ends,
    however it ends: even when the client left before its first byte (then the body's
    generator never ran, and its own ``finally`` with it)."""

    release: Callable[[], None] = staticmethod(lambda: None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.release()
