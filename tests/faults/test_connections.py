"""How the library uses the client's connections, on real
servers with redis-py's default clients:

- a call waits for a busy pool instead of failing, and a call none of whose tries was
  sent is never "in doubt" (500 appends gathered on one log object all commit once);
- a refused login or ACL refusal fails at once with its own error, nothing written;
- the retry deadline bounds a call whatever the client's own retry settings.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from click.testing import CliRunner
from redis._parsers import _RESP2Parser
from redis.backoff import NoBackoff
from redis.retry import Retry

from redis_msglog import (
    AsyncMessageLog,
    AuthenticationError,
    MessageLog,
    PermissionDeniedError,
    RetryPolicy,
    ServerUnavailableError,
    acl_rules,
)
from redis_msglog._cli import main
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id, server_version
from ..support.cluster import LocalCluster

pytestmark = pytest.mark.slow  # retry deadlines waited out, closed ports, TLS

CALLS = 500  # five times redis-py's default max_connections (100)
MESSAGES = [{"role": "user", "content": f"message {i}"} for i in range(CALLS)]


def assert_each_once(raw: Any, stream: str, seqs: list[int]) -> None:
    """Every call got its own seq, and the stream holds every message exactly once."""
    assert sorted(seqs) == list(range(1, CALLS + 1))
    bodies = [fields[b"msg"] for _id, fields in raw.xrange(stream)]
    assert sorted(bodies) == sorted(
        f'{{"role":"user","content":"message {i}"}}'.encode() for i in range(CALLS)
    )


# -- item 7: a busy pool is waited for; nothing unsent is ever in doubt ----------------


def test_gathered_appends_on_one_async_log_all_commit_once(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    """500 appends gathered on one AsyncMessageLog with a default redis.asyncio client:
    the 400 that find the pool's 100 connections busy wait for one, and none is answered
    MSGLOG_STALE (they used to be: re-sent with a look-up although never sent)."""
    url = shared_server(real_backend).url

    async def gather() -> tuple[list[int], str]:
        client = redis.asyncio.Redis.from_url(url)
        log = AsyncMessageLog(client, new_id())
        try:
            seqs = await asyncio.gather(*(log.append(m) for m in MESSAGES))
            assert await log.count() == CALLS
            return seqs, log.keys.stream
        finally:
            await client.aclose()

    seqs, stream = asyncio.run(gather())
    assert_each_once(redis.Redis.from_url(url), stream, seqs)


def test_gathered_appends_on_one_async_cluster_log_all_commit_once(
    shared_cluster: Callable[[], LocalCluster],
) -> None:
    """The same on a Redis Cluster: the owning node's 100 connections are waited for."""
    cluster = shared_cluster()

    async def gather() -> tuple[list[int], str]:
        client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.port)
        log = AsyncMessageLog(client, new_id())
        try:
            seqs = await asyncio.gather(*(log.append(m) for m in MESSAGES))
            return seqs, log.keys.stream
        finally:
            await client.aclose()

    seqs, stream = asyncio.run(gather())
    assert_each_once(cluster.client(), stream, seqs)


