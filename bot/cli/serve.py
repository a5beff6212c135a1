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
    serve.add_argument("--host", metavar="ADDRESS",
                       help="listen on this address instead of [service] host "
                            "(0.0.0.0: every interface)")
    serve.add_argument("--port", type=port, metavar="PORT",
                       help="listen on this port instead of [service] port (0: a free one)")
    serve.set_defaults(func=cmd_serve)


def port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: the system picks a free one)."""
    try:
        number = int(text)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (a whole number from 0 to "
                                         "65535)")
    return number


def cmd_serve(args: argparse.Namespace) -> int:
    from bot.service import serve
    from storage.logs import setup_logging
    config = load_config(args)
    bind = {key: value for key, value in (("host", args.host), ("port", args.port))
            if value is not None}
    config = config.replaced(ServiceConfig, **bind) if bind else config
    setup_logging(config[ServiceConfig].log_level, config[ServiceConfig].log_format)
    asyncio.run(serve(config, executor=not args.no_executor))
    return 0
