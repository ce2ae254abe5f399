"""A lifecycle of your own, stored: one row per entity on SQLite and PostgreSQL, every event
one guarded write compiled from the declaration, stale owners refused and recorded; and
`claimfsm verify`, the generated stateful test that compares a store with the checker's
model step by step (each test fails without what it names)."""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import settings
from transitions import Machine

from claimfsm.audit import audit_store
from claimfsm.checker import Checker, EntityModelConfig, entity_model
from claimfsm.cli import main
from claimfsm.errors import (
    DeclarationMismatch,
    IllegalTransition,
    InsufficientEvidence,
    InvalidArgument,
    LeaseExpired,
    Refused,
    SpecError,
    StaleClaim,
    TargetBusy,
)
from claimfsm.machine import CallerView, LifecycleMachine, RowView
from claimfsm.spec import declarations_dir, load_spec
from claimfsm.store import EntityStore, compile_event, open_entity_store
from claimfsm.store import _entity as entity_module
from claimfsm.store._entity_sql import CompiledEvent
from claimfsm.verify import ManualClock, guided_paths, lifecycle_state_machine, verify

from .conftest import CountedOpener, drop_schema, pg_schema_url

JOB_PATH = declarations_dir() / "job.toml"
JOB = JOB_PATH.read_text()
WRONG = declarations_dir() / "wrong" / "job" / "requeue_without_evidence.toml"


def open_job(url: str, clock: ManualClock, text: str = JOB, tmp: Path | None = None) -> EntityStore:
    if text == JOB:
        spec = load_spec(JOB_PATH)
    else:
        assert tmp is not None
        (tmp / "edited.toml").write_text(text)
        spec = load_spec(tmp / "edited.toml")
    return open_entity_store(spec, url, clock=clock)


def test_a_job_runs_its_lifecycle_and_history_tells_it(url: str) -> None:
    clock = ManualClock()
    store = open_job(url, clock)
    first = store.take("j1", "lease", owner="w1", lease_seconds=30)
    assert (first.epoch, first.state) == (1, "leased")
    first = store.act(first, "start")
    clock.advance(31)
    with pytest.raises(LeaseExpired):  # the lease lapsed: renewing is refused, not stale
        store.act(first, "renew")
    assert store.operate("j1", "lapse") == "orphaned"
    # "not running" alone is no evidence: a run on its way to the executor is not there yet
    with pytest.raises(InsufficientEvidence, match="executor_fenced does not hold"):
        store.operate("j1", "requeue", facts={"running": False})
    assert store.operate("j1", "requeue", facts={"running": False, "ran": True}) == "queued"
    second = store.take("j1", "lease", owner="w2")
    with pytest.raises(StaleClaim, match="recorded in history"):
        store.act(first, "succeed")  # the first worker wakes up stale
    second = store.act(store.act(second, "start"), "succeed")
    row = store.row("j1")
    assert row is not None
    assert (row.state, row.epoch, dict(row.columns)) == ("succeeded", 2, {"attempts": 2})
    assert row.lease_deadline is None  # a lease governs lease states only
    history = [(h.event, h.source, h.dest, h.refused) for h in store.history("j1")]
    assert history == [
        ("lease", "queued", "leased", None),
        ("start", "leased", "running", None),
        ("lapse", "running", "orphaned", None),
        ("requeue", "orphaned", "queued", None),
        ("lease", "queued", "leased", None),
        ("succeed", "leased", "leased", "owner_matches"),  # refused, changed nothing
        ("start", "leased", "running", None),
        ("succeed", "running", "succeeded", None),
    ]
    store.close()


def test_refusals_change_nothing_and_name_what_to_do(url: str) -> None:
    clock = ManualClock()
    store = open_job(url, clock)
    for _ in range(3):
        h = store.take("j2", "lease")
        store.act(h, "release")
    with pytest.raises(TargetBusy, match="used its three attempts; the sweep dead-letters it"):
        store.take("j2", "lease")
    assert store.operate("j2", "bury") == "dead"
    with pytest.raises(IllegalTransition, match="is dead: lease is not declared from there"):
        store.take("j2", "lease")
    with pytest.raises(InvalidArgument, match="is the owner's, not taken with take"):
        store.take("j3", "start")
    with pytest.raises(InvalidArgument, match="unknown facts"):
        store.operate("j3", "requeue", facts={"outcome": "absent"})
    assert store.row("j3") is None  # a refused first operation wrote nothing
    assert len(store.history("j2")) == 7
    store.close()


def test_an_owner_back_on_a_stale_state_is_told_it_is_stale_and_recorded(
    url: str, tmp_path: Path
) -> None:
    """``stale = true`` on a state means for a lifecycle what it means for the claim: an
    owner whose epoch is current but in that state (the job orphaned under it) is refused
    as stale and the refusal recorded (``state:orphaned``). Without the flag the same call
    is an illegal transition, refused with nothing recorded: the flag is what does it."""
    for text, stale in ((JOB, True), (JOB.replace(ORPHANED_STALE, ""), False)):
        clock = ManualClock()
        store = open_job(url, clock, text, tmp_path)
        key = f"j-{stale}"
        handle = store.act(store.take(key, "lease", owner="w", lease_seconds=10), "start")
        clock.advance(11)
        store.sweep()
        before = len(store.history(key))
        expected = StaleClaim if stale else IllegalTransition
        with pytest.raises(expected) as caught:
            store.act(handle, "succeed")
        entries = store.history(key)[before:]
        if stale:
            assert "this handle no longer holds the job" in str(caught.value)
            assert [(e.event, e.source, e.dest, e.refused) for e in entries] == [
                ("succeed", "orphaned", "orphaned", "state:orphaned")
            ]
        else:
            assert not isinstance(caught.value, StaleClaim) and entries == []
        assert store.row(key).state == "orphaned"  # type: ignore[union-attr]
        store.close()


