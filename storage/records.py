"""What storage hands out: typed, read-only records of the rows it keeps.

Every reader gets attributes, not string keys, and every JSON column is decoded here,
once (`from_row`), whichever backend gave the row: SQLite hands JSON back as text,
PostgreSQL sometimes as text and sometimes decoded. Nothing here knows chat, the GPU or
HTTP; a batch's `meta` is the submitter's own bag of facts, kept as given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

# A job's states live in storage.states; records hand them out with the rows.
from storage.reviews import Review, code_of, review_of
from storage.states import ACTIVE as ACTIVE
from storage.states import TERMINAL as TERMINAL
from storage.states import Status as Status


class Priority(IntEnum):
    URGENT = 0
    HIGH = 1
    NORMAL = 2
    LOW = 3

    @property
    def label(self) -> str:
        """As people type it: urgent, high, normal, low."""
        return self.name.lower()


KEPT, REJECTED = code_of(Review.APPROVED), code_of(Review.REJECTED)  # the common two


def decoded(value: Any) -> Any:
    """A JSON column's value, whether the driver decoded it already or not."""
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def encoded(value: Any) -> str:
    """A value for a JSON column: compact, and readable where it is text."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Batch:
    """One submission: a template applied to the rows of one sheet."""
    id: int
    template: str
    submitter: str  # platform:user
    platform: str
    conversation: str | None
    thread: str | None
    priority: Priority
    idempotency_key: str | None
    total_jobs: int
    meta: dict[str, Any]  # what the submitting side wants remembered (language, sheet name …)
    created_at: float
    signed_off_by: str | None = None  # who approved it, once every image was reviewed
    signed_off_at: float | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Batch:
        return cls(id=row["id"], template=row["template"], submitter=row["submitter"],
                   platform=row["platform"], conversation=row["conversation"],
                   thread=row["thread"], priority=Priority(row["priority"]),
                   idempotency_key=row["idempotency_key"], total_jobs=row["total_jobs"],
                   meta=decoded(row["meta"]) or {}, created_at=row["created_at"],
                   signed_off_by=row.get("signed_off_by"),
                   signed_off_at=row.get("signed_off_at"))


@dataclass(frozen=True)
class Job:
    """One row of a batch and its bound workflow (what the executor runs)."""
    id: int
    batch_id: int
    row: int  # as numbered in the sheet
    workflow: dict[str, Any]  # the template with this row's values bound in (templates.jobs)
    status: Status
    priority: Priority
    submitter: str
    affinity: str | None  # the model it needs
    attempts: int
    not_before: float
    lease_owner: str | None
    cancel_requested: bool
    outputs: list[str]  # relative to the output store
    error: str | None
    enqueued_at: float
    started_at: float | None
    finished_at: float | None
    parent_job_id: int | None = None  # the image it was made from (keep, again, vary …)
    action: str | None = None  # how: again | vary | upscale | edit
    rating: int | None = None  # its image's review, by code (storage.reviews)
    rated_by: str | None = None
    rated_at: float | None = None
    review_note: str | None = None  # a rejection's reason, a change's note
    stars: int | None = None  # 1-5

    @property
    def kept(self) -> bool:
        return self.rating == KEPT

    @property
    def review(self) -> Review:
        return review_of(self.rating)

    @property
    def values(self) -> dict[str, Any]:
        """The row's own values, by parameter name, as intake read them."""
        return self.workflow.get("params") or {}

    @property
    def template(self) -> str | None:
        """The template its workflow was bound from."""
        name = self.workflow.get("template")
        return name if isinstance(name, str) else None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Job:
        return cls(id=row["id"], batch_id=row["batch_id"], row=row["row"],
                   workflow=decoded(row["workflow"]) or {}, status=Status(row["status"]),
                   priority=Priority(row["priority"]), submitter=row["submitter"],
                   affinity=row["affinity"], attempts=row["attempts"],
                   not_before=row["not_before"], lease_owner=row["lease_owner"],
                   cancel_requested=bool(row["cancel_requested"]),
                   outputs=decoded(row["outputs"]) or [], error=row["error"],
                   enqueued_at=row["enqueued_at"], started_at=row["started_at"],
                   finished_at=row["finished_at"], parent_job_id=row.get("parent_job_id"),
                   action=row.get("action"), rating=row.get("rating"),
                   rated_by=row.get("rated_by"), rated_at=row.get("rated_at"),
                   review_note=row.get("review_note"), stars=row.get("stars"))


