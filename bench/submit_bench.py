"""Do submissions through the REST API wait on each other, and does /healthz meanwhile?
Asserts nothing; record results in docs/benchmarks.md.

  python bench/submit_bench.py [--clients 50] [--rows 10] [--rounds 3] [--before REV]

A real service (`genbot serve --no-executor`, its own process, SQLite) takes `clients`
concurrent POST /api/v1/batches, each a `rows`-row social_thumb sheet naming two pictures
that come uploaded with it, as scripts and the dashboard's Submit send them: one burst
of CSV sheets, one of .xlsx workbooks. Meanwhile a separate process probes /healthz as a
load balancer does (a new connection each time). With --before REV, the same bursts go,
round by round, to a second service running genbot as it was at that git revision
(`git archive`), so drift on a noisy machine hits both alike. Prints p50/p99 of the
submissions' round trips (every one must be 201), /healthz's p50, p99 and worst during the
bursts, and the before/after ratio of p99.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from api_bench import TOKEN, Prober, free_port, wait_up  # noqa: E402
from queue_bench import pct  # noqa: E402

PICTURES = {name: (ROOT / "examples" / "assets" / name).read_bytes()
            for name in ("bottle.png", "chair.png")}
HEADERS = ["图片", "标题", "比例", "宽度"]


def rows_of(rows: int, client: int) -> list[list[object]]:
    return [HEADERS] + [[f"assets/{('bottle.png', 'chair.png')[r % 2]}",
                         f"client {client} row {r}", "1:1", 1080] for r in range(rows)]


def csv_sheet(rows: int, client: int) -> bytes:
    import csv
    text = io.StringIO()
    csv.writer(text).writerows(rows_of(rows, client))
    return text.getvalue().encode("utf-8-sig")


def xlsx_sheet(rows: int, client: int) -> bytes:
    from openpyxl import Workbook
    book = Workbook()
    page = book.active
    assert page is not None
    for line in rows_of(rows, client):
        page.append(line)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


SHEETS = {"csv": csv_sheet, "xlsx": xlsx_sheet}


async def submit(http: aiohttp.ClientSession, url: str, name: str, body: bytes) -> float:
    form = aiohttp.FormData()
    form.add_field("template", "social_thumb")
    form.add_field("sheet", body, filename=name)
    for picture, data in PICTURES.items():
        form.add_field("pictures", data, filename=picture)
    started = time.perf_counter()
    async with http.post(f"{url}/api/v1/batches", data=form,
                         headers={"Authorization": f"Bearer {TOKEN}"}) as r:
        text = await r.text()
        if r.status != 201:
            raise SystemExit(f"{url}: {r.status} {text[:300]}")
    return time.perf_counter() - started


async def burst(url: str, kind: str, clients: int, rows: int) -> list[float]:
    bodies = [SHEETS[kind](rows, c) for c in range(clients)]
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as http:
        return list(await asyncio.gather(*(submit(http, url, f"sheet.{kind}", b)
                                           for b in bodies)))


def start(source: Path, folder: Path) -> tuple[subprocess.Popen, str]:
    """`genbot serve --no-executor` from `source` (a checkout), its data in `folder`."""
    port = free_port()
    folder.mkdir(parents=True)
    config_file = folder / "config.toml"
    config_file.write_text(
        f'[service]\ndata_dir = "{folder}"\nport = {port}\nlog_level = "warning"\n'
        f'[queue]\nmax_queue_size = 1000000\n'
        f'[chat]\nadmins = ["api:bench"]\n[api]\ntokens = ["{TOKEN}=bench"]\n')
    proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "serve", "--no-executor",
                             "--config", str(config_file)], cwd=source,
                            env={**os.environ, "PYTHONPATH": str(source)})
    return proc, f"http://127.0.0.1:{port}"


def checkout(rev: str, into: Path) -> Path:
    """genbot as it was at `rev`, unpacked (the working tree is left alone)."""
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", help="a git revision to compare with (e.g. HEAD~3)")
    args = parser.parse_args()
    times: dict[tuple[str, str], list[float]] = {}
    health: dict[str, list[float]] = {}
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"after": ROOT}
        if args.before:
            sources = {"before": checkout(args.before, Path(tmp) / "before"), **sources}
        try:
            urls = {}
            for name, source in sources.items():
                proc, urls[name] = start(source, Path(tmp) / f"data-{name}")
                procs.append(proc)
            for url in urls.values():
                asyncio.run(wait_up(url))
            for r in range(args.rounds):
                for name in (list(urls) if r % 2 == 0 else list(urls)[::-1]):
                    for kind in SHEETS:
                        with Prober(urls[name]) as prober:
                            took = asyncio.run(burst(urls[name], kind, args.clients, args.rows))
                            health.setdefault(name, []).extend(prober.result())
                        times.setdefault((name, kind), []).extend(took)
                        print(f"round {r + 1} {name:<6} {kind:<4} p50 "
                              f"{1000 * pct(took, 0.5):6.0f} ms  p99 "
                              f"{1000 * pct(took, 0.99):6.0f} ms", flush=True)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(30)
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, python {platform.python_version()}")
    print(f"{args.clients} concurrent submissions of {args.rows} rows, two pictures uploaded "
          f"with each, {args.rounds} rounds")
    for (name, kind), took in times.items():
        print(f"{name:<6} {kind:<4} p50 {1000 * pct(took, 0.5):6.0f} ms  "
              f"p99 {1000 * pct(took, 0.99):6.0f} ms")
    for name, probes in health.items():
        if not probes:  # (a burst too short for one probe)
            continue
        print(f"{name:<6} /healthz during the bursts: {len(probes)} probes, p50 "
              f"{1000 * pct(probes, 0.5):5.1f} ms, p99 {1000 * pct(probes, 0.99):5.1f} ms, "
              f"worst {1000 * max(probes):6.1f} ms")
    if args.before:
        for kind in SHEETS:
            ratio = pct(times[("before", kind)], 0.99) / pct(times[("after", kind)], 0.99)
            print(f"p99 before/after {kind}: {ratio:.2f}")
    print("submissions: all 201")


if __name__ == "__main__":
    main()
