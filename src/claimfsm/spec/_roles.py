"""What a declaration says beyond its machine: the row's own columns, who takes each event,
which events start and end the external work, and the world the checker explores (the
named invariants are ``_invariants``'). stdlib only.

- ``[columns.NAME]``: an integer column of the entity's row (a counter such as
  ``attempts``), with its ``default``. Events ``bumps`` it; ``compare`` guards and ``row``
  invariants read it.
- ``by`` on ``[events.NAME]``: who takes the event (:data:`ROLES`). Without it, the guards
  say: an ``owner`` guard makes it the owner's, a ``free`` guard a taker's, a ``lapsed``
  guard the sweep's; anything else is the operator's.
- ``work`` on ``[events.NAME]``: ``starts`` (after it the owner's external work may be
  running: a send, a job's run) or ``ends`` (the owner's work is over once it takes it,
  refused or not).
- ``remote`` on ``[events.NAME]``: how the event stands to the claim world's remote
  (:data:`REMOTE_ROLES`): taken on its answer, on giving up waiting, or sending again.
- ``[world]``: the bounds and faults of the checker's world (:data:`WORLD_OPTIONS`);
  ``claimfsm check`` flags override them. Two worlds read them: the claim world (drafts and
  a remote: :data:`CLAIM_WORLD`) and the world of a lifecycle of your own
  (:data:`LIFECYCLE_WORLD`); each refuses, by name, what only the other reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from claimfsm.spec._guards import COLUMNS, OPERATORS
from claimfsm.spec._remote import REMOTE_MODES

#: Who takes an event, with the sentence the docs use.
ROLES: dict[str, str] = {
    "owner": "a client holding a handle (epoch and token) from an earlier take",
    "taker": "an idle client: a new epoch begins and the taker holds it (a fresh token)",
    "operator": "the operator or a reconciler, naming the current epoch, holding no token",
    "sweep": "the store's sweep, acting on the row as the store clock finds it",
    "refusal": (
        "no one: the record of a stale owner's refused operation (the claim's discard),"
        " which changes no row; a checker world marks the refusal as a step that took it"
    ),
}

#: What an event does to the owner's external work.
WORK = {"starts": "the owner's external work may run from now on", "ends": "the work is over"}

#: How an event stands to the claim world's remote (``remote`` on ``[events.NAME]``): the
#: roles the claim world's steps are found by, declared rather than read off the shape.
REMOTE_ROLES = {
    "answered": "the owner takes it once the remote has answered its request (the claim's confirm)",
    "unanswered": (
        "the owner takes it when it stops waiting for an answer; its request may still be in"
        " flight and land later (the claim's timeout)"
    ),
    "resends": (
        "a worker takes the epoch over and sends its request again, with the epoch's"
        " idempotency key unless the event sets fresh_key (the claim's retry)"
    ),
}

#: ``[world]`` options: name -> (default, lowest, highest, meaning). Booleans have no
#: range; ``remote`` is one of the remote modes.
WORLD_OPTIONS: dict[str, tuple[int | bool | str, int, int, str]] = {
    "workers": (2, 1, 6, "clients that take, own and work on entities"),
    "keys": (1, 1, 4, "entities (one row each): the claim world's targets"),
    "epochs": (3, 1, 8, "takes per entity: a take beyond it is not explored"),
    "counts": (
        4,
        1,
        16,
        "the highest value a bumped column reaches: a bump beyond it is not explored",
    ),
    "crashes": (True, 0, 0, "a client may crash: it forgets its handle and its work stops"),
    "wakes": (
        False,
        0,
        0,
        "a crashed client keeps its handle (saved) and may wake up once with it, to take"
        " again an event that leaves the state its take led into (needs crashes; the claim"
        " world's default is true)",
    ),
    "drafts": (2, 1, 6, "drafts per entity (the claim world's, and a lifecycle's [drafts])"),
    "retries": (
        1,
        0,
        6,
        "same-key retries per epoch: the claim world's, and a lifecycle's resends where it"
        " declares a resends event",
    ),
    "remote": ("fencing", 0, 0, "the claim world: the remote's mode (plain, fencing, dedup)"),
    "edits": (True, 0, 0, "each draft may be edited once (where drafts are declared)"),
    "fence": (
        "any_step",
        0,
        0,
        "when the operator fences the executor or remote through an entity's epoch:"
        " any_step (a step of its own, at any time) or with_readback (only inside an"
        " operator's event whose guards ask for the fence and for readback's evidence,"
        " where readback finds nothing: the claim world's reconcile)",
    ),
}
#: When the operator may fence (``[world] fence``): at any step, or only inside an
#: operator's readback that finds nothing (the claim world's only way).
FENCE_MODES: tuple[str, ...] = ("any_step", "with_readback")
#: The values each word-valued ``[world]`` option may take.
WORLD_WORDS: dict[str, tuple[str, ...]] = {"remote": REMOTE_MODES, "fence": FENCE_MODES}
#: The options each world reads; an option only the other reads is refused where declared.
LIFECYCLE_WORLD = frozenset({"workers", "keys", "epochs", "counts", "crashes", "wakes", "fence"})
#: The options a lifecycle's world reads besides, where it declares linked drafts.
LINKED_WORLD = frozenset({"drafts", "edits"})
CLAIM_WORLD = frozenset(
    {
        "workers",
        "keys",
        "epochs",
        "crashes",
        "wakes",
        "drafts",
        "retries",
        "remote",
        "edits",
        "fence",
    }
)


COLUMN_KEYS = {"meaning", "type", "default"}


#: The evidence a lifecycle of your own compares: readback's ``running`` (is a run of the
#: row's epoch running at the executor? a run still on its way is not there yet) and
#: ``ran`` (did a run of the row's epoch reach the executor?), and ``fenced_through`` (how
#: far the executor, or the remote, is fenced). The checker's world answers them as an
#: executor can; a store's caller brings them.
LIFECYCLE_FACTS = frozenset({"running", "ran", "fenced_through"})
#: Readback of a run at an executor: no honest answer where the work is a request to a
#: remote, which may still be on its way where no readback sees it.
EXECUTOR_FACTS = frozenset({"running", "ran"})
#: The evidence a lifecycle with a remote (an event declares ``remote``) compares besides:
#: readback's ``outcome`` (``present`` or ``absent``: did a request with the entity's
#: idempotency key take effect?) and ``remote_dedups`` (does the remote deduplicate by
#: that key?).
REMOTE_FACTS = frozenset({"outcome", "remote_dedups"})
#: What each of them is: true or false; an epoch (a whole number); a readback word.
FACT_KINDS: dict[str, tuple[type, str]] = {
    "running": (bool, "true or false"),
    "ran": (bool, "true or false"),
    "fenced_through": (int, "a whole number (an epoch)"),
    "outcome": (str, '"present" or "absent"'),
    "remote_dedups": (bool, "true or false"),
}
#: The values a fact of a ``str`` kind may take.
FACT_WORDS: dict[str, tuple[str, ...]] = {"outcome": ("present", "absent")}


def has_remote(spec: Any) -> bool:
    """Whether ``spec`` declares a remote: some event has a ``remote`` role."""
    return any(d.remote is not None for d in spec.effects.values())


def draws_keys(spec: Any) -> bool:
    """Whether some event of ``spec`` draws a fresh request key (``fresh_key``)."""
    return bool(spec.events_setting("fresh_key"))


def records_outcome(spec: Any) -> bool:
    """Whether some event of ``spec`` records readback's outcome in the row (``outcome``)."""
    return bool(spec.events_setting("outcome"))


