"""Generate the sync client from the asyncio client (the pattern httpcore uses).

``redis_msglog/_async/`` is the source; ``redis_msglog/_sync/`` is written from it, file
by file, by the token replacements below, so the two clients cannot drift. What truly
differs between the flavors (threads vs tasks, sleeping, cancellation, the hook call) is
hand-written, small and side by side, in ``_io/io_async.py`` / ``_io/io_sync.py`` and
``_io/subscription.py``.

    python scripts/unasync.py          # regenerate
    python scripts/unasync.py --check  # exit 1 if a checked-in file is stale (tests run it)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "redis_msglog"
SOURCE, TARGET = PACKAGE / "_async", PACKAGE / "_sync"

# (pattern, replacement), applied in order; patterns match whole words.
REPLACEMENTS = [
    (r"async def ", "def "),
    (r"async with ", "with "),
    (r"async for ", "for "),
    (r"await ", ""),
    (r"Async(?=[A-Z])", ""),  # AsyncMessageLog, AsyncIterator, AsyncRouter, AsyncOnAppend...
    (r"__aenter__", "__enter__"),
    (r"__aexit__", "__exit__"),
    (r"__aiter__", "__iter__"),
    (r"__anext__", "__next__"),
    (r"aclose", "close"),
    (r"redis\.asyncio\.cluster", "redis.cluster"),
    (r"redis\.asyncio", "redis"),
    (r"io_async", "io_sync"),  # from .._io import io_async
    (r"\(asyncio\)", "(sync)"),
]
INIT_DOCSTRING = '''"""The sync client, :class:`MessageLog`, generated file by file from
``redis_msglog/_async/`` (the single source of both clients: see there)."""'''


def header(name: str) -> str:
    return f"# Generated from _async/{name} by scripts/unasync.py: edit that file, then run it.\n"


def generate(name: str, source: str) -> str:
    """The sync module's text for the asyncio module ``name`` whose text is ``source``."""
    text = source
    if name == "__init__.py":  # the folder's docstring is the sync one
        text = INIT_DOCSTRING + source.split('"""', 2)[2]
    for pattern, replacement in REPLACEMENTS:
        word = rf"(?<![\w.]){pattern}" if pattern[0].isalpha() else pattern
        text = re.sub(word, replacement, text)
    return header(name) + text


def expected_files() -> dict[Path, str]:
    """Every file of the sync folder, and its text."""
    return {
        TARGET / path.name: generate(path.name, path.read_text(encoding="utf-8"))
        for path in sorted(SOURCE.glob("*.py"))
    }


def stale(expected: dict[Path, str]) -> list[Path]:
    """The sync files that differ from what the source makes of them, are missing, or
    have no source any more."""
    found = set(TARGET.glob("*.py"))
    differ = [
        path
        for path, text in expected.items()
        if path not in found or path.read_text(encoding="utf-8") != text
    ]
    return differ + sorted(found - set(expected))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the sync copy is stale")
    args = parser.parse_args()
    expected = expected_files()
    if args.check:
        outdated = stale(expected)
        for path in outdated:
            print(f"{path} is stale: run python scripts/unasync.py", file=sys.stderr)
        return 1 if outdated else 0
    TARGET.mkdir(exist_ok=True)
    for path in sorted(set(TARGET.glob("*.py")) - set(expected)):
        path.unlink()  # its source is gone
    for path, text in expected.items():
        path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
