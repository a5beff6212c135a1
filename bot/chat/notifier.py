"""The notifier: follows the queue's event log and writes what the bot owes into the outbox.

It reads events after its cursor, turns each into outbox rows (idempotent by key),
then advances the cursor. After a restart it resumes from the cursor; replayed events
owe nothing new. Messages are computed from the database's current state, so a
replayed progress event never shows an older count. Sending is the sender's job.

For each batch submitted from a chat platform:
  acceptance   batch id, job count, queue position, ETA
  progress     one message per batch (edited in place): a bar, done/failed/total, the step
  images       each finished image, captioned with its row and the row's key values
  failures     each failed job with its row and reason
  summary      counts, duration, a contact sheet and a results .xlsx; the submitter mentioned
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from bot.app.results import columns_of, write_results
from bot.conventions import batch_key, job_key, thread_of
from bot.messages import bar, say
from executor.workflow import Template
from storage.files import FileStore
from storage.outbox import Outbox
from storage.queue import TERMINAL, BatchProgress, Queue
from storage.records import Batch, Event, Job, Status

CURSOR = "notifier"
CAPTION_VALUES = 3  # key values of a row shown in an image caption
MILESTONES = (25, 50, 75)  # percent, where progress cannot be edited in place


class Notifier:
    def __init__(self, queue: Queue, outbox: Outbox, store: FileStore, *,
                 platforms: Iterable[str], editable: Iterable[str] = (),
                 templates: dict[str, Template] | None = None, font: str = "",
                 auto_save: bool = True, clock: Callable[[], float] = time.time):
        self.queue, self.outbox, self.store = queue, outbox, store
        self.platforms = set(platforms)
        self.editable = set(editable)  # platforms that edit one progress message in place
        self.auto_save = auto_save
        # One reader per set of platforms: a `genbot chat` beside `genbot serve` keeps its own.
        self.cursor = f"{CURSOR}:{','.join(sorted(self.platforms))}"
        self.templates = templates or {}  # name -> Template: the column order of its sheet
        self.font, self.clock = font, clock

    def columns(self, template: str, jobs: list[Job]) -> list[str]:
        return columns_of(self.templates.get(template), jobs)

    def key_values(self, template: str, job: Job) -> list[str]:
        """The values that tell a row apart: not images, not seeds."""
        t = self.templates.get(template)
        params = job.values
        names = [n for n in self.columns(template, [job])
                 if t is None or t.params[n].type not in ("image", "seed")]
        return [str(params[n]) for n in names if params.get(n) not in (None, "")]

    async def _progress(self, batch_id: int) -> BatchProgress:
        progress = await self.queue.batch_progress(batch_id)
        assert progress is not None, "a batch's events come after the batch"
        return progress

    async def run_once(self, limit: int = 500) -> int:
        """Handle the events after the cursor; returns how many."""
        seq = await self.outbox.cursor(self.cursor)
        events = await self.queue.events_after(seq, limit)
        for event in events:
            await self.handle(event)
        if events:  # once per chunk: a crash mid-chunk replays it, which owes nothing twice
            await self.outbox.advance(self.cursor, events[-1].seq)
        return len(events)

    async def handle(self, event: Event) -> None:
        batch_id = event.batch_id
        if batch_id is None:
            return
        batch = await self.queue.batch(batch_id)
        if batch is None or batch.platform not in self.platforms:
            return
        kind = event.kind
        if kind == "submitted":
            await self.accepted(batch)
        job = await self.queue.job(event.job_id) if event.job_id else None
        if job and kind == Status.SUCCEEDED:
            await self.images(batch, job)
        if job and kind == Status.FAILED:
            await self.failure(batch, job)
        await self.progress(batch, event if kind == "progress" else None)
        if kind in TERMINAL:
            progress = await self.queue.batch_progress(batch_id)
            if progress is not None and progress.done >= progress.total:
                await self.summary(batch)

    # --- the messages -------------------------------------------------------------------
    def _lang(self, batch: Batch) -> str:
        return batch.meta.get("lang", "en")

    async def _owe(self, key: str, batch: Batch, kind: str, payload: dict, *,
                   answer: bool = False) -> None:
        """`answer`: it answers the submitting message (the acceptance, the summary), so
        it carries that message's context (e.g. DingTalk's sessionWebhook, which can
        @-mention the submitter)."""
        context = batch.meta.get("context", {}) if answer else {}
        await self.outbox.put(key, platform=batch.platform, conversation=batch.conversation or "",
                              thread=thread_of(batch), kind=kind,
                              payload={**payload, "batch": batch.id, "lang": self._lang(batch),
                                       "context": context})

    async def accepted(self, batch: Batch) -> None:
        progress = await self._progress(batch.id)
        lang = self._lang(batch)
        eta = progress.eta_seconds
        if batch.meta.get("at"):
            text = say("accepted_at", lang, batch=batch.id, jobs=progress.total,
                       template=batch.template, at=batch.meta["at"])
        else:
            text = say("accepted", lang, batch=batch.id, jobs=progress.total,
                       template=batch.template, ahead=progress.jobs_ahead or 0,
                       eta=say("eta_minutes", lang, minutes=max(1, round(eta / 60)))
                       if eta is not None else say("eta_unknown", lang))
        if batch.meta.get("retry_of"):
            text += say("retry_of", lang, batch=batch.meta["retry_of"])
        await self._owe(batch_key(batch.id, "accepted"), batch, "text", {"text": text},
                        answer=True)

    async def progress(self, batch: Batch, step_event: Event | None) -> None:
        progress = await self._progress(batch.id)
        lang = self._lang(batch)
        failed = progress.failed
        finished = progress.done >= progress.total
        if batch.platform not in self.editable:
            await self.milestones(batch, progress.done, progress.total, failed)
            return
        text = say("progress", lang, batch=batch.id, bar=bar(progress.done, progress.total),
                   done=progress.done, total=progress.total, failed=failed)
        if step_event and not finished:
            d = step_event.data
            text += "\n" + say("progress_step", lang, row=d.get("row"), step=d["step"],
                               total=d["total"])
        buttons = [] if finished else [{
            "label": say("button_cancel", lang), "command": f"/cancel {batch.id}",
            "confirm": say("confirm_cancel", lang, batch=batch.id),
            "deny": say("button_keep", lang)}]
        await self.outbox.put_progress(
            batch_key(batch.id, "progress"), platform=batch.platform,
            conversation=batch.conversation or "", thread=thread_of(batch),
            payload={"text": text, "done": progress.done, "total": progress.total,
                     "failed": failed, "batch": batch.id, "finished": finished,
                     "buttons": buttons, "lang": lang})

    async def milestones(self, batch: Batch, done: int, total: int, failed: int) -> None:
        """Where a message cannot be edited: one message at each quarter passed (the
        summary is the last), each owed once."""
        for percent in MILESTONES:
            if done < total and done * 100 >= percent * total:
                await self._owe(batch_key(batch.id, f"milestone:{percent}"), batch, "text", {
                    "text": say("milestone", self._lang(batch), batch=batch.id,
                                percent=percent, done=done, total=total, failed=failed)})

    async def images(self, batch: Batch, job: Job) -> None:
        values = self.key_values(batch.template, job)[:CAPTION_VALUES]
        caption = say("image_caption", self._lang(batch), row=job.row,
                      values=" · ".join(values))
        for i, path in enumerate(job.outputs):
            await self._owe(job_key(job.id, f"image:{i}"), batch, "image",
                            {"path": path, "text": caption, "row": job.row})

    async def failure(self, batch: Batch, job: Job) -> None:
        text = say("job_failed", self._lang(batch), row=job.row, error=job.error)
        await self._owe(job_key(job.id, "failed"), batch, "text", {"text": text})

    async def summary(self, batch: Batch) -> None:
        """Three messages: the text (mentioning the submitter), the contact sheet, the
        results .xlsx — each its own outbox row, so a retry never posts one twice."""
        key = batch_key(batch.id, "summary")
        if await self.outbox.get(key):
            return  # owed already (a replayed event): the files are written too
        jobs = await self.queue.batch_jobs(batch.id)
        lang = self._lang(batch)
        done = [j for j in jobs if j.status == Status.SUCCEEDED]
        # Events are read after the fact: the last job may have ended before this event's
        # turn came. Owe every image and failure first (idempotent), so the summary (and
        # with auto_save off, the deletion it carries) comes after all of them in the thread.
        for job in jobs:
            if job.status == Status.SUCCEEDED:
                await self.images(batch, job)
            elif job.status == Status.FAILED:
                await self.failure(batch, job)
        results, contact = await asyncio.to_thread(  # (reads every image: off the loop)
            write_results, self.store, batch, jobs, self.templates.get(batch.template),
            self.font)
        started = min((j.started_at for j in jobs if j.started_at), default=None)
        finished = max((j.finished_at for j in jobs if j.finished_at), default=None)
        minutes = (finished - started) / 60 if started and finished else 0
        text = say("summary", lang, batch=batch.id, user=batch.submitter,
                   succeeded=len(done), total=len(jobs),
                   failed=sum(j.status == Status.FAILED for j in jobs),
                   canceled=sum(j.status == Status.CANCELED for j in jobs), minutes=minutes)
        await self._owe(key, batch, "text", {"text": text, "mention": batch.submitter},
                        answer=True)
        if contact:
            await self._owe(batch_key(batch.id, "summary:contact"), batch, "image",
                            {"path": contact, "text": ""})
        # Last in the thread: once it is sent, every image of the batch has been delivered.
        delete = [] if self.auto_save else [o for j in done for o in j.outputs]
        await self._owe(batch_key(batch.id, "summary:results"), batch, "file",
                        {"path": results, "text": "", "delete_after": delete})
