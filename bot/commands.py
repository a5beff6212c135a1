"""The command grammar every front shares: Slack, DingTalk, the terminal.

`parse` turns what a person typed into a Command, or raises CommandError with a code
the fronts render (bot.messages) together with the command's usage line. It never
raises anything else, whatever the text: `/gen …`, `gen …` and `@bot gen …` all work;
Chinese command names, full-width characters and the em dash a phone makes of "--"
are understood.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any

from bot.messages import say

PRIORITIES = ("urgent", "high", "normal", "low")
ROLES = ("admin", "submitter", "viewer")
MAX_AHEAD = timedelta(days=31)


@dataclass(frozen=True)
class Spec:
    name: str
    usage: str  # after the command name; the same in both languages
    args: tuple[str, ...] = ()  # positional names; a trailing "?" marks optional
    options: dict[str, tuple[str, ...] | None] = field(default_factory=dict)  # None: a flag
    aliases: tuple[str, ...] = ()


SPECS: dict[str, Spec] = {s.name: s for s in [
    Spec("gen", "TEMPLATE [FILE] [--priority urgent|high|normal|low] [--at TIME] "
         "[--skip-invalid] [--dry-run]", ("template", "file?"),
         {"--priority": PRIORITIES, "--at": (), "--skip-invalid": None, "--dry-run": None},
         ("generate", "生成")),
    Spec("status", "[BATCH]", ("batch?",), aliases=("状态",)),
    Spec("queue", "", aliases=("队列",)),
    Spec("cancel", "BATCH | job JOB | mine | all", ("target",), aliases=("取消",)),
    Spec("retry", "BATCH", ("batch",), aliases=("重试",)),
    Spec("pause", "", aliases=("暂停",)),
    Spec("resume", "", aliases=("继续", "恢复")),
    Spec("templates", "", aliases=("模板列表",)),
    Spec("template", "NAME", ("name",), aliases=("模板",)),
    Spec("grant", "USER admin|submitter|viewer", ("user", "role"), aliases=("授权",)),
    Spec("revoke", "USER", ("user",), aliases=("撤销",)),
    Spec("schedule", '"CRON" TEMPLATE [FILE]', ("cron", "template", "file?"),
         {"--priority": PRIORITIES}, aliases=("定时",)),
    Spec("schedules", "", aliases=("定时列表",)),
    Spec("unschedule", "ID", ("id",), aliases=("取消定时",)),
    Spec("help", "[COMMAND]", ("command?",), aliases=("帮助", "?")),
]}
NAMES = {alias: s.name for s in SPECS.values() for alias in (s.name, *s.aliases)}


@dataclass(frozen=True)
class Command:
    name: str
    args: dict[str, Any]
    options: dict[str, Any]


class CommandError(Exception):
    """What was wrong, as a message code and details; `command` names the usage to show."""

    def __init__(self, code: str, command: str | None = None, **details: Any):
        self.code, self.command, self.details = code, command, details
        super().__init__(code)

    def render(self, lang: str = "en") -> str:
        text = say(self.code, lang, **self.details)
        return f"{text}\n{usage(self.command, lang)}" if self.command else text


def usage(command: str, lang: str = "en") -> str:
    spec = SPECS[command]
    return say("usage", lang, usage=f"/{spec.name} {spec.usage}".rstrip())


def help_text(command: str | None = None, lang: str = "en") -> str:
    """`/help`: every command with what it does; `/help NAME`: that one, with its usage."""
    if command:
        return f"{usage(command, lang)}\n{say('help_' + command, lang)}"
    lines = [say("help_intro", lang)]
    lines += [f"/{s.name} {s.usage}".rstrip() + f" — {say('help_' + s.name, lang)}"
              for s in SPECS.values()]
    return "\n".join(lines)


def _normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    # Phones turn "--" into an em or en dash; quotes into curly ones.
    text = re.sub(r"(^|\s)[—–]+(?=\w)", r"\1--", text)
    return text.translate(str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'"}))


def _tokens(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        raise CommandError("unbalanced_quote") from None


def _is_mention(token: str) -> bool:
    """@genbot, @机器人, <@U024BE7LH> (Slack): a mention of the bot ahead of the command.
    (The platform adapter has already decided the message is addressed to the bot.)"""
    return bool(re.fullmatch(r"<@[^>]+>", token)) or (token.startswith("@") and len(token) > 1)


def parse(text: str, *, now: datetime) -> Command:
    """The command in `text` (addressed to the bot), or CommandError. `now` (aware) is
    the reader's clock and time zone, for --at."""
    if not isinstance(text, str):
        raise CommandError("empty_command")
    tokens = _tokens(_normalize(text))
    while tokens and _is_mention(tokens[0]):
        tokens.pop(0)
    if not tokens:
        raise CommandError("empty_command")
    word = tokens[0].lstrip("/").lower()
    if word not in NAMES:
        close = _close(word)
        if close:
            raise CommandError("unknown_command_close", word=tokens[0][:40], name=f"/{close}")
        raise CommandError("unknown_command", word=tokens[0][:40])
    spec = SPECS[NAMES[word]]
    args, options = _split(spec, tokens[1:])
    return Command(spec.name, _check_args(spec, args), _check_options(spec, options, now))


def _close(word: str) -> str | None:
    import difflib
    found = difflib.get_close_matches(word, [s.name for s in SPECS.values()], n=1, cutoff=0.6)
    return found[0] if found else None


