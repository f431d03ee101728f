"""The layout rules of the source tree, read statically (no server, no import of the code
under test): kept true by the tests below.

- No module over 500 lines, no class over 350, no function (or method) over 60, in
  ``redis_msglog/`` and ``scripts/``. Generated files are left out: those whose first line
  starts with ``# Generated from`` (the sync client that ``scripts/unasync.py`` writes).
- No import cycle between the modules of ``redis_msglog``: every ``import`` counts,
  wherever it stands (``if TYPE_CHECKING:`` blocks and function bodies too).
- The core is sans-I/O: the modules under ``redis_msglog/_core/`` (and ``_lua/``, the
  Python side of the scripts the core runs) import no redis-py (``redis``, ``hiredis``)
  and no package module outside those two folders but the public leaf modules
  (``errors``, ``models``, ``parts``, ``edits``), and nothing they import, however
  indirectly, imports redis-py. Every ``import`` counts, as for cycles; and, run, the
  core's modules imported in a fresh interpreter load no redis-py.
- (The Lua scripts' rule, no numbered ``ARGV[<n>]`` or ``KEYS[<n>]`` outside each script's
  one binding block, is checked with the names it binds in ``tests/no_server/test_static.py``.)
- The package's lazy exports (``redis_msglog/__init__.py``) agree with its
  ``TYPE_CHECKING`` imports and ``__all__``.
- docs/operations.md's code layout and docs/testing.md's counts are what
  ``scripts/layout.py`` makes from the tree.

Each failure lists every offender (file, line, name, size), not only the first.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "redis_msglog"
CHECKED_TREES = (PACKAGE, ROOT / "scripts")
GENERATED_MARK = "# Generated from"
MAX_MODULE_LINES, MAX_CLASS_LINES, MAX_FUNCTION_LINES = 500, 350, 60


def source_files() -> Iterator[Path]:
    """Every hand-written ``.py`` file of the checked trees."""
    for tree in CHECKED_TREES:
        for path in sorted(tree.rglob("*.py")):
            if not path.read_text().startswith(GENERATED_MARK):
                yield path


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_no_module_over_500_lines() -> None:
    offenders = []
    for path in source_files():
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            offenders.append(f"{shown(path)}: {lines} lines")
    assert not offenders, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(offenders)


Definition = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def oversized(kind: type | tuple[type, ...], limit: int) -> list[str]:
    """``file:line qualified.name N lines`` for every ``kind`` node over ``limit`` lines."""
    found = []
    for path in source_files():
        for name, node in qualified_nodes(ast.parse(path.read_text())):
            if isinstance(node, kind):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > limit:
                    found.append(f"{shown(path)}:{node.lineno} {name}: {size} lines")
    return found


def qualified_nodes(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, Definition]]:
    """Every class and function of ``tree``, nested ones too, with a dotted name."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from qualified_nodes(node, name + ".")
        else:
            yield from qualified_nodes(node, prefix)


def test_no_class_over_350_lines() -> None:
    offenders = oversized(ast.ClassDef, MAX_CLASS_LINES)
    assert not offenders, f"classes over {MAX_CLASS_LINES} lines:\n" + "\n".join(offenders)


def test_no_function_over_60_lines() -> None:
    offenders = oversized((ast.FunctionDef, ast.AsyncFunctionDef), MAX_FUNCTION_LINES)
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(offenders)


# -- import cycles ---------------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    """Every module of the package (generated ones too: they are imported like the rest)."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_in(tree: ast.AST, where: str = "") -> Iterator[tuple[ast.stmt, str]]:
    """Every import statement of ``tree`` with where it stands: ``""`` (module level),
    ``"TYPE_CHECKING"`` or ``"in a function"``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, where
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from imports_in(node, "in a function")
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from imports_in(node, where or "TYPE_CHECKING")
        else:
            yield from imports_in(node, where)


def imported_modules(name: str, path: Path, known: set[str]) -> Iterator[tuple[str, str]]:
    """``(module, "line N")`` for each module of the package that ``name`` imports (the
    line says where the import stands unless at module level). ``from X import y``
    imports ``X.y`` when that is a module, else ``X`` itself. The parent packages Python
    runs on the way are not counted: every module would "import" the package's
    ``__init__``."""
    is_package = path.name == "__init__.py"
    for node, where in imports_in(ast.parse(path.read_text())):
        line = f"{node.lineno}" + (f" ({where})" if where else "")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name, line
            continue
        assert isinstance(node, ast.ImportFrom)
        base = node.module or ""
        if node.level:
            anchor = name.split(".")
            anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
            base = ".".join(anchor + ([base] if base else []))
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            target = submodule if submodule in known else base
            if target in known and target != name:
                yield target, line


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (the
    strongly connected components of more than one module)."""
    reach = {node: reachable(graph, node) for node in graph}
    groups = {
        frozenset(node for node in reach[start] if start in reach[node])
        for start in graph
        if start in reach[start]
    }
    return sorted(sorted(group) for group in groups)


