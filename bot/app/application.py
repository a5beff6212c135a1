"""The application layer: every change a person or a script asks of genbot, written once.

`App.submit`, `cancel`, `retry`, `pause`, `resume`, `leases`, `hand_back`, `schedule`,
`unschedule`, `grant` and `revoke` each check the person's role (and, for a batch, whose
it is) here, raise one family of coded errors (bot.errors) and return typed results.
Chat, the REST API, the scheduler and the command line only translate to and from these
calls: chat renders a reply, the API maps an error to an HTTP status. A new rule — a
limit, a role, a check — is written here, once.

    submit: the person may submit -> the template -> the sheet through intake -> their
            limits -> one batch in the queue (or the report, when nothing can go)
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

from aiohttp.abc import AbstractResolver

from bot import i18n
from bot.app import importer, iterate, values
from bot.app import review as reviews
from bot.app.filled import keep_source
from bot.app.importer import Imported
from bot.app.iterate import Acted, ActionRequest
from bot.app.leases import Lease, leases
from bot.app.permissions import Action, Permissions, Role, Who
from bot.app.placement import NoExecutor, Unplaced, unplaced
from bot.app.refine import Comparison, Proposal, compare_ratings, propose
from bot.conventions import subject_of, thread_of
from bot.errors import Conflict, Invalid, NotFound, Refused
from bot.intake.check import IntakeReport, SheetFile, SheetSource, check_sheet
from bot.intake.images import Attachments
from bot.outbound import check_callback
from bot.settings import ChatConfig, IntakeConfig, WebhookConfig
from storage.access import Access
from storage.config import Config, QueueConfig
from storage.files import FileStore
from storage.outbox import Outbox
from storage.queue import CancelResult, Enqueued, NewJob, Queue, QueueFull, Submission
from storage.records import Batch, Job, Priority, Schedule
from storage.reviews import Review
from storage.schedules import Schedules
from storage.versions import TemplateVersions
from storage.workers import Workers
from templates import channels as channel_plans
from templates import layouts, sweeps
from templates.channels import catalogue
from templates.graph import Template
from templates.jobs import decode, encode
from templates.loader import template_from, version_content
from templates.params import Problem
from templates.settings import (
    DeliverConfig,
    TemplatesConfig,
    assets_folder,
    edit_model,
    family_of,
    fill_model,
    load_configured,
    models,
    prompt_tokens,
    templates_dir,
)
from templates.sweeps import Sweep

log = logging.getLogger("genbot.app")
PRODUCTION = "production"  # the label whose version a plain template name means


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
    wait_for_executor: bool = False  # queue even when no running executor can take the jobs
    vary: tuple[str, ...] = ()  # a sweep's axes: "KEY=V1,V2" or "KEY=START..STOP:STEP"
    seeds: int = 1  # a sweep's seeds per row (templates.sweeps)
    grid: tuple[str, ...] = ()  # a sweep's grid axes, across then down (default: the first two)
    compare: tuple[str, ...] = ()  # other template versions each row also runs (A/B), same seeds
    ask_over: int | None = None  # a sweep of more jobs is not queued: Unconfirmed says its cost
    callback_url: str | None = None  # told of the batch's events by signed webhooks
    channels: tuple[str, ...] = ()  # sales channels every row's renditions are made for
    layout: str = ""  # the layout drawn on the channels' files (templates.layouts)


@dataclass(frozen=True)
class Accepted:
    batch_id: int
    jobs: int
    created: bool  # False: the key named a batch made earlier; nothing new was queued
    report: IntakeReport | None  # what intake said (skipped rows, unused columns); None: earlier


@dataclass(frozen=True)
class Unconfirmed:
    """A sweep bigger than the caller's `ask_over`, not queued: what it would cost."""
    jobs: int
    rows: int
    models: list[str]
    eta_seconds: float | None


MOVES = ("front", "back")  # where an admin may move waiting jobs among their submitter's


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


