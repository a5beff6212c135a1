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
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from bot.app import values
from bot.app.application import CancelTarget, Scheduled, SubmitOptions, Unconfirmed
from bot.app.estimates import eta, held_by
from bot.app.iterate import ActionRequest, SeveralImages
from bot.app.permissions import Action, Role, Who
from bot.app.results import write_picks
from bot.chat.grammar import Arg, Command, CommandError, Option, Registry
from bot.chat.platform import DeliveryError, DownloadError, Field, Form
from bot.chat.turn import Reply, Turn
from bot.chat.uploads import attachments, picture_for, sheet_for
from bot.errors import Invalid, NotFound
from bot.intake.check import IntakeReport
from bot.intake.examples import example_pictures
from bot.intake.sheets import header_for
from bot.intake.writer import write_example
from bot.messages import Phrase, action_label, bar, canceled, review_summary, say
from bot.settings import ChatConfig, IntakeConfig, assets_dir
from storage.config import QueueConfig
from storage.records import Job, Priority, Status
from storage.reviews import MAX_STARS, Review
from storage.workers import Workers
from templates.actions import ACTIONS, PARAMETERS, SIDES, ActionSpec
from templates.binding import as_text
from templates.params import parse_aspect
from templates.settings import TemplatesConfig

COMMANDS = Registry()
command = COMMANDS.command


# --- reading what was typed --------------------------------------------------------------

def number(what: str) -> Callable[[str, datetime], int]:
    named = Phrase(f"id_{what}")  # (a word the catalog lacks fails at import)

    def read(raw: str, now: datetime) -> int:
        text = raw.lstrip("#")
        if not text.isdigit() or len(text) > 18:
            raise Invalid("not_an_id", what=named, value=raw[:40])
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


# --- the commands ------------------------------------------------------------------------

def text_value(raw: str, now: datetime) -> str:
    return raw


def seeds_of(raw: str, now: datetime) -> int:
    return number("seeds")(raw, now)


def keys_of(raw: str, now: datetime) -> tuple[str, ...]:
    """--grid steps,CFG: the keys, across then down."""
    return tuple(k.strip() for k in raw.split(",") if k.strip())


@command("gen", "TEMPLATE [FILE] [--priority urgent|high|normal|low] [--at TIME] "
         "[--skip-invalid] [--dry-run] [--wait-for-executor] [--vary KEY=V1,V2 …] "
         "[--seeds N] [--grid KEY1,KEY2] [--channels taobao,douyin] [--layout NAME] [--yes] | "
         "TEMPLATE@A TEMPLATE@B [FILE] --compare",
         aliases=("generate", "生成"),
         args=(Arg("template"), Arg("file", optional=True), Arg("more", optional=True)),
         options={"--priority": PRIORITY, "--at": Option(values.start_time),
                  "--skip-invalid": Option(), "--dry-run": Option(),
                  "--wait-for-executor": Option(),
                  "--vary": Option(text_value, (), repeat=True),
                  "--seeds": Option(seeds_of, 1), "--grid": Option(keys_of, ()),
                  "--channels": Option(keys_of, ()), "--layout": Option(text_value, ""),
                  "--yes": Option(), "--compare": Option()})
async def gen(turn: Turn, cmd: Command) -> None:
    name, msg, o = cmd.args["template"], turn.msg, cmd.options
    file, others = cmd.args["file"], tuple[str, ...]()
    if o["compare"]:  # /gen A B [FILE] --compare: each row through both, the same seeds
        if file is None:
            raise Invalid("compare_needs_two")
        file, others = cmd.args["more"], (cmd.args["file"],)
    elif cmd.args["more"] is not None:
        raise CommandError("extra_argument", COMMANDS["gen"].line,
                           value=str(cmd.args["more"])[:40])
    template = await turn.app.resolve(name)  # an unknown one is said before any file is sought
    for other in others:
        await turn.app.resolve(other)
    turn.app.sweep(template, SubmitOptions(vary=o["vary"], seeds=o["seeds"],
                                           grid=o["grid"]))  # (said first)
    turn.app.channels(template, o["channels"], o["layout"])
    found = await sheet_for(turn, name, file)
    if found is None:
        return
    upload, sheet = found
    options = SubmitOptions(
        priority=o["priority"], at=o["at"], skip_invalid=o["skip_invalid"], dry_run=o["dry_run"],
        key=f"chat:{msg.platform}:{msg.message}" if msg.message else None, thread=msg.thread,
        lang=turn.lang, context=msg.context, wait_for_executor=o["wait_for_executor"],
        vary=o["vary"], seeds=o["seeds"], grid=o["grid"], compare=others,
        channels=o["channels"], layout=o["layout"],
        ask_over=None if o["yes"] else turn.app.config[ChatConfig].confirm_over)
    result = await turn.app.submit(turn.who, name, sheet, attachments(turn, upload), options)
    if isinstance(result, Unconfirmed):
        _ask_first(turn, result)
        return
    report = result if isinstance(result, IntakeReport) else result.report
    if report is None:
        return  # the same message again: answered the first time
    shown = turn.app.config[IntakeConfig].max_problems_shown
    text = report.report(turn.lang, shown, skip_invalid=o["skip_invalid"])
    if isinstance(result, IntakeReport):  # nothing queued: why, or what a dry run found
        turn.reply(text)
        if result.jobs:
            turn.add("dry_run", count=len(result.jobs), template=name)
    elif report.issues or report.unused_columns or report.notes:  # (the acceptance: the notifier's)
        turn.reply(text)


