"""Queue benchmark: prints figures and ratios; asserts nothing.
Record results in docs/benchmarks.md.

  python bench/queue_bench.py [--pg postgres://postgres@127.0.0.1:5432/test] [--quick]

1. Enqueue one 10,000-job batch (target < 1 s on SQLite).
2. Claim+complete of no-op jobs: 1 worker process on SQLite (target >= 1,000 jobs/s),
   4 worker processes on PostgreSQL (target >= 2,000 jobs/s), and the other pairings.
3. Enqueue-to-claim latency for an idle executor in another process, p50/p99, with the
   wake-up signal and with polling alone, measured side by side (target p99 < 100 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from storage.config import QueueConfig  # noqa: E402
from storage.db import Database  # noqa: E402
from storage.queue import NewJob, Queue, Submission  # noqa: E402
from storage.wakeup import Waker  # noqa: E402

SETTINGS = QueueConfig(max_queue_size=10_000_000, poll_interval=0.25)


class NeverWaker(Waker):
    """Polling only: what the wake-up signal is compared against."""

    async def notify(self) -> None:
        pass


async def open_queue(url: str, *, polling_only: bool = False) -> Queue:
    db = await Database(url).open()
    return Queue(db, SETTINGS, waker=NeverWaker() if polling_only else None)


def jobs(n: int) -> list[NewJob]:
    return [NewJob(i + 2, {"prompt": f"row {i}", "seed": i}) for i in range(n)]


# --- child processes --------------------------------------------------------------------

async def worker_drain(url: str, joined: bool) -> None:
    """Wait for 'go' on stdin, then claim+complete until empty; print count and end time.
    `joined`: each completion claims the next job in the same round trip, as executors
    do (Queue.complete_and_claim); else a claim and a complete, one after the other."""
    from storage.queue import Claim
    queue = await open_queue(url)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    done, empty, owner = 0, 0, f"w{os.getpid()}"
    lease = None
    while empty < 3:
        lease = lease or await queue.claim(owner)
        if lease is None:
            empty += 1
            await asyncio.sleep(0.05)
            continue
        empty = 0
        if joined:
            _, lease = await queue.complete_and_claim(lease, [], Claim(owner))
        else:
            await queue.complete(lease, [])
            lease = None
        done += 1
        last = time.time()
    print("done", done, last if done else 0, flush=True)
    await queue.close()


async def worker_bare_drain(url: str) -> None:
    """The same claim and complete statements straight on the driver (aiosqlite or asyncpg),
    without the queue's Python: the baseline the queue's throughput is compared with."""
    from storage import queries as q
    from storage.db import named
    if url.startswith("sqlite"):
        import aiosqlite
        conn = await aiosqlite.connect(url.removeprefix("sqlite://"), isolation_level=None)
        for pragma in ("busy_timeout=30000", "journal_mode=WAL", "synchronous=FULL",
                       "foreign_keys=ON", "journal_size_limit=67108864"):
            await conn.execute(f"PRAGMA {pragma}")
        dialect = "sqlite"
        fetch = conn.execute_fetchall
    else:
        import asyncpg
        base, _, schema = url.partition("?schema=")
        conn = await asyncpg.connect(base.replace("postgres://", "postgresql://", 1),
                                     server_settings={"search_path": schema})
        dialect = "postgres"

        async def fetch(sql, args):
            return await conn.fetch(sql, *args)
    claim_sql, claim_names = named(q.for_dialect(q.placed(q.CLAIM, q.ANYTHING), dialect), dialect)
    complete_sql, complete_names = named(q.COMPLETE, dialect)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    done, empty, owner = 0, 0, f"w{os.getpid()}"
    while empty < 3:
        now = time.time()
        token = uuid.uuid4().hex
        claim = {"owner": owner, "token": token, "expires": now + 60, "now": now}
        rows = await fetch(claim_sql, [claim[n] for n in claim_names])
        if not rows:
            empty += 1
            await asyncio.sleep(0.05)
            continue
        empty = 0
        done_now = {"job": rows[0]["id"] if not url.startswith("sqlite") else rows[0][0],
                    "lease": token, "outputs": "[]", "now": time.time()}
        await fetch(complete_sql, [done_now[n] for n in complete_names])
        done += 1
        last = time.time()
    print("done", done, last if done else 0, flush=True)
    await conn.close()


async def worker_latency(url: str, polling_only: bool) -> None:
    """Idle executor: wait for work, claim it, print the wall-clock time of the claim."""
    queue = await open_queue(url, polling_only=polling_only)
    await queue.wait_for_work(0)
    print("ready", flush=True)
    while True:
        lease = await queue.claim("sleeper")
        if lease is None:
            await queue.wait_for_work()
            continue
        print("claimed", lease.row, time.time(), flush=True)
        await queue.complete(lease, [])
        if lease.workflow.get("last"):
            break
    await queue.close()


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)


# --- measurements -----------------------------------------------------------------------

async def bench_enqueue(url: str, n: int = 10_000) -> float:
    queue = await open_queue(url)
    batch = jobs(n)
    start = time.perf_counter()
    await queue.enqueue(Submission("bench", "alice", batch))
    elapsed = time.perf_counter() - start
    await queue.close()
    return elapsed


async def seed(url: str, n: int) -> None:
    queue = await open_queue(url)
    for i in range(0, n, 10_000):
        await queue.enqueue(Submission("bench", f"user{i % 7}", jobs(min(10_000, n - i))))
    await queue.close()


OLD_EVENT_LOCK = """CREATE OR REPLACE FUNCTION genbot_events_serialize() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_xact_lock(1734700660); RETURN NULL; END $$"""


def bench_throughput(url: str, workers: int, n: int, mode: str = "_drain",
                     old_event_lock: bool = False) -> float:
    asyncio.run(seed(url, n))
    if old_event_lock:  # as before migration 0013: every event writer waits for the last
        async def exclusive() -> None:
            queue = await open_queue(url)
            await queue.db.execute(OLD_EVENT_LOCK)
            await queue.close()
        asyncio.run(exclusive())
    procs = [spawn(mode, url) for _ in range(workers)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    start = time.time()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    total, end = 0, start
    for p in procs:
        _, done, last = p.stdout.readline().split()
        total += int(done)
        end = max(end, float(last))
        p.wait()
    assert total == n, (total, n)
    return n / (end - start)


def bench_latency(url: str, samples: int, polling_only: bool) -> list[float]:
    child = spawn("_latency", url, "poll" if polling_only else "wake")
    assert child.stdout.readline().strip() == "ready"

    async def produce() -> list[float]:
        queue = await open_queue(url, polling_only=polling_only)
        out = []
        for i in range(samples):
            await asyncio.sleep(0.02 + (i % 7) * 0.013)  # arrive at varied moments
            sent = time.time()
            await queue.enqueue(Submission("bench", "alice", [
                NewJob(i, {"last": i == samples - 1})]))
            line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 30)
            kind, row, claimed = line.split()
            assert kind == "claimed" and int(row) == i, line
            out.append(float(claimed) - sent)
        await queue.close()
        return out

    result = asyncio.run(produce())
    child.wait()
    return result


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# --- main -------------------------------------------------------------------------------

def fresh_sqlite(tmp: Path) -> str:
    return f"sqlite:///{tmp / f'{uuid.uuid4().hex[:8]}.sqlite3'}"


def fresh_pg(base: str) -> tuple[str, str] | None:
    import asyncpg

    async def make() -> str | None:
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        try:
            conn = await asyncpg.connect(base.replace("postgres://", "postgresql://", 1), timeout=3)
        except Exception:
            return None
        await conn.execute(f"CREATE SCHEMA {schema}")
        await conn.close()
        return schema
    schema = asyncio.run(make())
    if schema is None:
        return None
    return f"{base}{'&' if '?' in base else '?'}schema={schema}", schema


def drop_pg(base: str, schema: str) -> None:
    import asyncpg

    async def drop() -> None:
        conn = await asyncpg.connect(base.replace("postgres://", "postgresql://", 1))
        await conn.execute(f"DROP SCHEMA {schema} CASCADE")
        await conn.close()
    asyncio.run(drop())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("_drain", "_drain2"):
        return asyncio.run(worker_drain(sys.argv[2], joined=sys.argv[1] == "_drain"))
    if len(sys.argv) > 1 and sys.argv[1] == "_bare":
        return asyncio.run(worker_bare_drain(sys.argv[2]))
    if len(sys.argv) > 1 and sys.argv[1] == "_latency":
        return asyncio.run(worker_latency(sys.argv[2], sys.argv[3] == "poll"))
    p = argparse.ArgumentParser()
    p.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432/test")
    p.add_argument("--quick", action="store_true", help="fewer jobs and samples")
    p.add_argument("--smoke", action="store_true",
                   help="a few of each, to prove it runs (the test suite): figures mean nothing")
    args = p.parse_args()
    # (the smoke: each path once, at sizes that cost little)
    n, samples, rounds = (50, 3, 1) if args.smoke else (4_000, 60, 1) if args.quick \
        else (10_000, 300, 3)

    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {platform.platform()}")
    tmp = Path(tempfile.mkdtemp(prefix="genbot-bench-"))
    backends = {"sqlite": lambda: (fresh_sqlite(tmp), None)}
    if fresh := fresh_pg(args.pg):
        drop_pg(args.pg, fresh[1])
        backends["postgres"] = lambda: fresh_pg(args.pg)
    else:
        print(f"postgres: unreachable at {args.pg}, skipped")

    def with_fresh_db(backend, fn):
        url, schema = backends[backend]()
        try:
            return fn(url)
        finally:
            if schema:
                drop_pg(args.pg, schema)

    reused: dict[str, str] = {}

    def with_db(backend, fn):
        """A fresh database for each measurement; in a smoke run, one a backend for all of
        sections 2 and 3: migrating a database costs more CPU than the smoke's work in it,
        and each run there leaves no job queued, as the next one expects."""
        if not args.smoke:
            return with_fresh_db(backend, fn)
        if backend not in reused:
            url, schema = backends[backend]()
            if schema:
                atexit.register(drop_pg, args.pg, schema)
            reused[backend] = url
        return fn(reused[backend])

    big = 1_000 if args.smoke else 10_000
    print(f"\n1. enqueue one {big:,}-job batch (target < 1 s for 10,000 on SQLite)")
    for backend in backends:
        # (a database of its own: the batch stays queued)
        t = with_fresh_db(backend, lambda url: asyncio.run(bench_enqueue(url, big)))
        print(f"   {backend:8}  {t * 1000:7.0f} ms   ({big / t:,.0f} jobs/s; "
              f"{t * 10_000 / big:.2f}x the 1 s target)")

    print(f"\n2. claim+complete of no-op jobs, {n:,} jobs "
          "(targets: SQLite 1 worker >= 1,000/s; PostgreSQL 4 workers >= 2,000/s)")
    print("   (queue: each completion claims the next in one round trip, as executors do;"
          " two trips: a claim, then a complete;\n    bare: the claim and complete statements "
          f"straight on the driver, no queue code; median of {rounds} interleaved rounds)")
    for backend in backends:
        target = 1000 if backend == "sqlite" else 2000
        rates = {}
        for w in (1,) if args.smoke else (1, 4):  # (the smoke: each path, one process)
            got: dict[str, list[float]] = {"_drain": [], "_drain2": [], "_bare": []}
            for _ in range(rounds):  # interleaved, so all see the same machine weather
                for mode, runs in got.items():
                    runs.append(with_db(backend, lambda url, w=w, mode=mode:
                                        bench_throughput(url, w, n, mode)))
            rates[w] = statistics.median(got["_drain"])
            ratio = statistics.median(q / b for q, b in zip(got["_drain"], got["_bare"]))
            aim = (f"  {rates[w] / target:.2f}x target" if (backend, w) in
                   (("sqlite", 1), ("postgres", 4)) else "")
            print(f"   {backend:8}  {w} worker{'s' if w > 1 else ' '}  queue {rates[w]:7,.0f} "
                  f"jobs/s  two trips {statistics.median(got['_drain2']):7,.0f}  bare "
                  f"{statistics.median(got['_bare']):7,.0f}  queue/bare {ratio:.2f}{aim}")
        if not args.smoke:  # (the smoke runs one count)
            print(f"   {backend:8}  4 vs 1 workers: {rates[4] / rates[1]:.2f}x")
        if backend == "postgres" and not args.smoke:
            shared, exclusive = [], []
            for _ in range(rounds):
                shared.append(with_db(backend, lambda url: bench_throughput(url, 4, n)))
                exclusive.append(with_db(backend, lambda url: bench_throughput(
                    url, 4, n, old_event_lock=True)))
            print(f"   postgres  4 workers, event writers sharing the lock "
                  f"{statistics.median(shared):7,.0f} jobs/s  each waiting for the last "
                  f"(before) {statistics.median(exclusive):7,.0f}  ratio "
                  f"{statistics.median(a / b for a, b in zip(shared, exclusive)):.2f}")

    print(f"\n3. enqueue-to-claim latency, idle executor in another process, {samples} samples "
          "(target p99 < 100 ms)")
    for backend in backends:
        wake = with_db(backend, lambda url: bench_latency(url, samples, polling_only=False))
        poll = with_db(backend, lambda url: bench_latency(url, samples, polling_only=True))
        print(f"   {backend:8}  wake-up: p50 {pct(wake, .5) * 1000:6.1f} ms  p99 "
              f"{pct(wake, .99) * 1000:6.1f} ms | polling every {SETTINGS.poll_interval:g} s: "
              f"p50 {pct(poll, .5) * 1000:6.1f} ms  p99 {pct(poll, .99) * 1000:6.1f} ms | "
              f"p50 ratio poll/wake {statistics.median(poll) / statistics.median(wake):.1f}x")


if __name__ == "__main__":
    main()
