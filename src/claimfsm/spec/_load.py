"""Load and validate a declaration file (TOML, read with the standard library)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from claimfsm.errors import REFUSALS, SpecError
from claimfsm.spec._declaration import (
    DraftsDecl,
    EventDecl,
    GuardDecl,
    Spec,
    StateDecl,
    TransitionDecl,
)
from claimfsm.spec._effects import EFFECTS
from claimfsm.spec._guards import COLUMNS, FACTS, GUARD_KINDS, OPERATORS
from claimfsm.spec._invariants import parse_invariants
from claimfsm.spec._roles import (
    REMOTE_ROLES,
    ROLES,
    WORD,
    WORK,
    check_column_compare,
    named_tables,
    only_keys,
    parse_columns,
    parse_world,
)

_STATE_KEYS = {"meaning", "terminal", "frees_target", "lease", "stale", "pseudo"}
_GUARD_KEYS = {"meaning", "kind", "refusal", "stale", "hint", "fact", "op", "column", "value"}
_TRANSITION_KEYS = {"event", "source", "dest", "guards", "internal", "dispatches"}
_TOP_KEYS = {
    "name",
    "initial",
    "states",
    "guards",
    "events",
    "transitions",
    "description",
    "columns",
    "invariants",
    "world",
    "drafts",
    "lease",
}
_DRAFTS_KEYS = {"one_live_per_target"}
_LEASE_KEYS = {"kept"}
_EVENT_KEYS = {"sets", "durable", "by", "bumps", "work", "first", "remote"}
_OVERLAY_KEYS = {
    "base",
    "name",
    "description",
    "replace",
    "drop_guard",
    "drop",
    "add",
    "events",
    "drafts",
}
#: What each option of the retired ``[model]`` table of a variant is declared as now.
RETIRED_MODEL_OPTIONS = {
    "send_before_intent": 'work = "starts" on the event after which workers may send, under'
    " [events.NAME], and off the event that had it (specs/wrong/intent_after_send.toml)",
    "one_live_draft_per_target": "[drafts] one_live_per_target = true"
    " (specs/wrong/partial_unique_index.toml)",
    "retry_with_fresh_key": '"fresh_key" in the sets of [events.retry]'
    " (specs/wrong/fresh_key_retry.toml)",
}


def declarations_dir() -> Path:
    """The folder of shipped declarations (``specs/`` in the repository)."""
    return Path(str(resources.files("claimfsm.spec") / "declarations"))


def available() -> tuple[str, ...]:
    """Names of the shipped declarations."""
    return tuple(sorted(p.stem for p in declarations_dir().glob("*.toml")))


@cache
def claim_spec() -> Spec:
    """The claim protocol's declaration, loaded once per process."""
    return load_spec(declarations_dir() / "claim.toml")


def load_spec(path: str | Path) -> Spec:
    """Read and validate one declaration; a malformed one raises :class:`SpecError`.

    A file with ``base = "other.toml"`` is a variant: the base declaration with the changes
    it lists (``replace``, ``drop_guard``, ``drop``, ``add``, ``[events.NAME]``, ``[drafts]``).
    """
    path = Path(path)
    raw = _read(path)
    if "base" in raw:
        return _overlay(raw, path)
    try:
        return parse_spec(raw, path=path)
    except SpecError as exc:
        raise SpecError(_with_line(str(exc), path)) from None


def _with_line(message: str, path: Path) -> str:
    """``path: what`` -> ``path:LINE: what`` where the table the message names is found."""
    prefix = f"{path}: "
    if not message.startswith(prefix):
        return message
    what = message[len(prefix) :]
    header = None
    if m := re.match(r"transition #(\d+)", what):
        header, nth = "[[transitions]]", int(m.group(1))
    elif m := re.match(r"(state|guard|event|column|invariant) '([^']*)'", what):
        header, nth = f"[{m.group(1)}s.{m.group(2)}]", 1
    if header is None:
        return message
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return message
    seen = 0
    for number, line in enumerate(lines, start=1):
        if line.strip().replace(" ", "") == header:
            seen += 1
            if seen == nth:
                return f"{path}:{number}: {what}"
    return message


