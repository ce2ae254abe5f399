"""PostgreSQL benchmark: prints figures, asserts nothing. ``make bench-postgres`` or
``python bench/bench_postgres.py [--quick]``; the server from ``CLAIMFSM_PG_URL``
(default postgresql://postgres@127.0.0.1:5432/postgres). Works in a schema of its own,
dropped at the end.

1. Dispatch cycles per second (acquire -> begin_send -> confirm) through claimfsm, against
   the same statements issued by hand with psycopg, in the same process, and the ratio.
   Per transition, three round trips: BEGIN with the server's time; the guarded write;
   the history row (and draft update) pipelined with COMMIT. A second
   baseline issues one autocommit statement per transition and writes no history: what
   the bare state change costs.
2. 1, 2 and 4 processes on distinct targets: cycles/s and the fewest per process.
3. ``pg_try_advisory_lock`` + unlock pairs per second: what a bare lock costs.
4. Scale: acquire latency with 1,000 claim rows and with 1,000,000 claim rows and
   10,000,000 history rows; ``history(target)`` for a target with 100,000 entries; the
   tables' size per 1,000,000 dispatch cycles (scaled from 5,000).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import statistics
import time
from typing import Any

import psycopg
from psycopg import sql

from _plan import acquire_times, dispatch_cycles, prepare
from claimfsm.store._postgres import PostgresStore

URL = os.environ.get("CLAIMFSM_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")

NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"
HISTORY = (
    "INSERT INTO history (target_id, epoch, event, from_state, to_state, at, owner, token_fp,"
    " draft_id, draft_version, draft_digest, idempotency_key, lease_deadline, outcome, detail)"
    " VALUES (%s, %s, %s, %s, %s, %s, 'bench', 'fp', %s, 1, 'd', 'k', %s, NULL, '')"
)
ACQUIRE = (
    "INSERT INTO claims (target_id, epoch, state, owner, token_hash, draft_id, draft_version,"
    " draft_digest, idempotency_key, lease_deadline, outcome, updated_at)"
    " SELECT %(t)s, 1, 'reserved', 'bench', 'h', d.draft_id, d.version, d.digest, 'k',"
    " %(deadline)s, NULL, %(now)s FROM drafts AS d WHERE d.draft_id = %(d)s"
    " AND d.status = 'approved' ON CONFLICT (target_id) DO UPDATE SET"
    " epoch = claims.epoch + 1, state = 'reserved', draft_id = excluded.draft_id,"
    " lease_deadline = excluded.lease_deadline"
    " WHERE claims.state IN ('confirmed', 'released') RETURNING epoch"
)


def store_url(schema: str) -> str:
    return f"{URL}{'&' if '?' in URL else '?'}schema={schema}"


def by_hand_rate(schema: str, plan: list[tuple[str, list[int]]], *, history: bool) -> float:
    conn = psycopg.connect(URL, autocommit=True)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))

    def begin() -> float:  # one round trip: open the transaction, read the server's time
        cur = conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED; " + NOW)
        cur.nextset()
        return float(cur.fetchone()[0])  # type: ignore[index]

    def commit(*deferred: tuple[str, tuple[Any, ...]]) -> None:  # one round trip
        with conn.pipeline(), conn.cursor() as cur:
            for query, params in deferred:
                cur.execute(query, params)
            cur.execute("COMMIT")

    n, start = 0, time.perf_counter()
    for target, drafts in plan:
        for d in drafts:
            if history:  # the statements claimfsm issues, in the same transactions
                now = begin()
                args = {"t": target, "d": d, "now": now, "deadline": now + 60}
                (epoch,) = conn.execute(ACQUIRE, args).fetchone()  # type: ignore[misc]
                commit((HISTORY, (target, epoch, "acquire", "unclaimed", "reserved", now, d, now)))
                now = begin()
                conn.execute(
                    "UPDATE claims SET state = 'sending' WHERE target_id = %s AND epoch = %s"
                    " AND token_hash = 'h' AND state = 'reserved' AND lease_deadline > %s"
                    " RETURNING epoch",
                    (target, epoch, now),
                ).fetchall()
                commit((HISTORY, (target, epoch, "begin_send", "reserved", "sending", now, d, now)))
                now = begin()
                conn.execute(
                    "UPDATE claims SET state = 'confirmed' WHERE target_id = %s AND epoch = %s"
                    " AND token_hash = 'h' AND state = 'sending' RETURNING epoch",
                    (target, epoch),
                ).fetchall()
                commit(
                    (HISTORY, (target, epoch, "confirm", "sending", "confirmed", now, d, now)),
                    ("UPDATE drafts SET status = 'dispatched' WHERE draft_id = %s", (d,)),
                )
            else:  # one autocommit statement per transition, server time in SQL
                args = {"t": target, "d": d, "now": time.time(), "deadline": time.time() + 60}
                (epoch,) = conn.execute(ACQUIRE, args).fetchone()  # type: ignore[misc]
                conn.execute(
                    "UPDATE claims SET state = 'sending' WHERE target_id = %s AND epoch = %s"
                    " AND token_hash = 'h' AND state = 'reserved'"
                    " AND lease_deadline > extract(epoch FROM clock_timestamp())",
                    (target, epoch),
                )
                conn.execute(
                    "UPDATE claims SET state = 'confirmed' WHERE target_id = %s AND epoch = %s"
                    " AND token_hash = 'h' AND state = 'sending'",
                    (target, epoch),
                )
            n += 1
    conn.close()
    return n / (time.perf_counter() - start)


def throughput(schema: str, cycles: int) -> None:
    print("== 1. dispatch cycles/s, one process (acquire -> begin_send -> confirm) ==")
    store = PostgresStore(store_url(schema), pool_size=1)
    rates: dict[str, list[float]] = {
        "claimfsm": [],
        "by hand, same statements": [],
        "by hand, one statement each": [],
    }
    for rnd in range(3):
        for name in rates:
            plan = prepare(store, 10, cycles // 10, f"{rnd}-{name[:8]}")
            if name == "claimfsm":
                n, seconds = dispatch_cycles(store, plan)
                rates[name].append(n / seconds)
            else:
                rates[name].append(by_hand_rate(schema, plan, history="same" in name))
    store.close()
    best = {k: max(v) for k, v in rates.items()}
    for name, rate in best.items():
        rounds = ", ".join(f"{r:,.0f}" for r in rates[name])
        print(f"  {name:<28} {rate:>7,.0f} cycles/s   (rounds: {rounds})")
    same = best["by hand, same statements"]
    print(f"  ratio claimfsm / by hand, same statements = {best['claimfsm'] / same:.2f}")
    one = best["by hand, one statement each"]
    print(f"  ratio claimfsm / by hand, one statement each = {best['claimfsm'] / one:.2f}")


def _worker(url: str, index: int, seconds: float, queue: Any) -> None:
    store = PostgresStore(url, pool_size=1)
    target = f"proc-{index}-{secrets.token_hex(2)}"
    n, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        d = store.create_draft(target, "x")
        store.approve_draft(d.draft_id)
        c = store.acquire(target, d.draft_id, f"p{index}", 60)
        c.begin_send()
        c.confirm()
        n += 1
    store.close()
    queue.put(n)


def processes(schema: str, seconds: float) -> None:
    print(
        f"== 2. processes, {seconds:g} s each run (distinct targets; includes creating drafts) =="
    )
    ctx = multiprocessing.get_context("spawn")
    for count in (1, 2, 4):
        queue = ctx.Queue()
        procs = [
            ctx.Process(target=_worker, args=(store_url(schema), i, seconds, queue))
            for i in range(count)
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


def advisory_locks(pairs: int) -> None:
    print("== 3. reference: pg_try_advisory_lock + unlock pairs/s (two round trips) ==")
    conn = psycopg.connect(URL, autocommit=True)
    start = time.perf_counter()
    for i in range(pairs):
        conn.execute("SELECT pg_try_advisory_lock(%s)", (i,))
        conn.execute("SELECT pg_advisory_unlock(%s)", (i,))
    print(f"  {pairs / (time.perf_counter() - start):,.0f} pairs/s")
    conn.close()


def scale(claims: int, history: int, samples: int, long_target: int, cycles: int) -> None:
    """Acquire latency with ``claims`` claim rows and ``history`` history rows, each in a
    schema of its own made by the server (``generate_series``); ``history(target)`` for a
    target with ``long_target`` entries; the size per 1,000,000 dispatch cycles."""
    print("== 4. scale: acquire latency by table size; one long history; size ==")
    for n_claims, n_history in ((1_000, 3_000), (claims, history)):
        schema = f"bench_scale_{secrets.token_hex(3)}"
        try:
            store = PostgresStore(store_url(schema), pool_size=1)
            seed = store.create_draft("seed", "x")
            with psycopg.connect(URL, autocommit=True) as conn:
                s = sql.Identifier(schema)
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {s}.claims SELECT format('filler-%%s', lpad(i::text, 8, '0')),"
                        " 1, 'confirmed', 'o', 'h', %s, 1, 'd', 'k', 0, NULL, 0"
                        " FROM generate_series(0, %s - 1) AS i"
                    ).format(s=s),
                    (seed.draft_id, n_claims),
                )
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {s}.history (target_id, epoch, event, from_state, to_state,"
                        " at, owner, token_fp, draft_id, draft_version, draft_digest,"
                        " idempotency_key, lease_deadline, outcome, detail)"
                        " SELECT format('filler-%%s', lpad((i %% %s)::text, 8, '0')),"
                        " i / %s + 1, 'confirm', 'sending', 'confirmed', i, 'bench-worker',"
                        " 'a1b2c3d4', 1, 1, lpad(i::text, 64, '0'),"
                        " 'cf-1-v1-' || lpad(i::text, 16, '0'), i + 60, NULL, ''"
                        " FROM generate_series(1, %s) AS i"
                    ).format(s=s),
                    (n_claims, n_claims, n_history),
                )
                if n_claims == claims:  # and one target with a long history of its own
                    conn.execute(
                        sql.SQL(
                            "INSERT INTO {s}.history (target_id, epoch, event, from_state,"
                            " to_state, at, owner, token_fp, detail) SELECT 'the-long-one',"
                            " i, 'discard', 'expired', 'discarded', i, 'w', 'a1b2c3d4', ''"
                            " FROM generate_series(1, %s) AS i"
                        ).format(s=s),
                        (long_target,),
                    )
                conn.execute(sql.SQL("ANALYZE {s}.claims").format(s=s))
                conn.execute(sql.SQL("ANALYZE {s}.history").format(s=s))
            count = min(samples, n_claims)
            step = n_claims // count  # every acquire on a distinct existing target
            times = acquire_times(store, [f"filler-{i * step:08d}" for i in range(count)])
            print(
                f"  {n_claims:>9,} claim rows, {n_history:>10,} history rows: acquire median"
                f" {statistics.median(times) * 1e6:,.0f} us,"
                f" p99 {times[int(len(times) * 0.99)] * 1e6:,.0f} us ({len(times)} acquires)"
            )
            if n_claims == claims:  # the long history of one target, among the filler
                t0 = time.perf_counter()
                found = store.history("the-long-one")
                elapsed = time.perf_counter() - t0
                print(
                    f"  history(target) with {len(found):,} entries (of {n_history:,}):"
                    f" {elapsed * 1e3:,.0f} ms"
                )
            store.close()
        finally:
            with psycopg.connect(URL, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )
    schema = f"bench_size_{secrets.token_hex(3)}"
    try:
        store = PostgresStore(store_url(schema), pool_size=1)
        plan = prepare(store, 50, cycles // 50)
        with psycopg.connect(URL, autocommit=True) as conn:

            def size() -> int:
                conn.execute("CHECKPOINT")
                found = conn.execute(
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = %s AND c.relkind = 'r'",
                    (schema,),
                ).fetchone()
                return int(found[0]) if found and found[0] else 0

            start = size()
            dispatch_cycles(store, plan)
            grown = size() - start
        store.close()
        print(
            f"  {cycles:,} cycles (with their drafts) grew the tables by {grown / 1e6:,.1f} MB:"
            f" {grown / cycles * 1e6 / 1e9:,.2f} GB per 1,000,000 cycles, 3 history rows each"
            " (scaled)"
        )
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    args = parser.parse_args()
    schema = f"bench_{secrets.token_hex(4)}"
    try:
        throughput(schema, 300 if args.quick else 1500)
        processes(schema, 1.0 if args.quick else 4.0)
        advisory_locks(1000 if args.quick else 5000)
        if args.quick:
            scale(10_000, 100_000, 200, 1_000, 500)
        else:
            scale(1_000_000, 10_000_000, 1000, 100_000, 5_000)
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
