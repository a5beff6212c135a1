"""`genbot templates` (or `template list`), `genbot template show|example|import`.

What templates there are, what each one's sheet takes, a sheet to start from, and a
template made from a ComfyUI workflow.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from bot.cli.shared import add_lang_option, load_config
from bot.settings import assets_dir
from storage import config as cfg
from templates.settings import ComfyUIConfig, templates_dir

if TYPE_CHECKING:
    from bot.app.application import App
    from templates.graph import Template
    from templates.loader import TemplateError


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    subparsers.add_parser("templates", parents=[common],
                          help="list the templates").set_defaults(func=cmd_templates)
    template = subparsers.add_parser("template", help="one template").add_subparsers(
        dest="template", required=True, metavar="ACTION")
    template.add_parser("list", parents=[common],
                        help="list the templates (as genbot templates)").set_defaults(
        func=cmd_templates)
    show = template.add_parser("show", parents=[common], help="its parameters")
    show.add_argument("name")
    show.set_defaults(func=cmd_template_show)
    example = template.add_parser("example", parents=[common],
                                  help="write an example sheet (.xlsx)")
    example.add_argument("name")
    example.add_argument("-o", "--output", metavar="FILE", help="default: NAME.xlsx")
    add_lang_option(example)
    example.set_defaults(func=cmd_template_example)
    imp = template.add_parser("import", parents=[common],
                              help="a template from a ComfyUI workflow: API or UI format, or "
                                   "a PNG/WebP ComfyUI saved")
    imp.add_argument("workflow", metavar="WORKFLOW.json|IMAGE.png")
    imp.add_argument("--name", required=True, help="the template's name (its file name)")
    imp.add_argument("--force", action="store_true", help="replace a template of that name")
    imp.add_argument("--server", metavar="URL",
                     help="a ComfyUI server whose /object_info converts a UI-format workflow "
                          "and gives the columns' limits and choices (default: the first of "
                          "[comfyui] servers, for a UI-format one)")
    imp.set_defaults(func=cmd_template_import)
    history = template.add_parser("history", parents=[common],
                                  help="its versions (each content it had), and their labels")
    history.add_argument("name")
    history.set_defaults(func=cmd_template_history)
    diff = template.add_parser("diff", parents=[common],
                               help="what changed between two versions")
    diff.add_argument("name")
    diff.add_argument("a", type=int, metavar="A")
    diff.add_argument("b", type=int, metavar="B")
    diff.set_defaults(func=cmd_template_diff)
    promote = template.add_parser(
        "promote", parents=[common],
        help="point a label at a version (production: what the plain name runs)")
    promote.add_argument("spec", metavar="NAME@N")
    promote.add_argument("--label", default="production")
    promote.set_defaults(func=cmd_template_promote)


def load_all(config: cfg.Config) -> tuple[dict[str, Template], list[TemplateError]]:
    """The templates of the config's folder, and the files that are broken."""
    from templates.settings import load_configured
    return load_configured(config)


def find_template(config: cfg.Config, name: str) -> Template:
    """The template `name`; else exit saying it is broken, or what it may have meant."""
    templates, errors = load_all(config)
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


def cmd_templates(args: argparse.Namespace) -> int:
    config = load_config(args)
    templates, errors = load_all(config)
    for t in templates.values():
        print(f"{t.name:16} {len(t.params):2} params  {t.description}")
    for e in errors:
        print(f"BROKEN {e}", file=sys.stderr)
    if not templates and not errors:
        print(f"no templates in {templates_dir(config)}")
    return 1 if errors else 0


def cmd_template_show(args: argparse.Namespace) -> int:
    t = find_template(load_config(args), args.name)
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


def cmd_template_example(args: argparse.Namespace) -> int:
    """The sheet, and beside it the pictures its rows name, so it runs as it is."""
    from bot.intake.examples import example_pictures
    from bot.intake.writer import write_example
    config = load_config(args)
    t = find_template(config, args.name)
    out = Path(args.output or f"{t.name}.xlsx")
    try:
        out.write_bytes(write_example(t, args.lang))
        wrote, kept = [], []
        for name, data in asyncio.run(example_pictures(t, assets_dir(config))).items():
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


