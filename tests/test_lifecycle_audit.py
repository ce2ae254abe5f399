"""`claimfsm audit DECLARATION --db URL`: a lifecycle's history checked after the fact against
its declaration, read-only, on SQLite and PostgreSQL. A store run through the library audits
clean; each kind of damage (written past the store, as a bug or a hand edit would) is found
and named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from claimfsm.audit import audit_lifecycle
from claimfsm.cli import main
from claimfsm.errors import InsufficientEvidence, InvalidArgument, NotFound, StaleClaim
from claimfsm.spec import declarations_dir, load_spec
from claimfsm.store import EntityStore, Handle, open_entity_store
from claimfsm.store._tokens import fingerprint, token_hash
from claimfsm.verify import ManualClock, verify

from .conftest import forge_history

JOB = load_spec(declarations_dir() / "job.toml")


def _a_busy_store(url: str, clock: ManualClock) -> EntityStore:
    """Jobs leased, run, failed, retried, taken over by a stale-refused worker, lapsed by
    the sweep, dead-lettered, requeued on evidence."""
    store = open_entity_store(JOB, url, clock=clock)
    first = store.act(store.take("a", "lease", owner="w1", lease_seconds=10), "start")
    store.act(first, "fail")
    second = store.take("a", "lease", owner="w2", lease_seconds=10)
    with pytest.raises(StaleClaim):
        store.act(first, "start")
    store.act(store.act(second, "start"), "succeed")
    for _ in range(3):
        store.take("spent", "lease", owner="w", lease_seconds=10)
        clock.advance(11)
        store.sweep()
    store.act(store.take("orphan", "lease", owner="w", lease_seconds=10), "start")
    clock.advance(11)
    store.sweep()
    store.operate("orphan", "requeue", facts={"fenced_through": 1})
    clock.advance(100)
    store.take("orphan", "lease", owner="w3", lease_seconds=10)
    return store


def test_a_store_run_through_the_library_audits_clean(url: str) -> None:
    store = _a_busy_store(url, ManualClock())
    states = {r.key: r.state for r in store.rows()}
    assert states == {"a": "succeeded", "spent": "dead", "orphan": "leased"}
    report = audit_lifecycle(JOB, url)
    assert report.ok, report.violations
    assert (report.entries, report.targets, report.claims) == (len(store.history()), 3, 3)
    assert report.entries == 19  # a: 7 (a stale refusal among them), spent: 7, orphan: 5
    # pruned: each history now opens with a checkpoint, and still audits clean
    assert store.prune_history(105).checkpoints == 3
    assert [e.event for e in store.history("orphan")] == ["checkpoint", "lapse", "requeue", "lease"]
    store.close()
    report = audit_lifecycle(JOB, url)
    assert report.ok, report.violations
    assert (report.entries, report.targets, report.claims) == (6, 3, 3)


#: A history entry written past the store (its request key unrecorded).
_forge = forge_history


def _set_row(store: EntityStore, key: str, **values: Any) -> None:
    m = store._driver.marker
    sets = ", ".join(f"{c} = {m}" for c in values)
    store._driver.rerun(
        lambda tx: tx.run(
            f"UPDATE {store.table} SET {sets} WHERE key = {m}",  # noqa: S608
            (*values.values(), key),
        )
    )


def _kinds(url: str) -> dict[str, list[str]]:
    report = audit_lifecycle(JOB, url)
    found: dict[str, list[str]] = {}
    for v in report.violations:
        found.setdefault(v.kind, []).append(v.target_id)
    assert sum(len(k) for k in found.values()) == report.total
    return found


def test_each_kind_of_damage_is_found_and_named(url: str) -> None:
    clock = ManualClock()
    store = _a_busy_store(url, clock)
    store.prune_history(105)  # damage after a checkpoint is found too
    holder = store.history("orphan")[-1].token_fingerprint
    # A stale epoch's start: orphan's epoch 2 is current, and epoch 1's handle wrote.
    _forge(store, "orphan", 1, "start", "leased", "running", fp=holder)
    assert _kinds(url) == {
        "epoch_order": ["orphan"],
        "stale_owner_changed": ["orphan"],  # owner_matches: epoch 1 does not hold epoch 2
        "row_disagrees": ["orphan"],  # the row never moved
    }

    # A start by a token that does not hold the lease, at the right epoch.
    store.take("b", "lease", owner="w", lease_seconds=10)
    deadline = store.row("b").lease_deadline  # type: ignore[union-attr]
    forged = fingerprint(token_hash("not the holder's token"))
    moved = {"at": clock(), "lease": deadline, "owner": "w"}
    _forge(store, "b", 1, "start", "leased", "running", fp=forged, **moved)
    _set_row(store, "b", state="running")
    assert _kinds(url)["stale_owner_changed"] == ["b", "orphan"]

    # An undeclared step, a refusal that moved, a checkpoint inside history, and a step
    # out of a terminal state.
    _forge(store, "c", 0, "succeed", "queued", "succeeded")
    _forge(store, "d", 0, "start", "queued", "leased", refused="owner_matches")
    a_holder = store.history("a")[-1].token_fingerprint
    _forge(store, "a", 2, "checkpoint", "succeeded", "succeeded", fp=a_holder, owner="w2")
    _forge(store, "spent", 4, "lease", "dead", "leased")
    kinds = _kinds(url)
    assert kinds["undeclared_transition"] == ["c", "spent"]
    assert kinds["refusal_changed"] == ["d"]
    assert kinds["checkpoint_misplaced"] == ["a"]
    assert kinds["history_without_row"] == ["c", "d"]  # history, but no row
    assert kinds["row_disagrees"] == ["orphan", "spent"]  # spent: history leaves it leased

    # A row edited by hand: its counter no longer what history counts.
    _set_row(store, "b", attempts=9)
    assert _kinds(url)["row_disagrees"] == ["b", "orphan", "spent"]
    store.close()


def test_the_owner_is_recorded_and_judged_from_history(url: str) -> None:
    """Each entry records the owner the row holds after it, as the claim's history does: a
    taker's name from its take on, kept by the events that do not set it, and unchanged
    by a refusal. A row whose owner was changed behind history's back, and a refusal that
    recorded another owner, are found."""
    clock = ManualClock()
    store = open_entity_store(JOB, url, clock=clock)
    first = store.take("j", "lease", owner="w1", lease_seconds=10)
    store.act(store.act(first, "start"), "fail")
    store.take("j", "lease", owner="w2", lease_seconds=10)
    with pytest.raises(StaleClaim):
        store.act(first, "start")
    clock.advance(11)
    store.sweep()
    owners = [(e.event, e.refused, e.owner) for e in store.history("j")]
    assert owners == [
        ("lease", None, "w1"),
        ("start", None, "w1"),
        ("fail", None, "w1"),
        ("lease", None, "w2"),
        ("start", "owner_matches", "w2"),
        ("lapse", None, "w2"),
    ]
    assert store.row("j").owner == "w2"  # type: ignore[union-attr]
    listed = CliRunner().invoke(main, ["history", "job", "--db", url])
    assert listed.exit_code == 0 and " w2 " in listed.output, listed.output
    assert audit_lifecycle(JOB, url).ok
    store.take("k", "lease", owner="w1", lease_seconds=10)
    _set_row(store, "k", owner="someone else")
    store.take("m", "lease", owner="w1", lease_seconds=10)
    _forge(store, "m", 0, "start", "leased", "leased", refused="owner_matches", owner="w9")
    report = audit_lifecycle(JOB, url)
    found = [(v.kind, v.target_id) for v in report.violations]
    assert found == [("row_disagrees", "k"), ("refusal_changed", "m")], report.violations
    assert "owner 'someone else' (history: 'w1')" in report.violations[0].message
    store.close()


def test_the_lease_is_judged_from_history(url: str) -> None:
    """History records the lease each entry leaves, so the audit judges the lease guards
    (``live``, ``lapsed``) by the store's clock at each entry, and the row's lease."""
    clock = ManualClock()
    store = open_entity_store(JOB, url, clock=clock)
    handle = store.take("j", "lease", owner="w", lease_seconds=10)
    deadline = store.row("j").lease_deadline  # type: ignore[union-attr]
    assert deadline == clock() + 10
    assert [e.lease_deadline for e in store.history("j")] == [deadline]
    store.act(handle, "renew", lease_seconds=30)
    renewed = store.row("j").lease_deadline  # type: ignore[union-attr]
    with pytest.raises(StaleClaim):
        store.act(Handle("j", 0, "a stale token"), "start")
    assert [e.lease_deadline for e in store.history("j")] == [deadline, renewed, renewed]
    assert audit_lifecycle(JOB, url).ok
    # A lapse while the lease was live (lease_lapsed did not hold), and a start after it
    # ran out (lease_live did not hold), each written past the store.
    lapsed_at = renewed - 1
    _forge(store, "j", 1, "lapse", "leased", "queued", at=lapsed_at, fp="-", lease=None)
    report = audit_lifecycle(JOB, url)
    assert [v.kind for v in report.violations] == ["live_lease_lapsed", "row_disagrees"]
    assert "lapse leased -> queued: a lease was lapsed before its deadline (lease_lapsed:" in (
        report.violations[0].message
    )
    store.take("k", "lease", owner="w", lease_seconds=10)
    late = store.row("k").lease_deadline + 1  # type: ignore[union-attr]
    holder = store.history("k")[-1].token_fingerprint
    _forge(
        store, "k", 1, "start", "leased", "running", at=late, fp=holder, lease=late - 1, owner="w"
    )
    _set_row(store, "k", state="running")
    kinds = _kinds(url)
    assert kinds["live_lease_lapsed"] == ["j"] and kinds["lapsed_lease_used"] == ["k"]
    # A row whose lease was moved by hand, and a refusal that recorded another lease.
    store.take("m", "lease", owner="w", lease_seconds=10)
    _set_row(store, "m", lease_deadline=clock() + 1000)
    store.take("n", "lease", owner="w", lease_seconds=10)
    _forge(store, "n", 0, "start", "leased", "leased", refused="epoch_current", lease=1.0)
    kinds = _kinds(url)
    assert kinds["row_disagrees"] == ["j", "m"]
    assert kinds["refusal_changed"] == ["n"]
    store.close()


@pytest.mark.parametrize(
    "older",
    [
        ("lease_deadline",),
        ("lease_deadline", "facts", "owner", "request_key", "detail"),
        ("facts",),
        ("owner",),
        ("request_key",),
        ("detail",),
    ],
)
def test_a_history_from_before_leases_facts_owners_or_request_keys_were_recorded(
    url: str, older: tuple[str, ...]
) -> None:
    """A store whose history table predates the lease, facts or owner column is given it
    when opened; its older entries say it was not recorded, and are not judged by it."""
    clock = ManualClock()
    store = open_entity_store(JOB, url, clock=clock)
    store.act(store.take("j", "lease", owner="w", lease_seconds=10), "start")
    store.act(store.take("o", "lease", owner="w", lease_seconds=10), "start")
    clock.advance(11)
    store.sweep()  # j and o lapse while running: orphaned
    store.operate("o", "requeue", facts={"fenced_through": 1})
    # As an earlier claimfsm made it: the same table without those columns.
    store._driver.run_all(
        [f"ALTER TABLE {store.history_table} DROP COLUMN {column}" for column in older]
    )
    store.close()
    report = audit_lifecycle(JOB, url)  # read-only: it reads them as not recorded
    assert report.ok and report.entries == 7, report.violations
    store = open_entity_store(JOB, url, create=False)
    if "lease_deadline" in older:
        assert [e.lease_deadline for e in store.history("j")] == [float("-inf")] * 3
    if "facts" in older:
        assert [e.facts for e in store.history("o")] == [None] * 4
    if "owner" in older:
        assert [e.owner for e in store.history("o")] == [None] * 4
    if "request_key" in older:
        assert [e.request_key for e in store.history("o")] == [None] * 4
    if "detail" in older:
        assert [e.detail for e in store.history("o")] == [None] * 4
    store.close()
    report = audit_lifecycle(JOB, url)
    assert report.ok, report.violations
    shown = CliRunner().invoke(main, ["history", "job", "--db", url, "--json"])
    assert shown.exit_code == 0, shown.output
    entries = [json.loads(line) for line in shown.output.splitlines()]
    for column in older:  # JSON has no infinity
        assert [e[column] for e in entries] == ["not recorded"] * 7
    listed = CliRunner().invoke(main, ["history", "job", "--db", url])
    # (the job draws no request keys: its listing has no column for them; a detail is
    # printed beneath its entry's line where there is one)
    shown = [c for c in older if c not in ("request_key", "detail")]
    assert listed.output.count("not recorded") == 7 * len(shown), listed.output
    # Entries from then on record them, and are judged by them.
    store = open_entity_store(JOB, url, clock=ManualClock())
    store.act(store.take("k", "lease", owner="w", lease_seconds=10), "start")
    assert store.history("k")[-1].lease_deadline == store.row("k").lease_deadline  # type: ignore[union-attr]
    assert store.history("k")[-1].facts == {}
    assert store.history("k")[-1].owner == "w"
    assert store.history("k")[-1].request_key == ""
    assert store.history("k")[-1].detail == ""
    store.close()
    assert audit_lifecycle(JOB, url).ok


def test_the_evidence_a_caller_brought_is_recorded_and_judged(url: str) -> None:
    """history records the facts of each operation; the audit judges a guard comparing a
    fact by them, so a requeue without the evidence its guards need is found."""
    clock = ManualClock()
    store = open_entity_store(JOB, url, clock=clock)
    store.act(store.take("o", "lease", owner="w", lease_seconds=10), "start")
    clock.advance(11)
    store.sweep()
    with pytest.raises(InsufficientEvidence):
        store.operate("o", "requeue", facts={"running": True})
    store.operate("o", "requeue", facts={"fenced_through": 1, "running": True})
    assert [e.facts for e in store.history("o")] == [
        {},
        {},
        {},
        {"fenced_through": 1, "running": True},
    ]
    with pytest.raises(InvalidArgument, match="fact running must be true or false, not 'no'"):
        store.operate("o", "requeue", facts={"running": "no"})
    with pytest.raises(InvalidArgument, match="fact fenced_through must be a whole number"):
        store.operate("o", "requeue", facts={"fenced_through": True})
    listed = CliRunner().invoke(main, ["history", "job", "--db", url])
    assert "fenced_through=1 running=true" in listed.output, listed.output
    assert audit_lifecycle(JOB, url).ok
    # Forged: orphaned again, and requeued with evidence that allows neither guard.
    store.act(store.take("o", "lease", owner="w", lease_seconds=10), "start")
    clock.advance(11)
    store.sweep()
    row = store.row("o")
    assert row is not None and row.state == "orphaned" and row.epoch == 2
    stale_fence = '{"fenced_through":1,"running":true}'
    _forge(store, "o", 2, "requeue", "orphaned", "queued", facts=stale_fence, at=clock(), owner="w")
    _set_row(store, "o", state="queued")
    report = audit_lifecycle(JOB, url)
    assert [(v.kind, v.target_id) for v in report.violations] == [("evidence_not_recorded", "o")]
    assert "requeue" in report.violations[0].message
    store.close()


def test_declared_row_invariants_are_checked_on_history(tmp_path: Path) -> None:
    """With the attempts guard dropped (a wrong variant's store), history shows a fourth
    lease: attempts_bounded is broken, and the audit of the correct declaration says so."""
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    loose = tmp_path / "loose.toml"
    loose.write_text(
        f'base = "{declarations_dir() / "job.toml"}"\nname = "job"\n'
        'description = "no bound on attempts"\n\n'
        '[[drop_guard]]\nevent = "lease"\nguard = "attempts_left"\n'
    )
    clock = ManualClock()
    store = open_entity_store(load_spec(loose), url, clock=clock)
    for _ in range(4):
        store.take("j", "lease", owner="w", lease_seconds=10)
        clock.advance(11)
        store.operate("j", "lapse")
    store.close()
    report = audit_lifecycle(JOB, url)
    kinds = {v.kind for v in report.violations}
    assert kinds == {"count_out_of_range", "invariant_row"}, report.violations
    assert any("attempts_bounded" in v.message for v in report.violations)
    # by its own declaration the fourth lease is legal, and still breaks the invariant
    loose_report = audit_lifecycle(load_spec(loose), url)
    assert {v.kind for v in loose_report.violations} == {"invariant_row"}


def test_the_audit_command_on_a_lifecycle(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    store = _a_busy_store(url, ManualClock())
    store.prune_history(105)
    run = CliRunner().invoke
    out = run(main, ["audit", "job", "--db", url])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("audit: ") and "3 entities, 3 rows" in out.output
    assert "no violations" in out.output
    _set_row(store, "a", epoch=7)
    store.close()
    out = run(main, ["audit", "job", "--db", url, "--json"])
    assert out.exit_code == 1
    found = json.loads(out.output)
    assert found["violations_by_kind"] == {"row_disagrees": 1}
    assert found["violations"][0]["target_id"] == "a"
    out = run(main, ["audit", "job", "--db", f"sqlite:///{tmp_path / 'none.sqlite'}"])
    assert out.exit_code == 1 and "NotFound" in out.output
    empty = tmp_path / "other.sqlite"
    open_entity_store(JOB, f"sqlite:///{empty}", prefix="mine").close()
    with pytest.raises(NotFound, match="no table lc_job"):
        audit_lifecycle(JOB, f"sqlite:///{empty}")


def test_verify_audits_each_programs_history(tmp_path: Path) -> None:
    """A store that records the wrong epoch in history, and otherwise behaves: every row,
    refusal and history count agrees with the model step by step, so only the audit at the
    end of a program can see it; `claimfsm verify` fails there, with the program."""
    url = f"sqlite:///{tmp_path / 'v.sqlite'}"

    def misrecording(clock: ManualClock) -> EntityStore:
        store = open_entity_store(JOB, url, clock=clock, prefix="verify")
        store._sql["append"] = store._sql["append"].replace("VALUES (?, ?,", "VALUES (?, ? + 1,")
        return store

    result = verify(JOB, misrecording, examples=1)  # the first guided path fails
    assert not result.ok
    assert "the audit of the store's history found epoch_order" in result.failure
    assert result.program  # the program that left it, in words
    # (every other verify test runs the same audit on an honest store, and passes)


def test_a_row_invariant_means_in_the_audit_what_it_means_to_the_checker(tmp_path: Path) -> None:
    """With no `states`, a row invariant holds in every state (the initial one too), and
    `epoch` is the entity's epoch: as the checker reads it. A job leased twice breaks
    `one_epoch` (epoch <= 1) at its second lease, in the checker and in the audit alike,
    also after a checkpoint (the epoch is still known, and the columns it records)."""
    from claimfsm.checker import Checker, EntityModelConfig, entity_model

    text = (declarations_dir() / "job.toml").read_text() + (
        '\n[invariants.one_epoch]\nkind = "row"\ncolumn = "epoch"\nop = "<="\nvalue = 1\n'
        'meaning = "a job is leased once"\n'
        '\n[invariants.never_queued_twice]\nkind = "row"\ncolumn = "attempts"\nop = "<="\n'
        'value = 1\nmeaning = "at most one attempt, counted in every state"\n'
    )
    path = tmp_path / "once.toml"
    path.write_text(text.replace('name = "job"', 'name = "once"'))
    spec = load_spec(path)
    found = Checker(entity_model(spec, EntityModelConfig(workers=1, epochs=2))).run()
    assert {"one_epoch", "never_queued_twice"} <= {p.name for p in found.violations}
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    clock = ManualClock()
    store = open_entity_store(spec, url, clock=clock)
    store.act(store.act(store.take("j", "lease", owner="w", lease_seconds=10), "start"), "fail")
    assert audit_lifecycle(spec, url).ok  # queued again, one attempt: both hold
    clock.advance(100)
    store.take("j", "lease", owner="w", lease_seconds=10)
    report = audit_lifecycle(spec, url)
    assert sorted(v.message.split(":")[0] for v in report.violations) == [
        "never_queued_twice",
        "one_epoch",
    ]
    # pruned: the checkpoint keeps the epoch, and in its facts the attempts, so both are
    # still judged on what follows
    clock.advance(100)
    assert store.prune_history(50).checkpoints == 1
    store.operate("j", "lapse")
    report = audit_lifecycle(spec, url)
    assert sorted(v.message.split(":")[0] for v in report.violations) == [
        "never_queued_twice",
        "one_epoch",
    ]
    store.close()


def test_left_only_by_means_in_the_audit_what_it_means_to_the_checker(tmp_path: Path) -> None:
    """The audit and the lifecycle checker read ``left_only_by`` by one function
    (``spec._invariants.leaves_by_another``): with the job's orphan invariant narrowed to
    another event, the requeue a busy store took breaks it in the audit, and the checker
    finds a path that breaks it too."""
    import dataclasses

    from claimfsm.checker import Checker, EntityModelConfig, entity_model

    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    _a_busy_store(url, ManualClock()).close()
    assert audit_lifecycle(JOB, url).ok
    name = "orphan_leaves_only_by_requeue"
    narrowed = dataclasses.replace(
        JOB,
        invariants={
            **JOB.invariants,
            name: dataclasses.replace(JOB.invariants[name], events=("bury",)),
        },
    )
    report = audit_lifecycle(narrowed, url)
    assert [(v.kind, v.target_id) for v in report.violations] == [
        ("invariant_left_only_by", "orphan")
    ]
    assert "left orphaned by requeue" in report.violations[0].message
    checked = Checker(entity_model(narrowed, EntityModelConfig(workers=2, keys=1))).run()
    assert [p.name for p in checked.violations] == [name]


def test_one_walk_pairs_history_with_rows_for_both_audits(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim's audit and a lifecycle's walk a store the same way (``audit._walk``):
    progress counts entries and keys, rows without history and history without a row are
    each judged once, and history out of key order is refused, not misread."""
    import claimfsm.audit._walk as walking
    from claimfsm.errors import StoreError

    store = _a_busy_store(url, ManualClock())
    store.close()
    monkeypatch.setattr(walking, "PROGRESS_EVERY", 7)
    calls: list[tuple[int, int]] = []
    report = audit_lifecycle(JOB, url, progress=lambda n, k: calls.append((n, k)))
    assert report.ok and report.entries == 19
    assert calls == [(7, 1), (14, 3)]  # a: 7 entries; orphan: 5 more; spent's second entry

    class Names:
        def __init__(self) -> None:
            self.seen: list[tuple[str, Any, Any]] = []

        def begin(self, key: str) -> str:
            return key

        def entry(self, track: str, e: tuple[Any, ...], report: Any) -> None:
            self.seen.append(("entry", track, e[0]))

        def finish(self, track: str | None, row: tuple[Any, ...] | None, report: Any) -> None:
            self.seen.append(("finish", track, row))
            if row is None:
                report("history_without_row", (), "no row")

    names, found = Names(), []
    history = [(1, "b", "x"), (2, "b", "y"), (3, "d", "z")]
    rows = [("a", 1), ("b", 2), ("c", 3)]
    counts = walking.walk(names, history, rows, lambda *v: found.append(v))
    assert counts == (3, 2, 3)
    assert names.seen == [  # a key's rows before it are judged when the key closes
        ("entry", "b", 1),
        ("entry", "b", 2),
        ("finish", None, (1,)),
        ("finish", "b", (2,)),
        ("entry", "d", 3),
        ("finish", None, (3,)),
        ("finish", "d", None),
    ]
    assert found == [("history_without_row", "d", (), "no row")]
    with pytest.raises(StoreError, match="out of key order"):
        walking.walk(Names(), [(1, "b"), (2, "a")], [], lambda *v: None)


def test_a_refusal_is_a_stale_owners_and_one_that_is_not_is_found(url: str) -> None:
    """A worker back on a job that was orphaned under it, or requeued, is told it is stale
    (the states are declared ``stale``) and its refusal is recorded as ``state:NAME``; the
    audit holds each recorded refusal to be a stale owner's: a stale guard history shows
    failing, or the stale state the entity was in. Forged refusals that are neither are
    found."""
    clock = ManualClock()
    store = open_entity_store(JOB, url, clock=clock)
    first = store.act(store.take("j", "lease", owner="w1", lease_seconds=10), "start")
    clock.advance(11)
    store.sweep()  # running -> orphaned: w1 may still be running it
    with pytest.raises(StaleClaim, match=r"epoch 1 is orphaned .*drop it and lease again"):
        store.act(first, "succeed")
    store.operate("j", "requeue", facts={"fenced_through": 1})
    with pytest.raises(StaleClaim, match="epoch 1 is queued"):
        store.act(first, "fail")
    history = [(e.event, e.source, e.dest, e.refused) for e in store.history("j")]
    assert history[-4:] == [
        ("lapse", "running", "orphaned", None),
        ("succeed", "orphaned", "orphaned", "state:orphaned"),
        ("requeue", "orphaned", "queued", None),
        ("fail", "queued", "queued", "state:queued"),
    ]
    row = store.row("j")
    assert row is not None and (row.state, row.epoch) == ("queued", 1)
    assert audit_lifecycle(JOB, url).ok

    last = store.history("j")[-1]
    holder, kept = last.token_fingerprint, {"owner": last.owner, "at": clock()}
    # the holder's own token at the current epoch: owner_matches held, nothing was stale
    _forge(store, "j", 1, "start", "queued", "queued", refused="owner_matches", fp=holder, **kept)
    # a stale state the entity was not in; a state not declared stale; a guard not stale
    _forge(store, "j", 1, "start", "queued", "queued", refused="state:orphaned", fp=holder, **kept)
    _forge(store, "j", 1, "start", "queued", "queued", refused="state:running", fp=holder, **kept)
    _forge(store, "j", 1, "start", "queued", "queued", refused="lease_live", fp=holder, **kept)
    found = [v for v in audit_lifecycle(JOB, url).violations if v.target_id == "j"]
    assert [v.kind for v in found] == ["refusal_unexplained"] * 4
    assert [v.message.split(", ", 1)[1] for v in found] == [
        "but history shows it holding: the caller held the epoch",
        "but the entity was queued",
        "but the entity was queued",
        "but that is no guard declared stale",
    ]
    store.close()
