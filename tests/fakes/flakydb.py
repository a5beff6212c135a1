"""A real database that fails when a test says so, the way PostgreSQL going away does.

`FlakyDatabase` wraps an open `storage.db.Database` (SQLite or PostgreSQL) and passes
every statement and transaction through, except:

- `fail(nth, "before")`: the nth statement from now fails without running (the server
  unreachable when it was sent);
- `fail(nth, "after")`: the nth statement from now runs and commits, then fails (the
  connection lost while its answer was on the way: the caller cannot know it ran);
- `down = True`: every statement fails until it is False again (an outage).

Each failure is `DatabaseUnavailable`, what storage.db raises once its patience runs out.
A statement inside a transaction (`client=`) is part of that transaction: the faults
apply to the transaction as a whole. `in_flight` and `statements` let a test wait until
nothing is on its way.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from storage.db import Database, DatabaseUnavailable


class FlakyDatabase:
    def __init__(self, db: Database):
        self.db = db
        self.faults: list[list[Any]] = []  # [statements still to pass, "before" | "after"]
        self.down = False
        self.in_flight = 0
        self.statements = 0  # sent so far (each transaction counts once)
        self.failures = 0  # raised so far

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    def fail(self, nth: int, when: str) -> None:
        """The `nth` statement from now (0: the next) fails `when` ("before" or "after")."""
        assert when in ("before", "after")
        self.faults.append([nth, when])

    def _due(self) -> str | None:
        """Counts one statement off every fault; the one that falls due, if any."""
        due = None
        for fault in self.faults:
            if fault[0] == 0 and due is None:
                due = fault[1]
            fault[0] -= 1
        self.faults = [f for f in self.faults if f[0] >= 0]
        return due

    def _error(self, when: str) -> DatabaseUnavailable:
        self.failures += 1
        what = "an outage" if when == "down" else f"a fault {when} the statement"
        return DatabaseUnavailable(f"database {self.db.display_url} unreachable ({what}, "
                                   "injected by the test)")

    def _sent(self) -> str | None:
        """A statement (or transaction) sent: it fails now, or "after" it ran, or not."""
        self.statements += 1
        when = "down" if self.down else self._due()
        if when in ("down", "before"):
            raise self._error(when)
        return when

    async def _statement(self, call: Callable[[], Awaitable[Any]], client: Any) -> Any:
        if client is not None:  # a statement of a transaction: the transaction's faults
            return await call()
        when = self._sent()
        self.in_flight += 1
        try:
            result = await call()
        finally:
            self.in_flight -= 1
        if when == "after":
            raise self._error(when)
        return result

    async def fetch(self, sql: str, *args: Any, client: Any = None) -> list[dict]:
        return await self._statement(lambda: self.db.fetch(sql, *args, client=client), client)

    async def fetchrow(self, sql: str, *args: Any, client: Any = None) -> dict | None:
        return await self._statement(lambda: self.db.fetchrow(sql, *args, client=client),
                                     client)

    async def fetchval(self, sql: str, *args: Any, client: Any = None) -> Any:
        return await self._statement(lambda: self.db.fetchval(sql, *args, client=client),
                                     client)

    async def execute(self, sql: str, *args: Any, client: Any = None) -> int:
        return await self._statement(lambda: self.db.execute(sql, *args, client=client),
                                     client)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        when = self._sent()
        self.in_flight += 1
        try:
            async with self.db.transaction() as tx:
                yield tx
        finally:
            self.in_flight -= 1
        if when == "after":
            raise self._error(when)
