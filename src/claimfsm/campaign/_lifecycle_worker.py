"""One campaign worker process for a lifecycle of your own: take an entity, start its work,
run the work at the remote (the executor), end it; until told to stop or killed.

The worker reads everything it does from the declaration (:class:`WorkPlan`): the taker's
events, the owner events that lead from what a taker leaves to where the work starts
(``work = "starts"``), and the events that end it: ``work = "ends"`` (the first declared
is the work's success, the others its failure), or, where the work is a request to a
remote, the ``remote = "answered"`` event once the request took effect and the
``"unanswered"`` one when it did not say so (fenced off, lost, or no answer in time).
As the claim's campaign worker does, it saves each handle it holds, asks the harness to
kill it at the campaign's moments, stalls there (SIGSTOP) to wake up after its lease
lapsed, and a restarted worker may wake up with its saved handle and take one of the
declaration's wake events with it.

A worker that gets no answer from the executor does not report an end: it cannot know
whether the work stopped, so it leaves the entity to its lease (the declaration says what
a lapse while the work runs leads to: the job's ``orphaned``), or takes its
``unanswered`` event (the charge's ``give_up``).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from claimfsm.campaign._remote import RemoteClient, exit_with_parent
from claimfsm.campaign._worker import Moments, WorkerSpec, last_handle, logged, save_handle
from claimfsm.errors import ClaimFSMError, InvalidArgument, StoreError
from claimfsm.service import SendAmbiguous
from claimfsm.spec import Spec, load_spec, wake_events
from claimfsm.store import EntityStore, Handle, open_entity_store

#: The moments a lifecycle's worker can be killed on purpose, in the order of its work.
KILL_POINTS = ("after-take", "after-start", "during-call", "after-answer")
#: Where it can stall past its lease: before it runs the work, and before it reports it.
PAUSE_POINTS = ("after-start", "after-answer")
#: With linked drafts: how often a worker, as an author, edits a live draft before a take.
EDITS = 0.2


@dataclass(frozen=True)
class WorkPlan:
    """What a worker does with a declaration, read off it."""

    takers: tuple[str, ...]  # the taker's events, tried in the order declared
    towards: dict[str, str]  # state -> the owner event that leads on towards the start
    starts: str  # the event that starts the work
    start_sources: frozenset[str]  # the states it leaves
    ends: tuple[str, ...]  # the events that end it: success first
    wakes: tuple[str, ...]  # what a worker woken with its saved handle may take
    answered: tuple[str, ...] = ()  # with a remote: taken once the request took effect
    unanswered: tuple[str, ...] = ()  # with a remote: taken when it did not say so
    #: the states a worker has nothing to do in: terminal, or left by the operator alone
    #: (the job's ``orphaned``, the charge's ``unknown``: they wait for evidence)
    closed: frozenset[str] = frozenset()

    def after(self, result: str, rng: random.Random) -> tuple[str | None, str]:
        """The event to take after a run whose answer was ``result`` (``applied``,
        ``deduplicated``, ``fenced``, or ``unanswered``: none came), and what it came to;
        None: no event (the lease decides)."""
        if self.answered:  # a request to a remote: its answer says which event
            took = result in ("applied", "deduplicated")
            events = self.answered if took else self.unanswered
            outcome = "answered" if took else "fenced" if result == "fenced" else "unanswered"
            return (events[0] if events else None), outcome
        if result == "fenced":  # the executor refused the attempt: it did not run
            return self.ends[-1], "fenced"
        ends = self.ends
        return (ends[0] if len(ends) == 1 or rng.random() < 0.8 else ends[-1]), "ended"

    @classmethod
    def of(cls, spec: Spec) -> WorkPlan:
        """The plan, or ``InvalidArgument`` saying what the declaration lacks for one."""
        name = spec.path or spec.name
        takers = spec.events_by("taker")
        starts = [e for e in spec.events if spec.work(e) == "starts"]
        ends = tuple(e for e in spec.events if spec.work(e) == "ends")
        answered = tuple(e for e in spec.events if spec.remote_role(e) == "answered")
        unanswered = tuple(e for e in spec.events if spec.remote_role(e) == "unanswered")
        if not takers or not starts or not (ends or answered):
            raise InvalidArgument(
                f'{name}: a campaign needs a taker\'s event (by = "taker"), an event that'
                ' starts the work (work = "starts") and one that ends it (work = "ends",'
                ' or remote = "answered" where the work is a request to a remote); this'
                f" declaration has takers {list(takers)}, starts {starts}, ends"
                f" {list(ends + answered)}"
            )
        start = starts[0]
        sources = frozenset(spec.sources(start))
        # Breadth-first, backwards from the start's sources, over the owner's other events.
        towards: dict[str, str] = {}
        seen, queue = set(sources), deque(sources)
        while queue:
            dest = queue.popleft()
            for t in spec.transitions:
                if (
                    t.dest == dest
                    and t.source not in seen
                    and spec.role(t.event) == "owner"
                    and spec.work(t.event) is None
                ):
                    seen.add(t.source)
                    towards[t.source] = t.event
                    queue.append(t.source)
        taken = {t.dest for t in spec.transitions if t.event in takers}
        if not taken & seen:
            raise InvalidArgument(
                f"{name}: no owner's path leads from what a taker's event leaves"
                f" ({sorted(taken)}) to where {start!r} starts the work ({sorted(sources)})"
            )
        return cls(
            tuple(takers),
            towards,
            start,
            sources,
            ends,
            wake_events(spec),
            answered,
            unanswered,
            frozenset(
                name
                for name, state in spec.states.items()
                if state.terminal
                or all(
                    spec.role(t.event) == "operator" for t in spec.transitions if t.source == name
                )
            ),
        )


def lifecycle_worker_main(spec: WorkerSpec, report: Connection) -> None:
    """The process entry point (``multiprocessing``, spawn)."""
    logged(_work, spec, report)


class _Worker:
    def __init__(self, spec: WorkerSpec, report: Connection) -> None:
        self.spec, self.report = spec, report
        self.log = logging.getLogger("claimfsm.campaign.worker")
        self.rng = random.Random(spec.seed * 7919 + spec.index * 131 + spec.incarnation)
        #: where it is killed or stalls
        self.at = Moments(spec, report, self.log, self.rng, PAUSE_POINTS).at
        self.declaration = load_spec(Path(spec.design))
        self.plan = WorkPlan.of(self.declaration)
        self.store: EntityStore | None = None
        self.executor = RemoteClient(
            spec.remote_address,
            spec.remote_authkey,
            spec.remote_mode,
            timeout=spec.send_timeout,
            during_call=lambda _request: self.at("during-call"),
        )

    # -- one attempt ----------------------------------------------------------------------
    def take(self, key: str) -> Handle | None:
        assert self.store is not None
        draft = None
        if self.declaration.drafts is not None:  # linked drafts: name an approved one
            draft = self.author(key)
            if draft is None:
                return None
        for event in self.plan.takers:
            try:
                return self.store.take(
                    key,
                    event,
                    owner=self.spec.name,
                    lease_seconds=self.spec.lease_seconds,
                    draft=draft,
                )
            except ClaimFSMError as exc:
                if isinstance(exc, StoreError):
                    raise
                self.log.info("%s %s refused: %s", event, key, exc)
        return None

    def author(self, key: str) -> int | None:
        """As an author before a take (linked drafts): now and then an edit of one of the
        entity's live drafts, approved at once (refused while an epoch may yet dispatch
        it), and a new draft where none is approved; the approved draft to name (None:
        none could be made)."""
        assert self.store is not None
        live = [d for d in self.store.drafts(key) if d.status != "dispatched"]
        try:
            if live and self.rng.random() < EDITS:
                edited = self.rng.choice(live)
                self.store.edit_draft(edited.draft_id, f"{key}: edited at {time.time()}")
                self.store.approve_draft(edited.draft_id)
            elif not live:
                made = self.store.create_draft(key, f"{key}: written at {time.time()}")
                self.store.approve_draft(made.draft_id)
            for pending in self.store.drafts(key, status="pending"):  # another's, say
                self.store.approve_draft(pending.draft_id)
        except StoreError:
            raise
        except ClaimFSMError as exc:  # pinned, dispatched meanwhile, or one live allowed
            self.log.info("author on %s refused: %s", key, exc)
        approved = self.store.drafts(key, status="approved")
        return self.rng.choice(approved).draft_id if approved else None

    def act(self, handle: Handle, event: str, detail: str = "") -> Handle:
        assert self.store is not None
        return self.store.act(handle, event, lease_seconds=self.spec.lease_seconds, detail=detail)

    def attempt(self, handle: Handle) -> str:
        """From a held handle: on to the start, the work at the executor, its end; what
        happened, for the harness's tally."""
        while handle.state in self.plan.towards:
            handle = self.act(handle, self.plan.towards[handle.state])
        if handle.state not in self.plan.start_sources:
            return "not-startable"
        handle = self.act(handle, self.plan.starts)
        _save_handle(self.spec.handle_file, handle)
        self.at("after-start")
        try:
            result = self.executor.run(handle.key, handle.epoch, handle.request_key, handle.draft)
        except SendAmbiguous as exc:  # it may still be running there
            self.log.info("no answer for %r: %s", handle, exc)
            if not (self.plan.answered and self.plan.unanswered):  # the lease decides
                return "abandoned"
            result = "unanswered"
        self.at("after-answer")
        event, outcome = self.plan.after(result, self.rng)
        if event is not None:
            self.act(handle, event, detail=f"the executor said {result}")
        return outcome

    def resume(self) -> str:
        """Wake up with the saved handle and take a wake event with it, as a restarted
        worker would; what happened."""
        saved = _last_handle(self.spec.handle_file)
        if saved is None:
            return "nothing-saved"
        for event in self.plan.wakes:
            if saved.state not in self.declaration.sources(event):
                continue
            try:
                if event == self.plan.starts:
                    return f"continued ({self.attempt(saved)})"
                self.act(saved, event, detail="woken with its saved handle")
                return f"took {event}"
            except StoreError:
                raise
            except ClaimFSMError as exc:
                self.log.info("saved handle refused: %s", exc)
                return f"refused ({type(exc).__name__})"
        return "left to its lease"

    def run(self) -> None:
        spec = self.spec
        try:
            self.store = open_entity_store(self.declaration, spec.store_url)
        except StoreError as exc:  # the server is restarting, say: exit, be restarted
            self.log.warning("cannot open the store: %s", exc)
            self.report.send(("store-error", "open"))
            return
        try:
            if spec.incarnation > 0 and self.rng.random() < spec.resume_probability:
                self.report.send(("resume", self.guarded(self.resume)))
            threading.Thread(target=exit_with_parent, daemon=True).start()
            while not spec.stop_file.exists():
                outcome = self.guarded(self.one)
                self.report.send(("result", outcome))
                if outcome in ("busy", "store-error"):
                    time.sleep(self.rng.uniform(0.005, 0.02))
        finally:
            self.executor.close()
            self.store.close()

    def open_keys(self) -> list[str]:
        """The first ``len(targets)`` entities a worker may have something to do with (not
        in a ``closed`` state): as entities finish, or wait for the operator's evidence,
        the workers move on to new ones, all workers to the same ones."""
        assert self.store is not None
        ended = {r.key for r in self.store.rows() if r.state in self.plan.closed}
        keys: list[str] = []
        n = 0
        while len(keys) < len(self.spec.targets):
            n += 1
            key = entity_key(self.declaration, n)
            if key not in ended:
                keys.append(key)
        return keys

    def one(self) -> str:
        """One attempt on one of the open entities: what it came to."""
        handle = self.take(self.rng.choice(self.open_keys()))
        if handle is None:
            return "busy"
        _save_handle(self.spec.handle_file, handle)
        self.at("after-take")
        return self.attempt(handle)

    def guarded(self, body: object) -> str:
        """``body()``, with a refusal or a store error as what happened."""
        assert callable(body)
        try:
            return str(body())
        except StoreError as exc:  # the database went away mid-step: the lease decides
            self.log.warning("store error: %s", exc)
            self.report.send(("store-error", "step"))
            return "store-error"
        except ClaimFSMError as exc:
            self.log.info("refused: %s", exc)
            return "refused"


def entity_key(spec: Spec, n: int) -> str:
    """The campaign's ``n``-th entity of ``spec``."""
    return f"{spec.name}-{n}"


def _work(spec: WorkerSpec, report: Connection) -> None:
    logging.basicConfig(
        filename=spec.log_file,
        level=logging.INFO,
        format=f"%(asctime)s {spec.name}.{spec.incarnation} %(levelname)s %(message)s",
    )
    _Worker(spec, report).run()


#: A saved handle's fields and their types.
_HANDLE = {
    "key": str,
    "epoch": int,
    "token": str,
    "state": str,
    "request_key": str,
    "draft": int,
}


def _save_handle(path: Path, handle: Handle) -> None:
    save_handle(path, {name: getattr(handle, name) for name in _HANDLE})


def _last_handle(path: Path) -> Handle | None:
    found = last_handle(path, _HANDLE)
    return None if found is None else Handle(**found)
