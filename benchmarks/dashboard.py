"""The metrics as a dashboard would show them (docs/observability.md): a short, lively
workload on a private server (writers, a slow follower that falls behind and catches up,
readers, a burst of killed connections that the retry policy waits out), measured with
the OpenTelemetry SDK's in-memory reader once a second and drawn as Grafana-style panels.

    python -m benchmarks.dashboard --out docs/observability-dashboard.png

Needs the SDK (``opentelemetry-sdk``, in the test extras) and matplotlib (``bench``)."""

from __future__ import annotations

import argparse
import threading
import time
from collections import defaultdict
from contextlib import ExitStack
from typing import Any

import redis
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from redis_msglog import MessageLog, telemetry

from .server import server_url

USAGE = {"input_tokens": 900, "cached_tokens": 300, "output_tokens": 120, "cost": 0.002,
         "currency": "USD"}  # fmt: skip


def _writer(url: str, conversation: str, stop: threading.Event, pause: float) -> None:
    log = MessageLog(redis.Redis.from_url(url), conversation)
    n = 0
    while not stop.is_set():
        n += 1
        log.add("user", f"question {n}")
        log.append({"role": "assistant", "content": f"answer {n}", "usage": USAGE})
        time.sleep(pause)


def _follower(url: str, conversation: str, stop: threading.Event, slow: threading.Event) -> None:
    log = MessageLog(redis.Redis.from_url(url), conversation, page_size=20)
    for _ in log.follow(after=0, reconnect_within=None):
        if stop.is_set():
            return
        if slow.is_set():  # a consumer that falls behind, then catches up
            time.sleep(0.02)


def _reader(url: str, conversations: list[str], stop: threading.Event) -> None:
    client = redis.Redis.from_url(url)
    while not stop.is_set():
        for conversation in conversations:
            MessageLog(client, conversation).all()
        time.sleep(0.05)


class Series:
    """Per second: operations and latency quantiles by operation, and the rest."""

    def __init__(self) -> None:
        self.t: list[float] = []
        self.ops: dict[str, list[float]] = defaultdict(list)
        self.p99: dict[str, list[float]] = defaultdict(list)
        self.p50: dict[str, list[float]] = defaultdict(list)
        self.lag: list[float] = []
        self.backlog: list[float] = []
        self.hit_ratio: list[float] = []
        self.retries: list[float] = []
        self._last: dict[Any, Any] = {}

    def sample(self, reader: InMemoryMetricReader, at: float) -> None:
        data = reader.get_metrics_data()
        points: dict[tuple[str, Any], Any] = {}
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        key = tuple(sorted((point.attributes or {}).items()))
                        points[(metric.name, key)] = point
        self.t.append(at)
        for (name, attributes), point in points.items():
            if name != "db.client.operation.duration":
                continue
            operation = dict(attributes).get("db.operation.name", "?")
            count, buckets = self._delta((name, attributes), point)
            self.ops[operation].append(count)
            self.p50[operation].append(_quantile(0.5, buckets, point.explicit_bounds))
            self.p99[operation].append(_quantile(0.99, buckets, point.explicit_bounds))
        self.lag.append(self._mean(points, "msglog.client.follow.lag"))
        self.backlog.append(self._mean(points, "msglog.client.follow.backlog", 0.0))
        hits = self._counter(points, "msglog.client.read_cache.lookups", "hit")
        misses = self._counter(points, "msglog.client.read_cache.lookups", "miss")
        self.hit_ratio.append(hits / (hits + misses) if hits + misses else float("nan"))
        self.retries.append(self._counter(points, "msglog.client.retries", None))
        for operation, values in self.ops.items():  # an operation seen late: zeros before
            for series in (values, self.p50[operation], self.p99[operation]):
                while len(series) < len(self.t):
                    series.insert(0, float("nan") if series is not values else 0.0)

    def _delta(self, key: Any, point: Any) -> tuple[float, list[int]]:
        before = self._last.get(key)
        counts = list(point.bucket_counts)
        self._last[key] = counts
        if before is None:
            return float(sum(counts)), counts
        delta = [a - b for a, b in zip(counts, before, strict=True)]
        return float(sum(delta)), delta

    def _mean(self, points: dict[Any, Any], name: str, idle: float = float("nan")) -> float:
        """The mean of what a histogram recorded since the last sample (``idle``: none)."""
        found = [p for (n, _), p in points.items() if n == name]
        if not found:
            return float("nan")
        count, total = found[0].count, found[0].sum
        before = self._last.get(name, (0, 0.0))
        self._last[name] = (count, total)
        return (total - before[1]) / (count - before[0]) if count > before[0] else idle

    def _counter(self, points: dict[Any, Any], name: str, result: str | None) -> float:
        found = [
            p.value
            for (n, attributes), p in points.items()
            if n == name
            and (result is None or dict(attributes).get("msglog.read_cache.result") == result)
        ]
        key = (name, result)
        total = float(sum(found))
        before: float = self._last.get(key, 0.0)
        self._last[key] = total
        return total - before


