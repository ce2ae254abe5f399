"""The declaration as typed, immutable objects: what a ``specs/*.toml`` file says."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from claimfsm.spec._effects import EFFECTS
from claimfsm.spec._invariants import InvariantDecl
from claimfsm.spec._roles import WORLD_OPTIONS, ColumnDecl

#: What history records as refused when a stale owner's event found its epoch in a state
#: declared ``stale`` (:meth:`Spec.stale_owner`): this prefix and the state's name (no
#: guard's name has a colon).
STALE_STATE = "state:"


@dataclass(frozen=True, slots=True)
class StateDecl:
    name: str
    meaning: str
    terminal: bool = False
    frees_target: bool = False  # the next epoch may be acquired from here
    lease: bool = False  # the lease deadline governs this state
    stale: bool = False  # an owner coming back to this state is a stale owner
    #: the initial state only: the state before an epoch exists, whose takers' transitions
    #: begin the next epoch whatever state the entity is in (their guards decide)
    pseudo: bool = False


@dataclass(frozen=True, slots=True)
class GuardDecl:
    name: str
    meaning: str
    kind: str  # what it checks: one of spec.GUARD_KINDS
    refusal: str | None = None  # exception name in claimfsm.errors.REFUSALS
    stale: bool = False  # failing it marks the caller as a stale owner
    hint: str = ""  # for a refusal: what is wrong and what to do (else a sentence by kind)
    # kind "compare": fact OP column, fact OP value, or column OP value (no fact)
    fact: str | None = None
    op: str | None = None
    column: str | None = None
    value: str | int | float | bool | None = None


@dataclass(frozen=True, slots=True)
class EventDecl:
    """What an event writes besides the state (``[events.NAME]``)."""

    name: str
    sets: tuple[str, ...] = ()  # effects, in spec.EFFECTS: lease, outcome, owner, fresh_token…
    durable: bool = False  # its commit must survive power loss
    by: str | None = None  # who takes it (spec.ROLES); None: as its guards say (Spec.role)
    bumps: tuple[str, ...] = ()  # declared columns it adds one to
    work: str | None = None  # "starts" or "ends" the owner's external work
    #: how it stands to the claim world's remote (spec.REMOTE_ROLES): answered, unanswered,
    #: resends; None: not a step on the remote
    remote: str | None = None
    #: a sweep's event applied where this one is refused as the row is, before it is tried
    #: again, in the same transaction (the claim's acquire lapses a lapsed lease first)
    first: str | None = None


@dataclass(frozen=True, slots=True)
class DraftsDecl:
    """The claim protocol's drafts (``[drafts]``): how many may be live per target."""

    #: At most one pending or approved draft per target (a partial unique index on the
    #: drafts table): a second one is refused. False in the correct design.
    one_live_per_target: bool = False


@dataclass(frozen=True, slots=True)
class TransitionDecl:
    event: str
    source: str
    dest: str  # equals source for an internal transition
    guards: tuple[str, ...] = ()
    internal: bool = False  # recorded only: no state is left or entered
    dispatches: bool = False  # taking it makes the pinned draft dispatched (effect known)


