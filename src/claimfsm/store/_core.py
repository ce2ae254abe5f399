"""The store's protocol logic, free of I/O: every backend runs exactly this.

A backend supplies transactions (:class:`Tx`): a few primitive reads and the guarded
writes, each of which must enforce the declared guards atomically. Everything else
(validation, tokens, history records, refusal diagnosis, discard records, draft side
effects) lives here once, so the SQLite, PostgreSQL and memory stores cannot
drift apart on anything but the guarded write itself.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from claimfsm.errors import (
    ClaimFSMError,
    DeclarationMismatch,
    InvalidArgument,
    NotFound,
    Refused,
    StaleClaim,
    UsageError,
)
from claimfsm.machine import ClaimMachine, ClaimRow, DraftRow, Facts, claim_machine
from claimfsm.spec import (
    READBACK_OUTCOMES,
    STALE_STATE,
    Event,
    Spec,
    State,
    claim_spec,
    claim_steps,
    wake_events,
)
from claimfsm.store import _validate as check
from claimfsm.store._draft_rules import approve_refusal, edit_refusal, one_live_refusal
from claimfsm.store._observe import LOG as STORE_LOG
from claimfsm.store._observe import Observed, Observer
from claimfsm.store._observe import log as log_observed
from claimfsm.store._tokens import (
    content_digest,
    fingerprint,
    fresh_idempotency_key,
    new_token,
    token_hash,
)
from claimfsm.store._types import (
    Claim,
    ClaimInfo,
    Draft,
    Evidence,
    HistoryEntry,
    Transitioned,
)

Clock = Callable[[], float]
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class HistoryRecord:
    """A history row before the store numbers it."""

    target_id: str
    epoch: int
    event: str
    from_state: str
    to_state: str
    at: float
    token_hash: str | None
    detail: str = ""
    row: ClaimRow | None = None  # the claim row after a transition; None for a discard
    attempted: str | None = None  # a discard's (HistoryEntry.attempted)
    refused: str | None = None  # a discard's (HistoryEntry.refused)

    def params(self) -> tuple[Any, ...]:
        """The values of a history row, in the column order both SQL backends insert."""
        r = self.row
        return (
            self.target_id,
            self.epoch,
            self.event,
            self.from_state,
            self.to_state,
            self.at,
            r.owner if r else None,
            fingerprint(self.token_hash),
            r.draft_id if r else None,
            r.draft_version if r else None,
            r.draft_digest if r else None,
            r.idempotency_key if r else None,
            r.lease_deadline if r else None,
            r.outcome if r else None,
            self.detail,
            self.attempted,
            self.refused,
        )


#: The history event a pruning writes where a target's removed entries ended: the claim row
#: as of the last removed transition, so what remains still replays to the claim rows.
CHECKPOINT = "checkpoint"


@dataclass(frozen=True, slots=True)
class Pruned:
    """What ``Store.prune_history`` removed."""

    before: float  # entries older than this store time were removed (up to ``upto_seq``)
    upto_seq: int | None  # the newest entry removed; None if none was old enough
    entries: int  # entries removed (archived first, when an archive was given)
    checkpoints: int  # checkpoint entries written: one per target that lost entries


class Tx(Protocol):
    """One transaction of a backend. Writes are visible to nobody until it commits."""

    def now(self) -> float:
        """The store's time for this transaction (one clock per store: on a shared server,
        the server's)."""
        ...

    def claim_row(self, target_id: str) -> ClaimRow | None: ...
    def draft_row(self, draft_id: int) -> DraftRow | None: ...
    def draft_rows(self, target_id: str, status: str | None) -> list[DraftRow]: ...
    def claim_rows(self, state: str | None) -> list[ClaimRow]: ...
    def epoch_state(self, target_id: str, epoch: int) -> str | None: ...
    def history_rows(self, target_id: str | None) -> list[HistoryEntry]: ...
    def live_drafts(self, target_id: str) -> list[DraftRow]:
        """The target's pending and approved drafts, read so that no other transaction can
        create one for the target before this one commits."""
        ...

    def insert_draft(self, target_id: str, content: str, digest: str, now: float) -> DraftRow: ...
    def update_draft(self, row: DraftRow, now: float) -> None: ...
    def mark_dispatched(self, draft_id: int, version: int, now: float) -> None: ...
    def acquire_write(self, facts: Facts) -> ClaimRow | None: ...
    def guarded_write(self, event: str, facts: Facts) -> list[ClaimRow]: ...
    def append_history(self, records: list[HistoryRecord]) -> None: ...

    # -- retention (prune_history) ----------------------------------------------------------
    def history_cut(self, before: float) -> int | None:
        """The seq of the newest history entry older than ``before``, checkpoints aside
        (None: none is; pruning again removes nothing new)."""
        ...

    def history_range(self, after: int, upto: int, limit: int) -> list[HistoryEntry]:
        """Up to ``limit`` entries with ``after < seq <= upto``, in seq order."""
        ...

    def last_before_cut(self, cut: int, discard: str) -> list[tuple[int, HistoryEntry]]:
        """For each target with entries at or before ``cut``: the seq of its last such
        entry, and its last such entry that is not a ``discard`` (the declaration's name)."""
        ...

    def delete_history_upto(self, cut: int) -> int:
        """Remove every entry with ``seq <= cut`` (only this may delete history)."""
        ...

    def insert_history_at(self, seq: int, record: HistoryRecord) -> None:
        """Append ``record`` with the given (free) seq."""
        ...


