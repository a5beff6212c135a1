"""Iterating on finished images, the twin of chat's again, vary, upscale, edit, keep and
/picks (bot.app.iterate): an action on a job's image queues a new batch in its parent
batch's thread; a rating keeps or rejects an image; a job's lineage is what it was made
from and what was made from it; a batch's picks are the kept images of it and of all
made from it, as JSON, a results sheet and a contact sheet."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from aiohttp import web
from msgspec import Meta, Struct

from bot.app.application import App
from bot.app.iterate import MAX_COUNT, MAX_REGION, ActionRequest
from bot.app.permissions import Action, Who, needs
from bot.app.results import XLSX, write_picks
from bot.app.review import RATINGS
from bot.settings import IntakeConfig
from bot.web.batches import BATCH_ID, IDEMPOTENCY_KEY
from bot.web.callers import Callers
from bot.web.http import (
    PREFIX,
    SMALL_BODY,
    ApiError,
    in_path,
    json_body,
    respond,
    stored_file,
)
from bot.web.jobs import JOB_ID, ActionName, Job
from bot.web.routes import Answer, Param, Route
from storage.config import Config
from templates.actions import ACTIONS, UPSCALE_MAX, VARY_STRENGTH
from templates.settings import TemplatesConfig
from templates.signatures import MAX_MARGIN

PICKS_XLSX, PICKS_PNG = "picks.xlsx", "picks.png"
def _taking(parameter: str) -> str:
    """The actions that take `parameter` ("again, vary"), from the table."""
    return ", ".join(s.name for s in ACTIONS.values() if parameter in s.takes) or "none"


FIRST_TO_ACT = min(ACTIONS, key=lambda name: needs(name).rank)  # refused first, if anything
RatingName = Annotated[str, Meta(extra_json_schema={"enum": list(RATINGS)})]


INSTRUCTION = (f"{_taking('instruction')}: a sentence the image itself is changed by on an "
               "edit model ('把背景换成海滩', 'make the bottle matte black'), instead of values")


def action_body_limit(config: Config) -> int:
    """An action's body: its fields, and a mask picture in base64 (4 bytes for 3) at the
    size a sheet's picture may have ([intake] max_image_mb)."""
    return SMALL_BODY + int(config[IntakeConfig].max_image_mb * 2**20 * 4 / 3)


class ActionBody(Struct, kw_only=True):
    """What to make from a finished job's image (JSON). Values that do not fit are
    refused as chat refuses them (422, or 409 for an image not there to use)."""
    action: ActionName
    count: Annotated[int, Meta(
        description=f"{_taking('count')}: how many new images; the others make one",
        extra_json_schema={"minimum": 1, "maximum": MAX_COUNT})] = 1
    values: Annotated[dict[str, Any], Meta(description=(
        f"{_taking('values')}: the changes, by parameter or column name, each read as a "
        "sheet's cell would be; a seed left out stays"))] = {}
    factor: Annotated[float, Meta(description=(
        f"{_taking('factor')}: how many times larger, above 1 and at most "
        f"{UPSCALE_MAX:g}"))] = 2.0
    strength: Annotated[float | None, Meta(description=(
        f"{_taking('strength')} (diffusers templates): how far from the image, 0 to 1; "
        f"null: the template's own, else {VARY_STRENGTH}"))] = None
    instruction: Annotated[str, Meta(description=INSTRUCTION)] = ""
    model: Annotated[str | None, Meta(description=(
        "the [models] name of the model: an instruction's edit model (null: [templates] "
        "edit_model, else the first whose family edits); a repaint's or an extend's "
        "(null: [templates] fill_model, else the image's own where it inpaints, else the "
        "first that does)"))] = None
    mask: Annotated[bytes | None, Meta(description=(
        f"{_taking('mask')}: a PNG, JPEG or WebP, base64: white where to repaint, black "
        "(or transparent) where to keep; the image's proportions (resized to it)"))] = None
    region: Annotated[str, Meta(description=(
        f"{_taking('region')}: where to repaint, in words ('the bottle', '瓶子'), found by "
        "[templates] segmentation_model (a CLIPSeg); with a mask, both are repainted"),
        max_length=MAX_REGION)] = ""
    left: Annotated[int, Meta(description=f"{_taking('margins')}: px added on the left",
                              ge=0, le=MAX_MARGIN)] = 0
    right: Annotated[int, Meta(ge=0, le=MAX_MARGIN)] = 0
    top: Annotated[int, Meta(ge=0, le=MAX_MARGIN)] = 0
    bottom: Annotated[int, Meta(ge=0, le=MAX_MARGIN)] = 0
    aspect: Annotated[str | None, Meta(description=(
        f"{_taking('margins')}: the shape the canvas grows to around the image, "
        "'W:H' ('9:16'), after the margins"))] = None
    wait_for_executor: bool = False  # queue even if no running executor can run the jobs


class RatingBody(Struct):
    """keep or reject a finished image, or null (or unkeep) to take the rating back."""
    rating: RatingName | None


