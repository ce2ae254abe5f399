"""The asyncio face of the Dispatcher: the same steps, through an ``AsyncStore``.

``AsyncDispatcher`` runs the one ``Dispatcher`` (nothing of its logic is written again)
through the store's runner: on PostgreSQL in a greenlet on the event loop, on SQLite in a
worker thread. Where the Dispatcher calls the remote, it waits for the ``AsyncRemote``'s
coroutine on the loop. A dispatch cancelled while its send is in flight leaves the claim in
``sending`` (the send's outcome is unknown): its lease lapses into ``uncertain`` and
readback decides, exactly as for a worker that crashed there.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from claimfsm.errors import InvalidArgument
from claimfsm.service._dispatcher import Dispatcher, Outcome, Resolution
from claimfsm.service._remote import AsyncRemote, SendRequest, check_remote
from claimfsm.store import AsyncClaim, AsyncStore, Claim
from claimfsm.store._bridge import Runner

#: Called at each step, as ``Dispatcher``'s ``on_step``, with the step name and the handle;
#: it may be a coroutine function.
AsyncStepHook = Callable[[str, AsyncClaim], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class AsyncDispatchResult:
    outcome: Outcome  # confirmed, uncertain, busy (target taken), idle (nothing approved), lost
    claim: AsyncClaim | None = None
    detail: str = ""


class _Waiting:
    """An ``AsyncRemote`` as the ``Remote`` the Dispatcher calls: each call waits, through
    the runner, for the adapter's coroutine on the event loop."""

    def __init__(self, remote: AsyncRemote, runner: Runner) -> None:
        self._remote = remote
        self._wait = runner.wait
        self.fences_epochs = remote.fences_epochs
        self.dedups_by_key = remote.dedups_by_key

    def send(self, request: SendRequest) -> None:
        self._wait(self._remote.send(request))

    def readback(self, target_id: str, idempotency_key: str, epoch: int) -> bool:
        return self._wait(self._remote.readback(target_id, idempotency_key, epoch))

    def fence(self, target_id: str, epoch: int) -> None:
        self._wait(self._remote.fence(target_id, epoch))


class AsyncDispatcher:
    """``Dispatcher`` for coroutines: ``await dispatch_next(target)``, ``await
    reconcile(target)``, ``await reconcile_all()``; the same outcomes and errors."""

    def __init__(
        self,
        store: AsyncStore,
        remote: AsyncRemote,
        *,
        owner: str,
        lease_seconds: float = 30.0,
        on_step: AsyncStepHook | None = None,
    ) -> None:
        if not isinstance(store, AsyncStore):
            raise InvalidArgument("store must be an AsyncStore (await AsyncStore.open(url))")
        check_remote(remote, asynchronous=True)
        if on_step is not None and not callable(on_step):
            raise InvalidArgument("on_step must be None or a callable (step name, claim)")
        self.store = store
        self.remote = remote
        self._runner = store.runner
        self._on_step = on_step
        self._faces: dict[int, AsyncClaim] = {}
        self._core = Dispatcher(
            store.store,
            _Waiting(remote, store.runner),
            owner=owner,
            lease_seconds=lease_seconds,
            on_step=None if on_step is None else self._step,
        )

    @property
    def owner(self) -> str:
        return self._core.owner

    @property
    def lease_seconds(self) -> float:
        return self._core.lease_seconds

    def _face(self, claim: Claim) -> AsyncClaim:
        return AsyncClaim(self.store, claim)

    def _step(self, name: str, claim: Claim) -> None:
        assert self._on_step is not None
        result: Any = self._on_step(name, self._face(claim))
        if inspect.isawaitable(result):
            self._runner.wait(result)

    def _result(self, outcome: Outcome, claim: Claim | None, detail: str) -> AsyncDispatchResult:
        return AsyncDispatchResult(outcome, None if claim is None else self._face(claim), detail)

    async def dispatch_next(self, target_id: str) -> AsyncDispatchResult:
        done = await self._runner.run(self._core.dispatch_next, target_id)
        return self._result(done.outcome, done.claim, done.detail)

    async def send(self, claim: AsyncClaim) -> AsyncDispatchResult:
        """Send what ``claim`` pinned (``Dispatcher.send``)."""
        if not isinstance(claim, AsyncClaim):
            raise InvalidArgument("claim must be an AsyncClaim from this store")
        done = await self._runner.run(self._core.send, claim.claim)
        return self._result(done.outcome, done.claim, done.detail)

    async def reconcile(self, target_id: str) -> Resolution:
        return await self._runner.run(self._core.reconcile, target_id)

    async def reconcile_all(self) -> dict[str, Resolution]:
        return await self._runner.run(self._core.reconcile_all)
