"""Genbot's queue beside two PostgreSQL job queues for Python, procrastinate and pgqueuer,
on one PostgreSQL server, in one run. Prints figures and ratios; asserts nothing about speed.
Record results in docs/benchmarks.md.

  python bench/queue_peers.py [--pg postgres://postgres@127.0.0.1:5432/test] [--jobs 10000]
                              [--workers 4] [--rounds 2] [--genbot-batch 10] [--smoke]

Each system runs in a database of its own (genbot: a schema, as the other benches), made
and dropped here, with its own schema installed the way it ships it (genbot: migrations at
open; procrastinate: SchemaManager.apply_schema_async; pgqueuer: Queries.install).
1. Enqueue: N no-op jobs put in up front, in batches of --chunk jobs (genbot: one Submission
   per batch, the batches from four submitters in turn; procrastinate: batch_defer_async;
   pgqueuer: Queries.enqueue with lists), one batch after another from one client, timed
   on their own: enqueue jobs/s.
2. Drain: W worker processes (this script again, a private subcommand each), started and
   connected first, are released together and claim and complete the jobs as fast as they
   can. Drain jobs/s = N / (release to the last completion the database records).
   - genbot, as its executors do, each completion carrying the next claim in the same
     round trip: one job at a time (Queue.claim, then complete_and_claim), and, as a row
     of its own, --genbot-batch jobs a round trip (claim_many, then
     complete_many_and_claim);
   - procrastinate: App.run_worker_async(concurrency=C, wait=False): it stops once it finds
     no job left; its connection pool holds C + 2;
   - pgqueuer: QueueManager.run(mode=drain) with its default batch_size (10), and with
     batch_size 1 as a row of its own; drain mode stops it once the queue is empty.
3. Exactly once, from the database after each run: genbot: every job succeeded with one
   attempt and has one 'running' event; procrastinate: every job succeeded with one attempt
   and has one 'started' event; pgqueuer: the queue table is empty and its log holds one
   'picked' and one 'successful' entry per job. The workers' own counts of the jobs they
   ran must add up to N as well.
Rounds alternate the order of the systems (A B C, then C B A, ...) so the machine's drift
hits all alike; the summary gives medians, and ratios as the median of per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from queue_bench import drop_pg, fresh_pg, open_queue  # noqa: E402

from storage.queue import NewJob, Submission  # noqa: E402

SUBMITTERS = 4  # genbot's batches come from this many submitters, in turn
PGQ_ENTRYPOINT = "noop"


def asyncpg_url(url: str) -> str:
    return url.replace("postgres://", "postgresql://", 1)


async def connect(url: str):
    import asyncpg
    return await asyncpg.connect(asyncpg_url(url))


# --- databases --------------------------------------------------------------------------

def fresh_db(base: str) -> tuple[str, str]:
    """A new, empty database on `base`'s server: (its URL, its name)."""
    name = f"bench_peers_{uuid.uuid4().hex[:8]}"

    async def make() -> None:
        conn = await connect(base)
        try:
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()
    asyncio.run(make())
    return urlunsplit(urlsplit(base)._replace(path=f"/{name}")), name


def drop_db(base: str, name: str) -> None:
    async def drop() -> None:
        conn = await connect(base)
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await conn.close()
    asyncio.run(drop())


def genbot_db(base: str) -> tuple[str, Callable[[], None]]:
    made = fresh_pg(base)
    if made is None:
        raise SystemExit(f"PostgreSQL unreachable at {base}")
    url, schema = made
    return url, lambda: drop_pg(base, schema)


def peer_db(base: str) -> tuple[str, Callable[[], None]]:
    url, name = fresh_db(base)
    return url, lambda: drop_db(base, name)


def chunks(n: int, size: int) -> list[range]:
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


# --- genbot -----------------------------------------------------------------------------

async def genbot_install(url: str) -> None:
    queue = await open_queue(url)  # applies the migrations
    await queue.close()


