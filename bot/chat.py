"""The chat core: what happens when someone writes to the bot, on any platform.

`Chat.receive` records the files a message carries in the inbox, parses its command,
checks permission, does it, and owes the replies in the outbox, for the sender to
post. It never raises: any text gets a reply, at worst an apology with a reference to
the log, never a traceback. Each command is one small handler, registered by name.

What a batch then owes (acceptance, progress, images, summary) is the notifier's;
replies here are only about the command itself.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any
from zoneinfo import ZoneInfo

from bot.commands import Command, CommandError, help_text, parse
from bot.messages import LANGS, say
from bot.notifier import bar
from bot.permissions import Permissions, Refused, Who
from bot.platform import DownloadError, Incoming, Platform
from storage.access import Access
from storage.config import Config
from storage.files import FileStore
from storage.inbox import Inbox, Upload, is_sheet, name_key
from storage.outbox import Outbox
from storage.queue import Priority, Queue, QueueFull, Submission
from storage.schedules import Schedules
from storage.workers import Workers

log = logging.getLogger("genbot.chat")


@dataclass(frozen=True)
class Reply:
    text: str
    file: str | None = None  # relative to the file store
    image: bool = False


@dataclass
class Turn:
    """One message being handled: who sent it, in which language, and what to answer."""
    msg: Incoming
    who: Who
    lang: str
    zone: ZoneInfo
    role: str = "none"
    replies: list[Reply] = field(default_factory=list)

    def say(self, code: str, **details: Any) -> None:
        self.replies.append(Reply(say(code, self.lang, **details)))

    def add(self, code: str, **details: Any) -> None:
        """Append to the last reply (one message rather than several)."""
        text = say(code, self.lang, **details)
        if self.replies and self.replies[-1].file is None:
            self.replies[-1] = Reply(f"{self.replies[-1].text}\n{text}")
        else:
            self.replies.append(Reply(text))

    def append(self, code: str, **details: Any) -> None:
        """Continue the last line of the last reply."""
        self.replies[-1] = Reply(self.replies[-1].text + say(code, self.lang, **details))


Handler = Callable[["Chat", Turn, Command], Awaitable[None]]
HANDLERS: dict[str, Handler] = {}


def handles(name: str) -> Callable[[Handler], Handler]:
    def register(func: Handler) -> Handler:
        HANDLERS[name] = func
        return func
    return register


class Chat:
    def __init__(self, *, queue: Queue, inbox: Inbox, access: Access, outbox: Outbox,
                 store: FileStore, templates: dict, config: Config,
                 platforms: dict[str, Platform], clock: Callable[[], float] = time.time,
                 on_owed: Callable[[], None] = lambda: None, local_admins: tuple[str, ...] = ()):
        self.queue, self.inbox, self.access, self.outbox = queue, inbox, access, outbox
        self.store, self.templates, self.config = store, templates, config
        self.platforms, self.clock, self.on_owed = platforms, clock, on_owed
        settings = config.chat
        if local_admins:  # the person at `genbot chat`'s terminal owns the machine
            settings = dataclasses.replace(settings, admins=[*settings.admins, *local_admins])
        self.permissions = Permissions(settings, access, queue, clock=clock)
        self.schedules = Schedules(queue.db, clock=clock)

    # --- Where and in what language ---------------------------------------------------
    def language(self, msg: Incoming) -> str:
        """Most specific first: the person, the conversation, the workspace, the platform
        (from [chat] languages); then the person's own locale; then the platform's default;
        then [chat] language."""
        p = msg.platform
        given = self.config.chat.language_at(f"{p}:{msg.user}", f"{p}:{msg.conversation}",
                                             f"{p}:{msg.workspace}" if msg.workspace else None, p)
        if given:
            return given
        locale = (msg.lang or "").lower()[:2]
        if locale in LANGS:
            return locale
        platform = self.platforms.get(p)
        return (platform.default_lang if platform else None) or self.config.chat.language

    def zone(self, msg: Incoming) -> ZoneInfo:
        for name in (msg.tz, self.config.chat.timezone):
            try:
                if name:
                    return ZoneInfo(name)
            except (ValueError, KeyError, OSError):
                continue  # a zone this machine does not know: the next one
        return ZoneInfo("UTC")

    # --- Receiving --------------------------------------------------------------------
    async def receive(self, msg: Incoming) -> None:
        """Handle one message; owe its replies. Never raises."""
        turn = Turn(msg, Who(msg.platform, msg.user, msg.conversation, msg.platform_admin), "en",
                    ZoneInfo("UTC"))
        try:
            turn.lang, turn.zone = self.language(msg), self.zone(msg)
            uploads = [await self.inbox.record(
                platform=msg.platform, user=msg.user, conversation=msg.conversation,
                name=f.name, size=f.size, handle=f.handle, message=msg.message)
                for f in msg.files]
            if msg.text.strip() or not uploads:
                await self.command(turn)
            else:
                self.acknowledge_files(turn, uploads)
        except Exception:
            ref = uuid.uuid4().hex[:8]
            log.exception("chat: error handling a message (ref %s) from %s:%s", ref,
                          msg.platform, msg.user)
            turn.replies = [Reply(say("internal_error", turn.lang, ref=ref))]
        await self.owe(turn)

    def acknowledge_files(self, turn: Turn, uploads: list[Upload]) -> None:
        sheets = [u.name for u in uploads if is_sheet(u.name)]
        names = ", ".join(u.name for u in uploads)
        if sheets:
            turn.say("file_received", names=names, name=_quoted(sheets[0]))
        else:
            turn.say("images_received", names=names)

    async def command(self, turn: Turn) -> None:
        try:
            cmd = parse(turn.msg.text, now=datetime.fromtimestamp(self.clock(), turn.zone))
            turn.role = await self.permissions.check(turn.who, cmd,
                                                     owner=await self.owner(turn, cmd))
            await HANDLERS[cmd.name](self, turn, cmd)
        except (CommandError, Refused) as e:
            turn.replies.append(Reply(e.render(turn.lang)))
        except Missing as e:
            turn.say(e.code, **e.details)

    async def owner(self, turn: Turn, cmd: Command) -> str | None:
        """Who submitted the batch a /cancel or /retry is about (Missing if none)."""
        if cmd.name == "retry":
            return (await self.batch_or_missing(cmd.args["batch"]))["submitter"]
        if cmd.name == "cancel":
            kind, number = cmd.args["target"]
            if kind == "batch":
                return (await self.batch_or_missing(number))["submitter"]
            if kind == "job":
                job = await self.queue.job(number)
                if job is None:
                    raise Missing("no_job", job=number)
                return job["submitter"]
        return None

    async def batch_or_missing(self, batch_id: int) -> dict:
        batch = await self.queue.batch(batch_id)
        if batch is None:
            raise Missing("no_batch", batch=batch_id)
        return batch

    async def owe(self, turn: Turn) -> None:
        """The replies, in order, in the message's thread; a retried message owes nothing new."""
        msg = turn.msg
        base = f"reply:{msg.platform}:{msg.message or uuid.uuid4().hex}"
        for i, reply in enumerate(turn.replies):
            kind = "text" if reply.file is None else ("image" if reply.image else "file")
            await self.outbox.put(f"{base}:{i}", platform=msg.platform,
                                  conversation=msg.conversation, thread=msg.thread, kind=kind,
                                  payload={"text": reply.text, "path": reply.file,
                                           "lang": turn.lang, "context": msg.context})
        if turn.replies:
            self.on_owed()

    def attachments(self, upload: Upload) -> Callable[[str], Awaitable[bytes | None]]:
        """The files sent with a sheet, by name, for the image cells of its rows: those of
        its message, else the person's latest upload of that name (platforms that carry
        one file per message). A local upload (the terminal) also offers the files beside
        it, as `genbot run` does."""
        cache: dict[str, list[Upload]] = {}

        async def get(name: str) -> bytes | None:
            if "files" not in cache:
                cache["files"] = [] if upload.message is None else await self.inbox.message_files(
                    platform=upload.platform, message=upload.message)
            base = PurePosixPath(name).name
            found = next((f for key in (name_key(name), name_key(base))
                          for f in cache["files"] if name_key(f.name) == key), None)
            if found is None:  # sent on its own (DingTalk: one file per message)
                found = (await self.inbox.find_sheet(
                    platform=upload.platform, user=upload.user,
                    conversation=upload.conversation, name=base)).found
            if found is not None and found.id != upload.id:
                try:
                    return await self.platforms[upload.platform].download(found.handle)
                except DownloadError:
                    return None
            folder = upload.handle.get("folder")
            if folder:
                from bot.images import folder_attachments
                return await folder_attachments(Path(folder))(name)
            return None
        return get


