"""A lifecycle of your own kept like the claim's store: the sweep applies every declared sweep
event wherever it holds, pruning removes old history and leaves each entity's history
starting where the entity was, and the store commands (`claims`, `history`, `sweep`,
`prune`) take the declaration and read an existing store without creating one."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from claimfsm.cli import main
from claimfsm.errors import NotFound, SpecError, StaleClaim, StoreError
from claimfsm.spec import declarations_dir, load_spec
from claimfsm.store import EntityStore, Swept, open_entity_store
from claimfsm.verify import ManualClock

JOB = load_spec(declarations_dir() / "job.toml")


def _three_spent_attempts(store: EntityStore, clock: ManualClock, key: str) -> None:
    """``key`` leased three times, each lease lapsing before the work starts: the third
    is still leased (lapsed, not yet swept) with every attempt spent."""
    for _ in range(2):
        store.take(key, "lease", owner="w", lease_seconds=10)
        clock.advance(11)
        assert store.operate(key, "lapse") == "queued"
    store.take(key, "lease", owner="w", lease_seconds=10)


def test_the_sweep_applies_each_sweep_event_where_it_holds(url: str) -> None:
    clock = ManualClock()
    store = open_entity_store(JOB, url, clock=clock)
    _three_spent_attempts(store, clock, "spent")
    store.take("idle-lease", "lease", owner="w", lease_seconds=10)
    store.act(store.take("mid-run", "lease", owner="w", lease_seconds=10), "start")
    store.take("live", "lease", owner="w", lease_seconds=1000)
    done = store.act(store.take("done", "lease", owner="w", lease_seconds=10), "start")
    store.act(done, "succeed")
    before = {r.key: r for r in store.rows()}
    assert store.sweep() == []  # no lease has lapsed yet: nothing holds, nothing written
    assert len(store.history()) == 12

    clock.advance(20)
    swept = store.sweep()
    at = clock()
    assert swept == [
        Swept("idle-lease", 1, "lapse", "leased", "queued", at),
        Swept("mid-run", 1, "lapse", "running", "orphaned", at),
        # the lapse leaves a job with every attempt spent in the queue: then the bury
        Swept("spent", 3, "lapse", "leased", "queued", at),
        Swept("spent", 3, "bury", "queued", "dead", at),
    ]
    after = {r.key: r for r in store.rows()}
    assert {k: r.state for k, r in after.items()} == {
        "idle-lease": "queued",
        "mid-run": "orphaned",
        "spent": "dead",
        "live": "leased",
        "done": "succeeded",
    }
    assert after["live"] == before["live"] and after["done"] == before["done"]
    # each applied event is in history, as operate() records it
    recorded = [(h.key, h.epoch, h.event, h.source, h.dest) for h in store.history()[12:]]
    assert recorded == [(s.key, s.epoch, s.event, s.source, s.dest) for s in swept]
    assert store.sweep() == []  # swept: nothing holds any more
    store.close()


def test_a_row_that_moved_on_after_the_sweep_read_it_is_left_alone(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the sweep's read and its write, another process lapses one job and a worker
    takes the other again: the sweep's guarded writes are refused, nothing is written."""
    clock = ManualClock()
    store = open_entity_store(JOB, url, clock=clock)
    other = open_entity_store(JOB, url, clock=clock)
    store.take("a", "lease", owner="w", lease_seconds=10)
    store.take("b", "lease", owner="w", lease_seconds=10)
    clock.advance(11)
    operate = EntityStore._operate

    def meanwhile(self: EntityStore, key: str, event: str, **kw: Any) -> Any:
        if self is other:
            pass
        elif key == "a":
            assert other.operate("a", "lapse") == "queued"
        else:
            other.operate("b", "lapse")
            other.take("b", "lease", owner="w2", lease_seconds=1000)
        return operate(self, key, event, **kw)

    monkeypatch.setattr(EntityStore, "_operate", meanwhile)
    assert store.sweep() == []
    assert [(h.key, h.event) for h in store.history()[2:]] == [
        ("a", "lapse"),
        ("b", "lapse"),
        ("b", "lease"),
    ]
    assert {r.key: r.state for r in store.rows()} == {"a": "queued", "b": "leased"}
    other.close()
    store.close()


def _starts_where_the_row_is(store: EntityStore) -> None:
    """Each entity's history, checkpoint first, is a path that ends at its row."""
    rows = {r.key: r for r in store.rows()}
    for key, row in rows.items():
        entries = store.history(key)
        state, epoch = JOB.initial, 0
        for n, e in enumerate(entries):
            if e.event == "checkpoint":
                assert n == 0, "a checkpoint only opens an entity's history"
            elif e.refused is None:
                assert e.source == state
            state, epoch = (e.dest, e.epoch) if e.refused is None else (state, epoch)
        assert (state, epoch) == (row.state, row.epoch), key


