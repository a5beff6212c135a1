"""Schema migrations: applied at open, explicitly by `genbot db upgrade`, never losing rows."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from storage.db import APPS, Database, tortoise_config
from storage.queue import NewJob, Queue, Submission
from tests.conftest import PYTHON, ROOT, python_env, queue_settings

pytestmark = pytest.mark.fresh_database  # every new file here is migrated step by step
MIGRATIONS = sorted(p.stem for p in (ROOT / "storage" / "migrations").glob("0*.py"))


@pytest.fixture
def db_url(empty_db_url):
    """Here a database no migration has touched: the migrations are what is tested."""
    return empty_db_url


async def insert_at_first_schema(db: Database) -> None:
    """Rows as the first release wrote them (only columns 0001 had)."""
    await db.execute(
        "INSERT INTO batches (id, template, submitter, platform, priority, total_jobs, meta,"
        " created_at) VALUES (1, 'old', 'slack:U1', 'slack', 2, 2, '{}', 1.0)")
    for job_id, status in ((1, "queued"), (2, "succeeded")):
        await db.execute(
            "INSERT INTO jobs (id, batch_id, row, params, status, priority, submitter, fair_rank,"
            " attempts, not_before, cancel_requested, outputs, enqueued_at, updated_at)"
            " VALUES ($1, 1, $2, '{\"prompt\": \"kept\"}', $3, 2, 'slack:U1', $1, 0, 0, FALSE,"
            " '[]', 1.0, 1.0)", job_id, job_id + 1, status)


# Each run replays the whole chain with rows in it, so every migration's DDL runs in each
# on both backends; what the stopping points add is the stop (the rows written at one
# schema, read at the next). On SQLite the first, every third and the last two; on
# PostgreSQL the first, one in the middle and the last (every stop costs the whole chain:
# seconds of the suite's two cores each).
STOPS = [("sqlite", start) for start in dict.fromkeys(
    [*MIGRATIONS[:-1:3], *MIGRATIONS[-3:-1]])] + [
    pytest.param("postgres", start, marks=pytest.mark.postgres)
    for start in (MIGRATIONS[0], MIGRATIONS[len(MIGRATIONS) // 2], MIGRATIONS[-2])]


@pytest.mark.parametrize("empty_db_url, start", STOPS, indirect=["empty_db_url"])
async def test_upgrade_from_an_older_schema_keeps_rows(db_url, start):
    db = Database(db_url)
    await db.open(migrate=False)
    assert await db.upgrade(target=MIGRATIONS[0]) == [MIGRATIONS[0]]
    await insert_at_first_schema(db)
    if start != MIGRATIONS[0]:
        await db.upgrade(target=start)
    await db.close()

    db = await Database(db_url).open()  # opening applies the rest
    try:
        assert await db.pending_migrations() == []
        rows = await db.fetch("SELECT id, status, workflow FROM jobs ORDER BY id")
        assert [(r["id"], r["status"]) for r in rows] == [(1, "queued"), (2, "succeeded")]
        assert "kept" in str(rows[0]["workflow"])
        queue = Queue(db, queue_settings())
        lease = await queue.claim("w")  # the old job runs under the new schema
        assert lease.job_id == 1 and lease.workflow == {"prompt": "kept"}
        assert [e.kind for e in await queue.events_after(0)] == ["running"]
    finally:
        await db.close()


def test_db_upgrade_command(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite3'}"

    async def make_old():
        db = Database(url)
        await db.open(migrate=False)
        await db.upgrade(target=MIGRATIONS[0])
        await insert_at_first_schema(db)
        await db.close()
    asyncio.run(make_old())
    env = python_env() | {"GENBOT_DATABASE_URL": url}
    first = subprocess.run([PYTHON, "-m", "bot.cli", "db", "upgrade"], capture_output=True,
                           text=True, env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "applied: " + ", ".join(MIGRATIONS[1:])
    again = subprocess.run([PYTHON, "-m", "bot.cli", "db", "upgrade"], capture_output=True,
                           text=True, env=env, cwd=tmp_path)
    assert again.stdout.strip() == "database schema is up to date"


def test_processes_opening_a_new_database_together_migrate_once(db_url):
    script = ("import asyncio, sys\nfrom storage.db import Database\n"
              "async def main():\n    db = await Database(sys.argv[1]).open()\n"
              "    print(await db.fetchval('SELECT COUNT(*) FROM queue_state'))\n"
              "    await db.close()\nasyncio.run(main())\n")
    procs = [subprocess.Popen([PYTHON, "-c", script, db_url], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=python_env())
             for _ in range(4)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in outputs]
    assert [out.strip() for out, _ in outputs] == ["1"] * 4


async def test_models_and_migrations_agree(tmp_path):
    """A model change without its migration fails here (run `tortoise makemigrations`)."""
    from tortoise.cli.cli import tortoise_cli_context
    from tortoise.migrations.autodetector import MigrationAutodetector
    config = tortoise_config(f"sqlite:///{tmp_path / 'x.sqlite3'}")
    async with tortoise_cli_context(config) as ctx:
        writers = await MigrationAutodetector(ctx.apps, APPS).changes()
    assert writers == []



async def test_postgresql_queue_tables_carry_their_vacuum_settings(pg_url):
    """Migration 0019: the tables rewritten all day are vacuumed after a few hundred
    changes and leave room in their pages (bench/bloat_bench.py measures why)."""
    db = await Database(pg_url).open()
    try:
        rows = await db.fetch("SELECT relname, reloptions FROM pg_class WHERE relname IN "
                              "('jobs', 'workers', 'job_counts') AND relnamespace = "
                              "current_schema()::regnamespace")
        options = {r["relname"]: set(r["reloptions"] or ()) for r in rows}
    finally:
        await db.close()
    assert {"fillfactor=80", "autovacuum_vacuum_threshold=500"} <= options["jobs"]
    assert {"fillfactor=50", "autovacuum_vacuum_scale_factor=0"} <= options["workers"]
    assert "autovacuum_vacuum_threshold=200" in options["job_counts"]


async def test_jobs_refuse_a_status_that_is_no_state_and_a_new_state_is_one_call(db_url):
    """Migration 0021: jobs.status takes only the states (SQLite rebuilt the table for it,
    keeping rows, indexes, triggers, the placement view and the id sequence); a later
    migration adding a state calls `status_check` with the longer list."""
    import importlib

    from storage.states import Status
    check = importlib.import_module("storage.migrations.0021_status_check")
    assert set(check.STATES) == {s.value for s in Status}  # (until a state is added)
    db = Database(db_url)
    await db.open(migrate=False)
    await db.upgrade(target=MIGRATIONS[0])
    await insert_at_first_schema(db)
    await db.upgrade(target="0020_stuck_jobs")
    await db.execute("DELETE FROM jobs WHERE id = 2")  # the highest id, gone before 0021
    await db.upgrade()
    try:
        plan = await db.fetch("SELECT * FROM genbot_placement")
        assert [(r["ready"], r["running"]) for r in plan] == [(1, 0)]
        queue = Queue(db, queue_settings())
        assert (await queue.claim("w")).job_id == 1  # the triggers still write events
        assert [e.kind for e in await queue.events_after(0)] == ["running"]
        with pytest.raises(Exception, match="(?i)check"):
            await db.execute("UPDATE jobs SET status = 'aproved' WHERE id = 1")
        if db.dialect == "sqlite":  # (rows written with explicit ids, as by 0001's tests)
            batch = await queue.enqueue(Submission("t", "u", [NewJob(1, {})]))
            assert await db.fetchval("SELECT MAX(id) FROM jobs WHERE batch_id = $1",
                                     batch.batch_id) == 3  # id 2 is never handed out again

        class Editor:
            DIALECT = db.dialect
            client = db.client
        await check.status_check(Editor, (*check.STATES, "approved"))
        await db.execute("UPDATE jobs SET status = 'approved' WHERE id = 1")
        with pytest.raises(Exception, match="(?i)check"):
            await db.execute("UPDATE jobs SET status = 'aproved' WHERE id = 1")
        assert await db.fetchval("SELECT status FROM jobs WHERE id = 1") == "approved"
    finally:
        await db.close()