def _ask_first(turn: Turn, cost: Unconfirmed) -> None:
    """A sweep past [chat] confirm_over: how many jobs, models and minutes, and the same
    command with --yes (a button where there are buttons) to queue it."""
    command = f"{turn.msg.text.strip()} --yes"
    turn.replies.append(Reply(
        say("sweep_confirm", turn.lang, jobs=cost.jobs, rows=cost.rows,
            each=cost.jobs // max(cost.rows, 1),
            models=", ".join(cost.models) or say("sweep_no_models", turn.lang),
            eta=eta(turn.lang, cost.eta_seconds), command=command),
        buttons=({"label": say("button_yes_queue", turn.lang, jobs=cost.jobs),
                  "command": command, "id": "sweep_yes"},)))


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
             bar=bar(progress.total, progress.succeeded, progress.failed, progress.canceled),
             done=progress.done, total=progress.total,
             failed=progress.failed, canceled=canceled(turn.lang, progress.canceled),
             queued=counts.get(Status.QUEUED, 0),
             running=counts.get(Status.RUNNING, 0))
    if batch.meta.get("at") and counts.get(Status.QUEUED, 0) == progress.total:
        turn.add("status_at", at=batch.meta["at"])
    elif progress.jobs_ahead is not None:
        turn.add("status_waiting", count=progress.jobs_ahead,
                 eta=eta(turn.lang, progress.eta_seconds, await held_by(queue)))
    for waiting in await turn.app.batch_unplaced(batch_id):
        turn.add("status_unplaced", what=waiting.what, why="; ".join(waiting.why))


@command("queue", aliases=("队列",))
async def queue_(turn: Turn, cmd: Command) -> None:
    queue = turn.app.queue
    state = await queue.state()
    if state.paused:
        turn.say("queue_paused", by=state.changed_by or "-")
    else:
        turn.say("queue_running")
    active = await queue.active_counts()
    held = await queue.now_and_next()
    working = [j for j in held if j.working]
    unheld = active.queued + active.running - len(held)
    if len(held) > len(working):
        turn.add("queue_counts_next", queued=unheld, next=len(held) - len(working),
                 running=len(working))
    else:
        turn.add("queue_counts", queued=active.queued, running=active.running)
    if active.queued:
        turn.add("queue_eta", eta=eta(turn.lang, await queue.eta(active.queued - 1),
                                      await held_by(queue)))
    now = turn.app.clock()
    for job in working:  # every one: an executor may run several at once
        turn.add("queue_job", job=job.id, batch=job.batch_id, template=job.template,
                 row=job.row, minutes=(now - (job.started_at or now)) / 60)
    nexts: dict[str, list[int]] = {}
    for job in held:
        if not job.working:
            nexts.setdefault(job.lease_owner or "-", []).append(job.id)
    for holder, ids in nexts.items():
        turn.add("queue_next", holder=holder, jobs=", ".join(map(str, ids)))
    workers = [w for w in await Workers.of(queue).all() if w.state != "stopped"]
    for w in workers:
        runs = ", ".join(str(j.id) for j in working if j.lease_owner == w.id)
        turn.add(f"queue_worker_{w.state}", name=w.id, device=w.device,
                 job=runs or w.job_id, minutes=(now - w.seen_at) / 60)
        if w.doing:
            turn.append(f"queue_worker_{w.doing[0]}", models=", ".join(w.doing[1]))
        if w.allow is not None and w.state != "lost":
            turn.append("queue_worker_takes", models=", ".join(w.allow) or "-")
        if w.live:
            for template, why in sorted(w.cannot_run.items()):
                turn.add("queue_worker_cannot", name=w.id, template=template, why=why)
    if not any(w.live for w in workers):
        turn.add("queue_executor_starting" if turn.app.executor_starting
                 else "queue_no_workers")
    waiting = await queue.queued_by_affinity()  # placement: is anyone taking these?
    for unplaced in await turn.app.unplaced(waiting):
        turn.add("queue_unplaced", jobs=waiting[unplaced.need], model=unplaced.what)


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


