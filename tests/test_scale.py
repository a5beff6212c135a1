"""Many executors on one PostgreSQL queue: real `genbot worker` processes beside the service.

A batch spreads over three workers and every image reaches the chat exactly once, with
one worker SIGKILLed mid-job; then, on the two left, a worker SIGSTOPped past its lease
cannot finish the job another took over, and workers whose database connections are cut
reconnect and go on (one fleet for both: each start of a worker imports the generation
stack and loads the models, seconds of CPU). Two service processes share the chat: one
killed mid-upload, the other posts the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections import Counter

import pytest

from storage import config as cfg
from storage.workers import Workers
from tests.conftest import PYTHON, executor_config, free_port, python_env
from tests.fakes.chat import ServiceWorld, bounded, example

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
BOTTLE = example("assets/bottle.png")


def scale_config(tmp_path, demo_models, pg_url, *, host: str = "", extra: str = "",
                 port: int = 0, name: str = ""):
    """One config file for the service and every worker: the shared queue, short leases.
    `host`: a data folder of its own (with a [storage] section in `extra`, an object store
    they share). `extra`: more sections. `name`: the file's, when one data folder has two."""
    data = tmp_path / f"data{host}"
    executor_config(data, demo_models)  # links the demo models into the data folder
    path = tmp_path / f"genbot{host}{name}.toml"
    path.write_text(f"""{extra}
[service]
data_dir = "{data}"
port = {port}
[database]
url = "{pg_url}"
[queue]
lease_seconds = 3.0
heartbeat_seconds = 0.5
poll_interval = 1.0
retry_backoff = 0.0
[executor]
max_batch = 1
progress_interval = 0.2
""")
    return path, cfg.load(str(path), env={})


class Fleet:
    """`genbot worker` processes on the config's queue, their output in log files."""

    def __init__(self, tmp_path, config_file):
        self.tmp_path, self.config_file = tmp_path, config_file
        self.procs: dict[int, subprocess.Popen] = {}

    def start(self, n: int) -> None:
        for _ in range(n):
            log = open(self.tmp_path / f"worker{len(self.procs)}.log", "wb")
            proc = subprocess.Popen([PYTHON, "-m", "bot.cli", "worker", "--config",
                                     str(self.config_file)], env=python_env(), stdout=log,
                                    stderr=subprocess.STDOUT)
            self.procs[proc.pid] = proc

    def owner_pid(self, owner: str) -> int:
        return int(owner.rsplit(":", 1)[1])

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.tmp_path.glob("worker*.log"))


class ChatService(ServiceWorld):
    """The service (no executor of its own) with the test chat platform."""

    async def __aenter__(self) -> ChatService:
        from bot.service import Service
        self.service = Service(self.config, executor=False, platforms=self.platforms)
        await self.service.start()
        self.queue, self.core = self.service.queue, self.service.core
        self.url = f"http://127.0.0.1:{self.service.port}"
        return self


async def idle_workers(queue, n: int, timeout: float = 240) -> list[dict]:
    workers = Workers.of(queue)
    async with asyncio.timeout(timeout):
        while len(idle := [w for w in await workers.all() if w.state == "idle"]) < n:
            await asyncio.sleep(0.2)
    return idle


def sheet(rows: int, steps: int) -> bytes:
    lines = ["sku,product_image,prompt,steps"] + [
        f"SKU-{i},bottle.png,a bottle number {i},{steps}" for i in range(rows)]
    return ("\n".join(lines) + "\n").encode()


async def gen(w, name: str, rows: int, steps: int) -> None:
    """/gen product_main with a sheet of `rows` rows and the picture they name."""
    p = w.platform
    await w.send(f"/gen product_main {name}", files=(p.upload(name, sheet(rows, steps)),
                                                      p.upload("bottle.png", BOTTLE)))


