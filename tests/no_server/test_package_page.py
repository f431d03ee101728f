"""The package page: the index shows docs/pypi.md (pyproject's readme), not the README,
whose first lines are a checkout's commands. It must read right away from the
repository: installed with ``pip install redis-msglog``, every link absolute, and its
examples the README's own, so the two never drift apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "pypi.md"
BASE = "https://github.com/redis-msglog/redis-msglog"
# [text](target) and ![alt](target); <https://...> autolinks; reference definitions.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)|<([a-z]+:[^>\s]+)>|^\[[^\]]+\]:\s*(\S+)", re.M)


def _targets(text: str) -> list[str]:
    return [next(g for g in m.groups() if g) for m in LINK.finditer(text)]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.M | re.S)


def test_pyproject_gives_the_index_the_package_page() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["readme"] == {"file": "docs/pypi.md", "content-type": "text/markdown"}
    # The license is the SPDX expression: PyPI refuses License :: classifiers beside it.
    assert project["license"] == "MIT"
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    assert all(url.startswith(BASE) for url in project["urls"].values())


def test_the_package_page_installs_from_the_index_first() -> None:
    text = PAGE.read_text()
    first = (_blocks(text, "bash") or [""])[0]
    assert first.strip() == "pip install redis-msglog"
    assert text.index("```bash") < text.index("```python")
    assert "pip install -e" not in text


def test_every_link_of_the_package_page_is_absolute_and_reaches_a_file() -> None:
    targets = _targets(PAGE.read_text())
    assert targets
    relative = [t for t in targets if not t.startswith("https://")]
    assert not relative, f"relative links do not work on the package page: {relative}"
    for target in targets:
        if target.startswith(f"{BASE}/blob/main/"):
            path = target.removeprefix(f"{BASE}/blob/main/").partition("#")[0]
            assert (ROOT / path).is_file(), f"{target}: no {path} in the repository"


def test_the_package_pages_examples_are_the_readmes() -> None:
    readme = (ROOT / "README.md").read_text()
    examples = _blocks(PAGE.read_text(), "python")
    assert examples
    for example in examples:
        assert example in _blocks(readme, "python"), f"not in README.md:\n{example}"