async def genbot_enqueue(url: str, n: int, chunk: int) -> float:
    queue = await open_queue(url)
    subs = [Submission("bench", f"user{k % SUBMITTERS}", [NewJob(i, {"i": i}) for i in part])
            for k, part in enumerate(chunks(n, chunk))]
    start = time.perf_counter()
    for sub in subs:
        await queue.enqueue(sub)
    elapsed = time.perf_counter() - start
    await queue.close()
    return elapsed


async def genbot_check(url: str, n: int) -> tuple[bool, str]:
    queue = await open_queue(url)
    try:
        jobs = await queue.db.fetchrow(
            "SELECT count(*) AS jobs, count(*) FILTER (WHERE status = 'succeeded' "
            "AND attempts = 1) AS once FROM jobs")
        runs = await queue.db.fetchrow(
            "SELECT count(*) AS runs, count(DISTINCT job_id) AS distinct_jobs FROM events "
            "WHERE kind = 'running'")
    finally:
        await queue.close()
    ok = jobs["jobs"] == jobs["once"] == runs["runs"] == runs["distinct_jobs"] == n
    return ok, (f"{jobs['once']}/{jobs['jobs']} jobs succeeded at attempt 1, "
                f"{runs['runs']} 'running' events on {runs['distinct_jobs']} jobs")


async def genbot_last_done(url: str) -> float:
    queue = await open_queue(url)
    try:
        return float(await queue.db.fetchval("SELECT max(finished_at) FROM jobs"))
    finally:
        await queue.close()


async def genbot_worker(url: str, batch: int) -> None:
    """Claim and complete until the queue stays empty, as an executor does: each
    completion carries the next claim in the same round trip — one job at a time
    (batch 0: Queue.claim, then complete_and_claim) or `batch` jobs a round trip
    (claim_many, then complete_many_and_claim)."""
    from storage.queue import Claim
    queue = await open_queue(url)
    await ready()
    ran, empty, owner = 0, 0, f"w{os.getpid()}"
    leases: list = []
    while empty < 3:
        if not leases:
            if batch:
                leases = await queue.claim_many(owner, batch)
            else:
                lease = await queue.claim(owner)
                leases = [lease] if lease else []
        if not leases:
            empty += 1
            await asyncio.sleep(0.05)
            continue
        empty = 0
        ran += len(leases)  # the no-op "ran"
        if batch:
            _, leases = await queue.complete_many_and_claim(
                [(lease, []) for lease in leases], owner, batch)
        else:
            _, taken = await queue.complete_and_claim(leases[0], [], Claim(owner))
            leases = [taken] if taken else []
    print("done", ran, flush=True)
    await queue.close()


# --- procrastinate ----------------------------------------------------------------------

def procrastinate_app(url: str, pool: int = 4):
    """The app, its no-op task and the list whose first item counts the task's runs."""
    import procrastinate
    # It warns when the app is made in __main__ (task names would start "__main__."):
    # the one task here is named explicitly, the same in the bench and its workers.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=url, min_size=pool, max_size=pool))
    ran = [0]

    @app.task(name="noop")
    async def noop(i: int) -> None:
        ran[0] += 1
    return app, noop, ran


async def procrastinate_install(url: str) -> None:
    app, _, _ = procrastinate_app(url, pool=1)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def procrastinate_enqueue(url: str, n: int, chunk: int) -> float:
    app, noop, _ = procrastinate_app(url, pool=1)
    batches = [[{"i": i} for i in part] for part in chunks(n, chunk)]
    async with app.open_async():
        start = time.perf_counter()
        for batch in batches:
            await noop.batch_defer_async(*batch)
        return time.perf_counter() - start


async def procrastinate_check(url: str, n: int) -> tuple[bool, str]:
    conn = await connect(url)
    try:
        jobs = await conn.fetchrow(
            "SELECT count(*) AS jobs, count(*) FILTER (WHERE status = 'succeeded' "
            "AND attempts = 1) AS once FROM procrastinate_jobs")
        runs = await conn.fetchrow(
            "SELECT count(*) AS runs, count(DISTINCT job_id) AS distinct_jobs "
            "FROM procrastinate_events WHERE type = 'started'")
    finally:
        await conn.close()
    ok = jobs["jobs"] == jobs["once"] == runs["runs"] == runs["distinct_jobs"] == n
    return ok, (f"{jobs['once']}/{jobs['jobs']} jobs succeeded at attempt 1, "
                f"{runs['runs']} 'started' events on {runs['distinct_jobs']} jobs")


