"""Running the library's Lua scripts (the append scripts, ``view.lua``, ``erase.lua``)
with their fallbacks: ``EVALSHA`` first, ``EVAL`` when the server has not cached the
script, and the script without its ``#!lua`` line on servers that cannot parse one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._core.steps import Command, Plan, Refused
from .contract import APPEND_SCRIPTS
from .load import LuaScript, load_script


class ScriptRunner:
    """One log's scripts (each its own copy: a server without shebang support makes a
    log switch to the plain body) and how to run them."""

    __slots__ = ("scripts",)

    def __init__(self) -> None:
        names = (*APPEND_SCRIPTS, "view.lua", "erase.lua")
        self.scripts: dict[str, LuaScript] = {name: load_script(name) for name in names}

    def evalsha(self, name: str) -> tuple[str, str]:
        """The start of a command running ``name`` by its digest."""
        return ("EVALSHA", self.scripts[name].sha)

    def run_script(
        self,
        name: str,
        keys_and_args: Command,
        send: Callable[[Command], Plan[Any]],
        *,
        cached: bool = True,
    ) -> Plan[Any]:
        """Run a script through ``send``: EVALSHA, falling back to EVAL when it is not
        cached, and to the script without its shebang on servers that cannot parse one.
        ``cached=False``: EVALSHA was already refused with NOSCRIPT; start with EVAL."""
        lua, send_body = self.scripts[name], not cached
        while True:
            command = ("EVAL", lua.body) if send_body else ("EVALSHA", lua.sha)
            try:
                reply = yield from send((*command, *keys_and_args))
                return reply
            except Refused as refused:
                if refused.code == "NOSCRIPT" and not send_body:
                    # Not cached (restart, failover, SCRIPT FLUSH): nothing ran, so EVAL is
                    # safe. EVAL also caches it for the next EVALSHA.
                    send_body = True
                    continue
                plain = lua.without_shebang()
                # fakeredis and Redis < 7 compile the `#!lua` line as Lua and fail on it.
                if plain is lua or "near '#'" not in refused.text:
                    raise
                self.scripts[name] = lua = plain
                send_body = True


def script_not_run(refused: Refused) -> bool:
    """Whether the server refused to run a script at all: not cached (``NOSCRIPT``), or
    not compiled (fakeredis and Redis < 7 choke on the ``#!lua`` line):
    :meth:`ScriptRunner.run_script` falls back to ``EVAL``, and to the script without its
    shebang."""
    return refused.code == "NOSCRIPT" or "near '#'" in refused.text
