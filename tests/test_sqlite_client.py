"""The SQLite client: processes that open one new database file at the same moment."""

from __future__ import annotations

import asyncio

from storage.db import tortoise_config
from storage.sqlite_client import ImmediateSqliteClient


async def test_connections_opening_a_new_file_together_all_switch_it_to_wal(tmp_path):
    # Switching a new file to WAL takes an exclusive lock; when two connections race
    # for it, SQLite answers one "database is locked" at once, without busy_timeout.
    # Without the client's retry about one round in ten lost a connection here (the
    # 4-process migration test failed on CI that way); 100 rounds make a miss all but certain.
    for round_ in range(100):
        path = tmp_path / f"{round_}.sqlite3"
        credentials = tortoise_config(f"sqlite:///{path}")["connections"]["default"]["credentials"]
        clients = [ImmediateSqliteClient(connection_name="default", **credentials)
                   for _ in range(6)]
        try:
            opened = await asyncio.gather(*(c.create_connection(with_db=True) for c in clients),
                                          return_exceptions=True)
            assert opened == [None] * 6, (round_, opened)
            modes = [await c.execute_query_dict("PRAGMA journal_mode") for c in clients]
            assert modes == [[{"journal_mode": "wal"}]] * 6
        finally:
            for c in clients:
                await c.close()
