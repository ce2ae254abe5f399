"""SPIN as a second engine: the checker's model of a declaration, generated as Promela,
compiled and searched by SPIN, and read back into the same :class:`Report`. This module
generates the model of a lifecycle of your own (:func:`claimfsm.checker.entity_model`) and
runs SPIN for both; ``_spin_claim`` generates the claim protocol's model.

The Promela is generated from the declaration and the world's bounds, never kept by hand:
one process whose loop has one ``d_step`` per action of the built-in model (a client taking
an event on an entity, a client's owner event, a crash, the operator's or the sweep's event,
the lease deadline passing, the executor fenced, an author's step on a linked draft, a
take naming a draft), in the order the built-in model lists
them. Each option's guard is the action being enabled and not cut by a bound; its body is
the step, transition by transition in the declared order, then one ``assert`` per state
property. The state vector is the built-in model's world, field for field, with a free
client's fields zeroed, so the two engines store the same states: a test holds their counts
equal. One more option fires only where nothing else can: it asserts that the state may
stop there (every entity terminal, or a bound stopped a step), as the built-in engine's
deadlock check does, and changes nothing.

SPIN searches breadth-first (``-DBFS``), so its trail is a shortest one. Each ``d_step``
prints its action's number when the trail is replayed (``spin -t``); the numbers are mapped
back to the built-in model's actions and replayed there, so a SPIN counterexample is printed,
drawn and replayed (``--replay-token``) like any other. Each ``eventually`` invariant is an
LTL formula with its weak fairness written out (``promela(..., liveness=NAME)``), searched
for acceptance cycles; its trail comes back as a lasso, as the built-in engine's does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claimfsm.checker._claim import ClaimModelConfig, claim_model
from claimfsm.checker._engine import Discovery, Model, Property, Report, Step
from claimfsm.checker._entity import entity_model
from claimfsm.checker._entity_properties import fairness_class
from claimfsm.checker._entity_world import (
    VERSIONS,
    Action,
    EntityModelConfig,
    executor_parts,
    readback_fences,
)
from claimfsm.checker._promela import OPS, Operand, Reading, conjunction, literal, promela_guard
from claimfsm.errors import ClaimFSMError, InvalidArgument
from claimfsm.spec import RemoteRules, Spec, runs_on_the_claim_model, step_events, wake_events

#: The readback words a remote's ``outcome`` fact takes, by their code in the Promela.
TEXT = {"present": 1, "absent": 2}
#: A handle as a guard reads it: the expressions of its epoch and its token.
Caller = tuple[str, str]


class SpinUnavailable(ClaimFSMError):
    """SPIN or a C compiler is not installed, or it failed to build the verifier."""


@dataclass(frozen=True)
class Promela:
    """A generated Promela model: its text, and the built-in model's action behind each
    ``d_step``'s number."""

    text: str
    actions: tuple[Any, ...]
    #: ``sometimes`` properties, by the number each prints (``SOMETIMES n``) when first met
    sometimes: tuple[str, ...] = ()