class Missing(Exception):
    """What a command names does not exist: a reply, not a refusal."""

    def __init__(self, code: str, **details: Any):
        self.code, self.details = code, details
        super().__init__(code)


def _quoted(name: str) -> str:
    return f'"{name}"' if re.search(r"\s", name) else name


def _recent(turn: Turn, uploads: tuple[Upload, ...], now: float) -> None:
    if uploads:
        turn.add("recent_files", files=", ".join(
            say("file_age", turn.lang, name=u.name, minutes=max(0, round((now - u.received_at) / 60)))
            for u in uploads))


def _user_target(raw: str, platform: str) -> tuple[str, str]:
    """(platform, user) from <@U024BE7LH>, <@U024BE7LH|name>, @alice, slack:U1 or U1."""
    text = raw.strip()
    if m := re.fullmatch(r"<@([^>|]+)(\|[^>]*)?>", text):
        return platform, m[1]
    text = text.lstrip("@")
    head, sep, tail = text.partition(":")
    if sep and head and tail and head.isalpha():
        return head.lower(), tail
    return platform, text


def _unknown_template(chat: Chat, turn: Turn, name: str) -> None:
    names = ", ".join(sorted(chat.templates)) or "-"
    close = difflib.get_close_matches(name, list(chat.templates), n=1, cutoff=0.6)
    if close:
        turn.say("unknown_template_close", name=name[:60], close=close[0], names=names)
    else:
        turn.say("unknown_template", name=name[:60], names=names)


