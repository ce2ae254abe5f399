"""One campaign worker process: dispatch through ``Dispatcher`` until told to stop or killed.

A worker saves each handle it acquires (target, epoch, token) to its own handle file, as
a real worker would to resume after a restart. At the moments the campaign targets it asks
the harness to kill it and waits: the harness sends SIGKILL, so the process dies exactly
there. A restarted worker may resume its last saved handle, which by then is usually stale.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from claimfsm.campaign._remote import RemoteClient, exit_with_parent
from claimfsm.errors import ClaimFSMError, StaleClaim, StoreError
from claimfsm.service import Dispatcher, RemoteMode, SendRequest
from claimfsm.spec import State
from claimfsm.store import Claim, Store, open_store

#: The moments a worker can be killed on purpose, in dispatch order.
KILL_POINTS = ("after-acquire", "after-begin-send", "during-call", "after-ack")
#: Where a worker can stall (SIGSTOP, as in a long GC pause or a swapped-out VM) and wake
#: up after its lease lapsed: before its remote call, and before its confirm.
PAUSE_POINTS = ("after-begin-send", "after-ack")
_STEP_TO_POINT = {"acquired": "after-acquire", "sending": "after-begin-send", "sent": "after-ack"}


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    index: int
    incarnation: int  # 0 for the first start, +1 per restart
    store_url: str
    remote_address: tuple[str, int]
    remote_authkey: bytes
    remote_mode: RemoteMode
    targets: tuple[str, ...]
    lease_seconds: float
    send_timeout: float
    kill_probability: float  # per dispatch, at each of KILL_POINTS
    pause_probability: float  # per dispatch, at each of PAUSE_POINTS: stop, woken up late
    forced: tuple[str, str] | None  # ("kill" or "pause", point): done the first time it is reached
    resume_probability: float  # on restart: resume the last saved handle
    run_dir: Path
    seed: int
    #: the declaration's path, for a lifecycle of your own ("": the claim protocol)
    design: str = ""

    @property
    def name(self) -> str:
        return f"worker-{self.index}"

    @property
    def handle_file(self) -> Path:
        return self.run_dir / f"{self.name}.handles"

    @property
    def log_file(self) -> Path:
        return self.run_dir / f"{self.name}.log"

    @property
    def stop_file(self) -> Path:
        return self.run_dir / "stop"


class Moments:
    """A worker's moments: where the harness kills it or it stalls, the planned action
    first (``spec.forced``, the first time it is reached), then the random ones."""

    def __init__(
        self,
        spec: WorkerSpec,
        report: Connection,
        log: logging.Logger,
        rng: random.Random,
        pause_points: tuple[str, ...],
    ) -> None:
        self.spec, self.report, self.log, self.rng = spec, report, log, rng
        self.pause_points = pause_points
        self.forced = [spec.forced] if spec.forced else []

    def kill_me(self, point: str) -> None:
        self.log.info("asking to be killed at %s", point)
        self.report.send(("kill", point))
        time.sleep(60)  # the harness sends SIGKILL now
        os._exit(3)  # pragma: no cover - the harness is gone

    def pause_me(self, point: str) -> None:
        self.log.info("stalling at %s", point)
        self.report.send(("paused", point))
        os.kill(os.getpid(), signal.SIGSTOP)  # SIGCONT comes after the lease lapsed
        self.log.info("woke up at %s; carrying on with the handle", point)

    def at(self, point: str) -> None:
        """A moment of the work: the planned action, then the random ones."""
        if self.forced and self.forced[0][1] == point:
            action, _ = self.forced.pop()
            (self.kill_me if action == "kill" else self.pause_me)(point)
            return
        if self.rng.random() < self.spec.kill_probability:
            self.kill_me(point)
        if point in self.pause_points and self.rng.random() < self.spec.pause_probability:
            self.pause_me(point)


def worker_main(spec: WorkerSpec, report: Connection) -> None:
    """The process entry point (``multiprocessing``, spawn)."""
    logged(_work, spec, report)


def logged(
    work: Callable[[WorkerSpec, Connection], None], spec: WorkerSpec, report: Connection
) -> None:
    """``work(spec, report)``, with what ends it unexpectedly in the worker's log."""
    try:
        work(spec, report)
    except BaseException:
        logging.getLogger("claimfsm.campaign.worker").exception("worker failed")
        raise


