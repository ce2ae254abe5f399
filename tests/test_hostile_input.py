"""Hostile input, generated: every public call and every CLI command gets wrong types, empty
and huge values, control characters, unpaired surrogates, non-UTF-8 bytes, SQL fragments,
negative and NaN leases, tokens of the wrong length and another claim's token.

A refused call raises a ClaimFSMError subclass and leaves the database byte-for-byte as it
was (SQLite: the database and WAL files' bytes; the other backends: everything the public
reads return). The one documented exception is a stale owner's call (another claim's
token): docs/design.md requires it to append a ``discard`` record, and it changes nothing else.
A command-line error is one line (``Error: ...``) with a non-zero exit, never a traceback.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claimfsm.cli import main
from claimfsm.errors import ClaimFSMError, StaleClaim
from claimfsm.spec import designs
from claimfsm.store import SQLiteStore, Store

from .conftest import Backend, approved_draft
from .test_bad_input import calls, dump

SQL_FRAGMENTS = [
    "'; DROP TABLE claims; --",
    "acct' OR '1'='1",
    "1; DELETE FROM history",
    "%(target_id)s",
    ":target_id",
    "?",
    'acct") --',
    "claims.state IN ('confirmed')",
]

#: Anything a caller might pass by mistake or by malice.
HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=-1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, -math.inf, -1.0, 0.0, -0.0, 1e308, 5e-324]),
    st.text(max_size=50),
    st.text(alphabet=st.characters(categories=["Cc", "Cs", "Zl", "Zp", "Cf"]), max_size=8),
    st.binary(max_size=20),
    st.sampled_from(SQL_FRAGMENTS),
    st.sampled_from(["", " ", "x" * 201, "y" * 100_000, "é" * 43, "a" * 42, "b" * 44]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.builds(object),
)


def file_bytes(store: Store) -> object:
    """Byte-for-byte: the SQLite database and WAL files; elsewhere, every public read."""
    if isinstance(store, SQLiteStore):
        return [
            Path(f"{store.path}{suffix}").read_bytes()
            if Path(f"{store.path}{suffix}").exists()
            else b""
            for suffix in ("", "-wal")
        ]
    return dump(store)


def rows(store: Store) -> object:
    """Every claim and draft (what a stale call must not change)."""
    return store.claims(), [store.drafts(t) for t in ("acct", "acct2", "other")]


@pytest.fixture
def seeded(backend: Backend) -> tuple[Store, Any, Any]:
    store = backend.open()
    claim = store.acquire("acct", approved_draft(store), "w", 30)
    other = store.acquire("other", approved_draft(store, "other"), "w2", 30)
    return store, claim, other


def _names() -> list[str]:
    class _Stub:
        draft_id = epoch = 1
        token = "t" * 43

    return sorted(calls(None, _Stub()))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", _names())
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=HOSTILE)
def test_every_public_call_refuses_hostile_values_and_changes_nothing(
    seeded: tuple[Store, Any, Any], name: str, value: Any
) -> None:
    store, claim, _ = seeded
    call = calls(store, claim)[name]
    before, rows_before, history = file_bytes(store), rows(store), store.history()
    try:
        call(value)
    except StaleClaim:  # a well-formed epoch or token that is not current: one discard record
        added = store.history()[len(history) :]
        assert [e.event for e in added] == ["discard"], (name, value)
        assert rows(store) == rows_before, (name, value)
        return
    except ClaimFSMError as exc:
        assert str(exc) and "\n" not in str(exc)
        assert file_bytes(store) == before, (name, value)
        return
    except Exception as exc:  # anything else is a defect: a driver's or Python's own error
        pytest.fail(f"{name}({value!r}) raised {type(exc).__name__}: {exc}")
    # Accepted: only where the value is valid, and then stored verbatim.
    if name.endswith(".target") and name.startswith(("create_draft", "acquire")):
        assert isinstance(value, str) and value in {c.target_id for c in store.claims()} | {
            d.target_id for d in store.drafts(value)
        }


def test_sql_fragments_are_data_round_tripped_verbatim(backend: Backend) -> None:
    store = backend.open()
    for i, fragment in enumerate(SQL_FRAGMENTS):
        draft = store.create_draft(fragment, fragment)
        store.approve_draft(draft.draft_id)
        claim = store.acquire(fragment, draft.draft_id, f"owner {fragment}"[:100], 30)
        claim.begin_send()
        claim.mark_uncertain(fragment)
        assert store.get_draft(draft.draft_id).content == fragment
        assert store.get_claim(fragment).owner == f"owner {fragment}"[:100]  # type: ignore[union-attr]
        assert store.history(fragment)[-1].detail == fragment
        assert len(store.claims()) == i + 1  # every table still there, nothing deleted


def test_another_claims_token_is_stale_and_only_a_discard_is_recorded(
    seeded: tuple[Store, Any, Any],
) -> None:
    store, claim, other = seeded
    claims_before, drafts_before = store.claims(), [store.drafts(t) for t in ("acct", "other")]
    history_before = store.history()
    with pytest.raises(StaleClaim):
        store.resume("acct", claim.epoch, other.token)  # a real token, of another claim
    assert store.claims() == claims_before
    assert [store.drafts(t) for t in ("acct", "other")] == drafts_before
    added = store.history()[len(history_before) :]
    assert [e.event for e in added] == ["discard"] and added[0].target_id == "acct"
    assert added[0].token_fingerprint == other.token_fingerprint  # who tried: auditable


# -- the command line ---------------------------------------------------------------------------
# A real command line cannot carry a NUL byte (argv is C strings), so none is generated.
CLI_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(
        alphabet=st.characters(categories=["Cc", "Cf", "Zl"], exclude_characters="\x00"),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(
        [*SQL_FRAGMENTS, "", "-1", "nan", "1e999", "-0", "NaN", "sqlite://", "x" * 5000]
    ),
).filter(lambda v: "\x00" not in v)


def assert_clean_cli_result(result: Any, args: list[str]) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.exception,
    )
    assert "Traceback" not in result.output
    if result.exit_code != 0:
        errors = [line for line in result.output.splitlines() if line.startswith("Error")]
        assert len(errors) == 1, (args, result.output)


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "d.sqlite"
    store = SQLiteStore(path)
    claim = store.acquire("acct", approved_draft(store), "w", 30)
    claim.begin_send()
    store.close()
    return path


@settings(max_examples=60, deadline=None)
@given(target=CLI_TEXT, url_tail=CLI_TEXT)
def test_read_commands_refuse_hostile_arguments_and_write_nothing(
    demo_db: Path, target: str, url_tail: str
) -> None:
    runner = CliRunner()
    before = demo_db.read_bytes()
    for args in (
        ["history", "--db", f"sqlite:///{demo_db}", "--target", target],
        ["history", "--db", url_tail],
        ["claims", "--db", url_tail],
        ["claims", "--db", f"sqlite:///{demo_db}{url_tail}"],
        ["claims", "job", "--db", f"sqlite:///{demo_db}{url_tail}"],
        ["history", "job", "--db", url_tail, "--key", target],
        ["sweep", "job", "--db", url_tail],
        ["spec", url_tail or "x"],
    ):
        result = runner.invoke(main, args)
        assert_clean_cli_result(result, args)
    assert demo_db.read_bytes() == before


#: For every command, options that take a value, with values that must be refused at once
#: (so a valid value never starts a long run).
TYPED_OPTIONS = {
    "demo": ["--workers", "--targets", "--drafts", "--remote", "--seed"],
    "check": ["--design", "--workers", "--targets", "--max-depth", "--max-states", "--time-limit"],
    "diagram": ["--design"],
    "report": ["--workers", "--drafts", "--remote"],
    "campaign": ["--backend", "--remote", "--seconds", "--workers", "--targets", "--seed"],
    "prune": ["--older-than"],
}


def _never_valid(value: str) -> bool:
    """True if no option in TYPED_OPTIONS would accept ``value`` (so nothing long starts)."""
    try:
        return not math.isfinite(float(value))
    except ValueError:
        return value.strip() not in {
            *designs(),
            "all",  # diagram --design all: every design
            "claim",
            "fencing",
            "dedup",
            "plain",
            "sqlite",
            "postgresql",
        }


@settings(max_examples=40, deadline=None)
@given(value=CLI_TEXT.filter(_never_valid))
def test_every_command_refuses_malformed_options_in_one_line(value: str) -> None:
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as empty, contextlib.chdir(empty):
        for command, options in TYPED_OPTIONS.items():
            for option in options:
                args = [command, option, value]
                result = runner.invoke(main, args)
                assert result.exit_code != 0, args
                assert_clean_cli_result(result, args)
                assert list(Path().iterdir()) == [], args  # nothing created


def test_non_utf8_bytes_on_the_command_line_are_one_line_errors(demo_db: Path) -> None:
    before = demo_db.read_bytes()
    exe = [str(Path(sys.executable).parent / "claimfsm")]
    for args in (
        [b"history", b"--db", b"sqlite:///\xff\xfe.sqlite"],
        [b"history", b"--db", b"sqlite:///" + bytes(demo_db) + b"\xff"],
        [b"claims", b"--db", b"postgresql://\xff@127.0.0.1:1/x"],
        [b"check", b"--design", b"\xc3\x28"],
        [b"campaign", b"--remote", b"\x80"],
    ):
        done = subprocess.run([*(a.encode() for a in exe), *args], capture_output=True, timeout=60)
        assert done.returncode != 0, args
        err = done.stderr.decode("utf-8", "replace")
        assert "Traceback" not in err, (args, err)
        assert len([line for line in err.splitlines() if line.startswith("Error")]) == 1, err
    assert demo_db.read_bytes() == before


@settings(max_examples=60, deadline=None)
@given(owner=HOSTILE, lease=HOSTILE, mode=HOSTILE, epoch=HOSTILE)
def test_service_constructors_refuse_hostile_values(
    owner: Any, lease: Any, mode: Any, epoch: Any
) -> None:
    """The Dispatcher, the simulated remote and readback evidence check what they are given
    when they are built, not later in the middle of a dispatch."""
    from claimfsm.service import Dispatcher, SimulatedRemote
    from claimfsm.store import Evidence, open_store

    store = open_store("memory://")
    for build in (
        lambda: Dispatcher(store, SimulatedRemote(), owner=owner, lease_seconds=30),
        lambda: Dispatcher(store, SimulatedRemote(), owner="w", lease_seconds=lease),
        lambda: Dispatcher(store, mode, owner="w"),
        lambda: Dispatcher(mode, SimulatedRemote(), owner="w"),
        lambda: SimulatedRemote(mode),
        lambda: Evidence.absent_fenced(epoch),
    ):
        try:
            build()
        except ClaimFSMError as exc:
            assert str(exc)
        except Exception as exc:
            pytest.fail(f"{type(exc).__name__}: {exc}")
