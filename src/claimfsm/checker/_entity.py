"""Any declared lifecycle as a model for the checker: the world is read from the declaration.

Each entity (``keys`` of them) is one row: its state, epoch, owner token, whether the
lease is live, its declared columns, and how far the executor is fenced. Clients
(``workers``) are idle or hold a handle (entity, epoch, token, the state they last saw,
whether their external work is running). Who takes an event is its declared role
(``Spec.role``): a *taker* is an idle client and starts a new epoch with a fresh token;
an *owner* event is taken by a client on its handle, from the state it last saw, so
stale clients act on rows that moved on; *operator* and *sweep* events act on the row as
it is, naming its current epoch. The world's faults are actions the search may take at
any point: the lease deadline passes, a client crashes (its work stops and it forgets its
handle, or, with ``[world] wakes``, keeps it saved and may wake up once with it to begin
its work again: ``wake_events``), the executor is fenced through the current epoch (when
a guard reads ``fenced_through``; with ``[world] fence = "with_readback"`` not as a step of
its own but inside an operator's event that asks for the fence and reads back, where
readback finds nothing: ``readback_fences``). Without a remote, a client's work is due once it takes
its ``work = "starts"`` event (``Handle.phase`` "D") and runs once it reaches the
executor (``run``), which refuses it when fenced through its epoch: readback cannot see
a run still on its way, as a real executor cannot. A client whose operation is refused
drops its handle and stops its work, as a keep-alive cancels on loss; a client that moved
the entity into a state from which it has no event to take, with no work running or due,
is done with the handle and idle again; a client that does nothing for a while is simply
not scheduled, which is how a paused worker wakes up stale. A declaration's ``resends``
events are bounded per epoch by ``[world] retries`` (``Row.resent``), as the claim
world's retries.

Guards are true as their declared kinds say, by the predicates the machines run
(``spec._predicates``, read on a view of the world's row and caller; ``compare`` reads the
row's columns and the world's evidence: ``running``, whether a run of the row's epoch is
running at the executor, and ``fenced_through``); the declaration's transitions say where an
event leads. The properties are the declaration's ``[invariants]`` (``exclusive_work``,
``row``, ``left_only_by``, ``eventually``, ``taken``, and ``reachable`` examples: a row in some
states, or a step that took some event, which the world marks as it marks a broken
``left_only_by``) and the framework's own promise that a stale client's operation changes
nothing. Nothing here names a state, event or guard.

A declaration that gives its events remote roles has a remote too (``RemoteRules``, the
claim world's): beside each row, the requests in flight and those that took effect, each
as (epoch, request key), and the entity's request key (0, its own, until an event
declared ``fresh_key`` draws the next); in each handle, its request's phase and the key
it carries (the row's as the client's last step left it, until it sends). A client
whose work started sends one request (``send``); the request lands later or never
(``land``: applied, or rejected by a fencing remote's fence, or a duplicate of its key at
a deduplicating one),
after its sender stopped waiting (an ``unanswered`` event), crashed or moved on; the
sender hears the answer (``ack``) only once it took effect, and takes an ``answered``
event only then. An idle client takes a ``resends`` event to hold the current epoch with
a fresh token and send again. Readback's ``outcome`` is whether a request with the
entity's request key as it is now took effect; the operator's fence is the remote's;
``exclusive_work`` is that no request arrived while another epoch's was in flight
(``overlap``), ``effect_once`` that one request took effect at most, under any key. An
invariant that names remote modes (``remote = ["fencing"]``: the promise's tiers) is checked
only against a remote of one of them, as in the claim world and the campaign's verdict.

The world runs the declaration's lifecycle view (``Spec.lifecycle_view``): where the initial
state is declared ``pseudo`` (the claim's ``unclaimed``, the state before an epoch exists),
a taker's transitions out of it are taken from every state, its guards deciding. An event
declared ``by = "refusal"`` (the claim's ``discard``) is taken by no one: it records a stale
owner's refused operation, and the world marks a step refused as a stale owner's
(``Spec.stale_owner``) as taking it, for a ``reachable`` example that names it.

The world splits for the packed and array searches (``Processes``): the rows are the
shared part and each client's handle its part. A client's action reads and changes the
rows and its own handle alone; without a remote (or where a guard reads ``running``) the
work running on an entity is kept in its row (``Row.working``, derived from the handles),
so readback's ``running`` and ``exclusive_work`` read the rows alone (against a remote no
one reads it there, and it is not kept, so that the rows split no finer than they must);
whether a bound stops a next step is decided for the world's events by the rows and for
each client's by the rows and that client (``ByParts``).

The world's data (rows, handles, the bounds, the views the guards read) is in
:mod:`._entity_world`; the invariants compiled into properties, and fairness, in
:mod:`._entity_properties`; the steps, the listing and the search's parts here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from claimfsm.checker._engine import Model, Property
from claimfsm.checker._entity_properties import (
    _invariant,
    _live_drafts,
    _marked,
    _obligation,
    _some_row_in,
    _taken,
)
from claimfsm.checker._entity_text import Firing, WorldText
from claimfsm.checker._entity_world import (
    Action,
    EntityModelConfig,
    EntityWorld,
    Handle,
    Row,
    Shared,
    WorldCaller,
    WorldRow,
    _draft_seen,
    _join,
    _outcome,
    _running_on,
    _split,
    _starts,
    _stops,
    _unchanged,
    entity_word,
    executor_parts,
    fenced,
    fenced_by_readback,
    key_shape,
    readback_fences,
    reads_header_only,
    resends_in,
    resting,
)
from claimfsm.checker._packed import ByParts, Processes
from claimfsm.errors import SpecError
from claimfsm.spec import (
    RemoteRules,
    Spec,
    lifecycle_world_problem,
    step_events,
    wake_events,
)
from claimfsm.spec._declaration import TransitionDecl
from claimfsm.spec._invariants import leaves_by_another
from claimfsm.spec._predicates import build_guards


def entity_model(spec: Spec, config: EntityModelConfig | None = None) -> Model[EntityWorld, Action]:
    """The checker model of any declaration, with the declaration's invariants."""
    _refuse_what_this_world_cannot_answer(spec)  # the declaration's problems first
    spec = spec.lifecycle_view()  # one row per entity: a pseudo initial state's takers
    cfg = (config or EntityModelConfig()).resolved(spec)
    workers, keys, epochs, counts = cfg["workers"], cfg["keys"], cfg["epochs"], cfg["counts"]
    retries = cfg.get("retries", 0)
    columns = tuple(spec.columns)
    defaults = tuple(spec.columns[c].default for c in columns)
    col_index = {c: i for i, c in enumerate(columns)}
    lease_states = frozenset(spec.states_where("lease"))
    lease_cleared = spec.lease_cleared_in()
    terminal = frozenset(spec.states_where("terminal"))
    roles = {e: spec.role(e) for e in spec.events}
    # The remote, where the declaration declares one: the owner sends one request once
    # its work starts, hears an answer only once a request of its epoch took effect, and
    # takes an ``answered`` event only then, an ``unanswered`` one while it waits.
    rules = RemoteRules(cfg["remote"]) if "remote" in cfg else None
    # a request's key: drawn by fresh_key events, and of the pinned draft (linked drafts)
    shape = key_shape(spec, cfg)
    answered = frozenset(e for e in spec.events if spec.remote_role(e) == "answered")
    unanswered = frozenset(e for e in spec.events if spec.remote_role(e) == "unanswered")
    # the operator's events an idle client takes to take the current epoch over and send
    # again (the claim's retry): the client holds the epoch with the fresh token
    resends = resends_in(spec)
    fenceable, remembers_runs = executor_parts(spec, rules)
    guards = build_guards(spec)  # the machines' predicates, read on the world's rows
    bumps = {e: tuple(col_index[c] for c in d.bumps) for e, d in spec.effects.items()}
    sets = {e: frozenset(d.sets) for e, d in spec.effects.items()}
    # The events a client holding a handle may take, by the state it last saw.
    owner_events: dict[str, tuple[str, ...]] = {}
    for t in spec.transitions:
        if roles[t.event] == "owner":
            seen = owner_events.setdefault(t.source, ())
            if t.event not in seen:
                owner_events[t.source] = (*seen, t.event)
    takers = spec.events_by("taker")
    environment = tuple(
        e for e in spec.events if roles[e] in ("operator", "sweep") and e not in resends
    )
    key_word = entity_word(spec)
    # the events a client woken from a crash with its saved handle may take ([world] wakes)
    woken = wake_events(spec) if cfg["wakes"] else ()
    # Linked drafts ([drafts]): a taker names one of the entity's drafts and its epoch pins
    # it (the version); an author edits (once each), approves and creates drafts at any
    # time, except that the pinned draft is not edited where it may yet be dispatched
    # (``pinning_states``), nor a second live one created where one live is allowed.
    n_drafts = cfg.get("drafts", 0)
    edits = cfg.get("edits", False)
    one_live = spec.drafts is not None and spec.drafts.one_live_per_target
    pinning = spec.pinning_states()
    first_drafts = tuple(("-" if one_live and d > 0 else "a", 1) for d in range(n_drafts))

    # What an event does to a row depends on the row, the caller and the world's evidence
    # alone, and few such situations recur across many worlds: each is computed once.
    fired: dict[tuple[Any, ...], tuple[str, Row] | tuple[None, str] | None] = {}
    stale_failing: dict[tuple[Any, ...], str] = {}
    narrow_stale: dict[tuple[str, str], bool] = {}
    # the events some of whose guards read the evidence ``running`` (the others do not ask)
    reads_running = frozenset(
        t.event for t in spec.transitions if any(spec.guards[g].fact == "running" for g in t.guards)
    )

    # ``[world] fence``: the operator fences at any step, or only inside an operator's
    # event that asks for the fence and reads back (``readback_fences``), where readback
    # finds nothing: it then fences through the row's epoch and reads again (the claim
    # world's reconcile), and where the event is refused nothing changes, the fence too.
    fences_with_readback = readback_fences(spec, rules, cfg["fence"])
    # The work running on an entity is kept in its row (``Row.working``) only where the
    # rows alone must answer for it: without a remote (readback's ``running``, the fence,
    # ``exclusive_work``), or where a guard reads ``running``. Elsewhere, as against the
    # claim's remote, it would only split the rows (the shared part) by what the handles
    # already say, and the packed search would decide each client's steps more often.
    keeps_work = rules is None or bool(reads_running)
    starts = _starts if keeps_work else _unchanged
    stops = _stops if keeps_work else _unchanged
    # whether a client carries its request's key (EntityModelConfig.own_keys)
    carries = cfg["own_keys"]
    lists_refused = cfg["lists_refused"]

    def key_carried(row: Row) -> int:
        """The key a client whose request is due carries: the entity's as ``row`` is now,
        or none where the send takes the entity's key as it is when sent."""
        return shape.current(row) if carries else 0

    def read_back(world: EntityWorld, key: int, event: str) -> EntityWorld:
        return fenced_by_readback(world, key, event, fences_with_readback, rules, shape)

    def fire(
        world: EntityWorld,
        key: int,
        event: str,
        caller: tuple[int, int] | None,
        named: bool,
        draft: int = -1,
    ) -> tuple[str, Row] | tuple[None, str] | None:
        """(dest, new row) when ``event`` fires on entity ``key``; (None, failing guards)
        when it is refused; None when the event has no transition from the row's state.
        ``caller``: the handle's (epoch, token); ``named``: the current epoch is named;
        ``draft``: the draft a taker names (linked drafts)."""
        row = world.rows[key]
        # the row holds the evidence it needs; a taker's draft, where it names one
        situation = (
            (row, event, caller, named, draft) if draft >= 0 else (row, event, caller, named)
        )
        found = fired.get(situation, fired)
        if found is not fired:
            return found  # type: ignore[return-value]
        found = fired[situation] = _fire(row, event, caller, named, draft)
        return found

    def _fire(
        row: Row, event: str, caller: tuple[int, int] | None, named: bool, draft: int = -1
    ) -> tuple[str, Row] | tuple[None, str] | None:
        candidates = spec.transitions_for(event, row.state)
        if not candidates:
            return None
        # Where every guard of the event's transitions from this state reads only the
        # row's header (state, epoch, token, lease) and the caller's epoch and token
        # (``reads_header_only``), the verdict is looked up by those alone: the same
        # verdict (most often a stale owner's refusal) recurs in many rows that differ
        # elsewhere, and only a transition that fires is then applied to the whole row.
        narrow = header_verdicts.get((event, row.state))
        if narrow is None:
            narrow = header_verdicts[(event, row.state)] = all(
                reads_header_only(spec.guards[g]) for t in candidates for g in t.guards
            )
        if narrow:
            situation = (event, row.state, row.epoch, row.token, row.live, caller, named)
            verdict = verdicts.get(situation)
            if verdict is None:
                verdict = verdicts[situation] = _verdict(
                    row, candidates, event, caller, named, draft
                )
        else:
            verdict = _verdict(row, candidates, event, caller, named, draft)
        t, failing = verdict
        if t is None:
            return None, failing
        taking = caller is None and not named
        after = _after(row, event, t.dest, taking, _outcome(row, shape) if rules else "")
        if row.drafts:
            after = _linked(after, draft if taking else -1, t.dispatches)
        return t.dest, after

    header_verdicts: dict[tuple[str, str], bool] = {}
    verdicts: dict[tuple[Any, ...], tuple[TransitionDecl | None, str]] = {}

    def _verdict(
        row: Row,
        candidates: Sequence[TransitionDecl],
        event: str,
        caller: tuple[int, int] | None,
        named: bool,
        draft: int,
    ) -> tuple[TransitionDecl | None, str]:
        """The first of ``candidates`` (``event``'s transitions from the row's state) whose
        guards all hold (and ""), or None and the guards that failed, joined by commas."""
        seen, who = _views(row, event, caller, named, draft)
        failing: list[str] = []
        for t in candidates:
            bad = [g for g in t.guards if not guards[g](seen, who)]
            if not bad:
                return t, ""
            failing += [g for g in bad if g not in failing]
        return None, ", ".join(failing)

    def _views(
        row: Row, event: str, caller: tuple[int, int] | None, named: bool, draft: int
    ) -> tuple[WorldRow, WorldCaller]:
        """The row and the caller as the guards' predicates read them for ``event``."""
        running = event in reads_running and _running_on(row)
        facts: dict[str, Any] = {"running": running, "ran": row.ran, "fenced_through": row.fence}
        if rules is not None:
            facts["outcome"] = _outcome(row, shape)
            facts["remote_dedups"] = rules.dedups
        who = WorldCaller(row, caller, named, facts)
        if row.drafts:  # a taker's draft is the one it names, anyone else's the pinned one
            named_draft = draft if draft >= 0 else row.draft
            who.draft = _draft_seen(row, named_draft)
        return WorldRow(row, col_index), who

    def failing_where_none_leaves(row: Row, event: str, caller: tuple[int, int]) -> str:
        """Where no transition of an owner's ``event`` leaves the row's state, the guards
        the machines still read to tell a stale owner (``Spec.stale_guards``: those of
        its transitions from elsewhere) that fail for ``caller``, as ``fire`` names the
        failing guards of a refusal (each situation decided once, as ``fire``'s)."""
        # Where every such guard reads only the row's state, epoch, token and lease
        # (``reads_header_only``), the answer is looked up by those alone: the same
        # refusal recurs in many rows that differ elsewhere.
        narrow = narrow_stale.get((event, row.state))
        if narrow is None:
            narrow = narrow_stale[(event, row.state)] = all(
                reads_header_only(spec.guards[g]) for g in spec.stale_guards(event, row.state)
            )
        situation = (
            (event, row.state, row.epoch, row.token, row.live, caller)
            if narrow
            else (row, event, caller)
        )
        found = stale_failing.get(situation)
        if found is None:
            seen, who = _views(row, event, caller, True, -1)
            stale = spec.stale_guards(event, row.state)
            found = stale_failing[situation] = ", ".join(
                g for g in stale if not guards[g](seen, who)
            )
        return found

    def _linked(row: Row, taken: int, dispatches: bool) -> Row:
        """``row`` with its drafts once a transition fired: a take pins the draft named
        (``taken``) at its version now; a transition declared ``dispatches`` marks the
        pinned draft dispatched, where it is still the version pinned."""
        if taken >= 0:
            row = row._replace(linked=(row.drafts, taken, row.drafts[taken][1]))
        if dispatches and row.draft >= 0 and row.drafts[row.draft][1] == row.version:
            drafts = list(row.drafts)
            drafts[row.draft] = ("d", row.version)
            row = row._replace(linked=(tuple(drafts), row.draft, row.version))
        return row

    def _after(row: Row, event: str, dest: str, taking: bool, outcome: str) -> Row:
        """``row`` once ``event`` led it to ``dest``; ``outcome``: readback's, as the world's
        evidence said before the event (what an event declared ``outcome`` records)."""
        epoch, token, live, cols = row.epoch, row.token, row.live, row.columns
        effects = sets.get(event, frozenset())
        request_key = row.request_key + 1 if "fresh_key" in effects else row.request_key
        recorded = outcome if "outcome" in effects else "" if taking else row.outcome
        resent = row.resent + 1 if event in resends else row.resent
        if taking:  # a new epoch: a fresh token, and a lease only if the event sets one
            epoch, token, live, resent = epoch + 1, 1, False, 0
        if "fresh_token" in effects:
            token += 1
        if "lease" in effects:
            live = True
        if dest in lease_cleared:
            live = False  # a lease governs lease states only: the stores clear it
        if bumps.get(event):
            bumped = list(cols)
            for i in bumps[event]:
                bumped[i] += 1
            cols = tuple(bumped)
        return Row(
            dest,
            epoch,
            token,
            live,
            cols,
            row.fence,
            row.working,
            row.in_flight,
            row.landed,
            resent,
            request_key,
            recorded,
            False if taking else row.ran,  # a new epoch's run has reached nothing yet
            row.linked,
        )

    def counted(row: Row) -> tuple[Any, ...]:
        """What of a row the bounds limit (``cut``)."""
        return (row.epoch, row.token, row.columns, len(row.in_flight), row.resent, row.request_key)

    def cut(after: Row) -> bool:
        """The step goes beyond a bound: it is not explored."""
        return (
            after.epoch > epochs
            or after.token > counts
            or any(c > counts for c in after.columns)
            or len(after.in_flight) > counts
            or after.resent > retries
            or after.request_key > counts
        )

    # Only a step whose event (or the ``first`` event applied before it) changes what the
    # bounds limit can pass one (a taker's new epoch, a resend, a fresh token or request
    # key, a bumped column): any other leaves those counts as its row, within the bounds,
    # had them, so whether a bound stops it is never asked by firing it. Which events do
    # is read off ``_after`` itself, applied to the initial row.
    probe = Row(spec.initial, columns=defaults)

    def moves_a_count(event: str) -> bool:
        after = _after(probe, event, probe.state, roles[event] == "taker", "")
        return counted(after) != counted(probe)

    may_cut = frozenset(
        e
        for e in spec.events
        if moves_a_count(e) or any(moves_a_count(f) for f in (spec.first(e),) if f is not None)
    )

    def init_states() -> Iterator[EntityWorld]:
        yield EntityWorld(
            rows=tuple(
                Row(
                    spec.initial, columns=defaults, linked=(first_drafts, -1, 0) if n_drafts else ()
                )
                for _ in range(keys)
            ),
            clients=(None,) * workers,
        )

    def client_actions(shared: Shared, h: Handle | None, c: int) -> list[Action]:
        """Client ``c``'s actions: an idle client's takes (and resends, with a remote), a
        handle's owner events, its request's steps, and crash."""
        acts: list[Action]
        if h is None or h.key < 0:  # idle (with a saved handle, it may also wake up)
            rows = shared[0]
            if lists_refused:  # every take and resend, whether it fires or not
                tried = [
                    (key, d, e)
                    for key in range(keys)
                    for d in (named_drafts(rows[key]) if n_drafts else (-1,))
                    for e in takers
                ]
                again = [(key, e) for key in range(keys) for e in resends]
            else:  # those that fire within the bounds
                tried = [(key, d, e) for key in range(keys) for d, e in idle_takes(rows[key])]
                again = [(key, e) for key in range(keys) for e in idle_resends(rows[key])]
            if n_drafts:  # a take names one of the entity's drafts
                acts = [("take", c, key, d, e) for key, d, e in tried]
            else:
                acts = [("take", c, key, e) for key, _, e in tried]
            acts += [("resend", c, key, e) for key, e in again]
            if h is not None:
                acts += [("wake", c, e) for e in woken]
            return acts
        if rules is None:
            acts = [("own", c, e) for e in owner_events.get(h.seen, ())]
            if h.phase == "D":  # its work is due: it begins at the executor
                acts.append(("run", c))
        else:
            acts = [
                ("own", c, e)
                for e in owner_events.get(h.seen, ())
                if (e not in answered or h.phase == "A")
                and (e not in unanswered or h.phase in ("S", "W"))
            ]
            if h.phase == "S":
                acts.append(("send", c))
            elif h.phase == "W":
                row = shared[0][h.key]
                if carries:
                    mine = (h.epoch, h.request_key)
                    heard = mine in row.landed and mine not in row.in_flight
                else:  # a request of its epoch took effect, and none is still in flight
                    heard = any(e == h.epoch for e, _ in row.landed) and not any(
                        e == h.epoch for e, _ in row.in_flight
                    )
                if heard:
                    acts.append(("ack", c))
        if cfg["crashes"] and not h.saved:  # with a saved handle, it has crashed once
            acts.append(("crash", c))
        return acts

    # An idle client's takes and resends, and the operator's and the sweep's events, read
    # the entity's row alone (no handle is asked), and most are refused by their guards
    # (a busy row, a draft not approved, nothing to reconcile) or go past a bound (no
    # epoch left): the checker lists each only where it fires on the row as it is (its
    # ``first`` event applied where the stores would) within the bounds, decided once per
    # row (``lists_refused``). The bounds are still seen: whether a step is cut is asked of
    # the parts apart (``idle_cut``, ``shared_cut``), not of the actions listed. Listing
    # them all, the claim's search at K=3 with symmetry asked for the steps of 44,925
    # that could not be taken, of 148,901 steps asked in all.
    takes_by_row: dict[Row, tuple[tuple[int, str], ...]] = {}
    resends_by_row: dict[Row, tuple[str, ...]] = {}

    # Whether a step that reads the row alone fires on it within the bounds, fires past
    # one, or neither (refused, or no transition from its state): one answer per (row,
    # event, named, draft), read both to list the step (``fires_on``) and to ask whether
    # a bound stops it (``idle_cut``, ``shared_cut``). The operator's and the sweep's
    # events act after readback's fence where it would be, as ``_next`` fires them.
    row_steps: dict[tuple[Row, str, bool, int], int] = {}
    REFUSED, FIRES, CUT = 0, 1, 2

    def step_on(row: Row, event: str, named: bool, draft: int = -1) -> int:
        situation = (row, event, named, draft)
        found = row_steps.get(situation)
        if found is None:
            world = EntityWorld((row,), ())
            if named and event in environment:
                world = read_back(world, 0, event)
            result = fire_first(world, 0, event, None, named, draft)[1]
            found = row_steps[situation] = (
                REFUSED if result is None or result[0] is None else CUT if cut(result[1]) else FIRES
            )
        return found

    def fires_on(row: Row, event: str, named: bool, draft: int = -1) -> bool:
        """Whether ``event`` fires on ``row`` within the bounds, taken by no handle (a
        taker's, naming ``draft``; or naming the current epoch: a resend, the operator's
        or the sweep's event)."""
        return step_on(row, event, named, draft) == FIRES

    def idle_takes(row: Row) -> tuple[tuple[int, str], ...]:
        """The (draft named, event) of each take that fires on ``row`` (draft -1 where the
        entity has no linked drafts)."""
        found = takes_by_row.get(row)
        if found is None:
            found = takes_by_row[row] = tuple(
                (d, e)
                for d in (named_drafts(row) if n_drafts else (-1,))
                for e in takers
                if fires_on(row, e, False, d)
            )
        return found

    def idle_resends(row: Row) -> tuple[str, ...]:
        found = resends_by_row.get(row)
        if found is None:
            found = resends_by_row[row] = tuple(e for e in resends if fires_on(row, e, True, -1))
        return found

    env_by_row: dict[Row, tuple[str, ...]] = {}

    def env_fires(row: Row) -> tuple[str, ...]:
        """The operator's and the sweep's events that fire on ``row`` within the bounds
        (readback's fence applied first where it would be)."""
        found = env_by_row.get(row)
        if found is None:
            found = env_by_row[row] = tuple(e for e in environment if fires_on(row, e, True))
        return found

    def named_drafts(row: Row) -> list[int]:
        """The drafts of ``row``'s entity a taker may name: each created one."""
        return [d for d, (status, _) in enumerate(row.drafts) if status != "-"]

    def world_actions(shared: Shared) -> list[Action]:
        """The environment's actions: operator and sweep events, the clock, the fence, and
        an author's edits, approvals and new drafts."""
        acts: list[Action] = []
        for key, row in enumerate(shared[0]):
            for d, (status, version) in enumerate(row.drafts):
                if edits and status in ("a", "p") and version < 2:
                    acts.append(("draft", key, d, "edit"))
                if status == "p":
                    acts.append(("draft", key, d, "approve"))
                if status == "-":
                    acts.append(("draft", key, d, "create"))
            acts += [("env", key, e) for e in (environment if lists_refused else env_fires(row))]
            if row.live and row.state in lease_states:
                acts.append(("clock", key))
            if fenceable and cfg["fence"] == "any_step" and row.fence < row.epoch:
                acts.append(("fence", key))
            if row.in_flight:
                acts += [("land", key, *request) for request in sorted(set(row.in_flight))]
        return acts

    def actions(world: EntityWorld) -> Iterator[Action]:
        shared = _split(world)[0]
        for c, h in enumerate(world.clients):
            yield from client_actions(shared, h, c)
        yield from world_actions(shared)

    # The sticky marks each step sets (few steps: each judged once): the left_only_by
    # invariants it breaks, and the examples whose event it takes.
    guarded = [inv for inv in spec.invariants.values() if inv.kind == "left_only_by"]
    by_event = [inv for inv in spec.invariants.values() if inv.event is not None]
    sets_marks: dict[tuple[str, str, str], tuple[str, ...]] = {}

    def mark(world: EntityWorld, source: str, event: str, dest: str) -> frozenset[str]:
        """The world's marks once ``event`` moved a row from ``source`` to ``dest``."""
        step = (source, event, dest)
        found = sets_marks.get(step)
        if found is None:
            found = sets_marks[step] = tuple(
                inv.name for inv in guarded if leaves_by_another(inv, source, event, dest)
            ) + tuple(inv.name for inv in by_event if inv.event == event)
        return world.marks.union(found) if found else world.marks

    firsts = {e: spec.first(e) for e in spec.events if spec.first(e) is not None}
    # the examples that name an event ``by = "refusal"`` (the claim's discard): met where
    # a client's operation is refused as a stale owner's, which the stores record
    records = frozenset(
        inv.name for inv in by_event if inv.event is not None and roles[inv.event] == "refusal"
    )
    recorded_as: dict[tuple[str, str, str], bool] = {}

    def refused_marks(
        world: EntityWorld, row: Row, event: str, failing: str | None, caller: tuple[int, int]
    ) -> frozenset[str]:
        """The world's marks once ``caller``'s ``event`` was refused on ``row`` (``failing``:
        the guards that failed; None where no transition of it leaves the row's state): a
        stale owner's refusal is recorded (``Spec.stale_owner``)."""
        if not records or records <= world.marks:
            return world.marks
        if failing is None:
            failing = failing_where_none_leaves(row, event, caller)
        situation = (event, row.state, failing)
        found = recorded_as.get(situation)
        if found is None:
            failed = frozenset(failing.split(", ")) if failing else frozenset()
            found = recorded_as[situation] = (
                spec.stale_owner(event, row.state, lambda g: g in failed) is not None
            )
        return world.marks | records if found else world.marks

    def fire_first(
        world: EntityWorld,
        key: int,
        event: str,
        caller: tuple[int, int] | None,
        named: bool,
        draft: int = -1,
    ) -> tuple[EntityWorld, tuple[str, Row] | tuple[None, str] | None]:
        """``fire``, with the event declared ``first`` applied to the row beforehand where
        it fires and the event is refused without it (as the stores do, in one
        transaction): the world the event then acts on, and what it does there."""
        result = fire(world, key, event, caller, named, draft)
        first = firsts.get(event)
        if first is None or (result is not None and result[0] is not None):
            return world, result
        swept = fire(world, key, first, None, True)
        if swept is None or swept[0] is None:
            return world, result
        dest, row = swept
        moved = EntityWorld(
            (*world.rows[:key], row, *world.rows[key + 1 :]),
            world.clients,
            world.stale_changed,
            mark(world, world.rows[key].state, first, dest),
            world.overlap,
        )
        again = fire(moved, key, event, caller, named, draft)
        if again is None or again[0] is None:
            return world, result  # refused anyway: the first event is undone with it
        return moved, again

    def next_state(world: EntityWorld, action: Action) -> EntityWorld | None:
        found = _next(world, action)
        return None if found is None or found[1] else found[0]

    def _next(world: EntityWorld, action: Action) -> tuple[EntityWorld, bool] | None:
        """(next world, whether a bound cut it), or None when the action is disabled."""
        kind = action[0]
        if kind in ("take", "resend"):
            # an idle client: a taker's event begins a new epoch (naming a draft, where the
            # entity has linked drafts); a resend takes the current one over (naming it)
            # and sends again
            c, key, event = action[1], action[2], action[-1]
            resend = kind == "resend"
            named_draft = action[3] if len(action) == 5 else -1
            world, result = fire_first(world, key, event, None, resend, named_draft)
            if result is None or result[0] is None:
                return None
            rows, clients = list(world.rows), list(world.clients)
            dest, row = result
            idle = world.clients[c]
            saved = () if idle is None else idle.saved
            if resend or (rules is not None and spec.work(event) == "starts"):
                # it sends at once: a resend, or a take whose work starts with it (the
                # claim's intent_after_send: no intent is recorded before the send)
                row = starts(row, row.epoch)
                clients[c] = Handle(
                    key, row.epoch, row.token, dest, True, "S", saved, key_carried(row)
                )
            elif spec.work(event) == "starts":  # its work is due at the executor at once
                clients[c] = Handle(key, row.epoch, row.token, dest, False, "D", saved)
            else:  # a handle from which its holder can do nothing more is forgotten at once
                clients[c] = (
                    Handle(key, row.epoch, row.token, dest, saved=saved)
                    if dest in owner_events
                    else resting(saved)
                )
            rows[key] = row
            marks = mark(world, world.rows[key].state, event, dest)
            return EntityWorld(
                tuple(rows), tuple(clients), world.stale_changed, marks, world.overlap
            ), cut(row)
        if kind in ("own", "wake"):
            _, c, event = action
            h = world.clients[c]
            assert h is not None
            if kind == "wake":  # it acts on its saved handle, which it then no longer keeps
                key, epoch, token = h.saved
                h = Handle(key, epoch, token, "")
            world, result = fire_first(world, h.key, event, (h.epoch, h.token), True)
            rows, clients = list(world.rows), list(world.clients)
            before = world.rows[h.key]
            if result is None or result[0] is None:  # refused: drop the handle, stop the work
                clients[c] = resting(h.saved)
                if h.working:
                    rows[h.key] = stops(rows[h.key], h.epoch)
                failing = None if result is None else result[1]
                marks = refused_marks(world, before, event, failing, (h.epoch, h.token))
                return EntityWorld(
                    tuple(rows), tuple(clients), world.stale_changed, marks, world.overlap
                ), False
            dest, row = result
            stale = (h.epoch, h.token) != (before.epoch, before.token)
            token = row.token if row.epoch == h.epoch else h.token
            work = spec.work(event)
            working = True if work == "starts" else False if work == "ends" else h.working
            phase, request_key = h.phase, h.request_key
            if rules is None and work is not None:
                # work that starts is due: it runs once it reaches the executor (``run``);
                # work that ends stops, or never runs where it was still due
                phase, working = ("D", False) if work == "starts" else ("", False)
            if rules is not None:
                if work == "starts":
                    phase = "S"  # it may send its request now
                elif event in answered or event in unanswered:
                    # its part is over; a request may stay in flight
                    phase, working, request_key = "", False, 0
                if phase == "S":  # still due: it carries the key as this step left the row
                    request_key = key_carried(row)
            if working != h.working:
                row = starts(row, h.epoch) if working else stops(row, h.epoch)
            rows[h.key] = row
            # nothing more to do with it: no event to take, no work running or due
            done = dest not in owner_events and not working and phase != "D"
            clients[c] = (
                resting(h.saved)
                if done
                else Handle(h.key, h.epoch, token, dest, working, phase, h.saved, request_key)
            )
            marks = mark(world, before.state, event, dest)
            changed = world.stale_changed or stale
            return EntityWorld(tuple(rows), tuple(clients), changed, marks, world.overlap), cut(row)
        if kind == "env":
            _, key, event = action
            world, result = fire_first(read_back(world, key, event), key, event, None, True)
            if result is None or result[0] is None:
                return None
            rows = list(world.rows)
            rows[key] = result[1]
            marks = mark(world, world.rows[key].state, event, result[0])
            world = EntityWorld(
                tuple(rows), world.clients, world.stale_changed, marks, world.overlap
            )
            return world, cut(result[1])
        rows, clients = list(world.rows), list(world.clients)
        overlap = world.overlap
        if kind == "clock":
            key = action[1]
            r = rows[key]
            rows[key] = r._replace(live=False)
        elif kind == "fence":
            rows[action[1]] = fenced(rows[action[1]], rules)
        elif kind == "crash":
            h = clients[action[1]]
            assert h is not None
            clients[action[1]] = resting((h.key, h.epoch, h.token) if cfg["wakes"] else ())
            if h.working:
                rows[h.key] = stops(rows[h.key], h.epoch)
        elif kind == "run":
            # its due work reaches the executor: it runs there, unless the executor is
            # fenced through its epoch and refuses it (the work is over, never run)
            c = action[1]
            h = clients[c]
            assert h is not None
            refused = fenceable and rows[h.key].fence >= h.epoch
            if refused and h.seen not in owner_events:
                clients[c] = resting(h.saved)
            else:
                clients[c] = h._replace(phase="", working=not refused)
            if not refused:
                rows[h.key] = starts(rows[h.key], h.epoch)
            if remembers_runs and h.epoch == rows[h.key].epoch:  # it arrived, refused or not
                rows[h.key] = rows[h.key]._replace(ran=True)
        elif kind == "send":
            assert rules is not None
            c = action[1]
            h = clients[c]
            assert h is not None
            clients[c] = h._replace(phase="W")
            r = rows[h.key]
            arrived = rules.arrives(r.fence, h.epoch)
            if arrived is not None:  # else rejected on arrival: the sender will stop waiting
                overlap = overlap or any(e != h.epoch for e, _ in r.in_flight)
                request = (h.epoch, h.request_key if carries else shape.current(r))
                sent = tuple(sorted((*r.in_flight, request)))
                rows[h.key] = r._replace(in_flight=sent, fence=arrived)
            world = EntityWorld(
                tuple(rows), tuple(clients), world.stale_changed, world.marks, overlap
            )
            return world, len(rows[h.key].in_flight) > counts
        elif kind == "land":
            assert rules is not None
            _, key, epoch, request_key = action
            r = rows[key]
            flying = list(r.in_flight)
            flying.remove((epoch, request_key))
            landed = r.landed
            # a request key applied once, in any epoch, is applied (a deduping remote)
            applied = any(k == request_key for _, k in landed)
            if rules.lands(r.fence, epoch, applied) == "applied":
                landed = tuple(sorted((*landed, (epoch, request_key))))
            rows[key] = r._replace(in_flight=tuple(flying), landed=landed)
        elif kind == "ack":
            c = action[1]
            h = clients[c]
            assert h is not None
            clients[c] = h._replace(phase="A")
        elif kind == "draft":
            _, key, d, what = action
            r = rows[key]
            status, version = r.drafts[d]
            if what == "edit":
                if r.draft == d and r.state in pinning:
                    return None  # the store refuses an edit of a draft it may yet dispatch
                status, version = "p", version + 1
            elif what == "approve":
                status = "a"
            else:
                if one_live and any(s in ("p", "a") for s, _ in r.drafts):
                    return None  # one live draft allowed: the store refuses a second
                status, version = "p", 1
            drafts = list(r.drafts)
            drafts[d] = (status, version)
            rows[key] = r._replace(linked=(tuple(drafts), r.draft, r.version))
        return EntityWorld(
            tuple(rows), tuple(clients), world.stale_changed, world.marks, overlap
        ), False

    # Whether a bound stops some next step (``_next`` says cut): only an event's step can
    # pass one. Decided in parts (``ByParts``): the world's events, by the rows; a client's
    # (an idle one's takes, a handle's owner events), by the rows and that client.
    def _cuts(
        world: EntityWorld, key: int, event: str, caller: Any, named: bool, draft: int = -1
    ) -> bool:
        result = fire_first(world, key, event, caller, named, draft)[1]
        return result is not None and result[0] is not None and cut(result[1])

    # Whether a bound stops a next step is asked of the same parts by the deadlock check
    # and by each ``eventually`` invariant: each is decided once, from what it reads and
    # nothing else. A step's cut reads the row it fires on alone (not the sticky flags,
    # which split the shared parts): the world's events read the rows; an idle client's
    # the rows and its saved handle; a handle's its entity's row and the handle's epoch,
    # token, state seen and phase.
    shared_cuts: dict[tuple[Row, ...], bool] = {}
    client_cuts: dict[tuple[Any, ...], bool] = {}

    # (``may_cut``: the events whose step may pass a bound)
    environment_may_cut = tuple(e for e in environment if e in may_cut)
    owner_may_cut = {
        seen: tuple(e for e in events if e in may_cut) for seen, events in owner_events.items()
    }
    woken_may_cut = tuple(e for e in woken if e in may_cut)

    def shared_cut(shared: Shared) -> bool:
        found = shared_cuts.get(shared[0])
        if found is None:
            found = shared_cuts[shared[0]] = any(
                step_on(row, e, True) == CUT for row in shared[0] for e in environment_may_cut
            )
        return found

    def client_cut(shared: Shared, h: Handle | None) -> bool:
        if h is None or h.key < 0:
            return idle_cut(shared[0], None if h is None else h.saved)
        return handle_cut(shared[0][h.key], h.epoch, h.token, h.seen, h.phase)

    def idle_cut(rows: tuple[Row, ...], saved: tuple[Any, ...] | None) -> bool:
        """An idle client's: its takes and resends on every row, and (``saved``: the
        handle it kept, None where it has none) its wake-up on that handle's row."""
        found = client_cuts.get((rows, saved))
        if found is None:
            found = client_cuts[(rows, saved)] = (
                any(
                    step_on(row, e, False, d) == CUT
                    for row in rows
                    for d in (named_drafts(row) if n_drafts else (-1,))
                    for e in takers
                )
                or any(step_on(row, e, True) == CUT for row in rows for e in resends)
                or (
                    saved is not None
                    and any(
                        _cuts(EntityWorld(rows, ()), saved[0], e, saved[1:], True)
                        for e in woken_may_cut
                    )
                )
            )
        return found

    def handle_cut(row: Row, epoch: int, token: int, seen: str, phase: str) -> bool:
        """A handle's: its send, where it may arrive, and its owner events from the state
        it saw, on its entity's ``row`` (each reads that row alone)."""
        situation = (row, epoch, token, seen, phase)
        found = client_cuts.get(situation)
        if found is None:
            found = client_cuts[situation] = (
                phase == "S"  # its send, if it arrives, may pass a bound
                and rules is not None
                and len(row.in_flight) >= counts
                and rules.arrives(row.fence, epoch) is not None
            ) or any(
                _cuts(EntityWorld((row,), ()), 0, e, (epoch, token), True)
                for e in owner_may_cut.get(seen, ())
            )
        return found

    def bounded(world: EntityWorld) -> bool:
        shared, clients = _split(world)
        return shared_cut(shared) or any(client_cut(shared, h) for h in clients)

    def or_bounded(done: Callable[[Shared], bool]) -> ByParts[EntityWorld]:
        """``done`` of the rows, or a bound stops some next step."""

        def whole(world: EntityWorld) -> bool:
            return done(_split(world)[0]) or bounded(world)

        return ByParts(whole, lambda shared: done(shared) or shared_cut(shared), client_cut)

    may_stop = or_bounded(lambda shared: all(row.state in terminal for row in shared[0]))

    def canonical(world: EntityWorld) -> Any:
        # The clients as a multiset: how many are idle, and the handles in order (compared
        # as tuples, in C): the same classes as sorting them with the idle ones first.
        handles = [h for h in world.clients if h is not None]
        handles.sort()
        idle = len(world.clients) - len(handles)
        return (world.rows, idle, tuple(handles), world.stale_changed, world.marks, world.overlap)

    properties: list[Property[EntityWorld]] = [
        Property(
            "stale_operations_change_nothing",
            "always",
            lambda w: not w.stale_changed,
            "a client acting on a handle that is no longer current changes no row",
        )
    ]

    steps = step_events(spec)  # the owner events the fair step ``steps`` counts

    def takeable(shared: Shared) -> bool:
        """Entity 0 may be taken: an idle client's taker event begins a new epoch on its
        row as it is (its ``first`` event applied where the stores would), within the
        bounds (the claim world's: a free target, an approved draft, epochs left). It
        reads entity 0's row alone: decided once per such row."""
        return bool(idle_takes(shared[0][0]))

    for inv in spec.invariants.values():
        if rules is not None and not inv.applies(cfg["remote"]):
            continue  # not promised against this remote (the promise's tiers)
        if inv.kind == "eventually":
            properties.append(_obligation(inv, or_bounded, roles, steps, cfg["fence"]))
        elif inv.kind == "taken":
            properties.append(_taken(inv, takeable, or_bounded, roles, steps, cfg["fence"]))
        elif inv.kind == "reachable":
            if inv.live_drafts is not None:
                met = _live_drafts(inv.live_drafts)
            elif inv.event is not None:
                met = _marked(inv.name)
            else:
                met = _some_row_in(frozenset(inv.states), inv.outcome)
            properties.append(Property(inv.name, "sometimes", met, inv.meaning))
        else:
            properties.append(
                Property(inv.name, "always", _invariant(inv, col_index, rules, shape), inv.meaning)
            )

    text = WorldText(columns, lease_states, key_word, roles, rules, shape, bool(cfg["wakes"]))
    show_state, show_action = text.state, text.action

    firing = Firing(read_back, fire_first, fire, firsts)

    def explain(
        before: EntityWorld, action: Action, after: EntityWorld
    ) -> list[tuple[str, str | None]]:
        return text.explain(before, action, after, firing)

    return Model(
        init_states=init_states,
        actions=actions,
        next_state=next_state,
        properties=properties,
        canonical=canonical,
        show_action=show_action,
        show_state=show_state,
        may_stop=may_stop,
        explain=explain,
        # The rows are the shared part, each client's handle its part: a client's action
        # reads and changes the rows and its own handle alone (the work running on an
        # entity is kept in its row where the rows must answer for it), the world's the
        # rows alone.
        processes=Processes(
            split=_split,
            join=_join,
            local_actions=client_actions,
            shared_actions=world_actions,
            shared_properties=True,
        ),
    )


def _refuse_what_this_world_cannot_answer(spec: Spec) -> None:
    problem = lifecycle_world_problem(spec)
    if problem is not None:
        raise SpecError(f"{spec.path or spec.name}: {problem}")