def _work(spec: WorkerSpec, report: Connection) -> None:
    logging.basicConfig(
        filename=spec.log_file,
        level=logging.INFO,
        format=f"%(asctime)s {spec.name}.{spec.incarnation} %(levelname)s %(message)s",
    )
    log = logging.getLogger("claimfsm.campaign.worker")
    rng = random.Random(spec.seed * 7919 + spec.index * 131 + spec.incarnation)

    at = Moments(spec, report, log, rng, PAUSE_POINTS).at

    def during_call(request: SendRequest) -> None:
        at("during-call")

    def on_step(step: str, claim: Claim) -> None:
        if step == "acquired":
            _save_handle(spec.handle_file, claim)
            log.info("acquired %r", claim)
        point = _STEP_TO_POINT.get(step)
        if point is not None:
            at(point)

    try:
        store = open_store(spec.store_url)
    except StoreError as exc:  # e.g. the PostgreSQL server is restarting: exit, be restarted
        log.warning("cannot open the store: %s", exc)
        report.send(("store-error", "open"))
        return
    remote = RemoteClient(
        spec.remote_address,
        spec.remote_authkey,
        spec.remote_mode,
        timeout=spec.send_timeout,
        during_call=during_call,
    )
    dispatcher = Dispatcher(
        store, remote, owner=spec.name, lease_seconds=spec.lease_seconds, on_step=on_step
    )
    if spec.incarnation > 0 and rng.random() < spec.resume_probability:
        report.send(("resume", _resume(dispatcher, spec.handle_file, log)))
    try:
        threading.Thread(target=exit_with_parent, daemon=True).start()
        while not spec.stop_file.exists():
            target = rng.choice(spec.targets)
            try:
                result = dispatcher.dispatch_next(target)
            except StoreError as exc:  # the database went away mid-dispatch: the lease decides
                log.warning("store error while dispatching %s: %s", target, exc)
                report.send(("store-error", "dispatch"))
                time.sleep(rng.uniform(0.05, 0.2))
                continue
            log.info("dispatch %s: %s %r", target, result.outcome, result.claim)
            report.send(("result", result.outcome))
            if result.outcome in ("busy", "idle"):
                time.sleep(rng.uniform(0.005, 0.02))
    finally:
        remote.close()
        store.close()


def save_handle(path: Path, fields: dict[str, Any]) -> None:
    """Append a handle a restarted worker needs, as one JSON line; the file is private to
    this worker."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(json.dumps(fields) + "\n")


def last_handle(path: Path, types: dict[str, type]) -> dict[str, Any] | None:
    """The fields of the last whole line whose ``types`` match (the kill may have torn the
    last); None: none saved."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        try:
            found = json.loads(line)
            if all(type(found[name]) is kind for name, kind in types.items()):
                return {name: found[name] for name in types}
        except (ValueError, TypeError, KeyError):
            continue
    return None


def _save_handle(path: Path, claim: Claim) -> None:
    save_handle(path, {"target": claim.target_id, "epoch": claim.epoch, "token": claim.token})


def _last_handle(path: Path) -> tuple[str, int, str] | None:
    """(target, epoch, token) from the last whole line."""
    found = last_handle(path, {"target": str, "epoch": int, "token": str})
    return None if found is None else (found["target"], found["epoch"], found["token"])


def _resume(dispatcher: Dispatcher, path: Path, log: logging.Logger) -> str:
    """Carry on with the saved handle, as a restarted worker would. Returns what happened."""
    saved = _last_handle(path)
    if saved is None:
        return "nothing-saved"
    store: Store = dispatcher.store
    try:
        claim = store.resume(*saved)
    except StaleClaim as exc:
        log.info("saved handle is stale: %s", exc)
        return "stale (discard recorded)"
    except ClaimFSMError as exc:
        log.info("cannot resume: %s", exc)
        return f"refused ({type(exc).__name__})"
    log.info("resumed %r", claim)
    try:
        if claim.role == State.RESERVED:
            outcome = dispatcher.send(claim).outcome  # nothing was sent yet: carry on
            return f"continued ({outcome})"
        if claim.role == State.SENDING:
            # We may or may not have sent before dying: only readback can tell.
            claim.mark_uncertain("worker restarted; the send may have happened")
            return "marked uncertain"
    except ClaimFSMError as exc:
        log.info("resumed claim refused: %s", exc)
        return f"refused ({type(exc).__name__})"
    return f"already {claim.state}"
