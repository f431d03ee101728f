"""An A/B of the client path: this tree against another commit, in alternation, in one run.

    python -m benchmarks.compare REF [--rounds 5] [--appends 2000] [--url redis://...]

Exports ``REF`` (any git revision) to a temporary folder, starts one server (or uses
``--url``), and runs ``python -m benchmarks.client_path --rounds 1`` from each tree in turn,
``rounds`` times, swapping which goes first each round, so both see the same server, the
same machine load and the same drift. Prints each row's medians for both trees, and each row
over raw ``XADD`` measured in the same round by the same tree: the ratios the speed
targets are written in, and far steadier than the figures on a busy machine.
"""

from __future__ import annotations

import argparse
import os
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
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-m", "benchmarks.client_path", "--url", url]
    command += ["--appends", str(appends), "--rounds", "1"]
    output = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if output.returncode:
        raise SystemExit(f"{tree}: client_path failed:\n{output.stderr}")
    for line in output.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 4 and cells[1].replace(".", "", 1).isdigit():
            figures = (float(cells[1]), float(cells[2]), float(cells[3]))
            rows.setdefault(cells[0], []).append(figures)


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.compare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("ref", help="the git revision to compare with (e.g. main~3)")
    parser.add_argument("--url", help="an existing server (default: start a private one)")
    parser.add_argument("--appends", type=int, default=2000, help="appends per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each tree")
    args = parser.parse_args(argv)
    before: Rows = {}
    after: Rows = {}
    with ExitStack() as stack:
        other = export(args.ref, Path(stack.enter_context(tempfile.TemporaryDirectory())))
        url = server_url(stack, args.url)
        for round_ in range(args.rounds):
            order = [(other, before), (HERE, after)]
            for tree, rows in order if round_ % 2 == 0 else order[::-1]:
                one_round(tree, url, args.appends, rows)
    report(args.ref, before, after)


if __name__ == "__main__":
    main()
