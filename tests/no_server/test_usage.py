"""Usage on a message (docs/usage.md), before anything is sent: what a valid usage is,
the delta a batch adds to its conversation's totals, exact sums, and the stored form."""

from __future__ import annotations

from typing import Any

import pytest

from redis_msglog import (
    AgentMessage,
    InvalidArgumentError,
    InvalidMessageError,
    Usage,
    UsageCurrencyError,
)
from redis_msglog._core.read.views import Edit
from redis_msglog._core.stored.codec import decode_entry, encode_message
from redis_msglog._core.write.encode import BatchRules

RULES = BatchRules(1 << 20, None)


def said(**usage: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": "x", "usage": usage}


@pytest.mark.parametrize(
    "usage, problem",
    [
        ({"input_tokens": -1}, "greater than or equal to 0"),
        ({"input_tokens": 2**53}, "less than or equal to"),
        ({"input_tokens": 1.0}, "valid integer"),
        ({"input_tokens": True}, "valid integer"),
        ({"input_tokens": "5"}, "valid integer"),
        ({"cost": 1.5}, "cost and currency go together"),
        ({"currency": "USD"}, "cost and currency go together"),
        ({"cost": 1, "currency": "usd"}, "should match pattern"),
        ({"cost": 1, "currency": "US"}, "should match pattern"),
        ({"cost": float("nan"), "currency": "USD"}, "cost"),
        ({"cost": float("inf"), "currency": "USD"}, "cost"),
        ({"cost": -0.5, "currency": "USD"}, "greater than or equal to 0"),
        ({"cost": 9_000_001, "currency": "USD"}, "less than or equal to"),
        ({"tokens": 5}, "Extra inputs are not permitted"),
    ],
)
def test_a_bad_usage_is_refused_while_the_batch_is_built(
    usage: dict[str, Any], problem: str
) -> None:
    with pytest.raises(InvalidMessageError, match=problem):
        RULES.batch([said(**usage)])


def test_a_batch_carries_the_sum_its_messages_add() -> None:
    batch = RULES.batch([
        said(input_tokens=5, cached_tokens=2, cost=0.1, currency="USD"),
        {"role": "user", "content": "none"},
        AgentMessage(role="assistant", content="y", usage=Usage(output_tokens=7,
                     reasoning_tokens=3, cost=0.2, currency="USD")),
    ])  # fmt: skip
    assert batch.usage == "5 7 2 3 300000000 USD"  # cost in billionths: exact
    assert RULES.batch([{"role": "user", "content": "plain"}]).usage is None
    # A message with usage never takes the plain lane (which builds no models to sum).
    alone = RULES.batch([AgentMessage(role="user", content="z", usage=Usage(input_tokens=1))])
    assert alone.usage == "1 0 0 0 0 "
    assert RULES.batch([said(output_tokens=1)], edit=Edit("attrs", "", b"{}")).usage


@pytest.mark.parametrize("op", ["fork", "compact"])
def test_a_fork_or_a_compaction_adds_none_of_its_copies_usage(op: Any) -> None:
    assert RULES.batch([said(input_tokens=5)], edit=Edit(op, "end", b"{}")).usage is None


def test_costs_in_two_currencies_do_not_add() -> None:
    with pytest.raises(UsageCurrencyError, match="EUR and USD") as caught:
        RULES.batch([said(cost=1, currency="EUR"), said(cost=1, currency="USD")])
    assert caught.value.currencies == ("EUR", "USD")
    with pytest.raises(UsageCurrencyError):
        _ = Usage(cost=1, currency="EUR") + Usage(cost=1, currency="USD")
    assert Usage(cost=1, currency="EUR") + Usage(input_tokens=3) == Usage(
        input_tokens=3, cost=1, currency="EUR"
    )


def test_a_batch_past_what_totals_hold_is_refused() -> None:
    big = said(input_tokens=2**53 - 1)
    with pytest.raises(InvalidMessageError, match="more than totals hold"):
        RULES.batch([big, said(input_tokens=1)])


def test_sums_are_exact_in_billionths() -> None:
    assert Usage.total(Usage(cost=0.1, currency="USD") for _ in range(10)).cost == 1.0
    assert (Usage(cost=0.1, currency="USD") + Usage(cost=0.2, currency="USD")).cost == 0.3


def test_the_stored_form_is_camel_case_without_zeros_and_reads_back() -> None:
    msg = AgentMessage.model_validate(said(input_tokens=5, reasoning_tokens=0, cost=0.5,
                                           currency="USD"))  # fmt: skip
    data = encode_message(msg)
    assert data == (
        b'{"role":"assistant","content":"x","usage":{"inputTokens":5,"cost":0.5,"currency":"USD"}}'
    )
    row = decode_entry(1, "1700000000000000", data)
    assert row.usage == msg.usage and row.as_message() == msg


def test_a_compactions_messages_from_new_from_on_are_counted() -> None:
    copies_then_new = [said(input_tokens=1), said(input_tokens=10), said(input_tokens=100)]
    compact = Edit("compact", "end", b"")
    assert RULES.batch(copies_then_new, edit=compact, new_from=2).usage == "100 0 0 0 0 "
    assert RULES.batch(copies_then_new, edit=compact, new_from=0).usage == "111 0 0 0 0 "
    assert RULES.batch(copies_then_new, edit=compact, new_from=3).usage is None
    with pytest.raises(InvalidArgumentError, match="new_from"):
        RULES.batch(copies_then_new, edit=compact, new_from=4)
