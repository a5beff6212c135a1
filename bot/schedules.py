"""Recurring batches, fired on time by APScheduler.

A schedule is a cron (APScheduler's CronTrigger, in the schedule's time zone), a
template and a sheet stored with its pictures. APScheduler's AsyncIOScheduler runs
`tick` every few seconds: each schedule whose next fire time has come is claimed in
the database (one service queues it, however many run) and its sheet goes through
intake again — seeds left empty are new each time — into a batch in the conversation
that made it. Firings missed while the service was down are queued once, not once each.
The same scheduler runs retention daily at 03:30 ([queue] retention_days), and posts
the daily digest to [chat] digest at [chat] digest_at.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from datetime import datetime
from zoneinfo import ZoneInfo

from bot.messages import say
from storage.config import Config
from storage.files import FileStore
from storage.outbox import Outbox
from storage.queue import Priority, Queue, QueueFull, Submission
from storage.schedules import Schedules
from storage.workers import Workers

log = logging.getLogger("genbot.schedules")
TICK = 15.0  # seconds between looks at the schedules


DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")


def trigger(cron: str, timezone: str):
    """APScheduler's trigger for a five-field crontab line (ValueError when it is not one).
    Weekday numbers mean what crontab says (0 and 7 Sunday, 1 Monday); APScheduler 3
    counts from Monday, so they are given to it as names."""
    from apscheduler.triggers.cron import CronTrigger
    fields = cron.split()
    if len(fields) != 5:
        raise ValueError("a cron line has five fields: minute hour day month weekday")
    weekday = re.sub(r"(?<![/\d])([0-7])(?!\d)", lambda m: DAYS[int(m[1])], fields[4])
    minute, hour, day, month, _ = fields
    return CronTrigger(minute=minute, hour=hour, day=day, month=month, day_of_week=weekday,
                       timezone=ZoneInfo(timezone))


def next_fire(cron: str, timezone: str, after: float) -> datetime | None:
    zone = ZoneInfo(timezone)
    return trigger(cron, timezone).get_next_fire_time(None, datetime.fromtimestamp(after, zone))


async def make(rows: Schedules, store: FileStore, *, cron: str, timezone: str, template: str,
               sheet_name: str, sheet: bytes, pictures: dict[str, bytes], submitter: str,
               platform: str, conversation: str | None, priority: int, lang: str) -> int:
    """Store the sheet and the pictures its rows named (uploads expire), and the schedule."""
    import uuid
    from pathlib import PurePosixPath
    folder = f"schedules/{uuid.uuid4().hex}"
    stored = store.write(f"{folder}/sheet{PurePosixPath(sheet_name).suffix.lower()}", sheet)
    files = {name: store.write(f"{folder}/files/{i}{PurePosixPath(name).suffix.lower()}", data)
             for i, (name, data) in enumerate(sorted(pictures.items()))}
    return await rows.add(cron=cron, timezone=timezone, template=template, sheet=stored,
                          files=files, submitter=submitter, platform=platform,
                          conversation=conversation, priority=priority,
                          meta={"lang": lang, "sheet": sheet_name})


class Scheduler:
    def __init__(self, config: Config, queue: Queue, store: FileStore, templates: dict, *,
                 outbox: Outbox | None = None, clock: Callable[[], float] = time.time):
        self.config, self.queue, self.store, self.templates = config, queue, store, templates
        self.outbox, self.clock = outbox, clock
        self.rows = Schedules(queue.db, clock=clock)
        self.apscheduler = None

    def start(self) -> None:
        from apscheduler.schedulers.asyncio import AsyncIOScheduler
        from apscheduler.triggers.cron import CronTrigger
        from apscheduler.triggers.interval import IntervalTrigger
        self.apscheduler = AsyncIOScheduler()
        self.apscheduler.add_job(self.tick, IntervalTrigger(seconds=TICK), id="schedules",
                                 max_instances=1, coalesce=True, next_run_time=datetime.now())
        self.apscheduler.add_job(self.retention, CronTrigger(hour=3, minute=30), id="retention",
                                 max_instances=1, coalesce=True)
        chat = self.config.chat
        if chat.digest and self.outbox is not None:
            hour, minute = chat.digest_at.split(":")
            self.apscheduler.add_job(self.digest, CronTrigger(
                hour=int(hour), minute=int(minute), timezone=ZoneInfo(chat.timezone)),
                id="digest", max_instances=1, coalesce=True)
        self.apscheduler.start()

    async def digest(self) -> bool:
        """Owe [chat] digest a summary of the last 24 hours: once a day, however many
        services run (the outbox key is the day). False: owed already."""
        chat = self.config.chat
        platform, _, conversation = chat.digest.partition(":")
        lang = chat.language_at(chat.digest, platform) or chat.language
        now = self.clock()
        day = datetime.fromtimestamp(now, ZoneInfo(chat.timezone)).date().isoformat()
        d = await self.queue.digest(now - 86400, now)
        finished, active = d["finished"], await self.queue.active_counts()
        text = say("digest", lang, batches=d["batches"], succeeded=finished.get("succeeded", 0),
                   failed=finished.get("failed", 0), canceled=finished.get("canceled", 0),
                   queued=active["queued"],
                   mean=say("digest_mean", lang, seconds=d["mean_seconds"])
                   if d["mean_seconds"] is not None else "",
                   paused=say("digest_paused", lang) if await self.queue.paused() else "")
        if d["top"]:
            text += ("" if lang == "zh" else " ") + say("digest_top", lang, who=", ".join(f"{who} ({n:,})"
                                                              for who, n in d["top"]))
        return await self.outbox.put(f"digest:{chat.digest}:{day}", platform=platform,
                                     conversation=conversation, thread=None, kind="text",
                                     payload={"text": text, "lang": lang})

    async def retention(self) -> list[int]:
        """Forget batches finished more than [queue] retention_days ago, outputs included
        (and executors stopped or lost over a day ago)."""
        await Workers.of(self.queue).forget(self.clock() - 86400)
        days = self.config.queue.retention_days
        if not days:
            return []
        forgotten: list[int] = []
        while ids := await self.queue.forget_finished(self.clock() - days * 86400):
            for batch_id in ids:
                self.store.delete_folder(f"outputs/batch_{batch_id}")
            forgotten += ids
        if forgotten:
            log.info("retention: forgot %d batches finished over %g days ago", len(forgotten), days)
        return forgotten

    def stop(self) -> None:
        if self.apscheduler is not None and self.apscheduler.running:
            self.apscheduler.shutdown(wait=False)

    async def tick(self) -> list[int]:
        """Queue every schedule whose time has come; returns the batches queued."""
        now = self.clock()
        queued = []
        for row in await self.rows.all():
            when = next_fire(row["cron"], row["timezone"], row["fired_at"])
            if when is None or when.timestamp() > now:
                continue
            if not await self.rows.claim(row["id"], now):
                continue  # another service queued this firing
            try:
                batch = await self.fire(row, when.timestamp())
            except Exception:
                log.exception("schedule %s could not fire", row["id"])
                continue
            if batch is not None:
                queued.append(batch)
        return queued

    async def fire(self, row: dict, at: float) -> int | None:
        from bot.images import ImageResolver
        from bot.intake import intake
        template = self.templates.get(row["template"])
        if template is None:
            log.warning("schedule %s: template %s is gone", row["id"], row["template"])
            return None
        files = row["files"]

        async def attachments(name: str) -> bytes | None:
            path = files.get(name)
            return (await asyncio.to_thread(self.store.path, path)).read_bytes() if path else None
        settings = self.config.intake
        images = ImageResolver(settings, self.store, assets_dir=self.config.assets_dir,
                               attachments=attachments)
        sheet = await asyncio.to_thread(self.store.path, row["sheet"])
        result = await intake(template, row["meta"].get("sheet", sheet.name), sheet.read_bytes(),
                              settings=settings, images=images, skip_invalid=True)
        if not result.jobs:
            log.warning("schedule %s: nothing to queue: %s", row["id"], result.report())
            return None
        try:
            done = await self.queue.enqueue(Submission(
                row["template"], row["submitter"], result.jobs, platform=row["platform"],
                conversation=row["conversation"], priority=Priority(row["priority"]),
                idempotency_key=f"schedule:{row['id']}:{int(at)}",
                meta={**row["meta"], "schedule": row["id"]}))
        except QueueFull as e:
            log.warning("schedule %s: %s", row["id"], e)
            return None
        log.info("schedule %s fired: batch %s", row["id"], done.batch_id)
        return done.batch_id