def image_ref_or_batch(raw: str, now: datetime) -> tuple[str, int]:
    """A bare number names a batch here (jN a job, bN a batch too)."""
    kind, n = image_ref(raw, now)
    if kind == "message" or not isinstance(n, int):
        raise Invalid("not_an_id", what=Phrase("id_batch"), value=raw[:40])
    return ("job" if kind == "job" else "batch"), n


def where_to(raw: str, now: datetime) -> str:
    where = {"front": "front", "back": "back", "前": "front", "最前": "front", "后": "back",
             "最后": "back"}.get(raw.lower())
    if where is None:
        raise Invalid("move_where", to=raw[:20])
    return where


@command("move", "BATCH|jJOB front|back", aliases=("移动", "调整顺序"),
         args=(Arg("what", read=image_ref_or_batch), Arg("to", read=where_to)))
async def move(turn: Turn, cmd: Command) -> None:
    kind, n = cmd.args["what"]
    moved = await turn.app.move(turn.who, cmd.args["to"], **{kind: n})
    turn.say("moved", what=f"{'b' if kind == 'batch' else 'j'}{n}", count=moved,
             where=say(f"move_{cmd.args['to']}", turn.lang))


# --- iterating on images: ROW as captioned in this thread, or job N ---------------------

def image_ref(raw: str, now: datetime) -> tuple[str, int | str]:
    """"3" -> row 3 (of the thread's batch); "j57", "job:57", "job57" -> job 57;
    "b12", "batch:12", "批次12" -> batch 12's kept images (an action on each);
    "@message:TS" -> the image under the bot's message TS (what a reaction names)."""
    if raw.startswith("@message:") and len(raw) < 80:
        return "message", raw.removeprefix("@message:")
    low = raw.lower().lstrip("#")
    for kind, prefixes in (("job", ("job:", "job", "j", "任务")),
                           ("batch", ("batch:", "batch", "b", "批次"))):
        for prefix in prefixes:
            if low.startswith(prefix) and low[len(prefix):].isdigit():
                return kind, number(kind)(low[len(prefix):], now)
    return "row", number("row")(low, now)


def count_of(raw: str, now: datetime) -> int:
    return number("count")(raw.lstrip("x×"), now)


def factor_of(raw: str, now: datetime) -> float:
    text = raw.lower().rstrip("x×倍")
    try:
        return float(text)
    except ValueError:
        raise Invalid("not_number", value=raw[:40]) from None


def pair(raw: str, now: datetime) -> tuple[str, str]:
    key, sep, value = raw.partition("=")
    if not sep or not key.strip():
        raise Invalid("edit_pair", value=raw[:60])
    return key.strip(), value


PAIR = re.compile(r"[^\s=]+=")  # KEY=… : a key is one word; "price = 99 元 off" is a sentence


SIDE_WORDS = {"left": "left", "right": "right", "top": "top", "bottom": "bottom",
              "左": "left", "右": "right", "上": "top", "下": "bottom"}
SIDE = re.compile(r"(left|right|top|bottom|左|右|上|下)\s*[=＝:：]\s*(\d+)\s*(?:px)?", re.I)
PICTURE = re.compile(r".+\.(png|jpe?g|webp)", re.I)


def margin_word(raw: str, now: datetime) -> tuple[str, Any] | None:
    """A word of an extend: a side's pixels ("left=256", "左=256") or a shape ("9:16");
    None: a word of what to paint."""
    if m := SIDE.fullmatch(raw.strip()):
        return SIDE_WORDS[m[1].lower()], int(m[2])
    try:
        return "aspect", parse_aspect(raw)
    except ValueError:
        return None


REGION = re.compile(r"(?:region|区域)\s*[=＝:：]\s*(.+)", re.I | re.S)


def region_word(raw: str, now: datetime) -> tuple[str, Any] | None:
    """A word of a repaint: where to repaint, in words ("region=瓶子", "区域=瓶子",
    "region='the bottle'" quoted as one word); None: a word of what to paint."""
    return ("region", m[1].strip()) if (m := REGION.fullmatch(raw.strip())) else None


def mask_word(raw: str, now: datetime) -> tuple[str, Any] | None:
    """A word of a repaint: the name of the mask picture sent ("mask.png"); None: a word
    of what to paint."""
    return ("mask", raw) if PICTURE.fullmatch(raw.strip()) else None


def strength_of(raw: str, now: datetime) -> float:
    value = factor_of(raw, now)
    if not 0 < value <= 1:
        raise Invalid("not_number", value=raw[:40])
    return value


IMAGE = Arg("image", read=image_ref)
INSTRUCTION_FIELD = " instruction"  # (a form's field no template parameter can be named)
IN_BATCH = {"--batch": Option(number("batch"))}


