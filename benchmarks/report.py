"""Figures, targets, the markdown table and the chart."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from . import contenders as c
from .floor import OF_BOUND


@dataclass
class Workload:
    title: str
    unit: str
    higher_is_better: bool
    samples: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    reference: tuple[str, float] | None = None  # ratios against this instead of raw

    def add(self, name: str, samples: list[float]) -> None:
        self.samples[name] = samples

    def value(self, name: str) -> float | None:
        samples = self.samples.get(name)
        return statistics.median(samples) if samples else None

    @property
    def baseline(self) -> str:
        return self.reference[0] if self.reference else c.RAW

    def baseline_of(self, name: str) -> str:
        """Whom ``name`` is compared with: the reference, else raw redis-py of its own
        flavour (an asyncio contender with raw ``redis.asyncio`` when it ran)."""
        if self.reference:
            return self.reference[0]
        if name in c.ASYNC_NAMES and c.RAW_ASYNC in self.samples:
            return c.RAW_ASYNC
        return c.RAW if c.RAW in self.samples else c.RAW_ASYNC

    def ratio(self, name: str) -> float | None:
        """``value / baseline``: above 1 is faster for rates, slower for times."""
        value = self.value(name)
        base = self.reference[1] if self.reference else self.value(self.baseline_of(name))
        return None if value is None or not base else value / base

    def as_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "baseline": self.baseline,
            "reference": self.reference,
            "median": {n: self.value(n) for n in self.samples},
            "ratio_to_baseline": {n: self.ratio(n) for n in self.samples},
            "baseline_of": {n: self.baseline_of(n) for n in self.samples},
            "samples": self.samples,
            "notes": self.notes,
        }


@dataclass
class Target:
    name: str
    ratio: float | None
    op: str  # ">=" or "<="
    bound: float

    @property
    def met(self) -> bool | None:
        if self.ratio is None:
            return None
        return self.ratio >= self.bound if self.op == ">=" else self.ratio <= self.bound

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ratio": self.ratio, "op": self.op, "bound": self.bound,
                "met": self.met}  # fmt: skip


def _find(workloads: list[Workload], prefix: str) -> list[Workload]:
    return [w for w in workloads if w.title.startswith(prefix)]


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def check_targets(workloads: list[Workload]) -> list[Target]:
    """Issue 36's decisions (docs/benchmarks.md, "The targets"), each a ratio measured in
    this run, then issue 28's that it kept: decision 1, the sync append against the
    ceiling the design's floor allows (workload 13, ``benchmarks.floor``); decision 2,
    the cold reads against raw paging + ``orjson.loads``; decision 3, the warm ``all()``
    against two ``count()`` and one and a half copies of its list (workload 12, at each
    size); decision 4, 8 processes against raw."""
    (single,) = _find(workloads, "1.")
    (batch,) = _find(workloads, "2.")
    (procs,) = _find(workloads, "3.")
    (many,) = _find(workloads, "4.")
    small, large = _find(workloads, "5.")
    (everything,) = _find(workloads, "6.")
    (mem,) = _find(workloads, "7. ")
    (cpu,) = _find(workloads, "11.")
    floor = _find(workloads, "13.")
    script = floor[0].ratio(c.OURS) if floor else None
    ceiling = floor[0].value(OF_BOUND) if floor else None
    targets = [
        Target("D1 single append: msglog sync / raw XADD, over the floor's ceiling", ceiling,
               ">=", 0.95),
        Target("D1 append script's server time / the design's floor (workload 13)",
               script, "<=", 1.1),
        Target(f"D2 {small.title} (cold): msglog sync / raw", small.ratio(c.OURS), "<=", 1.6),
        Target(f"D2 {large.title} (cold): msglog sync / raw", large.ratio(c.OURS), "<=", 1.6),
        Target(f"D2 {everything.title} (cold): msglog sync / raw", everything.ratio(c.OURS),
               "<=", 1.95),
        *(
            Target(f"D3 {warm.title}: msglog sync / (2 count() + 1.5 list copy)",
                   warm.ratio(c.OURS), "<=", 1.0)
            for warm in _find(workloads, "12.")
        ),
        Target("D4 8 processes, aggregate: msglog sync / raw", procs.ratio(c.OURS), ">=", 0.75),
        Target("single append: msglog async / raw redis.asyncio XADD",
               single.ratio(c.OURS_ASYNC), ">=", 0.85),
        Target("server CPU per append (INFO cpu): msglog / raw XADD", cpu.ratio(c.OURS),
               "<=", 1.8),
        Target("append_many(100): msglog sync / raw pipelined", batch.ratio(c.OURS), ">=", 1.0),
        Target(f"{many.title}: msglog async / raw redis.asyncio",
               many.ratio(c.OURS_ASYNC), ">=", 1.0),
        Target("memory per message: msglog / raw XADD of the same bytes",
               _div(mem.value(c.OURS), mem.value(c.RAW)), "<=", 1.05),
    ]  # fmt: skip
    for work in workloads:
        ours = [v for n in (c.OURS, c.OURS_ASYNC) if (v := work.value(n)) is not None]
        peers = [v for n in c.PEERS if (v := work.value(n)) is not None]
        if not ours or not peers:
            continue
        best_ours = max(ours) if work.higher_is_better else min(ours)
        best_peer = max(peers) if work.higher_is_better else min(peers)
        lead = best_ours / best_peer if work.higher_is_better else best_peer / best_ours
        targets.append(Target(f"{work.title}: best msglog vs best peer (x ahead)", lead, ">=", 1.0))
    return targets


def _fmt(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def markdown(workloads: list[Workload], targets: list[Target], meta: dict[str, Any]) -> str:
    names = [c.RAW, c.OURS, c.OURS_NO_RETRY, c.RAW_ASYNC, c.OURS_ASYNC, *c.PEERS]
    lines = [
        "| workload | unit | " + " | ".join(names) + " |",
        "|---|---|" + "---:|" * len(names),
    ]
    for work in workloads:
        cells = []
        for name in names:
            value, ratio = work.value(name), work.ratio(name)
            cell = _fmt(value)
            own_baseline = name == work.baseline_of(name) and not work.reference
            if value is not None and not own_baseline and ratio is not None:
                cell += f" ({ratio:.2f}x)"
            if name in work.notes:
                cell += f" {work.notes[name]}"
            cells.append(cell)
        unit = work.unit + ("" if work.higher_is_better else ", lower is better")
        if work.reference:
            unit += f"; ratios to {work.reference[0]} ({_fmt(work.reference[1])})"
        lines.append(f"| {work.title} | {unit} | " + " | ".join(cells) + " |")
    lines += ["", "| target | measured | bound | met |", "|---|---:|---:|:---:|"]
    for target in targets:
        met = {True: "yes", False: "**no**", None: "—"}[target.met]
        lines.append(
            f"| {target.name} | {_fmt(target.ratio)} | {target.op} {target.bound} | {met} |"
        )
    lines += [
        "",
        "Ratios in cells are to raw redis-py of the same flavour (sync: the first column; "
        "asyncio: raw redis.asyncio, where it ran) unless the unit names another. "
        f"Medians of {meta['sizes']['runs']} runs; {meta['mode']} mode, {meta['seconds']} s; "
        f"server {meta['server']}, Python {meta['python']}, redis-py {meta['redis-py']} "
        f"({meta['parser']} parser), {meta['date']}. "
        "'—': the contender cannot run that workload (or is not installed).",
        "",
    ]
    return "\n".join(lines)


def write_chart(workloads: list[Workload], path: str, meta: dict[str, Any]) -> None:
    """One panel per workload: each contender relative to raw redis-py (1.0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {c.RAW: "#888888", c.RAW_ASYNC: "#bbbbbb", c.OURS: "#d62728",
               c.OURS_ASYNC: "#ff7f0e", c.OURS_NO_RETRY: "#f4a3a3"}  # fmt: skip
    columns = 3
    rows = -(-len(workloads) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(15, 3.2 * rows))
    for ax, work in zip(axes.flat, workloads, strict=False):
        names = [n for n in work.samples if work.ratio(n) is not None]
        ratios = [work.ratio(n) or 0.0 for n in names]
        ax.barh(names, ratios, color=[colours.get(n, "#1f77b4") for n in names])
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.invert_yaxis()
        better = "higher is better" if work.higher_is_better else "lower is better"
        ax.set_title(f"{work.title}\n({work.unit} / {work.baseline}; {better})", fontsize=9)
        ax.tick_params(labelsize=7)
        if max(ratios, default=1) > 20:
            ax.set_xscale("log")
    for ax in list(axes.flat)[len(workloads) :]:
        ax.axis("off")
    fig.suptitle(
        f"redis-msglog vs raw redis-py and peers ({meta['mode']}, server {meta['server']}, "
        f"{meta['date']})",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
