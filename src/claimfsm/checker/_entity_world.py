"""The lifecycle world's data, and what reads it besides its steps (:mod:`._entity`).

A row per entity (``Row``: state, epoch, token, lease, declared columns, the fence, the
work running, the requests in flight and landed, linked drafts), a handle per client
(``Handle``), and the world (``EntityWorld``) with its sticky flags; the world's bounds
(``EntityModelConfig``); the executor's and the remote's parts (``executor_parts``,
``fenced``, readback's fence: ``fenced_by_readback``, ``readback_fences``); the request keys
(``KeyShape``); the world's evidence as an executor gives it (``world_facts``); the split
into the shared part and the clients' handles the packed and array searches read
(``_split``, ``_join``); and the views of a row and a caller the compiled guards read
(``WorldRow``, ``WorldCaller``, and ``reads_header_only``: which guards read only the
row's header).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from claimfsm.errors import InvalidArgument
from claimfsm.spec import (
    ABSENT,
    PRESENT,
    REMOTE_MODES,
    RemoteRules,
    Spec,
    draws_keys,
    wake_events,
)
from claimfsm.spec._declaration import GuardDecl
from claimfsm.spec._predicates import guard_reads
from claimfsm.spec._roles import EXECUTOR_FACTS

#: A request to the remote: its epoch and the request key it carries.
Request = tuple[int, int]


class Row(NamedTuple):
    state: str
    epoch: int = 0
    token: int = 0
    live: bool = False
    columns: tuple[int, ...] = ()
    fence: int = 0  # the executor rejects work at this epoch or below
    #: the epochs of the clients whose work on this entity is running, sorted: what the
    #: clients' handles say, kept beside the row so that the world's evidence (``running``)
    #: and ``exclusive_work`` read the row alone (without a remote, or where a guard reads
    #: ``running``; else empty). Derived from the handles, so it adds no state: the counts
    #: are the handles' own.
    working: tuple[int, ...] = ()
    #: the remote (a declaration that declares one): the requests in flight to it, and
    #: those that took effect there, sorted, each as (epoch, key): the request key its
    #: sender held, a number (0: the entity's key; an event declared ``fresh_key`` draws
    #: the next one, ``request_key``)
    in_flight: tuple[Request, ...] = ()
    landed: tuple[Request, ...] = ()
    #: the resends of the current epoch (a declaration with a ``resends`` event), bounded
    #: by ``[world] retries``
    resent: int = 0
    #: the entity's request key now (0 until an event declared ``fresh_key`` draws one),
    #: bounded by ``[world] counts``
    request_key: int = 0
    #: readback's outcome the row records (an event declared ``outcome``): "" none yet in
    #: this epoch (a take clears it), else ``present`` or ``absent``
    outcome: str = ""
    #: a run of the row's epoch reached the executor (without a remote, where a guard
    #: reads readback's ``ran``; a take clears it): the executor's memory, not the store's
    ran: bool = False
    #: linked drafts (a declaration with ``[drafts]``): (drafts, draft, version), read as
    #: :attr:`drafts`, :attr:`draft` and :attr:`version`; one field, empty without them,
    #: so that a world without drafts hashes and compares no more than it did
    linked: tuple[Any, ...] = ()

    @property
    def drafts(self) -> tuple[tuple[str, int], ...]:
        """The entity's drafts, each as (status, version): "a" approved, "p" pending, "d"
        dispatched, "-" not created yet."""
        return self.linked[0] if self.linked else ()

    @property
    def draft(self) -> int:
        """The draft the row's epoch pinned when it was taken (-1: none)."""
        return self.linked[1] if self.linked else -1

    @property
    def version(self) -> int:
        """The version of the pinned draft when it was pinned."""
        return self.linked[2] if self.linked else 0


