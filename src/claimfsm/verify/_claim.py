"""The generated stateful test of the claim protocol (``claim.toml``, a variant of it, or a
copy under other names) against a real store (needs the ``verify`` extra: Hypothesis).

Hypothesis drives the checker's claim model (one target) and the claim's stores side by
side. Each step is one of the model's actions: a worker acquires, records its intent,
sends, is acknowledged, confirms, times out, renews, releases, retries or crashes and
wakes up with its stale handle; the lease lapses (a clock jump), the sweep runs, a request
lands, the reconciler reads back; a draft is edited or approved. The store's part of each
is played through that worker's own connection (:class:`claimfsm.replay.Player`), and
after every step the store must hold what the model predicts (the epoch, its state and
outcome, each draft's status and version) and the model's ``always`` properties must
hold. A failure is the shortest program Hypothesis finds, printed step by step.

Each program uses a target of its own (``verify-`` and random hex), so programs share one
database and leave each other alone.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    precondition,
    rule,
)

from claimfsm.checker import ClaimModelConfig, Model, World, claim_model
from claimfsm.errors import ClaimFSMError, InvalidArgument
from claimfsm.replay import Coverage, Player, ReplayMismatch, coverage_paths
from claimfsm.spec import Event, RemoteMode, Spec
from claimfsm.store import Store
from claimfsm.verify._stateful import (
    KeptStores,
    ManualClock,
    StoreProgram,
    VerifyResult,
    random_programs,
)

#: Opens a new connection to the one database under test, on the given clock.
OpenClaimStore = Callable[[Callable[[], float]], Store]

#: The model's actions by who takes them, one Hypothesis rule each (swarm testing then
#: runs programs where some never happen: no crash, no clock).
_WORKER = frozenset(
    {
        Event.ACQUIRE,
        Event.BEGIN_SEND,
        Event.RELEASE,
        Event.CONFIRM,
        Event.TIMEOUT,
        Event.RENEW,
        Event.RETRY,
        "send",
        "ack",
    }
)
_FAULT = frozenset({"crash", "wake", "lease_lapses"})


def _group(action: tuple[Any, ...]) -> str:
    kind = action[0]
    if kind in _WORKER:
        return "worker"
    return "fault" if kind in _FAULT else "world"


def _new_time() -> list[float]:
    return [ManualClock.START]


def claim_config(spec: Spec, workers: int | None, remote: str, drafts: int = 2) -> ClaimModelConfig:
    """The model a claim verify runs: the world ``spec`` declares, on one target, with two
    workers (unless given), ``drafts`` drafts and a ``remote`` of that mode: verify plays
    both remotes, and the space of its guided paths stays small."""
    return ClaimModelConfig.declared(
        spec, workers=workers or 2, targets=1, drafts=drafts, remote=remote
    )


def claim_state_machine(
    spec: Spec,
    open_store: OpenClaimStore,
    *,
    workers: int | None = None,
    remote: RemoteMode = "fencing",
    drafts: int = 2,
    check_properties: bool = True,
) -> type[RuleBasedStateMachine]:
    """A Hypothesis state machine comparing the claim stores ``open_store`` opens (one per
    worker, one for the environment) with the checker's claim model of ``spec`` against a
    ``remote`` of that mode, with ``drafts`` drafts. ``open_store(clock)`` must open a new
    connection to one database each time, running ``spec`` (or its base, for a wrong
    design whose store is to show where it departs). In a pytest suite:
    ``TestClaim = claim_state_machine(spec, opener).TestCase``."""
    config = claim_config(spec, workers, remote, drafts)
    model: Model[World, tuple[Any, ...]] = claim_model(spec, config)
    always = [p for p in model.properties if p.kind == "always"] if check_properties else []
    start = next(iter(model.init_states()))

    class ClaimProgram(StoreProgram):
        #: The steps of the latest program run, in words (the shortest failing one, after
        #: a failure: Hypothesis runs it last).
        last_program: list[str] = []
        #: Steps played on the store, over every program.
        steps_run = 0
        programs_run = 0

        def __init__(self) -> None:
            super().__init__()
            self.stores: list[Store] = []
            self.program: list[str] = []
            ClaimProgram.last_program = self.program
            ClaimProgram.programs_run += 1
            self.coverage = Coverage(declared=set())
            self.world = start
            # every connection of this program reads the time from now[0]
            self.now, self.stores = self._open_stores(
                config.workers + 1,
                _new_time,
                lambda now: open_store(lambda: now[0]),
                self._start,
            )

        def _start(self, now: list[float], stores: list[Store]) -> None:
            """The program's start: the clock at its start, the world's first state
            played onto a new target."""
            now[0] = ManualClock.START
            self.player = Player(
                spec, config, stores[0], stores[1:], now, target=f"verify-{secrets.token_hex(6)}"
            )
            self.player.start(start)

        def _of(self, group: str) -> list[tuple[Any, ...]]:
            return [
                a
                for a in model.actions(self.world)
                if _group(a) == group and model.next_state(self.world, a) is not None
            ]

        @precondition(lambda self: bool(self._of("worker")))
        @rule(data=st.data())
        def worker(self, data: st.DataObject) -> None:
            self.step(data.draw(st.sampled_from(self._of("worker")), label="worker"))

        @precondition(lambda self: bool(self._of("world")))
        @rule(data=st.data())
        def world_step(self, data: st.DataObject) -> None:
            self.step(data.draw(st.sampled_from(self._of("world")), label="world"))

        @precondition(lambda self: bool(self._of("fault")))
        @rule(data=st.data())
        def fault(self, data: st.DataObject) -> None:
            self.step(data.draw(st.sampled_from(self._of("fault")), label="fault"))

        @precondition(lambda self: not any(self._of(g) for g in ("worker", "world", "fault")))
        @rule()
        def done(self) -> None:
            """The model's bounds are reached (every epoch used): nothing more happens."""

        def step(self, action: tuple[Any, ...]) -> None:
            after = model.next_state(self.world, action)
            if after is None:
                raise ReplayMismatch(f"the model cannot take {model.show_action(action)} here")
            self.program.append(f"{len(self.program) + 1}. {model.show_action(action)}")
            ClaimProgram.steps_run += 1
            try:
                self.player.step(action, after, self.coverage)
            except ReplayMismatch as exc:
                raise ReplayMismatch(self._disagree(str(exc))) from None
            except ClaimFSMError as exc:
                raise ReplayMismatch(
                    self._disagree(f"the store raised {type(exc).__name__}: {exc}")
                ) from None
            self.world = after
            self._invariants(always, after)

    ClaimProgram.model = model  # for the guided paths
    ClaimProgram.__name__ = f"{spec.name.replace('-', '_').title()}ClaimProgram"
    return ClaimProgram


