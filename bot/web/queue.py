"""The queue as a whole: GET /queue, pause and resume, the leases an operator paged for a
hung batch looks at (and hands back), and /healthz beside them.

/queue is computed once for every caller asking meanwhile (bot.web.shared); /healthz
never waits on the database: it answers from the latest /queue summary, and 503 while
this process finds PostgreSQL unreachable (storage.db.Outage: the last statement or
connection of any part of the service failed to reach it), saying since when.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

from aiohttp import web
from msgspec import UNSET, Meta, Struct, UnsetType

from bot.app.application import App
from bot.app.estimates import Held, held_by
from bot.app.leases import Lease
from bot.app.permissions import Action
from bot.web.callers import Callers
from bot.web.http import ApiError, in_path, respond
from bot.web.routes import Answer, Param, Route, Whole
from bot.web.shared import Shared
from bot.web.workers import Worker
from storage.config import QueueConfig
from storage.records import RunningJob as Running
from storage.states import NEXT, Status
from storage.workers import Workers

HEALTH_FRESH = 1.0  # seconds before /healthz asks for a fresher summary


class RunningJob(Struct):
    """A job an executor holds, with its batch's template: running, or next."""
    id: int
    batch: int
    row: int
    template: str
    submitter: str
    started_at: float | None
    state: Annotated[str, Meta(description=(
        "running (its executor is on it now) or next (its executor started it with its "
        "group, or claimed it ahead, and is not on it yet)"))] = Status.RUNNING.value
    executor: str | None = None  # the executor holding it

    @classmethod
    def of(cls, j: Running) -> RunningJob:
        return cls(id=j.id, batch=j.batch_id, row=j.row, template=j.template,
                   submitter=j.submitter, started_at=j.started_at,
                   state=Status.RUNNING.value if j.working else NEXT, executor=j.lease_owner)


class Queue(Struct):
    """The whole queue at one moment."""
    paused: bool
    changed_by: str | None  # who paused or resumed it last
    queued: int
    running: int
    counts: Annotated[dict[str, dict[str, int]],
                      Meta(description="jobs by status, then by priority; next: jobs an "
                                       "executor holds but is not on yet, counted there and "
                                       "not as queued or running")]
    eta_seconds: float | None  # until the last queued job is done; null before any ran
    held: Annotated[Held | None, Meta(description=(
        "what keeps queued jobs from starting, where something does: paused, or "
        "no_executor (none is running); then eta_seconds promises nothing"))]
    jobs: Annotated[list[RunningJob], Meta(description="the jobs executors hold: running "
                                                       "first, then next")]
    workers: Annotated[list[Worker], Meta(description="executors not stopped")]
    seq: Annotated[int, Meta(description="the last event's sequence number: "
                                         "/events?after=seq streams what happens from now")]


class Paused(Struct):
    paused: bool
    changed: bool  # false: it was so already


class LeasedJob(Struct):
    """A job under a lease: claimed ahead (not started), or running."""
    id: int
    batch: int
    row: int
    state: Annotated[str, Meta(description="ahead (claimed ahead, still queued) or running")]
    attempts: int
    holder: Annotated[str | None, Meta(description="the executor holding its lease")]
    holder_state: Annotated[str, Meta(description="the holder in the worker registry: idle, "
                                                  "busy, stopped, lost, or unknown")]
    quiet_seconds: Annotated[float, Meta(description="since its last sign of life: the claim "
                                                     "(ahead), the last progress step or the "
                                                     "start (running)")]
    lease_expires_at: float | None
    stuck: bool
    why: Annotated[str | None, Meta(description="quiet (no sign of life for [queue] "
                                                "stuck_after seconds) or holder_gone")] = None

    @classmethod
    def of(cls, lease: Lease) -> LeasedJob:
        job = lease.job
        return cls(id=job.id, batch=job.batch_id, row=job.row,
                   state="ahead" if job.ahead else Status.RUNNING.value, attempts=job.attempts,
                   holder=job.lease_owner, holder_state=lease.holder_state,
                   quiet_seconds=round(job.idle_seconds, 3),
                   lease_expires_at=job.lease_expires_at, stuck=lease.stuck, why=lease.why)


