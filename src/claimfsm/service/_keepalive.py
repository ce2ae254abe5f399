"""Lease keep-alive: renew a claim's lease in the background while a long call runs.

::

    with KeepAlive(claim, lease_seconds=30) as keeper:
        prepare_payload()      # slow work under the claim
        keeper.check()         # raises LeaseLost if the lease was lost meanwhile
        claim.begin_send()

The keeper renews every ``every`` x ``lease_seconds`` (a third by default) through the
store's ``renew``, so the protocol's guard still decides: a lapsed lease is never renewed
(``LeaseExpired``), a superseded epoch is never renewed (``StaleClaim``). On such a refusal
the lease is lost at once: ``lost`` is set, ``on_lost`` is called, and ``check()`` raises
``LeaseLost`` (chained to the refusal). A renew that fails for the store's reasons (a
dropped connection) is retried at the next tick; if none succeeds before the last renewed
lease runs out by this process's monotonic clock, the lease is lost too. When the caller's
handle leaves the leased states (the caller confirmed or released it) the keeper stops
quietly.

It renews through a handle of its own (same epoch and token), so the caller's handle is
never written from the keeper's thread; ``deadline`` is the lease deadline of its last
renew. On exit, normal or by exception, the thread is stopped and joined.

``AsyncKeepAlive`` is the same keeper for coroutines (an ``AsyncClaim``; a task, not a
thread). On loss it also cancels the guarded block, as ``asyncio.timeout`` does, and the
block's ``async with`` raises ``LeaseLost`` instead of the cancellation::

    async with AsyncKeepAlive(claim, lease_seconds=30):
        await prepare_payload()   # cancelled at once if the lease is lost
        await claim.begin_send()

``cancel_on_loss=False`` keeps the block running; then check ``lost`` (an
``asyncio.Event``) or call ``check()``. Both keepers share every decision below (what is
lost, what is retried, when to stop); only the waiting differs.
"""

from __future__ import annotations

import asyncio
import copy
import math
import threading
import time
from collections.abc import Callable
from types import TracebackType

from claimfsm.errors import InvalidArgument, LeaseLost, Refused, StoreError, UsageError
from claimfsm.store import AsyncClaim, Claim


class _Keeper:
    """What both keepers decide: arguments, and what each renew's outcome means."""

    def __init__(
        self,
        claim: Claim,
        lease_seconds: float,
        every: float,
        on_lost: Callable[[LeaseLost], None] | None,
    ) -> None:
        if (
            isinstance(lease_seconds, bool)
            or not isinstance(lease_seconds, (int, float))
            or not math.isfinite(lease_seconds)
            or lease_seconds <= 0
        ):
            raise InvalidArgument(f"lease_seconds must be a positive number, got {lease_seconds!r}")
        if isinstance(every, bool) or not isinstance(every, (int, float)) or not 0 < every < 1:
            raise InvalidArgument(
                f"every must be a fraction of the lease between 0 and 1, got {every!r}"
            )
        if on_lost is not None and not callable(on_lost):
            raise InvalidArgument("on_lost must be None or a callable taking a LeaseLost")
        self.lease_seconds = float(lease_seconds)
        self.interval = self.lease_seconds * every
        self.on_lost = on_lost
        self.error: LeaseLost | None = None
        self.renewals = 0
        self._claim = claim  # the caller's handle: read here, never written
        self.deadline = claim.lease_deadline
        self._leased = frozenset(claim._store.spec.states_where("lease"))
        self._expires = time.monotonic() + self.lease_seconds  # renewed before entering

    def check(self) -> None:
        """Raise ``LeaseLost`` if the lease was lost; call it before anything irreversible."""
        if self.error is not None:
            raise self.error

    def _moved_on(self) -> bool:
        """The caller moved the claim on (confirmed, released): nothing left to keep."""
        return self._claim.state not in self._leased

    def _renewed(self, handle: Claim) -> None:
        self.renewals += 1
        self.deadline = handle.lease_deadline
        self._expires = time.monotonic() + self.lease_seconds

    def _failed(self, exc: Exception) -> bool:
        """A renew raised ``exc``: whether to stop (the lease is lost, or nothing is left
        to keep). A refusal loses it at once; a store error only once no renew succeeded
        before the last renewed lease ran out (until then the next tick tries again)."""
        if isinstance(exc, (Refused, UsageError)):
            if self._moved_on():
                return True  # ... while this renew was on its way
            self._lose(f"renew was refused: {exc}", exc)
            return True
        if time.monotonic() >= self._expires:
            self._lose(f"no renew succeeded before the lease ran out: {exc}", exc)
            return True
        return False

    def _lose(self, why: str, cause: Exception) -> None:
        h = self._claim
        error = LeaseLost(f"lease of target {h.target_id!r} epoch {h.epoch} lost: {why}")
        error.__cause__ = cause
        self.error = error
        self._signal()
        if self.on_lost is not None:
            self.on_lost(error)

    def _signal(self) -> None:
        raise NotImplementedError


