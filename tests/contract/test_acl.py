"""The documented ACL rules (``acl_rules``, docs/durability.md#security) on real servers:
every public operation and ``msglog`` command works under them, for a whole prefix and
for tenants sharing one prefix, and the server records no refused command (``ACL LOG``);
each dangerous command is refused; a tenant reads, lists, follows and writes nothing of
another's."""

from __future__ import annotations

import asyncio
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
import redis
import redis.asyncio
import redis.cluster
from hypothesis import given, settings
from hypothesis import strategies as st

from redis_msglog import (
    AsyncMessageLog,
    ConversationKeys,
    Durability,
    DurabilityUnsupportedError,
    EvictionWarning,
    MessageLog,
    MessageLogError,
    NotDurableError,
    acl_rules,
    acl_rules_for,
)
from redis_msglog._tools.acl import DELETION_COMMANDS, LIBRARY_COMMANDS
from redis_msglog.testing import EphemeralServer

from ..conftest import REAL_BACKENDS, new_id, server_version

pytestmark = pytest.mark.slow  # every operation and command under the rules, per tenant

PASSWORD = "acl-suite-password"
PERMISSION = r"(?i)permission"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40  # over the default blob threshold


@dataclass
class AclServer:
    """A private server (so that its ``ACL LOG`` is this test's) and its admin client."""

    server: EphemeralServer
    admin: redis.Redis

    @property
    def version(self) -> tuple[int, int]:
        return server_version(self.admin)

    def user(self, name: str, prefix: str = "msglog", tenant: str | None = None) -> str:
        rules = acl_rules_for(self.admin, prefix, tenant=tenant)  # the server's version
        self.admin.execute_command("ACL", "SETUSER", name, "reset", "on", f">{PASSWORD}", *rules)
        return name

    def client(self, name: str) -> redis.Redis:
        return redis.Redis(port=self.server.port, username=name, password=PASSWORD)

    def url(self, name: str) -> str:
        return f"redis://{name}:{PASSWORD}@127.0.0.1:{self.server.port}/0"

    def refused(self, name: str) -> list[str]:
        """The commands, keys and channels refused to ``name`` (``ACL LOG``)."""
        entries = self.admin.execute_command("ACL", "LOG", "128")
        found = []
        for entry in entries:
            fields = _fields(entry)
            if fields["username"] == name:
                found.append(f"{fields['reason']} {fields['object']}")
        return found


def _fields(entry: Any) -> dict[str, str]:
    pairs = entry.items() if isinstance(entry, dict) else zip(entry[::2], entry[1::2], strict=True)
    return {_text(k): _text(v) for k, v in pairs}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@pytest.fixture(params=REAL_BACKENDS)
def acl(
    request: pytest.FixtureRequest, private_server: Callable[..., EphemeralServer]
) -> AclServer:
    server = private_server(str(request.param), ["--appendonly", "yes"])
    return AclServer(server, redis.Redis(port=server.port))


