"""The example service (examples/dispatch_service.py), started as a user would start it:
it dispatches every draft once through the HTTP remote, serves its metrics, and on
SIGTERM finishes the sends in hand and exits 0 without leaving a claim in ``sending``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from claimfsm.audit import audit
from claimfsm.store import open_store

from .test_http_remote import Service as Receiver

httpx = pytest.importorskip("httpx")

SERVICE = Path(__file__).parent.parent / "examples" / "dispatch_service.py"
WAIT = 60.0


def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


class Running:
    def __init__(self, *args: str, cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVICE), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read() if self.proc.stderr else ""
        self.ready: dict[str, Any] = json.loads(line)

    def metrics(self) -> str:
        port = self.ready["metrics_port"]
        return str(httpx.get(f"http://127.0.0.1:{port}/metrics").text)

    def terminate(self) -> tuple[int, dict[str, Any], str]:
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=WAIT)
        return self.proc.returncode, json.loads(out.strip().splitlines()[-1]), err


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in the metrics")


def test_it_dispatches_every_draft_once_and_serves_its_metrics(url: str, tmp_path: Path) -> None:
    service = Running("--demo-receiver", "fencing", "--seed", "12", "--db", url, cwd=tmp_path)
    store = open_store(url)
    try:
        drafts = [d for n in range(4) for d in store.drafts(f"demo-{n}")]
        assert len(drafts) == 12
        until(lambda: all(store.get_draft(d.draft_id).status == "dispatched" for d in drafts))
        effects = httpx.get(f"{service.ready['remote']}/_effects").json()
        assert len(effects["effects"]) == 12 and effects["overlaps"] == 0
        text = service.metrics()
        confirm = 'claimfsm_transitions_total{event="confirm",outcome="ok"}'
        assert metric(text, confirm) == 12
        assert metric(text, "claimfsm_claims_uncertain") == 0
        code, final, err = service.terminate()
        assert code == 0, err
        assert final["sending"] == [] and final["confirmed"] == 12
        assert "begin_send" in err and "token" not in err.lower().replace("token=", "")
        found = audit(url)
        assert found.ok and found.entries > 0
    finally:
        if service.proc.poll() is None:
            service.proc.kill()
        store.close()


def test_sigterm_finishes_the_sends_in_hand_and_leaves_nothing_sending(tmp_path: Path) -> None:
    receiver = Receiver("fencing")
    db = f"sqlite:///{tmp_path / 'claims.sqlite'}"
    try:
        receiver.faults("slow", "slow", "slow", "slow")  # each send held 1.5 s
        service = Running(
            *("--remote", receiver.url, "--seed", "4", "--db", db, "--timeout", "5"),
            cwd=tmp_path,
        )
        store = open_store(db)
        until(lambda: bool(store.claims(state="sending")))  # a send is on the wire
        code, final, err = service.terminate()
        assert code == 0, err
        assert final["sending"] == [] and store.claims(state="sending") == []
        in_hand = sum(v for k, v in final.items() if k in ("confirmed", "uncertain"))
        assert in_hand >= 1 and final.get("confirmed", 0) >= 1  # finished, not abandoned
        effects = receiver.effects()
        assert len(effects["effects"]) == in_hand and effects["overlaps"] == 0
        assert audit(db).ok
        store.close()
    finally:
        receiver.stop()


def test_bad_arguments_get_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SERVICE), "--db", "sqlite:///x.sqlite"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and "exactly one of --remote URL and --demo-receiver" in done.stderr
    assert not (tmp_path / "x.sqlite").exists()
