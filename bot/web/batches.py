"""Batches: submit one (a sheet, or JSON rows), read one or a page of them, cancel or
retry one, and download its contact sheet and results.

Submitting goes through the application layer (bot.app.application.App.submit): the same
intake, permission checks and limits as chat, so a sheet's problems come back with the
same row and column messages.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any

from aiohttp import web
from msgspec import UNSET, Meta, Struct, UnsetType

from bot.app import values
from bot.app.application import Accepted, App, CancelTarget, SubmitOptions
from bot.app.estimates import Held, held_by
from bot.app.permissions import Action
from bot.app.results import (
    CONTACT,
    RESULTS,
    XLSX,
    image_entries,
    write_results,
    write_results_sheet,
    write_zip,
)
from bot.intake import workers
from bot.intake.check import IntakeReport
from bot.settings import IntakeConfig
from bot.web.callers import Callers
from bot.web.http import (
    PREFIX,
    SERVED_FILE,
    ApiError,
    Problem,
    attachment,
    flag,
    in_path,
    page_of,
    problems,
    respond,
    stored_file,
)
from bot.web.routes import Answer, Binary, Label, Param, Route, Whole, page_size
from bot.web.uploads import (
    form_files,
    form_sheet,
    names_list,
    read_form,
    sweep_axes,
    sweep_seeds,
)
from storage.files import batch_folder
from storage.queue import ACTIVE
from storage.records import BatchCounts, Status
from storage.renditions import Renditions
from storage.reviews import Review
from templates.settings import ModelsConfig, TemplatesConfig

MAX_BATCHES_PAGE = 500
BATCH_ID = Param("id", "path", Whole, "batch id")
IDEMPOTENCY_KEY = Annotated[str, Meta(min_length=1, max_length=150)]


class BatchFiles(Struct):
    """Where the batch's contact sheet and results sheet are (once it is done)."""
    contact: Annotated[str | None, Meta(description="null where no job made an image (a "
                                                    "canceled batch): there is no sheet")]
    results: str


class Batch(Struct):
    """A batch and its progress."""
    id: int
    template: str
    submitter: str
    priority: Label
    created_at: float
    total: int
    done: int
    counts: Annotated[dict[str, int], Meta(description="its jobs by status")]
    jobs_ahead: int | None  # before its next queued job; null when none is queued
    eta_seconds: float | None  # until its last queued job is done
    held: Annotated[Held | None, Meta(description=(
        "what keeps queued jobs from starting, where something does: paused (the queue "
        "is), no_executor (none is running); then eta_seconds promises nothing"))]
    meta: Annotated[dict[str, Any], Meta(description="what the submitting side remembers: "
                                                     "the sheet's name, language, start time")]
    demo_models: Annotated[list[str], Meta(description="demo models its jobs use: their "
                                                       "images are noise")]
    files: BatchFiles
    unplaced: Annotated[list[Waiting], Meta(description=(
        "what its queued jobs need that no running executor can run, and why: it waits "
        "until an executor that can is started"))]
    reviews: Annotated[dict[Review, int], Meta(description=(
        "its finished images by review state (PUT /jobs/{id}/review)"))] = {}
    signed_off: Annotated[SignOff | None, Meta(description=(
        "who approved it once every image was reviewed (POST /batches/{id}/signoff); "
        "null: not signed off"))] = None
    problems: list[Problem] | UnsetType = UNSET  # on submitting: the rows left out


class SignOff(Struct):
    by: str
    at: float


class Waiting(Struct):
    need: Annotated[str, Meta(description="a model, or comfyui:TEMPLATE")]
    what: str  # as a person reads it: "model sdxl", "ComfyUI template poster"
    why: list[str]  # each running executor of that engine: "name: reason"


class BatchLine(Struct):
    """A batch in a list, its jobs counted by status."""
    id: int
    template: str
    submitter: str
    priority: Label
    created_at: float
    total: int
    counts: dict[str, int]
    sheet: str | None

    @classmethod
    def of(cls, line: BatchCounts) -> BatchLine:
        b = line.batch
        return cls(b.id, b.template, b.submitter, b.priority.label, b.created_at, b.total_jobs,
                   line.counts, b.meta.get("sheet"))


