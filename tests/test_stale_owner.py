"""Which refusal is a stale owner's, and so recorded, is one rule of the declaration
(``Spec.stale_owner``): the claim machine (and so the claim's stores), a lifecycle's
machine (and so its store and its verify), the claim world and the replay, the SPIN twin
and the lifecycle audit all read it, so they cannot disagree about a refusal."""

from __future__ import annotations

from itertools import product
from pathlib import Path

import pytest

from claimfsm.audit import audit_lifecycle
from claimfsm.checker import refusal_recorded
from claimfsm.checker._claim import Target
from claimfsm.errors import IllegalTransition, LeaseExpired, StaleClaim
from claimfsm.machine import ClaimMachine
from claimfsm.machine._entity import LifecycleMachine
from claimfsm.machine._facts import ClaimRow, Facts
from claimfsm.spec import STALE_STATE, Spec, claim_spec, declarations_dir, designs, load_spec
from claimfsm.store import Evidence, SQLiteStore, open_entity_store
from claimfsm.verify import ManualClock

from .conftest import FakeClock

CLAIM_DESIGNS = [("claim", claim_spec()), *sorted(designs().items())]


def _row(state: str, live: bool) -> ClaimRow:
    return ClaimRow(
        target_id="t",
        epoch=2,
        state=state,
        owner="w",
        token_hash="h",
        draft_id=1,
        draft_version=1,
        draft_digest="d",
        idempotency_key="k",
        lease_deadline=2000.0 if live else 500.0,
        outcome=None,
        updated_at=0.0,
    )


@pytest.mark.parametrize(("name", "spec"), CLAIM_DESIGNS, ids=[n for n, _ in CLAIM_DESIGNS])
def test_every_consumer_calls_the_same_refusals_a_stale_owners(name: str, spec: Spec) -> None:
    """For every event of the claim protocol and of each wrong design, in every state, by
    a caller holding the epoch or not, its token or not, with the lease live or not: where
    the claim machine refuses, it refuses ``StaleClaim`` (what the claim's stores record
    as a discard) exactly where a lifecycle's machine of the same declaration records a
    stale owner and the claim world marks the refusal recorded. Before the rule was one,
    an operator's reconcile naming an expired epoch was a discard to the claim machine
    and its world and no stale owner's to a lifecycle's machine."""
    claim, lifecycle = ClaimMachine(spec), LifecycleMachine(spec)
    world = refusal_recorded(spec)
    compared = 0
    for event, state, holds_epoch, holds_token, live in product(
        spec.events, spec.states, (True, False), (True, False), (True, False)
    ):
        row = _row(state, live)
        facts = Facts(
            now=1000.0,
            target_id="t",
            epoch=2 if holds_epoch else 1,
            token_hash="h" if holds_token else "other",
            outcome="present",
        )
        refusal = claim.explain(event, state, row, facts)
        if refusal is None:
            continue
        compared += 1
        stale = isinstance(refusal, StaleClaim)
        recorded = lifecycle.stale_refusal(event, row, facts)
        target = Target(epoch=2, state=state, token=1, lease_live=live)
        in_world = world(target, event, 2 if holds_epoch else 1, 1 if holds_token else 2)
        assert (stale, recorded is not None, in_world is not None) in (
            (True, True, True),
            (False, False, False),
        ), (
            event,
            state,
            holds_epoch,
            holds_token,
            live,
            refusal,
            recorded,
        )
        assert in_world == recorded  # both name the same guard or state
        if recorded is not None and not recorded.startswith(STALE_STATE):
            assert refusal.guard == recorded  # type: ignore[union-attr]
    assert compared > 100


def test_an_operator_naming_an_expired_epoch_is_refused_and_nothing_is_recorded(
    tmp_path: Path,
) -> None:
    """``expired`` is declared stale for an owner coming back to it; an operator's
    ``reconcile`` naming the expired epoch is no owner's and is not declared from there:
    it is an illegal transition, and history records no discard for it."""
    clock = FakeClock(1000.0)
    store = SQLiteStore(tmp_path / "c.sqlite", clock=clock, machine=ClaimMachine(claim_spec()))
    draft = store.create_draft("t", "x")
    store.approve_draft(draft.draft_id)
    claim = store.acquire("t", draft.draft_id, "a", 30)
    clock.advance(31)
    store.sweep()
    before = store.history("t")
    assert before[-1].to_state == "expired"
    with pytest.raises(IllegalTransition, match="reconcile is not declared from state 'expired'"):
        store.reconcile("t", claim.epoch, Evidence.present())
    assert store.history("t") == before
    # the owner coming back to it is a stale owner: refused and recorded
    with pytest.raises(
        StaleClaim, match=r"epoch 1 is expired \(a reserved claim whose lease lapsed"
    ):
        claim.release()
    assert [e.event for e in store.history("t")] == [*(e.event for e in before), "discard"]
    store.close()


# The job, with one event an owner takes from `leased` and anyone from `queued` once the
# attempts are spent: a stale owner only where it needs the owner.
CANCEL = """
[[transitions]]
event = "cancel"
source = "leased"
dest = "dead"
guards = ["owner_matches"]

[[transitions]]
event = "cancel"
source = "queued"
dest = "dead"
guards = ["attempts_spent"]
"""


