"""The database layer: a dropped PostgreSQL connection is made again under a statement."""

from __future__ import annotations

import asyncpg
import pytest

from storage.db import Database
from tests.conftest import PG_URL


@pytest.mark.postgres
async def test_statements_go_on_after_postgresql_drops_every_connection(pg_url):
    db = await Database(pg_url).open()
    try:
        assert await db.fetchval("SELECT COUNT(*) AS n FROM jobs") == 0
        admin = await asyncpg.connect(PG_URL.replace("postgres://", "postgresql://", 1))
        try:
            cut = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND datname = current_database()")
        finally:
            await admin.close()
        assert cut >= 1
        for _ in range(3):  # every pooled connection was dead: each is made again
            assert await db.fetchval("SELECT COUNT(*) AS n FROM jobs") == 0
        assert await db.execute("UPDATE queue_state SET changed_by = 'x' WHERE id = 1") == 1
    finally:
        await db.close()


async def test_an_ordinary_error_is_not_tried_again(tmp_path):
    db = await Database(f"sqlite:///{tmp_path / 'g.sqlite3'}").open()
    try:
        with pytest.raises(Exception, match="no such table"):
            await db.fetch("SELECT * FROM nothing_here")
    finally:
        await db.close()
