"""The asyncio face of the store: the same protocol, the same errors, awaitable.

::

    store = await AsyncStore.open("postgresql://localhost/app")
    claim = await store.acquire("acct", draft_id, "worker-1", lease_seconds=30)
    await claim.begin_send()
    ...
    await store.close()

Nothing of the protocol is written here again: every method runs the one core (``Store``)
through a runner (``_bridge``). On PostgreSQL the core runs over psycopg's async pool in a
greenlet on the event loop, so tasks interleave on their own pooled connections; on SQLite
and the memory store it runs in a worker thread (sqlite3 has no async API), so the loop
never blocks. Each method's meaning, arguments and errors are those of the ``Store``
method of the same name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from claimfsm.errors import InvalidArgument
from claimfsm.spec import Spec, State
from claimfsm.store._bridge import GreenletRunner, Runner, ThreadRunner
from claimfsm.store._core import Clock, Pruned, Store
from claimfsm.store._observe import Observer
from claimfsm.store._types import (
    Claim,
    ClaimInfo,
    Draft,
    Evidence,
    HistoryEntry,
    Transitioned,
)

R = TypeVar("R")


class AsyncClaim:
    """A worker's handle on one epoch, for coroutines: ``Claim``'s fields, and its owner
    operations as coroutines (each returns this handle, refreshed)."""

    __slots__ = ("_face", "claim")

    def __init__(self, face: AsyncStore, claim: Claim) -> None:
        self._face = face
        self.claim = claim  # the handle the core updates

    @property
    def target_id(self) -> str:
        return self.claim.target_id

    @property
    def epoch(self) -> int:
        return self.claim.epoch

    @property
    def state(self) -> str:
        return self.claim.state

    @property
    def role(self) -> State | None:
        """The state in the typed face, whatever the declaration names it (``Claim.role``)."""
        return self.claim.role

    @property
    def owner(self) -> str:
        return self.claim.owner

    @property
    def draft_id(self) -> int:
        return self.claim.draft_id

    @property
    def draft_version(self) -> int:
        return self.claim.draft_version

    @property
    def draft_digest(self) -> str:
        return self.claim.draft_digest

    @property
    def idempotency_key(self) -> str:
        return self.claim.idempotency_key

    @property
    def lease_deadline(self) -> float:
        return self.claim.lease_deadline

    @property
    def token_fingerprint(self) -> str:
        return self.claim.token_fingerprint

    @property
    def token(self) -> str:
        """The secret owner token. Keep it out of logs."""
        return self.claim.token

    async def begin_send(self) -> AsyncClaim:
        await self._face._run(self.claim.begin_send)
        return self

    async def confirm(self) -> AsyncClaim:
        await self._face._run(self.claim.confirm)
        return self

    async def mark_uncertain(self, reason: str = "") -> AsyncClaim:
        await self._face._run(self.claim.mark_uncertain, reason)
        return self

    async def release(self) -> AsyncClaim:
        await self._face._run(self.claim.release)
        return self

    async def renew(self, lease_seconds: float) -> AsyncClaim:
        await self._face._run(self.claim.renew, lease_seconds)
        return self

    def __repr__(self) -> str:
        return "Async" + repr(self.claim)


class AsyncStore:
    """The store for coroutines. Open one with ``await AsyncStore.open(url)`` (the URLs of
    ``open_store``), or wrap a SQLite or memory ``Store`` with ``AsyncStore(store)``."""

    def __init__(self, store: Store, *, runner: Runner | None = None) -> None:
        if not isinstance(store, Store):
            raise InvalidArgument("store must be a claimfsm Store (or use AsyncStore.open(url))")
        self.store = store  # the core every method runs
        self.runner: Runner = runner if runner is not None else ThreadRunner()

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        create: bool = True,
        pool_size: int = 4,
        connect_seconds: float = 10.0,
        spec: Spec | None = None,
    ) -> AsyncStore:
        """Open a store by URL, as ``open_store`` does (``spec``: the declaration it runs).
        PostgreSQL runs on psycopg's async pool: ``pool_size`` connections, shared by the
        tasks that use this store, the first within ``connect_seconds``."""
        if not isinstance(url, str):
            raise InvalidArgument(f"url must be a str, not {type(url).__name__}")
        if url.startswith(("postgresql://", "postgres://")):
            if clock is not None and not callable(clock):
                raise InvalidArgument("clock must be a callable returning seconds")
            from claimfsm.machine import ClaimMachine
            from claimfsm.store._postgres_async import AsyncPostgresCore

            runner = GreenletRunner()
            core = await runner.run(
                AsyncPostgresCore,
                url,
                runner=runner,
                clock=clock,
                machine=None if spec is None else ClaimMachine(spec),
                pool_size=pool_size,
                connect_seconds=connect_seconds,
            )
            return cls(core, runner=runner)
        from claimfsm.store import open_store

        threads = ThreadRunner()
        store = await threads.run(open_store, url, clock=clock, create=create, spec=spec)
        return cls(store, runner=threads)

    async def _run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        return await self.runner.run(fn, *args, **kwargs)

    @property
    def spec(self) -> Spec:
        return self.store.spec

    def observe(self, observer: Observer) -> None:
        """As ``Store.observe``; observers run on the core's thread (the loop's, on
        PostgreSQL) and must not block."""
        self.store.observe(observer)

    async def close(self) -> None:
        await self._run(self.store.close)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- drafts --------------------------------------------------------------------------
    async def create_draft(self, target_id: str, content: str) -> Draft:
        return await self._run(self.store.create_draft, target_id, content)

    async def edit_draft(self, draft_id: int, content: str) -> Draft:
        return await self._run(self.store.edit_draft, draft_id, content)

    async def approve_draft(self, draft_id: int) -> Draft:
        return await self._run(self.store.approve_draft, draft_id)

    async def get_draft(self, draft_id: int) -> Draft:
        return await self._run(self.store.get_draft, draft_id)

    async def drafts(self, target_id: str, *, status: str | None = None) -> list[Draft]:
        return await self._run(self.store.drafts, target_id, status=status)

    # -- claims --------------------------------------------------------------------------
    async def acquire(
        self, target_id: str, draft_id: int, owner: str, lease_seconds: float
    ) -> AsyncClaim:
        claim = await self._run(self.store.acquire, target_id, draft_id, owner, lease_seconds)
        return AsyncClaim(self, claim)

    async def resume(self, target_id: str, epoch: int, token: str) -> AsyncClaim:
        return AsyncClaim(self, await self._run(self.store.resume, target_id, epoch, token))

    async def sweep(self) -> list[Transitioned]:
        return await self._run(self.store.sweep)

    async def reconcile(self, target_id: str, epoch: int, evidence: Evidence) -> ClaimInfo:
        return await self._run(self.store.reconcile, target_id, epoch, evidence)

    async def retry(
        self,
        target_id: str,
        epoch: int,
        *,
        owner: str,
        lease_seconds: float,
        remote_dedups: bool,
    ) -> AsyncClaim:
        claim = await self._run(
            self.store.retry,
            target_id,
            epoch,
            owner=owner,
            lease_seconds=lease_seconds,
            remote_dedups=remote_dedups,
        )
        return AsyncClaim(self, claim)

    async def get_claim(self, target_id: str) -> ClaimInfo | None:
        return await self._run(self.store.get_claim, target_id)

    async def claims(self, *, state: str | None = None) -> list[ClaimInfo]:
        return await self._run(self.store.claims, state=state)

    async def history(self, target_id: str | None = None) -> list[HistoryEntry]:
        return await self._run(self.store.history, target_id)

    async def epochs(self, target_id: str) -> dict[int, str]:
        return await self._run(self.store.epochs, target_id)

    async def prune_history(
        self,
        older_than: float,
        *,
        archive: Callable[[list[HistoryEntry]], None] | None = None,
        batch: int = 10_000,
    ) -> Pruned:
        return await self._run(self.store.prune_history, older_than, archive=archive, batch=batch)

    def __repr__(self) -> str:
        return f"AsyncStore({self.store!r})"


async def open_async_store(url: str, **options: Any) -> AsyncStore:
    """``AsyncStore.open``, named like ``open_store``."""
    return await AsyncStore.open(url, **options)