async def procrastinate_last_done(url: str) -> float:
    conn = await connect(url)
    try:
        return float(await conn.fetchval(
            "SELECT extract(epoch FROM max(at)) FROM procrastinate_events "
            "WHERE type = 'succeeded'"))
    finally:
        await conn.close()


async def procrastinate_worker(url: str, concurrency: int) -> None:
    app, _, ran = procrastinate_app(url, pool=concurrency + 2)
    async with app.open_async():
        await ready()
        await app.run_worker_async(concurrency=concurrency, wait=False,
                                   install_signal_handlers=False)
    print("done", ran[0], flush=True)


# --- pgqueuer ---------------------------------------------------------------------------

def pgqueuer_queries(conn):
    from pgqueuer import AsyncpgDriver, Queries
    return Queries(AsyncpgDriver(conn))


async def pgqueuer_install(url: str) -> None:
    conn = await connect(url)
    try:
        await pgqueuer_queries(conn).install()
    finally:
        await conn.close()


async def pgqueuer_enqueue(url: str, n: int, chunk: int) -> float:
    conn = await connect(url)
    queries = pgqueuer_queries(conn)
    batches = [([PGQ_ENTRYPOINT] * len(part), [str(i).encode() for i in part], [0] * len(part))
               for part in chunks(n, chunk)]
    try:
        start = time.perf_counter()
        for entrypoints, payloads, priorities in batches:
            await queries.enqueue(entrypoints, payloads, priorities)
        return time.perf_counter() - start
    finally:
        await conn.close()


async def pgqueuer_check(url: str, n: int) -> tuple[bool, str]:
    conn = await connect(url)
    try:
        left = await conn.fetchval("SELECT count(*) FROM pgqueuer")
        log = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE status = 'picked') AS picked, "
            "count(DISTINCT job_id) FILTER (WHERE status = 'picked') AS picked_jobs, "
            "count(*) FILTER (WHERE status = 'successful') AS ok, "
            "count(DISTINCT job_id) FILTER (WHERE status = 'successful') AS ok_jobs, "
            "count(*) FILTER (WHERE status NOT IN ('queued', 'picked', 'successful')) "
            "AS other FROM pgqueuer_log")
    finally:
        await conn.close()
    ok = (left == 0 and log["other"] == 0
          and log["picked"] == log["picked_jobs"] == log["ok"] == log["ok_jobs"] == n)
    return ok, (f"{left} left in the queue table; log: {log['picked']} 'picked' on "
                f"{log['picked_jobs']} jobs, {log['ok']} 'successful' on {log['ok_jobs']}, "
                f"{log['other']} other")


async def pgqueuer_last_done(url: str) -> float:
    conn = await connect(url)
    try:
        return float(await conn.fetchval(
            "SELECT extract(epoch FROM max(created)) FROM pgqueuer_log "
            "WHERE status = 'successful'"))
    finally:
        await conn.close()


async def pgqueuer_worker(url: str, batch_size: int) -> None:
    from pgqueuer import QueueManager
    from pgqueuer.types import QueueExecutionMode
    conn = await connect(url)
    qm = QueueManager(pgqueuer_queries(conn))
    ran = 0

    @qm.entrypoint(PGQ_ENTRYPOINT)
    async def noop(job) -> None:
        nonlocal ran
        ran += 1
    await ready()
    # dequeue_timeout: how long an idle worker waits for a notification before it looks
    # again (30 s by default); only the tail of the run, after the last job, waits on it.
    await qm.run(batch_size=batch_size, mode=QueueExecutionMode.drain,
                 dequeue_timeout=timedelta(seconds=1))
    await conn.close()
    print("done", ran, flush=True)


