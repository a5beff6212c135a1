"""The queue's promises under real OS processes: concurrent claimers, SIGKILL, SIGSTOP.
Each test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import queue as threadqueue
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest

from storage.db import Database
from storage.queue import NewJob, Queue, Submission
from tests.conftest import PYTHON, ROOT, python_env, queue_settings

pytestmark = pytest.mark.slow
WORKER = str(ROOT / "tests" / "proc_worker.py")


class Proc:
    """A proc_worker.py child whose stdout lines can be awaited with a timeout."""

    def __init__(self, url: str, mode: str, *args: str):
        self.p = subprocess.Popen([PYTHON, WORKER, url, mode, *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=python_env())
        self.lines: threadqueue.Queue[str] = threadqueue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.p.stdout:
            self.lines.put(line.strip())
        self.lines.put("<eof>")

    def expect(self, prefix: str, timeout: float = 60) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except threadqueue.Empty:
                raise AssertionError(
                    f"no {prefix!r} within {timeout}s; saw {self.seen[-5:]}") from None
            self.seen.append(line)
            if line == "<eof>":
                err = self.p.stderr.read()
                raise AssertionError(f"exited before {prefix!r}; saw {self.seen[-5:]}\n{err}")
            if line.startswith(prefix):
                return line.split()

    def finish(self, timeout: float = 120) -> list[str]:
        """Wait for exit; all remaining lines."""
        self.p.wait(timeout)
        rest = []
        while True:
            line = self.lines.get(timeout=10)
            if line == "<eof>":
                break
            rest.append(line)
        self.seen.extend(rest)
        assert self.p.returncode == 0, self.p.stderr.read()
        return self.seen

    def signal(self, sig: int) -> None:
        os.kill(self.p.pid, sig)

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(10)


def run(coro):
    return asyncio.run(coro)


async def _with_queue(url, fn):
    db = await Database(url).open()
    queue = Queue(db, queue_settings(max_queue_size=100_000))
    try:
        return await fn(queue)
    finally:
        await queue.close()


def enqueue(url, n, submitter="alice"):
    async def go(queue):
        await queue.enqueue(Submission("t", submitter, [NewJob(i, {"i": i}) for i in range(n)]))
    run(_with_queue(url, go))


def job_rows(url):
    async def read(queue):
        return sorted(await queue.page_jobs(limit=1_000_000), key=lambda j: j.id)
    return run(_with_queue(url, read))


def events(url):
    return run(_with_queue(url, lambda q: q.events_after(0, 1_000_000)))


def test_no_double_claim_4_processes_x_500_jobs(db_url):
    """Two of the four claim as executors do, the next job ahead of the one they run."""
    run(_with_queue(db_url, lambda q: q.db.fetch("SELECT 1")))  # schema created once, up front
    workers = [Proc(db_url, "drain", "--owner", f"w{i}", "--idle-exit", "5",
                    *(["--ahead"] if i >= 2 else [])) for i in range(4)]
    try:
        for w in workers:
            w.expect("ready")
        enqueue(db_url, 2000)  # all four are polling: they start together
        ran = []
        for w in workers:
            ran += [int(line.split()[1]) for line in w.finish(300) if line.startswith("ran")]
    finally:
        for w in workers:
            w.kill()
    rows = job_rows(db_url)
    assert sorted(ran) == [r.id for r in rows]  # each job executed exactly once
    assert all(r.status == "succeeded" and r.attempts == 1 for r in rows)
    assert not any(line.startswith("lost") for w in workers for line in w.seen)
    per_worker = Counter(r.lease_owner for r in rows)
    assert len(per_worker) == 4, per_worker  # all four really competed for the same jobs


def test_sigkilled_executor_job_runs_exactly_once_more(db_url):
    """And the job it held ahead runs once, its attempt unused: it never started."""
    enqueue(db_url, 2)
    doomed = Proc(db_url, "hold", "--owner", "doomed", "--lease", "2", "--ahead")
    try:
        _, job, attempt = doomed.expect("claimed")
        assert attempt == "1"
        _, ahead, attempt = doomed.expect("ahead")
        assert attempt == "0"
        doomed.signal(signal.SIGKILL)
        doomed.p.wait(10)
    finally:
        doomed.kill()
    time.sleep(2.2)  # the lease runs out
    rescuer = Proc(db_url, "drain", "--owner", "rescuer")
    lines = rescuer.finish()
    assert [line for line in lines if line.startswith("ran")] == [f"ran {job} 2", f"ran {ahead} 1"]
    rows = job_rows(db_url)
    assert [(r.status, r.attempts, r.lease_owner) for r in rows] == \
        [("succeeded", 2, "rescuer"), ("succeeded", 1, "rescuer")]
    kinds = [e.kind for e in events(db_url) if e.job_id == int(job)]
    assert kinds == ["running", "queued", "running", "succeeded"]
    assert [e.kind for e in events(db_url) if e.job_id == int(ahead)] == ["running", "succeeded"]


def test_sigstopped_executor_cannot_finish_a_job_taken_over(db_url):
    """Nor start the job it held ahead, which another executor ran meanwhile."""
    enqueue(db_url, 2)
    stale = Proc(db_url, "stall", "--owner", "stale", "--lease", "2", "--ahead")
    try:
        _, job, _ = stale.expect("claimed")
        _, ahead, _ = stale.expect("ahead")
        stale.signal(signal.SIGSTOP)
        time.sleep(2.2)  # frozen past its lease
        fresh = Proc(db_url, "drain", "--owner", "fresh")
        ran = fresh.finish()
        assert f"ran {job} 2" in ran and f"ran {ahead} 1" in ran
        stale.signal(signal.SIGCONT)
        stale.p.stdin.write("go\n")
        stale.p.stdin.flush()
        assert stale.expect("heartbeat") == ["heartbeat", "lost"]
        assert stale.expect("start") == ["start", "0"]  # started nothing
        assert stale.expect("complete") == ["complete", "None"]  # changed 0 rows
        stale.finish()
    finally:
        stale.kill()
    rows = job_rows(db_url)
    assert all(r.status == "succeeded" and r.lease_owner == "fresh" for r in rows)
    assert "stale.png" not in str([r.outputs for r in rows])
    assert [e.kind for e in events(db_url)].count("succeeded") == 2


def test_acknowledged_enqueues_survive_sigkill(db_url):
    producer = Proc(db_url, "enqueue")
    acked = []
    try:
        producer.expect("ready")
        while len(acked) < 40:
            acked.append(int(producer.expect("acked")[1]))
        producer.signal(signal.SIGKILL)  # mid-burst: it is enqueueing the next batch
        producer.p.wait(10)
    finally:
        producer.kill()

    async def check(queue):
        if queue.db.dialect == "sqlite":
            assert await queue.db.fetchval("PRAGMA integrity_check") == "ok"
        batches = {b["id"]: b["total_jobs"] for b in await queue.db.fetch(
            "SELECT id, total_jobs FROM batches")}
        jobs = Counter(r["batch_id"] for r in await queue.db.fetch("SELECT batch_id FROM jobs"))
        assert set(acked) <= set(batches)  # every acknowledged batch is there
        assert jobs == {b: n for b, n in batches.items()}  # and no batch is partial
        assert all(n == 50 for n in batches.values())
    run(_with_queue(db_url, check))


def test_idle_executor_in_another_process_is_woken_by_enqueue(db_url):
    run(_with_queue(db_url, lambda q: q.db.fetch("SELECT 1")))
    waiter = Proc(db_url, "wait", "--owner", "sleeper")  # polls only every 60 s
    try:
        waiter.expect("listening")
        time.sleep(0.2)
        enqueue(db_url, 1)
        # Far sooner than the 60 s poll: only the wake-up signal can explain it.
        assert waiter.expect("claimed", timeout=20)
        waiter.finish()
    finally:
        waiter.kill()