class Acted(Struct):
    """What an action queued: a new batch in the parent batch's thread."""
    batch: int
    created: bool  # false: asked before (the same Idempotency-Key, or a double click)
    action: ActionName
    parent: int  # the job whose image it was made from
    jobs: list[Job]


class ActedOnKept(Struct):
    """What an action on a batch's kept images queued: one new batch in its thread."""
    batch: int
    created: bool
    action: ActionName
    of_batch: int  # whose kept images (and those of all made from its images) it used
    kept: int  # how many images it was made from
    jobs: list[Job]  # each linked to its image (parent_job_id)


class Lineage(Struct):
    """What a job's image was made from, and what was made from it."""
    ancestors: Annotated[list[Job], Meta(description=(
        "its parent first, then the parent's, back to the sheet's row"))]
    children: list[Job]  # made from this image, oldest first


class PickFiles(Struct):
    results: str  # the kept images' rows: values, seed, model, parent
    contact: str  # their contact sheet (404 while nothing is kept)


class Picks(Struct):
    """The kept images of a batch and of all made from its images."""
    batch: int  # the batch they began in (a batch made by an action began in its parent's)
    jobs: list[Job]
    files: PickFiles


class ValueTally(Struct):
    value: Any  # a value the sweep tried
    kept: int
    rejected: int
    images: int  # that finished with it, rated or not
    keep_rate: float | None  # kept ÷ rated; null when none was rated


class AxisRefinement(Struct):
    param: str
    values: list[ValueTally]
    best: Any | None  # the best-rated value; null when none was rated
    next: list[Any]  # the values of the next sweep


class Refinement(Struct):
    """A sweep's ratings per swept value, and the next, narrower sweep."""
    batch: int
    rated: int
    axes: list[AxisRefinement]
    vary: list[str]  # the next sweep, as the submit's `vary` field
    seeds: int
    command: str  # the same, as the chat command line


class Tally(Struct):
    """An A/B batch's keeps by row: rows each version won, ties, rows not rated."""
    batch: int
    variants: list[str]  # "A product_main@3", "B product_main@4"
    won: dict[str, int]  # variant -> rows where its image was kept and the other's not
    ties: int  # both kept, or neither
    unrated: int


