"""The in-memory store: the reference model, executed by the ``transitions`` machine.

Its guarded writes fire the declared events on the shared machine, with the guards'
Python meaning as conditions; nothing is restated. Tests drive it side by side with the
SQL stores, which must agree with it step for step. It is also handy in an embedding
service's own unit tests (``open_store("memory://")``). Nothing is persisted.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from claimfsm.errors import ClaimFSMError
from claimfsm.machine import ClaimMachine, ClaimRow, DraftRow, Facts
from claimfsm.spec import Event, State
from claimfsm.store._core import (
    CHECKPOINT,
    Clock,
    HistoryRecord,
    Store,
    history_entry,
    idempotency_key,
)
from claimfsm.store._types import HistoryEntry


class _State:
    def __init__(self) -> None:
        self.drafts: dict[int, DraftRow] = {}
        self.claims: dict[str, ClaimRow] = {}
        self.history: list[HistoryEntry] = []  # in seq order
        self.next_seq = 1  # never reused, as SQLite's AUTOINCREMENT and PostgreSQL's bigserial

    def copy(self) -> _State:
        other = _State()
        other.drafts = {k: replace(v) for k, v in self.drafts.items()}
        other.claims = {k: replace(v) for k, v in self.claims.items()}
        other.history = list(self.history)  # entries are immutable
        other.next_seq = self.next_seq
        return other


class _MemoryTx:
    def __init__(self, data: _State, machine: ClaimMachine, clock: Clock) -> None:
        self.data = data
        self.machine = machine
        self.now = clock

    def claim_row(self, target_id: str) -> ClaimRow | None:
        row = self.data.claims.get(target_id)
        return None if row is None else replace(row)

    def draft_row(self, draft_id: int) -> DraftRow | None:
        row = self.data.drafts.get(draft_id)
        return None if row is None else replace(row)

    def draft_rows(self, target_id: str, status: str | None) -> list[DraftRow]:
        return [
            replace(d)
            for d in self.data.drafts.values()
            if d.target_id == target_id and (status is None or d.status == status)
        ]

    def claim_rows(self, state: str | None) -> list[ClaimRow]:
        return [
            replace(r)
            for _, r in sorted(self.data.claims.items())
            if state is None or r.state == state
        ]

    def epoch_state(self, target_id: str, epoch: int) -> str | None:
        state = None
        for e in self.data.history:
            if e.target_id == target_id and e.epoch == epoch:
                state = e.to_state
        return state

    def history_rows(self, target_id: str | None) -> list[HistoryEntry]:
        return [e for e in self.data.history if target_id is None or e.target_id == target_id]

    def live_drafts(self, target_id: str) -> list[DraftRow]:
        return [d for d in self.draft_rows(target_id, None) if d.status in ("pending", "approved")]

    def insert_draft(self, target_id: str, content: str, digest: str, now: float) -> DraftRow:
        row = DraftRow(len(self.data.drafts) + 1, target_id, 1, digest, "pending", content)
        self.data.drafts[row.draft_id] = row
        return replace(row)

    def update_draft(self, row: DraftRow, now: float) -> None:
        self.data.drafts[row.draft_id] = replace(row)

    def mark_dispatched(self, draft_id: int, version: int, now: float) -> None:
        draft = self.data.drafts.get(draft_id)
        if draft is not None and draft.version == version:
            draft.status = "dispatched"

    def acquire_write(self, facts: Facts) -> ClaimRow | None:
        target_id, draft_id = facts.target_id, facts.draft_id
        assert target_id is not None and draft_id is not None
        stored = self.data.drafts.get(draft_id)
        if stored is None:
            return None
        draft = replace(stored)
        facts = facts.with_draft(draft)
        previous = self.data.claims.get(target_id)
        steps = self.machine.steps
        try:
            dest = self.machine.fire(
                steps.event(Event.ACQUIRE), steps.state(State.UNCLAIMED), previous, facts
            )
        except ClaimFSMError:
            return None
        assert facts.owner and facts.token_hash and facts.lease_deadline is not None
        row = ClaimRow(
            target_id=target_id,
            epoch=(previous.epoch if previous else 0) + 1,
            state=dest,
            owner=facts.owner,
            token_hash=facts.token_hash,
            draft_id=draft.draft_id,
            draft_version=draft.version,
            draft_digest=draft.digest,
            idempotency_key=idempotency_key(draft),
            lease_deadline=facts.lease_deadline,
            outcome=None,
            updated_at=facts.now,
        )
        self.data.claims[row.target_id] = row
        return replace(row)

    def guarded_write(self, event: str, facts: Facts) -> list[ClaimRow]:
        targets = [facts.target_id] if facts.target_id is not None else list(self.data.claims)
        changed = []
        for target in targets:
            row = self.data.claims.get(target)
            if row is None:
                continue
            draft = self.data.drafts.get(row.draft_id)
            try:
                new_state = self.machine.fire(event, row.state, row, facts.with_draft(draft))
            except ClaimFSMError:
                continue
            row.state = new_state
            for column, field in self.machine.spec.event_effects(event):
                setattr(row, column, getattr(facts, field))
            row.updated_at = facts.now
            changed.append(replace(row))
        return changed

    def append_history(self, records: list[HistoryRecord]) -> None:
        for rec in records:
            self.data.history.append(history_entry(self.data.next_seq, rec))
            self.data.next_seq += 1

    def history_cut(self, before: float) -> int | None:
        old = (e.seq for e in self.data.history if e.at < before and e.event != CHECKPOINT)
        return max(old, default=None)

    def history_range(self, after: int, upto: int, limit: int) -> list[HistoryEntry]:
        return [e for e in self.data.history if after < e.seq <= upto][:limit]

    def last_before_cut(self, cut: int, discard: str) -> list[tuple[int, HistoryEntry]]:
        last: dict[str, int] = {}
        kept: dict[str, HistoryEntry] = {}
        for e in self.data.history:
            if e.seq <= cut:
                last[e.target_id] = e.seq
                if e.event != discard:
                    kept[e.target_id] = e
        return [(last[t], kept[t]) for t in sorted(kept)]

    def delete_history_upto(self, cut: int) -> int:
        before = len(self.data.history)
        self.data.history = [e for e in self.data.history if e.seq > cut]
        return before - len(self.data.history)

    def insert_history_at(self, seq: int, record: HistoryRecord) -> None:
        self.data.history.append(history_entry(seq, record))
        self.data.history.sort(key=lambda e: e.seq)


class MemoryStore(Store):
    """A store held in this process's memory (``memory://``)."""

    def __init__(self, *, clock: Clock | None = None, machine: ClaimMachine | None = None):
        super().__init__(clock=clock, machine=machine)
        self._data = _State()
        self._lock = threading.RLock()

    @contextmanager
    def _transaction(self, *, durable: bool = False) -> Iterator[_MemoryTx]:
        with self._lock:
            work = self._data.copy()  # all-or-nothing: commit by swapping the copy in
            yield _MemoryTx(work, self.machine, self.clock)
            self._data = work

    @contextmanager
    def _snapshot(self) -> Iterator[_MemoryTx]:
        with self._lock:
            yield _MemoryTx(self._data, self.machine, self.clock)

    def close(self) -> None:
        pass
