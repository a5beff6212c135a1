"""How long does a submission through the REST API take when many arrive at once?
Asserts nothing; record results in docs/benchmarks.md.

  python bench/submit_bench.py [--pg URL] [--clients 50] [--rows 10] [--rounds 3]

Two real services (`genbot serve --no-executor`, each its own process), one on SQLite and
one on PostgreSQL, take `clients` concurrent POST /api/v1/batches, each a `rows`-row
social_thumb workbook (.xlsx) with its picture, as scripts submitting at once do. Rounds alternate
the services so drift on a noisy machine hits both alike. Prints p50/p99 of the
submissions' round trips per backend (every one must be 201), and postgres/sqlite.
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
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from api_bench import TOKEN, free_port, wait_up  # noqa: E402
from queue_bench import drop_pg, fresh_pg, pct  # noqa: E402

PICTURE = (ROOT / "examples" / "assets" / "bottle.png").read_bytes()


def sheet(rows: int, client: int) -> bytes:
    """An .xlsx workbook, as people upload them."""
    import io

    from openpyxl import Workbook
    book = Workbook()
    page = book.active
    assert page is not None
    page.append(["图片", "标题", "比例", "宽度"])
    for r in range(rows):
        page.append(["bottle.png", f"client {client} row {r}", "1:1", 1080])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


async def submit(http: aiohttp.ClientSession, url: str, body: bytes) -> float:
    form = aiohttp.FormData()
    form.add_field("template", "social_thumb")
    form.add_field("sheet", body, filename="sheet.xlsx")
    form.add_field("pictures", PICTURE, filename="bottle.png")
    started = time.perf_counter()
    async with http.post(f"{url}/api/v1/batches", data=form,
                         headers={"Authorization": f"Bearer {TOKEN}"}) as r:
        text = await r.text()
        if r.status != 201:
            raise SystemExit(f"{url}: {r.status} {text[:300]}")
    return time.perf_counter() - started


async def round_of(url: str, clients: int, rows: int) -> list[float]:
    bodies = [sheet(rows, c) for c in range(clients)]
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as http:
        return list(await asyncio.gather(*(submit(http, url, b) for b in bodies)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432/test")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    made = fresh_pg(args.pg)
    if made is None:
        raise SystemExit(f"no PostgreSQL at {args.pg}")
    pg_url, schema = made
    procs: dict[str, subprocess.Popen] = {}
    urls: dict[str, str] = {}
    times: dict[str, list[float]] = {"sqlite": [], "postgres": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, database in (("sqlite", f"sqlite:///{tmp}/sqlite/genbot.sqlite3"),
                                   ("postgres", pg_url)):
                port = free_port()
                folder = Path(tmp) / name
                folder.mkdir()
                config_file = folder / "config.toml"
                config_file.write_text(
                    f'[service]\ndata_dir = "{folder}"\nport = {port}\nlog_level = "warning"\n'
                    f'[database]\nurl = "{database}"\n[queue]\nmax_queue_size = 100000\n'
                    f'[chat]\nadmins = ["api:bench"]\n[api]\ntokens = ["{TOKEN}=bench"]\n')
                procs[name] = subprocess.Popen(
                    [sys.executable, "-m", "bot.cli", "serve", "--no-executor", "--config",
                     str(config_file)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
                urls[name] = f"http://127.0.0.1:{port}"
            for url in urls.values():
                asyncio.run(wait_up(url))
            for r in range(args.rounds):
                for name in (("sqlite", "postgres") if r % 2 == 0 else ("postgres", "sqlite")):
                    took = asyncio.run(round_of(urls[name], args.clients, args.rows))
                    times[name] += took
                    print(f"round {r + 1} {name:<8} p50 {1000 * pct(took, 0.5):6.0f} ms  "
                          f"p99 {1000 * pct(took, 0.99):6.0f} ms", flush=True)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(30)
        drop_pg(args.pg, schema)
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, python {platform.python_version()}")
    print(f"{args.clients} concurrent submissions of {args.rows} rows, {args.rounds} rounds")
    for name, took in times.items():
        print(f"{name:<8} p50 {1000 * pct(took, 0.5):6.0f} ms  p99 {1000 * pct(took, 0.99):6.0f} ms"
              f"  mean {1000 * statistics.mean(took):6.0f} ms")
    print(f"p99 postgres/sqlite {pct(times['postgres'], 0.99) / pct(times['sqlite'], 0.99):.2f}")


if __name__ == "__main__":
    main()
