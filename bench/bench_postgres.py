"""PostgreSQL benchmark: prints figures, asserts nothing. ``make bench-postgres`` or
``python bench/bench_postgres.py [--quick]``; the server from ``CLAIMFSM_PG_URL``
(default postgresql://postgres@127.0.0.1:5432/postgres). Works in a schema of its own,
dropped at the end.

1. Dispatch cycles per second (acquire -> begin_send -> confirm) through claimfsm, against
   two hand-written baselines doing the same work (same guards, values and history rows;
   their statements are printed with the figures, and claimfsm's own beside them): one
   autocommit statement per transition that writes its history row too (a CTE on the
   server's clock), as claimfsm does in the common case; and three round trips per
   transition (BEGIN with the server's time; the guarded write; the history row, and the
   draft, pipelined with COMMIT), as claimfsm's transaction path does after a refusal.
   Rounds run all three back to back; the ratios are the medians of the rounds' ratios.
2. 1, 2 and 4 processes on distinct targets: cycles/s and the fewest per process.
3. ``pg_try_advisory_lock`` + unlock pairs per second: what a bare lock costs.
4. Scale: acquire latency with 1,000 claim rows and with 1,000,000 claim rows and
   10,000,000 history rows; ``history(target)`` for a target with 100,000 entries; the
   tables' size per 1,000,000 dispatch cycles (scaled from 5,000).
5. ``claimfsm audit`` over a legal history of 10,200,000 entries (100,000 targets, 34
   dispatch cycles each, made by the server): seconds and entries per second.
6. A lifecycle of your own (specs/job.toml) in the lifecycle store: events per second over
   jobs that run three attempts each (lease, start, renew, fail, twice; then lease, start,
   succeed: 11 events, the first on a new entity), with each event as one
   statement (the default) against every event on the transaction path, in rounds back to
   back; the ratio is the median of the rounds' ratios.
7. A lifecycle with linked drafts (examples/page.toml): events per second, timed over
   the events alone (a revision created and approved, untimed; the page picked with it,
   started, finished, which marks the revision dispatched: 3 events), each event as one
   statement (the default) against every event on the transaction path, paired as in 6.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import secrets
import statistics
import time
from typing import Any

import psycopg
from psycopg import sql

from _plan import acquire_times, at_rest, dispatch_cycles, paired, prepare
from claimfsm.store._postgres import PostgresStore

URL = os.environ.get("CLAIMFSM_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")

NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"

#: The hand-written baselines do claimfsm's work: the same guards (the upsert on the free
#: states; begin_send on token, epoch, lease and the pinned draft; confirm on token and
#: epoch), the same values (a real token hash, the key derived from the draft), the draft
#: marked dispatched, and the same history row per transition. ``{s}`` is the schema.
#: The claim upsert's guard, shared by both baselines: a new epoch only from a free state.
_TAKE_IF_FREE = (
    " ON CONFLICT (target_id) DO UPDATE"
    " SET epoch = claims.epoch + 1, state = 'reserved', owner = excluded.owner,"
    " token_hash = excluded.token_hash, draft_id = excluded.draft_id,"
    " draft_version = excluded.draft_version, draft_digest = excluded.draft_digest,"
    " idempotency_key = excluded.idempotency_key, lease_deadline = excluded.lease_deadline,"
    " outcome = NULL, updated_at = excluded.updated_at"
    " WHERE claims.state IN ('confirmed', 'reconciled', 'released', 'expired', 'discarded')"
)
#: 1. Three round trips per transition (claimfsm's transaction path): BEGIN with the server
#:    clock; the guarded write; its history row (and the draft) pipelined with COMMIT.
THREE_TRIPS = {
    "acquire": (
        "INSERT INTO {s}.claims (target_id, epoch, state, owner, token_hash, draft_id,"  # noqa: S608 (constants only)
        " draft_version, draft_digest, idempotency_key, lease_deadline, outcome, updated_at)"
        " SELECT %(t)s, 1, 'reserved', %(o)s, %(h)s, d.draft_id, d.version, d.digest,"
        " 'cf-' || d.draft_id || '-v' || d.version || '-' || substr(d.digest, 1, 16),"
        " %(now)s + 60, NULL, %(now)s FROM {s}.drafts AS d WHERE d.draft_id = %(d)s"
        " AND d.status = 'approved' AND d.target_id = %(t)s"
        + _TAKE_IF_FREE
        + " RETURNING epoch, draft_version, draft_digest, idempotency_key, lease_deadline"
    ),
    "begin_send": (
        "UPDATE {s}.claims SET state = 'sending', updated_at = %(now)s WHERE target_id = %(t)s"
        " AND epoch = %(e)s AND token_hash = %(h)s AND state = 'reserved'"
        " AND lease_deadline > %(now)s AND EXISTS (SELECT 1 FROM {s}.drafts p"
        " WHERE p.draft_id = claims.draft_id AND p.status = 'approved'"
        " AND p.version = claims.draft_version AND p.digest = claims.draft_digest)"
        " RETURNING epoch"
    ),
    "confirm": (
        "UPDATE {s}.claims SET state = 'confirmed', updated_at = %(now)s WHERE target_id = %(t)s"
        " AND epoch = %(e)s AND token_hash = %(h)s AND state = 'sending' RETURNING epoch"
    ),
    "dispatched": (
        "UPDATE {s}.drafts SET status = 'dispatched', updated_at = %(now)s"
        " WHERE draft_id = %(d)s AND version = %(v)s"
    ),
    "history": (
        "INSERT INTO {s}.history (target_id, epoch, event, from_state, to_state, at, owner,"
        " token_fp, draft_id, draft_version, draft_digest, idempotency_key, lease_deadline,"
        " outcome, detail) VALUES (%(t)s, %(e)s, %(event)s, %(from)s, %(to)s, %(now)s, %(o)s,"
        " %(fp)s, %(d)s, %(v)s, %(digest)s, %(key)s, %(deadline)s, NULL, '')"
    ),
}
#: 2. One autocommit statement per transition that also writes its history row: the
#:    guarded write and the history insert in one CTE, on the server's clock.
ONE_STATEMENT = {
    "acquire": (
        "WITH clock AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now),"  # noqa: S608 (constants only)
        " w AS (INSERT INTO {s}.claims (target_id, epoch, state, owner, token_hash, draft_id,"
        " draft_version, draft_digest, idempotency_key, lease_deadline, outcome, updated_at)"
        " SELECT %(t)s, 1, 'reserved', %(o)s, %(h)s, d.draft_id, d.version, d.digest,"
        " 'cf-' || d.draft_id || '-v' || d.version || '-' || substr(d.digest, 1, 16),"
        " clock.now + 60, NULL, clock.now FROM {s}.drafts AS d, clock WHERE d.draft_id = %(d)s"
        " AND d.status = 'approved' AND d.target_id = %(t)s" + _TAKE_IF_FREE + " RETURNING *),"
        " h AS (INSERT INTO {s}.history (target_id, epoch, event, from_state, to_state, at,"
        " owner, token_fp, draft_id, draft_version, draft_digest, idempotency_key,"
        " lease_deadline, outcome, detail) SELECT target_id, epoch, 'acquire', 'unclaimed',"
        " state, updated_at, owner, substr(token_hash, 1, 8), draft_id, draft_version,"
        " draft_digest, idempotency_key, lease_deadline, outcome, '' FROM w)"
        " SELECT epoch FROM w"
    ),
    "begin_send": (
        "WITH clock AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now),"
        " w AS (UPDATE {s}.claims SET state = 'sending', updated_at = clock.now FROM clock"
        " WHERE target_id = %(t)s AND epoch = %(e)s AND token_hash = %(h)s"
        " AND state = 'reserved' AND lease_deadline > clock.now AND EXISTS (SELECT 1 FROM"
        " {s}.drafts p WHERE p.draft_id = claims.draft_id AND p.status = 'approved'"
        " AND p.version = claims.draft_version AND p.digest = claims.draft_digest)"
        " RETURNING claims.*),"
        " h AS (INSERT INTO {s}.history (target_id, epoch, event, from_state, to_state, at,"
        " owner, token_fp, draft_id, draft_version, draft_digest, idempotency_key,"
        " lease_deadline, outcome, detail) SELECT target_id, epoch, 'begin_send', 'reserved',"
        " state, updated_at, owner, substr(token_hash, 1, 8), draft_id, draft_version,"
        " draft_digest, idempotency_key, lease_deadline, outcome, '' FROM w)"
        " SELECT epoch FROM w"
    ),
    "confirm": (
        "WITH clock AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now),"
        " w AS (UPDATE {s}.claims SET state = 'confirmed', updated_at = clock.now FROM clock"
        " WHERE target_id = %(t)s AND epoch = %(e)s AND token_hash = %(h)s"
        " AND state = 'sending' RETURNING claims.*),"
        " h AS (INSERT INTO {s}.history (target_id, epoch, event, from_state, to_state, at,"
        " owner, token_fp, draft_id, draft_version, draft_digest, idempotency_key,"
        " lease_deadline, outcome, detail) SELECT target_id, epoch, 'confirm', 'sending',"
        " state, updated_at, owner, substr(token_hash, 1, 8), draft_id, draft_version,"
        " draft_digest, idempotency_key, lease_deadline, outcome, '' FROM w),"
        " dd AS (UPDATE {s}.drafts SET status = 'dispatched', updated_at = w.updated_at FROM w"
        " WHERE drafts.draft_id = w.draft_id AND drafts.version = w.draft_version)"
        " SELECT epoch FROM w"
    ),
}


def store_url(schema: str) -> str:
    return f"{URL}{'&' if '?' in URL else '?'}schema={schema}"


def by_hand_rate(schema: str, plan: list[tuple[str, list[int]]], *, one_statement: bool) -> float:
    """Cycles/s of the hand-written baseline: three round trips per transition
    (``THREE_TRIPS``), or one statement per transition with its history row
    (``ONE_STATEMENT``)."""
    conn = psycopg.connect(URL, autocommit=True)
    ident = sql.Identifier(schema).as_string(conn)
    q = {
        k: v.replace("{s}", ident)
        for k, v in (ONE_STATEMENT if one_statement else THREE_TRIPS).items()
    }
    history = THREE_TRIPS["history"].replace("{s}", ident)
    dispatched = THREE_TRIPS["dispatched"].replace("{s}", ident)

    def begin() -> float:  # one round trip: open the transaction, read the server's time
        cur = conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED; " + NOW)
        cur.nextset()
        return float(cur.fetchone()[0])  # type: ignore[index]

    def commit(*deferred: tuple[str, dict[str, Any]]) -> None:  # one round trip
        with conn.pipeline(), conn.cursor() as cur:
            for query, params in deferred:
                cur.execute(query, params)
            cur.execute("COMMIT")

    n, start = 0, time.perf_counter()
    for target, drafts in plan:
        for d in drafts:
            token = secrets.token_urlsafe(32)
            h = hashlib.sha256(token.encode()).hexdigest()
            args: dict[str, Any] = {"t": target, "d": d, "o": "bench", "h": h, "fp": h[:8]}
            if one_statement:
                row = conn.execute(q["acquire"], {**args, "event": "acquire", "from": "unclaimed"})
                args["e"] = row.fetchone()[0]  # type: ignore[index]
                for event, source in (("begin_send", "reserved"), ("confirm", "sending")):
                    if not conn.execute(
                        q[event], {**args, "event": event, "from": source}
                    ).fetchall():
                        raise AssertionError(f"{event} refused")
                n += 1
                continue
            now = begin()
            args["now"] = now
            epoch, version, digest, key, deadline = conn.execute(q["acquire"], args).fetchone()  # type: ignore[misc]
            args.update(e=epoch, v=version, digest=digest, key=key, deadline=deadline)
            step = {"event": "acquire", "from": "unclaimed", "to": "reserved"}
            commit((history, {**args, **step}))
            for event, source, dest in (
                ("begin_send", "reserved", "sending"),
                ("confirm", "sending", "confirmed"),
            ):
                args["now"] = begin()
                if not conn.execute(q[event], args).fetchall():
                    raise AssertionError(f"{event} refused")
                step = {"event": event, "from": source, "to": dest}
                deferred = [(history, {**args, **step})]
                if event == "confirm":
                    deferred.append((dispatched, args))
                commit(*deferred)
            n += 1
    conn.close()
    return n / (time.perf_counter() - start)


def throughput(schema: str, cycles: int, rounds: int) -> None:
    print("== 1. dispatch cycles/s, one process (acquire -> begin_send -> confirm) ==")
    store = PostgresStore(store_url(schema), pool_size=1)
    rates: dict[str, list[float]] = {
        "claimfsm": [],
        "by hand, one statement each": [],
        "by hand, three round trips": [],
    }
    for rnd in range(rounds):  # each round runs all three, back to back
        for name in rates:
            plan = prepare(store, 10, cycles // 10, f"{rnd}-{name[:12]}")
            if name == "claimfsm":
                n, seconds = dispatch_cycles(store, plan)
                rates[name].append(n / seconds)
            else:
                rates[name].append(by_hand_rate(schema, plan, one_statement="one" in name))
    ours = {e: store._single[e] for e in ("acquire", "begin_send", "confirm")}
    store.close()
    for name, values in rates.items():
        shown = ", ".join(f"{r:,.0f}" for r in values)
        print(f"  {name:<28} {statistics.median(values):>7,.0f} cycles/s median (rounds: {shown})")
    for name in ("by hand, one statement each", "by hand, three round trips"):
        pairs = [a / b for a, b in zip(rates["claimfsm"], rates[name], strict=True)]
        print(
            f"  ratio claimfsm / {name} = {statistics.median(pairs):.2f} (median of the rounds'"
            f" ratios; {min(pairs):.2f} to {max(pairs):.2f})"
        )
    print("  the baselines' statements (bench/bench_postgres.py; {s} is the schema):")
    for label, table in (("one statement", ONE_STATEMENT), ("three round trips", THREE_TRIPS)):
        for event, statement in table.items():
            print(f"    {label}, {event}: {statement}")
    print("  claimfsm's statements (compiled from specs/claim.toml; the schema named):")
    for event, statement in ours.items():
        print(f"    claimfsm, {event}: {statement}")


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


def audit_scale(targets: int, cycles: int) -> None:
    """Audit a legal history of ``targets`` x ``cycles`` dispatch cycles (3 entries each)
    and its claim rows, all written by the server: acquire, begin_send, confirm per epoch."""
    from claimfsm.audit import audit

    rows = targets * cycles * 3
    print(f"== 5. audit: a legal history of {rows:,} entries, {targets:,} targets ==")
    schema = f"bench_audit_{secrets.token_hex(3)}"
    try:
        store = PostgresStore(store_url(schema), pool_size=1)
        seed = store.create_draft("seed", "x").draft_id
        store.close()
        with psycopg.connect(URL, autocommit=True) as conn:
            s = sql.Identifier(schema)
            # Row i: target i % T; its j-th entry (j = i / T): epoch j / 3 + 1, step j % 3.
            conn.execute(
                sql.SQL(
                    "INSERT INTO {s}.history (target_id, epoch, event, from_state, to_state,"
                    " at, owner, token_fp, draft_id, draft_version, draft_digest,"
                    " idempotency_key, lease_deadline, outcome, detail)"
                    " SELECT format('t%%s', lpad((i %% %(t)s)::text, 7, '0')), j / 3 + 1,"
                    " (ARRAY['acquire', 'begin_send', 'confirm'])[j %% 3 + 1],"
                    " (ARRAY['unclaimed', 'reserved', 'sending'])[j %% 3 + 1],"
                    " (ARRAY['reserved', 'sending', 'confirmed'])[j %% 3 + 1],"
                    " 1000 + j, 'w', 'a1b2c3d4', %(d)s, 1, 'd', 'k', 1060 + j - j %% 3, NULL, ''"
                    " FROM (SELECT i, i / %(t)s AS j FROM generate_series(0, %(n)s - 1) AS i) AS g"
                ).format(s=s),
                {"t": targets, "n": rows, "d": seed},
            )
            conn.execute(
                sql.SQL(
                    "INSERT INTO {s}.claims SELECT format('t%%s', lpad(t::text, 7, '0')),"
                    " %(c)s, 'confirmed', 'w', 'a1b2c3d4' || repeat('0', 56), %(d)s, 1, 'd',"
                    " 'k', 1060 + 3 * (%(c)s - 1), NULL, 0"
                    " FROM generate_series(0, %(t)s - 1) AS t"
                ).format(s=s),
                {"t": targets, "c": cycles, "d": seed},
            )
            conn.execute(sql.SQL("ANALYZE {s}.history").format(s=s))
        start = time.perf_counter()
        found = audit(store_url(schema))
        seconds = time.perf_counter() - start
        print(
            f"  {found.entries:,} entries, {found.targets:,} targets:"
            f" {'no violations' if found.ok else f'{found.total:,} violations (!)'}"
            f" in {seconds:,.1f} s ({found.entries / seconds:,.0f} entries/s)"
        )
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def lifecycle(schema: str, jobs: int, rounds: int) -> None:
    from claimfsm.spec import declarations_dir, load_spec
    from claimfsm.store import open_entity_store

    print("== 6. a lifecycle of your own (specs/job.toml): events/s, one process ==")
    spec = load_spec(declarations_dir() / "job.toml")
    rates: dict[str, list[float]] = {"one statement": [], "transaction path": []}
    for rnd in range(rounds):
        for name in rates:
            store = open_entity_store(spec, store_url(schema))
            if name == "transaction path":
                store._one_statement = {}  # every event as an entity's first one goes
            events, start = 0, time.perf_counter()
            for j in range(jobs):
                key = f"{rnd}-{name[:3]}-{j}"
                for _ in range(2):
                    h = store.take(key, "lease", owner="bench")
                    h = store.act(store.act(h, "start"), "renew")
                    store.act(h, "fail")
                store.act(store.act(store.take(key, "lease", owner="bench"), "start"), "succeed")
                events += 11
            rates[name].append(events / (time.perf_counter() - start))
            store.close()
    paired(rates, "events/s", width=18)


def linked_drafts(schema: str, pages: int, rounds: int) -> None:
    from pathlib import Path

    from claimfsm.spec import load_spec
    from claimfsm.store import open_entity_store

    print("== 7. a lifecycle with linked drafts (examples/page.toml): events/s, one process ==")
    spec = load_spec(Path(__file__).resolve().parents[1] / "examples" / "page.toml")
    rates: dict[str, list[float]] = {"one statement": [], "transaction path": []}
    for rnd in range(rounds):
        for name in rates:
            store = open_entity_store(spec, store_url(schema), prefix=f"b{rnd}{name[:3]}")
            if name == "transaction path":
                store._one_statement = {}
            spent = 0.0  # in the events alone: the author's calls are the same on both
            for n in range(pages):
                key = f"page-{n}"
                draft = store.approve_draft(store.create_draft(key, f"text {n}").draft_id)
                start = time.perf_counter()
                held = store.take(key, "pick", owner="bench", draft=draft.draft_id)
                store.act(store.act(held, "start"), "finish")
                spent += time.perf_counter() - start
            rates[name].append(3 * pages / spent)
            store.close()
    paired(rates, "events/s", width=18)


def lifecycle_at_rest(schema: str, rows: int, rounds: int) -> None:
    """Section 8: opening a lifecycle store and its sweep, with ``rows`` finished jobs."""
    from claimfsm.spec import declarations_dir, load_spec
    from claimfsm.store import open_entity_store

    print(
        f"== 8. a lifecycle store at rest (specs/job.toml): open and sweep with {rows:,}"
        " finished jobs, against none =="
    )
    spec = load_spec(declarations_dir() / "job.toml")

    def fill(name: str, table: str, count: int) -> None:
        rows_table = sql.Identifier(schema, table.rsplit(".", 1)[-1].strip('"'))
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} SELECT 'done-' || g, 'succeeded', epoch, NULL, NULL, owner,"
                    " attempts FROM {}, generate_series(1, %s) AS g"
                ).format(rows_table, rows_table),
                (count,),
            )
            conn.execute(sql.SQL("ANALYZE {}").format(rows_table))

    at_rest(
        lambda name: open_entity_store(spec, store_url(schema), prefix=name), fill, rows, rounds
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    args = parser.parse_args()
    schema = f"bench_{secrets.token_hex(4)}"
    try:
        throughput(schema, 300 if args.quick else 1000, 3 if args.quick else 5)
        lifecycle(schema, 30 if args.quick else 200, 3 if args.quick else 5)
        linked_drafts(schema, 30 if args.quick else 200, 3 if args.quick else 5)
        lifecycle_at_rest(schema, 10_000 if args.quick else 500_000, 3 if args.quick else 7)
        processes(schema, 1.0 if args.quick else 4.0)
        advisory_locks(1000 if args.quick else 5000)
        if args.quick:
            scale(10_000, 100_000, 200, 1_000, 500)
            audit_scale(1_000, 34)
        else:
            scale(1_000_000, 10_000_000, 1000, 100_000, 5_000)
            audit_scale(100_000, 34)
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
