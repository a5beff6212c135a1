"""Tortoise's asyncpg client, with transactions that give their connection back however
they end. (The module name must contain "asyncpg": tortoise's migration executor picks
its schema editor by it.)

Tortoise's pooled transaction context gives the connection back to the pool and only
then forgets the transaction; a cancellation during that release (a stop, a timeout)
skipped the forgetting, and one during BEGIN skipped both. The task's context went on
naming the finished transaction as the connection: closing the database failed on it
("'TransactionWrapper' object has no attribute '_template'"), and a connection cut off
in BEGIN never went back to the pool.
"""

from typing import Any

from tortoise.backends.asyncpg.client import AsyncpgDBClient, TransactionWrapper
from tortoise.backends.base.client import (
    TransactionalDBClient,
    TransactionContext,
    TransactionContextPooled,
)
from tortoise.connection import get_connections
from tortoise.exceptions import TransactionManagementError


class _PooledContext(TransactionContextPooled):
    async def __aenter__(self) -> TransactionalDBClient:
        await self.ensure_connection()
        pool = self.client._parent._pool
        self.client._connection = await pool.acquire()
        self.token = get_connections().set(self.connection_name, self.client)
        try:
            await self.client.begin()
        except BaseException:
            get_connections().reset(self.token)
            await pool.release(self.client._connection)  # (shielded; it rolls back)
            raise
        return self.client

    async def __aexit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        try:
            if not self.client._finalized:
                if exc_type is None:
                    await self.client.commit()
                elif exc_type is not TransactionManagementError:  # (already failed)
                    await self.client.rollback()
        finally:
            get_connections().reset(self.token)  # first: a cut-off release skips nothing
            if self.client._parent._pool:
                await self.client._parent._pool.release(self.client._connection)


class AsyncpgClient(AsyncpgDBClient):
    def _in_transaction(self) -> TransactionContext:
        return _PooledContext(TransactionWrapper(self), self._pool_init_lock)


client_class = AsyncpgClient
