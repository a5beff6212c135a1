"""Opening the database: SQLite (one host, the default) or PostgreSQL (many hosts).

SQLite runs in WAL with synchronous=FULL, so a committed enqueue survives power
loss, and with a busy timeout, so several processes on one host can share it.
Migrations run at open, under a lock, so a service and its workers starting
together do not race to create the schema.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

from tortoise.backends.base.config_generator import expand_db_url
from tortoise.context import TortoiseContext, _current_context
from tortoise.migrations.executor import MigrationExecutor, MigrationTarget
from tortoise.transactions import in_transaction

log = logging.getLogger("genbot.db")
APP = "storage"
APPS = {APP: {"models": ["storage.tables"], "default_connection": "default",
              "migrations": "storage.migrations"}}
SQLITE_BUSY_TIMEOUT_MS = 30_000
MIGRATION_LOCK_ID = 0x67656E62  # "genb": PostgreSQL advisory lock key for migrations


RECONNECT_TRIES = 6  # about 3 s of backoff in all


def _connection_lost(error: BaseException) -> bool:
    """Is this (or what caused it) PostgreSQL's connection going away? (InternalClientError:
    asyncpg's word for a connection the drop left mid-protocol.)"""
    import asyncpg
    lost = (asyncpg.ConnectionDoesNotExistError, asyncpg.InternalClientError,
            asyncpg.AdminShutdownError, asyncpg.CannotConnectNowError,
            asyncpg.PostgresConnectionError, ConnectionError)
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, lost):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


class DatabaseError(Exception):
    """The database could not be opened or migrated; the message says why and where."""


def tortoise_config(url: str, pool_size: int = 10) -> dict[str, Any]:
    connection: dict[str, Any]  # tortoise's connection config: engine, credentials
    if url.startswith("sqlite://"):
        path = sqlite_path(url)
        # Order matters: busy_timeout first, so switching to WAL waits for other openers.
        # Tortoise's default journal_size_limit (16 KB) truncates the WAL after every
        # checkpoint and halves commit throughput; 64 MB keeps it allocated.
        credentials = {"file_path": str(path), "busy_timeout": SQLITE_BUSY_TIMEOUT_MS,
                       "journal_mode": "WAL", "synchronous": "FULL", "foreign_keys": "ON",
                       "journal_size_limit": 64 * 1024 * 1024}
        connection = {"engine": "storage.sqlite_client", "credentials": credentials}
    else:
        connection = expand_db_url(url.replace("postgresql://", "postgres://", 1))
        connection["engine"] = "tortoise.backends.asyncpg"
        connection["credentials"].setdefault("maxsize", pool_size)
        connection["credentials"].setdefault("minsize", 1)
        connection["credentials"]["reset"] = _keep_session
    return {"connections": {"default": connection}, "apps": APPS}


async def _keep_session(connection) -> None:
    """asyncpg's pool resets each connection it gets back (RESET ALL, UNLISTEN *, ...):
    one more round trip per query, since tortoise acquires per query. The queue never
    changes session state (the event log's advisory lock is transaction-scoped, the
    migration lock is released before its connection goes back, LISTEN has its own
    connection), so it skips that; asyncpg still rolls back any open transaction."""


def sqlite_path(url: str) -> Path:
    """sqlite:///abs/path or sqlite://relative/path -> a Path."""
    return Path(url.removeprefix("sqlite://"))


@contextlib.contextmanager
def _active(ctx: TortoiseContext):
    """Make `ctx` tortoise's current context for this task.

    TortoiseContext's own `with` keeps one token on the shared context object, which
    breaks when tasks overlap; a token per use does not.
    """
    token = _current_context.set(ctx)
    try:
        yield
    finally:
        _current_context.reset(token)


SECRET_PARAMS = {"password", "passwd", "pass", "sslpassword", "pwd"}


def redacted(url: str) -> str:
    """`url` with its password (in the user part or the query) shown as ***. Parsed, not
    matched: a password may hold "@", ":" or "/", and the user part may be empty."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    head, mark, query = rest.partition("?")
    userinfo, at, tail = head.rpartition("@")  # the host never holds "@"; a password may
    if at and ":" in userinfo:
        head = f"{userinfo.partition(':')[0]}:***@{tail}"
    if query:
        query = urlencode([(k, "***" if k.lower() in SECRET_PARAMS else v)
                           for k, v in parse_qsl(query, keep_blank_values=True)], safe="*/:")
    return f"{scheme}://{head}{mark}{query}"


def _secrets(url: str) -> list[str]:
    head, _, query = url.partition("://")[2].partition("?")
    userinfo, at, _ = head.rpartition("@")
    found = [userinfo.partition(":")[2]] if at and ":" in userinfo else []
    found += [v for k, v in parse_qsl(query) if k.lower() in SECRET_PARAMS]
    return [s for s in {*found, *(unquote(s) for s in found)} if s]


def _without_secrets(text: str, url: str) -> str:
    """A driver's message may quote the URL it was given, or a part of it."""
    for secret in sorted(_secrets(url), key=len, reverse=True):
        text = text.replace(secret, "***").replace(quote(secret, safe=""), "***")
    return text