def test_no_import_cycle_between_modules() -> None:
    modules = package_modules()
    known = set(modules)
    edges: dict[str, dict[str, list[str]]] = {name: {} for name in modules}
    for name, path in modules.items():
        for target, line in imported_modules(name, path, known):
            if line not in edges[name].setdefault(target, []):
                edges[name][target].append(line)
    graph = {name: set(targets) for name, targets in edges.items()}
    offenders = []
    for component in cycles(graph):
        offenders.append("cycle: " + " <-> ".join(component))
        for source in component:
            for target in sorted(set(edges[source]) & set(component)):
                lines = ", ".join(edges[source][target])
                offenders.append(f"  {shown(modules[source])}: line {lines} imports {target}")
    assert not offenders, (
        "import cycles (TYPE_CHECKING and function-level imports count):\n" + "\n".join(offenders)
    )


# -- the sans-I/O core ----------------------------------------------------------------------

SANS_IO = ("redis_msglog._core", "redis_msglog._lua")
"""The folders of the I/O-free core: the plans, and the Python side of the Lua scripts."""
LEAVES = frozenset(
    f"redis_msglog.{name}" for name in ("errors", "models", "parts", "edits", "drafts")
)
"""The public modules the core may import: what its plans take and return."""
CLIENT_LIBRARIES = frozenset(("redis", "hiredis"))


def in_sans_io(name: str) -> bool:
    return any(name == folder or name.startswith(folder + ".") for folder in SANS_IO)


def client_imports(path: Path) -> Iterator[tuple[str, str]]:
    """``(library, "line N")`` for each import of redis-py (or hiredis) in ``path``."""
    for node, where in imports_in(ast.parse(path.read_text())):
        line = f"{node.lineno}" + (f" ({where})" if where else "")
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            assert isinstance(node, ast.ImportFrom)
            names = [] if node.level else [node.module or ""]
        for name in names:
            if name.split(".")[0] in CLIENT_LIBRARIES:
                yield name, line


def test_the_core_imports_no_redis_py() -> None:
    modules = package_modules()
    known = set(modules)
    graph = {name: dict(imported_modules(name, path, known)) for name, path in modules.items()}
    direct = {name: list(client_imports(path)) for name, path in modules.items()}
    offenders = []
    for name in sorted(filter(in_sans_io, modules)):
        where = shown(modules[name])
        for library, line in direct[name]:
            offenders.append(f"{where}: line {line} imports {library}")
        for target, line in sorted(graph[name].items()):
            if not in_sans_io(target) and target not in LEAVES:
                offenders.append(f"{where}: line {line} imports {target}, outside the core")
        chain = path_to_client(name, graph, direct)
        if chain:
            offenders.append(f"{where}: imports redis-py through " + " -> ".join(chain))
    assert not offenders, (
        "the core (redis_msglog/_core/, _lua/) reaches redis-py or the shells:\n"
        + "\n".join(offenders)
    )


def path_to_client(
    start: str, graph: dict[str, dict[str, str]], direct: dict[str, list[tuple[str, str]]]
) -> list[str]:
    """The shortest chain of imports from ``start`` to a module that imports redis-py
    itself, through other modules (``[]``: none; a direct import is reported apart)."""
    parent: dict[str, str] = {}
    todo = [start]
    while todo:
        current = todo.pop(0)
        for target in graph[current]:
            if target == start or target in parent:
                continue
            parent[target] = current
            if direct[target]:
                chain = [target]
                while chain[-1] != start:
                    chain.append(parent[chain[-1]])
                return [*reversed(chain[:-1]), direct[target][0][0]]
            todo.append(target)
    return []


def test_importing_the_core_loads_no_redis_py() -> None:
    """The rule above, run: every core module imported in a fresh interpreter, and
    redis-py is not loaded."""
    names = sorted(filter(in_sans_io, package_modules()))
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}: importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('redis', 'hiredis'))\n"
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- the package's exports, and the generated docs -------------------------------------------


def test_the_lazy_exports_agree_with_the_imports_and_all() -> None:
    """``_EXPORTS`` (what ``import redis_msglog`` hands out on first use), the
    ``TYPE_CHECKING`` imports (what type checkers see) and ``__all__`` name the same
    names from the same modules; and each name really is in its module."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    checking = next(node for node in tree.body if isinstance(node, ast.If))
    imported = {
        alias.name: "." * node.level + (node.module or "")
        for node in checking.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assigned = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        if node.targets[0].id in ("_EXPORTS", "__all__")
    }
    table = {name: module for module, names in assigned["_EXPORTS"].items() for name in names}
    assert table == imported
    assert sorted(table) == sorted(assigned["__all__"])
    code = "import redis_msglog as m; [getattr(m, name) for name in m.__all__]"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_layout_docs_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "layout.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
