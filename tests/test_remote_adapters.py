"""Writing a Remote adapter: the Dispatcher checks the whole contract when it is built, and
an adapter that cannot take the request fails before anything could be sent, leaving the
target free. The contract is docs/remote-adapters.md; its example adapter runs here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from claimfsm import Dispatcher, InvalidArgument, InvalidRemote, Remote, SendRequest, check_remote
from claimfsm.store import Store

from .conftest import approved_draft

DOC = Path(__file__).parent.parent / "docs" / "remote-adapters.md"


class Good:
    fences_epochs = True
    dedups_by_key = False

    def __init__(self) -> None:
        self.sent: list[SendRequest] = []
        self.fenced: dict[str, int] = {}

    def send(self, request: SendRequest) -> None:
        self.sent.append(request)

    def readback(self, target_id: str, idempotency_key: str, epoch: int) -> bool:
        return any(r.idempotency_key == idempotency_key for r in self.sent)

    def fence(self, target_id: str, epoch: int) -> None:
        self.fenced[target_id] = epoch


def test_a_complete_adapter_passes_and_dispatches(store: Store) -> None:
    check_remote(Good())
    approved_draft(store, "t")
    result = Dispatcher(store, Good(), owner="w").dispatch_next("t")
    assert result.outcome == "confirmed"


def test_a_misspelled_flag_on_a_remote_subclass_is_named_with_the_near_miss(
    store: Store,
) -> None:
    class Misspelled(Remote):  # subclasses the protocol: its annotations are not values
        fence_epochs = True  # sic
        dedups_by_key = False

        def send(self, request: SendRequest) -> None: ...
        def readback(self, target_id: str, idempotency_key: str, epoch: int) -> bool:
            return False

        def fence(self, target_id: str, epoch: int) -> None: ...

    with pytest.raises(InvalidRemote) as caught:
        Dispatcher(store, Misspelled(), owner="w")
    message = str(caught.value)
    assert "fences_epochs is missing" in message and "'fence_epochs'" in message
    assert isinstance(caught.value, InvalidArgument) and caught.value.problems


def test_missing_flags_and_methods_are_all_named_at_once(store: Store) -> None:
    class Bare:
        def send(self, request: SendRequest) -> None: ...

    with pytest.raises(InvalidRemote) as caught:
        Dispatcher(store, Bare(), owner="w")
    message = str(caught.value)
    for name in ("fences_epochs", "dedups_by_key", "readback", "fence"):
        assert name in message, name
    assert len(caught.value.problems) == 4


def test_wrong_signatures_stubs_and_non_bool_flags_are_refused(store: Store) -> None:
    class Wrong(Remote):
        fences_epochs = 1  # truthy, not a bool
        dedups_by_key = False

        def send(self, target_id: str, content: str) -> None: ...  # type: ignore[override]
        def readback(self, target_id: str) -> bool:  # type: ignore[override]
            return False

    with pytest.raises(InvalidRemote) as caught:
        Dispatcher(store, Wrong(), owner="w")
    problems = " | ".join(caught.value.problems)
    assert "fences_epochs must be True or False" in problems
    assert "send(target_id, content) cannot be called as send(request)" in problems
    assert "readback(target_id) cannot be called" in problems
    assert "fence is the Remote protocol's stub" in problems  # would 'succeed' sending nothing


def test_an_adapter_that_cannot_take_the_request_leaves_the_target_free(store: Store) -> None:
    """Could not have been sent: the claim is released, never left uncertain or sending."""
    remote = Good()
    dispatcher = Dispatcher(store, remote, owner="w")
    remote.send = lambda target_id, content: None  # type: ignore[assignment,method-assign,misc]
    approved_draft(store, "t")
    with pytest.raises(InvalidRemote, match="nothing was sent and the claim was released"):
        dispatcher.dispatch_next("t")
    claim = store.get_claim("t")
    assert claim is not None and claim.state == "released"
    assert [e.event for e in store.history("t")] == ["acquire", "release"]
    del remote.send  # fixed: the next dispatch takes the same draft
    assert dispatcher.dispatch_next("t").outcome == "confirmed"


def test_an_exception_inside_send_may_have_been_sent_so_the_claim_is_uncertain(
    store: Store,
) -> None:
    class Flaky(Good):
        def send(self, request: SendRequest) -> None:
            raise ConnectionResetError("reset after the request was written")

    approved_draft(store, "t")
    result = Dispatcher(store, Flaky(), owner="w").dispatch_next("t")
    assert result.outcome == "uncertain" and "ConnectionResetError" in result.detail


def test_the_documented_example_adapter_is_a_complete_adapter(store: Store) -> None:
    """The contract page's example is run, not just shown."""
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert code, "docs/remote-adapters.md has no Python example"
    namespace: dict[str, object] = {}
    exec(compile(code.group(1), str(DOC), "exec"), namespace)
    adapter = namespace["example_adapter"]()  # type: ignore[operator]
    check_remote(adapter)
    approved_draft(store, "t")
    dispatcher = Dispatcher(store, adapter, owner="w")
    assert dispatcher.dispatch_next("t").outcome == "confirmed"


def test_a_retry_that_cannot_be_sent_leaves_the_claim_uncertain_not_sending(store: Store) -> None:
    """The dedup retry builds and checks its request before retry commits sending."""

    class Dedup(Good):
        fences_epochs = False
        dedups_by_key = True

    remote = Dedup()
    dispatcher = Dispatcher(store, remote, owner="w")
    claim = store.acquire("t", approved_draft(store, "t"), "w", 30)
    claim.begin_send()
    claim.mark_uncertain("timeout")
    remote.send = lambda target_id, content: None  # type: ignore[assignment,method-assign,misc]
    with pytest.raises(InvalidRemote, match="cannot take the request"):
        dispatcher.reconcile("t")
    info = store.get_claim("t")
    assert info is not None and info.state == "uncertain"
    assert [e.event for e in store.history("t")][-1] == "timeout"  # no retry was recorded
