"""The `genbot` command: the top-level parser, the dispatch, and the exit codes.

  genbot serve [--host H --port P]  start the service (embedded defaults need no config)
  genbot check-config               validate the configuration and say where it came from
  genbot db upgrade                 apply pending schema migrations
  genbot queue status|pause|resume|cancel
  genbot templates                  the templates, and any that are broken (= template list)
  genbot template show|example|import NAME
  genbot validate TEMPLATE SHEET    the bot's report on a sheet, without queueing anything
  genbot run TEMPLATE SHEET         one-shot: queue the sheet, run it here, show progress
  genbot chat [--as USER]           the chat commands in a terminal (no Slack/DingTalk needed)
  genbot submit TEMPLATE SHEET      send a sheet to a running genbot (REST API); --wait follows it
  genbot job again|vary|upscale|edit|keep|reject|unkeep|lineage ID
                                    act on a finished image of a running genbot (REST API)
  genbot webhooks list|deliveries|test|redeliver|enable|secret
                                    webhook endpoints and their deliveries
  genbot prune --finished-before 30d [--archive FILE.jsonl]
                                    forget batches finished long ago (jobs, events, outputs)
  genbot worker [--comfyui URL] [--exit-when-idle S]
                                    run one executor (one per GPU, or per ComfyUI server)
  genbot models [demo|pull]         the model registry; build the demo models; download one
  genbot docs [TOPIC]               the documentation that ships with genbot (no TOPIC: list)

Each command module registers its own subcommands (`register(subparsers, common)`);
`worker` and `models` come from the executor through the `genbot.commands` entry
points (bot.cli.plugins), because the bot never imports the executor. What goes wrong
in any of them ends here as one line on stderr and an exit code, not a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from bot.cli import (
    channels,
    chat,
    config,
    db,
    docs,
    job,
    plugins,
    prune,
    queue,
    run,
    serve,
    submit,
    templates,
    validate,
    webhooks,
)
from bot.errors import Coded
from storage import config as cfg
from storage.db import DatabaseError

COMMANDS = (serve, run, submit, job, chat, config, db, queue, templates,  # --help order
            channels, validate, webhooks, prune, docs)


def build_parser() -> argparse.ArgumentParser:
    # --config goes before or after the command (genbot --config c.toml serve, or genbot
    # serve --config c.toml): on the top parser and, through `common`, on each command.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS,
                        help="config file (default: $GENBOT_CONFIG, else ./config.toml, "
                             "else built-in defaults)")
    parser = argparse.ArgumentParser(prog="genbot", parents=[common],
                                     description="Chat-driven batch image generation.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(subparsers, common)
    plugins.register(subparsers, common)
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
    except Coded as e:  # the application layer said no: say why, as chat would, in --lang
        print(f"genbot: {e.render(getattr(args, 'lang', None) or 'en')}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the output went into `head` or similar, which has stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