# Sweep problems that are sentences of their own; others are a value's, framed by its key.
SWEEP_SENTENCES = ("sweep_unknown", "sweep_unknown_close", "sweep_image", "sweep_twice",
                   "sweep_empty_value", "sweep_values", "sweep_step", "sweep_backwards",
                   "sweep_grid")


def swept(template: Template, jobs: list[NewJob], sweep: Sweep) -> list[NewJob]:
    """A sheet's jobs expanded by a sweep: every row × seed × combination."""
    try:
        children = sweeps.expand(template, [decode(j.workflow) for j in jobs], sweep)
    except Problem as e:
        raise values.problem(e, "sweep_value", own=SWEEP_SENTENCES) from None
    return [NewJob(c.row, encode(c), c.affinity) for c in children]


def batch_meta(report: IntakeReport, options: SubmitOptions, chosen: Template, sweep: Sweep,
               variants: list[Template]) -> dict[str, Any]:
    """What a batch remembers of its submission: its language, its sheet (and where its
    header was), the template version, and a sweep's or a comparison's axes."""
    meta: dict[str, Any] = {"lang": options.lang, "sheet": report.filename,
                            "sheet_header_row": report.header_row, "version": chosen.number}
    if options.context:
        meta["context"] = options.context
    if options.callback_url:
        meta["callback"] = options.callback_url
    if options.at is not None:
        meta["at"] = f"{options.at:%Y-%m-%d %H:%M} ({options.at.tzinfo})"
    if sweep or len(variants) > 1:
        axes = [a.param for a in sweep.axes]
        if len(variants) > 1:  # A/B: the variants across, the first swept value down
            axes.insert(0, sweeps.VARIANT)
            meta["compare"] = [sweeps.variant_label(i, t) for i, t in enumerate(variants)]
        meta["sweep"] = {"vary": list(options.vary), "seeds": sweep.seeds,
                         "axes": axes, "grid": list(sweep.grid)}
    return meta


def named_apart(jobs: list[NewJob]) -> list[NewJob]:
    """Each rendition's file its own name across the batch: a row's sweep or A/B jobs
    share their row's names, so the second gets -2, the third -3 (in job order)."""
    files = [(d["channel"], d["file"]) for j in jobs for d in j.workflow.get("deliver", ())]
    if len(set(files)) == len(files):
        return jobs
    names = iter(channel_plans.distinct(files))
    out = []
    for j in jobs:
        if not j.workflow.get("deliver"):
            out.append(j)
            continue
        deliver = [{**d, "file": next(names)} for d in j.workflow["deliver"]]
        out.append(dataclasses.replace(j, workflow={**j.workflow, "deliver": deliver}))
    return out


def _differ(variants: list[Template]) -> None:
    """Refuses a comparison that names one version twice (social_thumb@1 against
    social_thumb, which is @1 too): its images would differ only by chance."""
    for i, t in enumerate(variants):
        for j, other in enumerate(variants[:i]):
            if (t.name, t.version) == (other.name, other.version):
                raise Invalid("compare_same", a=sweeps.variant_label(j, other),
                              b=sweeps.variant_label(i, t), template=t.name)


def compared(variants: list[Template], jobs: list[NewJob],
             rows: list[dict[int, Any]]) -> list[NewJob]:
    """Every job once per template version compared (A/B), with the same seeds."""
    try:
        children = sweeps.compare(variants, [decode(j.workflow) for j in jobs], rows)
    except Problem as e:
        raise values.problem(e, "sweep_value", own=("compare_param", "compare_too_many")) \
            from None
    return [NewJob(c.row, encode(c), c.affinity) for c in children]


# --- the application ---------------------------------------------------------------------

def load_templates(config: Config) -> dict[str, Template]:
    """The templates, checked at start-up: broken ones are logged, the others serve."""
    templates, errors = load_configured(config)
    for error in errors:
        log.error("template not loaded: %s", error)
    log.info("templates: %s", ", ".join(templates) or f"none in {templates_dir(config)}")
    return templates


