"""`genbot check-config`: the keys, and what they point at.

A model path that is not there fails here, not at the first job that needs it. The bot
checks what it knows; the checks of the parts it does not import (the executor's
[models]) come from their `genbot.commands` entry points (bot.cli.plugins).
"""

from __future__ import annotations

import argparse
import os
import sys

from bot.cli import plugins
from bot.cli.shared import load_config
from storage import config as cfg
from storage.config import ServiceConfig
from storage.db import Database


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    subparsers.add_parser("check-config", parents=[common],
                          help="validate the configuration").set_defaults(func=cmd_check_config)


def cmd_check_config(args: argparse.Namespace) -> int:
    config = load_config(args)
    problems = plugins.checks(config)
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
    print(f"  listen:   http://{config[ServiceConfig].host}:{config[ServiceConfig].port}")
    return 0