class IterateRoutes:
    def __init__(self, app: App, callers: Callers):
        self.app, self.queue, self.callers = app, app.queue, callers
        self.config, self.store, self.templates = app.config, app.store, app.templates

    def routes(self) -> list[Route]:
        picks_file = {200: Answer("the file", files=(XLSX,))}
        return [
            Route("POST", "/jobs/{id}/actions", self.act,
                  "Again, vary, upscale or edit a finished job's image: a new batch",
                  {201: Answer("queued", Acted),
                   200: Answer("asked before (the same Idempotency-Key, or the same ask a "
                               "moment ago): that batch", Acted)},
                  errors=(400, 404, 409, 413, 422, 429),
                  params=(JOB_ID, Param("Idempotency-Key", "header", IDEMPOTENCY_KEY,
                                        "the same key again returns the first batch")),
                  body={"application/json": ActionBody}),
            Route("POST", "/batches/{id}/kept/actions", self.act_on_kept,
                  "The action on every kept image of a batch (edit them all by one sentence): "
                  "a new batch, each job linked to its image",
                  {201: Answer("queued", ActedOnKept),
                   200: Answer("asked before (the same Idempotency-Key, or the same ask a "
                               "moment ago): that batch", ActedOnKept)},
                  errors=(400, 404, 409, 413, 422, 429),
                  params=(BATCH_ID, Param("Idempotency-Key", "header", IDEMPOTENCY_KEY,
                                          "the same key again returns the first batch")),
                  body={"application/json": ActionBody}),
            Route("PUT", "/jobs/{id}/rating", self.rate,
                  "Keep or reject a finished image, or take its rating back",
                  {200: Answer("the job as rated", Job)}, errors=(400, 404, 409, 413, 422),
                  params=(JOB_ID,), body={"application/json": RatingBody}),
            Route("GET", "/jobs/{id}/lineage", self.lineage,
                  "What a job's image was made from, and what was made from it",
                  {200: Answer("OK", Lineage)}, errors=(404,), params=(JOB_ID,)),
            Route("GET", "/batches/{id}/picks", self.picks,
                  "The kept images of a batch and of all made from its images",
                  {200: Answer("OK", Picks)}, errors=(404,), params=(BATCH_ID,)),
            Route("GET", f"/batches/{{id}}/{PICKS_XLSX}", self.picks_sheet,
                  "The picks' results sheet: each kept image's values, seed, model, parent",
                  picks_file, errors=(404,), params=(BATCH_ID,)),
            Route("GET", "/batches/{id}/refine", self.refine,
                  "A sweep's keep rate per swept value, and the next sweep around the best",
                  {200: Answer("OK", Refinement)}, errors=(404, 409), params=(BATCH_ID,)),
            Route("GET", "/batches/{id}/ab", self.ab,
                  "An A/B batch's tally: the rows each version won by keeps",
                  {200: Answer("OK", Tally)}, errors=(404, 409), params=(BATCH_ID,)),
            Route("GET", f"/batches/{{id}}/{PICKS_PNG}", self.picks_contact,
                  "The picks' contact sheet (404 while nothing is kept)",
                  {200: Answer("the file", files=("image/png",))}, errors=(404,),
                  params=(BATCH_ID,))]

    # --- changing: each a call to the application layer --------------------------------
    async def _asked(self, request: web.Request, on: str) -> tuple[Who, ActionRequest]:
        """Who asks, and the ask: the body, the Idempotency-Key (a retry with the same key
        answers the first batch), `on` what it names (job:N, kept:N)."""
        who = await self.callers.who(request)
        key = request.headers.get("Idempotency-Key")
        try:
            if key is not None and not 0 < len(key) <= 150:
                raise ApiError(400, "bad_idempotency_key",
                               "Idempotency-Key is 1 to 150 characters")
            body = await json_body(request, ActionBody, action_body_limit(self.app.config))
        except ApiError:
            await self.app.permit(who, FIRST_TO_ACT)  # who may not act hears that first
            raise
        return who, ActionRequest(
            body.action, count=body.count, values=body.values, factor=body.factor,
            strength=body.strength, instruction=body.instruction, model=body.model,
            mask=body.mask, region=body.region, left=body.left, right=body.right, top=body.top,
            bottom=body.bottom, aspect=body.aspect, wait_for_executor=body.wait_for_executor,
            key=f"api:{who.user}:{on}:{in_path(request, 'id')}:{key}" if key else None)

    async def act(self, request: web.Request) -> web.Response:
        who, asked = await self._asked(request, "job")
        acted = await self.app.act(who, in_path(request, "id"), asked)
        return respond(Acted(acted.batch_id, acted.created, acted.action, acted.parent.id,
                             [Job.of(j, self.templates) for j in acted.jobs]),
                       status=201 if acted.created else 200)

    async def act_on_kept(self, request: web.Request) -> web.Response:
        who, asked = await self._asked(request, "kept")
        on = await self.app.act_on_kept(who, in_path(request, "id"), asked)
        return respond(ActedOnKept(on.batch_id, on.created, on.action, on.of_batch, on.kept,
                                   [Job.of(j, self.templates) for j in on.jobs]),
                       status=201 if on.created else 200)

    async def rate(self, request: web.Request) -> web.Response:
        who, body = await self.callers.asking(request, RatingBody, Action.KEEP)
        job = await self.app.rate(who, in_path(request, "id"),
                                  "unkeep" if body.rating is None else body.rating)
        return respond(Job.of(job, self.templates))

    # --- reading ------------------------------------------------------------------------
    async def lineage(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.STATUS)
        job = await self.app.job(in_path(request, "id"))
        return respond(Lineage(
            [Job.of(j, self.templates) for j in await self.queue.ancestors(job)],
            [Job.of(j, self.templates) for j in await self.queue.children(job.id)]))

    async def picks(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        root, kept = await self.app.picks(who, in_path(request, "id"))
        files = f"{PREFIX}/batches/{root.id}"
        return respond(Picks(root.id, [Job.of(j, self.templates) for j in kept],
                             PickFiles(f"{files}/{PICKS_XLSX}", f"{files}/{PICKS_PNG}")))

    async def refine(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        found = await self.app.refine(who, in_path(request, "id"))
        return respond(Refinement(
            found.batch.id, found.rated,
            [AxisRefinement(a.param, [ValueTally(t.value, t.kept, t.rejected, t.images, t.rate)
                                      for t in a.tallies], a.best, a.next) for a in found.axes],
            found.vary, found.seeds, found.command))

    async def ab(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        found = await self.app.ab(who, in_path(request, "id"))
        return respond(Tally(found.batch.id, found.variants, found.won, found.ties,
                             found.unrated))

    async def picks_sheet(self, request: web.Request) -> web.StreamResponse:
        root, (results, _) = await self._write_picks(request)
        return await stored_file(self.store, results, f"batch-{root}-{PICKS_XLSX}")

    async def picks_contact(self, request: web.Request) -> web.StreamResponse:
        root, (_, contact) = await self._write_picks(request)
        if contact is None:
            raise ApiError(404, "no_picks", f"no image of batch {root} is kept yet")
        return await stored_file(self.store, contact, f"batch-{root}-{PICKS_PNG}")

    async def _write_picks(self, request: web.Request) -> tuple[int, tuple[str, str | None]]:
        """The picks' files as they are now (kept images change: made afresh each time)."""
        who = await self.callers.who(request)
        root, kept = await self.app.picks(who, in_path(request, "id"))
        return root.id, await asyncio.to_thread(
            write_picks, self.store, root, kept, self.templates.get(root.template),
            self.config[TemplatesConfig].font)
