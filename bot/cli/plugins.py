"""Commands that other parts of genbot add to the `genbot` command, found by entry point.

The bot must not import the executor (tests/test_layout.py), yet `genbot worker` and
`genbot models` belong on the same command line as `genbot serve`. So the executor
offers them itself: a distribution names an object in the entry-point group
`genbot.commands` (pyproject.toml, [project.entry-points."genbot.commands"]) and
`genbot` loads every one it finds. The object (a module will do) has

    register(subparsers, common) -> None
        adds its commands: subparsers.add_parser(NAME, parents=[common], help=...),
        then set_defaults(func=...), where func(args) returns the exit code. `common`
        carries --config; args.config is the path given, or None. The errors genbot
        maps to exit codes (storage.config.ConfigError: 2, DatabaseError: 1, …) may
        simply be raised.

and may have

    checks(config) -> list[str]
        the problems `genbot check-config` reports, a line each ("[models] sdxl: …"),
        none when all is well: what that part knows about the config and the bot does
        not (the executor: whether each [models] path is a model it can run).

One that cannot be loaded or registered is named on stderr and left out: the rest of
the command line works without it (a machine with the bot alone).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.config import Config

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

GROUP = "genbot.commands"


@dataclass(frozen=True)
class Plugin:
    name: str  # the entry point's name, e.g. "executor"
    source: str  # what it names, e.g. "executor.cli": said when it fails
    register: Callable[[Subparsers, argparse.ArgumentParser], None]
    checks: Callable[[Config], list[str]] | None


@cache
def installed() -> tuple[Plugin, ...]:
    """Every loadable entry point of the group, by name (loaded once per process: the
    parser and check-config both ask)."""
    found = []
    for point in sorted(entry_points(group=GROUP), key=lambda p: p.name):
        try:
            obj = point.load()
            found.append(Plugin(point.name, point.value, obj.register,
                                getattr(obj, "checks", None)))
        except Exception as e:  # noqa: BLE001 - a broken plugin must not take `genbot serve` down with it
            _left_out(point.name, point.value, e)
    return tuple(found)


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    """Let each plugin add its commands beside the bot's own."""
    for plugin in installed():
        try:
            plugin.register(subparsers, common)
        except Exception as e:  # noqa: BLE001 - e.g. a command name the bot has already
            _left_out(plugin.name, plugin.source, e)


def checks(config: Config) -> list[str]:
    """The problems the plugins find in the config, in plugin order."""
    return [problem for plugin in installed() if plugin.checks
            for problem in plugin.checks(config)]


def _left_out(name: str, source: str, error: Exception) -> None:
    print(f"genbot: leaving out the commands of {name} ({source}): "
          f"{type(error).__name__}: {error}", file=sys.stderr)