def cmd_template_import(args: argparse.Namespace) -> int:
    """NAME.json (the bindings, guessed) and NAME.workflow.json (the workflow, byte for
    byte) in the templates folder, loaded as any template is before they replace anything
    (templates.install): a refusal is one line, and the template it would replace stays."""
    import re

    from templates.comfy import WorkflowError, import_workflow
    from templates.comfy_ui import read_shared
    from templates.install import InstallError, install_template
    config = load_config(args)
    name = args.name
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", name):
        raise SystemExit(f"genbot: {name!r} cannot be a template name (letters, digits, _ "
                         "and -, up to 64)")
    source = Path(args.workflow)
    url = object_info_url(args.server) if args.server else None
    asked: dict[str, dict | None] = {}

    def info() -> dict | None:
        """The server's /object_info, asked once: --server, else (for a UI-format
        workflow, which cannot be read without one) the first of [comfyui] servers."""
        if "info" not in asked:
            servers = config[ComfyUIConfig].servers
            where = url or (object_info_url(servers[0]) if servers else None)
            asked["info"] = object_info(where) if where else None
        return asked["info"]
    try:
        raw, prompt, how = read_shared(source, info)
        template, said = import_workflow(prompt, str(source), name,
                                         info() if url else asked.get("info"))
    except WorkflowError as e:
        raise SystemExit(f"genbot: {e}") from None
    folder = templates_dir(config)
    target, workflow = folder / f"{name}.json", folder / template["workflow"]
    there = [p.name for p in (target, workflow) if p.exists()]
    if there and not args.force:
        raise SystemExit(f"genbot: {target} or {workflow} exists already (--force replaces "
                         "them)")
    text = json.dumps(template, indent=2, ensure_ascii=False) + "\n"
    try:
        install_template(folder, name, {workflow.name: raw, target.name: text.encode()})
    except InstallError as e:
        kept = f"; kept {' and '.join(there)} as they were" if there else ""
        raise SystemExit(f"genbot: {e}{kept}") from None
    print(f"wrote {target} and {workflow} (" + ("the workflow, unchanged)" if how ==
                                                 "the API format" else f"from {how})"))

    # Imported again: a new version, kept where all see it.
    async def recorded(app: App, me: str) -> int:
        return app.templates[name].number
    print(f"{name}@{asyncio.run(_versions(config, recorded))}: its version "
          f"(genbot template history {name})")
    print(f"columns of {name}" + (f", with the limits {args.server} gives:" if url else ":"))
    for line in said:
        print(f"  {line}")
    print(f"next: genbot template example {name}; then point [comfyui] servers at your "
          "ComfyUI servers")
    return 0


def object_info_url(server: str) -> str:
    """`server`'s /object_info, or exit saying that `server` is no server's URL."""
    from yarl import URL

    from storage.names import shown
    try:
        url = URL(server.rstrip("/") + "/object_info")
    except ValueError:
        url = URL()
    if url.scheme not in ("http", "https") or not url.host:
        raise SystemExit(f'genbot: --server "{shown(server)}" is not a ComfyUI server\'s URL '
                         "(such as http://gpu-a:8188)")
    return str(url)


def object_info(url: str) -> dict:
    """GET /object_info (bot.app.importer.object_info), or exit saying in one line why it
    cannot be had."""
    from bot.app.importer import object_info as ask
    from bot.errors import Invalid
    server = url.removesuffix("/object_info")
    try:
        return asyncio.run(ask(server))
    except Invalid as e:
        raise SystemExit(f"genbot: cannot import with the limits of {server}: "
                         f"{e.details['why']}") from None


# --- versions (storage.versions): read and moved in the database every host shares ---------

T = TypeVar("T")


async def _versions(config: cfg.Config, work: Callable[[App, str], Awaitable[T]]) -> T:
    """Run `work(app)` on an App whose loaded templates are recorded as versions first
    (what the files say now is a version too)."""
    import getpass
    import socket

    from bot.app.application import App
    from storage.files import open_store
    from storage.queue import open_queue
    queue = await open_queue(config)
    try:
        templates, _ = load_all(config)
        me = f"cli:{getpass.getuser()}"
        app = App(config, queue, open_store(config), templates, local_admins=(me,))
        await app.record_versions(f"{me} on {socket.gethostname()}")
        return await work(app, me)
    finally:
        await queue.close()


def cmd_template_history(args: argparse.Namespace) -> int:
    import datetime as dt
    config = load_config(args)
    find_template(config, args.name)

    async def work(app: App, me: str) -> int:
        labels: dict[int, list[str]] = {}
        for label in await app.versions.labels(args.name):
            labels.setdefault(label.number, []).append(label.label)
        current = app.templates[args.name].number
        for v in await app.versions.history(args.name):
            when = dt.datetime.fromtimestamp(v.created_at, dt.UTC).strftime("%Y-%m-%d %H:%M")
            marks = [*labels.get(v.number, []), *(["the file now"] if v.number == current
                                                   else [])]
            print(f"{args.name}@{v.number}  {v.hash}  {when} UTC  {v.source}"
                  + (f"  [{', '.join(marks)}]" if marks else ""))
        return 0
    return asyncio.run(_versions(config, work))


def cmd_template_diff(args: argparse.Namespace) -> int:
    from templates.history import diff
    config = load_config(args)
    find_template(config, args.name)

    async def work(app: App, me: str) -> int:
        found = [await app.versions.get(args.name, n) for n in (args.a, args.b)]
        for number, version in zip((args.a, args.b), found, strict=True):
            if version is None:
                print(f"genbot: {args.name} has no version {number} "
                      f"(genbot template history {args.name})", file=sys.stderr)
                return 2
        assert found[0] is not None and found[1] is not None
        lines = diff(found[0].content, found[1].content)
        print("\n".join(lines) if lines else f"{args.name}@{args.a} and @{args.b} are the same")
        return 0
    return asyncio.run(_versions(config, work))


def cmd_template_promote(args: argparse.Namespace) -> int:
    config = load_config(args)
    name, _, number = args.spec.partition("@")
    if not number.isdigit():
        print(f"genbot: expected NAME@N (a version number), not {args.spec!r}", file=sys.stderr)
        return 2
    find_template(config, name)

    async def work(app: App, me: str) -> int:
        if await app.versions.get(name, int(number)) is None:
            print(f"genbot: {name} has no version {number} (genbot template history {name})",
                  file=sys.stderr)
            return 2
        await app.versions.promote(name, int(number), args.label, me)
        print(f"{name}@{number} is now {args.label}" + (
            f": /gen {name} runs it" if args.label == "production" else ""))
        return 0
    return asyncio.run(_versions(config, work))