def verify_claim(
    spec: Spec,
    open_store: OpenClaimStore,
    *,
    examples: int = 50,
    steps: int = 30,
    workers: int | None = None,
    seed: int | None = None,
    deep_samples: int = 20,
    guided_first: bool = True,
) -> VerifyResult:
    """The claim's generated stateful test: first the model's shortest path to every kind
    of step (each transition and each refusal, with every outcome of the guards a worker's
    step reads) and a sample of its deepest paths, against a fencing remote and against a
    deduplicating one (where retry is possible; one draft, which keeps that search small);
    then ``examples`` random programs of up to ``steps`` steps against a fencing remote;
    the model's ``always`` properties are checked after every step of each
    (``guided_first=False``: the random programs alone). The result says whether the store
    agreed with the model at every step, and gives the failing program if not."""
    with KeptStores() as kept:  # every program's stores, for the next program
        return _verify_claim(
            spec, open_store, kept, examples, steps, workers, seed, deep_samples, guided_first
        )


def _verify_claim(
    spec: Spec,
    open_store: OpenClaimStore,
    kept: KeptStores,
    examples: int,
    steps: int,
    workers: int | None,
    seed: int | None,
    deep_samples: int,
    guided_first: bool,
) -> VerifyResult:
    guided = guided_steps = 0
    for remote, drafts in (("fencing", 2), ("dedup", 1)) if guided_first else ():
        machine = claim_state_machine(
            spec,
            open_store,
            workers=workers,
            remote=remote,  # type: ignore[arg-type]
            drafts=drafts,
        )
        machine.kept = kept
        paths = coverage_paths(machine.model, deep_samples=deep_samples)  # type: ignore[attr-defined]
        guided += len(paths)
        for path in paths:
            run = machine()
            try:
                for step in path[1:]:
                    assert step.action is not None
                    run.step(step.action)  # type: ignore[attr-defined]
                    guided_steps += 1
            except AssertionError as exc:
                return VerifyResult(
                    False,
                    guided,
                    guided_steps,
                    0,
                    0,
                    claim_config(spec, workers, remote).workers,
                    f"{str(exc).splitlines()[0]}; a guided path against a {remote} remote",
                    list(run.program),  # type: ignore[attr-defined]
                )
            finally:
                run.teardown()
    machine = claim_state_machine(spec, open_store, workers=workers)
    machine.kept = kept
    failure, program = random_programs(machine, examples, steps, seed)
    return VerifyResult(
        not failure,
        guided,
        guided_steps,
        getattr(machine, "programs_run", 0),
        getattr(machine, "steps_run", 0),
        claim_config(spec, workers, "fencing").workers,
        failure,
        program,
    )


