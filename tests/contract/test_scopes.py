"""Scopes and the directory: a scoped log registers its
conversation before its first write, a conversation keeps its scope, and a scope's
conversations are listed from its index, newest first, page after page, on every backend
and both clients; a tenant's ACL rules cover its scopes' indexes."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from redis_msglog import (
    AsyncDirectory,
    ConversationErasedError,
    ConversationKeys,
    Directory,
    InvalidArgumentError,
    MessageLog,
    MessageLogError,
    ScopeErasedError,
    ScopeMismatchError,
    acl_rules,
)
from redis_msglog._cli import main
from redis_msglog._core.lifecycle.scope import ScopeKeys
from redis_msglog.admin import verify_conversation
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, SyncView, new_id, server_version
from .test_round_trips import RoundTripCounter

PERMISSION = r"(?i)permission"


def tenant() -> str:
    """A top-level scope part of this test's own (the shared servers outlive a test)."""
    return f"t{uuid.uuid4().hex[:10]}"


def directory(env: Env) -> Any:
    if env.flavor == "sync":
        return Directory(env.make_sync_client())
    client = env.make_async_client()
    env._async_clients.append(client)
    return SyncView(AsyncDirectory(client), env.loop)  # type: ignore[arg-type]


def listed(directory: Any, scope: tuple[str, ...], limit: int = 100) -> list[Any]:
    """Every conversation of ``scope``, page after page."""
    found: list[Any] = []
    cursor = None
    while True:
        page = directory.list(scope, limit=limit, cursor=cursor)
        found.extend(page.conversations)
        if page.cursor is None:
            return found
        cursor = page.cursor


def test_a_scoped_conversation_is_listed_under_its_scope_and_prefixes(env: Env) -> None:
    top = tenant()
    started = datetime.now(timezone.utc) - timedelta(seconds=5)
    logs = [env.log(scope=(top, f"user-{i % 2}")) for i in range(5)]
    for i, log in enumerate(logs):
        assert log.scope == (top, f"user-{i % 2}")
        log.append_many([{"role": "user", "content": "hi"}] * (i + 1))
    found = directory(env)
    everyone = listed(found, (top,), limit=2)
    assert [c.conversation for c in everyone] == [log.conversation for log in reversed(logs)]
    assert [c.last_seq for c in everyone] == [5, 4, 3, 2, 1]
    assert all(c.scope == (top, f"user-{c.last_seq % 2 ^ 1}") for c in everyone)
    assert all(started < c.created_at < started + timedelta(minutes=5) for c in everyone)
    times = [c.created_at for c in everyone]
    assert times == sorted(times, reverse=True)
    ones = found.list((top, "user-1"))
    assert ones.cursor is None
    assert [c.conversation for c in ones.conversations] == [
        logs[3].conversation,
        logs[1].conversation,
    ]
    assert found.list((top, "nobody")).conversations == []
    assert env.log().scope is None


def test_a_conversation_keeps_the_scope_it_was_created_with(env: Env) -> None:
    top = tenant()
    first = env.log(scope=(top, "a"))
    first.add("user", "hi")
    other = env.log(first.conversation, scope=(top, "b"))
    with pytest.raises(ScopeMismatchError, match="Nothing was written") as caught:
        other.add("user", "not mine")
    assert caught.value.recorded == (top, "a")
    assert first.count() == 1
    assert directory(env).list((top, "b")).conversations == []
    again = env.log(first.conversation, scope=(top, "a"))  # the same scope: fine
    assert again.add("user", "again") == 2
    assert len(directory(env).list((top,)).conversations) == 1
    env.log(first.conversation).add("user", "unscoped object")  # scope=None: no check


def test_an_unscoped_conversation_cannot_be_given_a_scope(env: Env) -> None:
    top = tenant()
    plain = env.log()
    plain.add("user", "hi")
    with pytest.raises(ScopeMismatchError, match="without a scope") as caught:
        env.log(plain.conversation, scope=(top,)).add("user", "x")
    assert caught.value.recorded is None
    assert plain.count() == 1
    assert env.raw.exists(plain.keys.owner) == 0
    assert directory(env).list((top,)).conversations == []