class Handle(NamedTuple):
    key: int
    epoch: int
    token: int
    seen: str  # the state the client last moved the row into
    working: bool = False  # its external work is running (at the executor, without a remote)
    #: without a remote: "D" its work is due, not yet at the executor (``run`` takes it
    #: there), else "". With one, its request to the remote: "" none, "S" it may send,
    #: "W" sent and waiting, "A" answered
    phase: str = ""
    #: the handle it saved before it crashed, (key, epoch, token), with ``[world] wakes``:
    #: it wakes up once with it. A client that holds no handle but a saved one is
    #: :func:`resting` (key -1); one that holds neither is None.
    saved: tuple[int, ...] = ()
    #: the request key its request carries: the row's as the client's last step left it
    #: while the request is due, then the one it was sent with
    request_key: int = 0


#: A draft's status in the world, as the stores word it (a draft not created yet: none).
DRAFT_WORDS = {"a": "approved", "p": "pending", "d": "dispatched"}


def resting(saved: tuple[int, ...]) -> Handle | None:
    """A client that holds no handle: None, or, with a saved handle, the handle that
    stands for it (key -1, nothing else but what it saved)."""
    return Handle(-1, 0, 0, "", False, "", saved, 0) if saved else None


def holds_handle(client: Handle | None) -> bool:
    """Whether the client holds a handle it acts on (not idle, not only a saved one)."""
    return client is not None and client.key >= 0


class EntityWorld(NamedTuple):
    rows: tuple[Row, ...]
    clients: tuple[Handle | None, ...]
    stale_changed: bool = False  # a stale client's operation changed a row
    #: sticky marks, by invariant name: the ``left_only_by`` invariants broken so far (a
    #: row left their states by another event), and the ``reachable`` examples met by a
    #: step that took their ``event``
    marks: frozenset[str] = frozenset()
    # a request arrived at the remote while one of another epoch of its entity was in flight
    overlap: bool = False


class ExecutorParts(NamedTuple):
    """What the world keeps of the executor (or the remote), read off the declaration by
    both engines: only what a guard asks for, so that other worlds keep their states."""

    #: it can be fenced: a guard reads ``fenced_through`` (a remote only where it fences)
    fenceable: bool
    #: without a remote, it remembers that a run of the row's epoch reached it: a guard
    #: reads readback's ``ran``
    remembers_runs: bool


def executor_parts(spec: Spec, rules: RemoteRules | None) -> ExecutorParts:
    """The executor's parts of the world of ``spec`` against a remote of ``rules`` (None:
    none)."""
    facts = {g.fact for g in spec.guards.values()}
    return ExecutorParts(
        "fenced_through" in facts and (rules is None or rules.fences),
        rules is None and "ran" in facts,
    )


def fenced(row: Row, rules: RemoteRules | None) -> Row:
    """``row`` with the executor (or the remote of ``rules``) fenced through its epoch: a
    fencing remote drops what is in flight at or below the fence."""
    if rules is None:
        return row._replace(fence=row.epoch)
    fence = rules.fence_through(row.fence, row.epoch)
    return row._replace(fence=fence, in_flight=tuple(q for q in row.in_flight if q[0] > fence))


def fenced_by_readback(
    world: EntityWorld,
    key: int,
    event: str,
    fences: frozenset[str],
    rules: RemoteRules | None,
    shape: KeyShape,
) -> EntityWorld:
    """The world the operator's ``event`` acts on: where it fences with readback
    (``fences``: :func:`readback_fences`) and readback finds nothing on entity ``key`` (no
    request with its key took effect; at an executor, no run of its epoch running there
    or reached it), the world with that entity fenced through its epoch; else ``world``.
    The model and the generated stateful test, which hands the store readback's facts,
    read it so."""
    row = world.rows[key]
    if event not in fences or row.fence >= row.epoch:
        return world
    found = _outcome(row, shape) == PRESENT if rules is not None else row.ran or _running_on(row)
    if found:
        return world
    return world._replace(rows=(*world.rows[:key], fenced(row, rules), *world.rows[key + 1 :]))


