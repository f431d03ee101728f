"""The ``msglog`` command (also ``python -m redis_msglog``)."""

from __future__ import annotations

import argparse
import sys

from .errors import MessageLogError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="msglog", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="workers share one conversation; verify the log")
    demo.add_argument("--url", help="Redis URL (default $REDIS_URL, else a private server)")
    demo.add_argument("--workers", type=int, default=4)
    demo.add_argument("--turns", type=int, default=5)
    args = parser.parse_args(argv)
    from .demo import run_demo

    try:
        return run_demo(
            getattr(args, "url", None), getattr(args, "workers", 4), getattr(args, "turns", 5)
        )
    except MessageLogError as exc:
        print(f"msglog: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