@contextlib.contextmanager
def scratch_claim_stores(spec: Spec, url: str) -> Iterator[OpenClaimStore]:
    """Stores running ``spec`` for a claim verify at ``url``, in a database of their own,
    removed afterwards: for ``postgresql://``, a new schema (``claimfsm_verify_`` and random
    hex) in that database, dropped with everything in it; for ``sqlite:///PATH``, the file
    PATH, which must not exist yet (a claim store's tables have fixed names: verify will
    not write them into a database that holds yours). ``InvalidArgument`` otherwise."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    from claimfsm.machine import ClaimMachine
    from claimfsm.store import SQLiteStore

    machine = ClaimMachine(spec)  # a declaration the stores cannot run fails here, clearly
    if url.startswith(("postgresql://", "postgres://")):
        from claimfsm.store._pg import split_url
        from claimfsm.store._postgres import PostgresStore

        libpq, _, _ = split_url(url)  # a bad URL fails here
        schema = f"claimfsm_verify_{secrets.token_hex(6)}"
        parts = urlsplit(url)
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
        scratch = urlunsplit(parts._replace(query=urlencode([*query, ("schema", schema)])))
        first = PostgresStore(scratch, machine=machine, pool_size=1)  # unreachable: fails here
        try:
            yield lambda clock: PostgresStore(scratch, clock=clock, machine=machine, pool_size=1)
        finally:
            first.close()
            _drop_schema(libpq, schema)
        return
    if url.startswith("sqlite:///") and url not in ("sqlite:///:memory:",):
        path = Path(url[len("sqlite:///") :])
        if path.exists():
            raise InvalidArgument(
                f"--db {url}: {path} exists; a claim verify writes a database of its own"
                " (the claim store's tables drafts, claims and history) and removes it"
                " afterwards: give a path that does not exist yet"
            )
        try:
            yield lambda clock: SQLiteStore(path, clock=clock, machine=machine)
        finally:
            for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                leftover.unlink(missing_ok=True)
        return
    raise InvalidArgument(
        f"--db {url!r}: a claim verify runs on sqlite:///PATH (a new file) or"
        " postgresql://...; each worker needs its own connection to one database"
    )


def _drop_schema(libpq_url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(libpq_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
