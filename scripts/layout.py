"""Regenerate the parts of the docs that describe the tree, from the tree.

- docs/operations.md, "How the code is laid out": each module of ``redis_msglog`` and each
  script in ``lua/``, its line count and the first sentence of its docstring (a Lua file: of
  its opening comment).
- docs/testing.md, "The test files": each ``tests/`` file, its number of tests and the
  first sentence of its docstring.

Each generated part sits between ``<!-- layout:<name> -->`` and ``<!-- /layout:<name> -->``
lines; the text around them is hand-written and left alone. Everything is read with
``ast`` (nothing is imported or run), so the output depends on the files alone. A test
is a ``test_*`` function at module level or in a ``Test*`` class, counted once however it
is parametrized (parameters can depend on what is installed).

    python scripts/layout.py          # rewrite the generated parts
    python scripts/layout.py --check  # exit 1 if they are stale (tests/no_server/test_layout.py)
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATED_MARK = "# Generated from"


def summary(text: str | None) -> str:
    """The first sentence of a docstring's first paragraph, safe in a Markdown table."""
    paragraph = " ".join((text or "").strip().split("\n\n")[0].split())
    sentence = re.split(r"(?<=[.!?])\s", paragraph, maxsplit=1)[0]
    return sentence.replace("|", "\\|") if sentence else "(no docstring)"


def module_rows() -> list[str]:
    rows = ["| file | lines | what it owns (its docstring's first sentence) |", "|---|---:|---|"]
    for path in sorted((ROOT / "redis_msglog").rglob("*.py")):
        text = path.read_text()
        owns = summary(ast.get_docstring(ast.parse(text)))
        if text.startswith(GENERATED_MARK):
            source = text.split()[3]  # "# Generated from _aio.py by ..."
            owns = f"(generated from `{source}`) {owns}"
        name = path.relative_to(ROOT / "redis_msglog").as_posix()
        rows.append(f"| `{name}` | {len(text.splitlines())} | {owns} |")
    for path in sorted((ROOT / "lua").glob("*.lua")):
        text = path.read_text()
        opening = []  # the opening comment, up to its first blank comment line
        for line in text.splitlines():
            if line.startswith("#!"):  # the shebang line of a Redis function-style script
                continue
            if not line.startswith("--") or not line[2:].strip():
                break
            opening.append(line[2:].strip())
        rows.append(
            f"| `lua/{path.name}` | {len(text.splitlines())} | {summary(' '.join(opening))} |"
        )
    return rows


def count_tests(tree: ast.Module) -> int:
    """The ``test_*`` functions of a test module, module level and in ``Test*`` classes."""
    tests = 0
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            tests += count_tests(ast.Module(body=node.body, type_ignores=[]))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            tests += node.name.startswith("test_")
    return tests


def test_rows() -> list[str]:
    rows = ["| file | tests | what it covers (its docstring's first sentence) |", "|---|---:|---|"]
    total = files = 0
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        tests = count_tests(tree)
        total, files = total + tests, files + 1
        name = path.relative_to(ROOT / "tests").as_posix()
        rows.append(f"| `{name}` | {tests} | {summary(ast.get_docstring(tree))} |")
    rows.append(f"| {files} files | {total} | |")
    return rows


SECTIONS = {  # generated part: (file, its rows)
    "modules": ("docs/operations.md", module_rows),
    "tests": ("docs/testing.md", test_rows),
}


def regenerated(text: str, name: str, rows: list[str]) -> str:
    """``text`` with the part named ``name`` replaced by ``rows``."""
    pattern = re.compile(rf"(<!-- layout:{name} -->\n).*?(<!-- /layout:{name} -->)", re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"no <!-- layout:{name} --> ... <!-- /layout:{name} --> part found")
    body = "\n".join(rows) + "\n"
    return pattern.sub(lambda match: match.group(1) + body + match.group(2), text, count=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--check", action="store_true", help="exit 1 if the docs are stale")
    args = parser.parse_args()
    stale = []
    for name, (doc, rows) in SECTIONS.items():
        path = ROOT / doc
        text = path.read_text()
        new = regenerated(text, name, rows())
        if new != text:
            stale.append(doc)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"stale: {', '.join(stale)}; run: python scripts/layout.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