ORPHANED_STALE = (
    "stale = true  # its worker, back, no longer holds the job: its report is refused, recorded\n"
)


def test_one_of_two_racing_workers_takes_the_job(url: str) -> None:
    clock = ManualClock()
    stores = [open_job(url, clock) for _ in range(4)]
    won: list[int] = []
    lost: list[int] = []
    barrier = threading.Barrier(len(stores))

    def worker(i: int) -> None:
        barrier.wait()
        try:
            stores[i].take("race", "lease")
            won.append(i)
        except IllegalTransition:
            lost.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 3
    row = stores[0].row("race")
    assert row is not None and (row.epoch, dict(row.columns)) == (1, {"attempts": 1})
    for s in stores:
        s.close()


def test_every_event_is_one_compiled_statement_with_bound_values() -> None:
    spec = load_spec(JOB_PATH)
    for event in spec.events:
        write = compile_event(spec, event, "lc_job")
        assert write.sql.count("UPDATE") == 1 and ";" not in write.sql
        assert "3" not in write.sql  # the attempts bound is a bound value, not SQL text
    lease = compile_event(spec, "lease", "lc_job")
    assert "attempts = attempts + 1" in lease.sql and "epoch = epoch + 1" in lease.sql
    # both transitions lead to leased: the WHERE alone reads the guard, no CASE repeats it
    assert "CASE" not in lease.sql and lease.params.count("const:attempts_left") == 1
    renew = compile_event(spec, "renew", "lc_job")  # two destinations: the CASE says which
    assert renew.sql.count("CASE") == 2


def test_one_edit_of_a_guard_reaches_the_sql_the_machine_and_the_checker(tmp_path: Path) -> None:
    """Two attempts instead of three, edited in the TOML alone: the store's SQL refuses the
    third lease, the ``transitions`` machine takes no transition there, and the checker's
    world changes (with the sweep still burying at three, a job is stuck: a deadlock)."""
    edited = JOB.replace('op = "<"\nvalue = 3', 'op = "<"\nvalue = 2')
    assert edited != JOB
    store = open_job("sqlite:///" + str(tmp_path / "e.sqlite"), ManualClock(), edited, tmp_path)
    for _ in range(2):
        store.act(store.take("j", "lease"), "release")
    with pytest.raises(TargetBusy):
        store.take("j", "lease")
    store.close()
    row = RowView("queued", epoch=2, columns={"attempts": 2})
    taker = CallerView(None, None, {}, 0.0)
    before = LifecycleMachine(load_spec(JOB_PATH)).fire("lease", row, taker)
    assert before is not None and (before.source, before.dest) == ("queued", "leased")
    path = tmp_path / "edited.toml"
    path.write_text(edited)
    assert LifecycleMachine(load_spec(path)).fire("lease", row, taker) is None
    checked = Checker(entity_model(load_spec(path))).run()
    assert (
        checked.deadlock is not None
        and Checker(entity_model(load_spec(JOB_PATH))).run().verdict == "ok"
    )


def test_the_store_asks_the_declarations_transitions_machine(tmp_path: Path) -> None:
    """The machine is a ``transitions.Machine`` with the declared transitions, tried in the
    order written; a store whose machine disagrees with its SQL says so."""
    spec = load_spec(JOB_PATH)
    machine = LifecycleMachine(spec)
    assert isinstance(machine.machine, Machine)
    assert set(machine.machine.events) == set(spec.events)
    orphan = RowView("orphaned", epoch=1)
    both = {"running": False, "ran": True, "fenced_through": 1}
    fenced = CallerView(1, None, {"running": True, "ran": True, "fenced_through": 1}, 0.0)
    stopped = CallerView(1, None, {"running": False, "ran": True, "fenced_through": 0}, 0.0)
    unseen = CallerView(1, None, {"running": False, "ran": False, "fenced_through": 0}, 0.0)
    requeues = [t for t in spec.transitions if t.event == "requeue"]
    assert machine.fire("requeue", orphan, CallerView(1, None, both, 0.0)) is requeues[0]
    assert machine.fire("requeue", orphan, fenced) is requeues[0]
    assert machine.fire("requeue", orphan, stopped) is requeues[1]
    assert machine.explain("requeue", orphan, unseen) == (
        None,
        ["executor_fenced", "attempt_ran"],
    )
    assert machine.fire("start", orphan, stopped) is None  # not declared from orphaned
    store = open_job("sqlite:///" + str(tmp_path / "m.sqlite"), ManualClock())
    store.machine.fire = lambda event, row, caller: None  # type: ignore[method-assign]
    with pytest.raises(DeclarationMismatch, match="lease from queued"):
        store.take("j", "lease")
    assert store.row("j") is None or store.row("j").state == "queued"  # rolled back
    store.close()