def test_an_erased_conversation_or_scope_takes_no_write(env: Env) -> None:
    top = tenant()
    erased = env.log(scope=(top, "u"))
    env.raw.set(erased.keys.seq, "erased")  # the erasure's tombstone
    with pytest.raises(ConversationErasedError, match="Nothing was written") as refused:
        erased.add("user", "back from the dead?")
    assert not isinstance(refused.value, ScopeErasedError)
    assert env.raw.get(erased.keys.seq) in (b"erased", "erased")
    assert env.raw.exists(erased.keys.stream, erased.keys.owner) == 0
    env.raw.set(ScopeKeys("msglog", (top, "u")).tombstone(1), "1")  # the whole tenant erased
    late = env.log(scope=(top, "u", "deeper"))
    with pytest.raises(ScopeErasedError, match="Nothing was written"):
        late.add("user", "x")
    assert env.raw.exists(late.keys.stream, late.keys.seq) == 0
    assert listed(directory(env), (top,)) == []


def test_walk_finds_a_conversation_being_erased_list_does_not(env: Env) -> None:
    """An erasure interrupted between a conversation's tombstone and its unindexing is
    resumed by walking the scope again: walk still yields it, list leaves it out."""
    top = tenant()
    log = env.log(scope=(top, "u"))
    log.add("user", "hi")
    env.raw.set(log.keys.seq, "erased")
    assert directory(env).list((top,)).conversations == []
    if env.flavor == "sync":
        (found,) = Directory(env.make_sync_client()).walk((top,))
        assert (found.conversation, found.last_seq) == (log.conversation, 0)


def test_a_fork_belongs_to_its_source_scope(env: Env) -> None:
    top = tenant()
    source = env.log(scope=(top, "u"))
    source.add("user", "hi")
    fork = source.fork(new_id())
    if env.flavor == "async":
        fork = SyncView(fork, env.loop)
    assert fork.scope == (top, "u")
    assert fork.count() == 2  # the fork entry and the copied message
    found = [c.conversation for c in directory(env).list((top, "u")).conversations]
    assert found == [fork.conversation, source.conversation]
    owner = env.raw.hgetall(fork.keys.owner)
    assert {k.decode() if isinstance(k, bytes) else k for k in owner} == {"scope", "created"}


def test_verify_reports_a_conversation_missing_from_its_indexes_and_register_repairs(
    env: Env,
) -> None:
    top = tenant()
    log = env.log(scope=(top, "u"))
    log.add("user", "hi")
    (listed_one,) = directory(env).list((top,)).conversations
    assert directory(env).unindex(log.conversation, (top, "u"), listed_one.created_at) == 2
    if env.backend != "acl":  # verify reads as the default user
        report = verify_conversation(env.make_sync_client(), "msglog", log.conversation)
        assert report.scope == (top, "u") and len(report.missing_indexes) == 2
        assert "missing from index" in report.problems[0]
    assert directory(env).list((top,)).conversations == []
    assert directory(env).register(log.conversation, (top, "u")) == listed_one.created_at
    assert directory(env).list((top,)).conversations == [listed_one]
    assert directory(env).owner(log.conversation) == ((top, "u"), listed_one.created_at)


def test_bad_arguments_to_a_listing(env: Env) -> None:
    found = directory(env)
    for limit in (0, -1, 1001, "10", None):
        with pytest.raises(InvalidArgumentError, match="limit"):
            found.list(("acme",), limit=limit)
    for cursor in ("", "not a cursor!", "AAAA", 42):
        with pytest.raises(InvalidArgumentError, match="cursor"):
            found.list(("acme",), cursor=cursor)
    with pytest.raises(InvalidArgumentError, match="scope"):
        found.list("acme")


_FORBIDDEN = "/:|{}*?[]\\ \t\n\x00\x7f"
_BAD_PART = st.one_of(
    st.just(""),
    st.text(min_size=201, max_size=300, alphabet="ab"),
    st.builds(
        lambda a, c, b: a + c + b,
        st.text(max_size=5),
        st.sampled_from(_FORBIDDEN),
        st.text(max_size=5),
    ),
    st.integers(),
    st.none(),
    st.binary(min_size=1, max_size=5),
)