class BatchPage(Struct):
    batches: list[BatchLine]
    next_cursor: int | None  # the cursor of the next page; null on the last


class DryRun(Struct):
    """A dry run's answer: how many jobs the sheet makes and its problems; nothing queued."""
    dry_run: bool
    jobs: int
    problems: list[Problem]


class Canceled(Struct):
    ended: list[int]  # queued jobs, canceled now
    asked: list[int]  # running jobs, told to stop at their next step


class Retried(Struct):
    batch: int  # the new batch of the failed jobs
    jobs: int
    created: bool  # false: retried before, this is that batch


class Fields(Struct, kw_only=True):
    """What a submission may say besides its rows."""
    template: str  # a template's name
    priority: Label = "normal"
    not_before: Annotated[str, Meta(description=(
        "start no sooner: 21:30, 2026-12-24T08:00+08:00, +2h (UTC when no zone)"))] = ""
    skip_invalid: bool = False  # queue the valid rows, report the rest
    dry_run: bool = False  # check and report; queue nothing
    wait_for_executor: bool = False  # queue even if no running executor can run the jobs
    vary: Annotated[list[str], Meta(description=(
        "a sweep: one axis each, KEY=V1,V2,… or KEY=START..STOP:STEP (numbers); every row "
        "runs with every combination (multipart: the field once per axis)"))] = []
    seeds: Annotated[int, Meta(description="a sweep: seeds per row, shared across its "
                                           "combinations", ge=1, le=100)] = 1
    compare: Annotated[list[str], Meta(description=(
        "A/B: other templates or versions (NAME@N) each row also runs through, with the "
        "same seeds; the summary's grids put them side by side"))] = []
    grid: Annotated[list[str], Meta(description=(
        "a sweep's grid axes, across then down (default: the first two swept); "
        "multipart: KEY1,KEY2"))] = []
    channels: Annotated[list[str], Meta(description=(
        "sales channels (taobao, douyin, amazon …: GET /channels lists them): every row's "
        "image is also made into each channel's files, checked against its rules and "
        "labelled as AI-generated (a sheet column `channels` adds a row's own); multipart: "
        "A,B"))] = []
    layout: Annotated[str, Meta(description=(
        "a layout drawn on the channels' files (launch …: GET /channels lists them): the "
        "headline, price, badge and logo from the sheet's columns, per aspect and locale; "
        "words that do not fit their box refuse the row, naming the column"),
        max_length=40)] = ""
    callback_url: Annotated[str, Meta(description=(
        "told of this batch's events (batch.queued, job.succeeded, job.failed, "
        "batch.finished, batch.canceled) by signed POSTs: see the webhooks section. A public "
        "http(s) host only, unless [webhook] callback_allowlist names it"), max_length=2000)] = ""


class SheetSubmission(Fields, kw_only=True):
    """multipart/form-data: the sheet, and the pictures its image cells name (any part
    with a file name but the sheet is a picture)."""
    sheet: Binary
    pictures: list[Binary] = []


class RowsSubmission(Fields, kw_only=True):
    """JSON: the rows, each {column: value}; images from assets or allowed links."""
    rows: list[dict[str, Any]]


