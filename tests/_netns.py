"""A second "host" on this machine, whose network link a test can cut: a network namespace
joined to this one by a veth pair (root and iproute2 needed; FIELD-NOTES: traffic stays
between the two). Nothing in it but a TCP forwarder, so a client here can reach a server
here through it, and lose it the way a dead or partitioned host is lost: packets simply
stop, nothing is reset.

``with IsolatedHost() as host:`` makes it; ``host.forward(port, to_port)`` listens at
``host.address:port`` and forwards each connection to ``host.gateway:to_port`` (this side
of the link); ``host.cut()`` takes the link down. Leaving the block deletes the namespace
and the pair.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

FORWARD = r"""
import socket, sys, threading
listen, port, target, to = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def pump(a, b):
    try:
        while (chunk := a.recv(65536)):
            b.sendall(chunk)
    except OSError:
        pass
server = socket.create_server((listen, port))
print("listening", flush=True)
while True:
    client, _ = server.accept()
    upstream = socket.create_connection((target, to))
    for a, b in ((client, upstream), (upstream, client)):
        threading.Thread(target=pump, args=(a, b), daemon=True).start()
"""


def unavailable() -> str | None:
    """Why this machine cannot make one (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2 (ip)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class IsolatedHost:
    def __init__(self) -> None:
        suffix = secrets.token_hex(3)
        self.namespace = f"claimfsm_{suffix}"
        self._outer, self._inner = f"cfa{suffix}", f"cfb{suffix}"  # at most 15 characters
        net = 1 + secrets.randbelow(250)
        self.gateway, self.address = f"10.231.{net}.1", f"10.231.{net}.2"
        self._forwarders: list[subprocess.Popen[str]] = []
        _ip("netns", "add", self.namespace)
        try:
            _ip("link", "add", self._outer, "type", "veth", "peer", "name", self._inner)
            _ip("link", "set", self._inner, "netns", self.namespace)
            _ip("addr", "add", f"{self.gateway}/30", "dev", self._outer)
            _ip("link", "set", self._outer, "up")
            inside = ("netns", "exec", self.namespace, "ip")
            _ip(*inside, "addr", "add", f"{self.address}/30", "dev", self._inner)
            _ip(*inside, "link", "set", self._inner, "up")
            _ip(*inside, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> IsolatedHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def forward(self, port: int, to_port: int) -> None:
        """Listen at ``address:port`` in the namespace, forwarding to ``gateway:to_port``."""
        command = ["ip", "netns", "exec", self.namespace, sys.executable, "-c", FORWARD]
        args = [self.address, str(port), self.gateway, str(to_port)]
        proc = subprocess.Popen(
            [*command, *args], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent
        )
        self._forwarders.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "listening"
        deadline = time.monotonic() + 10
        while True:  # reachable from this side
            try:
                socket.create_connection((self.address, port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise

    def cut(self) -> None:
        """The link goes down: packets both ways stop, and no one is told."""
        _ip("link", "set", self._outer, "down")

    def close(self) -> None:
        for proc in self._forwarders:
            proc.kill()
            proc.wait(30)
            if proc.stdout is not None:
                proc.stdout.close()
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "delete", self.namespace)  # takes the inner end, and so the pair
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("link", "delete", self._outer)
