"""The crash and fault campaign of a lifecycle of your own (``claimfsm campaign job``).

The claim's harness (``_run``) with the declaration's workers (``_lifecycle_worker``):
worker processes take entities and run their work at the remote process, which here is
the executor (it fences epochs, or deduplicates request keys, or neither, as ``--remote``
says; some runs are slow and outlive the worker's patience and its lease). Workers are
SIGKILLed after a take, after the start, during the run and after the executor's answer,
stall past their lease, and wake up with their saved handle; on PostgreSQL backends are
terminated and the server restarts, as in the claim's campaign.

The harness's sweeper is the store's sweep (every ``by = "sweep"`` event) and the
operator: each operator event that leaves an entity's state is tried as is, and where the
store refuses it, again with the evidence its guards read, gathered from the executor
(``fenced_through`` by fencing it through the entity's epoch, where it fences and a guard
reads the fence; ``running`` by asking it, after the fence where there is one).
Afterwards it judges the executor's log against the declared invariants and audits the
store (``_lifecycle_verdict``).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

from claimfsm.audit import audit_lifecycle
from claimfsm.campaign._config import CampaignConfig
from claimfsm.campaign._lifecycle_verdict import judge_lifecycle
from claimfsm.campaign._lifecycle_worker import (
    KILL_POINTS,
    WorkPlan,
    entity_key,
    lifecycle_worker_main,
)
from claimfsm.campaign._remote import RemoteClient, RemoteFaults
from claimfsm.campaign._run import _REMOTE_ERRORS, _Campaign
from claimfsm.errors import InvalidArgument, Refused, StoreError
from claimfsm.service import SendAmbiguous
from claimfsm.spec import Spec, lifecycle_facts, load_spec, runs_on_the_claim_model, shipped
from claimfsm.store import EntityRow, EntityStore, open_entity_store

T = TypeVar("T")
#: the fact a guard reads the executor's fence by: asking for it fences the executor
FENCE = "fenced_through"


def lifecycle_declaration(design: str) -> Spec:
    """The declaration ``design`` names (a built-in name or a path), where it is a
    lifecycle of your own that a campaign can run; else ``InvalidArgument`` saying why."""
    builtin = shipped()
    spec = builtin[design] if design in builtin else load_spec(Path(design))
    if runs_on_the_claim_model(spec):
        raise InvalidArgument(
            f"{design}: the claim protocol's campaign runs claim.toml through Dispatcher"
            " (claimfsm campaign, no declaration); a variant of it is the checker's to judge"
            " (claimfsm check) and verify's to run on a store (claimfsm verify)"
        )
    if spec.path is None:
        raise InvalidArgument(f"{design}: the workers load the declaration from its file")
    return spec


class LifecycleCampaign(_Campaign):
    kill_points = KILL_POINTS
    first_pause = "after-start"
    noun = "entity"

    def __init__(self, config: CampaignConfig) -> None:
        assert config.design is not None
        self.spec = lifecycle_declaration(config.design)
        #: what the workers do, read off the declaration: what it lacks for a campaign is
        #: said here, before anything starts
        self.plan = WorkPlan.of(self.spec)
        super().__init__(config)
        self.design = str(Path(str(self.spec.path)).resolve())
        self.design_name = self.spec.name
        self.targets = [entity_key(self.spec, n + 1) for n in range(config.targets)]
        self.facts = lifecycle_facts(self.spec)
        self.operator_fences = 0
        #: the operator's resends, per (entity, epoch)
        self.resent: Counter[tuple[str, int]] = Counter()

    # -- hooks of the claim's harness ------------------------------------------------------
    def entry(self) -> Any:
        return lifecycle_worker_main

    def remote_faults(self) -> RemoteFaults:
        lease = self.c.lease_seconds
        return self.c.faults or RemoteFaults(slow=0.1, slow_seconds=(1.5 * lease, 2.5 * lease))

    def sends(self) -> int:
        """Runs the workers began (ended, fenced, or left to their lease)."""
        return sum(
            self.outcomes[k] for k in ("ended", "fenced", "abandoned", "answered", "unanswered")
        )

    def goals_met(self) -> bool:
        """The claim's goals, and, where runs may be slow, a run that outlived its lease
        (the fault the declaration's lapse while the work runs is for)."""
        return super().goals_met() and (not self.remote_faults().slow or self.outlived())

    def outlived(self) -> bool:
        """Whether a run at the executor outlived the lease."""
        return self.log_shows("outlived", lambda r: r.ended - r.started > self.c.lease_seconds)

    def fence_goal(self) -> bool:
        """A stalled worker's late run must have met the fence where the operator fenced
        (a declaration that never asks for the fence has none to meet)."""
        return self.c.remote == "fencing" and self.operator_fences > 0

    def open_admin(self) -> EntityStore:
        return open_entity_store(self.spec, self.store_url("admin"))

    def before_workers(self, admin: Any) -> None:
        pass  # the entities are the workers' to take: a taker's event creates the row

    def judged(self, admin: Any, log: list[Any]) -> Any:
        return judge_lifecycle(
            self.spec, admin.rows(), admin.iter_history(), log, self.c.lease_seconds, self.c.remote
        )

    def audited(self) -> Any:
        return audit_lifecycle(self.spec, self.store_url("audit"), keep=5)

    # -- the sweep and the operator --------------------------------------------------------
    def sweeper(self) -> None:
        store = open_entity_store(self.spec, self.store_url("sweeper"))
        executor = self.remote_client()
        try:
            while not self.stop.wait(self.c.lease_seconds / 4):
                try:
                    store.sweep()
                    self.operate(store, executor)
                except (StoreError, *_REMOTE_ERRORS):
                    self.sweeper_errors += 1
                    time.sleep(0.1)
        finally:
            executor.close()
            store.close()

    def operate(self, store: EntityStore, executor: RemoteClient) -> int:
        """Each operator event that leaves an entity's state, tried as is, then with the
        evidence its guards read; how many it applied."""
        applied = 0
        for row in store.rows():
            asked: dict[str, Any] = {}  # the executor's evidence on this row, asked once
            for event in self.spec.events_by("operator"):
                if row.state not in self.spec.sources(event):
                    continue
                if self.spec.remote_role(event) == "resends":
                    done = self.resend(store, executor, row, event, asked)
                elif "fresh_token" in getattr(self.spec.effects.get(event), "sets", ()):
                    continue  # a take-over that sends nothing: not the operator's to take
                else:
                    done = self.judged_event(store, executor, row, event, asked)
                if done:
                    applied += 1
                    break
        return applied

    def judged_event(
        self,
        store: EntityStore,
        executor: RemoteClient,
        row: EntityRow,
        event: str,
        asked: dict[str, Any],
    ) -> bool:
        """``event`` on ``row`` (as is, then with the executor's evidence); whether it was
        applied."""

        def call(facts: dict[str, Any] | None, how: str) -> str:
            return store.operate(row.key, event, epoch=row.epoch, facts=facts, detail=how)

        return self.tried(executor, row, event, asked, call) is not None

    def tried(
        self,
        executor: RemoteClient,
        row: EntityRow,
        event: str,
        asked: dict[str, Any],
        call: Callable[[dict[str, Any] | None, str], T],
    ) -> T | None:
        """``call(facts, detail)`` for ``event`` on ``row``: as is, then, refused, with the
        facts its guards read (``evidence``, each asked of the executor once per row:
        ``asked``; where the event is the first to read the fence, the executor is fenced
        and every fact it reads asked again after the fence); what it returned, or None:
        refused both ways, or its guards read no facts."""
        try:
            return call(None, "operator, as is")
        except Refused:
            pass
        read = {
            g.fact
            for t in self.spec.transitions
            if t.event == event and t.source == row.state
            for g in (self.spec.guards[name] for name in t.guards)
            if g.fact is not None
        }
        if not read:
            return None
        missing = read - asked.keys()
        if missing:
            asked.update(self.evidence(executor, row, read if FENCE in missing else missing))
        try:
            return call({k: v for k, v in asked.items() if k in read}, "operator, with evidence")
        except Refused:
            return None

    def resend(
        self,
        store: EntityStore,
        executor: RemoteClient,
        row: EntityRow,
        event: str,
        asked: dict[str, Any],
    ) -> bool:
        """A ``resends`` event: take the epoch over (with the evidence its guards read, if
        refused as is), send the request again and take the event its answer calls for, as
        a worker would; at most ``[world] retries`` times per epoch (default 1)."""
        if self.resent[(row.key, row.epoch)] >= int(self.spec.world.get("retries", 1)):
            return False
        handle = self.tried(
            executor,
            row,
            event,
            asked,
            lambda facts, how: store.take_over(
                row.key,
                event,
                owner="operator",
                lease_seconds=self.c.lease_seconds,
                facts=facts,
                detail=how,
            ),
        )
        if handle is None:
            return False
        self.resent[(row.key, row.epoch)] += 1
        try:
            result = executor.run(handle.key, handle.epoch, handle.request_key)
        except SendAmbiguous:
            result = "unanswered"
        then, _ = self.plan.after(result, self.rng)
        if then is not None:
            with contextlib.suppress(Refused):  # its lease lapsed meanwhile: the sweep's
                store.act(handle, then, lease_seconds=self.c.lease_seconds, detail=result)
        return True

    def evidence(
        self, executor: RemoteClient, row: EntityRow, wanted: Collection[str]
    ) -> dict[str, Any]:
        """The ``wanted`` facts on ``row``, as the executor gives them: fenced through the
        row's epoch where the executor fences (first, so that nothing at or below can
        still run; only where a guard asks for the fence: a design is given no fence it
        never asked for, which would turn away the late run that makes it wrong), whether
        a run of that epoch reached it, whether one is running there now (asked after:
        a run arriving in between is then seen running), whether it deduplicates, and
        readback's
        ``outcome``: whether a request with the row's request key took effect there."""
        facts: dict[str, Any] = {}
        if FENCE in wanted and self.c.remote == "fencing":
            executor.fence(row.key, row.epoch)  # returns once no run at or below can land
            self.operator_fences += 1
            facts[FENCE] = row.epoch
        if "ran" in wanted:  # before running: a run that arrives between is seen running
            facts["ran"] = executor.ran(row.key, row.epoch)
        if "running" in wanted:
            facts["running"] = executor.running(row.key, row.epoch)
        if "remote_dedups" in wanted:
            facts["remote_dedups"] = self.c.remote == "dedup"
        if "outcome" in wanted and "outcome" in self.facts:
            landed = executor.readback(row.key, row.request_key or row.key, row.epoch)
            facts["outcome"] = "present" if landed else "absent"
        return {k: v for k, v in facts.items() if k in self.facts}

    def close_out(self, store: Any, remote: RemoteClient) -> None:
        """Let leases lapse and runs finish, then sweep and operate until nothing moves."""
        time.sleep(self.c.lease_seconds + 0.1)
        remote.quiet(30)
        for _ in range(20):
            try:
                swept = store.sweep()
                applied = self.operate(store, remote)
            except (StoreError, *_REMOTE_ERRORS):
                time.sleep(0.2)
                continue
            if not swept and not applied:
                return