@dataclass(frozen=True)
class Spec:
    """One declared machine. Transitions with ``source = "*"`` are already expanded."""

    name: str
    initial: str
    states: Mapping[str, StateDecl]
    guards: Mapping[str, GuardDecl]
    transitions: tuple[TransitionDecl, ...]
    path: Path | None = None
    description: str = ""  # one line; for a variant: how it differs from its base
    base: str | None = None  # the declaration a variant overlays
    drafts: DraftsDecl | None = None  # the claim protocol's [drafts]
    effects: Mapping[str, EventDecl] = field(default_factory=dict)  # events that write more
    columns: Mapping[str, ColumnDecl] = field(default_factory=dict)  # the row's own columns
    invariants: Mapping[str, InvariantDecl] = field(default_factory=dict)
    #: the checker's world: WORLD_OPTIONS, with the declaration's [world] values
    world: Mapping[str, int | bool | str] = field(
        default_factory=lambda: {k: v[0] for k, v in WORLD_OPTIONS.items()}
    )
    #: the [world] options the declaration names (the rest are defaults)
    world_declared: frozenset[str] = frozenset()
    #: ``[lease] kept``: the row keeps its last lease deadline when it leaves the lease
    #: states (the claim's rows do), rather than clearing it; nothing reads it there
    lease_kept: bool = False
    # Derived, never given: ``replace`` builds them afresh for the copy it makes.
    _by_event_source: dict[tuple[str, str], tuple[TransitionDecl, ...]] = field(
        init=False, default_factory=dict, repr=False, compare=False
    )
    _source_by_dest: dict[tuple[str, str], str] = field(
        init=False, default_factory=dict, repr=False, compare=False
    )
    #: :meth:`lifecycle_view`, once made (every lifecycle consumer asks for it)
    _view: list[Spec] = field(init=False, default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[tuple[str, str], list[TransitionDecl]] = {}
        for t in self.transitions:
            index.setdefault((t.event, t.source), []).append(t)
            if not t.internal:
                self._source_by_dest.setdefault((t.event, t.dest), t.source)
        self._by_event_source.update({k: tuple(v) for k, v in index.items()})

    @property
    def events(self) -> tuple[str, ...]:
        """Event names in declaration order."""
        return tuple(dict.fromkeys(t.event for t in self.transitions))

    def lifecycle_view(self) -> Spec:
        """The declaration as a lifecycle's one row per entity runs it. Where the initial
        state is declared ``pseudo`` (the state before an epoch exists: the claim's
        ``unclaimed``), a taker's transition out of it begins the next epoch from whatever
        state the entity is in, its guards alone (a ``free`` guard) keeping a busy entity:
        the view declares it, after the transitions declared there, out of every other
        state. Any other declaration is its own view. Every lifecycle consumer (its
        machine, store, audit, checker world and Promela) reads the view; the diagrams and
        the claim's own consumers read the declaration."""
        initial = self.states[self.initial]
        if not initial.pseudo:
            return self
        if self._view:
            return self._view[0]
        takes = [
            t
            for t in self.transitions
            if t.source == self.initial and not t.internal and self.role(t.event) == "taker"
        ]
        copies = tuple(
            replace(t, source=s) for s in self.states if s != self.initial for t in takes
        )
        states = {**self.states, self.initial: replace(initial, pseudo=False)}
        self._view.append(replace(self, states=states, transitions=self.transitions + copies))
        return self._view[0]

    def transitions_for(self, event: str, source: str) -> tuple[TransitionDecl, ...]:
        """The transitions ``event`` may take from ``source``, tried in declaration order."""
        return self._by_event_source.get((event, source), ())

    def sources(self, event: str) -> tuple[str, ...]:
        """States from which ``event`` changes state (internal transitions excluded)."""
        return tuple(
            dict.fromkeys(t.source for t in self.transitions if t.event == event and not t.internal)
        )

    def source_of(self, event: str, dest: str) -> str:
        """The state from which ``event`` reaches ``dest``: the one, for a declaration a store
        runs (``compile_writes`` refuses one where two sources reach it); else the first."""
        return self._source_by_dest[(event, dest)]

    def require_sources_determined(self) -> None:
        """Raise ``SpecError`` where one event reaches one state from two sources: a store
        records where a transition came from by its event and destination."""
        from claimfsm.errors import SpecError

        seen: dict[tuple[str, str], str] = {}
        for t in self.transitions:
            if t.internal:
                continue
            prior = seen.setdefault((t.event, t.dest), t.source)
            if prior != t.source:
                raise SpecError(
                    f"{self.path or self.name}: event {t.event!r} reaches {t.dest!r} from both"
                    f" {prior!r} and {t.source!r}; a store records where a transition came"
                    " from by its destination: use two event names"
                )

    def event_effects(self, event: str) -> tuple[tuple[str, str], ...]:
        """(column, Facts field) of each effect ``event`` declares, in declaration order."""
        decl = self.effects.get(event)
        return () if decl is None else tuple(EFFECTS[e] for e in decl.sets)

    def dispatching(self) -> dict[tuple[str, str], tuple[tuple[str, ...], ...]]:
        """(event, dest) -> for each transition marked ``dispatches``: the guards that tell
        it from another transition of that event into that state, which a store checks
        after the write: the ``compare`` guards over the caller's facts alone (their
        values do not change with the row). Empty tuple: always."""
        found: dict[tuple[str, str], list[tuple[str, ...]]] = {}
        for t in self.transitions:
            if t.dispatches:
                own = tuple(
                    g
                    for g in t.guards
                    if self.guards[g].kind == "compare" and self.guards[g].column is None
                )
                found.setdefault((t.event, t.dest), []).append(own)
        return {k: tuple(v) for k, v in found.items()}

    def role(self, event: str) -> str:
        """Who takes ``event`` (spec.ROLES): as declared with ``by``, else as its guards say:
        an ``owner`` guard makes it the owner's, a ``free`` guard a taker's, a ``lapsed``
        guard the sweep's, and anything else the operator's."""
        decl = self.effects.get(event)
        if decl is not None and decl.by is not None:
            return decl.by
        kinds = {
            self.guards[g].kind for t in self.transitions if t.event == event for g in t.guards
        }
        for kind, role in (("owner", "owner"), ("free", "taker"), ("lapsed", "sweep")):
            if kind in kinds:
                return role
        return "operator"

    def events_by(self, role: str) -> tuple[str, ...]:
        """The events ``role`` takes (spec.ROLES: :meth:`role`), in declaration order."""
        return tuple(e for e in self.events if self.role(e) == role)

    def work(self, event: str) -> str | None:
        """``starts`` or ``ends`` if ``event`` starts or ends the owner's external work."""
        decl = self.effects.get(event)
        return None if decl is None else decl.work

    def remote_role(self, event: str) -> str | None:
        """How ``event`` stands to the claim world's remote (``answered``, ``unanswered``,
        ``resends``: ``REMOTE_ROLES``), or None."""
        decl = self.effects.get(event)
        return None if decl is None else decl.remote

    def first(self, event: str) -> str | None:
        """The sweep's event applied to the key's current epoch where ``event`` is refused
        as the row is, before ``event`` is tried once more, in the same transaction
        (``first``); None: nothing first."""
        decl = self.effects.get(event)
        return None if decl is None else decl.first

    def durable_events(self) -> frozenset[str]:
        """Events whose commit must survive power loss."""
        return frozenset(e for e, d in self.effects.items() if d.durable)

    def events_setting(self, effect: str) -> frozenset[str]:
        """Events that declare ``effect`` in their ``sets`` (fresh_token, fresh_key, ...)."""
        return frozenset(e for e, d in self.effects.items() if effect in d.sets)

    def stale_guards(self, event: str, state: str | None = None) -> tuple[str, ...]:
        """The guards declared ``stale`` that every transition of ``event`` from ``state``
        has, in the order written (where none leaves ``state``, or it is not given: every
        transition of ``event`` but an internal one): where one fails, the caller is a
        stale owner (:meth:`stale_owner`). An event taken by an owner from one state and
        by anyone from another makes a stale owner only where it needs the owner."""
        decls: list[TransitionDecl] = []
        if state is not None:
            decls = list(self.transitions_for(event, state))
        if not decls:
            decls = [t for t in self.transitions if t.event == event and not t.internal]
        if not decls:
            return ()
        return tuple(
            g
            for g in decls[0].guards
            if self.guards[g].stale and all(g in t.guards for t in decls[1:])
        )

    def stale_state_refuses(self, event: str, state: str) -> bool:
        """Whether an owner whose epoch and token are current is a stale owner when its
        ``event`` finds the entity in ``state``: the state is declared ``stale`` (an
        owner coming back to it no longer holds the entity), ``event`` is an owner's
        (:meth:`role`) whose stale guards showed the caller holds the epoch, and no
        transition of ``event`` leaves ``state`` (one declared from it is taken or
        refused by its own guards)."""
        return (
            self.states[state].stale
            and self.role(event) == "owner"
            and not self.transitions_for(event, state)
            and bool(self.stale_guards(event, state))
        )

    def stale_owner(self, event: str, state: str, fails: Callable[[str], bool]) -> str | None:
        """Whether a refused ``event`` in ``state`` is a stale owner's, the one rule every
        consumer reads (both machines and so both kinds of store, both checker worlds and
        their SPIN twins, the verifies, the replay and the audits): the first guard of
        :meth:`stale_guards` (from ``state``) that ``fails`` (its name), else the state if
        :meth:`stale_state_refuses` (``STALE_STATE`` + its name), else None: the refusal
        is not a stale owner's and nothing is recorded."""
        for g in self.stale_guards(event, state):
            if fails(g):
                return g
        if self.stale_state_refuses(event, state):
            return STALE_STATE + state
        return None

    def refusing_guard(self, event: str, state: str, fails: Callable[[str], bool]) -> str | None:
        """The guard a caller refused ``event`` in ``state`` is told about where it is no
        stale owner (:meth:`stale_owner` first): of the transitions of ``event`` from
        ``state``, the one that came furthest (its first guard that ``fails`` latest in
        its list; the first written on a tie), and that guard. None where one of them
        fires (no guard ``fails``) or none leaves ``state``. Both machines, and so both
        kinds of store, choose a refusal by this."""
        best: tuple[int, str] | None = None
        for t in self.transitions_for(event, state):
            first = next((i for i, g in enumerate(t.guards) if fails(g)), None)
            if first is None:
                return None
            if best is None or first > best[0]:
                best = (first, t.guards[first])
        return None if best is None else best[1]

    def guards_of_kind(self, kind: str) -> tuple[str, ...]:
        """Names of the declared guards of ``kind`` (owner, live, compare, ...)."""
        return tuple(name for name, g in self.guards.items() if g.kind == kind)

    def lease_cleared_in(self) -> frozenset[str]:
        """The states whose row holds no lease deadline once a transition enters them: the
        states without ``lease = true``, unless ``[lease] kept`` keeps the last deadline
        there. The lifecycle store's compiled writes, the lifecycle world and its Promela
        all read this one rule."""
        if self.lease_kept:
            return frozenset()
        return frozenset(name for name, s in self.states.items() if not s.lease)

    def pinning_states(self) -> frozenset[str]:
        """The states in which the entity's pinned draft may not be edited: those a
        transition declared ``dispatches`` leaves, where the pinned content may yet be
        found dispatched (the claim's ``sending`` and ``uncertain``). Every store and both
        checker worlds refuse an edit of the pinned draft there."""
        return frozenset(t.source for t in self.transitions if t.dispatches)

    def states_where(self, flag: str) -> tuple[str, ...]:
        """Names of the states whose boolean ``flag`` (terminal, frees_target, ...) is set."""
        return tuple(name for name, s in self.states.items() if getattr(s, flag))
