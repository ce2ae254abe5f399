"""Prometheus metrics for a store: ``pip install 'claimfsm[metrics]'``.

::

    from claimfsm.metrics import StoreMetrics
    StoreMetrics(store)                      # registers on prometheus_client's default registry
    prometheus_client.start_http_server(9108)  # what your service exposes for scraping

Why ``prometheus_client`` rather than OpenTelemetry's API: one small, dependency-free
package that works the moment it is installed (OpenTelemetry's API records nothing until
an SDK and an exporter are configured), and a pull model that suits worker processes. An
OpenTelemetry shop can scrape the same endpoint with the Collector's Prometheus receiver.

Series (prefix ``claimfsm_``, or the ``namespace`` given):

- ``transitions_total{event, outcome}``: every operation, outcome ``ok``, ``refused`` or
  ``error`` (lapses applied by a sweep or an acquire count as event ``lapse``).
- ``refusals_total{kind}``: refused and failed operations by exception class
  (``StaleClaim``, ``LeaseExpired``, ``TargetBusy``, ..., ``StoreError``).
- ``lease_lapses_total{from_state}``: ``reserved`` (→ expired) and ``sending``
  (→ uncertain, which needs readback).
- ``operation_seconds{event}``: a histogram of each call's wall time, the transaction and
  its retries included.
- ``claims_uncertain``: claims in ``uncertain`` now, read from the database at scrape time
  (an index lookup), so it is right across processes; NaN if the read fails.

An ``AsyncStore`` works too: construct ``StoreMetrics`` on its event loop; the scrape (in
prometheus_client's thread) reads ``claims_uncertain`` through that loop.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from claimfsm.errors import InvalidArgument, StoreError
from claimfsm.spec import Event, State
from claimfsm.store import AsyncStore, Store
from claimfsm.store._observe import Observed

try:
    import prometheus_client
except ImportError:  # pragma: no cover - exercised only without the extra
    prometheus_client = None  # type: ignore[assignment]


class StoreMetrics:
    """Count ``store``'s transitions and refusals into a Prometheus registry."""

    def __init__(
        self, store: Store | AsyncStore, *, registry: Any = None, namespace: str = "claimfsm"
    ) -> None:
        if prometheus_client is None:
            raise StoreError("metrics need the 'metrics' extra: pip install 'claimfsm[metrics]'")
        if not isinstance(store, (Store, AsyncStore)):
            raise InvalidArgument(f"store must be a claimfsm Store, not {type(store).__name__}")
        self._loop: asyncio.AbstractEventLoop | None = None
        if isinstance(store, AsyncStore):
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                raise InvalidArgument(
                    "construct StoreMetrics for an AsyncStore on its event loop"
                ) from None
        if registry is None:
            registry = prometheus_client.REGISTRY
        common: dict[str, Any] = {"namespace": namespace, "registry": registry}
        self.transitions = prometheus_client.Counter(
            "transitions", "Store operations by event and outcome.", ["event", "outcome"], **common
        )
        self.refusals = prometheus_client.Counter(
            "refusals", "Refused or failed store operations by kind.", ["kind"], **common
        )
        self.lapses = prometheus_client.Counter(
            "lease_lapses", "Leases lapsed, by the state they lapsed in.", ["from_state"], **common
        )
        self.seconds = prometheus_client.Histogram(
            "operation_seconds", "Wall time of each store call.", ["event"], **common
        )
        self.uncertain = prometheus_client.Gauge(
            "claims_uncertain", "Claims in uncertain now (read at scrape time).", **common
        )
        self._store = store
        steps = (store.store if isinstance(store, AsyncStore) else store).steps
        self._lapse = steps.event(Event.LAPSE)  # the declaration's names for them
        self._uncertain = steps.state(State.UNCERTAIN)
        self.uncertain.set_function(self._count_uncertain)
        store.observe(self.record)

    def record(self, o: Observed) -> None:
        self.transitions.labels(o.event, o.outcome).inc()
        self.seconds.labels(o.event).observe(o.seconds)
        if o.outcome != "ok":
            self.refusals.labels(o.refusal or "unknown").inc()
        elif o.event == self._lapse:
            self.lapses.labels(o.from_state or "unknown").inc()

    def _count_uncertain(self) -> float:
        try:
            if isinstance(self._store, AsyncStore):
                assert self._loop is not None
                read = self._store.claims(state=self._uncertain)
                found = asyncio.run_coroutine_threadsafe(read, self._loop).result(10.0)
                return float(len(found))
            return float(len(self._store.claims(state=self._uncertain)))
        except (StoreError, TimeoutError, RuntimeError):
            return math.nan


__all__ = ["StoreMetrics"]
