"""Who may do what: roles, ownership and per-person limits, the same on every platform.

A person's role: admin if the config lists them (a grant cannot demote them), else a
role given by /grant, else the config's submitters/viewers lists, else default_role.
Admins do everything; submitters submit, and cancel or retry their own batches;
viewers read status; "none" may only ask for /help. Every refusal and every admin
action is written to the audit log (who, what, when, where).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.commands import Command
from bot.messages import say
from storage.access import Access
from storage.config import ChatConfig
from storage.queue import Queue

RANK = {"none": 0, "viewer": 1, "submitter": 2, "admin": 3}
NEEDS = {"help": "none", "status": "viewer", "queue": "viewer", "templates": "viewer",
         "template": "viewer", "gen": "submitter", "cancel": "submitter", "retry": "submitter",
         "pause": "admin", "resume": "admin", "grant": "admin", "revoke": "admin",
         "schedule": "admin", "schedules": "viewer", "unschedule": "admin"}


@dataclass(frozen=True)
class Who:
    platform: str
    user: str
    conversation: str | None = None
    platform_admin: bool = False  # e.g. DingTalk's isAdmin, when [dingtalk] platform_admins

    @property
    def id(self) -> str:
        """As the queue records a submitter: platform:user."""
        return f"{self.platform}:{self.user}"


class Refused(Exception):
    """A clear no, as a message code and details for the reply."""

    def __init__(self, code: str, **details: Any):
        self.code, self.details = code, details
        super().__init__(code)

    def render(self, lang: str = "en") -> str:
        return say(self.code, lang, **self.details)


class Permissions:
    def __init__(self, settings: ChatConfig, access: Access, queue: Queue, *,
                 clock: Callable[[], float] = time.time):
        self.settings, self.access, self.queue, self.clock = settings, access, queue, clock

    async def role(self, who: Who) -> str:
        s = self.settings
        if who.id in s.admins or who.platform_admin:
            return "admin"
        granted = await self.access.granted_role(who.platform, who.user)
        if granted:
            return granted
        if who.id in s.submitters:
            return "submitter"
        if who.id in s.viewers:
            return "viewer"
        return s.default_role

    async def check(self, who: Who, command: Command, *, owner: str | None = None) -> str:
        """The person's role if they may run `command` (on a batch owned by `owner`, for
        cancel and retry); else Refused, audited."""
        role = await self.role(who)
        needed = NEEDS[command.name]
        if command.name != "help" and self.settings.conversations and \
                f"{who.platform}:{who.conversation}" not in self.settings.conversations:
            await self._refuse(who, command, "refused_conversation")
        if RANK[role] < RANK[needed]:
            await self._refuse(who, command, "refused_role", command=command.name,
                               needed=needed, role=role)
        if role != "admin":
            target = command.args.get("target")
            if command.name == "cancel" and target and target[0] == "all":
                await self._refuse(who, command, "refused_admin_only", what="/cancel all")
            if command.name in ("cancel", "retry") and owner is not None and owner != who.id:
                batch = command.args.get("batch") or (target[1] if target else None)
                await self._refuse(who, command, "refused_not_owner", batch=batch, owner=owner,
                                   command=command.name)
        if role == "admin" and (needed == "admin" or (owner and owner != who.id)
                                or command.args.get("target") == ("all", None)):
            await self.access.audit(platform=who.platform, user=who.user,
                                    conversation=who.conversation, action=command.name,
                                    allowed=True, args=command.args, owner=owner)
        return role

    async def check_submission(self, who: Who, role: str, rows: int) -> None:
        """Per-person limits on a submission of `rows` jobs (admins have none here)."""
        if role == "admin":
            return
        s = self.settings
        if rows > s.submitter_max_rows:
            await self._refuse(who, None, "limit_rows", rows=rows, limit=s.submitter_max_rows)
        active = await self.queue.active_jobs_of(who.id)
        if active + rows > s.submitter_max_queued:
            await self._refuse(who, None, "limit_queued", active=active, rows=rows,
                               limit=s.submitter_max_queued)
        recent = await self.queue.batches_since(who.id, self.clock() - 60)
        if recent >= s.submitter_per_minute:
            await self._refuse(who, None, "limit_rate", count=recent,
                               limit=s.submitter_per_minute)

    async def _refuse(self, who: Who, refused: Command | None, code: str, /, **details: Any):
        await self.access.audit(platform=who.platform, user=who.user,
                                conversation=who.conversation,
                                action=refused.name if refused else "gen", allowed=False,
                                refusal=code, **details)
        raise Refused(code, **details)
