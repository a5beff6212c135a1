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
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from tortoise.backends.base.config_generator import expand_db_url
from tortoise.context import TortoiseContext, _current_context
from tortoise.migrations.executor import MigrationExecutor, MigrationTarget
from tortoise.transactions import in_transaction

T = TypeVar("T")

log = logging.getLogger("genbot.db")
APP = "storage"
APPS = {APP: {"models": ["storage.tables"], "default_connection": "default",
              "migrations": "storage.migrations"}}
SQLITE_BUSY_TIMEOUT_MS = 30_000
MIGRATION_LOCK_ID = 0x67656E62  # "genb": PostgreSQL advisory lock key for migrations

# PostgreSQL going away (a restart, a failover, a proxy cutting idle connections): a
# statement waits for it, trying again on a fresh connection, backing off from
# RECONNECT_FIRST to RECONNECT_MAX seconds between tries, for up to RECONNECT_SECONDS
# (Database's `patience`) before it fails with DatabaseUnavailable. A restart (a second
# or two) or a quick failover is ridden through; the short longest wait keeps the time
# from the server's return to the first statement through it under half a second.
RECONNECT_SECONDS = 10.0
RECONNECT_FIRST, RECONNECT_MAX = 0.05, 0.5
CONNECT_TIMEOUT = 10.0  # seconds to set up one connection (asyncpg's own default: 60)
# How long `Database.open` waits by default for a server not reachable yet: about what
# opening always tolerated. Long-running processes (serve, worker) may wait longer.
OPEN_WAIT_SECONDS = 3.0


def _connection_lost(error: BaseException) -> bool:
    """Is this (or what caused it) PostgreSQL's connection going away, or the server not
    reachable? (InternalClientError: asyncpg's word for a connection the drop left
    mid-protocol; CannotConnectNowError: starting up, shutting down, in recovery;
    TimeoutError: a connection that could not be set up in CONNECT_TIMEOUT.)"""
    import asyncpg
    lost = (asyncpg.ConnectionDoesNotExistError, asyncpg.InternalClientError,
            asyncpg.AdminShutdownError, asyncpg.CannotConnectNowError,
            asyncpg.PostgresConnectionError, ConnectionError, socket.gaierror, TimeoutError,
            DatabaseUnavailable)
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, lost):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _cannot_connect(error: BaseException) -> bool:
    """Is this (or what caused it) a failure to reach the server at all — refused, starting
    up or shutting down, no route, a name that does not resolve, a connect timed out —
    rather than one connection dropped (which a fresh one may simply replace)?"""
    import asyncpg
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, (asyncpg.CannotConnectNowError, DatabaseUnavailable)) or (
                isinstance(cause, OSError)
                and not isinstance(cause, (ConnectionResetError, BrokenPipeError))):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def connection_lost(error: BaseException) -> bool:
    """Did `error` come of the database being unreachable (rather than of a statement)?"""
    return _connection_lost(error)


class DatabaseError(Exception):
    """The database could not be opened or migrated; the message says why and where."""


class DatabaseUnavailable(DatabaseError):
    """PostgreSQL could not be reached for a statement (or a transaction), after waiting
    for it as long as the Database's `patience`. The statement did not run, or (a
    connection lost while its answer was on the way, a commit cut short) its outcome is
    unknown; the queue's writes are fenced by lease tokens and keys, so trying it again
    is safe. The message names the database (password hidden) and how long it has been
    unreachable; `since` is when that began (Unix time)."""

    def __init__(self, message: str, since: float | None = None):
        super().__init__(message)
        self.since = since


class Outage:
    """A PostgreSQL server unreachable, as this process sees it: one per server, shared by
    every pool, statement and LISTEN connection on it, so an outage is told in one warning
    however many of them run into it, and its end in one line."""

    def __init__(self, name: str):
        self.name = name  # the server, as shown (no password)
        self.since: float | None = None  # when it went (Unix time); None: reachable
        self.error = ""  # what the first failure said
        self._started = 0.0  # (monotonic)
        self.count = 0  # outages seen by this process

    @property
    def down(self) -> bool:
        return self.since is not None

    @property
    def seconds(self) -> float:
        """How long it has been unreachable (0 when it is not)."""
        return time.monotonic() - self._started if self.since is not None else 0.0

    def failed(self, error: BaseException, url: str) -> None:
        """A connection to `url` failed: the first failure to connect logs one warning (a
        connection dropped under a statement is not an outage yet: a fresh one may work)."""
        if self.since is None and not _cannot_connect(error):
            log.debug("database %s: a connection was dropped (%s); making it again",
                      self.name, _without_secrets(_brief(error), url))
            return
        if self.since is not None:
            log.debug("database %s still unreachable: %s", self.name,
                      _without_secrets(_brief(error), url))
            return
        self.since, self._started = time.time(), time.monotonic()
        self.error = _without_secrets(_brief(error), url)
        self.count += 1
        log.warning("database %s unreachable (%s); waiting for it to come back",
                    self.name, self.error)

    def reached(self) -> None:
        """A statement or connection succeeded: an outage under way has ended."""
        if self.since is None:
            return
        took = time.monotonic() - self._started
        self.since, self.error = None, ""
        log.info("database %s reachable again after %.1f s", self.name, took)


