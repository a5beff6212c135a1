"""`genbot prune --finished-before 30d [--archive FILE] [--dry-run]`: retention on demand.

What the daily run of [queue] retention_days does (bot.app.retention), for a cutoff
chosen now: batches wholly finished before it go, with their jobs, events and output
files, each in its own short transaction beside a running queue.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from bot.app.retention import Pruned, duration, prune
from bot.cli.shared import load_config
from storage.files import open_store
from storage.outbox import Outbox
from storage.queue import open_queue


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    cmd = subparsers.add_parser("prune", parents=[common],
                                help="forget batches finished long ago (jobs, events, outputs)")
    cmd.add_argument("--finished-before", required=True, metavar="AGE", type=_age,
                     help="how long ago: 30d, 12h, 90m, 2w")
    cmd.add_argument("--archive", metavar="FILE.jsonl", type=Path,
                     help="append each batch (its jobs and events) to this file first")
    cmd.add_argument("--dry-run", action="store_true", help="only say what would go")
    cmd.set_defaults(func=cmd_prune)


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _age(text: str) -> float:
    try:
        return duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def cmd_prune(args: argparse.Namespace) -> int:
    config = load_config(args)
    cutoff = time.time() - args.finished_before

    async def run() -> Pruned:
        queue = await open_queue(config)
        try:
            return await prune(queue, Outbox(queue.db), open_store(config), cutoff,
                               archive=args.archive, dry_run=args.dry_run)
        finally:
            await queue.close()

    done = asyncio.run(run())
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(cutoff))
    ids = done.batches
    span = f" (#{ids[0]}–#{ids[-1]})" if ids else ""
    batches = _count(len(ids), "batch", "batches")
    if args.dry_run:
        print(f"would forget {batches} finished before {when}{span}")
        return 0
    print(f"forgot {batches} finished before {when}{span}, "
          f"{_count(done.events, 'other event', 'other events')} and "
          f"{_count(done.messages, 'chat message', 'chat messages')}"
          + (f"; archived to {args.archive}" if args.archive and ids else ""))
    return 0
