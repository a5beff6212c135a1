"""`genbot submit TEMPLATE SHEET`: a sheet to a running genbot, over the REST API.

The pictures the sheet's image cells name are found beside it and sent along (the
template says which columns hold images). With --wait a live progress bar follows the
batch; the exit code says how it went: 0 every job succeeded, 1 some did not (or the
sheet was refused), 2 the server could not be asked, 3 no token or a refused one.
With no token given, a service on this machine is asked with its own admin token
(data_dir/local-admin.token), as the dashboard's sign-in suggests (bot.cli.client).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bot.cli.client import (
    TOKEN_EXIT,
    add_server_options,
    error,
    server_of,
    token_for,
    unreachable,
)
from bot.cli.shared import PRIORITIES, PRIORITY_HELP, add_sweep_options
from storage.records import TERMINAL, Status

if TYPE_CHECKING:
    from bot.client import AsyncClient, Batch


# A sweep's and a comparison's options: vary, seeds, grid ("KEY1,KEY2"), compare; and the
# sales channels ("A,B").
SweepArgs = tuple[tuple[str, ...], int, str, tuple[str, ...], str, str]
NO_SWEEP: SweepArgs = ((), 1, "", (), "", "")


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    submit = subparsers.add_parser("submit", help="send a sheet to a running genbot over its API")
    submit.add_argument("template")
    submit.add_argument("sheet")
    add_server_options(submit)
    submit.add_argument("--priority", choices=PRIORITIES, default="normal", help=PRIORITY_HELP)
    submit.add_argument("--wait", action="store_true",
                        help="follow the batch with a progress bar; exit 1 if a job fails")
    submit.add_argument("--idempotency-key", metavar="KEY",
                        help="the same key again returns the first batch (safe retries)")
    submit.add_argument("--download", metavar="DIR",
                        help="with --wait: the images, contact sheet and results into DIR")
    submit.add_argument("--wait-for-executor", action="store_true",
                        help="queue it even when no running executor can run its jobs")
    submit.add_argument("--callback", metavar="URL",
                        help="tell URL of the batch's events by signed webhooks "
                             "(genbot docs webhooks)")
    add_sweep_options(submit)
    submit.set_defaults(func=cmd_submit)


def cmd_submit(args: argparse.Namespace) -> int:
    return submit(args.template, Path(args.sheet), server=args.server, token=args.token,
                  priority=args.priority, wait=args.wait, key=args.idempotency_key,
                  wait_for_executor=args.wait_for_executor,
                  sweep=(tuple(args.vary), args.seeds, args.grid, tuple(args.compare),
                         args.channels, args.layout),
                  download=args.download, callback=args.callback)


def submit(template: str, sheet: Path, *, server: str | None, token: str | None,
           priority: str, wait: bool, key: str | None = None,
           wait_for_executor: bool = False,
           sweep: SweepArgs = NO_SWEEP, download: str | None = None,
           callback: str | None = None) -> int:
    server = server_of(server)
    token = token_for(server, token)
    if not token:
        return TOKEN_EXIT
    import aiohttp
    try:
        return asyncio.run(_submit(template, sheet, server, token, priority, wait or bool(download),
                                   key, wait_for_executor, sweep, download, callback))
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        return unreachable(server, e)


async def _submit(template: str, sheet: Path, server: str, token: str, priority: str,
                  wait: bool, key: str | None, wait_for_executor: bool = False,
                  sweep: SweepArgs = NO_SWEEP, download: str | None = None,
                  callback: str | None = None) -> int:
    """Through the Python client (bot.client), as any script would."""
    from bot.client import AsyncClient, GenbotError
    vary, seeds, grid, compare, channels, layout = sweep
    async with AsyncClient(server, token) as genbot:
        try:
            batch = await genbot.submit(
                template, sheet, vary=vary, seeds=seeds, grid=[k for k in grid.split(",") if k],
                compare=compare, channels=[c for c in channels.split(",") if c.strip()],
                layout=layout,
                priority=priority, wait_for_executor=wait_for_executor,
                key=key, callback_url=callback)
        except GenbotError as e:
            return error({"error": {"message": e.message}}, e.status)
        for problem in batch.problems:
            print(f"skipped: {problem['message']}", file=sys.stderr)
        print(f"batch {batch.id}: {batch.total} {template} jobs "
              f"({dashboard(server, batch.id)})", flush=True)
        if batch.demo_models:
            print(f"note: demo model ({', '.join(batch.demo_models)}) — images are noise; "
                  "for real ones: genbot docs models", flush=True)
        if not wait:
            return 0
        try:
            code = await follow(genbot, batch.id, batch.total)
        except GenbotError as e:
            return error({"error": {"message": e.message}}, e.status)
        print(f"results: {server}/api/v1/batches/{batch.id}/files/results.xlsx")
        print(f"images:  {dashboard(server, batch.id)} (each at "
              f"{server}/api/v1/jobs?batch={batch.id})")
        if download:
            files = await genbot.download(batch.id, download)
            print(f"downloaded {len(files)} files to {Path(download).resolve()}")
        return code


def dashboard(server: str, batch_id: int) -> str:
    """Where a person sees the batch: its page on the dashboard (the API's URL answers
    a browser with a 401)."""
    return f"{server}/dashboard/#/batches/{batch_id}"


async def follow(genbot: AsyncClient, batch_id: int, total: int) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    with Progress(TextColumn(f"batch {batch_id}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[failed]}"), TimeElapsedColumn(),
                  transient=not sys.stdout.isatty()) as bar:
        task = bar.add_task("", total=total, failed="")

        def shown(b: Batch) -> None:
            bad = sum(b.counts.get(s, 0) for s in TERMINAL if s != Status.SUCCEEDED)
            bar.update(task, completed=b.done, failed=f"{bad} failed" if bad else "")
        state = await genbot.wait(batch_id, progress=shown)
    ok = state.counts.get(Status.SUCCEEDED, 0)
    bad = sum(state.counts.get(s, 0) for s in TERMINAL if s != Status.SUCCEEDED)
    print(f"batch {batch_id}: {ok} of {state.total} succeeded"
          + (f", {bad} failed or canceled" if bad else ""))
    return 0 if ok == state.total else 1
