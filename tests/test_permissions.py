"""Who may do what, per-person limits, and the audit log — on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from bot.app.permissions import NEEDS, Action, Permissions, Role, Who, allowed_actions
from bot.errors import Refused
from bot.settings import ChatConfig
from storage.access import Access
from storage.db import Database
from storage.queue import NewJob, Queue, Submission
from templates.actions import ACTIONS
from tests.conftest import queue_settings

ADMIN = Who("slack", "UADMIN", "C1")
ALICE = Who("slack", "UALICE", "C1")
VIEWER = Who("dingtalk", "viewer7", "G1")
STRANGER = Who("slack", "USTRANGER", "C1")


@pytest.fixture
async def env(db_url, clock):
    db = await Database(db_url).open()
    queue = Queue(db, queue_settings(max_queue_size=100_000), clock=clock)
    access = Access(db, clock=clock)
    settings = ChatConfig(admins=("slack:UADMIN",), viewers=("dingtalk:viewer7",),
                          default_role="submitter", submitter_max_rows=10,
                          submitter_max_queued=15, submitter_per_minute=2)
    yield Permissions(settings, access, queue, clock=clock), access, queue
    await queue.close()


async def refused(call) -> Refused:
    with pytest.raises(Refused) as caught:
        await call
    return caught.value


def test_every_action_needs_a_role_and_the_dashboard_mirrors_them():
    assert set(NEEDS) == set(Action)
    assert allowed_actions(Role.NONE) == ["help"]
    assert "gen" in allowed_actions(Role.SUBMITTER) \
        and "pause" not in allowed_actions(Role.SUBMITTER)
    assert allowed_actions(Role.ADMIN) == sorted([*Action, *ACTIONS])  # image actions too
    assert all(a in allowed_actions(Role.SUBMITTER) for a in ACTIONS)  # (their specs' role)
    assert not any(a in allowed_actions(Role.VIEWER) for a in ACTIONS)


@pytest.mark.parametrize("action, admin, submitter, viewer", [
    (Action.HELP, True, True, True), (Action.STATUS, True, True, True),
    (Action.QUEUE, True, True, True), (Action.TEMPLATES, True, True, True),
    (Action.TEMPLATE, True, True, True), (Action.GEN, True, True, False),
    (Action.CANCEL, True, True, False), (Action.RETRY, True, True, False),
    (Action.PAUSE, True, False, False), (Action.RESUME, True, False, False),
    (Action.GRANT, True, False, False), (Action.REVOKE, True, False, False),
    (Action.SCHEDULE, True, False, False), (Action.UNSCHEDULE, True, False, False),
])
async def test_what_each_role_may_do(env, action, admin, submitter, viewer):
    perms, _, _ = env
    for who, allowed in ((ADMIN, admin), (ALICE, submitter), (VIEWER, viewer)):
        if allowed:
            await perms.require(who, action)
        else:
            e = await refused(perms.require(who, action))
            assert e.code == "refused_role"


async def test_submitters_touch_only_their_own_and_admins_are_audited(env):
    perms, access, _ = env
    await perms.own(ALICE, Role.SUBMITTER, Action.CANCEL, owner="slack:UALICE", subject=7)
    e = await refused(perms.own(ALICE, Role.SUBMITTER, Action.RETRY, owner="slack:UBOB",
                                subject=7))
    assert e.render("en") == \
        "batch 7 was submitted by slack:UBOB; only they or an admin may retry it."
    assert "只有提交者或管理员" in e.render("zh")
    await perms.own(ADMIN, Role.ADMIN, Action.CANCEL, owner="slack:UBOB", subject=7)
    log = await access.audit_log()
    assert [(r.user, r.action, r.allowed) for r in log] == \
        [("UADMIN", "cancel", True), ("UALICE", "retry", False)]
    assert log[1].detail["refusal"] == "refused_not_owner" and log[1].conversation == "C1"
    assert log[0].detail["owner"] == "slack:UBOB"


async def test_roles_come_from_config_then_grants_and_admins_cannot_be_demoted(env):
    perms, access, _ = env
    assert [await perms.role(w) for w in (ADMIN, ALICE, VIEWER)] == \
        [Role.ADMIN, Role.SUBMITTER, Role.VIEWER]
    await access.grant("slack", "UALICE", "admin", by="slack:UADMIN")
    await access.grant("slack", "UADMIN", "viewer", by="slack:UALICE")
    assert await perms.role(ALICE) == Role.ADMIN and await perms.role(ADMIN) == Role.ADMIN
    await access.grant("slack", "UALICE", "viewer", by="slack:UADMIN")  # replaces
    assert await perms.role(ALICE) == Role.VIEWER
    assert await access.revoke("slack", "UALICE") and not await access.revoke("slack", "UALICE")
    assert await perms.role(ALICE) == Role.SUBMITTER
    e = await refused(perms.require(VIEWER, Action.GEN))
    assert e.render("en") == "/gen needs the submitter role; you are viewer. Ask an admin."


async def test_a_role_the_platform_gives_counts_after_grants_and_before_config_lists(env):
    """A Discord role mapped by [discord] roles (or DingTalk's isAdmin) is the person's
    role where no /grant says otherwise; a platform's admin is an admin whatever was granted."""
    perms, access, _ = env
    reviewer = Who("discord", "111", "C9", platform_role="reviewer")
    assert await perms.role(reviewer) == Role.REVIEWER  # (default_role is submitter)
    assert await perms.role(Who("dingtalk", "viewer7", "G1", platform_role="submitter")) \
        == Role.SUBMITTER  # over the [chat] viewers list
    await access.grant("discord", "111", "viewer", by="slack:UADMIN")
    assert await perms.role(reviewer) == Role.VIEWER
    chief = Who("discord", "111", "C9", platform_role="admin")
    assert await perms.role(chief) == Role.ADMIN
    await perms.require(chief, Action.PAUSE)


async def test_default_role_none_and_the_conversation_allow_list(env):
    perms, access, queue = env
    strict = Permissions(ChatConfig(default_role="none", admins=("slack:UADMIN",),
                                    conversations=("slack:C1",)), access, queue)
    await strict.require(STRANGER, Action.HELP)
    await refused(strict.require(STRANGER, Action.STATUS))
    e = await refused(strict.require(Who("slack", "UADMIN", "C9"), Action.PAUSE))
    assert e.code == "refused_conversation"
    await strict.require(ADMIN, Action.PAUSE)
    await strict.require(Who("slack", "UADMIN"), Action.PAUSE)  # not in a conversation: no list


async def test_per_person_limits(env, clock):
    perms, access, queue = env
    with pytest.raises(Refused, match="limit_rows"):
        await perms.limits(ALICE, Role.SUBMITTER, 11)
    await queue.enqueue(Submission("t", ALICE.id, [NewJob(i, {}) for i in range(8)]))
    with pytest.raises(Refused) as e:
        await perms.limits(ALICE, Role.SUBMITTER, 8)
    assert e.value.render("en").startswith("you have 8 jobs queued or running")
    await perms.limits(ALICE, Role.SUBMITTER, 7)
    await queue.enqueue(Submission("t", ALICE.id, [NewJob(1, {})]))
    with pytest.raises(Refused, match="limit_rate"):  # two submissions this minute
        await perms.limits(ALICE, Role.SUBMITTER, 1)
    clock.advance(61)
    await perms.limits(ALICE, Role.SUBMITTER, 1)
    await perms.limits(ADMIN, Role.ADMIN, 10_000)  # admins: the intake and queue limits
    refusals = [r.detail["refusal"] for r in await access.audit_log() if not r.allowed]
    assert refusals == ["limit_rate", "limit_queued", "limit_rows"]
