"""OpenTelemetry traces and metrics of the log's operations (``pip install
'redis-msglog[otel]'``: ``opentelemetry-api`` only; the application chooses the SDK and
the exporters). docs/observability.md lists what is emitted.

Every public operation of a log (both clients) and of a directory is one span, named
``msglog <operation>`` (``msglog append``, ``msglog all``, ``msglog redact``...), a child
of the caller's current span, with the OpenTelemetry database and GenAI attributes
(``db.system.name`` ``"redis"``, ``db.operation.name``, ``gen_ai.conversation.id``,
``server.address``/``server.port``) and ours (``msglog.outcome``, ``msglog.retries``,
``msglog.last_seq``). redis-py's own instrumentation does not see the log's commands,
which are sent packed on a pooled connection, not through ``execute_command``. The same
wrapper records ``db.client.operation.duration`` (seconds, by operation and
``error.type``), ``msglog.client.retries`` and ``msglog.client.appends_in_doubt``; the
web app, followers and the read cache record theirs (docs/observability.md, "Metrics").

Without ``opentelemetry-api`` installed, nothing is imported and an operation pays one
check. With it and no provider set, an operation skips the wrapper: 0.29 µs
(docs/observability.md, "Cost"). :func:`configure` points the library at providers of
the caller's choosing instead of the global ones (what tests do).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any, TypeVar, cast

from .errors import AppendInDoubtError, MessageLogError, StorageError

__all__ = ["configure"]

F = TypeVar("F", bound=Callable[..., Any])

SYSTEM = "redis"
_PROVIDER_VARIABLES = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")
_UNKNOWN = object()  # an API without those globals: always emit
OPERATION_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0,
)  # fmt: skip
"""``db.client.operation.duration``'s buckets, in seconds."""
HTTP_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
"""``http.server.request.duration``'s buckets: the HTTP conventions' own."""
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0)
"""``msglog.client.follow.lag``'s buckets, in seconds."""
BACKLOG_BUCKETS = (0.0, 1.0, 10.0, 100.0, 1_000.0, 10_000.0, 100_000.0)
"""``msglog.client.follow.backlog``'s buckets, in entries."""
_retries: ContextVar[list[int] | None] = ContextVar("msglog_retries", default=None)


class _Instruments:
    """The tracer and meter instruments, made from the providers (once, lazily)."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        from opentelemetry import metrics, trace

        try:
            __version__ = version("redis-msglog")
        except PackageNotFoundError:  # run from a source tree that is not installed
            __version__ = ""
        self.trace, self.metrics = trace, metrics
        # Providers named by environment variables are loaded by the API on first use.
        from_env = any(os.environ.get(name) for name in _PROVIDER_VARIABLES)
        self.explicit = tracer_provider is not None or meter_provider is not None or from_env
        # Until the application sets a provider, an operation skips the wrapper. Asking
        # the API (get_tracer_provider) costs 0.6 µs a provider (an environment lookup);
        # its two module globals, which the set_* functions assign, cost a lookup each.
        self.globals = (trace, importlib.import_module("opentelemetry.metrics._internal"))
        self.tracer = trace.get_tracer("redis_msglog", __version__, tracer_provider)
        self._make_metrics(metrics.get_meter("redis_msglog", __version__, meter_provider))

    def _make_metrics(self, meter: Any) -> None:
        # Buckets the SDKs take as given (the API's advisory): their default ones (0, 5,
        # 10 ... 10,000) are for milliseconds, and would put every operation of ours,
        # tens of µs to a few ms, in the first. The conventions' buckets for database
        # operations, below a millisecond made finer.
        self.duration = meter.create_histogram(
            "db.client.operation.duration",
            unit="s",
            description="A log operation's duration",
            explicit_bucket_boundaries_advisory=OPERATION_BUCKETS,
        )
        self.retries = meter.create_counter(
            "msglog.client.retries", unit="{retry}", description="Waits before trying again"
        )
        self.request_duration = meter.create_histogram(
            "http.server.request.duration",
            unit="s",
            description="A web request's duration",
            explicit_bucket_boundaries_advisory=HTTP_BUCKETS,
        )
        self.follow_lag = meter.create_histogram(
            "msglog.client.follow.lag",
            unit="s",
            description="How long after its commit a follower received an entry",
            explicit_bucket_boundaries_advisory=LAG_BUCKETS,
        )
        self.follow_backlog = meter.create_histogram(
            "msglog.client.follow.backlog",
            unit="{entry}",
            description="Entries committed that a follower had yet to receive after a page",
            explicit_bucket_boundaries_advisory=BACKLOG_BUCKETS,
        )
        # Counted by the core as plain integers (nothing on the read's path), observed here.
        meter.create_observable_counter(
            "msglog.client.read_cache.lookups",
            callbacks=[_cache_lookups],
            unit="{lookup}",
            description="Reads of all() with a read cache: answered from it (hit) or not",
        )
        self.event_streams = meter.create_up_down_counter(
            "msglog.web.event_streams", unit="{stream}", description="Event streams open"
        )
        self.in_doubt = meter.create_counter(
            "msglog.client.appends_in_doubt",
            unit="{append}",
            description="Appends whose outcome the client could not learn",
        )


_state: dict[str, _Instruments | bool | None] = {"made": False, "instruments": None}


def configure(*, tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Use these providers (an SDK's ``TracerProvider`` and ``MeterProvider``) rather than
    the global ones; ``configure()`` goes back to the global ones. Raises
    :class:`~redis_msglog.MissingExtraError` without ``opentelemetry-api``."""
    try:
        _state["instruments"] = _Instruments(tracer_provider, meter_provider)
    except ModuleNotFoundError as exc:
        from ._core.args import missing_extra

        raise missing_extra("otel", exc) from exc
    _state["made"] = True


