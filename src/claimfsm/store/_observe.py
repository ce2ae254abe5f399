"""What a store reports about each operation: one :class:`Observed` per transition and per
refusal, to the ``claimfsm.store`` logger and to any observer a caller adds
(``store.observe(fn)``; ``claimfsm.metrics`` is one).

A record never holds a token, its hash or its fingerprint: the owner's name, the target,
the epoch, the event, the states, the outcome and the time it took.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LOG = logging.getLogger("claimfsm.store")


@dataclass(frozen=True, slots=True)
class Observed:
    """One operation of a store, as logs and metrics see it."""

    event: str  # the declared event (acquire, begin_send, lapse, ...), or resume
    target_id: str | None
    epoch: int | None  # the epoch it changed, or (refused) the one the caller named
    outcome: str  # "ok", "refused" (a protocol refusal) or "error" (the store failed)
    refusal: str | None = None  # the exception's class name, for refused and error
    from_state: str | None = None
    to_state: str | None = None
    seconds: float = 0.0  # wall time of the whole call, transaction and retries included

    def log_fields(self) -> dict[str, Any]:
        """The record's fields for a structured log (``extra=`` of stdlib ``logging``)."""
        return {
            "event": self.event,
            "target_id": self.target_id,
            "epoch": self.epoch,
            "outcome": self.outcome,
            "refusal": self.refusal,
            "from_state": self.from_state,
            "to_state": self.to_state,
            "duration_ms": round(self.seconds * 1e3, 3),
        }


Observer = Callable[[Observed], None]


def log(record: Observed) -> None:
    """The built-in observer: one line per operation on the ``claimfsm.store`` logger, its
    fields also as attributes of the log record (for JSON formatters). Transitions log at
    INFO, refusals at INFO too (they are the protocol working), store errors at WARNING."""
    level = logging.WARNING if record.outcome == "error" else logging.INFO
    if not LOG.isEnabledFor(level):
        return
    f = record.log_fields()
    what = (
        f"{f['from_state']} -> {f['to_state']}"
        if record.outcome == "ok"
        else f"{record.outcome}: {record.refusal}"
    )
    LOG.log(
        level,
        "%s target=%s epoch=%s %s (%.3f ms)",
        record.event,
        record.target_id,
        record.epoch,
        what,
        f["duration_ms"],
        extra={"claimfsm": f},
    )
