"""The notifier: follows the queue's event log and writes what the bot owes into the outbox.

It reads events after its cursor, turns each into outbox rows (idempotent by key),
then advances the cursor. After a restart it resumes from the cursor; replayed events
owe nothing new. Messages are computed from the database's current state, so a
replayed progress event never shows an older count. Sending is the sender's job.

For each batch submitted from a chat platform:
  acceptance   batch id, job count, queue position, ETA
  progress     one message per batch (edited in place): a bar, done/failed/total, the step;
               where nothing can be edited, "started" once work starts and a milestone at
               each quarter really passed (never the same count twice)
  images       each finished image, captioned with its row and the values that tell its
               row apart from the batch's others (the key column first)
  failures     each failed job with its row and reason
  summary      counts, duration, a contact sheet and a results .xlsx; the submitter mentioned;
               one message with both files where the platform takes several (`bundles`)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from bot.app.deliveries import delivery
from bot.app.estimates import eta as estimate
from bot.app.estimates import held_by
from bot.app.filled import write_filled
from bot.app.grids import write_grids
from bot.app.placement import unplaced
from bot.app.results import columns_of, job_label, rendition_text, swept_axes, write_results
from bot.conventions import batch_key, job_key, thread_of
from bot.messages import action_label, bar, canceled, review_summary, say, took
from storage.files import FileStore
from storage.media import is_image_name
from storage.outbox import Outbox
from storage.queue import TERMINAL, BatchProgress, Queue
from storage.records import Batch, Event, Job, Status
from storage.renditions import Rendition, Renditions
from storage.reviews import REOPENED, SIGNED_OFF
from storage.workers import Workers
from templates.actions import ACTIONS
from templates.graph import Template

CURSOR = "notifier"
CAPTION_VALUES = 3  # key values of a row shown in an image caption
MILESTONES = (25, 50, 75)  # percent, where progress cannot be edited in place
BUNDLED_GRIDS = 8  # a sweep's grids in its summary message; more follow (Slack: 10 files)
SHOWN_HELD = 5  # a summary's files that need review, each with why; the rest counted
SMALL = 8  # rows: a smaller batch gets only the halfway milestone (each is a message)


def summary_code(canceled: int, total: int) -> str:
    """Which summary tells what happened: finished, canceled in part, or canceled whole
    (a canceled batch never reads "finished: 0 of 12 images")."""
    if not canceled:
        return "summary"
    return "summary_all_canceled" if canceled == total else "summary_canceled"


class Notifier:
    def __init__(self, queue: Queue, outbox: Outbox, store: FileStore, *,
                 platforms: Iterable[str], editable: Iterable[str] = (),
                 bundles: Iterable[str] = (),
                 inline: Iterable[str] = (), demo: Iterable[str] = (),
                 templates: dict[str, Template] | None = None, font: str = "",
                 auto_save: bool = True, clock: Callable[[], float] = time.time,
                 public_url: str = ""):
        self.queue, self.outbox, self.store = queue, outbox, store
        self.public_url = public_url.rstrip("/")  # [api] public_url: the dashboard's links
        self.platforms = set(platforms)
        self.editable = set(editable)  # platforms that edit one progress message in place
        self.bundles = set(bundles)  # platforms whose one message carries text and files
        self.inline = set(inline)  # platforms that draw an image's buttons inside its message
        self.demo = set(demo)  # model names that are genbot's demo models
        self.telling: dict[int, list[str]] = {}  # batch -> the columns that tell rows apart
        self.auto_save = auto_save
        # One reader per set of platforms: a `genbot chat` beside `genbot serve` keeps its own.
        self.cursor = f"{CURSOR}:{','.join(sorted(self.platforms))}"
        self.templates = templates or {}  # name -> Template: the column order of its sheet
        self.font, self.clock = font, clock

    def columns(self, template: str, jobs: list[Job]) -> list[str]:
        return columns_of(self.templates.get(template), jobs)

    async def key_values(self, batch: Batch, job: Job) -> list[str]:
        """The values that tell this row apart from the batch's others (not images, not
        seeds, not what every row shares), the key column — the template's first — first."""
        source = batch.meta.get("root_batch", batch.id)  # an action's: its sheet's batch
        if source not in self.telling:
            jobs = await self.queue.batch_jobs(source) or await self.queue.batch_jobs(batch.id)
            t = self.templates.get(batch.template)
            names = [n for n in self.columns(batch.template, jobs)
                     if t is None or t.params[n].type not in ("image", "seed")]
            varying = [n for n in names
                       if len({repr(j.values.get(n)) for j in jobs}) > 1 or len(jobs) == 1]
            self.telling[source] = varying
            if len(self.telling) > 1000:  # finished batches' entries: forget the oldest
                self.telling.pop(next(iter(self.telling)))
        params, swept = job.values, job.workflow.get("axes") or {}  # (captioned by key)
        return [str(params[n]) for n in self.telling[source]
                if n not in swept and params.get(n) not in (None, "")]

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
        if kind in (SIGNED_OFF, REOPENED):
            if kind == SIGNED_OFF:
                await self.signed_off(batch, event)
            return
        job = await self.queue.job(event.job_id) if event.job_id else None
        if job and kind == Status.SUCCEEDED:
            await self.images(batch, job)
        if job and kind == Status.FAILED:
            await self.failure(batch, job)
        if batch.meta.get("action"):  # an action's images: no acceptance, progress, summary
            return                    # (the action's own answer was its one message)
        if kind == "submitted":
            await self.accepted(batch)
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
        if batch.meta.get("at"):
            text = say("accepted_at", lang, batch=batch.id, count=progress.total,
                       template=batch.template, at=batch.meta["at"])
        else:
            text = say("accepted", lang, batch=batch.id, count=progress.total,
                       template=batch.template,
                       ahead=say("jobs_ahead", lang, count=progress.jobs_ahead or 0),
                       eta=estimate(lang, progress.eta_seconds, await held_by(self.queue)))
        if batch.meta.get("retry_of"):
            text += say("retry_of", lang, batch=batch.meta["retry_of"])
        if self.demo:
            used = sorted(set(await self.queue.batch_models(batch.id)) & self.demo)
            if used:
                text += say("demo_note", lang, models=", ".join(used))
        await self._owe(batch_key(batch.id, "accepted"), batch, "text", {"text": text},
                        answer=True)

    async def waiting(self) -> int:
        """Each batch whose queued jobs no running executor can take gets one notice in
        its thread saying what is missing where (nobody waits without knowing why); the
        outbox's key makes it once per batch and need. Returns how many were owed."""
        queued = await self.queue.queued_by_affinity()
        if not queued:
            return 0
        owed = 0
        for need in unplaced(queued, await Workers.of(self.queue).all()):
            for batch_id in await self.queue.batches_waiting_on(need.need):
                batch = await self.queue.batch(batch_id)
                if batch is None or batch.platform not in self.platforms:
                    continue
                text = say("unplaced_notice", self._lang(batch), batch=batch.id,
                           what=need.what, why="; ".join(need.why))
                await self._owe(batch_key(batch.id, f"unplaced:{need.need}"), batch, "text",
                                {"text": text})
                owed += 1
        return owed

    async def progress(self, batch: Batch, step_event: Event | None) -> None:
        progress = await self._progress(batch.id)
        lang = self._lang(batch)
        failed = progress.failed
        finished = progress.done >= progress.total
        if batch.platform not in self.editable:
            await self.milestones(batch, progress)
            return
        shown = bar(progress.total, progress.succeeded, failed, progress.canceled)
        if finished and progress.canceled:  # not "12/12 done": what the cancel left
            text = say("progress_canceled", lang, batch=batch.id, bar=shown,
                       total=progress.total, succeeded=progress.succeeded, failed=failed,
                       canceled=progress.canceled)
        else:
            text = say("progress", lang, batch=batch.id, bar=shown, done=progress.done,
                       total=progress.total, failed=failed,
                       canceled=canceled(lang, progress.canceled))
        if step_event and not finished:
            d = step_event.data
            text += "\n" + say("progress_step", lang, row=d.get("row"), step=d["step"],
                               total=d["total"])
        elif not finished and not progress.counts.get(Status.RUNNING):  # nothing under way:
            workers = await Workers.of(self.queue).all()                # is anyone coming?
            for need in unplaced(await self.queue.batch_waiting_for(batch.id), workers):
                text += "\n" + say("status_unplaced", lang, what=need.what,
                                   why="; ".join(need.why))
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

    async def milestones(self, batch: Batch, progress: BatchProgress) -> None:
        """Where a message cannot be edited: "started" once the first job runs (a batch
        generated in one go still shows work began), then the highest quarter passed —
        a jump over several quarters is one message, so no count is told twice. The
        summary is the last word."""
        done, total, failed = progress.done, progress.total, progress.failed
        if done >= total:
            return
        lang = self._lang(batch)
        if progress.counts.get(Status.RUNNING, 0) or done:
            await self._owe(batch_key(batch.id, "started"), batch, "text", {
                "text": say("batch_started", lang, batch=batch.id, total=total)})
        passed = [p for p in (MILESTONES if total >= SMALL else (50,))
                  if done * 100 >= p * total]
        if passed and done:
            percent = passed[-1]
            await self._owe(batch_key(batch.id, f"milestone:{percent}"), batch, "text", {
                "text": say("milestone", lang, batch=batch.id, percent=percent, done=done,
                            total=total, failed=failed,
                            canceled=canceled(lang, progress.canceled))})

    async def images(self, batch: Batch, job: Job) -> None:
        """Each image captioned with its row, its job and what tells it apart; on a
        platform with buttons, the image's actions right under it (one message, which a
        reaction can be put on: ⭐ keeps, 👎 rejects)."""
        lang = self._lang(batch)
        telling = (await self.key_values(batch, job))[:CAPTION_VALUES]
        if job.workflow.get("axes"):  # a sweep's or an A/B's: its values by key
            telling.insert(0, job_label(job, self.templates.get(job.template or batch.template),
                                        swept_axes(batch)))
        values = " · ".join(telling)
        if job.action and job.parent_job_id:
            caption = say("image_caption_action", lang, row=job.row, job=job.id,
                          action=action_label(job.action, lang), parent=job.parent_job_id,
                          values=values)
        elif batch.meta.get("sweep"):  # several images a row: the job tells them apart
            caption = say("image_caption_job", lang, row=job.row, job=job.id, values=values)
        else:
            caption = say("image_caption", lang, row=job.row, job=job.id, values=values)
        caption = caption.rstrip(" ·")
        buttons = [{"label": say("button_keep_image", lang), "command": f"/keep j{job.id}",
                    "id": "image_keep"},
                   {"label": say("button_reject_image", lang),  # (a form asks why, where one can)
                    "command": f"/reject j{job.id} --ask", "id": "image_reject"}]
        buttons += [{"label": action_label(spec.name, lang), "command": f"/{spec.name} j{job.id}",
                     "id": f"image_{spec.name}"} for spec in ACTIONS.values()
                    if spec.button and spec.offered(self.templates.get(batch.template))]
        for i, path in enumerate(job.outputs):  # a video goes as a file, captioned alike
            image = is_image_name(path)
            await self._owe(job_key(job.id, f"image:{i}"), batch, "image" if image else "file",
                            {"path": path, "text": caption, "row": job.row,
                             **({"buttons": buttons} if image and i == 0
                                and batch.platform in self.inline else {})})

    async def signed_off(self, batch: Batch, event: Event) -> None:
        """A sign-off made elsewhere (the dashboard, the API, another platform), said in
        the batch's thread; one made in this platform's chat was answered there."""
        by = str(event.data.get("by") or "")
        if by.startswith(f"{batch.platform}:"):
            return
        counts = await self.queue.review_counts(batch.id)
        await self._owe(batch_key(batch.id, f"signed_off:{event.seq}"), batch, "text", {
            "text": say("signed_off", self._lang(batch), batch=batch.id, by=by,
                        summary=review_summary(counts.images, self._lang(batch)))})

    async def failure(self, batch: Batch, job: Job) -> None:
        text = say("job_failed", self._lang(batch), row=job.row, error=job.error)
        await self._owe(job_key(job.id, "failed"), batch, "text", {"text": text})

    async def summary(self, batch: Batch) -> None:
        """The text (mentioning the submitter) with the contact sheet and the results
        .xlsx: one message where the platform bundles files, else the text captioning the
        contact sheet, then the results — each its own outbox row, so a retry never posts
        one twice."""
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
        made = await Renditions(self.queue.db).of_batch(batch.id)
        results, contact = await asyncio.to_thread(  # (reads every image: off the loop)
            write_results, self.store, batch, jobs, self.templates.get(batch.template),
            self.font, made)
        grids = await asyncio.to_thread(write_grids, self.store, batch, jobs, font=self.font) \
            if batch.meta.get("sweep") else []
        # A batch made into channels' files brings the sheet sent back, filled in: the
        # team's own tracker, its columns untouched, each row's files and status appended.
        filled = await asyncio.to_thread(write_filled, self.store, batch, jobs, made) \
            if made else None
        started = min((j.started_at for j in jobs if j.started_at), default=None)
        finished = max((j.finished_at for j in jobs if j.finished_at), default=None)
        seconds = finished - started if started and finished else 0
        ended = sum(j.status == Status.CANCELED for j in jobs)
        text = say(summary_code(ended, len(jobs)), lang, batch=batch.id,
                   user=batch.submitter, succeeded=len(done), total=len(jobs),
                   failed=sum(j.status == Status.FAILED for j in jobs), canceled=ended,
                   took=took(lang, seconds),
                   attached=say("attached_both" if contact else "attached_results", lang))
        if filled:
            text += say("attached_filled", lang, name=batch.meta.get("sheet", ""))
        if batch.meta.get("version"):  # which template version made it (genbot template history)
            text += say("summary_version", lang, template=batch.template,
                        version=batch.meta["version"])
        if made:
            text += self.deliver_summary(batch, jobs, made, lang)
        # Last in the thread: once it is sent, every image of the batch has been delivered.
        delete = [] if self.auto_save else [o for j in done for o in j.outputs]
        if batch.platform in self.bundles:  # a sweep's grids ride with it, as many as fit
            await self._owe(key, batch, "file", {
                "text": text, "mention": batch.submitter,
                "paths": [p for p in (contact, results, filled) if p] + grids[:BUNDLED_GRIDS],
                "delete_after": delete}, answer=True)
            await self.more_grids(batch, grids[BUNDLED_GRIDS:], BUNDLED_GRIDS)
            return
        if not contact:  # no image at all: the text captions the results sheet
            await self._owe(key, batch, "file", {"text": text, "mention": batch.submitter,
                                                 "path": results, "delete_after": delete},
                            answer=True)
            await self._filled(batch, filled)
            return
        await self._owe(key, batch, "image", {"text": text, "mention": batch.submitter,
                                              "path": contact}, answer=True)
        await self._owe(batch_key(batch.id, "summary:results"), batch, "file",
                        {"path": results, "text": "", "delete_after": delete})
        await self._filled(batch, filled)
        await self.more_grids(batch, grids)

    async def _filled(self, batch: Batch, filled: str | None) -> None:
        if filled:
            await self._owe(batch_key(batch.id, "summary:filled"), batch, "file",
                            {"path": filled, "text": ""})

    def deliver_summary(self, batch: Batch, jobs: list[Job], made: list[Rendition],
                        lang: str) -> str:
        """The sales channels' files in a line: how many ship, which need review and why
        (the first few), and where the dashboard shows them all."""
        found = delivery(batch, jobs, made)
        review = [(r, why) for r, why in found.held if why == "needs_review"]
        text = say("summary_deliver", lang, count=len(made), ships=len(found.ships),
                   held=len(found.held), channels=", ".join(dict.fromkeys(
                       r.channel for r in made)))
        for r, _ in review[:SHOWN_HELD]:
            text += "\n• " + rendition_text(r, lang)
        if len(review) > SHOWN_HELD:
            text += "\n• " + say("summary_deliver_more", lang, count=len(review) - SHOWN_HELD)
        if self.public_url:
            text += say("summary_deliver_link", lang,
                        url=f"{self.public_url}/dashboard/#/batches/{batch.id}")
        return text

    async def more_grids(self, batch: Batch, grids: list[str], first: int = 0) -> None:
        """A sweep's grids that did not ride with its summary, one image each, after it."""
        for n, path in enumerate(grids, first + 1):
            await self._owe(batch_key(batch.id, f"grid:{n}"), batch, "image",
                            {"path": path, "text": ""})
