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
import io
import time
from collections.abc import Callable, Iterable
from typing import Any

from bot.messages import say
from storage.files import FileStore
from storage.outbox import Outbox
from storage.queue import TERMINAL, Queue

CURSOR = "notifier"
BAR = 20
CAPTION_VALUES = 3  # key values of a row shown in an image caption
MILESTONES = (25, 50, 75)  # percent, where progress cannot be edited in place


def bar(done: int, total: int) -> str:
    filled = round(BAR * done / total) if total else BAR
    return "█" * filled + "░" * (BAR - filled)


class Notifier:
    def __init__(self, queue: Queue, outbox: Outbox, store: FileStore, *,
                 platforms: Iterable[str], editable: Iterable[str] = (),
                 templates: dict | None = None, font: str = "", auto_save: bool = True,
                 clock: Callable[[], float] = time.time):
        self.queue, self.outbox, self.store = queue, outbox, store
        self.platforms = set(platforms)
        self.editable = set(editable)  # platforms that edit one progress message in place
        self.auto_save = auto_save
        # One reader per set of platforms: a `genbot chat` beside `genbot serve` keeps its own.
        self.cursor = f"{CURSOR}:{','.join(sorted(self.platforms))}"
        self.templates = templates or {}  # name -> Template: the column order of its sheet
        self.font, self.clock = font, clock

    def columns(self, template: str, jobs: list[dict]) -> list[str]:
        return columns_of(self.templates.get(template), jobs)

    def key_values(self, template: str, job: dict) -> list[str]:
        """The values that tell a row apart: not images, not seeds."""
        t = self.templates.get(template)
        params = job["params"].get("params", {})
        names = [n for n in self.columns(template, [job])
                 if t is None or t.params[n].type not in ("image", "seed")]
        return [str(params[n]) for n in names if params.get(n) not in (None, "")]

    async def run_once(self, limit: int = 500) -> int:
        """Handle the events after the cursor; returns how many."""
        seq = await self.outbox.cursor(self.cursor)
        events = await self.queue.events_after(seq, limit)
        for event in events:
            await self.handle(event)
        if events:  # once per chunk: a crash mid-chunk replays it, which owes nothing twice
            await self.outbox.advance(self.cursor, events[-1]["seq"])
        return len(events)

    async def handle(self, event: dict[str, Any]) -> None:
        batch_id = event["batch_id"]
        if batch_id is None:
            return
        batch = await self.queue.batch(batch_id)
        if batch is None or batch["platform"] not in self.platforms:
            return
        kind = event["kind"]
        if kind == "submitted":
            await self.accepted(batch)
        job = await self.queue.job(event["job_id"]) if event["job_id"] else None
        if job and kind == "succeeded":
            await self.images(batch, job)
        if job and kind == "failed":
            await self.failure(batch, job)
        await self.progress(batch, event if kind == "progress" else None)
        if kind in TERMINAL:
            progress = await self.queue.batch_progress(batch_id)
            if progress.done >= progress.total:
                await self.summary(batch)

    # --- the messages -------------------------------------------------------------------
    def _lang(self, batch: dict) -> str:
        return batch["meta"].get("lang", "en")

    async def _owe(self, key: str, batch: dict, kind: str, payload: dict, *,
                   answer: bool = False) -> None:
        """`answer`: it answers the submitting message (the acceptance, the summary), so
        it carries that message's context (e.g. DingTalk's sessionWebhook, which can
        @-mention the submitter)."""
        context = batch["meta"].get("context", {}) if answer else {}
        await self.outbox.put(key, platform=batch["platform"], conversation=batch["conversation"],
                              thread=thread_of(batch), kind=kind,
                              payload={**payload, "batch": batch["id"], "lang": self._lang(batch),
                                       "context": context})

    async def accepted(self, batch: dict) -> None:
        progress = await self.queue.batch_progress(batch["id"])
        lang = self._lang(batch)
        eta = progress.eta_seconds
        if batch["meta"].get("at"):
            text = say("accepted_at", lang, batch=batch["id"], jobs=progress.total,
                       template=batch["template"], at=batch["meta"]["at"])
        else:
            text = say("accepted", lang, batch=batch["id"], jobs=progress.total,
                       template=batch["template"], ahead=progress.jobs_ahead or 0,
                       eta=say("eta_minutes", lang, minutes=max(1, round(eta / 60)))
                       if eta is not None else say("eta_unknown", lang))
        if batch["meta"].get("retry_of"):
            text += say("retry_of", lang, batch=batch["meta"]["retry_of"])
        await self._owe(f"batch:{batch['id']}:accepted", batch, "text", {"text": text},
                        answer=True)

    async def progress(self, batch: dict, step_event: dict | None) -> None:
        progress = await self.queue.batch_progress(batch["id"])
        lang = self._lang(batch)
        failed = progress.counts.get("failed", 0) + progress.counts.get("canceled", 0)
        finished = progress.done >= progress.total
        if batch["platform"] not in self.editable:
            await self.milestones(batch, progress.done, progress.total, failed)
            return
        text = say("progress", lang, batch=batch["id"], bar=bar(progress.done, progress.total),
                   done=progress.done, total=progress.total, failed=failed)
        if step_event and not finished:
            d = step_event["data"]
            text += "\n" + say("progress_step", lang, row=d.get("row"), step=d["step"],
                               total=d["total"])
        buttons = [] if finished else [{
            "label": say("button_cancel", lang), "command": f"/cancel {batch['id']}",
            "confirm": say("confirm_cancel", lang, batch=batch["id"]),
            "deny": say("button_keep", lang)}]
        await self.outbox.put_progress(
            f"batch:{batch['id']}:progress", platform=batch["platform"],
            conversation=batch["conversation"], thread=thread_of(batch),
            payload={"text": text, "done": progress.done, "total": progress.total,
                     "failed": failed, "batch": batch["id"], "finished": finished,
                     "buttons": buttons, "lang": lang})

    async def milestones(self, batch: dict, done: int, total: int, failed: int) -> None:
        """Where a message cannot be edited: one message at each quarter passed (the
        summary is the last), each owed once."""
        for percent in MILESTONES:
            if done < total and done * 100 >= percent * total:
                await self._owe(f"batch:{batch['id']}:milestone:{percent}", batch, "text", {
                    "text": say("milestone", self._lang(batch), batch=batch["id"],
                                percent=percent, done=done, total=total, failed=failed)})

    async def images(self, batch: dict, job: dict) -> None:
        values = self.key_values(batch["template"], job)[:CAPTION_VALUES]
        caption = say("image_caption", self._lang(batch), row=job["row"],
                      values=" · ".join(values))
        for i, path in enumerate(job["outputs"]):
            await self._owe(f"job:{job['id']}:image:{i}", batch, "image",
                            {"path": path, "text": caption, "row": job["row"]})

    async def failure(self, batch: dict, job: dict) -> None:
        text = say("job_failed", self._lang(batch), row=job["row"], error=job["error"])
        await self._owe(f"job:{job['id']}:failed", batch, "text", {"text": text})

    async def summary(self, batch: dict) -> None:
        """Three messages: the text (mentioning the submitter), the contact sheet, the
        results .xlsx — each its own outbox row, so a retry never posts one twice."""
        key = f"batch:{batch['id']}:summary"
        if await self.outbox.get(key):
            return  # owed already (a replayed event): the files are written too
        jobs = await self.queue.batch_jobs(batch["id"])
        lang = self._lang(batch)
        done = [j for j in jobs if j["status"] == "succeeded"]
        # Events are read after the fact: the last job may have ended before this event's
        # turn came. Owe every image and failure first (idempotent), so the summary (and
        # with auto_save off, the deletion it carries) comes after all of them in the thread.
        for job in jobs:
            if job["status"] == "succeeded":
                await self.images(batch, job)
            elif job["status"] == "failed":
                await self.failure(batch, job)
        results, contact = await asyncio.to_thread(  # (reads every image: off the loop)
            summary_files, self.store, batch, jobs, self.columns(batch["template"], jobs),
            self.font)
        started = min((j["started_at"] for j in jobs if j["started_at"]), default=None)
        finished = max((j["finished_at"] for j in jobs if j["finished_at"]), default=None)
        minutes = (finished - started) / 60 if started and finished else 0
        text = say("summary", lang, batch=batch["id"], user=batch["submitter"],
                   succeeded=len(done), total=len(jobs),
                   failed=sum(j["status"] == "failed" for j in jobs),
                   canceled=sum(j["status"] == "canceled" for j in jobs), minutes=minutes)
        await self._owe(key, batch, "text", {"text": text, "mention": batch["submitter"]},
                        answer=True)
        if contact:
            await self._owe(f"{key}:contact", batch, "image", {"path": contact, "text": ""})
        # Last in the thread: once it is sent, every image of the batch has been delivered.
        delete = [] if self.auto_save else [o for j in done for o in j["outputs"]]
        await self._owe(f"{key}:results", batch, "file", {"path": results, "text": "",
                                                          "delete_after": delete})


