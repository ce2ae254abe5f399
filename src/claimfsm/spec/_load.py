"""Load and validate a declaration file (TOML, read with the standard library)."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from claimfsm.errors import REFUSALS, SpecError
from claimfsm.spec._declaration import GuardDecl, Spec, StateDecl, TransitionDecl

_STATE_KEYS = {"meaning", "terminal", "frees_target", "lease", "stale"}
_GUARD_KEYS = {"meaning", "refusal", "stale"}
_TRANSITION_KEYS = {"event", "source", "dest", "guards", "internal"}
_TOP_KEYS = {"name", "initial", "states", "guards", "transitions", "description"}
_OVERLAY_KEYS = {"base", "name", "description", "replace", "drop_guard", "add", "model"}
#: Options a variant may set for the checker's model of the world around the claim row.
MODEL_OPTIONS = {
    "one_live_draft_per_target": "one live draft per target (a partial unique index)",
    "send_before_intent": "workers call the remote before recording the intent to send",
    "retry_with_fresh_key": "a retry of an uncertain attempt uses a new idempotency key",
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
    it lists (``replace``, ``drop_guard``, ``add``) and checker ``model`` options.
    """
    path = Path(path)
    raw = _read(path)
    if "base" not in raw:
        return parse_spec(raw, path=path)
    return _overlay(raw, path)


def designs() -> dict[str, Spec]:
    """The known-wrong designs under ``specs/wrong/``, by name."""
    found = {}
    for p in sorted((declarations_dir() / "wrong").glob("*.toml")):
        spec = load_spec(p)
        found[spec.name] = spec
    return found


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the declaration: {exc}") from exc


def _overlay(raw: dict[str, Any], path: Path) -> Spec:
    def fail(msg: str) -> SpecError:
        return SpecError(f"{path}: {msg}")

    _only(raw, _OVERLAY_KEYS, "a variant", fail)
    if not isinstance(raw.get("description"), str) or not raw["description"]:
        raise fail("a variant needs a one-line 'description' of how it differs")
    base_path = (path.parent / raw["base"]).resolve()
    base = _read(base_path)
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
    options = raw.get("model", {})
    unknown = set(options) - set(MODEL_OPTIONS)
    if unknown:
        raise fail(f"unknown model options {sorted(unknown)}; known: {sorted(MODEL_OPTIONS)}")
    merged = dict(base, transitions=transitions, name=raw.get("name", path.stem))
    merged["description"] = raw["description"]
    spec = parse_spec(merged, path=path)
    return replace(spec, base=str(raw["base"]), options=dict(options))


def parse_spec(raw: dict[str, Any], *, path: Path | None = None) -> Spec:
    where = str(path) if path else "<declaration>"

    def fail(msg: str) -> SpecError:
        return SpecError(f"{where}: {msg}")

    _only(raw, _TOP_KEYS, "the top level", fail)
    for key in ("name", "initial", "states", "transitions"):
        if key not in raw:
            raise fail(f"missing {key!r}")

    states: dict[str, StateDecl] = {}
    for name, body in raw["states"].items():
        if not name.isidentifier():
            raise fail(f"state name {name!r} must be an identifier (letters, digits, _)")
        _only(body, _STATE_KEYS, f"state {name!r}", fail)
        if not isinstance(body.get("meaning"), str) or not body["meaning"]:
            raise fail(f"state {name!r} needs a one-line 'meaning'")
        states[name] = StateDecl(name=name, **body)

    guards: dict[str, GuardDecl] = {}
    for name, body in raw.get("guards", {}).items():
        _only(body, _GUARD_KEYS, f"guard {name!r}", fail)
        if not isinstance(body.get("meaning"), str) or not body["meaning"]:
            raise fail(f"guard {name!r} needs a one-line 'meaning'")
        refusal = body.get("refusal")
        if refusal is not None and refusal not in REFUSALS:
            raise fail(
                f"guard {name!r}: unknown refusal {refusal!r}; use one of {sorted(REFUSALS)}"
            )
        guards[name] = GuardDecl(name=name, **body)

    initial = raw["initial"]
    if initial not in states:
        raise fail(f"initial state {initial!r} is not declared")

    transitions: list[TransitionDecl] = []
    for i, body in enumerate(raw["transitions"], start=1):
        label = f"transition #{i} ({body.get('event', '?')})"
        _only(body, _TRANSITION_KEYS, label, fail)
        event, source = body.get("event"), body.get("source")
        internal = bool(body.get("internal", False))
        if not isinstance(event, str) or not event.isidentifier():
            raise fail(f"{label}: 'event' must be an identifier")
        if internal == ("dest" in body):
            raise fail(f"{label}: give either 'dest' or 'internal = true'")
        names = tuple(body.get("guards", ()))
        for g in names:
            if g not in guards:
                raise fail(f"{label}: guard {g!r} is not declared under [guards]")
        sources = list(states) if source == "*" else [source]
        for src in sources:
            if src not in states:
                raise fail(f"{label}: source {src!r} is not a declared state")
            dest = src if internal else body["dest"]
            if dest not in states:
                raise fail(f"{label}: dest {dest!r} is not a declared state")
            transitions.append(TransitionDecl(event, src, dest, names, internal))

    return Spec(
        name=raw["name"],
        initial=initial,
        states=states,
        guards=guards,
        transitions=tuple(transitions),
        path=path,
        description=str(raw.get("description", "")),
    )


def _only(body: Any, allowed: set[str], what: str, fail: Any) -> None:
    if not isinstance(body, dict):
        raise fail(f"{what} must be a table")
    unknown = set(body) - allowed
    if unknown:
        raise fail(f"{what}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