async def _image(turn: Turn, cmd: Command) -> Job:
    kind, n = cmd.args["image"]
    if kind == "batch":
        raise Invalid("image_ref_batch", batch=n, command=cmd.name)
    msg = turn.msg
    if kind == "message":
        about = await turn.app.message_about(msg.platform, msg.conversation, str(n))
        if about is None or about[0] != "job":
            raise NotFound("action_no_batch")
        kind, n = about
    try:
        return await turn.app.find_image(
            platform=msg.platform, conversation=msg.conversation, thread=msg.thread,
            row=n if kind == "row" else None, job=n if kind == "job" else None,
            batch=cmd.options.get("batch"))
    except SeveralImages as e:  # which one: the example is the command to type for it
        e.details["example"] = f"/{cmd.name} j{e.jobs[0].id}"
        raise


async def _act(turn: Turn, cmd: Command, request: ActionRequest) -> None:
    kind, n = cmd.args["image"]
    if kind == "batch":  # every kept image of the batch
        assert isinstance(n, int)
        on = await turn.app.act_on_kept(turn.who, n, replace(request, lang=turn.lang))
        label = action_label(request.action, turn.lang)
        turn.say("acted_kept" if on.created else "acted_kept_already", action=label,
                 count=on.kept, of_batch=on.of_batch, batch=on.batch_id)
        return
    parent = await _image(turn, cmd)
    done = await turn.app.act(turn.who, parent.id, replace(request, lang=turn.lang))
    label = action_label(request.action, turn.lang)
    if done.created:
        turn.say("acted", action=label, count=len(done.jobs), row=parent.row, job=parent.id,
                 batch=done.batch_id)
    else:
        turn.say("acted_already", action=label, job=parent.id, batch=done.batch_id)


# Each image action (templates.actions.ACTIONS) is a command: its arguments from what it
# takes, its words from the catalog (help_NAME), its handler this one.
TAKES: dict[str, tuple[str, Arg | None, tuple[str, Option] | None]] = {  # usage, arg, option
    "count": ("[N]", Arg("count", True, count_of), None),
    "factor": ("[FACTOR]", Arg("factor", True, factor_of), None),
    "strength": ("[--strength 0.35]", None, ("--strength", Option(strength_of))),
}
# The words after the image, by what the action takes: how each is written, and what reads
# one (None: any word left over: an instruction's, or what to paint). A quoted sentence is
# one word, so an "=" inside it after a space stays the sentence's.
WORDS: dict[str, tuple[str, Callable[[str, datetime], tuple[str, Any] | None] | None]] = {
    "values": ("KEY=VALUE …", lambda raw, now: pair(raw, now) if PAIR.match(raw) else None),
    "mask": ("MASK.png", mask_word),
    "region": ("region=WORDS", region_word),
    "margins": ("W:H|left=PX …", margin_word),
    "instruction": ("INSTRUCTION", None),
}


def _words(spec: ActionSpec) -> tuple[str, Arg | None]:
    """The usage and the argument of the words an action takes after the image."""
    taken = sorted((name for name in PARAMETERS if name in WORDS and name in spec.takes),
                   key=lambda name: name == "instruction")  # (what to paint, last)
    if not taken:
        return "", None
    readers = [reader for name in taken if (reader := WORDS[name][1]) is not None]

    def read(raw: str, now: datetime) -> tuple[str, Any] | str:
        return next((got for r in readers if (got := r(raw, now)) is not None), raw)
    shown = [WORDS[name][0] for name in taken]
    usage = f"[{'|'.join(shown)}]" if "values" in taken else \
        " ".join(f"[{u}]" for u in shown)
    return usage, Arg("words", True, read, rest=True)


def _image_action(spec: ActionSpec) -> None:
    takes = [TAKES[name] for name in PARAMETERS if name in spec.takes and name in TAKES]
    words_usage, words = _words(spec)
    usage = " ".join(["ROW|jJOB|bBATCH", *(u for u, arg, _ in takes if arg),
                      *([words_usage] if words_usage else []),
                      *(u for u, arg, _ in takes if not arg and u), "[--batch BATCH]"])
    options = {**IN_BATCH, **dict(option for _, _, option in takes if option)}

    @command(spec.name, usage, aliases=spec.aliases, options=options,
             args=(IMAGE, *(arg for _, arg, _ in takes if arg), *([words] if words else [])))
    async def handle(turn: Turn, cmd: Command) -> None:
        got = {**cmd.args, **{k.lstrip("-"): v for k, v in cmd.options.items()}}
        words = got.get("words") or []
        given: dict[str, Any] = dict(w for w in words if isinstance(w, tuple))
        instruction = " ".join(w for w in words if isinstance(w, str))
        if "values" in spec.takes and given and instruction:
            raise Invalid("edit_both")
        if "values" in spec.takes and not words:  # what to change: the row's values
            if cmd.args["image"][0] == "batch":
                raise Invalid("edit_kept_usage", batch=cmd.args["image"][1])
            await _values_now(turn, cmd, spec)
            return
        mask = None
        region = given.pop("region", "") if "region" in spec.takes else ""
        if "mask" in spec.takes and (not region or "mask" in given):
            kind, n = cmd.args["image"]
            if kind == "batch":  # (before asking for a picture it could not use)
                raise Invalid("mask_one_image")
            shown = {"row": f"{n}", "job": f"j{n}"}.get(kind, "3")
            mask = await picture_for(turn, given.pop("mask", None), f"/{cmd.name} {shown}")
            if mask is None:
                return  # (why: said)
        margins = {side: given.pop(side) for side in SIDES if side in given} \
            if "margins" in spec.takes else {}
        aspect = given.pop("aspect", None) if "margins" in spec.takes else None
        await _act(turn, cmd, ActionRequest(
            spec.name, count=got.get("count") or 1,
            values=given if "values" in spec.takes else {}, instruction=instruction,
            factor=got.get("factor") or 2.0, strength=got.get("strength"), mask=mask,
            region=region, aspect=aspect, **margins))