class Leases(Struct):
    """Every job under a lease, the quietest first."""
    stuck_after: Annotated[float, Meta(description="[queue] stuck_after, in seconds")]
    stuck: Annotated[int, Meta(description="how many look stuck")]
    jobs: list[LeasedJob]


class MoveBody(Struct):
    to: Literal["front", "back"]  # of the submitter's waiting jobs, in its priority class


class Moved(Struct):
    moved: int  # jobs that took new turns


class HandBack(Struct, forbid_unknown_fields=True):
    """Which jobs to hand back: these, or (stuck) every one that looks stuck."""
    jobs: Annotated[list[Whole], Meta(max_length=1000)] = []
    stuck: bool = False


class HandedBack(Struct):
    handed_back: Annotated[list[int], Meta(description="the jobs put back in the queue (a job "
                                                       "no longer leased is left as it is)")]


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
            Route("POST", "/queue/resume", self.resume, "Resume (admins)", paused),
            Route("GET", "/queue/leases", self.leases,
                  "Every job under a lease, the quietest first, those that look stuck "
                  "marked (admins)", {200: Answer("OK", Leases)}),
            Route("POST", "/queue/hand-back", self.hand_back,
                  "Put leased jobs back in the queue, no attempt used: their holders stop "
                  "them at their next heartbeat (admins)",
                  {200: Answer("OK", HandedBack)}, errors=(400, 413, 422),
                  body={"application/json": HandBack}),
            Route("POST", "/batches/{id}/move", self.move_batch,
                  "Move a batch's waiting jobs to the front or the back of its submitter's "
                  "waiting jobs (admins): round-robin between submitters stays as it was",
                  {200: Answer("OK", Moved)}, errors=(400, 404, 409, 413, 422),
                  params=(Param("id", "path", Whole, "batch id"),),
                  body={"application/json": MoveBody}),
            Route("POST", "/jobs/{id}/move", self.move_job,
                  "Move one waiting job to the front or the back of its submitter's waiting "
                  "jobs (admins)", {200: Answer("OK", Moved)}, errors=(400, 404, 409, 413, 422),
                  params=(Param("id", "path", Whole, "job id"),),
                  body={"application/json": MoveBody})]

    async def status(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.QUEUE)
        return respond(await self.summary.get())

    async def _summary(self) -> Queue:
        seq = await self.queue.last_event_seq()  # first: the stream from here misses nothing
        state = await self.queue.state()
        active = await self.queue.active_counts()
        return Queue(
            paused=state.paused, changed_by=state.changed_by, queued=active.queued,
            running=active.running, counts=await self.queue.counts(next_apart=True),
            eta_seconds=await self.queue.eta(active.queued - 1) if active.queued else 0,
            held=await held_by(self.queue) if active.queued else None,
            jobs=[RunningJob.of(j) for j in await self.queue.now_and_next()],
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

    async def leases(self, request: web.Request) -> web.Response:
        found = await self.app.leases(await self.callers.who(request))
        return respond(Leases(stuck_after=self.app.config[QueueConfig].stuck_after,
                              stuck=sum(lease.stuck for lease in found),
                              jobs=[LeasedJob.of(lease) for lease in found]))

    async def move_batch(self, request: web.Request) -> web.Response:
        return await self._move(request, "batch")

    async def move_job(self, request: web.Request) -> web.Response:
        return await self._move(request, "job")

    async def _move(self, request: web.Request, what: str) -> web.Response:
        who, body = await self.callers.asking(request, MoveBody, Action.MOVE)
        moved = await self.app.move(who, body.to, **{what: in_path(request, "id")})
        return respond(Moved(moved))

    async def hand_back(self, request: web.Request) -> web.Response:
        who, body = await self.callers.asking(request, HandBack, Action.DOCTOR)
        if not body.stuck and not body.jobs:
            await self.app.permit(who, Action.DOCTOR)
            raise ApiError(422, "nothing_to_hand_back", "name the jobs, or send stuck: true")
        handed = await self.app.hand_back(who, None if body.stuck else body.jobs)
        return respond(HandedBack(handed))
