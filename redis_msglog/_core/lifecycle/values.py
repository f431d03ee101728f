"""A conversation's values kept in place: a hash of current values with no history
(``msglog:{<id>}:values``, field: a name, value: its text), for state whose old values
must not outlive an overwrite, as Google ADK's ``user:`` and ``app:`` state
(docs/integrations.md). Unlike attributes (``set_attrs``), a change writes no entry: the
old value is gone from the server when the call returns.

Written by ``lua/values.lua`` only where the conversation's scoped log could write: not
under an erasure's tombstone, and only in the scope its owner record names (a
conversation with no owner record yet is registered in the scope first, as a scoped
log's first write does). Its key is one of the conversation's keys, so an erasure of the
conversation, or of its scope, deletes it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import errors
from ..._lua.load import load_script
from ..._lua.run import ScriptRunner
from ..steps import Command, Plan, Refused
from ..stored.entries import hash_fields
from ..stored.keys import ConversationKeys
from ..write.bounds import DEFAULT_MAX_BATCH_BYTES
from .scope import Scope, Scoped, error_for, joined

VALUES_SCRIPT = "values.lua"
VALUES_KEY_NAMES = ("seq", "owner", "values")
"""``KEYS`` of ``lua/values.lua``, in order."""
VALUES_ARGV_NAMES = ("scope",)
"""``ARGV`` of ``lua/values.lua``, in order; the name, value pairs follow them."""


class ValuesScript(ScriptRunner):
    """``lua/values.lua``, run like the log's scripts (EVALSHA, EVAL, no shebang)."""

    __slots__ = ()

    def __init__(self) -> None:
        self.scripts = {VALUES_SCRIPT: load_script(VALUES_SCRIPT)}


def check_values_bytes(values: Mapping[str, str], cap: int) -> None:
    """Raise :class:`~redis_msglog.BatchTooLargeError` when ``values`` (names and values,
    UTF-8) are over ``cap`` bytes: one call sends them all (the log's ``max_batch_bytes``
    bounds it as it bounds an append call)."""
    size = sum(len(name.encode()) + len(value.encode()) for name, value in values.items())
    if size > cap:
        raise errors.BatchTooLargeError(
            f"the {len(values)} values of this call are {size} bytes, over the limit of "
            f"{cap} for one call (max_batch_bytes). Nothing was written.",
            cap=cap,
        )


class Values:
    """The plans reading and setting values kept in place, for one prefix; one call sets
    at most ``max_bytes`` of names and values."""

    def __init__(self, scoped: Scoped, max_bytes: int = DEFAULT_MAX_BATCH_BYTES) -> None:
        self._scoped = scoped
        self.max_bytes = max_bytes
        self._runner = ValuesScript()

    def read_plan(self, conversation: str) -> Plan[dict[str, str]]:
        """The conversation's values (empty: none set, or erased)."""
        keys = ConversationKeys.build(self._scoped.prefix, conversation)
        (flat,) = yield from self._scoped.read((("HGETALL", keys.values),), keys.seq)
        return hash_fields(flat)

    def set_plan(self, conversation: str, scope: Scope, values: Mapping[str, str]) -> Plan[int]:
        """Set ``values`` (one atomic call; nothing when empty), registering the
        conversation in ``scope`` first when it has no owner record. Raises
        :class:`~redis_msglog.ConversationErasedError` under the conversation's tombstone,
        :class:`~redis_msglog.ScopeErasedError` under its scope's,
        :class:`~redis_msglog.ScopeMismatchError` when it belongs to another scope,
        :class:`~redis_msglog.BatchTooLargeError` over ``max_bytes`` (before anything is
        sent); nothing written in each case."""
        if not values:
            return 0
        check_values_bytes(values, self.max_bytes)
        keys = ConversationKeys.build(self._scoped.prefix, conversation)
        pairs = [part for pair in values.items() for part in pair]
        command: Command = (3, keys.seq, keys.owner, keys.values, joined(scope), *pairs)
        registered = False
        while True:
            try:
                count: Any = yield from self._runner.run_script(
                    VALUES_SCRIPT, command, lambda c: self._send(c, keys.seq)
                )
                return int(count)
            except Refused as refused:
                if registered or "MSGLOG_UNOWNED" not in refused.text:
                    raise error_for(refused, keys.seq) from (refused.origin or refused)
            # The first write in the scope, or the first since an erasure's tombstone
            # expired: registered (owner record, then indexes) as a scoped log would be.
            yield from self._scoped.register_plan(conversation, scope)
            registered = True

    def _send(self, command: Command, route: str) -> Plan[Any]:
        # Setting values is idempotent, so sent like a read: re-sent while unavailable.
        (reply,) = yield from self._scoped.read_raw((command,), route)
        return reply
