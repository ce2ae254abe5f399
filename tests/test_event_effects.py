"""What an event writes besides the state is declared once (``[events.NAME]``): one edit
there changes the compiled SQL, the reference store and SQLite's stores together, and
which commits are synced in full, and which event an acquire applies first."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from claimfsm.checker import Checker, ClaimModelConfig, claim_model, path_steps
from claimfsm.errors import SpecError, TargetBusy
from claimfsm.machine import ClaimMachine
from claimfsm.spec import Event, Spec, claim_spec, declarations_dir, load_spec, wrong_designs
from claimfsm.store import MemoryStore, SQLiteStore, Store
from claimfsm.store._sql import compile_writes

from .conftest import FakeClock

CLAIM = (declarations_dir() / "claim.toml").read_text()


def edited(tmp_path: Path, old: str, new: str) -> Path:
    assert CLAIM.count(old) == 1, old
    path = tmp_path / "edited.toml"
    path.write_text(CLAIM.replace(old, new))
    return path


def claim_store(backend: str, spec: Spec, path: Path, clock: FakeClock) -> Store:
    """The claim store of ``spec`` on ``backend`` ("memory" or "sqlite", a file at ``path``)."""
    machine = ClaimMachine(spec)
    if backend == "memory":
        return MemoryStore(clock=clock, machine=machine)
    return SQLiteStore(path, clock=clock, machine=machine)


def lapsed_claim(backend: str, spec: Spec, path: Path) -> tuple[Store, int]:
    """A claim store whose target "t" worker "a" acquired for an approved draft, and whose
    lease then lapsed with no sweep run; and the draft's id."""
    clock = FakeClock(1000.0)
    store = claim_store(backend, spec, path, clock)
    draft = store.create_draft("t", "x")
    store.approve_draft(draft.draft_id)
    store.acquire("t", draft.draft_id, "a", 30)
    clock.advance(31)
    return store, draft.draft_id


def renewed_deadline(store: Store, clock: FakeClock) -> float:
    draft = store.create_draft("t", "x")
    store.approve_draft(draft.draft_id)
    claim = store.acquire("t", draft.draft_id, "w", 30)
    clock.advance(10)
    claim.renew(30)
    info = store.get_claim("t")
    assert info is not None
    return info.lease_deadline


def test_dropping_an_effect_reaches_the_sql_and_every_store(tmp_path: Path) -> None:
    """renew without ``lease``: it still fires (its guards hold) but moves no deadline."""
    spec = load_spec(edited(tmp_path, '[events.renew]\nsets = ["lease"]', "[events.renew]"))
    p = lambda n: f":{n}"  # noqa: E731
    assert "lease_deadline = :lease_deadline" in compile_writes(claim_spec(), p).events["renew"]
    assert "lease_deadline" not in compile_writes(spec, p).events["renew"].split("WHERE")[0]
    for s, moved in ((claim_spec(), True), (spec, False)):
        for backend in ("memory", "sqlite"):
            clock = FakeClock(1000.0)
            store = claim_store(backend, s, tmp_path / f"{moved}.sqlite", clock)
            assert renewed_deadline(store, clock) == (1040.0 if moved else 1030.0), backend
            store.close()