@settings(max_examples=200, deadline=None)
@given(
    good=st.lists(st.text(alphabet="abcXYZ019-_.é", min_size=1, max_size=20), max_size=6),
    bad=_BAD_PART,
    at=st.integers(min_value=0, max_value=6),
)
def test_a_bad_scope_is_refused_at_construction(good: list[str], bad: Any, at: int) -> None:
    scope = (*good[:at], bad, *good[at:])
    client = redis.Redis(port=1)  # never reached: refused before anything is sent
    with pytest.raises(InvalidArgumentError, match="scope"):
        MessageLog(client, "conv", scope=scope)
    with pytest.raises(InvalidArgumentError, match="scope"):
        Directory(client).list(scope)


@pytest.mark.parametrize("scope", [(), ("a",) * 9, "acme", ["a", 1], {"a"}, None, ("a", "")])
def test_a_scope_of_the_wrong_shape_is_refused(scope: Any) -> None:
    client = redis.Redis(port=1)
    if scope is None:
        assert MessageLog(client, "conv", scope=None).scope is None
        return
    with pytest.raises(InvalidArgumentError, match="scope"):
        MessageLog(client, "conv", scope=scope)


def test_listing_pages_through_every_conversation_once_while_others_are_created(
    env: Env,
) -> None:
    """10,000 conversations of one scope (1,000 on fakeredis and under the ACL), paged
    through 100 at a time while 4 threads register more in it and in a sub-scope: every
    one of the first is seen exactly once, and nothing is seen twice."""
    if env.flavor == "async":
        pytest.skip("the registration path is the same core; one flavor is enough at this size")
    top = tenant()
    total = 10_000 if env.backend in ("redis", "valkey", "cluster") else 1_000
    seed = Directory(env.make_sync_client())
    pipe = env.make_sync_client()
    existing = [f"{top}:c{i}" for i in range(total)]
    _register_many(pipe, seed, existing, (top, "u"))
    stop = threading.Event()
    created: list[str] = []

    def create(worker: int) -> None:
        mine = Directory(env.make_sync_client())
        n = 0
        while not stop.is_set():
            name = f"{top}:new{worker}-{n}"
            mine.register(name, (top, "u", "deep") if n % 2 else (top, "u"))
            created.append(name)
            n += 1

    workers = [threading.Thread(target=create, args=(w,)) for w in range(4)]
    for worker in workers:
        worker.start()
    try:
        seen = [c.conversation for c in listed(Directory(env.make_sync_client()), (top,))]
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert len(seen) == len(set(seen))
    assert set(existing) <= set(seen)
    assert set(seen) <= set(existing) | set(created)
    assert created, "the creators never ran"


def _register_many(
    client: Any, directory: Directory, names: list[str], scope: tuple[str, ...]
) -> None:
    """Register ``names`` fast: the owner records in pipelines, then the index entries
    through ``register`` (which then only adds them)."""
    for start in range(0, len(names), 500):
        pipe = client.pipeline(transaction=False)
        for i, name in enumerate(names[start : start + 500]):
            keys = ConversationKeys.build("msglog", name)
            created = 1_700_000_000_000_000 + start + i
            pipe.hset(keys.owner, mapping={"scope": "/".join(scope), "created": str(created)})
        pipe.execute()
    for name in names:
        directory.register(name, scope)


