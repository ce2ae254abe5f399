"""``claimfsm audit``: an honest history passes; each kind of corruption is found, named,
and located; the database is only read.

Corruptions are made with plain SQL on a real store's file (or schema), as a bug, a
hand-edit or a restore gone wrong would make them. Inserting history is allowed by the
store's triggers; changing or deleting it is not, so those tests lift the trigger first,
as someone bypassing the store would.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from claimfsm.audit import PROGRESS_EVERY, audit
from claimfsm.cli import main
from claimfsm.errors import (
    InvalidArgument,
    NotFound,
    SchemaVersionError,
    StaleClaim,
    StoreError,
)
from claimfsm.store import Evidence, Store, open_store

from .conftest import FakeClock, approved_draft, drop_schema, pg_schema_url

HISTORY = (
    "target_id, epoch, event, from_state, to_state, at, owner, token_fp, draft_id,"
    " draft_version, draft_digest, idempotency_key, lease_deadline, outcome, detail,"
    " attempted, refused"
)


def honest_history(store: Store, clock: FakeClock) -> dict[str, Any]:
    """Three targets: a confirmed epoch then a live reserved one; an uncertain epoch
    reconciled by readback; an expired epoch, its stale owner refused, then a new epoch."""
    a = store.acquire("a", approved_draft(store, "a"), "w1", 30)
    a.begin_send()
    a.confirm()
    a2 = store.acquire("a", approved_draft(store, "a"), "w2", 30)
    a2.renew(lease_seconds=60)
    b = store.acquire("b", approved_draft(store, "b"), "w1", 30)
    b.begin_send()
    b.mark_uncertain("timed out")
    store.reconcile("b", b.epoch, Evidence.present())
    c = store.acquire("c", approved_draft(store, "c"), "w1", 30)
    clock.advance(31)
    c2 = store.acquire("c", approved_draft(store, "c"), "w2", 30)  # lapses epoch 1 first
    with pytest.raises(StaleClaim):
        c.begin_send()  # the stale owner: refused and recorded
    return {"a": a2, "b": b, "c": c2}


class Db:
    """A store's database, corrupted by SQL: SQLite file or PostgreSQL schema."""

    def __init__(self, url: str, sql: Callable[[str, tuple[Any, ...]], Any], param: str) -> None:
        self.url = url
        self._sql = sql
        self.param = param

    def run(self, statement: str, *args: Any) -> Any:
        return self._sql(statement.replace("?", self.param), args)

    def last(self, target: str) -> tuple[Any, ...]:
        return tuple(
            self.run(
                f"SELECT {HISTORY} FROM {{h}} WHERE target_id = ? ORDER BY seq DESC LIMIT 1",  # noqa: S608
                target,
            )[0]
        )

    def append(self, row: tuple[Any, ...], **changes: Any) -> None:
        names = [n.strip() for n in HISTORY.split(",")]
        values = list(row)
        for key, value in changes.items():
            values[names.index(key)] = value
        marks = ", ".join("?" for _ in values)
        self.run(f"INSERT INTO {{h}} ({HISTORY}) VALUES ({marks})", *values)  # noqa: S608


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Db, Store, FakeClock]]:
    clock = FakeClock(1000.0)
    if request.param == "sqlite":
        path = tmp_path / "claims.sqlite"
        store = open_store(f"sqlite:///{path}", clock=clock)

        def sql(statement: str, args: tuple[Any, ...]) -> Any:
            statement = statement.replace("{h}", "history").replace("{c}", "claims")
            with sqlite3.connect(path) as conn:
                return conn.execute(statement, args).fetchall()

        yield Db(f"sqlite:///{path}", sql, "?"), store, clock
        store.close()
        return
    database = request.getfixturevalue("pg_database")
    import psycopg

    schema, url = pg_schema_url(database)
    store = open_store(url, clock=clock)

    def pg(statement: str, args: tuple[Any, ...]) -> Any:
        statement = statement.replace("{h}", f"{schema}.history").replace("{c}", f"{schema}.claims")
        with psycopg.connect(database, autocommit=True) as conn:
            cur = conn.execute(statement, args)
            return cur.fetchall() if cur.description else []

    yield Db(url, pg, "%s"), store, clock
    store.close()
    drop_schema(database, schema)


def kinds(url: str) -> list[tuple[str, str]]:
    return [(v.kind, v.target_id) for v in audit(url).violations]


