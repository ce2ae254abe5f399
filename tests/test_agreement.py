"""The declaration, the machine and the stores' guarded writes agree.

For every declared transition, on every backend: with all its guards true the store takes
exactly that transition and records it; with each guard made false in turn the store
refuses with the declared refusal and changes no claim. The SQLite store enforces guards
in SQL and asks the machine only to explain a refusal; if the SQL refused something the
machine allows, the store raises DeclarationMismatch and this test fails.

A second test traces the SQL the SQLite store runs: every write to ``claims`` is one of the
statements compiled from a declared event, and a full workflow uses all of them.

Both run on claim.toml and on a copy of it with every state, event and guard renamed
(tests/_renamed.py): the stores find the claim's steps by the declaration's shape, so the
copy must behave the same, in its own names. The drivers below name what they do by the
typed face (``Event``, ``State``) and a guard by its meaning, never by a declared name.
"""

from __future__ import annotations

import copy
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from claimfsm.errors import REFUSALS, Refused, StaleClaim
from claimfsm.spec import (
    ClaimSteps,
    Event,
    GuardDecl,
    Spec,
    State,
    TransitionDecl,
    claim_spec,
    claim_steps,
    load_spec,
)
from claimfsm.store import Claim, Evidence, SQLiteStore, Store
from claimfsm.store._tokens import new_token

from ._renamed import write_renamed
from .conftest import Backend, FakeClock, approved_draft

LEASE = 10.0


