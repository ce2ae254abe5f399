"""The Dispatcher when its worker stalls past the lease (a GC pause, a stopped process):
by the time it carries on, the epoch may have been swept, reconciled or superseded. Found
by the crash campaign's pauses; each case must return a result, never raise."""

from __future__ import annotations

import pytest

from claimfsm.service import Dispatcher, SimulatedRemote
from claimfsm.store import Claim, Evidence, Store

from .conftest import Backend, FakeClock, approved_draft


def stall_then(store: Store, clock: FakeClock, remote: SimulatedRemote, resolve: str):  # type: ignore[no-untyped-def]
    """A step hook: at ``step``, the lease lapses, the sweeper and reconciler act."""

    def hook(step: str, claim: Claim) -> None:
        if step != resolve.split(":")[0]:
            return
        clock.advance(60)
        store.sweep()  # sending -> uncertain, reserved -> expired
        how = resolve.split(":")[1]
        if how == "absent":
            remote.fence(claim.target_id, claim.epoch)
            store.reconcile(claim.target_id, claim.epoch, Evidence.absent_fenced(claim.epoch))
        elif how == "present":
            store.reconcile(claim.target_id, claim.epoch, Evidence.present())

    return hook


@pytest.mark.parametrize(
    ("resolve", "state"),
    [
        ("sending:absent", "reconciled"),  # woke before the call: the remote rejects it (fenced)
        ("sending:none", "uncertain"),  # woke before the call, epoch still uncertain
        ("sent:present", "reconciled"),  # woke before confirm, already reconciled present
        ("sent:none", "uncertain"),  # woke before confirm, epoch uncertain
        ("acquired:none", "expired"),  # woke before begin_send: the reservation expired
    ],
)
def test_a_worker_that_stalled_past_its_lease_gets_a_result_not_an_error(
    backend: Backend, resolve: str, state: str
) -> None:
    store = backend.open()
    remote = SimulatedRemote("fencing")
    draft = approved_draft(store)
    dispatcher = Dispatcher(
        store,
        remote,
        owner="w",
        lease_seconds=30,
        on_step=stall_then(store, backend.clock, remote, resolve),
    )
    result = dispatcher.dispatch_next("acct")
    assert result.outcome == ("lost" if state == "expired" else "uncertain"), result
    info = store.get_claim("acct")
    assert info is not None and info.state == state
    if resolve == "sending:absent":
        assert remote.rejected == 1 and remote.effects == []  # the late send was fenced off
        assert store.get_draft(draft).status == "approved"  # so it can be dispatched again
