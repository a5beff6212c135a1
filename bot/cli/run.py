"""`genbot run TEMPLATE SHEET`: a newcomer's one-shot.

Checks the sheet as the bot would, queues it in the local queue, runs an executor
process beside it (supervised, as `genbot serve` does), draws a progress bar, then
prints where the images and the contact sheet are. The exit code is 0 only if every
job succeeded.
"""

from __future__ import annotations

import asyncio
import getpass
import shutil
import sys
from pathlib import Path

from bot.app.core import App, SubmitOptions
from bot.app.permissions import Who
from bot.app.results import write_results
from bot.intake.check import IntakeReport, SheetFile, check_sheet
from bot.intake.images import folder_attachments
from bot.messages import say
from bot.supervisor import Supervisor
from executor.workflow import load_templates
from storage.config import Config
from storage.files import batch_folder, open_store
from storage.queue import BatchProgress, Priority, Queue, Status, open_queue
from storage.workers import Workers, owner_name

BAR = 30


def run_sheet(config: Config, template: str, sheet: Path, *, out: str | None = None,
              priority: Priority = Priority.NORMAL, lang: str = "en") -> int:
    return asyncio.run(_run(config, template, sheet, out, priority, lang))


async def _run(config: Config, name: str, sheet: Path, out: str | None, priority: Priority,
               lang: str) -> int:
    templates, _ = load_templates(config.templates_dir)
    if name not in templates:
        print(f"genbot: no template {name!r} (have: {', '.join(templates)})", file=sys.stderr)
        return 2
    try:
        data = sheet.read_bytes()
    except OSError as e:
        print(f"genbot: cannot read {sheet}: {e.strerror or e}", file=sys.stderr)
        return 2
    if templates[name].engine == "comfyui" and not config.comfyui.servers:
        print(f"genbot: {name} runs on ComfyUI: name your servers in [comfyui] servers "
              "(docs/comfyui.md)", file=sys.stderr)
        return 2
    store = open_store(config)
    pictures = folder_attachments(sheet.resolve().parent)
    # A sheet that cannot go is refused before the database is even opened.
    report = await check_sheet(templates[name], SheetFile(sheet.name, data), config=config,
                               store=store, attachments=pictures)
    if not report.ok:
        print(report.report(lang, config.intake.max_problems_shown), file=sys.stderr)
        return 1
    queue = await open_queue(config)
    try:
        me = Who("cli", getpass.getuser())
        app = App(config, queue, store, templates, local_admins=(me.id,))
        result = await app.submit(me, name, SheetFile(sheet.name, data), pictures,
                                  SubmitOptions(priority=priority, lang=lang))
        if isinstance(result, IntakeReport):
            print(result.report(lang, config.intake.max_problems_shown), file=sys.stderr)
            return 1
        batch = result.batch_id
        print(f"batch {batch}: {result.jobs} jobs of {name} from {sheet.name}", flush=True)
        demo = config.demo_models(await queue.batch_models(batch))
        if demo:
            print(f"note: demo model ({', '.join(demo)}) — images are noise; see README, "
                  "Models, for real ones", flush=True)
        log_file = config.data_dir / "logs" / f"run-batch-{batch}.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "ab") as log:
            # One executor beside this command: genbot's own, or one per ComfyUI server.
            executors = [Supervisor(config, stderr=log)] \
                if templates[name].engine != "comfyui" else \
                [Supervisor(config, stderr=log, command=Supervisor.comfy_command(config, url))
                 for url in config.comfyui.servers]
            for executor in executors:
                executor.start()
            ours: set[str] = set()
            try:
                if not await _follow(queue, batch, executors, ours):
                    print(f"genbot: the executor could not start; its log: {log_file}",
                          file=sys.stderr)
                    return 1
            finally:
                for executor in executors:
                    await executor.stop()
        return await _summary(app, batch, out, log_file, ours)
    finally:
        await queue.close()


async def _follow(queue: Queue, batch: int, executors: list[Supervisor],
                  ours: set[str]) -> bool:
    """Draw the progress bar until every job of the batch has ended (True), or the
    executor cannot run (False); `ours` gathers the executor's names. Until the first
    step, the bar says what the executor is doing (starting, building demo models,
    loading a model), and which executor took the jobs if another one (a running
    service's) did."""
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
        failed, canceled = progress.counts.get("failed", 0), progress.counts.get("canceled", 0)
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
        if progress.done >= progress.total or gave_up:
            if tty:
                print()
            return not gave_up
        await asyncio.sleep(0.3)


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
                                         app.config.executor.font)
    assert contact is not None
    ran = sorted({j.lease_owner for j in jobs if j.status == Status.SUCCEEDED and j.lease_owner})
    others = [o for o in ran if o not in ours]
    if others:
        print(f"made by executor {', '.join(others)}: a genbot service on this queue took the "
              "jobs before this command's executor did")
    else:
        print(f"made here, by this command's executor ({', '.join(ran)})")
    print(f"{len(done)} images in {folder}")
    print(f"contact sheet: {store.path(contact)}")
    if out:
        target = Path(out)
        for path in [*done, store.path(contact)]:
            dest = target / path.relative_to(folder)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        print(f"copied to {target.resolve()}")
    return 0 if all(j.status == Status.SUCCEEDED for j in jobs) else 1
