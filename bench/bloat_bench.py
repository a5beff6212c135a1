"""How much does a transaction held open slow the queue down? Prints figures and ratios;
asserts nothing. Record results in docs/benchmarks.md.

  python bench/bloat_bench.py [--pg URL] [--seconds 60] [--workers 2] [--rounds 2] [--smoke]

A long transaction (a report someone left open in psql, a stuck migration, a replica's
hot_standby_feedback) holds back PostgreSQL's xmin horizon: no dead row version younger
than it can be vacuumed, so every claim walks more dead index entries and heap pages as
the queue churns. Worker processes claim and complete no-op jobs for `--seconds`, with
the queue kept topped up to about 2,000 waiting jobs, in alternating periods: free (no
held transaction) and held (a REPEATABLE READ transaction open for the whole period),
each on the tables as migration 0019 tunes them (fillfactor, autovacuum) and on
PostgreSQL's defaults (the settings reset), periods interleaved so the machine's drift
hits all alike. Each period starts from a vacuumed table. Prints jobs/s per period, the
dead row versions the period left, and the held/free ratio per setting.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from queue_bench import drop_pg, fresh_pg, open_queue  # noqa: E402

from storage.queue import NewJob, Submission  # noqa: E402

TUNED = "fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, " \
    "autovacuum_vacuum_threshold = 500, autovacuum_analyze_scale_factor = 0.02, " \
    "autovacuum_analyze_threshold = 500, autovacuum_vacuum_cost_delay = 1"
DEFAULTS = "fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, " \
    "autovacuum_analyze_scale_factor, autovacuum_analyze_threshold, autovacuum_vacuum_cost_delay"
TOP_UP = 2000


async def worker(url: str, seconds: float) -> None:
    """Claim and complete until `seconds` have passed; print how many."""
    queue = await open_queue(url)
    print("ready", flush=True)
    sys.stdin.readline()  # the go signal
    done, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        lease = await queue.claim("bench")
        if lease is None:
            await asyncio.sleep(0.005)
            continue
        await queue.complete(lease, [])
        done += 1
    await queue.close()
    print(done, flush=True)


async def top_up(url: str, until: float) -> None:
    queue = await open_queue(url)
    try:
        while time.monotonic() < until:
            counts = await queue.active_counts()
            if counts.queued < TOP_UP:
                await queue.enqueue(Submission("t", f"u{int(time.monotonic()) % 5}", [
                    NewJob(i, {"i": i}) for i in range(TOP_UP - counts.queued + 200)]))
            await asyncio.sleep(0.2)
    finally:
        await queue.close()


async def period(url: str, schema: str, base: str, workers: int, seconds: float,
                 held: bool, tuned: bool) -> tuple[float, int]:
    """One period: (jobs/s, dead row versions of jobs at its end)."""
    import asyncpg
    conn = await asyncpg.connect(base.replace("postgres://", "postgresql://", 1))
    try:
        await conn.execute(f"SET search_path = {schema}")
        await conn.execute(f"ALTER TABLE jobs SET ({TUNED})" if tuned
                           else f"ALTER TABLE jobs RESET ({DEFAULTS})")
        await conn.execute("VACUUM jobs")
        holder = None
        if held:
            holder = await asyncpg.connect(base.replace("postgres://", "postgresql://", 1))
            await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            await holder.fetchval(f"SELECT count(*) FROM {schema}.batches")  # takes the snapshot
        procs = [subprocess.Popen([sys.executable, __file__, "_worker", url, str(seconds)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for _ in range(workers)]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        filling = asyncio.create_task(top_up(url, time.monotonic() + seconds + 1))
        started = time.monotonic()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        done = 0
        for p in procs:
            out, _ = await asyncio.to_thread(p.communicate)
            done += int(out.strip().splitlines()[-1])
        took = time.monotonic() - started
        await filling
        if holder is not None:
            await holder.execute("ROLLBACK")
            await holder.close()
        dead = await conn.fetchval("SELECT n_dead_tup FROM pg_stat_user_tables "
                                   "WHERE schemaname = $1 AND relname = 'jobs'", schema)
        return done / took, int(dead or 0)
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432/test")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--smoke", action="store_true",
                        help="1 s periods, one round, tuned tables only")
    args = parser.parse_args()
    if args.smoke:
        args.seconds, args.rounds = 1.0, 1
    made = fresh_pg(args.pg)
    if made is None:
        raise SystemExit(f"no PostgreSQL at {args.pg}")
    url, schema = made
    try:
        rates = asyncio.run(periods(url, schema, args))
    finally:
        drop_pg(args.pg, schema)
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, "
          f"python {platform.python_version()}, {args.workers} workers, "
          f"{args.seconds:g} s periods")
    for tuned in sorted({tuned for tuned, _ in rates}, reverse=True):
        free = statistics.median(rates[(tuned, False)])
        held = statistics.median(rates[(tuned, True)])
        print(f"{'tuned (0019)' if tuned else 'defaults':<13} free {free:7.0f} jobs/s, held "
              f"{held:7.0f} jobs/s: held/free {held / free:.2f}")


async def periods(url: str, schema: str, args: argparse.Namespace
                  ) -> dict[tuple[bool, bool], list[float]]:
    rates: dict[tuple[bool, bool], list[float]] = {}
    await (await open_queue(url)).close()  # migrated
    kinds = [(tuned, held) for tuned in ((True,) if args.smoke else (True, False))
             for held in (False, True)]
    for r in range(args.rounds):
        for tuned, held in (kinds if r % 2 == 0 else kinds[::-1]):
            rate, dead = await period(url, schema, args.pg, args.workers, args.seconds,
                                      held, tuned)
            rates.setdefault((tuned, held), []).append(rate)
            print(f"round {r + 1} {'tuned' if tuned else 'default':<7} "
                  f"{'held' if held else 'free':<4} {rate:8.0f} jobs/s, "
                  f"{dead:,} dead row versions after {args.seconds:g} s", flush=True)
    return rates


if __name__ == "__main__":
    if sys.argv[1:2] == ["_worker"]:
        asyncio.run(worker(sys.argv[2], float(sys.argv[3])))
    else:
        main()