def wake_events(spec: Any) -> tuple[str, ...]:
    """The events a client woken from a crash with its saved handle may take (``[world]
    wakes``): it begins its work again, so it takes an owner event that leaves the state a
    taker's event leads into, for another state (a keep-alive such as a lease renewal,
    which stays, is not how work begins). The claim's are ``begin_send`` and ``release``."""
    starts = {t.dest for t in spec.transitions if spec.role(t.event) == "taker"}
    found: list[str] = []
    for t in spec.transitions:
        if (
            t.source in starts
            and t.dest != t.source
            and spec.role(t.event) == "owner"
            and t.event not in found
        ):
            found.append(t.event)
    return tuple(found)


def step_events(spec: Any) -> frozenset[str]:
    """The owner events the fair step ``steps`` counts (a worker's step on the handle it
    holds, besides its request's send and answer): each but a keep-alive, an event every
    transition of which leads back to its source, as a lease renewal does. Both worlds read
    them so; on ``claim.toml`` they are ``begin_send``, ``timeout``, ``confirm`` and
    ``release``, whose role it declares (``by``), so ``release_by_target``, which drops
    release's owner guard, keeps it."""
    return frozenset(
        e
        for e in spec.events
        if spec.role(e) == "owner"
        and any(t.dest != t.source and not t.internal for t in spec.transitions if t.event == e)
    )


