"""A reference receiving service that keeps the HTTP remote contract
(docs/remote-adapters.md), on the standard library alone: ``python examples/receiver.py
MODE [PORT]`` serves on 127.0.0.1 (a free port unless PORT is given) and prints the port.
The tests and the example dispatch service run it; a team building the real receiver can
read it as the contract in code, and point their own fault tests at its fault queue.

MODE ``fencing`` rejects a send whose epoch is at or below the target's fence or below the
highest epoch it has seen; ``dedup`` applies each idempotency key once; ``plain`` applies
every send. Sends, fences and readbacks of a target are serialised by a per-target lock, so
a fence returns only once no send at or below it can still land.

Faults happen on the wire, for the next sends, as the test queues them
(``POST /_faults`` with a JSON list):

- ``slow``: hold the request past the client's timeout, then apply it (it lands late);
- ``reset``: read the whole request, then reset the connection, applying nothing;
- ``5xx``: apply, then answer 503;
- ``lost``: apply, then close the connection without answering.

``GET /_effects`` lists what was applied, in order, with overlaps and fenced sends counted.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

SLOW_SECONDS = 1.5


class State:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.lock = threading.Lock()
        self.locks: dict[str, threading.Lock] = {}
        self.fence: dict[str, int] = {}
        self.highest: dict[str, int] = {}
        self.keys: dict[str, dict[str, Any]] = {}
        self.effects: list[dict[str, Any]] = []
        self.faults: list[str] = []
        self.in_flight: dict[str, int] = {}
        self.overlaps = 0
        self.rejected = 0

    def target_lock(self, target: str) -> threading.Lock:
        with self.lock:
            return self.locks.setdefault(target, threading.Lock())

    def next_fault(self) -> str | None:
        with self.lock:
            return self.faults.pop(0) if self.faults else None


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _reply(self, status: int, body: dict[str, Any] | list[Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length", "0"))
        return json.loads(self.rfile.read(length) or b"null")

    def _parts(self) -> list[str]:
        return [unquote(p) for p in self.path.split("?")[0].strip("/").split("/")]

    def _reset(self) -> None:
        # SO_LINGER 0: close with RST, as a crashed proxy or server would.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def do_POST(self) -> None:
        state = self.server.state
        parts = self._parts()
        if parts == ["_faults"]:
            with state.lock:
                state.faults.extend(self._body())
            self._reply(200, {"queued": len(state.faults)})
            return
        if len(parts) == 3 and parts[0] == "targets" and parts[2] == "effects":
            self._send(parts[1])
            return
        if len(parts) == 3 and parts[0] == "targets" and parts[2] == "fence":
            epoch = int(self.headers["Claimfsm-Epoch"])
            with state.target_lock(parts[1]):
                state.fence[parts[1]] = max(state.fence.get(parts[1], 0), epoch)
            self._reply(200, {"fenced_through": state.fence[parts[1]]})
            return
        self._reply(404, {"error": "no such endpoint"})

    def _send(self, target: str) -> None:
        state = self.server.state
        key = self.headers.get("Idempotency-Key")
        epoch_text = self.headers.get("Claimfsm-Epoch")
        body = self._body()
        if not key or not epoch_text or not isinstance(body, dict):
            self._reply(400, {"error": "Idempotency-Key, Claimfsm-Epoch and a JSON body"})
            return
        epoch = int(epoch_text)
        fault = state.next_fault()
        with state.lock:
            state.in_flight[target] = state.in_flight.get(target, 0) + 1
            if state.in_flight[target] > 1:
                state.overlaps += 1
        try:
            if fault == "reset":
                self._reset()
                return
            if fault == "slow":
                time.sleep(SLOW_SECONDS)  # the client has given up by now
            with state.target_lock(target):
                if state.mode == "fencing" and (
                    epoch <= state.fence.get(target, 0) or epoch < state.highest.get(target, 0)
                ):
                    status, answer = 409, {"error": "fenced", "epoch": epoch}
                    state.rejected += 1
                elif state.mode == "dedup" and key in state.keys:
                    status, answer = 200, {"applied": False, "deduplicated": True}
                else:
                    state.highest[target] = max(state.highest.get(target, 0), epoch)
                    effect = {"target": target, "key": key, "epoch": epoch, **body}
                    state.keys[key] = effect
                    state.effects.append(effect)
                    status, answer = 201, {"applied": True}
        finally:
            with state.lock:
                state.in_flight[target] -= 1
        if fault == "5xx":
            self._reply(503, {"error": "applied, then failed"})
        elif fault == "lost":
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
        else:
            self._reply(status, answer)

    def do_GET(self) -> None:
        state = self.server.state
        parts = self._parts()
        if parts == ["_effects"]:
            with state.lock:
                listed = {"effects": state.effects, "overlaps": state.overlaps}
                self._reply(200, {**listed, "rejected": state.rejected})
            return
        if len(parts) == 4 and parts[0] == "targets" and parts[2] == "effects":
            with state.target_lock(parts[1]):
                found = state.keys.get(parts[3])
            present = found is not None and found["target"] == parts[1]
            self._reply(200 if present else 404, {"present": present})
            return
        self._reply(404, {"error": "no such endpoint"})


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, mode: str, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.state = State(mode)


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "fencing"
    if mode not in ("fencing", "dedup", "plain") or len(sys.argv) > 3:
        sys.exit("usage: python examples/receiver.py [fencing|dedup|plain] [PORT]")
    port = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 0
    server = Server(mode, port)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
