"""Many workers on one PostgreSQL queue. Prints figures and ratios; asserts nothing.
Record results in docs/benchmarks.md.

  python bench/scale_bench.py [--pg postgres://postgres@127.0.0.1:5432/test] [--quick]

1. Claim+complete of no-op jobs by 1, 2 and 4 worker processes (the scaling ratio),
   rounds interleaved so the machine's weather hits every count alike.
2. Event latency across processes: a writer process commits state changes at random
   intervals; this process reads the event log as the service does — woken by the
   database (LISTEN/NOTIFY, storage.wakeup.EventBell) or polling every 0.3 s (the
   notifier's interval) — and measures commit-to-read, the two modes alternating.
Enqueue-to-claim latency (the executors' wake-up) is in bench/queue_bench.py.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from queue_bench import bench_throughput, drop_pg, fresh_pg, open_queue, pct  # noqa: E402

from storage.queue import NewJob, Submission  # noqa: E402

POLL = 0.3  # bot.chat.hub.NOTIFIER_POLL


async def writer(url: str, n: int) -> None:
    """Submit one-job batches at random intervals (each commit writes an event)."""
    queue = await open_queue(url)
    print("ready", flush=True)
    for i in range(n):
        await asyncio.sleep(random.uniform(0.05, 0.15))
        await queue.enqueue(Submission("t", "bench", [NewJob(2, {"i": i})]))
    await queue.close()


async def read_events(url: str, n: int, bell: bool) -> list[float]:
    queue = await open_queue(url)
    seq = await queue.last_event_seq()
    await queue.bell.wait(queue.bell.rung, 0.01)  # starts listening
    proc = subprocess.Popen([sys.executable, __file__, "_writer", url, str(n)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    seen: list[float] = []
    try:
        while True:
            rung = queue.bell.rung
            for event in await queue.events_after(seq):
                seq = event.seq
                seen.append(time.time() - event.at)
            if len(seen) >= n:  # (not one more wait: with the bell, a 3 s timeout)
                break
            if bell:
                await queue.bell.wait(rung, POLL * 10)
            else:
                await asyncio.sleep(POLL)
    finally:
        proc.wait()
        await queue.close()
    return seen


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_writer":
        return asyncio.run(writer(sys.argv[2], int(sys.argv[3])))
    p = argparse.ArgumentParser()
    p.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432/test")
    p.add_argument("--quick", action="store_true", help="fewer jobs and samples")
    p.add_argument("--smoke", action="store_true",
                   help="a few of each, to prove it runs (the test suite): figures mean nothing")
    args = p.parse_args()
    # (the smoke: each path once, at sizes that cost little)
    n, samples, rounds = (50, 3, 1) if args.smoke else (3_000, 40, 1) if args.quick \
        else (8_000, 150, 3)
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {platform.platform()}")

    reused: list[str] = []

    def with_pg(fn):
        """A fresh schema for each measurement; in a smoke run, one for them all: migrating a
        schema costs more CPU than the smoke's work in it, and each run leaves no job queued
        (and the event readers start after the last event)."""
        if reused:
            return fn(reused[0])
        made = fresh_pg(args.pg)
        if made is None:
            raise SystemExit(f"PostgreSQL unreachable at {args.pg}")
        url, schema = made
        if args.smoke:
            atexit.register(drop_pg, args.pg, schema)
            reused.append(url)
            return fn(url)
        try:
            return fn(url)
        finally:
            drop_pg(args.pg, schema)

    counts = (1, 2) if args.smoke else (1, 2, 4)
    print(f"\n1. claim+complete of no-op jobs on PostgreSQL, {n:,} jobs, median of {rounds} "
          "interleaved rounds")
    rates: dict[int, list[float]] = {w: [] for w in counts}
    for _ in range(rounds):
        for w in counts:
            rates[w].append(with_pg(lambda url, w=w: bench_throughput(url, w, n)))
    base = statistics.median(rates[1])
    for w in counts:
        rate = statistics.median(rates[w])
        print(f"   {w} worker{'s' if w > 1 else ' '}  {rate:7,.0f} jobs/s   x{rate / base:.2f} "
              "of 1 worker")

    print(f"\n2. event latency across processes, commit to read, {samples} events per mode")
    bell, poll = [], []
    halves = 1 if args.smoke else 2
    for _ in range(halves):  # alternating halves
        bell += with_pg(lambda url: asyncio.run(read_events(url, samples // halves, True)))
        poll += with_pg(lambda url: asyncio.run(read_events(url, samples // halves, False)))
    print(f"   LISTEN/NOTIFY: p50 {pct(bell, .5) * 1000:6.1f} ms  p99 "
          f"{pct(bell, .99) * 1000:6.1f} ms")
    print(f"   polling {POLL:g} s: p50 {pct(poll, .5) * 1000:6.1f} ms  p99 "
          f"{pct(poll, .99) * 1000:6.1f} ms")
    print(f"   p50 ratio poll/notify: {statistics.median(poll) / statistics.median(bell):.1f}x")


if __name__ == "__main__":
    main()