def crashless_wakes(spec: Any) -> str | None:
    """The problem with a world that declares ``wakes = true`` and ``crashes = false``
    (None: none), which both worlds refuse: a client wakes up only from a crash."""
    world = spec.world
    if "wakes" in spec.world_declared and world.get("wakes") and not world.get("crashes"):
        return (
            "[world] wakes = true needs crashes = true: a client wakes up from a crash;"
            " leave out wakes, or declare crashes = true"
        )
    return None


def lifecycle_facts(spec: Any) -> frozenset[str]:
    """The facts a lifecycle of your own may compare: :data:`LIFECYCLE_FACTS`, and
    :data:`REMOTE_FACTS` when it declares a remote."""
    return LIFECYCLE_FACTS | REMOTE_FACTS if has_remote(spec) else LIFECYCLE_FACTS


#: Columns every row has (a declared column may not take these names).
ROW_COLUMNS = frozenset(
    {"key", "state", "epoch", "token", "token_hash", "owner", "lease_deadline", "target"}
)


@dataclass(frozen=True, slots=True)
class ColumnDecl:
    name: str
    meaning: str
    default: int = 0


#: A name a declaration may give a column, a fact or a constant word.
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
Fail = Callable[[str], Exception]


def parse_columns(declared: Any, fail: Fail) -> dict[str, ColumnDecl]:
    found = {}
    tables = named_tables(declared, "columns", "column", COLUMN_KEYS, fail, word=WORD)
    for name, body, what in tables:
        if name in ROW_COLUMNS or name in COLUMNS:
            raise fail(f"{what}: the row already has a column of that name; choose another")
        if body.get("type", "int") != "int":
            raise fail(f'{what}: type must be "int" (counters are the columns supported)')
        default = body.get("default", 0)
        if isinstance(default, bool) or not isinstance(default, int) or not 0 <= default < 2**31:
            raise fail(f"{what}: default must be a whole number from 0, not {default!r}")
        found[name] = ColumnDecl(name, body["meaning"], default)
    return found