def columns_of(template, jobs: list[dict]) -> list[str]:
    """Parameter names in the template's order (the database may reorder JSON keys)."""
    if template is not None:
        return list(template.params)
    return sorted({n for j in jobs for n in j["params"].get("params", {})})


def summary_files(store: FileStore, batch: dict, jobs: list[dict], columns: list[str],
                  font: str = "") -> tuple[str, str | None]:
    """The batch's results .xlsx and contact sheet (None without images), written to the
    store; their relative paths."""
    from executor.contact import contact_sheet
    folder = f"outputs/batch_{batch['id']}"
    results = store.write(f"{folder}/results.xlsx",
                          results_xlsx(jobs, columns, batch["meta"].get("lang", "en")))
    images = [(store.path(o), f"row {j['row']}") for j in jobs if j["status"] == "succeeded"
              for o in j["outputs"]]
    contact = store.write(f"{folder}/contact.png", contact_sheet(images, font=font)) \
        if images else None
    return results, contact


def thread_of(batch: dict) -> str:
    """The batch's thread: where it was submitted, else the thread its acceptance starts
    (resolved by the sender once that message has an id)."""
    return batch["thread"] or f"@batch:{batch['id']}"


def results_xlsx(jobs: list[dict], names: list[str], lang: str = "en") -> bytes:
    """The batch's rows as the sheet had them (columns `names`), plus status, output
    file and error."""
    from openpyxl import Workbook
    book = Workbook()
    sheet = book.active
    sheet.title = "results"
    sheet.append([say("col_row", lang), *names, say("col_status", lang),
                  say("col_output", lang), say("col_error", lang)])
    for job in jobs:
        params = job["params"].get("params", {})
        sheet.append([job["row"], *[_cell(params.get(n)) for n in names], job["status"],
                      ", ".join(job["outputs"]), job["error"] or ""])
    buf = io.BytesIO()
    book.save(buf)
    return buf.getvalue()


def _cell(value: Any) -> Any:
    if isinstance(value, (list, dict)):
        return str(value)
    return value