class Store(ABC):
    """Drafts, one claim per target, and their history. Open one with ``open_store(url)``.

    A store is safe to share between threads; for parallelism across processes or hosts,
    open one store per worker on the same database.
    """

    def __init__(self, *, clock: Clock | None = None, machine: ClaimMachine | None = None):
        # The store's clock. Backends whose database is shared by several hosts ignore it
        # unless given explicitly (tests) and use the database server's clock instead.
        self.clock: Clock = clock if clock is not None else time.time
        self.machine = machine if machine is not None else claim_machine()
        self.spec = self.machine.spec
        #: The claim's steps and states in the declaration's names (``Event.ACQUIRE`` ->
        #: the event that takes a target): a renamed ``claim.toml`` is the same store.
        self.steps = self.machine.steps
        self._acquire = self.steps.event(Event.ACQUIRE)
        self._lapse = self.steps.event(Event.LAPSE)
        # The sweep's event an acquire applies to the target's current epoch first, where
        # declared (``first``: claim.toml's acquire lapses a lapsed lease first).
        self._first = self.spec.first(self._acquire)
        self._discard = self.steps.event(Event.DISCARD)
        self._unclaimed = self.steps.state(State.UNCLAIMED)
        # The states in which the pinned draft may be on its way to the remote.
        self._pinning = self.spec.pinning_states()
        self._observers: list[Observer] = [log_observed]
        # What resuming checks: whether the declaration's stale owner rule refuses the
        # caller any event a worker woken with its saved handle takes (``wake_events``).
        self._wake_events = wake_events(self.spec)
        # Commits that must survive power loss (declared: an external call may follow).
        self._durable = self.spec.durable_events()
        # Transitions that make the pinned draft dispatched (declared ``dispatches``).
        self._dispatching = self.spec.dispatching()
        # At most one pending or approved draft per target, where declared ([drafts]).
        self._one_live_draft = self.spec.drafts is not None and self.spec.drafts.one_live_per_target
        # Events that write a new idempotency key, where declared (``fresh_key``).
        self._fresh_key = self.spec.events_setting("fresh_key")

    def observe(self, observer: Observer) -> None:
        """Call ``observer`` with an :class:`Observed` after every transition and refusal
        (after commit; lapses applied by an acquire or a sweep each get their own).
        Observers run in the calling thread and must not raise."""
        if not callable(observer):
            raise InvalidArgument("observer must be a callable taking an Observed")
        self._observers.append(observer)

    def _emit(self, record: Observed) -> None:
        for observer in self._observers:
            observer(record)

    def _watched(self) -> bool:
        """Whether anyone listens: an observer added, or the log enabled at INFO (when
        nobody does, no record is even built: it would cost the hot path a tenth)."""
        return len(self._observers) > 1 or STORE_LOG.isEnabledFor(logging.INFO)

    def _failed(
        self, event: str, target_id: str | None, epoch: int | None, start: float, exc: Exception
    ) -> None:
        """Report a refused (or failed) operation, then let the caller re-raise."""
        outcome = "refused" if isinstance(exc, (Refused, UsageError)) else "error"
        seconds = time.perf_counter() - start
        self._emit(Observed(event, target_id, epoch, outcome, type(exc).__name__, seconds=seconds))

    def _lapsed(self, done: list[Transitioned], start: float) -> None:
        seconds = time.perf_counter() - start
        for t in done:
            self._emit(
                Observed(
                    t.event, t.target_id, t.epoch, "ok", None, t.from_state, t.to_state, seconds
                )
            )

    # -- what a backend provides ---------------------------------------------------------
    def _transaction(self, *, durable: bool = False) -> AbstractContextManager[Tx]:
        """A write transaction that holds the write lock from its first statement.

        A backend provides this, or overrides :meth:`_atomically` itself (SQLite does: its
        write path is written out, being the whole of what the store adds per write)."""
        raise NotImplementedError

    def _atomically(self, body: Callable[[Tx], R], *, durable: bool = False) -> R:
        """Run ``body`` in one write transaction and return what it returns.

        Backends whose database can abort a transaction for reasons that a retry fixes
        (deadlocks, serialization failures) override this to retry ``body`` a bounded
        number of times; ``body`` must therefore have no effects outside the transaction.
        """
        with self._transaction(durable=durable) as tx:
            return body(tx)

    def _single_statement(
        self, event: str, make_facts: Callable[[float], Facts], detail: str
    ) -> ClaimRow | None:
        """The common case in one statement, where a backend can: apply ``event`` if the
        declared guards permit it, with its history row (and the draft's change), and return
        the new claim row. None: refused, or not attempted; nothing changed, and the
        transaction path runs (and diagnoses a refusal, recording a stale one).

        ``make_facts`` takes the store's time; a backend whose statement reads its own clock
        calls it with 0.0 and adds that clock to ``now`` and the deadlines in SQL."""
        return None

    @abstractmethod
    def _snapshot(self) -> AbstractContextManager[Tx]:
        """A consistent read-only view."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- drafts --------------------------------------------------------------------------
    def create_draft(self, target_id: str, content: str) -> Draft:
        """A new pending draft for ``target_id``. Any number may coexist per target, unless
        the declaration says one live draft per target (``[drafts]``): then a second
        pending or approved draft is refused (``TargetBusy``), as a unique index would."""
        check.text_id(target_id, "target_id")
        check.content(content)

        def create(tx: Tx) -> DraftRow:
            if self._one_live_draft:
                live = tx.live_drafts(target_id)
                if live:
                    first = live[0]
                    raise one_live_refusal(f"target {target_id!r}", first.draft_id, first.status)
            return tx.insert_draft(target_id, content, content_digest(content), tx.now())

        return Draft.from_row(self._atomically(create))

    def edit_draft(self, draft_id: int, content: str) -> Draft:
        """Replace the content: version + 1, new digest, back to pending (approve it again)."""
        check.positive_int(draft_id, "draft_id")
        check.content(content)

        def edit(tx: Tx) -> DraftRow:
            row = self._draft_or_raise(tx, draft_id)
            claim = tx.claim_row(row.target_id) if row.status != "dispatched" else None
            pinned = None if claim is None else (claim.draft_id, claim.epoch, claim.state)
            entity = f"target {row.target_id!r}"
            refusal = edit_refusal(draft_id, row.status, entity, pinned, self._pinning)
            if refusal is not None:
                raise refusal
            row.version += 1
            row.content = content
            row.digest = content_digest(content)
            row.status = "pending"
            tx.update_draft(row, tx.now())
            return row

        return Draft.from_row(self._atomically(edit))

    def approve_draft(self, draft_id: int) -> Draft:
        """pending → approved (approving an approved draft changes nothing)."""
        check.positive_int(draft_id, "draft_id")

        def approve(tx: Tx) -> DraftRow:
            row = self._draft_or_raise(tx, draft_id)
            refusal = approve_refusal(draft_id, row.status)
            if refusal is not None:
                raise refusal
            if row.status != "approved":
                row.status = "approved"
                tx.update_draft(row, tx.now())
            return row

        return Draft.from_row(self._atomically(approve))

    def get_draft(self, draft_id: int) -> Draft:
        check.positive_int(draft_id, "draft_id")
        with self._snapshot() as tx:
            return Draft.from_row(self._draft_or_raise(tx, draft_id))

    def drafts(self, target_id: str, *, status: str | None = None) -> list[Draft]:
        """The target's drafts, oldest first, optionally only those with ``status``."""
        check.text_id(target_id, "target_id")
        if status not in (None, "pending", "approved", "dispatched"):
            raise InvalidArgument("status must be None, 'pending', 'approved' or 'dispatched'")
        with self._snapshot() as tx:
            return [Draft.from_row(r) for r in tx.draft_rows(target_id, status)]

    # -- claims --------------------------------------------------------------------------
    def acquire(self, target_id: str, draft_id: int, owner: str, lease_seconds: float) -> Claim:
        """Take the target for ``draft_id``: a new epoch in ``reserved``, pinning the draft.

        Where the declaration says so (``first = "lapse"``), a current epoch whose lease
        lapsed is lapsed first (reserved → expired, recorded before the new epoch;
        sending → uncertain, which keeps the target busy). Raises
        ``TargetBusy`` while the current epoch is live, sending or uncertain.
        """
        check.text_id(target_id, "target_id")
        check.positive_int(draft_id, "draft_id")
        check.text_id(owner, "owner", max_length=100)
        seconds = check.lease(lease_seconds)
        token = new_token()
        hashed = token_hash(token)

        def facts_at(now: float) -> Facts:
            return Facts(
                now=now,
                target_id=target_id,
                draft_id=draft_id,
                owner=owner,
                token_hash=hashed,
                lease_deadline=now + seconds,
            )

        def take(tx: Tx) -> tuple[ClaimRow, list[Transitioned]]:
            now = tx.now()
            facts = facts_at(now)
            # One statement reads the draft, pins it and derives its key, so the pinned
            # version and the key always belong together (even under READ COMMITTED).
            row = tx.acquire_write(facts)
            lapsed = (
                []
                if row is not None or self._first is None
                else self._apply_everywhere(tx, self._first, facts)
            )
            if lapsed:
                # The declared first event applied (a reserved epoch whose lease lapsed is
                # now expired, in this transaction, before the new epoch): try once more.
                row = tx.acquire_write(facts)
            if row is None:
                # Refused: diagnose from the rows as they are now (the transaction is rolled
                # back, so a lapse recorded above is undone too).
                draft = tx.draft_row(draft_id)
                if draft is None:
                    raise NotFound(f"no draft {draft_id}; create_draft returns the id to use")
                previous = tx.claim_row(target_id)
                raise self._diagnose(
                    self._acquire, self._unclaimed, previous, facts.with_draft(draft)
                )
            tx.append_history([_record(self._acquire, self._unclaimed, row, now, row.token_hash)])
            return row, lapsed

        start = time.perf_counter()
        try:
            row = self._single_statement(self._acquire, facts_at, "")
            lapsed: list[Transitioned] = []
            if row is None:
                row, lapsed = self._atomically(take)
        except ClaimFSMError as exc:
            self._failed(self._acquire, target_id, None, start, exc)
            raise
        if not self._watched():
            return Claim(self, row, token)
        self._lapsed(lapsed, start)
        self._emit(
            Observed(
                self._acquire,
                target_id,
                row.epoch,
                "ok",
                None,
                self._unclaimed,
                row.state,
                time.perf_counter() - start,
            )
        )
        return Claim(self, row, token)

    def resume(self, target_id: str, epoch: int, token: str) -> Claim:
        """The handle for a worker that restarts with what it saved; StaleClaim if superseded."""
        check.text_id(target_id, "target_id")
        check.positive_int(epoch, "epoch")
        check.token(token)

        def check_owner(tx: Tx) -> tuple[ClaimRow, Refused | None]:
            facts = Facts(
                now=tx.now(), target_id=target_id, epoch=epoch, token_hash=token_hash(token)
            )
            refusal: Refused | None = None
            row = self._claim_or_raise(tx, target_id)
            guards = self.machine.guards
            stale: str | None = None
            for event in self._wake_events:
                stale = self.spec.stale_owner(event, row.state, lambda g: not guards[g](row, facts))
                if stale is not None:
                    break
            if stale is not None and stale.startswith(STALE_STATE):
                refusal = StaleClaim(
                    f"resume refused for target {target_id!r} epoch {epoch}: the epoch is "
                    f"{row.state}; acquire again"
                )
            elif stale is not None:
                refusal = StaleClaim(
                    f"resume refused for target {target_id!r} epoch {epoch}: the epoch or token "
                    f"is not current (current epoch {row.epoch}); acquire again"
                )
            if refusal is not None:
                assert stale is not None
                self._record_discard(tx, "resume", row, facts, refusal, (event, stale))
            return row, refusal

        start = time.perf_counter()
        try:
            row, refusal = self._atomically(check_owner)
            if refusal is not None:
                raise refusal  # after commit, so the discard record is kept
        except ClaimFSMError as exc:
            self._failed("resume", target_id, epoch, start, exc)
            raise
        seconds = time.perf_counter() - start
        self._emit(Observed("resume", target_id, epoch, "ok", None, row.state, row.state, seconds))
        return Claim(self, row, token)

    def sweep(self) -> list[Transitioned]:
        """Apply lease expiry everywhere: lapsed reserved → expired, lapsed sending → uncertain."""
        start = time.perf_counter()
        try:
            done = self._atomically(
                lambda tx: self._apply_everywhere(tx, self._lapse, Facts(now=tx.now()))
            )
        except ClaimFSMError as exc:
            self._failed(self._lapse, None, None, start, exc)
            raise
        self._lapsed(done, start)
        return done

    def reconcile(self, target_id: str, epoch: int, evidence: Evidence) -> ClaimInfo:
        """uncertain → reconciled, with readback ``evidence`` (see :class:`Evidence`).

        Effect present: the pinned draft becomes dispatched. Effect absent: accepted only
        if the remote is fenced through this epoch; the draft stays approved.
        """
        check.text_id(target_id, "target_id")
        check.positive_int(epoch, "epoch")
        if not isinstance(evidence, Evidence) or evidence.outcome not in READBACK_OUTCOMES:
            raise InvalidArgument(
                "evidence must be Evidence.present() or Evidence.absent_fenced(epoch)"
            )
        row = self._event(
            target_id,
            self.steps.event(Event.RECONCILE),
            lambda now: Facts(
                now=now,
                target_id=target_id,
                epoch=epoch,
                outcome=evidence.outcome,
                fenced_through=evidence.fenced_through,
            ),
            epoch=epoch,
        )
        return ClaimInfo.from_row(row)

    def retry(
        self,
        target_id: str,
        epoch: int,
        *,
        owner: str,
        lease_seconds: float,
        remote_dedups: bool,
    ) -> Claim:
        """uncertain → sending again with the same idempotency key (a deduping remote only).

        Returns a new handle (a new token) for the same epoch; re-send with its key.
        """
        check.text_id(target_id, "target_id")
        check.positive_int(epoch, "epoch")
        check.text_id(owner, "owner", max_length=100)
        seconds = check.lease(lease_seconds)
        if not isinstance(remote_dedups, bool):
            raise InvalidArgument("remote_dedups must be a bool")
        token = new_token()
        row = self._event(
            target_id,
            self.steps.event(Event.RETRY),
            lambda now: Facts(
                now=now,
                target_id=target_id,
                epoch=epoch,
                owner=owner,
                new_token_hash=token_hash(token),
                lease_deadline=now + seconds,
                remote_dedups=remote_dedups,
            ),
            epoch=epoch,
        )
        return Claim(self, row, token)

    def get_claim(self, target_id: str) -> ClaimInfo | None:
        check.text_id(target_id, "target_id")
        with self._snapshot() as tx:
            row = tx.claim_row(target_id)
        return None if row is None else ClaimInfo.from_row(row)

    def claims(self, *, state: str | None = None) -> list[ClaimInfo]:
        """Every target's current claim, optionally only those in ``state``."""
        if state is not None and (not isinstance(state, str) or state not in self.spec.states):
            raise InvalidArgument(f"unknown state {state!r}; declared: {list(self.spec.states)}")
        with self._snapshot() as tx:
            return [ClaimInfo.from_row(r) for r in tx.claim_rows(state)]

    def history(self, target_id: str | None = None) -> list[HistoryEntry]:
        """Every transition and refused stale operation, oldest first (of one target or all)."""
        if target_id is not None:
            check.text_id(target_id, "target_id")
        with self._snapshot() as tx:
            return tx.history_rows(target_id)

    def prune_history(
        self,
        older_than: float,
        *,
        archive: Callable[[list[HistoryEntry]], None] | None = None,
        batch: int = 10_000,
    ) -> Pruned:
        """Remove history entries older than ``older_than`` seconds (by the store's clock),
        in one transaction, and keep what remains replayable.

        The cut is the newest entry older than that; every entry up to it goes, so each
        target loses a prefix of its history. Where a target's removed entries end, a
        ``checkpoint`` entry (same seq) records its claim row as of the last removed
        transition: replaying what remains still gives the current claim rows, and a reader
        knows that older history was removed. ``archive`` is called with the removed entries
        in seq order, in batches, before anything is deleted; if it raises, nothing is.
        """
        seconds = check.duration(older_than, "older_than")
        if archive is not None and not callable(archive):
            raise InvalidArgument("archive must be None or a callable taking a list of entries")
        check.positive_int(batch, "batch")

        def prune(tx: Tx) -> Pruned:
            before = tx.now() - seconds
            cut = tx.history_cut(before)
            if cut is None:
                return Pruned(before, None, 0, 0)
            if archive is not None:
                after = 0
                while rows := tx.history_range(after, cut, batch):
                    archive(rows)
                    after = rows[-1].seq
            points = tx.last_before_cut(cut, self._discard)
            removed = tx.delete_history_upto(cut)
            for seq, last in points:
                tx.insert_history_at(seq, _checkpoint(last, cut))
            return Pruned(before, cut, removed, len(points))

        return self._atomically(prune)

    def epochs(self, target_id: str) -> dict[int, str]:
        """Each epoch of the target and the state history last records for it."""
        result: dict[int, str] = {}
        for entry in self.history(target_id):
            result[entry.epoch] = entry.to_state
        return result

    # -- the owner's operations (called by Claim) ----------------------------------------
    def _owner_event(
        self, claim: Claim, step: Event, *, lease_seconds: float | None = None, reason: str = ""
    ) -> Claim:
        """The owner's ``step`` (the typed face: ``Event.BEGIN_SEND`` …), applied as the
        declaration names it."""
        deadline = check.lease(lease_seconds) if step == Event.RENEW else None
        check.reason(reason)
        hashed = token_hash(claim.token)  # the token presented is what is checked
        row = self._event(
            claim.target_id,
            self.steps.event(step),
            lambda now: Facts(
                now=now,
                target_id=claim.target_id,
                epoch=claim.epoch,
                token_hash=hashed,
                lease_deadline=None if deadline is None else now + deadline,
            ),
            epoch=claim.epoch,
            detail=reason,
        )
        claim._refresh(row)
        return claim

    # -- the one path every guarded event takes -------------------------------------------
    def _event(
        self,
        target_id: str,
        event: str,
        make_facts: Callable[[float], Facts],
        *,
        epoch: int,
        detail: str = "",
    ) -> ClaimRow:
        """Apply one guarded event (of ``epoch``, as the caller names it), and report it.
        An event declared with ``fresh_key`` brings a new idempotency key."""
        start = time.perf_counter()
        if event in self._fresh_key:
            given = make_facts

            def make_facts(now: float) -> Facts:
                return replace(given(now), new_idempotency_key=fresh_idempotency_key())

        try:
            row = self._apply_event(target_id, event, make_facts, detail)
        except ClaimFSMError as exc:
            self._failed(event, target_id, epoch, start, exc)
            raise
        if self._watched():
            source = self.spec.source_of(event, row.state)
            seconds = time.perf_counter() - start
            self._emit(
                Observed(event, target_id, row.epoch, "ok", None, source, row.state, seconds)
            )
        return row

    def _apply_event(
        self, target_id: str, event: str, make_facts: Callable[[float], Facts], detail: str
    ) -> ClaimRow:
        """Apply one guarded event in one transaction; ``make_facts`` gets the store's time."""
        done = self._single_statement(event, make_facts, detail)
        if done is not None:
            return done

        def apply(tx: Tx) -> ClaimRow | Exception:
            facts = make_facts(tx.now())
            rows = tx.guarded_write(event, facts)
            if rows:
                self._record(tx, event, rows[0], facts, detail)
                return rows[0]
            current = self._claim_or_raise(tx, target_id)
            draft = tx.draft_row(current.draft_id)
            refusal = self._diagnose(event, current.state, current, facts.with_draft(draft))
            if isinstance(refusal, StaleClaim):
                self._record_discard(tx, event, current, facts, refusal)
            return refusal

        result = self._atomically(apply, durable=event in self._durable)
        if isinstance(result, Exception):
            raise result  # raised after commit, so the discard record is kept
        return result

    def _apply_everywhere(self, tx: Tx, event: str, facts: Facts) -> list[Transitioned]:
        done = []
        # Record in target order: a backend's row order is not part of the protocol, and
        # history must not depend on it.
        for row in sorted(tx.guarded_write(event, facts), key=lambda r: r.target_id):
            source = self._record(tx, event, row, facts, "")
            done.append(Transitioned(row.target_id, row.epoch, event, source, row.state))
        return done

    def _record(self, tx: Tx, event: str, row: ClaimRow, facts: Facts, detail: str) -> str:
        source = self.spec.source_of(event, row.state)
        tx.append_history([_record(event, source, row, facts.now, row.token_hash, detail)])
        if self._dispatches(event, row, facts):
            tx.mark_dispatched(row.draft_id, row.draft_version, facts.now)
        return source

    def _dispatches(self, event: str, row: ClaimRow, facts: Facts) -> bool:
        """Whether the transition ``event`` just took into ``row.state`` is one declared
        ``dispatches`` (told apart from another into that state by its fact guards)."""
        ways = self._dispatching.get((event, row.state))
        if not ways:
            return False
        guards = self.machine.guards
        return any(all(guards[g](row, facts) for g in way) for way in ways)

    def _diagnose(self, event: str, state: str, row: ClaimRow | None, facts: Facts) -> Exception:
        error = self.machine.explain(event, state, row, facts)
        if error is None:
            raise DeclarationMismatch(
                f"the store refused {event} from {state} for target {facts.target_id!r}, "
                "but every declared guard holds"
            )
        return error

    def _record_discard(
        self,
        tx: Tx,
        attempted: str,
        current: ClaimRow,
        facts: Facts,
        refusal: Refused,
        judged: tuple[str, str] | None = None,
    ) -> None:
        """Record a stale owner's refused operation against the epoch it believed it held,
        with the event and what the declaration's rule named (``judged``, where the
        operation is no declared event: the event the rule was asked of, and its answer;
        else ``attempted`` and the refusal's guard, or the row's stale state)."""
        if judged is None:
            named = refusal.guard if refusal.guard is not None else STALE_STATE + current.state
            judged = attempted, named
        epoch = facts.epoch if facts.epoch is not None else current.epoch
        if epoch == current.epoch:
            state = current.state
        else:
            state = tx.epoch_state(current.target_id, epoch) or self._unclaimed
        to_state = self.machine.fire(self._discard, state, current, facts)
        tx.append_history(
            [
                HistoryRecord(
                    target_id=current.target_id,
                    epoch=epoch,
                    event=self._discard,
                    from_state=state,
                    to_state=to_state,
                    at=facts.now,
                    token_hash=facts.token_hash,
                    detail=f"refused {attempted}: {refusal}",
                    attempted=judged[0],
                    refused=judged[1],
                )
            ]
        )

    def _draft_or_raise(self, tx: Tx, draft_id: int) -> DraftRow:
        row = tx.draft_row(draft_id)
        if row is None:
            raise NotFound(f"no draft {draft_id}")
        return row

    def _claim_or_raise(self, tx: Tx, target_id: str) -> ClaimRow:
        row = tx.claim_row(target_id)
        if row is None:
            raise NotFound(f"target {target_id!r} has never been claimed")
        return row


