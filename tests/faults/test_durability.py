"""Nothing lost, nothing wedged: a deleted counter heals, retention expires a
conversation whole."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import re
import threading
import time
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_msglog import (
    AsyncMessageLog,
    Durability,
    DurabilityUnsupportedError,
    EvictionWarning,
    LogRewoundError,
    MessageLog,
    MessageLogError,
    NotDurableError,
    RetryPolicy,
)
from redis_msglog.admin import verify_conversation
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, new_id, tls_server
from ..support.history import History
from ..support.proxy import ReplyDroppingProxy

pytestmark = pytest.mark.slow  # kill -9 under load, frozen replicas, failovers


def test_a_deleted_seq_counter_heals_on_the_next_append(env: Env) -> None:
    log = env.log()
    log.append_many([{"role": "user", "content": str(i)} for i in range(3)])
    env.raw.delete(log.keys.seq)  # deleted by an operator, or evicted
    report = verify_conversation(env.raw, "msglog", log.conversation)
    assert any("seq counter" in p and "missing" in p for p in report.problems)
    assert log.count() == 3  # the stream's end, where the next append continues
    assert log.add("user", "next") == 4  # continues after the stream's last entry
    assert [m.seq for m in log.all()] == [1, 2, 3, 4]
    assert verify_conversation(env.raw, "msglog", log.conversation).ok


def test_retention_slides_with_every_append_and_expires_the_conversation_whole(
    env: Env,
) -> None:
    log = env.log(ttl=timedelta(seconds=1.5))
    log.add("user", "first", idempotency_key="k1")
    keys = [log.keys.seq, log.keys.stream, log.keys.idempotency_record("k1")]
    assert all(0 < env.raw.pttl(key) <= 1500 for key in keys)  # records included
    time.sleep(0.8)
    log.add("user", "second")
    assert env.raw.pttl(log.keys.seq) > 1000 and env.raw.pttl(log.keys.stream) > 1000
    assert 1000 < env.raw.pttl(log.keys.producers) <= 1500  # the producers hash too
    time.sleep(1.8)
    assert env.raw.exists(*keys, log.keys.producers) == 0  # gone whole, never half
    assert log.add("user", "again", idempotency_key="k1") == 1  # a new conversation


def test_without_ttl_keys_do_not_expire(env: Env) -> None:
    log = env.log()
    log.add("user", "kept")
    assert env.raw.pttl(log.keys.seq) == -1 and env.raw.pttl(log.keys.stream) == -1
    assert env.raw.pttl(log.keys.producers) == -1


# -- WAIT and WAITAOF ------------------------------------------------------------------------


@pytest.fixture
def primary_and_replica(
    real_backend: str, private_server: Callable[..., EphemeralServer]
) -> tuple[EphemeralServer, EphemeralServer]:
    primary = private_server(real_backend)
    replica = private_server(real_backend, ["--replicaof", "127.0.0.1", str(primary.port)])
    admin = redis.Redis(port=replica.port, decode_responses=True)
    deadline = time.monotonic() + 10
    while admin.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "the replica did not sync"
        time.sleep(0.05)
    return primary, replica


def test_wait_for_a_replica(primary_and_replica: tuple[EphemeralServer, EphemeralServer]) -> None:
    primary, replica = primary_and_replica
    # The replica linked and caught up first: a loaded CI machine's full sync outlasted
    # the 500 ms the first append waits.
    assert redis.Redis(port=primary.port).wait(1, 30_000) == 1
    durable = Durability(replicas=1, timeout=timedelta(milliseconds=500))
    fired: list[int] = []
    log = MessageLog(
        redis.Redis(port=primary.port), new_id(), lambda rows: fired.append(rows[-1].seq),
        durability=durable,
    )  # fmt: skip
    assert log.add("user", "replicated") == 1
    replica.pause()  # frozen: it acknowledges nothing
    try:
        started = time.monotonic()
        with pytest.raises(NotDurableError, match=r"committed as seq 2\.\.2.*0 of 1 replicas") as e:
            log.add("user", "on the primary only")
        assert 0.4 < time.monotonic() - started < 5  # waited the timeout, not forever
        assert e.value.last_seq == 2
    finally:
        replica.resume()
    assert log.count() == 2  # committed, as the error says
    assert fired == [1, 2]  # the hook saw both: they are in the log


def test_wait_with_no_replica_at_all(
    real_backend: str, private_server: Callable[..., EphemeralServer]
) -> None:
    async def scenario() -> None:
        server = private_server(real_backend)
        client = redis.asyncio.Redis(port=server.port)
        log = AsyncMessageLog(
            client, new_id(), durability=Durability(replicas=1, timeout=timedelta(milliseconds=50))
        )
        with pytest.raises(NotDurableError):
            await log.add("user", "x")
        assert await log.count() == 1
        await client.aclose()

    asyncio.run(scenario())


def test_waitaof(real_backend: str, private_server: Callable[..., EphemeralServer]) -> None:
    durable = Durability(aof=True)
    with_aof = private_server(real_backend, ["--appendonly", "yes"])
    log = MessageLog(redis.Redis(port=with_aof.port), new_id(), durability=durable)
    version = redis.Redis(port=with_aof.port).info("server")
    has_waitaof = "valkey_version" in version or tuple(
        map(int, version["redis_version"].split(".")[:2])
    ) >= (7, 2)
    if has_waitaof:
        assert log.add("user", "fsynced") == 1
    else:
        with pytest.raises(DurabilityUnsupportedError, match="needs WAITAOF"):
            log.add("user", "x")
        assert log.count() == 0  # refused before writing
        return
    without_aof = private_server(real_backend)  # appendonly no
    log = MessageLog(redis.Redis(port=without_aof.port), new_id(), durability=durable)
    with pytest.raises(DurabilityUnsupportedError, match="appendonly yes"):
        log.add("user", "x")
    assert log.count() == 0


@pytest.mark.parametrize(
    "options",
    [{}, {"replicas": -1}, {"replicas": 1, "timeout": timedelta(0)}, {"replicas": True}],
)
def test_bad_durability_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Durability(**options)


# -- kill -9 under load ------------------------------------------------------------------------


def _crash_writer(port: int, conversation: str, worker: int, stop: Any, out: Any) -> None:
    client = redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=1)
    policy = RetryPolicy(attempts=4, backoff=0.05, max_backoff=0.3)
    log = MessageLog(client, conversation, retry=policy)
    history = History(conversation)
    client_name, last_seq, i = f"w{worker}", 0, 0
    while not stop.is_set():
        content = f"{worker}:{i}"
        # Refused, unreachable or in doubt is allowed (and recorded); a lie is not.
        with contextlib.suppress(MessageLogError), history.append(client_name, [content]) as op:
            last_seq = op.committed(log.add("user", content))
        if i % 10 == 0:  # and read back what others wrote around it
            after = max(0, last_seq - 10)
            with contextlib.suppress(MessageLogError), history.read(client_name, after) as read:
                read.returned(log.read(after=after, limit=20))
        i += 1
    out.put(history.records)


def _wait_for_appends(client: redis.Redis, conversation: str, at_least: int) -> None:
    counter = MessageLog(client, conversation).keys.seq
    deadline = time.monotonic() + 120
    while int(client.get(counter) or 0) < at_least:
        assert time.monotonic() < deadline, "the writers never started appending"
        time.sleep(0.05)


def test_kill_9_twenty_times_under_load_loses_nothing_acknowledged(
    real_backend: str, private_server: Callable[..., EphemeralServer]
) -> None:
    server = private_server(real_backend, ["--appendonly", "yes", "--appendfsync", "always"])
    conversation = new_id()
    context = multiprocessing.get_context("spawn")
    stop, out = context.Event(), context.Queue()
    writers = [
        context.Process(target=_crash_writer, args=(server.port, conversation, w, stop, out))
        for w in range(3)
    ]
    for writer in writers:
        writer.start()
    # Writers up and appending before the first kill: a spawned process imports the test
    # module first, which took over 5 s on a loaded CI machine (all 20 kills landed before
    # any writer had started, and nothing was recorded).
    _wait_for_appends(redis.Redis(port=server.port), conversation, at_least=30)
    for _ in range(20):
        server.kill()
        time.sleep(0.05)
        server.restart()
        time.sleep(0.15)
    time.sleep(0.5)
    stop.set()
    history = History(conversation)
    for _ in writers:
        history.extend(out.get(timeout=60))
    for writer in writers:
        writer.join(timeout=30)
    summary = history.check(redis.Redis(port=server.port))
    assert summary.acked > 50
    print(summary)


# -- security ----------------------------------------------------------------------------------

HOSTILE = ["a}b", "{x}", "x:seq", "*", "a?[b]", "line\nbreak", "%7D", "\x00nul", "k" * 10_000]


@pytest.mark.parametrize("conversation", HOSTILE, ids=lambda c: repr(c[:12]))
def test_a_hostile_id_stays_inside_its_own_keys(env: Env, conversation: str) -> None:
    conversation = f"{new_id()}{conversation}"  # unique per run, hostile at the end
    log = env.log(conversation)
    neighbour = env.log(conversation + "}")  # one brace away
    assert log.add("user", "mine") == 1
    assert neighbour.add("user", "theirs") == 1
    for key in (log.keys.seq, log.keys.stream, log.keys.channel):
        tag = key[len("msglog:{") : key.rindex("}")]
        assert key.startswith("msglog:{") and "{" not in tag and "}" not in tag
    assert [m.content for m in log.all()] == ["mine"]
    assert [m.content for m in neighbour.all()] == ["theirs"]


def test_the_acl_user_reaches_nothing_else(shared_server: Callable[[str], EphemeralServer]) -> None:
    from ..conftest import ACL_PASSWORD, ACL_USER, acl_server

    server = acl_server(shared_server)
    client = redis.Redis.from_url(server.url, username=ACL_USER, password=ACL_PASSWORD)
    MessageLog(client, new_id()).add("user", "allowed")
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.get("someone-elses-key")
    with pytest.raises(MessageLogError, match="permission"):
        MessageLog(client, new_id(), prefix="other").add("user", "x")


@pytest.mark.parametrize(
    "policy, ttl, warns",
    [
        ("noeviction", None, False),
        ("allkeys-lru", None, True),
        ("volatile-lru", None, False),  # our keys have no expiry: never evicted
        ("volatile-lru", timedelta(hours=1), True),
    ],
)
def test_an_evicting_policy_is_warned_about_once(
    real_backend: str,
    private_server: Callable[..., EphemeralServer],
    policy: str,
    ttl: timedelta | None,
    warns: bool,
) -> None:
    server = private_server(real_backend, ["--maxmemory-policy", policy])
    client = redis.Redis(port=server.port)
    log = MessageLog(client, new_id(), ttl=ttl)

    def appends() -> None:
        log.add("user", "first")
        log.add("user", "second")
        MessageLog(client, new_id(), ttl=ttl).add("user", "same client")

    if warns:
        with pytest.warns(EvictionWarning, match=re.escape(policy)) as caught:
            appends()
        assert len([w for w in caught if issubclass(w.category, EvictionWarning)]) == 1
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error", EvictionWarning)  # raised, should one be warned
            appends()


def test_tls_with_throwaway_certificates(
    private_server: Callable[..., EphemeralServer], tmp_path: Path
) -> None:
    """rediss:// against a server that only speaks TLS (certificates made for the test)."""
    server, tls_port, ca_pem = tls_server(private_server, tmp_path)
    assert server.port  # the plain port exists too; the client below uses TLS only
    url = f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={ca_pem}"
    log = MessageLog(redis.Redis.from_url(url), new_id())
    assert log.add("user", "over TLS", idempotency_key="k") == 1
    assert [m.content for m in log.all()] == ["over TLS"]
    plain = f"redis://127.0.0.1:{tls_port}/0"
    once = RetryPolicy(deadline=0)  # a timeout is re-sent until the deadline (30 s)
    with pytest.raises(MessageLogError):
        MessageLog(redis.Redis.from_url(plain, socket_timeout=1), new_id(), retry=once).count()