def promela(
    spec: Spec, config: EntityModelConfig | None = None, liveness: str | None = None
) -> Promela:
    """The Promela model of ``spec`` in the world ``config`` (its ``[world]`` by default).

    ``liveness``: the name of an ``eventually`` or ``taken`` invariant, checked instead of
    the safety properties as an LTL formula. Each step records its fairness class in
    ``last``; one more option, always possible, lets the run pause (``last = 0``), since a
    run may stop where no fair step is possible; the formula is the obligation under weak
    fairness of each class: if a class is possible from some point on, it is taken
    infinitely often."""
    model = entity_model(spec, config)  # validates the declaration as the built-in engine does
    spec = spec.lifecycle_view()  # as the built-in world reads it: a pseudo state's takers
    cfg = (config or EntityModelConfig()).resolved(spec)
    # The remote (a declaration with one): per row, how many requests of each epoch and
    # request key are in flight (fly) and took effect (took), at index epoch * nkeys + key,
    # which is the built-in model's sorted tuples of (epoch, key); per client, its
    # request's phase (0 none, 1 due, 2 in flight, 3 answered). Where an event draws a
    # fresh request key, the row's key (kg) and the key each client's request carries (rk).
    rules = RemoteRules(cfg["remote"]) if "remote" in cfg else None
    answered = {e for e in spec.events if spec.remote_role(e) == "answered"}
    unanswered = {e for e in spec.events if spec.remote_role(e) == "unanswered"}
    workers, keys, epochs, counts = cfg["workers"], cfg["keys"], cfg["epochs"], cfg["counts"]
    each_epoch = range(1, epochs + 1)
    # Every variable starts at 0, which is the initial world: the initial state is number 0
    # and a column is kept as its distance from its default (a linked draft's status and
    # version start as the built-in model's, initialised in the Row typedef).
    states = [spec.initial, *(s for s in spec.states if s != spec.initial)]
    sid = {s: i for i, s in enumerate(states)}
    columns = list(spec.columns)
    default = {c: spec.columns[c].default for c in columns}
    roles = {e: spec.role(e) for e in spec.events}
    lease_states = sorted(spec.states_where("lease"))
    lease_cleared = spec.lease_cleared_in()
    terminal = sorted(spec.states_where("terminal"))
    frees = sorted(set(spec.states_where("frees_target")) | {spec.initial})
    fenceable, remembers_runs = executor_parts(spec, rules)
    # the operator's events that fence first where readback finds nothing ([world] fence)
    fences_with_readback = readback_fences(spec, rules, cfg["fence"])
    sets = {e: set(d.sets) for e, d in spec.effects.items()}
    fresh_keys = rules is not None and any("fresh_key" in x for x in sets.values())
    # readback's outcome the row records (oc: 0 none, else its TEXT code)
    outcomes = rules is not None and any("outcome" in x for x in sets.values())
    # Linked drafts ([drafts]): per row, each draft's status (dsN: DRAFT_CODES) and version
    # (dvN), the draft its epoch pinned (pd: its number + 1; 0 none) and the version then
    # (pv). A draft's fields start as the built-in model's (initialised in the typedef).
    n_drafts = cfg.get("drafts", 0)
    # A request's key, one number as the built-in model's (``KeyShape``): the key drawn
    # (0 .. counts, where an event draws one) and, with linked drafts, the pinned draft
    # and its version; each client's request carries one (rk) where keys differ.
    per_draw = counts + 1 if fresh_keys else 1
    nkeys = per_draw * (VERSIONS * n_drafts if rules is not None and n_drafts else 1)
    keyed = nkeys > 1
    # a client carries its request's key (rk) where keys differ, unless the checker's
    # own_keys says the send takes the entity's key as it is when sent
    carries = keyed and cfg["own_keys"]
    one_live = spec.drafts is not None and spec.drafts.one_live_per_target
    pinning = sorted(spec.pinning_states())
    first_status = ["-" if one_live and d > 0 else "a" for d in range(n_drafts)]

    def status(r: str, d: int) -> str:
        return f"{r}.ds{d}"

    def version(r: str, d: int) -> str:
        return f"{r}.dv{d}"

    def approved_at(r: str, d: int, pinned_version: bool) -> str:
        """Draft ``d`` of row ``r`` is approved (at the version the row pinned)."""
        ok = f"{status(r, d)} == {DRAFT_CODES['a']}"
        return f"({ok} && {version(r, d)} == {r}.pv)" if pinned_version else f"({ok})"

    def draft_readings(r: str, named: int) -> tuple[str | None, str | None]:
        """(ready, pinned) as the guards over drafts read them: of the draft a taker names
        (``named``), else of the draft the row pinned."""
        if not n_drafts:
            return None, None
        if named >= 0:
            ready = approved_at(r, named, False)
            pinned = f"({r}.pd == {named + 1} && {approved_at(r, named, True)})"
            return ready, pinned
        each = range(n_drafts)
        ready = any_of([f"({r}.pd == {d + 1} && {approved_at(r, d, False)})" for d in each])
        pinned = any_of([f"({r}.pd == {d + 1} && {approved_at(r, d, True)})" for d in each])
        return ready, pinned

    def live_drafts(r: str) -> str:
        """How many of row ``r``'s drafts are live (pending or approved), as C reads it
        (each test 1 or 0: the examples are judged in C)."""
        live = (DRAFT_CODES["a"], DRAFT_CODES["p"])
        return " + ".join(
            f"({status(r, d)} == {live[0]} || {status(r, d)} == {live[1]})" for d in range(n_drafts)
        )

    def row_key(r: str, kg: str | None = None) -> str:
        """The key of a request sent from row ``r`` as it is now (``kg``: its drawn key's
        expression, where it is not the row's own)."""
        drawn = kg if kg is not None else f"{r}.kg" if fresh_keys else "0"
        if nkeys == per_draw:
            return drawn
        made = f"(({r}.pd - 1) * {VERSIONS} + {r}.pv - 1) * {per_draw} + {drawn}"
        return f"({r}.pd == 0 -> {drawn} : {made})"

    def at(ep: Any, key: Any) -> str:
        """The index of (epoch, request key) in a row's fly and took."""
        return str(ep) if nkeys == 1 else f"{ep} * {nkeys} + {key}"

    requests = [(e, g) for e in range(1, epochs + 1) for g in range(nkeys)]
    bumps = {e: list(d.bumps) for e, d in spec.effects.items()}
    by_event = {e: [t for t in spec.transitions if t.event == e] for e in spec.events}
    owner_events: dict[str, list[str]] = {}
    for t in spec.transitions:
        if roles[t.event] == "owner":
            seen = owner_events.setdefault(t.source, [])
            if t.event not in seen:
                seen.append(t.event)
    takers = list(spec.events_by("taker"))
    resends = [e for e in spec.events if spec.remote_role(e) == "resends"]
    environment = [e for e in spec.events if roles[e] in ("operator", "sweep") and e not in resends]
    client_fields: tuple[str, ...] = ("has", "key", "ep", "tok", "seen", "working")
    # without a remote, work that starts is due until it reaches the executor (``run``)
    dues = rules is None and any(spec.work(e) == "starts" for e in spec.events)
    if dues:
        client_fields += ("due",)
    if rules is not None:
        client_fields += ("phase",)
    if carries:
        client_fields += ("rk",)
    # [world] wakes: a client's saved handle (sv: it has one; its entity, epoch and token),
    # which outlives the handle it holds and is used once, by a wake-up
    wakes = bool(cfg["wakes"])
    saved_fields = ("sv", "skey", "sep", "stok") if wakes else ()
    woken = wake_events(spec) if wakes else ()
    # left_only_by invariants, each a sticky bit: a row left its states by another event
    guarded = [i for i in spec.invariants.values() if i.kind == "left_only_by"]
    # reachable examples that name an event, each a sticky bit: a step took the event
    event_examples = [i for i in spec.invariants.values() if i.event is not None]

    def any_of(terms: Sequence[str]) -> str:
        return "(" + " || ".join(terms) + ")" if terms else "false"

    def example(r: str, name: str) -> str:
        """Row ``r`` meets the example ``name``: in its states, with its outcome if given;
        or, for an example that names an event, some step took it (the world's bit)."""
        inv = spec.invariants[name]
        if inv.event is not None:
            return f"took_{event_examples.index(inv)}"
        if inv.live_drafts is not None:
            return f"({live_drafts(r)} >= {inv.live_drafts})"
        met = in_states(r, list(inv.states))
        if inv.outcome is None:
            return met
        return f"({met} && {r}.oc == {TEXT[inv.outcome]})"

    def in_states(r: str, names: Sequence[str]) -> str:
        return any_of([f"{r}.st == {sid[s]}" for s in names])

    def column(r: str, name: str) -> str:
        if name == "epoch":
            return f"{r}.ep"
        return f"({r}.col[{columns.index(name)}] + {default[name]})"

    def took_key(r: str, key: Any) -> str:
        """A request with request key ``key`` took effect at the row's remote, in any epoch."""
        return any_of([f"{r}.took[{at(e, key)}] > 0" for e in each_epoch])

    def running(k: str, r: str) -> str:
        return any_of(
            [
                f"(c[{j}].has && c[{j}].key == {k} && c[{j}].ep == {r}.ep && c[{j}].working)"
                for j in range(workers)
            ]
        )

    def guard(
        name: str,
        k: str,
        caller: Caller | None,
        named: bool,
        after: Any = None,
        draft: int = -1,
        fenced: bool = False,
    ) -> str:
        """The guard over entity ``k``'s row, for the handle ``caller`` (the expressions of
        its epoch and token) or for no handle (``named``: the caller names the current
        epoch), compiled by its kind
        (``_promela``) from what this world's row and caller give to read. ``after``: the
        row once the transition ``after`` of a ``first`` event is applied to it (its state,
        and what that event writes: a fresh token, the lease, bumped columns). ``draft``:
        the draft a taker names. ``fenced``: as the row reads once the operator fenced it
        through its epoch (``[world] fence = "with_readback"``)."""
        r = f"r[{k}]"
        ready, pinned = draft_readings(r, draft)
        if after is not None and after.dispatches:
            ready = pinned = "false"  # the first event's transition dispatched it
        live, tok, kg = f"({r}.live)", f"{r}.tok", f"{r}.kg"
        free = in_states(r, frees)
        bumped: Sequence[str] = ()
        if after is not None:
            written = sets.get(after.event, set())
            if after.dest in lease_cleared:
                live = "false"  # a lease governs lease states only: the stores clear it
            elif "lease" in written:
                live = "true"
            if "fresh_token" in written:
                tok = f"({r}.tok + 1)"
            if "fresh_key" in written:
                kg = f"({r}.kg + 1)"
            free = "true" if after.dest in frees else "false"
            bumped = bumps.get(after.event, ())

        def read_column(name: str) -> Operand:
            found = column(r, name)
            return (f"({found} + 1)" if name in bumped else found, "1", "int")

        def fact(name: str) -> Operand | None:
            if name == "running":
                return (running(k, r), "1", "int")
            if name == "ran" and remembers_runs:
                return (f"{r}.ran", "1", "int")
            if rules is not None and name == "outcome":  # present 1, absent 2 (``TEXT``)
                # readback asks about the entity's request key as it is now
                return (
                    f"({took_key(r, row_key(r, kg if fresh_keys else None))} -> 1 : 2)",
                    "1",
                    "str",
                )
            if rules is not None and name == "remote_dedups":
                return ("1" if rules.dedups else "0", "1", "int")
            if name == "fenced_through":
                return (f"{r}.ep" if fenced else f"{r}.fence", "1", "int")
            return None

        ep, token = caller or ("", "")
        held = caller is not None
        reading = Reading(
            owner=f"({ep} == {r}.ep && {token} == {tok})" if held else None,
            epoch=f"({ep} == {r}.ep)" if held else ("true" if named else None),
            live=live,
            free=free,
            ready=ready,
            pinned=pinned,
            fact=fact,
            column=read_column,
            text=TEXT.get,
        )
        return promela_guard(spec, name, reading)

    def holds(
        t: Any,
        k: str,
        caller: Caller | None,
        named: bool,
        after: Any = None,
        draft: int = -1,
        fenced: bool = False,
    ) -> str:
        """Transition ``t`` fires on entity ``k``'s row (or on the row ``after`` a first
        event's transition); ``draft``: the draft a taker names; ``fenced``: on the row
        fenced through its epoch."""
        if after is None:
            state = f"r[{k}].st == {sid[t.source]}"
        else:
            state = "true" if t.source == after.dest else "false"
        return conjunction(
            [state, *(guard(g, k, caller, named, after, draft, fenced) for g in t.guards)]
        )

    def first_ways(
        event: str,
        k: str,
        caller: Caller | None,
        named: bool,
        bodies: list[tuple[Any, list[str]]],
        draft: int = -1,
        fenced: bool = False,
    ) -> list[tuple[str, list[str]]]:
        """Where ``event`` declares a ``first`` event: the branches, tried once no
        transition of ``event`` fires on the row, in which a transition of the first event
        fires (the sweep's: the current epoch named) and then one of ``event``'s
        (``bodies``: each transition and its assignments) fires on the row it leaves."""
        first = spec.first(event)
        if first is None:
            return []
        out = []
        earlier: dict[str, list[str]] = {}
        for ft in by_event[first]:
            test = holds(ft, k, None, True, fenced=fenced)
            prior = earlier.setdefault(ft.source, [])
            fires = conjunction([test, *(f"!({p})" for p in prior)])
            prior.append(test)
            then = any_of(
                [
                    f"({w})"
                    for t, _ in bodies
                    if (w := holds(t, k, caller, named, ft, draft, fenced)) != "false"
                ]
            )
            if fires == "false" or then == "false":
                continue
            again = [(holds(t, k, caller, named, None, draft), body) for t, body in bodies]
            out.append((f"{fires} && {then}", [*apply(first, k, ft, False), *chain(again, [])]))
        return out

    def cut(event: str, k: str, taking: bool, first: str | None = None) -> str:
        """Whether the step goes beyond a bound (the built-in model's ``cut``): ``event``
        on entity ``k``'s row, after the ``first`` event where one was applied."""
        r = f"r[{k}]"
        parts = [f"{r}.ep + 1 > {epochs}"] if taking else []
        both = [event] if first is None else [first, event]
        fresh = sum("fresh_token" in sets.get(e, ()) for e in both)
        if taking and "fresh_token" in sets.get(event, ()):
            parts.append(f"1 + 1 > {counts}")  # a new epoch's token is 1, before its own
        elif not taking and fresh:
            parts.append(f"{r}.tok + {fresh} > {counts}")
        added: dict[str, int] = {}
        for e in both:
            for col in bumps.get(e, ()):
                added[col] = added.get(col, 0) + 1
        parts += [f"{column(r, col)} + {n} > {counts}" for col, n in added.items()]
        if event in resends:
            parts.append(f"{r}.rs + 1 > {cfg['retries']}")
        drawn = sum("fresh_key" in sets.get(e, ()) for e in both) if fresh_keys else 0
        if drawn:
            parts.append(f"{r}.kg + {drawn} > {counts}")
        return any_of(parts)

    def writes(event: str) -> bool:
        """``event`` writes more than its state (a fresh token, the lease, a counter)."""
        return bool(sets.get(event) or bumps.get(event))

    def cut_of(event: str, k: str, taking: bool, branches: list[tuple[str, list[str]]]) -> str:
        """The option's cut: ``cut``, or, where ``event``'s first event writes more than its
        state, each way's own (the direct ``branches``, then those after the first)."""
        first = spec.first(event)
        if first is None or not writes(first):
            return cut(event, k, taking)
        n = len(by_event[event])
        direct = any_of([f"({b})" for b, _ in branches[:n]])
        later = any_of([f"({b})" for b, _ in branches[n:]])
        return any_of(
            [
                f"({direct} && {cut(event, k, taking)})",
                f"({later} && {cut(event, k, taking, first)})",
            ]
        )

    def apply(event: str, k: str, t: Any, taking: bool, draft: int = -1) -> list[str]:
        """The assignments of transition ``t`` of ``event`` on entity ``k``; ``draft``: the
        draft a taker names, which the new epoch pins."""
        r = f"r[{k}]"
        effects = sets.get(event, set())
        out = []
        if outcomes and "outcome" in effects:  # readback's, before the event draws a key
            out.append(f"{r}.oc = ({took_key(r, row_key(r))} -> 1 : 2)")
        elif outcomes and taking:
            out.append(f"{r}.oc = 0")  # a new epoch has recorded no readback yet
        out.append(f"{r}.st = {sid[t.dest]}")
        out += [
            f"esc_{n} = 1"
            for n, inv in enumerate(guarded)
            if t.source in inv.states and t.dest not in inv.states and event not in inv.events
        ]
        out += [f"took_{n} = 1" for n, inv in enumerate(event_examples) if inv.event == event]
        if taking:
            out += [f"{r}.ep = {r}.ep + 1", f"{r}.tok = 1", f"{r}.live = 0"]
            if remembers_runs:
                out.append(f"{r}.ran = 0")  # a new epoch's run has reached nothing yet
            if resends:
                out.append(f"{r}.rs = 0")  # a new epoch has had no resend
        if event in resends:
            out.append(f"{r}.rs = {r}.rs + 1")
        if "fresh_token" in effects:
            out.append(f"{r}.tok = {r}.tok + 1")
        if fresh_keys and "fresh_key" in effects:
            out.append(f"{r}.kg = {r}.kg + 1")
        if "lease" in effects:
            out.append(f"{r}.live = 1")
        if t.dest in lease_cleared:
            out.append(f"{r}.live = 0")
        for col in bumps.get(event, ()):
            i = columns.index(col)
            out.append(f"{r}.col[{i}] = {r}.col[{i}] + 1")
        if n_drafts and taking and draft >= 0:
            out += [f"{r}.pd = {draft + 1}", f"{r}.pv = {version(r, draft)}"]
        if n_drafts and t.dispatches:  # the pinned draft, still at the version pinned
            marked = [
                (
                    f"{r}.pd == {d + 1} && {version(r, d)} == {r}.pv",
                    [f"{status(r, d)} = {DRAFT_CODES['d']}"],
                )
                for d in range(n_drafts)
            ]
            out += chain(marked, [])
        return out

    def fence_row(k: str) -> list[str]:
        """The operator fences entity ``k``'s executor (or remote) through its epoch: with a
        remote, what is in flight at or below the fence is dropped at once."""
        r = f"r[{k}]"
        dropped = [
            f"{r}.fly[{at(e, g)}] = ({e} <= {r}.ep -> 0 : {r}.fly[{at(e, g)}])"
            for e, g in (requests if rules is not None else [])
        ]
        return [*dropped, f"{r}.fence = {r}.ep"]

    def finds_nothing(k: str) -> str:
        """Readback on entity ``k`` finds nothing: no request with its key took effect; at
        an executor, no run of its epoch is running there or reached it."""
        r = f"r[{k}]"
        if rules is not None:
            return f"!({took_key(r, row_key(r))})"
        ran = f" || {r}.ran" if remembers_runs else ""
        return f"!({running(k, r)}{ran})"

    def chain(branches: list[tuple[str, list[str]]], otherwise: list[str]) -> list[str]:
        """``if`` over the branches in order (the first that holds), else ``otherwise``."""
        if not branches:
            return otherwise
        (test, body), rest = branches[0], branches[1:]
        lines = ["if", f":: ({test}) ->", *("   " + x for x in body), ":: else ->"]
        lines += ["   " + x for x in chain(rest, otherwise) or ["skip"]]
        return [*lines, "fi"]

    def drop(c: int) -> list[str]:
        return [f"c[{c}].{f} = 0" for f in client_fields]

    def mine(c: int) -> Caller:
        """Client ``c``'s handle, as a guard reads it."""
        return (f"c[{c}].ep", f"c[{c}].tok")

    # the examples naming an event ``by = "refusal"`` (the claim's discard): a step whose
    # refusal is a stale owner's, and so recorded, sets their bit, as in the built-in world
    records = [
        f"took_{n} = 1"
        for n, inv in enumerate(event_examples)
        if inv.event is not None and roles[inv.event] == "refusal"
    ]

    def recorded(e: str, k: str, c: int) -> list[str]:
        """Client ``c``'s ``e``, refused on entity ``k``'s row: what marks it recorded,
        by the declaration's stale owner rule (``Spec.stale_owner``) read on the row."""
        if not records:
            return []
        ways = []
        for s in sid:
            stale = [f"!({guard(g, k, mine(c), True)})" for g in spec.stale_guards(e, s)]
            if spec.stale_state_refuses(e, s):
                stale.append("true")
            if stale:
                ways.append(conjunction([f"r[{k}].st == {sid[s]}", any_of(stale)]))
        if not ways:
            return []
        return [f"if :: {any_of(ways)} -> {'; '.join(records)} :: else -> skip fi"]

    def owner_option(
        action: Action,
        c: int,
        possible: str,
        load: list[str],
        saved: tuple[str, Caller] | None = None,
    ) -> tuple[Action, str, str, list[str]]:
        """Client ``c`` takes the owner event ``action[-1]`` on the handle it holds, once
        ``load`` has run (a wake-up's: its saved handle made the one it holds; ``saved``,
        the entity and caller it acts as, read before ``load``, for when the step is cut)."""
        e = action[-1]
        k = f"c[{c}].key"
        work = spec.work(e)
        branches, bodies = [], []
        for t in by_event[e]:
            body = [
                f"stale = stale || c[{c}].ep != r[{k}].ep || c[{c}].tok != r[{k}].tok",
                *apply(e, k, t, False),
                f"c[{c}].tok = (r[{k}].ep == c[{c}].ep -> r[{k}].tok : c[{c}].tok)",
                f"c[{c}].seen = {sid[t.dest]}",
            ]
            if dues and work in ("starts", "ends"):  # due until it reaches the executor
                body += [f"c[{c}].working = 0", f"c[{c}].due = {1 if work == 'starts' else 0}"]
            elif work in ("starts", "ends"):
                body.append(f"c[{c}].working = {1 if work == 'starts' else 0}")
            if rules is not None and work == "starts":
                body.append(f"c[{c}].phase = 1")  # its request is due
            elif rules is not None and e in answered | unanswered:
                body += [f"c[{c}].phase = 0", f"c[{c}].working = 0"]  # its part is over
                if carries:
                    body.append(f"c[{c}].rk = 0")
            if carries:  # still due: it carries the key as this step left the row
                body.append(f"c[{c}].rk = (c[{c}].phase == 1 -> {row_key(f'r[{k}]')} : c[{c}].rk)")
            if t.dest not in owner_events:  # done with the handle unless work runs
                idle = f"!c[{c}].working && !c[{c}].due" if dues else f"!c[{c}].working"
                body += [f"if :: {idle} -> {'; '.join(drop(c))} :: else -> skip fi"]
            branches.append((holds(t, k, mine(c), True), body))
            bodies.append((t, body))
        branches += first_ways(e, k, mine(c), True, bodies)
        if saved is not None:  # the same branches' tests, on the saved handle
            sk, caller = saved
            tests = [(holds(t, sk, caller, True), b) for t, b in bodies]
            tests += first_ways(e, sk, caller, True, bodies)
        else:
            sk, tests = k, branches
        fires = any_of([f"({b})" for b, _ in tests])
        # a refusal drops the handle and stops the work; only a step that fires is cut
        return (
            action,
            possible,
            f"({fires} && {cut_of(e, sk, False, tests)})",
            [*load, *chain(branches, [*recorded(e, k, c), *drop(c)])],
        )

    # (the built-in model's action, when it is possible, when a bound cuts it, its body)
    options: list[tuple[Action, str, str, list[str]]] = []
    # entity 0 may be taken: some taker's event fires on its row for an idle client,
    # within the bounds (what a ``taken`` invariant reads; the built-in model's takeable)
    takeable: list[str] = []
    for c in range(workers):
        # an idle client's events: a taker's (a new epoch) and, with a remote, a resend
        # (naming the current epoch, taken over with a fresh token, its request due)
        # (where the entity has linked drafts, a take names one: each is an option)
        named_drafts = range(n_drafts) if n_drafts else (-1,)
        idle = [("take", e, d) for d in named_drafts for e in takers]
        idle += [("resend", e, -1) for e in resends if rules]
        for key in range(keys):
            k = str(key)
            for kind, e, draft in idle:
                resend = kind == "resend"
                branches, bodies = [], []
                for t in by_event[e]:
                    body = apply(e, k, t, not resend, draft)
                    # a take whose work starts with it keeps its handle to do the work
                    starts = not resend and spec.work(e) == "starts"
                    if t.dest in owner_events or starts:  # else the taker is done at once
                        body += [
                            f"c[{c}].has = 1",
                            f"c[{c}].key = {k}",
                            f"c[{c}].ep = r[{k}].ep",
                            f"c[{c}].tok = r[{k}].tok",
                            f"c[{c}].seen = {sid[t.dest]}",
                        ]
                    if starts and rules is None:  # due at the executor at once
                        body.append(f"c[{c}].due = 1")
                    if resend or (starts and rules is not None):  # it sends at once
                        body += [f"c[{c}].working = 1", f"c[{c}].phase = 1"]
                        if carries:
                            body.append(f"c[{c}].rk = {row_key(f'r[{k}]')}")
                    branches.append((holds(t, k, None, resend, None, draft), body))
                    bodies.append((t, body))
                branches += first_ways(e, k, None, resend, bodies, draft)
                fires = any_of([f"({b})" for b, _ in branches])
                if draft >= 0:  # a draft not created yet is not named
                    fires = f"{status(f'r[{k}]', draft)} != {DRAFT_CODES['-']} && {fires}"
                if c == 0 and key == 0 and not resend:
                    takeable.append(f"({fires} && !{cut_of(e, k, True, branches)})")
                possible = f"!c[{c}].has && " + fires
                options.append(
                    (
                        (kind, c, key, draft, e) if draft >= 0 else (kind, c, key, e),
                        possible,
                        cut_of(e, k, not resend, branches),
                        chain(branches, []),
                    )
                )
        for e in spec.events:
            seen_in = [s for s, evs in owner_events.items() if e in evs]
            if roles[e] != "owner" or not seen_in:
                continue
            possible = f"c[{c}].has && " + any_of([f"c[{c}].seen == {sid[s]}" for s in seen_in])
            if rules is not None and e in answered:
                possible += f" && c[{c}].phase == 3"  # only with the remote's answer
            elif rules is not None and e in unanswered:
                possible += f" && (c[{c}].phase == 1 || c[{c}].phase == 2)"
            options.append(owner_option(("own", c, e), c, possible, []))
        for e in woken:
            # the saved handle becomes the one it holds, and acts as a held one does
            load = [
                *(f"c[{c}].{f} = 0" for f in client_fields),
                f"c[{c}].has = 1",
                f"c[{c}].key = c[{c}].skey",
                f"c[{c}].ep = c[{c}].sep",
                f"c[{c}].tok = c[{c}].stok",
                *(f"c[{c}].{f} = 0" for f in saved_fields),
            ]
            saved = (f"c[{c}].skey", (f"c[{c}].sep", f"c[{c}].stok"))
            options.append(
                owner_option(("wake", c, e), c, f"!c[{c}].has && c[{c}].sv", load, saved)
            )
        if dues:
            # its due work reaches the executor: it runs, unless the executor is fenced
            # through its epoch; refused, a client with no event left is done
            r = f"r[c[{c}].key]"
            ends = [s for s in sid if s not in owner_events]
            done = chain([(any_of([f"c[{c}].seen == {sid[s]}" for s in ends]), drop(c))], [])
            body = [f"c[{c}].due = 0"]
            if remembers_runs:  # it arrived, refused or not
                body += chain([(f"c[{c}].ep == {r}.ep", [f"{r}.ran = 1"])], [])
            body += chain([(f"c[{c}].ep <= {r}.fence", done)], [f"c[{c}].working = 1"])
            options.append((("run", c), f"c[{c}].has && c[{c}].due", "false", body))
        if rules is not None:
            r = f"r[c[{c}].key]"
            arrives = f"(c[{c}].ep > {r}.fence)" if rules.fences else "true"
            other = any_of([f"({r}.fly[{at(e, g)}] > 0 && c[{c}].ep != {e})" for e, g in requests])
            flying = " + ".join(f"{r}.fly[{at(e, g)}]" for e, g in requests)
            carried = f"c[{c}].rk" if carries else row_key(r)  # the key it sends
            slot = f"{r}.fly[{at(f'c[{c}].ep', carried)}]"
            sent = [f"overlap = overlap || {other}", f"{slot} = {slot} + 1"]
            if rules.fences:  # the highest epoch that arrived fences every lower one
                sent.append(f"{r}.fence = (c[{c}].ep - 1 > {r}.fence -> c[{c}].ep - 1 : {r}.fence)")
            options.append(
                (
                    ("send", c),
                    f"c[{c}].has && c[{c}].phase == 1",
                    f"({arrives} && {flying} + 1 > {counts})",
                    [f"c[{c}].phase = 2", *chain([(arrives, sent)], [])],
                )
            )
            if carries or not keyed:
                request = at(f"c[{c}].ep", f"c[{c}].rk")
                heard = f"{r}.took[{request}] > 0 && {r}.fly[{request}] == 0"
            else:  # a request of its epoch took effect, and none is still in flight
                slots = [at(f"c[{c}].ep", g) for g in range(nkeys)]
                heard = any_of([f"{r}.took[{i}] > 0" for i in slots])
                heard = f"({heard}) && " + " && ".join(f"{r}.fly[{i}] == 0" for i in slots)
            options.append(
                (
                    ("ack", c),
                    f"c[{c}].has && c[{c}].phase == 2 && {heard}",
                    "false",
                    [f"c[{c}].phase = 3"],
                )
            )
        if wakes:  # it keeps its handle saved, once
            keep = [f"c[{c}].sv = 1", f"c[{c}].skey = c[{c}].key", f"c[{c}].sep = c[{c}].ep"]
            keep += [f"c[{c}].stok = c[{c}].tok", *drop(c)]
            options.append((("crash", c), f"c[{c}].has && !c[{c}].sv", "false", keep))
        elif cfg["crashes"]:
            options.append((("crash", c), f"c[{c}].has", "false", drop(c)))
    for key in range(keys):
        k = str(key)
        r = f"r[{k}]"
        for e in environment:
            bodies = [(t, apply(e, k, t, False)) for t in by_event[e]]
            branches = [(holds(t, k, None, True), body) for t, body in bodies]
            branches += first_ways(e, k, None, True, bodies)
            possible = any_of([f"({b})" for b, _ in branches])
            cuts = cut_of(e, k, False, branches)
            body = chain(branches, [])
            if e in fences_with_readback:
                # where readback finds nothing, the operator fences through the row's epoch
                # first and reads again: the option fires on the fenced row
                ways = [(holds(t, k, None, True, fenced=True), b) for t, b in bodies]
                ways += first_ways(e, k, None, True, bodies, fenced=True)
                nothing = f"({finds_nothing(k)} && {r}.fence < {r}.ep)"
                possible = any_of(
                    [
                        f"(!{nothing} && {possible})",
                        f"({nothing} && {any_of([f'({b})' for b, _ in ways])})",
                    ]
                )
                cuts = any_of(
                    [
                        f"(!{nothing} && {cuts})",
                        f"({nothing} && {cut_of(e, k, False, ways)})",
                    ]
                )
                body = chain([(nothing, [*fence_row(k), *body])], body)
            options.append((("env", key, e), possible, cuts, body))
        for d in range(n_drafts):
            ds, dv = status(r, d), version(r, d)
            code = DRAFT_CODES
            if cfg["edits"]:  # once each; never the pinned draft where it may be dispatched
                locked = f"{r}.pd == {d + 1} && {in_states(r, pinning)}"
                options.append(
                    (
                        ("draft", key, d, "edit"),
                        f"({ds} == {code['a']} || {ds} == {code['p']}) && {dv} < 2 && !({locked})",
                        "false",
                        [f"{ds} = {code['p']}", f"{dv} = {dv} + 1"],
                    )
                )
            options.append(
                (
                    ("draft", key, d, "approve"),
                    f"{ds} == {code['p']}",
                    "false",
                    [f"{ds} = {code['a']}"],
                )
            )
            crowded = (
                " || ".join(
                    f"{status(r, e)} == {code['a']} || {status(r, e)} == {code['p']}"
                    for e in range(n_drafts)
                )
                if one_live
                else "false"
            )
            options.append(
                (
                    ("draft", key, d, "create"),
                    f"{ds} == {code['-']} && !({crowded})",
                    "false",
                    [f"{ds} = {code['p']}", f"{dv} = 1"],
                )
            )
        lease = in_states(r, lease_states)
        options.append((("clock", key), f"({r}.live && {lease})", "false", [f"{r}.live = 0"]))
        if fenceable and cfg["fence"] == "any_step":
            options.append((("fence", key), f"({r}.fence < {r}.ep)", "false", fence_row(k)))
        if rules is not None:
            for ep, g in requests:
                i = at(ep, g)
                applies = {"fencing": f"{ep} > {r}.fence", "dedup": f"!{took_key(r, g)}"}
                land = [f"{r}.fly[{i}] = {r}.fly[{i}] - 1"]
                land += chain(
                    [(applies.get(rules.mode, "true"), [f"{r}.took[{i}] = {r}.took[{i}] + 1"])],
                    [],
                )
                options.append((("land", key, ep, g), f"{r}.fly[{i}] > 0", "false", land))

    head = [
        f"/* {spec.name}: generated by claimfsm from its declaration; do not edit. */",
        f"/* world: {workers} workers, {keys} entities, {epochs} epochs, counts up to {counts},"
        f" crashes {'on' if cfg['crashes'] else 'off'}"
        + (" (a crashed client keeps its handle saved and may wake up with it)" if wakes else "")
        + (f", a {rules.mode} remote" if rules is not None else "")
        + (f", {cfg['retries']} resends per epoch" if resends else "")
        + (
            f", {n_drafts} linked drafts per entity (edits {'on' if cfg['edits'] else 'off'};"
            " status " + ", ".join(f"{v} {k}" for k, v in DRAFT_CODES.items()) + ")"
            if n_drafts
            else ""
        )
        + " */",
        "/* states: " + ", ".join(f"{i} {s}" for s, i in sid.items()) + " */",
        "typedef Row { byte st; byte ep; byte tok; bit live; "
        + (f"byte col[{len(columns)}]; " if columns else "")
        + "byte fence"
        + (
            f"; byte fly[{(epochs + 1) * nkeys}]; byte took[{(epochs + 1) * nkeys}]"
            if rules is not None
            else ""
        )
        + ("; byte rs" if resends else "")
        + ("; byte kg" if fresh_keys else "")
        + ("; byte oc" if outcomes else "")
        + ("; bit ran" if remembers_runs else "")
        + "".join(
            f"; byte ds{d} = {DRAFT_CODES[first_status[d]]}; byte dv{d} = 1"
            for d in range(n_drafts)
        )
        + ("; byte pd; byte pv" if n_drafts else "")
        + " }",
        "typedef Client { bit has; byte key; byte ep; byte tok; byte seen; bit working"
        + ("; bit due" if dues else "")
        + ("; byte phase" if rules is not None else "")
        + ("; byte rk" if carries else "")
        + ("; bit sv; byte skey; byte sep; byte stok" if wakes else "")
        + " }",
        f"Row r[{keys}];",
        f"Client c[{workers}];",
        "bit stale;  /* a stale client's operation changed a row */",
        *(
            ["bit overlap;  /* a request arrived while another epoch's was in flight */"]
            if rules is not None
            else []
        ),
        *(f"bit esc_{n};  /* {inv.name} broken */" for n, inv in enumerate(guarded)),
        *(
            f"bit took_{n};  /* {inv.name}: a step took {inv.event} */"
            for n, inv in enumerate(event_examples)
        ),
    ]
    if liveness is not None:
        some_cut = any_of([f"(({en}) && {ct})" for _a, en, ct, _b in options if ct != "false"])
        return _with_ltl(spec, liveness, options, sid, head, some_cut, any_of(takeable))
    invariants = [p for p in model.properties if p.kind == "always"]
    world = (workers, keys, columns, default, sid, epochs, rules, nkeys, per_draw, n_drafts)
    checks = [f"assert({_invariant(spec, p.name, *world)})" for p in invariants]
    # examples (kind reachable): C fragments that print SOMETIMES n when first met
    sometimes = tuple(p.name for p in model.properties if p.kind == "sometimes")
    met = {name: any_of([example(f"r[{k}]", name) for k in range(keys)]) for name in sometimes}
    marks = [
        f'if (!seen[{n}] && {_in_c(met[name])}) {{ seen[{n}] = 1; printf("SOMETIMES {n}\\n"); }}'
        for n, name in enumerate(sometimes)
    ]
    everyone_done = " && ".join(in_states(f"r[{k}]", terminal) for k in range(keys))
    some_cut = any_of([f"(({en}) && {ct})" for _a, en, ct, _b in options if ct != "false"])
    some_step = any_of([f"(({en}) && !{ct})" for _a, en, ct, _b in options])
    out = [*head]
    if marks:
        out.append(f"c_decl {{ int seen[{len(marks)}]; }}")
    out += ["", "active proctype world() {", "  do"]
    for n, (_action, possible, bounded, body) in enumerate(options):
        out.append(f"  :: d_step {{ (({possible}) && !{bounded}) ->")
        out.append(f'       printf("ACTION {n}\\n");')
        out += ["       " + _statement(line) for line in body]
        out += [
            f"       {check}; /* {p.name} */" for check, p in zip(checks, invariants, strict=True)
        ]
        if marks:
            out.append("       c_code { " + " ".join(marks) + " };")
        out.append("       skip }")
    out.append(f"  :: d_step {{ !{some_step} ->")
    out.append('       printf("DEADLOCK\\n");')
    out.append(f"       assert({everyone_done} || {some_cut}) }}")
    out += ["  od", "}"]
    return Promela("\n".join(out) + "\n", tuple(a for a, *_ in options), sometimes)


