"""Jobs: a page of them, one, cancel one, and a finished job's images (or a thumbnail)."""

from __future__ import annotations

import asyncio
import io
from typing import Annotated, Any, Literal, cast

from aiohttp import web
from msgspec import UNSET, Meta, Struct, UnsetType

from bot.app.application import App, CancelTarget
from bot.app.permissions import Action
from bot.app.results import instruction_of, key_value
from bot.web.batches import Canceled
from bot.web.callers import Callers
from bot.web.http import PREFIX, ApiError, in_path, number, respond, stored_file
from bot.web.routes import Answer, Param, Route, Whole, page_size
from storage import records
from storage.media import OUTPUTS
from storage.reads import RATING_FILTERS, Rating
from storage.records import KEPT, REJECTED, Status
from storage.reviews import MAX_STARS, Review
from templates.actions import ACTIONS, offered
from templates.graph import Template

THUMBS = (128, 256, 512)  # a few sizes, each cached once per image: not one per pixel count
PAGE = 100  # jobs per page unless asked for fewer
MAX_JOBS_PAGE = 1000
BIGGEST_OFFSET = 2**31 - 1  # past any real row; SQLite's OFFSET is a 64-bit integer too
JOB_ID = Param("id", "path", Whole, "job id")
ActionName = Annotated[str, Meta(extra_json_schema={"enum": list(ACTIONS)})]
RATINGS: dict[int | None, Literal["kept", "rejected"] | None] = {
    KEPT: "kept", REJECTED: "rejected", None: None}


class Job(Struct):
    """One row of a batch, as it stands."""
    id: int
    batch: int
    row: int  # as numbered in the sheet
    key: Annotated[str | None, Meta(description="the row's value in the template's key "
                                                "column (e.g. its SKU), as the sheet had it")]
    status: Status
    submitter: str
    attempts: int
    error: str | None
    outputs: list[str]  # where its images are
    enqueued_at: float
    started_at: float | None
    finished_at: float | None
    parent_job_id: Annotated[int | None, Meta(description=(
        "the job whose image this one was made from (again, vary, upscale, edit); null for "
        "a sheet's row"))]
    action: ActionName | None  # how it was made from its parent
    rating: Annotated[Literal["kept", "rejected"] | None, Meta(description=(
        "its image kept or rejected (PUT /jobs/{id}/rating); null: not rated"))]
    rated_by: str | None
    rated_at: float | None
    template: str | None  # the template that made it
    template_version: Annotated[int | None, Meta(description=(
        "that template's version (genbot template history); null: made before versions "
        "were kept"))]
    template_hash: Annotated[str | None, Meta(description="the version's content hash")]
    actions: Annotated[list[ActionName], Meta(description=(
        "what its template can make from its image once it has succeeded (POST "
        "/jobs/{id}/actions), in the order to offer them; GET /vocabulary names them"))]
    axes: Annotated[dict[str, Any], Meta(description=(
        "what tells it from its row's other jobs in a sweep or a comparison: each swept "
        "parameter's value, and `variant` (A, B …) for a compare run's side; {} for a "
        "plain row"))] = {}
    review: Annotated[Review, Meta(description=(
        "its image's review (PUT /jobs/{id}/review; GET /vocabulary names the states): "
        "`rating`'s kept is approved; rated_by and rated_at say who and when"))] = \
        Review.UNREVIEWED
    review_note: Annotated[str | None, Meta(description=(
        "a rejection's reason or the changes requested"))] = None
    stars: Annotated[int, Meta(ge=1, le=MAX_STARS, description=(
        "a reviewer's grade (PUT /jobs/{id}/stars)"))] | None = None
    values: Annotated[dict[str, Any], Meta(description=(
        "its row's values by column, pictures as the sheet named them: with `template` "
        "and `template_version`, what POST /batches takes to make it again"))] = {}
    model: Annotated[str | None, Meta(description="the model it ran on; null: none named "
                                                  "(a ComfyUI template's own)")] = None
    instruction: Annotated[str | None, Meta(description=(
        "what an action changed its parent's image by or painted (an edit's sentence, a "
        "repaint's words); null otherwise"))] = None

    @classmethod
    def of(cls, j: records.Job, templates: dict[str, Template]) -> Job:
        return cls(id=j.id, batch=j.batch_id, row=j.row,
                   key=key_value(j, templates.get(j.template or "")), status=j.status,
                   submitter=j.submitter, attempts=j.attempts, error=j.error,
                   outputs=[f"{PREFIX}/jobs/{j.id}/outputs/{i}" for i in range(len(j.outputs))],
                   enqueued_at=j.enqueued_at, started_at=j.started_at,
                   finished_at=j.finished_at, parent_job_id=j.parent_job_id, action=j.action,
                   rating=RATINGS.get(j.rating), rated_by=j.rated_by, rated_at=j.rated_at,
                   template=j.template, template_version=j.workflow.get("revision") or None,
                   template_hash=j.workflow.get("version") or None,
                   actions=offered(templates.get(j.template or "")),
                   axes=dict(j.workflow.get("axes") or {}), review=j.review,
                   review_note=j.review_note, stars=j.stars,
                   values={**j.values, **j.workflow.get("named", {})}, model=j.affinity,
                   instruction=instruction_of(j) or None)


