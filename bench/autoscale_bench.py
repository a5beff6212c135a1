"""An autoscaler following genbot's placement metric, with real `genbot worker` processes
on PostgreSQL, through a burst, an idle period and a second burst. Prints figures; asserts
nothing about speed. Record results in docs/benchmarks.md.

  python bench/autoscale_bench.py [--pg URL] [--burst 60] [--second 30] [--max 4]
                                  [--job-seconds 0.5] [--gap 30] [--quick]

The scaler is what KEDA does with deploy/kubernetes, at a faster pace: every
--poll seconds it reads Queue.placement() (the genbot_placement view KEDA's query
reads), wants one worker per job ready, claimed ahead or running (targetQueryValue 1),
up to --max, starts workers up to that and SIGTERMs the newest beyond it (each drains:
its job finishes, what it claimed ahead goes back). Workers also leave on their own
after --idle seconds with nothing to take (`--exit-when-idle`), so the pool reaches zero.
Each worker drives its own ComfyUI server (tests/fakes/comfyui.py, --job-seconds per
image, bench/comfy_bench.py's template), so no GPU is needed and a worker starts in about a second.

Reported: every job succeeded exactly once (from the database: one 'succeeded' event
each, re-runs counted), time to first image from zero workers for each burst,
worker-seconds used against an always-on pool of --max, and the pool's size over time.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from comfy_bench import bench_jobs, write_template  # noqa: E402
from queue_bench import drop_pg, fresh_pg  # noqa: E402

from storage import config as cfg  # noqa: E402
from storage.queue import Queue, Submission, open_queue  # noqa: E402
from templates.loader import load_templates  # noqa: E402
from templates.settings import templates_dir  # noqa: E402
from tests.fakes.comfyui import FakeComfy  # noqa: E402

STEPS = 10


class Pool:
    """The worker processes the scaler started, each on a ComfyUI server of its own."""

    def __init__(self, config_file: Path, servers: list[str], idle: float, log: Path):
        self.config_file, self.free, self.idle, self.log = config_file, list(servers), idle, log
        self.live: dict[subprocess.Popen, tuple[str, float]] = {}  # -> (server, started)
        self.worker_seconds = 0.0
        self.started = self.drained = 0

    def reap(self) -> None:
        for proc, (server, began) in list(self.live.items()):
            if proc.poll() is not None:
                self.worker_seconds += time.monotonic() - began
                self.free.append(server)
                del self.live[proc]

    def grow(self) -> None:
        server = self.free.pop(0)
        with self.log.open("a") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "executor.worker", "--config", str(self.config_file),
                 "--comfyui", server, "--exit-when-idle", str(self.idle),
                 "--drain-seconds", "30"], cwd=ROOT, stdout=out, stderr=out)
        self.live[proc] = (server, time.monotonic())
        self.started += 1

    def stop(self) -> None:
        for proc in self.live:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in list(self.live):
            proc.wait(60)
        self.reap()


async def scale(queue: Queue, pool: Pool, maximum: int, until: asyncio.Event,
                poll: float, sizes: list[tuple[float, int]], t0: float) -> None:
    """The autoscaler: desired = ready + ahead + running (capped), every `poll` seconds."""
    terminating: set[subprocess.Popen] = set()
    while not until.is_set():
        pool.reap()
        terminating &= set(pool.live)
        demand = sum(p.ready + p.ahead + p.running for p in await queue.placement()
                     if p.engine == "comfyui")
        desired = min(maximum, demand)
        serving = len(pool.live) - len(terminating)
        for _ in range(desired - serving):
            pool.grow()
        for _ in range(serving - desired):
            candidates = [p for p in pool.live if p not in terminating]
            if not candidates or demand == 0:
                break  # with nothing left, workers leave by themselves (exit_when_idle)
            newest = max(candidates, key=lambda p: pool.live[p][1])
            newest.send_signal(signal.SIGTERM)
            terminating.add(newest)
            pool.drained += 1
        sizes.append((time.monotonic() - t0, len(pool.live)))
        await asyncio.sleep(poll)


async def burst(queue: Queue, template, n: int, first_seed: int) -> tuple[int, float]:
    """Queue `n` jobs; (batch id, seconds until its first image)."""
    jobs = bench_jobs(template, n, first_seed, STEPS)
    started = time.monotonic()
    batch = (await queue.enqueue(Submission("bench", "bench:me", jobs))).batch_id
    first = None
    deadline = started + 60 + 10 * n
    while (progress := await queue.batch_progress(batch)) and progress.done < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"batch {batch}: {progress.done} of {n} jobs done after "
                             f"{time.monotonic() - started:.0f} s; see the workers' log")
        if first is None and progress.counts.get("succeeded"):
            first = time.monotonic() - started
        await asyncio.sleep(0.05)
    return batch, first if first is not None else time.monotonic() - started


async def run(args: argparse.Namespace, url: str, folder: Path) -> None:
    write_template(folder / "t")
    config_file = folder / "genbot.toml"
    config_file.write_text(f"""
