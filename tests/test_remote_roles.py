"""The claim's steps on the remote are declared (``remote`` on ``[events.NAME]``), not read
off the shape: the claim world takes the event declared ``answered`` when the remote's
answer arrives, ``unanswered`` when the owner stops waiting, and ``resends`` to send again.
A declaration that leaves a role out, or puts it on an event the claim world cannot take
that way, is refused by every consumer with one error naming the file. A lifecycle of
your own may declare a remote too (answered and unanswered), where the world of a
declared lifecycle can run it (tests/test_lifecycle_remote.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.cli import main
from claimfsm.errors import SpecError
from claimfsm.machine import ClaimMachine
from claimfsm.spec import Event, claim_spec, claim_steps, declarations_dir, load_spec
from claimfsm.store import open_entity_store, open_store

CLAIM = (declarations_dir() / "claim.toml").read_text()
ANSWERED = '[events.confirm]\nremote = "answered"'
UNANSWERED = '[events.timeout]\nremote = "unanswered"'


def test_the_claim_declares_how_its_steps_stand_to_the_remote() -> None:
    spec = claim_spec()
    roles = {e: spec.remote_role(e) for e in spec.events if spec.remote_role(e)}
    assert roles == {"confirm": "answered", "timeout": "unanswered", "retry": "resends"}
    steps = claim_steps(spec)
    assert [steps.event(e) for e in (Event.CONFIRM, Event.TIMEOUT, Event.RETRY)] == [
        "confirm",
        "timeout",
        "retry",
    ]


EDITS = {
    # without the role, nothing is the claim's confirm: the shape alone no longer says it
    "answered_left_out": (
        [(ANSWERED, "[events.confirm]")],
        "needs exactly one event declaring remote = 'answered' under [events.NAME] (the"
        " claim's confirm); this declaration has none",
    ),
    # the roles swapped: the owner would mark the claim confirmed on giving up waiting
    "roles_swapped": (
        [
            (ANSWERED, '[events.confirm]\nremote = "unanswered"'),
            (UNANSWERED, '[events.timeout]\nremote = "answered"'),
        ],
        "the event declaring remote = 'answered' (the claim's confirm), 'timeout', must"
        " lead from 'sending' into a terminal state",
    ),
    "answered_twice": (
        [(UNANSWERED, '[events.timeout]\nremote = "answered"')],
        "needs exactly one event declaring remote = 'answered' under [events.NAME] (the"
        " claim's confirm); this declaration has ['confirm', 'timeout']",
    ),
    "answered_on_release": (
        [
            (ANSWERED, "[events.confirm]"),
            (
                '[events.release]\nby = "owner"',
                '[events.release]\nremote = "answered"\nby = "owner"',
            ),
        ],
        "the event declaring remote = 'answered' (the claim's confirm), 'release', must lead"
        " from 'sending' into a terminal state (the remote answered: the attempt is over);"
        " from there it leads nowhere",
    ),
    "resends_left_out": (
        [('remote = "resends"', "")],
        "needs exactly one event declaring remote = 'resends'",
    ),
    "unknown_role": (
        [('remote = "resends"', 'remote = "resend"')],
        "event 'retry': remote 'resend' must be one of ['answered', 'unanswered', 'resends']",
    ),
}


def _edited(tmp_path: Path, edits: list[tuple[str, str]]) -> Path:
    text = CLAIM
    for old, new in edits:
        assert text.count(old) == 1
        text = text.replace(old, new)
    path = tmp_path / "edited.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", EDITS)
def test_a_claim_whose_remote_roles_are_wrong_is_refused_by_every_consumer(
    tmp_path: Path, name: str
) -> None:
    edit, says = EDITS[name]
    path = _edited(tmp_path, edit)
    result = CliRunner().invoke(main, ["check", str(path), "--workers", "1"])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"{path}" in result.output and says in result.output, result.output
    if name == "unknown_role":
        return  # the loader refuses it: nothing further to open
    spec = load_spec(path)
    with pytest.raises(SpecError, match="remote = "):
        ClaimMachine(spec)
    with pytest.raises(SpecError, match="remote = "):
        open_store(f"sqlite:///{tmp_path / 'claims.db'}", spec=spec)
    assert not (tmp_path / "claims.db").exists()


def test_the_spec_command_and_the_report_show_the_roles(tmp_path: Path) -> None:
    import json

    shown = CliRunner().invoke(main, ["spec", "claim", "--json"])
    assert shown.exit_code == 0, shown.output
    events = json.loads(shown.stdout)["events"]
    assert {e: d["remote"] for e, d in events.items() if d["remote"]} == {
        "confirm": "answered",
        "timeout": "unanswered",
        "retry": "resends",
    }
    out = tmp_path / "report.html"
    written = CliRunner().invoke(main, ["report", "claim", "--out", str(out), "--workers", "1"])
    assert written.exit_code == 0, written.output
    page = out.read_text()
    assert "<th>remote</th>" in page and "<td>unanswered</td>" in page


ENDS = 'work = "ends"'


@pytest.mark.parametrize(
    ("old", "new", "count", "says"),
    [
        # one role, where every event that ends the work needs one
        (ENDS, ENDS + '\nremote = "answered"', 1, "events ['fail'] end the work but declare no"),
        # a resend takes the epoch over: its resender holds it with a token of its own
        (
            'by = "operator"',
            'by = "operator"\nremote = "resends"\ndurable = true',
            1,
            "it sets fresh_token",
        ),
        # only the client that sent the request hears its answer
        ('by = "sweep"', 'by = "sweep"\nremote = "answered"', 1, "['lapse'] declare a remote role"),
        # both ends give up waiting: nothing is ever answered
        (ENDS, ENDS + '\nremote = "unanswered"', -1, 'no event declares remote = "answered"'),
    ],
)
def test_a_lifecycle_s_remote_is_refused_by_name_where_it_cannot_run(
    tmp_path: Path, old: str, new: str, count: int, says: str
) -> None:
    """A lifecycle of your own may declare a remote (docs/declarations.md); the roles it
    gives must let the checker's world run it, or ``check`` and the store refuse it, by
    name, before anything is created."""
    job = (declarations_dir() / "job.toml").read_text()
    path = tmp_path / "job.toml"
    path.write_text(job.replace(old, new, count))
    assert path.read_text() != job
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 1 and says in result.output, result.output
    assert str(path) in result.output and "Traceback" not in result.output
    with pytest.raises(SpecError, match=re.escape(says)):
        open_entity_store(load_spec(path), f"sqlite:///{tmp_path / 'jobs.db'}")
    assert not (tmp_path / "jobs.db").exists()
