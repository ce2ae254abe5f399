"""SQLite benchmark: prints figures, asserts nothing. ``make bench`` or
``python bench/bench_sqlite.py [--quick]``.

1. Dispatch cycles per second (acquire -> begin_send -> confirm, three commits) through
   claimfsm, against the same commits written by hand (``BY_HAND``, printed with the
   figures: same pragmas, same guards, same history rows), in the same process: seven
   rounds, each running both back to back, and the median of the rounds' ratios.
2. Scale: acquire latency (median and p99) with 1,000 claim rows and with 1,000,000 claim
   rows and 10,000,000 history rows; ``history(target)`` for a target with 100,000 entries;
   the database's size per 1,000,000 dispatch cycles (scaled from 20,000).
3. 1, 2 and 4 processes on one file, each on its own targets: total cycles/s and the
   fewest cycles any single process completed.
4. ``claimfsm audit`` over a legal history of 10,200,000 entries (100,000 targets, 34
   dispatch cycles each, made by SQLite): seconds and entries per second.
5. A lifecycle of your own (``specs/job.toml``): events per second through the lifecycle
   store (lease, start, succeed per job), against the same events written by hand
   (``JOB_BY_HAND``), in the same process: seven rounds, the median of their ratios.
6. Linked drafts: ``examples/page.toml``'s cycle (pick naming an approved draft, start,
   finish marking it dispatched) through the lifecycle store, against the claim's own
   store doing the same with its drafts (acquire, begin_send, confirm), on the same plan
   of targets and drafts: seven interleaved rounds, the median of their ratios. What
   moving the claim onto the store of a declared lifecycle would cost today.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import secrets
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from _plan import acquire_times, at_rest, dispatch_cycles, paired, prepare
from claimfsm.store import SQLiteStore

#: The hand-written baseline: what a careful engineer would write without claimfsm, doing
#: the same work. Three commits per cycle with the same pragmas (WAL; synchronous=FULL only
#: for the commit entering sending); the claim upsert guarded on the free states; begin_send
#: guarded on token, epoch, lease and the pinned draft; confirm guarded on token and epoch;
#: the draft marked dispatched; one history row per transition with the same columns and
#: values claimfsm writes (owner, token fingerprint, pinned draft, key, lease, detail).
BY_HAND = {
    "acquire": (
        "INSERT INTO claims (target_id, epoch, state, owner, token_hash, draft_id,"
        " draft_version, draft_digest, idempotency_key, lease_deadline, outcome, updated_at)"
        " SELECT ?1, 1, 'reserved', ?2, ?3, d.draft_id, d.version, d.digest,"
        " 'cf-' || d.draft_id || '-v' || d.version || '-' || substr(d.digest, 1, 16), ?4, NULL,"
        " ?5 FROM drafts d WHERE d.draft_id = ?6 AND d.status = 'approved' AND d.target_id = ?1"
        " ON CONFLICT (target_id) DO UPDATE SET epoch = claims.epoch + 1, state = 'reserved',"
        " owner = excluded.owner, token_hash = excluded.token_hash,"
        " draft_id = excluded.draft_id, draft_version = excluded.draft_version,"
        " draft_digest = excluded.draft_digest, idempotency_key = excluded.idempotency_key,"
        " lease_deadline = excluded.lease_deadline, outcome = NULL,"
        " updated_at = excluded.updated_at"
        " WHERE claims.state IN ('confirmed', 'reconciled', 'released', 'expired', 'discarded')"
        " RETURNING epoch, draft_version, draft_digest, idempotency_key"
    ),
    "begin_send": (
        "UPDATE claims SET state = 'sending', updated_at = ?1 WHERE target_id = ?2"
        " AND epoch = ?3 AND token_hash = ?4 AND state = 'reserved' AND lease_deadline > ?1"
        " AND EXISTS (SELECT 1 FROM drafts p WHERE p.draft_id = claims.draft_id"
        " AND p.status = 'approved' AND p.version = claims.draft_version"
        " AND p.digest = claims.draft_digest)"
    ),
    "confirm": (
        "UPDATE claims SET state = 'confirmed', updated_at = ?1 WHERE target_id = ?2"
        " AND epoch = ?3 AND token_hash = ?4 AND state = 'sending'"
    ),
    "dispatched": (
        "UPDATE drafts SET status = 'dispatched', updated_at = ?1"
        " WHERE draft_id = ?2 AND version = ?3"
    ),
    "history": (
        "INSERT INTO history (target_id, epoch, event, from_state, to_state, at, owner,"
        " token_fp, draft_id, draft_version, draft_digest, idempotency_key, lease_deadline,"
        " outcome, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, '')"
    ),
}


def by_hand_cycles(path: Path, plan: list[tuple[str, list[int]]]) -> tuple[int, float]:
    """The same dispatch cycles as claimfsm's, written by hand (``BY_HAND``)."""
    db = sqlite3.connect(path, isolation_level=None, timeout=30)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("PRAGMA foreign_keys = ON")
    q = BY_HAND
    start = time.perf_counter()
    n = 0
    for target, drafts in plan:
        for draft in drafts:
            token = secrets.token_urlsafe(32)
            hashed = hashlib.sha256(token.encode()).hexdigest()
            fp = hashed[:8]
            now = time.time()
            deadline = now + 60
            db.execute("BEGIN IMMEDIATE")
            epoch, version, digest, key = db.execute(
                q["acquire"], (target, "bench", hashed, deadline, now, draft)
            ).fetchone()
            row = (target, epoch)
            pinned = ("bench", fp, draft, version, digest, key, deadline)
            db.execute(q["history"], (*row, "acquire", "unclaimed", "reserved", now, *pinned))
            db.execute("COMMIT")
            now = time.time()
            db.execute("PRAGMA synchronous = FULL")
            db.execute("BEGIN IMMEDIATE")
            if db.execute(q["begin_send"], (now, target, epoch, hashed)).rowcount != 1:
                raise AssertionError("begin_send refused")
            db.execute(q["history"], (*row, "begin_send", "reserved", "sending", now, *pinned))
            db.execute("COMMIT")
            db.execute("PRAGMA synchronous = NORMAL")
            now = time.time()
            db.execute("BEGIN IMMEDIATE")
            if db.execute(q["confirm"], (now, target, epoch, hashed)).rowcount != 1:
                raise AssertionError("confirm refused")
            db.execute(q["dispatched"], (now, draft, version))
            db.execute(q["history"], (*row, "confirm", "sending", "confirmed", now, *pinned))
            db.execute("COMMIT")
            n += 1
    elapsed = time.perf_counter() - start
    db.close()
    return n, elapsed


