"""After a campaign: what the store and the remote's log say, and which promises held.

The promises about the remote are the declaration's: an ``exclusive_work`` invariant that
holds against the campaign's remote requires no overlapping sends, an ``effect_once`` one
no duplicate effects; the rest (nothing left sending, epochs in order, history that
replays, effects accounted for) are what every store owes its history.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, TypeVar

from claimfsm.campaign._remote import Request
from claimfsm.spec import Event, State
from claimfsm.store import Store, claim_fields, replay


@dataclass
class Findings:
    """Figures read back from the store's history and the remote's log."""

    # what the remote saw
    requests: int = 0
    effects: int = 0
    fenced: int = 0
    deduplicated: int = 0
    lost_requests: int = 0
    lost_acks: int = 0
    overlapping_sends: int = 0  # pairs of requests of two epochs of one target in flight at once
    same_epoch_overlaps: int = 0  # a same-key retry while its epoch's earlier request was in flight
    overlap_examples: list[str] = field(default_factory=list)  # the first few, for the report
    duplicate_effects: int = 0  # effects beyond the first for one draft
    # what the store says
    drafts: int = 0
    dispatched: int = 0
    epochs: int = 0
    sends_begun: int = 0
    confirmed: int = 0
    uncertain: int = 0
    reconciled_present: int = 0
    reconciled_absent: int = 0
    retried: int = 0
    expired: int = 0
    released: int = 0
    discarded: int = 0
    left_sending: int = 0
    left_uncertain: int = 0
    left_uncertain_without_effect: int = 0
    missing_epochs: int = 0
    reused_epochs: int = 0
    history_mismatches: int = 0  # targets whose history does not replay to the current row
    audit_violations: int = 0  # what ``claimfsm audit`` finds in the database afterwards
    audit_examples: list[str] = field(default_factory=list)  # the first few, for the report
    # the store and the remote against each other
    confirmed_without_effect: int = 0
    absent_but_landed: int = 0  # reconciled absent, yet an effect of that epoch exists
    effects_unaccounted: int = 0  # an effect whose draft is neither dispatched nor uncertain

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


F = TypeVar("F")


@dataclass
class Verdict(Generic[F]):
    """The figures (a claim's :class:`Findings`, or a lifecycle's) and what they break."""

    findings: F
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def overlapping_pairs(requests: list[Request]) -> list[tuple[Request, Request]]:
    """Pairs of requests for one target that were in flight at the same time at the remote."""
    by_target: dict[str, list[Request]] = defaultdict(list)
    for r in requests:
        if r.admitted and r.ended > r.started:
            by_target[r.target_id].append(r)
    pairs = []
    for reqs in by_target.values():
        reqs.sort(key=lambda r: r.started)
        for i, a in enumerate(reqs):
            for b in reqs[i + 1 :]:
                if b.started >= a.ended:
                    break  # sorted by start: no later request overlaps a either
                pairs.append((a, b))
    return pairs


def overlaps(requests: list[Request]) -> tuple[int, int]:
    """(pairs of different epochs, pairs of one epoch) of one target in flight at once."""
    pairs = overlapping_pairs(requests)
    cross = sum(a.epoch != b.epoch for a, b in pairs)
    return cross, len(pairs) - cross


def judge(store: Store, log: list[Request], mode: str, targets: list[str]) -> Verdict[Findings]:
    f = Findings()
    f.requests = len(log)
    results = Counter(r.result for r in log)
    f.fenced = results["fenced"]
    f.deduplicated = results["deduplicated"]
    f.lost_requests = results["lost-request"]
    f.lost_acks = results["lost-ack"]
    landed = [r for r in log if r.took_effect]
    f.effects = len(landed)
    pairs = overlapping_pairs(log)
    across = [(a, b) for a, b in pairs if a.epoch != b.epoch]
    f.overlapping_sends, f.same_epoch_overlaps = len(across), len(pairs) - len(across)
    f.overlap_examples = [
        f"{a.target_id}: epoch {a.epoch} ({a.result}, {1000 * (a.ended - a.started):.0f} ms)"
        f" overlapped epoch {b.epoch} ({b.result}) by {1000 * (a.ended - b.started):.0f} ms"
        for a, b in across[:5]
    ]
    per_draft = Counter(r.draft_id for r in landed)
    f.duplicate_effects = sum(n - 1 for n in per_draft.values() if n > 1)
    landed_keys = {(r.target_id, r.idempotency_key) for r in landed}
    landed_epochs = {(r.target_id, r.epoch) for r in landed}

    history = store.history()
    claims = {c.target_id: c for c in store.claims()}
    acquired: dict[str, list[int]] = defaultdict(list)
    steps = store.steps  # the declaration's names, read as the typed face
    for e in history:
        event, to = steps.event_role(e.event), steps.state_role(e.to_state)
        if event == Event.ACQUIRE:
            acquired[e.target_id].append(e.epoch)
        elif event == Event.BEGIN_SEND:
            f.sends_begun += 1
        elif event == Event.RETRY:
            f.retried += 1
        elif event == Event.DISCARD:
            f.discarded += 1
        if event == Event.DISCARD or e.from_state == e.to_state:
            continue
        if to == State.CONFIRMED:
            f.confirmed += 1
            f.confirmed_without_effect += (e.target_id, e.idempotency_key) not in landed_keys
        elif to == State.UNCERTAIN:
            f.uncertain += 1
        elif to == State.EXPIRED:
            f.expired += 1
        elif to == State.RELEASED:
            f.released += 1
        elif to == State.RECONCILED and e.outcome == "present":
            f.reconciled_present += 1
        elif to == State.RECONCILED:
            f.reconciled_absent += 1
            f.absent_but_landed += (e.target_id, e.epoch) in landed_epochs
    for epochs in acquired.values():
        f.epochs += len(epochs)
        f.reused_epochs += len(epochs) - len(set(epochs))
        f.missing_epochs += max(epochs) - len(set(epochs))
    replayed = replay(history, store.spec)
    f.history_mismatches = sum(replayed.get(t) != claim_fields(c) for t, c in claims.items()) + len(
        set(replayed) - set(claims)
    )
    f.left_sending = sum(steps.state_role(c.state) == State.SENDING for c in claims.values())
    stuck = [c for c in claims.values() if steps.state_role(c.state) == State.UNCERTAIN]
    f.left_uncertain = len(stuck)
    f.left_uncertain_without_effect = sum(
        (c.target_id, c.idempotency_key) not in landed_keys for c in stuck
    )
    pinned_uncertain = {c.draft_id for c in stuck}
    dispatched: set[int] = set()
    for t in targets:
        drafts = store.drafts(t)
        f.drafts += len(drafts)
        dispatched |= {d.draft_id for d in drafts if d.status == "dispatched"}
    f.dispatched = len(dispatched)
    f.effects_unaccounted = sum(
        d not in dispatched and d not in pinned_uncertain for d in per_draft
    )

    v: list[str] = []

    def must_be_zero(name: str, value: int, why: str) -> None:
        if value:
            v.append(f"{value} {name}: {why}")

    # The promises the declaration makes against this remote ([invariants] of the kinds
    # the remote's log can judge), each by its name.
    for inv in store.spec.invariants.values():
        if not inv.applies(mode):
            continue
        if inv.kind == "exclusive_work":
            why = f"{inv.name}: two epochs of one target in flight"
            if mode == "dedup":
                why += (
                    " (a deduping remote does not refuse a stalled worker's late request as a"
                    " fencing one does; see RELIABILITY.md)"
                )
            must_be_zero("overlapping sends", f.overlapping_sends, why)
        elif inv.kind == "effect_once":
            why = f"{inv.name}: a draft's effect twice, against a {mode} remote"
            must_be_zero("duplicate effects", f.duplicate_effects, why)
    must_be_zero("claims left in sending", f.left_sending, "after the closing sweep")
    must_be_zero("missing epochs", f.missing_epochs, "epochs must count up by one")
    must_be_zero("reused epochs", f.reused_epochs, "an epoch was acquired twice")
    must_be_zero("targets whose history does not replay", f.history_mismatches, "see history")
    must_be_zero("confirmed epochs without an effect", f.confirmed_without_effect, "at the remote")
    must_be_zero("epochs reconciled absent whose effect landed", f.absent_but_landed, "fence")
    must_be_zero(
        "effects the store does not account for", f.effects_unaccounted, "draft not dispatched"
    )
    if mode != "plain":
        must_be_zero("claims left uncertain", f.left_uncertain, "readback must resolve them")
    return Verdict(f, v)