def idempotency_key(draft: DraftRow) -> str:
    """Stable for one draft version: every attempt at it reuses the key, across epochs.
    (The SQL stores derive it in the acquire statement: ``IDEMPOTENCY_KEY_SQL``.)"""
    return f"cf-{draft.draft_id}-v{draft.version}-{draft.digest[:16]}"


#: ``idempotency_key`` as SQL over the draft row ``d`` (SQLite and PostgreSQL alike).
IDEMPOTENCY_KEY_SQL = "'cf-' || d.draft_id || '-v' || d.version || '-' || substr(d.digest, 1, 16)"


def _record(
    event: str, source: str, row: ClaimRow, now: float, hashed: str | None, detail: str = ""
) -> HistoryRecord:
    return HistoryRecord(
        target_id=row.target_id,
        epoch=row.epoch,
        event=event,
        from_state=source,
        to_state=row.state,
        at=now,
        token_hash=hashed,
        detail=detail,
        row=row,
    )


def _checkpoint(last: HistoryEntry, cut: int) -> HistoryRecord:
    """The checkpoint that stands in for a target's removed history: its claim row as the
    last removed transition left it."""
    row = ClaimRow(
        target_id=last.target_id,
        epoch=last.epoch,
        state=last.to_state,
        owner=last.owner or "",
        token_hash="",  # history never holds a token hash; the fingerprint is kept below
        draft_id=last.draft_id or 0,
        draft_version=last.draft_version or 0,
        draft_digest=last.draft_digest or "",
        idempotency_key=last.idempotency_key or "",
        lease_deadline=last.lease_deadline if last.lease_deadline is not None else 0.0,
        outcome=last.outcome,
        updated_at=last.at,
    )
    return HistoryRecord(
        target_id=last.target_id,
        epoch=last.epoch,
        event=CHECKPOINT,
        from_state=last.to_state,
        to_state=last.to_state,
        at=last.at,
        token_hash=last.token_fingerprint,  # fingerprint() keeps its first 8 characters
        detail=f"history up to entry {cut} was pruned; the claim row as of entry {last.seq}",
        row=row,
    )


