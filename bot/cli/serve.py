"""`genbot serve`: the service (chat bots, API, dashboard, and an executor unless told not)."""

from __future__ import annotations

import argparse
import asyncio

from bot.cli.shared import load_config
from storage.config import ServiceConfig


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    serve = subparsers.add_parser("serve", parents=[common], help="start the service")
    serve.add_argument("--no-executor", action="store_true",
                       help="run the bots and API only; executors run elsewhere (genbot worker)")
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from bot.service import serve
    from storage.logs import setup_logging
    config = load_config(args)
    setup_logging(config[ServiceConfig].log_level, config[ServiceConfig].log_format)
    asyncio.run(serve(config, executor=not args.no_executor))
    return 0