def test_the_machine_decides_each_situation_once_and_as_a_fresh_machine_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the machine decides is a function of the event, the state and which guards of
    the event's transitions from there hold: it runs the ``transitions`` machine once per
    such situation and keeps the decision, which is what a machine asked afresh decides."""
    spec = load_spec(JOB_PATH)
    kept = LifecycleMachine(spec)
    triggered: list[str] = []
    for name, event in kept.machine.events.items():
        real = event.trigger

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            triggered.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(event, "trigger", counted)
    callers = [
        CallerView(epoch, token, facts, now)
        for epoch in (None, 1, 2)
        for token in (None, "h", "other")
        for facts in ({}, {"running": False, "fenced_through": 0}, {"fenced_through": 1})
        for now in (0.0, 50.0)
    ]
    rows = [
        RowView(state, epoch=1, token_hash="h", lease_deadline=lease, columns={"attempts": n})
        for state in spec.states
        for lease in (None, 10.0, 100.0)
        for n in (0, 3)
    ]
    decided = 0
    for _ in range(2):  # the second round is decided from what the first kept
        for event in spec.events:
            for row in rows:
                for caller in callers:
                    got = kept.fire(event, row, caller)
                    assert got is LifecycleMachine(spec).fire(event, row, caller)
                    decided += got is not None
    assert decided > 0
    asked = len(triggered)
    assert 0 < asked == len(set(kept._decided)) < decided  # once per situation
    for event in spec.events:  # and not again
        for row in rows:
            kept.fire(event, row, callers[0])
    assert len(triggered) == asked


def test_one_event_may_reach_one_state_from_two_sources(url: str, tmp_path: Path) -> None:
    """The store records the state its row was in, read where it writes, so one event may
    reach one state from two sources (``fail`` out of ``leased`` and out of ``running``, as
    the claim's acquire would leave each state that frees its target): history shows the
    source each took, the audit accepts it, and verify finds the store agreeing with the
    model."""
    two_sources = JOB.replace(
        'event = "release"\nsource = "leased"\ndest = "queued"',
        'event = "fail"\nsource = "leased"\ndest = "queued"',
    ).replace('[events.release]\nby = "owner"\n', "")
    assert two_sources != JOB
    (tmp_path / "two.toml").write_text(two_sources.replace('name = "job"', 'name = "two"'))
    spec = load_spec(tmp_path / "two.toml")
    with open_entity_store(spec, url, clock=ManualClock()) as store:
        store.act(store.take("a", "lease", lease_seconds=30), "fail")
        store.act(store.act(store.take("b", "lease", lease_seconds=30), "start"), "fail")
        fails = [(e.key, e.source, e.dest) for e in store.history() if e.event == "fail"]
        assert fails == [("a", "leased", "queued"), ("b", "running", "queued")]
        assert audit_store(store).ok
    result = verify(spec, lambda clock: open_entity_store(spec, url, clock=clock), examples=5)
    assert result.ok, result.failure


def test_what_a_store_cannot_keep_is_refused_by_name(tmp_path: Path) -> None:
    """The claim's declaration without its pseudo initial state (``claim.toml`` declares
    ``unclaimed`` so, and a lifecycle's store keeps it: ``test_pseudo_initial``): its
    freeing states could never be taken from in one row per entity."""
    from dataclasses import replace

    from claimfsm.spec import claim_spec

    claim = claim_spec()
    unclaimed = replace(claim.states[claim.initial], pseudo=False)
    unflagged = replace(claim, states={**claim.states, claim.initial: unclaimed})
    with pytest.raises(
        SpecError,
        match="state 'confirmed' is flagged frees_target, and no transition with a free guard",
    ):
        open_entity_store(unflagged, "sqlite:///" + str(tmp_path / "x"))
    # refused before the store opens anything: no database file is left behind
    assert not (tmp_path / "x").exists()
    # a store given a driver owns it: refusing the declaration closes it
    import sqlite3

    from claimfsm.store._entity import EntityStore
    from claimfsm.store._entity_drivers import SQLite

    driver = SQLite(":memory:")
    with pytest.raises(
        SpecError,
        match="state 'confirmed' is flagged frees_target, and no transition with a free guard",
    ):
        EntityStore(unflagged, driver)
    with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
        driver._db.conn.execute("SELECT 1")
    with pytest.raises(InvalidArgument, match=r"spec must be a declaration, not PosixPath"):
        open_entity_store(tmp_path / "two.toml", "sqlite:///" + str(tmp_path / "x"))  # type: ignore[arg-type]
    assert not (tmp_path / "x").exists()


NO_LEASE = """\
name = "nolease"
description = "a taker event into a lease state that sets no lease"
initial = "idle"
[states.idle]
meaning = "free"
[states.held]
meaning = "held"
lease = true
[guards.free]
kind = "free"
meaning = "free"
[guards.holder]
kind = "owner"
meaning = "holder"
stale = true
refusal = "StaleClaim"
[guards.live]
kind = "live"
meaning = "live"
[guards.lapsed]
kind = "lapsed"
meaning = "lapsed"
[events.renew]
sets = ["lease"]
[[transitions]]
event = "take"
source = "idle"
dest = "held"
guards = ["free"]
[[transitions]]
event = "renew"
source = "held"
dest = "held"
guards = ["holder", "live"]
[[transitions]]
event = "give"
source = "held"
dest = "idle"
guards = ["holder"]
[[transitions]]
event = "lapse"
source = "held"
dest = "idle"
guards = ["lapsed"]
"""


def test_a_take_that_sets_no_lease_holds_none_in_the_store_and_the_model(tmp_path: Path) -> None:
    """verify found the store and the model disagreeing here once (the store gave a taker a
    lease the event does not set); both now hold none until renew sets it."""
    (tmp_path / "nolease.toml").write_text(NO_LEASE)
    spec = load_spec(tmp_path / "nolease.toml")
    url = f"sqlite:///{tmp_path / 'n.sqlite'}"
    with open_entity_store(spec, url, clock=ManualClock()) as store:
        handle = store.take("k", "take")
        row = store.row("k")
        assert row is not None and row.lease_deadline is None
        with pytest.raises(Refused) as refused:
            store.act(handle, "renew")
        assert refused.value.guard == "live"
    result = verify(spec, lambda clock: open_entity_store(spec, url, clock=clock), examples=10)
    assert result.ok, result.failure


def test_tokens_stay_secret(tmp_path: Path) -> None:
    store = open_job("sqlite:///" + str(tmp_path / "t.sqlite"), ManualClock())
    handle = store.take("j", "lease")
    shown = repr(handle) + repr(store.row("j")) + repr(store.history("j"))
    assert handle.token not in shown and "token=" in repr(handle)
    store.close()


# -- claimfsm verify ------------------------------------------------------------------------
def opener(spec_path: Path, url: str):  # type: ignore[no-untyped-def]
    spec = load_spec(spec_path)
    return spec, lambda clock: open_entity_store(spec, url, clock=clock, prefix="verify")


def test_verify_finds_the_store_agreeing_with_the_model(url: str) -> None:
    spec, open_store = opener(JOB_PATH, url)
    result = verify(spec, open_store, examples=20, steps=20)
    assert result.ok, result.failure + "\n" + "\n".join(result.program)
    assert result.guided == len(guided_paths(spec)) and result.steps_run > 100


@pytest.mark.parametrize(
    ("where", "workers"),
    [
        ("specs/job.toml", 3),
        ("examples/page.toml", 2),  # linked drafts: the authors' steps too
        ("specs/wrong/partial_unique_index.toml", 2),
        ("specs/wrong/job/requeue_without_evidence.toml", 3),  # a violation to reach
    ],
)
def test_the_guided_paths_are_searched_by_class_and_are_real_and_shortest(
    where: str, workers: int
) -> None:
    """The guided paths are searched over one world of each class under renumbering the
    workers. They reach what the search of every world reaches, each by a path as short,
    and each is made of real actions: played on the model from its start, every action is
    one the model lists, and the last reaches what the path names. Asked again, they are
    the same paths, not the same lists."""
    spec = load_spec(Path(__file__).parents[1] / where)
    paths = guided_paths(spec, workers=workers)
    plain = guided_paths(spec, workers=workers, symmetry=False)
    assert sorted((w, len(a)) for w, a in paths) == sorted((w, len(a)) for w, a in plain)
    assert any(w.endswith(": refused") for w, _ in paths)
    assert any(w.startswith("invariant ") for w, _ in paths) == ("evidence" in where)
    model = entity_model(spec, EntityModelConfig(workers=workers, keys=1, lists_refused=True))
    failing = {p.name for p in model.properties if p.kind == "always"}
    for what, actions in paths:
        world = next(iter(model.init_states()))
        for action in actions[:-1]:
            assert action in model.actions(world), (what, actions)
            world = model.next_state(world, action)
            assert world is not None, (what, actions)
        last = actions[-1]
        assert last in model.actions(world), (what, actions)
        after = model.next_state(world, last)
        if what.startswith("invariant "):
            name = what.split()[1]
            assert name in failing and after is not None
            assert not next(p for p in model.properties if p.name == name).holds(after)
        elif what.startswith("author "):
            assert last[0] == "draft" and what.endswith("refused" if after is None else "done")
        elif what.endswith(": refused"):
            assert what == f"{last[-1]} from {world.rows[0].state}: refused", (what, last)
        else:
            assert after is not None
            assert what == f"{last[-1]}: {world.rows[0].state} -> {after.rows[0].state}"
    again = guided_paths(spec, workers=workers)
    assert again == paths and again is not paths
    again[0][1].clear()
    assert guided_paths(spec, workers=workers) == paths


def test_verify_opens_each_workers_store_once_and_closes_every_one(url: str) -> None:
    """A verify runs a hundred programs or more on one set of stores, one per worker and
    one for the operator (opening a PostgreSQL store is a connection and a schema check),
    each program from an empty store at the clock's start; at the end every store it
    opened is closed."""
    spec, open_store = opener(JOB_PATH, url)
    counting = CountedOpener(open_store)
    result = verify(spec, counting, examples=10, steps=20)
    assert result.ok, result.failure + "\n" + "\n".join(result.program)
    assert result.guided + result.programs > 50
    assert len(counting.opened) == result.workers + 1 and counting.all_closed()


def test_a_kept_store_starts_the_next_program_empty_at_the_clocks_start(tmp_path: Path) -> None:
    from claimfsm.verify._stateful import KeptStores

    spec, open_store = opener(JOB_PATH, f"sqlite:///{tmp_path / 'k.sqlite'}")
    machine = lifecycle_state_machine(spec, open_store)
    with KeptStores() as kept:
        machine.kept = kept  # type: ignore[attr-defined]
        first = machine()
        lapse = ("clock", 0)
        for action in [("take", 0, 0, "lease"), lapse]:
            first.step(action)  # type: ignore[attr-defined]
        moved = first.clock.now  # type: ignore[attr-defined]
        stores = list(first.stores)
        first.teardown()
        assert moved > ManualClock.START and len(kept.idle) == 1
        second = machine()
        assert second.stores == stores and not kept.idle  # type: ignore[attr-defined]
        assert second.clock.now == ManualClock.START  # type: ignore[attr-defined]
        assert stores[0].rows() == [] and stores[0].history() == []
        second.teardown()
    assert not kept.idle
    with pytest.raises(Exception):  # noqa: B017 - closed: any use fails
        stores[0].rows()


@pytest.mark.parametrize("kept_first", [False, True], ids=["new", "kept"])
def test_a_program_that_fails_to_start_closes_its_stores(tmp_path: Path, kept_first: bool) -> None:
    """Hypothesis tears down only a program that began: a program whose start fails (the
    store cannot be emptied) closes the stores it opened or took from the kept ones, and
    the error goes on."""
    from claimfsm.verify._stateful import KeptStores

    spec, open_store = opener(JOB_PATH, f"sqlite:///{tmp_path / 'f.sqlite'}")
    counting = CountedOpener(open_store)
    machine = lifecycle_state_machine(spec, counting)
    with KeptStores() as kept:
        machine.kept = kept  # type: ignore[attr-defined]
        if kept_first:
            machine().teardown()
            assert len(kept.idle) == 1 and not counting.closed

        def broken_reset() -> None:
            raise RuntimeError("the reset failed")

        for store in counting.opened:
            store.reset = broken_reset
        real_open = counting._open
        counting._open = lambda clock: _with_broken_reset(real_open(clock), broken_reset)
        with pytest.raises(RuntimeError, match="the reset failed"):
            machine()
        assert counting.opened and counting.all_closed() and not kept.idle


def _with_broken_reset(store: EntityStore, broken: object) -> EntityStore:
    store.reset = broken  # type: ignore[method-assign]
    return store


@pytest.mark.slow
def test_verify_long_runs_agree_on_both_backends(url: str) -> None:
    """More and longer random programs, three workers: the store never leaves the model."""
    spec, open_store = opener(JOB_PATH, url)
    result = verify(spec, open_store, examples=400, steps=50, workers=3, seed=20261130)
    assert result.ok, result.failure + "\n" + "\n".join(result.program)
    assert result.steps_run > 10_000


def test_verify_catches_a_store_that_forgets_an_effect(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    forget_the_attempts_bump(monkeypatch)
    spec, open_store = opener(JOB_PATH, f"sqlite:///{tmp_path / 'v.sqlite'}")
    result = verify(spec, open_store, examples=5)
    assert not result.ok
    assert "store row (state, epoch, columns, live) ('leased', 1, (0,), True)" in result.failure
    assert result.program == ["1. worker 0: lease job 0 -> leased"]


def test_verify_catches_a_store_that_records_the_wrong_refusals(tmp_path: Path) -> None:
    """verify holds each refusal the store records (or does not) to the declaration's stale
    owner rule in the model's world: a store that forgets the stale states (as one did
    before a lifecycle read the flag) refuses a stale owner without recording it, and a
    store that records every refusal records ones that are no stale owner's."""
    spec, open_store = opener(JOB_PATH, f"sqlite:///{tmp_path / 'v.sqlite'}")

    def blind(clock: ManualClock) -> EntityStore:
        store = open_store(clock)
        real = store.machine.stale_refusal

        def without_states(event, row, caller):  # type: ignore[no-untyped-def]
            found = real(event, row, caller)
            return None if found is not None and found.startswith("state:") else found

        store.machine.stale_refusal = without_states  # type: ignore[method-assign]
        return store

    result = verify(spec, blind, examples=5)
    assert not result.ok
    assert "the refusal recorded []; the declaration's stale owner rule records" in (result.failure)
    assert "'state:" in result.failure

    def eager(clock: ManualClock) -> EntityStore:
        store = open_store(clock)
        real = store.machine.stale_refusal

        def every(event, row, caller):  # type: ignore[no-untyped-def]
            found = real(event, row, caller)
            failing = store.machine.explain(event, row, caller)[1]
            if found is None and failing:
                return next((g for g in failing if spec.guards[g].stale), failing[0])
            return found

        store.machine.stale_refusal = every  # type: ignore[method-assign]
        return store

    result = verify(spec, eager, examples=5)
    assert not result.ok
    assert "the declaration's stale owner rule records nothing" in result.failure