def test_an_honest_history_passes(db: tuple[Db, Store, FakeClock]) -> None:
    d, store, clock = db
    honest_history(store, clock)
    found = audit(d.url)
    assert found.ok and found.violations == []
    assert (found.entries, found.targets, found.claims) == (len(store.history()), 3, 3)
    assert {e.event for e in store.history()} >= {"discard", "lapse", "reconcile", "renew"}


def test_a_forged_transition_by_a_stale_token_is_found(db: tuple[Db, Store, FakeClock]) -> None:
    d, store, clock = db
    honest_history(store, clock)
    last = d.last("a")  # epoch 2, reserved, renewed: forge its begin_send by another token
    d.append(
        last, event="begin_send", from_state="reserved", to_state="sending", token_fp="0bad0bad"
    )
    found = audit(d.url)
    assert [(v.kind, v.target_id) for v in found.violations] == [
        ("stale_owner_changed", "a"),
        ("row_disagrees", "a"),  # and the claim row is not what history says
    ]
    assert "does not hold the epoch" in found.violations[0].message


def test_a_transition_of_a_superseded_epoch_is_found(db: tuple[Db, Store, FakeClock]) -> None:
    d, store, clock = db
    honest_history(store, clock)
    last = d.last("a")
    d.append(last, epoch=1, event="renew", from_state="reserved", to_state="reserved")
    assert kinds(d.url) == [("stale_epoch_changed", "a"), ("row_disagrees", "a")]


def test_epochs_that_do_not_increase_are_found(db: tuple[Db, Store, FakeClock]) -> None:
    d, store, clock = db
    honest_history(store, clock)
    last = d.last("b")  # reconciled: free, so only the epoch number is wrong
    d.append(last, epoch=1, event="acquire", from_state="unclaimed", to_state="reserved")
    found = audit(d.url)
    assert [v.kind for v in found.violations] == ["epoch_order", "row_disagrees"]
    assert "epoch 1 follows epoch 1; expected 2" in found.violations[0].message


def test_leaving_uncertain_without_evidence_is_found(db: tuple[Db, Store, FakeClock]) -> None:
    d, store, _clock = db
    b = store.acquire("b", approved_draft(store, "b"), "w1", 30)
    b.begin_send()
    b.mark_uncertain()
    d.append(d.last("b"), event="reconcile", from_state="uncertain", to_state="reconciled")
    # (outcome stays NULL: no readback recorded)
    assert kinds(d.url) == [("evidence_not_recorded", "b"), ("row_disagrees", "b")]


def test_an_undeclared_transition_is_found(db: tuple[Db, Store, FakeClock]) -> None:
    d, store, _clock = db
    a = store.acquire("a", approved_draft(store, "a"), "w1", 30)
    d.append(d.last("a"), event="confirm", from_state="reserved", to_state="confirmed")
    found = audit(d.url)
    assert found.violations[0].kind == "undeclared_transition"
    assert "confirm from reserved to confirmed is not declared" in found.violations[0].message
    assert a.state == "reserved"


def test_a_lapsed_lease_used_and_a_live_lease_lapsed_are_found(
    db: tuple[Db, Store, FakeClock],
) -> None:
    d, store, _clock = db
    a = store.acquire("a", approved_draft(store, "a"), "w1", 30)
    b = store.acquire("b", approved_draft(store, "b"), "w1", 30)
    # begin_send at the deadline (the lease is live strictly before it)
    d.append(d.last("a"), event="begin_send", to_state="sending", from_state="reserved", at=1030.0)
    # a lapse a second before the deadline
    d.append(d.last("b"), event="lapse", from_state="reserved", to_state="expired", at=1029.0)
    assert [k for k, _ in kinds(d.url)] == [
        "lapsed_lease_used",
        "row_disagrees",
        "live_lease_lapsed",
        "row_disagrees",
    ]
    assert (a.lease_deadline, b.lease_deadline) == (1030.0, 1030.0)


def test_an_acquire_of_a_busy_target_is_found(db: tuple[Db, Store, FakeClock]) -> None:
    d, store, _clock = db
    store.acquire("a", approved_draft(store, "a"), "w1", 30)  # reserved, live
    d.append(d.last("a"), epoch=2, event="acquire", from_state="unclaimed", token_fp="22222222")
    assert kinds(d.url)[0] == ("target_not_free", "a")