def designs() -> dict[str, Spec]:
    """The known-wrong designs under ``specs/wrong/``, by name."""
    found = {}
    for p in sorted((declarations_dir() / "wrong").glob("*.toml")):
        spec = load_spec(p)
        found[spec.name] = spec
    return found


def wrong_designs() -> dict[str, Spec]:
    """Every shipped known-wrong design, by name: the claim protocol's (``specs/wrong/``)
    and another lifecycle's (``specs/wrong/LIFECYCLE/``, each named ``LIFECYCLE-what``)."""
    found = designs()
    for p in sorted((declarations_dir() / "wrong").glob("*/*.toml")):
        spec = load_spec(p)
        found[spec.name] = spec
    return found


def shipped() -> dict[str, Spec]:
    """Every shipped declaration by name: the lifecycles in ``specs/``, then the
    known-wrong designs (:func:`wrong_designs`)."""
    found = {name: load_spec(declarations_dir() / f"{name}.toml") for name in available()}
    found["claim"] = claim_spec()
    return {**dict(sorted(found.items(), key=lambda kv: kv[0] != "claim")), **wrong_designs()}


def base_of(spec: Spec) -> Spec | None:
    """The declaration a variant overlays (None for a declaration that is not a variant)."""
    if spec.base is None:
        return None
    if spec.path is None:
        raise SpecError(f"{spec.name}: a variant read without its path cannot find its base")
    return load_spec((spec.path.parent / spec.base).resolve())


def is_lifecycle_of_its_own(spec: Spec) -> bool:
    """Whether ``spec`` is not the claim protocol or a variant of it, by its names or by
    its shape (:func:`runs_on_the_claim_model`): the checker runs it on the model of any
    declared lifecycle and the entity store stores it."""
    return not runs_on_the_claim_model(spec)


def runs_on_the_claim_model(spec: Spec) -> bool:
    """Whether ``spec`` is the claim protocol or a variant of it: the claim's names, or the
    claim's world (drafts, the remote's evidence) and the claim's shape under other names
    (``claim_steps`` finds every step). The checker's claim model, the claim machine and
    the claim stores run such a declaration, whatever its names."""
    from claimfsm.errors import SpecError
    from claimfsm.spec._roles import a_lifecycle_of_its_own
    from claimfsm.spec._vocabulary import Event, State, claim_steps

    if set(spec.states) == {s.value for s in State} and set(spec.events) == {
        e.value for e in Event
    }:
        return True
    if a_lifecycle_of_its_own(spec):
        return False
    try:
        claim_steps(spec)
    except SpecError:
        return False
    return True


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the declaration: {exc}") from exc


