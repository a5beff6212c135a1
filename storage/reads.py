"""Reading the queue: jobs, batches, counts, positions, estimates and the event log.

What every front shows (chat's /queue, the API, the dashboard, /metrics, the digest)
and nothing writes; the writes — enqueue, claims and leases, ends, cancel, pause — are
storage.queue's, whose `Queue` reads through this base. The SQL is storage.queries'.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from storage import queries as q
from storage.db import Database
from storage.records import (
    KEPT,
    TERMINAL,
    ActiveCounts,
    Batch,
    BatchCounts,
    Digest,
    Event,
    Job,
    LeasedJob,
    Placement,
    Priority,
    QueueState,
    RunningJob,
    Status,
)
from storage.reviews import REVIEWS, Review, review_of
from storage.states import NEXT

# A job list's review filter: a review state (storage.reviews), or "kept" and "unrated",
# the names approved and unreviewed had before there were reviews.
Rating = Literal["approved", "rejected", "changes_requested", "unreviewed", "kept", "unrated"]
RATING_FILTERS: dict[str, int] = {
    **{r.value: s.code or 0 for r, s in REVIEWS.items()}, "kept": KEPT, "unrated": 0}


def _rating(rating: Rating | None) -> int | None:
    """The filter as the SQL compares it (an unrated job's NULL read as 0)."""
    if rating is None:
        return None
    if rating not in RATING_FILTERS:
        raise ValueError(f"a rating filter is one of {', '.join(RATING_FILTERS)}, "
                         f"not {rating!r}")
    return RATING_FILTERS[rating]


def job_filters(*, batch: int | None = None, status: str | None = None,
                submitter: str | None = None, rating: Rating | None = None,
                stars: int | None = None, model: str | None = None,
                template: str | None = None, version: int | None = None,
                row: int | None = None, axis: tuple[str, str] | None = None) -> dict[str, Any]:
    """What a job list may be narrowed to, as its SQL's parameters: `rating` images in that
    review state; `stars` graded at least that; `model` run on it; `template` and `version`
    its batch's; `row` the sheet's row; `axis` (key, value) a swept value (a sweep's
    `steps`, an A/B comparison's `variant`), a number matching however it was written
    (6, 6.0)."""
    key, value = axis if axis is not None else (None, None)
    return {"batch": batch, "status": status, "submitter": submitter,
            "rating": _rating(rating), "stars": stars, "model": model, "template": template,
            "version": version, "row": row, "axis": key,
            "axis_values": json.dumps(_spellings(value) if value is not None else [])}


def _spellings(value: str) -> list[str]:
    """A value as a job's axes may hold it, as text: "6" is also 6.0, "6.0" also 6."""
    found = [value]
    try:
        number = float(value)
    except ValueError:
        return found
    if math.isfinite(number):
        found.append(repr(number))
        if number.is_integer():
            found.append(str(int(number)))
    return found


@dataclass(frozen=True)
class ReviewCounts:
    images: dict[Review, int]  # finished images by review state (absent: none)
    unfinished: int  # jobs queued or running

    @property
    def unreviewed(self) -> int:
        return sum(n for r, n in self.images.items() if not REVIEWS[r].reviewed)

    @property
    def total(self) -> int:
        return sum(self.images.values())

    @property
    def reviewed(self) -> int:
        return self.total - self.unreviewed


@dataclass(frozen=True)
class BatchProgress:
    batch_id: int
    total: int
    counts: dict[str, int]
    jobs_ahead: int | None  # jobs before this batch's next one; None when none is queued
    eta_seconds: float | None  # until its last queued job is done, from recent durations

    @property
    def done(self) -> int:
        return sum(self.counts.get(s, 0) for s in TERMINAL)

    @property
    def succeeded(self) -> int:
        return self.counts.get(Status.SUCCEEDED, 0)

    @property
    def failed(self) -> int:
        return self.counts.get(Status.FAILED, 0)

    @property
    def canceled(self) -> int:
        """Its own count: a canceled job did not fail."""
        return self.counts.get(Status.CANCELED, 0)


class QueueReads:
    db: Database
    clock: Callable[[], float]

    async def job(self, job_id: int) -> Job | None:
        row = await self.db.fetchrow(q.JOB, {"job": job_id})
        return Job.from_row(row) if row else None

    async def batch_jobs(self, batch_id: int) -> list[Job]:
        """Every job of a batch, in sheet order."""
        return [Job.from_row(r) for r in await self.db.fetch(q.BATCH_JOBS, {"batch": batch_id})]

    async def batch(self, batch_id: int) -> Batch | None:
        row = await self.db.fetchrow(q.BATCH, {"batch": batch_id})
        return Batch.from_row(row) if row else None

    async def jobs_ahead(self, job_id: int) -> int | None:
        """Queued jobs that will be claimed before this one; None if it is not queued."""
        job = await self.db.fetchrow(q.JOB, {"job": job_id})
        if job is None or job["status"] != Status.QUEUED:
            return None
        return await self.db.fetchval(q.JOBS_AHEAD, {"job": job_id})

    async def batch_jobs_ahead(self, batch_id: int) -> int | None:
        first = await self.db.fetchval(q.BATCH_FIRST_QUEUED, {"batch": batch_id})
        return None if first is None else await self.db.fetchval(q.JOBS_AHEAD, {"job": first})

    async def active_counts(self) -> ActiveCounts:
        """Queued and running jobs: cheap at any history size, for health checks."""
        row = await self.db.fetchrow(q.ACTIVE_COUNTS)
        assert row is not None
        return ActiveCounts(row[Status.QUEUED], row[Status.RUNNING])

    async def active_jobs_of(self, submitter: str) -> int:
        """Queued and running jobs of one submitter (a per-person limit)."""
        return await self.db.fetchval(q.ACTIVE_BY_SUBMITTER, {"submitter": submitter})

    async def batches_since(self, submitter: str, since: float) -> int:
        """Submissions by one submitter after `since` (a rate limit)."""
        return await self.db.fetchval(q.BATCHES_SINCE, {"submitter": submitter, "since": since})

    async def batch_by_key(self, idempotency_key: str) -> int | None:
        row = await self.db.fetchrow(q.BATCH_BY_IDEMPOTENCY_KEY, {"key": idempotency_key})
        return row["id"] if row else None

    async def latest_batch(self, submitter: str) -> int | None:
        return await self.db.fetchval(q.LATEST_BATCH, {"submitter": submitter})

    async def batches_of(self, submitter: str, after: int = 0) -> list[int]:
        return [r["id"] for r in await self.db.fetch(q.BATCHES_OF, {"submitter": submitter,
                                                                    "after": after})]

    async def page_jobs(self, *, before: int | None = None, limit: int = 100,
                        offset: int = 0, **filters: Any) -> list[Job]:
        """Jobs newest first, filtered (`job_filters`): those with an id below `before` (a
        cursor, for scripts walking everything), or from `offset` on (for a view that
        jumps about)."""
        rows = await self.db.fetch(q.for_dialect(q.PAGE_JOBS, self.db.dialect), {
            "before": before, "limit": limit, "offset": offset, **job_filters(**filters)})
        return [Job.from_row(r) for r in rows]

    async def count_jobs(self, **filters: Any) -> int:
        """How many jobs page_jobs would walk through, with the same filters."""
        return await self.db.fetchval(q.for_dialect(q.COUNT_JOBS, self.db.dialect),
                                      job_filters(**filters))

    async def review_counts(self, batch_id: int) -> ReviewCounts:
        """A batch's images by review, and how many of its jobs have not ended."""
        rows = await self.db.fetch(q.REVIEW_COUNTS, {"batch": batch_id})
        return ReviewCounts({review_of(r["rating"]): r["n"] for r in rows},
                            await self.db.fetchval(q.BATCH_ACTIVE, {"batch": batch_id}))

    async def page_batches(self, *, before: int | None = None, submitter: str | None = None,
                           limit: int = 50) -> list[BatchCounts]:
        """Batches newest first, each with its jobs counted by status."""
        rows = await self.db.fetch(q.PAGE_BATCHES, {"before": before, "submitter": submitter,
                                                    "limit": limit})
        if not rows:
            return []
        counts: dict[int, dict[str, int]] = {r["id"]: {} for r in rows}
        for c in await self.db.fetch(q.BATCH_RANGE_COUNTS, {"first": rows[-1]["id"],
                                                            "last": rows[0]["id"]}):
            if c["batch_id"] in counts:
                counts[c["batch_id"]][c["status"]] = c["n"]
        return [BatchCounts(Batch.from_row(r), counts[r["id"]]) for r in rows]

    # --- lineage: the images made from an image, and what it was made from ------------
    async def children(self, job_id: int) -> list[Job]:
        """The jobs made from this job's image (again, vary, upscale, edit), oldest first."""
        return [Job.from_row(r) for r in await self.db.fetch(q.CHILDREN, {"job": job_id})]

    async def descendants(self, batch_id: int) -> list[Job]:
        """Every job made from the batch's images, and from those, in id order."""
        return [Job.from_row(r) for r in await self.db.fetch(q.DESCENDANTS, {"batch": batch_id})]

    async def ancestors(self, job: Job, limit: int = 100) -> list[Job]:
        """What `job` was made from: its parent first, then the parent's, up to the sheet's
        row (the first job with no parent). A parent that retention forgot ends it."""
        chain: list[Job] = []
        seen = {job.id}
        while job.parent_job_id is not None and len(chain) < limit:
            parent = await self.job(job.parent_job_id)
            if parent is None or parent.id in seen:
                break
            chain.append(parent)
            seen.add(parent.id)
            job = parent
        return chain

    async def latest_batch_in(self, platform: str, conversation: str) -> int | None:
        return await self.db.fetchval(q.LATEST_BATCH_IN, {"platform": platform,
                                                          "conversation": conversation})

    async def batches_in_thread(self, platform: str, conversation: str,
                                thread: str) -> list[int]:
        """Batches submitted inside a platform's thread (id order)."""
        where = {"platform": platform, "conversation": conversation, "thread": thread}
        return [r["id"] for r in await self.db.fetch(q.BATCHES_IN_THREAD, where)]

    async def now_and_next(self) -> list[RunningJob]:
        """The jobs executors hold, each marked working (on the device or server now) or
        not (next): an executor starts a group of jobs together but works through it one
        job at a time, and claims the group after it ahead. A running job that has shown
        a step works; where none of an executor's group has yet, its first does. Working
        jobs first, oldest first; then what is next, in the order it will run."""
        rows = await self.db.fetch(q.NOW_AND_NEXT)
        started = sorted((r for r in rows if r["status"] == Status.RUNNING),
                         key=lambda r: (r["started_at"] or 0, r["id"]))
        stepping = {r["lease_owner"] for r in started if r["stepped"]}
        first: set[str | None] = set()
        working = set()
        for r in started:
            owner = r["lease_owner"]
            if r["stepped"] or (owner not in stepping and owner not in first):
                working.add(r["id"])
            first.add(owner)
        jobs = [replace(RunningJob.from_row(r), working=r["id"] in working)
                for r in started + sorted((r for r in rows if r["status"] != Status.RUNNING),
                                          key=lambda r: (r["priority"], r["id"]))]
        return sorted(jobs, key=lambda j: not j.working)

    async def counts(self, *, next_apart: bool = False) -> dict[str, dict[str, int]]:
        """{status: {priority: n}} over all jobs. `next_apart`: the jobs executors hold
        but are not on yet counted under NEXT, not as queued or running (what a person
        reads as running is what runs now)."""
        out: dict[str, dict[str, int]] = {s.value: {} for s in Status}
        for row in await self.db.fetch(q.COUNTS):
            if row["n"]:
                out[row["status"]][Priority(row["priority"]).label] = int(row["n"])
        if next_apart:
            out[NEXT] = {}
            for job in await self.now_and_next():
                if not job.working:
                    label, stored = job.priority.label, out[job.status.value]
                    stored[label] = stored.get(label, 0) - 1
                    out[NEXT][label] = out[NEXT].get(label, 0) + 1
        return {status: {p: n for p, n in by.items() if n} for status, by in out.items()}

    async def queued_by_affinity(self) -> dict[str, int]:
        """Queued jobs by the model they need."""
        return {r["affinity"]: r["n"] for r in await self.db.fetch(q.QUEUED_BY_AFFINITY)}

    async def table_sizes(self) -> list[dict[str, Any]]:
        """{name, bytes, live, dead} per table, indexes included (live and dead rows:
        PostgreSQL's estimates; None on SQLite)."""
        sql = q.TABLE_SIZES_PG if self.db.dialect == "postgres" else q.TABLE_SIZES_SQLITE
        return await self.db.fetch(sql)

    async def oldest_snapshot(self) -> float | None:
        """Seconds the oldest open transaction snapshot on this PostgreSQL database has
        been held by another session (0: none); None on SQLite (no such thing)."""
        if self.db.dialect != "postgres":
            return None
        return float(await self.db.fetchval(q.OLDEST_SNAPSHOT_PG) or 0)

    async def leased_idle(self, limit: int = 1000) -> list[LeasedJob]:
        """Every leased job (claimed ahead, or running), the longest without a sign of
        life first: stuck ones lead (queries.LEASED_IDLE)."""
        return [LeasedJob.from_row(r)
                for r in await self.db.fetch(q.LEASED_IDLE, {"now": self.clock(), "limit": limit})]

    async def placement(self) -> list[Placement]:
        """Ready, claimed-ahead, running and delayed jobs, and the oldest ready job's wait,
        per engine and affinity (the genbot_placement view)."""
        return [Placement.from_row(r) for r in await self.db.fetch(q.PLACEMENT)]

    async def average_duration(self, last: int = 20) -> float | None:
        """Mean run time of the last `last` succeeded jobs, or None before the first."""
        value = await self.db.fetchval(q.RECENT_DURATION, {"limit": last})
        return None if value is None else float(value)

    async def eta(self, jobs_ahead: int) -> float | None:
        """Seconds until a job with `jobs_ahead` before it has finished."""
        avg = await self.average_duration()
        if avg is None:
            return None
        executors = max(1, await self.db.fetchval(q.RUNNING_EXECUTORS) or 0)
        return (jobs_ahead + 1) * avg / executors

    async def batch_waiting_for(self, batch_id: int) -> list[str]:
        """What a batch's queued jobs need (their affinities), without reading its jobs."""
        rows = await self.db.fetch(q.BATCH_WAITING_FOR, {"batch": batch_id})
        return [r["affinity"] for r in rows]

    async def batches_waiting_on(self, affinity: str, limit: int = 100) -> list[int]:
        """The batches with jobs queued for `affinity`, oldest first."""
        return [r["batch_id"] for r in
                await self.db.fetch(q.BATCHES_WAITING_ON, {"affinity": affinity, "limit": limit})]

    async def batch_models(self, batch_id: int) -> list[str]:
        """The models a batch's jobs need (without reading its jobs: it may have thousands)."""
        return [r["affinity"] for r in await self.db.fetch(q.BATCH_MODELS, {"batch": batch_id})]

    async def batch_progress(self, batch_id: int) -> BatchProgress | None:
        batch = await self.db.fetchrow(q.BATCH, {"batch": batch_id})
        if batch is None:
            return None
        rows = await self.db.fetch(q.BATCH_COUNTS, {"batch": batch_id})
        counts = {r["status"]: r["n"] for r in rows}
        ahead = await self.batch_jobs_ahead(batch_id)
        last = await self.db.fetchval(q.BATCH_LAST_QUEUED, {"batch": batch_id})
        eta = None
        if last is not None:
            eta = await self.eta(await self.db.fetchval(q.JOBS_AHEAD, {"job": last}))
        return BatchProgress(batch_id, batch["total_jobs"], counts, ahead, eta)

    async def digest(self, since: float, until: float) -> Digest:
        """What happened after `since`, up to `until`: batches made, jobs finished by
        status with their mean run time, the three busiest submitters."""
        span = {"since": since, "until": until}
        finished = {r["status"]: r for r in await self.db.fetch(q.DIGEST_JOBS, span)}
        ok = finished.get(Status.SUCCEEDED)
        return Digest(
            batches=await self.db.fetchval(q.DIGEST_BATCHES, span),
            finished={s: r["n"] for s, r in finished.items()},
            mean_seconds=float(ok["seconds"]) if ok and ok["seconds"] is not None else None,
            top=[(r["submitter"], r["n"]) for r in await self.db.fetch(q.DIGEST_SUBMITTERS, span)])

    async def events_after(self, seq: int, limit: int = 1000) -> list[Event]:
        """Events with a sequence number above `seq`, oldest first: resume from the last seen."""
        sql = q.EVENTS_AFTER if self.db.dialect == "sqlite" else q.EVENTS_AFTER_PG
        rows = await self.db.fetch(sql, {"after": seq, "limit": limit})
        return [Event.from_row(r) for r in rows]

    async def last_event_seq(self) -> int:
        sql = q.LAST_EVENT_SEQ if self.db.dialect == "sqlite" else q.LAST_EVENT_SEQ_PG
        return await self.db.fetchval(sql)

    async def failed_jobs(self, batch_id: int) -> list[Job]:
        """A batch's jobs that failed for good, in sheet order (what a retry runs again)."""
        return [j for j in await self.batch_jobs(batch_id) if j.status == Status.FAILED]

    async def paused(self) -> bool:
        return (await self.state()).paused

    async def state(self) -> QueueState:
        """The pause flag and who last changed it."""
        row = await self.db.fetchrow(q.QUEUE_STATE)
        assert row is not None, "migration 0002 inserts the queue_state row"
        return QueueState(bool(row["paused"]), row["changed_by"], row["changed_at"])
