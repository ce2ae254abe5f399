"""After a lifecycle's campaign: what its store and the executor's log say, and which of
the declaration's promises held.

The executor (the campaign's remote process) logs every run it was asked for: entity,
epoch, request key, start, end and result. A declared ``exclusive_work`` invariant is
judged there, as the claim's campaign judges it on its sends: no two epochs of one entity
ran at once (a run the fence turned away never ran). The rest of the declaration (its
``row`` and ``left_only_by`` invariants, every entry a declared step, refusals that change
nothing) is the audit's, run on the database afterwards; and every store owes its history
that each run the executor saw was begun by a recorded start, and that no lease is still
held once every lease lapsed and the sweep ran.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from claimfsm.campaign._remote import Request
from claimfsm.campaign._verdict import Verdict, overlapping_pairs
from claimfsm.spec import Spec
from claimfsm.store import EntityHistory, EntityRow


@dataclass
class LifecycleFindings:
    """Figures read back from a lifecycle's store and the executor's log."""

    # what the executor saw
    requests: int = 0
    runs: int = 0  # runs that took place (applied; the answer may have been lost)
    fenced: int = 0
    lost_requests: int = 0
    lost_acks: int = 0
    outlived_lease: int = 0  # runs that went on for longer than a lease
    overlapping_runs: int = 0  # pairs of runs of two epochs of one entity at once
    overlap_examples: list[str] = field(default_factory=list)
    duplicate_effects: int = 0  # runs that took effect beyond the first, per entity (draft)
    # what the store says
    epochs: int = 0
    started: int = 0  # entries of the event that starts the work
    ended: dict[str, int] = field(default_factory=dict)  # entries of each event that ends it
    refusals: int = 0  # refusals recorded (a stale owner's)
    operated: dict[str, int] = field(default_factory=dict)  # the operator's events applied
    left: dict[str, int] = field(default_factory=dict)  # entities by state at the end
    left_leased: int = 0  # entities still holding a lease after every lease lapsed
    runs_unaccounted: int = 0  # a run of an epoch whose start history does not record
    audit_violations: int = 0
    audit_examples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge_lifecycle(
    spec: Spec,
    rows: list[EntityRow],
    history: Iterable[EntityHistory],
    log: list[Request],
    lease_seconds: float = 1.0,
    remote: str = "fencing",
) -> Verdict[LifecycleFindings]:
    """The verdict on one campaign of ``spec``: its store's rows and history, afterwards,
    against the executor's ``log`` (``lease_seconds``: the workers' lease; ``remote``: the
    executor's mode, for an invariant declared against some modes only). ``history`` is
    read once, in one pass (a stream: ``EntityStore.iter_history``); what is kept of it is
    the (entity, epoch) pairs whose work started."""
    f = LifecycleFindings()
    results = Counter(r.result for r in log)
    f.requests = len(log)
    f.fenced, f.lost_requests, f.lost_acks = (
        results["fenced"],
        results["lost-request"],
        results["lost-ack"],
    )
    f.runs = sum(r.took_effect for r in log)
    f.outlived_lease = sum(r.ended - r.started > lease_seconds for r in log)
    across = [(a, b) for a, b in overlapping_pairs(log) if a.epoch != b.epoch]
    f.overlapping_runs = len(across)
    f.overlap_examples = [
        f"{a.target_id}: epoch {a.epoch} ran {1000 * (a.ended - a.started):.0f} ms and epoch"
        f" {b.epoch} began {1000 * (b.started - a.started):.0f} ms after it"
        for a, b in across[:5]
    ]
    # per entity, or with linked drafts per draft of it (the draft a run carried)
    per_entity = Counter((r.target_id, r.draft_id) for r in log if r.took_effect)
    f.duplicate_effects = sum(n - 1 for n in per_entity.values() if n > 1)
    starts = next(e for e in spec.events if spec.work(e) == "starts")
    ends = [e for e in spec.events if spec.work(e) == "ends" or spec.remote_role(e)]
    operator = set(spec.events_by("operator"))
    counted: Counter[str] = Counter()  # entries of each event taken (refusals aside)
    begun: set[tuple[str, int]] = set()
    for h in history:
        if h.refused is not None:
            f.refusals += 1
            continue
        counted[h.event] += 1
        if h.event == starts:
            begun.add((h.key, h.epoch))
    f.epochs = sum(r.epoch for r in rows)
    f.started = counted[starts]
    f.ended = {e: counted[e] for e in ends}
    f.operated = {e: counted[e] for e in sorted(operator) if counted[e]}
    f.left = dict(sorted(Counter(r.state for r in rows).items()))
    leased = {name for name, s in spec.states.items() if s.lease}
    f.left_leased = sum(r.state in leased for r in rows)
    f.runs_unaccounted = sum(r.admitted and (r.target_id, r.epoch) not in begun for r in log)

    verdict = Verdict(f)

    def must_be_zero(name: str, value: int, why: str) -> None:
        if value:
            verdict.violations.append(f"{name}: {value} ({why})")

    for inv in spec.invariants.values():
        if inv.remote and remote not in inv.remote:
            continue  # not promised against this executor
        if inv.kind == "effect_once":
            must_be_zero(
                "duplicate effects",
                f.duplicate_effects,
                f"invariant {inv.name!r}: {inv.meaning}",
            )
        if inv.kind == "exclusive_work":
            must_be_zero(
                "overlapping runs",
                f.overlapping_runs,
                f"invariant {inv.name!r}: {inv.meaning}; first: {f.overlap_examples[:1]}",
            )
    must_be_zero(
        "entities left holding a lease",
        f.left_leased,
        "every lease lapsed and the sweep ran: a lapse should have moved them",
    )
    must_be_zero(
        "runs the store cannot account for",
        f.runs_unaccounted,
        f"the executor ran an epoch whose {starts!r} history does not record",
    )
    return verdict
