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
import contextlib
import getpass
import shlex
import shutil
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bot.app.grids import write_grids
from bot.app.permissions import Who
from bot.app.placement import Unplaced, unplaced
from bot.app.results import rendition_text, write_results
from bot.cli.shared import (
    GENBOT_ENGINE,
    PRIORITIES,
    PRIORITY_HELP,
    add_executor_option,
    add_lang_option,
    add_sweep_options,
    live_executors,
    load_config,
)
from bot.messages import say
from bot.settings import IntakeConfig
from bot.supervisor import Supervisor
from storage.config import Config
from storage.files import batch_folder, open_store
from storage.queue import BatchProgress, Priority, Queue, Status, open_queue
from storage.renditions import Renditions
from storage.workers import Workers, owner_name
from templates.settings import (
    ComfyUIConfig,
    ModelsConfig,
    TemplatesConfig,
    load_configured,
)

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
    add_executor_option(run)
    run.add_argument("--timeout", type=_seconds, metavar="SECONDS",
                     help="give up when no job of the batch has run for this long (waiting "
                          "for an executor or a ComfyUI server): cancel the batch, exit 1")
    run.add_argument("--keep-queued", action="store_true",
                     help="on Ctrl-C, SIGTERM or --timeout, leave the batch queued (for a "
                          "running service to do) instead of canceling it")
    run.set_defaults(func=cmd_run)


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return seconds


@dataclass(frozen=True)
class Ownership:
    """What `genbot run` does about its batch and its executor: start one even beside a
    running one; how long the batch may wait for one; whether a batch given up stays
    queued."""
    own_executor: bool = False
    timeout: float | None = None
    keep_queued: bool = False


def cmd_run(args: argparse.Namespace) -> int:
    return run_sheet(load_config(args), args.template, Path(args.sheet), out=args.out,
                     priority=Priority[args.priority.upper()], lang=args.lang,
                     vary=tuple(args.vary), seeds=args.seeds,
                     grid=tuple(k.strip() for k in args.grid.split(",") if k.strip()),
                     compare=tuple(args.compare),
                     channels=tuple(c.strip() for c in args.channels.split(",") if c.strip()),
                     layout=args.layout,
                     owning=Ownership(args.own_executor, args.timeout, args.keep_queued))


def run_sheet(config: Config, template: str, sheet: Path, *, out: str | None = None,
              priority: Priority = Priority.NORMAL, lang: str = "en",
              vary: tuple[str, ...] = (), seeds: int = 1, grid: tuple[str, ...] = (),
              compare: tuple[str, ...] = (), channels: tuple[str, ...] = (),
              layout: str = "", owning: Ownership = Ownership()) -> int:
    async def run() -> int:
        with Signals() as caught:
            return await _run(config, template, sheet, out, priority, lang, vary, seeds, grid,
                              compare, owning, caught, channels, layout)
    return asyncio.run(run())


class GivenUp(Exception):
    """The command gives its batch up before it ended: why (in words), and its exit code."""

    def __init__(self, reason: str, code: int):
        super().__init__(reason)
        self.reason, self.code = reason, code


class Signals:
    """SIGINT and SIGTERM, caught while the command owns a batch: noted here, so that it
    gives its batch up in order (cancels it, or says how to) instead of ending where it
    stands and leaving the batch queued for whoever runs next."""

    CAUGHT = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.caught: signal.Signals | None = None
        self.event = asyncio.Event()

    def __enter__(self) -> Signals:
        loop = asyncio.get_running_loop()
        for sig in self.CAUGHT:
            loop.add_signal_handler(sig, self._note, sig)
        return self

    def __exit__(self, *exc: object) -> None:
        loop = asyncio.get_running_loop()
        for sig in self.CAUGHT:
            loop.remove_signal_handler(sig)

    def _note(self, sig: signal.Signals) -> None:
        self.caught = self.caught or sig
        self.event.set()

    def check(self, lang: str) -> None:
        """Raise GivenUp if a signal came (exit code 128 + its number, as a shell says)."""
        if self.caught is not None:
            raise GivenUp(say("run_stopped_by", lang, signal=self.caught.name),
                          128 + self.caught.value)

    async def sleep(self, seconds: float, lang: str) -> None:
        """Sleep, or raise GivenUp as soon as a signal comes."""
        with contextlib.suppress(TimeoutError):  # (not wait_for: see storage.wakeup)
            async with asyncio.timeout(seconds):
                await self.event.wait()
        self.check(lang)


