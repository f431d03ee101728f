"""OpenTelemetry spans and metrics of the log's operations (docs/observability.md), read
with the SDK's in-memory exporter and metric reader given to
``redis_msglog.telemetry.configure``: one span per public operation of both clients and
of a directory, its name, attributes and parent; a refusal, a failing server and its
retries, an append in doubt; the duration histogram and the counters; a conversation id
chosen to look like attributes stays one attribute's value; nothing is emitted while
no provider is set."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
import redis
import redis.asyncio
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from redis_msglog import (
    AsyncMessageLog,
    Directory,
    InvalidMessageError,
    MessageLog,
    RetryPolicy,
    ServerUnavailableError,
    telemetry,
)
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id

Emitted = tuple[InMemorySpanExporter, InMemoryMetricReader, TracerProvider]


@pytest.fixture
def emitted() -> Iterator[Emitted]:
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(
        tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader])
    )
    yield exporter, reader, tracer_provider
    telemetry.configure()  # back to the global providers


def spans_named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_each_sync_operation_is_one_span_under_the_callers(
    emitted: Emitted, shared_server: Callable[[str], EphemeralServer]
) -> None:
    exporter, _, tracer_provider = emitted
    server = shared_server("redis")
    conversation = new_id()
    log = MessageLog(redis.Redis(port=server.port), conversation, scope=("acme",))
    with tracer_provider.get_tracer("app").start_as_current_span("the caller's") as caller:
        seq = log.add("user", "hi")
        log.append_many([{"role": "assistant", "content": "yo"}] * 2)
        log.all(), log.count(), log.last(1), log.read(0), log.attrs()
        log.redact(1), log.retract([2]), log.set_attrs({"a": "b"})
        next(iter(log.follow(after=0)))
        Directory(log._redis).list(("acme",))
        log.usage(), Directory(log._redis).usage(("acme",))
        log.erase()
    names = [s.name for s in exporter.get_finished_spans() if s.name.startswith("msglog ")]
    assert names == [
        "msglog append", "msglog append_many", "msglog all", "msglog count", "msglog last",
        "msglog read", "msglog attrs", "msglog redact", "msglog retract", "msglog set_attrs",
        "msglog follow", "msglog list_scope", "msglog usage", "msglog scope_usage",
        "msglog erase",
    ]  # fmt: skip
    (append,) = spans_named(exporter, "msglog append")
    assert append.parent is not None and append.parent.span_id == caller.get_span_context().span_id
    assert append.kind is trace.SpanKind.CLIENT
    assert dict(append.attributes or {}) == {
        "db.system.name": "redis",
        "db.operation.name": "append",
        "gen_ai.conversation.id": conversation,
        "db.namespace": "msglog",
        "server.address": "localhost",
        "server.port": server.port,
        "msglog.last_seq": seq,
        "msglog.outcome": "ok",
        "msglog.retries": 0,
    }
    (listing,) = spans_named(exporter, "msglog list_scope")
    assert "gen_ai.conversation.id" not in (listing.attributes or {})


def test_asyncio_operations_are_spans_too(
    emitted: Emitted, shared_server: Callable[[str], EphemeralServer]
) -> None:
    exporter, _, _ = emitted
    port = shared_server("redis").port

    async def scenario() -> None:
        client = redis.asyncio.Redis(port=port)
        log = AsyncMessageLog(client, new_id())
        await log.add("user", "hi")
        await log.pop()
        await log.all()
        await client.aclose()

    asyncio.run(scenario())
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["msglog append", "msglog pop", "msglog all"]


def test_a_refusal_a_failing_server_and_its_retries_are_on_the_span_and_in_the_metrics(
    emitted: Emitted, shared_server: Callable[[str], EphemeralServer]
) -> None:
    exporter, reader, _ = emitted
    log = MessageLog(redis.Redis(port=shared_server("redis").port), new_id())
    with pytest.raises(InvalidMessageError):
        log.append({"role": "nobody", "content": "x"})
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        closed = unused.getsockname()[1]
    down = MessageLog(
        redis.Redis(port=closed), new_id(), retry=RetryPolicy(backoff=0.01, deadline=0.2)
    )
    with pytest.raises(ServerUnavailableError):
        down.count()
    refused, failed = exporter.get_finished_spans()
    assert refused.attributes is not None and failed.attributes is not None
    assert refused.attributes["msglog.outcome"] == "refused"
    assert refused.attributes["error.type"] == "InvalidMessageError"
    assert refused.status.status_code is trace.StatusCode.ERROR
    assert [e.name for e in refused.events] == ["exception"]
    assert failed.attributes["msglog.outcome"] == "failed"
    retries = failed.attributes["msglog.retries"]
    assert isinstance(retries, int) and retries >= 1
    metrics = {
        m.name: m.data
        for rm in reader.get_metrics_data().resource_metrics  # type: ignore[union-attr]
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    durations = {
        (p.attributes or {}).get("db.operation.name"): cast(HistogramDataPoint, p).count
        for p in metrics["db.client.operation.duration"].data_points
    }
    assert durations == {"append": 1, "count": 1}
    for point in metrics["db.client.operation.duration"].data_points:  # the advisory buckets
        bounds = tuple(cast(HistogramDataPoint, point).explicit_bounds)
        assert bounds == telemetry.OPERATION_BUCKETS  # not the SDK's, made for milliseconds
    (counted,) = metrics["msglog.client.retries"].data_points
    assert counted.value == retries  # type: ignore[union-attr]


def test_an_id_that_looks_like_attributes_is_one_value(
    emitted: Emitted, shared_server: Callable[[str], EphemeralServer]
) -> None:
    exporter, _, _ = emitted
    hostile = 'x", "db.system.name": "evil\n{}*=msglog.outcome=ok'
    MessageLog(redis.Redis(port=shared_server("redis").port), hostile).add("user", "hi")
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.conversation.id"] == hostile
    assert attributes["db.system.name"] == "redis"
    assert set(attributes) == {
        "db.system.name", "db.operation.name", "gen_ai.conversation.id", "db.namespace",
        "server.address", "server.port", "msglog.last_seq", "msglog.outcome", "msglog.retries",
    }  # fmt: skip


def test_nothing_is_made_while_no_provider_is_set() -> None:
    """With the global providers unset (the API's proxies), an operation skips the
    wrapper; once the application sets one, it is used (a fresh interpreter: a provider
    set globally stays set)."""
    code = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from redis_msglog import telemetry\n"
        "assert telemetry._active() is None\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "assert telemetry._active() is not None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_configure_without_the_api_names_the_extra(monkeypatch: Any) -> None:
    from redis_msglog import MissingExtraError

    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(MissingExtraError, match=r"redis-msglog\[otel\]"):
        telemetry.configure(tracer_provider=object())


def test_a_web_request_is_a_server_span_over_its_operations(
    emitted: Emitted, shared_server: Callable[[str], EphemeralServer]
) -> None:
    import httpx

    from redis_msglog.web import create_app

    from .test_web import serving

    exporter, reader, _ = emitted
    client = redis.Redis(port=shared_server("redis").port)
    conversation = new_id()
    MessageLog(client, conversation).add("user", "hi")
    exporter.clear()
    app = create_app(client, authorize=lambda request, c, action: c == conversation)
    with serving(app) as base, httpx.Client(base_url=base, timeout=10) as http:
        assert http.get(f"/conversations/{conversation}/messages").status_code == 200
        assert http.get("/conversations/someone-else/messages").status_code == 403
    route = "/conversations/{conversation:path}/messages"
    served = spans_named(exporter, f"GET {route}")
    assert [(s.attributes or {}).get("http.response.status_code") for s in served] == [200, 403]
    ok = served[0]
    assert ok.kind is trace.SpanKind.SERVER
    assert (ok.attributes or {})["gen_ai.conversation.id"] == conversation
    children = [s for s in exporter.get_finished_spans() if s.parent is not None]
    assert {s.name for s in children if s.parent.span_id == ok.context.span_id} == {  # type: ignore[union-attr]
        "msglog read", "msglog count"
    }  # fmt: skip
    names = {
        m.name
        for rm in reader.get_metrics_data().resource_metrics  # type: ignore[union-attr]
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert {"http.server.request.duration", "db.client.operation.duration"} <= names


def test_an_append_in_doubt_is_counted(
    emitted: Emitted, shared_server: Callable[[str], EphemeralServer]
) -> None:
    from redis_msglog import AppendInDoubtError

    from ..support.proxy import ReplyDroppingProxy

    exporter, reader, _ = emitted
    with ReplyDroppingProxy(shared_server("redis").port) as proxy:
        proxy.drops = 1000  # every reply of the append script is lost
        log = MessageLog(
            redis.Redis(port=proxy.port), new_id(), retry=RetryPolicy(backoff=0.01, deadline=0.3)
        )
        with pytest.raises(AppendInDoubtError):
            log.add("user", "hi")
    (span,) = spans_named(exporter, "msglog append")
    assert (span.attributes or {})["msglog.outcome"] == "in_doubt"
    counted = {
        m.name: m.data.data_points[0].value  # type: ignore[union-attr]
        for rm in reader.get_metrics_data().resource_metrics  # type: ignore[union-attr]
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name.startswith("msglog.")
    }
    assert counted["msglog.client.appends_in_doubt"] == 1
    retries = (span.attributes or {})["msglog.retries"]
    assert isinstance(retries, int) and retries >= 1
    assert counted["msglog.client.retries"] == retries


def _points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        point
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == name
        for point in m.data.data_points
    ]


def test_follow_lag_and_the_read_caches_hits_are_measured(
    emitted: Emitted, shared_server: Callable[[str], EphemeralServer]
) -> None:
    from redis_msglog._core.read.cache import LOOKUPS

    _, reader, _ = emitted
    log = MessageLog(redis.Redis(port=shared_server("redis").port), new_id())
    log.add("user", "hi")
    before = dict(LOOKUPS)
    log.all(), log.all()  # a miss (nothing cached yet), then a hit
    follower = iter(log.follow(after=0))
    next(follower)
    (lag,) = _points(reader, "msglog.client.follow.lag")
    assert lag.count == 1 and 0 <= lag.sum < 60
    (behind,) = _points(reader, "msglog.client.follow.backlog")
    assert (behind.count, behind.sum) == (1, 0)  # caught up
    paged = MessageLog(log._redis, new_id(), page_size=2)
    paged.append_many([{"role": "user", "content": str(n)} for n in range(5)])
    pages = iter(paged.follow(after=0))
    next(pages), next(pages)  # the first page of 2: 3 entries still to come
    (behind,) = _points(reader, "msglog.client.follow.backlog")
    assert (behind.count, behind.sum, behind.max) == (2, 3, 3)
    lookups = {
        p.attributes["msglog.read_cache.result"]: p.value
        for p in _points(reader, "msglog.client.read_cache.lookups")
    }  # this process's totals, the reads of earlier tests included
    assert lookups == {"miss": before["miss"] + 1, "hit": before["hit"] + 1}


def test_open_event_streams_are_counted(emitted: Emitted) -> None:
    """The web app's hub counts a stream when it admits it and uncounts it when the
    stream gives its place back (test_web_hardening.py checks that every stream does,
    however it ends)."""
    from redis_msglog.web._logs import Logs
    from redis_msglog.web._stream import Hub

    _, reader, _ = emitted
    logs = Logs(redis.Redis(), {})  # never used: admitting reads nothing
    hub = Hub(logs, logs, limit=2)
    assert hub.admit("a") and hub.admit("a") and hub.admit("b")
    assert not hub.admit("c")  # refused: not counted
    assert [p.value for p in _points(reader, "msglog.web.event_streams")] == [3]
    for conversation in ("a", "b", "a"):
        hub.release(conversation)
    assert [p.value for p in _points(reader, "msglog.web.event_streams")] == [0]
