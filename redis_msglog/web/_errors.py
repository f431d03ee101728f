"""The web app's errors as JSON responses (docs/web.md "Endpoints")."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from .. import errors

STATUS = {  # the library's errors as HTTP statuses (the first that matches); else a 400
    # The app's Redis user may not touch those keys (a tenant's ACL): not the server failing.
    errors.PermissionDeniedError: 403,
    errors.SeqConflictError: 409,
    errors.IdempotencyConflictError: 409,
    errors.MessageTooLargeError: 413,
    errors.ConversationErasedError: 410,  # Gone: erased, its tombstone stands (lifecycle.md)
    errors.StorageError: 503,
    errors.AppendInDoubtError: 503,  # not a StorageError (it may have committed); still a 503
    errors.NotDurableError: 503,
}


class HttpError(Exception):
    """A refusal of the app's own (not a library error): its status, name and message;
    ``retry_after``: seconds, sent as ``Retry-After``."""

    def __init__(
        self, status: int, name: str, message: str, *, retry_after: int | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.status, self.name, self.extra = status, name, extra
        self.retry_after = retry_after

    def headers(self) -> dict[str, str] | None:
        return None if self.retry_after is None else {"Retry-After": str(self.retry_after)}

    def body(self) -> dict[str, Any]:
        return {"error": self.name, "message": str(self), **self.extra}


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def error_response(exc: Exception) -> Response:
    if isinstance(exc, HttpError):
        return json_response(exc.body(), exc.status, exc.headers())
    assert isinstance(exc, errors.MessageLogError)
    status = next((code for kind, code in STATUS.items() if isinstance(exc, kind)), 400)
    body: dict[str, Any] = {"error": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, errors.SeqConflictError):
        body["current_seq"] = exc.current_seq
    if isinstance(exc, errors.NotDurableError):  # it committed: say where, not to re-send
        body["last_seq"] = exc.last_seq
    return json_response(body, status)
