"""``claimfsm check`` on a lifecycle of your own: the checker's model of any declared
lifecycle (``claimfsm.checker.entity_model``), its world from the declaration's ``[world]``
and the command's flags."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from claimfsm.errors import InvalidArgument, SpecError
from claimfsm.spec import Spec

#: ``check`` options that describe the claim protocol's world only.
CLAIM_ONLY = ("drafts", "retries", "remote")


class _CannotRun(click.ClickException):
    """A check that could not be run for want of a tool or a setting: exit 2, as a usage
    error does, never 1, which says a property was violated."""

    exit_code = 2


def check_lifecycle(
    ctx: click.Context,
    spec: Spec,
    *,
    workers: int | None,
    keys: int | None,
    epochs: int | None,
    no_crashes: bool,
    no_symmetry: bool,
    no_wakes: bool = False,
    limits: dict[str, Any],
    token: str | None,
    remote: str | None = None,
    retries: int | None = None,
    fence: str | None = None,
    drafts: int | None = None,
    as_json: bool,
    draw: Callable[[Any], list[Path]] | None = None,
    spin: dict[str, Any] | None = None,
    replay_paths: bool = False,
    claim_keys: bool = False,
    stop_on_violation: bool = False,
    by_target: bool = False,
) -> None:
    """``spin``: search with SPIN (``bitstate``, ``keep``) instead of the built-in engine.
    ``claim_keys``: the claim protocol checked in this world (``check --world lifecycle``),
    with the claim world's key abstraction against a fencing remote (``own_keys=False``:
    the world that reaches the claim's pinned counts). ``stop_on_violation``: stop at the
    first counterexample (a known-wrong design's, as the claim world's check does).
    ``by_target``: check one entity and carry the verdict over to ``keys`` of them
    (``claimfsm.checker._entity_targets``)."""
    from claimfsm.checker import (
        Checker,
        EntityModelConfig,
        entity_model,
        explained,
        replay,
        resends_in,
        workers_carry_keys,
    )
    from claimfsm.spec import has_remote

    own_remote = has_remote(spec)
    resends = bool(resends_in(spec))
    given = [
        name
        for name in CLAIM_ONLY
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
        and not (name == "remote" and own_remote)
        and not (name == "retries" and resends)
        and not (name == "drafts" and spec.drafts is not None)
    ]
    if given:
        flags = ", ".join(f"--{n}" for n in given)
        raise click.UsageError(
            f"{flags}: the claim protocol's world only (drafts, its remote, its stores);"
            f" {spec.name} is a lifecycle of its own: its world is its [world] table, and"
            " --workers, --targets (its entities), --epochs, --no-crashes and --no-wakes"
            + ("" if own_remote else ", and --remote where an event declares a remote role")
            + ("" if resends else ", and --retries where an event resends")
        )
    config = EntityModelConfig(
        workers=workers,
        keys=keys,
        epochs=epochs,
        crashes=False if no_crashes else None,
        wakes=False if no_wakes else None,
        remote=remote if own_remote else None,
        retries=retries if resends else None,
        fence=fence,
        drafts=drafts,
    )
    if claim_keys:
        carry = workers_carry_keys(config.resolved(spec)["remote"])
        config = dataclasses.replace(config, own_keys=carry)
    if by_target:
        _check_by_target(
            spec,
            config,
            keys,
            no_symmetry,
            as_json,
            searched=(spin, replay_paths, draw),
            limits=limits,
            token=token,
        )
    from claimfsm.spec._roles import WORLD_OPTIONS

    low, high = WORLD_OPTIONS["keys"][1:3]
    if keys is not None and not low <= keys <= high:
        raise click.UsageError(
            f"--targets {keys}: the world of a lifecycle is searched whole with {low} to"
            f" {high} entities; --by-target carries one entity's check over to more"
        )
    model = entity_model(spec, config)
    world = config.resolved(spec)
    if token is not None:
        path = replay(model, token)
        steps = explained(model, path)
        actions = [step.action for step in path[1:]]
        on_store = _on_a_store(spec, actions, world["workers"])
        if as_json:
            data: dict[str, Any] = {"design": spec.name, "token": token, "steps": steps}
            if on_store is not None:
                data["store"] = {"program": on_store[0], "disagreement": on_store[1]}
            click.echo(json.dumps(data, indent=2))
        else:
            click.echo(f"design {spec.name}: {spec.description}")
            click.echo(f"replay token {token}, on the model:")
            for n, (text, state) in enumerate(steps):
                click.echo(f"  {n}. {text}\n       -> {state}")
            if on_store is None:
                click.echo("not played on a store: the path acts on more than one entity")
            else:
                click.echo("and on a real SQLite store (a temporary file), step by step:")
                for line in on_store[0]:
                    click.echo(f"  {line}")
                click.echo(
                    f"  {on_store[1]}" if on_store[1] else "  the store did what the model did"
                )
        end = path[-1].state
        broken = any(p.kind == "always" and not p.holds(end) for p in model.properties)
        open_ = [p.name for p in model.properties if _unmet(p, [step.state for step in path])]
        if open_ and not as_json:
            click.echo(f"at the end, still unmet: {', '.join(open_)} (eventually)")
        sys.exit(1 if broken or open_ or (on_store is not None and on_store[1]) else 0)
    if spin is not None:
        played = _replay_guided(spec, world["workers"]) if replay_paths else None
        heading = "world: " + describe_world(spec, world) + " (no symmetry reduction)"
        _check_with_spin(spec, config, world, heading, spin, limits, draw, as_json, played)
        return
    if ctx.get_parameter_source("bitstate") is not click.core.ParameterSource.DEFAULT or (
        ctx.get_parameter_source("spin_dir") is not click.core.ParameterSource.DEFAULT
    ):
        raise click.UsageError("--bitstate and --spin-dir go with --engine spin")
    checker = (
        Checker(model)
        .symmetry(not no_symmetry)
        .max_depth(limits["max_depth"])
        .max_states(limits["max_states"])
        .time_limit(limits["time_limit"])
        .stop_on_violation(stop_on_violation)
        .progress(
            lambda unique, depth, secs: click.echo(
                f"... {unique:,} unique states, depth {depth}, {secs:.0f} s", err=True
            )
        )
    )
    report = checker.run()
    drawn = draw(report) if draw is not None else []
    played = _replay_guided(spec, world["workers"]) if replay_paths else None
    if as_json:
        found = report.as_dict()
        found["design"] = spec.name
        found["bounds"] = {**world, "symmetry": not no_symmetry}
        if played is not None:
            found["replay"] = played
        click.echo(json.dumps(found, indent=2))
    else:
        click.echo(f"design {spec.name}: {spec.description}")
        click.echo("world: " + describe_world(spec, world))
        if not spec.invariants:
            click.echo(
                "note: the declaration names no [invariants]; the checker proves only that"
                " stale operations change nothing, and looks for deadlocks"
            )
        click.echo(report.text())
    _finish(report, drawn, played, as_json)


def _finish(report: Any, drawn: list[Path], played: dict[str, Any] | None, as_json: bool) -> None:
    """What every search ends with, whichever engine: the drawings written, the replay on
    the store, the verdict, and the exit status (1 also when the store disagreed)."""
    if not as_json:
        for written in drawn:
            click.echo(f"wrote {written}")
        if played is not None:
            _print_replay(played)
        click.echo(f"verdict: {report.verdict}")
    if played is not None and played["disagreements"]:
        sys.exit(1)
    sys.exit({"ok": 0, "violated": 1}.get(report.verdict, 3))


def _unmet(prop: Any, states: list[Any]) -> bool:
    """Whether an ``eventually`` obligation started on the path and is still unmet at its
    end (a liveness counterexample's path ends so)."""
    if prop.kind != "eventually":
        return False
    starts = prop.trigger or (lambda s: s is states[0])
    last_start = max((i for i, s in enumerate(states) if starts(s)), default=None)
    return last_start is not None and not any(prop.holds(s) for s in states[last_start:])


def _on_a_store(spec: Spec, actions: list[Any], workers: int) -> tuple[list[str], str] | None:
    """The path played on a temporary SQLite store beside the model (None: it acts on
    more than one entity, which the store comparison does not follow)."""
    import tempfile

    from claimfsm.errors import InvalidArgument
    from claimfsm.verify import play

    with tempfile.TemporaryDirectory(prefix="claimfsm-replay-") as folder:
        url = f"sqlite:///{folder}/replay.sqlite"
        try:
            return play(spec, _opener(spec, url), actions, workers=workers)
        except InvalidArgument:
            return None


def _opener(spec: Spec, url: str) -> Callable[[Any], Any]:
    """Opens a new connection to the store at ``url`` each time (one per worker)."""
    from claimfsm.store import open_entity_store

    return lambda clock: open_entity_store(spec, url, clock=clock, prefix="replay")


def _replay_guided(spec: Spec, workers: int) -> dict[str, Any]:
    """``check --replay``: the model's shortest path to every transition, refusal and
    violation, each played on a temporary SQLite store beside the model. A violated
    invariant on the way is the declaration's (the store did what the model did); a
    disagreement is the store's."""
    import tempfile

    from claimfsm.verify import guided_paths, play

    paths: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="claimfsm-replay-") as folder:
        for n, (what, actions) in enumerate(guided_paths(spec, workers=workers)):
            url = f"sqlite:///{folder}/path{n}.sqlite"
            _program, said = play(spec, _opener(spec, url), actions, workers=workers)
            paths.append({"reaches": what, "steps": len(actions), "store": said or "agreed"})
    violated = sorted({p["store"] for p in paths if p["store"].startswith("invariant ")})
    return {
        "paths": len(paths),
        "steps": sum(p["steps"] for p in paths),
        "disagreements": [
            p for p in paths if p["store"] != "agreed" and not p["store"].startswith("invariant ")
        ],
        "violated_on_the_store": violated,
    }