def msglog(url: str, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[str]:
    root = str(Path(__file__).resolve().parents[2])
    return subprocess.run(
        [sys.executable, "-m", "redis_msglog", "--url", url, *args],
        input=None if input is None else input.decode(),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": root},
        check=False,
    )


# -- every operation under the rules -------------------------------------------------------


def exercise_the_library(
    client: Any,
    conversation: str,
    fork_to: str,
    version: tuple[int, int],
    scope: tuple[str, ...] | None = None,
) -> None:
    """Every public operation of the sync client on ``conversation`` (in ``scope``)."""
    log = MessageLog(client, conversation, ttl=timedelta(days=1), scope=scope)
    assert log.add("user", "hello") == 1
    batch: list[dict[str, Any]] = [
        {"role": "assistant", "content": "", "toolCalls": [{"id": "c1", "name": "f", "args": {}}]},
        {"role": "tool", "content": "42", "toolCallId": "c1"},
        {
            "role": "assistant",
            "content": [{"type": "image", "data": PNG, "media_type": "image/png"}],
        },
    ]
    for _ in range(2):  # the second is answered from the idempotency record
        assert log.append_many(batch, idempotency_key="batch-1", attrs={"title": "acl"}) == 5
    assert log.all()[-1].content[0].data == PNG  # type: ignore[union-attr]
    assert log.all(blobs="refs")[-1].seq == 5
    log.add("user", "more", expected_seq=5)
    assert [m.seq for m in log.last(2)] == [5, 6]
    assert [m.seq for m in log.read(after=4)] == [5, 6]
    assert log.count() == 6 and log.count(view="active") == 5  # the attrs entry is no row
    assert log.attrs().values == {"title": "acl"}
    log.last_turns(1), log.last_tokens(1000, lambda m: 1)
    log.to_openai(), log.to_anthropic(), log.to_responses(), log.to_langchain()
    log.append_openai([{"role": "user", "content": "from openai"}])
    log.set_attrs({"title": None})
    log.retract([1])
    assert log.pop() is not None
    log.compact([{"role": "system", "content": "summary"}], through_seq=4)
    log.archive(through_seq=log.count())
    log.add("user", "after the edits")
    log.fork(fork_to)
    assert MessageLog(client, fork_to).count() > 0
    assert log.all(view="physical")
    _follow_and_subscribe(log)
    MessageLog(client, fork_to).replace([{"role": "user", "content": "replaced"}])
    MessageLog(client, fork_to).clear()
    waiting = Durability(replicas=1, timeout=timedelta(milliseconds=5))
    with pytest.raises(NotDurableError):  # WAIT ran: no replica, committed anyway
        MessageLog(client, conversation, durability=waiting).add("user", "waited")
    aof = MessageLog(client, conversation, durability=Durability(aof=True))
    if version >= (7, 2):
        aof.add("user", "in the AOF")  # WAITAOF ran
    else:
        with pytest.raises(DurabilityUnsupportedError):  # Redis 7.0 has no WAITAOF
            aof.add("user", "in the AOF")


def _follow_and_subscribe(log: MessageLog) -> None:
    follow = log.follow(after=0)
    assert next(follow).seq == 1
    cast(Any, follow).close()
    got = threading.Event()
    with log.subscribe(lambda rows: got.set(), after=0):
        assert got.wait(10)


async def exercise_asyncio(url: str, conversation: str) -> None:
    client = redis.asyncio.Redis.from_url(url)
    try:
        log = AsyncMessageLog(client, conversation)
        seq = await log.add("user", "from asyncio")
        assert (await log.last(1))[0].seq == seq
        follow = log.follow(after=seq - 1)
        assert (await anext(follow)).seq == seq
        await cast(Any, follow).aclose()
    finally:
        await client.aclose()


def exercise_the_command(
    url: str, conversation: str, other: str, tmp_path: Path, scope: str | None = None
) -> None:
    """Every ``msglog`` command on ``conversation`` (``other``: where to import); with
    ``scope`` (a tenant's, whose user may not SCAN) the listings are the scope's."""
    exported = tmp_path / f"{new_id()}.jsonl"
    every = ["--scope", scope] if scope else ["--all"]
    listing = ["--scope", scope] if scope else []
    for args in (
        ["ls", *listing],
        ["ls", "--json", *listing],
        ["show", conversation],
        ["show", conversation, "--physical", "--json"],
        ["tail", conversation, "-n", "3"],
        ["export", conversation, "-o", str(exported)],
        ["export", conversation, "--format", "openai"],
        ["import", str(exported), other],
        ["stats", conversation],
        ["stats", *listing],
        ["verify", conversation],
        ["verify", *every],
    ):
        result = msglog(url, *args)
        assert result.returncode == 0, (args, result.stderr)
        assert "NOPERM" not in result.stdout + result.stderr
    listed = msglog(url, "ls", "--json", *listing).stdout.split()
    names = [orjson.loads(line)["conversation"] for line in listed]
    assert sorted(names) == sorted(set(names))  # each once
    assert conversation in names
    assert (other in names) == (scope is None)  # imported without a scope: in no index


def subscribe_with_redis_cli(port: int, user: str, channel: str, publish: Callable[[], Any]) -> str:
    """The docs' recipe, ``redis-cli SUBSCRIBE <channel>``, as ``user``: what it prints
    for one commit."""
    cli = subprocess.Popen(
        ["redis-cli", "-p", str(port), "--user", user, "SUBSCRIBE", channel],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "REDISCLI_AUTH": PASSWORD},
    )
    try:
        assert cli.stdout is not None
        seen, published = b"", False
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and b'"messages"' not in seen:
            if select.select([cli.stdout], [], [], 0.2)[0]:
                seen += os.read(cli.stdout.fileno(), 65536)
            if not published and seen.count(b"\n") >= 3:  # subscribe, the channel, 1
                publish()
                published = True
        return seen.decode()
    finally:
        cli.terminate()
        cli.wait(10)