for _spec in ACTIONS.values():
    _image_action(_spec)


async def _values_now(turn: Turn, cmd: Command, spec: ActionSpec) -> None:
    """What the row has now, and how to change it: a form, where there is one."""
    parent = await _image(turn, cmd)
    if await _edit_form(turn, parent, spec):
        return
    named = {**parent.values, **parent.workflow.get("named", {})}  # pictures as named
    values = {k: as_text(v) for k, v in named.items() if v not in (None, "")}
    text = [k for k in values if k not in parent.workflow.get("named", {})]
    example = f'{text[0]}="{values[text[0]]}"' if text else "KEY=VALUE"
    turn.say("edit_usage", row=parent.row, job=parent.id, job_ref=f"j{parent.id}",
             values=", ".join(f"{k}={v}" for k, v in values.items()) or "-",
             example=example, command=f"/{spec.name}")
    if "instruction" in spec.takes and turn.app.edit_model() is not None:
        turn.add("edit_usage_sentence", command=f"/{spec.name}", job_ref=f"j{parent.id}")


async def _edit_form(turn: Turn, parent: Job, spec: ActionSpec) -> bool:
    """Where a button press can open a form (Slack's modal), the row's values in one,
    each field the template lets a person change; True if it opened."""
    msg = turn.msg
    if not _can_ask(turn):
        return False
    batch = await turn.app.batch(parent.batch_id)
    template = turn.app.templates.get(batch.template)
    if template is None:
        return False
    fields = tuple(
        Field(p.name, header_for(p, turn.lang), as_text(parent.values.get(p.name)),
              multiline=p.type == "text")
        for p in template.params.values() if not p.picture)
    if turn.app.edit_model() is not None:  # the image itself, by a sentence, comes first
        fields = (Field(INSTRUCTION_FIELD, say("edit_form_instruction", turn.lang),
                        multiline=True, words=True), *fields)
    return await _ask(turn, Form(say("edit_form_title", turn.lang, row=parent.row)[:24],
                                 f"/{spec.name} j{parent.id}", fields,
                                 say("edit_form_submit", turn.lang), msg.conversation,
                                 msg.thread))


def _can_ask(turn: Turn) -> bool:
    """Can a form open here: a platform with forms, and a button press's trigger?"""
    platform = turn.platforms.get(turn.msg.platform)
    return platform is not None and platform.has_forms and \
        bool(turn.msg.context.get("trigger_id"))


async def _ask(turn: Turn, form: Form) -> bool:
    """Open `form` where the press came from; False when its trigger expired meanwhile
    (the caller answers in text instead)."""
    try:
        await turn.platforms[turn.msg.platform].open_form(turn.msg.context, form)
    except DeliveryError:
        return False
    return True


def _note(cmd: Command) -> str:
    return " ".join(cmd.args.get("note") or ())


async def _review(turn: Turn, cmd: Command, state: Review, code: str) -> None:
    done = await turn.app.review(turn.who, (await _image(turn, cmd)).id, state, _note(cmd))
    job, change = done.job, done.change
    if change is not None:
        turn.say("changes_queued", row=job.row, job=job.id, note=job.review_note or "",
                 batch=change.batch_id, action=action_label(change.action, turn.lang))
    elif job.review_note:
        turn.say(f"{code}_because", row=job.row, job=job.id, note=job.review_note)
    else:
        turn.say(code, row=job.row, job=job.id)


NOTE = Arg("note", True, rest=True)


@command("keep", "ROW|jJOB [REMARK] [--batch BATCH]",
         aliases=("approve", "保留", "收藏", "⭐", "通过"), args=(IMAGE, NOTE), options=IN_BATCH)