def test_pruning_leaves_each_history_starting_where_its_entity_was(url: str) -> None:
    clock = ManualClock()
    store = open_entity_store(JOB, url, clock=clock)
    first = store.take("a", "lease", owner="w", lease_seconds=10)
    first = store.act(first, "start")
    store.act(first, "fail")
    second = store.take("a", "lease", owner="w2", lease_seconds=1000)
    with pytest.raises(StaleClaim):  # recorded: a refusal changes nothing
        store.act(first, "start")
    with pytest.raises(StaleClaim):  # an entity whose only entry is a refusal
        store.act(dataclasses.replace(first, key="ghost"), "start")
    clock.advance(100)
    store.take("b", "lease", owner="w", lease_seconds=10)
    entries = store.history()
    assert len(entries) == 7
    archived: list[Any] = []

    result = store.prune_history(50, archive=archived.append, batch=2)
    assert (result.upto_seq, result.entries, result.checkpoints) == (entries[5].seq, 6, 2)
    assert [e for batch in archived for e in batch] == entries[:6]
    assert [len(batch) for batch in archived] == [2, 2, 2]
    kept = store.history()
    assert kept[-1] == entries[-1]
    points = {e.key: e for e in kept if e.event == "checkpoint"}
    assert {k: (p.seq, p.epoch, p.source, p.dest) for k, p in points.items()} == {
        "a": (entries[4].seq, 2, "leased", "leased"),  # its last removed entry: a refusal
        "ghost": (entries[5].seq, 0, "queued", "queued"),
    }
    _starts_where_the_row_is(store)

    # pruning again, past the checkpoints, keeps what they recorded
    clock.advance(100)
    store.act(second, "start")
    clock.advance(100)
    again = store.prune_history(50)
    assert again.checkpoints == 3
    assert [e.event for e in store.history("a")] == ["checkpoint"]
    assert store.history("a")[0].dest == "running"
    _starts_where_the_row_is(store)
    assert store.prune_history(10_000).upto_seq is None
    store.close()


def test_an_archive_that_fails_leaves_history_as_it_was(url: str) -> None:
    clock = ManualClock()
    store = open_entity_store(JOB, url, clock=clock)
    store.take("a", "lease", owner="w")
    clock.advance(100)
    before = store.history()

    def broken(entries: list[Any]) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store.prune_history(50, archive=broken)
    assert store.history() == before
    store.close()


def test_opening_to_read_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(NotFound, match="no database at"):
        open_entity_store(JOB, f"sqlite:///{missing}", create=False)
    assert not missing.exists()
    other = tmp_path / "other.sqlite"
    open_entity_store(JOB, f"sqlite:///{other}", prefix="mine").close()
    with pytest.raises(NotFound, match="table lc_job does not exist"):
        open_entity_store(JOB, f"sqlite:///{other}", create=False)
    with sqlite3.connect(other) as c:
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "lc_job" not in tables
    # a database of someone else's: not even its journal mode is changed
    theirs = tmp_path / "theirs.sqlite"
    with sqlite3.connect(theirs) as c:
        c.execute("CREATE TABLE t (x)")
    with pytest.raises(NotFound, match="table lc_job does not exist"):
        open_entity_store(JOB, f"sqlite:///{theirs}", create=False)
    with sqlite3.connect(theirs) as c:
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_a_declared_event_named_checkpoint_is_refused(tmp_path: Path) -> None:
    text = (declarations_dir() / "job.toml").read_text().replace('"release"', '"checkpoint"')
    text = text.replace("[events.release]", "[events.checkpoint]")
    (tmp_path / "clash.toml").write_text(text)
    with pytest.raises(SpecError, match="'checkpoint' is what history calls"):
        load_spec(tmp_path / "clash.toml")


def test_the_store_commands_take_a_declaration(tmp_path: Path) -> None:
    os.chdir(tmp_path)
    url = "sqlite:///jobs.sqlite"
    store = open_entity_store(JOB, url)  # the real clock: the command reads it too
    store.take("a", "lease", owner="w1", lease_seconds=0.001)
    store.act(store.take("b", "lease", owner="w2", lease_seconds=600), "start")
    store.close()
    time.sleep(0.01)  # a's lease has lapsed
    run = CliRunner().invoke
    out = run(main, ["claims", "job", "--db", url])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == f"job entities in {url}: 2"
    assert lines[1].split() == ["key", "epoch", "state", "owner", "token", "lease", "attempts"]
    assert lines[2].split()[:4] + lines[2].split()[5:] == ["a", "1", "leased", "w1", "lapsed", "1"]
    assert lines[3].split()[:4] == ["b", "1", "running", "w2"]
    assert lines[3].split()[5:7] == [lines[3].split()[5], "left"]

    out = run(main, ["sweep", "job", "--db", url])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == [
        f"swept job in {url}: 1 applied",
        "  a epoch 1: lapse (leased → queued)",
    ]
    out = run(main, ["sweep", str(declarations_dir() / "job.toml"), "--db", url, "--json"])
    assert json.loads(out.output) == {"design": "job", "swept": []}

    out = run(main, ["history", "job", "--db", url, "--key", "a", "--json"])
    assert [json.loads(line)["event"] for line in out.output.splitlines()] == ["lease", "lapse"]
    out = run(main, ["prune", "job", "--db", url, "--older-than", "0", "--archive", "old.jsonl"])
    assert out.exit_code == 0, out.output
    assert out.output.strip() == (
        "pruned 4 entries (up to entry 4); wrote 2 checkpoints; archived to old.jsonl"
    )
    assert len(Path("old.jsonl").read_text().splitlines()) == 4
    out = run(main, ["history", "job", "--db", url])
    assert out.output.splitlines()[0] == f"job history in {url}: 2 entries"

    # no such store: said, and nothing created
    out = run(main, ["claims", "job", "--db", "sqlite:///none.sqlite"])
    assert out.exit_code == 1 and "NotFound: no database at 'none.sqlite'" in out.output
    assert not Path("none.sqlite").exists()
    out = run(main, ["sweep", "nosuch", "--db", url])
    assert out.exit_code == 2 and "no declaration 'nosuch'" in out.output