SCOPES = {"prefix": None, "tenant": "acme"}


@pytest.mark.parametrize("scope", SCOPES)
def test_every_operation_works_under_the_rules(acl: AclServer, scope: str, tmp_path: Path) -> None:
    tenant = SCOPES[scope]
    user = acl.user(f"app-{scope}", tenant=tenant)
    owned = f"{tenant}:" if tenant else ""
    conversation, fork_to, imported = (f"{owned}{new_id()}" for _ in range(3))
    own_scope = None if tenant is None else (tenant,)
    exercise_the_library(acl.client(user), conversation, fork_to, acl.version, own_scope)
    asyncio.run(exercise_asyncio(acl.url(user), conversation))
    exercise_the_command(acl.url(user), conversation, imported, tmp_path, tenant)
    log = MessageLog(acl.client(user), conversation)
    printed = subscribe_with_redis_cli(
        acl.server.port, user, log.keys.channel, lambda: log.add("user", "watched")
    )
    assert "watched" in printed, printed
    if tenant is None:  # the demo's ids are its own: under a whole prefix only
        demo = msglog(acl.url(user), "demo", "--workers", "2", "--turns", "1")
        assert demo.returncode == 0, demo.stdout + demo.stderr
    # Nothing the library does is refused: no SCAN under a tenant (stats counts the
    # idempotency records through the records set).
    assert acl.refused(user) == []


# -- what is refused ------------------------------------------------------------------------


DANGEROUS: list[tuple[Any, ...]] = [
    ("FLUSHALL",), ("FLUSHDB",), ("SWAPDB", 0, 1), ("CLIENT", "KILL", "TYPE", "normal"),
    ("CLIENT", "PAUSE", 1000), ("CLIENT", "LIST"), ("CLIENT", "NO-EVICT", "on"),
    ("FUNCTION", "FLUSH"), ("FUNCTION", "LOAD", "#!lua name=x\nreturn 1"),
    ("SCRIPT", "FLUSH"), ("SCRIPT", "KILL"), ("CONFIG", "SET", "maxmemory", "1"),
    ("CONFIG", "GET", "requirepass"), ("CONFIG", "RESETSTAT"), ("DEBUG", "SLEEP", 0),
    ("SHUTDOWN", "NOSAVE"), ("KEYS", "*"), ("MONITOR",), ("ACL", "SETUSER", "x", "on"),
    ("ACL", "LIST"), ("REPLICAOF", "127.0.0.1", 1), ("SAVE",), ("BGSAVE",), ("BGREWRITEAOF",),
    ("FAILOVER",), ("CLUSTER", "RESET"), ("MODULE", "LIST"), ("SLOWLOG", "RESET"),
    ("LATENCY", "RESET"), ("MEMORY", "PURGE"), ("OBJECT", "FREQ", "msglog:{x}:seq"),
    ("DEL", "msglog:{acme:x}:seq"),
    ("RENAME", "msglog:{acme:x}:seq", "msglog:{acme:y}:seq"),
    ("EXPIRE", "msglog:{acme:x}:stream", 1), ("XTRIM", "msglog:{acme:x}:stream", "MAXLEN", 0),
    ("XDEL", "msglog:{acme:x}:stream", "1-1"), ("MIGRATE", "127.0.0.1", 1, "k", 0, 1),
    ("RESTORE", "msglog:{acme:x}:seq", 0, b"x"), ("DUMP", "msglog:{acme:x}:stream"),
    ("PSUBSCRIBE", "*"), ("SORT", "msglog:{acme:x}:seq"),
]  # fmt: skip