# --- running a row ----------------------------------------------------------------------

async def ready() -> None:
    """Tell the bench this worker is connected, then wait to be released."""
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)


@dataclass(frozen=True)
class System:
    name: str
    make_db: Callable[[str], tuple[str, Callable[[], None]]]
    install: Callable[[str], Awaitable[None]]
    enqueue: Callable[[str, int, int], Awaitable[float]]
    check: Callable[[str, int], Awaitable[tuple[bool, str]]]
    last_done: Callable[[str], Awaitable[float]]
    db_clock: bool  # last_done is the database's clock (else the workers', this host's)


GENBOT = System("genbot", genbot_db, genbot_install, genbot_enqueue, genbot_check,
                genbot_last_done, db_clock=False)
PROCRASTINATE = System("procrastinate", peer_db, procrastinate_install, procrastinate_enqueue,
                       procrastinate_check, procrastinate_last_done, db_clock=True)
PGQUEUER = System("pgqueuer", peer_db, pgqueuer_install, pgqueuer_enqueue, pgqueuer_check,
                  pgqueuer_last_done, db_clock=True)


@dataclass
class Row:
    key: str
    label: str
    system: System
    worker: list[str]  # the private subcommand and its arguments, after the URL
    drain: list[float] = field(default_factory=list)
    enqueue: list[float] = field(default_factory=list)
    once: list[bool] = field(default_factory=list)


def spawn(args: list[str], url: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, args[0], url, *args[1:]],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)


def expect_ready(p: subprocess.Popen) -> None:
    line = p.stdout.readline().strip()
    if line != "ready":
        raise SystemExit(f"a worker ({p.args[2]}) did not start: {line!r}, exit {p.poll()}")


async def release(base: str, procs: list[subprocess.Popen]) -> tuple[float, float]:
    """Release the workers together; returns when, on this host's clock and the database's."""
    conn = await connect(base)
    try:
        db_now = float(await conn.fetchval("SELECT extract(epoch FROM clock_timestamp())"))
        local_now = time.time()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
    finally:
        await conn.close()
    return local_now, db_now


def run_row(row: Row, base: str, n: int, workers: int, chunk: int, rnd: int) -> None:
    url, drop = row.system.make_db(base)
    procs: list[subprocess.Popen] = []
    try:
        asyncio.run(row.system.install(url))
        procs = [spawn(row.worker, url) for _ in range(workers)]
        for p in procs:
            expect_ready(p)
        enqueue = asyncio.run(row.system.enqueue(url, n, chunk))
        local_start, db_start = asyncio.run(release(base, procs))
        ran = 0
        deadline = time.monotonic() + max(120.0, n / 20)
        for p in procs:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            words = out.split()
            if p.returncode != 0 or len(words) != 2 or words[0] != "done":
                raise SystemExit(f"{row.label}: a worker exited {p.returncode}: {out!r}")
            ran += int(words[1])
        end = asyncio.run(row.system.last_done(url))
        ok, detail = asyncio.run(row.system.check(url, n))
        ok = ok and ran == n
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        drop()
    elapsed = end - (db_start if row.system.db_clock else local_start)
    row.drain.append(n / elapsed)
    row.enqueue.append(n / enqueue)
    row.once.append(ok)
    print(f"   round {rnd}  {row.label:44}  enqueue {n / enqueue:8,.0f} jobs/s  drain "
          f"{n / elapsed:7,.0f} jobs/s ({elapsed:6.2f} s)  exactly once: "
          f"{'yes' if ok else 'NO'}{'' if ok else f'  ({detail}; workers ran {ran})'}",
          flush=True)


def ratio(a: Row, b: Row) -> float:
    return statistics.median(x / y for x, y in zip(a.drain, b.drain))


# --- main -------------------------------------------------------------------------------

