"""What a webhook says: one typed record per event, in Standard Webhooks' envelope.

Every body is `{"type": ..., "timestamp": ..., "data": {...}}` (the envelope the Standard
Webhooks specification suggests). The records here are the contract: the OpenAPI
document's `webhooks` section is generated from them (bot.web.openapi), and a body is
encoded once, when the delivery is owed, so every retry sends the same bytes.

Links are absolute where [api] public_url is set, else paths under /api/v1; fetching
them needs a token, as every API call does.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from bot.app.results import CONTACT, RESULTS
from bot.conventions import API_PREFIX
from bot.messages import review_summary, say, took
from storage.reads import BatchProgress
from storage.records import Batch, Job, Status
from storage.renditions import Rendition
from storage.reviews import Review
from storage.states import Outcome


class BatchLinks(Struct):
    """Where a batch and its files are read (the files once it has ended)."""
    batch: str
    results: Annotated[str, Meta(description="its results sheet (.xlsx): a row per job, "
                                             "with its status, outputs and error")]
    contact: Annotated[str, Meta(description="its contact sheet (.png): every image at once")]


class Output(Struct):
    job: int
    row: int
    url: str


class BatchQueued(Struct):
    batch: int
    template: str
    submitter: str
    priority: str
    jobs: int
    jobs_ahead: int | None
    eta_seconds: float | None
    sheet: str | None
    links: BatchLinks


# The fixed count fields before `counts`: sent until 0.2, then gone.
_OLD_COUNT = Meta(description='deprecated, removed in 0.2: read counts (counts["failed"])',
                  extra_json_schema={"deprecated": True})


class BatchEnded(Struct):
    """A batch whose every job has ended: finished (none canceled) or canceled."""
    batch: int
    template: str
    submitter: str
    jobs: int
    counts: Annotated[dict[str, int], Meta(
        description="its jobs by state, every state named (zero included): queued, running, "
                    "succeeded, failed, canceled, and any state added later")]
    succeeded: Annotated[int, _OLD_COUNT]
    failed: Annotated[int, _OLD_COUNT]
    canceled: Annotated[int, _OLD_COUNT]
    seconds: Annotated[float, Meta(description="from its first start to its last end")]
    summary: Annotated[str, Meta(description="one sentence, in the batch's language")]
    outputs: list[Output]
    links: BatchLinks


class JobEnded(Struct):
    job: int
    batch: int
    row: int
    template: str
    status: Outcome
    outputs: Annotated[list[str], Meta(description="links to its images or videos")]
    error: str | None
    seconds: float | None
    values: Annotated[dict[str, Any], Meta(description="its row's values, by column")]
    action: Annotated[str | None, Meta(description=(
        "the image action that made it from another job's image (again, vary, upscale, "
        "edit …); null for a sheet's row"))] = None
    parent_job: Annotated[int | None, Meta(description="the job whose image it was made "
                                                       "from; null for a sheet's row")] = None
    instruction: Annotated[str | None, Meta(description=(
        "the sentence an edit changed that image by; null otherwise"))] = None


class Reviewed(Struct):
    """One image of an approved batch, with its review."""
    job: int
    row: int
    review: Review
    note: str | None
    stars: int | None
    outputs: Annotated[list[str], Meta(description="links to its images")]


class BatchApproved(Struct):
    """A batch signed off: every image it made was reviewed, and someone with the right
    to review said it is done. The approved images are what ships."""
    batch: int
    template: str
    submitter: str
    signed_off_by: str
    reviews: Annotated[dict[Review, int], Meta(description="its images by review state")]
    images: Annotated[list[Reviewed], Meta(description="each image and its review, approved "
                                                       "first")]
    summary: Annotated[str, Meta(description="one sentence, in the batch's language")]
    links: BatchLinks


class DeliveredFile(Struct):
    """One file that ships: as its channel's uploader takes it."""
    job: int
    row: int
    channel: str
    rendition: str
    name: str  # its file name for the channel
    url: Annotated[str, Meta(description="the file, through the API")]
    sha256: str
    bytes: int
    width: int
    height: int
    labels: Annotated[dict[str, Any], Meta(description=(
        "its AI-content labels: explicit (the visible words, or null), implicit (GB "
        "45438-2025's metadata fields), c2pa (who signed its Content Credentials)"))]
    placed: Annotated[list[str], Meta(description="where it was put: a shared folder's "
                                                  "path, an s3:// URL")]