def _instruments() -> _Instruments | None:
    if not _state["made"]:
        try:
            _state["instruments"] = _Instruments()
        except ModuleNotFoundError:  # opentelemetry-api is not installed: nothing emitted
            _state["instruments"] = None
        _state["made"] = True
    return cast("_Instruments | None", _state["instruments"])


def _active() -> _Instruments | None:
    """The instruments, if anything would receive what they emit."""
    made = _instruments()
    if made is None or made.explicit:
        return made
    trace_globals, metrics_globals = made.globals
    tracer_provider = getattr(trace_globals, "_TRACER_PROVIDER", _UNKNOWN)
    meter_provider = getattr(metrics_globals, "_METER_PROVIDER", _UNKNOWN)
    return None if tracer_provider is None and meter_provider is None else made


def measuring() -> bool:
    """Whether a provider is set (a follower then reads its backlog with each page)."""
    return _active() is not None


def record_follow_lag(rows: Sequence[Any], behind: int | None = None) -> None:
    """A follower's page arrived: how long after its commit its newest entry came, and
    how many committed entries it had yet to receive (``behind``, when read)."""
    made = _active()
    if made is None:
        return
    if rows:
        at = getattr(rows[-1], "at", None)
        if isinstance(at, datetime):
            made.follow_lag.record(max(0.0, time.time() - at.timestamp()))
    if behind is not None:
        made.follow_backlog.record(behind)


def _cache_lookups(options: Any) -> list[Any]:
    from opentelemetry.metrics import Observation

    from ._core.read.cache import LOOKUPS

    return [Observation(n, {"msglog.read_cache.result": r}) for r, n in LOOKUPS.items()]


def add_event_streams(delta: int) -> None:
    """An event stream of the web app opened (+1) or ended (-1)."""
    made = _active()
    if made is not None:
        made.event_streams.add(delta)


def note_retry() -> None:
    """One wait before trying again, in the operation running (the carriers call it)."""
    counted = _retries.get()
    if counted is not None:
        counted[0] += 1


def traced(operation: str, *, returns_seq: bool = False) -> Callable[[F], F]:
    """Make each call of the method (sync or ``async``) one span and one duration;
    ``returns_seq``: its result is the log's last seq (a write), kept on the span."""

    def decorate(method: F) -> F:
        if inspect.iscoroutinefunction(method):

            @functools.wraps(method)
            async def run_async(self: Any, *args: Any, **kwargs: Any) -> Any:
                made = _active()
                if made is None:
                    return await method(self, *args, **kwargs)
                with _span(made, operation, self, returns_seq) as finish:
                    return finish(await method(self, *args, **kwargs))

            return cast(F, run_async)

        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            made = _active()
            if made is None:
                return method(self, *args, **kwargs)
            with _span(made, operation, self, returns_seq) as finish:
                return finish(method(self, *args, **kwargs))

        return cast(F, run)

    return decorate


