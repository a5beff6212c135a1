"""`genbot db upgrade`: the schema migrations, applied on demand (serve applies them too)."""

from __future__ import annotations

import argparse
import asyncio

from bot.cli.shared import load_config
from storage.config import DatabaseConfig
from storage.db import Database


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    db = subparsers.add_parser("db", help="database schema").add_subparsers(
        dest="db", required=True, metavar="ACTION")
    db.add_parser("upgrade", parents=[common],
                  help="apply pending migrations").set_defaults(func=cmd_db_upgrade)


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    config = load_config(args)

    async def run() -> list[str]:
        db = Database(config.database_url, pool_size=config[DatabaseConfig].pool_size)
        await db.open(migrate=False)
        try:
            return await db.upgrade()
        finally:
            await db.close()

    applied = asyncio.run(run())
    if applied:
        print("applied: " + ", ".join(applied))
    else:
        print("database schema is up to date")
    return 0