async def _run(config: Config, name: str, sheet: Path, out: str | None, priority: Priority,
               lang: str, vary: tuple[str, ...] = (), seeds: int = 1,
               grid: tuple[str, ...] = (), compare: tuple[str, ...] = (),
               owning: Ownership = Ownership(), signals: Signals | None = None,
               channels: tuple[str, ...] = (), layout: str = "") -> int:
    signals = signals or Signals()
    from bot.app.application import Accepted, App, CancelTarget, SubmitOptions
    from bot.intake.check import IntakeReport, SheetFile, check_sheet
    from bot.intake.images import folder_attachments
    templates, _ = load_configured(config)
    spec, name = name, name.partition("@")[0]  # (NAME@N: the application resolves the pin)
    if name not in templates:
        print(say("run_no_template", lang, name=name, have=", ".join(templates)), file=sys.stderr)
        return 2
    try:
        data = sheet.read_bytes()
    except OSError as e:
        print(say("run_cannot_read", lang, file=sheet, error=e.strerror or e), file=sys.stderr)
        return 2
    if templates[name].engine == "comfyui" and not config[ComfyUIConfig].servers:
        print(say("run_needs_comfyui", lang, template=name), file=sys.stderr)
        return 2
    store = open_store(config)
    pictures = folder_attachments(sheet.resolve().parent)
    # A sheet that cannot go is refused before the database is even opened.
    report = await check_sheet(templates[name], SheetFile(sheet.name, data), config=config,
                               store=store, attachments=pictures)
    if not report.ok:
        print(report.report(lang, config[IntakeConfig].max_problems_shown), file=sys.stderr)
        return 1
    if signals.caught is not None:
        print(say("run_nothing_queued", lang, reason=say("run_stopped_by", lang,
                                                         signal=signals.caught.name)),
              file=sys.stderr)
        return 128 + signals.caught.value
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
                                                seeds=seeds, grid=grid, compare=compare,
                                                channels=channels, layout=layout))
        if isinstance(result, IntakeReport):
            print(result.report(lang, config[IntakeConfig].max_problems_shown), file=sys.stderr)
            return 1
        assert isinstance(result, Accepted)  # (no ask_over: the command line asks for it all)
        batch = result.batch_id
        print(say("run_batch", lang, batch=batch, count=result.jobs, template=name,
                  sheet=sheet.name), flush=True)
        demo = config[ModelsConfig].demo(await queue.batch_models(batch))
        if demo:
            print(say("run_demo_note", lang, models=", ".join(demo)), flush=True)
        log_file = config.data_dir / "logs" / f"run-batch-{batch}.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("ab") as log:
            # One executor for the batch: genbot's own, or one per ComfyUI server — this
            # command's, unless one already serves this database (a service's).
            wanted = [GENBOT_ENGINE] if templates[name].engine != "comfyui" else \
                [url.rstrip("/") for url in config[ComfyUIConfig].servers]
            serving = {} if owning.own_executor else await live_executors(queue)
            theirs = sorted({w for key in wanted for w in serving.get(key, ())})
            if theirs:
                print(say("executor_served", lang, executors=", ".join(theirs)), flush=True)
            executors = [Supervisor(config, stderr=log, command=None if key == GENBOT_ENGINE
                                    else Supervisor.comfy_command(config, key))
                         for key in wanted if key not in serving]
            for executor in executors:
                executor.start()
            ours: set[str] = set()
            try:
                try:
                    ended = await _follow(queue, batch, executors, ours, theirs,
                                          Waiting(signals, owning.timeout, lang))
                except GivenUp as given_up:
                    await _give_up(app, me, batch, given_up.reason, owning.keep_queued,
                                   config, lang)
                    return given_up.code
                if ended is GAVE_UP:
                    print(say("run_executor_failed", lang, log=log_file), file=sys.stderr)
                    return 1
                if ended:
                    await app.cancel(me, CancelTarget.batch(batch))
                    print(say("run_unrunnable", lang, what=ended, batch=batch),
                          file=sys.stderr)
                    return 1
            finally:
                for executor in executors:
                    await executor.stop()
        return await _summary(app, batch, out, log_file, ours, lang)
    finally:
        await queue.close()


