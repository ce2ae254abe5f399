"""One SQLite connection for both stores (``store/_sqlite_file``): the claim's store and a
lifecycle's take the write lock first, wait out contention with a bounded jittered retry
and then say ``StoreBusy`` naming the file, sync a durable commit ``FULL``, and turn a
failing file into one ``StoreError`` that names it, with nothing written. Each test runs
on both stores, so a lifecycle's SQLite store keeps every promise the claim's keeps."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from claimfsm.errors import InvalidArgument, StoreBusy, StoreError
from claimfsm.spec import declarations_dir, load_spec
from claimfsm.store import EntityStore, SQLiteStore, open_entity_store
from claimfsm.verify import ManualClock

from .conftest import FakeClock, approved_draft

JOB = declarations_dir() / "job.toml"


def _job_store(path: Path, busy_seconds: float = 30.0) -> EntityStore:
    return open_entity_store(
        load_spec(JOB), "sqlite:///" + str(path), clock=ManualClock(), busy_seconds=busy_seconds
    )


def _job_cycle(store: EntityStore, key: str) -> None:
    """One attempt that succeeds: lease, start (a durable commit), succeed."""
    store.act(store.act(store.take(key, "lease", owner="w"), "start"), "succeed")


def _claim_cycle(store: SQLiteStore, key: str) -> None:
    """One dispatch: acquire, begin_send (a durable commit), confirm."""
    claim = store.acquire(key, approved_draft(store, key), "w", 30)
    claim.begin_send()
    claim.confirm()


def _state(store: SQLiteStore | EntityStore) -> object:
    if isinstance(store, EntityStore):
        return store.rows(), store.history()
    return store.claims(), store.history()


def _consistent(store: SQLiteStore | EntityStore) -> bool:
    """Each row is in the state its last history entry left it."""
    if isinstance(store, EntityStore):
        return all(store.history(r.key)[-1].dest == r.state for r in store.rows())
    return all(store.history(c.target_id)[-1].to_state == c.state for c in store.claims())


Opener = Callable[[Path, float], "SQLiteStore | EntityStore"]
STORES: dict[str, tuple[Opener, Callable[..., None]]] = {
    "claim": (lambda p, busy: SQLiteStore(p, clock=FakeClock(), busy_seconds=busy), _claim_cycle),
    "lifecycle": (_job_store, _job_cycle),
}


@pytest.mark.parametrize("kind", sorted(STORES))
def test_a_file_another_process_keeps_locked_is_store_busy_naming_it(
    tmp_path: Path, kind: str
) -> None:
    opener, cycle = STORES[kind]
    path = tmp_path / "busy.sqlite"
    store = opener(path, 0.3)
    cycle(store, "k0")
    before = _state(store)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's long write transaction
    try:
        with pytest.raises(StoreBusy, match=r"busy\.sqlite' stayed locked for 0\.3 s"):
            cycle(store, "k1")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert _state(store) == before  # nothing of the refused cycle was written
    cycle(store, "k1")  # the lock is gone: it goes on
    store.close()


@pytest.mark.parametrize("kind", sorted(STORES))
def test_only_a_durable_commit_is_fully_synced(tmp_path: Path, kind: str) -> None:
    opener, cycle = STORES[kind]
    store = opener(tmp_path / "sync.sqlite", 30.0)
    db = store._db if isinstance(store, SQLiteStore) else store._driver._db  # type: ignore[attr-defined]
    conn = db.conn
    levels: list[int] = []

    class Spy:
        def execute(self, statement: str, *args: object) -> sqlite3.Cursor:
            if statement == "COMMIT":
                levels.append(conn.execute("PRAGMA synchronous").fetchone()[0])
            return conn.execute(statement, *args)

        def __getattr__(self, name: str) -> object:
            return getattr(conn, name)

    db.conn = Spy()
    cycle(store, "k")
    full, normal = 2, 1
    # the lifecycle's three events, or the claim's draft (create, approve) and three events:
    # the second of the three (start, begin_send) enters the state where work may run
    assert levels[-3:] == [normal, full, normal], levels
    assert set(levels[:-3]) <= {normal}
    db.conn = conn
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == normal
    store.close()


@pytest.mark.parametrize("kind", sorted(STORES))
def test_a_full_disk_writes_nothing_names_the_file_and_recovers(tmp_path: Path, kind: str) -> None:
    opener, cycle = STORES[kind]
    path = tmp_path / "full.sqlite"
    store = opener(path, 30.0)
    cycle(store, "k0")
    db = store._db if isinstance(store, SQLiteStore) else store._driver._db  # type: ignore[attr-defined]
    pages = db.conn.execute("PRAGMA page_count").fetchone()[0]
    db.conn.execute(f"PRAGMA max_page_count = {pages}")
    before = _state(store)
    with pytest.raises(StoreError, match=r"full\.sqlite'.*full; nothing was written") as caught:
        for i in range(2000):  # until the file cannot grow
            cycle(store, f"key-{i:04d}-" + "x" * 150)
    assert isinstance(caught.value.__cause__, sqlite3.Error)
    # every transaction whole or not at all: each row is where its history leaves it, and
    # what was there before is still there
    assert _consistent(store)
    assert all(h in _state(store)[1] for h in before[1])  # type: ignore[index]
    db.conn.execute("PRAGMA max_page_count = 1073741823")
    cycle(store, "k-last")
    store.close()


def _hammer(
    kind: str, path: str, worker: int, cycles: int, queue: multiprocessing.Queue[object]
) -> None:
    try:
        opener, cycle = STORES[kind]
        store = opener(Path(path), 60.0)
        for n in range(cycles):
            # the claim's target is taken again each cycle (a new epoch); a job once
            cycle(store, f"t{worker}" if kind == "claim" else f"w{worker}-{n}")
        store.close()
        queue.put(cycles)
    except BaseException as exc:  # report, do not hang the parent
        queue.put(repr(exc))


@pytest.mark.parametrize("kind", sorted(STORES))
def test_processes_on_one_file_all_finish_and_never_see_locked(tmp_path: Path, kind: str) -> None:
    """Four processes write one file at once: every cycle of each finishes (no "database
    is locked", no process starved past the bound), and history holds each in order."""
    opener, _ = STORES[kind]
    path = tmp_path / "shared.sqlite"
    opener(path, 30.0).close()
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    cycles = 40
    procs = [
        ctx.Process(target=_hammer, args=(kind, str(path), i, cycles, queue)) for i in range(4)
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert results == [cycles] * 4, results
    store = opener(path, 30.0)
    if isinstance(store, SQLiteStore):
        for i in range(4):
            epochs = [e.epoch for e in store.history(f"t{i}") if e.event == "acquire"]
            assert epochs == list(range(1, cycles + 1))
    else:
        assert len(store.rows()) == 4 * cycles
        assert all(row.state == "succeeded" for row in store.rows())
        assert len(store.history()) == 3 * 4 * cycles
    assert _consistent(store)
    store.close()


@pytest.mark.parametrize("bad", [0, -1, True, "30", 1e9])
def test_a_bad_busy_seconds_is_refused_by_name(tmp_path: Path, bad: object) -> None:
    with pytest.raises(InvalidArgument, match="busy_seconds must be a number of seconds"):
        open_entity_store(load_spec(JOB), "sqlite:///" + str(tmp_path / "x"), busy_seconds=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "x").exists()