def _print_replay(played: dict[str, Any]) -> None:
    click.echo(
        f"\nreplayed on real SQLite files: {played['paths']} paths, the model's shortest to"
        f" each transition, refusal and violation ({played['steps']} steps)"
    )
    for p in played["disagreements"]:
        click.echo(f"  DISAGREES on the way to {p['reaches']}: {p['store']}")
    for said in played["violated_on_the_store"]:
        click.echo(f"  on the store too: {said.split('. The store')[0]}")
    if not played["disagreements"]:
        click.echo("  the store did what the model did at every step")


def _check_with_spin(
    spec: Spec,
    config: Any,
    bounds: dict[str, Any],
    heading: str,
    spin: dict[str, Any],
    limits: dict[str, Any],
    draw: Callable[[Any], list[Path]] | None,
    as_json: bool,
    played: dict[str, Any] | None = None,
    coverage: tuple[str, dict[str, Any]] | None = None,
) -> None:
    """``check --engine spin``: the same report, from SPIN's search of generated Promela,
    for a lifecycle of your own or the claim protocol (``config`` says which; ``heading``
    describes its bounds). ``played``: a lifecycle's ``--replay`` paths on the store;
    ``coverage``: the claim's (its text and its JSON)."""
    from claimfsm.checker import SpinUnavailable, spin_check

    if limits["max_depth"] is not None or limits["max_states"] is not None:
        raise click.UsageError(
            "--max-depth and --max-states are the built-in engine's; SPIN takes --time-limit"
        )
    try:
        report, run = spin_check(
            spec,
            config,
            bitstate=spin["bitstate"],
            keep=spin["keep"],
            timeout=limits["time_limit"],
        )
    except (SpinUnavailable, InvalidArgument) as exc:
        # SPIN could not be run (not installed, or CLAIMFSM_SPIN_OPT names no level): the
        # set-up's to mend, not a verdict, so exit 2 and not a violation's 1
        raise _CannotRun(str(exc)) from None
    drawn = draw(report) if draw is not None else []
    engine = {
        "name": "spin",
        "search": "bitstate" if run.bitstate else "exhaustive, breadth-first",
        "liveness": "LTL, acceptance cycles (nested depth-first, trail shortened)",
        "compile_seconds": round(run.compile_seconds, 3),
        "optimisation": run.optimisation,
        "search_seconds": round(run.search_seconds, 3),
        "memory_mb": run.memory_mb,
        "state_vector_bytes": run.state_vector_bytes,
    }
    if as_json:
        data = report.as_dict()
        data["design"] = spec.name
        data["bounds"] = {**bounds, "symmetry": False}
        data["engine"] = engine
        if played is not None:
            data["replay"] = played
        if coverage is not None:
            data["replay"] = coverage[1]
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"design {spec.name}: {spec.description}")
        click.echo(heading)
        click.echo(
            f"engine: SPIN, {engine['search']}: verifiers built ({run.optimisation}) in"
            f" {run.compile_seconds:.2f} s,"
            f" searched in {run.search_seconds:.2f} s, {run.memory_mb:,.0f} MB,"
            f" {run.state_vector_bytes} bytes per state vector"
        )
        click.echo(report.text())
        if report.reached:
            click.echo(
                f"(SPIN says that it met {', '.join(sorted(report.reached))}, not how: the"
                " built-in engine prints an example path)"
            )
        if run.bitstate:
            click.echo(
                "note: a bitstate search may miss states: 'ok' means no violation was found"
                " among the states it reached"
            )
        if coverage is not None:
            click.echo(coverage[0])
    _finish(report, drawn, played, as_json)