def forget_the_attempts_bump(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store whose compiled lease forgets to bump attempts: a store bug to be caught."""
    real = entity_module.compile_event

    def forgetful(spec, event, table, marker="?", **options):  # type: ignore[no-untyped-def]
        compiled = real(spec, event, table, marker, **options)
        sql = compiled.sql.replace(", attempts = attempts + 1", "")
        return CompiledEvent(sql, compiled.params)

    monkeypatch.setattr(entity_module, "compile_event", forgetful)


def test_check_replay_plays_every_guided_path_on_sqlite(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """check --replay: the model's shortest path to each transition, refusal and violation,
    on real SQLite files; a violation on the way is the declaration's, a disagreement the
    store's (exit 1)."""
    ok = CliRunner().invoke(main, ["check", "job", "--replay"])
    assert ok.exit_code == 0, ok.output
    assert f"replayed on real SQLite files: {len(guided_paths(load_spec(JOB_PATH)))} paths" in (
        ok.output
    )
    assert "the store did what the model did at every step" in ok.output
    wrong = CliRunner().invoke(main, ["check", "job-requeue_without_evidence", "--replay"])
    assert wrong.exit_code == 1
    assert "on the store too: invariant one_attempt_at_a_time violated" in wrong.output
    assert "DISAGREES" not in wrong.output
    forget_the_attempts_bump(monkeypatch)
    broken = CliRunner().invoke(main, ["check", "job", "--replay", "--json"])
    assert broken.exit_code == 1, broken.output
    said = json.loads(broken.output)["replay"]["disagreements"][0]["store"]
    assert "store row (state, epoch, columns, live) ('leased', 1, (0,), True)" in said


def test_a_replay_token_is_played_on_the_store_too() -> None:
    result = CliRunner().invoke(main, ["check", "job-requeue_without_evidence"])
    token = re.search(r"replay token: (\S+)", result.output)
    assert token is not None
    replayed = CliRunner().invoke(
        main, ["check", "job-requeue_without_evidence", "--replay-token", token.group(1)]
    )
    assert replayed.exit_code == 1
    on_store = replayed.output.split("and on a real SQLite store")[1]
    assert "8. worker 1: start -> running" in on_store
    assert "9. worker 1: its run reaches the executor -> reached the executor" in on_store
    assert "invariant one_attempt_at_a_time violated" in on_store


def test_verify_plays_the_wrong_designs_counterexample_on_the_store(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["verify", str(WRONG), "--db", f"sqlite:///{tmp_path / 'v.sqlite'}"]
    )
    assert result.exit_code == 1, result.output
    assert "failed: invariant one_attempt_at_a_time violated" in result.output
    assert "the declaration itself breaks it" in result.output
    assert "  8. worker 1: start -> running" in result.output


def test_verify_cli_on_postgresql_and_its_errors(pg_database: str, tmp_path: Path) -> None:
    schema, url = pg_schema_url(pg_database)
    try:
        ok = CliRunner().invoke(main, ["verify", "job", "--db", url, "--examples", "10", "--json"])
        assert ok.exit_code == 0, ok.output
        data = json.loads(ok.output)
        assert data["ok"] and data["guided"] == len(guided_paths(load_spec(JOB_PATH)))
        assert data["workers"] == 2
    finally:
        drop_schema(pg_database, schema)
    runner = CliRunner()
    memory = runner.invoke(main, ["verify", "job", "--db", "sqlite://:memory:"])
    assert memory.exit_code == 2 and "give a file" in memory.output
    claim = runner.invoke(main, ["verify", "claim", "--db", "postgresql://nobody@127.0.0.1:1/x"])
    assert claim.exit_code == 1 and "cannot connect to" in claim.output  # the claim's, too
    bad = runner.invoke(main, ["verify", "job", "--db", "postgresql://nobody@127.0.0.1:1/x"])
    assert bad.exit_code == 1 and "cannot connect to" in bad.output
    assert "Traceback" not in bad.output


def test_verify_leaves_the_database_as_it_found_it(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "v.sqlite"
    result = CliRunner().invoke(
        main, ["verify", "job", "--db", f"sqlite:///{db}", "--examples", "3"]
    )
    assert result.exit_code == 0, result.output
    tables = sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    assert [t for (t,) in tables if t.startswith("verify_")] == []


# The factory, as a user's own pytest suite calls it (a file of its own per test run).
_FACTORY_DB = Path(tempfile.mkdtemp(prefix="claimfsm-factory-")) / "jobs.sqlite"
FactoryJob = lifecycle_state_machine(
    load_spec(JOB_PATH),
    lambda clock: open_entity_store(load_spec(JOB_PATH), f"sqlite:///{_FACTORY_DB}", clock=clock),
)
FactoryJob.TestCase.settings = settings(max_examples=10, stateful_step_count=15, deadline=None)
TestTheFactoryRunsInAPytestSuite = FactoryJob.TestCase


def test_a_refusal_says_what_its_guard_kind_says_in_the_declarations_words(
    url: str,
) -> None:
    """A lifecycle's refusals are written by the claim machine's sentence compiler
    (machine._guards.why), in the job's own words: the event that takes a job (lease), the
    one that renews, the current epoch against the one the caller named."""
    clock = ManualClock()
    store = open_job(url, clock)
    first = store.take("j1", "lease", lease_seconds=30)
    clock.advance(31)
    with pytest.raises(LeaseExpired) as lapsed:
        store.act(first, "start")
    assert "the lease lapsed at" in str(lapsed.value)
    assert "renew before the deadline, or lease again" in str(lapsed.value)
    assert store.operate("j1", "lapse") == "queued"  # lapsed before it started
    store.take("j1", "lease")
    with pytest.raises(StaleClaim) as stale:
        store.act(first, "renew")
    message = str(stale.value)
    assert "epoch 1 is not current (current epoch 2)" in message
    assert "this handle no longer holds the job: drop it and lease again" in message
    assert first.token not in message


def test_what_a_caller_says_of_an_operation_is_recorded(url: str) -> None:
    """Every call takes ``detail``, what its caller says of it (why a job failed, say), as
    the claim's ``mark_uncertain`` takes a reason: history records it with the entry, a
    stale owner's refused entry included, shows it beneath the entry's line and in JSON,
    and pruning's checkpoint says what was pruned. A detail that is no printable text of
    at most the claim's length is refused, naming ``detail``, and nothing is written."""
    spec = load_spec(JOB_PATH)
    clock = ManualClock()
    store = open_entity_store(spec, url, clock=clock)
    first = store.take("j", "lease", owner="w1", lease_seconds=10, detail="picked from queue A")
    running = store.act(first, "start")
    store.act(running, "fail", detail="exit code 3: disk full")
    second = store.take("j", "lease", owner="w2", lease_seconds=10)
    with pytest.raises(StaleClaim):
        store.act(running, "succeed", detail="done, I think")
    store.act(store.act(second, "start"), "renew", detail="")
    for bad, said in (
        (3, "detail must be a str, not int"),
        ("bell \x07", "detail contains a control character"),
        ("x" * 5000, "detail must be at most"),
    ):
        with pytest.raises(InvalidArgument, match=said):
            store.act(second, "renew", detail=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match=said):
            store.operate("j", "lapse", detail=bad)  # type: ignore[arg-type]
    assert [(e.event, e.refused, e.detail) for e in store.history("j")] == [
        ("lease", None, "picked from queue A"),
        ("start", None, ""),
        ("fail", None, "exit code 3: disk full"),
        ("lease", None, ""),
        ("succeed", "owner_matches", "done, I think"),
        ("start", None, ""),
        ("renew", None, ""),
    ]
    listed = CliRunner().invoke(main, ["history", "job", "--db", url])
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    fail = next(i for i, line in enumerate(lines) if " fail " in line)
    assert lines[fail + 1] == "    exit code 3: disk full"
    shown = CliRunner().invoke(main, ["history", "job", "--db", url, "--json"])
    assert [json.loads(line)["detail"] for line in shown.output.splitlines()][2] == (
        "exit code 3: disk full"
    )
    clock.advance(100)
    store.act(store.take("k", "lease", owner="w3", lease_seconds=10), "start")
    store.prune_history(50)
    checkpoint = store.history("j")[0]
    assert checkpoint.event == "checkpoint" and "was pruned" in (checkpoint.detail or "")
    assert audit_store(store).ok
    store.close()


def _indexes(url: str, table: str) -> set[str]:
    """The names of ``table``'s indexes, read by the database's own driver."""
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            found = db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,)
            ).fetchall()
        return {name for (name,) in found}
    import psycopg

    from claimfsm.store._postgres import split_url

    plain, schema = split_url(url)[0], url.rsplit("schema=", 1)[1]
    with psycopg.connect(plain) as db:
        found = db.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
            (schema, table),
        ).fetchall()
    return {name for (name,) in found}


