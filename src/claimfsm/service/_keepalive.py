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
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable
from types import TracebackType

from claimfsm.errors import InvalidArgument, LeaseLost, Refused, StoreError, UsageError
from claimfsm.store import Claim


class KeepAlive:
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
        self.lost = threading.Event()
        self.error: LeaseLost | None = None
        self.renewals = 0
        self._claim = claim  # the caller's handle: read here, never written
        self._handle = copy.copy(claim)  # the keeper's own handle: same epoch and token
        self.deadline = claim.lease_deadline
        self._leased = frozenset(claim._store.spec.states_where("lease"))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._expires = time.monotonic() + self.lease_seconds  # renewed before entering

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

    def check(self) -> None:
        """Raise ``LeaseLost`` if the lease was lost; call it before anything irreversible."""
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self._claim.state not in self._leased:
                return  # the caller moved the claim on (confirmed, released): nothing to keep
            try:
                self._handle.renew(self.lease_seconds)
            except (Refused, UsageError) as exc:
                if self._claim.state not in self._leased:
                    return  # ... while this renew was on its way
                self._lose(f"renew was refused: {exc}", exc)
                return
            except StoreError as exc:
                if time.monotonic() >= self._expires:
                    self._lose(f"no renew succeeded before the lease ran out: {exc}", exc)
                    return
                continue
            self.renewals += 1
            self.deadline = self._handle.lease_deadline
            self._expires = time.monotonic() + self.lease_seconds

    def _lose(self, why: str, cause: Exception) -> None:
        h = self._handle
        error = LeaseLost(f"lease of target {h.target_id!r} epoch {h.epoch} lost: {why}")
        error.__cause__ = cause
        self.error = error
        self.lost.set()
        if self.on_lost is not None:
            self.on_lost(error)