def test_durable_is_read_from_the_declaration(tmp_path: Path) -> None:
    """renew declared ``durable``: its commit is synced in full too. (The events after
    which work may begin must be durable: the loader refuses begin_send without it.)"""
    spec = load_spec(
        edited(
            tmp_path,
            '[events.renew]\nsets = ["lease"]',
            '[events.renew]\nsets = ["lease"]\ndurable = true',
        )
    )
    assert spec.durable_events() == {"begin_send", "retry", "renew"}
    for s, full in ((claim_spec(), False), (spec, True)):
        clock = FakeClock()
        store = SQLiteStore(tmp_path / f"{full}.sqlite", clock=clock, machine=ClaimMachine(s))
        draft = store.create_draft("t", "x")
        store.approve_draft(draft.draft_id)
        claim = store.acquire("t", draft.draft_id, "w", 30)
        trace: list[str] = []
        store._db.conn.set_trace_callback(trace.append)
        claim.renew(30)
        assert ("PRAGMA synchronous = FULL" in trace) == full
        store.close()
    with pytest.raises(SpecError, match=r'begin_send.*declares work = "starts"'):
        load_spec(edited(tmp_path, "[events.begin_send]\ndurable = true", "[events.begin_send]"))


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('sets = ["outcome"]', 'sets = ["result"]', r"must name each effect once, from \["),
        ('sets = ["outcome"]', 'sets = ["outcome", "outcome"]', "must name each effect once"),
        ("[events.renew]", "[events.renews]", "event 'renews' has no transition"),
        (
            "[events.begin_send]\ndurable = true",
            '[events.begin_send]\ndurable = "yes"',
            "durable must",
        ),
        (
            '[events.renew]\nsets = ["lease"]',
            '[events.renew]\nsets = ["lease"]\nwrites = 1',
            "unknown keys",
        ),
    ],
)
def test_a_bad_event_table_is_one_error_naming_the_file_and_line(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = edited(tmp_path, old, new)
    with pytest.raises(SpecError, match=message) as caught:
        load_spec(path)
    assert str(caught.value).startswith(f"{path}:")


def test_the_checker_reads_what_retry_writes(tmp_path: Path) -> None:
    """retry without ``fresh_token`` keeps the token: the worker that retries holds the
    same token as the handle that timed out, so fewer distinct worlds are reachable."""
    from claimfsm.checker import Checker, ClaimModelConfig, claim_model

    old = '[events.retry]\nsets = ["owner", "fresh_token", "lease"]'
    spec = load_spec(edited(tmp_path, old, '[events.retry]\nsets = ["owner", "lease"]'))
    config = ClaimModelConfig(workers=2, drafts=1, epochs=2, remote="dedup")
    shipped = Checker(claim_model(claim_spec(), config)).run()
    same_token = Checker(claim_model(spec, config)).run()
    assert shipped.verdict == same_token.verdict == "ok"
    assert (shipped.unique, same_token.unique) == (7805, 5031)


NO_DISPATCH = ("dispatches = true  # acknowledged: the pinned draft is dispatched\n", "")


def test_a_transition_that_dispatches_is_declared_and_every_consumer_reads_it(
    tmp_path: Path,
) -> None:
    """confirm without ``dispatches``: the stores leave the draft approved after an
    acknowledged send, and the checker finds the duplicate effect that follows; and since
    sending is no longer a state a dispatches transition leaves, the draft is no longer
    locked there, and an edit while it is sent breaks ``sent_as_pinned``."""
    from claimfsm.checker import Checker, ClaimModelConfig, claim_model
    from claimfsm.store._sql import compile_single_statements

    spec = load_spec(edited(tmp_path, *NO_DISPATCH))
    single = compile_single_statements(claim_spec(), "now()", str, 8)
    assert "dispatched AS" in single["confirm"]
    assert "dispatched AS" not in compile_single_statements(spec, "now()", str, 8)["confirm"]
    for s, status in ((claim_spec(), "dispatched"), (spec, "approved")):
        for backend in ("memory", "sqlite"):
            clock = FakeClock()
            machine = ClaimMachine(s)
            store: Store = (
                MemoryStore(clock=clock, machine=machine)
                if backend == "memory"
                else SQLiteStore(tmp_path / f"{status}.sqlite", clock=clock, machine=machine)
            )
            draft = store.create_draft("t", "x")
            store.approve_draft(draft.draft_id)
            store.acquire("t", draft.draft_id, "w", 30).begin_send().confirm()
            assert store.get_draft(draft.draft_id).status == status, backend
            store.close()
    config = ClaimModelConfig(workers=1, drafts=1, epochs=2)
    assert Checker(claim_model(claim_spec(), config)).run().verdict == "ok"
    broken = Checker(claim_model(spec, config)).run()
    # and, since where the draft is locked is read off dispatches, an edit while sending
    assert [p.name for p in broken.violations] == ["effect_at_most_once", "sent_as_pinned"]


def test_a_dispatch_a_store_cannot_tell_apart_is_refused(tmp_path: Path) -> None:
    """Both reconcile transitions enter reconciled; without its fact guard the dispatching
    one cannot be told from the other after the write."""
    old = 'guards = ["epoch_current", "effect_present"]\ndispatches = true'
    spec = load_spec(edited(tmp_path, old, 'guards = ["epoch_current"]\ndispatches = true'))
    with pytest.raises(SpecError, match="no compare guard over the caller's facts tells them"):
        compile_writes(spec, lambda n: f":{n}")
    path = edited(
        tmp_path,
        'source = "*"\ninternal = true',
        'source = "*"\ninternal = true\ndispatches = true',
    )
    with pytest.raises(SpecError, match="an internal transition cannot dispatch"):
        load_spec(path)


NO_FIRST = ('[events.acquire]\nfirst = "lapse"', "[events.acquire]")


def test_dropping_first_reaches_every_store_and_the_checker(tmp_path: Path) -> None:
    """acquire without ``first = "lapse"``: a reserved claim whose lease lapsed keeps its
    target until the sweep runs. Every store refuses the takeover (TargetBusy) where the
    declared design lapses the old epoch and takes the target in one transaction, and the
    checker's claim model explores a different world (the takeover waits for the sweep)."""
    spec = load_spec(edited(tmp_path, *NO_FIRST))
    assert claim_spec().first("acquire") == "lapse" and spec.first("acquire") is None
    for s, lapses_first in ((claim_spec(), True), (spec, False)):
        for backend in ("memory", "sqlite"):
            store, draft_id = lapsed_claim(backend, s, tmp_path / f"first-{lapses_first}.sqlite")
            if lapses_first:
                taken = store.acquire("t", draft_id, "b", 30)
                assert taken.epoch == 2, backend
                assert [(h.epoch, h.event, h.to_state) for h in store.history("t")] == [
                    (1, "acquire", "reserved"),
                    (1, "lapse", "expired"),
                    (2, "acquire", "reserved"),
                ], backend
            else:
                with pytest.raises(TargetBusy):
                    store.acquire("t", draft_id, "b", 30)
                assert store.epochs("t") == {1: "reserved"}, backend
                store.sweep()  # the sweep lapses it; then the target is free
                assert store.acquire("t", draft_id, "b", 30).epoch == 2, backend
            store.close()
    # The checker: worker 1's acquire right after worker 0's lease lapsed is a step of the
    # declared design's model and not of the edited one's (whose reachable states are the
    # same: the sweep's lapse reaches the expired epoch anyway, so only the steps differ).
    config = ClaimModelConfig(workers=2, drafts=1, edits=False)
    for s, lapses_first in ((claim_spec(), True), (spec, False)):
        model = claim_model(s, config)
        world = next(iter(model.init_states()))
        for action in ((Event.ACQUIRE, 0, 0, 0), ("lease_lapses", 0)):
            world = model.next_state(world, action)
            assert world is not None
        taken = model.next_state(world, (Event.ACQUIRE, 1, 0, 0))
        assert (taken is not None) == lapses_first
        if taken is not None:
            assert taken.targets[0].epoch == 2
        report = Checker(model).exhaustive().run()
        assert report.complete and report.verdict == "ok"


@pytest.mark.parametrize("design", ["claim", "update_returning_claim"])
def test_first_is_applied_where_the_acquire_is_refused_by_stores_and_model_alike(
    tmp_path: Path, design: str
) -> None:
    """``first`` means: where the event is refused as the row is, the first event and then
    the event again. claim.toml's acquire is refused on a busy target, so a lapsed reserved
    epoch is lapsed first. update_returning_claim's acquire takes a busy target, so nothing
    is lapsed: the stores write one acquire over the other, and the checker's steps (what
    its counterexamples draw) are the stores' history, step for step."""
    spec = claim_spec() if design == "claim" else wrong_designs()[design]
    assert spec.first("acquire") == "lapse"
    expected = ["acquire", "lapse", "acquire"] if design == "claim" else ["acquire", "acquire"]
    for backend in ("memory", "sqlite"):
        store, draft_id = lapsed_claim(backend, spec, tmp_path / f"{design}.sqlite")
        assert store.acquire("t", draft_id, "b", 30).epoch == 2
        assert [h.event for h in store.history("t")] == expected, backend
        store.close()
    model = claim_model(spec, ClaimModelConfig(workers=2, drafts=1, edits=False))
    world = next(iter(model.init_states()))
    path = [SimpleNamespace(state=world, action=None)]
    for action in ((Event.ACQUIRE, 0, 0, 0), ("lease_lapses", 0), (Event.ACQUIRE, 1, 0, 0)):
        world = model.next_state(world, action)
        assert world is not None, action
        path.append(SimpleNamespace(state=world, action=action))
    steps = [s.event for s in path_steps(spec, model, path) if s.event is not None]
    assert steps == expected


def test_first_must_name_the_sweeps_event_from_busy_states(tmp_path: Path) -> None:
    for new, message in (
        ('[events.acquire]\nfirst = "lapses"', "first 'lapses' must name an event"),
        ('[events.acquire]\nfirst = "acquire"', "cannot be applied before itself"),
        ('[events.acquire]\nfirst = "release"', "must be the sweep's"),
    ):
        with pytest.raises(SpecError, match=message):
            load_spec(edited(tmp_path, '[events.acquire]\nfirst = "lapse"', new))
    # a first on any other event than the claim's acquire: the claim world does not read it
    renewing = edited(tmp_path, "[events.renew]\n", '[events.renew]\nfirst = "lapse"\n')
    with pytest.raises(SpecError, match="'renew' and 'lapse' both leave"):
        load_spec(renewing)  # renew leaves the states lapse leaves: never refused for it
    other = edited(tmp_path, "[events.reconcile]\n", '[events.reconcile]\nfirst = "lapse"\n')
    with pytest.raises(SpecError, match="applies an event first on the claim's 'acquire' only"):
        ClaimMachine(load_spec(other))


def test_an_acquire_that_declares_no_lease_is_refused_by_every_claim_consumer(
    tmp_path: Path,
) -> None:
    """The claim's new epoch is leased because ``claim.toml`` says so (``sets = ["lease"]``
    on acquire): without it the machine, the checker's world and its Promela refuse the
    declaration by name, rather than giving the epoch a lease nobody declared."""
    from claimfsm.checker._spin_claim import claim_promela

    path = edited(
        tmp_path,
        'sets = ["lease"]  # every new epoch is leased',
        "# no lease declared",
    )
    spec = load_spec(path)
    said = r"declare sets = \[\"lease\"\] on \[events.acquire\]"
    with pytest.raises(SpecError, match=said):
        ClaimMachine(spec)
    with pytest.raises(SpecError, match=said):
        claim_model(spec)
    with pytest.raises(SpecError, match=said):
        claim_promela(spec, ClaimModelConfig())
    with pytest.raises(SpecError) as named:
        ClaimMachine(spec)
    assert str(named.value).startswith(f"{path}:")
