"""The known-wrong SQL designs of docs/design.md, reproduced on real SQLite so they fail visibly,
next to claimfsm's schema and claim doing the right thing in the same situation."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from claimfsm.errors import SpecError, TargetBusy
from claimfsm.machine import ClaimMachine
from claimfsm.spec import (
    RETIRED_MODEL_OPTIONS,
    Spec,
    claim_spec,
    declarations_dir,
    designs,
    differences,
    load_spec,
)
from claimfsm.spec._roles import lifecycle_problem
from claimfsm.store import MemoryStore, SQLiteStore, Store

from .conftest import FakeClock, approved_draft, drop_schema, pg_schema_url

DRAFTS = """
CREATE TABLE drafts (
    id INTEGER PRIMARY KEY, target_id TEXT NOT NULL, status TEXT NOT NULL
)"""


def test_partial_unique_index_refuses_the_second_pending_draft(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "wrong.sqlite")
    db.execute(DRAFTS)
    db.execute(
        "CREATE UNIQUE INDEX one_live_draft ON drafts (target_id)"
        " WHERE status IN ('pending', 'approved', 'dispatched')"
    )
    db.execute("INSERT INTO drafts (target_id, status) VALUES ('acct', 'pending')")
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        db.execute("INSERT INTO drafts (target_id, status) VALUES ('acct', 'pending')")
    db.close()


def test_claimfsm_lets_pending_and_approved_drafts_coexist(
    tmp_path: Path, clock: FakeClock
) -> None:
    store = SQLiteStore(tmp_path / "right.sqlite", clock=clock)
    pending = [store.create_draft("acct", f"p{i}") for i in range(2)]
    approved = [approved_draft(store, "acct", f"a{i}") for i in range(2)]
    assert len(store.drafts("acct", status="pending")) == len(pending) == 2
    assert len(store.drafts("acct", status="approved")) == len(approved) == 2
    store.close()


def test_update_returning_as_the_claim_claims_both_approved_drafts(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "wrong.sqlite")
    db.execute(DRAFTS)
    db.executemany(
        "INSERT INTO drafts (target_id, status) VALUES (?, ?)",
        [("acct", "approved"), ("acct", "approved")],
    )
    ids = db.execute(
        "UPDATE drafts SET status = 'dispatched' WHERE target_id = ? AND status = 'approved'"
        " RETURNING id",
        ("acct",),
    ).fetchall()
    assert len(ids) == 2  # two ids back: two dispatches for one target
    db.close()


def test_claimfsm_claims_one_draft_per_target(tmp_path: Path, clock: FakeClock) -> None:
    store = SQLiteStore(tmp_path / "right.sqlite", clock=clock)
    first, second = approved_draft(store, "acct", "a"), approved_draft(store, "acct", "b")
    claim = store.acquire("acct", first, "w1", 30)
    with pytest.raises(TargetBusy):
        store.acquire("acct", second, "w2", 30)
    assert store.get_claim("acct").draft_id == claim.draft_id == first  # type: ignore[union-attr]
    store.close()


# -- the two designs as declarations that every store honours ---------------------------------


def _stores(
    tmp_path: Path, spec: Spec, request: pytest.FixtureRequest
) -> Iterator[tuple[str, Store, FakeClock]]:
    """A store of every backend running ``spec``: memory, SQLite and PostgreSQL."""
    for backend in ("memory", "sqlite", "postgresql"):
        clock = FakeClock(1000.0)
        machine = ClaimMachine(spec)
        store: Store
        schema = None
        if backend == "memory":
            store = MemoryStore(clock=clock, machine=machine)
        elif backend == "sqlite":
            store = SQLiteStore(tmp_path / f"{spec.name}.sqlite", clock=clock, machine=machine)
        else:
            from claimfsm.store._postgres import PostgresStore

            database = request.getfixturevalue("pg_database")
            schema, url = pg_schema_url(database)
            store = PostgresStore(url, clock=clock, machine=machine, pool_size=1)
        try:
            yield backend, store, clock
        finally:
            store.close()
            if schema is not None:
                drop_schema(database, schema)


def test_one_live_draft_per_target_is_declared_and_every_store_refuses_a_second(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """partial_unique_index differs from claim.toml by ``[drafts] one_live_per_target``; a
    store running it refuses a second pending or approved draft for a target, as the index
    would, and takes one again once the first is dispatched. The correct design takes
    both."""
    wrong = designs()["partial_unique_index"]
    assert differences(claim_spec(), wrong).lines() == ["drafts: one_live_per_target false → true"]
    for backend, store, _clock in _stores(tmp_path, wrong, request):
        first = approved_draft(store, "acct", "one")
        with pytest.raises(TargetBusy, match=r"already has a live draft .*one_live_per_target"):
            store.create_draft("acct", "two")
        assert [d.draft_id for d in store.drafts("acct")] == [first], backend
        store.create_draft("other", "elsewhere")  # another target is unaffected
        claim = store.acquire("acct", first, "w", 30).begin_send().confirm()
        assert store.get_draft(claim.draft_id).status == "dispatched"
        store.create_draft("acct", "after the dispatch")  # no live draft left
    for backend, store, _clock in _stores(tmp_path, claim_spec(), request):
        approved_draft(store, "acct", "one")
        store.create_draft("acct", "two")
        assert len(store.drafts("acct")) == 2, backend


def test_a_retry_with_a_fresh_key_is_declared_and_every_store_writes_the_new_key(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """fresh_key_retry differs from claim.toml by retry's guards and by ``fresh_key`` in
    what retry writes: a store running it leaves uncertain without a deduping remote and
    sends the retry under a new key. The correct design keeps the key."""
    wrong = designs()["fresh_key_retry"]
    assert "fresh_key" in wrong.effects["retry"].sets
    assert "fresh_key" not in claim_spec().effects["retry"].sets
    for spec, dedups in ((wrong, False), (claim_spec(), True)):
        for backend, store, _clock in _stores(tmp_path, spec, request):
            draft = approved_draft(store)
            sent = store.acquire("acct", draft, "w", 30).begin_send().mark_uncertain()
            again = store.retry(
                "acct", sent.epoch, owner="w2", lease_seconds=30, remote_dedups=dedups
            )
            assert again.state == "sending" and again.epoch == sent.epoch, backend
            info = store.get_claim("acct")
            assert info is not None and info.idempotency_key == again.idempotency_key
            if spec is wrong:
                assert again.idempotency_key != sent.idempotency_key, backend
                assert again.idempotency_key.startswith("cf-fresh-")
            else:
                assert again.idempotency_key == sent.idempotency_key, backend


def test_the_retired_model_options_are_refused_with_what_declares_them(tmp_path: Path) -> None:
    """No wrong design is a flag of the checker's code: a variant's old ``[model]`` table is
    refused, naming the declaration that replaces each option."""
    base = declarations_dir() / "claim.toml"
    for option, declared in RETIRED_MODEL_OPTIONS.items():
        path = tmp_path / f"{option}.toml"
        path.write_text(f'base = "{base}"\ndescription = "old"\n[model]\n{option} = true\n')
        with pytest.raises(SpecError, match="declared now") as caught:
            load_spec(path)
        assert declared in str(caught.value) and str(path) in str(caught.value)
    for spec in designs().values():
        assert differences(claim_spec(), spec).lines(), spec.name
    assert not any(
        "[model]" in p.read_text() for p in (declarations_dir() / "wrong").glob("*.toml")
    )
    own = tmp_path / "own.toml"
    own.write_text(
        'name = "own"\ninitial = "a"\n[states.a]\nmeaning = "a"\n[states.b]\nmeaning = "b"\n'
        '[[transitions]]\nevent = "go"\nsource = "a"\ndest = "b"\n'
        "[drafts]\none_live_per_target = true\n"
    )
    assert "[drafts] is declared, and no taker's event pins a draft" in str(
        lifecycle_problem(load_spec(own))
    )
    bad = tmp_path / "bad.toml"
    bad.write_text(base.read_text().replace("one_live_per_target = false", "one_live = 1"))
    with pytest.raises(SpecError, match=r"\[drafts\]: unknown keys \['one_live'\]"):
        load_spec(bad)
