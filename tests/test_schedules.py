"""Recurring batches with a controlled clock: made in chat, fired on time, once, surviving a
restart, listed, removed; and only by admins."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.app.values import next_fire
from bot.scheduler import Scheduler
from tests.conftest import ROOT, FakeClock, executor_config
from tests.fakes.chat import World

BOTTLE = (ROOT / "examples" / "assets" / "bottle.png").read_bytes()
START = datetime(2026, 12, 2, 8, 0, tzinfo=UTC).timestamp()  # a Wednesday, 08:00 UTC


def config(tmp_path, demo_models):
    return executor_config(tmp_path / "data", demo_models,
                           chat={"admins": ["test:BOSS"], "timezone": "UTC"})


def scheduler(w: World, clock) -> Scheduler:
    return Scheduler(w.app, outbox=w.core.outbox)


async def test_a_schedule_fires_on_time_once_survives_a_restart_and_is_removed(tmp_path,
                                                                             demo_models):
    clock = FakeClock(START)
    cfg = config(tmp_path, demo_models)
    async with World(cfg, clock=clock) as w:
        p = w.platform
        files = (p.upload("daily.csv", b"image,title\nbottle.png,Daily {date}\n"),
                 p.upload("bottle.png", BOTTLE))
        (refused,) = await w.send('/schedule "0 9 * * *" social_thumb daily.csv', user="U1",
                                  files=files)
        assert refused.text.startswith("/schedule needs the admin role")
        (made,) = await w.send('/schedule "0 9 * * *" social_thumb daily.csv', user="BOSS",
                               files=files)
        assert made.text == ('Schedule 1: social_thumb from daily.csv at "0 9 * * *" (UTC); '
                             "next run 2026-12-02 09:00.")
        (bad,) = await w.send('/schedule "every day" social_thumb', user="BOSS")
        assert bad.text.startswith('"every day" is not a cron line')
        s = scheduler(w, clock)
        assert await s.tick() == []  # 08:00: not yet
        clock.advance(3600 + 30)  # 09:00:30
        (batch,) = await s.tick()
        assert await s.tick() == []  # once per firing
        posts = await w.send(f"/status {batch}", user="BOSS")
        (status,) = [x for x in posts if x.text.startswith(f"Batch {batch} · ")]
        assert "social_thumb · test:BOSS" in status.text
        jobs = await w.queue.batch_jobs(batch)
        assert len(jobs) == 1 and jobs[0].values["title"].startswith("Daily")
    # A restart: new objects over the same database; the 09:00 firing is not repeated.
    async with World(cfg, clock=clock) as again:
        s = scheduler(again, clock)
        assert await s.tick() == []
        clock.advance(24 * 3600)  # the next day, 09:00:30
        (second,) = await s.tick()
        assert second == batch + 1
        posts = await again.send("/schedules", user="U1")  # viewers and up may list
        (listing,) = [x for x in posts if x.thread is None and x.text.startswith("1:")]
        assert listing.text == ('1: social_thumb from daily.csv at "0 9 * * *" (UTC), by '
                                "test:BOSS; next 2026-12-04 09:00")
        (gone,) = await again.send("/unschedule 1", user="BOSS")
        assert gone.text == "Schedule 1 removed."
        clock.advance(24 * 3600)
        assert await s.tick() == []
        (none,) = await again.send("/schedules", user="BOSS")
        assert none.text == "No recurring batches."


async def test_a_schedule_runs_with_its_makers_priority_checked_when_made_and_fired(
        tmp_path, demo_models):
    clock = FakeClock(START)
    cfg = executor_config(tmp_path / "data", demo_models, chat={
        "admins": ["test:BOSS"], "timezone": "UTC", "admin_max_priority": "high"})
    async with World(cfg, clock=clock) as w:
        p = w.platform
        files = (p.upload("daily.csv", b"image,title\nbottle.png,Daily\n"),
                 p.upload("bottle.png", BOTTLE))
        line = '/schedule "0 9 * * *" social_thumb daily.csv --priority urgent'
        (refused,) = await w.send(line, user="BOSS", files=files)
        assert refused.text == ("you may use priority high or lower, not urgent; an admin can "
                                "raise yours: /grant test:BOSS admin --priority urgent")
        await w.send("/grant U2 admin --priority urgent", user="BOSS")
        (made,) = await w.send(line, user="U2", files=files)
        assert made.text.startswith("Schedule 1: social_thumb")
        await w.send("/grant U2 admin", user="BOSS")  # the raise taken back
        s = scheduler(w, clock)
        clock.advance(3600 + 30)
        assert await s.tick() == []  # its maker may no longer use urgent
        (audited,) = [a for a in await w.core.access.audit_log() if not a.allowed
                      and a.user == "U2"]
        assert (audited.action, audited.detail["refusal"]) == ("schedule", "refused_priority")
        await w.send("/grant U2 admin --priority urgent", user="BOSS")
        clock.advance(24 * 3600)
        (batch,) = await s.tick()
        assert (await w.queue.batch(batch)).priority.label == "urgent"


async def test_missed_firings_are_queued_once_not_once_each(tmp_path, demo_models):
    clock = FakeClock(START)
    async with World(config(tmp_path, demo_models), clock=clock) as w:
        p = w.platform
        await w.send('/schedule "*/10 * * * *" social_thumb s.csv', user="BOSS", files=(
            p.upload("s.csv", b"image,title\nbottle.png,T\n"), p.upload("bottle.png", BOTTLE)))
        clock.advance(5 * 3600)  # the service was down through 30 firings
        s = scheduler(w, clock)
        assert len(await s.tick()) == 1 and await s.tick() == []


def test_cron_lines_follow_the_schedules_time_zone():
    after = datetime(2026, 12, 2, 0, 0, tzinfo=UTC).timestamp()
    when = next_fire("0 9 * * *", "Asia/Shanghai", after)
    assert when.isoformat() == "2026-12-02T09:00:00+08:00"
    # Weekdays as crontab counts them: 1 is Monday, 0 and 7 Sunday, 1-5 Monday to Friday.
    assert next_fire("0 9 * * 1", "UTC", after).isoformat() == "2026-12-07T09:00:00+00:00"
    assert next_fire("0 9 * * 0", "UTC", after).isoformat() == "2026-12-06T09:00:00+00:00"
    assert next_fire("0 9 * * 7", "UTC", after).isoformat() == "2026-12-06T09:00:00+00:00"
    assert next_fire("30 8 * * 1-5", "UTC", after).isoformat() == "2026-12-02T08:30:00+00:00"
    assert next_fire("0 12 * * 6", "UTC", after).isoformat() == "2026-12-05T12:00:00+00:00"


async def test_the_service_runs_the_schedules_on_apscheduler(tmp_path, demo_models):
    from tests.fakes.chat import ServiceWorld
    cfg = executor_config(tmp_path / "data", demo_models, service={"port": 0}, chat={
        "digest": "slack:C0123", "digest_at": "18:45", "timezone": "Asia/Shanghai"})
    async with ServiceWorld(cfg) as w:
        job = w.service.scheduler.apscheduler.get_job("schedules")
        assert w.service.scheduler.apscheduler.running and job is not None
        assert job.trigger.interval.total_seconds() == 15
        digest = w.service.scheduler.apscheduler.get_job("digest")
        fields = {f.name: str(f) for f in digest.trigger.fields}
        assert (fields["hour"], fields["minute"], str(digest.trigger.timezone)) == \
            ("18", "45", "Asia/Shanghai")
    assert not w.service.scheduler.apscheduler.running


async def test_retention_runs_on_the_scheduler_and_removes_outputs(tmp_path, demo_models):
    from storage.queue import NewJob, Submission
    clock = FakeClock(START)
    cfg = executor_config(tmp_path / "data", demo_models, queue={"retention_days": 7})
    async with World(cfg, clock=clock) as w:
        batch = (await w.queue.enqueue(Submission("t", "cli:me", [NewJob(2, {})]))).batch_id
        lease = await w.queue.claim("exec")
        path = w.core.store.write(f"outputs/batch_{batch}/2.png", b"png")
        await w.queue.complete(lease, [path])
        s = scheduler(w, clock)
        assert await s.retention() == []  # finished today
        clock.advance(8 * 86400)
        assert await s.retention() == [batch]
        assert not w.core.store.path(f"outputs/batch_{batch}").exists()
        assert await w.queue.batch(batch) is None


async def test_the_daily_digest_is_posted_once_a_day_in_the_conversations_language(
        tmp_path, demo_models):
    from storage.queue import NewJob, Submission
    clock = FakeClock(START)
    cfg = executor_config(tmp_path / "data", demo_models, chat={
        "digest": "test:ops-room", "languages": ["test:ops-room=zh"], "timezone": "Asia/Shanghai"})
    async with World(cfg, clock=clock) as w:
        for who, rows in (("test:U1", 3), ("test:U2", 2)):
            await w.queue.enqueue(Submission("t", who, [NewJob(r, {}) for r in range(rows)]))
        for outcome in ("ok", "ok", "ok", "fail"):
            lease = await w.queue.claim("exec")
            clock.advance(4)
            if outcome == "ok":
                await w.queue.complete(lease)
            else:
                await w.queue.fail(lease, "boom", retry=False)
        await w.queue.pause(by="test:BOSS")
        s = scheduler(w, clock)
        assert await s.digest() is True
        assert await s.digest() is False  # once a day, however many services run
        await w.core.pump()
        (post,) = [p for p in w.platform.posts if p.conversation == "ops-room"]
        assert post.text == ("genbot 过去 24 小时：提交 2 个批次；生成 3 张图，失败 1，取消 0，"
                             "平均每张 4.0 秒。当前：排队 1，队列已暂停。"
                             "生成最多：test:U1 (2), test:U2 (1)。")
        clock.advance(86400)
        assert await s.digest() is True  # the next day's


async def test_a_job_caught_by_the_service_stopping_ends_quietly(caplog):
    import asyncio

    class Stub:
        config = queue = store = None

        @staticmethod
        def clock() -> float:
            return 0.0
    scheduler = Scheduler(Stub())  # type: ignore[arg-type]

    async def cut() -> None:
        raise asyncio.CancelledError

    async def broken() -> None:
        raise RuntimeError("database is not open")
    assert await scheduler._quiet(cut)() is None  # the service stopping under it
    assert await scheduler._quiet(broken)() is None
    (told,) = caplog.records  # a real failure still surfaces, with its traceback...
    assert told.levelname == "ERROR" and isinstance(told.exc_info[1], RuntimeError)
    scheduler.stop()
    caplog.clear()
    assert await scheduler._quiet(broken)() is None  # ...unless the service is stopping
    assert caplog.records == []


async def test_a_scheduled_job_failing_in_an_outage_is_told_once_not_a_traceback_per_firing(
        caplog):
    """The database away for a few firings of the schedules' tick: one line when it starts
    failing, one when it works again, no traceback (apscheduler would print one per
    firing); a genuine bug is told with its traceback, once."""
    import logging

    from storage.db import DatabaseUnavailable
    caplog.set_level(logging.DEBUG, logger="genbot.schedules")
    failures = [DatabaseUnavailable("database x unreachable for 12.0 s")] * 3 + [None]

    async def tick():
        if error := failures.pop(0):
            raise error
        return ["queued"]
    scheduler = Scheduler.__new__(Scheduler)
    scheduler.stopping = False
    run = scheduler._quiet(tick)
    assert [await run() for _ in range(4)] == [None, None, None, ["queued"]]
    told = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert told == [("WARNING", "schedules: tick failed: database x unreachable for 12.0 s; "
                                "trying again"), ("INFO", "schedules: tick works again")]
    assert not any(r.exc_info for r in caplog.records)

    caplog.clear()

    async def broken():
        raise KeyError("a bug")
    run = scheduler._quiet(broken)
    await run()
    await run()
    (bug,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert bug.levelname == "ERROR" and bug.exc_info is not None



async def test_a_firing_the_stopping_service_cancels_is_not_reported_as_an_error(
        tmp_path, demo_models, caplog):
    """The race `genbot serve` met when a SIGTERM came right after start: APScheduler's
    shutdown cancels a firing's task before it has begun, then logs it as a failure."""
    import asyncio
    import logging
    async with World(config(tmp_path, demo_models)) as w:
        s = Scheduler(w.app)
        with caplog.at_level(logging.INFO, logger="apscheduler"):
            s.start()
            s.stop()  # (APScheduler shuts down at the loop's next turn …)
            job = s.apscheduler.get_job("schedules")
            s.apscheduler._executors["default"].submit_job(job, [datetime.now(UTC)])  # a firing
            for _ in range(5):  # … and cancels the firing's task before its first step
                await asyncio.sleep(0)
    assert "Running job" not in caplog.text and "has been shut down" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