#: A linked draft's status in Promela: not created yet, approved, pending, dispatched.
DRAFT_CODES = {"-": 0, "a": 1, "p": 2, "d": 3}


def _in_c(expr: str) -> str:
    """A Promela expression over the rows and the examples' bits as C inside pan
    (``now.`` before each)."""
    return re.sub(r"\b(r\[|took_)", r"now.\1", expr)


def _with_ltl(
    spec: Spec,
    name: str,
    options: list[tuple[Action, str, str, list[str]]],
    sid: dict[str, int],
    head: list[str],
    some_cut: str,
    takeable: str,
) -> Promela:
    """The model with ``eventually`` or ``taken`` invariant ``name`` as an LTL formula (see
    ``promela``); ``takeable``: entity 0 may be taken, what a ``taken`` one reads."""
    inv = spec.invariants.get(name)
    if inv is None or inv.kind not in ("eventually", "taken"):
        raise ValueError(f"{name!r} is not an eventually or taken invariant of {spec.name}")
    fair, counted = frozenset(inv.fair), step_events(spec)
    classes: dict[Any, int] = {}
    for action, *_ in options:
        found = fairness_class(fair, action, counted)
        if found is not None:
            classes.setdefault(found, len(classes) + 1)
    # (ltl_observer says how the formula reads the state and the fairness)
    if inv.kind == "taken":  # taken, or no longer takeable
        trigger, goal = takeable, f"!{takeable}"
    else:
        trigger = " || ".join(f"r[0].st == {sid[s]}" for s in inv.sources)
        goal = " || ".join(f"r[0].st == {sid[s]}" for s in inv.goals)
    steps = {
        found: [
            f"(({en}) && !{ct})" if ct != "false" else f"({en})"
            for a, en, ct, _b in options
            if fairness_class(fair, a, counted) == found
        ]
        for found in classes
    }
    out = [
        *head,
        # the goal is also met where a bound stops a step
        *ltl_observer(name, f"({trigger})", f"({goal}) || {some_cut}", steps),
    ]
    out += ["", "active proctype world() {", "  d_step { observe() };", "  do"]
    for n, (action, possible, bounded, body) in enumerate(options):
        cls = classes.get(fairness_class(fair, action, counted), 0)
        out.append(f"  :: d_step {{ (({possible}) && !{bounded}) ->")
        out.append(f'       printf("ACTION {n}\\n");')
        out += ["       " + _statement(line) for line in body]
        out.append(f"       last = {cls}; observe() }}")
    out.append('  :: d_step { true -> printf("PAUSE\\n"); last = 0; observe() }')
    out += ["  od", "}"]
    return Promela("\n".join(out) + "\n", tuple(a for a, *_ in options))


