"""The database layer: a dropped PostgreSQL connection is made again under a statement; a
transaction cut off at any step leaves nothing behind."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import asyncpg
import pytest

from storage.db import Database


@pytest.mark.postgres
async def test_statements_go_on_after_postgresql_drops_every_connection(pg_database):
    # A database of its own: every connection to it is cut, and no other test's.
    db = await Database(pg_database).open()
    try:
        assert await db.fetchval("SELECT COUNT(*) AS n FROM jobs") == 0
        admin = await asyncpg.connect(pg_database.replace("postgres://", "postgresql://", 1))
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


async def test_a_transaction_cut_off_while_it_waits_to_begin_leaves_nothing_behind(tmp_path):
    # A stop while the service starts cancels whatever runs, often a BEGIN IMMEDIATE
    # waiting for the write lock. tortoise's context then kept the connection's lock
    # (the next statement of the process waited forever), left the half-begun
    # transaction as the task's connection (closing failed: "'_ImmediateTransaction'
    # object has no attribute 'filename'") and the BEGIN went on holding the write lock.
    path = tmp_path / "g.sqlite3"
    db = await Database(f"sqlite:///{path}").open()
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")  # another writer holds the write lock for 1 s
        threading.Timer(1.0, other.execute, ["ROLLBACK"]).start()

        async def write() -> None:
            async with db.transaction() as tx:
                await db.execute("UPDATE queue_state SET changed_by = 'cut' WHERE id = 1",
                                 client=tx)
        cut = asyncio.ensure_future(write())
        await asyncio.sleep(0.3)  # waiting in BEGIN (busy_timeout is longer)
        cut.cancel()
        with pytest.raises(asyncio.CancelledError):  # once the BEGIN has ended, rolled back
            await asyncio.wait_for(cut, 10)
        # The same task goes on: a statement outside any transaction is committed at
        # once (another connection sees it), and a transaction begins and commits.
        await asyncio.wait_for(
            db.execute("UPDATE queue_state SET changed_by = 'next' WHERE id = 1"), 10)
        assert other.execute("SELECT changed_by FROM queue_state").fetchone() == ("next",)
        async with asyncio.timeout(10), db.transaction() as tx:
            await db.execute("UPDATE queue_state SET changed_by = 'after' WHERE id = 1",
                             client=tx)
        assert other.execute("SELECT changed_by FROM queue_state").fetchone() == ("after",)
    finally:
        other.close()
        await db.close()  # (failed while the cut-off transaction was the task's connection)


@pytest.mark.postgres
async def test_a_transaction_cut_off_while_it_commits_gives_its_connection_back(pg_url):
    # tortoise gave the connection back, then forgot the transaction: cut off in between
    # (a stop, twice, while a commit takes its time), the task's connection stayed the
    # finished transaction: its next statement ran on a connection back in the pool and
    # closing the database failed ("'TransactionWrapper' object has no attribute
    # '_template'"). A deferred trigger makes the commit take 30 s here.
    db = await Database(pg_url).open()
    await db.execute("CREATE TABLE slow_commit (n int)")
    await db.execute("CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$ BEGIN PERFORM pg_sleep(30); RETURN NULL; END $$")
    await db.execute("CREATE CONSTRAINT TRIGGER at_commit AFTER INSERT ON slow_commit "
                     "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow()")
    after: list[object] = []

    async def write_then_close() -> None:
        try:
            async with db.transaction() as tx:
                await db.execute("INSERT INTO slow_commit VALUES (1)", client=tx)
        finally:  # what a stop does next, in the same task (as Database.open cut off does)
            async with asyncio.timeout(10):
                after.append(await db.fetchval("SELECT COUNT(*) AS n FROM slow_commit"))
                await db.close()
    cut = asyncio.ensure_future(write_then_close())
    await asyncio.sleep(0.5)  # committing
    cut.cancel()  # the commit is cut off; giving its connection back waits for that
    await asyncio.sleep(0)
    cut.cancel()  # and is cut off too
    with pytest.raises(asyncio.CancelledError):
        await cut
    assert after == [0]


async def test_an_ordinary_error_is_not_tried_again(tmp_path):
    db = await Database(f"sqlite:///{tmp_path / 'g.sqlite3'}").open()
    try:
        with pytest.raises(Exception, match="no such table"):
            await db.fetch("SELECT * FROM nothing_here")
    finally:
        await db.close()


@pytest.mark.parametrize("url, shown", [
    ("postgres://:s3cret@db.example/genbot", "postgres://:***@db.example/genbot"),
    ("postgres://bot:p@ss:w/rd@db.example:5432/genbot", "postgres://bot:***@db.example:5432/genbot"),
    ("postgres://bot@db.example/genbot?password=s3cret&sslmode=require",
     "postgres://bot@db.example/genbot?password=***&sslmode=require"),
    ("postgres://bot:s3cret@db.example/genbot?PASSWORD=again",
     "postgres://bot:***@db.example/genbot?PASSWORD=***"),
    ("postgres://bot@db.example/genbot", "postgres://bot@db.example/genbot"),
    ("sqlite:///var/lib/genbot/genbot.db", "sqlite:///var/lib/genbot/genbot.db"),
])
def test_passwords_never_show_however_the_url_spells_them(url, shown):
    assert Database(url).display_url == shown


async def test_a_database_that_cannot_be_opened_is_named_without_its_password():
    from storage.db import DatabaseError
    url = "postgres://nobody:p%40ss-word-42@127.0.0.1:1/genbot?password=q-secret-7"
    with pytest.raises(DatabaseError) as failure:
        await Database(url).open()
    message = str(failure.value)
    assert "cannot open database postgres://nobody:***@127.0.0.1:1/genbot" in message
    for secret in ("p%40ss-word-42", "p@ss-word-42", "q-secret-7"):
        assert secret not in message


def test_check_config_and_the_start_up_line_hide_the_password(tmp_path, capsys):
    from bot.cli.genbot import main
    config = tmp_path / "config.toml"
    config.write_text(f'[service]\ndata_dir = "{tmp_path}"\n'
                      '[database]\nurl = "postgres://bot:hunter2@db.example/genbot"\n')
    main(["check-config", "--config", str(config)])
    out = capsys.readouterr()
    assert "hunter2" not in out.out + out.err and "bot:***@db.example" in out.out


def test_named_parameters_are_numbered_once_by_first_use_for_each_backend():
    from storage.db import named
    sql = ("SELECT CAST(:n AS bigint)::text, ':not' AS quoted, 'it''s :also not' -- :nor\n"
           'AS "a :name" /* :nor\n this */ WHERE a = :owner AND b = :n AND c = :owner_id')
    assert named(sql, "postgres") == (
        "SELECT CAST($1 AS bigint)::text, ':not' AS quoted, 'it''s :also not' -- :nor\n"
        'AS "a :name" /* :nor\n this */ WHERE a = $2 AND b = $1 AND c = $3',
        ("n", "owner", "owner_id"))
    assert named(sql, "sqlite")[0].endswith("a = ?2 AND b = ?1 AND c = ?3")


async def test_a_statement_takes_its_values_by_name_on_each_backend(db_url):
    db = await Database(db_url).open()
    try:
        row = await db.fetchrow("SELECT CAST(:a AS INTEGER) + CAST(:b AS INTEGER) AS sum, "
                                "CAST(:a AS INTEGER) AS a", {"b": 2, "a": 40, "unused": 0})
        assert row == {"sum": 42, "a": 40}
        with pytest.raises(KeyError, match=":b"):
            await db.fetch("SELECT CAST(:a AS INTEGER), CAST(:b AS INTEGER)", {"a": 1})
    finally:
        await db.close()