[service]
data_dir = "{folder / 'data'}"
[database]
url = "{url}"
[templates]
dir = "{folder / 't'}"
[queue]
poll_interval = 0.5
lease_seconds = 10.0
heartbeat_seconds = 1.0
""")
    config = cfg.load(str(config_file), env={})
    servers = [FakeComfy(step_delay=args.job_seconds / STEPS, cache=False)
               for _ in range(args.max + 2)]
    for server in servers:
        await server.__aenter__()
    queue = await open_queue(config)
    pool = Pool(config_file, [s.url for s in servers], args.idle, folder / "workers.log")
    stop = asyncio.Event()
    sizes: list[tuple[float, int]] = []
    t0 = time.monotonic()
    scaler = asyncio.create_task(scale(queue, pool, args.max, stop, args.poll, sizes, t0))
    template = load_templates(templates_dir(config))[0]["bench"]
    try:
        first_batch, first_image = await burst(queue, template, args.burst, 1)
        busy_until = time.monotonic() - t0
        while pool.live:  # the idle period: every worker leaves
            await asyncio.sleep(0.1)
        zero_at = time.monotonic() - t0
        await asyncio.sleep(args.gap)  # the quiet hours: nothing runs, nothing is paid for
        second_batch, second_image = await burst(queue, template, args.second, 10_000)
        wall = time.monotonic() - t0
    finally:
        stop.set()
        await scaler
        pool.stop()
        jobs = await queue.batch_jobs(first_batch) + await queue.batch_jobs(second_batch)
        ends = Counter(e.job_id for e in await queue.events_after(0, 10**6)
                       if e.kind == "succeeded")
        await queue.close()
        for server in servers:
            await server.__aexit__(None, None, None)
    once = all(j.status == "succeeded" and ends[j.id] == 1 for j in jobs)
    reruns = sum(j.attempts - 1 for j in jobs)
    peak = max(n for _, n in sizes)
    always_on = args.max * wall
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, python {platform.python_version()}")
    print(f"jobs: {len(jobs)} ({args.burst} + {args.second}), {args.job_seconds:g} s each; "
          f"pool max {args.max}, scaler every {args.poll:g} s, exit when idle {args.idle:g} s, "
          f"{args.gap:g} s at zero between the bursts")
    print(f"exactly once: {'yes' if once else 'NO'} (re-runs: {reruns}); workers started "
          f"{pool.started}, told to drain {pool.drained}, peak {peak}")
    print(f"first burst done at {busy_until:.1f} s; pool at zero at {zero_at:.1f} s; "
          f"second burst done at {wall:.1f} s")
    print(f"time to first image from zero: first burst {first_image:.2f} s, second burst "
          f"{second_image:.2f} s")
    print(f"worker-seconds: {pool.worker_seconds:.1f} used vs {always_on:.1f} always-on "
          f"({pool.worker_seconds / always_on:.2f} of it)")
    print("pool size over time: " + " ".join(
        f"{t:.0f}s:{n}" for t, n in sizes[::max(1, math.ceil(len(sizes) / 24))]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432/test")
    parser.add_argument("--burst", type=int, default=60)
    parser.add_argument("--second", type=int, default=30)
    parser.add_argument("--max", type=int, default=4)
    parser.add_argument("--job-seconds", type=float, default=0.5)
    parser.add_argument("--poll", type=float, default=0.5)
    parser.add_argument("--idle", type=float, default=3.0, help="workers' --exit-when-idle")
    parser.add_argument("--gap", type=float, default=30.0,
                        help="seconds at zero workers between the bursts")
    parser.add_argument("--quick", action="store_true", help="6 + 3 jobs, 2 workers")
    args = parser.parse_args()
    if args.quick:
        args.burst, args.second, args.max, args.job_seconds, args.idle, args.gap = \
            6, 3, 2, 0.2, 1.0, 1.0
    made = fresh_pg(args.pg)
    if made is None:
        raise SystemExit(f"no PostgreSQL at {args.pg}")
    url, schema = made
    try:
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
            asyncio.run(run(args, url, Path(tmp)))
    finally:
        drop_pg(args.pg, schema)


if __name__ == "__main__":
    main()
