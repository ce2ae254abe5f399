"""The crash and fault campaign: worker processes, a remote process, SIGKILL, broken
connections and a database restart; then sweep, reconcile and judge.

The harness (this process) starts the remote process and the worker processes, kills
workers with SIGKILL (on their request at a chosen moment, and at random moments of its
own), restarts them, and runs a sweeper that lapses leases, reconciles uncertain claims by
readback and keeps approved drafts coming. On PostgreSQL it also terminates worker
backends in the middle of their transactions and restarts the server once. At the end it
stops the workers, lets every lease lapse, sweeps and reconciles, and judges the store's
history against the remote's log (``_verdict.judge``).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pickle
import random
import secrets
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from claimfsm.audit import audit
from claimfsm.campaign._config import CampaignConfig, CampaignReport
from claimfsm.campaign._database import DatabaseFaults, drop_schema
from claimfsm.campaign._remote import RemoteClient, RemoteFaults, Request, serve
from claimfsm.campaign._verdict import judge
from claimfsm.campaign._worker import KILL_POINTS, WorkerSpec, worker_main
from claimfsm.errors import StoreError
from claimfsm.service import Dispatcher, SendAmbiguous, SendRejected
from claimfsm.spec import State
from claimfsm.store import Store, open_store

#: What reading a pipe can raise when its writer was killed mid-message.
_TORN = (EOFError, OSError, ValueError, TypeError, AttributeError, pickle.UnpicklingError)
_REMOTE_ERRORS = (ConnectionError, TimeoutError, SendAmbiguous, SendRejected)


@dataclass
class _Worker:
    spec: WorkerSpec
    process: multiprocessing.process.BaseProcess
    report: Connection
    killed: bool = False


class _Campaign:
    """The harness. The claim protocol's by default; a lifecycle of your own overrides what
    its workers run, the moments they are killed at, its sweeper and its verdict
    (``_lifecycle``)."""

    #: the moments a worker is killed at on purpose, each at least once
    kill_points: tuple[str, ...] = KILL_POINTS
    #: where worker 1's second incarnation stalls past its lease
    first_pause = "after-begin-send"
    #: the declaration the workers load, by path ("": the claim protocol's store)
    design = ""
    #: its name, in the report ("": the claim protocol)
    design_name = ""

    def __init__(self, config: CampaignConfig) -> None:
        config.check()
        self.c = config
        self.rng = random.Random(config.seed)
        self.ctx = multiprocessing.get_context("spawn")
        self.run_id = secrets.token_hex(4)
        self.targets = [f"target-{i + 1}" for i in range(config.targets)]
        self.kills: Counter[str] = Counter({p: 0 for p in (*self.kill_points, "random")})
        self.pauses: Counter[str] = Counter()
        self.wake_at: dict[int, float] = {}  # pid -> when to send SIGCONT
        self.forced_pending: set[int] = set()  # workers yet to reach their planned moment
        self.resumes: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.restarts = 0
        self.worker_store_errors = 0
        self.sweeper_errors = 0
        self.backends_terminated = 0
        self.server_restarts = 0
        self.unexpected: list[str] = []
        self.stop = threading.Event()
        self.harness_failed = threading.Event()  # a sweeper or fault thread died
        self.schema: str | None = None
        self.faults: DatabaseFaults | None = None
        self.stopped_by = "time"
        self.started = time.monotonic()
        #: what the remote's log was asked (``log_shows``): once seen, and when last read
        self.log_seen: dict[str, bool] = {}
        self.log_read_at: dict[str, float] = {}

    # -- what the run must have done ----------------------------------------------------------
    def sends(self) -> int:
        """Sends the workers reported as begun (confirmed or left uncertain)."""
        return self.outcomes["confirmed"] + self.outcomes["uncertain"]

    def goals_met(self) -> bool:
        """With ``dispatches``: enough sends, and every fault hit at least once."""
        c = self.c
        assert c.dispatches is not None
        met = self.sends() >= c.dispatches and all(n > 0 for n in self.kills.values())
        met = met and sum(self.resumes.values()) > 0
        if c.pause_probability:
            met = met and sum(self.pauses.values()) > 0
            # A stalled worker's late send must have met the fence at least once: whether it
            # wakes before or after the reconciler fences is timing, so the run goes on.
            if self.fence_goal():
                met = met and self.late_send_fenced()
        if self.faults is not None:
            met = met and self.faults.terminated > 0
            met = met and (self.faults.restarts > 0 or not c.restart_command)
        return met

    def fence_goal(self) -> bool:
        """Whether a stalled worker's late send must have met the fence: with a fencing
        remote."""
        return self.c.remote == "fencing"

    def late_send_fenced(self) -> bool:
        """Whether the remote has rejected a send by its fence."""
        return self.log_shows("fenced", lambda r: r.result == "fenced")

    def log_shows(self, what: str, found: Callable[[Request], bool]) -> bool:
        """Whether the remote's log holds a request ``found`` accepts (``what`` names the
        question): read at most twice a second, since it is asked only once every other
        goal is met, and never again once it did."""
        now = time.monotonic()
        if not self.log_seen.get(what) and now >= self.log_read_at.get(what, 0.0) + 0.5:
            self.log_read_at[what] = now
            client = self.remote_client()
            try:
                self.log_seen[what] = any(found(r) for r in client.log())
            finally:
                client.close()
        return self.log_seen.get(what, False)

    def restart_due(self) -> bool:
        """Restart the server halfway: by sends when driven by counts, else by time."""
        if self.c.dispatches is not None:
            return self.sends() >= self.c.dispatches // 2
        return time.monotonic() >= self.started + self.c.seconds / 2

    # -- set-up ------------------------------------------------------------------------------
    def store_url(self, role: str) -> str:
        c = self.c
        if c.backend == "sqlite":
            return f"sqlite:///{(c.run_dir / 'campaign.sqlite').resolve()}"
        assert c.postgres_url is not None and self.schema is not None
        parts = urlsplit(c.postgres_url)
        query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("schema",)]
        query += [("schema", self.schema), ("application_name", f"claimfsm-{self.schema}-{role}")]
        return urlunsplit(parts._replace(query=urlencode(query)))

    def prepare(self) -> None:
        c = self.c
        c.run_dir.mkdir(parents=True, exist_ok=True)
        for pattern in ("campaign.sqlite*", "worker-*.log", "worker-*.handles", "stop", DRIVER_LOG):
            for old in c.run_dir.glob(pattern):
                old.unlink()
        if c.backend == "postgresql":
            self.schema = f"campaign_{self.run_id}"

    def start_remote(self) -> None:
        mine, theirs = self.ctx.Pipe(duplex=False)
        self.remote_process = self.ctx.Process(
            target=serve,
            args=(theirs, self.c.remote, self.remote_faults(), self.c.seed),
            daemon=True,
        )
        self.remote_process.start()
        theirs.close()
        if not mine.poll(30):
            raise StoreError("the campaign's remote process did not start")
        self.remote_address, self.remote_authkey = mine.recv()
        mine.close()

    def remote_faults(self) -> RemoteFaults:
        return self.c.faults or RemoteFaults()

    def remote_client(self) -> RemoteClient:
        return RemoteClient(
            self.remote_address, self.remote_authkey, self.c.remote, timeout=self.c.send_timeout
        )

    def top_up(self, store: Store, minimum: int = 4, batch: int = 8) -> None:
        """Keep approved drafts coming; every third is edited once before approval."""
        for target in self.targets:
            if len(store.drafts(target, status="approved")) >= minimum:
                continue
            for n in range(batch):
                draft = store.create_draft(target, f"post {n} for {target}")
                if n % 3 == 0:
                    draft = store.edit_draft(draft.draft_id, f"post {n} for {target} (edited)")
                store.approve_draft(draft.draft_id)

    # -- workers -----------------------------------------------------------------------------
    def start_worker(self, index: int, incarnation: int) -> _Worker:
        c = self.c
        spec = WorkerSpec(
            index=index,
            incarnation=incarnation,
            store_url=self.store_url(f"w{index}"),
            remote_address=self.remote_address,
            remote_authkey=self.remote_authkey,
            remote_mode=c.remote,
            targets=tuple(self.targets),
            lease_seconds=c.lease_seconds,
            send_timeout=c.send_timeout,
            kill_probability=c.kill_probability,
            pause_probability=c.pause_probability,
            forced=self.planned(index, incarnation),
            resume_probability=c.resume_probability,
            run_dir=c.run_dir.resolve(),
            seed=c.seed,
            design=self.design,
        )
        if spec.forced is not None:
            self.forced_pending.add(index)
        mine, theirs = self.ctx.Pipe(duplex=False)
        process = self.ctx.Process(target=self.entry(), args=(spec, theirs), name=spec.name)
        process.start()
        theirs.close()
        return _Worker(spec, process, mine)

    def entry(self) -> Any:
        """The worker process's entry point."""
        return worker_main

    def planned(self, index: int, incarnation: int) -> tuple[str, str] | None:
        """Every moment gets at least one kill and a stall whatever the dice say: the first
        incarnation of worker i is killed at moment i; worker 1 then stalls before a call."""
        if incarnation == 0 and index <= len(self.kill_points):
            return ("kill", self.kill_points[index - 1])
        if incarnation == 1 and index == 1 and self.c.pause_probability > 0:
            return ("pause", self.first_pause)
        return None

    def kill(self, worker: _Worker, why: str | None) -> None:
        """SIGKILL ``worker``; ``why`` is the moment counted, None for clean-up kills."""
        if worker.killed or worker.process.pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.process.pid, signal.SIGKILL)
        self.wake_at.pop(worker.process.pid, None)
        worker.killed = True
        if why is not None:
            self.kills[why] += 1

    def on_message(self, worker: _Worker, message: Any) -> None:
        kind = message[0]
        if kind in ("kill", "paused"):
            self.forced_pending.discard(worker.spec.index)
        if kind == "kill":
            self.kill(worker, message[1])
        elif kind == "paused" and worker.process.pid is not None:
            self.pauses[message[1]] += 1
            lo, hi = self.c.pause_seconds
            self.wake_at[worker.process.pid] = time.monotonic() + self.c.lease_seconds * (
                self.rng.uniform(lo, hi)
            )
        elif kind == "result":
            self.outcomes[message[1]] += 1
        elif kind == "resume":
            self.resumes[message[1]] += 1
        elif kind == "store-error":
            self.worker_store_errors += 1

    def run_workers(self) -> None:
        c = self.c
        workers = {i: self.start_worker(i, 0) for i in range(1, c.workers + 1)}
        try:
            self._drive(workers)
        except BaseException:  # interrupted: leave no worker behind
            for w in workers.values():
                if w.process.is_alive():
                    self.kill(w, None)
                    w.process.join()
            raise

    def _drive(self, workers: dict[int, _Worker]) -> None:
        c = self.c
        incarnations = dict.fromkeys(workers, 0)
        restart_at: dict[int, float] = {}
        deadline = time.monotonic() + c.seconds
        next_random_kill = time.monotonic() + self.rng.expovariate(1 / c.random_kill_every)
        while True:
            now = time.monotonic()
            if c.dispatches is not None and self.goals_met():
                self.stopped_by = "counts"
                break
            if self.harness_failed.is_set():
                self.stopped_by = "a harness thread failed"
                break
            if now >= deadline:
                break
            if now >= next_random_kill:
                alive = [  # a stalled worker is left to wake up late: that is its test
                    w
                    for w in workers.values()
                    if not w.killed
                    and w.process.is_alive()
                    and w.process.pid not in self.wake_at
                    and w.spec.index not in self.forced_pending
                ]
                if alive:
                    self.kill(self.rng.choice(alive), "random")
                next_random_kill = now + self.rng.expovariate(1 / c.random_kill_every)
            self.wake_up(now)
            for i, at in list(restart_at.items()):
                if now >= at:
                    del restart_at[i]
                    incarnations[i] += 1
                    self.restarts += 1
                    workers[i] = self.start_worker(i, incarnations[i])
            live = [w for i, w in workers.items() if i not in restart_at]
            ready = wait([w.report for w in live] + [w.process.sentinel for w in live], 0.05)
            for w in live:
                if w.report in ready:
                    with contextlib.suppress(*_TORN):  # a message torn by a kill
                        self.on_message(w, w.report.recv())
                if w.process.sentinel in ready and w.spec.index not in restart_at:
                    w.process.join()
                    self.drain(w)
                    self.check_exit(w)
                    self.forced_pending.discard(w.spec.index)
                    restart_at[w.spec.index] = time.monotonic() + self.rng.uniform(0.1, 0.6)
        self.stop_workers([w for i, w in workers.items() if i not in restart_at])

    def wake_up(self, now: float) -> None:
        for pid, at in list(self.wake_at.items()):
            if now >= at:
                del self.wake_at[pid]
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def drain(self, w: _Worker) -> None:
        with contextlib.suppress(*_TORN):
            while w.report.poll():
                self.on_message(w, w.report.recv())
        w.report.close()

    def check_exit(self, w: _Worker) -> None:
        code = w.process.exitcode
        if w.killed or code == 0:
            return
        tail = ""
        with contextlib.suppress(OSError):
            tail = w.spec.log_file.read_text(encoding="utf-8", errors="replace")[-2000:]
        self.unexpected.append(f"{w.spec.name}.{w.spec.incarnation} exited with {code}: {tail}")

    def stop_workers(self, workers: list[_Worker]) -> None:
        (self.c.run_dir / "stop").touch()
        self.wake_at.clear()
        end = time.monotonic() + 20
        while time.monotonic() < end and any(w.process.is_alive() for w in workers):
            live = [w for w in workers if w.process.is_alive()]
            # Stalled workers wake up late, now. Again and again: one may be between
            # announcing its stall and stopping itself.
            for w in live:
                if w.process.pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(w.process.pid, signal.SIGCONT)
            pipes = [w.report for w in live if not w.report.closed]
            ready = wait(pipes + [w.process.sentinel for w in live], 0.2)
            for w in live:  # a worker finishing its dispatch may still ask to be killed
                if w.report in ready:
                    with contextlib.suppress(*_TORN):
                        self.on_message(w, w.report.recv())
        for w in workers:
            if w.process.is_alive():  # stuck: a failure worth reporting
                self.unexpected.append(f"{w.spec.name} did not stop within 20 s")
                self.kill(w, None)
                w.process.join()
            else:
                w.process.join()
                self.drain(w)
                self.check_exit(w)

    # -- the sweeper and the database's own faults -------------------------------------------
    def guarded(self, body: Any) -> None:
        """Run a harness thread; anything it did not expect fails the campaign."""
        try:
            body()
        except BaseException as exc:
            self.unexpected.append(f"{threading.current_thread().name}: {exc!r}")
            self.harness_failed.set()  # without it the run cannot be judged: end it now

    def sweeper(self) -> None:
        store = open_store(self.store_url("sweeper"))
        remote = self.remote_client()
        dispatcher = Dispatcher(store, remote, owner="sweeper", lease_seconds=self.c.lease_seconds)
        try:
            while not self.stop.wait(self.c.lease_seconds / 4):
                try:
                    store.sweep()
                    dispatcher.reconcile_all()
                    self.top_up(store)
                except (StoreError, *_REMOTE_ERRORS):
                    self.sweeper_errors += 1
                    time.sleep(0.1)
        finally:
            remote.close()
            store.close()

    def database_faults(self) -> None:
        """PostgreSQL: terminate worker backends mid-transaction; restart the server once."""
        assert self.faults is not None
        try:
            self.faults.run()
        finally:
            self.backends_terminated = self.faults.terminated
            self.server_restarts = self.faults.restarts

    # -- the end -----------------------------------------------------------------------------
    def close_out(self, store: Store, remote: RemoteClient) -> None:
        """Let leases lapse and requests finish, then sweep and reconcile until settled."""
        time.sleep(self.c.lease_seconds + 0.1)
        remote.quiet(30)
        closer = Dispatcher(store, remote, owner="closer", lease_seconds=self.c.lease_seconds)
        for _ in range(20):
            try:
                store.sweep()
                closer.reconcile_all()
            except (StoreError, *_REMOTE_ERRORS):
                time.sleep(0.2)
                continue
            sending = store.claims(state=store.steps.state(State.SENDING))
            if not sending and not store.claims(state=store.steps.state(State.UNCERTAIN)):
                return
            if self.c.remote == "plain" and not sending:
                return  # what is left uncertain has no effect to find: it stays uncertain
            time.sleep(self.c.lease_seconds + 0.1)  # a retry's lease may need to lapse

    # -- what differs by declaration -----------------------------------------------------------
    noun = "target"

    def open_admin(self) -> Any:
        return open_store(self.store_url("admin"))

    def before_workers(self, admin: Any) -> None:
        self.top_up(admin, minimum=10, batch=10)

    def judged(self, admin: Any, log: list[Any]) -> Any:
        return judge(admin, log, self.c.remote, self.targets)

    def audited(self) -> Any:
        return audit(self.store_url("audit"), keep=5)

    def run(self) -> CampaignReport:
        started = self.started = time.monotonic()
        self.prepare()
        self.start_remote()
        admin = self.open_admin()
        threads: list[threading.Thread] = []
        try:
            self.before_workers(admin)
            threads.append(
                threading.Thread(target=self.guarded, args=(self.sweeper,), name="sweeper")
            )
            if self.c.backend == "postgresql":
                assert self.schema is not None
                self.faults = DatabaseFaults(
                    self.c, f"claimfsm-{self.schema}-w%", self.rng, self.stop, self.restart_due
                )
                threads.append(
                    threading.Thread(
                        target=self.guarded, args=(self.database_faults,), name="db-faults"
                    )
                )
            for t in threads:
                t.start()
            try:
                self.run_workers()
            finally:
                self.stop.set()
                for t in threads:
                    t.join()
            remote = self.remote_client()
            try:
                self.close_out(admin, remote)
            except Exception as exc:  # judged as it stands; the report says why
                self.unexpected.append(f"the close-out: {exc!r}")
            verdict = self.judged(admin, remote.log())
            remote.close()
            audited = self.audited()
            verdict.findings.audit_violations = audited.total
            verdict.findings.audit_examples = [
                f"[{v.kind}] {self.noun} {v.target_id!r} entries {list(v.seqs)}: {v.message}"
                for v in audited.violations
            ]
            if not audited.ok:
                verdict.violations.append(
                    f"the audit of the database's history found {audited.total} violations"
                    f" ({dict(audited.counts)})"
                )
        finally:
            admin.close()
            self.remote_process.terminate()
            self.remote_process.join()
            if self.schema is not None and not self.c.keep:
                drop_schema(self.c.postgres_url or "", self.schema)
        violations = list(verdict.violations)
        violations += [f"a worker failed: {u}" for u in self.unexpected]
        if self.c.restart_command and self.c.backend == "postgresql" and not self.server_restarts:
            violations.append("the PostgreSQL server was not restarted during the run")
        if self.c.dispatches is not None and self.stopped_by != "counts":
            violations.append(
                f"stopped by the {self.c.seconds:g} s limit after {self.sends()} of "
                f"{self.c.dispatches} sends, or before every fault was hit: the run did too "
                "little to judge (raise --seconds)"
            )
        return CampaignReport(
            config=self.c,
            seconds=time.monotonic() - started,
            stopped_by=self.stopped_by,
            kills=dict(self.kills),
            pauses=dict(self.pauses),
            restarts=self.restarts,
            resumes=dict(self.resumes),
            outcomes=dict(self.outcomes),
            worker_store_errors=self.worker_store_errors,
            sweeper_errors=self.sweeper_errors,
            backends_terminated=self.backends_terminated,
            server_restarts=self.server_restarts,
            unexpected_exits=self.unexpected,
            findings=verdict.findings,
            violations=violations,
            design=self.design_name,
        )


