"""`genbot queue status|pause|resume|cancel`: the local queue from a shell.

Each goes through the application layer as the person at the keyboard (an admin of
this machine's genbot), so a refusal reads as it would in chat.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from bot.app.permissions import Who
from bot.cli.shared import PRIORITIES, load_config, local_app
from storage.queue import Status

if TYPE_CHECKING:
    from bot.app.application import App


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    queue = subparsers.add_parser("queue", help="inspect and control the job queue")
    actions = queue.add_subparsers(dest="queue", required=True, metavar="ACTION")
    actions.add_parser("status", parents=[common],
                       help="counts by status and priority, ETA").set_defaults(
        func=cmd_queue_status)
    actions.add_parser("pause", parents=[common],
                       help="stop starting jobs (persists)").set_defaults(func=cmd_queue_pause)
    actions.add_parser("resume", parents=[common], help="start jobs again").set_defaults(
        func=cmd_queue_resume)
    cancel = actions.add_parser("cancel", parents=[common], help="cancel jobs")
    which = cancel.add_mutually_exclusive_group(required=True)
    which.add_argument("--job", type=int, metavar="ID")
    which.add_argument("--batch", type=int, metavar="ID")
    which.add_argument("--submitter", metavar="PLATFORM:USER")
    which.add_argument("--all", action="store_true", default=None)
    cancel.set_defaults(func=cmd_queue_cancel)


QueueCommand = Callable[["App", Who, argparse.Namespace], Awaitable[int]]


def _queue_command(func: QueueCommand) -> Callable[[argparse.Namespace], int]:
    """A command over the local queue, through the application layer as `me()`."""
    def run(args: argparse.Namespace) -> int:
        config = load_config(args)

        async def inner() -> int:
            async with local_app(config) as (app, who):
                return await func(app, who, args)

        return asyncio.run(inner())
    return run


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "unknown (no finished job yet)"
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


@_queue_command
async def cmd_queue_status(app: App, who: Who, args: argparse.Namespace) -> int:
    queue = app.queue
    state = await queue.state()
    if state.paused:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(state.changed_at or 0))
        print(f"queue: PAUSED by {state.changed_by or '?'} at {when} "
              "(nothing new starts; `genbot queue resume`)")
    else:
        print("queue: accepting and running jobs")
    counts = await queue.counts()
    print(f"{'':10}" + "".join(f"{p:>8}" for p in PRIORITIES) + f"{'total':>8}")
    for status in Status:
        row = counts[status.value]
        print(f"{status.value:10}" + "".join(f"{row.get(p, 0):>8}" for p in PRIORITIES)
              + f"{sum(row.values()):>8}")
    queued = sum(counts["queued"].values())
    avg = await queue.average_duration()
    print(f"average job: {_fmt_seconds(avg)}")
    if queued:
        print(f"queue drained in: {_fmt_seconds(await queue.eta(queued - 1))}")
    return 0


@_queue_command
async def cmd_queue_pause(app: App, who: Who, args: argparse.Namespace) -> int:
    changed = await app.pause(who)
    print("paused: running jobs finish, nothing new starts" if changed else "already paused")
    return 0


@_queue_command
async def cmd_queue_resume(app: App, who: Who, args: argparse.Namespace) -> int:
    changed = await app.resume(who)
    print("resumed" if changed else "was not paused")
    return 0


@_queue_command
async def cmd_queue_cancel(app: App, who: Who, args: argparse.Namespace) -> int:
    from bot.app.application import CancelTarget
    target = (CancelTarget.job(args.job) if args.job is not None
              else CancelTarget.batch(args.batch) if args.batch is not None
              else CancelTarget.of(args.submitter) if args.submitter
              else CancelTarget.everything())
    result = await app.cancel(who, target)
    print(f"canceled {len(result.ended)} queued job(s); asked {len(result.asked)} running "
          "job(s) to stop")
    return 0
