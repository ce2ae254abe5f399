"""What a campaign is asked to do, and what it reports."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from claimfsm.campaign._lifecycle_verdict import LifecycleFindings
from claimfsm.campaign._remote import RemoteFaults
from claimfsm.campaign._verdict import Findings
from claimfsm.errors import InvalidArgument
from claimfsm.service import RemoteMode
from claimfsm.spec import REMOTE_MODES

Backend = Literal["sqlite", "postgresql"]


@dataclass(frozen=True)
class CampaignConfig:
    backend: Backend = "sqlite"
    remote: RemoteMode = "fencing"
    run_dir: Path = Path("campaign")
    postgres_url: str | None = None  # a database; the campaign makes and drops its own schema
    workers: int = 4
    targets: int = 4
    seconds: float = 10.0  # how long the workers run; with ``dispatches``, the limit
    # Drive by counts instead of time: stop once the workers began this many sends AND
    # every fault was hit at least once (each kill moment, a stall, a resumed handle; with a
    # fencing remote, a late send rejected by the fence; on PostgreSQL a terminated backend
    # and the restart). ``seconds`` then only bounds the
    # run; reaching it first is reported as a violation (the campaign did too little).
    dispatches: int | None = None
    lease_seconds: float = 1.0
    send_timeout: float = 0.4  # well under the lease: a late reply is an ambiguous send
    kill_probability: float = 0.03  # per dispatch, at each of the three chosen moments
    random_kill_every: float = 1.5  # seconds between SIGKILLs at a random moment
    pause_probability: float = 0.02  # per dispatch: stall (SIGSTOP) before the call or confirm
    pause_seconds: tuple[float, float] = (1.5, 3.0)  # in leases: woken after the lease lapsed
    resume_probability: float = 0.5  # a restarted worker resumes its last saved handle
    terminate_every: float = 0.7  # PostgreSQL: seconds between pg_terminate_backend calls
    restart_command: tuple[str, ...] | None = None  # PostgreSQL: restarts the server once
    #: what goes wrong at the remote; None: the campaign's own (a lifecycle's has slow
    #: runs that outlive the lease)
    faults: RemoteFaults | None = None
    seed: int = 1
    keep: bool = False  # keep the PostgreSQL schema afterwards
    #: the declaration whose workers run: a lifecycle of your own's path or built-in name
    #: (``job``); None: the claim protocol, through ``Dispatcher``
    design: str | None = None

    def check(self) -> None:
        if self.backend not in ("sqlite", "postgresql"):
            raise InvalidArgument(f"backend must be sqlite or postgresql, not {self.backend!r}")
        if self.remote not in REMOTE_MODES:
            raise InvalidArgument(f"remote must be plain, fencing or dedup, not {self.remote!r}")
        if self.backend == "postgresql" and not self.postgres_url:
            raise InvalidArgument("a PostgreSQL campaign needs postgres_url (a database URL)")
        if not 1 <= self.workers <= 32 or not 1 <= self.targets <= 1000:
            raise InvalidArgument("workers must be 1 to 32 and targets 1 to 1000")
        if not 0 < self.seconds <= 24 * 3600:
            raise InvalidArgument("seconds must be above 0 and at most a day")
        if self.dispatches is not None and not 1 <= self.dispatches <= 1_000_000:
            raise InvalidArgument("dispatches must be 1 to 1,000,000 (or None: run for seconds)")
        if self.send_timeout >= self.lease_seconds:
            raise InvalidArgument("send_timeout must be shorter than lease_seconds")


@dataclass
class CampaignReport:
    config: CampaignConfig
    seconds: float
    stopped_by: str  # "counts" (every goal of ``dispatches`` met) or "time"
    kills: dict[str, int]  # by moment (the claim's: after-begin-send, during-call, …), random
    pauses: dict[str, int]  # stalls past the lease, by moment: after-begin-send, after-ack
    restarts: int
    resumes: dict[str, int]  # current, stale, refused, nothing-saved, current-then-refused
    outcomes: dict[str, int]  # what dispatch_next returned in the workers
    worker_store_errors: int
    sweeper_errors: int
    backends_terminated: int
    server_restarts: int
    unexpected_exits: list[str]
    findings: Findings | LifecycleFindings
    violations: list[str]
    #: the declaration a lifecycle's campaign ran ("": the claim protocol)
    design: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data: the run's shape, then every field, then ``ok``."""
        c = self.config
        shape = {k: getattr(c, k) for k in ("backend", "remote", "workers", "targets", "seed")}
        shape["design"] = self.design or "claim"
        skip = ("config", "design")
        report = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        report["seconds"] = round(self.seconds, 1)
        report["findings"] = self.findings.as_dict()
        return {**shape, **report, "ok": self.ok}