@dataclass(frozen=True)
class RunningJob:
    """A job running now, with its batch's template: what /queue lists."""
    id: int
    batch_id: int
    row: int
    template: str
    submitter: str
    started_at: float | None
    lease_owner: str | None
    priority: Priority = Priority.NORMAL
    status: Status = Status.RUNNING  # as stored: queued where it was claimed ahead
    working: bool = True  # False: next on its executor (claimed ahead, or its group's later)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RunningJob:
        return cls(id=row["id"], batch_id=row["batch_id"], row=row["row"],
                   template=row["template"], submitter=row["submitter"],
                   started_at=row["started_at"], lease_owner=row["lease_owner"],
                   priority=Priority(row.get("priority", Priority.NORMAL)),
                   status=Status(row.get("status", Status.RUNNING)))


@dataclass(frozen=True)
class LeasedJob:
    """A job under a lease (claimed ahead, or running) and how long it has shown no sign
    of life: what the stuck-job alarm and `genbot queue doctor` read."""
    id: int
    batch_id: int
    row: int
    status: Status  # queued (claimed ahead, not started) or running
    attempts: int
    lease_owner: str | None
    lease_expires_at: float | None
    idle_seconds: float  # ahead: since the claim; running: since its last progress or start

    @property
    def ahead(self) -> bool:
        return self.status == Status.QUEUED

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> LeasedJob:
        return cls(id=row["id"], batch_id=row["batch_id"], row=row["row"],
                   status=Status(row["status"]), attempts=row["attempts"],
                   lease_owner=row["lease_owner"], lease_expires_at=row["lease_expires_at"],
                   idle_seconds=max(0.0, float(row["idle_seconds"] or 0.0)))


@dataclass(frozen=True)
class BatchCounts:
    """A batch with its jobs counted by status: a line of a batch list."""
    batch: Batch
    counts: dict[str, int]


@dataclass(frozen=True)
class Event:
    """One entry of the event log; readers resume after the last `seq` they handled."""
    seq: int
    at: float
    kind: str  # submitted, a job status, progress, worker_lost
    batch_id: int | None
    job_id: int | None
    data: dict[str, Any]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Event:
        return cls(seq=row["seq"], at=row["at"], kind=row["kind"], batch_id=row["batch_id"],
                   job_id=row["job_id"], data=decoded(row["data"]) or {})

    def as_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": self.at, "kind": self.kind, "batch_id": self.batch_id,
                "job_id": self.job_id, "data": self.data}


@dataclass(frozen=True)
class QueueState:
    paused: bool
    changed_by: str | None
    changed_at: float | None


@dataclass(frozen=True)
class ActiveCounts:
    """Jobs waiting and running: cheap at any history size, for health checks and limits."""
    queued: int
    running: int

    @property
    def total(self) -> int:
        return self.queued + self.running


@dataclass(frozen=True)
class Placement:
    """The work waiting for one kind of executor (a row of the genbot_placement view): what
    an autoscaler sizes a worker pool by."""
    engine: str  # diffusers, or the engine of an "ENGINE:NAME" affinity (comfyui)
    affinity: str  # the model (diffusers) or template (comfyui); "" for any executor
    ready: int  # claimable now (0 while paused)
    ahead: int  # claimed ahead by a busy executor
    running: int
    delayed: int  # waiting out a retry's backoff
    oldest_ready_seconds: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Placement:
        return cls(engine=row["engine"], affinity=row["affinity"], ready=int(row["ready"]),
                   ahead=int(row["ahead"]), running=int(row["running"]),
                   delayed=int(row["delayed"]),
                   oldest_ready_seconds=max(0.0, float(row["oldest_ready_seconds"])))


@dataclass(frozen=True)
class Digest:
    """What happened in a time window: the daily digest's figures."""
    batches: int
    finished: dict[str, int]  # status -> jobs
    mean_seconds: float | None  # of the jobs that succeeded
    top: list[tuple[str, int]]  # the busiest submitters, most images first


DOINGS = ("building_demo", "loading", "server_down")  # what keeps an executor from its jobs


