"""Fixtures shared by the suite.

``backend`` runs a test once per store backend: ``sqlite`` (a real file in tmp_path, each
``backend.open()`` a new connection) and ``memory`` (the reference store run by the
``transitions`` machine). A test that uses it must hold on both.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from claimfsm.store import MemoryStore, SQLiteStore, Store


class FakeClock:
    """A store clock that moves only when a test says so."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Backend:
    name: str
    clock: FakeClock
    path: Path | None
    opened: list[Store] = field(default_factory=list)
    _memory: MemoryStore | None = None

    def open(self) -> Store:
        """Another handle on the same database (a new connection for SQLite)."""
        if self.name == "memory":
            if self._memory is None:
                self._memory = MemoryStore(clock=self.clock)
            return self._memory
        assert self.path is not None
        store = SQLiteStore(self.path, clock=self.clock)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for s in self.opened:
            s.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["sqlite", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Backend]:
    b = Backend(
        request.param, clock, tmp_path / "claims.sqlite" if request.param == "sqlite" else None
    )
    yield b
    b.close()


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.open()


def approved_draft(store: Store, target: str = "acct", content: str = "hello") -> int:
    draft = store.create_draft(target, content)
    store.approve_draft(draft.draft_id)
    return draft.draft_id