@pytest.mark.parametrize("max_connections", [1, 4])
def test_threads_on_one_log_share_a_small_pool_and_all_commit_once(
    real_backend: str, shared_server: Callable[[str], EphemeralServer], max_connections: int
) -> None:
    """The sync twin: 50 threads making 10 appends each on one MessageLog, through a
    pool of ``max_connections``."""
    url = shared_server(real_backend).url
    log = MessageLog(redis.Redis.from_url(url, max_connections=max_connections), new_id())
    seqs: list[int] = []
    failures: list[BaseException] = []
    start = threading.Barrier(50)

    def work(first: int) -> None:
        start.wait()
        for msg in MESSAGES[first : first + 10]:
            try:
                seqs.append(log.append(msg))
            except Exception as exc:  # collected: the assertion below names it
                failures.append(exc)

    threads = [threading.Thread(target=work, args=(i * 10,)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert_each_once(redis.Redis.from_url(url), log.keys.stream, seqs)


def test_calls_cancelled_while_waiting_for_the_pool_leave_no_trace(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """Half of 60 appends waiting for a pool of 2 are cancelled: the others all commit,
    every connection is back in the pool, and the line keeps moving for later calls."""
    url = shared_server("redis").url

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(url, max_connections=2)
        log = AsyncMessageLog(client, new_id())
        tasks = [asyncio.ensure_future(log.append(m)) for m in MESSAGES[:60]]
        await asyncio.sleep(0)  # every task has started: 2 sending, 58 in line
        for task in tasks[1::2]:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        kept = results[0::2]
        assert all(isinstance(seq, int) for seq in kept), kept
        pool = client.connection_pool
        assert not pool._in_use_connections and len(pool._available_connections) <= 2
        later = await asyncio.gather(*(log.add("user", "later") for _ in range(20)))
        assert len(set(later)) == 20 and await log.count() == max(later)
        await client.aclose()

    asyncio.run(run())


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_a_pool_kept_busy_past_the_deadline_is_unavailable_not_in_doubt(
    shared_server: Callable[[str], EphemeralServer], flavor: str
) -> None:
    """Someone else holds the pool's only connection through the whole deadline: the
    append was never sent, so it is ServerUnavailableError (nothing written), never
    AppendInDoubtError; once the connection is back, the same log appends."""
    url = shared_server("redis").url
    conversation, retry = new_id(), RetryPolicy(deadline=1.0)
    raw = redis.Redis.from_url(url)
    if flavor == "sync":
        client = redis.Redis.from_url(url, max_connections=1)
        log = MessageLog(client, conversation, retry=retry)
        held = client.connection_pool.get_connection()
        with pytest.raises(ServerUnavailableError, match="max_connections") as caught:
            log.add("user", "hi")
        assert type(caught.value) is ServerUnavailableError
        assert raw.exists(log.keys.stream) == 0
        client.connection_pool.release(held)
        assert log.add("user", "hi") == 1
        return

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(url, max_connections=1)
        log = AsyncMessageLog(client, conversation, retry=retry)
        held = await client.connection_pool.get_connection()
        with pytest.raises(ServerUnavailableError, match="max_connections") as caught:
            await log.add("user", "hi")
        assert type(caught.value) is ServerUnavailableError
        assert raw.exists(log.keys.stream) == 0
        await client.connection_pool.release(held)
        assert await log.add("user", "hi") == 1
        await client.aclose()

    asyncio.run(run())


# -- item 13: a refused login or ACL refusal fails at once, with its own error ---------

PASSWORD = "right-password"


@pytest.fixture
def locked_server(private_server: Callable[..., EphemeralServer]) -> Iterator[EphemeralServer]:
    """A server of the test's own (its login count is the test's) where the default
    user needs a password, user ``app`` has the documented rules and ``outsider`` may run
    everything on keys ``other:*`` only."""
    server = private_server("redis")
    admin = redis.Redis.from_url(server.url)
    rules = acl_rules(redis_version=server_version(admin))
    admin.execute_command("ACL", "SETUSER", "app", "on", f">{PASSWORD}", *rules)
    admin.execute_command("ACL", "SETUSER", "outsider", "on", f">{PASSWORD}", "~other:*", "+@all")
    admin.execute_command("CONFIG", "SET", "requirepass", PASSWORD)
    yield server


def admin_of(server: EphemeralServer) -> redis.Redis:
    return redis.Redis(port=server.port, password=PASSWORD)


def logins(server: EphemeralServer) -> int:
    """Connections the server has accepted so far (each makes one login)."""
    return int(admin_of(server).info("stats")["total_connections_received"]) - 1


DENIED: dict[str, tuple[dict[str, Any], type[Exception], str]] = {
    "wrong password": (
        {"username": "app", "password": "wrong"},
        AuthenticationError,
        "WRONGPASS",
    ),
    "no credentials": ({}, AuthenticationError, "NOAUTH"),
    "unknown user": ({"username": "nobody", "password": PASSWORD}, AuthenticationError, "WRONG"),
    "keys outside the user's patterns": (
        {"username": "outsider", "password": PASSWORD},
        PermissionDeniedError,
        "NOPERM",
    ),
}
OPERATIONS: dict[str, Callable[[Any], Any]] = {
    "append": lambda log: log.add("user", "hi"),
    "append_many": lambda log: log.append_many(MESSAGES[:3]),
    "count": lambda log: log.count(),
    "all": lambda log: log.all(),
    "last": lambda log: log.last(),
}


@pytest.mark.parametrize("case", list(DENIED))
@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_a_refused_login_or_acl_refusal_fails_at_once_with_its_own_error(
    locked_server: EphemeralServer, case: str, flavor: str
) -> None:
    """Every operation raises the typed error at its first refusal: at most two logins
    (the library used to retry them as an outage, 11+ per call and ServerUnavailableError
    after the deadline), and nothing is written."""
    credentials, error, code = DENIED[case]
    retry = RetryPolicy(deadline=2.0)
    loop = asyncio.new_event_loop()
    try:
        for name, operation in OPERATIONS.items():
            before = logins(locked_server)
            with pytest.raises(error, match=code) as caught:
                if flavor == "sync":
                    client = redis.Redis(port=locked_server.port, **credentials)
                    operation(MessageLog(client, new_id(), retry=retry))
                else:
                    aclient = redis.asyncio.Redis(port=locked_server.port, **credentials)
                    alog = AsyncMessageLog(aclient, new_id(), retry=retry)
                    loop.run_until_complete(operation(alog))
            assert "Nothing was written" in str(caught.value), name
            assert logins(locked_server) - before <= 2, name
    finally:
        loop.close()
    assert admin_of(locked_server).dbsize() == 0


def test_a_login_refused_mid_life_is_an_authentication_error(
    locked_server: EphemeralServer,
) -> None:
    """A worker whose password was changed (its connections killed) fails at its next
    call with AuthenticationError, not after the deadline as an outage."""
    log = MessageLog(
        redis.Redis(port=locked_server.port, username="app", password=PASSWORD), new_id()
    )
    assert log.add("user", "hi") == 1
    admin = admin_of(locked_server)
    admin.execute_command("ACL", "SETUSER", "app", "resetpass", ">rotated")
    admin.execute_command("CLIENT", "KILL", "USER", "app")
    before = logins(locked_server)
    with pytest.raises(AuthenticationError):
        log.add("user", "again")
    assert logins(locked_server) - before <= 2
    assert log.keys.stream and admin.xlen(log.keys.stream) == 1


def test_an_acl_refusal_inside_the_append_script_is_permission_denied(
    locked_server: EphemeralServer,
) -> None:
    """A user who may not publish the append's event: the server refuses it from inside
    the script (``ERR The user executing the script can't publish...``), not as NOPERM;
    still PermissionDeniedError, and nothing written."""
    admin = admin_of(locked_server)
    admin.execute_command("ACL", "SETUSER", "mute", "on", f">{PASSWORD}", "~*", "+@all")
    admin.execute_command("ACL", "SETUSER", "mute", "resetchannels")
    client = redis.Redis(port=locked_server.port, username="mute", password=PASSWORD)
    log = MessageLog(client, new_id())
    with pytest.raises(PermissionDeniedError, match="publish"):
        log.add("user", "hi")
    assert admin.dbsize() == 0


def test_cluster_logins_and_acl_refusals_fail_at_once(
    shared_cluster: Callable[[], LocalCluster],
) -> None:
    """On a Redis Cluster: a wrong password (asyncio: the client meets it when it first
    fetches the slot table; sync: when the password changes under a running client) and a
    key outside the user's patterns, each its own error at the first refusal."""
    cluster = shared_cluster()
    user, outsider = f"app-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    admins = [redis.Redis(port=server.port) for server in cluster.servers]
    for admin in admins:
        # Broader than acl_rules(): this test's refusals are its own (tests/contract/test_acl.py
        # runs a cluster client under the documented rules).
        admin.execute_command("ACL", "SETUSER", user, "on", f">{PASSWORD}", "~*", "&*", "+@all")
        admin.execute_command("ACL", "SETUSER", outsider, "on", f">{PASSWORD}", "~o:*", "+@all")
    retry = RetryPolicy(deadline=2.0)
    try:

        async def asyncio_side() -> None:
            for name, password, error in (
                (user, "wrong", AuthenticationError),
                (outsider, PASSWORD, PermissionDeniedError),
            ):
                client = redis.asyncio.cluster.RedisCluster(
                    host="127.0.0.1", port=cluster.port, username=name, password=password
                )
                log = AsyncMessageLog(client, new_id(), retry=retry)
                with pytest.raises(error):
                    await log.add("user", "hi")
                with pytest.raises(error):
                    await log.count()
                await client.aclose()

        asyncio.run(asyncio_side())
        outside = MessageLog(
            cluster.client(username=outsider, password=PASSWORD),
            new_id(),
            retry=retry,
        )
        with pytest.raises(PermissionDeniedError):
            outside.add("user", "hi")
        log = MessageLog(
            cluster.client(username=user, password=PASSWORD),
            new_id(),
            retry=retry,
        )
        assert log.add("user", "hi") == 1
        for admin in admins:
            admin.execute_command("ACL", "SETUSER", user, "resetpass", ">rotated")
            admin.execute_command("CLIENT", "KILL", "USER", user)
        with pytest.raises(AuthenticationError):
            log.add("user", "again")
        with pytest.raises(AuthenticationError):
            log.all()
        url = f"redis://{user}:wrong@127.0.0.1:{cluster.port}/0"
        result = CliRunner().invoke(main, ["--cluster", "--url", url, "show", "conv"])
        assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
        assert result.output.startswith("msglog: authentication failed"), result.output
    finally:
        for admin in admins:
            admin.execute_command("ACL", "DELUSER", user, outsider)


CLI_CASES = [
    (user, command)
    for user in ("app:wrong", "", "outsider:" + PASSWORD)
    for command in (["show", "conv"], ["tail", "conv"], ["import", "FILE", "conv"], ["ls"])
    if not (user.startswith("outsider") and command == ["ls"])  # it lists nothing: no error
]


@pytest.mark.parametrize(
    ("user", "command"),
    CLI_CASES,
    ids=[f"{u.split(':')[0] or 'none'}-{c[0]}" for u, c in CLI_CASES],
)
def test_the_cli_says_a_refused_login_in_one_line(
    locked_server: EphemeralServer, command: list[str], user: str, tmp_path: Any
) -> None:
    """`msglog` with a wrong password, no password, or a user the ACL refuses: one line,
    exit 1, at once (a login for msglog's cluster probe and one for the command), nothing
    written."""
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"role":"user","content":"hi"}\n')
    args = [str(lines) if arg == "FILE" else arg for arg in command]
    url = f"redis://{user}@127.0.0.1:{locked_server.port}/0" if user else locked_server.url
    before = logins(locked_server)
    result = CliRunner().invoke(main, ["--url", url, *args])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("msglog: ") and result.output.count("\n") == 1
    expected = "NOPERM|permission" if user.startswith("outsider") else "login|authentication"
    assert any(word in result.output for word in expected.split("|")), result.output
    assert PASSWORD not in result.output and "wrong" not in result.output.replace("WRONGPASS", "")
    # At once: msglog's INFO cluster probe and the command's one login (not a retry
    # loop), plus the connection that counted `before`.
    assert logins(locked_server) - before <= 3
    assert admin_of(locked_server).dbsize() == 0


# -- item 16: the retry deadline bounds a call, whatever the client's own retries ------

DEADLINE = 2.0
SLACK = 3.0
"""A call that cannot connect ends within its deadline plus one connection attempt that
starts at the deadline (at least ``_io.pool.MIN_CONNECT_WITHIN``, 1 s), plus scheduling on
a loaded test machine: 3 s is generous for that, and far below what the client's own
retries added (redis-py 8's 10 connect retries per try: 10.5-13.5 s for a 2 s deadline)."""


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def timed(call: Callable[[], Any]) -> tuple[float, BaseException]:
    started = time.monotonic()
    try:
        call()
    except Exception as exc:
        return time.monotonic() - started, exc
    raise AssertionError("the call succeeded")


CLIENTS: dict[str, Callable[[EphemeralServer], dict[str, Any]]] = {
    # redis.Redis() as written, nothing listening: redis-py retries each connect 10 times.
    "closed port": lambda server: {"host": "localhost", "port": closed_port()},
    # TLS to a server that speaks plain RESP: the handshake never completes.
    "tls to a plain port": lambda server: {
        "port": server.port,
        "ssl": True,
        "ssl_cert_reqs": "none",
    },
}


@pytest.mark.parametrize("parser", ["default", "python"])
def test_a_connection_the_library_connected_keeps_the_clients_own_timeouts(
    shared_server: Callable[[str], EphemeralServer], parser: str
) -> None:
    """The library bounds its connect by the deadline (here 1 s); the connection then
    goes back to the client's pool with the client's socket_timeout (none), so the
    client's own commands may still wait longer than that."""
    options: dict[str, Any] = {"port": shared_server("redis").port, "socket_timeout": None}
    if parser == "python":
        options["parser_class"] = _RESP2Parser
    # No retry of the client's own: a timed-out command must not be re-sent to pass.
    pool = redis.ConnectionPool(retry=Retry(NoBackoff(), 0), **options)
    client = redis.Redis(connection_pool=pool)
    log = MessageLog(client, new_id(), retry=RetryPolicy(deadline=0.0))
    assert log.add("user", "hi") == 1  # connected by the library, within 1 s
    assert log.count() == 1
    assert client.execute_command("DEBUG", "SLEEP", "1.5") in (b"OK", "OK")


@pytest.mark.parametrize("operation", ["append", "count"])
@pytest.mark.parametrize("case", list(CLIENTS))
@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_the_deadline_bounds_a_call_whatever_the_clients_own_retries(
    shared_server: Callable[[str], EphemeralServer], case: str, flavor: str, operation: str
) -> None:
    options = CLIENTS[case](shared_server("redis"))
    retry = RetryPolicy(deadline=DEADLINE)
    if flavor == "sync":
        log = MessageLog(redis.Redis(**options), new_id(), retry=retry)
        call: Callable[[], Any] = (
            log.count if operation == "count" else lambda: log.add("user", "x")
        )
    else:
        alog = AsyncMessageLog(redis.asyncio.Redis(**options), new_id(), retry=retry)
        coroutine: Callable[[], Any] = (
            alog.count if operation == "count" else lambda: alog.add("user", "x")
        )
        call = lambda: asyncio.run(coroutine())  # noqa: E731
    elapsed, error = timed(call)
    assert type(error) is ServerUnavailableError, error
    assert elapsed <= DEADLINE + SLACK, f"{elapsed:.1f} s"