def throughput(cycles: int, quick: bool, *, show_sql: bool = False) -> float:
    """Print claimfsm's and the by-hand baseline's cycles/s; return the ratio."""
    print("== 1. dispatch cycles/s, one process (acquire -> begin_send -> confirm) ==")
    targets, per = (20, cycles // 20)
    with tempfile.TemporaryDirectory() as tmp:
        results: dict[str, list[float]] = {"claimfsm": [], "by hand": []}
        for rnd in range(7):  # interleaved rounds: each round runs both, back to back
            for name in results if rnd % 2 else reversed(results):
                path = Path(tmp) / f"{name}-{rnd}.sqlite"
                store = SQLiteStore(path)
                plan = prepare(store, targets, per)
                store.close()
                if name == "claimfsm":
                    store = SQLiteStore(path)
                    n, s = dispatch_cycles(store, plan)
                    store.close()
                else:
                    n, s = by_hand_cycles(path, plan)
                results[name].append(n / s)
        for name, rates in results.items():
            print(
                f"  {name:<12} {statistics.median(rates):>9,.0f} cycles/s median   (rounds: "
                + ", ".join(f"{r:,.0f}" for r in rates)
                + ")"
            )
        # Paired: each round's two runs saw the same machine load; the median of the
        # per-round ratios is what a noisy, shared machine can measure honestly.
        pairs = [a / b for a, b in zip(results["claimfsm"], results["by hand"], strict=True)]
        ratio = statistics.median(pairs)
        print(
            f"  ratio claimfsm / by hand = {ratio:.2f} (median of the rounds' ratios;"
            f" {min(pairs):.2f} to {max(pairs):.2f})"
        )
        if show_sql:
            print("  the by-hand baseline's statements (bench/bench_sqlite.py, BY_HAND):")
            for name, statement in BY_HAND.items():
                print(f"    {name}: {statement}")
        return ratio


#: Filler history rows, made by SQLite itself (a Python loop would take minutes): ``n`` rows
#: spread over the filler targets, shaped like real ones (64-character digest, key, owner).
_FILL_HISTORY = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
    " INSERT INTO history (target_id, epoch, event, from_state, to_state, at, owner, token_fp,"
    " draft_id, draft_version, draft_digest, idempotency_key, lease_deadline, outcome, detail)"
    " SELECT printf('filler-%08d', i % ?), i / ? + 1, 'confirm', 'sending', 'confirmed',"
    " i, 'bench-worker', 'a1b2c3d4', 1, 1, printf('%064d', i), printf('cf-1-v1-%016d', i),"
    " i + 60, NULL, '' FROM n"
)