def test_a_claim_row_changed_behind_historys_back_is_found(
    db: tuple[Db, Store, FakeClock],
) -> None:
    d, store, clock = db
    honest_history(store, clock)
    d.run("UPDATE {c} SET state = 'released' WHERE target_id = ?", "b")
    found = audit(d.url)
    assert [(v.kind, v.target_id) for v in found.violations] == [("row_disagrees", "b")]
    assert "state: history 'reconciled', claim 'released'" in found.violations[0].message


def test_a_claim_without_history_and_history_without_a_claim_are_found(
    db: tuple[Db, Store, FakeClock],
) -> None:
    d, store, clock = db
    honest_history(store, clock)
    draft = approved_draft(store, "z")
    d.run(
        "INSERT INTO {c} (target_id, epoch, state, owner, token_hash, draft_id, draft_version,"
        " draft_digest, idempotency_key, lease_deadline, outcome, updated_at)"
        " VALUES ('0-first', 1, 'reserved', 'w', 'hash', ?, 1, 'd', 'k', 0, NULL, 0)",
        draft,
    )
    d.run("DELETE FROM {c} WHERE target_id = ?", "c")
    assert kinds(d.url) == [
        ("row_without_history", "0-first"),
        ("history_without_row", "c"),
    ]


def test_removed_history_is_found_unless_pruning_left_a_checkpoint(
    db: tuple[Db, Store, FakeClock],
) -> None:
    d, store, clock = db
    honest_history(store, clock)
    clock.advance(100)
    store.acquire("d", approved_draft(store, "d"), "w", 30)
    pruned = store.prune_history(50)  # everything older than 50 s, checkpoints kept
    assert pruned.entries > 0 and pruned.checkpoints == 3
    assert audit(d.url).ok  # a pruned history still audits clean
    assert audit(d.url).entries == len(store.history())
    # A checkpoint anywhere but first, and a removed prefix without one, are not clean.
    d.append(d.last("a"), event="checkpoint", from_state="reserved", to_state="reserved")
    assert kinds(d.url) == [("checkpoint_misplaced", "a")]


def test_a_removed_entry_breaks_the_path(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    path = tmp_path / "claims.sqlite"
    store = open_store(f"sqlite:///{path}", clock=clock)
    for epoch in (1, 2):
        claim = store.acquire("a", approved_draft(store, "a"), f"w{epoch}", 30)
        claim.begin_send()
        claim.confirm()
    store.close()
    with sqlite3.connect(path) as conn:  # bypass the store's append-only trigger
        conn.execute("DROP TRIGGER history_no_delete")
        conn.execute("DELETE FROM history WHERE event = 'begin_send' AND epoch = 2")
    found = audit(f"sqlite:///{path}")
    assert [v.kind for v in found.violations] == ["broken_path"]
    assert found.violations[0].message == "confirm from sending, but the target was reserved"
    assert len(found.violations[0].seqs) == 2  # the entries involved: the last kept, this one
    with sqlite3.connect(path) as conn:  # a whole epoch gone, not by pruning
        conn.execute("DELETE FROM history WHERE epoch = 1")
    message = audit(f"sqlite:///{path}").violations[0].message
    assert message == (
        "epoch 2 follows epoch 0; expected 1 (or a checkpoint, where history was pruned)"
    )


def test_audit_only_reads(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    clock = FakeClock()
    store = open_store(f"sqlite:///{path}", clock=clock)
    honest_history(store, clock)
    store.close()
    before = path.read_bytes()
    assert audit(f"sqlite:///{path}").ok
    assert path.read_bytes() == before
    # A reader of a WAL database may leave SQLite's index (-shm) and an empty log behind.
    wal = tmp_path / "claims.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    assert {p.name for p in tmp_path.iterdir()} <= {path.name, wal.name, path.name + "-shm"}
    path.chmod(0o444)  # a file the auditor may not write is fine
    try:
        assert audit(f"sqlite:///{path}").ok
    finally:
        path.chmod(0o644)


def test_bad_urls_and_databases_get_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="no database at"):
        audit(f"sqlite:///{tmp_path / 'missing.sqlite'}")
    assert not (tmp_path / "missing.sqlite").exists()  # nothing created
    (tmp_path / "notes.txt").write_text("not a database")
    with pytest.raises(StoreError, match="not a SQLite database"):
        audit(f"sqlite:///{tmp_path / 'notes.txt'}")
    with sqlite3.connect(tmp_path / "other.sqlite") as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError, match="not a claimfsm database"):
        audit(f"sqlite:///{tmp_path / 'other.sqlite'}")
    with pytest.raises(InvalidArgument, match="audit reads sqlite"):
        audit("memory://")
    with pytest.raises(InvalidArgument, match="keep"):
        audit(f"sqlite:///{tmp_path / 'x'}", keep=-1)
    store = open_store(f"sqlite:///{tmp_path / 'v.sqlite'}")
    store.close()
    with sqlite3.connect(tmp_path / "v.sqlite") as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(SchemaVersionError, match="version 99"):
        audit(f"sqlite:///{tmp_path / 'v.sqlite'}")