def _check_by_target(
    spec: Spec,
    config: Any,
    keys: int | None,
    no_symmetry: bool,
    as_json: bool,
    *,
    searched: tuple[Any, bool, Any],
    limits: dict[str, Any],
    token: str | None,
) -> None:
    """``check --by-target`` on a lifecycle's world: one entity's check carried over to
    ``keys`` of them (``claimfsm.checker._entity_targets``); it exits."""
    from claimfsm.checker._entity_targets import entity_keys
    from claimfsm.cli._by_target import check_by_target

    spin, replay_paths, draw = searched
    many = keys if keys is not None else spec.world["keys"]
    if not isinstance(many, int) or many < 2 or spin is not None or replay_paths or draw:
        raise click.UsageError(
            "--by-target goes with --targets 2 or more and the built-in engine,"
            " without --replay or --diagram"
        )
    if token is not None or any(v is not None for v in limits.values()):
        raise click.UsageError(
            "--by-target searches whole spaces: drop the limits and --replay-token"
        )
    # the world's other bounds as one entity's check reads them (T itself bounds no search)
    world = {**dataclasses.replace(config, keys=1).resolved(spec), "keys": many}
    heading = "world: " + describe_world(spec, world)
    check_by_target(
        spec,
        dataclasses.replace(config, keys=many),
        world,
        heading,
        not no_symmetry,
        as_json,
        projection=entity_keys(spec),
    )