class KeepAlive(_Keeper):
    """Keep ``claim``'s lease alive while the ``with`` block runs (see the module)."""

    def __init__(
        self,
        claim: Claim,
        lease_seconds: float,
        *,
        every: float = 1 / 3,
        on_lost: Callable[[LeaseLost], None] | None = None,
    ) -> None:
        if not isinstance(claim, Claim):
            raise InvalidArgument(f"claim must be a Claim, not {type(claim).__name__}")
        super().__init__(claim, lease_seconds, every, on_lost)
        self.lost = threading.Event()
        self._handle = copy.copy(claim)  # the keeper's own handle: same epoch and token
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> KeepAlive:
        self._thread = threading.Thread(
            target=self._run, name=f"claimfsm-keepalive-{self._handle.target_id}", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop renewing and wait for the keeper's thread (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _signal(self) -> None:
        self.lost.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self._moved_on():
                return
            try:
                self._handle.renew(self.lease_seconds)
            except (Refused, UsageError, StoreError) as exc:
                if self._failed(exc):
                    return
                continue
            self._renewed(self._handle)


class AsyncKeepAlive(_Keeper):
    """Keep an ``AsyncClaim``'s lease alive while the ``async with`` block runs; on loss,
    cancel the block and raise ``LeaseLost`` from it (see the module)."""

    def __init__(
        self,
        claim: AsyncClaim,
        lease_seconds: float,
        *,
        every: float = 1 / 3,
        on_lost: Callable[[LeaseLost], None] | None = None,
        cancel_on_loss: bool = True,
    ) -> None:
        if not isinstance(claim, AsyncClaim):
            raise InvalidArgument(f"claim must be an AsyncClaim, not {type(claim).__name__}")
        if not isinstance(cancel_on_loss, bool):
            raise InvalidArgument(f"cancel_on_loss must be True or False, not {cancel_on_loss!r}")
        super().__init__(claim.claim, lease_seconds, every, on_lost)
        self.cancel_on_loss = cancel_on_loss
        self.lost = asyncio.Event()
        self._handle = AsyncClaim(claim._face, copy.copy(claim.claim))  # same epoch and token
        self._task: asyncio.Task[None] | None = None
        self._block: asyncio.Task[object] | None = None
        self._cancelled_block = False

    async def __aenter__(self) -> AsyncKeepAlive:
        self._block = asyncio.current_task()
        self._task = asyncio.create_task(
            self._run(), name=f"claimfsm-keepalive-{self._handle.target_id}"
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
        if self._cancelled_block and exc_type is asyncio.CancelledError:
            assert self._block is not None and self.error is not None
            if self._block.uncancel() == 0:  # our cancellation, not someone else's
                self.error.__context__ = exc  # its cause stays the refusal
                raise self.error

    async def stop(self) -> None:
        """Stop renewing and wait for the keeper's task (idempotent)."""
        task = self._task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                if task.cancelled():
                    pass  # the keeper's own cancellation
                else:  # pragma: no cover - the keeper swallows nothing else
                    raise

    def _signal(self) -> None:
        self.lost.set()
        if self.cancel_on_loss and self._block is not None and not self._block.done():
            self._cancelled_block = True
            self._block.cancel(f"claimfsm: {self.error}")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if self._moved_on():
                return
            try:
                await self._handle.renew(self.lease_seconds)
            except (Refused, UsageError, StoreError) as exc:
                if self._failed(exc):
                    return
                continue
            self._renewed(self._handle.claim)
