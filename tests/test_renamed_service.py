"""The claim's service layer on a renamed copy of claim.toml: the Dispatcher, the reconciler,
the metrics, the campaign's verdict, the history replay and the audit read the claim's steps
through the store (``Store.steps``), so a store that runs the copy works unchanged and
counts the same, with its rows and history in the copy's names."""

from __future__ import annotations

from pathlib import Path

import pytest

from claimfsm.audit import audit
from claimfsm.campaign._verdict import judge
from claimfsm.errors import StaleClaim
from claimfsm.service import Dispatcher, Faults, SendRequest, SimulatedRemote
from claimfsm.spec import Event, Spec, State, claim_spec, load_spec
from claimfsm.store import Store, claim_fields, open_store, replay

from ._renamed import names, write_renamed
from .conftest import FakeClock, approved_draft

LEASE = 10.0


@pytest.fixture(params=["claim", "renamed"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Spec:
    if request.param == "claim":
        return claim_spec()
    return load_spec(write_renamed(tmp_path / "renamed"))


def run_a_day(store: Store, clock: FakeClock) -> dict[str, object]:
    """One confirmed send; one whose request is lost (uncertain, then reconciled absent
    behind the fence); one whose worker stalls past its lease after its request landed
    (swept to uncertain, then reconciled present); and the first worker coming back to an
    epoch that was superseded (refused, recorded)."""
    remote = SimulatedRemote("fencing")
    sends = Dispatcher(store, remote, owner="w1", lease_seconds=LEASE)
    approved_draft(store, "a")
    first = sends.dispatch_next("a")
    approved_draft(store, "b")
    remote.faults = Faults(lost_request=1.0)
    second = sends.dispatch_next("b")
    remote.faults = Faults()
    held = store.acquire("c", approved_draft(store, "c"), "w2", LEASE)
    held.begin_send()
    remote.send(SendRequest("c", held.draft_id, held.epoch, held.idempotency_key, "hello"))
    clock.advance(LEASE + 1)  # ... and the worker stalls past its lease before confirming
    swept = store.sweep()
    resolved = sends.reconcile_all()
    store.acquire("a", approved_draft(store, "a"), "w3", LEASE)  # epoch 2 of a
    assert first.claim is not None
    with pytest.raises(StaleClaim):
        first.claim.release()  # epoch 1's owner comes back
    return {
        "outcomes": (first.outcome, second.outcome),
        "swept": [(t.from_state, t.to_state) for t in swept],
        "resolved": resolved,
    }


def test_a_dispatcher_day_on_the_renamed_claim_is_the_same_day(spec: Spec, tmp_path: Path) -> None:
    clock = FakeClock()
    url = f"sqlite:///{tmp_path / 'day.sqlite'}"
    store = open_store(url, clock=clock, spec=spec)
    steps = store.steps
    prometheus_client = pytest.importorskip("prometheus_client")
    from claimfsm.metrics import StoreMetrics

    registry = prometheus_client.CollectorRegistry()
    StoreMetrics(store, registry=registry)
    day = run_a_day(store, clock)
    assert day["outcomes"] == ("confirmed", "uncertain")  # the dispatcher's own words
    assert day["swept"] == [(steps.state(State.SENDING), steps.state(State.UNCERTAIN))]
    assert day["resolved"] == {"b": "absent", "c": "present"}
    # rows and history in the declaration's names, read back as the typed face
    rows = {c.target_id: c for c in store.claims()}
    assert {t: steps.state_role(c.state) for t, c in rows.items()} == {
        "a": State.RESERVED,
        "b": State.RECONCILED,
        "c": State.RECONCILED,
    }
    events = [e.event for e in store.history()]
    assert events.count(steps.event(Event.DISCARD)) == 1
    assert set(events) <= set(spec.events)
    # the metrics count the lapse by the state it lapsed in, and read the uncertain gauge
    lapsed = {"from_state": steps.state(State.SENDING)}
    assert registry.get_sample_value("claimfsm_lease_lapses_total", lapsed) == 1
    assert registry.get_sample_value("claimfsm_claims_uncertain") == 0
    # the history replays to the rows; the audit finds nothing wrong
    assert replay(store.history(), spec) == {t: claim_fields(c) for t, c in rows.items()}
    assert audit(url, spec=spec).ok
    # the campaign's verdict counts the same things
    found = judge(store, [], "fencing", ["a", "b", "c"]).findings
    assert (found.confirmed, found.uncertain, found.reconciled_absent) == (1, 2, 1)
    assert (found.reconciled_present, found.discarded, found.sends_begun) == (1, 1, 3)
    assert (found.epochs, found.history_mismatches) == (4, 0)
    store.close()


def test_the_renamed_store_speaks_the_copys_words_and_the_typed_face(tmp_path: Path) -> None:
    n = names()
    spec = load_spec(write_renamed(tmp_path / "renamed"))
    store = open_store("memory://", spec=spec)
    claim = store.acquire("t", approved_draft(store, "t"), "w", LEASE)
    assert (claim.state, claim.role) == (n["reserved"], State.RESERVED)
    claim.begin_send()
    assert (claim.state, claim.role) == (n["sending"], State.SENDING)
    assert [e.event for e in store.history("t")] == [n["acquire"], n["begin_send"]]


def test_a_store_refuses_a_lifecycle_of_its_own_pointing_to_the_entity_store() -> None:
    from claimfsm.errors import SpecError
    from claimfsm.spec import shipped

    with pytest.raises(SpecError, match="open_entity_store"):
        open_store("memory://", spec=shipped()["job"])