WORKERS = {
    "_genbot": lambda url, k: genbot_worker(url, int(k)),
    "_procrastinate": lambda url, c: procrastinate_worker(url, int(c)),
    "_pgqueuer": lambda url, b: pgqueuer_worker(url, int(b)),
}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in WORKERS:
        return asyncio.run(WORKERS[sys.argv[1]](*sys.argv[2:]))
    p = argparse.ArgumentParser()
    p.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432/test")
    p.add_argument("--jobs", type=int, default=10_000, help="no-op jobs per run")
    p.add_argument("--workers", type=int, default=4, help="worker processes per run")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--chunk", type=int, default=100, help="jobs per enqueue batch")
    p.add_argument("--genbot-batch", type=int, default=10,
                   help="jobs per claim_many / complete_many_and_claim (0: no such row)")
    p.add_argument("--concurrency", type=int, default=10,
                   help="procrastinate: jobs each worker process runs at once")
    p.add_argument("--smoke", action="store_true",
                   help="a few of each, to prove it runs (the test suite): figures mean nothing")
    args = p.parse_args()
    # (the smoke: each row once, at sizes that cost little: one worker process a row, since
    # each pays its imports and connections)
    n, workers, rounds = (100, 1, 1) if args.smoke else (args.jobs, args.workers, args.rounds)

    async def server_version() -> str:
        conn = await connect(args.pg)
        try:
            return await conn.fetchval("SHOW server_version")
        finally:
            await conn.close()
    try:
        server = asyncio.run(server_version())
    except (TimeoutError, OSError) as error:
        raise SystemExit(f"PostgreSQL unreachable at {args.pg}: {error}") from None
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {platform.platform()}")
    print(f"PostgreSQL {server}; procrastinate {metadata.version('procrastinate')}, "
          f"pgqueuer {metadata.version('pgqueuer')}")

    rows = [Row("genbot", "genbot (1 at a time: complete_and_claim)", GENBOT, ["_genbot", "0"])]
    batched = args.genbot_batch > 0
    if batched:
        k = args.genbot_batch
        rows.append(Row("genbot_many", f"genbot batched ({k}: complete_many_and_claim)",
                        GENBOT, ["_genbot", str(k)]))
    c = args.concurrency
    rows += [
        Row("procrastinate", f"procrastinate (concurrency {c}, pool {c + 2})", PROCRASTINATE,
            ["_procrastinate", str(c)]),
        Row("pgqueuer", "pgqueuer (batch_size 10, its default)", PGQUEUER, ["_pgqueuer", "10"]),
        Row("pgqueuer_1", "pgqueuer (batch_size 1)", PGQUEUER, ["_pgqueuer", "1"]),
    ]
    if not batched:
        print("genbot batched: skipped (--genbot-batch 0)")

    print(f"\n{n:,} no-op jobs per run, enqueued up front in batches of {args.chunk}, "
          f"drained by {workers} worker processes; {rounds} round(s), the order reversed "
          "each round")
    for rnd in range(1, rounds + 1):
        for row in rows if rnd % 2 else rows[::-1]:
            run_row(row, args.pg, n, workers, args.chunk, rnd)

    by = {row.key: row for row in rows}
    print(f"\nsummary: median of {rounds} round(s); {n:,} jobs, {workers} worker processes")
    print(f"   {'system':44}  {'enqueue jobs/s':>14}  {'drain jobs/s':>12}  exactly once")
    for row in rows:
        print(f"   {row.label:44}  {statistics.median(row.enqueue):14,.0f}  "
              f"{statistics.median(row.drain):12,.0f}  "
              f"{'yes' if all(row.once) else 'NO'}")
    print("   drain ratios (median of per-round ratios; > 1: genbot is faster):")
    for key in ("genbot", "genbot_many"):
        if key in by:
            name = "genbot" if key == "genbot" else "genbot batched"
            print(f"   {name}/pgqueuer(default batch 10) {ratio(by[key], by['pgqueuer']):.2f}"
                  f"   {name}/pgqueuer(batch 1) {ratio(by[key], by['pgqueuer_1']):.2f}"
                  f"   {name}/procrastinate {ratio(by[key], by['procrastinate']):.2f}")


if __name__ == "__main__":
    main()
