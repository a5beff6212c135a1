"""Reviewing a batch's images and signing the batch off, once for every front.

A review state (storage.reviews) is set by whoever may review (a reviewer, a
submitter, an admin), with a note where the state carries one. "Changes requested"
is a review that queues work: the note becomes an edit of the image (or, without an
edit model, a new try of its row), queued as the image's owner's — a reviewer asks for
the change, the owner's limits and priority pay for it, as if the owner had pressed
Edit — and only once that is queued is the review recorded, so a refused change
leaves the image as it was.

    review: the person may -> the image is finished -> its batch is not signed off ->
            (changes: the owner's edit or again is queued) -> recorded -> audited
    sign_off: the person may -> every image reviewed, nothing left to run -> recorded
            with an event (the announcer's batch.approved, the chat's reply) -> audited
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.app.iterate import Acted, ActionRequest
from bot.app.iterate import App as IterateApp
from bot.app.permissions import Action, Who
from bot.errors import Conflict, Invalid
from storage.reads import ReviewCounts
from storage.records import Batch, Job, Status
from storage.reviews import MAX_NOTE, MAX_STARS, REVIEWS, Review
from templates.actions import ACTIONS, CHANGES

# What each review state is asked as: the action the permission table and the audit log
# name it by.
ASKED: dict[Review, Action] = {
    Review.APPROVED: Action.KEEP, Review.REJECTED: Action.REJECT,
    Review.CHANGES: Action.CHANGES, Review.UNREVIEWED: Action.UNKEEP}
# The words chat and the API have always rated by: keep, reject, unkeep.
RATINGS: dict[str, Review] = {str(action): state for state, action in ASKED.items()
                              if action is not Action.CHANGES}


class App(IterateApp, Protocol):
    async def act(self, who: Who, job_id: int, request: ActionRequest) -> Acted: ...


@dataclass(frozen=True)
class Reviewed:
    job: Job  # as reviewed
    change: Acted | None = None  # changes requested: the edit (or again) queued for it


@dataclass(frozen=True)
class SignedOff:
    batch: Batch  # as signed off
    counts: ReviewCounts


async def review(app: App, who: Who, job_id: int, state: Review, note: str = "") -> Reviewed:
    """Set the review of job `job_id`'s image; see the module's docstring."""
    asked = ASKED[state]
    await app.permissions.require(who, asked)
    kind = REVIEWS[state]
    note = note.strip() if kind.note else ""
    if len(note) > MAX_NOTE:
        raise Invalid("review_note_too_long", chars=len(note), most=MAX_NOTE)
    if kind.note_required and not note:
        raise Invalid("changes_need_note")
    job = await app.job(job_id)
    batch = await _open(app, job)
    change = await _queue_change(app, job, batch, note) if state is Review.CHANGES else None
    if not await app.queue.rate(job.id, kind.code, who.id, note):
        await _open(app, await app.job(job_id))  # signed off meanwhile: say so
        raise Conflict("action_no_image", job=job.id, status=job.status.value)
    await app.permissions.allowed(who, asked, job=job.id, review=state.value,
                                  **({"note": note} if note else {}),
                                  **({"batch": change.batch_id} if change else {}))
    return Reviewed(await app.job(job_id), change)


async def stars(app: App, who: Who, job_id: int, grade: int | None) -> Job:
    """Grade job `job_id`'s image 1-5 (None: take the grade back)."""
    await app.permissions.require(who, Action.STARS)
    if grade is not None and not 1 <= grade <= MAX_STARS:
        raise Invalid("stars_range", most=MAX_STARS, stars=str(grade)[:10])
    job = await app.job(job_id)
    await _open(app, job)
    if not await app.queue.star(job.id, grade, who.id):
        await _open(app, await app.job(job_id))
        raise Conflict("action_no_image", job=job.id, status=job.status.value)
    return await app.job(job_id)


async def sign_off(app: App, who: Who, batch_id: int) -> SignedOff:
    """Approve batch `batch_id` as reviewed: refused, saying what is left, while any of
    its images is unreviewed or any of its jobs is still to run."""
    await app.permissions.require(who, Action.SIGN_OFF)
    batch = await app.batch(batch_id)
    if batch.signed_off_at is not None:
        raise Conflict("batch_signed_off", batch=batch.id, by=batch.signed_off_by or "")
    if not await app.queue.sign_off(batch.id, who.id):
        counts = await app.queue.review_counts(batch.id)
        if (again := await app.batch(batch_id)).signed_off_at is not None:
            raise Conflict("batch_signed_off", batch=batch.id, by=again.signed_off_by or "")
        if counts.unfinished:
            raise Conflict("signoff_unfinished", batch=batch.id, count=counts.unfinished)
        if counts.unreviewed:
            raise Conflict("signoff_unreviewed", batch=batch.id, count=counts.unreviewed,
                           total=counts.total)
        raise Conflict("signoff_nothing", batch=batch.id)
    counts = await app.queue.review_counts(batch.id)
    await app.permissions.allowed(who, Action.SIGN_OFF, batch=batch.id,
                                  **{r.value: n for r, n in counts.images.items()})
    return SignedOff(await app.batch(batch_id), counts)


async def reopen(app: App, who: Who, batch_id: int) -> Batch:
    """Take batch `batch_id`'s sign-off back, so its images may be reviewed again."""
    await app.permissions.require(who, Action.REOPEN)
    batch = await app.batch(batch_id)
    if not await app.queue.reopen(batch.id, who.id):
        raise Conflict("reopen_not_signed", batch=batch.id)
    await app.permissions.allowed(who, Action.REOPEN, batch=batch.id,
                                  signed_off_by=batch.signed_off_by or "")
    return await app.batch(batch_id)


async def _open(app: App, job: Job) -> Batch:
    """The job's batch, if its image may still be reviewed."""
    if job.status != Status.SUCCEEDED or not job.outputs:
        raise Conflict("action_no_image", job=job.id, status=job.status.value)
    batch = await app.batch(job.batch_id)
    if batch.signed_off_at is not None:
        raise Conflict("batch_signed_off", batch=batch.id, by=batch.signed_off_by or "")
    return batch


async def _queue_change(app: App, job: Job, batch: Batch, note: str) -> Acted:
    """The change a note asks for, queued as the image's owner's: an edit by the note
    where an edit model is configured, else a new try (CHANGES, the first that can)."""
    template = app.templates.get(job.template or batch.template)
    for name in CHANGES:
        spec = ACTIONS[name]
        by_words = "instruction" in spec.takes
        if (by_words and app.edit_model() is None) or not spec.offered(template):
            continue
        platform, _, user = job.submitter.partition(":")
        owner = Who(platform, user, batch.conversation)
        return await app.act(owner, job.id, ActionRequest(
            name, instruction=note if by_words else ""))
    raise Conflict("changes_cannot", job=job.id, template=batch.template)