# --- The commands -------------------------------------------------------------------------

async def find_and_check(chat: Chat, turn: Turn, name: str, file: str | None, *,
                         skip_invalid: bool, fetched: dict[str, bytes] | None = None):
    """The sheet a command names (or the person's latest), downloaded and through intake:
    (upload, its bytes, result); or None, with the reason replied. `fetched` collects the pictures
    its rows named."""
    msg = turn.msg
    template = chat.templates.get(name)
    if template is None:
        _unknown_template(chat, turn, name)
        return None
    lookup = await chat.inbox.find_sheet(platform=msg.platform, user=msg.user,
                                         conversation=msg.conversation, name=file,
                                         message=msg.message)
    upload = lookup.found
    if upload is None:
        if lookup.ambiguous:
            turn.say("file_ambiguous", names=", ".join(
                u.name for u in sorted(lookup.candidates, key=lambda u: u.id)),
                     template=name)
            return None
        if file:
            turn.say("file_not_found", file=file[:120])
        else:
            turn.say("no_sheet", template=name)
        _recent(turn, lookup.candidates, chat.clock())
        platform = chat.platforms.get(msg.platform)
        if platform is not None and platform.file_hint:
            turn.add(platform.file_hint)
        return None
    try:
        data = await chat.platforms[upload.platform].download(upload.handle)
    except DownloadError as e:
        turn.say(e.code, **{"file": upload.name, **e.details})
        return None
    from bot.images import ImageResolver, recording
    from bot.intake import intake
    attachments = chat.attachments(upload)
    if fetched is not None:
        attachments = recording(attachments, fetched)
    settings = chat.config.intake
    images = ImageResolver(settings, chat.store, assets_dir=chat.config.assets_dir,
                           attachments=attachments)
    result = await intake(template, upload.name, data, settings=settings, images=images,
                          skip_invalid=skip_invalid)
    return upload, data, result


@handles("gen")
async def gen(chat: Chat, turn: Turn, cmd: Command) -> None:
    msg, lang = turn.msg, turn.lang
    name = cmd.args["template"]
    skip = cmd.options["skip_invalid"]
    found = await find_and_check(chat, turn, name, cmd.args["file"], skip_invalid=skip)
    if found is None:
        return
    upload, _, result = found
    settings = chat.config.intake
    report = result.report(lang, settings.max_problems_shown, skip_invalid=skip)
    if not result.jobs:
        turn.replies.append(Reply(report))
        return
    if cmd.options["dry_run"]:
        turn.replies.append(Reply(report))
        turn.add("dry_run", jobs=len(result.jobs), template=name)
        return
    await chat.permissions.check_submission(turn.who, turn.role, len(result.jobs))
    at: datetime | None = cmd.options["at"]
    meta: dict[str, Any] = {"lang": lang, "sheet": upload.name, "context": msg.context}
    if at is not None:
        meta["at"] = f"{at:%Y-%m-%d %H:%M} ({at.tzinfo})"
    try:
        await chat.queue.enqueue(Submission(
            name, turn.who.id, result.jobs, platform=msg.platform, conversation=msg.conversation,
            thread=msg.thread, priority=Priority[cmd.options["priority"].upper()],
            idempotency_key=f"chat:{msg.platform}:{msg.message}" if msg.message else None,
            not_before=at.timestamp() if at else 0.0, meta=meta))
    except QueueFull as e:
        turn.say("queue_full", free=e.free, limit=e.limit, requested=e.requested)
        return
    if result.issues or result.unused_columns:  # the acceptance itself is the notifier's
        turn.replies.append(Reply(report))


