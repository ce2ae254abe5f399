"""An asyncio worker service that dispatches approved drafts through claimfsm.

One command runs it, with the reference receiver (examples/receiver.py) as its remote and a
few drafts to send (``make example-service`` runs this, stopping once all are sent)::

    python examples/dispatch_service.py --demo-receiver fencing --seed 12 --until-idle

Against your own database and receiving service::

    python examples/dispatch_service.py --db postgresql://app@db/app \\
        --remote https://effects.internal --mode fencing --targets acct-1,acct-2

What it does, and what it promises:

- ``--workers`` tasks each take the targets in turn: acquire the oldest approved draft's
  target, keep the lease alive (``AsyncKeepAlive``) while ``AsyncDispatcher.send`` records
  the intent, calls the remote over HTTP with the idempotency key and the epoch, and
  confirms or marks the claim uncertain. A lost lease cancels the send in hand.
- A reconciler task sweeps lapsed leases and resolves uncertain claims by readback (and a
  fence, or a same-key retry, as the remote's mode allows), every ``--reconcile-every``
  seconds.
- Metrics (``claimfsm_transitions_total``, ``claimfsm_claims_uncertain`` ...) are served
  for Prometheus on ``--metrics-port``; one log line per transition goes to stderr.
- SIGTERM or SIGINT: no new claim is taken; each dispatch in hand finishes (the send
  returns, or times out after ``--timeout`` and the claim becomes uncertain); one last
  reconcile runs; the service exits 0. It never leaves a claim in ``sending``.

It prints one JSON line when it is ready (``{"ready": true, "remote": ..., "metrics_port":
...}``) and one when it stops (``{"stopped": true, "sending": [], "confirmed": ...}``: the
claims left in ``sending``, none, and its dispatches by outcome), so a supervisor or a test
can follow it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from claimfsm import AsyncDispatcher, AsyncKeepAlive, AsyncStore, LeaseLost
from claimfsm.errors import ClaimFSMError, DraftNotApproved, TargetBusy
from claimfsm.service import AsyncHttpRemote

RECEIVER = Path(__file__).with_name("receiver.py")
LOG = logging.getLogger("dispatch_service")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default="sqlite:///claims.sqlite", help="store URL")
    p.add_argument("--remote", help="the receiving service's base URL")
    p.add_argument("--mode", choices=["fencing", "dedup", "plain"], default="fencing")
    p.add_argument(
        "--demo-receiver",
        choices=["fencing", "dedup", "plain"],
        help="start examples/receiver.py in this mode and use it as the remote",
    )
    p.add_argument("--targets", default="", help="comma-separated targets to serve")
    p.add_argument("--seed", type=int, default=0, help="create this many approved drafts first")
    p.add_argument("--owner", default="dispatch-service")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--lease", type=float, default=30.0, help="lease seconds")
    p.add_argument("--timeout", type=float, default=5.0, help="remote call timeout, seconds")
    p.add_argument("--poll", type=float, default=0.2, help="idle wait between rounds, seconds")
    p.add_argument("--reconcile-every", type=float, default=1.0)
    p.add_argument("--metrics-port", type=int, default=0, help="0: any free port")
    p.add_argument(
        "--until-idle",
        action="store_true",
        help="stop (as on SIGTERM) once no served target has an approved draft or an open claim",
    )
    args = p.parse_args(argv)
    if (args.remote is None) == (args.demo_receiver is None):
        p.error("give exactly one of --remote URL and --demo-receiver MODE")
    if args.workers < 1 or args.lease <= 0 or args.timeout <= 0 or args.poll <= 0:
        p.error("--workers, --lease, --timeout and --poll must be positive")
    if args.timeout >= args.lease:
        p.error("--timeout must be shorter than --lease, or a send could outlive its lease")
    return args


class Service:
    def __init__(self, args: argparse.Namespace, store: AsyncStore, remote: AsyncHttpRemote):
        self.args = args
        self.store = store
        self.dispatcher = AsyncDispatcher(store, remote, owner=args.owner, lease_seconds=args.lease)
        self.stopping = asyncio.Event()
        self.outcomes: Counter[str] = Counter()
        self.targets: list[str] = [t for t in args.targets.split(",") if t]

    async def seed(self, count: int) -> None:
        for n in range(count):
            target = f"demo-{n % 4}"
            draft = await self.store.create_draft(target, f"post {n} for {target}")
            await self.store.approve_draft(draft.draft_id)
            if target not in self.targets:
                self.targets.append(target)

    async def dispatch_one(self, target: str) -> bool:
        """Dispatch the target's oldest approved draft, if it has one and is free."""
        for draft in await self.store.drafts(target, status="approved"):
            if self.stopping.is_set():
                return False  # no new claim once asked to stop
            try:
                claim = await self.store.acquire(
                    target, draft.draft_id, self.args.owner, self.args.lease
                )
            except TargetBusy:
                return False
            except DraftNotApproved:
                continue  # dispatched or edited meanwhile
            try:
                async with AsyncKeepAlive(claim, self.args.lease):
                    result = await self.dispatcher.send(claim)
            except LeaseLost as exc:
                LOG.warning("%s", exc)  # the reconciler settles the epoch
                self.outcomes["lease-lost"] += 1
                return True
            self.outcomes[result.outcome] += 1
            return True
        return False

    async def worker(self, n: int) -> None:
        while not self.stopping.is_set():
            busy = False
            for target in self.targets[n:] + self.targets[:n]:  # each its own order
                try:
                    busy = await self.dispatch_one(target) or busy
                except ClaimFSMError as exc:  # a store outage: log, back off, go on
                    LOG.error("dispatch of %s failed: %s", target, exc)
            if not busy:
                await self.pause(self.args.poll)

    async def reconcile(self) -> None:
        swept = await self.store.sweep()
        resolved = await self.dispatcher.reconcile_all()
        for target, resolution in resolved.items():
            LOG.info("reconciled %s: %s", target, resolution)
        if swept:
            LOG.info("swept %d lapsed leases", len(swept))

    async def idle(self) -> bool:
        """No served target has an approved draft, and no claim is open."""
        for target in self.targets:
            if await self.store.drafts(target, status="approved"):
                return False
        ended = self.store.spec.states_where("frees_target")  # declared: the epoch is over
        return all(c.state in ended for c in await self.store.claims())

    async def reconciler(self) -> None:
        while not self.stopping.is_set():
            try:
                await self.reconcile()
                if self.args.until_idle and await self.idle():
                    LOG.info("idle: every draft is dispatched")
                    self.stopping.set()
            except ClaimFSMError as exc:
                LOG.error("reconcile failed: %s", exc)
            await self.pause(self.args.reconcile_every)

    async def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less if asked to stop meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)