class JobPage(Struct):
    jobs: list[Job]
    next_cursor: int | None  # the cursor of the next page; null on the last
    total: Annotated[int, Meta(description="with offset: how many match")] | UnsetType = UNSET


class JobRoutes:
    def __init__(self, app: App, callers: Callers):
        self.app, self.queue, self.callers = app, app.queue, callers
        self.store, self.templates = app.store, app.templates

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/jobs", self.page, "Jobs, newest first, a page at a time",
                  {200: Answer("OK", JobPage)}, errors=(400,), params=(
                      Param("cursor", "query", Whole, "next_cursor of the previous page"),
                      Param("offset", "query", Annotated[int, Meta(ge=0, le=BIGGEST_OFFSET)],
                            "instead of cursor, not with cursor (400): skip this many (the "
                            "answer has `total`)"),
                      Param("limit", "query", page_size(MAX_JOBS_PAGE), default=PAGE),
                      Param("batch", "query", Whole),
                      Param("status", "query", Status),
                      Param("submitter", "query", str),
                      Param("rating", "query", Rating,
                            "only images in this review state (unreviewed: unfinished jobs "
                            "too; kept and unrated: approved and unreviewed's older names)"),
                      Param("stars", "query", Annotated[int, Meta(ge=1, le=MAX_STARS)],
                            "only images graded at least this"),
                      Param("model", "query", str, "only jobs run on this model"),
                      Param("template", "query", str, "only jobs of this template's batches"),
                      Param("version", "query", Whole,
                            "only jobs of batches that ran this version of their template"),
                      Param("row", "query", Whole, "only jobs of this row of their sheet"),
                      Param("axis", "query", str,
                            "KEY=VALUE: only jobs with this swept value (steps=30; an A/B "
                            "comparison's side: variant=B)"))),
            Route("GET", "/jobs/{id}", self.one, "One job", {200: Answer("OK", Job)},
                  errors=(404,), params=(JOB_ID,)),
            Route("POST", "/jobs/{id}/cancel", self.cancel, "Cancel one job",
                  {200: Answer("OK", Canceled)}, errors=(404,), params=(JOB_ID,)),
            Route("GET", "/jobs/{id}/outputs/{index}", self.output,
                  "A finished job's image (or video), or a WebP thumbnail of an image; its "
                  "type told by its bytes, anything but an image as an attachment",
                  {200: Answer("the file", files=(*(m.mime for m in OUTPUTS),
                                                  "application/octet-stream"))},
                  errors=(400, 404), params=(
                      JOB_ID, Param("index", "path", Whole, "which output, from 0"),
                      Param("size", "query", Annotated[int, Meta(extra_json_schema={
                          "enum": list(THUMBS)})],
                            "a WebP thumbnail at most this many pixels wide and high (made "
                            "once, then served with an ETag: asked again, 304)")))]

    async def page(self, request: web.Request) -> web.Response:
        """`cursor` is the last id seen; or `offset` (then `total` comes too), for a view
        that jumps to any row."""
        await self.callers.allowed(request, Action.STATUS)
        q = request.query
        try:
            limit = number(q.get("limit", str(PAGE)))
            cursor = number(q["cursor"]) if q.get("cursor") else None
            batch = number(q["batch"]) if q.get("batch") else None
            offset = number(q["offset"]) if q.get("offset") else None
            stars = number(q["stars"]) if q.get("stars") else None
            version = number(q["version"]) if q.get("version") else None
            row = number(q["row"]) if q.get("row") else None
        except ValueError:
            raise ApiError(400, "bad_query", "limit, cursor, offset, batch, stars, version and "
                           "row are whole numbers") from None
        axis = None
        if q.get("axis"):
            key, sep, value = q["axis"].partition("=")
            if not sep or not key.strip():
                raise ApiError(400, "bad_query", "axis is KEY=VALUE, e.g. steps=30 or variant=B")
            axis = (key.strip(), value.strip())
        if stars is not None and not 1 <= stars <= MAX_STARS:
            raise ApiError(400, "bad_query", f"stars is 1 to {MAX_STARS}")
        status = q.get("status")
        if status is not None and status not in Status.__members__.values():
            raise ApiError(400, "bad_query",
                           f"status is one of {', '.join(s.value for s in Status)}")
        if not 1 <= limit <= MAX_JOBS_PAGE:
            raise ApiError(400, "bad_query", f"limit is 1 to {MAX_JOBS_PAGE}")
        if offset is not None and cursor is not None:
            raise ApiError(400, "bad_query", "use cursor or offset, not both")
        submitter, rating = q.get("submitter"), q.get("rating")
        if rating is not None and rating not in RATING_FILTERS:
            raise ApiError(400, "bad_query", f"rating is one of {', '.join(RATING_FILTERS)}")
        filters = {"batch": batch, "status": status, "submitter": submitter,
                   "rating": cast(Rating | None, rating), "stars": stars,
                   "model": q.get("model"), "template": q.get("template"), "version": version,
                   "row": row, "axis": axis}
        rows = await self.queue.page_jobs(
            before=cursor, limit=limit, offset=min(offset or 0, BIGGEST_OFFSET), **filters)
        page = JobPage([Job.of(j, self.templates) for j in rows],
                       rows[-1].id if len(rows) == limit else None)
        if offset is not None:
            page.total = await self.queue.count_jobs(**filters)
        return respond(page)

    async def one(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.STATUS)
        return respond(Job.of(await self.app.job(in_path(request, "id")), self.templates))

    async def cancel(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        result = await self.app.cancel(who, CancelTarget.job(in_path(request, "id")))
        return respond(Canceled(result.ended, result.asked))

    async def output(self, request: web.Request) -> web.StreamResponse:
        await self.callers.allowed(request, Action.STATUS)
        job = await self.app.job(in_path(request, "id"))
        index = in_path(request, "index")
        if index >= len(job.outputs):
            raise ApiError(404, "no_output", f"job {job.id} has {len(job.outputs)} outputs")
        if "size" not in request.query:
            return await stored_file(self.store, job.outputs[index])
        size = request.query["size"]
        if size not in map(str, THUMBS):
            raise ApiError(400, "bad_query",
                           f"size is one of {', '.join(map(str, THUMBS))} (pixels)")
        return await stored_file(self.store, await asyncio.to_thread(
            self._thumbnail, job.outputs[index], int(size)))

    def _thumbnail(self, relative: str, size: int) -> str:
        """A WebP at most size×size beside the image, made once (retention removes it with
        the batch's folder): about a third of a JPEG's bytes at the same look, which a
        gallery of thousands of cards feels."""
        from PIL import Image, UnidentifiedImageError
        thumb = f"{relative.rsplit('.', 1)[0]}.thumb{size}.webp"
        try:
            if self.store.path(thumb).is_file():
                return thumb
            with Image.open(self.store.path(relative)) as im:
                im.thumbnail((size, size))
                buf = io.BytesIO()
                im.convert("RGB").save(buf, "WEBP", quality=80, method=4)
        except (ValueError, OSError, UnidentifiedImageError, Image.DecompressionBombError):
            return relative  # not there, or not a picture: stored_file says which
        self.store.write(thumb, buf.getvalue())
        return thumb

