"""`genbot run TEMPLATE SHEET`: a newcomer's one-shot.

Checks the sheet as the bot would, queues it in the local queue, runs an executor
process beside it (supervised, as `genbot serve` does), draws a progress bar, then
prints where the images and the contact sheet are. The exit code is 0 only if every
job succeeded.

Every `genbot` command imports this module to build its parser, so what only a run
needs (the application layer, the intake and their HTTP client) is imported in _run.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import shutil
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bot.app.grids import write_grids
from bot.app.permissions import Who
from bot.app.placement import Unplaced, unplaced
from bot.app.results import write_results
from bot.cli.shared import (
    PRIORITIES,
    PRIORITY_HELP,
    add_lang_option,
    add_sweep_options,
    load_config,
)
from bot.messages import say
from bot.settings import IntakeConfig
from bot.supervisor import Supervisor
from storage.config import Config
from storage.files import batch_folder, open_store
from storage.queue import BatchProgress, Priority, Queue, Status, open_queue
from storage.workers import Workers, owner_name
from templates.loader import load_templates
from templates.settings import ComfyUIConfig, ModelsConfig, TemplatesConfig, templates_dir

if TYPE_CHECKING:
    from bot.app.application import App

BAR = 30


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    run = subparsers.add_parser("run", parents=[common],
                                help="queue a sheet and run it here, with a progress bar")
    run.add_argument("template")
    run.add_argument("sheet")
    run.add_argument("--out", metavar="DIR", help="also copy the images and contact sheet here")
    run.add_argument("--priority", choices=PRIORITIES, default="normal", help=PRIORITY_HELP)
    add_lang_option(run)
    add_sweep_options(run)
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    return run_sheet(load_config(args), args.template, Path(args.sheet), out=args.out,
                     priority=Priority[args.priority.upper()], lang=args.lang,
                     vary=tuple(args.vary), seeds=args.seeds,
                     grid=tuple(k.strip() for k in args.grid.split(",") if k.strip()),
                     compare=tuple(args.compare))


def run_sheet(config: Config, template: str, sheet: Path, *, out: str | None = None,
              priority: Priority = Priority.NORMAL, lang: str = "en",
              vary: tuple[str, ...] = (), seeds: int = 1, grid: tuple[str, ...] = (),
              compare: tuple[str, ...] = ()) -> int:
    return asyncio.run(_run(config, template, sheet, out, priority, lang, vary, seeds, grid,
                            compare))


async def _run(config: Config, name: str, sheet: Path, out: str | None, priority: Priority,
               lang: str, vary: tuple[str, ...] = (), seeds: int = 1,
               grid: tuple[str, ...] = (), compare: tuple[str, ...] = ()) -> int:
    from bot.app.application import Accepted, App, CancelTarget, SubmitOptions
    from bot.intake.check import IntakeReport, SheetFile, check_sheet
    from bot.intake.images import folder_attachments
    templates, _ = load_templates(templates_dir(config))
    spec, name = name, name.partition("@")[0]  # (NAME@N: the application resolves the pin)
    if name not in templates:
        print(f"genbot: no template {name!r} (have: {', '.join(templates)})", file=sys.stderr)
        return 2
    try:
        data = sheet.read_bytes()
    except OSError as e:
        print(f"genbot: cannot read {sheet}: {e.strerror or e}", file=sys.stderr)
        return 2
    if templates[name].engine == "comfyui" and not config[ComfyUIConfig].servers:
        print(f"genbot: {name} runs on ComfyUI: name your servers in [comfyui] servers "
              "(docs/comfyui.md)", file=sys.stderr)
        return 2
    store = open_store(config)
    pictures = folder_attachments(sheet.resolve().parent)
    # A sheet that cannot go is refused before the database is even opened.
    report = await check_sheet(templates[name], SheetFile(sheet.name, data), config=config,
                               store=store, attachments=pictures)
    if not report.ok:
        print(report.report(lang, config[IntakeConfig].max_problems_shown), file=sys.stderr)
        return 1
    queue = await open_queue(config)
    try:
        me = Who("cli", getpass.getuser())
        app = App(config, queue, store, templates, local_admins=(me.id,))
        await app.record_versions(f"genbot run on {socket.gethostname()}")
        # Its own executor is about to start: whether it can run the jobs is known once
        # it says so (below), not before.
        result = await app.submit(me, spec, SheetFile(sheet.name, data), pictures,
                                  SubmitOptions(priority=priority, lang=lang,
                                                wait_for_executor=True, vary=vary,
                                                seeds=seeds, grid=grid, compare=compare))
        if isinstance(result, IntakeReport):
            print(result.report(lang, config[IntakeConfig].max_problems_shown), file=sys.stderr)
            return 1
        assert isinstance(result, Accepted)  # (no ask_over: the command line asks for it all)
        batch = result.batch_id
        print(f"batch {batch}: {result.jobs} jobs of {name} from {sheet.name}", flush=True)
        demo = config[ModelsConfig].demo(await queue.batch_models(batch))
        if demo:
            print(f"note: demo model ({', '.join(demo)}) — images are noise; see README, "
                  "Models, for real ones", flush=True)
        log_file = config.data_dir / "logs" / f"run-batch-{batch}.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("ab") as log:
            # One executor beside this command: genbot's own, or one per ComfyUI server.
            executors = [Supervisor(config, stderr=log)] \
                if templates[name].engine != "comfyui" else \
                [Supervisor(config, stderr=log, command=Supervisor.comfy_command(config, url))
                 for url in config[ComfyUIConfig].servers]
            for executor in executors:
                executor.start()
            ours: set[str] = set()
            try:
                ended = await _follow(queue, batch, executors, ours)
                if ended is GAVE_UP:
                    print(f"genbot: the executor could not start; its log: {log_file}",
                          file=sys.stderr)
                    return 1
                if ended:
                    await app.cancel(me, CancelTarget.batch(batch))
                    print(f"genbot: no executor can run {ended}; batch {batch} canceled",
                          file=sys.stderr)
                    return 1
            finally:
                for executor in executors:
                    await executor.stop()
        return await _summary(app, batch, out, log_file, ours)
    finally:
        await queue.close()


GAVE_UP = "gave up"  # _follow: the executor could not start


async def _follow(queue: Queue, batch: int, executors: list[Supervisor],
                  ours: set[str]) -> str | None:
    """Draw the progress bar until every job of the batch has ended (None), the executor
    cannot run (GAVE_UP), or every running executor has said it cannot run what the
    batch's jobs need (what, and why: a missing checkpoint, node, model file — said
    within seconds instead of waiting for ever); `ours` gathers the executor's names.
    Until the first step, the bar says what the executor is doing (starting, building
    demo models, loading a model), and which executor took the jobs if another one (a
    running service's) did."""
    tty = sys.stdout.isatty()
    seq = await queue.last_event_seq()
    workers = Workers.of(queue)
    step = ""
    last = None
    while True:
        progress = await queue.batch_progress(batch)
        assert progress is not None
        for event in await queue.events_after(seq):
            seq = event.seq
            if event.kind == "progress" and event.batch_id == batch:
                d = event.data
                step = f"row {d['row']} {d['node']} {d['step']}/{d['total']}"
        doing = step or await _executor_doing(queue, workers, progress, executors)
        ours.update(owner_name(e.pid) for e in executors if e.pid)
        gave_up = all(e.gave_up for e in executors)
        failed = progress.counts.get(Status.FAILED, 0)
        canceled = progress.counts.get(Status.CANCELED, 0)
        filled = round(BAR * progress.done / progress.total)
        line = (f"[{'#' * filled}{'-' * (BAR - filled)}] {progress.done}/{progress.total}"
                + (f" · {failed} failed" if failed else "")
                + (f" · {canceled} canceled" if canceled else "")
                + (f" · {doing}" if doing and (tty or not step) else ""))
        if tty:
            print(f"\r{line:<100}", end="", flush=True)
        elif line != last:
            print(line, flush=True)
        last = line
        missing = [] if progress.counts.get(Status.RUNNING) else \
            await _unplaced(queue, batch, workers, ours, len(executors))
        if progress.done >= progress.total or gave_up or missing:
            if tty:
                print()
            return GAVE_UP if gave_up else \
                "; ".join(f"{m.what} ({'; '.join(m.why)})" for m in missing) or None
        await asyncio.sleep(0.3)


async def _unplaced(queue: Queue, batch: int, workers: Workers, ours: set[str],
                    count: int) -> list[Unplaced]:
    """What the batch's queued jobs need that no running executor can run — asked only
    once each of this command's executors is up and has looked at what it can run."""
    known = await workers.all()
    up = [w for w in known if w.id in ours and w.live
          and not (w.doing and w.doing[0] in ("server_down", "building_demo"))]
    if len(up) < count:
        return []
    return unplaced(await queue.batch_waiting_for(batch), known)


async def _executor_doing(queue: Queue, workers: Workers, progress: BatchProgress,
                          executors: list[Supervisor]) -> str:
    """Before the first step: what the executor is at, in words."""
    ours = {owner_name(e.pid) for e in executors if e.pid}
    others: set[str] = set()
    if progress.counts.get(Status.RUNNING):
        others = {j.lease_owner for j in await queue.batch_jobs(progress.batch_id)
                  if j.status == Status.RUNNING and j.lease_owner and j.lease_owner not in ours}
    if others:
        return f"taken by executor {', '.join(sorted(others))} (a running genbot service's)"
    me = next((w for w in await workers.all() if w.id in ours), None)
    if me is None:
        return "starting the executor"
    if me.doing:
        return say(f"queue_worker_{me.doing[0]}", "en", models=", ".join(me.doing[1]))[3:]
    return "waiting for the first step" if me.job_id else "executor ready"


async def _summary(app: App, batch_id: int, out: str | None, log_file: Path,
                   ours: set[str]) -> int:
    store = app.store
    batch = await app.batch(batch_id)
    jobs = await app.queue.batch_jobs(batch_id)
    done = [store.path(o) for j in jobs if j.status == Status.SUCCEEDED for o in j.outputs]
    folder = store.path(batch_folder(batch_id))
    for j in jobs:
        if j.status != Status.SUCCEEDED:
            print(f"row {j.row}: {j.status}: {j.error}", file=sys.stderr)
    if not done:
        print(f"no images; the executor's log: {log_file}", file=sys.stderr)
        return 1
    _, contact = await asyncio.to_thread(write_results, store, batch, jobs,
                                         app.templates.get(batch.template),
                                         app.config[TemplatesConfig].font)
    assert contact is not None
    grids = [store.path(g) for g in await asyncio.to_thread(
        write_grids, store, batch, jobs, font=app.config[TemplatesConfig].font)] \
        if batch.meta.get("sweep") else []
    ran = sorted({j.lease_owner for j in jobs if j.status == Status.SUCCEEDED and j.lease_owner})
    others = [o for o in ran if o not in ours]
    if others:
        print(f"made by executor {', '.join(others)}: a genbot service on this queue took the "
              "jobs before this command's executor did")
    else:
        print(f"made here, by this command's executor ({', '.join(ran)})")
    print(f"{len(done)} images in {folder}")
    print(f"contact sheet: {store.path(contact)}")
    for grid in grids:
        print(f"grid: {grid}")
    if out:
        target = Path(out)
        for path in [*done, store.path(contact)]:
            dest = target / path.relative_to(folder)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        for grid in grids:
            (target / "grids").mkdir(parents=True, exist_ok=True)
            shutil.copy2(grid, target / "grids" / grid.name)
        print(f"copied to {target.resolve()}")
    return 0 if all(j.status == Status.SUCCEEDED for j in jobs) else 1
