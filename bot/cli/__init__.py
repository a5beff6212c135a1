"""The `genbot` command line: bot.cli.genbot builds it from one module per command (serve,
run, submit, job, chat, config, db, queue, templates, validate, webhooks, prune, docs) plus
the commands other parts add by entry point (bot.cli.plugins: the executor's worker and models).

`main` is the console script. It takes SIGTERM before importing anything heavy: from
then on a SIGTERM raises `Stopped`, so a `systemctl stop` or a rollout that comes
while genbot is still importing or reading its config ends it as a stop, not as a
kill. Commands that run long (serve, run) take the signal over with their own graceful
handling once their event loop runs.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

__all__ = ["Stopped", "main"]


class Stopped(BaseException):
    """SIGTERM arrived before the command took the signal over (a BaseException, like
    KeyboardInterrupt: no `except Exception` on the way may swallow it)."""


def _stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped


def main(argv: list[str] | None = None) -> int:
    """`genbot …`. Stopped by SIGTERM before `serve` ran anything, it exits 0 (a stop
    asked for and done: systemd counts the unit stopped, not failed); any other command
    stopped so exits 143 (128 + SIGTERM, as a shell reports a process it ended)."""
    here = threading.current_thread() is threading.main_thread()  # (tests call it in threads)
    previous = signal.signal(signal.SIGTERM, _stopped) if here else None
    args = sys.argv[1:] if argv is None else argv
    try:
        from bot.cli.genbot import main as genbot
        return genbot(args)
    except Stopped:
        serving = _command(args) == "serve"
        print(f"genbot: stopped by SIGTERM{' while starting' if serving else ''}",
              file=sys.stderr)
        return 0 if serving else 128 + signal.SIGTERM
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
