"""`genbot queue status|pause|resume|cancel|doctor`: the local queue from a shell.

Each goes through the application layer as the person at the keyboard (an admin of
this machine's genbot), so a refusal reads as it would in chat.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from bot.app.estimates import held_by
from bot.app.permissions import Who
from bot.cli.shared import PRIORITIES, load_config, local_app
from bot.messages import say
from storage.config import QueueConfig
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
    doctor = actions.add_parser(
        "doctor", parents=[common],
        help="leased jobs that show no sign of life; hand them back",
        description="Lists every job under a lease (claimed ahead, or running), the quietest "
                    "first, marking those that look stuck: no sign of life for [queue] "
                    "stuck_after seconds, or held by an executor the registry no longer sees "
                    "alive. --hand-back puts jobs back in the queue (no attempt used); their "
                    "holders stop them at their next heartbeat. Exits 3 while a job looks "
                    "stuck and none was handed back, so a script or cron can alert on it.")
    which = doctor.add_mutually_exclusive_group()
    which.add_argument("--hand-back", type=int, nargs="+", metavar="JOB",
                       help="hand these jobs back to the queue")
    which.add_argument("--hand-back-stuck", action="store_true",
                       help="hand back every job that looks stuck")
    doctor.set_defaults(func=cmd_queue_doctor)


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
    queued = sum(counts[Status.QUEUED].values())
    avg = await queue.average_duration()
    print(f"average job: {_fmt_seconds(avg)}")
    held = await held_by(queue)
    if queued and held:  # no time while nothing can start
        print(f"queue drained: {say(f'eta_{held}')}")
    elif queued:
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
    print(f"{say('cli_canceled', count=len(result.ended))}; "
          f"{say('cli_asked', count=len(result.asked))}")
    return 0


STUCK = 3  # `genbot queue doctor`'s exit status while a job looks stuck


@_queue_command
async def cmd_queue_doctor(app: App, who: Who, args: argparse.Namespace) -> int:
    if args.hand_back or args.hand_back_stuck:
        handed = await app.hand_back(who, None if args.hand_back_stuck else args.hand_back)
        print(say("cli_handed_back", count=len(handed), jobs=", ".join(map(str, handed)))
              if handed else "none of those jobs is leased now: nothing was handed back")
        return 0
    found = await app.leases(who)
    if not found:
        print("no job is leased: nothing claimed ahead, nothing running")
        return 0
    stuck_after = app.config[QueueConfig].stuck_after
    print(f"{'job':>8} {'batch':>7} {'row':>5}  {'state':<8} {'quiet':>8}  holder")
    for lease in found:
        job = lease.job
        mark = {"quiet": f"  STUCK (quiet past {stuck_after:g} s)",
                "holder_gone": "  STUCK (its executor is gone)"}.get(lease.why or "", "")
        print(f"{job.id:>8} {job.batch_id:>7} {job.row:>5}  "
              f"{'ahead' if job.ahead else 'running':<8} {_fmt_seconds(job.idle_seconds):>8}"
              f"  {job.lease_owner or '-'} ({lease.holder_state}){mark}")
    stuck = [lease.job.id for lease in found if lease.stuck]
    if not stuck:
        return 0
    print(say("cli_stuck", count=len(stuck),
              command=f"genbot queue doctor --hand-back {' '.join(map(str, stuck))}"))
    return STUCK
