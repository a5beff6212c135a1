"""One database read shared by every request that asks for it at the same time.

Two hundred dashboards asking for /queue at once cost one computation, not two hundred
queued on the database. Every caller still sees the state as of its own arrival or
later: a caller that arrives while a computation runs waits for the next one, which
starts after the running one ends and serves everyone who arrived meanwhile — so a
script that pauses the queue and then reads /queue always reads "paused". At most two
computations are ever in flight, whatever the load.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Shared(Generic[T]):
    def __init__(self, compute: Callable[[], Awaitable[T]]):
        self.compute = compute
        self.running: asyncio.Future[T] | None = None
        self.following: asyncio.Future[T] | None = None
        self.latest: T | None = None  # the last value computed (stale at once)
        self.latest_at = 0.0  # time.monotonic() when it was

    async def get(self) -> T:
        if self.running is None:
            self.running = asyncio.ensure_future(self._run())
            return await asyncio.shield(self.running)
        if self.following is None:
            self.following = asyncio.ensure_future(self._after(self.running))
        return await asyncio.shield(self.following)

    async def _after(self, running: asyncio.Future[T]) -> T:
        await asyncio.wait([running])
        self.running, self.following = self.following, None
        return await self._run()

    async def _run(self) -> T:
        try:
            value = await self.compute()
        finally:
            if self.following is None:
                self.running = None
        self.latest, self.latest_at = value, time.monotonic()
        return value

    def refresh_soon(self, older_than: float) -> None:
        """Start a computation if the latest value is older than `older_than` seconds,
        without waiting for it (health checks read `latest`)."""
        if self.running is None and time.monotonic() - self.latest_at > older_than:
            self.running = asyncio.ensure_future(self._run())
            self.running.add_done_callback(_seen)


def _seen(future: asyncio.Future) -> None:
    """A background refresh that failed leaves `latest` as it was; the next one retries."""
    if not future.cancelled():
        future.exception()
