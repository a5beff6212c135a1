"""The `genbot` command line: bot.cli.genbot builds it from one module per command (serve,
run, submit, job, chat, config, db, queue, templates, validate, webhooks, prune, docs) plus
the commands other parts add by entry point (bot.cli.plugins: the executor's worker and models)."""

from bot.cli.genbot import main

__all__ = ["main"]
