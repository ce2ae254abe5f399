"""The asyncio face: real concurrency on its own connections, the loop never blocked, the
same protocol and errors through AsyncDispatcher and the async HTTP remote (against the
real test server), the async keep-alive, and cancellation.

The whole store suite and the stateful interleavings also run on this face (the
``sqlite-async`` and ``postgresql-async`` backends in conftest, and
``test_the_async_face_agrees_with_the_reference_model``). Every wait here is bounded and
driven by conditions, never by how fast anything ran.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from claimfsm import AsyncDispatcher, AsyncKeepAlive, AsyncStore, LeaseLost
from claimfsm.errors import (
    InvalidArgument,
    InvalidRemote,
    LeaseExpired,
    StaleClaim,
    StoreError,
    TargetBusy,
)
from claimfsm.service import AsyncHttpRemote, Dispatcher, SimulatedRemote, check_remote
from claimfsm.store import open_store

from .conftest import FakeClock, drop_schema, pg_schema_url
from .test_http_remote import Service

WAIT = 20.0  # the longest any condition below may take on a loaded machine


def run(coro: Awaitable[Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, 120)

    return asyncio.run(bounded())


async def until(condition: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), WAIT)


async def approved(store: AsyncStore, target: str, content: str = "hello") -> int:
    draft = await store.create_draft(target, content)
    await store.approve_draft(draft.draft_id)
    return draft.draft_id


@pytest.fixture
def pg_url(pg_database: str) -> Iterator[str]:
    schema, found = pg_schema_url(pg_database)
    yield found
    drop_schema(pg_database, schema)


# -- concurrency ---------------------------------------------------------------------------
def test_postgresql_tasks_interleave_on_their_own_connections(pg_url: str) -> None:
    """A task blocked on a row lock held elsewhere does not hold up the others: they run
    to completion on other pooled connections meanwhile (a store that blocked the loop
    would finish them only after the lock is released)."""
    import psycopg

    from claimfsm.store._postgres import split_url

    async def main() -> None:
        store = await AsyncStore.open(pg_url, pool_size=4)
        first = await store.acquire("x", await approved(store, "x"), "w", 30)
        await first.release()
        held = threading.Event()
        release = threading.Event()
        libpq, schema, _ = split_url(pg_url)

        def hold_the_row() -> None:
            with psycopg.connect(libpq) as conn:
                conn.execute(f"SELECT 1 FROM {schema}.claims WHERE target_id = 'x' FOR UPDATE")  # noqa: S608
                held.set()
                release.wait(WAIT)  # at the latest: a blocked loop fails below, not hangs

        locker = threading.Thread(target=hold_the_row)
        locker.start()
        await until(held.is_set)
        blocked = asyncio.create_task(store.acquire("x", await approved(store, "x"), "w", 30))
        await asyncio.sleep(0.2)  # let it reach the lock

        async def cycle(target: str) -> str:
            claim = await store.acquire(target, await approved(store, target), "w", 30)
            await claim.begin_send()
            await claim.confirm()
            return claim.state

        states = await asyncio.gather(*(cycle(f"y{i}") for i in range(3)))
        assert states == ["confirmed"] * 3
        assert not blocked.done()  # still waiting for the lock, while the others finished
        release.set()
        claim = await blocked
        assert (claim.epoch, claim.state) == (2, "reserved")
        locker.join()
        await store.close()

    run(main())


def test_sqlite_never_blocks_the_loop(tmp_path: Path) -> None:
    """The write lock held by another connection: the store waits for it in a worker
    thread, and the loop keeps running other tasks."""
    path = tmp_path / "claims.sqlite"

    async def main() -> None:
        store = await AsyncStore.open(f"sqlite:///{path}")
        draft = await approved(store, "t")
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # the write lock, held
        pending = asyncio.create_task(store.acquire("t", draft, "w", 30))
        ticks = 0
        while ticks < 20:
            await asyncio.sleep(0.01)
            ticks += 1
        assert not pending.done()  # waiting for the lock, and the loop ticked meanwhile
        other.execute("ROLLBACK")
        other.close()
        claim = await pending
        assert claim.state == "reserved"
        await store.close()

    run(main())


# -- the same protocol, the same errors ------------------------------------------------------
def test_the_same_errors_and_history_as_the_sync_face(url: str) -> None:
    async def main() -> None:
        clock = FakeClock()
        store = await AsyncStore.open(url, clock=clock)
        claim = await store.acquire("t", await approved(store, "t"), "w1", 30)
        with pytest.raises(TargetBusy):
            await store.acquire("t", await approved(store, "t"), "w2", 30)
        clock.advance(31)
        newer = await store.acquire("t", await approved(store, "t"), "w2", 30)
        with pytest.raises(StaleClaim):
            await claim.begin_send()  # the stale worker wakes up: refused, and recorded
        await newer.begin_send()
        await newer.confirm()
        events = [e.event for e in await store.history("t")]
        assert events == ["acquire", "lapse", "acquire", "discard", "begin_send", "confirm"]
        assert claim.token not in repr(claim)  # the secret stays out of what is shown
        await store.close()

    run(main())


def test_bad_input_is_refused_before_anything_runs(tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(InvalidArgument, match="unsupported store url"):
            await AsyncStore.open("mysql://nowhere")
        with pytest.raises(InvalidArgument, match="url must be a str"):
            await AsyncStore.open(42)  # type: ignore[arg-type]
        with pytest.raises(StoreError, match="cannot connect"):
            await AsyncStore.open("postgresql://127.0.0.1:1/none", connect_seconds=1)
        store = await AsyncStore.open(f"sqlite:///{tmp_path / 'c.sqlite'}")
        with pytest.raises(InvalidArgument, match="lease"):
            await store.acquire("t", await approved(store, "t"), "w", -1)
        with pytest.raises(InvalidArgument, match="AsyncStore"):
            AsyncDispatcher(store.store, _AsyncRemote(), owner="w")  # type: ignore[arg-type]
        with pytest.raises(InvalidRemote, match="coroutine function"):
            AsyncDispatcher(store, SimulatedRemote("fencing"), owner="w")  # type: ignore[arg-type]
        with pytest.raises(InvalidRemote, match="use AsyncDispatcher"):
            Dispatcher(store.store, _AsyncRemote(), owner="w")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="AsyncClaim"):
            AsyncKeepAlive("t", 30)  # type: ignore[arg-type]
        await store.close()

    with pytest.raises(InvalidArgument, match="Store"):
        AsyncStore("sqlite:///x")  # type: ignore[arg-type]
    run(main())


class _AsyncRemote:
    """The simulated remote behind async methods (for the dispatcher's own tests)."""

    def __init__(self, mode: str = "fencing") -> None:
        self.sim = SimulatedRemote(mode)  # type: ignore[arg-type]
        self.fences_epochs = self.sim.fences_epochs
        self.dedups_by_key = self.sim.dedups_by_key

    async def send(self, request: Any) -> None:
        await asyncio.sleep(0)
        self.sim.send(request)

    async def readback(self, target_id: str, idempotency_key: str, epoch: int) -> bool:
        return self.sim.readback(target_id, idempotency_key, epoch)

    async def fence(self, target_id: str, epoch: int) -> None:
        self.sim.fence(target_id, epoch)


def test_many_tasks_dispatch_at_most_once_per_target(url: str) -> None:
    """Eight tasks, each its own dispatcher, race for four targets' drafts: every draft
    is sent once, no target ever has two sends in flight, and every draft ends dispatched."""
    remote = _AsyncRemote("fencing")

    async def main() -> None:
        store = await AsyncStore.open(url, pool_size=4)
        for n in range(4):
            for k in range(3):
                await approved(store, f"t{n}", f"draft {k}")
        steps: list[str] = []

        async def note(step: str, claim: Any) -> None:
            steps.append(step)
            await asyncio.sleep(0)  # a coroutine hook is awaited: others run meanwhile

        async def worker(w: int) -> None:
            dispatcher = AsyncDispatcher(store, remote, owner=f"w{w}", on_step=note)
            for _ in range(12):
                for n in range(4):
                    await dispatcher.dispatch_next(f"t{n}")

        await asyncio.gather(*(worker(w) for w in range(8)))
        assert remote.sim.overlapping_sends == 0
        assert sorted(e.draft_id for e in remote.sim.effects) == list(range(1, 13))
        # A claim ends confirmed, or released by a worker whose draft another dispatched.
        assert {c.state for c in await store.claims()} <= {"confirmed", "released"}
        for n in range(4):
            assert {d.status for d in await store.drafts(f"t{n}")} == {"dispatched"}
        assert steps.count("sent") == 12
        await store.close()

    run(main())


# -- the async HTTP remote against the real server ---------------------------------------------
@pytest.fixture(params=["fencing", "dedup"])
def service(request: pytest.FixtureRequest) -> Iterator[Service]:
    s = Service(request.param)
    yield s
    s.stop()


@pytest.mark.parametrize(
    ("fault", "applied"),
    [(None, True), ("slow", True), ("reset", False), ("5xx", True), ("lost", True)],
)
def test_async_http_dispatch_over_every_wire_failure(
    service: Service, url: str, fault: str | None, applied: bool
) -> None:
    mode = service.proc.args[-1]  # type: ignore[index]

    async def main() -> None:
        store = await AsyncStore.open(url)
        async with AsyncHttpRemote(
            service.url,
            fences_epochs=mode == "fencing",
            dedups_by_key=mode == "dedup",
            timeout=0.5,
        ) as remote:
            check_remote(remote, asynchronous=True)
            dispatcher = AsyncDispatcher(store, remote, owner="w")
            await approved(store, "acct/42")
            if fault:
                service.faults(fault)
            result = await dispatcher.dispatch_next("acct/42")
            if fault is None:
                assert result.outcome == "confirmed" and result.claim is not None
                (effect,) = service.effects()["effects"]
                assert (effect["key"], effect["epoch"]) == (result.claim.idempotency_key, 1)
                return
            assert result.outcome == "uncertain", result.detail
            if fault == "slow":
                await until(lambda: bool(service.effects()["effects"]))
            resolution = await dispatcher.reconcile("acct/42")
            info = await store.get_claim("acct/42")
            assert info is not None
            if applied:
                assert resolution == "present" and info.outcome == "present"
            elif remote.fences_epochs:
                assert resolution == "absent" and info.outcome == "absent"
            else:
                assert resolution == "retried" and info.state == "confirmed"
        effects = service.effects()
        assert len(effects["effects"]) == (0 if not applied and mode == "fencing" else 1)
        assert effects["overlaps"] == 0
        await store.close()

    run(main())


# -- cancellation ------------------------------------------------------------------------------
def test_a_dispatch_cancelled_mid_send_leaves_the_claim_sending_then_readback_decides(
    url: str,
) -> None:
    class Hanging(_AsyncRemote):
        started = asyncio.Event()

        async def send(self, request: Any) -> None:
            self.started.set()
            await asyncio.sleep(3600)

    async def main() -> None:
        clock = FakeClock()
        store = await AsyncStore.open(url, clock=clock, pool_size=2)
        remote = Hanging("fencing")
        Hanging.started = asyncio.Event()
        dispatcher = AsyncDispatcher(store, remote, owner="w", lease_seconds=30)
        await approved(store, "t")
        task = asyncio.create_task(dispatcher.dispatch_next("t"))
        await asyncio.wait_for(Hanging.started.wait(), WAIT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        info = await store.get_claim("t")
        assert info is not None and info.state == "sending"  # the send's outcome is unknown
        clock.advance(31)
        assert [t.to_state for t in await store.sweep()] == ["uncertain"]
        assert await dispatcher.reconcile("t") == "absent"  # fenced, then read back
        await store.close()  # every connection came back to the pool

    run(main())


# -- keep-alive --------------------------------------------------------------------------------
LEASE = 0.3


async def renewals(store: AsyncStore, target: str) -> int:
    return sum(e.event == "renew" for e in await store.history(target))


def test_async_keepalive_renews_then_stops(url: str) -> None:
    async def main() -> None:
        store = await AsyncStore.open(url)
        claim = await store.acquire("t", await approved(store, "t"), "w", LEASE)
        async with AsyncKeepAlive(claim, LEASE) as keeper:
            while await renewals(store, "t") < 3:
                await asyncio.sleep(0.02)
            keeper.check()
            await claim.begin_send()
        done = await renewals(store, "t")
        assert keeper.renewals == done and not keeper.lost.is_set()
        await asyncio.sleep(4 * keeper.interval)
        assert await renewals(store, "t") == done  # stopped on exit
        await store.close()

    run(main())


def test_async_keepalive_cancels_the_block_when_a_jumped_clock_lapses_the_lease(
    url: str,
) -> None:
    async def main() -> None:
        clock = FakeClock()
        store = await AsyncStore.open(url, clock=clock)
        claim = await store.acquire("t", await approved(store, "t"), "w", LEASE)
        lost: list[LeaseLost] = []
        reached_the_end = False
        with pytest.raises(LeaseLost, match="renew was refused") as caught:
            async with AsyncKeepAlive(claim, LEASE, on_lost=lost.append):
                clock.advance(LEASE)  # the clock jumps to the deadline: lapsed
                await asyncio.sleep(WAIT)  # the slow call, cancelled at once on loss
                reached_the_end = True
        assert not reached_the_end
        assert isinstance(caught.value.__context__, asyncio.CancelledError)
        assert lost == [caught.value] and isinstance(lost[0].__cause__, LeaseExpired)
        assert await renewals(store, "t") == 0  # the lapsed lease was never renewed
        with pytest.raises(LeaseExpired):
            await claim.begin_send()
        await store.close()

    run(main())


def test_async_keepalive_loses_a_renew_refused_mid_call_without_cancelling_when_asked(
    url: str,
) -> None:
    async def main() -> None:
        clock = FakeClock()
        store = await AsyncStore.open(url, clock=clock)
        claim = await store.acquire("t", await approved(store, "t"), "w1", 60)
        keeper = AsyncKeepAlive(claim, 60, every=0.002, cancel_on_loss=False)
        async with keeper:
            await until(lambda: keeper.renewals >= 1)
            clock.advance(61)  # stalled past the lease; another worker takes the target
            other = await store.acquire("t", await approved(store, "t"), "w2", 60)
            await asyncio.wait_for(keeper.lost.wait(), WAIT)
            with pytest.raises(LeaseLost):
                keeper.check()
        assert isinstance(keeper.error, LeaseLost)
        assert isinstance(keeper.error.__cause__, StaleClaim)
        info = await store.get_claim("t")
        assert info is not None and info.epoch == other.epoch
        await store.close()

    run(main())


def test_async_keepalive_retries_a_dropped_connection_then_loses_the_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        store = await AsyncStore.open(f"sqlite:///{tmp_path / 'c.sqlite'}", clock=FakeClock())
        claim = await store.acquire("t", await approved(store, "t"), "w", LEASE)
        attempts = {"n": 0}
        real = store.store._owner_event

        def dropping(*args: Any, **kw: Any) -> Any:
            attempts["n"] += 1
            if attempts["n"] == 1:
                return real(*args, **kw)
            raise StoreError("server closed the connection unexpectedly")

        monkeypatch.setattr(store.store, "_owner_event", dropping)
        with pytest.raises(LeaseLost, match="no renew succeeded") as caught:
            async with AsyncKeepAlive(claim, LEASE) as keeper:
                await asyncio.sleep(WAIT)
        assert keeper.renewals == 1 and attempts["n"] >= 3
        assert isinstance(caught.value.__context__, asyncio.CancelledError)
        await store.close()

    run(main())


def test_async_keepalive_stops_on_outside_cancellation_and_exceptions(tmp_path: Path) -> None:
    async def main() -> None:
        store = await AsyncStore.open(f"sqlite:///{tmp_path / 'c.sqlite'}")
        claim = await store.acquire("t", await approved(store, "t"), "w", LEASE)
        keepers: list[AsyncKeepAlive] = []

        async def guarded() -> None:
            async with AsyncKeepAlive(claim, LEASE) as keeper:
                keepers.append(keeper)
                await asyncio.sleep(WAIT)

        task = asyncio.create_task(guarded())
        await until(lambda: bool(keepers) and keepers[0].renewals >= 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):  # someone else's cancel stays a cancel
            await task
        assert keepers[0]._task is not None and keepers[0]._task.done()
        assert keepers[0].error is None
        with pytest.raises(RuntimeError, match="the call failed"):
            async with AsyncKeepAlive(claim, LEASE) as keeper:
                raise RuntimeError("the call failed")
        assert keeper._task is not None and keeper._task.done()
        await store.close()

    run(main())


def test_the_greenlet_runner_refuses_io_outside_a_run() -> None:
    """The greenlet runner's wait, called outside a run, is a usage error, not a hang."""
    from claimfsm.errors import UsageError
    from claimfsm.store._bridge import GreenletRunner

    async def later() -> int:
        return 1

    with pytest.raises(UsageError, match="outside its runner"):
        GreenletRunner().wait(later())
    with open_store("memory://") as plain:
        assert run(AsyncStore(plain).get_claim("t")) is None