def _quantile(q: float, buckets: list[int], bounds: Any) -> float:
    """``histogram_quantile`` as Prometheus computes it: linear within the bucket."""
    total = sum(buckets)
    if not total:
        return float("nan")
    rank, seen, lower = q * total, 0.0, 0.0
    for count, upper in zip(buckets, [*bounds, bounds[-1] * 2], strict=True):
        if seen + count >= rank:
            return float(lower + (upper - lower) * ((rank - seen) / count if count else 0.0))
        seen, lower = seen + count, float(upper)
    return float(bounds[-1])


def run(url: str, seconds: int) -> Series:
    reader = InMemoryMetricReader()
    telemetry.configure(meter_provider=MeterProvider(metric_readers=[reader]))
    stop, slow = threading.Event(), threading.Event()
    conversations = [f"dash-{n}" for n in range(4)]
    threads = [
        threading.Thread(target=_writer, args=(url, c, stop, 0.004 * (1 + n)), daemon=True)
        for n, c in enumerate(conversations)
    ]
    threads.append(
        threading.Thread(target=_follower, args=(url, conversations[0], stop, slow), daemon=True)
    )
    threads.append(
        threading.Thread(target=_reader, args=(url, conversations[1:3], stop), daemon=True)
    )
    for thread in threads:
        thread.start()
    admin = redis.Redis.from_url(url)
    series, started = Series(), time.monotonic()
    for second in range(seconds):
        time.sleep(max(0.0, started + second + 1 - time.monotonic()))
        if second == seconds // 4:
            slow.set()
        if second == seconds // 2:
            slow.clear()
        if second in (2 * seconds // 3, 2 * seconds // 3 + 1):  # a failover's worth of kills
            admin.client_kill_filter(_type="normal", skipme=True)
        series.sample(reader, second + 1)
    stop.set()
    telemetry.configure()
    return series


def draw(series: Series, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "figure.facecolor": "#111217", "axes.facecolor": "#181b1f", "axes.edgecolor": "#2c3235",
        "axes.labelcolor": "#ccccdc", "text.color": "#ccccdc", "xtick.color": "#8e8e8e",
        "ytick.color": "#8e8e8e", "grid.color": "#2c3235", "font.size": 9,
    })  # fmt: skip
    figure, axes = plt.subplots(2, 3, figsize=(15, 7.5), constrained_layout=True)
    figure.suptitle("redis-msglog: the library's own metrics (OpenTelemetry)", fontsize=12)
    t = series.t
    top = sorted(series.ops, key=lambda op: -sum(series.ops[op]))[:5]
    panels: list[tuple[Any, str, str]] = [
        (axes[0][0], "operations / s  (db.client.operation.duration count)", "ops/s"),
        (axes[0][1], "p99 latency by operation  (db.client.operation.duration)", "ms"),
        (axes[0][2], "p50 latency by operation", "ms"),
        (axes[1][0], "follower lag  (msglog.client.follow.lag, mean)", "ms"),
        (axes[1][1], "follower backlog  (msglog.client.follow.backlog, mean)", "entries"),
        (axes[1][2], "read cache hit ratio; retries / s", ""),
    ]
    for axis, title, unit in panels:
        axis.set_title(title, loc="left", fontsize=9)
        axis.set_ylabel(unit)
        axis.grid(True, linewidth=0.6)
        axis.set_xlabel("seconds")
    for op in top:
        axes[0][0].plot(t, series.ops[op], label=op, linewidth=1.4)
        axes[0][1].plot(t, [v * 1000 for v in series.p99[op]], label=op, linewidth=1.4)
        axes[0][2].plot(t, [v * 1000 for v in series.p50[op]], label=op, linewidth=1.4)
    for axis in axes[0]:
        axis.legend(fontsize=8, facecolor="#181b1f", edgecolor="#2c3235")
    axes[1][0].plot(t, [v * 1000 for v in series.lag], color="#f2cc0c", linewidth=1.4)
    axes[1][1].fill_between(t, series.backlog, color="#8ab8ff", alpha=0.35)
    axes[1][1].plot(t, series.backlog, color="#8ab8ff", linewidth=1.4)
    axes[1][2].plot(t, series.hit_ratio, color="#73bf69", linewidth=1.4, label="hit ratio")
    twin = axes[1][2].twinx()
    twin.bar(t, series.retries, color="#f2495c", alpha=0.7, label="retries / s")
    twin.tick_params(colors="#8e8e8e")
    axes[1][2].set_ylim(0, 1.05)
    axes[1][2].legend(loc="lower left", fontsize=8, facecolor="#181b1f", edgecolor="#2c3235")
    twin.legend(loc="lower right", fontsize=8, facecolor="#181b1f", edgecolor="#2c3235")
    figure.savefig(out, dpi=100)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="observability-dashboard.png")
    parser.add_argument("--seconds", type=int, default=40)
    parser.add_argument("--url", help="a server to use (default: a private one)")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        series = run(server_url(stack, args.url), args.seconds)
    draw(series, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