@pytest.fixture(scope="module", params=["claim", "renamed"])
def spec(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Spec:
    """claim.toml, or a copy of it with every state, event and guard renamed."""
    if request.param == "claim":
        return claim_spec()
    return load_spec(write_renamed(tmp_path_factory.mktemp("renamed")))


def meaning(g: GuardDecl) -> str:
    """What a guard checks, whatever it is named: its kind, or for a comparison, the fact,
    the operator and what it is compared with (``outcome=present``)."""
    if g.kind != "compare":
        return g.kind
    return f"{g.fact}{g.op}{g.column if g.value is None else g.value}"


@dataclass
class Situation:
    store: Store
    clock: FakeClock
    claim: Claim | None  # the current epoch's handle (epoch 2: epoch 1 was released)
    spare_draft: int  # another approved draft for the target


def put_target_in(store: Store, clock: FakeClock, state: State) -> Situation:
    """Target 'acct' at epoch 2 in ``state`` (epoch 1 released), or unclaimed."""
    spare = approved_draft(store, content="spare")
    if state == State.UNCLAIMED:
        return Situation(store, clock, None, spare)
    store.acquire("acct", approved_draft(store, content="first"), "w", LEASE).release()
    claim = store.acquire("acct", approved_draft(store, content="second"), "w", LEASE)
    if state in (State.SENDING, State.UNCERTAIN):
        claim.begin_send()
    if state == State.UNCERTAIN:
        claim.mark_uncertain("timeout")
    if state == State.EXPIRED:
        clock.advance(LEASE + 1)
        store.sweep()
    want = store.steps.state(state)
    assert claim.state == want or store.get_claim("acct").state == want  # type: ignore[union-attr]
    return Situation(store, clock, claim, spare)


def forged(claim: Claim) -> Claim:
    """The same handle with a token that is not the owner's."""
    fake = copy.copy(claim)
    fake._token = new_token()
    return fake


#: (situation, the transition, the meaning of the guard to break or None)
Fire = Callable[[Situation, TransitionDecl, "str | None"], object]


def fire_acquire(s: Situation, t: TransitionDecl, broken: str | None) -> object:
    draft = s.spare_draft
    if broken == "free":
        s.store.acquire("acct", approved_draft(s.store, content="live"), "other", LEASE)
    if broken == "draft_ready":
        draft = s.store.create_draft("acct", "never approved").draft_id
    return s.store.acquire("acct", draft, "w2", LEASE)


def fire_owner(method: Callable[..., Claim]) -> Fire:
    def fire(s: Situation, t: TransitionDecl, broken: str | None) -> object:
        assert s.claim is not None
        handle = forged(s.claim) if broken == "owner" else s.claim
        if broken == "live":
            s.clock.advance(LEASE + 1)
        if broken == "draft_pinned":
            s.store.edit_draft(s.claim.draft_id, "edited after acquire")
            s.store.approve_draft(s.claim.draft_id)
        args = (LEASE,) if method is Claim.renew else ()
        return method(handle, *args)

    return fire


def fire_lapse(s: Situation, t: TransitionDecl, broken: str | None) -> object:
    if broken != "lapsed":
        s.clock.advance(LEASE + 1)
    done = s.store.sweep()
    if broken == "lapsed":
        assert done == []
        raise Refused("nothing lapsed")  # sweep refuses silently; make it visible here
    return done


def fire_reconcile(s: Situation, t: TransitionDecl, broken: str | None) -> object:
    assert s.claim is not None
    epoch = s.claim.epoch - 1 if broken == "epoch" else s.claim.epoch
    if "outcome=present" in {meaning(s.store.spec.guards[g]) for g in t.guards}:
        evidence = Evidence("absent") if broken == "outcome=present" else Evidence.present()
    else:
        fenced = s.claim.epoch - 1 if broken == "fenced_through>=epoch" else s.claim.epoch
        evidence = Evidence.absent_fenced(fenced)
    return s.store.reconcile("acct", epoch, evidence)


def fire_retry(s: Situation, t: TransitionDecl, broken: str | None) -> object:
    assert s.claim is not None
    epoch = s.claim.epoch - 1 if broken == "epoch" else s.claim.epoch
    dedups = broken != "remote_dedups=True"
    return s.store.retry("acct", epoch, owner="w3", lease_seconds=LEASE, remote_dedups=dedups)


def fire_discard(s: Situation, t: TransitionDecl, broken: str | None) -> object:
    assert s.claim is not None
    with pytest.raises(StaleClaim):
        s.claim.release()  # the stale owner of the expired epoch comes back
    return None


FIRE: dict[Event, Fire] = {
    Event.DISCARD: fire_discard,
    Event.ACQUIRE: fire_acquire,
    Event.BEGIN_SEND: fire_owner(Claim.begin_send),
    Event.RELEASE: fire_owner(Claim.release),
    Event.RENEW: fire_owner(Claim.renew),
    Event.CONFIRM: fire_owner(Claim.confirm),
    Event.TIMEOUT: fire_owner(Claim.mark_uncertain),
    Event.LAPSE: fire_lapse,
    Event.RECONCILE: fire_reconcile,
    Event.RETRY: fire_retry,
}

#: (event, guard) pairs that cannot be broken alone: breaking them is another transition.
NOT_ALONE = {(Event.RECONCILE, "outcome=absent"): "presenting the effect is the other reconcile"}

SPEC = claim_spec()
#: One case per declared transition and guard of claim.toml, by the typed face and the
#: guard's meaning, so the same cases run on any copy of it.
Case = tuple[Event, State, State, tuple[str, ...], "str | None"]
CASES: list[Case] = []
for _t in (t for t in SPEC.transitions if not t.internal):
    _means = tuple(meaning(SPEC.guards[g]) for g in _t.guards)
    _key = (Event(_t.event), State(_t.source), State(_t.dest), _means)
    CASES.append((*_key, None))
    CASES += [(*_key, m) for m in _means if (_key[0], m) not in NOT_ALONE]


def case_id(case: Case) -> str:
    event, source, dest, _, broken = case
    return f"{event}:{source}->{dest}" + (f":not-{broken}" if broken else "")


def the_transition(spec: Spec, steps: ClaimSteps, case: Case) -> TransitionDecl:
    """The declared transition of ``spec`` that the case names."""
    event, source, dest, means, _ = case
    (t,) = [
        t
        for t in spec.transitions
        if not t.internal
        and (t.event, t.source, t.dest)
        == (steps.event(event), steps.state(source), steps.state(dest))
        and tuple(meaning(spec.guards[g]) for g in t.guards) == means
    ]
    return t


def test_every_declared_event_has_a_driver(spec: Spec) -> None:
    steps = claim_steps(spec)
    assert {steps.event(e) for e in FIRE} == set(spec.events)


def test_the_cases_cover_every_transition_and_guard_of_the_copy(spec: Spec) -> None:
    steps = claim_steps(spec)
    ours = {
        (t.event, t.source, t.dest, meaning(spec.guards[g]))
        for t in spec.transitions
        if not t.internal
        for g in t.guards
    }
    covered = {(steps.event(e), steps.state(s), steps.state(d), m) for e, s, d, _, m in CASES if m}
    missing = ours - covered
    assert {(e, m) for e, _, _, m in missing} <= {(steps.event(e), m) for e, m in NOT_ALONE}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_store_takes_exactly_the_declared_transition(
    backend: Backend, spec: Spec, case: Case
) -> None:
    event, source, _, _, broken = case
    backend.spec = spec
    store = backend.open()
    steps = store.steps
    t = the_transition(spec, steps, case)
    s = put_target_in(store, backend.clock, source)
    before = store.get_claim("acct")
    history_before = store.history("acct")

    if broken is None and event == Event.DISCARD:
        FIRE[event](s, t, None)
        assert store.get_claim("acct") == before  # invariant 2: the row is untouched
        last = store.history("acct")[-1]
        assert (last.event, last.from_state, last.to_state) == (t.event, t.source, t.dest)
        assert store.epochs("acct")[before.epoch] == t.dest  # type: ignore[union-attr]
        return
    if broken is None:
        FIRE[event](s, t, None)
        after = store.get_claim("acct")
        assert after is not None and after.state == t.dest
        last = store.history("acct")[-1]
        assert (last.event, last.from_state, last.to_state) == (t.event, t.source, t.dest)
        return

    (guard,) = [g for g in t.guards if meaning(spec.guards[g]) == broken]
    decl = spec.guards[guard]
    expected = REFUSALS[decl.refusal] if decl.refusal else Refused
    with pytest.raises(expected) as caught:
        FIRE[event](s, t, broken)
    if event != Event.LAPSE:
        # With several candidate transitions (reconcile), the refusal names the guard of
        # the candidate that got furthest; it must be a guard that really failed.
        others = [c for c in spec.transitions_for(t.event, t.source) if c is not t]
        allowed = {guard} | {g for c in others for g in c.guards}
        assert caught.value.guard in allowed
    after = store.get_claim("acct")
    if event == Event.ACQUIRE and broken == "free":
        assert after is not None and after.owner == "other"  # the blocker's claim, untouched
        return
    assert after == before  # a refusal changes no claim
    new_history = store.history("acct")[len(history_before) :]
    if decl.stale:
        assert [e.event for e in new_history] == [steps.event(Event.DISCARD)]
    else:
        assert new_history == []


def test_sqlite_claim_writes_are_exactly_the_compiled_event_statements(
    tmp_path: Path, clock: FakeClock, spec: Spec
) -> None:
    from claimfsm.machine import ClaimMachine

    store = SQLiteStore(tmp_path / "trace.sqlite", clock=clock, machine=ClaimMachine(spec))
    steps = store.steps
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

    store._db.conn = Recording(store._db.conn)  # type: ignore[assignment]
    store._tx.conn = store._db.conn  # the store's one transaction object writes through it

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
    compiled[sql.acquire] = steps.event(Event.ACQUIRE)
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
    history = SQLiteStore(tmp_path / "trace.sqlite", machine=ClaimMachine(spec)).history()
    discard = steps.event(Event.DISCARD)
    assert used == set(spec.events) - {discard}  # discard writes history only
    assert {e.event for e in history} == set(spec.events)


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
