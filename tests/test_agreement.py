"""The declaration, the machine and the stores' guarded writes agree.

For every declared transition, on every backend: with all its guards true the store takes
exactly that transition and records it; with each guard made false in turn the store
refuses with the declared refusal and changes no claim. The SQLite store enforces guards
in SQL and asks the machine only to explain a refusal; if the SQL refused something the
machine allows, the store raises DeclarationMismatch and this test fails.

A second test traces the SQL the SQLite store runs: every write to ``claims`` is one of the
statements compiled from a declared event, and a full workflow uses all of them.
"""

from __future__ import annotations

import copy
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from claimfsm.errors import REFUSALS, Refused, StaleClaim
from claimfsm.spec import TransitionDecl, claim_spec
from claimfsm.store import Claim, Evidence, SQLiteStore, Store
from claimfsm.store._tokens import new_token

from .conftest import Backend, FakeClock, approved_draft

SPEC = claim_spec()
TRANSITIONS = [t for t in SPEC.transitions if not t.internal]
LEASE = 10.0


@dataclass
class Situation:
    store: Store
    clock: FakeClock
    claim: Claim | None  # the current epoch's handle (epoch 2: epoch 1 was released)
    spare_draft: int  # another approved draft for the target


def put_target_in(store: Store, clock: FakeClock, state: str) -> Situation:
    """Target 'acct' at epoch 2 in ``state`` (epoch 1 released), or unclaimed."""
    spare = approved_draft(store, content="spare")
    if state == "unclaimed":
        return Situation(store, clock, None, spare)
    store.acquire("acct", approved_draft(store, content="first"), "w", LEASE).release()
    claim = store.acquire("acct", approved_draft(store, content="second"), "w", LEASE)
    if state in ("sending", "uncertain"):
        claim.begin_send()
    if state == "uncertain":
        claim.mark_uncertain("timeout")
    if state == "expired":
        clock.advance(LEASE + 1)
        store.sweep()
    assert claim.state == state or store.get_claim("acct").state == state  # type: ignore[union-attr]
    return Situation(store, clock, claim, spare)


def forged(claim: Claim) -> Claim:
    """The same handle with a token that is not the owner's."""
    fake = copy.copy(claim)
    fake._token = new_token()
    return fake


Fire = Callable[[Situation, TransitionDecl, "str | None"], object]


def fire_acquire(s: Situation, t: TransitionDecl, broken: str | None) -> object:
    draft = s.spare_draft
    if broken == "target_free":
        s.store.acquire("acct", approved_draft(s.store, content="live"), "other", LEASE)
    if broken == "draft_approved":
        draft = s.store.create_draft("acct", "never approved").draft_id
    return s.store.acquire("acct", draft, "w2", LEASE)


def fire_owner(method: str) -> Fire:
    def fire(s: Situation, t: TransitionDecl, broken: str | None) -> object:
        assert s.claim is not None
        handle = forged(s.claim) if broken == "owner_matches" else s.claim
        if broken == "lease_live":
            s.clock.advance(LEASE + 1)
        if broken == "draft_unchanged":
            s.store.edit_draft(s.claim.draft_id, "edited after acquire")
            s.store.approve_draft(s.claim.draft_id)
        args = (LEASE,) if method == "renew" else ()
        return getattr(handle, method)(*args)

    return fire


def fire_lapse(s: Situation, t: TransitionDecl, broken: str | None) -> object:
    if broken != "lease_lapsed":
        s.clock.advance(LEASE + 1)
    done = s.store.sweep()
    if broken == "lease_lapsed":
        assert done == []
        raise Refused("nothing lapsed")  # sweep refuses silently; make it visible here
    return done