def _overlay(raw: dict[str, Any], path: Path) -> Spec:
    def fail(msg: str) -> SpecError:
        return SpecError(f"{path}: {msg}")

    if "model" in raw:
        options = raw["model"] if isinstance(raw["model"], dict) else {}
        said = [f"{o} is {RETIRED_MODEL_OPTIONS[o]}" for o in options if o in RETIRED_MODEL_OPTIONS]
        raise fail(
            "[model] options are declared now"
            + (": " + "; ".join(said) if said else "")
            + "; see the variants section of docs/declarations.md"
        )
    only_keys(raw, _OVERLAY_KEYS, "a variant", fail)
    if not isinstance(raw.get("description"), str) or not raw["description"]:
        raise fail("a variant needs a one-line 'description' of how it differs")
    if not isinstance(raw["base"], str) or not raw["base"]:
        raise fail("base must be the path of the declaration it varies, like '../claim.toml'")
    shapes = {
        "replace": ("event", "source"),
        "drop_guard": ("event", "guard"),
        "drop": ("event", "source"),
        "add": (),
    }
    for key, needed in shapes.items():
        changes = raw.get(key, [])
        if not isinstance(changes, list) or not all(isinstance(c, dict) for c in changes):
            raise fail(f"{key} must be an array of tables: [[{key}]]")
        for c in changes:
            missing = [k for k in needed if not isinstance(c.get(k), str)]
            if missing:
                raise fail(f"[[{key}]] needs {' and '.join(repr(k) for k in missing)}")
    base_path = (path.parent / raw["base"]).resolve()
    if base_path == path.resolve():
        raise fail("a variant cannot be its own base")
    base = _read(base_path)
    if not isinstance(base.get("transitions"), list) or not all(
        isinstance(t, dict) and "event" in t for t in base["transitions"]
    ):
        raise fail(f"its base {raw['base']} has no valid [[transitions]]")
    transitions = [dict(t) for t in base["transitions"]]
    for change in raw.get("replace", []):
        hits = [
            t
            for t in transitions
            if (t["event"], t["source"]) == (change["event"], change["source"])
        ]
        if len(hits) != 1:
            raise fail(f"replace: no single {change['event']} transition from {change['source']}")
        hits[0].update({k: v for k, v in change.items() if k in ("dest", "guards")})
    for change in raw.get("drop", []):
        hits = [
            t
            for t in transitions
            if (t["event"], t["source"]) == (change["event"], change["source"])
            and ("guards" not in change or t.get("guards", []) == change["guards"])
        ]
        if len(hits) != 1:
            raise fail(
                f"drop: no single {change['event']} transition from {change['source']}"
                + ("" if "guards" in change else "; name its guards to pick one")
            )
        transitions.remove(hits[0])
    for change in raw.get("drop_guard", []):
        hits = [
            t
            for t in transitions
            if t["event"] == change["event"] and change["guard"] in t.get("guards", [])
        ]
        if not hits:
            raise fail(f"drop_guard: no {change['event']} transition has guard {change['guard']}")
        for t in hits:
            t["guards"] = [g for g in t["guards"] if g != change["guard"]]
    transitions += [dict(t) for t in raw.get("add", [])]
    events = raw.get("events", {})
    if not isinstance(events, dict) or not all(isinstance(v, dict) for v in events.values()):
        raise fail("events must be tables: [events.NAME], each replacing the base's table")
    merged = dict(base, transitions=transitions, name=raw.get("name", path.stem))
    if events:
        merged["events"] = {**base.get("events", {}), **events}
    if "drafts" in raw:
        if not isinstance(raw["drafts"], dict):
            raise fail("drafts must be a table: [drafts], replacing the base's")
        merged["drafts"] = {**base.get("drafts", {}), **raw["drafts"]}
    merged["description"] = raw["description"]
    spec = parse_spec(merged, path=path)
    return replace(spec, base=str(raw["base"]))


