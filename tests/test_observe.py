"""Observability: one log record per transition and refusal (never a token), observers,
and the Prometheus metrics built on them."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest

from claimfsm.errors import InvalidArgument, LeaseExpired, StaleClaim, StoreError, TargetBusy
from claimfsm.store import Evidence, Store, open_store
from claimfsm.store._observe import Observed

from .conftest import Backend, FakeClock, approved_draft

prometheus_client = pytest.importorskip("prometheus_client")


def _script(store: Store, clock: FakeClock) -> list[str]:
    """A dispatch, a refusal of each common kind, a lapse by acquire and by sweep, and
    readback; returns every token it saw."""
    first = store.acquire("a", approved_draft(store, "a"), "w1", 30)
    first.begin_send()
    first.confirm()
    second = store.acquire("a", approved_draft(store, "a"), "w2", 30)
    with pytest.raises(TargetBusy):
        store.acquire("a", approved_draft(store, "a"), "w3", 30)
    clock.advance(31)
    with pytest.raises(LeaseExpired):
        second.begin_send()
    third = store.acquire("a", approved_draft(store, "a"), "w3", 30)  # lapses epoch 2 first
    with pytest.raises(StaleClaim):
        second.renew(lease_seconds=30)
    third.begin_send()
    clock.advance(31)
    store.sweep()  # sending -> uncertain
    store.reconcile("a", third.epoch, Evidence.present())
    return [first.token, second.token, third.token]


def test_every_transition_and_refusal_is_observed_once_in_order(backend: Backend) -> None:
    store = backend.open()
    seen: list[Observed] = []
    store.observe(seen.append)
    _script(store, backend.clock)
    assert [(o.event, o.outcome, o.refusal) for o in seen] == [
        ("acquire", "ok", None),
        ("begin_send", "ok", None),
        ("confirm", "ok", None),
        ("acquire", "ok", None),
        ("acquire", "refused", "TargetBusy"),
        ("begin_send", "refused", "LeaseExpired"),
        ("lapse", "ok", None),  # applied by the acquire, reported after its commit
        ("acquire", "ok", None),
        ("renew", "refused", "StaleClaim"),
        ("begin_send", "ok", None),
        ("lapse", "ok", None),
        ("reconcile", "ok", None),
    ]
    transitions = [o for o in seen if o.outcome == "ok"]
    assert [(o.from_state, o.to_state) for o in transitions] == [
        ("unclaimed", "reserved"),
        ("reserved", "sending"),
        ("sending", "confirmed"),
        ("unclaimed", "reserved"),
        ("reserved", "expired"),
        ("unclaimed", "reserved"),
        ("reserved", "sending"),
        ("sending", "uncertain"),
        ("uncertain", "reconciled"),
    ]
    # Each transition observed is one the history recorded, epoch for epoch.
    recorded = [(e.event, e.epoch) for e in store.history("a") if e.event != "discard"]
    assert [(o.event, o.epoch) for o in transitions] == recorded
    assert all(o.seconds >= 0 for o in seen) and all(o.target_id == "a" for o in seen)


def test_logs_one_structured_record_per_operation_and_never_a_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="claimfsm.store")
    clock = FakeClock(1000.0)
    store = open_store(f"sqlite:///{tmp_path / 'c.sqlite'}", clock=clock)
    tokens = _script(store, clock)
    records = [r for r in caplog.records if r.name == "claimfsm.store"]
    assert len(records) == 12
    fields: list[dict[str, Any]] = [r.claimfsm for r in records]  # type: ignore[attr-defined]
    assert set(fields[0]) == {
        "event",
        "target_id",
        "epoch",
        "outcome",
        "refusal",
        "from_state",
        "to_state",
        "duration_ms",
    }
    assert fields[4]["refusal"] == "TargetBusy" and fields[4]["outcome"] == "refused"
    assert records[1].getMessage().startswith("begin_send target=a epoch=1 reserved -> sending")
    hashes = [store.history("a")[0].token_fingerprint]  # not even the fingerprint is logged
    for r in records:
        text = r.getMessage() + repr(r.__dict__)
        for secret in [*tokens, *hashes]:
            assert secret not in text


def test_a_store_error_is_observed_as_an_error(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'c.sqlite'}")
    claim = store.acquire("a", approved_draft(store, "a"), "w", 30)
    seen: list[Observed] = []
    store.observe(seen.append)

    def broken(*args: Any, **kw: Any) -> Any:
        raise StoreError("disk I/O error")

    store._atomically = broken  # type: ignore[method-assign]
    with pytest.raises(StoreError):
        claim.begin_send()
    assert [(o.event, o.outcome, o.refusal, o.epoch) for o in seen] == [
        ("begin_send", "error", "StoreError", 1)
    ]


def test_an_observer_must_be_callable(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'c.sqlite'}")
    with pytest.raises(InvalidArgument, match="observer must be a callable"):
        store.observe("print")  # type: ignore[arg-type]


def test_prometheus_metrics_count_what_happened(tmp_path: Path) -> None:
    from claimfsm.metrics import StoreMetrics

    registry = prometheus_client.CollectorRegistry()
    clock = FakeClock(1000.0)
    store = open_store(f"sqlite:///{tmp_path / 'c.sqlite'}", clock=clock)
    StoreMetrics(store, registry=registry)

    def value(name: str, **labels: str) -> float | None:
        found = registry.get_sample_value(name, labels)
        return None if found is None else float(found)

    _script(store, clock)
    assert value("claimfsm_transitions_total", event="acquire", outcome="ok") == 3
    assert value("claimfsm_transitions_total", event="acquire", outcome="refused") == 1
    assert value("claimfsm_refusals_total", kind="TargetBusy") == 1
    assert value("claimfsm_refusals_total", kind="LeaseExpired") == 1
    assert value("claimfsm_refusals_total", kind="StaleClaim") == 1
    assert value("claimfsm_lease_lapses_total", from_state="reserved") == 1
    assert value("claimfsm_lease_lapses_total", from_state="sending") == 1
    assert value("claimfsm_operation_seconds_count", event="begin_send") == 3
    assert value("claimfsm_claims_uncertain") == 0  # reconciled at the end
    claim = store.acquire("b", approved_draft(store, "b"), "w", 30)
    claim.begin_send()
    claim.mark_uncertain()
    assert value("claimfsm_claims_uncertain") == 1  # read from the database at scrape time
    store.close()
    assert math.isnan(value("claimfsm_claims_uncertain") or 0.0)  # unreadable: NaN
    exposition = prometheus_client.generate_latest(registry).decode()
    assert 'claimfsm_transitions_total{event="confirm",outcome="ok"} 1.0' in exposition
