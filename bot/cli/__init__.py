"""The `genbot` command line (genbot), with its one-shot run and its API client (submit)."""

from bot.cli.genbot import main

__all__ = ["main"]
