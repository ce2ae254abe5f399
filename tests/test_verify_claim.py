"""`claimfsm verify` on the claim protocol: the checker's claim model and the claim's stores
side by side (claimfsm.verify.verify_claim), for claim.toml, a copy under other names and a
wrong design, on SQLite and PostgreSQL, in a database of its own that is removed after."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import settings

from claimfsm.cli import main
from claimfsm.machine import ClaimMachine
from claimfsm.spec import Spec, claim_spec, wrong_designs
from claimfsm.store import SQLiteStore, Store
from claimfsm.verify import claim_state_machine, verify_claim

from ._renamed import write_renamed
from .conftest import CountedOpener


def sqlite_opener(path: Path, spec: Spec) -> Callable[[Callable[[], float]], Store]:
    machine = ClaimMachine(spec)
    return lambda clock: SQLiteStore(path, clock=clock, machine=machine)


def test_verify_claim_finds_the_store_agreeing_with_the_model(tmp_path: Path) -> None:
    spec = claim_spec()
    result = verify_claim(
        spec, sqlite_opener(tmp_path / "v.sqlite", spec), examples=10, steps=20, workers=1
    )
    assert result.ok, (result.failure, result.program)
    assert result.guided > 20 and result.guided_steps > result.guided
    assert result.programs >= 10 and result.steps_run > 0


def test_verify_claim_opens_each_workers_store_once_and_closes_every_one(tmp_path: Path) -> None:
    """Both remotes' guided paths and the random programs run on one set of stores (one
    per worker and one for the world), each program on a target of its own and a clock at
    its start; at the end every store opened is closed."""
    spec = claim_spec()
    counting = CountedOpener(sqlite_opener(tmp_path / "v.sqlite", spec))
    result = verify_claim(spec, counting, examples=10, steps=20, workers=2)
    assert result.ok, (result.failure, result.program)
    assert result.guided > 100 and result.programs >= 10
    assert len(counting.opened) == 3 and counting.all_closed()


def test_a_claim_program_that_fails_to_start_closes_its_stores(tmp_path: Path) -> None:
    """Hypothesis tears down only a program that began: a program whose start fails (the
    target's drafts cannot be created) closes the stores it opened, and the error goes on."""
    spec = claim_spec()
    opener = sqlite_opener(tmp_path / "v.sqlite", spec)

    def broken(clock: Callable[[], float]) -> Store:
        store = opener(clock)

        def create_draft(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("no drafts today")

        store.create_draft = create_draft  # type: ignore[method-assign]
        return store

    counting = CountedOpener(broken)
    program = claim_state_machine(spec, counting, workers=1)
    with pytest.raises(RuntimeError, match="no drafts today"):
        program()
    assert len(counting.opened) == 2 and counting.all_closed()


def test_verify_claim_fails_when_the_store_runs_another_protocol(tmp_path: Path) -> None:
    """The model is claim.toml; the stores run readback_present_only, which cannot record
    an absent effect: the first guided path that reconciles absent makes them disagree."""
    stores = sqlite_opener(tmp_path / "v.sqlite", wrong_designs()["readback_present_only"])
    result = verify_claim(claim_spec(), stores, examples=5, workers=1)
    assert not result.ok
    assert result.failure.startswith("the store and the model disagree")
    assert "guided path" in result.failure
    assert any("reads back" in line or "reconcil" in line for line in result.program)


def test_verify_claim_holds_the_stores_discards_to_the_models_stale_owner_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that refuses a stale owner but forgets to record it changes no row, so only
    the count of discards can tell: verify holds each refusal's record to the model's rule
    (``checker.refusal_recorded``) and the first guided path with a stale owner fails."""
    spec = claim_spec()
    monkeypatch.setattr(Store, "_record_discard", lambda *args, **kwargs: None)
    result = verify_claim(spec, sqlite_opener(tmp_path / "v.sqlite", spec), examples=5)
    assert not result.ok
    assert "the store recorded 0 discard(s); the model's stale owner rule records 1" in (
        result.failure
    )


def test_verify_claim_holds_what_a_discard_names_to_the_models_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A discard names the event attempted and what the rule named: a store that records
    the right count under another guard's name is found too."""
    spec = claim_spec()
    record = Store._record_discard

    def misnamed(
        self: Store, tx: Any, attempted: str, current: Any, facts: Any, refusal: Any, *_: Any
    ) -> None:
        record(self, tx, attempted, current, facts, refusal, (attempted, "epoch_current"))

    monkeypatch.setattr(Store, "_record_discard", misnamed)
    result = verify_claim(spec, sqlite_opener(tmp_path / "v.sqlite", spec), examples=5)
    assert not result.ok
    assert "the store's discard names" in result.failure
    assert "('guard', 'epoch')" in result.failure and "('guard', 'owner')" in result.failure


def test_verify_claim_reports_a_declaration_that_breaks_an_invariant(tmp_path: Path) -> None:
    """release_by_target runs on the store exactly as the model says, and that is the
    problem: a stale owner's release changes the claim."""
    spec = wrong_designs()["release_by_target"]
    opener = sqlite_opener(tmp_path / "v.sqlite", spec)
    result = verify_claim(spec, opener, examples=5, workers=1)  # a crashed worker comes back
    assert not result.ok
    assert result.failure.startswith("invariant stale_operations_change_nothing violated")
    assert "calls release with its saved (stale) handle" in result.program[-1]


def test_claimfsm_verify_takes_the_claim_and_a_renamed_copy_and_removes_its_file(
    tmp_path: Path,
) -> None:
    renamed = write_renamed(tmp_path / "renamed")
    for declaration, workers in (("claim", "2"), (str(renamed), "1")):
        db = tmp_path / "verify.sqlite"
        result = CliRunner().invoke(
            main,
            [
                "verify",
                declaration,
                "--db",
                f"sqlite:///{db}",
                "--examples",
                "5",
                "--workers",
                workers,
            ],
        )
        assert result.exit_code == 0, result.output
        assert "the store did what the model does at every step" in result.output
        assert not db.exists() and not Path(f"{db}-wal").exists()


def test_claimfsm_verify_of_a_wrong_design_exits_1_with_the_program(tmp_path: Path) -> None:
    db = tmp_path / "verify.sqlite"
    result = CliRunner().invoke(
        main,
        ["verify", "release_by_target", "--db", f"sqlite:///{db}", "--workers", "1"],
    )
    assert result.exit_code == 1, result.output
    assert "failed: invariant stale_operations_change_nothing violated" in result.output
    assert "1. worker 0 acquires target 0" in result.output
    assert not db.exists()
    quick = CliRunner().invoke(
        main, ["verify", "claim", "--db", f"sqlite:///{db}", "--no-guided", "--examples", "3"]
    )
    assert quick.exit_code == 0, quick.output
    assert "shortest paths to every transition, refusal and violation: 0 paths" in quick.output


def test_claimfsm_verify_will_not_write_the_claim_tables_into_an_existing_file(
    tmp_path: Path,
) -> None:
    db = tmp_path / "yours.sqlite"
    db.write_bytes(b"not ours")
    result = CliRunner().invoke(main, ["verify", "claim", "--db", f"sqlite:///{db}"])
    assert result.exit_code == 2, result.output
    assert "exists" in result.output and "does not exist yet" in result.output
    assert "Traceback" not in result.output
    assert db.read_bytes() == b"not ours"
    for url in ("sqlite:///:memory:", "memory://"):
        result = CliRunner().invoke(main, ["verify", "claim", "--db", url])
        assert result.exit_code == 2 and "its own connection" in result.output


def test_claimfsm_verify_on_postgresql_drops_its_schema(pg_database: str) -> None:
    import psycopg

    def schemas() -> set[str]:
        with psycopg.connect(pg_database) as conn:
            rows = conn.execute("SELECT nspname FROM pg_namespace").fetchall()
        return {r[0] for r in rows}

    before = schemas()
    result = CliRunner().invoke(
        main, ["verify", "claim", "--db", pg_database, "--examples", "3", "--workers", "1"]
    )
    assert result.exit_code == 0, result.output
    assert schemas() == before


def test_the_claims_stateful_test_is_a_class_a_pytest_suite_runs(tmp_path: Path) -> None:
    """What a user's own suite writes: ``TestClaim = claim_state_machine(...).TestCase``."""
    spec = claim_spec()
    machine: Any = claim_state_machine(spec, sqlite_opener(tmp_path / "v.sqlite", spec))
    machine.TestCase.settings = settings(max_examples=5, stateful_step_count=10, deadline=None)
    machine.TestCase("runTest").runTest()
    assert machine.programs_run >= 5 and machine.steps_run > 0


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_verify_claim_long_runs_agree_on_both_backends(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """More and longer random programs, three workers, after the guided paths: the claim's
    stores never leave the claim model."""
    from claimfsm.verify import scratch_claim_stores

    spec = claim_spec()
    url = (
        f"sqlite:///{tmp_path / 'long.sqlite'}"
        if backend == "sqlite"
        else request.getfixturevalue("pg_database")
    )
    with scratch_claim_stores(spec, url) as open_store:
        result = verify_claim(
            spec, open_store, examples=200, steps=50, workers=3, seed=20261201, deep_samples=40
        )
    assert result.ok, result.failure + "\n" + "\n".join(result.program)
    assert result.programs >= 200 and result.steps_run > 3_000  # programs end at the bounds
