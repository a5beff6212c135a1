"""The worker registry: every executor process writes a heartbeat row here.

A heartbeat says where the worker runs (host, device, version), what it holds (device
memory, resident models, what it may run) and what it is doing (idle, or busy on a
job). Readers see the workers of every host on one database; one that has not beaten
for `lost_after` seconds is marked lost (and a `worker_lost` event says so) — its job,
if any, comes back to the queue through its lease, as any job of a dead process does.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from storage.db import Database
from storage.records import WorkerInfo, encoded

if TYPE_CHECKING:
    from storage.queue import Queue

BEAT = """
INSERT INTO workers (id, host, pid, device, version, state, job_id, memory_total, memory_used,
                     models, allow, stats, started_at, seen_at)
VALUES (:worker, :host, :pid, :device, :version, :state, :job, :memory_total, :memory_used,
        :models, :allow, :stats, :started_at, :now)
ON CONFLICT (id) DO UPDATE SET state = excluded.state, job_id = excluded.job_id,
  memory_total = excluded.memory_total, memory_used = excluded.memory_used,
  models = excluded.models, allow = excluded.allow, stats = excluded.stats,
  seen_at = excluded.seen_at"""
STOPPED = "UPDATE workers SET state = 'stopped', job_id = NULL, seen_at = :now WHERE id = :worker"
# Silent past the deadline: lost. RETURNING lets the caller log each one once. (The
# SELECT first: reading the registry should not take the write lock when none is lost.)
ANY_SILENT = ("SELECT 1 AS x FROM workers WHERE state IN ('idle', 'busy') AND seen_at < :before"
              " LIMIT 1")
LOSE = """
UPDATE workers SET state = 'lost' WHERE state IN ('idle', 'busy') AND seen_at < :before
RETURNING id, job_id, seen_at"""
LOST_EVENT = "INSERT INTO events (at, kind, data) VALUES (:now, 'worker_lost', :data)"
ALL = "SELECT * FROM workers ORDER BY started_at, id"
# Stopped and lost workers are forgotten after a while; live ones never.
FORGET = "DELETE FROM workers WHERE state IN ('stopped', 'lost') AND seen_at < :before"

STATES = ("idle", "busy", "stopped", "lost")


def owner_name(pid: int | None = None) -> str:
    """What an executor process is called in leases and here: host:pid."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


class Workers:
    def __init__(self, db: Database, *, lost_after: float,
                 clock: Callable[[], float] = time.time):
        self.db, self.lost_after, self.clock = db, lost_after, clock

    @classmethod
    def of(cls, queue: Queue) -> Workers:
        """The registry beside a queue: lost after one lease of silence (by then any job
        it held can be claimed again anyway)."""
        return cls(queue.db, lost_after=queue.settings.lease_seconds, clock=queue.clock)

    async def beat(self, worker: str, *, host: str, pid: int, device: str, version: str,
                   job: int | None, memory_total: int | None = None,
                   memory_used: int | None = None, models: Sequence[str] = (),
                   allow: list[str] | None = None, stats: dict[str, Any] | None = None,
                   started_at: float | None = None) -> None:
        """I am alive, and this is me now (busy when `job` is set)."""
        now = self.clock()
        await self.db.execute(BEAT, {
            "worker": worker, "host": host, "pid": pid, "device": device, "version": version,
            "state": "busy" if job else "idle", "job": job, "memory_total": memory_total,
            "memory_used": memory_used, "models": encoded(list(models)),
            "allow": None if allow is None else encoded(list(allow)),
            "stats": encoded(stats or {}), "started_at": started_at or now, "now": now})

    async def stopped(self, worker: str) -> None:
        await self.db.execute(STOPPED, {"worker": worker, "now": self.clock()})

    async def all(self) -> list[WorkerInfo]:
        """Every known worker, oldest first, the silent ones marked lost first."""
        await self.sweep()
        return [WorkerInfo.from_row(r) for r in await self.db.fetch(ALL)]

    async def sweep(self) -> list[str]:
        """Mark workers silent for `lost_after` seconds lost; returns their names."""
        now = self.clock()
        if not await self.db.fetchrow(ANY_SILENT, {"before": now - self.lost_after}):
            return []
        async with self.db.transaction() as tx:
            lost = await self.db.fetch(LOSE, {"before": now - self.lost_after}, client=tx)
            for row in lost:
                await self.db.execute(LOST_EVENT, {"now": now, "data": encoded(
                    {"worker": row["id"], "job": row["job_id"], "seen_at": row["seen_at"]})},
                    client=tx)
        return [row["id"] for row in lost]

    async def forget(self, before: float) -> int:
        return await self.db.execute(FORGET, {"before": before})
