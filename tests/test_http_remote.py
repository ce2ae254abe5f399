"""HttpRemote against a real receiving service in its own process (examples/receiver.py),
with every failure happening on the wire: slow replies past the client's timeout,
connections reset after the request was read, 5xx after the effect was applied, lost
responses. After each, the claim is uncertain and reconciliation finds the truth."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from claimfsm.errors import InvalidArgument
from claimfsm.service import (
    Dispatcher,
    HttpRemote,
    RemoteUnavailable,
    SendAmbiguous,
    SendRejected,
    SendRequest,
    check_remote,
)
from claimfsm.store import Store, open_store

httpx = pytest.importorskip("httpx")

SERVER = Path(__file__).parent.parent / "examples" / "receiver.py"


class Service:
    def __init__(self, mode: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), mode], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def faults(self, *names: str) -> None:
        httpx.post(f"{self.url}/_faults", json=list(names)).raise_for_status()

    def effects(self) -> dict[str, Any]:
        found: dict[str, Any] = httpx.get(f"{self.url}/_effects").json()
        return found

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(params=["fencing", "dedup"])
def service(request: pytest.FixtureRequest) -> Iterator[Service]:
    s = Service(request.param)
    yield s
    s.stop()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'claims.sqlite'}")
    yield s
    s.close()


def remote_for(service: Service, mode: str | None = None) -> HttpRemote:
    mode = mode or service.proc.args[-1]  # type: ignore[index]
    return HttpRemote(
        service.url,
        fences_epochs=mode == "fencing",
        dedups_by_key=mode == "dedup",
        timeout=0.5,  # the server's slow fault holds a request for 1.5 s
    )


def queue_draft(store: Store, target: str = "acct/42") -> int:
    draft = store.create_draft(target, "hello")
    store.approve_draft(draft.draft_id)
    return draft.draft_id


def test_a_dispatch_carries_key_and_epoch_and_is_confirmed(service: Service, store: Store) -> None:
    remote = remote_for(service)
    check_remote(remote)
    result = Dispatcher(store, remote, owner="w").dispatch_next(queue_draft(store) and "acct/42")
    assert result.outcome == "confirmed"
    (effect,) = service.effects()["effects"]
    assert effect["target"] == "acct/42"  # a target with a slash, quoted on the wire
    assert effect["key"] == result.claim.idempotency_key  # type: ignore[union-attr]
    assert effect["epoch"] == result.claim.epoch == 1  # type: ignore[union-attr]
    assert effect["content"] == "hello"
    remote.close()


@pytest.mark.parametrize(
    ("fault", "applied"), [("slow", True), ("reset", False), ("5xx", True), ("lost", True)]
)
def test_every_wire_failure_leaves_the_claim_uncertain_and_readback_decides(
    service: Service, store: Store, fault: str, applied: bool
) -> None:
    remote = remote_for(service)
    dispatcher = Dispatcher(store, remote, owner="w")
    queue_draft(store)
    service.faults(fault)
    result = dispatcher.dispatch_next("acct/42")
    assert result.outcome == "uncertain", result.detail
    assert "SendAmbiguous" in [e.detail.split(":")[0] for e in store.history("acct/42")][-1]
    if fault == "slow":  # still on its way: wait until it lands (or is refused)
        deadline = 50
        while not service.effects()["effects"] and deadline:
            time.sleep(0.1)
            deadline -= 1
    resolution = dispatcher.reconcile("acct/42")
    info = store.get_claim("acct/42")
    assert info is not None
    if applied:
        assert resolution == "present" and info.outcome == "present"
    elif remote.fences_epochs:
        assert resolution == "absent" and (info.state, info.outcome) == ("reconciled", "absent")
    else:  # dedup: the same key is sent again, and lands once
        assert resolution == "retried" and info.state == "confirmed"
    effects = service.effects()
    landed = 0 if not applied and remote.fences_epochs else 1
    assert len(effects["effects"]) == landed  # at most once, whatever happened on the wire
    assert effects["overlaps"] == 0
    remote.close()


def test_a_fenced_epoch_is_rejected_and_a_late_send_cannot_land() -> None:
    service = Service("fencing")
    try:
        remote = remote_for(service, "fencing")
        old = SendRequest("t", 1, 1, "cf-1-v1-aaaa", "old")
        remote.fence("t", 1)
        with pytest.raises(SendRejected, match="fenced"):
            remote.send(old)
        service.faults("slow")  # epoch 2 is held past the timeout, then fenced meanwhile
        with pytest.raises(SendAmbiguous, match="no answer"):
            remote.send(SendRequest("t", 2, 2, "cf-2-v1-bbbb", "late"))
        remote.fence("t", 2)
        assert remote.readback("t", "cf-2-v1-bbbb", 2) is False
        for _ in range(200):  # until the held request reaches the fence check (bounded)
            if service.effects()["rejected"] == 2:
                break
            time.sleep(0.05)
        assert service.effects()["rejected"] == 2  # the late send arrived, and was refused
        assert remote.readback("t", "cf-2-v1-bbbb", 2) is False
        assert service.effects()["effects"] == []
    finally:
        service.stop()


def test_a_deduping_service_applies_a_key_once() -> None:
    service = Service("dedup")
    try:
        remote = remote_for(service, "dedup")
        request = SendRequest("t", 1, 1, "cf-1-v1-aaaa", "once")
        service.faults("lost")  # applied, answer lost
        with pytest.raises(SendAmbiguous):
            remote.send(request)
        remote.send(request)  # the retry with the same key: acknowledged, not applied again
        assert len(service.effects()["effects"]) == 1
    finally:
        service.stop()


def test_an_unreachable_remote(tmp_path: Path) -> None:
    remote = HttpRemote("http://127.0.0.1:9", fences_epochs=True, dedups_by_key=False, timeout=2)
    with pytest.raises(SendAmbiguous, match="connection failed"):
        remote.send(SendRequest("t", 1, 1, "k", "x"))
    with pytest.raises(RemoteUnavailable):
        remote.readback("t", "k", 1)
    with pytest.raises(RemoteUnavailable):
        remote.fence("t", 1)


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="base_url"):
        HttpRemote("ftp://x", fences_epochs=True, dedups_by_key=False)
    with pytest.raises(InvalidArgument, match="fences_epochs"):
        HttpRemote("http://x", fences_epochs=1, dedups_by_key=False)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="timeout"):
        HttpRemote("http://x", fences_epochs=True, dedups_by_key=False, timeout=0)
