"""SQLite benchmark: prints figures, asserts nothing. ``make bench`` or
``python bench/bench_sqlite.py [--quick]``.

1. Dispatch cycles per second (acquire -> begin_send -> confirm, three commits) through
   claimfsm, against the same commits written by hand with the same pragmas (WAL,
   NORMAL, FULL for the commit entering sending), in the same process, and the ratio.
   The hand-written baseline is measured twice: writing the claim row only, and writing
   the claim row plus the history rows claimfsm writes.
2. Acquire latency (median and p99) with 1,000 and with 1,000,000 claim rows.
3. 1, 2 and 4 processes on one file, each on its own targets: total cycles/s and the
   fewest cycles any single process completed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from _plan import dispatch_cycles, prepare
from claimfsm.store import SQLiteStore


def raw_cycles(path: Path, plan: list[tuple[str, list[int]]], history: bool) -> tuple[int, float]:
    db = sqlite3.connect(path, isolation_level=None, timeout=30)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    hist = (
        "INSERT INTO history (target_id, epoch, event, from_state, to_state, at, owner,"
        " token_fp, draft_id, draft_version, draft_digest, idempotency_key, lease_deadline,"
        " outcome, detail) VALUES (?, ?, ?, ?, ?, ?, 'bench', 'fp', ?, 1, 'd', 'k', ?, NULL, '')"
    )
    start = time.perf_counter()
    n = 0
    for target, drafts in plan:
        for draft in drafts:
            now = time.time()
            db.execute("BEGIN IMMEDIATE")
            (epoch,) = db.execute(
                "INSERT INTO claims (target_id, epoch, state, owner, token_hash, draft_id,"
                " draft_version, draft_digest, idempotency_key, lease_deadline, outcome,"
                " updated_at) SELECT ?, 1, 'reserved', 'bench', 'h', d.draft_id, d.version,"
                " d.digest, 'k', ?, NULL, ? FROM drafts d WHERE d.draft_id = ?"
                " AND d.status = 'approved' ON CONFLICT (target_id) DO UPDATE SET"
                " epoch = claims.epoch + 1, state = 'reserved', draft_id = excluded.draft_id"
                " WHERE claims.state IN ('confirmed', 'released') RETURNING epoch",
                (target, now + 60, now, draft),
            ).fetchone()
            if history:
                db.execute(
                    hist, (target, epoch, "acquire", "unclaimed", "reserved", now, draft, now)
                )
            db.execute("COMMIT")
            db.execute("PRAGMA synchronous = FULL")
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "UPDATE claims SET state = 'sending' WHERE target_id = ? AND epoch = ?"
                " AND token_hash = 'h' AND state = 'reserved' AND lease_deadline > ?",
                (target, epoch, now),
            )
            if history:
                db.execute(
                    hist, (target, epoch, "begin_send", "reserved", "sending", now, draft, now)
                )
            db.execute("COMMIT")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "UPDATE claims SET state = 'confirmed' WHERE target_id = ? AND epoch = ?"
                " AND token_hash = 'h' AND state = 'sending'",
                (target, epoch),
            )
            db.execute("UPDATE drafts SET status = 'dispatched' WHERE draft_id = ?", (draft,))
            if history:
                db.execute(
                    hist, (target, epoch, "confirm", "sending", "confirmed", now, draft, now)
                )
            db.execute("COMMIT")
            n += 1
    elapsed = time.perf_counter() - start
    db.close()
    return n, elapsed


def throughput(cycles: int, quick: bool) -> None:
    print("== 1. dispatch cycles/s, one process (acquire -> begin_send -> confirm) ==")
    targets, per = (20, cycles // 20)
    with tempfile.TemporaryDirectory() as tmp:
        results: dict[str, list[float]] = {"claimfsm": [], "raw": [], "raw+history": []}
        for rnd in range(3):  # interleaved rounds, best of three each
            for name in results:
                path = Path(tmp) / f"{name}-{rnd}.sqlite"
                store = SQLiteStore(path)
                plan = prepare(store, targets, per)
                store.close()
                if name == "claimfsm":
                    store = SQLiteStore(path)
                    n, s = dispatch_cycles(store, plan)
                    store.close()
                else:
                    n, s = raw_cycles(path, plan, history=name == "raw+history")
                results[name].append(n / s)
        best = {k: max(v) for k, v in results.items()}
        for name, rate in best.items():
            print(
                f"  {name:<12} {rate:>9,.0f} cycles/s   (rounds: "
                + ", ".join(f"{r:,.0f}" for r in results[name])
                + ")"
            )
        print(f"  ratio claimfsm / raw+history = {best['claimfsm'] / best['raw+history']:.2f}")
        print(f"  ratio claimfsm / raw (claim row only) = {best['claimfsm'] / best['raw']:.2f}")


def acquire_latency(rows: int, samples: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.sqlite"
        store = SQLiteStore(path)
        draft = store.create_draft("seed", "x")
        store.close()
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO claims VALUES (?, 1, 'confirmed', 'o', 'h', ?, 1, 'd', 'k', 0, NULL, 0)",
            ((f"filler-{i:08d}", draft.draft_id) for i in range(rows)),
        )
        db.execute("COMMIT")
        db.close()
        store = SQLiteStore(path)
        drafts = []
        samples = min(samples, rows)
        step = rows // samples  # every acquire on a distinct existing target
        for i in range(samples):
            d = store.create_draft(f"filler-{i * step:08d}", "y")
            store.approve_draft(d.draft_id)
            drafts.append(d)
        times = []
        for d in drafts:
            t0 = time.perf_counter()
            store.acquire(d.target_id, d.draft_id, "bench", 60)
            times.append(time.perf_counter() - t0)
        store.close()
    times.sort()
    print(
        f"  {rows:>9,} claim rows: acquire median {statistics.median(times) * 1e6:,.0f} us,"
        f" p99 {times[int(len(times) * 0.99)] * 1e6:,.0f} us ({samples} acquires)"
    )


def _worker(path: str, index: int, seconds: float, queue: multiprocessing.Queue[int]) -> None:
    store = SQLiteStore(path)
    target = f"proc-{index}"
    n = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        d = store.create_draft(target, "x")
        store.approve_draft(d.draft_id)
        claim = store.acquire(target, d.draft_id, f"p{index}", 60)
        claim.begin_send()
        claim.confirm()
        n += 1
    store.close()
    queue.put(n)


def processes(seconds: float) -> None:
    print(f"== 3. processes on one file, {seconds:g} s each run (distinct targets) ==")
    ctx = multiprocessing.get_context("spawn")
    for count in (1, 2, 4):
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "shared.sqlite")
            SQLiteStore(path).close()
            queue = ctx.Queue()
            procs = [
                ctx.Process(target=_worker, args=(path, i, seconds, queue)) for i in range(count)
            ]
            for p in procs:
                p.start()
            done = [queue.get() for _ in procs]
            for p in procs:
                p.join()
        print(
            f"  {count} process(es): {sum(done) / seconds:,.0f} cycles/s in total;"
            f" per process {sorted(done)}; fewest {min(done)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    args = parser.parse_args()
    throughput(400 if args.quick else 3000, args.quick)
    print("== 2. acquire latency by table size ==")
    for rows in (1_000, 10_000 if args.quick else 1_000_000):
        acquire_latency(rows, 200 if args.quick else 2000)
    processes(1.0 if args.quick else 4.0)


if __name__ == "__main__":
    main()
