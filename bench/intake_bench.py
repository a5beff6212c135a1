"""Intake benchmark: parse + validate + bind a 10,000-row sheet. Prints figures; asserts nothing.

  python bench/intake_bench.py [--rows 10000] [--long 1000000]

Target: < 1.5 s for the .xlsx. The same rows as .csv are measured in the same run, and
the read alone (calamine / csv) is shown beside the whole intake, so the cost of
validation and binding is a ratio.

Then a sheet far past the row limit (`--long` rows, .csv and .xlsx): read whole, as
intake once did before refusing it, and read as intake does now — rows kept up to the
limit, the rest counted. Each in a process of its own, so its peak memory is its own;
time and memory growth side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import openpyxl  # noqa: E402

from bot.intake.check import intake  # noqa: E402
from bot.intake.images import ImageResolver, folder_attachments  # noqa: E402
from bot.intake.sheets import read_sheet  # noqa: E402
from bot.settings import IntakeConfig  # noqa: E402
from storage.files import FileStore  # noqa: E402
from templates.loader import load_templates  # noqa: E402
from tests.fakes.sheets import long_xlsx  # noqa: E402


def rows(n: int) -> list[list]:
    head = ["sku", "product_image", "prompt", "negative", "seed", "steps", "guidance", "size",
            "control_scale", "upscale"]
    body = [[f"SKU-{i:05d}", "assets/bottle.png",
             f'bottle #{i} on "wet" stone, {{moody}} light, $5 — 光泽', "blurry", i, 30, 6.5,
             "1024x1024", 0.8, 2] for i in range(n)]
    return [head] + body


def as_xlsx(table: list[list]) -> bytes:
    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet()
    for row in table:
        sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def as_csv(table: list[list]) -> bytes:
    text = io.StringIO()
    csv.writer(text).writerows(table)
    return text.getvalue().encode("utf-8")


async def measure(template, name: str, data: bytes, settings: IntakeConfig) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        images = ImageResolver(settings, FileStore(Path(tmp)), assets_dir=Path(tmp),
                               attachments=folder_attachments(ROOT / "examples"))
        start = time.perf_counter()
        read_sheet(name, data, max_unpacked_bytes=2**30)
        read = time.perf_counter() - start
        start = time.perf_counter()
        result = await intake(template, name, data, settings=settings, images=images)
        whole = time.perf_counter() - start
    assert result.ok and len(result.jobs) == settings.max_rows, result.report()
    return read, whole


LONG_PROBE = """
import resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from bot.intake.sheets import read_sheet
path, keep = Path(sys.argv[1]), None if sys.argv[2] == "all" else int(sys.argv[2])
data = path.read_bytes()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
sheet = read_sheet(path.name, data, max_unpacked_bytes=2**32, keep_rows=keep)
took = time.perf_counter() - start
grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(took, grew, len(sheet.rows) + sheet.more_rows)
"""


def long_sheets(n: int) -> dict[str, bytes]:
    """`n` short rows as .csv, and as .xlsx written straight as XML (openpyxl would take
    minutes for a million)."""
    head = "sku,product_image,prompt\n"
    csv_data = (head + "".join(f"S{i},bottle.png,a prompt {i}\n" for i in range(n))).encode()
    return {"csv": csv_data, "xlsx": long_xlsx(head.strip().split(","), n)}


def long_sheet_section(n: int, limit: int) -> None:
    import subprocess
    print(f"\na sheet of {n:,} rows, past a limit of {limit:,}: read whole vs kept to the "
          "limit and counted (a process each)")
    with tempfile.TemporaryDirectory() as tmp:
        for kind, data in long_sheets(n).items():
            path = Path(tmp) / f"long.{kind}"
            path.write_bytes(data)
            figures = {}
            for how in ("all", str(limit + 31)):
                out = subprocess.run([sys.executable, "-c", LONG_PROBE, str(path), how,
                                      str(ROOT)], capture_output=True, text=True, check=True)
                took, grew, counted = out.stdout.split()
                assert int(counted) == n, (kind, how, counted)
                figures[how] = float(took), float(grew)
            (t0, m0), (t1, m1) = figures["all"], figures[str(limit + 31)]
            print(f"   .{kind:4}  {len(data) / 2**20:5.1f} MB  whole {t0:5.2f} s "
                  f"+{m0:4.0f} MB   capped {t1:5.2f} s +{m1:4.0f} MB   "
                  f"capped/whole: time {t1 / t0:.2f}x, memory {m1 / max(m0, 1):.2f}x")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--long", type=int, default=1_000_000)
    args = p.parse_args()
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {platform.platform()}")
    templates, _ = load_templates(ROOT / "templates" / "shipped")
    template = templates["product_main"]
    table = rows(args.rows)
    files = {"xlsx": as_xlsx(table), "csv": as_csv(table)}
    settings = IntakeConfig(max_rows=args.rows, max_file_mb=1024)
    print(f"\nparse + validate + bind {args.rows:,} rows of product_main "
          f"(median of {args.repeat}; target < 1.5 s for .xlsx)")
    results = {}
    for kind, data in files.items():
        runs = [asyncio.run(measure(template, f"sheet.{kind}", data, settings))
                for _ in range(args.repeat)]
        read = statistics.median(r for r, _ in runs)
        whole = statistics.median(w for _, w in runs)
        results[kind] = whole
        print(f"   .{kind:4}  {len(data) / 2**20:5.1f} MB  whole {whole * 1000:6.0f} ms  "
              f"(read alone {read * 1000:5.0f} ms, {read / whole:.0%})  "
              f"{args.rows / whole:8,.0f} rows/s"
              + (f"  {whole / 1.5:.2f}x the 1.5 s budget" if kind == "xlsx" else ""))
    print(f"   xlsx/csv: {results['xlsx'] / results['csv']:.2f}x")
    long_sheet_section(args.long, 10_000)


if __name__ == "__main__":
    main()
