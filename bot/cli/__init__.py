"""The `genbot` command line: bot.cli.genbot builds it from one module per command (serve,
run, submit, job, chat, config, db, queue, templates, validate, webhooks, prune, docs) plus
the commands other parts add by entry point (bot.cli.plugins: the executor's worker and models).

`main` is the console script. It takes SIGTERM before importing anything heavy, so a
`systemctl stop` or a rollout that comes while genbot is still importing or reading its
config ends it as a stop (one line, exit 0 for serve), not as a kill. Commands that run
long (serve, run, worker) take the signal over with their own graceful handling once
their event loop runs.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from types import FrameType

__all__ = ["main"]


def _stop_now(serving: bool, signum: int, frame: FrameType | None) -> None:
    """SIGTERM before the command took the signal over: nothing it started needs a
    graceful stop yet, so the process ends here, at once. (An exception raised from here,
    as it was, surfaced wherever the main thread stood: inside C code that clears errors
    it was swallowed — the stop lost — and could leave a half-made object behind: the
    likeliest reading of a service that, stopped while importing, went on starting and
    crashed in msgspec.)"""
    os.write(2, f"genbot: stopped by SIGTERM{' while starting' if serving else ''}\n".encode())
    # exit 0 for serve: a stop asked for and done (systemd counts the unit stopped, not
    # failed); any other command 143 (128 + SIGTERM, as a shell reports a process it ended)
    os._exit(0 if serving else 128 + signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    """`genbot …`."""
    here = threading.current_thread() is threading.main_thread()  # (tests call it in threads)
    args = sys.argv[1:] if argv is None else argv
    previous = signal.signal(signal.SIGTERM, functools.partial(
        _stop_now, _command(args) == "serve")) if here else None
    try:
        from bot.cli.genbot import main as genbot
        return genbot(args)
    finally:
        if here:
            signal.signal(signal.SIGTERM, previous)


def _command(args: list[str]) -> str | None:
    """The command word of `genbot [--config PATH] COMMAND …`, before argparse has run."""
    words = iter(args)
    for word in words:
        if word == "--config":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None
