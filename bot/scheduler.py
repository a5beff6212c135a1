"""Time-driven work in `genbot serve`, fired by APScheduler: recurring batches,
retention, the daily digest.

A schedule is a cron (in its own time zone), a template and a stored sheet
(bot.app.application.App.schedule makes them). `tick` runs every few seconds: each schedule
whose next fire time has come is claimed in the database (one service queues it,
however many run) and handed to `App.fire`, which puts its sheet through intake again —
seeds left empty are new each time — into a batch in the conversation that made it.
Firings missed while the service was down are queued once, not once each. Retention
runs daily at 03:30 ([queue] retention_days); the digest goes to [chat] digest at
[chat] digest_at.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from bot.app.application import App
from bot.app.retention import prune
from bot.app.values import next_fire
from bot.conventions import digest_key
from bot.messages import say
from bot.settings import ChatConfig
from storage.config import QueueConfig
from storage.db import connection_lost
from storage.logs import Retrying
from storage.outbox import Outbox
from storage.records import TERMINAL
from storage.workers import Workers

log = logging.getLogger("genbot.schedules")
TICK = 15.0  # seconds between looks at the schedules


class _CanceledQuietly(logging.Filter):
    """APScheduler cancels the firings still pending as it shuts down, and reports one
    canceled before it began (so before `_quiet` could catch it) as an error with a
    traceback. It is the service stopping: say nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError))


CANCELED_QUIETLY = _CanceledQuietly()


class Scheduler:
    def __init__(self, app: App, *, outbox: Outbox | None = None):
        self.app, self.outbox = app, outbox
        self.config, self.queue, self.store = app.config, app.queue, app.store
        self.clock = app.clock
        self.apscheduler: Any = None
        self.stopping = False

    def _quiet(self, work: Any) -> Any:
        """A job as the scheduler runs it: one caught by the service stopping (the
        database closing under it) ends quietly; a failure is told once per run of
        failures (a database outage in one line, since storage.db tells it too), not a
        traceback at every firing; the next firing tries again."""
        retrying = Retrying(log, f"schedules: {work.__name__}")

        async def run() -> Any:
            try:
                done = await work()
            except asyncio.CancelledError:
                return None
            except Exception as e:  # noqa: BLE001 - told once; the next firing tries again
                if not self.stopping:
                    retrying.failed(e)
                return None
            retrying.worked()
            return done
        run.__name__ = run.__qualname__ = work.__name__
        return run

    def start(self) -> None:
        logging.getLogger("apscheduler.executors.default").addFilter(CANCELED_QUIETLY)
        from apscheduler.schedulers.asyncio import AsyncIOScheduler
        from apscheduler.triggers.cron import CronTrigger
        from apscheduler.triggers.interval import IntervalTrigger
        self.apscheduler = AsyncIOScheduler()
        self.apscheduler.add_job(self._quiet(self.tick), IntervalTrigger(seconds=TICK),
                                 id="schedules", max_instances=1, coalesce=True,
                                 next_run_time=datetime.now())
        self.apscheduler.add_job(self._quiet(self.retention), CronTrigger(hour=3, minute=30),
                                 id="retention", max_instances=1, coalesce=True)
        chat = self.config[ChatConfig]
        if chat.digest and self.outbox is not None:
            hour, minute = chat.digest_at.split(":")
            self.apscheduler.add_job(self._quiet(self.digest), CronTrigger(
                hour=int(hour), minute=int(minute), timezone=ZoneInfo(chat.timezone)),
                id="digest", max_instances=1, coalesce=True)
        self.apscheduler.start()

    async def digest(self) -> bool:
        """Owe [chat] digest a summary of the last 24 hours: once a day, however many
        services run (the outbox key is the day). False: owed already."""
        chat = self.config[ChatConfig]
        platform, _, conversation = chat.digest.partition(":")
        lang = chat.language_at(chat.digest, platform) or chat.language
        now = self.clock()
        day = datetime.fromtimestamp(now, ZoneInfo(chat.timezone)).date().isoformat()
        d = await self.queue.digest(now - 86400, now)
        finished, active = d.finished, await self.queue.active_counts()
        text = say("digest", lang, batches=d.batches,
                   **{s.value: finished.get(s, 0) for s in TERMINAL},
                   queued=active.queued,
                   mean=say("digest_mean", lang, seconds=d.mean_seconds)
                   if d.mean_seconds is not None else "",
                   paused=say("digest_paused", lang) if await self.queue.paused() else "")
        if d.top:
            text += say(
                "digest_top", lang, who=", ".join(f"{who} ({n:,})" for who, n in d.top))
        assert self.outbox is not None
        return await self.outbox.put(digest_key(chat.digest, day), platform=platform,
                                     conversation=conversation, thread=None, kind="text",
                                     payload={"text": text, "lang": lang})

    async def retention(self) -> list[int]:
        """Forget batches finished more than [queue] retention_days ago, outputs included
        (and executors stopped or lost over a day ago)."""
        await Workers.of(self.queue).forget(self.clock() - 86400)
        days = self.config[QueueConfig].retention_days
        if not days:
            return []
        done = await prune(self.queue, self.outbox, self.store, self.clock() - days * 86400)
        if done.batches or done.events or done.messages:
            log.info("retention: forgot %d batches, %d other events and %d chat messages "
                     "finished over %g days ago", len(done.batches), done.events,
                     done.messages, days)
        return done.batches

    def stop(self) -> None:
        self.stopping = True
        if self.apscheduler is not None and self.apscheduler.running:
            self.apscheduler.shutdown(wait=False)

    async def tick(self) -> list[int]:
        """Queue every schedule whose time has come; returns the batches queued."""
        now = self.clock()
        queued = []
        for row in await self.app.schedules.all():
            when = next_fire(row.cron, row.timezone, row.fired_at)
            if when is None or when.timestamp() > now:
                continue
            if not await self.app.schedules.claim(row.id, now):
                continue  # another service queued this firing
            try:
                batch = await self.app.fire(row, when.timestamp())
            except Exception as e:
                if connection_lost(e):  # (the tick tells the outage, once)
                    raise
                log.exception("schedule %s could not fire", row.id)
                continue
            if batch is not None:
                queued.append(batch)
        return queued
