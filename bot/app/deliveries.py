"""Which of a batch's renditions ship: the files a channel's uploader gets.

A rendition ships when its job succeeded and every rule of its channel holds
(templates.deliver_checks found nothing) — and, once anyone reviews the batch (an image
approved, rejected or sent back, or the batch signed off), only where its image was
approved: review is then how a team says what goes live. A batch nobody reviews ships
every passing file. What does not ship says why (`held`), so a person can act on it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.app.permissions import Who
from storage.config import Config, StorageConfig
from storage.drops import BucketDrop, Drop, FolderDrop
from storage.files import FileStore
from storage.outbox import Outbox
from storage.queue import TERMINAL, Queue
from storage.records import Batch, Event, Job, Status
from storage.renditions import Rendition, Renditions
from storage.reviews import SIGNED_OFF, Review
from templates import actions
from templates.deliver_checks import MENDED_BY_A_NEW_SEED
from templates.settings import DeliverConfig

if TYPE_CHECKING:
    from bot.app.application import App

log = logging.getLogger("genbot.deliver")


@dataclass(frozen=True)
class Delivery:
    ships: list[Rendition]
    held: list[tuple[Rendition, str]]  # and why: "needs_review", "not_approved", "job_<status>"
    reviewed: bool  # the batch is under review: only approved images ship


def delivery(batch: Batch, jobs: Sequence[Job], renditions: Sequence[Rendition],
             channel: str | None = None) -> Delivery:
    by_id = {j.id: j for j in jobs}
    reviewed = batch.signed_off_at is not None or any(
        j.review != Review.UNREVIEWED for j in jobs if j.status == Status.SUCCEEDED)
    ships, held = [], []
    for r in renditions:
        if channel is not None and r.channel != channel:
            continue
        job = by_id.get(r.job_id)
        if job is None or job.status != Status.SUCCEEDED:
            held.append((r, f"job_{job.status if job else 'gone'}"))
        elif not r.passed:
            held.append((r, "needs_review"))
        elif reviewed and job.review != Review.APPROVED:
            held.append((r, "not_approved"))
        else:
            ships.append(r)
    return Delivery(ships, held, reviewed)


def zip_entries(ships: Sequence[Rendition]) -> list[tuple[str, str]]:
    """(stored path, name in the zip): each file in its channel's folder, named for the
    channel's uploader."""
    return [(r.path, f"{r.channel}/{r.name}") for r in ships]


# --- shipping ------------------------------------------------------------------------------

CURSOR = "deliveries"


def drops(config: Config) -> list[tuple[str, Drop]]:
    """Where [deliver] puts the files that ship: (its name, the drop)."""
    settings, store = config[DeliverConfig], config[StorageConfig]
    out: list[tuple[str, Drop]] = []
    if settings.folder:
        out.append(("folder", FolderDrop(settings.folder)))
    if settings.bucket:
        out.append(("bucket", BucketDrop(
            settings.bucket, prefix=settings.prefix, endpoint=store.endpoint,
            region=store.region, access_key=store.access_key, secret_key=store.secret_key,
            attempts=store.attempts)))
    return out


REROLL = "reroll:"  # a reroll's idempotency key: "reroll:<the job it makes again>"


