"""An executor's row in the worker registry: where it runs, what it holds and does.

What /queue, the API, the dashboard and /metrics show of an executor, on any host. The
loop gives the common part (its job, the jobs claimed ahead and finishing; what keeps
it from its jobs); its engine gives the rest (device, memory, models, what it may
take). Written in the background so no job waits for it: a change between idle and
busy at once, otherwise at most once a second, the latest state last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from executor import VERSION
from executor.engine import Engine
from storage.config import Config, QueueConfig
from storage.db import connection_lost
from storage.queue import Queue
from storage.workers import Workers

log = logging.getLogger("genbot.executor")


class Presence:
    def __init__(self, config: Config, queue: Queue, owner: str, engine: Engine,
                 state: Callable[[], tuple[int | None, dict[str, Any]]]):
        """`state`: the loop's part of the row now — its current job, and its stats."""
        self.heartbeat = config[QueueConfig].heartbeat_seconds
        self.owner, self.engine, self.state = owner, engine, state
        self.workers = Workers.of(queue)
        self.started_at = time.time()
        self.doing: dict[str, Any] | None = None  # what keeps it from its jobs now
        self.task: asyncio.Task | None = None
        self.again = False
        self.was_busy, self.last = False, 0.0  # what the row last said, and when
        self.at_once = asyncio.Event()
        self.lock = asyncio.Lock()  # one write at a time: the last one says the latest
        self.failing = False  # the last write failed (told once until one works again)

    async def beat_forever(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(self.heartbeat)

    def soon(self) -> None:
        """Write the row in the background, at once if the executor turned idle or busy."""
        self.again = True
        if (self.state()[0] is not None) != self.was_busy:
            self.at_once.set()
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self.write_while_asked())

    def now(self) -> None:
        """Write the row at once (what the executor is doing changed)."""
        self.at_once.set()
        self.soon()

    async def write_while_asked(self) -> None:
        while self.again:
            wait = self.last + 1.0 - time.monotonic()
            if wait > 0 and not self.at_once.is_set():
                with contextlib.suppress(TimeoutError):  # (not wait_for: it can swallow
                    async with asyncio.timeout(wait):    # a cancel on 3.11; storage.wakeup)
                        await self.at_once.wait()
            self.at_once.clear()
            self.again = False
            await self.beat()

    async def beat(self) -> None:
        async with self.lock:
            job, mine = self.state()
            self.was_busy, self.last = job is not None, time.monotonic()
            engine = self.engine.presence()
            stats = {"doing": self.doing, "engine": self.engine.kind, **mine,
                     **engine.pop("stats", {})}
            try:
                await self.workers.beat(self.owner, host=socket.gethostname(), pid=os.getpid(),
                                        version=VERSION, job=job, started_at=self.started_at,
                                        stats=stats, **engine)
            except Exception as e:  # noqa: BLE001 - the database away for a moment: next beat
                self.cannot_write(e)
            else:
                if self.failing:
                    self.failing = False
                    log.info("writing to the worker registry again")

    def cannot_write(self, error: Exception) -> None:
        """Told once until a write works again, not at every beat; a warning unless the
        database is unreachable, which storage.db tells once per outage."""
        if self.failing:
            log.debug("still cannot write to the worker registry: %s", error)
            return
        self.failing = True
        log.log(logging.INFO if connection_lost(error) else logging.WARNING,
                "cannot write to the worker registry (trying again at each beat): %s", error)

    async def stopped(self) -> None:
        """The executor ends: no write left pending (it would say idle after this), the
        row says stopped."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        with contextlib.suppress(Exception):  # the database may be what failed
            await self.workers.stopped(self.owner)