def history_entry(seq: int, rec: HistoryRecord) -> HistoryEntry:
    """The public form of a record (backends that keep records in memory use this)."""
    r = rec.row
    return HistoryEntry(
        seq=seq,
        target_id=rec.target_id,
        epoch=rec.epoch,
        event=rec.event,
        from_state=rec.from_state,
        to_state=rec.to_state,
        at=rec.at,
        owner=r.owner if r else None,
        token_fingerprint=fingerprint(rec.token_hash),
        draft_id=r.draft_id if r else None,
        draft_version=r.draft_version if r else None,
        draft_digest=r.draft_digest if r else None,
        idempotency_key=r.idempotency_key if r else None,
        lease_deadline=r.lease_deadline if r else None,
        outcome=r.outcome if r else None,
        detail=rec.detail,
        attempted=rec.attempted,
        refused=rec.refused,
    )


def replay(history: list[HistoryEntry], spec: Spec | None = None) -> dict[str, dict[str, Any]]:
    """The claim rows that ``history`` implies: target → the fields of its current epoch.

    Discard records (the internal event of ``spec``, by default ``claim.toml``) are
    skipped: a refused stale operation never changes a row.
    """
    discard = claim_steps(spec if spec is not None else claim_spec()).event(Event.DISCARD)
    rows: dict[str, dict[str, Any]] = {}
    for e in history:
        if e.event == discard:
            continue
        rows[e.target_id] = {
            "epoch": e.epoch,
            "state": e.to_state,
            "owner": e.owner,
            "token_fingerprint": e.token_fingerprint,
            "draft_id": e.draft_id,
            "draft_version": e.draft_version,
            "draft_digest": e.draft_digest,
            "idempotency_key": e.idempotency_key,
            "lease_deadline": e.lease_deadline,
            "outcome": e.outcome,
        }
    return rows


def claim_fields(info: ClaimInfo) -> dict[str, Any]:
    """A claim's fields in the form :func:`replay` produces, for comparing the two."""
    return {
        "epoch": info.epoch,
        "state": info.state,
        "owner": info.owner,
        "token_fingerprint": info.token_fingerprint,
        "draft_id": info.draft_id,
        "draft_version": info.draft_version,
        "draft_digest": info.draft_digest,
        "idempotency_key": info.idempotency_key,
        "lease_deadline": info.lease_deadline,
        "outcome": info.outcome,
    }
