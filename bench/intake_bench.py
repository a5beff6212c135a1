"""Intake benchmark: parse + validate + bind a 10,000-row sheet. Prints figures; asserts nothing.

  python bench/intake_bench.py [--rows 10000]

Target: < 1.5 s for the .xlsx. The same rows as .csv are measured in the same run, and
the read alone (calamine / csv) is shown beside the whole intake, so the cost of
validation and binding is a ratio.
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
from executor.workflow import load_templates  # noqa: E402
from storage.config import IntakeConfig  # noqa: E402
from storage.files import FileStore  # noqa: E402


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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {platform.platform()}")
    templates, _ = load_templates(ROOT / "templates")
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


if __name__ == "__main__":
    main()
