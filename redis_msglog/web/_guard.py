"""Request hygiene of the web app (docs/web.md "Threat model"): the ``Host`` check, the
CORS policy, the JSON-only append and the body cap."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ._errors import HttpError, json_response

JSON_TYPES = ("application/json",)


def host_name(host: str) -> str:
    """The name or address of a ``Host`` header (or a listen address), lower-case, with
    no port and no IPv6 brackets: ``"[::1]:8000"`` -> ``"::1"``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:  # name:port; more colons: a bare IPv6 address
        host = host.partition(":")[0]
    return host


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


ANY_ADDRESS = frozenset({"0.0.0.0", "::"})


class HostCheck:
    """ASGI middleware: a request whose ``Host`` names none of ``allowed`` is a ``421``
    before anything else runs (a page of a DNS-rebinding domain that resolves to this
    server sends its own name). ``0.0.0.0`` or ``::`` in ``allowed`` (a server listening
    on every address) lets every IP literal through: a browser that names an address
    went there on purpose, and rebinding needs a name."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app, self.allowed = app, {host_name(h) for h in allowed}
        self.any_ip = bool(self.allowed & ANY_ADDRESS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = dict(scope["headers"])
            host = host_name(headers.get(b"host", b"").decode("latin-1"))
            if host not in self.allowed and not (self.any_ip and is_ip(host)):
                error = HttpError(421, "MisdirectedRequest", f"this server is not {host!r}")
                await json_response(error.body(), 421)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of an origin, lower-case, as a browser sends it."""
    parts = urlsplit(url.strip().lower())
    return f"{parts.scheme}://{parts.netloc}"


def check_same_origin(request: Request, allowed: frozenset[str]) -> None:
    """A write from another site is refused: its ``Origin`` must be this app's own (the
    scheme and ``Host`` it was reached by) or one of ``allowed``. No ``Origin`` (a
    non-browser client, or a same-origin request of an older browser): let through, as
    the JSON-only content type already keeps plain forms out."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    own = origin_of(f"{request.url.scheme}://{request.headers.get('host', '')}")
    if origin_of(origin) not in (own, *allowed):
        raise HttpError(403, "CrossOrigin", f"requests from {origin!r} are not allowed")


def require_json(request: Request) -> None:
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind not in JSON_TYPES:
        raise HttpError(
            415, "UnsupportedMediaType", f"the body must be application/json, got {kind!r}"
        )


async def read_body(request: Request, cap: int) -> bytes:
    """The request's body, at most ``cap`` bytes: a larger ``Content-Length`` is refused
    before any byte is read, and a body without one (chunked) as soon as it passes ``cap``."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > cap):
        raise too_large(cap)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise too_large(cap)
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(cap: int) -> HttpError:
    return HttpError(413, "PayloadTooLarge", f"the body is over {cap} bytes (max_body_bytes)")


def cors(app: ASGIApp, origins: Iterable[str]) -> Any:
    """Starlette's CORS middleware for the listed origins (credentials allowed: the
    ``authorize`` hook may read a cookie), the app's methods and request headers."""
    from starlette.middleware.cors import CORSMiddleware

    return CORSMiddleware(
        app,
        allow_origins=list(origins),
        allow_methods=["GET", "POST"],
        allow_headers=["Content-Type", "Idempotency-Key", "If-Match", "Last-Event-ID"],
        allow_credentials=True,
        expose_headers=["ETag", "Retry-After"],
    )
