"""Usage totals (docs/usage.md): an append adds its messages' usage to the conversation's
totals in the same script call; edits leave them, erasure removes them, a replay adds
nothing; a scope's totals are summed from its index, which a tenant cannot steer. Every
backend, both clients (the hostile and exact-sum cases on one real server)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import (
    AgentMessage,
    CorruptLogError,
    Directory,
    InvalidMessageError,
    MessageLog,
    Usage,
    UsageCurrencyError,
    WrongTypeError,
)
from redis_msglog._core.lifecycle.scope import ScopeKeys, member
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, new_id


def said(text: str, **usage: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "usage": usage}


def test_the_totals_are_the_sum_of_the_messages_appended(env: Env) -> None:
    log = env.log()
    log.add("user", "no usage here")
    log.append(said("a", input_tokens=100, output_tokens=20, cached_tokens=40, cost=0.1,
                    currency="USD"))  # fmt: skip
    log.append_many([
        said("b", inputTokens=7, reasoningTokens=3, outputTokens=9),  # the stored spelling
        {"role": "user", "content": "c"},
        AgentMessage(role="assistant", content="d", usage=Usage(cost=0.2, currency="USD")),
    ])  # fmt: skip
    totals = log.usage()
    assert totals == Usage(
        input_tokens=107, output_tokens=29, cached_tokens=40, reasoning_tokens=3, cost=0.3,
        currency="USD",
    )  # fmt: skip
    assert totals.cost == 0.3  # billionths summed exactly: never 0.30000000000000004
    rows = log.all()
    assert Usage.total(r.usage for r in rows if r.usage) == totals
    assert rows[1].usage == Usage(input_tokens=100, output_tokens=20, cached_tokens=40,
                                  cost=0.1, currency="USD")  # fmt: skip
    assert rows[0].usage is None


def test_edits_leave_the_totals_and_an_erasure_removes_them(env: Env) -> None:
    log = env.log()
    log.append_many([said(f"m{i}", input_tokens=10, output_tokens=i) for i in range(1, 6)])
    expected = Usage(input_tokens=50, output_tokens=15)
    log.retract([2])
    log.pop()
    log.set_attrs({"topic": "x"})
    log.archive(1)
    log.compact([said("summary", input_tokens=1000)], through_seq=3)  # a copy: adds none
    log.replace(log.all())  # copies of rows that carry usage: add none
    assert log.usage() == expected
    first = log.all()[0].seq
    log.compact([said("a new summary", input_tokens=7)], through_seq=first, new_from=0)
    expected = Usage(input_tokens=57, output_tokens=15)  # a summary a model just wrote
    assert log.usage() == expected
    forked = new_id()
    log.fork(forked)
    fork = env.log(forked)
    assert fork.usage() == Usage()  # paid for in the source
    assert [r.usage for r in fork.all()] == [r.usage for r in log.all()]  # kept on the rows
    log.append_many([said("later", output_tokens=5)], attrs={"topic": "y"})  # still appends
    assert log.usage() == Usage(input_tokens=57, output_tokens=20)
    log.erase()
    assert log.usage() == Usage()
    assert not env.raw.exists(log.keys.usage)


def test_a_cost_in_another_currency_is_refused_and_writes_nothing(env: Env) -> None:
    log = env.log()
    log.append(said("a", cost=1, currency="EUR"))
    before = {key: env.raw.dump(key) for key in (log.keys.seq, log.keys.stream, log.keys.usage)}
    with pytest.raises(UsageCurrencyError, match="keeps costs in EUR") as caught:
        log.append(said("b", output_tokens=3, cost=1, currency="USD"))
    assert caught.value.currencies == ("EUR",)
    with pytest.raises(UsageCurrencyError, match="EUR and USD"):  # refused before sending
        log.append_many([said("c", cost=1, currency="EUR"), said("d", cost=1, currency="USD")])
    assert {key: env.raw.dump(key) for key in before} == before
    log.append(said("tokens only", output_tokens=3))  # no cost: no currency to agree with
    assert log.usage() == Usage(output_tokens=3, cost=1, currency="EUR")


def test_a_replayed_append_adds_nothing_and_every_key_layout_carries_the_totals(
    env: Env,
) -> None:
    conversation = new_id()
    log = env.log(conversation, scope=("acme", "u1"), ttl=timedelta(hours=1))
    usage = said("a", input_tokens=3, output_tokens=4)
    assert log.append(usage, idempotency_key="k1") == 1
    assert log.append(usage, idempotency_key="k1") == 1  # a replay: written once, added once
    log.add("user", "no usage: the lifetime's refresh still names the totals")
    log.append(said("blob", output_tokens=1) | {"content": [
        {"type": "image", "data": b"\x89PNG" + bytes(5000), "media_type": "image/png"}
    ]})  # fmt: skip
    assert log.usage() == Usage(input_tokens=3, output_tokens=5)
    assert 0 < env.raw.pttl(log.keys.usage) <= 3_600_000  # expires with the conversation
    plain = env.log()
    plain.add("user", "a log with no lifetime makes no totals without usage")
    assert not env.raw.exists(plain.keys.usage) and plain.usage() == Usage()


# -- one real server: hostile totals, exact sums --------------------------------------------


@pytest.fixture(scope="module")
def raw_url(shared_server: Callable[[str], EphemeralServer]) -> str:
    return shared_server("redis").url


def test_totals_this_library_did_not_write_are_refused_and_nothing_is_written(
    raw_url: str,
) -> None:
    raw = redis.Redis.from_url(raw_url)
    log = MessageLog(raw, new_id())
    raw.set(log.keys.usage, "not a hash")
    with pytest.raises(WrongTypeError):
        log.append(said("a", input_tokens=1))
    with pytest.raises(WrongTypeError):
        log.usage()
    raw.delete(log.keys.usage)
    raw.hset(log.keys.usage, mapping={"input": "lots"})
    with pytest.raises(CorruptLogError, match="lots"):
        log.append(said("a", input_tokens=1))
    with pytest.raises(CorruptLogError, match="did not write"):
        log.usage()
    raw.hset(log.keys.usage, mapping={"input": str(2**53 - 2)})
    with pytest.raises(InvalidMessageError, match="more than totals hold"):
        log.append(said("a", input_tokens=2))
    assert log.count() == 0
    log.append(said("a", input_tokens=1))  # up to the last exact number
    assert log.usage().input_tokens == 2**53 - 1


usages = st.builds(
    Usage,
    input_tokens=st.integers(0, 10**9),
    output_tokens=st.integers(0, 10**9),
    cached_tokens=st.integers(0, 10**6),
    reasoning_tokens=st.integers(0, 10**6),
) | st.builds(
    Usage,
    output_tokens=st.integers(0, 10**9),
    cost=st.floats(0, 100, allow_nan=False) | st.integers(0, 100),
    currency=st.just("USD"),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(st.one_of(st.none(), usages), min_size=1, max_size=4),
                        min_size=1, max_size=5))  # fmt: skip
def test_the_totals_are_exact_sums_of_any_usages(
    raw_url: str, batches: list[list[Usage | None]]
) -> None:
    log = MessageLog(redis.Redis.from_url(raw_url), new_id())
    for batch in batches:
        log.append_many([AgentMessage(role="assistant", content="x", usage=u) for u in batch])
    expected = Usage.total(u for batch in batches for u in batch if u is not None)
    assert log.usage() == expected
    assert Usage.total(r.usage for r in log.all() if r.usage) == expected
    log.erase()


# -- a scope's totals ------------------------------------------------------------------------


def test_a_scopes_totals_sum_its_conversations_and_no_forged_entry(raw_url: str) -> None:
    raw = redis.Redis.from_url(raw_url)
    prefix = new_id()
    for n, scope in enumerate([("acme", "u1"), ("acme", "u2"), ("acme",), ("globex",)]):
        log = MessageLog(raw, f"{scope[0]}:c{n}", prefix=prefix, scope=scope)
        log.append(said("x", input_tokens=10**n, cost=n, currency="USD"))
    directory = Directory(raw, prefix=prefix)
    assert directory.usage(("acme",)) == Usage(input_tokens=111, cost=3, currency="USD")
    assert directory.usage(("acme", "u2")) == Usage(input_tokens=10, cost=1, currency="USD")
    assert directory.usage(("initech",)) == Usage()
    # A tenant able to write its own index names another tenant's conversation in it: the
    # owner record (globex) does not confirm the entry, so it is not counted.
    owner = raw.hgetall(f"{prefix}:{{globex:c3}}:owner")
    forged = member(int(owner[b"created"]), ("acme",), "globex:c3")
    raw.zadd(ScopeKeys(prefix, ("acme",)).index(), {forged: 0})
    assert directory.usage(("acme",)) == Usage(input_tokens=111, cost=3, currency="USD")
    MessageLog(raw, "acme:eur", prefix=prefix, scope=("acme",)).append(
        said("y", cost=1, currency="EUR")
    )
    with pytest.raises(UsageCurrencyError, match=r"USD and EUR|EUR and USD"):
        directory.usage(("acme",))


def test_msglog_usage_prints_a_conversations_or_a_scopes_totals(raw_url: str) -> None:
    from click.testing import CliRunner

    from redis_msglog._cli import main

    raw = redis.Redis.from_url(raw_url)
    prefix = new_id()
    log = MessageLog(raw, "acme:c1", prefix=prefix, scope=("acme",))
    log.append(said("x", input_tokens=1234, output_tokens=5, cost=0.00123, currency="USD"))

    def run(*args: str) -> str:
        result = CliRunner().invoke(main, ["--url", raw_url, "--prefix", prefix, "usage", *args])
        assert result.exit_code == 0, result.output
        return result.output

    table = run("acme:c1")
    assert "1,234" in table and "0.00123 USD" in table
    assert Usage.model_validate_json(run("--scope", "acme", "--json")) == log.usage()
    refused = CliRunner().invoke(main, ["--url", raw_url, "usage"])
    assert refused.exit_code == 2 and "CONVERSATION or --scope" in refused.output


def test_the_web_app_serves_a_conversations_totals(raw_url: str) -> None:
    import httpx

    from redis_msglog.web import create_app

    from .test_web import allow, serving

    log = MessageLog(redis.Redis.from_url(raw_url), new_id())
    log.append(said("x", input_tokens=7, cost=0.5, currency="EUR"))
    url = f"/conversations/{log.conversation}/usage"
    with serving(create_app(redis.Redis.from_url(raw_url), authorize=allow)) as base:
        got = httpx.get(base + url, timeout=10).json()
    assert got == {"conversation": log.conversation, "usage": log.usage().model_dump()}
    deny = create_app(redis.Redis.from_url(raw_url), authorize=lambda r, c, a: False)
    with serving(deny) as base:
        assert httpx.get(base + url, timeout=10).status_code == 403  # asked before a read
