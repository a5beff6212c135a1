"""The `genbot` command.

  genbot serve                      start the service (embedded defaults need no config)
  genbot check-config               validate the configuration and say where it came from
  genbot db upgrade                 apply pending schema migrations
  genbot queue status|pause|resume|cancel
  genbot templates                  the templates, and any that are broken
  genbot template show|example NAME
  genbot validate TEMPLATE SHEET    the bot's report on a sheet, without queueing anything
  genbot run TEMPLATE SHEET         one-shot: queue the sheet, run it here, show progress
  genbot chat [--as USER]           the chat commands in a terminal (no Slack/DingTalk needed)
  genbot submit TEMPLATE SHEET      send a sheet to a running genbot (REST API); --wait follows it
  genbot worker                     run one executor (one per GPU)
  genbot models [demo]              the model registry; build the demo models
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

from bot.app.permissions import Who
from bot.errors import Coded
from storage import config as cfg
from storage.db import Database, DatabaseError
from storage.queue import Priority, Status, open_queue

PRIORITIES = [p.name.lower() for p in Priority]


def _me() -> Who:
    """Whoever runs the command line: an admin of this machine's genbot."""
    return Who("cli", getpass.getuser())


def _load(args) -> cfg.Config:
    return cfg.load(args.config)


# --- commands -------------------------------------------------------------------------

def cmd_serve(args) -> int:
    from bot.service import serve
    from storage.logs import setup_logging
    config = _load(args)
    setup_logging(config.service.log_level, config.service.log_format)
    asyncio.run(serve(config, executor=not args.no_executor))
    return 0


def cmd_worker(args) -> int:
    from executor.worker import main as worker_main
    argv = (["--config", args.config] if args.config else []) + \
        (["--device", args.device] if args.device else [])
    return worker_main(argv)


def cmd_models(args) -> int:
    from executor.models import ModelError, Registry
    config = _load(args)
    registry = Registry(config)
    unbuilt = set(registry.needs_demo())
    for name in registry.names:
        entry = config.models[name]
        if name in unbuilt:  # not a problem: the executor builds it when it first starts
            what = "not built yet (the executor builds it on first start; or `genbot models demo`)"
        else:
            try:
                info = registry.get(name)
                what = f"{info.kind}, {info.family or 'any family'}"
            except ModelError as e:
                what = f"NOT USABLE: {e}"
        if entry.path.startswith("demo:"):
            what += " — demo model: images are noise (README, Models: real ones)"
        print(f"{name:<16} {entry.path:<32} {what}")
    return 0


def cmd_models_demo(args) -> int:
    from executor import demo
    from executor.worker import quiet_libraries
    quiet_libraries()
    config = _load(args)
    folder = config.models_dir / "demo"
    started = time.monotonic()
    built = demo.build(folder, force=args.force)
    print(f"demo models in {folder}: " + (f"built {', '.join(built)} in "
                                          f"{time.monotonic() - started:.1f} s" if built
                                          else "all present (--force rebuilds)"))
    print("They have random weights: their images are noise. Point [models] at real "
          "checkpoints for real images.")
    return 0


def cmd_check_config(args) -> int:
    """The keys, and what they point at: a model path that is not there fails here, not
    at the first job that needs it."""
    from executor.models import ModelError, Registry
    config = _load(args)
    problems = []
    registry = Registry(config)
    for name in registry.names:
        if config.models[name].path.startswith("demo:"):
            continue  # built by genbot when first needed
        try:
            registry.get(name)
        except ModelError as e:
            problems.append(f"[models] {name}: {e}")
    if problems:
        print(f"config has problems ({config.source}):", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"config OK ({config.source})")
    print(f"  database: {Database(config.database_url).display_url}")
    print(f"  data dir: {config.data_dir}" + (
        "  (relative paths are read from the config file's folder)"
        if args.config or os.environ.get(cfg.CONFIG_ENV) else ""))
    print(f"  listen:   http://{config.service.host}:{config.service.port}")
    return 0


