"""The benchmark harness runs end to end (tiny sizes; peers not installed are skipped):
its figures are not checked here, only that every workload and target is produced."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson


def test_benchmarks_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    table = tmp_path / "results.md"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--smoke",
            "--json",
            str(out),
            "--markdown",
            str(table),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    document = orjson.loads(out.read_bytes())
    titles = [w["title"] for w in document["workloads"]]
    assert [t.split(".")[0] for t in titles] == [
        *["1", "2", "3", "4", "5", "5", "6", "7", "8"],
        # the conversation with images (appends, all(), memory per image), inline then
        # with its images stored off the rows
        *["9", "9", "9", "9", "9", "9"],
    ]
    assert all("(inline)" in t for t in titles[-6:-3])
    assert all("(offload)" in t for t in titles[-3:])
    for workload in document["workloads"]:
        assert workload["median"].get("msglog sync") or workload["median"].get("msglog async")
    three = document["workloads"][2]
    assert three["notes"]["msglog sync"] == "correct"
    (trips,) = [w for w in document["workloads"] if w["title"].startswith("8.")]
    assert trips["median"]["msglog sync"] == 1.0  # one round trip
    inline = document["workloads"][-4]["median"]["msglog sync"]
    assert 200 * 1024 * 4 / 3 < inline < 200 * 1024 * 2  # base64, allocator rounding
    offloaded = document["workloads"][-1]["median"]["msglog sync"]
    assert 200 * 1024 <= offloaded < 200 * 1024 * 4 / 3  # raw bytes in the blobs hash
    assert all(t["ratio"] is not None for t in document["targets"])
    assert "| target | measured | bound | met |" in table.read_text()


def test_edits_benchmark_smoke_run() -> None:
    from benchmarks import edits

    results = edits.main(["--small", "1000", "--large", "2000", "--calls", "3"])
    assert set(results) >= {
        "last(50), 2,000 messages, edited",
        "raw XREVRANGE + orjson.loads, 2,000 messages",
        "edited: large / small (flat = 1.0)",
    }
    assert all(value > 0 for value in results.values())
