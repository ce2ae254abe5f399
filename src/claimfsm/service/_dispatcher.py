"""The embedding helper: what a service calls to dispatch drafts through claims."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from claimfsm.errors import (
    DraftNotApproved,
    IllegalTransition,
    InvalidArgument,
    InvalidRemote,
    LeaseExpired,
    Refused,
    StaleClaim,
    TargetBusy,
)
from claimfsm.service._remote import (
    PROBE_REQUEST,
    Remote,
    SendRequest,
    check_remote,
    shown,
)
from claimfsm.spec import State
from claimfsm.store import Claim, ClaimInfo, Evidence, Store
from claimfsm.store import _validate as check

#: Called at each step with the step name and the handle: "acquired" (reserved),
#: "sending" (intent committed, before the remote call) and "sent" (acknowledged, before
#: confirm). Tests and demos raise from it to simulate a crash at that point.
StepHook = Callable[[str, Claim], None]

Outcome = Literal["confirmed", "uncertain", "busy", "idle", "lost"]
Resolution = Literal["present", "absent", "retried", "unresolved", "not-uncertain"]


@dataclass(frozen=True, slots=True)
class DispatchResult:
    outcome: Outcome  # confirmed, uncertain, busy (target taken), idle (nothing approved), lost
    claim: Claim | None = None
    detail: str = ""


class Dispatcher:
    """Dispatches approved drafts for targets, one claim at a time, through ``store``.

    ``dispatch_next(target)``: acquire the oldest approved draft's target, record the intent
    to send (``begin_send``), call ``remote.send`` with the idempotency key and epoch, then
    confirm on an acknowledgement or mark uncertain on any error. ``reconcile(target)``
    resolves an uncertain claim by readback (fencing the remote first when the effect is
    absent), or by a same-key retry when the remote deduplicates by key.
    """

    def __init__(
        self,
        store: Store,
        remote: Remote,
        *,
        owner: str,
        lease_seconds: float = 30.0,
        on_step: StepHook | None = None,
    ) -> None:
        if not isinstance(store, Store):
            raise InvalidArgument("store must be a claimfsm Store (open one with open_store)")
        check_remote(remote)  # all of the contract, now: not a surprise at the first reconcile
        check.text_id(owner, "owner", max_length=100)
        check.lease(lease_seconds)
        if on_step is not None and not callable(on_step):
            raise InvalidArgument("on_step must be None or a callable (step name, claim)")
        self.store = store
        self.remote = remote
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.on_step = on_step
        self._checked_send: object = getattr(
            remote.send, "__func__", remote.send
        )  # by check_remote

    def dispatch_next(self, target_id: str) -> DispatchResult:
        for draft in self.store.drafts(target_id, status="approved"):
            try:
                claim = self.store.acquire(
                    target_id, draft.draft_id, self.owner, self.lease_seconds
                )
            except TargetBusy as exc:
                return DispatchResult("busy", detail=str(exc))
            except DraftNotApproved:
                continue  # dispatched or edited since we listed it: try the next one
            return self.send(claim)
        return DispatchResult("idle")

    def send(self, claim: Claim) -> DispatchResult:
        """Send what ``claim`` pinned: begin_send, remote call, confirm or mark uncertain.

        What can fail before any request could leave (reading the draft, building the
        request, an adapter whose ``send`` cannot take it) fails while the claim is still
        reserved: the claim is released, so the target is not stranded, and the error is
        raised. Once ``begin_send`` committed, any exception from ``send`` means the request
        may have left, and the claim becomes uncertain.
        """
        self._step("acquired", claim)
        try:
            request = self._request(
                claim.target_id, claim.draft_id, claim.epoch, claim.idempotency_key
            )
        except InvalidRemote:
            with contextlib.suppress(Refused, IllegalTransition):
                claim.release()
            raise
        try:
            claim.begin_send()  # durable before the remote may see anything
        except (StaleClaim, LeaseExpired) as exc:
            return DispatchResult("lost", claim, str(exc))
        except Refused as exc:  # the draft changed since acquire: give the claim back
            with contextlib.suppress(Refused, IllegalTransition):
                claim.release()  # superseded meanwhile: nothing of ours to give back
            return DispatchResult("lost", claim, str(exc))
        self._step("sending", claim)
        return self._call_remote(claim, request)

    def _request(self, target_id: str, draft_id: int, epoch: int, key: str) -> SendRequest:
        """The request for a pinned draft, checked against the adapter's ``send``. Called
        before the commit that enters ``sending`` (begin_send then guards that the draft is
        still the pinned version; retry keeps the pinned version)."""
        request = SendRequest(
            target_id, draft_id, epoch, key, self.store.get_draft(draft_id).content
        )
        self._check_send()
        return request

    def _check_send(self) -> None:
        """``send`` takes a request. Checked when built (check_remote); again here only if
        the adapter's ``send`` was replaced since, so the hot path pays a comparison."""
        send = self.remote.send
        function = getattr(send, "__func__", send)
        if function is self._checked_send:
            return
        try:
            inspect.signature(send).bind(PROBE_REQUEST)
        except TypeError as exc:
            problem = f"{shown('send', send)} cannot take the request: {exc}"
            raise InvalidRemote(
                f"{type(self.remote).__name__}: {problem}; nothing was sent and the claim "
                "was released (docs/remote-adapters.md)",
                problems=[problem],
            ) from exc
        except ValueError:  # no signature to read: leave it to the call
            pass
        self._checked_send = function

    def _call_remote(self, claim: Claim, request: SendRequest) -> DispatchResult:
        try:
            self.remote.send(request)
        except Exception as exc:  # any error leaves the outcome unknown
            reason = f"{type(exc).__name__}: {exc}"[:500]
            try:
                claim.mark_uncertain(reason)
            except (Refused, IllegalTransition) as moved_on:
                # This worker stalled past its lease: the epoch was swept to uncertain, and
                # perhaps reconciled or superseded since. Readback settles (or settled) it.
                return DispatchResult("uncertain", claim, f"{reason}; {moved_on}")
            return DispatchResult("uncertain", claim, reason)
        self._step("sent", claim)
        try:
            claim.confirm()
        except (Refused, IllegalTransition) as exc:
            # The lease lapsed into uncertain first (and readback may have reconciled it).
            return DispatchResult("uncertain", claim, str(exc))
        return DispatchResult("confirmed", claim)

    def reconcile(self, target_id: str) -> Resolution:
        """Resolve the target's uncertain claim, if it has one, with evidence from the remote."""
        info = self.store.get_claim(target_id)
        if info is None or info.state != self.store.steps.state(State.UNCERTAIN):
            return "not-uncertain"
        try:
            return self._resolve(target_id, info)
        except (Refused, IllegalTransition):
            return "not-uncertain"  # another reconciler got there first

    def _resolve(self, target_id: str, info: ClaimInfo) -> Resolution:
        key, epoch = info.idempotency_key, info.epoch
        if self.remote.readback(target_id, key, epoch):
            self.store.reconcile(target_id, epoch, Evidence.present())
            return "present"
        if self.remote.fences_epochs:
            self.remote.fence(target_id, epoch)
            # Read again: a send in flight could have landed between the readback and the fence.
            if self.remote.readback(target_id, key, epoch):
                self.store.reconcile(target_id, epoch, Evidence.present())
                return "present"
            self.store.reconcile(target_id, epoch, Evidence.absent_fenced(epoch))
            return "absent"
        if self.remote.dedups_by_key:
            # Built before the retry commits sending: an adapter that cannot take it fails
            # while the claim is still uncertain, not sending.
            request = self._request(target_id, info.draft_id, epoch, key)
            claim = self.store.retry(
                target_id,
                epoch,
                owner=self.owner,
                lease_seconds=self.lease_seconds,
                remote_dedups=True,
            )
            self._call_remote(claim, request)
            return "retried"
        return "unresolved"  # a plain remote: wait until readback finds the effect

    def reconcile_all(self) -> dict[str, Resolution]:
        """Reconcile every uncertain claim in the store."""
        return {
            c.target_id: self.reconcile(c.target_id)
            for c in self.store.claims(state=self.store.steps.state(State.UNCERTAIN))
        }

    def _step(self, name: str, claim: Claim) -> None:
        if self.on_step is not None:
            self.on_step(name, claim)
