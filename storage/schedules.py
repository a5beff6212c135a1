"""Recurring batches: the rows behind /schedule, /schedules and /unschedule.

When each one fires is bot.scheduler's business (APScheduler's cron triggers); this
module keeps them, and `claim` lets exactly one service queue a given firing even when
several run on one database.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from storage.db import Database
from storage.records import Schedule, encoded

ADD = """
INSERT INTO schedules (cron, timezone, template, sheet, files, submitter, platform, conversation,
                       priority, meta, created_at, fired_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11) RETURNING id"""
ALL = "SELECT * FROM schedules ORDER BY id"
ONE = "SELECT * FROM schedules WHERE id = $1"
REMOVE = "DELETE FROM schedules WHERE id = $1 RETURNING id"
# A firing at $2 is this caller's if nobody recorded one at or after it.
CLAIM = "UPDATE schedules SET fired_at = $2 WHERE id = $1 AND fired_at < $2"


class Schedules:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time):
        self.db, self.clock = db, clock

    async def add(self, *, cron: str, timezone: str, template: str, sheet: str,
                  files: dict[str, str], submitter: str, platform: str,
                  conversation: str | None, priority: int, meta: dict[str, Any]) -> int:
        return await self.db.fetchval(ADD, cron, timezone, template, sheet, encoded(files),
                                      submitter, platform, conversation, priority,
                                      encoded(meta), self.clock())

    async def all(self) -> list[Schedule]:
        return [Schedule.from_row(r) for r in await self.db.fetch(ALL)]

    async def get(self, schedule_id: int) -> Schedule | None:
        row = await self.db.fetchrow(ONE, schedule_id)
        return Schedule.from_row(row) if row else None

    async def remove(self, schedule_id: int) -> bool:
        return await self.db.fetchrow(REMOVE, schedule_id) is not None

    async def claim(self, schedule_id: int, fire_at: float) -> bool:
        return await self.db.execute(CLAIM, schedule_id, fire_at) > 0
