"""ADK's ``user:`` and ``app:`` state as current values (docs/integrations.md, "Google
ADK"): the values kept in place (``_core/lifecycle/values.py``) of one conversation per
user (``<app>:<user>:~user``, in the scope ``(<app>, <user>)``) and one per app
(``<app>:~app``, in ``(<app>,)``). A change is a per-key merge, as ADK's own services'
``state.update(delta)``, atomic and last-writer-wins per key; an overwritten value is
gone from the server once the call returns. Its history is carried only by the events
that set it (each event's ``state_delta``, in the session's log)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypeVar

from .._async import AsyncDirectory
from .._core.lifecycle.scope import Scoped
from .._core.lifecycle.values import Values, check_values_bytes
from .._core.retry import DEFAULT_RETRY
from .._core.steps import Plan
from .._core.write.bounds import DEFAULT_MAX_BATCH_BYTES
from . import _google_adk_codec as codec
from ._clients import LoopClients

T = TypeVar("T")


class SharedState:
    """The ``user:`` and ``app:`` state of the apps a session service serves."""

    def __init__(self, clients: LoopClients, options: dict[str, Any]) -> None:
        self._clients = clients
        self._prefix = options.get("prefix", "msglog")
        self._retry = options.get("retry", DEFAULT_RETRY)
        cap = options.get("max_batch_bytes", DEFAULT_MAX_BATCH_BYTES)
        self._values = Values(Scoped(self._prefix, self._retry, time.monotonic), cap)

    async def read(self, app: str, user: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The app's state and the user's (unprefixed keys), read concurrently."""
        a, u = codec.encode_id("app_name", app), codec.encode_id("user_id", user)
        app_values, user_values = await asyncio.gather(
            self._run(self._values.read_plan(f"{a}:{codec.APP_STATE}")),
            self._run(self._values.read_plan(f"{a}:{u}:{codec.USER_STATE}")),
        )
        return codec.state_of_values(app_values), codec.state_of_values(user_values)

    async def user_state(self, app: str, user: str) -> dict[str, Any]:
        """The user's state (unprefixed keys)."""
        a, u = codec.encode_id("app_name", app), codec.encode_id("user_id", user)
        values = await self._run(self._values.read_plan(f"{a}:{u}:{codec.USER_STATE}"))
        return codec.state_of_values(values)

    async def write(self, app: str, user: str, deltas: dict[str, dict[str, Any]]) -> None:
        """The ``user:`` then the ``app:`` state of a write (``deltas`` as ADK's
        ``extract_state_delta`` splits them; checked with :meth:`check` before the
        session's own write), one atomic call each."""
        a, u = codec.encode_id("app_name", app), codec.encode_id("user_id", user)
        if deltas["user"]:
            plan = self._values.set_plan(
                f"{a}:{u}:{codec.USER_STATE}", (a, u), codec.state_values(deltas["user"])
            )
            await self._run(plan)
        if deltas["app"]:
            plan = self._values.set_plan(
                f"{a}:{codec.APP_STATE}", (a,), codec.state_values(deltas["app"])
            )
            await self._run(plan)

    def check(self, deltas: dict[str, dict[str, Any]]) -> None:
        """Refuse shared state that could not be stored (``InvalidArgumentError``, or
        ``BatchTooLargeError`` over the log's ``max_batch_bytes``) before anything of the
        write is."""
        for k in ("user", "app"):
            check_values_bytes(codec.state_values(deltas[k]), self._values.max_bytes)

    async def _run(self, plan: Plan[T]) -> T:
        # A directory carries plans of single idempotent round trips, as these are.
        directory = AsyncDirectory(self._clients.get(), prefix=self._prefix, retry=self._retry)
        return await directory._run(plan)