async def under_way(queue, after: int = 0, timeout: float = 120) -> None:
    """Until some job has reported a denoising step (in an event past `after`)."""
    async with asyncio.timeout(timeout):
        while not [e for e in await queue.events_after(after) if e.kind == "progress"]:
            await asyncio.sleep(0.05)


@pytest.mark.timeout(600)  # past every stage's own limit (575 s in all): they say where
async def test_three_workers_share_a_batch_a_killed_one_loses_nothing_a_stopped_one_is_fenced(
        tmp_path, demo_models, pg_database):
    """One fleet, two stories: three workers share a batch with one SIGKILLed mid-job
    (three_workers_run); on the two left, one SIGSTOPped past its lease cannot finish the
    job the other took over, and every database connection cut is made again
    (a_stopped_worker_is_fenced). A database of its own: every connection to it is cut."""
    config_file, config = scale_config(tmp_path, demo_models, pg_database)
    fleet = Fleet(tmp_path, config_file)
    service = ChatService(config)
    try:
        w = await bounded(service.__aenter__(), 60, "the service starting")
        try:
            await three_workers_run(w, fleet)
            await a_stopped_worker_is_fenced(w, fleet, pg_database)
        finally:
            await bounded(service.__aexit__(None, None, None), 60, "the service stopping")
    finally:
        fleet.stop()
    assert "Traceback" not in fleet.logs()


async def three_workers_run(w, fleet) -> None:
    """The first story's stages, each with its own limit."""
    fleet.start(3)
    await idle_workers(w.queue, 3, timeout=90)
    p = w.platform
    await bounded(gen(w, "rows.csv", 9, 6), 60, "/gen (its reply and the first pump)")
    async with asyncio.timeout(45):  # a worker with a job under way and the next
        while True:                    # claimed ahead; then it is killed
            jobs = await w.queue.batch_jobs(1)
            ahead = {j.lease_owner: j for j in jobs
                     if j.status == "queued" and j.lease_owner}
            running = [r for r in await w.queue.now_and_next()
                       if r.status == "running" and r.lease_owner in ahead]
            if running:
                break
            await asyncio.sleep(0.02)
    victim = running[0]
    waiting = ahead[victim.lease_owner]
    os.kill(fleet.owner_pid(victim.lease_owner), signal.SIGKILL)
    try:
        await w.finish(timeout=110)
    except AssertionError as e:
        raise AssertionError(f"{e}\nworkers' logs:\n{fleet.logs()[-6000:]}") from None

    jobs = await w.queue.batch_jobs(1)
    assert [j.status for j in jobs] == ["succeeded"] * 9, fleet.logs()
    killed = next(j for j in jobs if j.id == victim.id)
    assert killed.attempts == 2 and killed.lease_owner != victim.lease_owner
    # The job it held ahead had not started: it ran once, its attempt unused.
    assert [j.attempts for j in jobs if j.id != victim.id] == [1] * 8
    assert next(j for j in jobs if j.id == waiting.id).lease_owner != victim.lease_owner
    starts = [e.data["owner"] for e in await w.queue.events_after(0)
              if e.kind == "running"]
    assert len(set(starts)) == 3  # all three took part
    # Every image in the chat exactly once, and the summary after them.
    images = Counter(x.file for x in p.posts if x.image and x.file != "contact.png")
    assert len(images) == 9 and set(images.values()) == {1}, images
    (summary,) = [i for i, x in enumerate(p.posts) if x.text.startswith("Batch 1 finished")]
    assert summary > max(i for i, x in enumerate(p.posts) if x.file in images)
    states = {x.id: x.state for x in await Workers.of(w.queue).all()}
    async with asyncio.timeout(30):  # silent past its lease: lost
        while states[victim.lease_owner] != "lost":
            await asyncio.sleep(0.2)
            states = {x.id: x.state for x in await Workers.of(w.queue).all()}
    assert sorted(states.values()) == ["idle", "idle", "lost"], fleet.logs()[-3000:]