def parse_spec(raw: dict[str, Any], *, path: Path | None = None) -> Spec:
    where = str(path) if path else "<declaration>"

    def fail(msg: str) -> SpecError:
        return SpecError(f"{where}: {msg}")

    only_keys(raw, _TOP_KEYS, "the top level", fail)
    for key in ("name", "initial", "states", "transitions"):
        if key not in raw:
            raise fail(f"missing {key!r}")
    name = raw["name"]
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise fail(
            f"name must be a word of letters, digits, '_' or '-' (it names the diagram"
            f" files), not {name!r}"
        )
    if not isinstance(raw.get("description", ""), str):
        raise fail("description must be a string (one line)")
    if not raw["states"]:
        raise fail("states must be tables: [states.NAME] with a 'meaning'")
    if not isinstance(raw["transitions"], list):
        raise fail("transitions must be an array of tables: [[transitions]]")

    states: dict[str, StateDecl] = {}
    for state, body, what in named_tables(raw["states"], "states", "state", _STATE_KEYS, fail):
        if not state.isidentifier():
            raise fail(f"state name {state!r} must be an identifier (letters, digits, _)")
        _flags(body, _STATE_KEYS - {"meaning"}, what, fail)
        states[state] = StateDecl(name=state, **body)

    columns = parse_columns(raw.get("columns", {}), fail)
    guards: dict[str, GuardDecl] = {}
    declared_guards = raw.get("guards", {})
    for guard, body, _ in named_tables(declared_guards, "guards", "guard", _GUARD_KEYS, fail):
        _flags(body, {"stale"}, f"guard {guard!r}", fail)
        refusal = body.get("refusal")
        if refusal is not None and (not isinstance(refusal, str) or refusal not in REFUSALS):
            raise fail(
                f"guard {guard!r}: unknown refusal {refusal!r}; use one of {sorted(REFUSALS)}"
            )
        if not isinstance(body.get("hint", ""), str):
            raise fail(f"guard {guard!r}: hint must be a string (one line)")
        _guard_kind(guard, body, columns, fail)
        guards[guard] = GuardDecl(name=guard, **body)

    initial = raw["initial"]
    if not isinstance(initial, str) or initial not in states:
        raise fail(f"initial state {initial!r} is not declared")

    transitions: list[TransitionDecl] = []
    numbers: list[int] = []  # the [[transitions]] entry each came from (for messages)
    for i, body in enumerate(raw["transitions"], start=1):
        event = body.get("event", "?") if isinstance(body, dict) else "?"
        label = f"transition #{i} ({event})"
        only_keys(body, _TRANSITION_KEYS, label, fail)
        event, source = body.get("event"), body.get("source")
        _flags(body, {"internal", "dispatches"}, label, fail)
        internal = body.get("internal", False)
        if not isinstance(event, str) or not event.isidentifier():
            raise fail(f"{label}: 'event' must be an identifier")
        if event == "checkpoint":
            raise fail(
                f"{label}: 'checkpoint' is what history calls the entry pruning leaves where"
                " it removed older entries; give the event another name"
            )
        if internal == ("dest" in body):
            raise fail(f"{label}: give either 'dest' or 'internal = true'")
        names = body.get("guards", [])
        if not isinstance(names, list) or not all(isinstance(g, str) for g in names):
            raise fail(f"{label}: 'guards' must be a list of guard names")
        for g in names:
            if g not in guards:
                raise fail(f"{label}: guard {g!r} is not declared under [guards]")
        if not isinstance(source, str):
            raise fail(f"{label}: 'source' must be a state name, or \"*\" for every state")
        sources = list(states) if source == "*" else [source]
        for src in sources:
            if src not in states:
                raise fail(f"{label}: source {src!r} is not a declared state")
            dest = src if internal else body["dest"]
            if not isinstance(dest, str) or dest not in states:
                raise fail(f"{label}: dest {dest!r} is not a declared state")
            dispatches = bool(body.get("dispatches", False))
            if dispatches and internal:
                raise fail(f"{label}: an internal transition cannot dispatch (it enters no state)")
            transitions.append(TransitionDecl(event, src, dest, tuple(names), internal, dispatches))
            numbers.append(i)
    _reachable(initial, states, transitions, fail)
    effects = _events(raw.get("events", {}), {t.event for t in transitions}, columns, fail)
    starts = any(e.work == "starts" for e in effects.values())
    invariants = parse_invariants(
        raw.get("invariants", {}),
        states,
        columns,
        starts,
        fail,
        events=frozenset(t.event for t in transitions),
        fenceable=any(g.fact == "fenced_through" for g in guards.values()),
    )
    world = parse_world(raw.get("world", {}), fail)
    world_declared = frozenset(raw.get("world", {}))
    drafts = _drafts(raw["drafts"], fail) if "drafts" in raw else None
    lease_kept = _lease(raw["lease"], fail) if "lease" in raw else False

    spec = Spec(
        name=name,
        initial=initial,
        states=states,
        guards=guards,
        transitions=tuple(transitions),
        path=path,
        description=str(raw.get("description", "")),
        effects=effects,
        columns=columns,
        invariants=invariants,
        world=world,
        world_declared=world_declared,
        drafts=drafts,
        lease_kept=lease_kept,
    )
    _terminal_left_by_no_owner(spec, numbers, fail)
    _first_is_the_sweeps(spec, fail)
    _pseudo_is_the_initial_takers(spec, fail)
    _refusal_is_a_record(spec, fail)
    _work_starts_durably(spec, fail)
    _kept_lease_unread(spec, numbers, fail)
    return spec


def _work_starts_durably(spec: Spec, fail: Any) -> None:
    """An event after which external work may begin at once (``work = "starts"``, or a
    resend, ``remote = "resends"``) is committed durably: a commit lost to power loss
    after the work began would leave the row saying no work started while it ran."""
    for event, decl in spec.effects.items():
        starts = 'work = "starts"' if decl.work == "starts" else None
        if decl.remote == "resends":
            starts = 'remote = "resends"'
        if starts and not decl.durable:
            raise fail(
                f"event {event!r} declares {starts}: external work may begin as soon as it"
                " commits, so its commit must survive power loss; add durable = true under"
                f" [events.{event}]"
            )


