"""PostgreSQL going away under genbot, on a private cluster (tests/fakes/pgcluster.py) that
the tests stop, restart (fast: a clean shutdown; immediate: a crash) and start late.

- the queue: the same Queue object goes on after a restart, no job lost or completed
  twice; an outage longer than the database's patience ends statements (and
  transactions) with DatabaseUnavailable, never a hang;
- opening: at once with one clear line, or waiting (`wait=`) for a server still coming up;
- an executor (ComfyUI engine, fake server) mid-batch across a restart or a crash: every
  job succeeds exactly once, and the outage is one warning line, not a traceback per
  operation;
- the service: /healthz says 503 with since when while the database is unreachable;
  /metrics keeps answering, with genbot_database_up 0;
- chat delivery resumes from the outbox after the outage;
(A fleet — the service and two workers, real processes — goes through the outage drill,
tests/fakes/drill.py, in bench/outage_bench.py, whose quick run is in the suite.)

Each test gets a database of its own, copied from one migrated template; one cluster
serves the module (about half a second to make).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import Counter

import pytest

from storage.db import Database, DatabaseError, DatabaseUnavailable
from storage.queue import NewJob, Queue, Submission
from tests.conftest import queue_settings
from tests.fakes.chat import bounded
from tests.fakes.pgcluster import PgCluster

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

TEMPLATE = "genbot_migrated"
DOWN = 1.0  # seconds the server stays away in a restart


@pytest.fixture(scope="module")
def cluster():
    with PgCluster(database=TEMPLATE) as pg:
        async def migrate() -> None:
            await (await Database(pg.url).open()).close()
        asyncio.run(migrate())
        yield pg


@pytest.fixture
def fresh_db(cluster):
    """A migrated database of its own on the cluster (a copy of the template): an outage
    record (storage.db.Outage, one per server and database) of its own too."""
    name = f"gt_{uuid.uuid4().hex[:10]}"
    cluster.sql(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}", database="postgres")
    yield cluster.url.rsplit("/", 1)[0] + f"/{name}"
    if not cluster.running:
        cluster.start()
    cluster.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", database="postgres")


async def outage(cluster: PgCluster, mode: str, down: float = DOWN) -> float:
    """Stop the server (`mode`), keep it away `down` seconds, start it; returns when it
    accepts connections again (Unix time, from the server's log)."""
    await asyncio.to_thread(cluster.stop, mode)
    await asyncio.sleep(down)
    return await back_up(cluster)


async def back_up(cluster: PgCluster) -> float:
    """Start the server; when it was ready to accept connections (Unix time)."""
    await asyncio.to_thread(cluster.start)  # pg_ctl start -w: accepting connections
    ready = cluster.ready_at()
    assert ready is not None and ready <= time.time()
    return ready


async def histories(db: Database) -> dict[int, list[str]]:
    """Each job's transitions from the event log, in order (progress left out)."""
    rows = await db.fetch("SELECT job_id, kind FROM events WHERE job_id IS NOT NULL "
                          "AND kind <> 'progress' ORDER BY seq")
    out: dict[int, list[str]] = {}
    for r in rows:
        out.setdefault(r["job_id"], []).append(r["kind"])
    return out


async def assert_each_succeeded_once(db: Database, expected: int) -> Counter:
    """Every job succeeded, exactly once; its attempts are its runs. Returns how many
    jobs took how many attempts."""
    jobs = await db.fetch("SELECT id, status, attempts FROM jobs ORDER BY id")
    assert len(jobs) == expected
    runs = await histories(db)
    for job in jobs:
        kinds = runs[job["id"]]
        assert job["status"] == "succeeded", (job, kinds)
        assert kinds.count("succeeded") == 1 and kinds[-1] == "succeeded", (job, kinds)
        assert kinds.count("running") == job["attempts"], (job, kinds)
        assert set(kinds) <= {"running", "queued", "succeeded"}, (job, kinds)
    return Counter(job["attempts"] for job in jobs)


def warnings_and_tracebacks(caplog) -> tuple[list[str], list[str]]:
    warned = [f"{r.name}: {r.getMessage()}" for r in caplog.records
              if r.levelno >= logging.WARNING]
    traced = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.exc_info]
    return warned, traced