def check_column_compare(
    what: str, column: Any, op: Any, value: Any, columns: Mapping[str, Any], fail: Fail
) -> None:
    """``column op value`` (a compare guard without a fact, or a ``row`` invariant): the
    column is ``epoch`` or declared, the operator known, the value a whole number."""
    if not isinstance(column, str) or (column not in columns and column != "epoch"):
        raise fail(
            f"{what}: column {column!r} is not a column of the row; declare it under"
            f" [columns.NAME] or use one of {sorted(['epoch', *columns])}"
        )
    if not isinstance(op, str) or op not in OPERATORS:
        raise fail(f"{what}: op {op!r} is not an operator; use one of {list(OPERATORS)}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(f"{what}: value must be a whole number to compare with {column}, not {value!r}")


#: The guard kinds over a linked draft: the one a taker names, and the one its epoch pinned.
DRAFT_KINDS = ("draft_ready", "draft_pinned")


def drafts_problem(spec: Any) -> str | None:
    """What is wrong with the linked drafts of a lifecycle of your own (None: nothing, or
    none declared). ``[drafts]`` gives each entity drafts: a taker's event names one and
    the new epoch pins it (its version); a ``draft_ready`` guard reads the draft the taker
    names, a ``draft_pinned`` one the pinned draft as it is now, and a transition declared
    ``dispatches`` marks the pinned draft dispatched. Each of those needs ``[drafts]``."""
    if spec.drafts is None:
        for name, g in spec.guards.items():
            if g.kind in DRAFT_KINDS:
                return (
                    f"guard {name!r} is of kind {g.kind!r}, which reads an entity's linked"
                    " draft, and no [drafts] is declared: declare [drafts] (each entity's"
                    " drafts; docs/declarations.md), or compare a column of its own"
                )
        for t in spec.transitions:
            if t.dispatches:
                return (
                    f"transition {t.event} ({t.source} -> {t.dest}) dispatches the pinned"
                    " draft, and no [drafts] is declared: declare [drafts], or leave out"
                    " dispatches"
                )
        return None
    for t in spec.transitions:
        for g in t.guards:
            if spec.guards[g].kind == "draft_ready" and spec.role(t.event) != "taker":
                return (
                    f"transition {t.event} ({t.source} -> {t.dest}) reads {g!r}, of kind"
                    " 'draft_ready', the draft a taker names; it is the"
                    f" {spec.role(t.event)}'s event: read the pinned draft with a guard of"
                    " kind 'draft_pinned', or give the event to a taker (by = \"taker\")"
                )
    if not spec.events_by("taker"):
        return "[drafts] is declared, and no taker's event pins a draft: leave out [drafts]"
    return None


def a_lifecycle_of_its_own(spec: Any) -> bool:
    """Whether the lifecycle's consumers (its world, its store) run ``spec`` by default,
    rather than the claim protocol's: nothing in it is the claim world's alone
    (:func:`lifecycle_problem`), and its initial state is not a ``pseudo`` one, the
    claim's epoch shape, which is tried for the claim's steps first. The one rule the
    loader's routing (``runs_on_the_claim_model``) and the claim's consumers
    (``require_claim_world``) read."""
    initial = getattr(spec, "states", {}).get(getattr(spec, "initial", None))
    return lifecycle_problem(spec) is None and not bool(getattr(initial, "pseudo", False))


def lifecycle_problem(spec: Any) -> str | None:
    """What in ``spec`` only the claim protocol's world has, which neither the checker's
    model of a lifecycle of your own nor its store can read (None: nothing): linked drafts
    that cannot be read (:func:`drafts_problem`), a guard over a fact its world has not
    (the remote's, without a remote;
    readback of a run at an executor, ``running`` or ``ran``, with one),
    over the claim row's own columns, an event that records readback's outcome or draws a
    fresh idempotency key without a remote, or a remote it cannot run
    (:func:`remote_problem`)."""
    facts = lifecycle_facts(spec)
    problem = drafts_problem(spec)
    if problem is not None:
        return problem
    for name, g in spec.guards.items():
        if g.kind == "compare" and g.fact is not None and g.fact not in facts:
            return (  # the loader knows every fact: this one is the remote's
                f"guard {name!r} reads the fact {g.fact!r}, the remote's evidence, and no"
                " event declares a remote: give the events on the remote their roles"
                ' (remote = "answered" or "unanswered" under [events.NAME])'
            )
        if g.kind == "compare" and g.column not in (None, "epoch", *spec.columns):
            return (
                f"guard {name!r} reads the column {g.column!r}, which only the claim row has;"
                " compare epoch or a column declared under [columns]"
            )
        if g.kind == "compare" and g.fact in FACT_WORDS and g.value not in FACT_WORDS[g.fact]:
            return (
                f"guard {name!r} compares the fact {g.fact!r} with {g.value!r}; it is one of"
                f" {list(FACT_WORDS[g.fact])}"
            )
    for event, decl in spec.effects.items():
        if "outcome" in decl.sets and not has_remote(spec):
            return (
                f"event {event!r} sets outcome, readback's word on a request to the remote,"
                " and no event declares a remote: give the events on the remote their roles"
                ' (remote = "answered" or "unanswered" under [events.NAME]), or leave'
                " outcome out (history records the facts a caller brings)"
            )
        if "fresh_key" in decl.sets and not has_remote(spec):
            return (
                f"event {event!r} sets fresh_key, a new idempotency key for the requests"
                " sent to the remote, and no event declares a remote: give the events on"
                ' the remote their roles (remote = "answered" or "unanswered" under'
                " [events.NAME]), or leave fresh_key out"
            )
    return inert_frees_target(spec) or remote_problem(spec) or executor_readback(spec)


def executor_readback(spec: Any) -> str | None:
    """A guard reading readback of a run at an executor (``running``, ``ran``) where the
    work is a request to a remote (None: none): the request may still be on its way where
    no readback sees it, so no answer would be honest. Judged once the remote's roles
    are, so that a remote that cannot run is named first."""
    if not has_remote(spec):
        return None
    for name, g in spec.guards.items():
        if g.kind == "compare" and g.fact in EXECUTOR_FACTS:
            return (
                f"guard {name!r} reads the fact {g.fact!r}, readback of a run at an executor;"
                " with a remote the work is a request, which may still be on its way where"
                " no readback sees it: compare 'outcome' (a request with the entity's key"
                " took effect) and 'fenced_through' (nothing at or below the epoch can)"
            )
    return None


def inert_frees_target(spec: Any) -> str | None:
    """A state flagged ``frees_target`` that no transition with a ``free`` guard leaves
    (None: none). The claim protocol's world begins the next epoch from any such state by
    its acquire out of the initial state; a lifecycle of your own keeps one row per entity
    and begins it by a transition out of the state itself (or, where the initial state is
    declared ``pseudo``, by a taker's out of the initial state, from any state), so there
    the flag would mean nothing: the key could never be taken from it."""
    if spec.states[spec.initial].pseudo:
        return None  # a taker out of the initial state takes the entity from any state
    free = set(spec.guards_of_kind("free"))
    for name, state in spec.states.items():
        if not state.frees_target or name == spec.initial:
            continue
        if any(t.source == name and free & set(t.guards) for t in spec.transitions):
            continue
        takers = sorted(spec.events_by("taker"))
        leave = f"one of {takers}" if takers else "a taker's event"
        return (
            f"state {name!r} is flagged frees_target, and no transition with a free guard"
            f" leaves it: a lifecycle of your own begins the next epoch by a transition out"
            f" of the state itself (the claim's world alone begins it from the initial"
            f" state), so declare {leave} from {name!r} with a free guard, declare the"
            f" initial state {spec.initial!r} pseudo = true (its takers then take the entity"
            " from any state), or leave the flag out"
        )
    return None


def remote_problem(spec: Any) -> str | None:
    """What keeps the remote of a lifecycle of your own from running (None: nothing, or no
    remote). An owner sends one request once the event marked ``work = "starts"`` let it
    (the work), and stops waiting by an event of role ``unanswered``; an ``answered``
    event needs the remote's answer first. An event with either role ends the work, and
    every event that ends the work names which it is. A ``resends`` event is the
    operator's: an idle worker takes the current epoch over with a fresh token and sends
    the request again, with the entity's request key (the claim's retry; a new one where the
    event declares ``fresh_key``)."""
    roles = {e: d.remote for e, d in spec.effects.items() if d.remote is not None}
    if not roles:
        return None
    resends = sorted(e for e, r in roles.items() if r == "resends")
    owners = {t.source for t in spec.transitions if spec.role(t.event) == "owner"}
    for e in resends:
        if spec.role(e) != "operator":
            return (
                f'event {e!r} declares remote = "resends" and is the {spec.role(e)}\'s: a'
                " resend names the current epoch, which an idle worker takes over; declare"
                ' by = "operator"'
            )
        if "fresh_token" not in spec.effects[e].sets or spec.work(e) is not None:
            return (
                f"event {e!r} resends: it sets fresh_token (the resender holds the epoch with"
                " a token of its own; the one it replaces is stale) and declares no work (it"
                " starts the sending itself)"
            )
        stuck = sorted({t.dest for t in spec.transitions if t.event == e} - owners)
        if stuck:
            return (
                f"event {e!r} resends into {stuck}, where the owner has no event: lead it"
                " where the resender can hear the answer or stop waiting"
            )
    not_owner = sorted(e for e, r in roles.items() if r != "resends" and spec.role(e) != "owner")
    if not_owner:
        return (
            f"events {not_owner} declare a remote role but are not the owner's: only the"
            ' client that sent the request hears its answer; declare by = "owner"'
        )
    starts = [e for e in spec.events if spec.work(e) == "starts"]
    both = sorted(e for e in starts if e in roles)
    if both:
        return (
            f"events {both} start the work and declare a remote role: the work starts before"
            " the request is sent, and an event with a role ends it; give them apart"
        )
    if not starts:
        return (
            "events declare remote roles, but no event starts the work: mark the event after"
            ' which the owner may send its request with work = "starts"'
        )
    if "answered" not in roles.values():
        return (
            'no event declares remote = "answered": name the event the owner takes once the'
            " remote has answered its request"
        )
    silent = sorted(e for e in spec.events if spec.work(e) == "ends" and e not in roles)
    if silent:
        return (
            f"events {silent} end the work but declare no remote role: say whether the owner"
            ' takes each once the remote answered (remote = "answered") or when it stops'
            ' waiting (remote = "unanswered")'
        )
    return None


def parse_world(declared: Any, fail: Fail) -> dict[str, int | bool | str]:
    if not isinstance(declared, dict):
        raise fail("world must be a table: [world] with " + ", ".join(WORLD_OPTIONS))
    only_keys(declared, set(WORLD_OPTIONS), "[world]", fail)
    world: dict[str, int | bool | str] = {}
    for name, (default, low, high, _meaning) in WORLD_OPTIONS.items():
        value = declared.get(name, default)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise fail(f"[world]: {name} must be true or false, not {value!r}")
        elif isinstance(default, str):
            words = WORLD_WORDS[name]
            if value not in words:
                raise fail(f"[world]: {name} must be one of {list(words)}, not {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise fail(
                f"[world]: {name} must be a whole number from {low} to {high}, not {value!r}"
            )
        world[name] = value
    return world


def named_tables(
    declared: Any,
    section: str,
    noun: str,
    keys: set[str],
    fail: Fail,
    *,
    says: str = "a 'meaning'",
    meaning: bool = True,
    word: re.Pattern[str] | None = None,
) -> Iterator[tuple[str, dict[str, Any], str]]:
    """The tables ``[section.NAME]`` of a declaration, each as (NAME, its table, how an
    error names it), once checked: a table of tables, no key outside ``keys``, NAME a
    ``word`` (where given) and a one-line ``meaning`` (where needed)."""
    if not isinstance(declared, dict):
        raise fail(f"{section} must be tables: [{section}.NAME] with {says}")
    for name, body in declared.items():
        what = f"{noun} {name!r}"
        only_keys(body, keys, what, fail)
        if word is not None and not word.fullmatch(name):
            raise fail(f"{what}: a {noun}'s name is a word (letters, digits, _)")
        if meaning and (not isinstance(body.get("meaning"), str) or not body["meaning"]):
            raise fail(f"{what} needs a one-line 'meaning'")
        yield name, body, what


def only_keys(body: Any, allowed: set[str], what: str, fail: Fail) -> None:
    """``body`` is a table with no key outside ``allowed``, or ``fail`` says which."""
    if not isinstance(body, dict):
        raise fail(f"{what} must be a table")
    unknown = set(body) - allowed
    if unknown:
        raise fail(f"{what}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")


def event_rows(spec: Any) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The events table that ``claimfsm spec`` prints and the report shows: its columns
    (``remote`` only where some event has a remote role) and one row per event: who takes
    it, its work, its remote role, and what it writes (the event it applies first, the
    columns it sets, the counters it bumps, and whether its commit must be durable)."""
    remote = has_remote(spec)
    durable = spec.durable_events()
    rows = []
    for event in spec.events:
        decl = spec.effects.get(event)
        writes = [] if decl is None else [*decl.sets, *(f"{c} + 1" for c in decl.bumps)]
        if spec.first(event):
            writes.insert(0, f"{spec.first(event)} first")
        said = ", ".join(writes)
        if event in durable:
            said = f"{said} (durable)".lstrip()
        role = (spec.remote_role(event) or "-",) if remote else ()
        rows.append((event, spec.role(event), spec.work(event) or "-", *role, said or "-"))
    return ("event", "by", "work", *(("remote",) if remote else ()), "writes"), rows
