"""GET /templates and /templates/{name}: what a sheet for each may say."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from msgspec import Struct

from bot.app.application import App
from bot.app.permissions import Action
from bot.web.callers import Callers
from bot.web.http import ApiError, respond
from bot.web.routes import Answer, Param, Route
from templates import graph


class TemplateParam(Struct):
    """A column a sheet may have."""
    name: str
    type: str
    required: bool  # and without a default
    default: Any
    allowed: str  # its choices or range, for people: "1:1, 4:5" or "1..100" (or "")
    aliases: list[str]
    help: str


class Template(Struct):
    name: str
    description: str
    params: list[TemplateParam]

    @classmethod
    def of(cls, t: graph.Template) -> Template:
        return cls(t.name, t.description, [
            TemplateParam(p.name, p.type, p.required and p.default is None, p.default,
                          p.allowed, list(p.aliases), p.help) for p in t.params.values()])


class TemplateList(Struct):
    templates: list[Template]


class TemplateRoutes:
    def __init__(self, app: App, callers: Callers):
        self.templates, self.callers = app.templates, callers

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/templates", self.listing, "Templates and their parameters",
                  {200: Answer("OK", TemplateList)}),
            Route("GET", "/templates/{name}", self.one, "One template",
                  {200: Answer("OK", Template)}, errors=(404,),
                  params=(Param("name", "path", str),))]

    async def listing(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.TEMPLATES)
        return respond(TemplateList([Template.of(t) for _, t in sorted(self.templates.items())]))

    async def one(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.TEMPLATE)
        name = request.match_info["name"]
        t = self.templates.get(name)
        if t is None:
            raise ApiError(404, "no_template", f"no template {name!r}",
                           templates=sorted(self.templates))
        return respond(Template.of(t))
