"""The Agents SDK's usage, per batch of items: the runner keeps one running total per run
(``RunContextWrapper.usage``) and adds each model call's usage to it before it saves
that turn's items, so what a batch cost is the total now less the total at the run's
last batch. It goes on the batch's last assistant message (docs/usage.md)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from ..formats._common import usage_of
from ..models import AgentMessage, Usage

_Counts = tuple[int, int, int, int]  # input, output, cached, reasoning


def _counts(wrapper: Any) -> _Counts:
    """The run's running total so far (the SDK's ``Usage``; 0 for what it lacks)."""
    usage = getattr(wrapper, "usage", None)
    read = getattr(usage, "input_tokens_details", None)
    written = getattr(usage, "output_tokens_details", None)
    found = (
        getattr(usage, "input_tokens", 0),
        getattr(usage, "output_tokens", 0),
        getattr(read, "cached_tokens", 0),
        getattr(written, "reasoning_tokens", 0),
    )
    return tuple(n if isinstance(n, int) and not isinstance(n, bool) else 0 for n in found)  # type: ignore[return-value]


@dataclass
class Priced:
    """A batch given its usage, to be settled once it is appended."""

    runs: RunUsage
    wrapper: Any
    counts: _Counts

    def settle(self) -> None:
        """The batch is written: the run's next batch counts from here."""
        self.runs.seen[id(self.wrapper)] = (weakref.ref(self.wrapper), self.counts)


class RunUsage:
    """What each run (its wrapper) had spent at its last batch written."""

    def __init__(self) -> None:
        # By id: the SDK's wrapper is a dataclass, unhashable; a dead run's entry goes
        # with the next batch.
        self.seen: dict[int, tuple[weakref.ref[Any], _Counts]] = {}

    def attach(self, wrapper: Any, messages: list[AgentMessage]) -> Priced | None:
        """Put what the run spent since its last batch on the last assistant message of
        ``messages`` (in place); ``None`` when there is nothing to put, or no assistant
        message to carry it (it waits for the next batch)."""
        for key, (ref, _) in list(self.seen.items()):
            if ref() is None:
                del self.seen[key]
        held = self.seen.get(id(wrapper))
        before = held[1] if held is not None and held[0]() is wrapper else (0, 0, 0, 0)
        now = _counts(wrapper)
        spent_input, spent_output, spent_cached, spent_reasoning = (
            max(0, b - a) for a, b in zip(before, now, strict=True)
        )
        spent = usage_of(spent_input, spent_output, spent_cached, spent_reasoning)
        last = next(
            (i for i in reversed(range(len(messages))) if messages[i].role == "assistant"), None
        )
        if spent is None or last is None:
            return None
        messages[last] = messages[last].model_copy(update={"usage": Usage(**spent)})
        return Priced(self, wrapper, now)
