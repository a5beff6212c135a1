"""Reading the values people type, the same from chat and from the API: a priority, a
start time, a cron line. Each reads a string or raises Invalid with the reason."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from bot.errors import Invalid
from storage.records import Priority
from templates.params import Problem

MAX_AHEAD = timedelta(days=31)
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")
PRIORITIES = tuple(p.label for p in Priority)


class KeyedProblem(Invalid):
    """A value that does not fit, given for a KEY (an edit's, a sweep's): the key named,
    then the problem as a sheet's cell would have it, in the reader's language."""

    def __init__(self, frame: str, problem: Problem):
        super().__init__(problem.code, **problem.details)
        self.frame = frame  # the message that names the key: "{key}: {problem}"

    def render(self, lang: str = "en") -> str:
        from bot.messages import say
        details = {k: v for k, v in self.details.items() if k not in ("key", "column")}
        return say(self.frame, lang, key=self.details["key"],
                   problem=say(self.code, lang, **details))


def problem(e: Problem, frame: str, own: tuple[str, ...] = ()) -> Invalid:
    """A template's Problem as the coded error a front renders: framed by its key when it
    is about one value (unless its code is one of `own`, whole sentences of their own)."""
    if "key" in e.details and e.code not in own:
        return KeyedProblem(frame, e)
    return Invalid(e.code, **e.details)


def priority(raw: str) -> Priority:
    """urgent, high, normal or low, in any case."""
    text = raw.strip().upper()
    if text not in Priority.__members__:
        raise Invalid("bad_priority", value=raw[:40])
    return Priority[text]


def start_time(raw: str, now: datetime) -> datetime:
    """When to start: "21:30" (the next time it is 21:30), "2026-12-24 08:00", an ISO 8601
    time with or without a zone, or "+30m", "+2h", "+1d". Times without a zone are in
    `now`'s (aware). At most MAX_AHEAD ahead, and not in the past."""
    text = raw.strip().lower()
    zone: tzinfo | None = now.tzinfo
    if m := re.fullmatch(r"\+(\d{1,4})\s*([mhd])", text):
        unit = {"m": "minutes", "h": "hours", "d": "days"}[m[2]]
        when = now + timedelta(**{unit: int(m[1])})
    elif m := re.fullmatch(r"(\d{1,2}):(\d{2})", text):
        hour, minute = int(m[1]), int(m[2])
        if hour > 23 or minute > 59:
            raise Invalid("bad_time", value=raw[:40])
        when = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if when <= now:
            when += timedelta(days=1)
    else:
        try:
            when = datetime.fromisoformat(raw.strip().replace("/", "-"))
        except ValueError:
            raise Invalid("bad_time", value=raw[:40]) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=zone)
    if when <= now:
        raise Invalid("time_passed", value=raw[:40])
    if when - now > MAX_AHEAD:
        raise Invalid("time_too_far", value=raw[:40], days=MAX_AHEAD.days)
    return when


def cron_trigger(cron: str, timezone: str) -> Any:
    """APScheduler's trigger for a five-field crontab line in `timezone` (an IANA name);
    Invalid when it is not one. Weekday numbers mean what crontab says (0 and 7 Sunday,
    1 Monday); APScheduler 3 counts from Monday, so they are given to it as names."""
    from apscheduler.triggers.cron import CronTrigger
    fields = cron.split()
    try:
        zone = ZoneInfo(timezone)
    except (ValueError, KeyError, OSError):
        raise Invalid("bad_timezone", value=timezone[:60]) from None
    if len(fields) != 5:
        raise Invalid("bad_cron", value=cron[:60])
    weekday = re.sub(r"(?<![/\d])([0-7])(?!\d)", lambda m: DAYS[int(m[1])], fields[4])
    minute, hour, day, month, _ = fields
    try:
        return CronTrigger(minute=minute, hour=hour, day=day, month=month, day_of_week=weekday,
                           timezone=zone)
    except ValueError:
        raise Invalid("bad_cron", value=cron[:60]) from None


def next_fire(cron: str, timezone: str, after: float) -> datetime | None:
    """The first firing of `cron` after the Unix time `after`."""
    trigger = cron_trigger(cron, timezone)
    return trigger.get_next_fire_time(None, datetime.fromtimestamp(after, ZoneInfo(timezone)))