@pytest.mark.parametrize("scope", SCOPES)
def test_dangerous_commands_are_refused(acl: AclServer, scope: str) -> None:
    user = acl.user(f"app-{scope}", tenant=SCOPES[scope])
    client = acl.client(user)
    MessageLog(acl.client(user), "acme:x").add("user", "kept")
    before = acl.admin.dbsize()
    for command in DANGEROUS:
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.execute_command(*command)
    # A script runs under its caller's user: it cannot do more.
    for call in (
        "redis.call('FLUSHALL')",
        "redis.call('DEL', KEYS[1])",
        "redis.call('SET', 'someone-elses-key', 1)",
    ):
        with pytest.raises(redis.exceptions.ResponseError, match=r"permission|can't (run|access)"):
            client.eval(f"return {call}", 1, "msglog:{acme:x}:seq")
    assert acl.admin.dbsize() == before
    assert MessageLog(acl.admin, "acme:x").count() == 1
    assert acl.admin.ping()  # not shut down, not paused


# -- tenants in one prefix -------------------------------------------------------------------


def test_a_tenant_reaches_nothing_of_another(acl: AclServer, tmp_path: Path) -> None:
    """``acme`` and ``acme2`` in one prefix: neither reads, writes, follows, lists or
    verifies the other's conversations (the pattern of ``acme`` does not match
    ``acme2``), and each sees its own once."""
    acme, acme2 = acl.user("acme", tenant="acme"), acl.user("acme2", tenant="acme2")
    mine = MessageLog(acl.client(acme), "acme:c1", scope=("acme",))
    theirs = MessageLog(acl.client(acme2), "acme2:c1", scope=("acme2",))
    mine.append_many([{"role": "user", "content": "acme's"}] * 2)
    theirs.append_many([{"role": "user", "content": "acme2's"}] * 3)
    damaged = MessageLog(acl.client(acme2), "acme2:damaged", scope=("acme2",))
    damaged.add("user", "counter lost")
    acl.admin.delete(damaged.keys.seq)  # found by its stream alone
    for owner, other, count in ((acme, "acme2:c1", 3), (acme2, "acme:c1", 2)):
        client = acl.client(owner)
        intruder = MessageLog(client, other)
        for attempt in (intruder.all, intruder.count):
            with pytest.raises(MessageLogError, match=PERMISSION):
                attempt()
        with pytest.raises(MessageLogError, match=PERMISSION):
            intruder.add("user", "x")
        with pytest.raises(MessageLogError, match=PERMISSION):
            next(intruder.follow(after=0))
        with pytest.raises(MessageLogError, match=PERMISSION):  # UNLINK: own keys only
            intruder.erase()
        pubsub = client.pubsub()
        with pytest.raises(redis.exceptions.NoPermissionError):
            pubsub.subscribe(intruder.keys.channel)
            pubsub.get_message(timeout=5)
        assert MessageLog(acl.admin, other).count() == count  # nothing written
        with pytest.raises(MessageLogError, match=PERMISSION):  # no ':' after the tenant
            MessageLog(client, owner).add("user", "outside")
    for owner, own, count in ((acme, "acme:c1", 2), (acme2, "acme2:c1", 3)):
        url = acl.url(owner)
        listed = msglog(url, "ls", "--json", "--scope", owner)  # its scope's index: no SCAN
        assert listed.returncode == 0, listed.stderr
        rows = [orjson.loads(line) for line in listed.stdout.split()]
        expected = [(own, count)] + ([("acme2:damaged", 0)] if owner == acme2 else [])
        assert sorted((r["conversation"], r["count"]) for r in rows) == sorted(expected)
        verified = msglog(url, "verify", "--scope", owner)
        assert re.search(rf"\b{len(expected)} conversations? checked", verified.stdout), (
            verified.stdout
        )
        assert verified.returncode == (1 if owner == acme2 else 0)  # acme2's own damage
        stats = msglog(url, "stats", "--scope", owner)
        assert stats.returncode == 0, stats.stderr
        assert re.search(rf"conversations +{len(expected)} ", stats.stdout), stats.stdout
        assert re.search(rf"entries appended \(edits included\) +{count} ", stats.stdout), (
            stats.stdout
        )
        other = "acme2:c1" if owner == acme else "acme:c1"
        other_scope = "acme2" if owner == acme else "acme"
        for args in (
            ["show", other],
            ["export", other],
            ["stats", other],
            ["verify", other],
            ["ls", "--scope", other_scope],
            ["verify", "--scope", other_scope],
            ["stats", "--scope", other_scope],
        ):
            refused = msglog(url, *args)
            assert refused.returncode == 1 and "permission" in refused.stderr.lower(), args
            assert len(refused.stderr.splitlines()) == 1
    erased = MessageLog(acl.client(acme), "acme:erased")  # a tenant erases its own
    erased.append({"role": "user", "content": "x"}, idempotency_key="k")
    erased.erase()
    assert acl.admin.get(erased.keys.seq) == b"erased" and mine.count() == 2
    # Its idempotency record goes too: the conversation's records set names it, so a
    # tenant, refused SCAN, erases it whole (and sends no SCAN).
    assert acl.admin.exists(erased.keys.idempotency_record("k"), erased.keys.records) == 0
    for owner in (acme, acme2):  # only the intrusions above
        commands = {r for r in acl.refused(owner) if r.startswith("command")}
        assert not commands, acl.refused(owner)