def _run(url: str, statement: str) -> None:
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            db.execute(statement)
        return
    import psycopg

    from claimfsm.store._postgres import split_url

    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(split_url(url)[0], autocommit=True) as db:
        db.execute(f"SET search_path TO {schema}")
        db.execute(statement)


def test_rows_are_indexed_by_state_and_a_table_made_without_the_index_gets_it(
    url: str,
) -> None:
    """The sweep reads the rows in its events' sources, and opening reads which states
    the rows are in: both by the state index, not by a pass over every row (on SQLite the
    query plans say so), so neither grows with the rows that rest in terminal states. A
    table made before the index gets it when the store opens it (to create or only to
    read), and its rows in states
    the declaration no longer declares are still found (two such states, with the rows
    each holds, and none of the declared ones)."""
    job = load_spec(JOB_PATH)
    store = open_entity_store(job, url, clock=ManualClock())
    table = store.table.rsplit(".", 1)[-1].strip('"')
    for n in range(3):
        store.act(store.act(store.take(f"done-{n}", "lease"), "start"), "succeed")
    store.act(store.take("running", "lease"), "start")
    store.take("leased", "lease")
    sweep_sql = store._sql["rows"].replace(" ORDER BY", " WHERE state IN ('leased') ORDER BY")
    store.close()
    assert f"{table}_by_state" in _indexes(url, table)
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            plan = " ".join(str(row) for row in db.execute(f"EXPLAIN QUERY PLAN {sweep_sql}"))
        assert f"INDEX {table}_by_state" in plan, plan
    _run(url, f"DROP INDEX {table}_by_state")
    assert f"{table}_by_state" not in _indexes(url, table)
    renamed = JOB
    for old, new in (("running", "executing"), ("succeeded", "done")):
        renamed = renamed.replace(f"[states.{old}]", f"[states.{new}]")
        for end in ("source", "dest"):
            renamed = renamed.replace(f'{end} = "{old}"', f'{end} = "{new}"')
    renamed = renamed.replace('"succeeded"', '"done"')  # its invariants name it too
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.toml"
        path.write_text(renamed)
        with pytest.raises(SpecError) as err:
            open_entity_store(load_spec(path), url, clock=ManualClock())
    assert "does not declare: 'running' (1 row), 'succeeded' (3 rows)." in str(err.value)
    assert f"{table}_by_state" not in _indexes(url, table)  # refused: nothing kept
    # opened only to read (create=False), as the CLI opens one: it gets the index too
    reader = open_entity_store(job, url, clock=ManualClock(), create=False)
    assert f"{table}_by_state" in _indexes(url, table)
    reader.close()
    _run(url, f"DROP INDEX {table}_by_state")
    again = open_entity_store(job, url, clock=ManualClock())
    assert f"{table}_by_state" in _indexes(url, table)
    assert sorted(r.state for r in again.rows()) == [
        "leased",
        "running",
        "succeeded",
        "succeeded",
        "succeeded",
    ]
    again.drop()
    again.close()