@contextmanager
def _span(
    made: _Instruments, operation: str, owner: Any, returns_seq: bool
) -> Iterator[Callable[[Any], Any]]:
    attributes = {"db.system.name": SYSTEM, "db.operation.name": operation}
    retries = [0]
    token = _retries.set(retries)
    started = time.perf_counter()
    error: BaseException | None = None
    with made.tracer.start_as_current_span(
        f"msglog {operation}",
        kind=made.trace.SpanKind.CLIENT,
        attributes={**attributes, **_where(owner)},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:

        def finish(result: Any) -> Any:
            if returns_seq and isinstance(result, int) and span.is_recording():
                span.set_attribute("msglog.last_seq", result)
            return result

        try:
            yield finish
        except BaseException as exc:
            error = exc
            raise
        finally:
            _retries.reset(token)
            _end(made, span, attributes, operation, error, retries[0], started)


def _end(
    made: _Instruments,
    span: Any,
    attributes: dict[str, str],
    operation: str,
    error: BaseException | None,
    retries: int,
    started: float,
) -> None:
    outcome = _outcome(error)
    if error is not None:
        attributes["error.type"] = type(error).__qualname__
    if span.is_recording():
        span.set_attribute("msglog.outcome", outcome)
        span.set_attribute("msglog.retries", retries)
        if error is not None:
            span.set_attribute("error.type", attributes["error.type"])
            span.record_exception(error)
            span.set_status(made.trace.Status(made.trace.StatusCode.ERROR, str(error)[:200]))
    made.duration.record(time.perf_counter() - started, attributes)
    if retries:
        made.retries.add(retries, {"db.operation.name": operation})
    if outcome == "in_doubt":
        made.in_doubt.add(1, {"db.operation.name": operation})


@contextmanager
def serving(route: str, method: str, conversation: str | None) -> Iterator[Callable[[int], None]]:
    """A web request: a span of kind ``SERVER`` named ``<method> <route>`` (the HTTP
    conventions), its duration in ``http.server.request.duration``; the caller gives the
    response's status to the function it gets. The log operations it makes are its
    children. An event stream's span ends when its response starts, not when it ends."""
    made = _active()
    if made is None:
        yield _ignored
        return
    attributes: dict[str, Any] = {"http.request.method": method, "http.route": route}
    status = [0]
    started = time.perf_counter()
    where = {} if conversation is None else {"gen_ai.conversation.id": conversation}
    with made.tracer.start_as_current_span(
        f"{method} {route}", kind=made.trace.SpanKind.SERVER, attributes={**attributes, **where}
    ) as span:
        try:
            yield lambda code: status.__setitem__(0, code)
        finally:
            attributes["http.response.status_code"] = status[0]
            if span.is_recording():
                span.set_attribute("http.response.status_code", status[0])
                if status[0] >= 500:
                    span.set_status(made.trace.Status(made.trace.StatusCode.ERROR))
            made.request_duration.record(time.perf_counter() - started, attributes)


def _ignored(status: int) -> None:
    return None


def _outcome(error: BaseException | None) -> str:
    """``ok``; ``in_doubt`` (it may have committed); ``failed`` (the server could not
    serve it); ``refused`` (bad input, a conflict: nothing written); ``error``."""
    if error is None:
        return "ok"
    if isinstance(error, AppendInDoubtError):
        return "in_doubt"
    if isinstance(error, StorageError):
        return "failed"
    return "refused" if isinstance(error, MessageLogError) else "error"


def _where(owner: Any) -> dict[str, Any]:
    """The span's attributes naming what the operation is on: the conversation (set as
    values: an id a tenant chose is never an attribute's name) and the server."""
    found: dict[str, Any] = {}
    conversation = getattr(owner, "conversation", None)
    if isinstance(conversation, str):
        found["gen_ai.conversation.id"] = conversation
    prefix = getattr(owner, "prefix", None) or getattr(
        getattr(owner, "_options", None), "prefix", None
    )
    if isinstance(prefix, str):
        found["db.namespace"] = prefix
    client = getattr(owner, "_redis", None)
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if isinstance(kwargs, dict):
        if isinstance(kwargs.get("host"), str):
            found["server.address"] = kwargs["host"]
        if isinstance(kwargs.get("port"), int):
            found["server.port"] = kwargs["port"]
    return found