def _refusal_is_a_record(spec: Spec, fail: Any) -> None:
    """An event ``by = "refusal"`` is the record of a stale owner's refused operation: no
    one takes it, so no guard can fail it, and it writes nothing."""
    for event, decl in spec.effects.items():
        if decl.by != "refusal":
            continue
        guarded = sorted({g for t in spec.transitions if t.event == event for g in t.guards})
        if guarded:
            raise fail(
                f'event {event!r} is by = "refusal", the record of a stale owner\'s refused'
                f" operation, which is always made, and its transitions name guards"
                f" {guarded}: drop them"
            )
        writes = [
            key
            for key, value in (
                ("sets", decl.sets),
                ("bumps", decl.bumps),
                ("work", decl.work),
                ("remote", decl.remote),
                ("first", decl.first),
                ("durable", decl.durable),
            )
            if value
        ]
        if writes:
            raise fail(
                f'event {event!r} is by = "refusal", a record that changes no row, and'
                f" declares {writes}: drop them"
            )


def _pseudo_is_the_initial_takers(spec: Spec, fail: Any) -> None:
    """``pseudo`` marks the state before an epoch exists: only the initial state may be
    it, no transition enters it, and only takers' transitions leave it (each begins the
    next epoch from whatever state the entity is in: ``Spec.lifecycle_view``)."""
    for name, state in spec.states.items():
        if not state.pseudo:
            continue
        if name != spec.initial:
            raise fail(
                f"state {name!r} is declared pseudo, and only the initial state"
                f" ({spec.initial!r}) can be the state before an epoch exists: drop pseudo"
                f" = true from {name!r}"
            )
        entering = sorted({t.event for t in spec.transitions if t.dest == name and not t.internal})
        if entering:
            raise fail(
                f"state {name!r} is declared pseudo (before an epoch exists), and {entering}"
                " lead into it: no epoch goes back to before it existed; lead them into a"
                " state of its own, or drop pseudo = true"
            )
        leaving = sorted(
            {
                t.event
                for t in spec.transitions
                if t.source == name and not t.internal and spec.role(t.event) != "taker"
            }
        )
        if leaving:
            raise fail(
                f"state {name!r} is declared pseudo (before an epoch exists), and {leaving}"
                ' leave it without beginning an epoch: declare them by = "taker" (or give'
                " them a free guard), or drop pseudo = true"
            )


def _first_is_the_sweeps(spec: Spec, fail: Any) -> None:
    """``first`` on an event names another event, the sweep's, leaving only states that keep
    the key busy and that the event does not leave. It is applied where the event is refused
    as the row is, and the event tried once more (the claim's acquire, refused on a busy
    target, lapses a lapsed lease, then takes the target)."""
    for event, decl in spec.effects.items():
        first = decl.first
        if first is None:
            continue
        what = f"event {event!r}: first {first!r}"
        if first == event:
            raise fail(f"{what}: an event cannot be applied before itself")
        if spec.role(first) != "sweep":
            raise fail(
                f'{what}: the event applied first must be the sweep\'s (by = "sweep", or a'
                f" guard of kind lapsed), and {first!r} is the {spec.role(first)}'s"
            )
        freeing = sorted(
            {
                t.source
                for t in spec.transitions
                if t.event == first
                and (t.source == spec.initial or spec.states[t.source].frees_target)
            }
        )
        if freeing:
            raise fail(
                f"{what}: {first!r} leaves {freeing}, where the key is already free; the event"
                " applied first may only leave states that keep the key busy"
            )
        # From a state the event itself leaves, the first event could only take the key
        # somewhere the event no longer fires from: a first event there is a mistake.
        shared = sorted(
            {t.source for t in spec.transitions if t.event == first}
            & {t.source for t in spec.transitions if t.event == event}
        )
        if shared:
            raise fail(
                f"{what}: {event!r} and {first!r} both leave {shared}; the event applied first"
                f" may only leave states that {event!r} itself does not leave"
            )


