"""The announcer: follows the queue's event log and owes each interested endpoint a delivery.

It works as the chat's notifier does (bot.chat.notifier): events after its own cursor
become outbox rows, idempotent by key (bot.conventions.webhook_key), then the cursor
advances — so after a crash a replayed event owes nothing twice, and nothing waits on
the request that caused it. Each delivery's body is encoded here, once, with its
webhook-id, so every retry sends the same bytes under the same id and a receiver can
dedupe. Sending is bot.webhooks.delivery's job.

  submitted                        batch.queued
  a job succeeded / failed         job.succeeded / job.failed
  the batch's last job ended       batch.finished, or batch.canceled if any was canceled
  the batch was signed off          batch.approved (once per sign-off: reopened and signed
                                    off again is another)
  its channels' files were put      batch.delivered (once per trigger: its end, or a
  where they go                     sign-off; bot.app.deliveries.Shipper)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from msgspec import Struct

from bot.conventions import webhook_key
from bot.webhooks import payloads
from bot.webhooks.endpoints import Endpoint, Endpoints
from bot.webhooks.payloads import Links
from storage.outbox import Outbox
from storage.queue import TERMINAL, Queue
from storage.records import Batch, Event, Status
from storage.renditions import DELIVERED, Renditions
from storage.reviews import SIGNED_OFF
from storage.webhooks import PLATFORM, Webhooks

CURSOR = "webhooks"


class Announcer:
    def __init__(self, queue: Queue, outbox: Outbox, webhooks: Webhooks, endpoints: Endpoints,
                 links: Links, *, clock: Callable[[], float] = time.time):
        self.queue, self.outbox, self.webhooks = queue, outbox, webhooks
        self.endpoints, self.links, self.clock = endpoints, links, clock
        self.disabled: set[str] = set()
        self.registered: set[str] = set()
        self.ended: set[int] = set()  # batches whose end was owed (or found owed) already
        self.owed: list[dict[str, Any]] = []  # the rows the events being read owe

    async def start(self) -> None:
        """Remember the configured endpoints; a new one hears of events from now on, not
        of the whole history."""
        for e in self.endpoints.configured.values():
            await self.webhooks.register(e.id, e.url, e.kind, e.description)
            self.registered.add(e.id)
        if await self.outbox.cursor(CURSOR, None) is None:
            await self.outbox.advance(CURSOR, await self.queue.last_event_seq())

    async def run_once(self, limit: int = 500) -> int:
        """Handle the events after the cursor; returns how many. What they owe is written
        with the cursor's move, in one transaction."""
        seq = await self.outbox.cursor(CURSOR)
        events = await self.queue.events_after(seq, limit)
        if not events:
            return 0
        self.disabled = {e.id for e in await self.webhooks.endpoints() if e.disabled_at}
        self.owed = []
        for event in events:
            await self.handle(event)
        await self.outbox.put_many(self.owed, cursor=(CURSOR, events[-1].seq))
        return len(events)

    async def handle(self, event: Event) -> None:
        if event.batch_id is None or (event.kind not in ("submitted", SIGNED_OFF, DELIVERED)
                                      and event.kind not in TERMINAL):
            return
        batch = await self.queue.batch(event.batch_id)
        if batch is None:
            return
        callback = batch.meta.get("callback")
        if not self.endpoints.configured and not callback:
            return
        if event.kind == SIGNED_OFF:
            if batch.signed_off_at == event.at:  # (not reopened, or signed off again, since)
                await self.owe(batch, "batch.approved", f"b{batch.id}:{event.seq}", event.at,
                               payloads.approved(batch, await self.queue.batch_jobs(batch.id),
                                                 self.links))
            return
        if event.kind == DELIVERED:
            data = event.data or {}
            await self.owe(batch, "batch.delivered", f"b{batch.id}:{data.get('for')}",
                           event.at, payloads.delivered(
                               batch, await self.queue.batch_jobs(batch.id),
                               await Renditions(self.queue.db).of_batch(batch.id), data,
                               self.links))
            return
        if event.kind == "submitted":
            progress = await self.queue.batch_progress(batch.id)
            if progress is not None:
                await self.owe(batch, "batch.queued", f"b{batch.id}", event.at,
                               payloads.queued(batch, progress, self.links))
            return
        if event.kind not in TERMINAL or event.job_id is None:
            return
        job = await self.queue.job(event.job_id)
        if job is not None and job.status in (Status.SUCCEEDED, Status.FAILED):
            await self.owe(batch, f"job.{job.status}", f"j{job.id}", event.at,
                           payloads.job_ended(batch, job, self.links))
        progress = await self.queue.batch_progress(batch.id)
        if progress is None or progress.done < progress.total or batch.id in self.ended:
            return
        # Read after the fact, every one of an ended batch's events sees it ended: its end
        # is owed once (the outbox says whether it was, across restarts), not per event.
        kind = "batch.canceled" if progress.canceled else "batch.finished"
        owed = [e for e in self.endpoints.interested(kind, callback) if e.id not in self.disabled]
        if owed and not await self.outbox.get(webhook_key(owed[0].id, kind, f"b{batch.id}")):
            jobs = await self.queue.batch_jobs(batch.id)
            await self.owe(batch, kind, f"b{batch.id}", event.at,
                           payloads.ended(batch, jobs, self.links))
        self.ended.add(batch.id)
        if len(self.ended) > 10_000:  # long-finished batches: forget the oldest
            self.ended.pop()

    async def owe(self, batch: Batch, event_type: str, subject: str, at: float,
                  data: Struct) -> None:
        for endpoint in self.endpoints.interested(event_type, batch.meta.get("callback")):
            if endpoint.id not in self.disabled:
                self.owed.append(await self.delivery(endpoint, event_type, subject, at, data))

    async def owe_now(self, endpoint: Endpoint, event_type: str, subject: str, at: float,
                      data: Struct) -> str:
        """Owe one endpoint one event at once (a test). Returns the outbox key."""
        row = await self.delivery(endpoint, event_type, subject, at, data)
        await self.outbox.put_many([row])
        return row["key"]

    async def delivery(self, endpoint: Endpoint, event_type: str, subject: str, at: float,
                       data: Struct) -> dict[str, Any]:
        """The outbox row of one event owed to one endpoint (the same key again: nothing
        new), its body encoded now with its webhook-id."""
        if endpoint.id not in self.registered:
            await self.webhooks.register(endpoint.id, endpoint.url, endpoint.kind)
            self.registered.add(endpoint.id)
        key = webhook_key(endpoint.id, event_type, subject)
        return {"key": key, "platform": PLATFORM + endpoint.id, "conversation": endpoint.id,
                "thread": key, "kind": "webhook", "payload": {
                    "id": f"msg_{uuid.uuid4().hex}", "type": event_type, "url": endpoint.url,
                    "owed_at": self.clock(), "body": payloads.body(event_type, at, data)}}