@pytest.mark.parametrize("tenant", ["", "a:b", "a*", "x{y}", "a b", "é"])
def test_a_tenant_name_that_could_reach_another_is_refused(tenant: str) -> None:
    with pytest.raises(ValueError, match="tenant"):
        acl_rules(tenant=tenant)


def test_the_rules_are_the_documented_line() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "durability.md").read_text()
    assert " ".join(acl_rules()) in doc
    assert " ".join(acl_rules(tenant="acme")) in doc


# -- a cluster under the rules ---------------------------------------------------------------


def test_a_cluster_client_under_the_rules(
    shared_cluster: Callable[[], Any], tmp_path: Path
) -> None:
    cluster = shared_cluster()
    prefix, user = f"acl-{new_id()}", f"app-{new_id()}"
    nodes = [redis.Redis(port=s.port) for s in cluster.servers]
    rules = acl_rules(prefix, redis_version=server_version(nodes[0]))
    for node in nodes:  # ACLs are per node
        node.execute_command("ACL", "SETUSER", user, "on", f">{PASSWORD}", *rules)
    client = redis.cluster.RedisCluster(
        host="127.0.0.1", port=cluster.port, username=user, password=PASSWORD
    )
    logs = [MessageLog(client, new_id(), prefix=prefix) for _ in range(4)]  # several slots
    for log in logs:
        log.append_many([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
        log.retract([1])
        follow = log.follow(after=0)
        assert next(follow).seq == 1  # every entry: the log as it grows
        cast(Any, follow).close()
        assert [m.content for m in log.all()] == ["yo"]
    url = f"redis://{user}:{PASSWORD}@127.0.0.1:{cluster.port}/0"
    for args in (["ls", "--json"], ["show", logs[0].conversation], ["stats"], ["verify", "--all"]):
        result = msglog(url, "--prefix", prefix, "--cluster", *args)
        assert result.returncode == 0, (args, result.stderr)
    refused = [
        _fields(e)
        for node in nodes
        for e in node.execute_command("ACL", "LOG", "128")
        if _fields(e)["username"] == user
    ]
    assert refused == []


# -- the integrations under the rules ---------------------------------------------------------


async def exercise_the_integrations(url: str, owned: str) -> None:
    """Each integration's reads and writes (``owned``: the start of the ids the user owns)."""
    from langchain_core.messages import AIMessage, HumanMessage
    from llama_index.core.llms import ChatMessage
    from pydantic_ai import Agent
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.models.test import TestModel

    from redis_msglog.integrations.langchain import MessageLogChatHistory
    from redis_msglog.integrations.llama_index import MessageLogChatStore
    from redis_msglog.integrations.openai_agents import MessageLogSession
    from redis_msglog.integrations.pydantic_ai import RedisConversationStore

    history = MessageLogChatHistory(f"{owned}{new_id()}", redis.Redis.from_url(url))
    history.add_messages([HumanMessage("hi"), AIMessage("hello")])
    assert [m.content for m in history.messages] == ["hi", "hello"]
    history.clear()

    session = MessageLogSession.from_url(f"{owned}{new_id()}", url=url)
    await session.add_items([{"role": "user", "content": "hi"}])
    assert len(await session.get_items()) == 1
    assert await session.pop_item() is not None
    await session.clear_session()
    await session.close()

    store = MessageLogChatStore.from_url(url)
    key = f"{owned}{new_id()}"
    await store.add_message(key, ChatMessage(role="user", content="hi"))
    assert [m.content for m in await store.get_messages(key)] == ["hi"]
    assert key in await store.get_keys()
    await store.delete_messages(key)
    await store.aclose()

    conversations = RedisConversationStore.from_url(url)
    conversation_id = f"{owned}{new_id()}"
    result = await Agent(TestModel()).run(
        "hi", conversation=Conversation(conversation_id=conversation_id)
    )
    await conversations.save(result)
    loaded = await conversations.load(conversation_id)
    assert loaded is not None and loaded.messages
    await conversations.aclose()


def test_the_integrations_work_under_the_rules(acl: AclServer) -> None:
    """Each integration under the whole-prefix rules (the Pydantic AI store keeps an index
    outside any tenant's conversations: tenants give it a prefix of their own)."""
    user = acl.user("app")
    asyncio.run(exercise_the_integrations(acl.url(user), ""))
    assert acl.refused(user) == []


def test_the_server_checks_work_under_the_rules(
    real_backend: str, private_server: Callable[..., EphemeralServer]
) -> None:
    """The eviction-policy warning and the AOF check read ``INFO``, which the rules
    allow (with ``CONFIG GET`` they went silently unchecked for this user)."""
    server = private_server(real_backend, ["--maxmemory-policy", "allkeys-lru"])
    acl = AclServer(server, redis.Redis(port=server.port))
    client = acl.client(acl.user("app"))
    with pytest.warns(EvictionWarning, match="allkeys-lru"):
        MessageLog(client, new_id()).add("user", "may be evicted")
    if acl.version >= (7, 2):  # appendonly no: refused before anything is written
        log = MessageLog(client, new_id(), durability=Durability(aof=True))
        with pytest.raises(DurabilityUnsupportedError, match="appendonly yes"):
            log.add("user", "x")
        assert acl.admin.exists(log.keys.stream) == 0
    assert acl.refused("app") == []


IDS = st.tuples(
    st.sampled_from(["acme:", "acme2:", "acme", "acme:{", "acme}:", "%61cme:", "ACME:", "", "x"]),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=12),
).map("".join)


def test_a_tenant_pattern_covers_exactly_its_ids(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """The server's own verdict (``ACL DRYRUN``) on every key and the channel of
    generated ids: tenant ``acme`` may touch exactly the ids that start with ``acme:``."""
    admin = redis.Redis.from_url(shared_server("redis").url)
    users = {}
    for tenant in ("acme", "acme2"):
        users[tenant] = f"dryrun-{tenant}-{new_id()}"
        rules = acl_rules(tenant=tenant, redis_version=server_version(admin))
        admin.execute_command("ACL", "SETUSER", users[tenant], "on", "nopass", *rules)

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(conversation=IDS.filter(bool))
    def check(conversation: str) -> None:
        keys = ConversationKeys.build("msglog", conversation)
        for tenant, user in users.items():
            owns = conversation.startswith(f"{tenant}:")
            for key in (keys.seq, keys.stream, keys.blobs, keys.idempotency_record("k")):
                verdict = admin.execute_command("ACL", "DRYRUN", user, "GET", key)
                assert (verdict in (b"OK", "OK")) == owns, (tenant, conversation, key, verdict)
            verdict = admin.execute_command("ACL", "DRYRUN", user, "PUBLISH", keys.channel, "x")
            assert (verdict in (b"OK", "OK")) == owns, (tenant, conversation, verdict)

    check()


def test_every_command_the_scripts_call_is_allowed() -> None:
    """A script's commands are checked under the caller's user: a command a Lua file
    starts to call must join the allow-list in the same change, or every ACL user's
    appends fail (found when the blob-reference check added HEXISTS)."""
    lua = Path(__file__).resolve().parents[2] / "lua"
    called = {
        name.lower()
        for path in lua.glob("*.lua")
        for name in re.findall(r"redis\.p?call\('([A-Za-z]+)'", path.read_text())
    }
    assert called, "no redis.call found: the pattern no longer matches the scripts"
    assert called - set(LIBRARY_COMMANDS) == set(DELETION_COMMANDS)  # acl_rules(deletions=True)


# -- what a tenant may not learn: the keyspace -------------------------------------------------

KEYSPACE_WIDE: list[tuple[Any, ...]] = [
    ("SCAN", 0), ("SCAN", 0, "MATCH", "msglog:{beta:*", "COUNT", 1000), ("KEYS", "*"),
    ("RANDOMKEY",), ("DBSIZE",), ("CLUSTER", "GETKEYSINSLOT", 0, 10),
    ("CLUSTER", "COUNTKEYSINSLOT", 0), ("MEMORY", "STATS"), ("MEMORY", "DOCTOR"),
    ("PUBSUB", "CHANNELS"), ("PUBSUB", "SHARDCHANNELS"),
    ("PUBSUB", "NUMSUB", "msglog:{beta:x}:events"), ("SLOWLOG", "GET"), ("CLIENT", "LIST"),
    ("LATENCY", "LATEST"), ("OBJECT", "ENCODING", "msglog:{beta:x}:seq"),
]  # fmt: skip


def test_a_tenant_lists_no_other_tenants_keys(acl: AclServer) -> None:
    """Redis does not filter ``SCAN``/``KEYS`` by a user's key patterns: a tenant is
    refused every command that lists or counts the keyspace, from a script too, and
    lists its own conversations from its scope's index (``msglog ls --scope``)."""
    acme, beta = acl.user("acme", tenant="acme"), acl.user("beta", tenant="beta")
    MessageLog(acl.client(acme), "acme:c1", scope=("acme",)).add("user", "acme's")
    MessageLog(acl.client(beta), "beta:user-ssn-123", scope=("beta",)).add("user", "beta's")
    client = acl.client(acme)
    for command in KEYSPACE_WIDE:
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.execute_command(*command)
    for call in ("redis.call('SCAN', 0)", "redis.call('KEYS', '*')", "redis.call('DBSIZE')"):
        with pytest.raises(redis.exceptions.ResponseError, match=r"permission|can't run"):
            client.eval(f"return {call}", 0)
    listed = msglog(acl.url(acme), "ls", "--json", "--scope", "acme")
    assert listed.returncode == 0, listed.stderr
    assert [orjson.loads(line)["conversation"] for line in listed.stdout.split()] == ["acme:c1"]
    for args in (["ls"], ["verify", "--all"], ["stats"]):  # SCAN: told to pass --scope
        refused = msglog(acl.url(acme), *args)
        assert refused.returncode == 1 and "--scope" in refused.stderr, (args, refused.stderr)
        assert len(refused.stderr.splitlines()) == 1
    for args in (["ls", "--scope", "acme"], ["verify", "--scope", "acme"], ["stats", "acme:c1"]):
        shown = msglog(acl.url(acme), *args)
        assert shown.returncode == 0 and "beta" not in shown.stdout + shown.stderr, args
    # The whole-prefix rules (a trusted application's user) keep SCAN: msglog ls.
    app = acl.user("app")
    assert acl.client(app).scan(0, match="msglog:{beta:*")[1]


# -- rules that fit the server's version ----------------------------------------------------------


@pytest.mark.parametrize("kind", REAL_BACKENDS)
def test_the_rules_read_from_the_server_are_accepted(
    kind: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    """``acl_rules_for(client)`` and ``msglog acl`` read the server's version: Redis 7.0
    (no ``WAITAOF``, no ``CLIENT SETINFO``) accepts them, where it refuses the default
    ``acl_rules()``."""
    server = shared_server(kind)
    admin = redis.Redis(port=server.port)
    user = f"fit-{new_id()}"
    for tenant in (None, "acme"):
        for deletions in (False, True):
            rules = acl_rules_for(admin, tenant=tenant, deletions=deletions)
            assert admin.execute_command("ACL", "SETUSER", user, "reset", *rules)
    printed = msglog(server.url, "acl", "--user", user, "--tenant", "acme")
    assert printed.returncode == 0, printed.stderr
    words = printed.stdout.split()
    assert words[:5] == ["ACL", "SETUSER", user, "on", ">PASSWORD"]
    assert words[5:] == acl_rules_for(admin, tenant="acme")
    assert admin.execute_command(*[w.replace("PASSWORD", PASSWORD) for w in words])
    if server_version(admin) < (7, 2):
        with pytest.raises(redis.ResponseError, match=r"(?i)unknown command"):
            admin.execute_command("ACL", "SETUSER", user, "reset", *acl_rules())
    admin.execute_command("ACL", "DELUSER", user)


def test_the_pydantic_ai_store_under_a_tenant(acl: AclServer) -> None:
    """A store scoped to the tenant (log option ``scope=("acme",)``) saves, loads and
    lists its records under tenant ``acme``'s rules, which grant no ``SCAN``: its listing
    reads the scope's index and its entry index is inside the tenant's keys."""
    from pydantic_ai import Agent
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.models.test import TestModel

    from redis_msglog.integrations.pydantic_ai import RedisConversationStore

    user = acl.user("acme", tenant="acme")
    beta = RedisConversationStore.from_url(acl.url(acl.user("app")))  # SCAN: all of them

    async def run() -> None:
        store = RedisConversationStore.from_url(acl.url(user), scope=("acme",))
        ids = [f"acme:{new_id()}" for _ in range(2)]
        for conversation_id in ids:
            result = await Agent(TestModel()).run(
                "hi", conversation=Conversation(conversation_id=conversation_id)
            )
            await store.save(result)
            loaded = await store.load(conversation_id)
            assert loaded is not None and loaded.messages
        other = await Agent(TestModel()).run("hi", conversation=Conversation(conversation_id="b"))
        await beta.save(other)  # another application's, outside the tenant
        listed = await store.read_records()
        assert sorted(r.conversation_id for r in listed) == sorted(ids)
        assert len(await beta.read_records()) == 3
        await store.aclose()
        await beta.aclose()

    asyncio.run(run())
    assert acl.refused(user) == []