_outages: dict[str, Outage] = {}


def outage_of(url: str) -> Outage:
    """The one Outage record of `url`'s server (host, port and database) in this process."""
    parts = urlsplit(url.replace("postgresql://", "postgres://", 1))
    key = f"{parts.netloc.rpartition('@')[2]}{parts.path}"
    if key not in _outages:
        _outages[key] = Outage(redacted(parts._replace(query="").geturl()))
    return _outages[key]


def _brief(error: BaseException) -> str:
    """The innermost driver error, in one line: what an operator needs of an outage."""
    inner: BaseException = error
    while (nxt := inner.__cause__ or inner.__context__) is not None:
        inner = nxt
    text = str(inner).strip().splitlines()[0] if str(inner).strip() else ""
    return f"{type(inner).__name__}: {text}" if text else type(inner).__name__


class _QuietPoolFloor(logging.Filter):
    """asyncpg (0.32+) logs a warning with a traceback each time its pool fails to make
    its floor connection again (after 1, 2, 4 … s) while the server is away. The outage
    is told once, by Outage; these go to debug, one line each."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Failed to restore the pool connection floor"):
            error = record.exc_info[1] if record.exc_info else None
            record.msg, record.args = "asyncpg: pool floor not restored yet (%s)", (
                _brief(error) if error is not None else "?",)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return _pool_logger.isEnabledFor(logging.DEBUG)
        return True


_pool_logger = logging.getLogger("asyncpg.pool")
if not any(isinstance(f, _QuietPoolFloor) for f in _pool_logger.filters):
    _pool_logger.addFilter(_QuietPoolFloor())


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
        connection["engine"] = "storage.asyncpg_client"
        connection["credentials"].setdefault("maxsize", pool_size)
        connection["credentials"].setdefault("minsize", 1)
        connection["credentials"].setdefault("timeout", CONNECT_TIMEOUT)
        connection["credentials"]["reset"] = _keep_session
    return {"connections": {"default": connection}, "apps": APPS}


async def _keep_session(connection: Any) -> None:
    """asyncpg's pool resets each connection it gets back (RESET ALL, UNLISTEN *, ...):
    one more round trip per query, since tortoise acquires per query. The queue never
    changes session state (the event log's advisory lock is transaction-scoped, the
    migration lock is released before its connection goes back, LISTEN has its own
    connection), so it skips that; asyncpg still rolls back any open transaction."""


def sqlite_path(url: str) -> Path:
    """sqlite:///abs/path or sqlite://relative/path -> a Path."""
    return Path(url.removeprefix("sqlite://"))


@contextlib.contextmanager
def _active(ctx: TortoiseContext) -> Iterator[None]:
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
    # An ad-hoc statement written with $1-style parameters; SQLite spells them ?1.
    return re.sub(r"\$(\d+)", r"?\1", sql)