def test_rows_in_states_the_declaration_no_longer_declares_are_refused_at_open(
    url: str, tmp_path: Path
) -> None:
    """A store written under one declaration, opened with a copy that renamed a state its
    rows are in: refused at open, naming the state, how many rows, and what to do, by the
    library and the CLI alike (no KeyError from the first operation on such a row), and
    nothing lost: the declaration that wrote it opens it as before."""
    job = load_spec(JOB_PATH)
    store = open_entity_store(job, url, clock=ManualClock())
    store.act(store.take("j1", "lease", lease_seconds=10), "start")
    store.take("j2", "lease", lease_seconds=10)
    store.close()
    renamed = JOB.replace("[states.running]", "[states.executing]")
    for end in ("source", "dest"):
        renamed = renamed.replace(f'{end} = "running"', f'{end} = "executing"')
    path = tmp_path / "job.toml"
    path.write_text(renamed)
    says = "does not declare: 'running' (1 row)"
    with pytest.raises(SpecError, match=re.escape(says)) as err:
        open_entity_store(load_spec(path), url, clock=ManualClock())
    assert str(path) in str(err.value) and "declare those states again" in str(err.value)
    for command in ("history", "sweep"):
        result = CliRunner().invoke(main, [command, str(path), "--db", url])
        assert result.exit_code == 1 and says in result.output, result.output
        assert "Traceback" not in result.output
    again = open_entity_store(job, url, clock=ManualClock())
    assert [r.state for r in again.rows()] == ["running", "leased"]
    assert audit_store(again).ok
    again.drop()
    again.close()


