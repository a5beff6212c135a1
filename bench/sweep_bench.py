"""Sweep benchmark: expanding and queuing a sweep, and drawing its grids. Prints figures;
asserts nothing. Record results in docs/benchmarks.md.

  python bench/sweep_bench.py [--rows 10] [--values 10] [--grid 8] [--side 1024] [--rounds 3]

1. A sheet of `--rows` rows swept over two values of `--values` each (rows × values²
   jobs: 10 × 10 × 10 = 1,000), through the application layer into a SQLite queue:
   intake, the sweep's expansion and binding, one enqueue. Beside it, in the same run,
   the same number of jobs written as plain rows of a sheet — so the ratio is what
   sweeping costs over writing every row out. Target: the sweep < 1 s.
2. One grid of `--grid` × `--grid` images of `--side` px (8 × 8 of 1024 px), drawn and
   encoded; beside it, the contact sheet of the same images. Target: the grid < 2 s on
   one core (the grid is drawn on one thread).
Rounds alternate the two sides of each comparison, so drift on a noisy machine hits both.
"""

from __future__ import annotations

import argparse
import asyncio
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

from PIL import Image  # noqa: E402

from bot.app.application import Accepted, App, SubmitOptions, load_templates  # noqa: E402
from bot.app.contact import contact_sheet  # noqa: E402
from bot.app.grids import Grid, render  # noqa: E402
from bot.app.permissions import Who  # noqa: E402
from bot.intake.check import SheetFile  # noqa: E402
from storage import config as cfg  # noqa: E402
from storage.files import open_store  # noqa: E402
from storage.queue import open_queue  # noqa: E402
from storage.records import Job, Priority, Status  # noqa: E402

ME = Who("cli", "bench")
BOTTLE = (ROOT / "examples" / "assets" / "bottle.png").read_bytes()


async def pictures(name: str) -> bytes | None:
    return BOTTLE if name == "bottle.png" else None


def sheet(rows: int, values: int = 0) -> SheetFile:
    """`rows` rows; with `values`, each row written out once per steps × guidance pair."""
    lines = ["sku,product_image,prompt,steps,guidance"]
    for i in range(rows):
        pairs = [(s, g) for s in range(1, values + 1) for g in range(1, values + 1)] \
            if values else [(30, 6)]
        lines += [f"SKU-{i},bottle.png,a bottle {i},{s},{g}" for s, g in pairs]
    return SheetFile("sweep.csv", "\n".join(lines).encode())


async def queue_side(folder: Path, rows: int, values: int, swept: bool) -> float:
    """Seconds to take the sheet through intake into the queue, in a fresh database."""
    folder.mkdir(parents=True)
    config = cfg.from_dict({"service": {"data_dir": str(folder)},
                            "queue": {"max_queue_size": 10_000_000},
                            "intake": {"max_rows": 1_000_000},
                            "chat": {"admins": [ME.id]}})
    queue = await open_queue(config)
    try:
        app = App(config, queue, open_store(config), load_templates(config))
        options = SubmitOptions(priority=Priority.NORMAL, wait_for_executor=True,
                                vary=(f"steps=1..{values}", f"guidance=1..{values}")
                                if swept else ())
        given = sheet(rows) if swept else sheet(rows, values)
        start = time.perf_counter()
        done = await app.submit(ME, "product_main", given, pictures, options)
        took = time.perf_counter() - start
        assert isinstance(done, Accepted) and done.jobs == rows * values * values, done
        return took
    finally:
        await queue.close()


def images(folder: Path, n: int, side: int) -> list[Path]:
    folder.mkdir(parents=True)
    paths = []
    for i in range(n):
        im = Image.effect_noise((side, side), 40 + i % 60).convert("RGB")
        path = folder / f"{i}.png"
        im.save(path, compress_level=1)
        paths.append(path)
    return paths


def grid_side(store, files: list[Path], n: int) -> float:
    grid = Grid(2, {"seed": 1}, "steps", "guidance", list(range(n)), list(range(n)))
    for i, path in enumerate(files):
        grid.cells[i % n, i // n] = Job(
            id=i + 1, batch_id=1, row=2, workflow={}, status=Status.SUCCEEDED,
            priority=Priority.NORMAL, submitter=ME.id, affinity=None, attempts=1,
            not_before=0, lease_owner=None, cancel_requested=False,
            outputs=[path.relative_to(store.root).as_posix()], error=None, enqueued_at=0,
            started_at=None, finished_at=None)
    start = time.perf_counter()
    png = render(store, grid, title="row 2 · seed 1")
    took = time.perf_counter() - start
    assert Image.open(io.BytesIO(png)).size[0] > 0
    return took


def contact_side(files: list[Path]) -> float:
    start = time.perf_counter()
    contact_sheet([(p, p.name) for p in files])
    return time.perf_counter() - start


async def main(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="genbot-sweep-"))
    jobs = args.rows * args.values ** 2
    swept, written = [], []
    for n in range(args.rounds):
        sides = [(True, swept), (False, written)]
        for is_sweep, out in (sides if n % 2 == 0 else sides[::-1]):
            out.append(await queue_side(tmp / f"q{n}{is_sweep}", args.rows, args.values,
                                        is_sweep))
    config = cfg.from_dict({"service": {"data_dir": str(tmp / "store")}})
    store = open_store(config)
    files = images(tmp / "store" / "outputs" / "batch_1", args.grid ** 2, args.side)
    grids, contacts = [], []
    for n in range(args.rounds):
        if n % 2 == 0:
            grids.append(grid_side(store, files, args.grid))
            contacts.append(contact_side(files))
        else:
            contacts.append(contact_side(files))
            grids.append(grid_side(store, files, args.grid))
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print(f"queue {jobs:,} jobs: {args.rows} rows swept over steps × guidance "
          f"({args.values} × {args.values}), median {statistics.median(swept):.3f} s; "
          f"the same {jobs:,} written as rows {statistics.median(written):.3f} s "
          f"(target: sweep < 1 s)")
    print(f"grid {args.grid} × {args.grid} of {args.side} px: median "
          f"{statistics.median(grids):.3f} s; contact sheet of the same "
          f"{statistics.median(contacts):.3f} s (target: grid < 2 s)")
    print(f"sweep/rows x{statistics.median(swept) / statistics.median(written):.2f}, "
          f"grid/contact x{statistics.median(grids) / statistics.median(contacts):.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--values", type=int, default=10)
    parser.add_argument("--grid", type=int, default=8)
    parser.add_argument("--side", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
