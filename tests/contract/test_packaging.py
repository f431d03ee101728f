"""The wheel carries the Lua scripts, and an installed wheel appends with them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from redis_msglog.testing import EphemeralServer

pytestmark = pytest.mark.slow  # builds and installs the wheel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
    )
    [built] = out.glob("redis_msglog-*.whl")
    return built


def test_wheel_contains_the_lua_scripts_and_type_marker(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "redis_msglog/lua/append.lua" in names
    assert "redis_msglog/py.typed" in names
    packaged = zipfile.ZipFile(wheel).read("redis_msglog/lua/append.lua")
    assert packaged == (ROOT / "lua" / "append.lua").read_bytes()


def test_wheel_contains_the_viewer_page(wheel: Path) -> None:
    """``msglog serve``'s viewer is served from inside the package."""
    names = zipfile.ZipFile(wheel).namelist()
    for name in ("viewer.html", "viewer.js", "viewer.css"):
        packaged = zipfile.ZipFile(wheel).read(f"redis_msglog/web/static/{name}")
        assert packaged == (ROOT / "redis_msglog" / "web" / "static" / name).read_bytes()
    assert not [n for n in names if n.startswith("test-artifacts")]


def test_installed_wheel_loads_lua_from_inside_the_package(
    wheel: Path, tmp_path: Path, shared_server: Callable[[str], EphemeralServer]
) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    url = shared_server("redis").url
    program = (
        "import redis, redis_msglog, redis_msglog._lua.load as s\n"
        f"assert redis_msglog.__file__.startswith({str(site)!r}), redis_msglog.__file__\n"
        f"assert s.script_location('append.lua').is_file()\n"
        f"assert str(s.script_location('append.lua')).startswith({str(site)!r})\n"
        f"client = redis.Redis.from_url({url!r})\n"
        f"log = redis_msglog.MessageLog(client, {'wheel-' + tmp_path.name!r})\n"
        "redis.Redis.from_url(" + repr(url) + ").script_flush()\n"
        "print(log.add('user', 'from the wheel'))\n"
    )
    # -I: isolated mode, so neither the source tree nor an editable install is importable;
    # the dependencies come from this interpreter's site-packages via PYTHONPATH order.
    import orjson
    import pydantic
    import redis as redis_module

    deps = {_site_of(m) for m in (redis_module, pydantic, orjson)}
    result = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            f"import sys; sys.path[:0] = {[str(site), *sorted(deps)]!r}\n" + program,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"


def _site_of(package: ModuleType) -> str:
    """The site-packages directory a package was imported from."""
    assert package.__file__ is not None, f"{package.__name__} has no __file__"
    return str(Path(package.__file__).resolve().parent.parent)
