"""GET /me: who the caller is, what they may do and the priorities they may ask for, so
a script or the dashboard offers only those (bot.app.permissions says which)."""

from __future__ import annotations

from aiohttp import web
from msgspec import Struct

from bot.app.application import App
from bot.app.permissions import Action, Who, allowed_actions
from bot.web.callers import Callers
from bot.web.http import respond
from bot.web.routes import Answer, Label, Route


class Caller(Struct, kw_only=True):
    """Who asks, as the API and the dashboard see them."""
    user: str
    role: str
    may: list[str]  # the actions their role allows (the dashboard shows their buttons)
    priorities: list[Label]  # those they may submit with, the most urgent first
    max_priority: Label | None  # the most urgent of those; null: they may not submit
    edit_model: str | None = None  # what an image is changed by a sentence with; null: none
    segmentation_model: str | None = None  # what finds a region named in words; null: none


async def caller(app: App, who: Who) -> Caller:
    role, priorities = await app.priorities(who)
    return Caller(user=who.id, role=role.value, may=allowed_actions(role),
                  priorities=[p.label for p in priorities],
                  max_priority=priorities[0].label if priorities else None,
                  edit_model=app.edit_model(), segmentation_model=app.segmentation_model())


class MeRoutes:
    def __init__(self, app: App, callers: Callers):
        self.app, self.callers = app, callers

    def routes(self) -> list[Route]:
        return [Route("GET", "/me", self.me,
                      "Who you are: your role, what you may do, the priorities you may use",
                      {200: Answer("OK", Caller)})]

    async def me(self, request: web.Request) -> web.Response:
        return respond(await caller(self.app, await self.callers.allowed(request,
                                                                         Action.STATUS)))