def cmd_db_upgrade(args) -> int:
    config = _load(args)

    async def run() -> list[str]:
        db = Database(config.database_url, pool_size=config.database.pool_size)
        await db.open(migrate=False)
        try:
            return await db.upgrade()
        finally:
            await db.close()

    applied = asyncio.run(run())
    if applied:
        print("applied: " + ", ".join(applied))
    else:
        print("database schema is up to date")
    return 0


def _queue_command(func):
    """A command over the local queue, through the application layer as `_me()`."""
    def run(args) -> int:
        config = _load(args)

        async def inner():
            from bot.app.core import App
            from storage.files import open_store
            queue = await open_queue(config)
            try:
                me = _me()
                app = App(config, queue, open_store(config), {}, local_admins=(me.id,))
                return await func(app, me, args)
            finally:
                await queue.close()

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
async def cmd_queue_status(app, me: Who, args) -> int:
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
async def cmd_queue_pause(app, me: Who, args) -> int:
    changed = await app.pause(me)
    print("paused: running jobs finish, nothing new starts" if changed else "already paused")
    return 0


@_queue_command
async def cmd_queue_resume(app, me: Who, args) -> int:
    changed = await app.resume(me)
    print("resumed" if changed else "was not paused")
    return 0


@_queue_command
async def cmd_queue_cancel(app, me: Who, args) -> int:
    from bot.app.core import CancelTarget
    target = (CancelTarget.job(args.job) if args.job is not None
              else CancelTarget.batch(args.batch) if args.batch is not None
              else CancelTarget.of(args.submitter) if args.submitter
              else CancelTarget.everything())
    result = await app.cancel(me, target)
    print(f"canceled {len(result.ended)} queued job(s); asked {len(result.asked)} running "
          "job(s) to stop")
    return 0


def _templates(config: cfg.Config):
    from executor.workflow import load_templates
    return load_templates(config.templates_dir)