def _split(spec: Spec, tokens: list[str]) -> tuple[list[str], dict[str, Any]]:
    args: list[str] = []
    options: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.startswith("--") and len(token) > 2:
            name, _, inline = token.partition("=")
            name = name.lower()
            if name not in spec.options:
                raise CommandError("unknown_option", spec.name, option=name[:40])
            if spec.options[name] is None:  # a flag
                options[name] = True
            elif inline:
                options[name] = inline
            elif i + 1 < len(tokens):
                i += 1
                options[name] = tokens[i]
            else:
                raise CommandError("option_needs_value", spec.name, option=name)
        else:
            args.append(token)
        i += 1
    return args, options


def _check_args(spec: Spec, given: list[str]) -> dict[str, Any]:
    names = list(spec.args)
    required = [n for n in names if not n.endswith("?")]
    if spec.name == "cancel" and len(given) == 2 and given[0].lower() in ("job", "batch"):
        given = [f"{given[0].lower()}:{given[1]}"]
    if len(given) < len(required):
        raise CommandError("missing_argument", spec.name, name=required[len(given)].upper())
    if len(given) > len(names):
        raise CommandError("extra_argument", spec.name, value=given[len(names)][:40])
    args = {n.rstrip("?"): v for n, v in zip(names, given)}
    for n in [n.rstrip("?") for n in names]:
        args.setdefault(n, None)
    if spec.name in ("status", "retry") and args["batch"] is not None:
        args["batch"] = _number(spec.name, args["batch"], "batch")
    if spec.name == "unschedule":
        args["id"] = _number(spec.name, args["id"], "schedule")
    if spec.name == "schedule":
        from bot.schedules import trigger
        try:
            trigger(args["cron"], "UTC")
        except ValueError:
            raise CommandError("bad_cron", spec.name, value=args["cron"][:60]) from None
    if spec.name == "cancel":
        args["target"] = _cancel_target(args["target"])
    if spec.name == "grant":
        role = args["role"].lower()
        if role not in ROLES:
            raise CommandError("bad_role", spec.name, role=args["role"][:40])
        args["role"] = role
    if spec.name == "help" and args["command"] is not None:
        word = args["command"].lstrip("/").lower()
        if word not in NAMES:
            raise CommandError("unknown_command", "help", word=args["command"][:40])
        args["command"] = NAMES[word]
    return args


def _number(command: str, raw: str, what: str) -> int:
    text = raw.lstrip("#")
    if not text.isdigit() or len(text) > 18:
        raise CommandError("not_an_id", command, what=what, value=raw[:40])
    return int(text)


def _cancel_target(raw: str) -> tuple[str, int | None]:
    """("batch", 12) from "12", "#12", "batch:12"; ("job", 7) from "job:7", "j7";
    ("mine", None); ("all", None)."""
    low = raw.lower()
    if low in ("mine", "我的"):
        return ("mine", None)
    if low in ("all", "全部"):
        return ("all", None)
    if low.startswith("job:"):
        return ("job", _number("cancel", raw[4:], "job"))
    if re.fullmatch(r"j#?\d+", low):
        return ("job", _number("cancel", raw[1:], "job"))
    return ("batch", _number("cancel", raw[6:] if low.startswith("batch:") else raw, "batch"))


def _check_options(spec: Spec, options: dict[str, Any], now: datetime) -> dict[str, Any]:
    out = {name.lstrip("-").replace("-", "_"): value for name, value in options.items()}
    if "priority" in out:
        if out["priority"].lower() not in PRIORITIES:
            raise CommandError("bad_priority", spec.name, value=out["priority"][:40])
        out["priority"] = out["priority"].lower()
    if "at" in out:
        out["at"] = parse_time(out["at"], now)
    if spec.name == "schedule":
        out.setdefault("priority", "normal")
    if spec.name == "gen":
        out.setdefault("priority", "normal")
        out.setdefault("skip_invalid", False)
        out.setdefault("dry_run", False)
        out.setdefault("at", None)
    return out


def parse_time(raw: str, now: datetime) -> datetime:
    """--at: "21:30" (the next time it is 21:30), "2026-12-24 08:00", an ISO 8601 time
    with or without a zone, or "+30m", "+2h", "+1d". Times without a zone are in `now`'s."""
    text = raw.strip().lower()
    zone: tzinfo = now.tzinfo
    when: datetime | None = None
    if m := re.fullmatch(r"\+(\d{1,4})\s*([mhd])", text):
        unit = {"m": "minutes", "h": "hours", "d": "days"}[m[2]]
        when = now + timedelta(**{unit: int(m[1])})
    elif m := re.fullmatch(r"(\d{1,2}):(\d{2})", text):
        hour, minute = int(m[1]), int(m[2])
        if hour > 23 or minute > 59:
            raise CommandError("bad_time", "gen", value=raw[:40])
        when = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if when <= now:
            when += timedelta(days=1)
    else:
        try:
            when = datetime.fromisoformat(raw.strip().replace("/", "-"))
        except ValueError:
            raise CommandError("bad_time", "gen", value=raw[:40]) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=zone)
    if when <= now:
        raise CommandError("time_passed", "gen", value=raw[:40])
    if when - now > MAX_AHEAD:
        raise CommandError("time_too_far", "gen", value=raw[:40], days=MAX_AHEAD.days)
    return when