class BatchDelivered(Struct):
    """A batch's files for its sales channels were delivered: those that ship (every
    passing one, or once reviewed the approved images' ones), put in each drop."""
    batch: int
    template: str
    submitter: str
    trigger: Annotated[str, Meta(description="end: the batch ended with nobody reviewing "
                                             "it; signoffN: its sign-off (event N)")]
    files: list[DeliveredFile]
    held: Annotated[int, Meta(description="files that do not ship (need review, not approved)")]
    zip: Annotated[str, Meta(description="every file that ships, a folder per channel")]
    links: BatchLinks


class Test(Struct):
    endpoint: str
    message: str


class BatchQueuedEvent(Struct):
    type: Literal["batch.queued"]
    timestamp: str
    data: BatchQueued


class BatchFinishedEvent(Struct):
    type: Literal["batch.finished"]
    timestamp: str
    data: BatchEnded


class BatchCanceledEvent(Struct):
    type: Literal["batch.canceled"]
    timestamp: str
    data: BatchEnded


class BatchApprovedEvent(Struct):
    type: Literal["batch.approved"]
    timestamp: str
    data: BatchApproved


class BatchDeliveredEvent(Struct):
    type: Literal["batch.delivered"]
    timestamp: str
    data: BatchDelivered


class JobSucceededEvent(Struct):
    type: Literal["job.succeeded"]
    timestamp: str
    data: JobEnded


class JobFailedEvent(Struct):
    type: Literal["job.failed"]
    timestamp: str
    data: JobEnded


class TestEvent(Struct):
    type: Literal["webhook.test"]
    timestamp: str
    data: Test


# Event type -> its body's record: what [[webhooks]] events name, and the OpenAPI document's
# `webhooks` section. (webhook.test goes only where `genbot webhooks test` sends it.)
EVENTS: dict[str, type[Struct]] = {
    "batch.queued": BatchQueuedEvent, "batch.finished": BatchFinishedEvent,
    "batch.canceled": BatchCanceledEvent, "batch.approved": BatchApprovedEvent,
    "batch.delivered": BatchDeliveredEvent, "job.succeeded": JobSucceededEvent,
    "job.failed": JobFailedEvent, "webhook.test": TestEvent}
DESCRIPTIONS = {
    "batch.queued": "A batch was accepted: its jobs are in the queue.",
    "batch.finished": "Every job of a batch has ended and none was canceled: counts, a "
                      "summary, every output and the results sheet.",
    "batch.canceled": "Every job of a batch has ended and some were canceled.",
    "batch.approved": "A batch was signed off once every image of it was reviewed: who, "
                      "and each image's review (the approved ones ship).",
    "batch.delivered": "A batch's files for its sales channels were delivered (docs/"
                       "deliver.md): each file that ships, its checksum, labels and where "
                       "it was put.",
    "job.succeeded": "A job's images are ready.",
    "job.failed": "A job failed for good (its retries used up, or an error no retry mends).",
    "webhook.test": "Sent by `genbot webhooks test` (or the API or /webhooks test) to check "
                    "an endpoint."}


def timestamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def body(event_type: str, at: float, data: Struct) -> str:
    """The exact JSON a delivery sends, every time it is sent."""
    record = EVENTS[event_type](type=event_type, timestamp=timestamp(at), data=data)
    return msgspec.json.encode(record).decode()