# --- the queue ------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_the_same_queue_goes_on_after_a_restart(cluster, fresh_db, mode, caplog):
    caplog.set_level(logging.INFO)
    db = await Database(fresh_db).open()
    queue = Queue(db, queue_settings(lease_seconds=2.0))  # a claim lost with its answer
    jobs = 150                                              # comes back within 2 s
    await queue.enqueue(Submission("t", "test:me", [NewJob(row=i, workflow={"i": i})
                                                    for i in range(jobs)]))
    done: list[float] = []
    errors: list[BaseException] = []

    async def work() -> None:
        while True:
            try:
                lease = await queue.claim("w")
                if lease is None:
                    if await db.fetchval("SELECT count(*) FROM jobs WHERE status = "
                                         "'succeeded'") == jobs:
                        return
                    await asyncio.sleep(0.05)  # one taken back when its lease runs out
                    continue
                await asyncio.sleep(0.005)  # the work
                await queue.complete(lease, ["out.png"])
                done.append(time.time())
            except Exception as e:  # noqa: BLE001 - what an outage surfaces, recorded
                errors.append(e)
                await asyncio.sleep(0.05)

    try:
        worker = asyncio.create_task(work())
        async with asyncio.timeout(10):
            while len(done) < 20:
                await asyncio.sleep(0.01)
        back = await outage(cluster, mode)
        before = len([t for t in done if t < back])
        await bounded(worker, 30, "the loop after the restart")
        recovery = min(t for t in done if t >= back) - back
        print(f"\nqueue loop, {mode} restart: first job completed {recovery * 1000:.0f} ms "
              f"after the server accepted connections again ({before} before)")
        assert errors == []  # an outage shorter than the patience is ridden through
        assert recovery < 1.0
        attempts = await assert_each_succeeded_once(db, jobs)
        assert set(attempts) <= {1, 2}, attempts
        warned, traced = warnings_and_tracebacks(caplog)
        assert len(warned) == 1 and "unreachable" in warned[0], warned
        assert traced == []
        assert any("reachable again" in r.getMessage() for r in caplog.records)
        assert db.down_since is None
    finally:
        await queue.close()


async def test_an_outage_past_the_patience_is_a_clear_error_then_the_queue_goes_on(
        cluster, fresh_db):
    db = await Database(fresh_db, patience=1.0).open()
    queue = Queue(db, queue_settings())
    try:
        await queue.enqueue(Submission("t", "test:me", [NewJob(row=1, workflow={})]))
        await asyncio.to_thread(cluster.stop, "fast")
        for what, call in (
                ("a statement", lambda: queue.claim("w")),
                ("a transaction", lambda: queue.enqueue(
                    Submission("t", "test:me", [NewJob(row=2, workflow={})]))),
                ("a transaction", lambda: queue.pause("ops"))):
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailable) as failure:
                await bounded(call(), 10, what)
            took = time.monotonic() - started
            assert took < 3.0, (what, took)  # the patience, not a hang
            message = str(failure.value)
            assert f"database {db.display_url} unreachable for" in message, message
            assert "\n" not in message
            assert isinstance(failure.value, DatabaseError)  # the CLI: one line, exit 1
        assert db.down_since is not None and failure.value.since == db.down_since
        await asyncio.to_thread(cluster.start)
        lease = await queue.claim("w")  # the same objects go on
        assert lease is not None and lease.row == 1
        assert await queue.complete(lease, []) == "succeeded"
        assert db.down_since is None
        assert await db.fetchval("SELECT count(*) FROM jobs") == 1  # nothing half-done
    finally:
        if not cluster.running:
            cluster.start()
        await queue.close()


# --- opening ----------------------------------------------------------------------------

async def test_opening_while_the_server_is_down_fails_at_once_or_waits_for_it(
        cluster, fresh_db, caplog):
    caplog.set_level(logging.INFO)
    await asyncio.to_thread(cluster.stop, "fast")
    try:
        started = time.monotonic()  # not waiting: at once, one line
        with pytest.raises(DatabaseError) as failure:
            await Database(fresh_db).open(wait=0)
        assert time.monotonic() - started < 1.0
        message = str(failure.value)
        assert message.startswith(f"cannot open database {fresh_db}: ") and "\n" not in message

        started = time.monotonic()  # a bounded wait, then one line
        with pytest.raises(DatabaseError) as failure:
            await Database(fresh_db).open(wait=1.0)
        assert 0.9 < time.monotonic() - started < 3.0
        assert "(waited 1 s for it)" in str(failure.value) and "\n" not in str(failure.value)

        opening = asyncio.create_task(Database(fresh_db).open(wait=30))
        await asyncio.sleep(1.0)
        assert not opening.done()
        back = await back_up(cluster)
        db = await bounded(opening, 10, "opening once the server is up")
        took = time.time() - back
        print(f"\nopen(wait=30): open {took * 1000:.0f} ms after the server came up")
        assert took < 2.0
        try:
            assert await db.fetchval("SELECT count(*) FROM jobs") == 0
        finally:
            await db.close()
        warned, traced = warnings_and_tracebacks(caplog)  # one outage: one warning
        assert len(warned) == 1 and "unreachable" in warned[0], warned
        assert traced == []
        assert any("waiting up to 30 s" in r.getMessage() for r in caplog.records)
        assert any("reachable again" in r.getMessage() for r in caplog.records)
    finally:
        if not cluster.running:
            cluster.start()


