"""Schedules, the twin of chat's /schedule, /schedules and /unschedule: a sheet run on a
crontab line in a time zone."""

from __future__ import annotations

from typing import Annotated

from aiohttp import web
from msgspec import Meta, Struct

from bot.app import values
from bot.app.application import App, Scheduled
from bot.app.permissions import Action
from bot.intake.check import SheetFile
from bot.web.callers import Callers
from bot.web.http import ApiError, in_path, iso, problems, respond
from bot.web.routes import Answer, Binary, Label, Param, Route, Whole
from bot.web.uploads import form_files, read_form


class Schedule(Struct):
    id: int
    cron: str
    timezone: str
    template: str
    sheet: str | None  # the sheet's name as sent
    submitter: str
    next: str | None  # the next run, ISO 8601 in its time zone


class ScheduleList(Struct):
    schedules: list[Schedule]


class NewSchedule(Struct):
    """A schedule made: its id and its first run."""
    id: int
    next: str | None


class Removed(Struct):
    removed: int  # the schedule's id


class ScheduleForm(Struct, kw_only=True):
    """multipart/form-data: the crontab line, the sheet and the pictures it names."""
    cron: Annotated[str, Meta(examples=["0 9 * * 1-5"])]
    timezone: str = "UTC"  # IANA
    template: str
    priority: Label = "normal"
    sheet: Binary
    pictures: list[Binary] = []


class ScheduleRoutes:
    def __init__(self, app: App, callers: Callers):
        self.app, self.config, self.callers = app, app.config, callers

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/schedules", self.listing, "Recurring batches with their next run",
                  {200: Answer("OK", ScheduleList)}),
            Route("POST", "/schedules", self.make, "Run a sheet on a crontab line (admins)",
                  {201: Answer("scheduled", NewSchedule)}, errors=(400, 413, 415, 422),
                  body={"multipart/form-data": ScheduleForm}),
            Route("DELETE", "/schedules/{id}", self.remove, "Remove a schedule (admins)",
                  {200: Answer("OK", Removed)}, errors=(404,),
                  params=(Param("id", "path", Whole, "schedule id"),))]

    async def listing(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.SCHEDULES)
        now = self.app.clock()
        return respond(ScheduleList([
            Schedule(r.id, r.cron, r.timezone, r.template, r.meta.get("sheet"), r.submitter,
                     iso(values.next_fire(r.cron, r.timezone, max(r.fired_at, now))))
            for r in await self.app.schedules.all()]))

    async def make(self, request: web.Request) -> web.Response:
        who = await self.callers.allowed(request, Action.SCHEDULE)  # before the body is read
        form = await read_form(request, self.config)
        sheet = form.get("sheet")
        if not isinstance(sheet, tuple):
            raise ApiError(422, "no_rows", "a schedule needs a sheet file (multipart field sheet)")
        made = await self.app.schedule(
            who, str(form.get("cron") or ""), str(form.get("timezone") or "UTC"),
            str(form.get("template") or ""), SheetFile(*sheet), form_files(form),
            priority=values.priority(str(form.get("priority") or "normal")))
        if not isinstance(made, Scheduled):
            raise ApiError(422, "invalid_sheet", made.report(),
                           problems=problems(made.problems()))
        return respond(NewSchedule(made.id, iso(made.next)), status=201)

    async def remove(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        schedule_id = in_path(request, "id")
        await self.app.unschedule(who, schedule_id)
        return respond(Removed(schedule_id))
