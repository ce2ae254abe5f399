"""A checker path as steps in a declaration's terms, for drawings and reports."""

from __future__ import annotations

from typing import NamedTuple


class PathStep(NamedTuple):
    """One step of a path, in the declaration's terms, for drawings and reports."""

    number: int
    actor: str  # "worker 0" .. , "store" (sweep, reconcile), "remote", "clock", "author"
    to: str  # whom the arrow goes to in a sequence chart: "store", "remote" or the actor
    text: str  # what happened, in words
    event: str | None  # the declared event, when the claim's state was involved
    source: str | None  # the claim's state before
    dest: str | None  # the claim's state after
    label: str = ""  # a short label for an arrow: the event, "request", "lands", "ack"
    in_flight: tuple[int, ...] = ()  # epochs with a request in flight at the remote, after
    effects: tuple[tuple[int, int], ...] = ()  # (draft, epoch) of each effect applied, after