async def a_stopped_worker_is_fenced(w, fleet, pg_url: str) -> None:
    """The second story, on the two workers the first left idle: batches 2 and 3."""
    import asyncpg
    p = w.platform
    seen, posted = await w.queue.last_event_seq(), len(p.posts)
    await gen(w, "one.csv", 1, 20)
    await under_way(w.queue, seen)
    (running,) = [r for r in await w.queue.now_and_next() if r.status == "running"]
    stalled = fleet.owner_pid(running.lease_owner)
    os.kill(stalled, signal.SIGSTOP)  # past its lease: the other worker takes over
    async with asyncio.timeout(120):
        while (await w.queue.job(running.id)).status != "succeeded":
            await asyncio.sleep(0.1)
    os.kill(stalled, signal.SIGCONT)  # it wakes to a lease it no longer holds
    await asyncio.sleep(1.5)  # three of its heartbeats: each finds the lease gone
    done = await w.queue.job(running.id)
    assert done.lease_owner != running.lease_owner and done.attempts == 2
    kinds = [e.kind for e in await w.queue.events_after(seen)
             if e.job_id == running.id and e.kind != "progress"]
    assert kinds == ["running", "queued", "running", "succeeded"]  # finished once

    # Cut every database connection (the workers' and the service's): all of them
    # connect again and go on.
    conn = await asyncpg.connect(pg_url.replace("postgres://", "postgresql://", 1))
    try:
        cut = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND datname = current_database()")
    finally:
        await conn.close()
    assert cut >= 2
    await gen(w, "more.csv", 4, 6)
    await w.finish(timeout=180)
    assert {j.status for j in await w.queue.batch_jobs(3)} == {"succeeded"}
    images = Counter((x.thread, x.file) for x in p.posts[posted:]
                     if x.image and x.file != "contact.png")
    assert len(images) == 5 and set(images.values()) == {1}, images


async def test_workers_on_another_host_share_outputs_through_an_object_store(tmp_path,
                                                                            demo_models,
                                                                            pg_url):
    """The service and a worker with separate folders (as on two hosts) and one S3 bucket
    (moto's server): pictures go up from the chat side and down to the worker, images the
    other way; the store goes away mid-job and the upload waits for it."""
    import boto3

    from tests.fakes.s3 import S3Server
    s3 = S3Server()
    s3.start()
    boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1",
                 aws_access_key_id="test", aws_secret_access_key="test").create_bucket(
        Bucket="studio")
    storage = (f'[storage]\nbackend = "s3"\nbucket = "studio"\nendpoint = "{s3.endpoint}"\n'
               'access_key = "test"\nsecret_key = "test"\n')
    _, config = scale_config(tmp_path, demo_models, pg_url, host="-bot", extra=storage)
    worker_file, _ = scale_config(tmp_path, demo_models, pg_url, host="-gpu", extra=storage)
    fleet = Fleet(tmp_path, worker_file)
    try:
        async with ChatService(config) as w:
            fleet.start(1)
            await idle_workers(w.queue, 1)
            p = w.platform
            await gen(w, "rows.csv", 2, 30)
            await under_way(w.queue)  # then the store goes away for a while
            s3.stop()
            await asyncio.sleep(4)
            s3.start()
            await w.finish(timeout=240)
            jobs = await w.queue.batch_jobs(1)
            assert [j.status for j in jobs] == ["succeeded", "succeeded"], fleet.logs()
            assert [j.attempts for j in jobs] == [1, 1]  # waited out, not failed
            images = [x for x in p.posts if x.image and x.file != "contact.png"]
            assert len(images) == 2
            for job in jobs:  # made on the worker's host, fetched by the service's
                (output,) = job.outputs
                assert (tmp_path / "data-gpu" / output).is_file()
                assert (tmp_path / "data-bot" / output).is_file()
            # The bottle went up from the chat side and down to the worker.
            assert list((tmp_path / "data-gpu" / "inputs").iterdir())
    finally:
        fleet.stop()
        s3.stop()


