"""Tortoise's SQLite client, with every transaction begun IMMEDIATE.

Tortoise begins transactions DEFERRED. A deferred transaction that reads and then
writes fails at once with SQLITE_BUSY when another process wrote in between, and
busy_timeout cannot help it. IMMEDIATE takes the write lock up front (waiting up to
busy_timeout), so read-then-write transactions such as an enqueue are safe with
several writer processes. (The module name must contain "sqlite": tortoise's
migration executor picks its schema editor by it.)
"""

import sqlite3

from tortoise.backends.sqlite.client import (
    SqliteClient,
    SqliteTransactionContext,
    SqliteTransactionWrapper,
)
from tortoise.exceptions import TransactionManagementError


class _ImmediateTransaction(SqliteTransactionWrapper):
    async def begin(self) -> None:
        try:
            await self._connection.commit()
            await self._connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise TransactionManagementError(exc) from exc


class ImmediateSqliteClient(SqliteClient):
    def _in_transaction(self) -> SqliteTransactionContext:
        return SqliteTransactionContext(_ImmediateTransaction(self), self._lock)


client_class = ImmediateSqliteClient
