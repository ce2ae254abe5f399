"""The command line: the demo's verdict, one-line errors, help for every command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.cli import main
from claimfsm.spec import wrong_designs


def test_demo_json_with_a_fencing_remote_has_no_overlaps_or_duplicates(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--db", str(tmp_path / "d.sqlite"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
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
    summary = json.loads(result.stdout)
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


def test_spec_prints_the_guards_table_and_json() -> None:
    from claimfsm.spec import claim_spec

    runner = CliRunner()
    out = runner.invoke(main, ["spec"], env={"COLUMNS": "200"}).output
    assert "claim: guards" in out
    for guard in claim_spec().guards.values():
        assert guard.name in out and (guard.refusal or "-") in out
    data = json.loads(runner.invoke(main, ["spec", "--json"]).output)
    assert [g["name"] for g in data["guards"]] == list(claim_spec().guards)
    assert {t["event"] for t in data["transitions"]} >= {"acquire", "begin_send", "confirm"}


def test_listings_at_80_columns_cut_nothing_and_wrap_the_detail(tmp_path: Path) -> None:
    """In a terminal of 80 columns or a pipe, every identifier is shown whole, and the
    history's detail text is wrapped, never cut; every listing has --json."""
    from claimfsm.store import open_store

    db = tmp_path / "d.sqlite"
    url = f"sqlite:///{db}"
    store = open_store(url)
    target = "customer-account-with-a-long-name-0123456789"
    draft = store.create_draft(target, "hello")
    store.approve_draft(draft.draft_id)
    claim = store.acquire(
        target, draft.draft_id, owner="a-worker-with-a-long-name", lease_seconds=30
    )
    claim.begin_send()
    claim.mark_uncertain("the remote did not answer within the send timeout " * 3)
    store.close()
    runner = CliRunner()
    claims = runner.invoke(main, ["claims", "--db", url], env={"COLUMNS": "80"})
    assert claims.exit_code == 0 and target in claims.output
    assert claim.idempotency_key in claims.output and "…" not in claims.output
    history = runner.invoke(main, ["history", "--db", url], env={"COLUMNS": "80"})
    assert history.exit_code == 0 and target in history.output and "…" not in history.output
    reader = open_store(url, create=False)
    detail = next(e for e in reader.history(target) if e.event == "timeout")
    reader.close()
    wrapped = [line for line in history.output.splitlines() if line.startswith("    ")]
    assert len(wrapped) > 1 and all(len(line) <= 80 for line in wrapped)
    assert " ".join(line.strip() for line in wrapped) == " ".join(detail.detail.split())
    as_json = [
        json.loads(line)
        for line in runner.invoke(main, ["claims", "--db", url, "--json"]).output.splitlines()
    ]
    assert as_json[0]["target_id"] == target and as_json[0]["state"] == "uncertain"
    assert "token" not in json.dumps(as_json).replace("token_fingerprint", "")
    listed = runner.invoke(main, ["check", "--list", "--json"]).output.splitlines()
    assert [json.loads(line)["design"] for line in listed] == list(wrong_designs())


@pytest.mark.parametrize(
    ("remote", "words"),
    [
        ("fencing", "the full promise"),
        ("dedup", "may overlap at the remote"),
        ("plain", "cannot prove an effect absent"),
    ],
)
def test_the_demo_says_on_screen_what_the_promise_is_against_its_remote(
    tmp_path: Path, remote: str, words: str
) -> None:
    result = CliRunner().invoke(
        main,
        ["demo", "--db", str(tmp_path / "d.sqlite"), "--remote", remote, "--seed", "3"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert words in result.output


def test_check_says_unique_states_and_counts_its_bounds_in_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = CliRunner().invoke(
        main, ["check", "--workers", "1", "--drafts", "1", "--epochs", "1", "--targets", "1"]
    )
    assert "bounds: 1 worker, 1 target, 1 draft per target, 1 epoch per target" in result.output
    # The progress line (about once a second, on stderr) counts unique states and says so;
    # at every check point here, so that it shows however fast the search is.
    from claimfsm.checker import Checker

    monkeypatch.setattr(Checker, "PROGRESS_EVERY", 0.0)
    slow = CliRunner().invoke(main, ["check", "--workers", "2", "--no-symmetry"])
    assert re.search(r"^\.\.\. [\d,]+ unique states, depth \d+, \d+ s$", slow.output, re.M)