async def test_two_services_on_one_database_post_each_message_once(tmp_path, demo_models,
                                                                   pg_url):
    """Two `genbot serve --no-executor` for availability: both follow the event log and
    run senders for the same platform; each message is posted by one of them, once."""
    from tests.fakes.chat import MemoryPlatform
    _, config = scale_config(tmp_path, demo_models, pg_url)
    a_chat, b_chat = MemoryPlatform(), MemoryPlatform()
    async with ChatService(config, [a_chat]) as a, ChatService(config, [b_chat]) as b:
        a.start_executor()
        await gen(a, "rows.csv", 6, 2)
        await a.finish(timeout=180)
        await b.finish(timeout=60)
        posts = a_chat.posts + b_chat.posts
        images = Counter((x.thread, x.file) for x in posts if x.image)
        assert len(images) == 7 and set(images.values()) == {1}, images  # 6 + contact sheet
        summaries = [x for x in posts if x.text.startswith("Batch 1 finished")]
        assert len(summaries) == 1
        assert list(await a.core.outbox.counts()) == ["sent"]  # nothing pending or failed


async def test_a_service_killed_mid_upload_leaves_the_rest_to_the_other_one(tmp_path, demo_models,
                                                                           pg_url):
    """Two `genbot serve --no-executor` processes on one database for one Slack app, as
    behind a load balancer, and a worker. The one posting the batch is SIGKILLed in the
    middle of an upload; the other, already running, posts the rest: every image once."""
    from tests.fakes.service import healthy, start_serve
    from tests.fakes.slack import BOT, SECRET, TOKEN, FakeSlack, SlackClient, six_thumbs

    fake = await FakeSlack().start()
    slack = f"""
[slack]
bot_token = "{TOKEN}"
signing_secret = "{SECRET}"
api_url = "{fake.api_url}"
[chat]
progress_every = 0.5
send_claim_seconds = 3  # a's upload falls due again soon after it dies
"""
    ports = free_port(), free_port()
    (a_file, _), (b_file, _) = (scale_config(tmp_path, demo_models, pg_url, extra=slack, port=p,
                                             name=f"-{n}") for n, p in zip("ab", ports))
    a_url, b_url = (f"http://127.0.0.1:{p}" for p in ports)
    fleet = Fleet(tmp_path, a_file)
    services: list[asyncio.subprocess.Process] = []
    client = SlackClient(a_url, fake)
    try:
        with open(tmp_path / "serve.log", "ab") as log:
            services.append(await start_serve(a_file, log, "--no-executor"))
            await healthy(a_url)
            fleet.start(1)
            fake.stall_after = 3  # the fourth upload hangs
            _, ts = await client.message(f"<@{BOT}> gen social_thumb six.csv",
                                         files=six_thumbs(fake))
            async with asyncio.timeout(180):
                await fake.stalled.wait()
            services.append(await start_serve(b_file, log, "--no-executor"))
            await healthy(b_url)
            services[0].send_signal(signal.SIGKILL)  # a dies in the middle of the upload
            await services[0].wait()
            fake.release.set()
            delivered = len(fake.files)
            async with asyncio.timeout(180):  # b takes it on once a's claim runs out
                while not any(f["name"] == "results.xlsx" for f in fake.files):
                    await asyncio.sleep(0.1)
    finally:
        await client.close()
        for serve in services:
            if serve.returncode is None:
                serve.send_signal(signal.SIGTERM)
                await serve.wait()
        fleet.stop()
        await fake.stop()
    names = [fake.label(x) for x in fake.thread(ts)]
    thumbs = [n for n in names if n.startswith("thumb_")]
    assert delivered == 3 and sorted(thumbs) == [f"thumb_{r}.png" for r in range(2, 8)]
    assert len(set(names)) == len(names), names  # nothing twice
    assert names[-2:] == ["contact.png", "results.xlsx"]
