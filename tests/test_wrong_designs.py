"""The known-wrong SQL designs of docs/design.md, reproduced on real SQLite so they fail visibly,
next to claimfsm's schema and claim doing the right thing in the same situation."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from claimfsm.errors import TargetBusy
from claimfsm.store import SQLiteStore

from .conftest import FakeClock, approved_draft

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
