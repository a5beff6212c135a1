"""The executor's commands on the `genbot` command line: `worker` and `models [demo|pull]`.

The bot never imports the executor, so the executor offers these itself: pyproject.toml
names this module in the entry-point group `genbot.commands`, and `genbot` calls
`register(subparsers, common)` to add them, and `checks(config)` from check-config
(the protocol: bot.cli.plugins). Importing this module loads no torch, no diffusers
and no hub client: `genbot --help` and `genbot serve` import it too. What the commands
need is imported inside them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from executor.settings import add_lifetime_options
from storage import config as cfg
from templates.settings import models, models_dir

if TYPE_CHECKING:
    from rich.progress import TaskID


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    worker = subparsers.add_parser("worker", parents=[common],
                                   help="run one executor (one per GPU)")
    which_worker = worker.add_mutually_exclusive_group()
    which_worker.add_argument("--device", help="override [executor] device, e.g. cuda:1")
    which_worker.add_argument("--comfyui", metavar="URL",
                              help="drive this ComfyUI server instead (http://host:8188)")
    add_lifetime_options(worker)
    worker.set_defaults(func=cmd_worker)
    models = subparsers.add_parser("models", parents=[common], help="the model registry")
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
    pull.add_argument("--config-from", dest="family_folder", metavar="NAME|FOLDER",
                      help="for a transformer on its own (a FLUX or Qwen-Image GGUF): the "
                      "[models] name or diffusers folder its text encoders, VAE and "
                      "scheduler come from (default: a configured folder of its family)")
    pull.set_defaults(func=cmd_models_pull)
    demo = models_sub.add_parser("demo", parents=[common],
                                 help="build the tiny random-weight demo models (no download)")
    demo.add_argument("--force", action="store_true", help="rebuild those already built")
    demo.set_defaults(func=cmd_models_demo)


def checks(config: cfg.Config) -> list[str]:
    """For `genbot check-config`: every [models] entry that is not a model genbot can
    run; a demo model is not a problem (genbot builds it when first needed)."""
    from executor.models.registry import ModelError, Registry
    problems = []
    registry = Registry(config)
    for name in registry.names:
        if models(config)[name].path.startswith("demo:"):
            continue
        try:
            registry.get(name)
        except ModelError as e:
            problems.append(f"[models] {name}: {e}")
    return problems


def _load(args: argparse.Namespace) -> cfg.Config:
    return cfg.load(args.config)


def cmd_worker(args: argparse.Namespace) -> int:
    from executor.worker import main as worker_main
    argv = ["--config", args.config] if args.config else []
    for flag, value in (("--comfyui", args.comfyui), ("--device", args.device),
                        ("--exit-when-idle", args.exit_when_idle),
                        ("--drain-seconds", args.drain_seconds)):
        if value is not None:
            argv += [flag, str(value)]
    return worker_main(argv)


def cmd_models(args: argparse.Namespace) -> int:
    from executor.models.registry import ModelError, Registry
    config = _load(args)
    registry = Registry(config)
    unbuilt = set(registry.needs_demo())
    for name in registry.names:
        entry = models(config)[name]
        if name in unbuilt:  # not a problem: the executor builds it when it first starts
            what = "not built yet (the executor builds it on first start; or `genbot models demo`)"
        else:
            try:
                info = registry.get(name)
                what = f"{info.kind}, {info.family or 'any family'}"
            except ModelError as e:
                what = f"NOT USABLE: {e}"
        if entry.path.startswith("demo:"):
            what += " — demo model: images are noise (real ones: genbot docs models)"
        print(f"{name:<16} {entry.path:<32} {what}")
    return 0


def cmd_models_demo(args: argparse.Namespace) -> int:
    from executor.models import demo
    from executor.worker import quiet_libraries
    quiet_libraries()
    config = _load(args)
    folder = models_dir(config) / "demo"
    started = time.monotonic()
    built = demo.build(folder, force=args.force)
    print(f"demo models in {folder}: " + (f"built {', '.join(built)} in "
                                          f"{time.monotonic() - started:.1f} s" if built
                                          else "all present (--force rebuilds)"))
    print("They have random weights: their images are noise. Point [models] at real "
          "checkpoints for real images.")
    return 0


def cmd_models_pull(args: argparse.Namespace) -> int:
    """A model from the hub (or a mirror, HF_ENDPOINT) or a URL into the models folder,
    resumable; ends with the [models] line (added with --write)."""
    import re

    from executor.models import pull
    config = _load(args)
    source = args.source
    name = args.name or pull.model_name(args.file or source)
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise SystemExit(f"genbot: --name {name!r}: a model name is letters, digits, _ and -")
    folder = Path(args.dir).resolve() if args.dir else models_dir(config) / name
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
    if target.is_file():
        try:
            line = _transformer_line(config, name, target, args.family_folder) or line
        except ValueError as e:
            print(f"genbot: {e}", file=sys.stderr)
            return 1
    if args.write:
        where = _write_model_line(config, name, line)
        print(f"added to [models] in {where}: {line}")
    else:
        print(f"done. Add this line under [models] in your config (or pull with --write):\n"
              f"  {line}")
    return 0


def _transformer_line(config: cfg.Config, name: str, target: Path,
                      given: str | None) -> str | None:
    """The [models] line of a transformer kept on its own, which runs only with `config`, a
    diffusers folder of its family (the text encoders, VAE, scheduler): the one `given`
    (a [models] name or a folder), else the first configured folder of its family; with
    none, the plain line and what to add. None: not a transformer file."""
    from executor.models import transformer_file
    from templates.settings import family_of, model_path, models
    try:
        kind = transformer_file.kind_of(transformer_file.shapes(target))
    except ValueError:
        return None  # not one genbot reads as a transformer: the registry says what it is
    if not isinstance(kind, transformer_file.Transformer):
        return None
    entries = models(config)
    folder: Path | None
    if given:
        folder = model_path(config, entries[given]) if given in entries else Path(given)
        if not (folder / "model_index.json").is_file():
            raise ValueError(f"--config-from {given}: not a diffusers folder (no "
                             "model_index.json)")
    else:
        folder = next((model_path(config, e) for n, e in entries.items()
                       if not e.path.startswith("demo:") and family_of(config, n) in kind.families
                       and model_path(config, e).is_dir()), None)
        if folder is None:
            print(f"note: {target.name} is a {kind.name} transformer on its own: it runs with a "
                  f"diffusers folder of {kind.name} for its text encoders, VAE and scheduler; "
                  f"pull one, then add config = \"<its folder>\" to the line (or pull this "
                  "again with --config-from NAME)")
            return None
    return (f"{name} = {{ path = {json_string(str(target))}, "
            f"config = {json_string(str(folder))} }}")


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
        self.tasks: dict[str, TaskID] = {}
        self.bar.__enter__()
        return self

    def update(self, file: str, done: int, total: int | None) -> None:
        if file not in self.tasks:
            self.tasks[file] = self.bar.add_task(file, total=total)
        self.bar.update(self.tasks[file], completed=done, total=total)
        if not self.tty and total is not None and done >= total:
            print(f"  {file}: {done / 2**20:.1f} MB", flush=True)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.bar.__exit__(kind, error, traceback)