# A :name parameter, outside quoted text and identifiers, comments and PostgreSQL's ::casts.
_NAMED = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|/\*.*?\*/|::|:([A-Za-z_]\w*)""",
                    re.DOTALL)


@functools.lru_cache(maxsize=1024)
def named(sql: str, dialect: str) -> tuple[str, tuple[str, ...]]:
    """A statement written with :name parameters as `dialect` takes it ($1 for
    PostgreSQL, ?1 for SQLite, numbered by first use, a name used twice sent once), and
    the names in number order. The one place parameters are translated: statements name
    what they take (`:owner`, `:limit`) and callers pass a mapping, so no meaning hangs
    on the order of a list and two statements joined into one simply share names."""
    names: list[str] = []
    mark = "$" if dialect == "postgres" else "?"

    def number(m: re.Match[str]) -> str:
        name = m.group(1)
        if name is None:
            return m.group(0)
        if name not in names:
            names.append(name)
        return f"{mark}{names.index(name) + 1}"
    return _NAMED.sub(number, sql), tuple(names)


class _Backoff:
    """The waits between tries of one statement (or BEGIN) against an unreachable
    server: RECONNECT_FIRST doubling to RECONNECT_MAX, until the Database's patience
    runs out; then DatabaseUnavailable."""

    def __init__(self, db: Database):
        self.db, self.delay = db, RECONNECT_FIRST
        self.deadline: float | None = None

    async def wait(self, error: BaseException) -> None:
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + self.db.patience
        if now >= self.deadline:
            raise self.db._unavailable(error) from error
        await asyncio.sleep(min(self.delay, self.deadline - now))
        self.delay = min(self.delay * 2, RECONNECT_MAX)


class Database:
    """One open connection (SQLite) or pool (PostgreSQL) and the SQL helpers the queue uses.

    PostgreSQL going away is ridden through: a statement waits up to `patience` seconds
    for it to come back (see RECONNECT_SECONDS), then raises DatabaseUnavailable; an
    outage is logged once (`outage`), however many statements wait on it."""

    def __init__(self, url: str, *, pool_size: int = 10, patience: float | None = None):
        """`patience`: seconds a statement waits for an unreachable PostgreSQL
        (default RECONNECT_SECONDS)."""
        self.url = url
        self.dialect = "sqlite" if url.startswith("sqlite://") else "postgres"
        self.pool_size = pool_size
        self.patience = RECONNECT_SECONDS if patience is None else patience
        self._ctx: TortoiseContext | None = None
        self.outage: Outage | None = outage_of(url) if self.dialect == "postgres" else None

    @property
    def path(self) -> Path | None:
        return sqlite_path(self.url) if self.dialect == "sqlite" else None

    @property
    def client(self) -> Any:  # tortoise's BaseDBAsyncClient (untyped)
        return self._context.connections.get("default")

    @property
    def _context(self) -> TortoiseContext:
        assert self._ctx is not None, "database is not open"
        return self._ctx

    @property
    def down_since(self) -> float | None:
        """Since when (Unix time) the server has been unreachable; None while it answers
        (as far as the last statement or connection of this process could tell)."""
        return self.outage.since if self.outage is not None else None

    async def open(self, *, migrate: bool = True, wait: float | None = None) -> Database:
        """Connect (and migrate). `wait`: seconds to wait for a PostgreSQL server that is
        not reachable yet (starting, restarting, failing over), trying again with backoff
        and saying so in one line (default OPEN_WAIT_SECONDS; 0: fail at once). Fails
        with DatabaseError, one line naming the database (password hidden) and why."""
        if self.dialect == "sqlite":
            sqlite_path(self.url).parent.mkdir(parents=True, exist_ok=True)
        wait = OPEN_WAIT_SECONDS if wait is None else wait
        started = time.monotonic()
        delay, told = RECONNECT_FIRST, False
        while True:
            try:
                return await self._open(migrate)
            except Exception as e:
                waited = time.monotonic() - started
                left = wait - waited
                if self.outage is None or not _connection_lost(e) or left <= 0:
                    if isinstance(e, DatabaseError) and not isinstance(e, DatabaseUnavailable):
                        raise
                    after = f" (waited {waited:.0f} s for it)" if wait > 0 else ""
                    raise DatabaseError(f"cannot open database {self.display_url}: "
                                        f"{_without_secrets(str(e), self.url)}{after}") from e
                if not told:
                    told = True
                    self.outage.failed(e, self.url)  # (the one warning, if not told yet)
                    log.info("opening database %s: waiting up to %.0f s for it",
                             self.display_url, wait)
                await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, RECONNECT_MAX)

    async def _open(self, migrate: bool) -> Database:
        self._ctx = TortoiseContext()
        try:
            with _active(self._ctx):  # tortoise resolves connections through it
                await self._ctx.init(config=tortoise_config(self.url, self.pool_size))
            await self._once(lambda c: c.execute_query_dict("SELECT 1", []))
            if migrate:
                await self.upgrade()
        except BaseException:
            await self.close()
            raise
        return self

    async def close(self) -> None:
        if self._ctx is not None:
            ctx, self._ctx = self._ctx, None
            await ctx.close_connections()

    @property
    def display_url(self) -> str:
        """The URL with any password hidden."""
        return redacted(self.url)

    async def ping(self, timeout: float = 1.0) -> bool:
        """Is the server reachable now? One try of SELECT 1, no waiting for it beyond
        `timeout` seconds (a probe, not a statement that must run). Updates `outage`."""
        try:
            await asyncio.wait_for(
                self._once(lambda c: c.execute_query_dict("SELECT 1", [])), timeout)
            return True
        except TimeoutError:  # slow, not known unreachable: no outage for it
            return False
        except Exception as e:
            if not _connection_lost(e):
                raise
            return False

    # --- SQL -----------------------------------------------------------------

    def sql(self, text: str) -> str:
        return _to_sqlite(text) if self.dialect == "sqlite" else text

    def _bound(self, sql: str, args: tuple[Any, ...]) -> tuple[str, list[Any]]:
        """The statement and its values as the driver takes them: `args` is one mapping
        for a statement with :name parameters (every statement of storage/), or the
        values of $1, $2 … in order (an ad-hoc statement: a test, a one-off tool)."""
        if len(args) == 1 and isinstance(args[0], Mapping):
            text, names = named(sql, self.dialect)
            params = args[0]
            missing = [n for n in names if n not in params]
            if missing:
                raise KeyError(f"no value for :{', :'.join(missing)} in {sql.strip()[:60]!r}")
            return text, [params[n] for n in names]
        return self.sql(sql), list(args)

    async def fetch(self, sql: str, *args: Any, client: Any = None) -> list[dict]:
        text, values = self._bound(sql, args)
        if client is not None:
            return await client.execute_query_dict(text, values)
        return await self._again(lambda c: c.execute_query_dict(text, values))

    async def fetchrow(self, sql: str, *args: Any, client: Any = None) -> dict | None:
        rows = await self.fetch(sql, *args, client=client)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, *args: Any, client: Any = None) -> Any:
        row = await self.fetchrow(sql, *args, client=client)
        return next(iter(row.values())) if row else None

    async def execute(self, sql: str, *args: Any, client: Any = None) -> int:
        """Run a statement; returns the number of rows it changed."""
        text, values = self._bound(sql, args)
        if client is not None:
            count, _ = await client.execute_query(text, values)
            return count
        count, _ = await self._again(lambda c: c.execute_query(text, values))
        return count

    async def _once(self, call: Callable[[Any], Awaitable[T]]) -> T:
        """One try of a statement, recorded in `outage` (a failure to reach the server
        starts one, a success ends one)."""
        try:
            result = await call(self.client)
        except Exception as e:
            if self.outage is not None and _connection_lost(e):
                self.outage.failed(e, self.url)
            raise
        if self.outage is not None:
            self.outage.reached()
        return result

    async def _again(self, call: Callable[[Any], Awaitable[T]]) -> T:
        """Run one statement (no transaction open); when PostgreSQL dropped the pooled
        connection under it (a restart, a failover, an idle connection killed) or cannot be
        reached, run it again on a fresh one, backing off, for up to `patience` seconds;
        then DatabaseUnavailable. A connection found dead when the statement is sent never
        ran it; the queue's statements are fenced by lease tokens and keys, so one that did
        run (its answer lost with the connection) and is sent again changes nothing more."""
        if self.outage is None:
            return await call(self.client)
        backoff = _Backoff(self)
        while True:
            try:
                return await self._once(call)
            except Exception as e:
                if not _connection_lost(e):
                    raise
                await backoff.wait(e)

    def _unavailable(self, error: BaseException) -> DatabaseUnavailable:
        if isinstance(error, DatabaseUnavailable):
            return error
        assert self.outage is not None
        why = _without_secrets(_brief(error), self.url)
        if not self.outage.down:  # one connection dropped, the server not known away
            return DatabaseUnavailable(f"database {self.display_url}: connection lost ({why})")
        return DatabaseUnavailable(f"database {self.display_url} unreachable for "
                                   f"{self.outage.seconds:.1f} s: {why}", self.outage.since)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """A write transaction: BEGIN IMMEDIATE on SQLite, a normal one on PostgreSQL.

        On PostgreSQL, beginning it waits for an unreachable server as a statement does
        (nothing has run yet); a connection lost inside it (or at its commit) ends it with
        DatabaseUnavailable: its body is not run again here (its outcome may be unknown
        when the commit was cut short)."""
        with _active(self._context):  # tortoise tracks the open transaction in it
            if self.outage is None:
                async with in_transaction("default") as tx:
                    yield tx
                return
            context, tx = await self._begin()
            try:
                yield tx
            except BaseException as e:
                try:
                    await context.__aexit__(type(e), e, e.__traceback__)
                except Exception as rollback:  # noqa: BLE001 - the connection went with it
                    if not _connection_lost(rollback):
                        raise
                if isinstance(e, Exception) and _connection_lost(e):
                    assert self.outage is not None
                    self.outage.failed(e, self.url)
                    raise self._unavailable(e) from e
                raise
            try:
                await context.__aexit__(None, None, None)
            except Exception as e:
                if not _connection_lost(e):
                    raise
                self.outage.failed(e, self.url)
                raise self._unavailable(e) from e
            self.outage.reached()

    async def _begin(self) -> tuple[Any, Any]:
        """Acquire a connection and BEGIN, trying again (as `_again`) while the server is
        unreachable; tortoise's context and its transaction."""
        backoff = _Backoff(self)
        while True:
            context = in_transaction("default")
            try:  # (a BEGIN that fails gives its connection back: storage/asyncpg_client.py)
                return context, await context.__aenter__()
            except Exception as e:
                if not _connection_lost(e):
                    raise
                assert self.outage is not None
                self.outage.failed(e, self.url)
                await backoff.wait(e)

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
            with lock_path.open("a") as fd:
                await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
        else:
            async with self.client.acquire_connection() as conn:
                await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_ID)
                try:
                    yield
                finally:
                    await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_ID)
