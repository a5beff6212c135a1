"""Who may do what: roles, ownership and per-person limits, the same on every front.

A person's role: admin if the config lists them (a grant cannot demote them), else a
role given by /grant, else the config's submitters/reviewers/viewers lists, else
default_role. Admins do everything; submitters submit, and cancel or retry their own
batches; reviewers review images and sign batches off (a change they request is queued
as the image's owner's), and read; viewers read; "none" may only ask for help.
Priority is a privilege too: a submitter may ask for [chat] submitter_max_priority and
below, an admin for admin_max_priority and below, and a grant may raise one person's.
Every refusal and every admin action is written to the audit log (who, what, when,
where), under the action's name.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NoReturn

from bot.errors import Refused
from bot.settings import ChatConfig
from storage.access import Access
from storage.queue import Queue
from storage.records import Priority
from templates.actions import ACTIONS


class Role(StrEnum):
    NONE = "none"
    VIEWER = "viewer"
    REVIEWER = "reviewer"
    SUBMITTER = "submitter"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)


class Action(StrEnum):
    """What people do, by the name chat, the API, the dashboard and the audit log share.
    The actions on an image that make new ones (again, vary …) are templates.actions.ACTIONS,
    each with the role it needs: `needs(name)` reads both."""
    HELP = "help"
    STATUS = "status"
    QUEUE = "queue"
    TEMPLATES = "templates"
    TEMPLATE = "template"
    SCHEDULES = "schedules"
    GEN = "gen"
    CANCEL = "cancel"
    RETRY = "retry"
    PAUSE = "pause"
    RESUME = "resume"
    DOCTOR = "doctor"
    GRANT = "grant"
    REVOKE = "revoke"
    SCHEDULE = "schedule"
    UNSCHEDULE = "unschedule"
    KEEP = "keep"  # approve (storage.reviews): the batch's picks
    REJECT = "reject"
    UNKEEP = "unkeep"  # back to unreviewed
    CHANGES = "changes"  # request changes: queued as an edit (or again) of the owner's
    STARS = "stars"
    SIGN_OFF = "signoff"
    REOPEN = "reopen"
    PICKS = "picks"
    REFINE = "refine"
    AB = "ab"
    WEBHOOKS = "webhooks"
    MOVE = "move"  # waiting jobs to the front or the back of their submitter's



# The one table of who may do what (beside each image action's own role).
NEEDS: dict[Action, Role] = {
    Action.HELP: Role.NONE,
    Action.STATUS: Role.VIEWER, Action.QUEUE: Role.VIEWER, Action.TEMPLATES: Role.VIEWER,
    Action.TEMPLATE: Role.VIEWER, Action.SCHEDULES: Role.VIEWER,
    Action.GEN: Role.SUBMITTER, Action.CANCEL: Role.SUBMITTER, Action.RETRY: Role.SUBMITTER,
    Action.PAUSE: Role.ADMIN, Action.RESUME: Role.ADMIN, Action.DOCTOR: Role.ADMIN,
    Action.GRANT: Role.ADMIN,
    Action.REVOKE: Role.ADMIN, Action.SCHEDULE: Role.ADMIN, Action.UNSCHEDULE: Role.ADMIN,
    Action.MOVE: Role.ADMIN,
    # Review: a reviewer's (a new image costs the GPU: its spec's role; a change a
    # reviewer requests is queued as the owner's). Reopening a signed-off batch: admins.
    Action.KEEP: Role.REVIEWER, Action.REJECT: Role.REVIEWER, Action.UNKEEP: Role.REVIEWER,
    Action.CHANGES: Role.REVIEWER, Action.STARS: Role.REVIEWER, Action.SIGN_OFF: Role.REVIEWER,
    Action.REOPEN: Role.ADMIN,
    Action.PICKS: Role.VIEWER, Action.REFINE: Role.VIEWER, Action.AB: Role.VIEWER,
    # Endpoints' addresses and every event they were sent: for admins.
    Action.WEBHOOKS: Role.ADMIN,
}


def needs(action: str) -> Role:
    """The least role that may take `action` (an Action, or an image action's name)."""
    if action in ACTIONS:
        return Role(ACTIONS[action].role)
    return NEEDS[Action(action)]


def allowed_actions(role: Role) -> list[str]:
    """Every action `role` may take (the dashboard shows the buttons for these)."""
    return sorted(a for a in [*Action, *ACTIONS] if role.rank >= needs(a).rank)


@dataclass(frozen=True)
class Who:
    """A person, where they are asking from."""
    platform: str
    user: str
    conversation: str | None = None  # None: not in a conversation (the command line)
    platform_role: str | None = None  # the role the platform's own groups give: DingTalk's
    #   isAdmin ([dingtalk] platform_admins), Discord's roles ([discord] roles)

    @property
    def id(self) -> str:
        """As the queue records a submitter: platform:user."""
        return f"{self.platform}:{self.user}"


class Permissions:
    def __init__(self, settings: ChatConfig, access: Access, queue: Queue, *,
                 clock: Callable[[], float] = time.time):
        self.settings, self.access, self.queue, self.clock = settings, access, queue, clock

    async def role(self, who: Who) -> Role:
        s = self.settings
        if who.id in s.admins or who.platform_role == Role.ADMIN:
            return Role.ADMIN
        granted = await self.access.granted(who.platform, who.user)
        if granted:
            return Role(granted.role)
        if who.platform_role:
            return Role(who.platform_role)
        if who.id in s.submitters:
            return Role.SUBMITTER
        if who.id in s.reviewers:
            return Role.REVIEWER
        if who.id in s.viewers:
            return Role.VIEWER
        return Role(s.default_role)

    async def require(self, who: Who, action: str) -> Role:
        """The person's role if they may take `action` from where they ask; else
        Refused, audited. (Allowed admin actions are audited by whoever acts, once.)"""
        role = await self.role(who)
        if action != Action.HELP and self.settings.conversations and \
                who.conversation is not None and \
                f"{who.platform}:{who.conversation}" not in self.settings.conversations:
            await self.refuse(who, action, "refused_conversation")
        if role.rank < needs(action).rank:
            await self.refuse(who, action, "refused_role", command=str(action),
                              needed=needs(action).value, role=role.value)
        return role

    async def own(self, who: Who, role: Role, action: str, *, owner: str,
                  subject: int) -> None:
        """May `who` take `action` on what `owner` submitted (batch or job `subject`)?
        Their own, yes; another's, only as an admin — and that is audited."""
        if owner == who.id:
            return
        if role is not Role.ADMIN:
            await self.refuse(who, action, "refused_not_owner", batch=subject, owner=owner,
                              command=str(action))
        await self.allowed(who, action, owner=owner, subject=subject)

    async def admin_only(self, who: Who, role: Role, action: str, what: str) -> None:
        """A form of `action` only admins may take (e.g. /cancel all)."""
        if role is not Role.ADMIN:
            await self.refuse(who, action, "refused_admin_only", what=what)

    async def limits(self, who: Who, role: Role, rows: int) -> None:
        """Per-person limits on a submission of `rows` jobs (admins have none here)."""
        if role is Role.ADMIN:
            return
        s = self.settings
        if rows > s.submitter_max_rows:
            await self.refuse(who, Action.GEN, "limit_rows", rows=rows, limit=s.submitter_max_rows)
        active = await self.queue.active_jobs_of(who.id)
        if active + rows > s.submitter_max_queued:
            await self.refuse(who, Action.GEN, "limit_queued", active=active, rows=rows,
                              limit=s.submitter_max_queued)
        recent = await self.queue.batches_since(who.id, self.clock() - 60)
        if recent >= s.submitter_per_minute:
            await self.refuse(who, Action.GEN, "limit_rate", count=recent,
                              limit=s.submitter_per_minute)

    async def max_priority(self, who: Who, role: Role) -> Priority | None:
        """The most urgent priority `who` may use: their role's ([chat] submitter_max_priority,
        admin_max_priority), or a grant's when that is more urgent. None: they may not
        submit at all (viewers)."""
        if role.rank < needs(Action.GEN).rank:
            return None
        s = self.settings
        most = Priority[(s.admin_max_priority if role is Role.ADMIN
                         else s.submitter_max_priority).upper()]
        granted = await self.access.granted(who.platform, who.user)
        if granted and granted.max_priority is not None:
            return min(most, granted.max_priority)  # (the more urgent, the smaller)
        return most

    async def priorities(self, who: Who, role: Role) -> list[Priority]:
        """The priorities `who` may use, the most urgent first (what fronts offer)."""
        most = await self.max_priority(who, role)
        return [] if most is None else [p for p in Priority if p >= most]

    async def priority(self, who: Who, role: Role, asked: Priority,
                       action: str = Action.GEN) -> None:
        """Refused (audited) when `asked` is more urgent than `who` may use: levels do not
        take turns, so an urgent sheet holds up everyone's normal ones."""
        most = await self.max_priority(who, role)
        if most is None or asked < most:
            await self.refuse(who, action, "refused_priority", asked=asked.label,
                              most=most.label if most is not None else "-", person=who.id,
                              person_role=role.value)

    async def capped(self, who: Who, role: Role, inherited: Priority) -> Priority:
        """A priority taken over from a batch (a retry, an Again) as `who` may use it."""
        most = await self.max_priority(who, role)
        return inherited if most is None else max(inherited, most)

    async def allowed(self, who: Who, action: str, **detail: Any) -> None:
        """Write an admin action to the audit log."""
        await self.access.audit(platform=who.platform, user=who.user,
                                conversation=who.conversation, action=str(action),
                                allowed=True, **detail)

    async def refuse(self, who: Who, action: str, code: str, /, **details: Any) -> NoReturn:
        """Audit the refusal, then raise it."""
        await self.access.audit(platform=who.platform, user=who.user,
                                conversation=who.conversation, action=str(action),
                                allowed=False, refusal=code, **details)
        raise Refused(code, **details)