@dataclass(frozen=True)
class WorkerInfo:
    """An executor process, as its last heartbeat described it."""
    id: str  # its lease owner name, host:pid
    host: str
    pid: int
    device: str
    version: str
    state: str  # idle, busy, stopped, lost
    job_id: int | None
    memory_total: int | None
    memory_used: int | None
    models: list[str]  # resident on its device
    allow: list[str] | None  # what it may run; None: anything
    stats: dict[str, Any]
    started_at: float
    seen_at: float

    @property
    def live(self) -> bool:
        return self.state in ("idle", "busy")

    @property
    def doing(self) -> tuple[str, list[str]] | None:
        """What keeps it from its jobs now — ("building_demo", models), ("loading",
        [model]) or ("server_down", [its ComfyUI server]) — or None."""
        doing = self.stats.get("doing") if self.live else None
        if not isinstance(doing, dict) or doing.get("what") not in DOINGS:
            return None  # (or a newer executor's word this version does not know)
        return doing["what"], [str(m) for m in doing.get("models") or ()]

    @property
    def cannot_run(self) -> dict[str, str]:
        """Templates its ComfyUI server lacks something for -> what (node or file)."""
        found = self.stats.get("cannot_run")
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> WorkerInfo:
        return cls(id=row["id"], host=row["host"], pid=row["pid"], device=row["device"],
                   version=row["version"], state=row["state"], job_id=row["job_id"],
                   memory_total=row["memory_total"], memory_used=row["memory_used"],
                   models=decoded(row["models"]) or [], allow=decoded(row["allow"]),
                   stats=decoded(row["stats"]) or {}, started_at=row["started_at"],
                   seen_at=row["seen_at"])


@dataclass(frozen=True)
class Schedule:
    """A recurring batch: a stored sheet run on a cron line."""
    id: int
    cron: str
    timezone: str
    template: str
    sheet: str  # the stored sheet, relative to the file store
    files: dict[str, str]  # picture name -> its stored path
    submitter: str
    platform: str
    conversation: str | None
    priority: Priority
    meta: dict[str, Any]
    created_at: float
    fired_at: float  # the last firing queued (its creation, at first)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Schedule:
        return cls(id=row["id"], cron=row["cron"], timezone=row["timezone"],
                   template=row["template"], sheet=row["sheet"],
                   files=decoded(row["files"]) or {}, submitter=row["submitter"],
                   platform=row["platform"], conversation=row["conversation"],
                   priority=Priority(row["priority"]), meta=decoded(row["meta"]) or {},
                   created_at=row["created_at"], fired_at=row["fired_at"])


@dataclass(frozen=True)
class Grant:
    platform: str
    user: str
    role: str
    granted_by: str
    granted_at: float
    max_priority: Priority | None = None  # raised above the role's; None: the role's

    @classmethod
    def from_row(cls, row: Any) -> Grant:
        raised = row["max_priority"]
        return cls(row["platform"], row["user_id"], row["role"], row["granted_by"],
                   row["granted_at"], None if raised is None else Priority(raised))


@dataclass(frozen=True)
class AuditEntry:
    """Who did, or was refused, what, when and where."""
    at: float
    platform: str
    user: str
    conversation: str | None
    action: str
    allowed: bool
    detail: dict[str, Any]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> AuditEntry:
        return cls(at=row["at"], platform=row["platform"], user=row["user_id"],
                   conversation=row["conversation"], action=row["action"],
                   allowed=bool(row["allowed"]), detail=decoded(row["detail"]) or {})


@dataclass(frozen=True)
class Message:
    """A message the bot owes someone (an outbox row)."""
    id: int
    key: str
    platform: str
    conversation: str
    thread: str | None
    kind: str  # text | image | file | progress
    payload: dict[str, Any]
    status: str  # pending | sent | failed
    attempts: int
    version: int
    next_at: float
    platform_id: str | None  # set once sent: what a progress edit edits
    error: str | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Message:
        return cls(id=row["id"], key=row["key"], platform=row["platform"],
                   conversation=row["conversation"], thread=row["thread"], kind=row["kind"],
                   payload=decoded(row["payload"]) or {}, status=row["status"],
                   attempts=row["attempts"], version=row["version"], next_at=row["next_at"],
                   platform_id=row["platform_id"], error=row["error"])


@dataclass(frozen=True)
class Upload:
    """A file someone sent the bot (an inbox row)."""
    id: int
    platform: str
    user: str
    conversation: str
    message: str | None
    name: str
    size: int
    handle: dict[str, Any]  # what the platform needs to download it
    received_at: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Upload:
        return cls(id=row["id"], platform=row["platform"], user=row["user_id"],
                   conversation=row["conversation"], message=row["message_id"],
                   name=row["name"], size=row["size"], handle=decoded(row["handle"]) or {},
                   received_at=row["received_at"])


@dataclass(frozen=True)
class Lookup:
    """The outcome of looking for a sheet in the inbox."""
    found: Upload | None
    ambiguous: bool = False  # several files fit: `candidates` are they
    candidates: tuple[Upload, ...] = field(default=())  # when nothing or several fit