@handles("status")
async def status(chat: Chat, turn: Turn, cmd: Command) -> None:
    batch_id = cmd.args["batch"] or await chat.queue.latest_batch(turn.who.id)
    if batch_id is None:
        turn.say("no_batches")
        return
    batch = await chat.batch_or_missing(batch_id)
    progress = await chat.queue.batch_progress(batch_id)
    counts = progress.counts
    turn.say("status", batch=batch_id, template=batch["template"], owner=batch["submitter"],
             bar=bar(progress.done, progress.total), done=progress.done, total=progress.total,
             failed=counts.get("failed", 0) + counts.get("canceled", 0),
             queued=counts.get("queued", 0), running=counts.get("running", 0))
    if batch["meta"].get("at") and counts.get("queued", 0) == progress.total:
        turn.add("status_at", at=batch["meta"]["at"])
    elif progress.jobs_ahead is not None:
        turn.add("status_waiting", ahead=progress.jobs_ahead, eta=_eta(turn.lang,
                                                                        progress.eta_seconds))


def _eta(lang: str, seconds: float | None) -> str:
    if seconds is None:
        return say("eta_unknown", lang)
    return say("eta_minutes", lang, minutes=max(1, round(seconds / 60)))


@handles("queue")
async def queue_(chat: Chat, turn: Turn, cmd: Command) -> None:
    state = await chat.queue.state()
    if state["paused"]:
        turn.say("queue_paused", by=state["changed_by"] or "-")
    else:
        turn.say("queue_running")
    active = await chat.queue.active_counts()
    turn.add("queue_counts", queued=active["queued"], running=active["running"])
    if active["queued"]:
        turn.add("queue_eta", eta=_eta(turn.lang, await chat.queue.eta(active["queued"] - 1)))
    now = chat.clock()
    for job in await chat.queue.running():
        turn.add("queue_job", job=job["id"], batch=job["batch_id"], template=job["template"],
                 row=job["row"], minutes=(now - (job["started_at"] or now)) / 60)
    workers = [w for w in await Workers.of(chat.queue).all() if w["state"] != "stopped"]
    for w in workers:
        turn.add(f"queue_worker_{w['state']}", name=w["id"], device=w["device"], job=w["job_id"],
                 minutes=(now - w["seen_at"]) / 60)
        if w["allow"] is not None and w["state"] != "lost":
            turn.append("queue_worker_takes", models=", ".join(w["allow"]) or "-")
    live = [w for w in workers if w["state"] in ("idle", "busy")]
    if not live:
        turn.add("queue_no_workers")
    elif all(w["allow"] is not None for w in live):  # placement: is anyone taking these?
        taken = {m for w in live for m in w["allow"]}
        for model, jobs in (await chat.queue.queued_by_affinity()).items():
            if model not in taken:
                turn.add("queue_unplaced", jobs=jobs, model=model)


@handles("cancel")
async def cancel(chat: Chat, turn: Turn, cmd: Command) -> None:
    kind, number = cmd.args["target"]
    scope: dict[str, Any] = {"job": {"job": number}, "batch": {"batch": number},
                             "mine": {"submitter": turn.who.id},
                             "all": {"everything": True}}[kind]
    result = await chat.queue.cancel(**scope, by=turn.who.id)
    if result.ended or result.asked:
        turn.say("canceled", ended=len(result.ended), asked=len(result.asked))
    else:
        turn.say("nothing_to_cancel")


@handles("retry")
async def retry(chat: Chat, turn: Turn, cmd: Command) -> None:
    batch_id = cmd.args["batch"]
    try:
        again = await chat.queue.retry_failed(batch_id, by=turn.who.id)
    except QueueFull as e:
        turn.say("queue_full", free=e.free, limit=e.limit, requested=e.requested)
        return
    if again is None:
        turn.say("nothing_to_retry", batch=batch_id)
    elif not again.created:
        turn.say("retried_already", batch=batch_id, new=again.batch_id)
    else:
        turn.say("retried", batch=batch_id, jobs=again.jobs, new=again.batch_id)


@handles("pause")
async def pause(chat: Chat, turn: Turn, cmd: Command) -> None:
    turn.say("paused_now" if await chat.queue.pause(by=turn.who.id) else "paused_already")


