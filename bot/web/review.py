"""Review over HTTP, the twin of chat's /keep, /reject, /changes and /signoff
(bot.app.review): an image's review state with its note, its 1-5 grade, and a batch's
sign-off once every image it made is reviewed."""

from __future__ import annotations

from typing import Annotated

from aiohttp import web
from msgspec import Meta, Struct

from bot.app.application import App
from bot.app.permissions import Action
from bot.web.batches import BATCH_ID, SignOff
from bot.web.callers import Callers
from bot.web.http import in_path, respond
from bot.web.iterate import Acted
from bot.web.jobs import JOB_ID, Job
from bot.web.routes import Answer, Route
from storage.reviews import MAX_NOTE, MAX_STARS, Review


class ReviewBody(Struct):
    state: Review
    note: Annotated[str, Meta(max_length=MAX_NOTE, description=(
        "rejected: the reason (optional); changes_requested: what to change (required: it "
        "is queued as an edit of the image by these words where an edit model is "
        "configured, else as a new try); approved: a remark (optional)"))] = ""


class Reviewed(Struct):
    job: Job  # as reviewed
    change: Annotated[Acted | None, Meta(description=(
        "changes_requested: the batch queued for it, as the image's owner's"))] = None


class StarsBody(Struct):
    stars: Annotated[int, Meta(ge=1, le=MAX_STARS)] | None  # null: take the grade back


class SignedOff(Struct):
    batch: int
    signed_off: SignOff | None  # null once reopened
    reviews: Annotated[dict[Review, int], Meta(description="its finished images by review")]


class ReviewRoutes:
    def __init__(self, app: App, callers: Callers):
        self.app, self.callers, self.templates = app, callers, app.templates

    def routes(self) -> list[Route]:
        return [
            Route("PUT", "/jobs/{id}/review", self.review,
                  "Review a finished image: approve, reject (with a reason), request changes "
                  "(queued as an edit), or back to unreviewed",
                  {200: Answer("the job as reviewed", Reviewed)},
                  errors=(400, 404, 409, 413, 422, 429), params=(JOB_ID,),
                  body={"application/json": ReviewBody}),
            Route("PUT", "/jobs/{id}/stars", self.stars, "Grade a finished image 1 to 5",
                  {200: Answer("the job as graded", Job)}, errors=(400, 404, 409, 413, 422),
                  params=(JOB_ID,), body={"application/json": StarsBody}),
            Route("POST", "/batches/{id}/signoff", self.sign_off,
                  "Sign a batch off: every image it made is reviewed and nothing of it is "
                  "left to run (409 says what is left). Webhooks hear batch.approved",
                  {200: Answer("signed off", SignedOff)}, errors=(404, 409),
                  params=(BATCH_ID,)),
            Route("DELETE", "/batches/{id}/signoff", self.reopen,
                  "Take a batch's sign-off back (admins): its images may be reviewed again",
                  {200: Answer("reopened", SignedOff)}, errors=(404, 409),
                  params=(BATCH_ID,))]

    async def review(self, request: web.Request) -> web.Response:
        who, body = await self.callers.asking(request, ReviewBody, Action.KEEP)
        done = await self.app.review(who, in_path(request, "id"), body.state, body.note)
        c = done.change
        return respond(Reviewed(Job.of(done.job, self.templates), None if c is None else Acted(
            c.batch_id, c.created, c.action, c.parent.id,
            [Job.of(j, self.templates) for j in c.jobs])))

    async def stars(self, request: web.Request) -> web.Response:
        who, body = await self.callers.asking(request, StarsBody, Action.STARS)
        job = await self.app.stars(who, in_path(request, "id"), body.stars)
        return respond(Job.of(job, self.templates))

    async def sign_off(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        done = await self.app.sign_off(who, in_path(request, "id"))
        b = done.batch
        return respond(SignedOff(b.id, SignOff(b.signed_off_by or "", b.signed_off_at or 0.0),
                                 done.counts.images))

    async def reopen(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        batch = await self.app.reopen(who, in_path(request, "id"))
        return respond(SignedOff(batch.id, None,
                                 (await self.app.queue.review_counts(batch.id)).images))