# -- failover that loses acknowledged appends ---------------------------------------------------


def _wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize("rewind", ["shorter", "reused"])
def test_a_failover_that_lost_acknowledged_appends_is_detected(
    primary_and_replica: tuple[EphemeralServer, EphemeralServer], rewind: str
) -> None:
    """Primary + replica behind one address (a proxy, as a VIP or DNS name would be). The
    replica freezes, the primary acknowledges 5 more appends, dies; the replica is
    promoted. A follower and a reader past the new end, or at a seq now holding another
    message, get LogRewoundError instead of skipping or re-reading silently."""
    primary, replica = primary_and_replica
    conversation = new_id()
    with ReplyDroppingProxy(primary.port) as proxy:
        log = MessageLog(redis.Redis.from_url(proxy.url, socket_timeout=2), conversation)
        log.append_many([{"role": "user", "content": f"replicated {i}"} for i in range(10)])
        on_replica = MessageLog(redis.Redis(port=replica.port), conversation)
        _wait_until(lambda: on_replica.count() == 10)
        seen: list[int] = []
        failure: list[BaseException] = []

        def follow() -> None:
            client = redis.Redis.from_url(proxy.url, socket_timeout=2)
            try:
                for row in MessageLog(client, conversation).follow(reconnect_within=20):
                    seen.append(row.seq)
            except BaseException as exc:
                failure.append(exc)

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        replica.pause()  # frozen, and cut off: the next appends reach the primary only
        redis.Redis(port=primary.port).client_kill_filter(_type="replica")
        log.append_many([{"role": "user", "content": f"lost {i}"} for i in range(5)])
        _wait_until(lambda: seen[-1:] == [15])
        primary.kill()
        replica.resume()
        redis.Redis(port=replica.port).execute_command("REPLICAOF", "NO", "ONE")
        extra = 3 if rewind == "shorter" else 6  # reuses seqs 11..13, or 11..16
        on_replica.append_many([{"role": "user", "content": f"new {i}"} for i in range(extra)])
        proxy.upstream_port = replica.port  # the address now reaches the promoted replica
        proxy.cut()
        follower.join(timeout=30)
        assert failure and isinstance(failure[0], LogRewoundError), failure
        assert seen == list(range(1, 16))  # nothing from the new timeline slipped in
        reader = MessageLog(redis.Redis.from_url(proxy.url), conversation)
        if rewind == "shorter":
            assert "beyond the end" in str(failure[0])
            with pytest.raises(LogRewoundError):
                reader.read(after=15)
        else:
            assert "now holds another message" in str(failure[0])
