"""What a history must be: a legal path of the declaration, target by target.

The auditor walks each target's history in ``seq`` order, keeping only that target's
current row (epoch, state, the token fingerprint that holds it, the lease deadline) and the
last state of each of its epochs. Its violations are named from the list both audits share
(``_kinds``). For every entry it asks:

- Is ``(event, from_state, to_state)`` declared (``undeclared_transition``)?
- Does it start where the target was (``broken_path``)? An entry from the declaration's
  initial state starts a new epoch, which must be the previous epoch + 1 (``epoch_order``).
- Every other transition must be of the current epoch (``stale_epoch_changed``).
- Do the guards that history can show hold for it? Each declared guard that a history row
  can witness (``WITNESSED`` below) is evaluated by the predicate the machines run, on the
  row before the entry and the entry itself; a guard history cannot show (the draft, the
  remote's fencing) is assumed. An entry is legal if some declared transition with its
  event, source and destination has all of its visible guards holding; otherwise the first
  failing guard names the violation of its kind (``_kinds.broken``).
- Does a transition keep the declared ``left_only_by`` invariants
  (``invariant_left_only_by``), read as the checkers and a lifecycle's audit read them? (A
  discard records a stale owner's refusal: no transition of the target.)
- A ``checkpoint`` (written by pruning) may only open a target's history
  (``checkpoint_misplaced``).
- A discard is recorded against the state its epoch was in (``broken_path``) and is a
  stale owner's by the declaration's rule (``Spec.stale_owner``, which the stores record
  by): it names the event attempted and what the rule named (a stale guard, failing where
  history shows it, or the target's state), judged as a lifecycle's refusal is
  (``_kinds.unexplained_refusal``); a discard recorded before schema version 3 names
  neither, and must be a stale owner's for some event (``refusal_unexplained``).

At the end of a target, the row its history replays to must equal its claim row
(``row_disagrees``, ``row_without_history``, ``history_without_row``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from claimfsm.audit._kinds import broken, left_by_another, unexplained_refusal
from claimfsm.spec import Event, Spec, claim_steps
from claimfsm.spec._predicates import Guard, build_guards
from claimfsm.store._core import CHECKPOINT
from claimfsm.store._sql import HISTORY_COLUMNS

#: The entry columns the auditor reads: the store's history columns after ``seq``, without
#: ``detail`` (long text that no rule reads).
COLUMNS = ("seq", *(c for c in HISTORY_COLUMNS if c != "detail"))
SEQ, TARGET, EPOCH, EVENT, FROM, TO, AT, OWNER, TOKEN = range(9)
LEASE, OUTCOME, ATTEMPTED, REFUSED = 13, 14, 15, 16
#: The replayed fields compared with the claim row: entry columns 2, 4.. 14 but ``at``.
ROW_FIELDS = (EPOCH, TO, OWNER, TOKEN, 9, 10, 11, 12, LEASE, OUTCOME)


@dataclass
class Track:
    """One target's row as its history so far leaves it."""

    target_id: str
    epoch: int = 0
    state: str = ""
    holder: str | None = None  # fingerprint of the token that holds the current epoch
    lease: float | None = None
    last: tuple[Any, ...] | None = None  # the last entry that was not a discard
    epochs: dict[int, str] = field(default_factory=dict)  # epoch -> its last state
    pruned: bool = False  # opened by a checkpoint: older epochs are not in history


#: Guard kinds a history row can witness, by the guards' compiled predicates
#: (``spec._predicates``, the machines' own) read on the target's row before the entry
#: (:class:`_RowSeen`) and the entry as the caller (:class:`_EntrySeen`). A ``compare`` is
#: witnessed when its fact is one history records (the row's ``outcome`` after the entry);
#: the draft and the remote's fencing are not recorded.
WITNESSED = frozenset({"owner", "epoch", "live", "lapsed"})
#: Facts of a ``compare`` guard that history records, and the entry column holding each.
RECORDED_FACTS = {"outcome": OUTCOME}


class _RowSeen:
    """The target's row as its history so far leaves it, as a guard reads a row: the
    holder's token fingerprint stands for its hash (the entry shows the same)."""

    __slots__ = ("epoch", "lease_deadline", "state", "token_hash")

    def __init__(self, t: Track) -> None:
        self.state, self.epoch, self.token_hash, self.lease_deadline = (
            t.state,
            t.epoch,
            t.holder,
            t.lease,
        )

    def column(self, name: str) -> Any:
        return None  # history witnesses no comparison with a column


class _EntrySeen:
    """An entry as a guard reads its caller: the epoch it names, the fingerprint of the
    token it presented, its time, and the facts history records."""

    __slots__ = ("entry", "epoch", "now", "token_hash")

    def __init__(self, e: tuple[Any, ...]) -> None:
        self.entry, self.epoch, self.token_hash, self.now = e, e[EPOCH], e[TOKEN], e[AT]

    def fact(self, name: str) -> Any:
        return self.entry[RECORDED_FACTS[name]] if name in RECORDED_FACTS else None