class Links:
    """Absolute links where the service's public address is known, else API paths."""

    def __init__(self, public_url: str):
        self.base = public_url.rstrip("/") + API_PREFIX

    def batch(self, batch_id: int) -> BatchLinks:
        at = f"{self.base}/batches/{batch_id}"
        return BatchLinks(at, f"{at}/files/{RESULTS}", f"{at}/files/{CONTACT}")

    def rendition(self, rendition_id: int) -> str:
        return f"{self.base}/renditions/{rendition_id}"

    def outputs(self, job: Job) -> list[str]:
        return [f"{self.base}/jobs/{job.id}/outputs/{i}" for i in range(len(job.outputs))]


def queued(batch: Batch, progress: BatchProgress, links: Links) -> BatchQueued:
    return BatchQueued(batch.id, batch.template, batch.submitter, batch.priority.label,
                       progress.total, progress.jobs_ahead, progress.eta_seconds,
                       batch.meta.get("sheet"), links.batch(batch.id))


def ended(batch: Batch, jobs: list[Job], links: Links) -> BatchEnded:
    count = {s: sum(j.status == s for j in jobs) for s in Status}
    started = min((j.started_at for j in jobs if j.started_at), default=None)
    finished = max((j.finished_at for j in jobs if j.finished_at), default=None)
    seconds = round(finished - started, 3) if started and finished else 0.0
    lang = batch.meta.get("lang", "en")
    summary = say("webhook_summary", lang, batch=batch.id, template=batch.template,
                  succeeded=count[Status.SUCCEEDED], total=len(jobs),
                  failed=count[Status.FAILED], canceled=count[Status.CANCELED],
                  took=took(lang, seconds))
    outputs = [Output(j.id, j.row, url) for j in jobs if j.status == Status.SUCCEEDED
               for url in links.outputs(j)]
    return BatchEnded(batch.id, batch.template, batch.submitter, len(jobs),
                      {s.value: n for s, n in count.items()}, count[Status.SUCCEEDED],
                      count[Status.FAILED], count[Status.CANCELED],
                      seconds, summary, outputs, links.batch(batch.id))


def approved(batch: Batch, jobs: list[Job], links: Links) -> BatchApproved:
    images = sorted((j for j in jobs if j.status == Status.SUCCEEDED),
                    key=lambda j: (list(Review).index(j.review), j.row, j.id))
    counts = {r: n for r in Review if (n := sum(j.review is r for j in images))}
    lang = batch.meta.get("lang", "en")
    summary = say("signed_off", lang, batch=batch.id, by=batch.signed_off_by or "",
                  summary=review_summary(counts, lang))
    return BatchApproved(batch.id, batch.template, batch.submitter, batch.signed_off_by or "",
                         counts, [Reviewed(j.id, j.row, j.review, j.review_note, j.stars,
                                           links.outputs(j)) for j in images],
                         summary, links.batch(batch.id))


def delivered(batch: Batch, jobs: list[Job], made: list[Rendition], data: dict[str, Any],
              links: Links) -> BatchDelivered:
    """`data`: the "delivered" event's (bot.app.deliveries.Shipper)."""
    rows = {j.id: j.row for j in jobs}
    placed = data.get("placed") or {}
    files = [DeliveredFile(r.job_id, rows.get(r.job_id, 0), r.channel, r.rendition, r.name,
                           links.rendition(r.id), r.sha256, r.bytes, r.width, r.height,
                           r.labels, placed[str(r.id)])
             for r in made if str(r.id) in placed]
    return BatchDelivered(batch.id, batch.template, batch.submitter, str(data.get("for", "")),
                          files, int(data.get("held", 0)),
                          f"{links.base}/batches/{batch.id}/deliverables.zip",
                          links.batch(batch.id))


def job_ended(batch: Batch, job: Job, links: Links) -> JobEnded:
    seconds = round(job.finished_at - job.started_at, 3) \
        if job.started_at and job.finished_at else None
    status: Outcome = Status.SUCCEEDED.value if job.status == Status.SUCCEEDED \
        else Status.FAILED.value
    return JobEnded(job.id, batch.id, job.row, batch.template, status, links.outputs(job),
                    job.error, seconds, dict(job.values), job.action, job.parent_job_id,
                    batch.meta.get("instruction") if job.action else None)
