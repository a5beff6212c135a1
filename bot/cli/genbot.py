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
  genbot worker [--comfyui URL]     run one executor (one per GPU, or per ComfyUI server)
  genbot models [demo|pull]         the model registry; build the demo models; download one
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
    config = ["--config", args.config] if args.config else []
    if args.comfyui:
        from executor.comfy_worker import main as comfy_main
        return comfy_main([*config, "--url", args.comfyui])
    from executor.worker import main as worker_main
    return worker_main(config + (["--device", args.device] if args.device else []))


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


def cmd_models_pull(args) -> int:
    """A model from the hub (or a mirror, HF_ENDPOINT) or a URL into the models folder,
    resumable; ends with the [models] line (added with --write)."""
    import re

    from executor import pull
    config = _load(args)
    source = args.source
    name = args.name or pull.model_name(args.file or source)
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise SystemExit(f"genbot: --name {name!r}: a model name is letters, digits, _ and -")
    folder = Path(args.dir).resolve() if args.dir else config.models_dir / name
    url = "://" in source
    try:
        if url:
            remotes, auth, what = pull.plan_url(source, args.sha256), None, source
            if urlparse_host(source) == urlparse_host(pull.endpoint()):
                auth = pull.token()  # the hub's own address: its token; nobody else's
        else:
            commit, remotes = pull.plan_repo(source, args.revision, args.file, args.variant)
            auth, what = pull.token(), f"{source}@{commit[:12]}"
        total = sum(r.size or 0 for r in remotes)
        print(f"pulling {what} into {folder}: {len(remotes)} file(s)"
              + (f", {total / 2**20:.1f} MB" if total else ""), flush=True)
        with _PullProgress() as progress:
            paths = asyncio.run(pull.fetch(remotes, folder, progress.update, auth))
    except pull.PullError as e:
        print(f"genbot: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ngenbot: stopped; run the same command again to resume", file=sys.stderr)
        return 130
    target = folder if len(paths) > 1 or (folder / "model_index.json").is_file() else paths[0]
    line = f"{name} = {json_string(str(target))}"
    if args.write:
        where = _write_model_line(config, name, line)
        print(f"added to [models] in {where}: {line}")
    else:
        print(f"done. Add this line under [models] in your config (or pull with --write):\n"
              f"  {line}")
    return 0


def urlparse_host(url: str) -> str:
    from urllib.parse import urlparse
    return urlparse(url).netloc.lower()


def json_string(text: str) -> str:
    import json
    return json.dumps(text, ensure_ascii=False)  # (a TOML basic string too)


def _write_model_line(config: cfg.Config, name: str, line: str) -> Path:
    """`line` under [models] in the config file (replacing `name`'s line if there is
    one); a file is started where there was none. Checked by loading it again."""
    import re
    path = Path(config.source) if config.source != "built-in defaults" else Path("config.toml")
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    lines = text.splitlines()
    header = next((i for i, x in enumerate(lines) if x.strip() == "[models]"), None)
    if header is None:
        lines += ["", "[models]", line] if lines else ["[models]", line]
    else:
        end = next((i for i in range(header + 1, len(lines))
                    if lines[i].lstrip().startswith("[")), len(lines))
        mine = next((i for i in range(header + 1, end)
                     if re.match(rf"\s*{re.escape(name)}\s*=", lines[i])), None)
        if mine is None:
            lines.insert(header + 1, line)
        else:
            lines[mine] = line
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg.load(str(path))  # a line that breaks the file would say so here, not at start
    return path


class _PullProgress:
    """A bar per file on a terminal; a line per finished file otherwise."""

    def __enter__(self) -> _PullProgress:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TransferSpeedColumn,
        )
        self.tty = sys.stdout.isatty()
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                            TransferSpeedColumn(), disable=not self.tty)
        self.tasks: dict[str, object] = {}
        self.bar.__enter__()
        return self

    def update(self, file: str, done: int, total: int | None) -> None:
        if file not in self.tasks:
            self.tasks[file] = self.bar.add_task(file, total=total)
        self.bar.update(self.tasks[file], completed=done, total=total)  # type: ignore[arg-type]
        if not self.tty and total is not None and done >= total:
            print(f"  {file}: {done / 2**20:.1f} MB", flush=True)

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)


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