async def keep(turn: Turn, cmd: Command) -> None:
    await _review(turn, cmd, Review.APPROVED, "kept")


@command("reject", "ROW|jJOB [REASON] [--ask] [--batch BATCH]", aliases=("淘汰", "不要", "驳回"),
         args=(IMAGE, NOTE), options={**IN_BATCH, "--ask": Option()})
async def reject(turn: Turn, cmd: Command) -> None:
    """--ask (the image's Reject button): where a form can open (Slack's modal), it asks
    why first — left empty, the image is rejected without one."""
    if cmd.options["ask"] and not _note(cmd) and await _reason_form(turn, await _image(turn, cmd)):
        return
    await _review(turn, cmd, Review.REJECTED, "rejected")


async def _reason_form(turn: Turn, job: Job) -> bool:
    if not _can_ask(turn):
        return False
    await turn.app.permit(turn.who, Action.REJECT)  # (who may not is told so, not asked why)
    return await _ask(turn, Form(
        say("reject_form_title", turn.lang, row=job.row)[:24], f"/reject j{job.id}",
        (Field("reason", say("reject_form_reason", turn.lang), multiline=True, words=True),),
        say("button_reject_image", turn.lang), turn.msg.conversation, turn.msg.thread))


@command("changes", "ROW|jJOB WHAT TO CHANGE [--batch BATCH]", aliases=("返工", "修改意见"),
         args=(IMAGE, NOTE), options=IN_BATCH)
async def changes(turn: Turn, cmd: Command) -> None:
    await _review(turn, cmd, Review.CHANGES, "changes")


@command("unkeep", "ROW|jJOB [--batch BATCH]", aliases=("取消保留", "取消审核"), args=(IMAGE,),
         options=IN_BATCH)
async def unkeep(turn: Turn, cmd: Command) -> None:
    await _review(turn, cmd, Review.UNREVIEWED, "unkept")


def grade(raw: str, now: datetime) -> int | None:
    if raw.lower() in ("none", "0", "无"):
        return None
    stars = raw.count("⭐") or (int(raw) if raw.isdigit() else -1)
    if not 1 <= stars <= MAX_STARS:
        raise Invalid("stars_range", most=MAX_STARS, stars=raw[:10])
    return stars


@command("stars", "ROW|jJOB 1-5|none [--batch BATCH]", aliases=("评分", "星级"),
         args=(IMAGE, Arg("stars", read=grade)), options=IN_BATCH)
async def stars(turn: Turn, cmd: Command) -> None:
    job = await turn.app.stars(turn.who, (await _image(turn, cmd)).id, cmd.args["stars"])
    turn.say("starred", row=job.row, job=job.id, stars="⭐" * (job.stars or 0) or "—")


@command("signoff", "[BATCH]", aliases=("sign-off", "定稿", "签收"),
         args=(Arg("batch", True, number("batch")),))
async def signoff(turn: Turn, cmd: Command) -> None:
    msg = turn.msg
    batch_id = cmd.args["batch"] or await turn.app.find_batch(
        platform=msg.platform, conversation=msg.conversation, thread=msg.thread)
    done = await turn.app.sign_off(turn.who, batch_id)
    turn.say("signed_off", batch=done.batch.id, by=done.batch.signed_off_by or "",
             summary=review_summary(done.counts.images, turn.lang))


@command("reopen", "BATCH", aliases=("重新审核",), args=(Arg("batch", read=number("batch")),))
async def reopen(turn: Turn, cmd: Command) -> None:
    batch = await turn.app.reopen(turn.who, cmd.args["batch"])
    turn.say("reopened", batch=batch.id)


@command("picks", "[BATCH]", aliases=("精选",), args=(Arg("batch", True, number("batch")),))
async def picks(turn: Turn, cmd: Command) -> None:
    msg = turn.msg
    batch_id = cmd.args["batch"] or await turn.app.find_batch(
        platform=msg.platform, conversation=msg.conversation, thread=msg.thread)
    root, kept = await turn.app.picks(turn.who, batch_id)
    if not kept:
        turn.say("picks_none", batch=root.id)
        return
    app = turn.app
    results, contact = await asyncio.to_thread(
        write_picks, app.store, root, kept, app.templates.get(root.template),
        app.config[TemplatesConfig].font)
    text = say("picks", turn.lang, batch=root.id, count=len(kept))
    if contact:
        turn.replies.append(Reply(text, file=contact, image=True))
        turn.replies.append(Reply("", file=results))
    else:
        turn.reply(text, file=results)


