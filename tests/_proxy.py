"""A TCP proxy in front of PostgreSQL that can lose a COMMIT the way a partition does: the
client's connection breaks, while the server's side of it stays open and silent, so the
server never learns that the client is gone.

``with CommitSwallower(url) as proxy:`` listens on ``proxy.port`` for the server ``url``
names (``through(url, proxy)`` is the same URL through the proxy). Once ``proxy.armed``
is set, the next chunk a client sends that holds the statement ``COMMIT`` is never
forwarded: the client's socket is reset (it sees the connection break while waiting for
COMMIT's answer) and the server's socket is kept open, sending nothing, until the proxy
closes. Everything else is forwarded as it comes. With ``on_commit``, the client's socket
is not reset but left open and silent too, and ``on_commit()`` is called: a test cuts the
client's network there (``_netns``), so the client learns nothing at all. ``host`` is the
address it listens on.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any


class CommitSwallower:
    def __init__(
        self, url: str, *, host: str = "127.0.0.1", on_commit: Callable[[], None] | None = None
    ) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        self._server = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._on_commit = on_commit
        self._listener = socket.create_server((host, 0))
        self.port: int = self._listener.getsockname()[1]
        self.armed = False
        self.swallowed = 0
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> CommitSwallower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection, the held ones included: their backends end."""
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        for s in [self._listener, *sockets]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked on it; close would not
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._server)
            with self._lock:
                if self._closed:
                    client.close()
                    server.close()
                    return
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        while True:
            try:
                chunk = source.recv(65536)
            except OSError:
                return
            if not chunk:
                with contextlib.suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)
                return
            if from_client and self._swallow(chunk):
                if self._on_commit is not None:
                    self._on_commit()  # both sides kept open and silent
                    return
                # reset the client's side; keep the server's open and silent
                source.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                with contextlib.suppress(OSError):
                    source.close()
                return
            try:
                sink.sendall(chunk)
            except OSError:
                return

    def _swallow(self, chunk: bytes) -> bool:
        with self._lock:
            if self.armed and b"COMMIT\x00" in chunk:  # the statement, not READ COMMITTED
                self.armed = False
                self.swallowed += 1
                return True
        return False


def through(url: str, proxy: Any) -> str:
    """``url`` (postgresql://host[:port]/db?...) with its host and port the proxy's."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


def lose_the_next_commit(proxy: CommitSwallower, call: Any, seconds: float = 45) -> Any:
    """Run ``call()`` with the proxy armed to lose its COMMIT; its result, or AssertionError
    if it is still waiting after ``seconds`` (the proxy is closed then, which ends the held
    backend and so the wait). An exception ``call`` raises goes on."""
    found: dict[str, Any] = {}

    def run() -> None:
        try:
            found["result"] = call()
        except BaseException as exc:  # handed to the test's thread
            found["error"] = exc

    proxy.armed = True
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    stuck = worker.is_alive()
    if stuck:
        proxy.close()  # ends the held backend, and so the wait
        worker.join(30)
    assert proxy.swallowed == 1, "no COMMIT went through the proxy"
    assert not stuck, (
        f"still waiting {seconds:g} s after its COMMIT was lost: the abandoned transaction's"
        " backend held its locks"
    )
    if "error" in found:
        raise found["error"]
    return found["result"]