def test_history_is_append_only_but_to_pruning_and_reset(url: str) -> None:
    """The database itself refuses to change or delete a history entry, as the claim
    store's does; pruning and ``reset`` delete under a permit of their own transaction."""
    clock = ManualClock()
    store = open_entity_store(JOB, url, clock=clock)
    store.take("a", "lease", owner="w")
    clock.advance(100)
    store.take("b", "lease", owner="w")
    h = store.history_table
    for statement in (f"UPDATE {h} SET event = 'forged'", f"DELETE FROM {h}"):  # noqa: S608
        with pytest.raises(StoreError, match="history is append-only"):
            store._driver.rerun(lambda tx, s=statement: tx.run(s, ()))
    assert len(store.history()) == 2
    assert store.prune_history(50).entries == 1
    with pytest.raises(StoreError, match="append-only"):  # the permit went with its transaction
        store._driver.rerun(lambda tx: tx.run(f"DELETE FROM {h}", ()))  # noqa: S608
    store.reset()
    assert store.history() == [] and store.rows() == []
    store.close()


def test_threads_share_one_store(url: str) -> None:
    """Six threads on one store (one SQLite connection taken in turn; a pool of PostgreSQL
    connections): every job runs to the end, one thread wins a contended job, history
    audits clean. With the threads' transactions interleaved on one connection, BEGIN
    meets a transaction in progress and this fails."""
    from claimfsm.audit import audit_store
    from claimfsm.errors import IllegalTransition

    store = open_entity_store(JOB, url, pool_size=3)
    won: list[int] = []
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for j in range(5):
                handle = store.take(f"job-{n}-{j}", "lease", owner=f"t{n}")
                store.act(store.act(handle, "start"), "succeed")
            try:
                store.take("contended", "lease", owner=f"t{n}")
                won.append(n)
            except IllegalTransition:  # leased already: lease is not declared from there
                pass
        except BaseException as exc:  # reported below, with the thread's name
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(won) == 1
    rows = {r.key: r.state for r in store.rows()}
    assert sum(1 for s in rows.values() if s == "succeeded") == 30
    assert rows["contended"] == "leased"
    assert len(store.history()) == 91
    found = audit_store(store)
    assert found.ok, found.violations
    store.close()


def test_a_checkpoint_carries_the_columns_so_the_audit_keeps_judging_them(url: str) -> None:
    """Pruning replays each entity's declared columns to where its removed entries end
    and records them in the checkpoint's facts, so the audit still compares them with the
    row, and judges the guards that read them, after history was pruned; pruning again
    carries them on from the checkpoint."""
    from claimfsm.audit import audit_store

    clock = ManualClock()
    store = open_entity_store(JOB, url, clock=clock)
    try:
        for _ in range(2):  # two attempts, each lapsed
            store.take("a", "lease", owner="w", lease_seconds=10)
            clock.advance(11)
            assert store.operate("a", "lapse") == "queued"
        clock.advance(100)
        store.prune_history(50)
        [point] = store.history("a")
        assert (point.event, point.facts) == ("checkpoint", {"columns": {"attempts": 2}})
        assert audit_store(store).ok
        store.take("a", "lease", owner="w", lease_seconds=10)  # the third attempt
        clock.advance(11)
        store.operate("a", "lapse")
        clock.advance(100)
        store.prune_history(50)  # again, past the first checkpoint
        [point] = store.history("a")
        assert point.facts == {"columns": {"attempts": 3}}
        assert audit_store(store).ok
        m = store._driver.marker
        store._driver.rerun(
            lambda tx: tx.run(
                f"UPDATE {store.table} SET attempts = {m} WHERE key = {m}",  # noqa: S608
                (1, "a"),
            )
        )
        found = [(v.kind, v.target_id, v.message) for v in audit_store(store).violations]
        assert [(k, t) for k, t, _ in found] == [("row_disagrees", "a")], found
        assert "attempts 1 (history: 3)" in found[0][2], found
    finally:
        store.close()
