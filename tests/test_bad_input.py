"""Bad input to every public call: a ClaimFSMError subclass, and nothing written."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claimfsm.errors import ClaimFSMError, InvalidArgument, NotFound
from claimfsm.store import Evidence, SQLiteStore, Store, open_store

from .conftest import Backend, FakeClock, approved_draft

BAD_IDS: list[Any] = [None, 1, b"acct", "", "x" * 201, "a\x00b", "tab\there", "\ud800", ["a"]]
BAD_INTS: list[Any] = [None, 0, -1, 1.5, "1", True, 2**63, math.nan]
BAD_LEASES: list[Any] = [None, 0, -1, math.nan, math.inf, "10", True, 10**9]


def dump(store: Store) -> object:
    """Everything a store holds, as its public reads see it (and SQLite's SQL dump too)."""
    snapshot: list[object] = [store.history(), store.claims()]
    snapshot += [store.drafts(t) for t in ("acct", "acct2")]
    if isinstance(store, SQLiteStore):
        db = sqlite3.connect(store.path)
        snapshot.append(list(db.iterdump()))
        db.close()
    return snapshot


@pytest.fixture
def seeded(backend: Backend) -> tuple[Store, Any]:
    store = backend.open()
    claim = store.acquire("acct", approved_draft(store), "w", 30)
    return store, claim


def calls(store: Store, claim: Any) -> dict[str, Callable[[Any], Any]]:
    """One call per public entry point, with the argument under test in one position."""
    draft = claim.draft_id
    return {
        "create_draft.target": lambda v: store.create_draft(v, "c"),
        "create_draft.content": lambda v: store.create_draft("acct", v),
        "edit_draft.id": lambda v: store.edit_draft(v, "c"),
        "edit_draft.content": lambda v: store.edit_draft(draft, v),
        "approve_draft.id": lambda v: store.approve_draft(v),
        "get_draft.id": lambda v: store.get_draft(v),
        "acquire.target": lambda v: store.acquire(v, draft, "w", 30),
        "acquire.draft": lambda v: store.acquire("acct2", v, "w", 30),
        "acquire.owner": lambda v: store.acquire("acct2", draft, v, 30),
        "acquire.lease": lambda v: store.acquire("acct2", draft, "w", v),
        "resume.target": lambda v: store.resume(v, claim.epoch, claim.token),
        "resume.epoch": lambda v: store.resume("acct", v, claim.token),
        "resume.token": lambda v: store.resume("acct", claim.epoch, v),
        "renew.lease": lambda v: claim.renew(v),
        "mark_uncertain.reason": lambda v: claim.mark_uncertain(v),
        "reconcile.target": lambda v: store.reconcile(v, 1, Evidence.present()),
        "reconcile.epoch": lambda v: store.reconcile("acct", v, Evidence.present()),
        "reconcile.evidence": lambda v: store.reconcile("acct", 1, v),
        "retry.lease": lambda v: store.retry(
            "acct", 1, owner="w", lease_seconds=v, remote_dedups=True
        ),
        "get_claim.target": lambda v: store.get_claim(v),
        "history.target": lambda v: store.history(v) if v is not None else store.history(1),  # type: ignore[arg-type]
        "claims.state": lambda v: store.claims(state=v if v is not None else "nope"),
    }


def bad_values(name: str) -> list[Any]:
    arg = name.split(".")[1]
    if arg in ("target", "owner"):
        return BAD_IDS
    if arg in ("id", "draft", "epoch"):
        return BAD_INTS
    if arg == "lease":
        return BAD_LEASES
    if arg == "content":
        return [None, b"bytes", "\ud800", "x" * (1 << 20 + 1)]
    if arg == "token":
        return [None, "", "short", "x" * 43 + "y", 42, "é" * 43]
    if arg == "reason":
        return [None, 5, "x" * 1001, "bell\x07"]
    if arg == "evidence":
        return [None, "effect present", Evidence("maybe"), True]  # type: ignore[arg-type]
    if arg == "state":
        return [None, "", "SENDING", 3]
    raise AssertionError(name)


@pytest.mark.parametrize(
    "name",
    [
        "create_draft.target",
        "create_draft.content",
        "edit_draft.id",
        "edit_draft.content",
        "approve_draft.id",
        "get_draft.id",
        "acquire.target",
        "acquire.draft",
        "acquire.owner",
        "acquire.lease",
        "resume.target",
        "resume.epoch",
        "resume.token",
        "renew.lease",
        "mark_uncertain.reason",
        "reconcile.target",
        "reconcile.epoch",
        "reconcile.evidence",
        "retry.lease",
        "get_claim.target",
        "history.target",
        "claims.state",
    ],
)
def test_bad_argument_is_a_clear_error_and_writes_nothing(
    seeded: tuple[Store, Any], name: str
) -> None:
    store, claim = seeded
    table = calls(store, claim)
    assert set(table) >= {name}
    before = dump(store)
    for value in bad_values(name):
        with pytest.raises(ClaimFSMError) as caught:
            table[name](value)
        assert isinstance(caught.value, InvalidArgument | NotFound), (name, value, caught.value)
        assert str(caught.value)
        assert dump(store) == before, (name, value)


def test_unknown_ids_are_not_found(seeded: tuple[Store, Any]) -> None:
    store, _ = seeded
    before = dump(store)
    for call in (
        lambda: store.get_draft(999),
        lambda: store.approve_draft(999),
        lambda: store.acquire("acct", 999, "w", 30),
        lambda: store.reconcile("ghost", 1, Evidence.present()),
    ):
        with pytest.raises(NotFound):
            call()
    assert dump(store) == before


@settings(max_examples=150, deadline=None)
@given(
    target=st.text(max_size=300),
    owner=st.text(max_size=150),
    lease=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers()),
)
def test_any_text_or_number_is_handled(target: str, owner: str, lease: float) -> None:
    store = open_store("sqlite://:memory:", clock=FakeClock())
    draft = approved_draft(store, "acct")
    try:
        claim = store.acquire(target, draft, owner, lease)
    except ClaimFSMError:
        assert store.claims() == []  # refused: nothing written
        return
    finally:
        store.close()
    assert claim.target_id == target and claim.owner == owner  # accepted intact


def test_open_store_rejects_unknown_urls() -> None:
    for url in ("redis://x", "sqlite:", "", "mysql://"):
        with pytest.raises(InvalidArgument, match="unsupported store url"):
            open_store(url)
    with pytest.raises(InvalidArgument):
        open_store(42)  # type: ignore[arg-type]
