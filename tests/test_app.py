"""The application layer on its own — every front's rules, written once: submit, cancel,
retry, pause, resume, schedule; roles and ownership checked before anything is looked
up; one family of coded errors that every front renders the same way."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from bot.app.application import (
    Accepted,
    App,
    CancelTarget,
    NoTemplate,
    Scheduled,
    SubmitOptions,
    load_templates,
)
from bot.app.permissions import Who
from bot.conventions import batch_thread
from bot.errors import Conflict, Invalid, NotFound, Refused
from bot.intake.check import IntakeReport, SheetFile, SheetRows
from bot.web.api import status_of
from storage import config as cfg
from storage.files import open_store
from storage.queue import open_queue
from storage.records import Priority, Status
from tests.conftest import ROOT, FakeClock

BOTTLE = (ROOT / "examples" / "assets" / "bottle.png").read_bytes()
BOSS, ALICE, BOB, VIC = (Who("test", u, "C1") for u in ("BOSS", "ALICE", "BOB", "VIC"))


def sheet(rows: int = 2, title: str = "Title") -> SheetFile:
    lines = ["image,title"] + [f"bottle.png,{title} {i}" for i in range(rows)]
    return SheetFile("sheet.csv", "\n".join(lines).encode())


async def pictures(name: str) -> bytes | None:
    return BOTTLE if name == "bottle.png" else None


@pytest.fixture
async def app(tmp_path, db_url):
    config = cfg.from_dict({"service": {"data_dir": str(tmp_path / "data")},
                            "database": {"url": db_url}, "queue": {"max_queue_size": 10},
                            "chat": {"admins": ["test:BOSS"], "viewers": ["test:VIC"]}})
    clock = FakeClock(datetime(2026, 12, 2, 8, 0, tzinfo=UTC).timestamp())
    queue = await open_queue(config, clock=clock)
    yield App(config, queue, open_store(config), load_templates(config), clock=clock)
    await queue.close()


async def audit(app: App) -> list[tuple]:
    return [(a.user, a.action, a.allowed, a.detail.get("refusal"))
            for a in reversed(await app.access.audit_log())]


async def test_submit_queues_a_batch_or_reports_and_a_key_returns_the_first(app):
    done = await app.submit(ALICE, "social_thumb", sheet(3), pictures,
                            SubmitOptions(key="k1", priority=Priority.LOW, lang="zh",
                                          context={"reply": "here"}))
    assert isinstance(done, Accepted) and (done.batch_id, done.jobs, done.created) == (1, 3, True)
    batch = await app.batch(1)
    assert (batch.submitter, batch.platform, batch.conversation, batch.priority) == \
        ("test:ALICE", "test", "C1", Priority.LOW)
    assert batch.meta == {"lang": "zh", "sheet": "sheet.csv", "sheet_header_row": 1,
                          "context": {"reply": "here"},
                          "version": 0}  # (this app recorded no versions)
    again = await app.submit(ALICE, "social_thumb", sheet(3), pictures, SubmitOptions(key="k1"))
    assert again == Accepted(1, 3, created=False, report=None)  # a retried request

    bad = SheetFile("bad.csv", b"image,title\nnope.png,A\nbottle.png,B\n")
    report = await app.submit(ALICE, "social_thumb", bad, pictures)
    assert isinstance(report, IntakeReport) and not report.jobs  # all or nothing
    assert [(p["row"], p["column"], p["code"]) for p in report.problems()] == \
        [(2, "image", "image_not_found")]
    skipped = await app.submit(ALICE, "social_thumb", bad, pictures,
                               SubmitOptions(skip_invalid=True))
    assert isinstance(skipped, Accepted) and skipped.jobs == 1 and skipped.report.issues
    dry = await app.submit(ALICE, "social_thumb", sheet(2), pictures, SubmitOptions(dry_run=True))
    assert isinstance(dry, IntakeReport) and len(dry.jobs) == 2
    rows = await app.submit(ALICE, "social_thumb", SheetRows([{"image": "x.png", "title": "t"}]))
    assert isinstance(rows, IntakeReport) and rows.problems()[0]["code"] == "image_not_found"
    assert await app.queue.batches_of("test:ALICE") == [1, 2]


async def test_a_start_time_is_kept_and_shown_in_its_zone(app):
    at = datetime(2026, 12, 2, 21, 30, tzinfo=timezone(timedelta(hours=8)))
    done = await app.submit(ALICE, "social_thumb", sheet(1), pictures, SubmitOptions(at=at))
    assert isinstance(done, Accepted)
    assert (await app.batch(done.batch_id)).meta["at"] == "2026-12-02 21:30 (UTC+08:00)"
    assert {j.not_before for j in await app.queue.batch_jobs(done.batch_id)} == {at.timestamp()}


async def test_refusals_come_first_and_are_one_coded_family(app):
    e = await raised(app.submit(VIC, "nonsense", sheet()), Refused)  # the role, before the name
    assert e.code == "refused_role" and status_of(e) == 403
    assert e.render("zh") == "/gen 需要提交者角色，你的角色是查看者。请联系管理员。"
    e = await raised(app.submit(ALICE, "social_thumbs", sheet()), NoTemplate)
    assert (e.code, status_of(e)) == ("no_template", 422)
    assert "did you mean social_thumb?" in e.render("en")
    assert "是不是 social_thumb" in e.render("zh")
    assert e.plain()["templates"] == ["edit_instruction", "material_swap", "poster_zh",
                                      "product_main", "social_thumb"]
    # A viewer learns nothing about batch 99; a submitter learns it is not there.
    assert (await raised(app.cancel(VIC, CancelTarget.batch(99)), Refused)).code == "refused_role"
    e = await raised(app.cancel(ALICE, CancelTarget.batch(99)), NotFound)
    assert (e.code, status_of(e), e.render("en")) == ("no_batch", 404, "There is no batch 99.")
    e = await raised(app.retry(ALICE, 99), NotFound)
    assert e.render("zh") == "没有批次 99。"


async def test_only_the_owner_or_an_admin_cancels_or_retries_and_admins_are_audited(app):
    await app.submit(ALICE, "social_thumb", sheet(2), pictures)
    e = await raised(app.cancel(BOB, CancelTarget.batch(1)), Refused)
    assert e.render("en") == \
        "batch 1 was submitted by test:ALICE; only they or an admin may cancel it."
    assert (await raised(app.cancel(ALICE, CancelTarget.everything()), Refused)).code == \
        "refused_admin_only"
    assert (await app.cancel(ALICE, CancelTarget.job(1))).ended == [1]
    assert (await app.cancel(BOSS, CancelTarget.batch(1))).ended == [2]
    assert (await app.cancel(ALICE, CancelTarget.mine())).ended == []
    assert await audit(app) == [("BOB", "cancel", False, "refused_not_owner"),
                                ("ALICE", "cancel", False, "refused_admin_only"),
                                ("BOSS", "cancel", True, None)]


async def test_retry_runs_the_failed_jobs_again_in_the_first_batchs_thread_once(app):
    await app.submit(ALICE, "social_thumb", sheet(3), pictures)
    for _ in range(2):
        await app.queue.fail(await app.queue.claim("exec"), "out of memory", retry=False)
    e = await raised(app.retry(BOB, 1), Refused)
    assert e.code == "refused_not_owner"
    again = await app.retry(ALICE, 1)
    assert (again.batch_id, again.jobs, again.created) == (2, 2, True)
    retried = await app.batch(2)
    assert (retried.submitter, retried.thread, retried.meta["retry_of"]) == \
        ("test:ALICE", batch_thread(1), 1)
    assert (await app.retry(ALICE, 1)).created is False  # typed twice: queued once
    e = await raised(app.retry(ALICE, 2), Conflict)
    assert (e.code, status_of(e), e.render("en")) == ("nothing_to_retry", 409,
                                                       "Batch 2 has no failed jobs.")


async def test_a_full_queue_refuses_the_whole_submission(app):
    await app.submit(BOSS, "social_thumb", sheet(9), pictures)
    e = await raised(app.submit(BOSS, "social_thumb", sheet(2), pictures), Conflict)
    assert e.code == "queue_full" and e.plain() == {"free": 1, "limit": 10, "requested": 2}
    assert await app.queue.batches_of("test:BOSS") == [1]


async def test_per_person_limits_apply_to_submitters_through_the_app(app):
    from dataclasses import replace
    app.permissions.settings = replace(app.permissions.settings, submitter_max_rows=2)
    e = await raised(app.submit(ALICE, "social_thumb", sheet(3), pictures), Refused)
    assert (e.code, e.plain()) == ("limit_rows", {"rows": 3, "limit": 2})
    assert isinstance(await app.submit(BOSS, "social_thumb", sheet(3), pictures), Accepted)


async def test_pause_and_resume_are_admin_actions_in_the_audit_log(app):
    assert (await raised(app.pause(ALICE), Refused)).code == "refused_role"
    assert await app.pause(BOSS) is True and await app.pause(BOSS) is False
    assert (await app.queue.state()).changed_by == "test:BOSS"
    assert await app.resume(BOSS) is True
    assert await audit(app) == [("ALICE", "pause", False, "refused_role"),
                                ("BOSS", "pause", True, None), ("BOSS", "pause", True, None),
                                ("BOSS", "resume", True, None)]


async def test_a_schedule_keeps_its_sheet_and_pictures_and_fires_through_intake(app):
    assert (await raised(app.schedule(ALICE, "0 9 * * *", "UTC", "social_thumb", sheet()),
                         Refused)).code == "refused_role"
    assert (await raised(app.schedule(BOSS, "9am", "UTC", "social_thumb", sheet()),
                         Invalid)).code == "bad_cron"
    e = await raised(app.schedule(BOSS, "0 9 * * *", "Mars/Olympus", "social_thumb", sheet()),
                     Invalid)
    assert e.code == "bad_timezone" and "IANA" in e.render("en")
    report = await app.schedule(BOSS, "0 9 * * *", "UTC", "social_thumb", sheet())  # no pictures
    assert isinstance(report, IntakeReport) and not report.ok
    made = await app.schedule(BOSS, "0 9 * * 1-5", "Asia/Shanghai", "social_thumb",
                              sheet(2), pictures, priority=Priority.LOW)
    assert isinstance(made, Scheduled) and made.next.isoformat() == "2026-12-03T09:00:00+08:00"
    (row,) = await app.schedules.all()
    assert list(row.files) == ["bottle.png"] and row.priority == Priority.LOW
    batch = await app.fire(row, made.next.timestamp())
    jobs = await app.queue.batch_jobs(batch)
    assert [j.status for j in jobs] == [Status.QUEUED] * 2
    assert jobs[0].values["image"].startswith("inputs/")  # the stored picture, found again
    assert await app.fire(row, made.next.timestamp()) == batch  # one firing, one batch
    await app.unschedule(BOSS, row.id)
    assert (await raised(app.unschedule(BOSS, row.id), NotFound)).code == "no_schedule"
    # A platform's own admin (DingTalk's isAdmin) keeps that standing when it fires.
    chief = Who("dingtalk", "chief", "G1", platform_role="admin")
    urgent = await app.schedule(chief, "0 9 * * *", "UTC", "social_thumb", sheet(1), pictures,
                                priority=Priority.URGENT)
    assert isinstance(urgent, Scheduled)
    (row,) = await app.schedules.all()
    batch = await app.fire(row, urgent.next.timestamp())
    assert batch is not None and (await app.batch(batch)).priority == Priority.URGENT
    assert row.meta["platform_role"] == "admin"
    # One made before platforms gave other roles remembers "platform_admin", read alike.
    older = await app.schedules.add(
        cron=row.cron, timezone=row.timezone, template=row.template, sheet=row.sheet,
        files=row.files, submitter=row.submitter, platform=row.platform,
        conversation=row.conversation, priority=row.priority,
        meta={**{k: v for k, v in row.meta.items() if k != "platform_role"},
              "platform_admin": True})
    old = await app.schedules.get(older)
    assert old is not None and await app.fire(old, urgent.next.timestamp() + 86400) is not None
    await app.unschedule(BOSS, older)
    await app.unschedule(BOSS, row.id)
    # A scheduled sweep: checked when made, expanded at each firing.
    assert (await raised(app.schedule(BOSS, "0 9 * * *", "UTC", "social_thumb", sheet(2),
                                      pictures, vary=("width=1",)), Invalid)).code == "too_small"
    swept = await app.schedule(BOSS, "0 9 * * *", "UTC", "social_thumb", sheet(2), pictures,
                               vary=("width=256,512",))
    assert isinstance(swept, Scheduled)
    (row,) = await app.schedules.all()
    batch = await app.fire(row, swept.next.timestamp())
    assert sorted(j.values["width"] for j in await app.queue.batch_jobs(batch)) == \
        [256, 256, 512, 512]


async def test_grant_and_revoke_through_the_app(app):
    await app.grant(BOSS, Who("test", "VIC"), _role("submitter"))
    assert isinstance(await app.submit(VIC, "social_thumb", sheet(1), pictures), Accepted)
    assert (await app.revoke(BOSS, Who("test", "VIC"))).value == "viewer"
    assert (await raised(app.revoke(BOSS, Who("test", "VIC")), NotFound)).code == "revoke_none"
    assert (await raised(app.revoke(BOSS, Who("test", "BOSS")), Conflict)).code == \
        "revoke_config_admin"
    assert (await raised(app.grant(ALICE, BOB, _role("admin")), Refused)).code == "refused_role"


def _role(name: str):
    from bot.app.permissions import Role
    return Role(name)


async def raised(call, kind):
    with pytest.raises(kind) as caught:
        await call
    return caught.value