class BatchRoutes:
    def __init__(self, app: App, callers: Callers):
        self.app, self.queue, self.callers = app, app.queue, callers
        self.config, self.store, self.templates = app.config, app.store, app.templates
        self.renditions = Renditions(app.queue.db)

    def routes(self) -> list[Route]:
        batch = {200: Answer("OK", Batch)}
        return [
            Route("GET", "/batches", self.page,
                  "Batches, newest first, with their jobs counted by status",
                  {200: Answer("OK", BatchPage)}, errors=(400,), params=(
                      Param("cursor", "query", Whole, "next_cursor of the previous page"),
                      Param("limit", "query", page_size(MAX_BATCHES_PAGE), default=50),
                      Param("submitter", "query", str))),
            Route("POST", "/batches", self.submit,
                  "Submit a batch: a sheet (multipart) or rows (JSON)",
                  {201: Answer("queued", Batch),
                   200: Answer("queued before (the same Idempotency-Key), or a dry run",
                               (Batch, DryRun))},
                  errors=(400, 409, 413, 415, 422, 429),
                  params=(Param("Idempotency-Key", "header", IDEMPOTENCY_KEY,
                                "the same key again returns the first batch"),),
                  body={"multipart/form-data": SheetSubmission,
                        "application/json": RowsSubmission}),
            Route("GET", "/batches/{id}", self.one, "A batch and its progress", batch,
                  errors=(404,), params=(BATCH_ID,)),
            Route("POST", "/batches/{id}/cancel", self.cancel,
                  "Cancel a batch (its submitter or an admin)", {200: Answer("OK", Canceled)},
                  errors=(404,), params=(BATCH_ID,)),
            Route("POST", "/batches/{id}/retry", self.retry,
                  "Queue a batch's failed jobs again, as a new batch",
                  {201: Answer("queued", Retried), 200: Answer("retried before", Retried)},
                  errors=(404, 409), params=(BATCH_ID,)),
            Route("GET", "/batches/{id}/images.zip", self.images_zip,
                  "A batch's images in one zip, each under its name in the batch's folder; "
                  "?review=approved: only those (the ones that ship)",
                  {200: Answer("the zip", files=("application/zip",))}, errors=(400, 404),
                  params=(BATCH_ID, Param("review", "query", Review,
                                          "only the images in this review state"))),
            Route("GET", "/batches/{id}/files/{name}", self.file,
                  "The batch's contact sheet or results sheet, once it is done",
                  {200: Answer("the file", files=("image/png", XLSX))}, errors=(404,),
                  params=(BATCH_ID, Param("name", "path", Annotated[
                      str, Meta(extra_json_schema={"enum": [CONTACT, RESULTS]})])))]

    # --- reading ------------------------------------------------------------------------
    async def one(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.STATUS)
        return respond(await self._batch(in_path(request, "id")))

    async def _batch(self, batch_id: int) -> Batch:
        batch = await self.app.batch(batch_id)
        progress = await self.queue.batch_progress(batch_id)
        assert progress is not None
        return Batch(
            id=batch_id, template=batch.template, submitter=batch.submitter,
            priority=batch.priority.label, created_at=batch.created_at, total=progress.total,
            done=progress.done, counts=progress.counts, jobs_ahead=progress.jobs_ahead,
            eta_seconds=progress.eta_seconds,
            held=await held_by(self.queue) if progress.done < progress.total else None,
            meta={k: v for k, v in batch.meta.items() if k != "context"},
            demo_models=self.config[ModelsConfig].demo(await self.queue.batch_models(batch_id)),
            files=BatchFiles(f"{PREFIX}/batches/{batch_id}/files/{CONTACT}"
                             if progress.succeeded else None,
                             f"{PREFIX}/batches/{batch_id}/files/{RESULTS}"),
            unplaced=[Waiting(u.need, str(u.what), list(u.why))
                      for u in await self.app.batch_unplaced(batch_id)],
            reviews=(await self.queue.review_counts(batch_id)).images,
            signed_off=SignOff(batch.signed_off_by or "", batch.signed_off_at)
            if batch.signed_off_at is not None else None)

    async def page(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.STATUS)
        q = request.query
        limit, cursor = page_of(request, MAX_BATCHES_PAGE)
        rows = await self.queue.page_batches(before=cursor, submitter=q.get("submitter"),
                                             limit=limit)
        return respond(BatchPage([BatchLine.of(r) for r in rows],
                                 rows[-1].batch.id if len(rows) == limit else None))

    async def file(self, request: web.Request) -> web.StreamResponse:
        await self.callers.allowed(request, Action.STATUS)
        batch_id, name = in_path(request, "id"), request.match_info["name"]
        if name not in (CONTACT, RESULTS):
            raise ApiError(404, "no_file", f"a batch has {CONTACT} and {RESULTS}")
        relative = f"{batch_folder(batch_id)}/{name}"
        if not (await asyncio.to_thread(self.store.path, relative)).is_file():  # made when
            # asked, once the batch is done
            batch = await self.app.batch(batch_id)
            jobs = await self.queue.batch_jobs(batch_id)
            if any(j.status in ACTIVE for j in jobs):
                raise ApiError(404, "not_yet", f"batch {batch_id} is not finished")
            await asyncio.to_thread(write_results, self.store, batch, jobs,
                                    self.templates.get(batch.template),
                                    self.config[TemplatesConfig].font,
                                    await self.renditions.of_batch(batch_id))
        elif name == RESULTS and (await self.queue.review_counts(batch_id)).reviewed:
            # reviewed since it was written (or signed off): its reviews as they are now
            batch = await self.app.batch(batch_id)
            await asyncio.to_thread(write_results_sheet, self.store, batch,
                                    await self.queue.batch_jobs(batch_id),
                                    self.templates.get(batch.template),
                                    await self.renditions.of_batch(batch_id))
        return await stored_file(self.store, relative, f"batch-{batch_id}-{name}")

    async def images_zip(self, request: web.Request) -> web.StreamResponse:
        await self.callers.allowed(request, Action.STATUS)
        batch = await self.app.batch(in_path(request, "id"))
        asked = request.query.get("review")
        if asked is not None and asked not in Review.__members__.values():
            raise ApiError(400, "bad_query", f"review is one of {', '.join(Review)}")
        jobs = [j for j in await self.queue.batch_jobs(batch.id)
                if j.status == Status.SUCCEEDED and j.outputs and asked in (None, j.review)]
        if not jobs:
            raise ApiError(404, "no_images", f"batch {batch.id} has no image"
                           + (f" {asked}" if asked else ""))
        name = f"images-{asked}.zip" if asked else "images.zip"
        path = await asyncio.to_thread(write_zip, self.store, batch,
                                       image_entries(batch, jobs), name)
        return web.FileResponse(path, headers={
            **SERVED_FILE, "Content-Type": "application/zip",
            "Content-Disposition": attachment(f"batch-{batch.id}-{name}")})

    # --- changing: each a call to the application layer --------------------------------
    async def submit(self, request: web.Request) -> web.Response:
        """Idempotency-Key makes a retry safe: the same key again answers the first batch."""
        who = await self.callers.allowed(request, Action.GEN)  # before the body is read
        key = request.headers.get("Idempotency-Key")
        if key is not None and not 0 < len(key) <= 150:
            raise ApiError(400, "bad_idempotency_key", "Idempotency-Key is 1 to 150 characters")
        form = await read_form(request, self.config)
        name = str(form.get("template") or "")
        await self.app.resolve(name)  # fields are checked in order: the template first
        at = None
        if form.get("not_before"):
            at = values.start_time(str(form["not_before"]), datetime.now(UTC))
        options = SubmitOptions(
            priority=values.priority(str(form.get("priority") or "normal")), at=at,
            skip_invalid=flag(form.get("skip_invalid")), dry_run=flag(form.get("dry_run")),
            key=f"api:{who.user}:{key}" if key else None,
            wait_for_executor=flag(form.get("wait_for_executor")),
            vary=sweep_axes(form.get("vary")), seeds=sweep_seeds(form.get("seeds")),
            grid=names_list(form.get("grid")),
            channels=names_list(form.get("channels"), "channels"),
            layout=str(form.get("layout") or ""),
            compare=sweep_axes(form.get("compare"), "compare", "template names (NAME@N)"),
            callback_url=str(form.get("callback_url") or "") or None)
        async with workers.turn(self.config[IntakeConfig]):  # through the answer's reads
            result = await self.app.submit(who, name, form_sheet(form), form_files(form),
                                           options)
            if isinstance(result, IntakeReport):
                if not result.jobs:
                    raise ApiError(422, "invalid_sheet", result.report(),
                                   problems=problems(result.problems()))
                return respond(DryRun(True, len(result.jobs), problems(result.problems())))
            assert isinstance(result, Accepted)  # (no ask_over: a sweep is asked for whole)
            body = await self._batch(result.batch_id)
        if result.report is not None:  # None: a retried request, answered with its batch
            body.problems = problems(result.report.problems())
        return respond(body, status=201 if result.created else 200)

    async def cancel(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        result = await self.app.cancel(who, CancelTarget.batch(in_path(request, "id")))
        return respond(Canceled(result.ended, result.asked))

    async def retry(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        again = await self.app.retry(who, in_path(request, "id"))
        return respond(Retried(again.batch_id, again.jobs, again.created),
                       status=201 if again.created else 200)