def _terminal_left_by_no_owner(spec: Spec, numbers: list[int], fail: Any) -> None:
    """A ``terminal`` state is one no owner operation leaves: a transition of an owner's
    event out of one is a contradiction (the sweep's or the operator's may, as the claim's
    discard leaves ``expired``)."""
    for n, t in zip(numbers, spec.transitions, strict=True):
        if t.internal or t.source == t.dest or not spec.states[t.source].terminal:
            continue
        if spec.role(t.event) == "owner":
            raise fail(
                f"transition #{n} ({t.event}): an owner's event leaves {t.source!r}, which is"
                " terminal (no owner operation leaves it): drop terminal = true from"
                f" {t.source!r}, or give {t.event!r} to the operator or the sweep (by)"
            )


def _lease(body: Any, fail: Any) -> bool:
    """``[lease]``: what the row does with its lease deadline; one flag, ``kept``."""
    if not isinstance(body, dict):
        raise fail("lease must be a table: [lease], with kept = true or false")
    only_keys(body, _LEASE_KEYS, "[lease]", fail)
    _flags(body, _LEASE_KEYS, "[lease]", fail)
    return bool(body.get("kept", False))


def _kept_lease_unread(spec: Spec, numbers: list[int], fail: Any) -> None:
    """A deadline kept outside the lease states is not governed there (lease expiry acts on
    lease states only, in the stores' sweep and the checker's clock alike), so no guard may
    read it there: a ``live`` or ``lapsed`` guard out of such a state would read a deadline
    the checker never lets lapse."""
    if not spec.lease_kept:
        return
    reads = {*spec.guards_of_kind("live"), *spec.guards_of_kind("lapsed")}
    for n, t in zip(numbers, spec.transitions, strict=True):
        # a pseudo initial state's taker leaves every state (``Spec.lifecycle_view``)
        sources = list(spec.states) if spec.states[t.source].pseudo else [t.source]
        ungoverned = [s for s in sources if not spec.states[s].lease]
        read = [g for g in t.guards if g in reads]
        if ungoverned and read:
            raise fail(
                f"transition #{n} ({t.event}): guard {read[0]!r} reads the lease out of"
                f" {ungoverned[0]!r}, which is not a lease state; with [lease] kept = true the"
                " deadline kept there is never lapsed by lease expiry, so a guard may read the"
                f" lease only out of lease states: declare lease = true on {ungoverned[0]!r},"
                " or drop kept"
            )


def _drafts(body: Any, fail: Any) -> DraftsDecl:
    """``[drafts]``: the claim protocol's drafts; one flag, ``one_live_per_target``."""
    only_keys(body, _DRAFTS_KEYS, "[drafts]", fail)
    _flags(body, _DRAFTS_KEYS, "[drafts]", fail)
    return DraftsDecl(**body)


_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


def _guard_kind(guard: str, body: dict[str, Any], columns: dict[str, Any], fail: Any) -> None:
    """The guard's ``kind`` is known, and a ``compare`` reads a known fact and a known
    column (or a constant of the fact's type), or a declared column and a whole number;
    other kinds take none of those keys."""
    what = f"guard {guard!r}"
    kind = body.get("kind")
    if not isinstance(kind, str) or kind not in GUARD_KINDS:
        raise fail(
            f"{what}: unknown guard kind {kind!r}; use one of {sorted(GUARD_KINDS)}"
            " (docs/declarations.md says what each checks)"
        )
    operands = {"fact", "op", "column", "value"} & set(body)
    if kind != "compare":
        if operands:
            raise fail(f"{what}: {sorted(operands)} belong to kind 'compare' only")
        return
    fact, op = body.get("fact"), body.get("op")
    if fact is None and "column" in body and "value" in body:
        check_column_compare(what, body["column"], op, body["value"], columns, fail)
        return
    if not isinstance(fact, str) or fact not in FACTS:
        raise fail(
            f"{what}: fact {fact!r} is not a fact a caller brings; use one of {sorted(FACTS)}"
        )
    if not isinstance(op, str) or op not in OPERATORS:
        raise fail(f"{what}: op {op!r} is not an operator; use one of {list(OPERATORS)}")
    if ("column" in body) == ("value" in body):
        raise fail(f"{what}: compare the fact with either a 'column' of the row or a 'value'")
    if "column" in body:
        column = body["column"]
        if not isinstance(column, str) or (column not in COLUMNS and column not in columns):
            raise fail(
                f"{what}: column {column!r} is not a declared column of the row; "
                f"use one of {sorted([*COLUMNS, *columns])}"
            )
        return
    value, types = body["value"], FACTS[fact]
    if isinstance(value, bool) != (bool in types) or not isinstance(value, types):
        raise fail(
            f"{what}: value {value!r} cannot be compared with {fact}, which is "
            + " or ".join(t.__name__ for t in types)
        )
    if isinstance(value, str) and not WORD.fullmatch(value):
        raise fail(f"{what}: a text value must be a word (letters, digits, _), not {value!r}")


