"""GET /workers: every executor the registry knows, on any host, stopped ones included."""

from __future__ import annotations

from typing import Annotated

from aiohttp import web
from msgspec import Meta, Struct

from bot.app.application import App
from bot.app.permissions import Action
from bot.web.callers import Callers
from bot.web.http import respond
from bot.web.routes import Answer, Route
from storage.records import DOINGS, WorkerInfo
from storage.workers import STATES, Workers


class Doing(Struct):
    """What keeps an executor from its jobs now, and the models (or server) it concerns."""
    what: Annotated[str, Meta(extra_json_schema={"enum": list(DOINGS)})]
    models: list[str]


class Worker(Struct):
    """An executor as its last heartbeat described it."""
    id: str
    host: str
    pid: int
    device: str
    version: str
    state: Annotated[str, Meta(extra_json_schema={"enum": list(STATES)})]
    job: int | None
    memory_used: int | None
    memory_total: int | None
    models: list[str]  # resident on its device
    allow: list[str] | None  # what it may run; null: anything
    jobs_run: int
    doing: Doing | None
    cannot_run: Annotated[dict[str, str], Meta(description=(
        "a ComfyUI executor's templates its server lacks a node class or file for, and what"))]
    started_at: float
    seen_at: float

    @classmethod
    def of(cls, w: WorkerInfo) -> Worker:
        doing = Doing(*w.doing) if w.doing else None
        return cls(id=w.id, host=w.host, pid=w.pid, device=w.device, version=w.version,
                   state=w.state, job=w.job_id, memory_used=w.memory_used,
                   memory_total=w.memory_total, models=w.models, allow=w.allow,
                   jobs_run=w.stats.get("jobs", 0), doing=doing, cannot_run=w.cannot_run,
                   started_at=w.started_at, seen_at=w.seen_at)


class WorkerList(Struct):
    workers: list[Worker]


class WorkerRoutes:
    def __init__(self, app: App, callers: Callers):
        self.callers, self.workers = callers, Workers.of(app.queue)

    def routes(self) -> list[Route]:
        return [Route("GET", "/workers", self.listing,
                      "Executors on every host: device, memory, resident models, what each "
                      "runs, and idle, busy, stopped or lost", {200: Answer("OK", WorkerList)})]

    async def listing(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.QUEUE)
        return respond(WorkerList([Worker.of(w) for w in await self.workers.all()]))