def fire_reconcile(s: Situation, t: TransitionDecl, broken: str | None) -> object:
    assert s.claim is not None
    epoch = s.claim.epoch - 1 if broken == "epoch_current" else s.claim.epoch
    if "effect_present" in t.guards:
        evidence = Evidence("absent") if broken == "effect_present" else Evidence.present()
    else:
        fenced = s.claim.epoch - 1 if broken == "remote_fenced" else s.claim.epoch
        evidence = Evidence.absent_fenced(fenced)
    return s.store.reconcile("acct", epoch, evidence)


def fire_retry(s: Situation, t: TransitionDecl, broken: str | None) -> object:
    assert s.claim is not None
    epoch = s.claim.epoch - 1 if broken == "epoch_current" else s.claim.epoch
    return s.store.retry(
        "acct", epoch, owner="w3", lease_seconds=LEASE, remote_dedups=broken != "remote_dedups"
    )


def fire_discard(s: Situation, t: TransitionDecl, broken: str | None) -> object:
    assert s.claim is not None
    with pytest.raises(StaleClaim):
        s.claim.release()  # the stale owner of the expired epoch comes back
    return None


FIRE: dict[str, Fire] = {
    "discard": fire_discard,
    "acquire": fire_acquire,
    "begin_send": fire_owner("begin_send"),
    "release": fire_owner("release"),
    "renew": fire_owner("renew"),
    "confirm": fire_owner("confirm"),
    "timeout": fire_owner("mark_uncertain"),
    "lapse": fire_lapse,
    "reconcile": fire_reconcile,
    "retry": fire_retry,
}

#: (event, guard) pairs that cannot be broken alone: breaking them is another transition.
NOT_ALONE = {("reconcile", "effect_absent"): "presenting the effect is the other reconcile"}


def cases() -> list[tuple[TransitionDecl, str | None]]:
    out: list[tuple[TransitionDecl, str | None]] = []
    for t in TRANSITIONS:
        out.append((t, None))
        out += [(t, g) for g in t.guards if (t.event, g) not in NOT_ALONE]
    return out


def case_id(case: tuple[TransitionDecl, str | None]) -> str:
    t, broken = case
    return f"{t.event}:{t.source}->{t.dest}" + (f":not-{broken}" if broken else "")


def test_every_declared_event_has_a_driver() -> None:
    assert set(FIRE) == set(SPEC.events)


@pytest.mark.parametrize("case", cases(), ids=case_id)
def test_store_takes_exactly_the_declared_transition(
    backend: Backend, case: tuple[TransitionDecl, str | None]
) -> None:
    t, broken = case
    store = backend.open()
    s = put_target_in(store, backend.clock, t.source)
    before = store.get_claim("acct")
    history_before = store.history("acct")

    if broken is None and t.event == "discard":
        FIRE[t.event](s, t, None)
        assert store.get_claim("acct") == before  # invariant 2: the row is untouched
        last = store.history("acct")[-1]
        assert (last.event, last.from_state, last.to_state) == (t.event, t.source, t.dest)
        assert store.epochs("acct")[before.epoch] == t.dest  # type: ignore[union-attr]
        return
    if broken is None:
        FIRE[t.event](s, t, None)
        after = store.get_claim("acct")
        assert after is not None and after.state == t.dest
        last = store.history("acct")[-1]
        assert (last.event, last.from_state, last.to_state) == (t.event, t.source, t.dest)
        return

    decl = SPEC.guards[broken]
    expected = REFUSALS[decl.refusal] if decl.refusal else Refused
    with pytest.raises(expected) as caught:
        FIRE[t.event](s, t, broken)
    if t.event != "lapse":
        # With several candidate transitions (reconcile), the refusal names the guard of
        # the candidate that got furthest; it must be a guard that really failed.
        others = [c for c in SPEC.transitions_for(t.event, t.source) if c is not t]
        allowed = {broken} | {g for c in others for g in c.guards}
        assert caught.value.guard in allowed
    after = store.get_claim("acct")
    if t.event == "acquire" and broken == "target_free":
        assert after is not None and after.owner == "other"  # the blocker's claim, untouched
        return
    assert after == before  # a refusal changes no claim
    new_history = store.history("acct")[len(history_before) :]
    if decl.stale:
        assert [e.event for e in new_history] == ["discard"]
    else:
        assert new_history == []


