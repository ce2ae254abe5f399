"""The store suite on the asyncio face: a ``Store`` whose every call is answered by an
``AsyncStore``'s coroutine, run on an event loop in another thread.

Tests written against the synchronous API (the scenarios, the pins, retention, the
stateful interleavings) thereby drive ``AsyncStore`` → runner → core, and on PostgreSQL
psycopg's async pool, with no second copy of any test.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from claimfsm.store import AsyncClaim, AsyncStore, Claim, Store
from claimfsm.store._core import Tx

R = TypeVar("R")


class LoopThread:
    """An event loop running in a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class BlockingClaim(Claim):
    """A ``Claim`` whose owner operations are the ``AsyncClaim``'s coroutines."""

    __slots__ = ("face",)

    def _copy_from(self, face: AsyncClaim) -> None:
        for name in Claim.__slots__:
            if name != "_store":
                setattr(self, name, getattr(face.claim, name))


class BlockingStore(Store):
    """The synchronous store API over an ``AsyncStore`` (see the module)."""

    def __init__(self, face: AsyncStore, loop: LoopThread) -> None:
        core = face.store
        self.face = face
        self.loop = loop
        self.clock = core.clock
        self.machine = core.machine
        self.spec = core.spec
        self.steps = core.steps
        self._observers = core._observers

    def observe(self, observer: Any) -> None:
        self.face.observe(observer)

    def _snapshot(self) -> AbstractContextManager[Tx]:
        raise AssertionError("the async face's tests call public methods only")

    def close(self) -> None:
        self.loop.run(self.face.close())

    def _call(self, method: Callable[..., Coroutine[Any, Any, R]], *a: Any, **kw: Any) -> R:
        return self.loop.run(method(*a, **kw))

    def _claim(self, face: AsyncClaim) -> BlockingClaim:
        claim = BlockingClaim.__new__(BlockingClaim)
        claim._store = self
        claim.face = face
        claim._copy_from(face)
        return claim

    def create_draft(self, *a: Any, **kw: Any) -> Any:
        return self._call(self.face.create_draft, *a, **kw)

    def edit_draft(self, *a: Any, **kw: Any) -> Any:
        return self._call(self.face.edit_draft, *a, **kw)

    def approve_draft(self, *a: Any, **kw: Any) -> Any:
        return self._call(self.face.approve_draft, *a, **kw)

    def get_draft(self, *a: Any, **kw: Any) -> Any:
        return self._call(self.face.get_draft, *a, **kw)

    def drafts(self, *a: Any, **kw: Any) -> Any:
        return self._call(self.face.drafts, *a, **kw)

    def acquire(self, *a: Any, **kw: Any) -> Any:
        return self._claim(self._call(self.face.acquire, *a, **kw))

    def resume(self, *a: Any, **kw: Any) -> Any:
        return self._claim(self._call(self.face.resume, *a, **kw))

    def retry(self, *a: Any, **kw: Any) -> Any:
        return self._claim(self._call(self.face.retry, *a, **kw))

    def sweep(self) -> Any:
        return self._call(self.face.sweep)

    def reconcile(self, *a: Any, **kw: Any) -> Any:
        return self._call(self.face.reconcile, *a, **kw)

    def get_claim(self, *a: Any, **kw: Any) -> Any:
        return self._call(self.face.get_claim, *a, **kw)

    def claims(self, *a: Any, **kw: Any) -> Any:
        return self._call(self.face.claims, *a, **kw)

    def history(self, *a: Any, **kw: Any) -> Any:
        return self._call(self.face.history, *a, **kw)

    def epochs(self, *a: Any, **kw: Any) -> Any:
        return self._call(self.face.epochs, *a, **kw)

    def prune_history(self, *a: Any, **kw: Any) -> Any:
        return self._call(self.face.prune_history, *a, **kw)

    def _owner_event(
        self, claim: Claim, event: str, *, lease_seconds: float | None = None, reason: str = ""
    ) -> Claim:
        assert isinstance(claim, BlockingClaim)
        # The handle as the caller holds it (a test may have copied it and changed its
        # token or epoch), on the async face.
        inner = copy.copy(claim.face.claim)
        for name in Claim.__slots__:
            if name != "_store":
                setattr(inner, name, getattr(claim, name))
        face = AsyncClaim(self.face, inner)
        calls: dict[str, Callable[[], Coroutine[Any, Any, AsyncClaim]]] = {
            "begin_send": face.begin_send,
            "confirm": face.confirm,
            "timeout": lambda: face.mark_uncertain(reason),
            "release": face.release,
            "renew": lambda: face.renew(lease_seconds),  # type: ignore[arg-type]
        }
        try:
            self.loop.run(calls[event]())
        finally:
            claim._copy_from(face)
        return claim


def open_blocking(url: str, loop: LoopThread, **options: Any) -> BlockingStore:
    return BlockingStore(loop.run(AsyncStore.open(url, **options)), loop)