class App:
    def __init__(self, config: Config, queue: Queue, store: FileStore,
                 templates: dict[str, Template], *, access: Access | None = None,
                 clock: Callable[[], float] | None = None, local_admins: tuple[str, ...] = ()):
        """`local_admins`: platform:user ids that are admins on this machine whatever the
        config says (the person at `genbot chat`'s terminal, the local API token). The
        config's languages ([i18n]) are the ones offered from now on (bot.i18n.use)."""
        i18n.use(config)
        self.config, self.queue, self.store, self.templates = config, queue, store, templates
        self.clock = clock or queue.clock
        self.access = access or Access(queue.db, clock=self.clock)
        settings = config[ChatConfig]
        if local_admins:
            settings = dataclasses.replace(settings, admins=[*settings.admins, *local_admins])
        self.permissions = Permissions(settings, self.access, queue, clock=self.clock)
        self.schedules = Schedules(queue.db, clock=self.clock)
        self.versions = TemplateVersions(queue.db, clock=self.clock)
        self.dns: AbstractResolver | None = None  # answers callback URLs' lookups (tests)
        # Set by a front that starts an executor beside itself (genbot chat, serve): until
        # that one registers, "no executor" would be untrue — it is starting.
        self.executor_starting = False

    # --- names and reads --------------------------------------------------------------
    def template(self, name: str) -> Template:
        """A loaded template by its plain name (what its file says now)."""
        found = self.templates.get(name)
        if found is None:
            raise NoTemplate(name, sorted(self.templates))
        return found

    # --- template versions (storage.versions) -----------------------------------------
    async def record_versions(self, source: str) -> None:
        """Keep every loaded template as a numbered version (the same content: the same
        number, on every host) and mark the loaded ones with their numbers."""
        for name, t in list(self.templates.items()):
            seen = await self.versions.record(name, t.version, version_content(t), source)
            self.templates[name] = dataclasses.replace(t, number=seen.number)

    async def resolve(self, spec: str) -> Template:
        """The template `spec` means: NAME@N (version N), NAME@LABEL (the version a label
        points at), or NAME — its `production` version where one is promoted, else what
        its file says now."""
        name, _, pin = spec.partition("@")
        current = self.template(name)
        if not pin:
            number = await self.versions.labelled(name, PRODUCTION)
            return current if number is None else await self.template_version(name, number)
        if pin.isdigit():
            return await self.template_version(name, int(pin))
        number = await self.versions.labelled(name, pin)
        if number is None:
            raise NotFound("no_label", name=name, label=pin[:40],
                           labels=", ".join(x.label for x in await self.versions.labels(name))
                           or "-")
        return await self.template_version(name, number)

    async def import_template(self, who: Who, name: str, file: str, raw: bytes, *,
                              replace: bool = False) -> Imported:
        """A ComfyUI workflow (API or UI format, or a picture ComfyUI saved) installed as
        template `name` (admins; bot.app.importer), kept as its next version."""
        role = await self.permissions.require(who, Action.TEMPLATE)
        await self.permissions.admin_only(who, role, Action.TEMPLATE, "/template import")
        done = await importer.import_template(self.config, self.templates, name, file, raw,
                                              replace=replace)
        t = done.template
        seen = await self.versions.record(name, t.version, version_content(t), who.id)
        self.templates[name] = dataclasses.replace(t, number=seen.number)
        await self.permissions.allowed(who, Action.TEMPLATE, what="import", template=name,
                                       version=seen.number)
        return dataclasses.replace(done, template=self.templates[name])

    async def template_version(self, name: str, number: int) -> Template:
        """Version `number` of template `name`: the loaded one when it is that version."""
        current = self.template(name)
        if number in (current.number, 0):
            return current
        found = await self.versions.get(name, number)
        if found is None:
            latest = await self.versions.latest(name)
            raise NotFound("no_version", name=name, number=number,
                           latest=latest.number if latest else current.number)
        return template_from(name, found.number, found.hash, found.content)

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

    async def permit(self, who: Who, action: str) -> Role:
        """The person's role if they may take `action` here, else Refused (audited). Fronts
        call it before work that costs (reading an upload) or for what only reads."""
        return await self.permissions.require(who, action)

    # --- batches ------------------------------------------------------------------------
    async def submit(self, who: Who, template: str, sheet: SheetSource,
                     attachments: Attachments | None = None,
                     options: SubmitOptions = SubmitOptions()
                     ) -> Accepted | IntakeReport | Unconfirmed:
        """One batch of `template` over the rows of `sheet`, whose image cells name
        `attachments` (or assets, or allowed links). The intake report, and nothing
        queued, when no row can go (or on a dry run)."""
        role = await self.permissions.require(who, Action.GEN)
        await self.permissions.priority(who, role, options.priority)
        if options.callback_url:  # a private address is refused before the sheet is read
            await check_callback(options.callback_url, dns=self.dns,
                                 allowlist=self.config[WebhookConfig].callback_allowlist)
        if options.key and (earlier := await self.queue.batch_by_key(options.key)) is not None:
            found = await self.batch(earlier)  # a retried request: the same batch, at once
            return Accepted(found.id, found.total_jobs, created=False, report=None)
        chosen = await self.resolve(template)
        sweep = self.sweep(chosen, options)  # a bad --vary is said before the sheet is read
        channels = self.channels(chosen, options.channels, options.layout)  # and a channel
        # no row can meet, or a layout that cannot be used
        variants = [chosen, *[await self.resolve(spec) for spec in options.compare]]
        _differ(variants)
        report = await check_sheet(chosen, sheet, config=self.config, store=self.store,
                                   attachments=attachments, skip_invalid=options.skip_invalid,
                                   channels=channels)
        if sweep and report.jobs:
            report = dataclasses.replace(report, jobs=swept(chosen, report.jobs, sweep))
        if len(variants) > 1 and report.jobs:  # each version reads the sheet its own way
            rows = []
            for other in variants[1:]:
                read = await check_sheet(other, sheet, config=self.config, store=self.store,
                                         attachments=attachments,
                                         skip_invalid=options.skip_invalid,
                                         channels=self.channels(other, options.channels,
                                                                options.layout))
                if not read.jobs:
                    return read  # the sheet does not fit that version: its report says why
                rows.append({j.row: decode(j.workflow) for j in read.jobs})
            report = dataclasses.replace(report, jobs=compared(variants, report.jobs, rows))
        if not report.jobs or options.dry_run:
            return report
        report = dataclasses.replace(report, jobs=named_apart(report.jobs))
        if sweep and options.ask_over is not None and len(report.jobs) > options.ask_over:
            return Unconfirmed(len(report.jobs), len({j.row for j in report.jobs}),
                               sorted({j.affinity for j in report.jobs if j.affinity}),
                               await self.queue.eta(len(report.jobs) - 1))
        if not options.wait_for_executor and \
                (missing := await self.unplaced(job.affinity for job in report.jobs)):
            raise NoExecutor(missing)
        await self.permissions.limits(who, role, len(report.jobs))
        meta = batch_meta(report, options, chosen, sweep, variants)
        done = await self._enqueue(Submission(
            chosen.name, who.id, report.jobs, platform=who.platform,
            conversation=who.conversation, thread=options.thread, priority=options.priority,
            idempotency_key=options.key, meta=meta,
            not_before=options.at.timestamp() if options.at else 0.0))
        if done.created and isinstance(sheet, SheetFile):  # (comes back filled: bot.app.filled)
            await asyncio.to_thread(keep_source, self.store, done.batch_id, sheet.name,
                                    sheet.data)
        return Accepted(done.batch_id, done.jobs, done.created, report)

    def channels(self, template: Template, names: Iterable[str], layout: str = ""
                 ) -> channel_plans.Plan:
        """What a submission asks of the sales channels, checked before its sheet is read:
        every name known, no rule a picture of this template cannot meet, and the layout
        one that can be used (its fonts and logos kept in the file store as rows use
        them, where every executor reads them)."""
        settings = self.config[DeliverConfig]
        binder = self.layout(layout) if layout.strip() else None
        try:
            known = catalogue(settings.channels)
        except channel_plans.ChannelError as e:  # (changed since the service started)
            raise Invalid("channel_file_broken", error=str(e)) from None
        try:
            return channel_plans.plan(
                known, names, unlabelled=settings.unlabelled,
                word_ops=sorted({n.op for n in template.nodes.values()
                                 if n.op in channel_plans.WORD_OPS}), layout=binder,
                fill_model=fill_model(self.config), engine=template.engine)
        except channel_plans.Unknown as e:
            raise Invalid("channel_unknown_close" if e.close else "channel_unknown",
                          name=e.name[:60], close=e.close, names=", ".join(e.known)) from None
        except channel_plans.Conflict as e:
            raise Invalid(e.code, **e.details) from None

    def layout(self, name: str) -> layouts.Binder:
        """The layout named, read and checked (Invalid: unknown, or broken)."""
        folder = assets_folder(self.config)
        try:
            chosen = layouts.chosen(name, folder)
        except layouts.Unknown as e:
            raise Invalid("layout_unknown_close" if e.close else "layout_unknown",
                          name=e.name[:60], close=e.close, names=", ".join(e.known)) from None
        except layouts.LayoutError as e:
            raise Invalid("layout_broken", error=str(e)) from None
        store = self.store
        return layouts.Binder(chosen, folder, keep=lambda path: store.put_input(
            path.read_bytes(), path.suffix.lower() or ".bin"))

    @staticmethod
    def sweep(template: Template, options: SubmitOptions) -> Sweep:
        """The sweep a submission asks for (empty: none), each value checked."""
        try:
            return sweeps.plan(template, options.vary, options.seeds, options.grid)
        except Problem as e:
            raise values.problem(e, "sweep_value", own=SWEEP_SENTENCES) from None

    async def unplaced(self, needs: Iterable[str | None]) -> list[Unplaced]:
        """What of `needs` (jobs' affinities) no running executor can take, and why. With
        no need (nothing queued, a pillow-only template) the registry is not read."""
        wanted = [n for n in needs if n]
        return unplaced(wanted, await Workers.of(self.queue).all()) if wanted else []

    async def batch_unplaced(self, batch_id: int) -> list[Unplaced]:
        """The same for what a batch's queued jobs need (none once none is queued)."""
        return await self.unplaced(await self.queue.batch_waiting_for(batch_id))

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

    async def move(self, who: Who, to: str, *, batch: int | None = None,
                   job: int | None = None) -> int:
        """Admins: a batch's waiting jobs (or one job) to the front or the back of its
        submitter's waiting jobs (storage.queue.Queue.move: round-robin between
        submitters stays as it was). How many moved; Conflict when none waits."""
        await self.permissions.require(who, Action.MOVE)
        if to not in MOVES:
            raise Invalid("move_where", to=str(to)[:20])
        subject = (await self.batch(batch)).id if batch is not None else \
            (await self.job(job or 0)).id
        moved = await self.queue.move(batch=batch, job=job, to=to)
        if not moved:
            raise Conflict("move_nothing", what=f"b{subject}" if batch is not None
                           else f"j{subject}")
        await self.permissions.allowed(who, Action.MOVE, to=to, count=moved,
                                       **({"batch": batch} if batch is not None else {"job": job}))
        return moved

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
            priority=await self.permissions.capped(who, role, batch.priority),
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

    async def leases(self, who: Who) -> list[Lease]:
        """Every job under a lease, the quietest first, and whether it looks stuck
        ([queue] stuck_after): what an operator paged for a hung batch reads (admins)."""
        await self.permissions.require(who, Action.DOCTOR)
        return await leases(self.queue, self.config[QueueConfig].stuck_after)

    async def hand_back(self, who: Who, jobs: Sequence[int] | None = None) -> list[int]:
        """Leased jobs back to the queue, no attempt used: `jobs`, or (None) every one that
        looks stuck. Their holders find their leases gone and stop them (admins, audited).
        Returns those handed back (a job no longer leased is left as it is)."""
        await self.permissions.require(who, Action.DOCTOR)
        if jobs is None:
            jobs = [lease.job.id for lease in
                    await leases(self.queue, self.config[QueueConfig].stuck_after)
                    if lease.stuck]
        handed = await self.queue.hand_back(jobs, f"handed back by {who.id}")
        await self.permissions.allowed(who, Action.DOCTOR, jobs=handed)
        return handed

    async def _enqueue(self, submission: Submission) -> Enqueued:
        """The one place bot/ puts jobs in the queue."""
        try:
            return await self.queue.enqueue(submission)
        except QueueFull as e:
            raise Conflict("queue_full", free=e.free, limit=e.limit, requested=e.requested) \
                from None

    # --- iterating on images (bot.app.iterate) ----------------------------------------
    @property
    def max_output_pixels(self) -> int:
        """The largest image a job may make ([intake] max_output_pixels), actions' too."""
        return self.config[IntakeConfig].max_output_pixels

    def family_of(self, model: str) -> str | None:
        """A model's family where it can be told here (templates.settings.family_of)."""
        return family_of(self.config, model)

    def prompt_tokens(self, model: str) -> Callable[[str], int] | None:
        """Counts a text's tokens as the model reads it, where that can be told here
        (templates.settings.prompt_tokens)."""
        return prompt_tokens(self.config, model)

    def edit_model(self) -> str | None:
        """The model instruction edits run on (templates.settings.edit_model)."""
        return edit_model(self.config)

    def fill_model(self, own: str | None = None) -> str | None:
        """The model repaints and extends run on (templates.settings.fill_model)."""
        return fill_model(self.config, own)

    def segmentation_model(self) -> str | None:
        """The model a region named in words is found with ([templates]
        segmentation_model); None: none is configured."""
        return self.config[TemplatesConfig].segmentation_model or None

    def has_model(self, model: str) -> bool:
        return model in models(self.config)

    @property
    def max_cell_chars(self) -> int:
        """The longest text a sheet's cell may hold ([intake]); an instruction too."""
        return self.config[IntakeConfig].max_cell_chars

    async def act(self, who: Who, job_id: int, request: ActionRequest) -> Acted:
        """again, vary, upscale or edit the image of job `job_id`: new jobs in its thread."""
        return await iterate.act(self, who, job_id, request)

    async def act_on_kept(self, who: Who, batch_id: int,
                          request: ActionRequest) -> iterate.ActedOnKept:
        """The action on every kept image of batch `batch_id` (and of all made from its
        images): one new batch in its thread."""
        return await iterate.act_on_kept(self, who, batch_id, request)

    async def rate(self, who: Who, job_id: int, rating: str) -> Job:
        """keep, reject or unkeep the image of job `job_id` (a review without a note)."""
        if rating not in reviews.RATINGS:
            raise Invalid("rating_unknown", rating=str(rating)[:40])
        return (await reviews.review(self, who, job_id, reviews.RATINGS[rating])).job

    async def review(self, who: Who, job_id: int, state: Review,
                     note: str = "") -> reviews.Reviewed:
        """Review the image of job `job_id` (bot.app.review)."""
        return await reviews.review(self, who, job_id, state, note)

    async def stars(self, who: Who, job_id: int, grade: int | None) -> Job:
        """Grade the image of job `job_id` 1-5 (None: no grade)."""
        return await reviews.stars(self, who, job_id, grade)

    async def sign_off(self, who: Who, batch_id: int) -> reviews.SignedOff:
        """Approve batch `batch_id` once every image of it is reviewed."""
        return await reviews.sign_off(self, who, batch_id)

    async def reopen(self, who: Who, batch_id: int) -> Batch:
        """Take batch `batch_id`'s sign-off back."""
        return await reviews.reopen(self, who, batch_id)

    async def picks(self, who: Who, batch_id: int) -> tuple[Batch, list[Job]]:
        """The kept images of batch `batch_id` and of all made from it; its first batch."""
        return await iterate.picks(self, who, batch_id)

    async def refine(self, who: Who, batch_id: int) -> Proposal:
        """The next sweep of batch `batch_id`, narrowed around its best-rated values."""
        await self.permissions.require(who, Action.REFINE)
        batch = await self.batch(batch_id)
        if not batch.meta.get("sweep"):
            raise Conflict("refine_not_sweep", batch=batch_id)
        jobs = await self.queue.batch_jobs(batch_id)
        if not any(j.rating for j in jobs):
            raise Conflict("refine_no_ratings", batch=batch_id)
        template = self.templates.get(batch.template)
        whole = {n: p.type in ("int", "seed") for n, p in template.params.items()} \
            if template else {}
        return propose(batch, jobs, whole, batch.template, batch.meta.get("sheet", "FILE"))

    async def ab(self, who: Who, batch_id: int) -> Comparison:
        """An A/B batch's preferences: rows each version won (its image kept, the other's
        not), ties, and rows nobody rated."""
        await self.permissions.require(who, Action.AB)
        batch = await self.batch(batch_id)
        if not batch.meta.get("compare"):
            raise Conflict("ab_not_compare", batch=batch_id)
        return compare_ratings(batch, await self.queue.batch_jobs(batch_id))

    async def find_image(self, **where: Any) -> Job:
        """The image a person means in chat: job N, or row N of this thread's batch."""
        return await iterate.find_image(self, **where)

    async def find_batch(self, **where: Any) -> int:
        """The batch of the thread a person writes in."""
        return await iterate.find_batch(self, **where)

    async def message_about(self, platform: str, conversation: str,
                            platform_id: str) -> tuple[str, int] | None:
        """What a message we posted is about — ("batch", N) or ("job", N) — by the
        platform's id for it (a thread's first message, a message reacted to)."""
        key = await Outbox(self.queue.db).key_of(platform, conversation, platform_id)
        return subject_of(key) if key else None

    async def started_thread(self, platform: str, conversation: str,
                             thread: str) -> int | None:
        """The batch whose acceptance started this platform thread."""
        about = await self.message_about(platform, conversation, thread)
        return about[1] if about and about[0] == "batch" else None

    # --- schedules ----------------------------------------------------------------------
    async def schedule(self, who: Who, cron: str, timezone: str, template: str,
                       sheet: SheetFile, attachments: Attachments | None = None, *,
                       priority: Priority = Priority.NORMAL, lang: str = "en",
                       vary: tuple[str, ...] = (), seeds: int = 1) -> Scheduled | IntakeReport:
        """Run `sheet` on a crontab line in `timezone`. The sheet and the pictures its rows
        name are copied now (chat uploads expire); each firing reads them again, so seeds
        left empty are new each time. The report, and nothing kept, when a row is bad."""
        role = await self.permissions.require(who, Action.SCHEDULE)
        await self.permissions.priority(who, role, priority, Action.SCHEDULE)
        values.cron_trigger(cron, timezone)
        chosen = await self.resolve(template)  # (NAME@N: each firing runs that version)
        sweep = self.sweep(chosen, SubmitOptions(vary=vary, seeds=seeds))  # each firing's
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
            cron=cron, timezone=timezone, sheet=stored, files=files,
            template=template if "@" in template else chosen.name,  # a pin stays a pin
            submitter=who.id, platform=who.platform, conversation=who.conversation,
            priority=int(priority), meta={"lang": lang, "sheet": sheet.name, **(
                {"sweep": {"vary": list(vary), "seeds": seeds}} if sweep else {}), **(
                {"platform_role": who.platform_role} if who.platform_role else {})})
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
        checked when it was made; their priority is checked again (a maker whose privilege
        dropped is refused, audited). None: nothing to queue (the reason is logged)."""
        if not await self._owner_may(schedule):
            return None
        try:
            template = await self.resolve(schedule.template)
        except (NotFound, Invalid) as e:
            log.warning("schedule %s: template %s is gone (%s)", schedule.id,
                        schedule.template, e.render())
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
        asked = schedule.meta.get("sweep") or {}
        try:
            sweep = self.sweep(template, SubmitOptions(vary=tuple(asked.get("vary") or ()),
                                                       seeds=int(asked.get("seeds") or 1)))
            jobs = swept(template, report.jobs, sweep) if sweep else report.jobs
        except Invalid as e:  # (checked when made; a template edited since may refuse it)
            log.warning("schedule %s: its sweep no longer fits: %s", schedule.id, e.render())
            return None
        try:
            done = await self._enqueue(Submission(
                template.name, schedule.submitter, jobs, platform=schedule.platform,
                conversation=schedule.conversation, priority=schedule.priority,
                idempotency_key=f"schedule:{schedule.id}:{int(at)}",
                meta={**schedule.meta, "schedule": schedule.id}))
        except Conflict as e:
            log.warning("schedule %s: %s", schedule.id, e.render())
            return None
        log.info("schedule %s fired: batch %s", schedule.id, done.batch_id)
        return done.batch_id

    async def _owner_may(self, schedule: Schedule) -> bool:
        """Whether the schedule's maker may still use its priority. A platform's own admin
        (DingTalk's isAdmin, a Discord role) is known so only while they write: the
        schedule remembers it (as "platform_admin" before platforms gave other roles)."""
        platform, _, user = schedule.submitter.partition(":")
        given = schedule.meta.get("platform_role") or (
            "admin" if schedule.meta.get("platform_admin") is True else None)
        owner = Who(platform, user, schedule.conversation,
                    platform_role=given if given in {r.value for r in Role} else None)
        try:
            await self.permissions.priority(owner, await self.permissions.role(owner),
                                            schedule.priority, Action.SCHEDULE)
        except Refused as e:
            log.warning("schedule %s: %s", schedule.id, e.render())
            return False
        return True

    # --- people ---------------------------------------------------------------------------
    async def grant(self, who: Who, target: Who, role: Role,
                    max_priority: Priority | None = None) -> None:
        """Give `target` a role, on top of the config's (which a grant cannot lower for a
        config admin), and with `max_priority` a more urgent priority than the role's."""
        await self.permissions.require(who, Action.GRANT)
        await self.permissions.allowed(who, Action.GRANT, target=target.id, role=role.value,
                                       priority=max_priority.label if max_priority else None)
        await self.access.grant(target.platform, target.user, role.value, by=who.id,
                                max_priority=max_priority)

    async def priorities(self, who: Who) -> tuple[Role, list[Priority]]:
        """The person's role and the priorities they may use, the most urgent first
        (what the fronts offer: chat's help, the API's /me, the dashboard's Submit)."""
        role = await self.permissions.role(who)
        return role, await self.permissions.priorities(who, role)

    async def revoke(self, who: Who, target: Who) -> Role:
        """Take a granted role away; the role `target` has now."""
        await self.permissions.require(who, Action.REVOKE)
        await self.permissions.allowed(who, Action.REVOKE, target=target.id)
        if target.id in self.permissions.settings.admins:
            raise Conflict("revoke_config_admin", user=target.id)
        if not await self.access.revoke(target.platform, target.user):
            raise NotFound("revoke_none", user=target.id)
        return await self.permissions.role(target)