def acquire_latency(rows: int, history: int, samples: int) -> None:
    """Acquire latency with ``rows`` claim rows and ``history`` history rows."""
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
        db.execute(_FILL_HISTORY, (history, rows, rows))
        db.execute("COMMIT")
        db.close()
        store = SQLiteStore(path)
        samples = min(samples, rows)
        step = rows // samples  # every acquire on a distinct existing target
        times = acquire_times(store, [f"filler-{i * step:08d}" for i in range(samples)])
        store.close()
    print(
        f"  {rows:>9,} claim rows, {history:>10,} history rows: acquire median"
        f" {statistics.median(times) * 1e6:,.0f} us, p99 {times[int(len(times) * 0.99)] * 1e6:,.0f}"
        f" us ({samples} acquires)"
    )


def history_of_one_target(entries: int) -> None:
    """``history(target)`` for a target with ``entries`` entries, among other targets'."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "long.sqlite"
        SQLiteStore(path).close()
        db = sqlite3.connect(path, isolation_level=None)
        # One target in ten rows: the target's entries interleave with nine others'.
        db.execute(_FILL_HISTORY, (entries * 10, 10, 10))
        db.close()
        store = SQLiteStore(path)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            found = store.history("filler-00000003")
            times.append(time.perf_counter() - t0)
        store.close()
    print(
        f"  history(target) with {len(found):,} entries (of {entries * 10:,}):"
        f" median {statistics.median(times) * 1e3:,.0f} ms of 5"
    )


def size_per_million(cycles: int) -> None:
    """The database's growth over ``cycles`` dispatch cycles, scaled to 1,000,000."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "size.sqlite"
        store = SQLiteStore(path)
        plan = prepare(store, 100, cycles // 100)
        start = _size(path)
        dispatch_cycles(store, plan)
        store.close()
        grown = _size(path) - start
    per = grown / cycles * 1_000_000
    print(
        f"  {cycles:,} cycles (with their drafts) grew the file by {grown / 1e6:,.1f} MB:"
        f" {per / 1e9:,.2f} GB per 1,000,000 cycles, 3 history rows each (scaled)"
    )


def audit_scale(targets: int, cycles: int) -> None:
    """Audit a legal history of ``targets`` x ``cycles`` dispatch cycles (3 entries each)
    and its claim rows, written by SQLite: acquire, begin_send, confirm per epoch."""
    from claimfsm.audit import audit

    rows = targets * cycles * 3
    print(f"== 4. audit: a legal history of {rows:,} entries, {targets:,} targets ==")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "audit.sqlite"
        store = SQLiteStore(path)
        seed = store.create_draft("seed", "x").draft_id
        store.close()
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("BEGIN")
        # Row i: target i % T; its j-th entry (j = i / T): epoch j / 3 + 1, step j % 3.
        db.execute(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < :n - 1),"
            " g(i, j) AS (SELECT i, i / :t FROM n)"
            " INSERT INTO history (target_id, epoch, event, from_state, to_state, at, owner,"
            " token_fp, draft_id, draft_version, draft_digest, idempotency_key, lease_deadline,"
            " outcome, detail)"
            " SELECT printf('t%07d', i % :t), j / 3 + 1,"
            " CASE j % 3 WHEN 0 THEN 'acquire' WHEN 1 THEN 'begin_send' ELSE 'confirm' END,"
            " CASE j % 3 WHEN 0 THEN 'unclaimed' WHEN 1 THEN 'reserved' ELSE 'sending' END,"
            " CASE j % 3 WHEN 0 THEN 'reserved' WHEN 1 THEN 'sending' ELSE 'confirmed' END,"
            " 1000 + j, 'w', 'a1b2c3d4', :d, 1, 'd', 'k', 1060 + j - j % 3, NULL, '' FROM g",
            {"n": rows, "t": targets, "d": seed},
        )
        db.execute(
            "WITH RECURSIVE n(t) AS (SELECT 0 UNION ALL SELECT t + 1 FROM n WHERE t < :t - 1)"
            " INSERT INTO claims SELECT printf('t%07d', t), :c, 'confirmed', 'w',"
            " 'a1b2c3d4' || printf('%056d', 0), :d, 1, 'd', 'k', 1060 + 3 * (:c - 1), NULL, 0"
            " FROM n",
            {"t": targets, "c": cycles, "d": seed},
        )
        db.execute("COMMIT")
        db.close()
        start = time.perf_counter()
        found = audit(f"sqlite:///{path}")
        seconds = time.perf_counter() - start
    print(
        f"  {found.entries:,} entries, {found.targets:,} targets:"
        f" {'no violations' if found.ok else f'{found.total:,} violations (!)'}"
        f" in {seconds:,.1f} s ({found.entries / seconds:,.0f} entries/s)"
    )


