"""GET /templates and /templates/{name}: what a sheet for each may say; POST /templates:
a ComfyUI workflow (API or UI format, or a PNG/WebP ComfyUI saved) made a template
(admins; bot.app.importer)."""

from __future__ import annotations

from typing import Annotated, Any

from aiohttp import web
from msgspec import Meta, Struct

from bot.app.application import App
from bot.app.permissions import Action
from bot.web.callers import Callers
from bot.web.http import ApiError, flag, respond
from bot.web.routes import Answer, Param, Route
from bot.web.uploads import read_form
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
    choices: list[str] = []  # the values it takes, where it takes only these
    minimum: float | None = None
    maximum: float | None = None
    picture: bool = False  # a cell names a picture (sent with the sheet, or in assets)


class Template(Struct):
    name: str
    description: str
    params: list[TemplateParam]

    @classmethod
    def of(cls, t: graph.Template) -> Template:
        return cls(t.name, t.description, [
            TemplateParam(p.name, p.type, p.required and p.default is None, p.default,
                          p.allowed, list(p.aliases), p.help, list(p.choices), p.min, p.max,
                          p.picture) for p in t.params.values()])


class TemplateList(Struct):
    templates: list[Template]


class WorkflowForm(Struct, kw_only=True):
    """multipart/form-data: the template's name and the workflow file."""
    name: Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]
    workflow: Annotated[str, Meta(description=(
        "a ComfyUI workflow: API format, UI format (converted with the first of [comfyui] "
        "servers), or a PNG/WebP ComfyUI saved"), extra_json_schema={"format": "binary"})]
    replace: bool = False  # replace a template of that name


class Imported(Struct):
    template: Template
    version: int
    columns: Annotated[list[str], Meta(description="what each column sets")]
    source: Annotated[str, Meta(description="what the file held: the API format, the UI "
                                            "format, a picture's workflow")]


class TemplateRoutes:
    def __init__(self, app: App, callers: Callers):
        self.app, self.templates, self.callers = app, app.templates, callers

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/templates", self.listing, "Templates and their parameters",
                  {200: Answer("OK", TemplateList)}),
            Route("GET", "/templates/{name}", self.one, "One template",
                  {200: Answer("OK", Template)}, errors=(404,),
                  params=(Param("name", "path", str),)),
            Route("POST", "/templates", self.add, "A ComfyUI workflow made a template (admins)",
                  {201: Answer("installed", Imported)}, errors=(400, 409, 413, 415, 422),
                  body={"multipart/form-data": WorkflowForm})]

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

    async def add(self, request: web.Request) -> web.Response:
        who = await self.callers.allowed(request, Action.TEMPLATE)  # (admins: the app says)
        form = await read_form(request, self.app.config)
        files = form.get("files") or {}
        if len(files) != 1:
            raise ApiError(422, "no_workflow", "send one workflow file (multipart field "
                                               "workflow) and the template's name")
        ((file, raw),) = files.items()
        done = await self.app.import_template(who, str(form.get("name") or ""), file, raw,
                                              replace=flag(form.get("replace")))
        return respond(Imported(Template.of(done.template), done.template.number,
                                done.columns, done.how), status=201)