@handles("resume")
async def resume(chat: Chat, turn: Turn, cmd: Command) -> None:
    turn.say("resumed_now" if await chat.queue.resume(by=turn.who.id) else "resumed_already")


@handles("templates")
async def templates(chat: Chat, turn: Turn, cmd: Command) -> None:
    lines = [say("templates_list", turn.lang)]
    lines += [f"{name} — {t.description}" for name, t in sorted(chat.templates.items())]
    turn.replies.append(Reply("\n".join(lines)))


@handles("template")
async def template(chat: Chat, turn: Turn, cmd: Command) -> None:
    from bot.sheets import header_for, write_example
    name = cmd.args["name"]
    t = chat.templates.get(name)
    if t is None:
        _unknown_template(chat, turn, name)
        return
    columns = "\n".join(
        f"  {header_for(p, turn.lang)}{'*' if p.required and p.default is None else ''}"
        f" ({p.type}{', ' + p.allowed if p.allowed else ''}){' — ' + p.help if p.help else ''}"
        for p in t.params.values())
    path = chat.store.write(f"examples/{name}-{turn.lang}.xlsx", write_example(t, turn.lang))
    turn.replies.append(Reply(say("template_info", turn.lang, name=name,
                                  description=t.description, columns=columns), file=path))


@handles("grant")
async def grant(chat: Chat, turn: Turn, cmd: Command) -> None:
    platform, user = _user_target(cmd.args["user"], turn.who.platform)
    await chat.access.grant(platform, user, cmd.args["role"], by=turn.who.id)
    turn.say("granted", user=f"{platform}:{user}", role=cmd.args["role"])


@handles("revoke")
async def revoke(chat: Chat, turn: Turn, cmd: Command) -> None:
    platform, user = _user_target(cmd.args["user"], turn.who.platform)
    target = Who(platform, user)
    if target.id in chat.permissions.settings.admins:
        turn.say("revoke_config_admin", user=target.id)
    elif await chat.access.revoke(platform, user):
        turn.say("revoked", user=target.id, role=await chat.permissions.role(target))
    else:
        turn.say("revoke_none", user=target.id)


@handles("schedule")
async def schedule(chat: Chat, turn: Turn, cmd: Command) -> None:
    """The sheet and the pictures it names are copied now: chat uploads expire."""
    from bot.schedules import make, next_fire
    fetched: dict[str, bytes] = {}
    found = await find_and_check(chat, turn, cmd.args["template"], cmd.args["file"],
                                 skip_invalid=False, fetched=fetched)
    if found is None:
        return
    upload, data, result = found
    if not result.ok:
        turn.replies.append(Reply(result.report(turn.lang, chat.config.intake.max_problems_shown)))
        return
    zone = str(turn.zone)
    schedule_id = await make(
        chat.schedules, chat.store, cron=cmd.args["cron"], timezone=zone,
        template=cmd.args["template"], sheet_name=upload.name, sheet=data, pictures=fetched,
        submitter=turn.who.id, platform=turn.msg.platform, conversation=turn.msg.conversation,
        priority=int(Priority[cmd.options["priority"].upper()]), lang=turn.lang)
    when = next_fire(cmd.args["cron"], zone, chat.clock())
    turn.say("scheduled", id=schedule_id, template=cmd.args["template"], sheet=upload.name,
             cron=cmd.args["cron"], zone=zone, next=f"{when:%Y-%m-%d %H:%M}")


@handles("schedules")
async def schedules(chat: Chat, turn: Turn, cmd: Command) -> None:
    from bot.schedules import next_fire
    rows = await chat.schedules.all()
    if not rows:
        turn.say("schedules_none")
        return
    turn.replies.append(Reply("\n".join(say(
        "schedule_line", turn.lang, id=r["id"], template=r["template"],
        sheet=r["meta"].get("sheet", "-"), cron=r["cron"], zone=r["timezone"], by=r["submitter"],
        next=f"{next_fire(r['cron'], r['timezone'], max(r['fired_at'], chat.clock())):%Y-%m-%d %H:%M}")
        for r in rows)))


@handles("unschedule")
async def unschedule(chat: Chat, turn: Turn, cmd: Command) -> None:
    removed = await chat.schedules.remove(cmd.args["id"])
    turn.say("unscheduled" if removed else "no_schedule", id=cmd.args["id"])


@handles("help")
async def help_(chat: Chat, turn: Turn, cmd: Command) -> None:
    turn.replies.append(Reply(help_text(cmd.args["command"], turn.lang)))
