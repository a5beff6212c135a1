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
VALUES (:cron, :timezone, :template, :sheet, :files, :submitter, :platform, :conversation,
        :priority, :meta, :now, :now) RETURNING id"""
ALL = "SELECT * FROM schedules ORDER BY id"
ONE = "SELECT * FROM schedules WHERE id = :id"
REMOVE = "DELETE FROM schedules WHERE id = :id RETURNING id"
# A firing at :fire_at is this caller's if nobody recorded one at or after it.
CLAIM = "UPDATE schedules SET fired_at = :fire_at WHERE id = :id AND fired_at < :fire_at"


class Schedules:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time):
        self.db, self.clock = db, clock

    async def add(self, *, cron: str, timezone: str, template: str, sheet: str,
                  files: dict[str, str], submitter: str, platform: str,
                  conversation: str | None, priority: int, meta: dict[str, Any]) -> int:
        return await self.db.fetchval(ADD, {
            "cron": cron, "timezone": timezone, "template": template, "sheet": sheet,
            "files": encoded(files), "submitter": submitter, "platform": platform,
            "conversation": conversation, "priority": priority, "meta": encoded(meta),
            "now": self.clock()})

    async def all(self) -> list[Schedule]:
        return [Schedule.from_row(r) for r in await self.db.fetch(ALL)]

    async def get(self, schedule_id: int) -> Schedule | None:
        row = await self.db.fetchrow(ONE, {"id": schedule_id})
        return Schedule.from_row(row) if row else None

    async def remove(self, schedule_id: int) -> bool:
        return await self.db.fetchrow(REMOVE, {"id": schedule_id}) is not None

    async def claim(self, schedule_id: int, fire_at: float) -> bool:
        return await self.db.execute(CLAIM, {"id": schedule_id, "fire_at": fire_at}) > 0