@functools.lru_cache(maxsize=512)
def _to_sqlite(sql: str) -> str:
    # Queue SQL is written once with $1-style parameters; SQLite spells them ?1.
    return re.sub(r"\$(\d+)", r"?\1", sql)


class Database:
    """One open connection (SQLite) or pool (PostgreSQL) and the SQL helpers the queue uses."""

    def __init__(self, url: str, *, pool_size: int = 10):
        self.url = url
        self.dialect = "sqlite" if url.startswith("sqlite://") else "postgres"
        self.pool_size = pool_size
        self._ctx: TortoiseContext | None = None

    @property
    def path(self) -> Path | None:
        return sqlite_path(self.url) if self.dialect == "sqlite" else None

    @property
    def client(self):
        return self._context.connections.get("default")

    @property
    def _context(self) -> TortoiseContext:
        assert self._ctx is not None, "database is not open"
        return self._ctx

    async def open(self, *, migrate: bool = True) -> Database:
        if self.dialect == "sqlite":
            sqlite_path(self.url).parent.mkdir(parents=True, exist_ok=True)
        self._ctx = TortoiseContext()
        try:
            with _active(self._ctx):  # tortoise resolves connections through it
                await self._ctx.init(config=tortoise_config(self.url, self.pool_size))
            await self.fetch("SELECT 1")
            if migrate:
                await self.upgrade()
        except Exception as e:
            await self.close()
            if isinstance(e, DatabaseError):
                raise
            raise DatabaseError(f"cannot open database {self.display_url}: "
                                f"{_without_secrets(str(e), self.url)}") from e
        return self

    async def close(self) -> None:
        if self._ctx is not None:
            ctx, self._ctx = self._ctx, None
            await ctx.close_connections()

    @property
    def display_url(self) -> str:
        """The URL with any password hidden."""
        return redacted(self.url)

    # --- SQL -----------------------------------------------------------------

    def sql(self, text: str) -> str:
        return _to_sqlite(text) if self.dialect == "sqlite" else text

    async def fetch(self, sql: str, *args: Any, client=None) -> list[dict]:
        if client is not None:
            return await client.execute_query_dict(self.sql(sql), list(args))
        return await self._again(lambda c: c.execute_query_dict(self.sql(sql), list(args)))

    async def fetchrow(self, sql: str, *args: Any, client=None) -> dict | None:
        rows = await self.fetch(sql, *args, client=client)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, *args: Any, client=None) -> Any:
        row = await self.fetchrow(sql, *args, client=client)
        return next(iter(row.values())) if row else None

    async def execute(self, sql: str, *args: Any, client=None) -> int:
        """Run a statement; returns the number of rows it changed."""
        if client is not None:
            count, _ = await client.execute_query(self.sql(sql), list(args))
            return count
        count, _ = await self._again(lambda c: c.execute_query(self.sql(sql), list(args)))
        return count

    async def _again(self, call):
        """Run one statement (no transaction open); when PostgreSQL dropped the pooled
        connection under it (a restart, a failover, an idle connection killed), run it
        again on a fresh one, backing off for a few seconds. A connection found dead when
        the statement is sent never ran it; the queue's statements are fenced by lease
        tokens and keys, so one that did run and is sent again changes nothing more."""
        for attempt in range(RECONNECT_TRIES):
            try:
                return await call(self.client)
            except Exception as e:
                if self.dialect != "postgres" or attempt == RECONNECT_TRIES - 1 \
                        or not _connection_lost(e):
                    raise
                log.warning("database connection lost (%s); trying again", e)
                await asyncio.sleep(0.1 * 2 ** attempt)

    async def execute_many(self, sql: str, rows: list[list[Any]], client=None) -> None:
        await (client or self.client).execute_many(self.sql(sql), rows)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """A write transaction: BEGIN IMMEDIATE on SQLite, a normal one on PostgreSQL."""
        with _active(self._context):  # tortoise tracks the open transaction in it
            async with in_transaction("default") as tx:
                yield tx

    # --- Migrations ----------------------------------------------------------

    async def pending_migrations(self) -> list[str]:
        executor = MigrationExecutor(self.client, APPS)
        with _active(self._context):
            plan = await executor.plan()
        return [step.migration.name for step in plan if not step.backward]

    async def upgrade(self, target: str | None = None) -> list[str]:
        """Apply pending migrations (up to `target`, a migration name); returns those applied."""
        applied: list[str] = []

        def progress(event: str, app: str, name: str) -> None:
            if event == "apply_done":
                applied.append(name)

        targets = [MigrationTarget(APP, target)] if target else None
        async with self._migration_lock():
            executor = MigrationExecutor(self.client, APPS)
            with _active(self._context):
                await executor.migrate(targets, progress=progress)
        return applied

    @contextlib.asynccontextmanager
    async def _migration_lock(self) -> AsyncIterator[None]:
        if self.dialect == "sqlite":
            path = sqlite_path(self.url)
            lock_path = path.with_name(path.name + ".migrate-lock")
            fd = open(lock_path, "a")
            try:
                await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                fd.close()
        else:
            async with self.client.acquire_connection() as conn:
                await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_ID)
                try:
                    yield
                finally:
                    await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_ID)