def test_history_is_read_in_pages_as_a_whole_read_gives_it(url: str) -> None:
    """``iter_history`` reads every entity's history in seq order a page at a time: the
    same entries as ``history()``, refusals included, whatever the page size (a page
    boundary inside one entity's history, a last page that is full, and one entry a page).
    The pages are one snapshot: what the store writes or prunes while they are read is not
    in them, and a stream closed part-way gives its connection back."""
    clock = ManualClock()
    store = open_entity_store(load_spec(JOB_PATH), url, clock=clock, pool_size=2)
    for key in ("a", "b", "c"):
        handle = store.act(store.take(key, "lease", lease_seconds=10), "start")
        clock.advance(11)
        store.sweep()  # the lease lapsed while it ran: orphaned
        with pytest.raises(StaleClaim):
            store.act(handle, "succeed")  # a stale owner: refused, and recorded
    whole = store.history()
    assert len(whole) == 12 and sum(h.refused is not None for h in whole) == 3
    for page in (1, 5, 6, 12, 13, 10_000):
        assert list(store.iter_history(page)) == whole, page
    with contextlib.closing(store.iter_history(5)) as pages:  # closed if a check fails
        first = [next(pages) for _ in range(5)]
        store.take("d", "lease", lease_seconds=10)  # appended while the pages are read
        clock.advance(100)
        pruned = store.prune_history(50)  # and every entry, read or not yet, is pruned
        assert pruned.checkpoints == 4 and len(store.history()) == 4
        assert first + list(pages) == whole  # as the history was: no checkpoint, no "d"
    assert [e.event for e in store.iter_history(1)] == [e.event for e in store.history()]
    for _ in range(3):  # more streams left open than the pool has connections: each closed
        partial = store.iter_history(1)
        next(partial)
        partial.close()
    store.take("e", "lease", lease_seconds=10)
    assert len(list(store.iter_history())) == 5
    with pytest.raises(InvalidArgument, match="page must be a positive int"):
        next(store.iter_history(0))
    store.drop()
    store.close()
