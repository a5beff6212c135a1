"""Every chat command, each declared once with its handler — the way slack-bolt registers
listeners: `@command(name, usage, aliases=…, args=…, options=…)`.

The declaration is the grammar (bot.chat.grammar reads it), the permission (the action
it performs names the role it needs, bot.app.permissions) and the dispatch (its handler).
A handler gets the Turn (who, language, the app, the inbox, the platforms) and the
parsed Command, calls the application layer and says what happened; any coded error it
lets through becomes the reply.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime

from bot.app import values
from bot.app.core import CancelTarget, Scheduled, SubmitOptions
from bot.app.permissions import Role, Who
from bot.chat.grammar import Arg, Command, CommandError, Option, Registry
from bot.chat.turn import Reply, Turn
from bot.chat.uploads import attachments, sheet_for
from bot.errors import Invalid
from bot.intake.check import IntakeReport
from bot.intake.examples import example_pictures
from bot.intake.sheets import header_for, write_example
from bot.messages import bar, canceled, say
from storage.records import Priority, Status
from storage.workers import Workers

COMMANDS = Registry()
command = COMMANDS.command


# --- reading what was typed --------------------------------------------------------------

def number(what: str):
    def read(raw: str, now: datetime) -> int:
        text = raw.lstrip("#")
        if not text.isdigit() or len(text) > 18:
            raise Invalid("not_an_id", what=what, value=raw[:40])
        return int(text)
    return read


def cancel_target(raw: str, now: datetime) -> CancelTarget:
    """"12", "#12", "batch:12", "batch 12" -> a batch; "job:7", "job 7", "j7" -> a job;
    mine; all."""
    words = raw.split()
    if len(words) == 2:
        if words[0].lower() not in ("job", "batch"):
            raise CommandError("extra_argument", value=words[1][:40])
        raw = f"{words[0].lower()}:{words[1]}"
    low = raw.lower()
    if low in ("mine", "我的"):
        return CancelTarget.mine()
    if low in ("all", "全部"):
        return CancelTarget.everything()
    if low.startswith("job:"):
        return CancelTarget.job(number("job")(raw[4:], now))
    if re.fullmatch(r"j#?\d+", low):
        return CancelTarget.job(number("job")(raw[1:], now))
    return CancelTarget.batch(number("batch")(raw[6:] if low.startswith("batch:") else raw, now))


def cron_line(raw: str, now: datetime) -> str:
    values.cron_trigger(raw, "UTC")
    return raw


def role_name(raw: str, now: datetime) -> Role:
    try:
        role = Role(raw.lower())
    except ValueError:
        role = Role.NONE
    if role is Role.NONE:
        raise Invalid("bad_role", role=raw[:40])
    return role


def command_name(raw: str, now: datetime) -> str:
    word = raw.lstrip("/").lower()
    if word not in COMMANDS.names:
        raise Invalid("unknown_command", word=raw[:40])
    return COMMANDS.names[word]


def user_target(raw: str, platform: str) -> Who:
    """Who a command names: <@U024BE7LH>, <@U024BE7LH|name>, @alice, slack:U1 or U1."""
    text = raw.strip()
    if m := re.fullmatch(r"<@([^>|]+)(\|[^>]*)?>", text):
        return Who(platform, m[1])
    text = text.lstrip("@")
    head, sep, tail = text.partition(":")
    if sep and head and tail and head.isalpha():
        return Who(head.lower(), tail)
    return Who(platform, text)


def _priority(raw: str, now: datetime) -> Priority:
    return values.priority(raw)


PRIORITY = Option(_priority, Priority.NORMAL)


def _eta(lang: str, seconds: float | None) -> str:
    if seconds is None:
        return say("eta_unknown", lang)
    return say("eta_minutes", lang, minutes=max(1, round(seconds / 60)))


# --- the commands ------------------------------------------------------------------------

@command("gen", "TEMPLATE [FILE] [--priority urgent|high|normal|low] [--at TIME] "
         "[--skip-invalid] [--dry-run]", aliases=("generate", "生成"),
         args=(Arg("template"), Arg("file", optional=True)),
         options={"--priority": PRIORITY, "--at": Option(values.start_time),
                  "--skip-invalid": Option(), "--dry-run": Option()})
async def gen(turn: Turn, cmd: Command) -> None:
    name, msg = cmd.args["template"], turn.msg
    turn.app.template(name)  # an unknown template is said before any file is looked for
    found = await sheet_for(turn, name, cmd.args["file"])
    if found is None:
        return
    upload, sheet = found
    o = cmd.options
    result = await turn.app.submit(turn.who, name, sheet, attachments(turn, upload), SubmitOptions(
        priority=o["priority"], at=o["at"], skip_invalid=o["skip_invalid"], dry_run=o["dry_run"],
        key=f"chat:{msg.platform}:{msg.message}" if msg.message else None, thread=msg.thread,
        lang=turn.lang, context=msg.context))
    report = result if isinstance(result, IntakeReport) else result.report
    if report is None:
        return  # the same message again: answered the first time
    shown = turn.app.config.intake.max_problems_shown
    text = report.report(turn.lang, shown, skip_invalid=o["skip_invalid"])
    if isinstance(result, IntakeReport):  # nothing queued: why, or what a dry run found
        turn.reply(text)
        if result.jobs:
            turn.add("dry_run", jobs=len(result.jobs), template=name)
    elif report.issues or report.unused_columns or report.notes:  # (the acceptance: the notifier's)
        turn.reply(text)


@command("status", "[BATCH]", aliases=("状态",), args=(Arg("batch", True, number("batch")),))
async def status(turn: Turn, cmd: Command) -> None:
    queue = turn.app.queue
    batch_id = cmd.args["batch"] or await queue.latest_batch(turn.who.id)
    if batch_id is None:
        turn.say("no_batches")
        return
    batch = await turn.app.batch(batch_id)
    progress = await queue.batch_progress(batch_id)
    assert progress is not None
    counts = progress.counts
    turn.say("status", batch=batch_id, template=batch.template, owner=batch.submitter,
             bar=bar(progress.done, progress.total), done=progress.done, total=progress.total,
             failed=progress.failed, canceled=canceled(turn.lang, progress.canceled),
             queued=counts.get(Status.QUEUED, 0),
             running=counts.get(Status.RUNNING, 0))
    if batch.meta.get("at") and counts.get(Status.QUEUED, 0) == progress.total:
        turn.add("status_at", at=batch.meta["at"])
    elif progress.jobs_ahead is not None:
        turn.add("status_waiting", ahead=progress.jobs_ahead,
                 eta=_eta(turn.lang, progress.eta_seconds))


@command("queue", aliases=("队列",))
async def queue_(turn: Turn, cmd: Command) -> None:
    queue = turn.app.queue
    state = await queue.state()
    if state.paused:
        turn.say("queue_paused", by=state.changed_by or "-")
    else:
        turn.say("queue_running")
    active = await queue.active_counts()
    turn.add("queue_counts", queued=active.queued, running=active.running)
    if active.queued:
        turn.add("queue_eta", eta=_eta(turn.lang, await queue.eta(active.queued - 1)))
    now = turn.app.clock()
    for job in await queue.running():
        turn.add("queue_job", job=job.id, batch=job.batch_id, template=job.template,
                 row=job.row, minutes=(now - (job.started_at or now)) / 60)
    workers = [w for w in await Workers.of(queue).all() if w.state != "stopped"]
    for w in workers:
        turn.add(f"queue_worker_{w.state}", name=w.id, device=w.device, job=w.job_id,
                 minutes=(now - w.seen_at) / 60)
        if w.doing:
            turn.append(f"queue_worker_{w.doing[0]}", models=", ".join(w.doing[1]))
        if w.allow is not None and w.state != "lost":
            turn.append("queue_worker_takes", models=", ".join(w.allow) or "-")
        if w.live:
            for template, why in sorted(w.cannot_run.items()):
                turn.add("queue_worker_cannot", name=w.id, template=template, why=why)
    live = [w for w in workers if w.live]
    if not live:
        turn.add("queue_executor_starting" if turn.app.executor_starting
                 else "queue_no_workers")
    elif all(w.allow is not None for w in live):  # placement: is anyone taking these?
        taken = {m for w in live for m in w.allow or ()}
        for model, jobs in (await queue.queued_by_affinity()).items():
            if model not in taken:
                turn.add("queue_unplaced", jobs=jobs, model=model)


@command("cancel", "BATCH | job JOB | mine | all", aliases=("取消",),
         args=(Arg("target", read=cancel_target, words=2),))
async def cancel(turn: Turn, cmd: Command) -> None:
    result = await turn.app.cancel(turn.who, cmd.args["target"])
    if result.ended or result.asked:
        turn.say("canceled", ended=len(result.ended), asked=len(result.asked))
    else:
        turn.say("nothing_to_cancel")


@command("retry", "BATCH", aliases=("重试",), args=(Arg("batch", read=number("batch")),))
async def retry(turn: Turn, cmd: Command) -> None:
    batch_id = cmd.args["batch"]
    again = await turn.app.retry(turn.who, batch_id)
    if again.created:
        turn.say("retried", batch=batch_id, jobs=again.jobs, new=again.batch_id)
    else:
        turn.say("retried_already", batch=batch_id, new=again.batch_id)


@command("pause", aliases=("暂停",))
async def pause(turn: Turn, cmd: Command) -> None:
    if await turn.app.pause(turn.who):
        turn.announce("paused_now")
    else:
        turn.say("paused_already")


@command("resume", aliases=("继续", "恢复"))
async def resume(turn: Turn, cmd: Command) -> None:
    if await turn.app.resume(turn.who):
        turn.announce("resumed_now")
    else:
        turn.say("resumed_already")


@command("templates", aliases=("模板列表",))
async def templates(turn: Turn, cmd: Command) -> None:
    lines = [say("templates_list", turn.lang)]
    lines += [f"{name} — {t.description}" for name, t in sorted(turn.app.templates.items())]
    turn.reply("\n".join(lines))


@command("template", "NAME", aliases=("模板",), args=(Arg("name"),))
async def template(turn: Turn, cmd: Command) -> None:
    name = cmd.args["name"]
    t = turn.app.template(name)
    columns = "\n".join(
        f"  {header_for(p, turn.lang)}{'*' if p.required and p.default is None else ''}"
        f" ({p.type}{', ' + p.allowed if p.allowed else ''}){' — ' + p.help if p.help else ''}"
        for p in t.params.values())
    store = turn.app.store
    path = await asyncio.to_thread(store.write, f"examples/{name}-{turn.lang}.xlsx",
                                   write_example(t, turn.lang))
    pictures = await example_pictures(t, turn.app.config.assets_dir)
    text = say("template_info", turn.lang, name=name, description=t.description, columns=columns)
    if pictures:
        text += "\n" + say("template_pictures", turn.lang, names=", ".join(pictures), name=name)
    turn.reply(text, file=path)
    for picture, data in pictures.items():  # what the rows name, to see and to replace
        shown = await asyncio.to_thread(store.write, f"examples/{name}/{picture}", data)
        turn.replies.append(Reply(picture, file=shown, image=True))


@command("grant", "USER admin|submitter|viewer", aliases=("授权",),
         args=(Arg("user"), Arg("role", read=role_name)))
async def grant(turn: Turn, cmd: Command) -> None:
    target = user_target(cmd.args["user"], turn.who.platform)
    await turn.app.grant(turn.who, target, cmd.args["role"])
    turn.say("granted", user=target.id, role=cmd.args["role"].value)


@command("revoke", "USER", aliases=("撤销",), args=(Arg("user"),))
async def revoke(turn: Turn, cmd: Command) -> None:
    target = user_target(cmd.args["user"], turn.who.platform)
    role = await turn.app.revoke(turn.who, target)
    turn.say("revoked", user=target.id, role=role.value)


@command("schedule", '"CRON" TEMPLATE [FILE]', aliases=("定时",),
         args=(Arg("cron", read=cron_line), Arg("template"), Arg("file", optional=True)),
         options={"--priority": PRIORITY})
async def schedule(turn: Turn, cmd: Command) -> None:
    """The sheet and the pictures it names are copied now: chat uploads expire."""
    name = cmd.args["template"]
    turn.app.template(name)
    found = await sheet_for(turn, name, cmd.args["file"])
    if found is None:
        return
    upload, sheet = found
    made = await turn.app.schedule(turn.who, cmd.args["cron"], str(turn.zone), name, sheet,
                                   attachments(turn, upload), priority=cmd.options["priority"],
                                   lang=turn.lang)
    if not isinstance(made, Scheduled):
        turn.reply(made.report(turn.lang, turn.app.config.intake.max_problems_shown))
        return
    turn.say("scheduled", id=made.id, template=made.template, sheet=made.sheet, cron=made.cron,
             zone=made.timezone, next=f"{made.next:%Y-%m-%d %H:%M}")


@command("schedules", aliases=("定时列表",))
async def schedules(turn: Turn, cmd: Command) -> None:
    rows = await turn.app.schedules.all()
    if not rows:
        turn.say("schedules_none")
        return
    now = turn.app.clock()
    turn.reply("\n".join(say(
        "schedule_line", turn.lang, id=r.id, template=r.template,
        sheet=r.meta.get("sheet", "-"), cron=r.cron, zone=r.timezone, by=r.submitter,
        next=f"{values.next_fire(r.cron, r.timezone, max(r.fired_at, now)):%Y-%m-%d %H:%M}")
        for r in rows))


@command("unschedule", "ID", aliases=("取消定时",), args=(Arg("id", read=number("schedule")),))
async def unschedule(turn: Turn, cmd: Command) -> None:
    await turn.app.unschedule(turn.who, cmd.args["id"])
    turn.say("unscheduled", id=cmd.args["id"])


@command("help", "[COMMAND]", aliases=("帮助", "?"),
         args=(Arg("command", optional=True, read=command_name),))
async def help_(turn: Turn, cmd: Command) -> None:
    turn.reply(COMMANDS.help(cmd.args["command"], turn.lang))
