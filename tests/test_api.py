"""The public surface, the layering, and token secrecy."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

import claimfsm
from claimfsm.errors import ClaimFSMError, InvalidArgument, StaleClaim
from claimfsm.store import open_store

from .conftest import FakeClock, approved_draft

SRC = Path(claimfsm.__file__).parent
LAYERS = [
    "errors",
    "spec",
    "machine",
    "store",
    "audit",
    "metrics",
    "replay",
    "verify",
    "service",
    "demo",
    "campaign",
    "cli",
]


def test_exported_names_are_pinned_and_sorted() -> None:
    assert claimfsm.__all__ == sorted(claimfsm.__all__)
    assert set(claimfsm.__all__) == {
        "AsyncClaim",
        "AsyncDispatcher",
        "AsyncKeepAlive",
        "AsyncRemote",
        "AsyncStore",
        "Claim",
        "ClaimFSMError",
        "ClaimInfo",
        "ClaimMachine",
        "DeclarationMismatch",
        "DispatchResult",
        "Dispatcher",
        "Draft",
        "DraftChanged",
        "DraftNotApproved",
        "Event",
        "Evidence",
        "HistoryEntry",
        "IllegalTransition",
        "InsufficientEvidence",
        "InvalidArgument",
        "InvalidRemote",
        "KeepAlive",
        "LeaseExpired",
        "LeaseLost",
        "MemoryStore",
        "NotFound",
        "Refused",
        "Remote",
        "SQLiteStore",
        "SchemaVersionError",
        "SendAmbiguous",
        "SendRejected",
        "SendRequest",
        "SimulatedRemote",
        "Spec",
        "SpecError",
        "StaleClaim",
        "State",
        "Store",
        "StoreBusy",
        "StoreError",
        "TargetBusy",
        "Transitioned",
        "UsageError",
        "__version__",
        "check_remote",
        "claim_machine",
        "claim_spec",
        "load_spec",
        "open_store",
    }
    for name in claimfsm.__all__:
        assert hasattr(claimfsm, name)


def test_every_exception_is_under_one_root() -> None:
    from claimfsm import errors

    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert all(issubclass(c, ClaimFSMError) for c in classes)
    assert issubclass(InvalidArgument, TypeError) and issubclass(InvalidArgument, ValueError)


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("claimfsm"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("claimfsm")}
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_dependencies_run_one_way(layer: str) -> None:
    """spec -> machine -> store -> (audit, replay, verify) -> service -> demo, campaign -> cli;
    nothing
    imports a later layer. The checker sits beside them on the spec alone (the test below)."""
    later = LAYERS[LAYERS.index(layer) + 1 :]
    files = (
        [SRC / f"{layer}.py"]
        if (SRC / f"{layer}.py").exists()
        else list((SRC / layer).rglob("*.py"))
    )
    assert files
    for f in files:
        for module in _imports(f):
            parts = module.split(".")
            if len(parts) > 1:
                assert parts[1] not in later, f"{f.relative_to(SRC)} imports {module}"


def test_tokens_never_appear_in_output_logs_or_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = FakeClock()
    store = open_store(f"sqlite:///{tmp_path / 'c.sqlite'}", clock=clock)
    a = store.acquire("acct", approved_draft(store), "w", 10)
    clock.advance(11)
    b = store.acquire("acct", approved_draft(store), "w2", 10)
    with pytest.raises(StaleClaim) as caught:
        a.begin_send()
    texts = [repr(a), repr(b), str(caught.value), repr(store.get_claim("acct"))]
    texts += [repr(e) for e in store.history()]
    print(*texts)
    out = capsys.readouterr()
    everything = "\n".join([*texts, caplog.text, out.out, out.err])
    assert a.token not in everything and b.token not in everything
    assert a.token_fingerprint in repr(a)
    store.close()


def test_checker_depends_only_on_the_declaration() -> None:
    for f in (SRC / "checker").rglob("*.py"):
        for module in _imports(f):
            assert module.split(".")[1] in ("spec", "errors", "checker"), f"{f.name}: {module}"


def test_checking_loads_neither_the_stores_nor_the_service() -> None:
    """`claimfsm check` runs on every change: it starts with the declaration and the
    checker alone. The package's other names load when first used, and are the same objects
    as their modules'."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from claimfsm.cli import main\n"
        "try:\n"
        "    main(['check', '--workers', '1', '--epochs', '1'])\n"
        "except SystemExit as done:\n"
        "    assert done.code == 0, done.code\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('transitions', 'psycopg', 'httpx', 'hypothesis')"
        " or m.split('.')[:2] in (['claimfsm', 'store'], ['claimfsm', 'service'],"
        " ['claimfsm', 'machine'], ['claimfsm', 'demo'], ['claimfsm', 'campaign']))\n"
        "print('LOADED', loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stdout, done.stdout[-400:]

    from claimfsm.service import Dispatcher
    from claimfsm.store import SQLiteStore

    assert claimfsm.Dispatcher is Dispatcher and claimfsm.SQLiteStore is SQLiteStore
    assert set(claimfsm.__all__) <= set(dir(claimfsm))
    with pytest.raises(AttributeError, match="no attribute 'Nonesuch'"):
        claimfsm.Nonesuch  # noqa: B018
