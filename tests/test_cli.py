"""The command line: the demo's verdict, one-line errors, help for every command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.cli import main


def test_demo_json_with_a_fencing_remote_has_no_overlaps_or_duplicates(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--db", str(tmp_path / "d.sqlite"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    for key in (
        "dispatched",
        "confirmed",
        "uncertain",
        "reconciled",
        "released",
        "expired",
        "discarded",
        "overlapping_sends",
        "duplicate_effects",
    ):
        assert key in summary
    assert summary["overlapping_sends"] == 0 and summary["duplicate_effects"] == 0
    assert summary["dispatched"] == summary["drafts"] == 24
    assert summary["uncertain"] > 0 and summary["discarded"] > 0  # faults really happened
    assert summary["history_replays"] is True


@pytest.mark.parametrize("remote", ["dedup", "plain"])
def test_demo_other_remotes_keep_the_promise_they_can(tmp_path: Path, remote: str) -> None:
    result = CliRunner().invoke(
        main, ["demo", "--db", str(tmp_path / "d.sqlite"), "--json", "--remote", remote]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["duplicate_effects"] == 0 and summary["left_sending"] == 0


def test_library_errors_are_one_line_with_exit_1(tmp_path: Path) -> None:
    bad = tmp_path / "junk.sqlite"
    bad.write_bytes(b"not a database" * 200)
    result = CliRunner().invoke(main, ["history", "--db", f"sqlite:///{bad}"])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "StoreError" in result.output
    assert "Traceback" not in result.output


def test_every_command_has_help() -> None:
    for name, command in main.commands.items():
        assert command.help, name
        result = CliRunner().invoke(main, [name, "--help"])
        assert result.exit_code == 0 and "Usage" in result.output


def test_spec_and_claims_commands(tmp_path: Path) -> None:
    runner = CliRunner()
    assert "begin_send" in runner.invoke(main, ["spec"]).output
    db = tmp_path / "d.sqlite"
    assert runner.invoke(main, ["demo", "--db", str(db), "--json"]).exit_code == 0
    out = runner.invoke(main, ["claims", "--db", f"sqlite:///{db}"], env={"COLUMNS": "200"})
    assert out.exit_code == 0 and "account-1" in out.output
    hist = runner.invoke(main, ["history", "--db", f"sqlite:///{db}", "--json"])
    lines = [json.loads(line) for line in hist.output.splitlines()]
    assert {"acquire", "begin_send", "confirm"} <= {e["event"] for e in lines}