def test_a_missing_postgresql_schema_is_named(pg_database: str) -> None:
    with pytest.raises(NotFound, match="no claimfsm schema 'nothing_here'"):
        audit(f"{pg_database}?schema=nothing_here")


def test_the_command_reports_violations_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    clock = FakeClock(1000.0)
    store = open_store(f"sqlite:///{path}", clock=clock)
    honest_history(store, clock)
    store.close()
    runner = CliRunner()
    ok = runner.invoke(main, ["audit", "--db", f"sqlite:///{path}"])
    assert ok.exit_code == 0, ok.output
    assert "3 targets, 3 claim rows" in ok.output and "no violations" in ok.output
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE claims SET epoch = 7 WHERE target_id = 'a'")
        conn.execute("UPDATE claims SET epoch = 7 WHERE target_id = 'b'")
    bad = runner.invoke(main, ["audit", "--db", f"sqlite:///{path}", "--show", "1"])
    assert bad.exit_code == 1
    assert "2 violations" in bad.output
    assert "row_disagrees: 2 (the row is not what its history leaves)" in bad.output
    assert "[row_disagrees] target 'a', entries" in bad.output
    assert "1 more not shown; --show N" in bad.output
    as_json = runner.invoke(main, ["audit", "--db", f"sqlite:///{path}", "--json"])
    assert as_json.exit_code == 1
    result = json.loads(as_json.output)
    assert result["ok"] is False and result["violations_total"] == 2
    assert [v["target_id"] for v in result["violations"]] == ["a", "b"]
    missing = runner.invoke(main, ["audit", "--db", f"sqlite:///{tmp_path / 'nope.sqlite'}"])
    assert missing.exit_code == 1 and "NotFound: no database at" in missing.output
    assert "Traceback" not in missing.output