async def serve(args: argparse.Namespace) -> int:
    receiver = None
    if args.demo_receiver:
        receiver = subprocess.Popen(
            [sys.executable, str(RECEIVER), args.demo_receiver], stdout=subprocess.PIPE, text=True
        )
        assert receiver.stdout is not None
        args.remote = f"http://127.0.0.1:{int(receiver.stdout.readline())}"
        args.mode = args.demo_receiver
    try:
        return await run_service(args)
    finally:
        if receiver is not None:
            receiver.terminate()
            receiver.wait(10)


async def run_service(args: argparse.Namespace) -> int:
    import prometheus_client

    from claimfsm.metrics import StoreMetrics

    store = await AsyncStore.open(args.db)
    StoreMetrics(store)
    metrics, _ = prometheus_client.start_http_server(args.metrics_port, addr="127.0.0.1")
    remote = AsyncHttpRemote(
        args.remote,
        fences_epochs=args.mode == "fencing",
        dedups_by_key=args.mode == "dedup",
        timeout=args.timeout,
    )
    service = Service(args, store, remote)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, service.stopping.set)
    try:
        await service.seed(args.seed)
        tasks = [asyncio.create_task(service.worker(n)) for n in range(args.workers)]
        tasks.append(asyncio.create_task(service.reconciler()))
        ready = {"ready": True, "remote": args.remote, "metrics_port": metrics.server_port}
        print(json.dumps(ready), flush=True)
        await service.stopping.wait()
        LOG.info("stopping: finishing the dispatches in hand")
        await asyncio.gather(*tasks)  # each finishes what it holds; none takes more
        await service.reconcile()  # one last readback for what ended uncertain
        left = [c.target_id for c in await store.claims(state="sending")]
        print(json.dumps({"stopped": True, "sending": left, **service.outcomes}), flush=True)
        return 0 if not left else 1
    finally:
        await remote.aclose()
        await store.close()
        metrics.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