# --- an executor ------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_an_executor_mid_batch_rides_through_a_restart_and_runs_each_job_once(
        cluster, fresh_db, tmp_path, mode, caplog):
    from executor.worker import executor_loop
    from storage import config as cfg
    from storage.queue import open_queue
    from templates.binding import bind
    from templates.jobs import encode
    from templates.loader import load_templates
    from templates.settings import templates_dir
    from tests.fakes.comfyui import FakeComfy
    from tests.fakes.workflows import templates

    caplog.set_level(logging.INFO)
    jobs = 10
    async with FakeComfy(step_delay=0.04) as comfy:
        config = cfg.from_dict({
            "service": {"data_dir": str(tmp_path / "data")},
            "templates": {"dir": str(templates(tmp_path / "t"))},
            "database": {"url": fresh_db},
            "queue": {"poll_interval": 0.2, "heartbeat_seconds": 0.5, "lease_seconds": 3.0,
                      "retry_backoff": 0.0},
            "comfyui": {"servers": [comfy.url], "backoff_max": 0.2}})
        queue = await open_queue(config)
        worker = executor_loop(config, queue, comfyui=comfy.url, owner="comfy:faults")
        task = asyncio.create_task(worker.run())
        try:
            from executor.comfyui.engine import ComfyEngine
            assert isinstance(worker.engine, ComfyEngine)
            async with asyncio.timeout(15):
                while worker.engine.down is not None:  # connected, templates checked
                    await asyncio.sleep(0.02)
            template = load_templates(templates_dir(config))[0]["portrait"]
            new = []
            for i in range(jobs):
                wf = bind(template, {"prompt": f"bottle {i}", "seed": i + 1, "steps": 5},
                          row=i + 2)
                new.append(NewJob(row=i + 2, workflow=encode(wf), affinity=wf.affinity))
            batch = (await queue.enqueue(Submission("portrait", "test:me", new))).batch_id

            async def succeeded() -> int:
                return await queue.db.fetchval(
                    "SELECT count(*) FROM jobs WHERE status = 'succeeded'")
            async with asyncio.timeout(30):
                while await succeeded() < 3:
                    assert not task.done(), task
                    await asyncio.sleep(0.02)
            caplog.clear()
            back = await outage(cluster, mode)
            async with asyncio.timeout(40):
                while (p := await queue.batch_progress(batch)) is None or p.done < jobs:
                    assert not task.done(), task.result()
                    await asyncio.sleep(0.05)
            ends = [r["at"] for r in await queue.db.fetch(
                "SELECT at FROM events WHERE kind = 'succeeded' AND at >= $1", back)]
            print(f"\nexecutor, {mode} restart: first job completed "
                  f"{(min(ends) - back) * 1000:.0f} ms after the server accepted connections "
                  "again")
            attempts = await assert_each_succeeded_once(queue.db, jobs)
            assert set(attempts) <= {1, 2}, attempts
            assert len(comfy.prompts) == jobs + attempts[2]  # a second run only if re-run
            warned, traced = warnings_and_tracebacks(caplog)
            told = "\n".join(f"{r.relativeCreated:.0f} {r.name} {r.getMessage()} "
                             f"{getattr(r, 'job', '')}" for r in caplog.records)
            assert len(warned) == 1 and "unreachable" in warned[0], \
                f"{warned}\n{await histories(queue.db)}\n{told}"
            assert traced == []
            assert not task.done()
        finally:
            worker.stopping.set()
            await bounded(task, 30, "the executor stopping")
            await queue.close()


# --- the service ------------------------------------------------------------------------

def service_config(tmp_path, url: str):
    from storage.config import DatabaseConfig
    from tests.fakes.api import api_config
    (tmp_path / "no-models").mkdir()
    config = api_config(tmp_path, tmp_path / "no-models")
    return config.replaced(DatabaseConfig, url=url)