class Shipper:
    """Follows the event log with a cursor of its own, as the notifier and the announcer
    do: a batch with files for its channels ships once it has ended with nobody reviewing
    it, or when it is signed off (its approved images' files). Each file that ships is put
    in every drop ([deliver] folder, bucket), then a "delivered" event says so — which the
    announcer turns into `batch.delivered`. A replayed event puts the same files again
    (the same bytes under the same keys) and says so again; the webhook is owed once per
    trigger (its key names it).

    With `app` and [deliver] max_rerolls, a job whose file breaks a rule a new picture may
    mend is made again ("again": a new seed, in its thread, as its submitter — their
    limits count it), at most that many times down a line of rerolls."""

    def __init__(self, queue: Queue, store: FileStore, outbox: Outbox,
                 targets: Sequence[tuple[str, Drop]], *, app: App | None = None):
        self.queue, self.store, self.outbox, self.targets = queue, store, outbox, targets
        self.app = app
        self.max_rerolls = app.config[DeliverConfig].max_rerolls if app else 0
        self.renditions = Renditions(queue.db)
        self.ended: set[int] = set()  # batches whose end this process shipped already

    async def start(self) -> None:
        """From now on: a new service does not ship the whole history."""
        if await self.outbox.cursor(CURSOR, None) is None:
            await self.outbox.advance(CURSOR, await self.queue.last_event_seq())

    async def run_once(self, limit: int = 500) -> int:
        events = await self.queue.events_after(await self.outbox.cursor(CURSOR), limit)
        for event in events:
            await self.handle(event)
        if events:
            await self.outbox.advance(CURSOR, events[-1].seq)
        return len(events)

    async def handle(self, event: Event) -> None:
        if event.batch_id is None or (event.kind != SIGNED_OFF and event.kind not in TERMINAL):
            return
        if event.kind == Status.SUCCEEDED and event.job_id is not None and self.max_rerolls:
            await self.reroll(event.job_id)
        batch = await self.queue.batch(event.batch_id)
        if batch is None:
            return
        if event.kind == SIGNED_OFF:
            if batch.signed_off_at == event.at:  # (not reopened since)
                await self.ship(batch, f"signoff{event.seq}")
            return
        progress = await self.queue.batch_progress(batch.id)
        if progress is None or progress.done < progress.total or batch.id in self.ended:
            return
        self.ended.add(batch.id)
        if len(self.ended) > 10_000:
            self.ended.pop()
        jobs = await self.queue.batch_jobs(batch.id)
        if not delivery(batch, jobs, []).reviewed:  # (under review: its sign-off ships it)
            await self.ship(batch, "end", jobs)

    async def reroll(self, job_id: int) -> None:
        """The job made again where a file of it breaks a rule a new picture may mend, and
        the line of rerolls it ends has room."""
        assert self.app is not None
        from bot.app.iterate import ActionRequest
        from bot.errors import Coded
        mendable = sorted({f["check"] for r in await self.renditions.of_job(job_id)
                           for f in r.findings if f["check"] in MENDED_BY_A_NEW_SEED})
        job = await self.queue.job(job_id)
        if not mendable or job is None or await self.rerolls_behind(job) >= self.max_rerolls:
            return
        batch = await self.queue.batch(job.batch_id)
        assert batch is not None
        platform, _, user = batch.submitter.partition(":")
        try:
            done = await self.app.act(Who(platform, user, batch.conversation), job_id,
                                      ActionRequest(actions.REROLL, key=f"{REROLL}{job_id}"))
        except Coded as e:  # (their limit reached, no executor: the file stays in review)
            log.info("no reroll", extra={"job": job_id, "why": e.code, "found": mendable})
            return
        log.info("rerolled", extra={"job": job_id, "batch": done.batch_id, "found": mendable})

    async def rerolls_behind(self, job: Job) -> int:
        """How many rerolls made this image: itself and its parents, while each was one."""
        count = 0
        for j in [job, *await self.queue.ancestors(job, limit=self.max_rerolls + 1)]:
            batch = await self.queue.batch(j.batch_id)
            if batch is None or not (batch.idempotency_key or "").startswith(REROLL):
                break
            count += 1
        return count

    async def ship(self, batch: Batch, trigger: str, jobs: Sequence[Job] | None = None) -> None:
        made = await self.renditions.of_batch(batch.id)
        if not made:
            return
        found = delivery(batch, jobs or await self.queue.batch_jobs(batch.id), made)
        placed: dict[str, list[str]] = {}
        for r in found.ships:
            key = f"batch_{batch.id}/{r.channel}/{r.name}"
            data = await asyncio.to_thread(self.store.path(r.path).read_bytes)
            placed[str(r.id)] = [await asyncio.to_thread(drop.put, key, data)
                                 for _, drop in self.targets]
        await self.renditions.delivered(batch.id, {
            "for": trigger, "files": len(found.ships), "held": len(found.held),
            "drops": [name for name, _ in self.targets], "placed": placed})
        log.info("batch delivered", extra={"batch": batch.id, "files": len(found.ships),
                                           "held": len(found.held), "for": trigger})
