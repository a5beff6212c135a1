"""What several `genbot` commands share: the config they load, who runs them, the choices.

Kept apart so that each command module owns its parser and logic, and none of them
reaches into another's for a helper.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import socket
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from bot import i18n
from bot.app.permissions import Who
from storage import config as cfg
from storage.queue import Priority, Queue, open_queue
from storage.records import WorkerInfo
from storage.workers import Workers

if TYPE_CHECKING:
    from bot.app.application import App

PRIORITIES = [p.name.lower() for p in Priority]
PRIORITY_HELP = ("as far as your role lets you ([chat] submitter_max_priority, "
                 "admin_max_priority; /grant --priority raises one person's); default: normal")


def load_config(args: argparse.Namespace) -> cfg.Config:
    """The config named by --config (None: $GENBOT_CONFIG, ./config.toml, defaults), its
    languages offered from now on; a --lang is read as one of them (its code)."""
    config = cfg.load(args.config)
    offered = i18n.use(config)
    if getattr(args, "lang", None) is not None:
        language = offered.find(args.lang)
        if language is None:
            raise cfg.ConfigError(f"--lang {args.lang}: not a language offered here "
                                  f"({', '.join(offered.codes)}; [i18n] languages)")
        args.lang = language.code
    return config


def add_lang_option(parser: argparse.ArgumentParser) -> None:
    """--lang: the language of what the command writes (any of [i18n] languages)."""
    parser.add_argument("--lang", default=i18n.SOURCE, metavar="LANG",
                        help="the language of its words: en, zh, or another of [i18n] "
                             "languages (default: en)")


def me() -> Who:
    """Whoever runs the command line: an admin of this machine's genbot."""
    return Who("cli", getpass.getuser())


@contextlib.asynccontextmanager
async def local_app(config: cfg.Config) -> AsyncIterator[tuple[App, Who]]:
    """The application layer over this machine's queue, and `me()` as its admin: a
    command that acts locally asks as a person in chat would."""
    from bot.app.application import App
    from storage.files import open_store
    queue = await open_queue(config)
    try:
        who = me()
        yield App(config, queue, open_store(config), {}, local_admins=(who.id,)), who
    finally:
        await queue.close()


def add_sweep_options(parser: argparse.ArgumentParser) -> None:
    """--vary, --seeds, --grid, --compare, --channels and --layout, as genbot run and genbot submit
    take them (templates.sweeps, templates.channels)."""
    parser.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2",
                        help="sweep a value: KEY=V1,V2,… or KEY=START..STOP:STEP; again for "
                             "another axis (every row runs with every combination)")
    parser.add_argument("--seeds", type=int, default=1, metavar="N",
                        help="a sweep's seeds per row, shared across its combinations")
    parser.add_argument("--grid", default="", metavar="KEY1,KEY2",
                        help="a sweep's grid axes, across then down (default: the first two)")
    parser.add_argument("--compare", action="append", default=[], metavar="NAME@N",
                        help="A/B: run each row through this template version too, with the "
                             "same seeds (again for more)")
    parser.add_argument("--channels", default="", metavar="A,B",
                        help="sales channels (taobao,douyin,amazon …; genbot channels lists "
                             "them): each row's image made into every file they take")
    parser.add_argument("--layout", default="", metavar="NAME",
                        help="a layout drawn on the channels' files (launch, or the team's in "
                             "the assets folder's layouts/; genbot channels lists them): "
                             "headline, price, badge, logo")


GENBOT_ENGINE = ""  # live_executors' key for genbot's own engine (a ComfyUI one's: its server)


async def live_executors(queue: Queue) -> dict[str, list[str]]:
    """Who already runs jobs from this queue's database, by what they serve — a ComfyUI
    server's address, or GENBOT_ENGINE for genbot's own engine — and their names: the
    registry the dashboard's Executors page reads (alive until a lease of silence).
    `genbot run` and `genbot chat` start an executor only where none serves yet: a second
    copy of the models beside a running service's on one GPU runs it out of memory."""
    serving: dict[str, list[str]] = {}
    for worker in await Workers.of(queue).all():
        if worker.live and not _gone(worker):
            device = worker.device.rstrip("/")
            serving.setdefault(device if device.startswith(("http://", "https://"))
                               else GENBOT_ENGINE, []).append(worker.id)
    return serving


def _gone(worker: WorkerInfo) -> bool:
    """An executor of this host whose process is no more (killed before it could say so;
    the registry would call it alive until its lease runs out)."""
    if worker.host != socket.gethostname():
        return False
    try:
        os.kill(worker.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: there
        return False
    return False


def add_executor_option(parser: argparse._ActionsContainer) -> None:
    """--own-executor: start this command's executor even beside a running one."""
    parser.add_argument("--own-executor", action="store_true",
                        help="start an executor for this command even when one already runs "
                             "on this database (default: hand the jobs to that one)")
