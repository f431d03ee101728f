"""A TCP proxy that loses replies on purpose, to test what a client does when the
connection fails after the server may have executed its request."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from types import TracebackType


class ReplyDroppingProxy:
    """Forwards every connection to ``127.0.0.1:upstream_port``.

    While ``drops`` is above zero, a request containing ``trigger`` arms the connection:
    with ``after_execute=True`` the request is forwarded and the connection is closed as
    soon as the server's reply arrives, without passing it on (the server executed it);
    with ``after_execute=False`` it is closed without forwarding the request at all.
    Either way ``drops`` goes down by one and ``dropped`` up by one.
    """

    def __init__(
        self, upstream_port: int, *, trigger: bytes = b"EVAL", after_execute: bool = True
    ) -> None:
        self.upstream_port = upstream_port
        self.trigger = trigger
        self.after_execute = after_execute
        self.drops = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = False
        self._live: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()  # upstream down: the client sees a dropped connection
                continue
            self._live.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _take_drop(self) -> bool:
        with self._lock:
            if self.drops <= 0:
                return False
            self.drops -= 1
            self.dropped += 1
            return True

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        armed = False
        with selectors.DefaultSelector() as selector, client, upstream:
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            while not self._closed:
                for key, _ in selector.select(timeout=0.5):
                    source = key.fileobj
                    assert isinstance(source, socket.socket)  # registered above
                    try:
                        data = source.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    if source is upstream and armed:
                        return  # the server answered: lose the reply
                    if source is client and self.trigger in data and self._take_drop():
                        if not self.after_execute:
                            return  # the request never reaches the server
                        armed = True
                    try:
                        key.data.sendall(data)
                    except OSError:
                        return

    def cut(self) -> None:
        """Drop every open connection (as a failover of a virtual IP would)."""
        for sock in list(self._live):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._live.clear()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.cut()

    def __enter__(self) -> ReplyDroppingProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