def cmd_template_import(args) -> int:
    """NAME.json (the bindings, guessed) and NAME.workflow.json (the workflow, byte for
    byte) in the templates folder; then loaded as any template is, to prove it."""
    import json
    import re

    from executor.comfy_template import WorkflowError, import_workflow
    from executor.workflow import TemplateError, load_template
    config = _load(args)
    name = args.name
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", name):
        raise SystemExit(f"genbot: {name!r} cannot be a template name (letters, digits, _ "
                         "and -, up to 64)")
    source = Path(args.workflow)
    try:
        raw = source.read_bytes()
        data = json.loads(raw.decode("utf-8-sig"))
    except OSError as e:
        raise SystemExit(f"genbot: cannot read {source}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SystemExit(f"genbot: {source} is not JSON: {e}") from None
    try:
        template, said = import_workflow(data, str(source), name)
    except WorkflowError as e:
        raise SystemExit(f"genbot: {e}") from None
    folder = config.templates_dir
    target, workflow = folder / f"{name}.json", folder / template["workflow"]
    if (target.exists() or workflow.exists()) and not args.force:
        raise SystemExit(f"genbot: {target} or {workflow} exists already (--force replaces "
                         "them)")
    folder.mkdir(parents=True, exist_ok=True)
    workflow.write_bytes(raw)
    target.write_text(json.dumps(template, indent=2, ensure_ascii=False) + "\n",
                      encoding="utf-8")
    try:
        load_template(target)
    except TemplateError as e:  # a guess the checks refuse: say so, keep nothing half-made
        target.unlink()
        workflow.unlink()
        raise SystemExit(f"genbot: the imported template does not load: {e}") from None
    print(f"wrote {target} and {workflow} (the workflow, unchanged)")
    print(f"columns of {name}:" if said else f"{name} has no columns: bind some in {target}")
    for line in said:
        print(f"  {line}")
    print(f"next: genbot template example {name}; then point [comfyui] servers at your "
          "ComfyUI servers")
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
    which_worker = worker.add_mutually_exclusive_group()
    which_worker.add_argument("--device", help="override [executor] device, e.g. cuda:1")
    which_worker.add_argument("--comfyui", metavar="URL",
                              help="drive this ComfyUI server instead (http://host:8188)")
    worker.set_defaults(func=cmd_worker)
    models = sub.add_parser("models", parents=[common], help="the model registry")
    models.set_defaults(func=cmd_models)
    models_sub = models.add_subparsers(dest="models", metavar="ACTION")
    pull = models_sub.add_parser(
        "pull", parents=[common], help="download a model from the Hugging Face Hub (or "
        "HF_ENDPOINT, a mirror) or a URL; resumes an interrupted pull")
    pull.add_argument("source", metavar="REPO_ID|URL")
    pull.add_argument("--revision", help="a branch, tag or commit (default: main)")
    pull.add_argument("--file", help="one file of the repo (a single-file checkpoint)")
    pull.add_argument("--variant", help="weights variant, e.g. fp16 (half the download)")
    pull.add_argument("--name", help="the [models] name (default: from the repo or file)")
    pull.add_argument("--sha256", help="for a URL: the file's expected sha256")
    pull.add_argument("--dir", help="where to put it (default: the models folder / NAME)")
    pull.add_argument("--write", action="store_true", help="add the [models] line to the "
                      "config file")
    pull.set_defaults(func=cmd_models_pull)
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
    imp = template.add_parser("import", parents=[common],
                              help="a template from a ComfyUI API-format workflow")
    imp.add_argument("workflow", metavar="WORKFLOW_API.json")
    imp.add_argument("--name", required=True, help="the template's name (its file name)")
    imp.add_argument("--force", action="store_true", help="replace a template of that name")
    imp.set_defaults(func=cmd_template_import)
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
