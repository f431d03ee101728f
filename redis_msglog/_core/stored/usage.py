"""A conversation's usage totals (docs/usage.md): what the delta of an append is, how it
travels to ``lua/append.lua``, and how the totals hash reads back.

The hash ``msglog:{<id>}:usage`` has the fields ``input``, ``output``, ``cached`` and
``reasoning`` (token counts), ``cost`` (in billionths of the currency's unit, so totals
are exact integer sums, never a float's drift) and ``currency``. Only the append script
writes it, in the call that appends the messages carrying the usage (exactly-once with
them); an erasure deletes it with the conversation's other keys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ... import errors
from ...models import MAX_USAGE_TOKENS, NANOS, AgentMessage, Usage, cost_nanos
from .entries import text

FIELDS = ("input", "output", "cached", "reasoning", "cost", "currency")
"""The totals hash's fields, in the order the script reads and writes them."""
NO_DELTA = "0 0 0 0 0 "
"""The delta of an append that carries no usage (a log with a lifetime sends it: its
every append names the totals hash to refresh its expiry)."""


def delta(messages: Sequence[AgentMessage]) -> str | None:
    """The usage ``messages`` add to their conversation's totals, as the script's
    ``usage`` argument (``"<input> <output> <cached> <reasoning> <cost> <currency>"``),
    or ``None`` when none of them carries any. Costs in two currencies raise
    :class:`~redis_msglog.UsageCurrencyError`, and sums past what totals hold
    :class:`~redis_msglog.InvalidMessageError`, before anything is sent."""
    sums = [0, 0, 0, 0, 0]
    currency = ""
    found = False
    for msg in messages:
        usage = msg.usage
        if usage is None:
            continue
        found = True
        sums[0] += usage.input_tokens
        sums[1] += usage.output_tokens
        sums[2] += usage.cached_tokens
        sums[3] += usage.reasoning_tokens
        if usage.cost is not None and usage.currency is not None:
            if currency and usage.currency != currency:
                raise errors.UsageCurrencyError(
                    f"this batch's costs are in {currency} and {usage.currency}: a "
                    "conversation keeps its costs in one currency. Nothing was written.",
                    currencies=(currency, usage.currency),
                )
            currency = usage.currency
            sums[4] += cost_nanos(usage.cost)
    if not found:
        return None
    if max(sums) > MAX_USAGE_TOKENS:
        raise errors.InvalidMessageError(
            f"this batch's usage adds up to over {MAX_USAGE_TOKENS} (tokens of one kind, or "
            "billionths of its cost's unit), more than totals hold. Nothing was written."
        )
    return " ".join(map(str, sums)) + " " + currency


def from_totals(flat: Sequence[Any] | Mapping[Any, Any], key: str) -> Usage:
    """The :class:`~redis_msglog.Usage` an ``HMGET`` of :data:`FIELDS` (or an
    ``HGETALL``) of the totals hash ``key`` reads; all zero when it does not exist. A value
    the script did not write is a :class:`~redis_msglog.CorruptLogError`."""
    if isinstance(flat, Mapping):
        named = {text(name): value for name, value in flat.items()}
        values = [named.get(name) for name in FIELDS]
    else:
        values = list(flat)
    try:
        counts = [int(text(v)) if v is not None else 0 for v in values[:5]]
        currency = text(values[5]) if values[5] else None
        return Usage(
            input_tokens=counts[0],
            output_tokens=counts[1],
            cached_tokens=counts[2],
            reasoning_tokens=counts[3],
            cost=counts[4] / NANOS if currency else None,
            currency=currency,
        )
    except ValueError as exc:  # int() of a non-number; a ValidationError is a ValueError
        raise errors.CorruptLogError(
            f"usage totals {key} hold {dict(zip(FIELDS, values, strict=True))!r}, which this "
            "library did not write"
        ) from exc