async def _give_up(app: App, me: Who, batch: int, reason: str, keep_queued: bool,
                   config: Config, lang: str) -> None:
    """The batch this command gives up: canceled (before its executor stops, so that no
    other executor takes its jobs meanwhile), or with --keep-queued left for another
    executor, saying the command that cancels it."""
    from bot.app.application import CancelTarget
    if not keep_queued:
        await app.cancel(me, CancelTarget.batch(batch))
        print(say("run_canceled", lang, reason=reason, batch=batch), file=sys.stderr)
        return
    command = ["genbot", "queue", "cancel", "--batch", str(batch)]
    if config.source != "built-in defaults":
        command += ["--config", config.source]
    print(say("run_kept", lang, reason=reason, batch=batch, command=shlex.join(command)),
          file=sys.stderr)


GAVE_UP = "gave up"  # _follow: the executor could not start


@dataclass
class Waiting:
    """How long the batch has waited with none of its jobs running (reset each time one
    runs or ends), against --timeout; and the signals that end the wait at once."""
    signals: Signals
    timeout: float | None
    lang: str
    since: float = field(default_factory=time.monotonic)
    done: int = 0

    def moved(self, progress: BatchProgress) -> None:
        if progress.counts.get(Status.RUNNING) or progress.done != self.done:
            self.since, self.done = time.monotonic(), progress.done

    @property
    def expired(self) -> bool:
        return self.timeout is not None and time.monotonic() - self.since > self.timeout


async def _follow(queue: Queue, batch: int, executors: list[Supervisor], ours: set[str],
                  theirs: list[str], waiting: Waiting) -> str | None:
    """Draw the progress bar until every job of the batch has ended (None), the executor
    cannot run (GAVE_UP), or every running executor has said it cannot run what the
    batch's jobs need (what, and why: a missing checkpoint, node, model file — said
    within seconds instead of waiting for ever); `ours` gathers the executor's names,
    `theirs` names the running ones the command handed its jobs to instead. Until the
    first step, the bar says what the executor is doing (starting, building demo models,
    loading a model), and which executor took the jobs if another one (a running
    service's) did. A signal, or --timeout passing with no job of the batch running,
    raises GivenUp."""
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
                step = say("run_step", waiting.lang, row=d["row"], node=d["node"],
                           step=d["step"], total=d["total"])
        doing = step or await _executor_doing(queue, workers, progress, executors,
                                              waiting.lang, theirs)
        ours.update(owner_name(e.pid) for e in executors if e.pid)
        gave_up = bool(executors) and all(e.gave_up for e in executors)
        failed = progress.counts.get(Status.FAILED, 0)
        canceled = progress.counts.get(Status.CANCELED, 0)
        filled = round(BAR * progress.done / progress.total)
        line = (f"[{'#' * filled}{'-' * (BAR - filled)}] {progress.done}/{progress.total}"
                + (say("run_bar_failed", waiting.lang, count=failed) if failed else "")
                + (say("run_bar_canceled", waiting.lang, count=canceled) if canceled else "")
                + (f" · {doing}" if doing and (tty or not step) else ""))
        if tty:
            print(f"\r{line:<100}", end="", flush=True)
        elif line != last:
            print(line, flush=True)
        last = line
        missing = [] if progress.counts.get(Status.RUNNING) else \
            await _unplaced(queue, batch, workers, ours | set(theirs),
                            len(executors) + len(theirs))
        if progress.done >= progress.total or gave_up or missing:
            if tty:
                print()
            return GAVE_UP if gave_up else \
                "; ".join(f"{m.what} ({'; '.join(m.why)})" for m in missing) or None
        waiting.moved(progress)
        if waiting.expired:
            if tty:
                print()
            assert waiting.timeout is not None
            raise GivenUp(say("run_timed_out", waiting.lang, batch=batch,
                              seconds=waiting.timeout,
                              why=await _why_waiting(queue, workers, doing, waiting.lang)), 1)
        await waiting.signals.sleep(0.3, waiting.lang)


async def _why_waiting(queue: Queue, workers: Workers, doing: str, lang: str) -> str:
    """Why no job of the batch runs, in words: the queue paused, a ComfyUI server down, no
    executor at all, or what the executor was doing."""
    if await queue.paused():
        return say("run_why_paused", lang)
    known = [w for w in await workers.all() if w.live]
    down = sorted({m for w in known if w.doing and w.doing[0] == "server_down"
                   for m in w.doing[1]})
    if down:
        return say("run_why_server_down", lang, servers=", ".join(down))
    if not known:
        return say("run_why_no_executor", lang)
    return say("run_why_not_taken", lang, doing=doing)