def _job_with(tmp_path: Path, transitions: str) -> Spec:
    """The job's declaration with ``transitions`` written among the owner's."""
    text = (declarations_dir() / "job.toml").read_text()
    cut = text.index("# --- the sweep")
    path = tmp_path / "job.toml"
    path.write_text(text[:cut] + transitions + "\n" + text[cut:])
    return load_spec(path)


def test_an_event_is_a_stale_owners_only_from_the_states_where_it_needs_the_owner(
    tmp_path: Path, url: str
) -> None:
    """A worker whose lease was taken over, cancelling from ``leased`` (where cancel needs
    the owner), is a stale owner: refused, recorded ``owner_matches``. The current owner
    cancelling a job back in ``queued`` (declared stale) is not: cancel is declared from
    there, for anyone, once the attempts are spent, and is refused by that guard, with
    nothing recorded. The audit holds the store's records to the same rule."""
    spec = _job_with(tmp_path, CANCEL)
    assert spec.stale_guards("cancel", "leased") == ("owner_matches",)
    assert spec.stale_guards("cancel", "queued") == ()
    clock = ManualClock()
    store = open_entity_store(spec, url, clock=clock)
    first = store.take("j", "lease", owner="w1", lease_seconds=10)
    clock.advance(11)
    store.sweep()  # leased -> queued
    second = store.take("j", "lease", owner="w2", lease_seconds=10)
    with pytest.raises(StaleClaim):
        store.act(first, "cancel")
    store.act(second, "release")  # back in the queue, epoch 2 current
    with pytest.raises(Exception, match="attempts") as refused:
        store.act(second, "cancel")
    assert not isinstance(refused.value, StaleClaim)
    with pytest.raises(StaleClaim, match="epoch 2 is queued"):
        store.act(second, "start")  # no start from queued: the owner is stale there
    history = [(e.event, e.source, e.refused) for e in store.history("j")]
    assert history[-3:] == [
        ("cancel", "leased", "owner_matches"),
        ("release", "leased", None),
        ("start", "queued", "state:queued"),
    ], history
    assert audit_lifecycle(spec, url).ok
    store.close()


def test_resuming_a_saved_handle_is_judged_by_the_same_rule(tmp_path: Path) -> None:
    """A worker restarting with its saved handle is refused, and recorded, where the rule
    makes it a stale owner of the events a woken worker takes (``wake_events``): a token
    that is not current, or an epoch that is now expired; the holder of a live epoch, or
    of one in ``sending``, gets its handle back."""
    clock = FakeClock(1000.0)
    store = SQLiteStore(tmp_path / "r.sqlite", clock=clock, machine=ClaimMachine(claim_spec()))
    draft = store.create_draft("t", "x")
    store.approve_draft(draft.draft_id)
    claim = store.acquire("t", draft.draft_id, "a", 30)
    assert store.resume("t", claim.epoch, claim.token).epoch == claim.epoch
    with pytest.raises(StaleClaim, match="the epoch or token is not current"):
        store.resume("t", claim.epoch, "x" * 43)
    claim.begin_send()
    assert store.resume("t", claim.epoch, claim.token).epoch == claim.epoch
    other = store.create_draft("u", "y")
    store.approve_draft(other.draft_id)
    late = store.acquire("u", other.draft_id, "b", 30)
    clock.advance(31)
    store.sweep()  # u's reserved epoch expires; t's sending one becomes uncertain
    with pytest.raises(StaleClaim, match="the epoch is expired"):
        store.resume("u", late.epoch, late.token)
    assert [e.event for e in store.history("t")].count("discard") == 1
    assert [e.event for e in store.history("u")][-1] == "discard"
    store.close()


# The job, with a cancel from `leased` two ways: once the attempts are spent, by anyone;
# or by the owner while its lease is live.
TWO_WAYS = """
[[transitions]]
event = "cancel"
source = "leased"
dest = "dead"
guards = ["attempts_spent"]

[[transitions]]
event = "cancel"
source = "leased"
dest = "dead"
guards = ["owner_matches", "lease_live"]
"""


def test_both_machines_tell_a_refused_caller_of_the_way_that_came_furthest(
    tmp_path: Path, url: str
) -> None:
    """Where several transitions of an event leave the state and all are refused, the
    caller is told of the guard of the one that came furthest (``Spec.refusing_guard``),
    by both machines: the owner whose lease lapsed is told its lease lapsed (its way
    failed at its second guard), not that the attempts are not spent (the other way
    failed at its first). A lifecycle's store told of the first failing guard before."""
    spec = _job_with(tmp_path, TWO_WAYS)
    fails = {"attempts_spent", "lease_live"}.__contains__
    assert spec.refusing_guard("cancel", "leased", fails) == "lease_live"
    clock = ManualClock()
    store = open_entity_store(spec, url, clock=clock)
    handle = store.take("j", "lease", owner="w1", lease_seconds=10)
    clock.advance(11)  # lapsed; no sweep yet
    with pytest.raises(LeaseExpired, match="lease_live does not hold"):
        store.act(handle, "cancel")
    store.close()
