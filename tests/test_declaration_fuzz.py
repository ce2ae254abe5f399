"""Declarations are user input: mutated ones (Hypothesis) fed to every command that reads a
declaration (spec, diagram, check, verify, report, and the store commands claims, sweep,
history, audit and prune) end in one clear error or a valid run, never a traceback."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claimfsm.cli import main
from claimfsm.spec import declarations_dir

from .test_own_declarations import DOCFLOW

CLAIM = (declarations_dir() / "claim.toml").read_text()
JOB = (declarations_dir() / "job.toml").read_text()
VARIANTS = [p.read_text() for p in sorted((declarations_dir() / "wrong").glob("*.toml"))]
#: a lifecycle with linked drafts ([drafts]), which the checker, the store and verify read
PAGE = (Path(__file__).resolve().parents[1] / "examples" / "page.toml").read_text()
POST = (Path(__file__).resolve().parents[1] / "examples" / "post.toml").read_text()
VALUES = ['"x"', "3", "true", "[]", '["a"]', "{}", '"*"', '""', "-1", '"reserved"', "1.5"]
VALUES += ['"lapse"']  # an event name: first = "lapse" on the wrong event, or a guard
VALUES += ['"answered"']  # a remote role, moved onto another event or given twice


@st.composite
def mutated(draw: st.DrawFn) -> str:
    lines = draw(st.sampled_from([CLAIM, DOCFLOW, JOB, PAGE, POST, *VARIANTS])).splitlines()
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["drop", "duplicate", "value", "key", "garbage", "cut"]))
        if kind == "drop":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "value" and "=" in lines[i]:
            key = lines[i].split("=", 1)[0]
            lines[i] = f"{key}= {draw(st.sampled_from(VALUES))}"
        elif kind == "key" and "=" in lines[i]:
            value = lines[i].split("=", 1)[1]
            keys = ["event", "source", "dest", "guards", "terminal", "first", "remote", "x"]
            key = draw(st.sampled_from(keys))
            lines[i] = f"{key} ={value}"
        elif kind == "garbage":
            lines.insert(i, draw(st.sampled_from(["[[", "[states]", "= 1", "[states.a]", "é"])))
        elif kind == "cut":
            lines = lines[:i]
        if not lines:
            lines = [""]
    return "\n".join(lines) + "\n"


#: verify runs its own Hypothesis test inside these
NESTED = [HealthCheck.function_scoped_fixture, HealthCheck.nested_given]


@settings(max_examples=40, deadline=None, suppress_health_check=NESTED)
@given(text=mutated())
def test_mutated_declarations_give_an_error_or_a_run_never_a_traceback(text: str) -> None:
    _every_command_on(text)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=NESTED)
@given(text=mutated())
def test_many_mutated_declarations_give_an_error_or_a_run_never_a_traceback(text: str) -> None:
    """The same, on more mutants (the slow suite)."""
    _every_command_on(text)


def _every_command_on(text: str) -> None:
    """spec, diagram, check, verify and the store commands that open a store, on ``text``."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "claim.toml").write_text(CLAIM)  # what a variant's base names
        (Path(tmp) / "wrong").mkdir()
        path = Path(tmp) / "wrong" / "mutant.toml"
        path.write_text(text, encoding="utf-8")
        _each_ends_well(
            text,
            ["spec", str(path)],
            ["spec", str(path), "--json"],
            ["diagram", str(path), "--out", str(Path(tmp) / "d"), "--no-images"],
            ["check", str(path), "--workers", "1", "--epochs", "1"],
            [
                "verify",
                str(path),
                "--db",
                f"sqlite:///{Path(tmp) / 'v.sqlite'}",
                "--workers",
                "1",
                "--examples",
                "1",
                "--steps",
                "3",
                "--no-guided",  # the input's handling is what is fuzzed, not the long run
            ],
            # the store commands: the declaration says whose store (none exists here)
            ["claims", str(path), "--db", f"sqlite:///{Path(tmp) / 'v.sqlite'}"],
            ["sweep", str(path), "--db", f"sqlite:///{Path(tmp) / 'v.sqlite'}", "--json"],
        )


@settings(max_examples=8, deadline=None)  # a report checks and draws: seconds each
@given(text=mutated())
def test_mutated_declarations_in_the_report_and_the_other_store_commands(text: str) -> None:
    """The report (which checks the declaration and draws it) and the store commands that
    read history, each on the same mutants: an error or a run, never a traceback."""
    _report_and_history_commands_on(text)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(text=mutated())
def test_many_mutated_declarations_in_the_report_and_the_other_store_commands(
    text: str,
) -> None:
    """The same, on more mutants (the slow suite)."""
    _report_and_history_commands_on(text)


def _report_and_history_commands_on(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "claim.toml").write_text(CLAIM)
        (Path(tmp) / "wrong").mkdir()
        path = Path(tmp) / "wrong" / "mutant.toml"
        path.write_text(text, encoding="utf-8")
        db = f"sqlite:///{Path(tmp) / 'v.sqlite'}"
        _each_ends_well(
            text,
            ["report", str(path), "--workers", "1", "--out", str(Path(tmp) / "r.html")],
            ["history", str(path), "--db", db],
            ["audit", str(path), "--db", db, "--json"],
            ["prune", str(path), "--db", db, "--older-than", "1d"],
        )
        assert not (Path(tmp) / "v.sqlite").exists()  # no command made a store


def _each_ends_well(text: str, *commands: list[str]) -> None:
    """Each command on the mutant ``text`` exits 0, 1 (an error, or a violation found) or
    3, with an ``Error:`` line for an error, and raises nothing."""
    runner = CliRunner()
    for args in commands:
        result = runner.invoke(main, args)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(
                f"claimfsm {' '.join(args[:1])} raised {result.exception!r} on:\n{text}"
            ) from result.exception
        if result.exit_code == 2 and args[0] == "verify":  # a usage error
            assert "Error: " in result.output, result.output
            continue
        if result.exit_code not in (0, 1, 3):
            raise AssertionError(f"claimfsm {args[0]} exited {result.exit_code}: {result.output}")
        if result.exit_code == 1:
            assert "Error: " in result.output or "violated" in result.output, result.output
