"""An A/B of the speed targets' workloads: this tree against another commit, in alternation.

    python -m benchmarks.compare REF [--rounds 5] [--appends 2000] [--size 20000] [--url ...]

Exports ``REF`` (any git revision) to a temporary folder, starts one server (or uses
``--url``), and runs, from each tree in turn, ``python -m benchmarks.client_path --rounds
1`` (the appends) and ``python -m benchmarks.read_path --rounds 1`` (the reads: cold
``last(50)``, cold ``all()`` of ``--size`` messages, the warm ``all()`` after one new
message), ``rounds`` times, swapping which tree goes first each round, so both see the
same server, the same machine load and the same drift. A tree without ``read_path``
(older than it) runs this tree's, with its own package. Prints each row's medians for
both trees, and each row over its baseline measured in the same round by the same tree
(raw ``XADD``; raw ``XREVRANGE``/``XRANGE`` + ``orjson.loads``; one ``count()``): the
ratios the speed targets are written in, and far steadier than the figures on a busy
machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from contextlib import ExitStack
from io import BytesIO
from pathlib import Path

from benchmarks.server import server_url

HERE = Path(__file__).resolve().parent.parent
Rows = dict[str, list[tuple[float, float, float]]]  # row -> (client CPU, wall, server CPU)
Bases = dict[str, str]  # row -> the row it is divided by (read_path's last column)


def export(ref: str, into: Path) -> Path:
    """The tree of ``ref`` written under ``into`` (``git archive``: no worktree to clean)."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref], cwd=HERE, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def one_round(tree: Path, url: str, appends: int, rows: Rows) -> None:
    """One ``client_path`` round of ``tree`` (its own package first on the path)."""
    options = ["--appends", str(appends), "--rounds", "1"]
    run_module(tree, url, "client_path", options, rows, {})


def run_module(
    tree: Path, url: str, module: str, options: list[str], rows: Rows, bases: Bases
) -> None:
    """One round of ``benchmarks.<module>`` from ``tree``; its table's rows into ``rows``
    (and a fifth cell, a row's baseline, into ``bases``)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-m", f"benchmarks.{module}", "--url", url, *options]
    output = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if output.returncode:
        raise SystemExit(f"{tree}: {module} failed:\n{output.stderr}")
    for line in output.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) in (4, 5) and cells[1].replace(".", "", 1).isdigit():
            figures = (float(cells[1]), float(cells[2]), float(cells[3]))
            rows.setdefault(cells[0], []).append(figures)
            if len(cells) == 5 and cells[4]:
                bases[cells[0]] = cells[4]


def _raw_row(name: str) -> str:
    return "raw redis.asyncio XADD" if "async" in name else "raw redis-py XADD"


def _per_raw(rows: Rows, name: str, i: int) -> float:
    """The median over rounds of the row's figure ``i`` over raw ``XADD``'s in that round."""
    raw = rows[_raw_row(name)]
    return statistics.median(s[i] / r[i] for s, r in zip(rows[name], raw, strict=True))


def report(ref: str, before: Rows, after: Rows) -> None:
    """Medians of both trees, and each row over raw XADD of the same round and tree (the
    ratios the benchmarks' targets are written in, steadier than the figures)."""
    print(f"| per append (median of rounds) | client CPU µs, {ref} | here | server CPU µs, "
          f"{ref} | here | client CPU / raw XADD, {ref} | here | server CPU / raw XADD, "
          f"{ref} | here |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in after:
        if name not in before:
            print(f"| {name} | | (new row) | | | | | | |")
            continue
        cells = []
        for i in (0, 2):
            old, new = (statistics.median(s[i] for s in rows[name]) for rows in (before, after))
            cells.append(f"{old:.1f} | {new:.1f}")
        for i in (0, 2):
            cells.append(f"{_per_raw(before, name, i):.2f} | {_per_raw(after, name, i):.2f}")
        print(f"| {name} | {' | '.join(cells)} |")


def _ratio(rows: Rows, name: str, base: str, i: int) -> float:
    """The median over rounds of the row's figure ``i`` over its baseline's in that round."""
    return statistics.median(s[i] / b[i] for s, b in zip(rows[name], rows[base], strict=True))


def report_reads(ref: str, before: Rows, after: Rows, bases: Bases) -> None:
    """The reads' table: medians of both trees, and each row over its baseline of the
    same round and tree (client CPU and wall: the targets are wall-time ratios)."""
    print(f"\n| per call (median of rounds) | client CPU µs, {ref} | here | wall µs, {ref} | "
          f"here | client CPU / baseline, {ref} | here | wall / baseline, {ref} | here | "
          "baseline |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in after:
        if name not in before:
            print(f"| {name} | | (new row) | | | | | | | |")
            continue
        cells = []
        for i in (0, 1):
            old, new = (statistics.median(s[i] for s in rows[name]) for rows in (before, after))
            cells.append(f"{old:.1f} | {new:.1f}")
        base = bases.get(name)
        for i in (0, 1):
            if base is None or base not in before or base not in after:
                cells.append(" | ")
                continue
            ratios = (_ratio(rows, name, base, i) for rows in (before, after))
            cells.append(" | ".join(f"{r:.2f}" for r in ratios))
        print(f"| {name} | {' | '.join(cells)} | {base or ''} |")


def _with_reads(tree: Path) -> Path:
    """``tree``, given this tree's ``read_path`` if it has none (it predates it)."""
    target = tree / "benchmarks" / "read_path.py"
    if not target.exists():
        shutil.copy(HERE / "benchmarks" / "read_path.py", target)
    return tree


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.compare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("ref", help="the git revision to compare with (e.g. main~3)")
    parser.add_argument("--url", help="an existing server (default: start a private one)")
    parser.add_argument("--appends", type=int, default=2000, help="appends per round")
    parser.add_argument("--size", type=int, default=20_000, help="messages read by all()")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each tree")
    args = parser.parse_args(argv)
    before: Rows = {}
    after: Rows = {}
    reads: tuple[Rows, Rows] = ({}, {})
    bases: Bases = {}
    with ExitStack() as stack:
        other = export(args.ref, Path(stack.enter_context(tempfile.TemporaryDirectory())))
        url = server_url(stack, args.url)
        read_options = ["--size", str(args.size), "--rounds", "1"]
        for round_ in range(args.rounds):
            order = [(_with_reads(other), before, reads[0]), (HERE, after, reads[1])]
            for tree, rows, read_rows in order if round_ % 2 == 0 else order[::-1]:
                one_round(tree, url, args.appends, rows)
                run_module(tree, url, "read_path", read_options, read_rows, bases)
    report(args.ref, before, after)
    report_reads(args.ref, *reads, bases)


if __name__ == "__main__":
    main()