def test_a_tenant_user_reaches_its_scopes_only(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """Under ``acl_rules(tenant=...)``: a tenant creates, registers and lists the scopes
    whose outermost part is its name, with conversation ids ``<tenant>:...``, and
    cannot list or touch another tenant's."""
    server = shared_server("redis")
    admin = redis.Redis.from_url(server.url)
    acme, other = tenant(), tenant()
    user = f"scoped-{acme}"
    rules = acl_rules(tenant=acme, redis_version=server_version(admin))
    admin.execute_command("ACL", "SETUSER", user, "reset", "on", ">pw", *rules)
    client = redis.Redis(port=server.port, username=user, password="pw")
    log = MessageLog(client, f"{acme}:conv-1", scope=(acme, "user-42"))
    assert log.add("user", "hi") == 1
    mine = Directory(client)
    assert [c.conversation for c in mine.list((acme,)).conversations] == [log.conversation]
    assert [c.last_seq for c in mine.list((acme, "user-42")).conversations] == [1]
    MessageLog(admin, f"{other}:conv", scope=(other,)).add("user", "theirs")
    with pytest.raises(MessageLogError, match=PERMISSION):
        mine.list((other,))
    with pytest.raises(MessageLogError, match=PERMISSION):
        mine.register(f"{acme}:sneaky", (other,))  # its owner record is allowed, the index not
    with pytest.raises(MessageLogError, match=PERMISSION):
        MessageLog(client, f"{other}:conv-2", scope=(other,)).add("user", "x")
    assert [c.conversation for c in Directory(admin).list((other,)).conversations] == [
        f"{other}:conv"
    ]


def test_a_scoped_log_appends_in_one_round_trip_after_its_first_write(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """Registration is once per log object: its first write costs the two registration
    round trips before the append, every later one a single round trip (as unscoped)."""
    server = shared_server("redis")
    proxy = RoundTripCounter(server.port)
    try:
        client = redis.Redis.from_url(proxy.url)
        client.ping()
        MessageLog(client, new_id()).add("user", "warm")  # the client's eviction check
        scope = (tenant(), "u")
        log = MessageLog(client, new_id(), scope=scope)
        # 3, and one more per scope script the server has not cached yet (NOSCRIPT, EVAL)
        assert 3 <= proxy.counted(lambda: log.add("user", "first")) <= 5
        assert proxy.counted(lambda: log.add("user", "second")) == 1
        assert proxy.counted(lambda: log.append_many([{"role": "user", "content": "x"}] * 3)) == 1
        again = MessageLog(client, log.conversation, scope=scope)
        assert proxy.counted(lambda: again.add("user", "new object")) == 3
        assert proxy.counted(lambda: again.add("user", "steady")) == 1
        found = Directory(client)
        assert proxy.counted(lambda: found.list(scope)) == 2
    finally:
        proxy.close()


def test_the_tenant_rules_in_the_lifecycle_page_are_acl_rules() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md").read_text()
    assert " ".join(acl_rules(tenant="acme")) in doc


@pytest.mark.parametrize("real_backend", ["redis", "valkey"])
def test_msglog_verify_repair_puts_a_conversation_back_in_its_indexes(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    """The crash window, as an operator meets it: the owner record written, the index
    entries not (here: removed). `msglog verify` says so and exits 1; `--repair` adds
    them and exits 0."""
    url = shared_server(real_backend).url
    client = redis.Redis.from_url(url)
    prefix, top = f"cli-{new_id()}", tenant()
    log = MessageLog(client, f"{top}:c", prefix=prefix, scope=(top, "u"))
    log.add("user", "hi")
    found = Directory(client, prefix=prefix)
    (entry,) = found.list((top,)).conversations
    assert [c.conversation for c in found.walk((top,))] == [log.conversation]
    found.unindex(log.conversation, (top, "u"), entry.created_at)
    runner = CliRunner()
    checked = runner.invoke(main, ["--url", url, "--prefix", prefix, "verify", log.conversation])
    assert checked.exit_code == 1, checked.output
    assert "missing from index" in checked.output
    repaired = runner.invoke(
        main, ["--url", url, "--prefix", prefix, "verify", log.conversation, "--repair"]
    )
    assert repaired.exit_code == 0, repaired.output
    assert found.list((top,)).conversations == [entry]
    listing = runner.invoke(main, ["--url", url, "--prefix", prefix, "ls", "--scope", top])
    assert listing.exit_code == 0, listing.output
    assert log.conversation in listing.output and f"{top}/u" in listing.output
    as_json = runner.invoke(
        main, ["--url", url, "--prefix", prefix, "ls", "--scope", f"{top}/u", "--json"]
    )
    assert f'"conversation":"{log.conversation}"' in as_json.output
    assert '"count":1' in as_json.output
    bad = runner.invoke(main, ["--url", url, "--prefix", prefix, "ls", "--scope", "a b"])
    assert bad.exit_code != 0 and "scope part" in bad.output
    assert bad.exception is None or isinstance(bad.exception, SystemExit)


def test_async_directory_walks_and_registers(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    url = shared_server("valkey").url
    top = tenant()

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        found = AsyncDirectory(client)
        for i in range(5):
            await found.register(f"{top}:c{i}", (top, "u"))
        walked = [c.conversation async for c in found.walk((top,))]
        assert walked == [f"{top}:c{i}" for i in reversed(range(5))]
        owner = await found.owner(f"{top}:c0")
        assert owner is not None and owner[0] == (top, "u")
        assert await found.unindex(f"{top}:c0", (top, "u"), owner[1]) == 2
        assert len((await found.list((top,), limit=10)).conversations) == 4
        await client.aclose()

    asyncio.run(main())
