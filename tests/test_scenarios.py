"""The design review's scenarios (docs/design.md), exactly as written, on every backend."""

from __future__ import annotations

import pytest

from claimfsm.errors import IllegalTransition, InsufficientEvidence, StaleClaim
from claimfsm.store import Evidence

from .conftest import Backend, approved_draft


def test_expired_reserved_claim_is_replaced_and_the_old_token_cannot_release_it(
    backend: Backend,
) -> None:
    old_worker, new_worker = backend.open(), backend.open()
    draft = approved_draft(old_worker)
    old = old_worker.acquire("acct", draft, "old", lease_seconds=10)
    assert old.epoch == 1

    backend.clock.advance(11)  # the old owner's lease lapses
    new = new_worker.acquire("acct", draft, "new", lease_seconds=10)
    assert new.epoch == 2

    before = new_worker.get_claim("acct")
    with pytest.raises(StaleClaim, match="epoch 1 is not current"):
        old.release()
    assert new_worker.get_claim("acct") == before  # 0 rows changed

    epochs = new_worker.epochs("acct")
    assert epochs == {1: "discarded", 2: "reserved"}
    kinds = [(e.epoch, e.event, e.from_state, e.to_state) for e in new_worker.history("acct")]
    assert kinds == [
        (1, "acquire", "unclaimed", "reserved"),
        (1, "lapse", "reserved", "expired"),
        (2, "acquire", "unclaimed", "reserved"),
        (1, "discard", "expired", "discarded"),
    ]
    assert "refused release" in new_worker.history("acct")[-1].detail


def test_timeout_moves_sending_to_uncertain_and_lease_expiry_cannot_reclaim_it(
    backend: Backend,
) -> None:
    store, other = backend.open(), backend.open()
    draft = approved_draft(store)
    claim = store.acquire("acct", draft, "w", lease_seconds=10)
    claim.begin_send()
    claim.mark_uncertain("simulated timeout")
    assert store.get_claim("acct").state == "uncertain"  # type: ignore[union-attr]

    frozen = store.get_claim("acct")
    for wait in (11, 3600, 86400 * 365):  # however long one waits
        backend.clock.advance(wait)
        assert store.sweep() == []  # 0 rows changed
        with pytest.raises(Exception, match="uncertain"):
            other.acquire("acct", approved_draft(other), "thief", lease_seconds=10)
        assert store.get_claim("acct") == frozen
    with pytest.raises(IllegalTransition):
        claim.release()


@pytest.mark.parametrize("fenced", [True, False])
def test_uncertain_resolves_only_with_evidence(backend: Backend, fenced: bool) -> None:
    store = backend.open()
    claim = store.acquire("acct", approved_draft(store), "w", lease_seconds=10)
    claim.begin_send()
    claim.mark_uncertain("timeout")

    # Readback that finds nothing resolves it only if the remote is fenced at that epoch.
    if fenced:
        info = store.reconcile("acct", claim.epoch, Evidence.absent_fenced(claim.epoch))
        assert (info.state, info.outcome) == ("reconciled", "absent")
        assert store.get_draft(claim.draft_id).status == "approved"  # back for the next epoch
    else:
        with pytest.raises(InsufficientEvidence):
            store.reconcile("acct", claim.epoch, Evidence.absent_fenced(claim.epoch - 1))
        with pytest.raises(InsufficientEvidence):
            store.reconcile("acct", claim.epoch, Evidence("absent"))
        assert store.get_claim("acct").state == "uncertain"  # type: ignore[union-attr]
        info = store.reconcile("acct", claim.epoch, Evidence.present())
        assert (info.state, info.outcome) == ("reconciled", "present")
        assert store.get_draft(claim.draft_id).status == "dispatched"
