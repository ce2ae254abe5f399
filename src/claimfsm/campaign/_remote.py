"""The campaign's remote: a separate process that records every request it receives.

``serve`` runs in its own process (the harness starts it) and listens on a local socket
(``multiprocessing.connection``, authenticated with a random key). Workers talk to it
through :class:`RemoteClient`, which implements :class:`claimfsm.service.Remote`. Killing
a worker does not stop a request it already sent: the remote finishes it, as a real one
would, and records when it started and ended. The log is the campaign's ground truth.
"""

from __future__ import annotations

import os
import random
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from multiprocessing.connection import Client, Connection, Listener
from typing import Any, Literal

from claimfsm.service import RemoteMode, SendAmbiguous, SendRejected, SendRequest
from claimfsm.spec import RemoteRules

Result = Literal["applied", "deduplicated", "fenced", "lost-request", "lost-ack"]


@dataclass(frozen=True, slots=True)
class RemoteFaults:
    """What goes wrong with one request at the remote, by probability."""

    lost_request: float = 0.03  # dropped on arrival: no effect; the caller times out
    lost_ack: float = 0.03  # applied, then the connection drops before the reply
    latency_seconds: tuple[float, float] = (0.002, 0.04)
    #: a slow request: it runs for ``slow_seconds`` instead (a job that outlives its
    #: worker's patience and its lease); none in the claim's campaign
    slow: float = 0.0
    slow_seconds: tuple[float, float] = (1.0, 2.0)


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the remote saw it (times from the remote's monotonic clock)."""

    target_id: str
    draft_id: int
    epoch: int
    idempotency_key: str
    started: float
    ended: float
    result: Result

    @property
    def admitted(self) -> bool:
        """Reached the remote and was processed (applied, deduplicated or fenced then)."""
        return self.result != "lost-request"

    @property
    def took_effect(self) -> bool:
        return self.result in ("applied", "lost-ack")


class _State:
    """The remote's memory: fences, applied keys, requests in flight, the log."""

    def __init__(self, mode: RemoteMode, faults: RemoteFaults, seed: int) -> None:
        self.mode = mode
        self.rules = RemoteRules(mode)
        self.faults = faults
        self.rng = random.Random(seed)
        self.lock = threading.Condition()
        self.fence: dict[str, int] = {}  # reject epochs at or below
        self.keys: set[str] = set()
        self.in_flight: dict[str, list[int]] = {}  # target -> epochs of requests in flight
        self.log: list[Request] = []

    def send(self, target: str, draft: int, epoch: int, key: str) -> Result:
        started = time.monotonic()
        with self.lock:
            roll = self.rng.random()
            if roll < self.faults.lost_request:
                self.log.append(
                    Request(target, draft, epoch, key, started, started, "lost-request")
                )
                return "lost-request"
            lost_ack = roll < self.faults.lost_request + self.faults.lost_ack
            slow = self.rng.random() < self.faults.slow
            latency = self.rng.uniform(
                *(self.faults.slow_seconds if slow else self.faults.latency_seconds)
            )
            fence = self.rules.arrives(self.fence.get(target, 0), epoch)
            if fence is None:
                self.log.append(Request(target, draft, epoch, key, started, started, "fenced"))
                return "fenced"
            self.fence[target] = fence
            self.in_flight.setdefault(target, []).append(epoch)
        time.sleep(latency)  # the effect happens at the end of the request
        with self.lock:
            self.in_flight[target].remove(epoch)
            result: Result = self.rules.lands(self.fence.get(target, 0), epoch, key in self.keys)
            if result == "applied":
                self.keys.add(key)
                result = "lost-ack" if lost_ack else "applied"
            self.log.append(Request(target, draft, epoch, key, started, time.monotonic(), result))
            self.lock.notify_all()
        return result

    def readback(self, target: str, key: str) -> bool:
        with self.lock:
            return any(r.target_id == target and r.idempotency_key == key and r.took_effect
                       for r in self.log)  # fmt: skip

    def running(self, target: str, epoch: int) -> bool:
        """Readback of an executor: whether a request of ``epoch`` is running here now (it
        cannot see a request its worker has yet to send)."""
        with self.lock:
            return epoch in self.in_flight.get(target, [])

    def ran(self, target: str, epoch: int) -> bool:
        """Readback of an executor: whether a request of ``epoch`` reached it (running
        now, or over: taken, deduplicated, or turned away by the fence). A request lost
        on its way never did."""
        with self.lock:
            return epoch in self.in_flight.get(target, []) or any(
                r.target_id == target and r.epoch == epoch and r.admitted for r in self.log
            )

    def fence_through(self, target: str, epoch: int) -> None:
        with self.lock:
            self.fence[target] = self.rules.fence_through(self.fence.get(target, 0), epoch)
            # Return only once no request at or below the fence can still land.
            self.lock.wait_for(lambda: all(e > epoch for e in self.in_flight.get(target, [])))

    def quiet(self, timeout: float) -> bool:
        """Wait until nothing is in flight."""
        with self.lock:
            return self.lock.wait_for(lambda: not any(self.in_flight.values()), timeout=timeout)


def serve(listener_ready: Connection, mode: RemoteMode, faults: RemoteFaults, seed: int) -> None:
    """The remote process: accept clients until told to stop."""
    authkey = secrets.token_bytes(32)
    listener = Listener(("127.0.0.1", 0), authkey=authkey)
    state = _State(mode, faults, seed)
    listener_ready.send((listener.address, authkey))
    listener_ready.close()
    threading.Thread(target=exit_with_parent, daemon=True).start()
    while True:  # until the harness terminates this process
        try:
            conn = listener.accept()
        except (OSError, EOFError):  # a client that died during the handshake
            continue
        threading.Thread(target=_session, args=(conn, state), daemon=True).start()


def exit_with_parent() -> None:
    """End this process when the harness is gone (killed before it could clean up)."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def _session(conn: Connection, state: _State) -> None:
    """One client connection: requests in, replies out, until the client goes away."""
    try:
        while True:
            message = conn.recv()
            kind = message[0]
            if kind == "send":
                result = state.send(*message[1:])
                if result in ("lost-request", "lost-ack"):
                    conn.close()  # the caller sees the connection drop: outcome unknown
                    return
                conn.send(result)
            elif kind == "readback":
                conn.send(state.readback(*message[1:]))
            elif kind == "running":
                conn.send(state.running(*message[1:]))
            elif kind == "ran":
                conn.send(state.ran(*message[1:]))
            elif kind == "fence":
                state.fence_through(*message[1:])
                conn.send(None)
            elif kind == "quiet":
                conn.send(state.quiet(message[1]))
            elif kind == "log":
                with state.lock:
                    conn.send([asdict(r) for r in state.log])
    except (EOFError, OSError):
        return  # the client died or hung up: its requests in flight still finish
    finally:
        conn.close()


class RemoteClient:
    """A worker's connection to the campaign's remote; implements ``claimfsm.Remote``.

    ``during_call`` runs after a send request has been written and before its reply is
    read: the harness kills workers there ("during the remote call").
    """

    def __init__(
        self,
        address: tuple[str, int],
        authkey: bytes,
        mode: RemoteMode,
        *,
        timeout: float = 0.5,
        during_call: Callable[[SendRequest], None] | None = None,
    ) -> None:
        self.address = address
        self.authkey = authkey
        self.fences_epochs = mode == "fencing"
        self.dedups_by_key = mode == "dedup"
        self.timeout = timeout
        self.during_call = during_call
        self._conn: Connection | None = None

    def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = Client(self.address, authkey=self.authkey)
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _call(
        self, message: tuple[Any, ...], timeout: float, sent: SendRequest | None = None
    ) -> Any:
        try:
            conn = self._connection()
            conn.send(message)
            if sent is not None and self.during_call is not None:
                self.during_call(sent)
            if not conn.poll(timeout):
                self._drop()  # a late reply must not be read as the answer to the next call
                raise TimeoutError(f"no reply within {timeout:g} s")
            return conn.recv()
        except (EOFError, OSError) as exc:
            self._drop()
            raise ConnectionError(f"connection to the remote lost: {exc or 'closed'}") from exc

    def send(self, request: SendRequest) -> None:
        try:
            result = self._call(
                (
                    "send",
                    request.target_id,
                    request.draft_id,
                    request.epoch,
                    request.idempotency_key,
                ),
                self.timeout,
                request,
            )
        except (TimeoutError, ConnectionError) as exc:
            raise SendAmbiguous(str(exc)) from exc
        if result == "fenced":
            raise SendRejected(f"epoch {request.epoch} is fenced for {request.target_id!r}")

    def readback(self, target_id: str, idempotency_key: str, epoch: int) -> bool:
        return bool(self._call(("readback", target_id, idempotency_key), 10.0))

    def fence(self, target_id: str, epoch: int) -> None:
        if not self.fences_epochs:
            raise SendRejected("this remote does not fence")
        self._call(("fence", target_id, epoch), 30.0)

    def running(self, target_id: str, epoch: int) -> bool:
        """Whether a request of ``epoch`` is running at the remote now (an executor's
        readback: ``running``)."""
        return bool(self._call(("running", target_id, epoch), 10.0))

    def ran(self, target_id: str, epoch: int) -> bool:
        """Whether a request of ``epoch`` reached the remote, running or over (an
        executor's readback: ``ran``)."""
        return bool(self._call(("ran", target_id, epoch), 10.0))

    def run(self, target_id: str, epoch: int, key: str, draft: int = 0) -> str:
        """Run one attempt at the remote as an executor (a lifecycle's work): its result,
        ``applied`` or ``fenced``; a lost request or answer, or no answer within the
        timeout, is ``SendAmbiguous`` (the attempt may still be running there). ``draft``:
        the linked draft whose content it carries (0: none)."""
        request = SendRequest(target_id, draft, epoch, key, "")
        try:
            result = self._call(("send", target_id, draft, epoch, key), self.timeout, request)
        except (TimeoutError, ConnectionError) as exc:
            raise SendAmbiguous(str(exc)) from exc
        return str(result)

    # -- for the harness -------------------------------------------------------------------
    def quiet(self, timeout: float) -> bool:
        return bool(self._call(("quiet", timeout), timeout + 5))

    def log(self) -> list[Request]:
        return [Request(**r) for r in self._call(("log",), 30.0)]

    def close(self) -> None:
        self._drop()
