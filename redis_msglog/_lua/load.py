"""Loads the Lua scripts, expanding their ``-- @include`` lines, and names the arguments
of ``lua/view.lua`` and ``lua/erase.lua`` (``lua/append.lua``'s are in ``_lua.contract``).

The scripts live in the top-level ``lua/`` folder; ``redis_msglog/lua`` links to it, and
the wheel carries the folder there: so they are found one way, ``redis_msglog/lua/``,
in a checkout and when installed."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.abc import Traversable


@dataclass(frozen=True, slots=True)
class LuaScript:
    """A script's body and SHA1, as ``EVALSHA`` wants them."""

    name: str
    body: str
    sha: str

    @classmethod
    def from_body(cls, name: str, body: str) -> LuaScript:
        return cls(name, body, hashlib.sha1(body.encode()).hexdigest())

    def without_shebang(self) -> LuaScript:
        """The same script for servers that cannot parse a ``#!lua`` line (fakeredis,
        Redis < 7): the line becomes a comment, so error line numbers stay the same."""
        if not self.body.startswith("#!"):
            return self
        first, _, rest = self.body.partition("\n")
        return LuaScript.from_body(self.name, f"-- {first[2:]} (shebang not supported)\n{rest}")


def script_location(name: str) -> Traversable:
    """Where ``name`` is read from: ``redis_msglog/lua/``, installed or in a checkout."""
    return resources.files("redis_msglog") / "lua" / name


VIEW_KEY_NAMES = ("seq", "stream", "view", "hidden")
"""``KEYS`` of ``lua/view.lua``, in order (the script binds each to the name in capitals)."""
VIEW_ARGV_NAMES = ("view", "mode", "limit", "above", "position", "start", "runs")
"""``ARGV`` of ``lua/view.lua``, in order (the script binds each to a local of that name;
the last four only in the ``"after"`` mode)."""

ERASE_KEY_NAMES = ("seq", "owner", "stream", "records")
"""The named ``KEYS`` of ``lua/erase.lua``, in order; the conversation's other keys and its
idempotency records follow them (see :mod:`.._core.lifecycle.erase`)."""
ERASE_ARGV_NAMES = ("erased_for_ms", "scope")
"""``ARGV`` of ``lua/erase.lua``, in order."""

_INCLUDE = re.compile(r"^-- @include (\S+)$", re.MULTILINE)


def _read(name: str) -> str:
    location = script_location(name)
    if not location.is_file():
        raise FileNotFoundError(
            f"Lua script {name} is missing from {location}: in a checkout, redis_msglog/lua "
            "must be a link to ../lua (git clone with symlinks enabled)"
        )
    return location.read_text(encoding="utf-8")


def _expanded(name: str) -> str:
    """``name``'s text with each ``-- @include <file>`` line replaced by that file's
    expanded text (an include may include: edit_lib.lua includes view_lib.lua)."""
    return _INCLUDE.sub(lambda match: _expanded(match[1]), _read(name))


@cache
def load_script(name: str) -> LuaScript:
    """The script ``name`` (e.g. ``"append.lua"``), read once per process, with its
    ``-- @include`` lines expanded (Redis scripts cannot import)."""
    return LuaScript.from_body(name, _expanded(name))
