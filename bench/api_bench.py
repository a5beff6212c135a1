"""Does /queue stay fast with many callers and a long history, and /healthz meanwhile?
Asserts nothing; record results in docs/benchmarks.md.

  python bench/api_bench.py [--small 20000] [--big 200000] [--clients 200] [--rounds 3]

Two real services (`genbot serve --no-executor`, SQLite, each its own process) run side
by side, one holding `small` jobs and one `big` (all but 100 of them finished: a long
history, as a busy install has). Round after round, alternating services so drift on a
noisy machine hits both alike, `clients` concurrent GET /api/v1/queue go to one service
while GET /healthz probes it one after another. Prints p50/p99 of both, and the
ratios: big/small near 1 means /queue costs the same at any history size; /healthz
loaded/idle near 1 means probes do not queue behind the load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from storage import config as cfg  # noqa: E402
from storage.queue import NewJob, Submission, open_queue  # noqa: E402

TOKEN = "bench-token-000000001"
ACTIVE = 100  # jobs left queued; the rest are history


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def populate(folder: Path, jobs: int) -> Path:
    """A data folder whose database holds `jobs` jobs, all but ACTIVE finished."""
    port = free_port()
    config_file = folder / "config.toml"
    folder.mkdir(parents=True)
    config_file.write_text(
        f'[service]\ndata_dir = "{folder}"\nport = {port}\nlog_level = "warning"\n'
        f'[queue]\nmax_queue_size = {jobs + 10}\n[api]\ntokens = ["{TOKEN}=bench"]\n')
    config = cfg.load(config_file)
    queue = await open_queue(config)
    try:
        for start in range(0, jobs, 5000):
            await queue.enqueue(Submission("social_thumb", "api:bench", [
                NewJob(row=i + 2, workflow={"title": f"t{i}"})
                for i in range(min(5000, jobs - start))], platform="api"))
        now = time.time()
        await queue.db.execute(
            "UPDATE jobs SET status = 'succeeded', started_at = $1, finished_at = $2 "
            "WHERE id <= $3", now - 2, now, jobs - ACTIVE)
    finally:
        await queue.close()
    return config_file


async def wait_up(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            try:
                async with http.get(f"{url}/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit(f"{url} did not start")


def probe(url: str, stop, out) -> None:
    """A liveness probe as a load balancer sends it: a new connection each time, from its
    own process (so the load generator's own event loop is not measured)."""
    import urllib.request
    times = []
    while not stop.is_set():
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"{url}/healthz", timeout=30) as r:
            r.read()
        times.append(time.perf_counter() - t0)
        time.sleep(0.005)
    out.put(times)


class Prober:
    def __init__(self, url: str):
        import multiprocessing
        self.ctx = multiprocessing.get_context("fork")
        self.stop, self.out = self.ctx.Event(), self.ctx.Queue()
        self.proc = self.ctx.Process(target=probe, args=(url, self.stop, self.out))

    def __enter__(self) -> Prober:
        self.proc.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.is_alive():
            self.stop.set()
            self.proc.join(timeout=30)

    def result(self) -> list[float]:
        self.stop.set()
        times = self.out.get(timeout=60)
        self.proc.join()
        return times


async def one_round(url: str, clients: int) -> tuple[list[float], list[float], list[float]]:
    """(/queue latencies under load, /healthz latencies under load, /healthz idle)."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as http:
        with Prober(url) as prober:
            await asyncio.sleep(0.5)
            idle = prober.result()

        async def call() -> float:
            t0 = time.perf_counter()
            async with http.get(f"{url}/api/v1/queue") as r:
                await r.read()
                assert r.status == 200, r.status
            return time.perf_counter() - t0
        with Prober(url) as prober:
            await asyncio.sleep(0.05)  # probing before the load starts
            queue_times = list(await asyncio.gather(*(call() for _ in range(clients))))
            loaded = prober.result()
    return queue_times, loaded, idle


def p(values: list[float], q: float) -> float:
    """The q-quantile in ms; NaN when nothing was measured (a load over before the first
    probe came back, in a smoke run)."""
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


async def main(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="genbot-api-"))
    sizes = {"small": args.small, "big": args.big}
    t0 = time.perf_counter()
    configs = {k: await populate(tmp / k, n) for k, n in sizes.items()}
    print(f"populated in {time.perf_counter() - t0:.0f} s", flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs, urls = {}, {}
    for k, config_file in configs.items():
        port = cfg.load(config_file).service.port
        urls[k] = f"http://127.0.0.1:{port}"
        procs[k] = subprocess.Popen([sys.executable, "-m", "bot.cli", "serve", "--no-executor",
                                     "--config", str(config_file)], cwd=ROOT, env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results: dict[str, dict[str, list[float]]] = {
        k: {"queue": [], "health": [], "idle": []} for k in sizes}
    try:
        for url in urls.values():
            await wait_up(url)
        for _ in range(args.rounds):
            for k in sizes:
                queue_times, loaded, idle = await one_round(urls[k], args.clients)
                results[k]["queue"] += queue_times
                results[k]["health"] += loaded
                results[k]["idle"] += idle
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(timeout=30)
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    print(f"{args.clients} concurrent GET /api/v1/queue, {args.rounds} rounds, SQLite")
    print(f"{'':24}{'small (' + str(args.small) + ')':>18}{'big (' + str(args.big) + ')':>18}"
          f"{'big/small':>11}")
    for label, metric, q in (("/queue p50 ms", "queue", 0.5), ("/queue p99 ms", "queue", 0.99),
                             ("/healthz loaded p50 ms", "health", 0.5),
                             ("/healthz loaded p99 ms", "health", 0.99),
                             ("/healthz idle p99 ms", "idle", 0.99)):
        small, big = p(results["small"][metric], q), p(results["big"][metric], q)
        print(f"{label:24}{small:>18.1f}{big:>18.1f}{big / small:>11.2f}")
    for k in sizes:
        loaded, idle = p(results[k]["health"], 0.99), p(results[k]["idle"], 0.99)
        print(f"/healthz p99 loaded/idle ({k}): {loaded / idle:.2f} "
              f"({len(results[k]['health'])} probes under load)")
    print(f"median /queue: {statistics.median(results['big']['queue']) * 1000:.1f} ms at "
          f"{args.big} jobs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--big", type=int, default=200_000)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
