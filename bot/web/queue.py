"""The queue as a whole: GET /queue, pause and resume, and /healthz beside them.

/queue is computed once for every caller asking meanwhile (bot.web.shared); /healthz
never waits on the database: it answers from the latest /queue summary, and 503 while
this process finds PostgreSQL unreachable (storage.db.Outage: the last statement or
connection of any part of the service failed to reach it), saying since when.
"""

from __future__ import annotations

import time
from typing import Annotated

from aiohttp import web
from msgspec import UNSET, Meta, Struct, UnsetType

from bot.app.application import App
from bot.app.permissions import Action
from bot.web.callers import Callers
from bot.web.http import respond
from bot.web.routes import Answer, Route
from bot.web.shared import Shared
from bot.web.workers import Worker
from storage.records import RunningJob as Running
from storage.workers import Workers

HEALTH_FRESH = 1.0  # seconds before /healthz asks for a fresher summary


class RunningJob(Struct):
    """A job running now, with its batch's template."""
    id: int
    batch: int
    row: int
    template: str
    submitter: str
    started_at: float | None

    @classmethod
    def of(cls, j: Running) -> RunningJob:
        return cls(id=j.id, batch=j.batch_id, row=j.row, template=j.template,
                   submitter=j.submitter, started_at=j.started_at)


class Queue(Struct):
    """The whole queue at one moment."""
    paused: bool
    changed_by: str | None  # who paused or resumed it last
    queued: int
    running: int
    counts: Annotated[dict[str, dict[str, int]],
                      Meta(description="jobs by status, then by priority")]
    eta_seconds: float | None  # until the last queued job is done; null before any ran
    jobs: list[RunningJob]
    workers: Annotated[list[Worker], Meta(description="executors not stopped")]
    seq: Annotated[int, Meta(description="the last event's sequence number: "
                                         "/events?after=seq streams what happens from now")]


class Paused(Struct):
    paused: bool
    changed: bool  # false: it was so already


class Health(Struct):
    """/healthz: ok, with the latest /queue summary's figures (`age` seconds old) once
    there is one; or (503) unavailable, the database unreachable since `since` (Unix
    time), for `down_seconds`, with the figures as last read."""
    status: str
    database: str | UnsetType = UNSET  # "unreachable" (only said when it is)
    since: float | UnsetType = UNSET
    down_seconds: float | UnsetType = UNSET
    paused: bool | UnsetType = UNSET
    queued: int | UnsetType = UNSET
    running: int | UnsetType = UNSET
    age: float | UnsetType = UNSET


class QueueRoutes:
    def __init__(self, app: App, callers: Callers):
        self.app, self.queue, self.callers = app, app.queue, callers
        self.workers = Workers.of(app.queue)
        self.summary = Shared(self._summary)  # /queue and /healthz, shared

    def routes(self) -> list[Route]:
        paused = {200: Answer("OK", Paused)}
        return [
            Route("GET", "/queue", self.status,
                  "Queue state: paused, counts, running jobs, executors, ETA",
                  {200: Answer("OK", Queue)}),
            Route("POST", "/queue/pause", self.pause, "Pause (admins)", paused),
            Route("POST", "/queue/resume", self.resume, "Resume (admins)", paused)]

    async def status(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.QUEUE)
        return respond(await self.summary.get())

    async def _summary(self) -> Queue:
        seq = await self.queue.last_event_seq()  # first: the stream from here misses nothing
        state = await self.queue.state()
        active = await self.queue.active_counts()
        return Queue(
            paused=state.paused, changed_by=state.changed_by, queued=active.queued,
            running=active.running, counts=await self.queue.counts(),
            eta_seconds=await self.queue.eta(active.queued - 1) if active.queued else 0,
            jobs=[RunningJob.of(j) for j in await self.queue.running()],
            workers=[Worker.of(w) for w in await self.workers.all() if w.state != "stopped"],
            seq=seq)

    async def healthz(self, request: web.Request) -> web.Response:
        """Liveness: never waits on the database. It answers from the last /queue
        summary and refreshes that in the background; 503 while this process finds the
        database unreachable (storage.db.Outage), saying since when."""
        self.summary.refresh_soon(older_than=HEALTH_FRESH)  # (it also finds an outage's end)
        latest = self.summary.latest
        health = Health("ok")
        if latest is not None:
            health = Health("ok", paused=latest.paused, queued=latest.queued,
                            running=latest.running,
                            age=round(time.monotonic() - self.summary.latest_at, 3))
        outage = self.queue.db.outage
        since = outage.since if outage is not None else None
        if outage is None or since is None:
            return respond(health)
        health.status, health.database = "unavailable", "unreachable"
        health.since, health.down_seconds = round(since, 3), round(outage.seconds, 3)
        return respond(health, status=503)

    async def pause(self, request: web.Request) -> web.Response:
        return respond(Paused(True, await self.app.pause(await self.callers.who(request))))

    async def resume(self, request: web.Request) -> web.Response:
        return respond(Paused(False, await self.app.resume(await self.callers.who(request))))