async def test_healthz_says_503_and_since_when_while_the_database_is_unreachable(
        cluster, fresh_db, tmp_path, monkeypatch):
    from tests.fakes.api import ApiWorld
    monkeypatch.setattr("storage.db.RECONNECT_SECONDS", 2.0)
    async with ApiWorld(service_config(tmp_path, fresh_db)) as w:
        try:
            async with w.http.get("/healthz") as r:
                assert r.status == 200 and (await r.json())["status"] == "ok"
            stopped = time.time()
            await asyncio.to_thread(cluster.stop, "fast")
            async with asyncio.timeout(10):  # the service's next statement finds it out
                while True:
                    async with w.http.get("/healthz") as r:
                        if r.status == 503:
                            body = await r.json()
                            break
                        assert r.status == 200
                    await asyncio.sleep(0.1)
            assert body["status"] == "unavailable" and body["database"] == "unreachable"
            assert stopped - 1 < body["since"] < time.time() and body["down_seconds"] >= 0
            assert {"queued", "running", "paused", "age"} <= set(body)  # as last read
            print(f"\n/healthz while the database is down: 503 {json.dumps(body)}")
            status, error = await w.call("GET", "/jobs")  # a call that needs the database
            assert status == 503 and error["error"]["code"] == "database_unavailable", error
            await asyncio.to_thread(cluster.start)
            async with asyncio.timeout(10):  # healthz's own refresh finds it back
                while True:
                    async with w.http.get("/healthz") as r:
                        if r.status == 200:
                            assert (await r.json())["status"] == "ok"
                            break
                    await asyncio.sleep(0.1)
        finally:
            if not cluster.running:
                cluster.start()


async def test_metrics_answer_with_database_up_0_while_the_database_is_unreachable(
        cluster, fresh_db, tmp_path, monkeypatch):
    from prometheus_client.parser import text_string_to_metric_families

    from tests.fakes.api import ApiWorld

    def samples(text: str) -> dict[str, float]:
        return {s.name: s.value for family in text_string_to_metric_families(text)
                for s in family.samples if not s.labels}
    monkeypatch.setattr("storage.db.RECONNECT_SECONDS", 2.0)
    async with ApiWorld(service_config(tmp_path, fresh_db)) as w:
        try:
            async with w.http.get("/metrics") as r:
                assert r.status == 200
                assert samples(await r.text())["genbot_database_up"] == 1
            await asyncio.to_thread(cluster.stop, "fast")
            started = time.monotonic()
            async with w.http.get("/metrics") as r:
                text = await r.text()
                print(f"\n/metrics while the database is down: {r.status} after "
                      f"{time.monotonic() - started:.1f} s: {text[-300:]!r}")
                assert r.status == 200, text[-2000:]
            assert time.monotonic() - started < 3.0  # within a scrape's timeout
            seen = samples(text)
            assert seen["genbot_database_up"] == 0
            assert "genbot_executor_restarts" in seen  # what it can still tell
            await asyncio.to_thread(cluster.start)
            async with w.http.get("/metrics") as r:
                assert r.status == 200
                assert samples(await r.text())["genbot_database_up"] == 1
        finally:
            if not cluster.running:
                cluster.start()


# --- chat delivery ------------------------------------------------------------------------

async def test_a_message_owed_before_an_outage_is_sent_after_it(cluster, fresh_db, tmp_path,
                                                                caplog):
    from bot.chat.sender import Sender
    from storage.files import FileStore
    from storage.outbox import Outbox
    from tests.fakes.chat import MemoryPlatform

    caplog.set_level(logging.INFO)
    db = await Database(fresh_db).open()
    outbox = Outbox(db, backoff=0.25)
    platform = MemoryPlatform()
    sender = Sender(outbox, platform, FileStore(tmp_path))
    await outbox.put("before", platform="test", conversation="C1", thread=None, kind="text",
                     payload={"text": "owed before the outage", "lang": "en"})
    await asyncio.to_thread(cluster.stop, "immediate")
    sending = asyncio.create_task(sender.run(idle=0.2))
    try:
        await asyncio.sleep(DOWN)
        assert platform.posts == []
        back = await back_up(cluster)
        async with asyncio.timeout(10):
            while not platform.posts:
                await asyncio.sleep(0.02)
        print(f"\noutbox: sent {(time.time() - back) * 1000:.0f} ms after the server "
              "came back")
        await outbox.put("after", platform="test", conversation="C1", thread=None,
                         kind="text", payload={"text": "owed after it", "lang": "en"})
        sender.wake.set()
        async with asyncio.timeout(10):
            while len(platform.posts) < 2:
                await asyncio.sleep(0.02)
        assert [p.text for p in platform.posts] == ["owed before the outage", "owed after it"]
        sent = await outbox.get("before")
        assert sent is not None and sent.status == "sent"
        warned, traced = warnings_and_tracebacks(caplog)
        assert len(warned) == 1 and "unreachable" in warned[0], warned
        assert traced == []
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        if not cluster.running:
            cluster.start()
        await db.close()