def _template(config: cfg.Config, name: str):
    templates, errors = _templates(config)
    if name in templates:
        return templates[name]
    broken = [e for e in errors if Path(e.file).stem == name]
    if broken:
        raise SystemExit(f"genbot: template {name} is broken: {broken[0]}")
    import difflib
    close = difflib.get_close_matches(name, list(templates), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise SystemExit(f"genbot: no template {name!r}{hint}; templates: "
                     f"{', '.join(templates) or 'none'}")


def cmd_templates(args) -> int:
    config = _load(args)
    templates, errors = _templates(config)
    for t in templates.values():
        print(f"{t.name:16} {len(t.params):2} params  {t.description}")
    for e in errors:
        print(f"BROKEN {e}", file=sys.stderr)
    if not templates and not errors:
        print(f"no templates in {config.templates_dir}")
    return 1 if errors else 0


def cmd_template_show(args) -> int:
    t = _template(_load(args), args.name)
    print(f"{t.name}: {t.description}\n")
    rows = [("column", "type", "required", "default", "allowed", "aliases")]
    for p in t.params.values():
        default = "" if p.default is None else str(p.default)
        rows.append((p.name, p.type, "yes" if p.required else "", default, p.allowed,
                     ", ".join(p.aliases)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    extra = sorted(t.columns)
    if extra:
        print(f"\nalso uses these sheet columns in its text: {', '.join(extra)}")
    print(f"output files: {''.join(a + ('{' + b + '}' if b else '') for a, b in t.output.parts)}")
    return 0


def cmd_template_example(args) -> int:
    """The sheet, and beside it the pictures its rows name, so it runs as it is."""
    from bot.intake.examples import example_pictures
    from bot.intake.sheets import write_example
    config = _load(args)
    t = _template(config, args.name)
    out = Path(args.output or f"{t.name}.xlsx")
    try:
        out.write_bytes(write_example(t, args.lang))
        wrote, kept = [], []
        for name, data in asyncio.run(example_pictures(t, config.assets_dir)).items():
            target = out.parent / name
            if target.exists():  # the person's own picture: never overwritten
                kept.append(str(target))
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            wrote.append(str(target))
    except OSError as e:
        raise SystemExit(f"genbot: cannot write {e.filename or out}: {e.strerror or e}") from None
    print(f"wrote {out}")
    if wrote:
        print(f"and the pictures its rows name, beside it: {', '.join(wrote)}")
    if kept:
        print(f"kept the pictures already there: {', '.join(kept)}")
    print(f"try it: genbot run {t.name} {shlex.quote(str(out))}")
    return 0


def cmd_validate(args) -> int:
    from bot.intake.check import SheetFile, check_sheet
    from bot.intake.images import folder_attachments
    from storage.files import FileStore
    config = _load(args)
    t = _template(config, args.template)
    sheet = Path(args.sheet)
    try:
        data = sheet.read_bytes()
    except OSError as e:
        raise SystemExit(f"genbot: cannot read {sheet}: {e.strerror or e}") from None

    async def run():
        with tempfile.TemporaryDirectory() as tmp:  # validating stores nothing
            return await check_sheet(t, SheetFile(sheet.name, data), config=config,
                                     store=FileStore(Path(tmp)),
                                     attachments=folder_attachments(sheet.resolve().parent),
                                     skip_invalid=args.skip_invalid)

    result = asyncio.run(run())
    print(result.report(args.lang, config.intake.max_problems_shown, args.skip_invalid))
    return 0 if result.ok else 1


def cmd_run(args) -> int:
    from bot.cli.run import run_sheet
    return run_sheet(_load(args), args.template, Path(args.sheet), out=args.out,
                     priority=Priority[args.priority.upper()], lang=args.lang)


def cmd_submit(args) -> int:
    from bot.cli.submit import submit
    return submit(args.template, Path(args.sheet), server=args.server, token=args.token,
                  priority=args.priority, wait=args.wait, key=args.idempotency_key)


def cmd_chat(args) -> int:
    from bot.cli.chat import chat
    from storage.logs import setup_logging
    config = _load(args)
    setup_logging("warning", config.service.log_format)
    return asyncio.run(chat(config, args.as_user, executor=not args.no_executor))


# --- parser ---------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS,
                        help="config file (default: $GENBOT_CONFIG, else ./config.toml, "
                             "else built-in defaults)")
    parser = argparse.ArgumentParser(prog="genbot", parents=[common],
                                     description="Chat-driven batch image generation.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", parents=[common], help="start the service")
    serve.add_argument("--no-executor", action="store_true",
                       help="run the bots and API only; executors run elsewhere (genbot worker)")
    serve.set_defaults(func=cmd_serve)
    worker = sub.add_parser("worker", parents=[common], help="run one executor (one per GPU)")
    worker.add_argument("--device", help="override [executor] device, e.g. cuda:1")
    worker.set_defaults(func=cmd_worker)
    models = sub.add_parser("models", parents=[common], help="the model registry")
    models.set_defaults(func=cmd_models)
    models_sub = models.add_subparsers(dest="models", metavar="ACTION")
    demo = models_sub.add_parser("demo", parents=[common],
                                 help="build the tiny random-weight demo models (no download)")
    demo.add_argument("--force", action="store_true", help="rebuild those already built")
    demo.set_defaults(func=cmd_models_demo)
    run = sub.add_parser("run", parents=[common],
                         help="queue a sheet and run it here, with a progress bar")
    run.add_argument("template")
    run.add_argument("sheet")
    run.add_argument("--out", metavar="DIR", help="also copy the images and contact sheet here")
    run.add_argument("--priority", choices=PRIORITIES, default="normal")
    run.add_argument("--lang", choices=("en", "zh"), default="en")
    run.set_defaults(func=cmd_run)
    submit = sub.add_parser("submit", help="send a sheet to a running genbot over its API")
    submit.add_argument("template")
    submit.add_argument("sheet")
    submit.add_argument("--server", metavar="URL",
                        help="default: $GENBOT_SERVER, else http://127.0.0.1:8080")
    submit.add_argument("--token", metavar="T", help="default: $GENBOT_TOKEN")
    submit.add_argument("--priority", choices=PRIORITIES, default="normal")
    submit.add_argument("--wait", action="store_true",
                        help="follow the batch with a progress bar; exit 1 if a job fails")
    submit.add_argument("--idempotency-key", metavar="KEY",
                        help="the same key again returns the first batch (safe retries)")
    submit.set_defaults(func=cmd_submit)
    chat = sub.add_parser("chat", parents=[common],
                          help="type chat commands here; replies, progress and images printed")
    chat.add_argument("--as", dest="as_user", metavar="USER",
                      help="act as terminal:USER with that user's role (default: you, as admin)")
    chat.add_argument("--no-executor", action="store_true",
                      help="a running `genbot serve` or `genbot worker` runs the jobs")
    chat.set_defaults(func=cmd_chat)
    sub.add_parser("check-config", parents=[common],
                   help="validate the configuration").set_defaults(func=cmd_check_config)

    db = sub.add_parser("db", help="database schema").add_subparsers(dest="db", required=True,
                                                                     metavar="ACTION")
    db.add_parser("upgrade", parents=[common],
                  help="apply pending migrations").set_defaults(func=cmd_db_upgrade)

    queue = sub.add_parser("queue", help="inspect and control the job queue").add_subparsers(
        dest="queue", required=True, metavar="ACTION")
    queue.add_parser("status", parents=[common],
                     help="counts by status and priority, ETA").set_defaults(func=cmd_queue_status)
    queue.add_parser("pause", parents=[common],
                     help="stop starting jobs (persists)").set_defaults(func=cmd_queue_pause)
    queue.add_parser("resume", parents=[common], help="start jobs again").set_defaults(
        func=cmd_queue_resume)
    cancel = queue.add_parser("cancel", parents=[common], help="cancel jobs")
    which = cancel.add_mutually_exclusive_group(required=True)
    which.add_argument("--job", type=int, metavar="ID")
    which.add_argument("--batch", type=int, metavar="ID")
    which.add_argument("--submitter", metavar="PLATFORM:USER")
    which.add_argument("--all", action="store_true", default=None)
    cancel.set_defaults(func=cmd_queue_cancel)

    sub.add_parser("templates", parents=[common],
                   help="list the templates").set_defaults(func=cmd_templates)
    template = sub.add_parser("template", help="one template").add_subparsers(
        dest="template", required=True, metavar="ACTION")
    show = template.add_parser("show", parents=[common], help="its parameters")
    show.add_argument("name")
    show.set_defaults(func=cmd_template_show)
    example = template.add_parser("example", parents=[common],
                                  help="write an example sheet (.xlsx)")
    example.add_argument("name")
    example.add_argument("-o", "--output", metavar="FILE", help="default: NAME.xlsx")
    example.add_argument("--lang", choices=("en", "zh"), default="en")
    example.set_defaults(func=cmd_template_example)
    validate = sub.add_parser("validate", parents=[common],
                              help="check a sheet against a template; queues nothing")
    validate.add_argument("template")
    validate.add_argument("sheet")
    validate.add_argument("--lang", choices=("en", "zh"), default="en")
    validate.add_argument("--skip-invalid", action="store_true",
                          help="report as the bot would with --skip-invalid")
    validate.set_defaults(func=cmd_validate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.config = getattr(args, "config", None)
    try:
        return args.func(args)
    except cfg.ConfigError as e:
        print(f"genbot: {e}", file=sys.stderr)
        return 2
    except DatabaseError as e:
        print(f"genbot: {e}", file=sys.stderr)
        return 1
    except Coded as e:  # the application layer said no: say why, as chat would
        print(f"genbot: {e.render()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the output went into `head` or similar, which has stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