def readback_fences(spec: Spec, rules: RemoteRules | None, mode: str) -> frozenset[str]:
    """The operator's events that fence before they read back, where readback finds
    nothing (``[world] fence = "with_readback"``; none at ``any_step``, or where nothing
    can be fenced): read off the declaration by both engines, and the generated stateful
    test. An event fences so where its guards ask for both the fence (``fenced_through``)
    and readback's evidence (``outcome`` against a remote, ``running`` or ``ran`` at an
    executor): a design is given the evidence it asks for, no more."""
    if mode != "with_readback" or not executor_parts(spec, rules).fenceable:
        return frozenset()
    evidence = {"outcome"} if rules is not None else EXECUTOR_FACTS
    resends = resends_in(spec)
    reads: dict[str, set[str | None]] = {}
    for t in spec.transitions:
        if spec.role(t.event) in ("operator", "sweep") and t.event not in resends:
            reads.setdefault(t.event, set()).update(spec.guards[g].fact for g in t.guards)
    return frozenset(
        e for e, facts in reads.items() if "fenced_through" in facts and facts & evidence
    )


@dataclass(frozen=True)
class EntityModelConfig:
    """The world's bounds; ``None`` takes the declaration's ``[world]`` value."""

    workers: int | None = None
    keys: int | None = None
    epochs: int | None = None
    counts: int | None = None
    crashes: bool | None = None
    #: resends per epoch (a declaration with a ``resends`` event)
    retries: int | None = None
    #: a crashed client keeps its handle and may wake up with it (needs crashes)
    wakes: bool | None = None
    #: the remote's mode (plain, fencing, dedup), for a declaration that declares a remote
    remote: str | None = None
    #: drafts per entity, and whether each may be edited once (a declaration with [drafts])
    drafts: int | None = None
    edits: bool | None = None
    #: when the operator fences: ``any_step`` or ``with_readback`` (``[world] fence``)
    fence: str | None = None
    #: whether a client carries its request's key from the step that made its work due
    #: (None: it does). False, against a remote: a send carries the entity's key as it is
    #: when sent, and a client hears the answer for its epoch, the claim world's
    #: abstraction against a fencing remote, which a stale request does not get past (a
    #: test compares the claim designs' verdicts both ways). A checker option, not a
    #: ``[world]`` one: it abstracts, the world is the same.
    own_keys: bool | None = None
    #: whether the steps that read the entity's row alone (an idle client's takes and
    #: resends, the operator's and the sweep's events) are listed where they do not fire
    #: (refused by a guard, or past a bound) as well. The generated stateful test lists
    #: them (``verify``): it plays each against the store to see the store refuse it too.
    #: The checker does not (None): a step that does not fire is no step, and asking for
    #: it is most of what the search would do with it. A state's next states, so every
    #: count and verdict, are the same either way; a replay token numbers a world's
    #: actions as listed, so it is played on a model listed as it was made.
    lists_refused: bool | None = None

    def resolved(self, spec: Spec) -> dict[str, Any]:
        from claimfsm.spec._roles import (
            FENCE_MODES,
            LIFECYCLE_WORLD,
            LINKED_WORLD,
            WORLD_OPTIONS,
            has_remote,
        )

        out: dict[str, Any] = {}
        read = LIFECYCLE_WORLD | LINKED_WORLD if spec.drafts is not None else LIFECYCLE_WORLD
        for name, (_default, low, high, _meaning) in WORLD_OPTIONS.items():
            if name not in read and not (name == "retries" and resends_in(spec)):
                if name in LINKED_WORLD and getattr(self, name) is not None:
                    raise InvalidArgument(f"{spec.name} declares no [drafts]: leave out {name}")
                continue
            value = getattr(self, name)
            value = spec.world[name] if value is None else value
            if name == "fence":
                if value not in FENCE_MODES:
                    raise InvalidArgument(
                        f"fence must be one of {list(FENCE_MODES)}, got {value!r}"
                    )
            elif name in ("crashes", "wakes", "edits"):
                if not isinstance(value, bool):
                    raise InvalidArgument(f"{name} must be true or false, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidArgument(f"{name} must be an int from {low} to {high}, got {value!r}")
            out[name] = value
        if not out["crashes"]:
            out["wakes"] = False  # nothing to wake up from
        elif out["wakes"] and not wake_events(spec):
            raise InvalidArgument(
                f"{spec.name}: no owner event leaves the state a taker's event leads into,"
                " so a woken client has nothing to begin again: leave out wakes"
            )
        if self.retries is not None and "retries" not in out:
            raise InvalidArgument(
                f'{spec.name} declares no resends event (remote = "resends"): leave out retries'
            )
        if has_remote(spec):
            mode = spec.world["remote"] if self.remote is None else self.remote
            if mode not in REMOTE_MODES:
                raise InvalidArgument(f"remote must be one of {list(REMOTE_MODES)}, got {mode!r}")
            out["remote"] = mode
        elif self.remote is not None:
            raise InvalidArgument(
                f"{spec.name} declares no remote (no event has a remote role): leave out remote"
            )
        if self.own_keys not in (None, True, False):
            raise InvalidArgument(f"own_keys must be None, True or False, got {self.own_keys!r}")
        if self.own_keys is False and "remote" not in out:
            raise InvalidArgument(
                f"{spec.name} declares no remote: a client has no request key to carry;"
                " leave out own_keys"
            )
        out["own_keys"] = self.own_keys is not False
        if self.lists_refused not in (None, True, False):
            raise InvalidArgument(
                f"lists_refused must be None, True or False, got {self.lists_refused!r}"
            )
        out["lists_refused"] = self.lists_refused is True
        return out


Action = tuple[Any, ...]


Shared = tuple[tuple[Row, ...], bool, frozenset[str], bool]


def _join(shared: Shared, clients: tuple[Handle | None, ...]) -> EntityWorld:
    """The world of a shared part and its clients' handles (``_split``'s inverse), built
    by ``tuple.__new__`` rather than the NamedTuple's constructor, in about half its time
    (timeit of one world, 2026-12-04: 114 ns against 211): the searches join a world for
    every state they expand."""
    rows, stale_changed, marks, overlap = shared
    return _new_world(EntityWorld, (rows, clients, stale_changed, marks, overlap))


_new_world = tuple.__new__


def _split(world: EntityWorld) -> tuple[Shared, tuple[Handle | None, ...]]:
    """The world's shared part (rows, stale_changed, marks, overlap) and its clients'
    handles."""
    return (world.rows, world.stale_changed, world.marks, world.overlap), world.clients


def world_facts(
    world: EntityWorld, key: int, remote: str | None = None, shape: KeyShape | None = None
) -> dict[str, Any]:
    """The world's evidence about entity ``key`` (LIFECYCLE_FACTS), as an executor gives
    it: whether a run at the row's epoch is running at the executor (not one still due),
    whether one reached it (``ran``), and how far the executor (or the remote) is
    fenced; against a remote of mode ``remote`` also readback's ``outcome`` (did a
    request with the entity's request key take effect? ``shape``: how the world makes
    that key, :func:`key_shape`, which names the pinned draft where drafts are linked)."""
    row = world.rows[key]
    facts: dict[str, Any] = {
        "running": _running(world, key),
        "ran": row.ran,
        "fenced_through": row.fence,
    }
    if remote is not None:
        facts["outcome"] = _outcome(row, shape or UNLINKED)
        facts["remote_dedups"] = remote == "dedup"
    return facts


def key_shape(spec: Spec, resolved: Mapping[str, Any]) -> KeyShape:
    """How the world of ``spec`` with the ``resolved`` options
    (:meth:`EntityModelConfig.resolved`) makes a request's key."""
    per_draw = resolved["counts"] + 1 if draws_keys(spec) else 1
    return KeyShape(resolved.get("drafts", 0), per_draw)


class KeyShape(NamedTuple):
    """How a request's key is made, as one number (the same in both engines, so that a
    ``land`` action names the same request in each): without linked drafts, the number an
    event declared ``fresh_key`` drew last (0: the entity's own key); with them, the
    pinned draft and its version too, as the claim's key is (draft, version, nonce)."""

    drafts: int = 0  # drafts per entity (0: none linked)
    per_draw: int = 1  # how many keys fresh_key may draw: [world] counts + 1, or 1

    def current(self, row: Row) -> int:
        """The key of a request sent from ``row`` as it is now."""
        if not self.drafts or row.draft < 0:
            return row.request_key
        return (row.draft * VERSIONS + row.version - 1) * self.per_draw + row.request_key

    def draft_of(self, key: int) -> int:
        """The draft whose content a request with ``key`` carries."""
        return key // (VERSIONS * self.per_draw)

    def words(self, key: int) -> str:
        if not self.drafts:
            return f"k{key}"
        draft, rest = divmod(key, VERSIONS * self.per_draw)
        version, drawn = divmod(rest, self.per_draw)
        return f"d{draft}v{version + 1}" + (f"k{drawn}" if drawn else "")


#: A draft's versions in the worlds: its first, and one edit (``[world] edits``).
VERSIONS = 2


#: The keys of a world without linked drafts or drawn keys: the entity's own.
UNLINKED = KeyShape()


def _outcome(row: Row, shape: KeyShape = UNLINKED) -> str:
    """Readback's answer for ``row``: whether a request with the entity's request key as it
    is now took effect (a key drawn since is asked about, not the one before it)."""
    key = shape.current(row)
    return PRESENT if any(k == key for _, k in row.landed) else ABSENT


def _running(world: EntityWorld, key: int) -> bool:
    """Whether some client's work at entity ``key``'s epoch is running, as the handles
    say (a world need not keep it in its rows, ``Row.working``)."""
    epoch = world.rows[key].epoch
    return any(
        h is not None and h.working and h.key == key and h.epoch == epoch for h in world.clients
    )


def _running_on(row: Row) -> bool:
    """Whether some client's work at the row's epoch is running (``Row.working``)."""
    return row.epoch in row.working


def stored(row: Row) -> Row:
    """``row`` as a store keeps it: without the work its clients run (``Row.working``),
    which a refused client's dropped handle changes while the entity does not, and
    without the remote's requests."""
    if row.working or row.in_flight or row.landed or row.resent or row.ran:  # (key kept)
        return row._replace(working=(), in_flight=(), landed=(), resent=0, ran=False)
    return row


def stored_rows(world: EntityWorld) -> tuple[Row, ...]:
    """The world's rows as a store keeps them (:func:`stored`)."""
    return tuple(stored(row) for row in world.rows)


def _request(request: tuple[int, ...], shape: KeyShape = UNLINKED) -> str:
    """A request in words: its epoch, and its request key where one was drawn or a draft
    made it."""
    epoch, key = request
    return f"e{epoch}" + (f" (key {shape.words(key)})" if key or shape.drafts else "")


def _starts(row: Row, epoch: int) -> Row:
    """``row`` with one more client working at ``epoch``."""
    return row._replace(working=tuple(sorted((*row.working, epoch))))


def _unchanged(row: Row, epoch: int) -> Row:
    """``row`` as it is: a world that does not keep its clients' work in its rows."""
    return row


def _stops(row: Row, epoch: int) -> Row:
    """``row`` with one client fewer working at ``epoch``."""
    working = list(row.working)
    working.remove(epoch)
    return row._replace(working=tuple(working))


def resends_in(spec: Spec) -> tuple[str, ...]:
    """The declaration's ``resends`` events (the claim's same-key retry): the operator's
    events an idle client takes to take the current epoch over and send again."""
    return tuple(e for e in spec.events if spec.remote_role(e) == "resends")


def crash_words(world: dict[str, Any]) -> str | None:
    """How the resolved ``world`` (``EntityModelConfig.resolved``) crashes, in the words
    the CLI and the report use; None: it does not."""
    if not world["crashes"]:
        return None
    if world.get("wakes"):
        return "with crashes, restarts on a saved handle and stale wake-ups"
    return "with crashes and stale wake-ups"


def entity_word(spec: Spec) -> str:
    """What an entity of ``spec`` is called in paths: the lifecycle's name (a variant's
    base's)."""
    return Path(spec.base).stem if spec.base else spec.name


#: What :class:`WorldRow` takes from a row's state, epoch, token and lease alone, and
#: :class:`WorldCaller` from the caller's epoch and token and the world's one clock: a
#: guard that reads no more (``spec._predicates.guard_reads``) reads only the row's
#: header.
HEADER_ROW = frozenset({"state", "epoch", "token_hash", "lease_deadline"})


HEADER_CALLER = frozenset({"epoch", "token_hash", "now"})


def reads_header_only(g: GuardDecl) -> bool:
    """Whether guard ``g`` reads of a world's row only its state, epoch, token and lease,
    and of the caller only its epoch and token (no column, no fact, no draft)."""
    reads = guard_reads(g)
    return (
        not reads.columns
        and not reads.facts
        and reads.row <= HEADER_ROW
        and reads.caller <= HEADER_CALLER
    )


class WorldRow:
    """A world's row as the guards' one Python compiler reads a row (``spec._predicates``):
    the world's token number stands for its hash, and a live lease for a deadline after
    the world's clock (0.0); a lapsed one, or none, has no deadline."""

    __slots__ = (
        "_columns",
        "_values",
        "draft_digest",
        "draft_id",
        "draft_version",
        "epoch",
        "lease_deadline",
        "state",
        "token_hash",
    )

    def __init__(self, row: Row, columns: dict[str, int]) -> None:
        self.state, self.epoch = row.state, row.epoch
        self.token_hash = str(row.token)
        self.lease_deadline = 1.0 if row.live else None
        self._columns, self._values = columns, row.columns
        # the pinned draft: a version stands for its content, so for its digest too
        self.draft_id, self.draft_version = row.draft, row.version
        self.draft_digest = str(row.version)

    def column(self, name: str) -> int | None:
        if name == "epoch":
            return self.epoch
        i = self._columns.get(name)
        return None if i is None else self._values[i]


class WorldCaller:
    """Who acts, as the guards read a caller: a client's handle names its epoch and
    presents its token; the operator and the sweep name the current epoch (``named``) and
    hold no token. The world's evidence is its facts."""

    __slots__ = ("draft", "epoch", "facts", "token_hash")
    now = 0.0
    #: the entity's drafts belong to it: the draft a caller names is this entity's own
    target_id = "entity"

    def __init__(
        self, row: Row, caller: tuple[int, int] | None, named: bool, facts: dict[str, Any]
    ) -> None:
        if caller is not None:
            self.epoch: int | None = caller[0]
            self.token_hash: str | None = str(caller[1])
        else:
            self.epoch, self.token_hash = (row.epoch if named else None), None
        self.facts = facts
        self.draft: DraftSeen | None = None  # the draft it names (linked drafts)

    def fact(self, name: str) -> Any:
        return self.facts.get(name)


class DraftSeen(NamedTuple):
    """A draft as the guards over drafts read it (``draft_ready``, ``draft_pinned``)."""

    draft_id: int
    status: str
    version: int
    digest: str
    target_id: str = WorldCaller.target_id


def _draft_seen(row: Row, draft: int) -> DraftSeen | None:
    """Draft ``draft`` of ``row``'s entity as it is now (None: none, or not created)."""
    if draft < 0 or row.drafts[draft][0] == "-":
        return None
    status, version = row.drafts[draft]
    return DraftSeen(draft, DRAFT_WORDS[status], version, str(version))