def test_sqlite_claim_writes_are_exactly_the_compiled_event_statements(
    tmp_path: Path, clock: FakeClock
) -> None:
    store = SQLiteStore(tmp_path / "trace.sqlite", clock=clock)
    sql = store._sql
    executed: list[str] = []

    class Recording:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self._conn = conn

        def execute(self, statement: str, *args: object) -> sqlite3.Cursor:
            executed.append(statement)
            return self._conn.execute(statement, *args)

        def __getattr__(self, name: str) -> object:
            return getattr(self._conn, name)

    store._conn = Recording(store._conn)  # type: ignore[assignment]
    store._tx.conn = store._conn  # the store's one transaction object writes through it

    # A workflow that takes every declared event at least once.
    a = store.acquire("t1", approved_draft(store, "t1"), "w", LEASE)
    a.renew(LEASE)
    a.begin_send()
    a.renew(LEASE)
    a.confirm()
    b = store.acquire("t1", approved_draft(store, "t1"), "w", LEASE)
    b.release()
    c = store.acquire("t1", approved_draft(store, "t1"), "w", LEASE)
    c.begin_send()
    c.mark_uncertain("timeout")
    store.reconcile("t1", c.epoch, Evidence.present())
    d = store.acquire("t1", approved_draft(store, "t1"), "w", LEASE)
    d.begin_send()
    d.mark_uncertain("timeout")
    store.retry("t1", d.epoch, owner="w", lease_seconds=LEASE, remote_dedups=True)
    clock.advance(LEASE + 1)
    store.sweep()  # sending -> uncertain
    store.reconcile("t1", d.epoch, Evidence.absent_fenced(d.epoch))
    e = store.acquire("t1", approved_draft(store, "t1"), "w", LEASE)
    clock.advance(LEASE + 1)
    store.acquire("t1", approved_draft(store, "t1"), "w2", LEASE)  # lapses e first
    with pytest.raises(Refused):
        e.release()  # discard
    store.close()

    compiled = {stmt: event for event, stmt in sql.events.items()}
    compiled |= {stmt: event for event, stmt in sql.everywhere.items()}
    compiled[sql.acquire] = "acquire"
    used: set[str] = set()
    for statement in executed:
        words = statement.split()
        writes_claims = words[:2] == ["UPDATE", "claims"] or words[:3] == [
            "INSERT",
            "INTO",
            "claims",
        ]
        if writes_claims:
            assert statement in compiled, f"undeclared write to claims: {statement[:120]}"
            used.add(compiled[statement])
    events_in_history = {e.event for e in SQLiteStore(tmp_path / "trace.sqlite").history()}
    assert used == set(SPEC.events) - {"discard"}  # discard writes history only
    assert events_in_history == set(SPEC.events)


def test_explain_matches_sqlite_on_a_refusal_the_sql_made(tmp_path: Path, clock: FakeClock) -> None:
    # Sanity for the mismatch detector itself: a store whose SQL is stricter than the
    # declaration (lease_live always false) must report DeclarationMismatch, not a refusal.
    from claimfsm.errors import DeclarationMismatch

    store = SQLiteStore(tmp_path / "strict.sqlite", clock=clock)
    claim = store.acquire("t", approved_draft(store, "t"), "w", LEASE)
    broken = store._sql.events["begin_send"].replace(
        "claims.lease_deadline >", "0 * claims.lease_deadline >"
    )
    store._sql.events["begin_send"] = broken
    with pytest.raises(DeclarationMismatch):
        claim.begin_send()
    assert store.get_claim("t").state == "reserved"  # type: ignore[union-attr]
    store.close()
    sqlite3.connect(tmp_path / "strict.sqlite").close()
