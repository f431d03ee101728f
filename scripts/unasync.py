"""Generate the sync client from the asyncio client (the pattern httpcore uses).

``redis_msglog/_aio.py`` is the source; ``redis_msglog/_sync.py`` is written from it by
the token replacements below, so the two clients cannot drift. What truly differs between
the flavors (threads vs tasks, sleeping, cancellation, the hook call) is hand-written,
small and side by side, in ``_io_async.py`` / ``_io_sync.py`` and ``_subscription.py``.

    python scripts/unasync.py          # regenerate
    python scripts/unasync.py --check  # exit 1 if the checked-in copy is stale (tests run it)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "redis_msglog"
SOURCE, TARGET = PACKAGE / "_aio.py", PACKAGE / "_sync.py"

# (pattern, replacement), applied in order; patterns match whole words.
REPLACEMENTS = [
    (r"async def ", "def "),
    (r"async with ", "with "),
    (r"async for ", "for "),
    (r"await ", ""),
    (r"AsyncIterator", "Iterator"),
    (r"AsyncMessageLog", "MessageLog"),
    (r"AsyncSubscription", "Subscription"),
    (r"AsyncRouter", "Router"),
    (r"AsyncOnAppend", "OnAppend"),
    (r"AsyncOnCommit", "OnCommit"),
    (r"__aenter__", "__enter__"),
    (r"__aexit__", "__exit__"),
    (r"aclose", "close"),
    (r"redis\.asyncio\.cluster", "redis.cluster"),
    (r"redis\.asyncio", "redis"),
    (r"_io_async", "_io_sync"),
    (r"\(asyncio\)", "(sync)"),
]
HEADER = "# Generated from _aio.py by scripts/unasync.py: edit that file, then run the script.\n"
DOCSTRING = '''"""MessageLog: the synchronous client, a thin shell over the I/O-free core.

Generated from ``_aio.py``, the single source of both clients (see there).
"""'''


def generate(source: str) -> str:
    """The sync module's text for the asyncio module's ``source``."""
    body = source.split('"""', 2)[2]  # the module docstring is the sync one
    text = DOCSTRING + body
    for pattern, replacement in REPLACEMENTS:
        word = rf"(?<![\w.]){pattern}" if pattern[0].isalpha() else pattern
        text = re.sub(word, replacement, text)
    return HEADER + text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the sync copy is stale")
    args = parser.parse_args()
    expected = generate(SOURCE.read_text(encoding="utf-8"))
    if args.check:
        if TARGET.read_text(encoding="utf-8") != expected:
            print(f"{TARGET} is stale: run python scripts/unasync.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(expected, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