def ltl_observer(name: str, trigger: str, goal: str, classes: dict[Any, list[str]]) -> list[str]:
    """The bits an LTL formula reads, ``observe()`` that sets them after every step, and the
    formula ``name``: from a state where ``trigger`` holds, ``goal`` eventually holds, if
    every fairness class (in order; each with the guards of its steps) is taken or not
    possible infinitely often. Each step sets ``last`` to its class's number (from 1; 0:
    none) before it calls ``observe()``.

    SPIN's LTL translator takes plain variables best, and grows exponentially with the
    formula: what the formula reads is kept in bits that every step sets from the state it
    leaves, and weak fairness of n classes is one round-robin counter (``phase``) instead of
    n conjuncts. The counter passes class i when i was just taken or is not possible;
    ``wrapped`` marks a round completed. Every class is taken or not possible infinitely
    often (weak fairness) exactly when rounds complete infinitely often."""
    rounds = [
        f"  :: phase == {n - 1} && (last == {n} || !({' || '.join(steps)})) ->"
        f" phase = {n}  /* {found} */"
        for n, (found, steps) in enumerate(classes.items(), start=1)
    ]
    out = [
        "byte last;  /* the fairness class of the last step; 0: none */",
        "byte phase;  /* the class the fairness round waits for */",
        "bit trigger, goal, wrapped;",
        "",
        "inline observe() {",
        f"  trigger = {trigger};",
        f"  goal = {goal};",
        "  wrapped = 0;",
    ]
    if rounds:
        out += ["  if", *rounds, "  :: else -> skip", "  fi;"]
        out += [f"  if :: phase == {len(classes)} -> phase = 0; wrapped = 1 :: else -> skip fi"]
    out += ["}", ""]
    assumption = "([]<> wrapped)" if classes else "true"
    out.append(f"ltl {name} {{ {assumption} -> [] (trigger -> <> goal) }}")
    return out


