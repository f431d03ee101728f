"""Lay the tests out by what they need: one folder each for tests that
need no server, the contract on real servers, the faults, and the helpers they share.

    tests/no_server/  pure: no Redis at all (models, formats, the I/O-free core, lint, layout)
    tests/contract/   behaviour against real servers (every backend, both clients, the CLI,
                      the integrations, the web app)
    tests/faults/     failures: killed and stopped servers, proxies that drop replies,
                      cluster slot moves and failovers, damaged keys, cancellation, many
                      processes at once (and the checker of their histories)
    tests/support/    helpers, no tests: the local cluster, the TCP proxy, the history
                      oracle, the SDK validators

``tests/conftest.py`` stays at the top (its fixtures serve every folder). The script
``git mv``s each file, gives each folder an ``__init__.py``, rewrites the relative
imports (``from .conftest import`` -> ``from ..conftest import``, ``from .proxy import``
-> ``from ..support.proxy import``, ``from .test_formats import`` -> ``from
..no_server.test_formats import``...), the ``Path(__file__)`` roots of moved files, and
the ``tests/<file>.py`` mentions in the docs and sources (not in CHANGELOG.md: it is
history), then sorts the imports with ruff and regenerates the layout docs.

    python scripts/move_tests.py --dry-run   # print the plan
    python scripts/move_tests.py             # do it (then: pytest --collect-only -q)

A test file that is in no folder below stops the script with a guess for it; add it to
``FOLDERS`` (or pass ``--accept-guesses``).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

FOLDERS: dict[str, tuple[str, ...]] = {
    "no_server": (
        "test_errors",
        "test_formats",
        "test_integrations_lazy",
        "test_layout",
        "test_pipeline",
        "test_plans",
        "test_producer",
        "test_responses_items",
        "test_static",
    ),
    "contract": (
        "test_acl",
        "test_adapters",
        "test_bad_arguments",
        "test_bad_input",
        "test_benchmarks",
        "test_blobs",
        "test_cli",
        "test_cli_deletions",
        "test_cli_escapes",
        "test_cli_tools",
        "test_client_formats",
        "test_client_path",
        "test_codec_properties",
        "test_conditional",
        "test_contract",
        "test_demo",
        "test_edits",
        "test_follow",
        "test_hostile_content",
        "test_redis_private",
        "test_round_trips",
        "test_integration_google_adk",
        "test_integration_google_adk_runner",
        "test_integration_langchain",
        "test_integration_llama_index",
        "test_integration_llama_index_memory",
        "test_integration_migrate",
        "test_integration_ttl",
        "test_integration_loops",
        "test_integration_agent_framework",
        "test_integration_agent_framework_suite",
        "test_integration_openai_agents",
        "test_integration_strands",
        "test_integration_strands_agent",
        "test_strands_hostile",
        "test_integration_pydantic_ai",
        "test_models_parts",
        "test_older_format",
        "test_packaging",
        "test_plain_lane",
        "test_poisoned_writes",
        "test_read_cache",
        "test_redact",
        "test_testing_plugin",
        "test_view_cost",
        "test_web",
        "test_web_browser",
    ),
    "faults": (
        "test_cancellation",
        "test_cluster",
        "test_cluster_edits",
        "test_cluster_faults",
        "test_concurrency",
        "test_connections",
        "test_durability",
        "test_history",
        "test_hostile_state",
        "test_idempotency",
        "test_producers_bounded",
        "test_redact_followers",
        "test_server_failures",
    ),
    "support": ("cluster", "history", "proxy", "sdk_check"),
}
STAYS = {"__init__", "conftest"}  # at the top of tests/
PURPOSE = {
    "no_server": "Tests that need no server: pure code, the I/O-free core, lint and layout.",
    "contract": "The library's behaviour against real servers, every backend and both clients.",
    "faults": "Failures: servers killed or stopped, lost replies, cluster faults, damage.",
    "support": "Helpers the tests share (no tests here): cluster, proxy, history oracle.",
}
SERVER_WORDS = re.compile(
    r"\b(shared_server|shared_cluster|private_server|env|real_backend|backend|"
    r"EphemeralServer|LocalCluster|require_binary|make_env|backend_server)\b"
)
FAULT_WORDS = re.compile(r"\b(ReplyDroppingProxy|kill|failover|History|stop\(\))")


def guess(path: Path) -> str:
    """A folder for a test file that ``FOLDERS`` does not name (printed, never silent)."""
    text = path.read_text()
    if not path.name.startswith("test_"):
        return "support"
    if not SERVER_WORDS.search(text):
        return "no_server"
    return "faults" if FAULT_WORDS.search(text) else "contract"


def plan(accept_guesses: bool) -> dict[str, str]:
    """Module name -> folder for every ``tests/*.py`` that moves."""
    folder_of = {name: folder for folder, names in FOLDERS.items() for name in names}
    moves, guessed = {}, []
    for path in sorted(TESTS.glob("*.py")):
        name = path.stem
        if name in STAYS:
            continue
        if name not in folder_of:
            folder_of[name] = guess(path)
            guessed.append(f"  {path.name} -> {folder_of[name]}/")
        moves[name] = folder_of[name]
    if guessed:
        print("not in FOLDERS, guessed:\n" + "\n".join(guessed), file=sys.stderr)
        if not accept_guesses:
            raise SystemExit("add them to FOLDERS, or run again with --accept-guesses")
    return moves


def relative(importer_folder: str | None, module: str, moves: dict[str, str]) -> str:
    """The relative module path that ``importer_folder`` (``None``: the top of tests/)
    uses for ``module`` after the move."""
    target = moves.get(module)  # None: it stays at the top
    if importer_folder is None:
        return f".{target}.{module}" if target else f".{module}"
    if target == importer_folder:
        return f".{module}"
    return f"..{target}.{module}" if target else f"..{module}"


FROM_MODULE = re.compile(r"^(\s*)from \.(\w+) import ", re.MULTILINE)
FROM_PACKAGE = re.compile(r"^(\s*)from \. import (\w+)$", re.MULTILINE)
FILE_ROOT = "Path(__file__).resolve().parent.parent"


def rewrite_imports(path: Path, folder: str | None, moves: dict[str, str]) -> None:
    text = path.read_text()
    text = FROM_MODULE.sub(
        lambda m: f"{m.group(1)}from {relative(folder, m.group(2), moves)} import ", text
    )
    if folder is not None:
        text = FROM_PACKAGE.sub(lambda m: f"{m.group(1)}from .. import {m.group(2)}", text)
        text = text.replace(FILE_ROOT, "Path(__file__).resolve().parents[2]")
    path.write_text(text)


def rewrite_mentions(moves: dict[str, str]) -> list[str]:
    """``tests/<name>.py`` -> ``tests/<folder>/<name>.py`` in every tracked text file but
    the CHANGELOG. Returns the files changed."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    mention = re.compile(r"\btests/(" + "|".join(map(re.escape, moves)) + r")\.py\b")
    changed = []
    for name in listed:
        path = ROOT / name
        if name == "CHANGELOG.md" or path.suffix not in (".md", ".py", ".toml", ""):
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        new = mention.sub(lambda m: f"tests/{moves[m.group(1)]}/{m.group(1)}.py", text)
        if new != text:
            path.write_text(new)
            changed.append(name)
    return changed


def run(*command: str) -> None:
    print("+", " ".join(command))
    subprocess.run(command, cwd=ROOT, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description="Move tests/*.py into folders by need.")
    parser.add_argument("--dry-run", action="store_true", help="print the plan only")
    parser.add_argument("--accept-guesses", action="store_true")
    args = parser.parse_args()
    moves = plan(args.accept_guesses)
    for name, folder in sorted(moves.items(), key=lambda item: (item[1], item[0])):
        print(f"tests/{name}.py -> tests/{folder}/{name}.py")
    if args.dry_run:
        return 0
    for folder in sorted(set(moves.values())):
        (TESTS / folder).mkdir(exist_ok=True)
        init = TESTS / folder / "__init__.py"
        init.write_text(f'"""{PURPOSE[folder]}"""\n')
        run("git", "add", str(init.relative_to(ROOT)))
    for name, folder in moves.items():
        run("git", "mv", f"tests/{name}.py", f"tests/{folder}/{name}.py")
    for name, folder in moves.items():
        rewrite_imports(TESTS / folder / f"{name}.py", folder, moves)
    rewrite_imports(TESTS / "conftest.py", None, moves)
    print("mentions rewritten in:", ", ".join(rewrite_mentions(moves)) or "none")
    run(sys.executable, "-m", "ruff", "check", "--select", "I", "--fix", "-q", "tests")
    run(sys.executable, "-m", "ruff", "format", "-q", "tests")
    if (ROOT / "scripts" / "layout.py").exists():
        run(sys.executable, "scripts/layout.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