async def _unplaced(queue: Queue, batch: int, workers: Workers, mine: set[str],
                    count: int) -> list[Unplaced]:
    """What the batch's queued jobs need that no running executor can run — asked only
    once each executor the command counts on (`mine`: its own, or the running ones it
    handed its jobs to) is up and has looked at what it can run."""
    known = await workers.all()
    up = [w for w in known if w.id in mine and w.live
          and not (w.doing and w.doing[0] in ("server_down", "building_demo"))]
    if len(up) < count:
        return []
    return unplaced(await queue.batch_waiting_for(batch), known)


async def _executor_doing(queue: Queue, workers: Workers, progress: BatchProgress,
                          executors: list[Supervisor], lang: str,
                          theirs: Sequence[str] = ()) -> str:
    """Before the first step: what the executor is at, in words (this command's own, or
    the running one it handed its jobs to)."""
    ours = {owner_name(e.pid) for e in executors if e.pid}
    others: set[str] = set()
    if progress.counts.get(Status.RUNNING):
        others = {j.lease_owner for j in await queue.batch_jobs(progress.batch_id)
                  if j.status == Status.RUNNING and j.lease_owner and j.lease_owner not in ours}
    if others:
        return say("run_taken_by", lang, executors=", ".join(sorted(others)))
    me = next((w for w in await workers.all() if w.id in ours or w.id in theirs), None)
    if me is None:
        return say("run_starting" if executors else "run_waiting_executor", lang)
    if me.doing:
        return say(f"queue_worker_{me.doing[0]}", lang,
                   models=", ".join(me.doing[1])).removeprefix(" · ")
    return say("run_first_step" if me.job_id else "run_executor_ready", lang)


async def _summary(app: App, batch_id: int, out: str | None, log_file: Path,
                   ours: set[str], lang: str) -> int:
    store = app.store
    batch = await app.batch(batch_id)
    jobs = await app.queue.batch_jobs(batch_id)
    done = [store.path(o) for j in jobs if j.status == Status.SUCCEEDED for o in j.outputs]
    folder = store.path(batch_folder(batch_id))
    for j in jobs:
        if j.status != Status.SUCCEEDED:
            print(say("run_job_ended", lang, row=j.row, status=say(f"state_{j.status}", lang),
                      error=j.error), file=sys.stderr)
    if not done:
        print(say("run_no_images", lang, log=log_file), file=sys.stderr)
        return 1
    renditions = await Renditions(app.queue.db).of_batch(batch.id)
    _, contact = await asyncio.to_thread(write_results, store, batch, jobs,
                                         app.templates.get(batch.template),
                                         app.config[TemplatesConfig].font, renditions)
    assert contact is not None
    grids = [store.path(g) for g in await asyncio.to_thread(
        write_grids, store, batch, jobs, font=app.config[TemplatesConfig].font)] \
        if batch.meta.get("sweep") else []
    ran = sorted({j.lease_owner for j in jobs if j.status == Status.SUCCEEDED and j.lease_owner})
    others = [o for o in ran if o not in ours]
    if others and not ours:
        print(say("run_made_by_running", lang, executors=", ".join(others)))
    elif others:
        print(say("run_made_by_both", lang, executors=", ".join(others)))
    else:
        print(say("run_made_here", lang, executors=", ".join(ran)))
    print(say("run_images_in", lang, count=len(done), folder=folder))
    print(say("run_contact", lang, path=store.path(contact)))
    for grid in grids:
        print(say("run_grid", lang, path=grid))
    files = [store.path(r.path) for r in renditions]
    if renditions:
        held = [r for r in renditions if not r.passed]
        print(say("run_channel_files", lang, count=len(renditions),
                  channels=", ".join(dict.fromkeys(r.channel for r in renditions)),
                  folder=store.path(f"{batch_folder(batch_id)}/deliver")))
        for r in held[:10]:
            print("  " + rendition_text(r, lang).replace(r.name, f"{r.channel}/{r.name}", 1))
    if out:
        target = Path(out)
        for path in [*done, store.path(contact), *files]:
            dest = target / path.relative_to(folder)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        for grid in grids:
            (target / "grids").mkdir(parents=True, exist_ok=True)
            shutil.copy2(grid, target / "grids" / grid.name)
        print(say("run_copied", lang, folder=target.resolve()))
    return 0 if all(j.status == Status.SUCCEEDED for j in jobs) else 1