def run_campaign(config: CampaignConfig) -> CampaignReport:
    """Run one campaign and judge it: the claim protocol's, or, where ``config.design``
    names one, a lifecycle of your own's (``_lifecycle``). Raises ``InvalidArgument`` for a
    bad configuration, ``SpecError`` for a declaration that does not load."""
    with _driver_log(config):
        if config.design is not None:
            from claimfsm.campaign._lifecycle import LifecycleCampaign

            return LifecycleCampaign(config).run()
        return _Campaign(config).run()


#: Where the campaign's own process logs its database driver's words, in its --dir.
DRIVER_LOG = "campaign.log"


class _DriverLog(logging.FileHandler):
    """A log file opened, with its directory, only once a line comes: a campaign refused
    before it began leaves nothing behind."""

    def _open(self) -> Any:
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


@contextlib.contextmanager
def _driver_log(config: CampaignConfig) -> Iterator[None]:
    """The database driver's log lines of the campaign's own process (psycopg's, and its
    pool's: a connection lost, a reconnect refused while the campaign restarts the
    server, each a fault it injects) go to ``campaign.log`` in its directory, as each
    worker's go to its own log, not to the console, for the campaign's duration."""
    driver = logging.getLogger("psycopg")
    handler = _DriverLog(config.run_dir / DRIVER_LOG, mode="w", encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    kept = driver.propagate
    driver.addHandler(handler)
    driver.propagate = False
    try:
        yield
    finally:
        driver.removeHandler(handler)
        driver.propagate = kept
        handler.close()