@command("refine", "BATCH", aliases=("精调", "优化"), args=(Arg("batch", read=number("batch")),))
async def refine(turn: Turn, cmd: Command) -> None:
    found = await turn.app.refine(turn.who, cmd.args["batch"])
    lines = [say("refine_head", turn.lang, batch=found.batch.id, count=found.rated)]
    for axis in found.axes:
        if axis.best is None:
            lines.append(say("refine_unrated", turn.lang, param=axis.param))
            continue
        for t in axis.tallies:
            lines.append(say(
                "refine_value", turn.lang, param=axis.param, value=as_text(t.value),
                kept=t.kept, rated=t.rated,
                percent=f"{t.rate:.0%}" if t.rate is not None else "-",
                best=say("refine_best", turn.lang) if t.value == axis.best else ""))
    lines.append(say("refine_next", turn.lang, command=found.command))
    turn.replies.append(Reply("\n".join(lines), buttons=(
        {"label": say("button_run_it", turn.lang), "command": found.command,
         "id": "sweep_yes"},)))


@command("ab", "BATCH", aliases=("对比",), args=(Arg("batch", read=number("batch")),))
async def ab(turn: Turn, cmd: Command) -> None:
    found = await turn.app.ab(turn.who, cmd.args["batch"])
    turn.say("ab_head", batch=found.batch.id, rated=found.rated,
             count=found.rated + found.unrated)
    for variant in found.variants:
        turn.add("ab_won", variant=variant, count=found.won.get(variant, 0))
    turn.add("ab_ties", ties=found.ties)
    if found.unrated:
        turn.add("ab_unrated", count=found.unrated)


@command("webhooks", "[test ENDPOINT | redeliver DELIVERY]", aliases=("回调",), args=(
    Arg("what", True), Arg("target", True)))
async def webhooks(turn: Turn, cmd: Command) -> None:
    """Admins: the endpoints and their deliveries; a test sent now; a delivery sent again."""
    from bot.webhooks.service import WebhookService
    hooks = WebhookService(turn.app)
    what, target = (cmd.args["what"] or "").lower(), cmd.args["target"]
    if what in ("test", "测试", "redeliver", "重发") and target:
        if what in ("test", "测试"):
            done = await hooks.test(turn.who, target)
        else:
            done = await hooks.redeliver(turn.who, number("delivery")(target, datetime.now()))
        m = done.message
        turn.say("webhook_sent" if m.status == "sent" else "webhook_not_sent",
                 delivery=done.id, endpoint=done.endpoint, type=m.payload.get("type", ""),
                 status=m.platform_id or "", error=m.error or "", state=m.status)
        return
    if what:
        raise CommandError("webhooks_usage", usage=COMMANDS["webhooks"].line)
    states = await hooks.endpoints_of(turn.who)
    if not states:
        turn.say("webhooks_none")
        return
    turn.say("webhooks_head", count=len(states))
    for state in states:
        e = state.endpoint
        turn.add("webhooks_endpoint", endpoint=e.id, url=e.url,
                 sent=state.counts.get("sent", 0), pending=state.counts.get("pending", 0),
                 failed=state.counts.get("failed", 0),
                 off=say("webhooks_disabled", turn.lang, why=e.disabled_reason or "")
                 if e.disabled_at else "")


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


def job_or_stuck(raw: str, now: datetime) -> int | str:
    """A job's number, or "stuck" (every job that looks stuck)."""
    return "stuck" if raw.lower() in ("stuck", "卡住") else number("job")(raw, now)


@command("doctor", "[JOB … | stuck]", aliases=("诊断",),
         args=(Arg("jobs", True, job_or_stuck, rest=True),))
async def doctor(turn: Turn, cmd: Command) -> None:
    """Admins: the leased jobs, the quietest first, those that look stuck marked; with
    job numbers (or "stuck"), those handed back to the queue."""
    asked = cmd.args["jobs"] or []
    if asked:
        jobs = None if "stuck" in asked else [j for j in asked if isinstance(j, int)]
        handed = await turn.app.hand_back(turn.who, jobs)
        turn.say("doctor_handed_back" if handed else "doctor_nothing_handed",
                 count=len(handed), jobs=", ".join(map(str, handed)))
        return
    found = await turn.app.leases(turn.who)
    if not found:
        turn.say("doctor_none")
        return
    stuck_after = turn.app.config[QueueConfig].stuck_after
    turn.say("doctor_head", count=len(found), stuck=sum(x.stuck for x in found),
             minutes=stuck_after / 60)
    for lease in found:
        job = lease.job
        turn.add("doctor_ahead" if job.ahead else "doctor_running", job=job.id,
                 batch=job.batch_id, row=job.row, holder=job.lease_owner or "-",
                 state=lease.holder_state, minutes=job.idle_seconds / 60)
        if lease.why:
            turn.append(f"doctor_{lease.why}")
    if any(x.stuck for x in found):
        turn.add("doctor_how")


@command("templates", aliases=("模板列表",))
async def templates(turn: Turn, cmd: Command) -> None:
    lines = [say("templates_list", turn.lang)]
    lines += [f"{name} — {t.description}" for name, t in sorted(turn.app.templates.items())]
    turn.reply("\n".join(lines))