@dataclass(frozen=True)
class Violation:
    kind: str
    target_id: str
    seqs: tuple[int, ...]  # the entries involved (empty: the claim row alone)
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target_id": self.target_id,
            "seqs": list(self.seqs),
            "message": self.message,
        }


class Rules:
    """The declaration's transitions, as the auditor checks them."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.initial = spec.initial
        # A stale owner's refusal, recorded: the claim's discard, as this declaration names it.
        self.discard = claim_steps(spec).event(Event.DISCARD)
        self.frees = frozenset(spec.states_where("frees_target"))
        # The guards history can witness, each with its compiled predicate, and the free
        # guards, which the auditor judges from the target's last entry; the rest are
        # assumed.
        compiled = build_guards(spec)
        self.free = frozenset(spec.guards_of_kind("free"))
        self.witnessed: dict[str, Guard] = {
            name: compiled[name]
            for name, g in spec.guards.items()
            if g.kind in WITNESSED
            or (g.kind == "compare" and g.column is None and g.fact in RECORDED_FACTS)
        }
        self.declared: dict[tuple[str, str, str], list[tuple[str, ...]]] = {}
        for t in spec.transitions:
            self.declared.setdefault((t.event, t.source, t.dest), []).append(t.guards)
        #: the declared invariants history shows: left_only_by, judged on each transition
        self.left = [i for i in spec.invariants.values() if i.kind == "left_only_by"]

    def begin(self, target_id: str) -> Track:
        return Track(target_id)

    def entry(self, track: Track, e: tuple[Any, ...], report: Callable[..., None]) -> None:
        """Check entry ``e`` against ``track`` (the target so far), then apply it."""
        event = e[EVENT]
        if event == CHECKPOINT:
            if track.last is not None or track.epochs:
                report("checkpoint_misplaced", (e[SEQ],), "a checkpoint after other entries")
            self._apply(track, e)
            track.pruned = True
            return
        if event != self.discard:  # a transition (a discard records a refusal)
            for broke in left_by_another(self.left, e[FROM], event, e[TO]):
                report("invariant_left_only_by", (e[SEQ],), broke)
        if (event, e[FROM], e[TO]) not in self.declared:
            report(
                "undeclared_transition",
                (e[SEQ],),
                f"{event} from {e[FROM]} to {e[TO]} is not declared",
            )
            if event != self.discard:
                self._apply(track, e)
            return
        if event == self.discard:
            self._discard(track, e, report)
            return
        last_seq = () if track.last is None else (track.last[SEQ],)
        if e[FROM] == self.initial:  # a new epoch
            if e[EPOCH] != track.epoch + 1:
                expected = track.epoch + 1
                report(
                    "epoch_order",
                    (*last_seq, e[SEQ]),
                    f"epoch {e[EPOCH]} follows epoch {track.epoch}; expected {expected}"
                    + ("" if track.epoch else " (or a checkpoint, where history was pruned)"),
                )
            failing = self._visible_guards(track, e, target_free=self._free(track))
        else:
            failing = None
            if e[FROM] != track.state:
                was = track.state or "nothing (no epoch yet)"
                report(
                    "broken_path",
                    (*last_seq, e[SEQ]),
                    f"{event} from {e[FROM]}, but the target was {was}",
                )
            elif e[EPOCH] != track.epoch:
                report(
                    "stale_epoch_changed",
                    (*last_seq, e[SEQ]),
                    f"{event} of epoch {e[EPOCH]} while epoch {track.epoch} is current",
                )
            else:  # one violation per entry: the guards only where the path holds
                failing = self._visible_guards(track, e, target_free=True)
        if failing is not None:
            kind, why = broken(failing, self.spec.guards[failing])
            report(kind, (*last_seq, e[SEQ]), f"{event} {e[FROM]} -> {e[TO]}: {why}")
        self._apply(track, e)

    def _free(self, track: Track) -> bool:
        return track.last is None or track.state in self.frees

    def _visible_guards(self, track: Track, e: tuple[Any, ...], *, target_free: bool) -> str | None:
        """None if some declared transition's visible guards all hold; else the first
        failing guard of the transition that fails fewest. A guard history cannot show is
        assumed to hold."""
        best: list[str] | None = None
        seen: tuple[_RowSeen, _EntrySeen] | None = None
        for guards in self.declared[(e[EVENT], e[FROM], e[TO])]:
            failing = []
            for g in guards:
                if g in self.free:  # history knows more than the row: the last entry
                    holds = target_free
                else:
                    predicate = self.witnessed.get(g)
                    if predicate is None:
                        continue  # assumed: history does not record what it reads
                    if seen is None:
                        seen = _RowSeen(track), _EntrySeen(e)
                    holds = predicate(*seen)
                if not holds:
                    failing.append(g)
            if not failing:
                return None
            if best is None or len(failing) < len(best):
                best = failing
        assert best
        return best[0]

    def _discard(self, track: Track, e: tuple[Any, ...], report: Callable[..., None]) -> None:
        """A refused stale operation changes no row. The store records it against the epoch
        it named: from the row's state if that is the current epoch, else from that
        epoch's last recorded state (a discard's included), else the initial state."""
        if e[EPOCH] == track.epoch and track.last is not None:
            expected = track.state
        elif e[EPOCH] in track.epochs:
            expected = track.epochs[e[EPOCH]]
        elif track.pruned and e[EPOCH] < track.epoch:
            expected = None  # an epoch whose history was pruned
        else:
            expected = self.initial
        if expected is not None and e[FROM] != expected:
            report(
                "broken_path",
                (e[SEQ],),
                f"a discard against epoch {e[EPOCH]} from {e[FROM]}, but that epoch was {expected}",
            )
        elif e[ATTEMPTED] is not None or e[REFUSED] is not None:
            why = self._unexplained(track, e)
            if why is not None:
                report(
                    "refusal_unexplained",
                    (e[SEQ],),
                    f"a discard of {e[ATTEMPTED]} against epoch {e[EPOCH]} ({e[REFUSED]}), {why}",
                )
        elif not self._stale_owner(track, e):
            report(
                "refusal_unexplained",
                (e[SEQ],),
                f"a discard against epoch {e[EPOCH]} by the token that holds it, {track.state}:"
                " no event's stale guard fails for it there, and the declaration's rule"
                " calls no owner's event stale in that state",
            )
        track.epochs[e[EPOCH]] = e[TO]

    def _fails(self, track: Track, e: tuple[Any, ...]) -> Callable[[str], bool | None]:
        """Whether a guard failed for the caller of discard ``e``, on the row as history
        leaves it (it has an epoch): True or False where history shows what it reads, else
        None."""
        seen = _RowSeen(track), _EntrySeen(e)

        def fails(g: str) -> bool | None:
            predicate = self.witnessed.get(g)
            return None if predicate is None else not predicate(*seen)

        return fails

    def _unexplained(self, track: Track, e: tuple[Any, ...]) -> str | None:
        """Why discard ``e``'s record (the event attempted, what the rule named) is not
        what the declaration's rule records on the row as history leaves it, or None."""
        if e[ATTEMPTED] is None or e[REFUSED] is None:
            return "but the entry names only one of the event and the guard"
        if track.last is None:
            return None  # no epoch yet: every stale guard fails
        return unexplained_refusal(
            self.spec, e[ATTEMPTED], track.state, e[REFUSED], self._fails(track, e), "target"
        )

    def _stale_owner(self, track: Track, e: tuple[Any, ...]) -> bool:
        """Whether the declaration's stale owner rule (``Spec.stale_owner``, by which the
        stores record a discard) calls the caller of discard ``e`` a stale owner for some
        event, on the row as history leaves it: for a discard recorded before schema
        version 3, which names no event. A guard history cannot witness may have failed."""
        if track.last is None:
            return True  # no epoch yet: every stale guard fails
        fails = self._fails(track, e)
        return any(
            self.spec.stale_owner(event, track.state, lambda g: fails(g) is not False) is not None
            for event in self.spec.events
        )

    def _apply(self, track: Track, e: tuple[Any, ...]) -> None:
        track.epoch = e[EPOCH]
        track.state = e[TO]
        track.holder = e[TOKEN]
        track.lease = e[LEASE]
        track.last = e
        track.epochs[e[EPOCH]] = e[TO]

    def finish(
        self, track: Track | None, claim: tuple[Any, ...] | None, report: Callable[..., None]
    ) -> None:
        """Compare the row a target's history replays to with its claim row (fields in
        ``ROW_FIELDS`` order; the token as its fingerprint)."""
        if track is None or track.last is None:
            if claim is not None:
                report("row_without_history", (), "a claim row with no history behind it")
            return
        if claim is None:
            report(
                "history_without_row",
                (track.last[SEQ],),
                "history records transitions but there is no claim row",
            )
            return
        replayed = tuple(track.last[i] for i in ROW_FIELDS)
        if replayed != claim:
            names = [COLUMNS[i] if i != TO else "state" for i in ROW_FIELDS]
            differ = [
                f"{n}: history {r!r}, claim {c!r}"
                for n, r, c in zip(names, replayed, claim, strict=True)
                if r != c
            ]
            report(
                "row_disagrees",
                (track.last[SEQ],),
                "the claim row is not what history replays to: " + "; ".join(differ),
            )