def _events(
    declared: Any, events: set[str], columns: dict[str, Any], fail: Any
) -> dict[str, EventDecl]:
    """``[events.NAME]``: what a declared event writes besides the state, who takes it,
    and what it does to the owner's work."""
    found = {}
    tables = named_tables(
        declared,
        "events",
        "event",
        _EVENT_KEYS,
        fail,
        says="'sets', 'durable', 'by', ...",
        meaning=False,
    )
    for event, body, what in tables:
        if event not in events:
            raise fail(f"{what} has no transition; declare [events.NAME] for an event that fires")
        _flags(body, {"durable"}, what, fail)
        sets = body.get("sets", [])
        if not isinstance(sets, list) or not all(isinstance(e, str) for e in sets):
            raise fail(f"{what}: sets must be a list of effect names")
        unknown = [e for e in sets if e not in EFFECTS]
        if unknown or len(set(sets)) != len(sets):
            raise fail(f"{what}: sets {sets!r} must name each effect once, from {sorted(EFFECTS)}")
        by, work = body.get("by"), body.get("work")
        if by is not None and (not isinstance(by, str) or by not in ROLES):
            raise fail(f"{what}: by {by!r} is not a role; use one of {sorted(ROLES)}")
        if work is not None and (not isinstance(work, str) or work not in WORK):
            raise fail(f"{what}: work {work!r} must be one of {sorted(WORK)}")
        remote = body.get("remote")
        if remote is not None and (not isinstance(remote, str) or remote not in REMOTE_ROLES):
            raise fail(f"{what}: remote {remote!r} must be one of {list(REMOTE_ROLES)}")
        bumps = body.get("bumps", [])
        if not isinstance(bumps, list) or not all(isinstance(c, str) for c in bumps):
            raise fail(f"{what}: bumps must be a list of column names")
        undeclared = [c for c in bumps if c not in columns]
        if undeclared or len(set(bumps)) != len(bumps):
            raise fail(
                f"{what}: bumps {bumps!r} must name each column once, from the ones declared"
                f" under [columns.NAME] ({sorted(columns) or 'none'})"
            )
        first = body.get("first")
        if first is not None and (not isinstance(first, str) or first not in events):
            raise fail(f"{what}: first {first!r} must name an event some transition fires")
        found[event] = EventDecl(
            event,
            tuple(sets),
            bool(body.get("durable", False)),
            by,
            tuple(bumps),
            work,
            remote,
            first,
        )
    return found


def _flags(body: dict[str, Any], flags: set[str], what: str, fail: Any) -> None:
    for flag in sorted(flags & set(body)):
        if not isinstance(body[flag], bool):
            raise fail(f"{what}: {flag} must be true or false, not {body[flag]!r}")


def _reachable(
    initial: str, states: dict[str, StateDecl], transitions: list[TransitionDecl], fail: Any
) -> None:
    """Every declared state must be reachable from the initial one."""
    seen, todo = {initial}, [initial]
    while todo:
        here = todo.pop()
        for t in transitions:
            if t.source == here and t.dest not in seen:
                seen.add(t.dest)
                todo.append(t.dest)
    unreachable = [s for s in states if s not in seen]
    if unreachable:
        raise fail(
            f"states {unreachable} cannot be reached from the initial state {initial!r}:"
            " add a transition into them, or remove them"
        )