WORKFLOW_FILES = (".json", ".png", ".webp")  # what /template import takes


@command("template", "NAME | import NAME [FILE] [--replace]", aliases=("模板",),
         args=(Arg("name"), Arg("target", True), Arg("file", True)),
         options={"--replace": Option()})
async def template(turn: Turn, cmd: Command) -> None:
    name = cmd.args["name"]
    if name.lower() in ("import", "导入") and cmd.args["target"]:
        await import_template(turn, cmd.args["target"], cmd.args["file"],
                              bool(cmd.options["replace"]))
        return
    t = turn.app.template(name)
    columns = "\n".join(
        f"  {header_for(p, turn.lang)}{'*' if p.required and p.default is None else ''}"
        f" ({p.type}{', ' + p.allowed if p.allowed else ''}){' — ' + p.help if p.help else ''}"
        for p in t.params.values())
    store = turn.app.store
    path = await asyncio.to_thread(store.write, f"examples/{name}-{turn.lang}.xlsx",
                                   write_example(t, turn.lang))
    pictures = await example_pictures(t, assets_dir(turn.app.config))
    text = say("template_info", turn.lang, name=name, description=t.description, columns=columns)
    if pictures:
        text += "\n" + say("template_pictures", turn.lang, names=", ".join(pictures), name=name)
    turn.reply(text, file=path)
    for picture, data in pictures.items():  # what the rows name, to see and to replace
        shown = await asyncio.to_thread(store.write, f"examples/{name}/{picture}", data)
        turn.replies.append(Reply(picture, file=shown, image=True))


async def import_template(turn: Turn, name: str, file: str | None, replace: bool) -> None:
    """An admin's workflow file (or PNG), sent earlier, installed as template `name`."""
    msg = turn.msg
    if file:
        upload = (await turn.inbox.find_sheet(platform=msg.platform, user=msg.user,
                                              conversation=msg.conversation, name=file,
                                              message=msg.message)).found
    else:
        recent = await turn.inbox.recent(platform=msg.platform, user=msg.user,
                                         conversation=msg.conversation)
        upload = next((u for u in recent if u.name.lower().endswith(WORKFLOW_FILES)), None)
    if upload is None:
        turn.say("template_import_file")
        return
    try:
        data = await turn.platforms[upload.platform].download(upload.handle)
    except DownloadError as e:
        turn.say(e.code, **{"file": upload.name, **e.details})
        return
    done = await turn.app.import_template(turn.who, name, upload.name, data, replace=replace)
    turn.say("template_imported", name=name, version=done.template.number, how=done.how,
             file=upload.name, columns="\n".join(f"  {line}" for line in done.columns))


@command("grant", "USER admin|submitter|reviewer|viewer [--priority urgent|high|normal|low]",
         aliases=("授权",), args=(Arg("user"), Arg("role", read=role_name)),
         options={"--priority": Option(_priority, None)})
async def grant(turn: Turn, cmd: Command) -> None:
    target, raised = user_target(cmd.args["user"], turn.who.platform), cmd.options["priority"]
    await turn.app.grant(turn.who, target, cmd.args["role"], raised)
    if raised is None:
        turn.say("granted", user=target.id, role=cmd.args["role"].value)
    else:
        turn.say("granted_priority", user=target.id, role=cmd.args["role"].value,
                 priority=raised.label)


@command("revoke", "USER", aliases=("撤销",), args=(Arg("user"),))
async def revoke(turn: Turn, cmd: Command) -> None:
    target = user_target(cmd.args["user"], turn.who.platform)
    role = await turn.app.revoke(turn.who, target)
    turn.say("revoked", user=target.id, role=role.value)


@command("schedule", '"CRON" TEMPLATE [FILE] [--priority P] [--vary KEY=V1,V2 …] '
         "[--seeds N]", aliases=("定时",),
         args=(Arg("cron", read=cron_line), Arg("template"), Arg("file", optional=True)),
         options={"--priority": PRIORITY, "--vary": Option(text_value, (), repeat=True),
                  "--seeds": Option(seeds_of, 1)})
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
                                   lang=turn.lang, vary=cmd.options["vary"],
                                   seeds=cmd.options["seeds"])
    if not isinstance(made, Scheduled):
        turn.reply(made.report(turn.lang, turn.app.config[IntakeConfig].max_problems_shown))
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
    """With the priorities this person may use where a command takes --priority."""
    text = COMMANDS.help(cmd.args["command"], turn.lang)
    if cmd.args["command"] in (None, "gen", "schedule"):
        _, mine = await turn.app.priorities(turn.who)
        if mine:
            text += "\n" + say("help_priorities", turn.lang,
                               priorities=", ".join(p.label for p in mine))
    turn.reply(text)