def _statement(line: str) -> str:
    """A line of a body with its separator: none after ``if`` and an option's guard."""
    bare = line.strip()
    return line if bare == "if" or bare.startswith("::") else line + ";"


def _invariant(
    spec: Spec,
    name: str,
    workers: int,
    keys: int,
    columns: list[str],
    default: dict[str, int],
    sid: dict[str, int],
    epochs: int = 0,
    rules: RemoteRules | None = None,
    nkeys: int = 1,
    per_draw: int = 1,
    n_drafts: int = 0,
) -> str:
    """A safety property of the built-in model as a Promela expression."""
    if name == "stale_operations_change_nothing":
        return "!stale"
    inv = spec.invariants[name]
    if inv.kind == "left_only_by":
        guarded = [n for n, i in spec.invariants.items() if i.kind == "left_only_by"]
        return f"!esc_{guarded.index(name)}"
    if inv.kind == "exclusive_work" and rules is not None:
        return "!overlap"
    if inv.kind == "effect_once":  # with a remote: one request took effect at most, any key
        if nkeys > per_draw:  # with linked drafts: each draft's effect at most once
            per_draft = VERSIONS * per_draw
            took = [
                "("
                + " + ".join(
                    f"r[{k}].took[{e * nkeys + d * per_draft + g}]"
                    for e in range(1, epochs + 1)
                    for g in range(per_draft)
                )
                + ") <= 1"
                for k in range(keys)
                for d in range(nkeys // per_draft)
            ]
            return "(" + " && ".join(took) + ")"
        every = [e * nkeys + g for e in range(1, epochs + 1) for g in range(nkeys)]
        took = [
            "(" + " + ".join(f"r[{k}].took[{i}]" for i in every) + ") <= 1" for k in range(keys)
        ]
        return "(" + " && ".join(took) + ")"
    if inv.kind == "exclusive_work":
        pairs = [
            f"!(c[{i}].has && c[{j}].has && c[{i}].working && c[{j}].working"
            f" && c[{i}].key == c[{j}].key && c[{i}].ep > r[c[{i}].key].fence"
            f" && c[{j}].ep > r[c[{j}].key].fence)"
            for i in range(workers)
            for j in range(i + 1, workers)
        ]
        return "(" + " && ".join(pairs) + ")" if pairs else "true"
    if inv.kind == "pinned":  # in the states, the pinned draft approved or dispatched as pinned
        kept = (DRAFT_CODES["a"], DRAFT_CODES["d"])
        terms = []
        for k in range(keys):
            r = f"r[{k}]"
            within = " || ".join(f"{r}.st == {sid[s]}" for s in inv.states)
            as_pinned = " || ".join(
                f"({r}.pd == {d + 1} && {r}.dv{d} == {r}.pv"
                f" && ({r}.ds{d} == {kept[0]} || {r}.ds{d} == {kept[1]}))"
                for d in range(n_drafts)
            )
            terms.append(f"(!({within}) || {as_pinned or 'false'})")
        return "(" + " && ".join(terms) + ")"
    assert inv.kind == "row" and inv.op is not None
    op = OPS[inv.op]
    terms = []
    for k in range(keys):
        r = f"r[{k}]"
        left = (
            f"{r}.ep"
            if inv.column == "epoch"
            else f"({r}.col[{columns.index(inv.column or '')}] + {default[inv.column or '']})"
        )
        test = f"({left} {op} {literal(inv.value)})"
        if inv.states:
            within = " || ".join(f"{r}.st == {sid[s]}" for s in inv.states)
            test = f"(!({within}) || {test})"
        terms.append(test)
    return "(" + " && ".join(terms) + ")"


#: The C compiler's optimisation levels a verifier may be built at
#: (``CLAIMFSM_SPIN_OPT``), and the one used unless it says otherwise.
OPTIMISATIONS = ("-O0", "-O1", "-O2", "-O3", "-Os")
DEFAULT_OPTIMISATION = "-O1"


@dataclass
class SpinRun:
    """What a SPIN run cost, besides the report: the seconds to generate and compile the
    verifier (``spin -a`` and the C compiler, at ``optimisation``) and to search
    (``pan``), SPIN's memory, and the Promela it searched."""

    compile_seconds: float = 0.0
    optimisation: str = DEFAULT_OPTIMISATION
    search_seconds: float = 0.0
    memory_mb: float = 0.0
    state_vector_bytes: int = 0
    bitstate: bool = False
    promela: str = ""
    output: str = ""


def spin_available() -> str | None:
    """Why SPIN cannot run here (None: it can)."""
    missing = [tool for tool in ("spin", "cc") if shutil.which(tool) is None]
    if missing:
        return (
            f"{' and '.join(missing)} not found on PATH: --engine spin needs SPIN and a C"
            " compiler (Debian: apt-get install spin gcc); the built-in engine needs neither"
        )
    return None


def spin_check(
    spec: Spec,
    config: EntityModelConfig | ClaimModelConfig | None = None,
    *,
    bitstate: bool = False,
    keep: Path | None = None,
    timeout: float | None = None,
) -> tuple[Report[Any, Any], SpinRun]:
    """Check ``spec``'s model with SPIN and read the verdicts, the state count and the
    trails back into a :class:`Report` of the built-in model: the model of a lifecycle of
    your own (``config``: an :class:`EntityModelConfig`), or the claim protocol's model
    for the claim declaration and its wrong designs (a :class:`ClaimModelConfig`).

    The safety properties and deadlocks are one breadth-first search (``model.pml``), so a
    counterexample is a shortest one; each ``eventually`` invariant is an LTL formula
    searched for acceptance cycles (``NAME.pml``; nested depth-first, with ``-i`` shortening
    the trail by iterating the search). ``bitstate``: the safety search is a bitstate (supertrace)
    one, which stores a few bits per state and so reaches bounds past the memory of an
    exhaustive search, at the price of possibly missing states. ``keep``: a directory to
    leave the Promela, the verifiers and any trails in. The report's figures (states,
    depth, seconds) are the safety search's."""
    why = spin_available()
    if why is not None:
        raise SpinUnavailable(why)
    opt = spin_optimisation()
    model: Model[Any, Any]
    generate: Callable[[str | None], Promela]
    if isinstance(config, EntityModelConfig) or not runs_on_the_claim_model(spec):
        # a lifecycle of your own, or the claim (``pseudo``) on the lifecycle's world
        if isinstance(config, ClaimModelConfig):
            raise TypeError("a lifecycle of your own takes an EntityModelConfig")
        model = entity_model(spec, config)
        generate = lambda liveness: promela(spec, config, liveness)  # noqa: E731
    else:
        from claimfsm.checker._spin_claim import claim_promela

        model = claim_model(spec, config)
        generate = lambda liveness: claim_promela(spec, config, liveness)  # noqa: E731
    generated = generate(None)
    run = SpinRun(bitstate=bitstate, promela=generated.text, optimisation=opt)
    liveness = {p.name: generate(p.name) for p in model.properties if p.kind == "eventually"}
    with tempfile.TemporaryDirectory(prefix="claimfsm-spin-") as scratch:
        where = keep if keep is not None else Path(scratch)
        where.mkdir(parents=True, exist_ok=True)
        # Every verifier is built at once, each in a folder of its own (``spin -a`` writes
        # pan.c where it runs), as many at a time as there are cores: building is most of
        # SPIN's time on a small world.
        builds = {"model": (generated.text, ["-DSAFETY", "-DBITSTATE" if bitstate else "-DBFS"])}
        builds.update({name: (ltl.text, []) for name, ltl in liveness.items()})
        # The safety search runs as soon as its verifier is built, while the others are
        # still building; if it stops at an error, no liveness search follows (as in the
        # built-in engine), and the builds not yet begun are dropped.
        start = time.perf_counter()
        pool = ThreadPoolExecutor(max_workers=min(len(builds), os.cpu_count() or 1))
        try:
            done = {
                stem: pool.submit(_build, where, stem, text, flags, opt, timeout)
                for stem, (text, flags) in builds.items()
            }
            done["model"].result()
            run.compile_seconds = time.perf_counter() - start
            searching = time.perf_counter()
            pan = ["./model", "-m1000000"] + (["-w30"] if bitstate else [])
            run.output = _run(pan, where / "model", timeout, "pan (the search)", check=False)
            run.search_seconds = time.perf_counter() - searching
            report = _read(model, run.output, run.search_seconds)
            if report.complete:
                for future in done.values():
                    future.result()
                run.compile_seconds = time.perf_counter() - start - run.search_seconds
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        if "CAPACITY" in run.output:
            raise SpinUnavailable(
                "the generated Promela ran out of slots for the remote's requests: a design"
                " sends more often per epoch than the generator allows; check it with the"
                " built-in engine"
            )
        for n in re.findall(r"^SOMETIMES (\d+)$", run.output, flags=re.MULTILINE):
            report.reached.add(generated.sometimes[int(n)])
        if "errors: 0" not in run.output:
            trail = _run(["spin", "-t", "model.pml"], where / "model", timeout, "spin -t")
            _discover(report, generated, trail)
        for p in model.properties:
            if p.kind != "eventually" or not report.complete:
                continue  # liveness is read from a complete search, as the built-in engine does
            start = time.perf_counter()
            output = _run(
                [f"./{p.name}", "-a", "-i", "-m1000000"],
                where / p.name,
                timeout,
                f"pan -a ({p.name})",
                check=False,
            )
            run.search_seconds += time.perf_counter() - start
            if "errors: 0" in output and "max search depth too small" not in output:
                continue
            if "errors: 0" in output:
                report.complete = False
                report.stopped_by = "depth"
                continue
            trail = _run(["spin", "-t", f"{p.name}.pml"], where / p.name, timeout, "spin -t")
            _discover_lasso(report, p, liveness[p.name], trail)
    found = re.search(r"([\d.]+)\s+total actual memory usage", run.output)
    run.memory_mb = float(found.group(1)) if found else 0.0
    found = re.search(r"State-vector (\d+) byte", run.output)
    run.state_vector_bytes = int(found.group(1)) if found else 0
    return report, run


def spin_optimisation() -> str:
    """The level SPIN's verifiers are compiled at: ``CLAIMFSM_SPIN_OPT``, or ``-O1`` (as
    fast a search as ``-O2`` here, for a third less compiling). ``-O0`` halves compiling
    again, and suits a small world, where compiling is most of SPIN's time."""
    level = os.environ.get("CLAIMFSM_SPIN_OPT", DEFAULT_OPTIMISATION)
    if level not in OPTIMISATIONS:
        raise InvalidArgument(
            f"CLAIMFSM_SPIN_OPT={level!r} is not an optimisation level SPIN's verifiers are"
            f" built at: set it to one of {', '.join(OPTIMISATIONS)},"
            f" or unset it ({DEFAULT_OPTIMISATION})"
        )
    return level


def _build(
    where: Path, stem: str, text: str, flags: list[str], opt: str, timeout: float | None
) -> float:
    """Write ``stem.pml`` (in ``where``, and in the folder ``where/stem``), generate its
    verifier and compile it at ``opt`` to ``where/stem/stem``; the seconds."""
    start = time.perf_counter()
    (where / f"{stem}.pml").write_text(text)
    folder = where / stem
    folder.mkdir(exist_ok=True)
    (folder / f"{stem}.pml").write_text(text)
    _run(["spin", "-a", f"{stem}.pml"], folder, timeout, f"spin -a {stem}.pml")
    argv = ["cc", opt, "-w", "-DNOREDUCE", *flags, "-o", stem, "pan.c"]
    _run(argv, folder, timeout, f"the C compiler (pan.c of {stem}.pml)")
    return time.perf_counter() - start


def _run(argv: list[str], cwd: Path, timeout: float | None, what: str, check: bool = True) -> str:
    try:
        done = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise SpinUnavailable(f"{what} took longer than {timeout} s") from exc
    if check and done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise SpinUnavailable(f"{what} failed (exit {done.returncode}): " + " / ".join(tail))
    return done.stdout + done.stderr


def _read(model: Model[Any, Any], output: str, seconds: float) -> Report[Any, Any]:
    """SPIN's figures as a report: states stored (unique), transitions, depth."""

    def number(pattern: str) -> int:
        found = re.search(pattern, output)
        if found is None:
            raise SpinUnavailable("pan printed no " + pattern + "; its output:\n" + output[-800:])
        return int(float(found.group(1)))

    report: Report[Any, Any] = Report(model)
    report.unique = number(r"([\d.e+]+) states, stored")
    report.states = number(r"([\d.e+]+) transitions \(")
    report.depth = number(r"depth reached (\d+)")
    report.seconds = seconds
    report.complete = "errors: 0" in output and "max search depth too small" not in output
    if "errors: 0" not in output:
        report.stopped_by = "first counterexample"  # SPIN stops at its first error
    elif not report.complete:
        report.stopped_by = "depth"
    return report


def _discover_lasso(
    report: Report[Any, Any], prop: Property[Any], generated: Promela, trail: str
) -> None:
    """Replay SPIN's acceptance cycle for ``eventually`` property ``prop`` on the built-in
    model: the steps up to the cycle, then the cycle. A cycle of pauses alone is a run that
    stops where no fair step is possible."""
    model = report.model
    cycle = trail.find("START OF CYCLE")
    if cycle < 0:
        raise SpinUnavailable(f"SPIN's trail for {prop.name} has no cycle:\n{trail[-800:]}")
    before = re.findall(r"^\s*ACTION (\d+)\s*$", trail[:cycle], flags=re.MULTILINE)
    after = re.findall(r"^\s*ACTION (\d+)\s*$", trail[cycle:], flags=re.MULTILINE)
    path, token = _replayed(model, generated, [int(n) for n in before + after])
    loop_from = len(before) if after else None
    if loop_from is not None and path[loop_from].state != path[-1].state:
        raise SpinUnavailable(
            f"SPIN's cycle for {prop.name} does not return to its first state on the"
            " built-in model: the generated Promela and the model disagree"
        )
    report.discoveries[prop.name] = Discovery(prop, tuple(path), token, loop_from)


def _replayed(
    model: Model[Any, Any], generated: Promela, numbers: list[int]
) -> tuple[list[Step[Any, Any]], str]:
    """The built-in model's path for SPIN's action numbers, and its replay token."""
    state = next(iter(model.init_states()))
    path: list[Step[Any, Any]] = [Step(None, state)]
    indices = ["0"]
    for number in numbers:
        action = generated.actions[number]
        options = list(model.actions(state))
        after = model.next_state(state, action) if action in options else None
        if after is None:
            raise SpinUnavailable(
                f"SPIN's trail takes {model.show_action(action)!r} at step {len(path)}, which"
                " the built-in model does not: the generated Promela and the model disagree"
            )
        indices.append(str(options.index(action)))
        state = after
        path.append(Step(action, state))
    return path, ".".join(indices)


def _discover(report: Report[Any, Any], generated: Promela, trail: str) -> None:
    """Replay SPIN's trail on the built-in model and record what it violates."""
    model = report.model
    marks = re.findall(r"^\s*(ACTION (\d+)|DEADLOCK)\s*$", trail, flags=re.MULTILINE)
    numbers = [int(n) for mark, n in marks if mark != "DEADLOCK"]
    path, token = _replayed(model, generated, numbers)
    if any(mark == "DEADLOCK" for mark, _ in marks):
        report.deadlock = tuple(path)
        return
    state = path[-1].state
    broken = [p for p in model.properties if p.kind == "always" and not p.holds(state)]
    if not broken:
        raise SpinUnavailable(
            "SPIN reported an error, but its trail ends in a state where every property"
            " holds on the built-in model"
        )
    for p in broken:
        report.discoveries[p.name] = Discovery(p, tuple(path), token)
