"""The application layer: every change a person or a script asks of genbot, written once.

`App.submit`, `cancel`, `retry`, `pause`, `resume`, `schedule`, `unschedule`, `grant` and
`revoke` each check the person's role (and, for a batch, whose it is) here, raise one
family of coded errors (bot.errors) and return typed results. Chat, the REST API, the
scheduler and the command line only translate to and from these calls: chat renders a
reply, the API maps an error to an HTTP status. A new rule — a limit, a role, a check —
is written here, once.

    submit: the person may submit -> the template -> the sheet through intake -> their
            limits -> one batch in the queue (or the report, when nothing can go)
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

from bot.app import values
from bot.app.permissions import Action, Permissions, Role, Who
from bot.conventions import thread_of
from bot.errors import Conflict, Invalid, NotFound
from bot.intake.check import IntakeReport, SheetFile, SheetSource, check_sheet
from bot.intake.images import Attachments
from executor.workflow import Template
from storage.access import Access
from storage.config import Config
from storage.files import FileStore
from storage.queue import CancelResult, Enqueued, NewJob, Queue, QueueFull, Submission
from storage.records import Batch, Job, Priority, Schedule
from storage.schedules import Schedules

log = logging.getLogger("genbot.app")


# --- what callers hand in and get back -------------------------------------------------------

@dataclass(frozen=True)
class SubmitOptions:
    priority: Priority = Priority.NORMAL
    at: datetime | None = None  # start no sooner (aware: shown in its own time zone)
    skip_invalid: bool = False  # queue the valid rows, report the rest
    dry_run: bool = False  # check and report; queue nothing
    key: str | None = None  # the caller's idempotency key: the same key, the same batch
    thread: str | None = None  # where its messages go; None: the thread its acceptance starts
    lang: str = "en"  # of everything the batch posts
    context: dict[str, Any] = field(default_factory=dict)  # the submitting message's, opaque


@dataclass(frozen=True)
class Accepted:
    batch_id: int
    jobs: int
    created: bool  # False: the key named a batch made earlier; nothing new was queued
    report: IntakeReport | None  # what intake said (skipped rows, unused columns); None: earlier


@dataclass(frozen=True)
class CancelTarget:
    """What a cancel is about: a batch, a job, the asker's own jobs, one person's
    (admins), or everything (admins)."""
    kind: str  # batch | job | mine | submitter | all
    id: int | None = None
    submitter: str | None = None

    @classmethod
    def batch(cls, batch_id: int) -> CancelTarget:
        return cls("batch", batch_id)

    @classmethod
    def job(cls, job_id: int) -> CancelTarget:
        return cls("job", job_id)

    @classmethod
    def mine(cls) -> CancelTarget:
        return cls("mine")

    @classmethod
    def of(cls, submitter: str) -> CancelTarget:
        return cls("submitter", submitter=submitter)

    @classmethod
    def everything(cls) -> CancelTarget:
        return cls("all")


@dataclass(frozen=True)
class Scheduled:
    id: int
    cron: str
    timezone: str
    template: str
    sheet: str
    next: datetime | None


class NoTemplate(Invalid):
    """A template name that is not one of the loaded templates."""

    def __init__(self, name: str, templates: list[str]):
        close = difflib.get_close_matches(name, templates, n=1, cutoff=0.6)
        super().__init__("no_template", name=name[:60], names=", ".join(templates) or "-",
                         close=close[0] if close else None)
        self.templates = templates

    def render(self, lang: str = "en") -> str:
        from bot.messages import say
        code = "unknown_template_close" if self.details["close"] else "unknown_template"
        return say(code, lang, **self.details)

    def plain(self) -> dict[str, Any]:
        return {**super().plain(), "templates": self.templates}


# --- the application ---------------------------------------------------------------------

def load_templates(config: Config) -> dict[str, Template]:
    """The templates, checked at start-up: broken ones are logged, the others serve."""
    from executor.workflow import load_templates as load
    templates, errors = load(config.templates_dir)
    for error in errors:
        log.error("template not loaded: %s", error)
    log.info("templates: %s", ", ".join(templates) or f"none in {config.templates_dir}")
    return templates


class App:
    def __init__(self, config: Config, queue: Queue, store: FileStore,
                 templates: dict[str, Template], *, access: Access | None = None,
                 clock: Callable[[], float] | None = None, local_admins: tuple[str, ...] = ()):
        """`local_admins`: platform:user ids that are admins on this machine whatever the
        config says (the person at `genbot chat`'s terminal, the local API token)."""
        self.config, self.queue, self.store, self.templates = config, queue, store, templates
        self.clock = clock or queue.clock
        self.access = access or Access(queue.db, clock=self.clock)
        settings = config.chat
        if local_admins:
            settings = dataclasses.replace(settings, admins=[*settings.admins, *local_admins])
        self.permissions = Permissions(settings, self.access, queue, clock=self.clock)
        self.schedules = Schedules(queue.db, clock=self.clock)
        # Set by a front that starts an executor beside itself (genbot chat, serve): until
        # that one registers, "no executor" would be untrue — it is starting.
        self.executor_starting = False

    # --- names and reads --------------------------------------------------------------
    def template(self, name: str) -> Template:
        found = self.templates.get(name)
        if found is None:
            raise NoTemplate(name, sorted(self.templates))
        return found

    async def batch(self, batch_id: int) -> Batch:
        found = await self.queue.batch(batch_id)
        if found is None:
            raise NotFound("no_batch", batch=batch_id)
        return found

    async def job(self, job_id: int) -> Job:
        found = await self.queue.job(job_id)
        if found is None:
            raise NotFound("no_job", job=job_id)
        return found

    async def role(self, who: Who) -> Role:
        return await self.permissions.role(who)

    async def permit(self, who: Who, action: Action) -> Role:
        """The person's role if they may take `action` here, else Refused (audited). Fronts
        call it before work that costs (reading an upload) or for what only reads."""
        return await self.permissions.require(who, action)

    # --- batches ------------------------------------------------------------------------
    async def submit(self, who: Who, template: str, sheet: SheetSource,
                     attachments: Attachments | None = None,
                     options: SubmitOptions = SubmitOptions()) -> Accepted | IntakeReport:
        """One batch of `template` over the rows of `sheet`, whose image cells name
        `attachments` (or assets, or allowed links). The intake report, and nothing
        queued, when no row can go (or on a dry run)."""
        role = await self.permissions.require(who, Action.GEN)
        if options.key and (earlier := await self.queue.batch_by_key(options.key)) is not None:
            found = await self.batch(earlier)  # a retried request: the same batch, at once
            return Accepted(found.id, found.total_jobs, created=False, report=None)
        chosen = self.template(template)
        report = await check_sheet(chosen, sheet, config=self.config, store=self.store,
                                   attachments=attachments, skip_invalid=options.skip_invalid)
        if not report.jobs or options.dry_run:
            return report
        await self.permissions.limits(who, role, len(report.jobs))
        meta: dict[str, Any] = {"lang": options.lang, "sheet": report.filename}
        if options.context:
            meta["context"] = options.context
        if options.at is not None:
            meta["at"] = f"{options.at:%Y-%m-%d %H:%M} ({options.at.tzinfo})"
        done = await self._enqueue(Submission(
            chosen.name, who.id, report.jobs, platform=who.platform,
            conversation=who.conversation, thread=options.thread, priority=options.priority,
            idempotency_key=options.key, meta=meta,
            not_before=options.at.timestamp() if options.at else 0.0))
        return Accepted(done.batch_id, done.jobs, done.created, report)

    async def cancel(self, who: Who, target: CancelTarget) -> CancelResult:
        """Queued jobs end now; running ones are told to stop at their next step.
        Submitters cancel their own; admins anyone's, or everything."""
        role = await self.permissions.require(who, Action.CANCEL)
        if target.kind in ("all", "submitter") and target.submitter != who.id:
            await self.permissions.admin_only(who, role, Action.CANCEL, "/cancel all")
            await self.permissions.allowed(who, Action.CANCEL, target=target.kind,
                                           submitter=target.submitter)
        if target.kind == "batch":
            assert target.id is not None
            owner = (await self.batch(target.id)).submitter
            await self.permissions.own(who, role, Action.CANCEL, owner=owner, subject=target.id)
            return await self.queue.cancel(batch=target.id, by=who.id)
        if target.kind == "job":
            assert target.id is not None
            owner = (await self.job(target.id)).submitter
            await self.permissions.own(who, role, Action.CANCEL, owner=owner, subject=target.id)
            return await self.queue.cancel(job=target.id, by=who.id)
        if target.kind == "all":
            return await self.queue.cancel(everything=True, by=who.id)
        return await self.queue.cancel(submitter=target.submitter or who.id, by=who.id)

    async def retry(self, who: Who, batch_id: int) -> Enqueued:
        """A batch's failed jobs again, as a new batch in the same place (conversation and
        thread) for the same submitter. A new batch, not reset rows: the first attempt's
        record, events and messages stay true, and the retry gets its own acceptance,
        progress and summary. Typed twice, it is queued once (`created` False)."""
        role = await self.permissions.require(who, Action.RETRY)
        batch = await self.batch(batch_id)
        await self.permissions.own(who, role, Action.RETRY, owner=batch.submitter,
                                   subject=batch_id)
        failed = await self.queue.failed_jobs(batch_id)
        if not failed:
            raise Conflict("nothing_to_retry", batch=batch_id)
        meta = {k: v for k, v in batch.meta.items() if k != "at"}  # it starts now
        return await self._enqueue(Submission(
            batch.template, batch.submitter,
            [NewJob(j.row, j.workflow, j.affinity) for j in failed],
            platform=batch.platform, conversation=batch.conversation, thread=thread_of(batch),
            priority=batch.priority,
            idempotency_key=f"retry:{batch_id}:{len(failed)}:{max(j.id for j in failed)}",
            meta={**meta, "retry_of": batch_id, "retried_by": who.id}))

    async def pause(self, who: Who) -> bool:
        """Nothing new starts (running jobs finish); persisted. False: paused already."""
        await self.permissions.require(who, Action.PAUSE)
        await self.permissions.allowed(who, Action.PAUSE)
        return await self.queue.pause(by=who.id)

    async def resume(self, who: Who) -> bool:
        """False: it was not paused."""
        await self.permissions.require(who, Action.RESUME)
        await self.permissions.allowed(who, Action.RESUME)
        return await self.queue.resume(by=who.id)

    async def _enqueue(self, submission: Submission) -> Enqueued:
        """The one place bot/ puts jobs in the queue."""
        try:
            return await self.queue.enqueue(submission)
        except QueueFull as e:
            raise Conflict("queue_full", free=e.free, limit=e.limit, requested=e.requested) \
                from None

    # --- schedules ----------------------------------------------------------------------
    async def schedule(self, who: Who, cron: str, timezone: str, template: str,
                       sheet: SheetFile, attachments: Attachments | None = None, *,
                       priority: Priority = Priority.NORMAL,
                       lang: str = "en") -> Scheduled | IntakeReport:
        """Run `sheet` on a crontab line in `timezone`. The sheet and the pictures its rows
        name are copied now (chat uploads expire); each firing reads them again, so seeds
        left empty are new each time. The report, and nothing kept, when a row is bad."""
        await self.permissions.require(who, Action.SCHEDULE)
        values.cron_trigger(cron, timezone)
        chosen = self.template(template)
        pictures: dict[str, bytes] = {}
        report = await check_sheet(chosen, sheet, config=self.config, store=self.store,
                                   attachments=attachments, keep=pictures)
        if not report.ok:
            return report
        await self.permissions.allowed(who, Action.SCHEDULE, cron=cron, template=chosen.name)
        folder = f"schedules/{uuid.uuid4().hex}"
        stored = self.store.write(f"{folder}/sheet{PurePosixPath(sheet.name).suffix.lower()}",
                                  sheet.data)
        files = {name: self.store.write(f"{folder}/files/{i}{PurePosixPath(name).suffix.lower()}",
                                        data)
                 for i, (name, data) in enumerate(sorted(pictures.items()))}
        schedule_id = await self.schedules.add(
            cron=cron, timezone=timezone, template=chosen.name, sheet=stored, files=files,
            submitter=who.id, platform=who.platform, conversation=who.conversation,
            priority=int(priority), meta={"lang": lang, "sheet": sheet.name})
        return Scheduled(schedule_id, cron, timezone, chosen.name, sheet.name,
                         values.next_fire(cron, timezone, self.clock()))

    async def unschedule(self, who: Who, schedule_id: int) -> None:
        await self.permissions.require(who, Action.UNSCHEDULE)
        await self.permissions.allowed(who, Action.UNSCHEDULE, schedule=schedule_id)
        if not await self.schedules.remove(schedule_id):
            raise NotFound("no_schedule", id=schedule_id)

    async def fire(self, schedule: Schedule, at: float) -> int | None:
        """Queue one firing of `schedule` (due at `at`) in the conversation that made it:
        its stored sheet through intake again, the valid rows. The maker's role was
        checked when it was made. None: nothing to queue (the reason is logged)."""
        template = self.templates.get(schedule.template)
        if template is None:
            log.warning("schedule %s: template %s is gone", schedule.id, schedule.template)
            return None
        files = schedule.files

        async def stored(name: str) -> bytes | None:
            path = files.get(name)
            return (await asyncio.to_thread(self.store.path, path)).read_bytes() if path else None

        path = await asyncio.to_thread(self.store.path, schedule.sheet)
        report = await check_sheet(
            template, SheetFile(schedule.meta.get("sheet", path.name), path.read_bytes()),
            config=self.config, store=self.store, attachments=stored, skip_invalid=True)
        if not report.jobs:
            log.warning("schedule %s: nothing to queue: %s", schedule.id, report.report())
            return None
        try:
            done = await self._enqueue(Submission(
                schedule.template, schedule.submitter, report.jobs, platform=schedule.platform,
                conversation=schedule.conversation, priority=schedule.priority,
                idempotency_key=f"schedule:{schedule.id}:{int(at)}",
                meta={**schedule.meta, "schedule": schedule.id}))
        except Conflict as e:
            log.warning("schedule %s: %s", schedule.id, e.render())
            return None
        log.info("schedule %s fired: batch %s", schedule.id, done.batch_id)
        return done.batch_id

    # --- people ---------------------------------------------------------------------------
    async def grant(self, who: Who, target: Who, role: Role) -> None:
        """Give `target` a role, on top of the config's (which a grant cannot lower for a
        config admin)."""
        await self.permissions.require(who, Action.GRANT)
        await self.permissions.allowed(who, Action.GRANT, target=target.id, role=role.value)
        await self.access.grant(target.platform, target.user, role.value, by=who.id)

    async def revoke(self, who: Who, target: Who) -> Role:
        """Take a granted role away; the role `target` has now."""
        await self.permissions.require(who, Action.REVOKE)
        await self.permissions.allowed(who, Action.REVOKE, target=target.id)
        if target.id in self.permissions.settings.admins:
            raise Conflict("revoke_config_admin", user=target.id)
        if not await self.access.revoke(target.platform, target.user):
            raise NotFound("revoke_none", user=target.id)
        return await self.permissions.role(target)