def describe_world(spec: Spec, world: dict[str, Any]) -> str:
    from claimfsm.checker import crash_words, entity_word

    word = entity_word(spec)
    parts = [
        _count(world["workers"], "worker"),
        _count(world["keys"], word),
        f"{_count(world['epochs'], 'epoch')} per {word}",
    ]
    if spec.columns:
        parts.append(f"counters up to {world['counts']}")
    parts.append(crash_words(world) or "without crashes")
    if "remote" in world:
        parts.append(f"a {world['remote']} remote")
        if not world.get("own_keys", True):
            parts.append("sends carrying the key as it is when sent (the claim world's keys)")
    if world.get("fence") == "with_readback" and any(
        g.fact == "fenced_through" for g in spec.guards.values()
    ):
        parts.append("fenced only by an operator's readback that finds nothing")
    if "retries" in world:
        parts.append(_count(world["retries"], "resend") + f" per {word}'s epoch")
    if "drafts" in world:
        edited = ", each edited once at most" if world["edits"] else ", never edited"
        parts.append(_count(world["drafts"], "linked draft") + f" per {word}{edited}")
    return ", ".join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def verify_lifecycle(
    spec: Spec,
    url: str,
    *,
    examples: int,
    steps: int,
    workers: int | None,
    seed: int | None,
    as_json: bool,
    guided: bool = True,
) -> None:
    """``claimfsm verify``: the generated stateful test of ``spec`` against the store at
    ``url``: a lifecycle of your own in tables of its own (``verify_NAME``), the claim
    protocol in a schema or a file of its own; dropped afterwards."""
    from claimfsm.spec import runs_on_the_claim_model
    from claimfsm.spec._invariants import lifecycle_world_problem
    from claimfsm.store import open_entity_store

    if url in ("sqlite://:memory:", "sqlite:///:memory:", "memory://"):
        raise click.UsageError(
            "--db: each worker needs its own connection to one database, and every"
            " connection to :memory: (or memory://) is a database of its own: give a file,"
            " sqlite:///PATH"
        )
    try:
        from claimfsm.verify import scratch_claim_stores, verify, verify_claim
    except ImportError as exc:  # hypothesis is the verify extra
        raise click.ClickException(
            f"claimfsm verify needs Hypothesis: pip install 'claimfsm[verify]' ({exc})"
        ) from None
    if runs_on_the_claim_model(spec):
        # The claim protocol, a variant or a copy under other names: the claim's stores,
        # in a database of their own (a new schema, or a new SQLite file), removed after.
        with contextlib.ExitStack() as stack:
            try:
                open_store = stack.enter_context(scratch_claim_stores(spec, url))
            except InvalidArgument as exc:  # the URL or the file: the user's to change
                raise click.UsageError(str(exc)) from None
            result = verify_claim(
                spec,
                open_store,
                examples=examples,
                steps=steps,
                workers=workers,
                seed=seed,
                guided_first=guided,
            )
    else:
        # what the model cannot answer, said before a store is made (nothing is left)
        problem = lifecycle_world_problem(spec)
        if problem is not None:
            raise SpecError(f"{spec.path or spec.name}: {problem}")
        first = open_entity_store(spec, url, prefix="verify")  # a bad URL fails here, clearly
        try:
            result = verify(
                spec,
                lambda clock: open_entity_store(spec, url, clock=clock, prefix="verify"),
                examples=examples,
                steps=steps,
                workers=workers,
                seed=seed,
                guided_first=guided,
            )
        finally:
            first.drop()
            first.close()
    if as_json:
        click.echo(json.dumps({"design": spec.name, **dataclasses.asdict(result)}, indent=2))
    else:
        click.echo(f"verify {spec.name} on {_shown(url)}, {_count(result.workers, 'worker')}:")
        click.echo(
            f"  the model's shortest paths to every transition, refusal and violation:"
            f" {result.guided} paths, {result.guided_steps} steps"
        )
        click.echo(f"  random programs: {result.programs}, {result.steps_run} steps")
        if result.ok:
            click.echo("the store did what the model does at every step, and every invariant held")
        else:
            click.echo(f"failed: {result.failure}")
            click.echo("the program, as played on the store:")
            for line in result.program:
                click.echo(f"  {line}")
    sys.exit(0 if result.ok else 1)


def _shown(url: str) -> str:
    from claimfsm.store._pg import redacted as _redacted

    return _redacted(url) if url.startswith(("postgresql://", "postgres://")) else url