def _size(path: Path) -> int:
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (pages,) = db.execute("PRAGMA page_count").fetchone()
    (size,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    return int(pages) * int(size)


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


#: A job's three events (lease, start, succeed) written by hand: the work the lifecycle
#: store does for ``specs/job.toml`` on SQLite, without claimfsm. Each event is one
#: ``BEGIN IMMEDIATE`` transaction (synchronous=FULL only for ``start``, which the job
#: declares durable): the guarded write (the lease an upsert that creates the job's row,
#: guarded on the queue and the attempts left; start and succeed on epoch, token and, for
#: start, the live lease) and one history row with the columns the store writes.
JOB_BY_HAND = {
    "lease": (
        "INSERT INTO jobs (key, state, epoch, token_hash, lease_deadline, owner, attempts)"
        " VALUES (?1, 'leased', 1, ?2, ?3, ?4, 1) ON CONFLICT (key) DO UPDATE SET"
        " state = 'leased', epoch = jobs.epoch + 1, token_hash = excluded.token_hash,"
        " lease_deadline = excluded.lease_deadline, owner = excluded.owner,"
        " attempts = jobs.attempts + 1 WHERE jobs.state = 'queued' AND jobs.attempts < 3"
        " RETURNING epoch"
    ),
    "start": (
        "UPDATE jobs SET state = 'running' WHERE key = ?1 AND state = 'leased' AND epoch = ?2"
        " AND token_hash = ?3 AND lease_deadline > ?4 RETURNING epoch"
    ),
    "succeed": (
        "UPDATE jobs SET state = 'succeeded', lease_deadline = NULL WHERE key = ?1"
        " AND state = 'running' AND epoch = ?2 AND token_hash = ?3 RETURNING epoch"
    ),
    "history": (
        "INSERT INTO jobs_history (key, epoch, event, source, dest, at, refused,"
        " token_fingerprint, lease_deadline, facts, owner, request_key, detail)"
        " VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, '{}', ?, '', '')"
    ),
}


def job_by_hand(path: Path, jobs: int, tag: str) -> float:
    """Events/s of ``jobs`` jobs run (lease, start, succeed) with ``JOB_BY_HAND``."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS jobs (key TEXT PRIMARY KEY, state TEXT NOT NULL, epoch"
        " INTEGER NOT NULL, token_hash TEXT, lease_deadline DOUBLE PRECISION, owner TEXT,"
        " attempts INTEGER NOT NULL)"
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS jobs_history (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " key TEXT NOT NULL, epoch INTEGER NOT NULL, event TEXT NOT NULL, source TEXT NOT"
        " NULL, dest TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, refused TEXT,"
        " token_fingerprint TEXT NOT NULL, lease_deadline DOUBLE PRECISION, facts TEXT,"
        " owner TEXT, request_key TEXT, detail TEXT)"
    )
    sql = JOB_BY_HAND

    def event(
        durable: bool, write: str, args: tuple[object, ...], record: tuple[object, ...]
    ) -> int:
        if durable:
            db.execute("PRAGMA synchronous = FULL")
        db.execute("BEGIN IMMEDIATE")
        row = db.execute(write, args).fetchone()
        assert row is not None, write
        db.execute(sql["history"], record)
        db.execute("COMMIT")
        if durable:
            db.execute("PRAGMA synchronous = NORMAL")
        return int(row[0])

    start = time.perf_counter()
    for j in range(jobs):
        key, now = f"{tag}-{j}", time.time()
        token = hashlib.sha256(secrets.token_bytes(32)).hexdigest()
        fp, deadline = token[:8], now + 30
        epoch = event(
            False,
            sql["lease"],
            (key, token, deadline, "bench"),
            (key, 1, "lease", "queued", "leased", now, fp, deadline, "bench"),
        )
        event(
            True,
            sql["start"],
            (key, epoch, token, time.time()),
            (key, epoch, "start", "leased", "running", time.time(), fp, deadline, "bench"),
        )
        event(
            False,
            sql["succeed"],
            (key, epoch, token),
            (key, epoch, "succeed", "running", "succeeded", time.time(), fp, None, "bench"),
        )
    rate = 3 * jobs / (time.perf_counter() - start)
    db.close()
    return rate


def lifecycle(jobs: int, rounds: int) -> None:
    """Section 5: the lifecycle store (``specs/job.toml``) against ``JOB_BY_HAND``."""
    from claimfsm.spec import declarations_dir, load_spec
    from claimfsm.store import open_entity_store

    print("== 5. a lifecycle of your own (specs/job.toml) on SQLite: events/s, one process ==")
    spec = load_spec(declarations_dir() / "job.toml")
    ours: list[float] = []
    theirs: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(rounds):
            store = open_entity_store(spec, f"sqlite:///{Path(tmp) / 'jobs.sqlite'}")
            start = time.perf_counter()
            for j in range(jobs):
                handle = store.take(f"{rnd}-{j}", "lease", owner="bench")
                store.act(store.act(handle, "start"), "succeed")
            ours.append(3 * jobs / (time.perf_counter() - start))
            store.close()
            theirs.append(job_by_hand(Path(tmp) / "by-hand.sqlite", jobs, str(rnd)))
    paired({"claimfsm": ours, "by hand": theirs}, "events/s")


def linked_drafts(cycles: int) -> None:
    """Section 6: page.toml's lifecycle store against the claim's store, same plan."""
    from claimfsm.spec import load_spec
    from claimfsm.store import open_entity_store

    print("== 6. linked drafts on SQLite: a lifecycle's store (examples/page.toml) against")
    print("   the claim's store, cycles/s (pick|acquire, start|begin_send, finish|confirm) ==")
    spec = load_spec(Path(__file__).resolve().parents[1] / "examples" / "page.toml")
    targets, per = 20, cycles // 20
    results: dict[str, list[float]] = {"lifecycle": [], "claim": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(7):  # interleaved rounds: each round runs both, back to back
            for name in results if rnd % 2 else reversed(results):
                path = Path(tmp) / f"{name}-{rnd}.sqlite"
                if name == "claim":
                    store = SQLiteStore(path)
                    n, s = dispatch_cycles(store, prepare(store, targets, per))
                    store.close()
                else:
                    pages = open_entity_store(spec, f"sqlite:///{path}")
                    plan = prepare(pages, targets, per)  # type: ignore[arg-type]
                    n, start = 0, time.perf_counter()
                    for key, drafts in plan:
                        for draft in drafts:
                            held = pages.take(key, "pick", owner="bench", draft=draft)
                            pages.act(pages.act(held, "start"), "finish")
                            n += 1
                    s = time.perf_counter() - start
                    pages.close()
                results[name].append(n / s)
    paired(results, "cycles/s")


def lifecycle_at_rest(rows: int, rounds: int) -> None:
    """Section 7: opening a lifecycle store and its sweep, with ``rows`` finished jobs."""
    from claimfsm.spec import declarations_dir, load_spec
    from claimfsm.store import open_entity_store

    print(
        f"== 7. a lifecycle store at rest (specs/job.toml) on SQLite: open and sweep with"
        f" {rows:,} finished jobs, against none =="
    )
    spec = load_spec(declarations_dir() / "job.toml")
    with tempfile.TemporaryDirectory() as tmp:

        def path(name: str) -> Path:
            return Path(tmp) / f"{name}.sqlite"

        def fill(name: str, table: str, count: int) -> None:
            db = sqlite3.connect(path(name), isolation_level=None)
            db.execute(
                f"INSERT INTO {table} SELECT 'done-' || g.value, 'succeeded', epoch,"  # noqa: S608
                " NULL, NULL, owner, attempts FROM"
                f" {table}, (WITH RECURSIVE n(value) AS (SELECT 1 UNION ALL SELECT value + 1"
                " FROM n WHERE value < ?) SELECT value FROM n) AS g",
                (count,),
            )
            db.close()

        at_rest(lambda name: open_entity_store(spec, f"sqlite:///{path(name)}"), fill, rows, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    args = parser.parse_args()
    throughput(400 if args.quick else 3000, args.quick, show_sql=True)
    print("== 2. scale: acquire latency by table size; one long history; size ==")
    acquire_latency(1_000, 3_000, 200 if args.quick else 1000)
    if args.quick:
        acquire_latency(10_000, 100_000, 200)
    else:
        acquire_latency(1_000_000, 10_000_000, 2000)
    history_of_one_target(1_000 if args.quick else 100_000)
    size_per_million(1_000 if args.quick else 20_000)
    processes(1.0 if args.quick else 4.0)
    audit_scale(1_000 if args.quick else 100_000, 34)
    lifecycle(200 if args.quick else 1000, 3 if args.quick else 7)
    linked_drafts(400 if args.quick else 2000)
    lifecycle_at_rest(10_000 if args.quick else 500_000, 3 if args.quick else 7)


if __name__ == "__main__":
    main()
