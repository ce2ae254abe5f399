"""KeepAlive: renews while a long call runs, never renews a lapsed or superseded lease,
signals loss at once, and stops cleanly. Driven by conditions and counts (a bounded wait
for each), never by how fast anything ran."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from claimfsm import KeepAlive, LeaseLost
from claimfsm.errors import InvalidArgument, LeaseExpired, StaleClaim, StoreError
from claimfsm.store import open_store

from .conftest import Backend, FakeClock, approved_draft

LEASE = 0.3  # seconds: the keeper renews every 0.1 s
WAIT = 20.0  # the longest any condition below may take on a loaded machine


def wait_for(condition: Any) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def renewals(store: Any, target: str) -> int:
    return sum(e.event == "renew" for e in store.history(target))


def test_it_renews_while_the_block_runs_then_stops(backend: Backend) -> None:
    store = backend.open()
    claim = store.acquire("t", approved_draft(store, "t"), "w", LEASE)
    with KeepAlive(claim, LEASE) as keeper:
        wait_for(lambda: renewals(store, "t") >= 3)
        backend.clock.advance(0.2)  # store time moves; each renew sets now + LEASE
        wait_for(lambda: keeper.deadline == backend.clock.now + LEASE)
        keeper.check()
        claim.begin_send()  # the caller's handle still works: the keeper has its own
    done = renewals(store, "t")
    assert keeper.renewals == done and not keeper.lost.is_set()
    time.sleep(4 * keeper.interval)
    assert renewals(store, "t") == done  # stopped on exit
    assert store.get_claim("t").lease_deadline == keeper.deadline  # type: ignore[union-attr]


def test_a_lapsed_lease_is_never_renewed_and_loss_is_signalled(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    store = open_store(f"sqlite:///{tmp_path / 'c.sqlite'}", clock=clock)
    claim = store.acquire("t", approved_draft(store, "t"), "w", LEASE)
    lost: list[LeaseLost] = []
    with KeepAlive(claim, LEASE, on_lost=lost.append) as keeper:
        clock.advance(LEASE)  # the clock jumps to the deadline: lapsed
        assert keeper.lost.wait(WAIT)
        with pytest.raises(LeaseLost, match="renew was refused") as caught:
            keeper.check()
    assert isinstance(caught.value.__cause__, LeaseExpired)
    assert lost == [keeper.error]
    assert renewals(store, "t") == 0  # the lapsed lease was not renewed
    with pytest.raises(LeaseExpired):
        claim.begin_send()  # and the caller cannot send on it either


def test_a_renew_refused_mid_call_because_another_worker_took_over(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    store = open_store(f"sqlite:///{tmp_path / 'c.sqlite'}", clock=clock)
    claim = store.acquire("t", approved_draft(store, "t"), "w1", 60)
    keeper = KeepAlive(claim, 60, every=0.002)  # renews every 0.12 s
    with keeper:
        wait_for(lambda: keeper.renewals >= 1)
        clock.advance(61)  # the worker stalls past its lease; another takes the target
        other = store.acquire("t", approved_draft(store, "t"), "w2", 60)
        assert keeper.lost.wait(WAIT)
    assert isinstance(keeper.error, LeaseLost)
    assert isinstance(keeper.error.__cause__, StaleClaim)
    assert store.get_claim("t").epoch == other.epoch  # type: ignore[union-attr]
    discards = [e for e in store.history("t") if e.event == "discard"]
    assert len(discards) == 1 and "refused renew" in discards[0].detail


def test_a_dropped_connection_is_retried_then_lost_when_the_lease_runs_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'c.sqlite'}", clock=FakeClock(1000.0))
    claim = store.acquire("t", approved_draft(store, "t"), "w", LEASE)
    attempts = {"n": 0}
    real = store._owner_event

    def dropping(*args: Any, **kw: Any) -> Any:
        attempts["n"] += 1
        if attempts["n"] == 1:
            return real(*args, **kw)  # the first renew works
        raise StoreError("server closed the connection unexpectedly")

    monkeypatch.setattr(store, "_owner_event", dropping)
    with KeepAlive(claim, LEASE) as keeper:
        assert keeper.lost.wait(WAIT)
    assert keeper.renewals == 1 and attempts["n"] >= 3  # retried at every tick until then
    assert isinstance(keeper.error, LeaseLost)
    assert "no renew succeeded before the lease ran out" in str(keeper.error)
    assert isinstance(keeper.error.__cause__, StoreError)


def test_it_stops_quietly_when_the_claim_moves_on_and_on_an_exception(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'c.sqlite'}", clock=FakeClock(1000.0))
    claim = store.acquire("t", approved_draft(store, "t"), "w", LEASE)
    with KeepAlive(claim, LEASE) as keeper:
        claim.begin_send()
        claim.confirm()  # confirmed holds no lease: nothing to keep, nothing lost
        wait_for(lambda: keeper._thread is not None and not keeper._thread.is_alive())
    assert not keeper.lost.is_set() and keeper.error is None
    second = store.acquire("u", approved_draft(store, "u"), "w", LEASE)
    threads = threading.active_count()
    with pytest.raises(RuntimeError, match="the call failed"), KeepAlive(second, LEASE):
        raise RuntimeError("the call failed")
    assert threading.active_count() == threads  # the keeper's thread is gone


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'c.sqlite'}")
    claim = store.acquire("t", approved_draft(store, "t"), "w", 30)
    for bad in ({"lease_seconds": 0}, {"lease_seconds": float("nan")}, {"lease_seconds": True}):
        with pytest.raises(InvalidArgument, match="lease_seconds"):
            KeepAlive(claim, **bad)
    for every in (0, 1, 1.5, True):
        with pytest.raises(InvalidArgument, match="every"):
            KeepAlive(claim, 30, every=every)
    with pytest.raises(InvalidArgument, match="claim must be a Claim"):
        KeepAlive("t", 30)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="on_lost"):
        KeepAlive(claim, 30, on_lost="print")  # type: ignore[arg-type]
