"""Load and validate a declaration file (TOML, read with the standard library)."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from claimfsm.errors import REFUSALS, SpecError
from claimfsm.spec._declaration import GuardDecl, Spec, StateDecl, TransitionDecl

_STATE_KEYS = {"meaning", "terminal", "frees_target", "lease", "stale"}
_GUARD_KEYS = {"meaning", "refusal", "stale"}
_TRANSITION_KEYS = {"event", "source", "dest", "guards", "internal"}
_TOP_KEYS = {"name", "initial", "states", "guards", "transitions"}


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
    """Read and validate one declaration; a malformed one raises :class:`SpecError`."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the declaration: {exc}") from exc
    return parse_spec(raw, path=path)


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

    seen: dict[tuple[str, str], str] = {}
    for t in transitions:
        if t.internal:
            continue
        prior = seen.setdefault((t.event, t.dest), t.source)
        if prior != t.source:
            raise fail(
                f"event {t.event!r} reaches {t.dest!r} from both {prior!r} and {t.source!r};"
                " a store could not tell which one it took: use two event names"
            )
    return Spec(
        name=raw["name"],
        initial=initial,
        states=states,
        guards=guards,
        transitions=tuple(transitions),
        path=path,
    )


def _only(body: Any, allowed: set[str], what: str, fail: Any) -> None:
    if not isinstance(body, dict):
        raise fail(f"{what} must be a table")
    unknown = set(body) - allowed
    if unknown:
        raise fail(f"{what}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