def test_progress_is_reported_while_streaming(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    store = open_store(f"sqlite:///{path}")
    claim = store.acquire("a", approved_draft(store, "a"), "w", 3600)
    store.close()
    with sqlite3.connect(path) as conn:  # a long, legal history: renewals of one lease
        row = conn.execute(f"SELECT {HISTORY} FROM history").fetchone()  # noqa: S608
        renew = (*row[:2], "renew", "reserved", "reserved", *row[5:])
        conn.executemany(
            f"INSERT INTO history ({HISTORY}) VALUES ({', '.join('?' * len(row))})",  # noqa: S608
            [renew] * (2 * PROGRESS_EVERY),
        )
    calls: list[tuple[int, int]] = []
    found = audit(f"sqlite:///{path}", progress=lambda n, t: calls.append((n, t)))
    assert found.ok and found.entries == 2 * PROGRESS_EVERY + 1
    assert calls == [(PROGRESS_EVERY, 1), (2 * PROGRESS_EVERY, 1)]
    assert claim.epoch == 1


def test_both_audits_name_their_violations_from_one_list() -> None:
    """The claim's audit and a lifecycle's report by one vocabulary (``audit.VIOLATIONS``):
    every kind either rule set names is in it, a failing guard of each witnessed kind
    names the same violation in both, and the README's audit section names every kind."""
    import ast

    import claimfsm.audit as package
    from claimfsm.audit import VIOLATIONS
    from claimfsm.audit._entity import COLUMN_READERS, LEASE_READERS
    from claimfsm.audit._entity import WITNESSED as ENTITY_WITNESSED
    from claimfsm.audit._kinds import broken
    from claimfsm.audit._rules import WITNESSED as CLAIM_WITNESSED
    from claimfsm.spec import shipped

    here = Path(package.__file__).parent
    reported: set[str] = set()
    for module in ("_rules.py", "_entity.py"):
        tree = ast.parse((here / module).read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "report"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                reported.add(node.args[0].value)
    assert reported and reported <= set(VIOLATIONS), reported - set(VIOLATIONS)
    judged = CLAIM_WITNESSED | ENTITY_WITNESSED | LEASE_READERS | COLUMN_READERS
    for spec in shipped().values():
        for name, guard in spec.guards.items():
            if guard.kind in judged:
                assert broken(name, guard)[0] in VIOLATIONS, name
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    section = readme[readme.index("## Audit") : readme.index("## Benchmarks")]
    assert [k for k in VIOLATIONS if f"`{k}`" not in section] == []


def test_left_only_by_means_in_the_audit_what_it_means_to_the_checker(
    db: tuple[Db, Store, FakeClock],
) -> None:
    """The claim's audit judges the declared ``left_only_by`` invariants on each
    transition, as a lifecycle's audit and the checkers read them (one function): with
    ``uncertain_left_only_with_evidence`` narrowed to retry, the reconcile an honest store
    took breaks it in the audit, and the claim checker finds a path that breaks it too."""
    import dataclasses

    from claimfsm.checker import Checker, ClaimModelConfig, claim_model
    from claimfsm.spec import claim_spec

    d, store, clock = db
    honest_history(store, clock)
    assert audit(d.url).ok
    claim = claim_spec()
    name = "uncertain_left_only_with_evidence"
    narrowed = dataclasses.replace(
        claim,
        invariants={
            **claim.invariants,
            name: dataclasses.replace(claim.invariants[name], events=("retry",)),
        },
    )
    found = audit(d.url, spec=narrowed)
    assert [(v.kind, v.target_id) for v in found.violations] == [("invariant_left_only_by", "b")]
    assert f"{name}: left uncertain by reconcile" in found.violations[0].message
    checked = Checker(claim_model(narrowed, ClaimModelConfig(workers=1, drafts=1))).run()
    assert name in [p.name for p in checked.violations]


def test_a_discard_no_stale_owner_could_make_is_found(db: tuple[Db, Store, FakeClock]) -> None:
    """A discard records a stale owner's refusal, by the declaration's rule the store
    records by: one by the token that holds the current, live, reserved epoch (which no
    event's stale guard refuses and no stale state explains) is found, and a discard of
    the same epoch by another token is not."""
    d, store, clock = db
    honest_history(store, clock)
    last = d.last("a")  # epoch 2, reserved, renewed, held by w2's token
    d.append(last, event="discard", from_state="reserved", to_state="reserved", token_fp="0bad")
    d.append(last, event="discard", from_state="reserved", to_state="reserved")
    found = audit(d.url)
    assert [(v.kind, v.target_id) for v in found.violations] == [("refusal_unexplained", "a")]
    assert "by the token that holds it, reserved" in found.violations[0].message


def test_a_discards_record_is_judged_as_a_lifecycles_refusal_is(
    db: tuple[Db, Store, FakeClock],
) -> None:
    """A discard names the event attempted and what the declaration's rule named; the
    audit judges that record on the row as history leaves it (``unexplained_refusal``,
    the lifecycle audit's judge): the honest one passes, and each wrong name is found."""
    d, store, clock = db
    honest_history(store, clock)
    (recorded,) = [e for e in store.history("c") if e.event == "discard"]
    assert (recorded.attempted, recorded.refused) == ("begin_send", "owner_matches")
    assert audit(d.url).ok
    last = d.last("a")  # epoch 2, reserved, renewed, held by w2's token
    discard = {"event": "discard", "from_state": "reserved", "to_state": "reserved"}
    stale = {**discard, "token_fp": "0bad"}
    d.append(last, **stale, attempted="begin_send", refused="owner_matches")  # honest
    d.append(last, **stale, attempted="renew", refused="owner_matches")  # honest
    forged = [
        ({**stale, "refused": "epoch_current"}, "not every transition of begin_send from"),
        ({**stale, "refused": "lease_live"}, "no guard declared stale"),
        ({**stale, "attempted": "launch"}, "no event 'launch' is declared"),
        ({**stale, "refused": "state:reserved"}, "reserved is not declared stale"),
        ({**stale, "refused": "state:expired"}, "but the target was reserved"),
        ({**stale, "refused": None}, "names only one of the event and the guard"),
        (discard, "history shows it holding"),  # the token that holds the epoch
    ]
    for changes, _ in forged:
        d.append(last, **{"attempted": "begin_send", "refused": "owner_matches", **changes})
    found = audit(d.url)
    assert [v.kind for v in found.violations] == ["refusal_unexplained"] * len(forged)
    for violation, (_, why) in zip(found.violations, forged, strict=True):
        assert why in violation.message, violation.message
