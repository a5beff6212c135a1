"""Tortoise's SQLite client, with every transaction begun IMMEDIATE and a journal-mode
switch that waits for other openers.

Tortoise begins transactions DEFERRED. A deferred transaction that reads and then
writes fails at once with SQLITE_BUSY when another process wrote in between, and
busy_timeout cannot help it. IMMEDIATE takes the write lock up front (waiting up to
busy_timeout), so read-then-write transactions such as an enqueue are safe with
several writer processes. (The module name must contain "sqlite": tortoise's
migration executor picks its schema editor by it.)

Switching a new database file to WAL needs an exclusive lock, and when two processes
open the same new file at once SQLite sees a possible deadlock and answers one of
them "database is locked" at once, without its busy handler (a service and an
executor started together on a fresh data_dir did). The switch is therefore tried
again until busy_timeout has passed; once the file is WAL the pragma takes no lock.

A transaction cut off while it begins (a stop while the service starts, any
cancellation during BEGIN IMMEDIATE's wait for the write lock) undoes what tortoise's
context had done by then: tortoise left the connection's lock held (every later
statement of the process waited forever), the half-begun transaction in the task's
context (closing the database then failed) and the BEGIN running on the connection's
thread (its write lock held, later statements inside it, uncommitted).
"""

import asyncio
import contextlib
import sqlite3
import time
from typing import Any

import aiosqlite
from tortoise.backends.base.client import TransactionalDBClient
from tortoise.backends.sqlite.client import (
    SqliteClient,
    SqliteTransactionContext,
    SqliteTransactionWrapper,
)
from tortoise.connection import get_connections
from tortoise.exceptions import TransactionManagementError

_RETRY_FIRST_S = 0.005
_RETRY_MAX_S = 0.2


class _ImmediateTransaction(SqliteTransactionWrapper):
    async def begin(self) -> None:
        try:
            await self._connection.commit()
            await self._connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise TransactionManagementError(exc) from exc
        except BaseException:
            # Cut off: the BEGIN goes on on the connection's thread; this rollback is
            # queued behind it (a no-op if it never began).
            with contextlib.suppress(Exception):
                await asyncio.shield(self._connection.rollback())
            raise


class _ImmediateContext(SqliteTransactionContext):
    """tortoise's context, undoing its own steps when BEGIN fails or is cut off."""

    async def __aenter__(self) -> TransactionalDBClient:
        await self._trxlock.acquire()
        try:
            await self.ensure_connection()
            self.token = get_connections().set(self.connection_name, self.connection)
            try:
                await self.connection.begin()
            except BaseException:
                get_connections().reset(self.token)
                raise
        except BaseException:
            self._trxlock.release()
            raise
        return self.connection


class ImmediateSqliteClient(SqliteClient):
    def _in_transaction(self) -> SqliteTransactionContext:
        return _ImmediateContext(_ImmediateTransaction(self), self._lock)

    async def create_connection(self, with_db: bool) -> None:
        if self._connection:
            return
        self._connection = await _connected(self.filename)
        self._connection._conn.row_factory = sqlite3.Row
        for pragma, value in self.pragmas.items():
            await self._pragma(self._connection, pragma, value)
        await self._post_connect()

    async def _pragma(self, connection: aiosqlite.Connection, pragma: str, value: Any) -> None:
        deadline = time.monotonic() + int(self.pragmas.get("busy_timeout", 0)) / 1000
        delay = _RETRY_FIRST_S
        while True:
            try:
                cursor = await connection.execute(f"PRAGMA {pragma}={value}")
                await cursor.close()
                return
            except sqlite3.OperationalError as e:
                locked = "locked" in str(e) or "busy" in str(e)
                if pragma != "journal_mode" or not locked or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RETRY_MAX_S)


async def _connected(filename: str) -> aiosqlite.Connection:
    """A connection, made whole even when the task asking is cancelled meanwhile (a stop
    while the service starts): then closed before the cancellation goes on. Cut off
    half-made, its thread lived on past the event loop, called into the closed loop and
    crashed the process on its way out."""
    connection = aiosqlite.connect(filename, isolation_level=None)

    async def made() -> aiosqlite.Connection:
        return await connection
    making = asyncio.ensure_future(made())
    try:
        return await asyncio.shield(making)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await making
            await connection.close()
        raise


client_class = ImmediateSqliteClient
