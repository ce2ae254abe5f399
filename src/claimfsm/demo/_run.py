"""``claimfsm demo``: concurrent, crashing workers dispatch drafts through one SQLite file.

Each worker is a thread with its own store (its own SQLite connection) and Dispatcher. The
simulated remote loses requests and acknowledgements and lets some requests land late;
workers crash at every step of a dispatch (their claims are left to lapse) and some wake
up later and use their stale handles. A sweeper lapses leases and reconciles uncertain
claims by readback. At the end the summary is read back from the store's history and the
remote's log, and the protocol's invariants are checked against both.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from claimfsm.errors import ClaimFSMError, LeaseExpired, StaleClaim
from claimfsm.service import Dispatcher, Faults, RemoteMode, SimulatedRemote
from claimfsm.spec import Event, State
from claimfsm.store import Claim, SQLiteStore, Store, claim_fields, replay


class _Crash(Exception):
    """A simulated worker crash: the worker forgets everything but its saved handle."""


@dataclass(frozen=True)
class DemoConfig:
    path: Path = Path("demo.sqlite")
    workers: int = 4
    targets: int = 3
    drafts_per_target: int = 8
    remote: RemoteMode = "fencing"
    seed: int = 7
    crash: float = 0.08  # chance a worker crashes at each step of a dispatch
    lease_seconds: float = 0.25
    deadline_seconds: float = 60.0
    faults: Faults = field(
        default_factory=lambda: Faults(lost_request=0.05, lost_ack=0.06, late=0.06)
    )


@dataclass
class DemoSummary:
    remote: str
    workers: int
    targets: int
    drafts: int
    dispatched: int  # drafts whose effect is confirmed or reconciled present
    confirmed: int  # epochs that reached each state (from history)
    uncertain: int
    reconciled: int
    reconciled_present: int
    reconciled_absent: int
    released: int
    expired: int
    discarded: int  # refused stale operations recorded
    retried: int
    crashes: int
    stale_wakeups: int
    sends: int
    effects: int
    overlapping_sends: int
    duplicate_effects: int
    left_uncertain: int
    left_sending: int
    history_replays: bool
    epochs_strictly_increase: bool
    seconds: float
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def run_demo(config: DemoConfig) -> DemoSummary:
    started = time.monotonic()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{config.path}{suffix}").unlink(missing_ok=True)
    remote = SimulatedRemote(config.remote, faults=config.faults, seed=config.seed)
    admin = SQLiteStore(config.path)
    targets = [f"account-{i + 1}" for i in range(config.targets)]
    for target in targets:
        for n in range(config.drafts_per_target):
            draft = admin.create_draft(target, f"post {n + 1} for {target}")
            if n % 3 == 0:  # some drafts are edited before approval: version 2
                draft = admin.edit_draft(draft.draft_id, f"post {n + 1} for {target} (edited)")
            admin.approve_draft(draft.draft_id)

    stop = threading.Event()
    counters = {"crashes": 0, "stale_wakeups": 0}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        rng = random.Random(config.seed * 1000 + index)
        store = SQLiteStore(config.path)
        saved: list[Claim] = []

        def maybe_crash(step: str, claim: Claim) -> None:
            if rng.random() < config.crash:
                saved.append(claim)  # what a real worker would have persisted
                raise _Crash(step)

        dispatcher = Dispatcher(
            store,
            remote,
            owner=f"worker-{index + 1}",
            lease_seconds=config.lease_seconds,
            on_step=maybe_crash,
        )
        try:
            while not stop.is_set():
                if saved and rng.random() < 0.3:
                    _stale_wakeup(saved.pop(), counters, lock)
                try:
                    result = dispatcher.dispatch_next(rng.choice(targets))
                except _Crash:
                    with lock:
                        counters["crashes"] += 1
                    time.sleep(config.lease_seconds * rng.uniform(0.5, 1.5))  # restart time
                    continue
                if result.outcome in ("busy", "idle"):
                    time.sleep(rng.uniform(0.002, 0.01))
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)
        finally:
            store.close()

    def sweeper() -> None:
        store = SQLiteStore(config.path)
        dispatcher = Dispatcher(store, remote, owner="sweeper", lease_seconds=config.lease_seconds)
        try:
            while not stop.is_set():
                store.sweep()
                dispatcher.reconcile_all()
                time.sleep(config.lease_seconds / 4)
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(config.workers)]
    threads.append(threading.Thread(target=sweeper))
    for t in threads:
        t.start()
    # Run until every draft is dispatched, or nothing has happened for a while (a plain
    # remote cannot resolve an absent effect, so its targets may stay uncertain), or the
    # deadline passes.
    deadline = started + config.deadline_seconds
    quiet_for = max(1.0, 8 * config.lease_seconds)
    seen, last_change = -1, time.monotonic()
    while time.monotonic() < deadline and not errors:
        if not any(admin.drafts(t, status="approved") for t in targets):
            break
        count = len(admin.history())
        if count != seen:
            seen, last_change = count, time.monotonic()
        elif time.monotonic() - last_change > quiet_for:
            break
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]

    # Closing: let every request land or be fenced, every lease lapse, then settle.
    final = Dispatcher(admin, remote, owner="closer", lease_seconds=config.lease_seconds)
    time.sleep(config.lease_seconds)
    remote.settle()
    for _ in range(3):
        admin.sweep()
        final.reconcile_all()
    summary = _summarise(admin, remote, config, targets, counters, time.monotonic() - started)
    admin.close()
    return summary


def _stale_wakeup(claim: Claim, counters: dict[str, int], lock: threading.Lock) -> None:
    """A crashed worker comes back and tries to carry on with its saved handle."""
    with lock:
        counters["stale_wakeups"] += 1
    try:
        if claim.role == State.RESERVED:
            claim.begin_send()
            claim.mark_uncertain("woke up after a crash; not sending")
        else:
            claim.release()
    except (StaleClaim, LeaseExpired):
        pass  # refused, and (when stale) recorded as discard: the point of the exercise
    except ClaimFSMError:
        pass  # an illegal step for a claim that moved on; nothing changed


def _summarise(
    store: Store,
    remote: SimulatedRemote,
    config: DemoConfig,
    targets: list[str],
    counters: dict[str, int],
    seconds: float,
) -> DemoSummary:
    history = store.history()
    steps = store.steps  # the declaration's names, read as the typed face
    entered = {s: 0 for s in State}
    present = absent = retried = discarded = 0
    acquired: dict[str, list[int]] = {t: [] for t in targets}
    for e in history:
        event, to = steps.event_role(e.event), steps.state_role(e.to_state)
        if event == Event.DISCARD:
            discarded += 1
        if event == Event.RETRY:
            retried += 1
        if e.from_state != e.to_state and to is not None:
            entered[to] += 1
        if event == Event.RECONCILE:
            present += e.outcome == "present"
            absent += e.outcome == "absent"
        if event == Event.ACQUIRE and e.target_id in acquired:
            acquired[e.target_id].append(e.epoch)
    claims = {c.target_id: c for c in store.claims()}
    replayed = replay(history, store.spec)
    replays = replayed == {t: claim_fields(c) for t, c in claims.items()}
    increasing = all(epochs == list(range(1, len(epochs) + 1)) for epochs in acquired.values())
    dispatched = sum(len(store.drafts(t, status="dispatched")) for t in targets)
    summary = DemoSummary(
        remote=config.remote,
        workers=config.workers,
        targets=config.targets,
        drafts=config.targets * config.drafts_per_target,
        dispatched=dispatched,
        confirmed=entered[State.CONFIRMED],
        uncertain=entered[State.UNCERTAIN],
        reconciled=entered[State.RECONCILED],
        reconciled_present=present,
        reconciled_absent=absent,
        released=entered[State.RELEASED],
        expired=entered[State.EXPIRED],
        discarded=discarded,
        retried=retried,
        crashes=counters["crashes"],
        stale_wakeups=counters["stale_wakeups"],
        sends=remote.sends,
        effects=len(remote.effects),
        overlapping_sends=remote.overlapping_sends,
        duplicate_effects=remote.duplicate_effects(),
        left_uncertain=sum(steps.state_role(c.state) == State.UNCERTAIN for c in claims.values()),
        left_sending=sum(steps.state_role(c.state) == State.SENDING for c in claims.values()),
        history_replays=replays,
        epochs_strictly_increase=increasing,
        seconds=round(seconds, 2),
    )
    v = summary.violations
    if not replays:
        v.append("history does not replay to the current claim rows")
    if not increasing:
        v.append("an epoch was skipped or reused")
    if summary.left_sending:
        v.append(f"{summary.left_sending} claims left in sending after the sweep")
    if config.remote in ("fencing", "dedup") and summary.duplicate_effects:
        v.append(f"{summary.duplicate_effects} duplicate effects against a {config.remote} remote")
    if config.remote == "fencing" and summary.overlapping_sends:
        v.append(f"{summary.overlapping_sends} overlapping sends against a fencing remote")
    if config.remote != "plain" and summary.dispatched != summary.drafts:
        v.append(f"only {summary.dispatched} of {summary.drafts} drafts were dispatched")
    if config.remote != "plain" and summary.left_uncertain:
        v.append(f"{summary.left_uncertain} claims left uncertain")
    return summary
