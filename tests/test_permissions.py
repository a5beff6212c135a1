"""Who may do what, per-person limits, and the audit log — on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from bot.commands import parse
from bot.permissions import Permissions, Refused, Who
from storage.access import Access
from storage.config import ChatConfig
from storage.db import Database
from storage.queue import NewJob, Queue, Submission
from tests.conftest import queue_settings

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
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


def cmd(text: str):
    return parse(text, now=NOW)


async def refused(perms, who, text, **kw) -> Refused:
    with pytest.raises(Refused) as caught:
        await perms.check(who, cmd(text), **kw)
    return caught.value


@pytest.mark.parametrize("text, admin, submitter, viewer", [
    ("/help", True, True, True), ("/status", True, True, True), ("/queue", True, True, True),
    ("/templates", True, True, True), ("/template product_main", True, True, True),
    ("/gen product_main", True, True, False), ("/cancel mine", True, True, False),
    ("/retry 3", True, True, False), ("/cancel all", True, False, False),
    ("/pause", True, False, False), ("/resume", True, False, False),
    ("/grant U1 viewer", True, False, False), ("/revoke U1", True, False, False),
])
async def test_what_each_role_may_do(env, text, admin, submitter, viewer):
    perms, _, _ = env
    for who, allowed in ((ADMIN, admin), (ALICE, submitter), (VIEWER, viewer)):
        if allowed:
            await perms.check(who, cmd(text))
        else:
            await refused(perms, who, text)


async def test_submitters_cancel_and_retry_only_their_own_batches(env):
    perms, access, _ = env
    await perms.check(ALICE, cmd("/cancel 7"), owner="slack:UALICE")
    e = await refused(perms, ALICE, "/retry 7", owner="slack:UBOB")
    assert e.render("en") == "batch 7 was submitted by slack:UBOB; only they or an admin may retry it."
    assert "只有提交者或管理员" in e.render("zh")
    await perms.check(ADMIN, cmd("/cancel 7"), owner="slack:UBOB")  # admins may, audited
    log = await access.audit_log()
    assert [(r["user_id"], r["action"], r["allowed"]) for r in log] == \
        [("UADMIN", "cancel", True), ("UALICE", "retry", False)]
    assert log[1]["detail"]["refusal"] == "refused_not_owner" and log[1]["conversation"] == "C1"


async def test_roles_come_from_config_then_grants_and_admins_cannot_be_demoted(env):
    perms, access, _ = env
    assert [await perms.role(w) for w in (ADMIN, ALICE, VIEWER)] == ["admin", "submitter", "viewer"]
    await access.grant("slack", "UALICE", "admin", by="slack:UADMIN")
    await access.grant("slack", "UADMIN", "viewer", by="slack:UALICE")
    assert await perms.role(ALICE) == "admin" and await perms.role(ADMIN) == "admin"
    await access.grant("slack", "UALICE", "viewer", by="slack:UADMIN")  # replaces
    assert await perms.role(ALICE) == "viewer"
    assert await access.revoke("slack", "UALICE") and not await access.revoke("slack", "UALICE")
    assert await perms.role(ALICE) == "submitter"
    e = await refused(perms, VIEWER, "/gen product_main")
    assert e.render("en") == "/gen needs the submitter role; you are viewer. Ask an admin."


async def test_default_role_none_and_the_conversation_allow_list(env):
    perms, access, queue = env
    strict = Permissions(ChatConfig(default_role="none", admins=("slack:UADMIN",),
                                    conversations=("slack:C1",)), access, queue)
    await strict.check(STRANGER, cmd("/help"))
    await refused(strict, STRANGER, "/status")
    e = await refused(strict, Who("slack", "UADMIN", "C9"), "/pause")
    assert e.code == "refused_conversation"
    await strict.check(ADMIN, cmd("/pause"))


async def test_per_person_limits(env, clock):
    perms, access, queue = env
    with pytest.raises(Refused, match="limit_rows"):
        await perms.check_submission(ALICE, "submitter", 11)
    await queue.enqueue(Submission("t", ALICE.id, [NewJob(i, {}) for i in range(8)]))
    with pytest.raises(Refused) as e:
        await perms.check_submission(ALICE, "submitter", 8)
    assert e.value.render("en").startswith("you have 8 jobs queued or running")
    await perms.check_submission(ALICE, "submitter", 7)
    await queue.enqueue(Submission("t", ALICE.id, [NewJob(1, {})]))
    with pytest.raises(Refused, match="limit_rate"):  # two submissions this minute
        await perms.check_submission(ALICE, "submitter", 1)
    clock.advance(61)
    await perms.check_submission(ALICE, "submitter", 1)
    await perms.check_submission(ADMIN, "admin", 10_000)  # admins: the intake and queue limits
    refusals = [r["detail"]["refusal"] for r in await access.audit_log() if not r["allowed"]]
    assert refusals == ["limit_rate", "limit_queued", "limit_rows"]
