"""The database layer: a dropped PostgreSQL connection is made again under a statement."""

from __future__ import annotations

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
