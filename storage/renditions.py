"""Renditions: the files made from each job's image for the sales channels its batch
named, kept one row per (job, channel, rendition) with its findings.

The executor records a job's renditions before it records the job's end; a job that
runs again (a lost lease, a retry) replaces them, so a batch never shows two versions
of one file. Every front reads them here: the thread's summary, the dashboard's card,
the results sheet, the delivery zip and the `batch.delivered` webhook.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from storage.db import Database
from storage.records import decoded, encoded

FORGET = "DELETE FROM renditions WHERE job_id = :job"
ADD = """
INSERT INTO renditions (job_id, batch_id, channel, rendition, name, path, width, height,
                        bytes, sha256, findings, labels, created_at)
VALUES (:job, :batch, :channel, :rendition, :name, :path, :width, :height, :bytes, :sha256,
        :findings, :labels, :now)"""
OF_BATCH = "SELECT * FROM renditions WHERE batch_id = :batch ORDER BY job_id, id"
OF_JOB = "SELECT * FROM renditions WHERE job_id = :job ORDER BY id"
ONE = "SELECT * FROM renditions WHERE id = :id"
NOTE = """
INSERT INTO events (at, kind, batch_id, job_id, data) VALUES (:at, :kind, :batch, NULL, :data)"""

# The event log's kind for a batch whose shipping files were put where they go (its data:
# what triggered it, how many files, where): the announcer's batch.delivered.
DELIVERED = "delivered"


@dataclass(frozen=True)
class Rendition:
    job_id: int
    batch_id: int
    channel: str
    rendition: str
    name: str  # the file's name as delivered ({sku}_{channel}_{n}.jpg filled in)
    path: str  # in the output store
    width: int
    height: int
    bytes: int
    sha256: str
    findings: list[dict[str, Any]] = field(default_factory=list)  # [] passes
    labels: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    id: int = 0  # its row, once recorded

    @property
    def passed(self) -> bool:
        return not self.findings

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Rendition:
        return cls(row["job_id"], row["batch_id"], row["channel"], row["rendition"],
                   row["name"], row["path"], row["width"], row["height"], row["bytes"],
                   row["sha256"], decoded(row["findings"]) or [],
                   decoded(row["labels"]) or {}, row["created_at"], row["id"])


class Renditions:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time):
        self.db, self.clock = db, clock

    async def record(self, job_id: int, made: Sequence[Rendition]) -> None:
        """A job's renditions, replacing any an earlier run of it recorded."""
        async with self.db.transaction() as tx:
            await self.db.execute(FORGET, {"job": job_id}, client=tx)
            for r in made:
                await self.db.execute(ADD, {
                    "job": job_id, "batch": r.batch_id, "channel": r.channel,
                    "rendition": r.rendition, "name": r.name, "path": r.path,
                    "width": r.width, "height": r.height, "bytes": r.bytes,
                    "sha256": r.sha256, "findings": encoded(r.findings),
                    "labels": encoded(r.labels), "now": self.clock()}, client=tx)

    async def of_batch(self, batch_id: int) -> list[Rendition]:
        return [Rendition.from_row(r) for r in await self.db.fetch(OF_BATCH, {"batch": batch_id})]

    async def delivered(self, batch_id: int, data: dict[str, Any]) -> None:
        """Say in the event log that the batch's files that ship were delivered."""
        await self.db.execute(NOTE, {"at": self.clock(), "kind": DELIVERED, "batch": batch_id,
                                     "data": encoded(data)})

    async def get(self, rendition_id: int) -> Rendition | None:
        row = await self.db.fetchrow(ONE, {"id": rendition_id})
        return Rendition.from_row(row) if row else None

    async def of_job(self, job_id: int) -> list[Rendition]:
        return [Rendition.from_row(r) for r in await self.db.fetch(OF_JOB, {"job": job_id})]
