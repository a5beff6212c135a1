"""The executor's loop, driven through random interleavings by a Hypothesis state machine,
on SQLite and on PostgreSQL: claims, claims ahead, completions carrying the next claim,
steps, finishes, a full disk, leases running out, a rival executor taking jobs over,
completions refused, a statement failing before it runs or after it committed (its
answer lost) at every await, outages longer than a lease, cancels, pauses, SIGTERM with
and without grace, and a new executor after one left.

The real loop (executor.loop, executor.prefetch) runs over the real queue and database;
only the GPU is scripted (tests/fakes/scripted.py) and the database fails when told
(tests/fakes/flakydb.py). Time is the queue's fake clock; the loop's own background
heartbeat is replaced by a rule (`tend`), so that the test decides when leases renew.

After every step:
- the loop's invariant holds (Loop.problems: each lease it renews is a run on its device
  or finishing, or in the group ahead — never both, no job under two live leases), and
  every run the engine is generating or finishing is one the loop holds;
- no exception escaped the loop, and nothing was logged as an error or with a traceback;
- once a heartbeat has handed back what the executor held without knowing, every lease
  the database gives its owner is one the loop knows of: nothing is stranded.
At the end (the executor stopped, then a plain worker finishing what is left):
- the executor left no lease behind (hand-back covers everything it held);
- every job ended exactly once — one terminal event, last — as the model says: canceled
  when it was canceled before it ended, else succeeded, its image made by a run that
  generated it under the lease that completed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from executor.loop import Loop
from storage import config as cfg
from storage.config import QueueConfig
from storage.db import Database
from storage.queue import NewJob, Queue, Submission
from storage.records import TERMINAL
from tests.conftest import FakeClock
from tests.fakes.flakydb import FlakyDatabase
from tests.fakes.scripted import OUTCOMES, ScriptedEngine

LEASE = 10.0
MOVES = ("step", "end", "store", "tend")  # what goes on beside an outage or a pause
CONFIG = cfg.from_dict({
    "queue": {"lease_seconds": LEASE, "heartbeat_seconds": 2.0, "max_attempts": 100,
              "retry_backoff": 1.0, "retry_backoff_max": 2.0, "poll_interval": 0.2},
    "executor": {"job_timeout": 86400, "progress_interval": 0.0}})
owners = itertools.count(1)


class Trouble(logging.Handler):
    """Every error and every traceback logged while the machine runs; and how often the
    executor told of what the test is after (leases lost, hand-backs, refusals …)."""

    TOLD = ("lease lost", "handed back jobs", "completion refused", "handed back on leaving",
            "failed (job", "job done", "draining", "stopping")

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.seen: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)
        message = record.getMessage()
        self.seen.update(what for what in self.TOLD if what in message)

    def lines(self) -> list[str]:
        return [f"{r.name}: {r.getMessage()} {r.exc_info[1] if r.exc_info else ''}"
                for r in self.records]


async def never() -> None:
    await asyncio.Event().wait()


async def nothing() -> None:
    pass


async def ignored(*_: object) -> None:
    pass


async def close_bells(queue: Queue) -> None:
    """A queue's wakers and bells (not its database, which the examples share)."""
    for bell in (queue.waker, queue.cancel_bell, queue.bell):
        await bell.close()


class LoopMachine(RuleBasedStateMachine):
    runner: asyncio.Runner
    db: FlakyDatabase
    clock: FakeClock
    trouble: Trouble

    def run(self, coro):
        return self.runner.run(coro)

    # --- the world ---------------------------------------------------------------------
    @initialize(max_batch=st.sampled_from([1, 2]))
    def begin(self, max_batch):
        self.db.faults, self.db.down = [], False
        for sql in ("DELETE FROM events", "DELETE FROM jobs", "DELETE FROM batches",
                    "DELETE FROM workers", "UPDATE queue_state SET paused = FALSE"):
            self.run(self.db.db.execute(sql))
        self.queue = Queue(self.db.db, CONFIG[QueueConfig], clock=self.clock)
        self.queue.db = self.db  # the executor's statements go through the faults
        self.work = asyncio.Event()
        renew = self.queue.heartbeat_all

        async def heartbeat_all(leases, *, owner=None):
            failures = self.db.failures
            renewal = await renew(leases, owner=owner)
            if owner is not None and self.db.failures == failures:
                self.reconciled_at = failures  # what it held unknowingly went back
            return renewal
        self.queue.heartbeat_all = heartbeat_all

        async def wait_for_work(timeout=None) -> bool:  # the test says when to look
            await self.work.wait()
            self.work.clear()
            return True
        self.queue.wait_for_work = wait_for_work
        self.queue.cancel_bell.listen = nothing  # (its bell rings the watch, replaced below)
        self.queue.previews.hear_watchers = ignored  # (no one watches previews here)
        self.rival = Queue(self.db.db, CONFIG[QueueConfig], clock=self.clock)  # other hosts
        self.max_batch = max_batch
        self.jobs: set[int] = set()
        self.canceled: set[int] = set()  # canceled before they ended
        self.owners: list[str] = []
        self.engines: list[ScriptedEngine] = []
        self.reconciled_at = -1  # db.failures when a heartbeat last handed back
        self.trouble.records.clear()
        self.start_executor()

    def start_executor(self) -> None:
        self.engine = ScriptedEngine(self.max_batch)
        self.engines.append(self.engine)
        self.loop = Loop(CONFIG, self.queue, self.engine, owner=f"model:{next(owners)}")
        self.owners.append(self.loop.owner)
        self.loop.watch = never  # leases renew when the test says (rule `tend`)
        stopping = self.loop.stopping

        async def sleep(seconds: float) -> None:  # a pause lasts until the next step
            waits = [asyncio.ensure_future(e.wait()) for e in (self.work, stopping)]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for wait in waits:
                wait.cancel()
            self.work.clear()
        self.loop.sleep = sleep
        presence = self.loop.presence
        presence.beat_forever, presence.stopped = never, nothing
        presence.soon = presence.now = lambda: None
        self.task = asyncio.ensure_future(self.loop.run(), loop=self.runner.get_loop())
        self.steps_since_start, self.signaled = 0, False
        self.run(self.settle())

    async def settle(self) -> None:
        """Let the executor run until it waits on the test: nothing on its way to the
        database, and nothing else moving for a while."""
        self.work.set()  # an idle executor looks for work once per step
        quiet, seen = 0, -1
        for turns in itertools.count():
            assert turns < 20_000, "the executor never settles: a busy loop"
            if quiet >= 25:
                return
            await asyncio.sleep(0)
            if self.db.in_flight:
                quiet = 0
                await asyncio.sleep(0.001)
                continue
            quiet = quiet + 1 if self.db.statements == seen else 0
            seen = self.db.statements

    def step_done(self) -> None:
        self.run(self.settle())
        self.steps_since_start += 1
        self.trouble.seen["steps"] += 1

    @property
    def faults_pending(self) -> bool:
        return self.db.down or bool(self.db.faults)

    # --- the rules ---------------------------------------------------------------------
    @rule(n=st.integers(1, 3))
    def submit(self, n):
        sub = Submission("t", "test:alice", [NewJob(row=i + 2, workflow={"i": i}, affinity="m")
                                             for i in range(n)])
        batch = self.run(self.rival.enqueue(sub)).batch_id
        self.jobs |= {j.id for j in self.run(self.rival.batch_jobs(batch))}
        self.step_done()

    @rule()
    def step(self):
        self.engine.step()
        self.step_done()

    @rule(outcome=st.sampled_from(["ok", "ok", "ok", *OUTCOMES]))
    def end_generation(self, outcome):
        self.engine.end(outcome)
        self.step_done()

    @rule(outcome=st.sampled_from(["ok", "ok", "ok", "disk full"]))
    def finish(self, outcome):
        self.engine.finish_next(outcome)
        self.step_done()

    @rule(rounds=st.integers(1, 3))
    def work_flows(self, rounds):
        """Whatever is on the device ends well and every finish stores, `rounds` times:
        jobs move along, between the rules that get in their way."""
        for _ in range(rounds):
            self.engine.end("ok")
            self.run(self.settle())
            while self.engine.finish_next("ok"):
                pass
            self.step_done()

    @rule()
    def tend(self):
        self.run(self.loop.tend(check=True, beat=True))
        self.step_done()

    @rule(nth=st.integers(0, 3), when=st.sampled_from(["before", "after"]))
    def fault(self, nth, when):
        self.db.fail(nth, when)
        self.step_done()

    @rule(seconds=st.sampled_from([1.0, 3.0, LEASE + 1]),
          meanwhile=st.lists(st.sampled_from(MOVES), max_size=3))
    def outage(self, seconds, meanwhile):
        """The database goes away for `seconds` (past a lease, at worst), while the device
        goes on with its work; then it answers again."""
        self.db.down = True
        self.step_done()
        self.clock.advance(seconds)
        for move in meanwhile:
            self.move(move)
        self.db.down = False
        self.step_done()

    @rule(seconds=st.sampled_from([1.0, 3.0, LEASE + 1]))
    def time_passes(self, seconds):
        self.clock.advance(seconds)
        self.step_done()

    def move(self, move: str) -> None:
        """One of MOVES: the device steps or ends well, a finish stores, or a heartbeat."""
        if move == "step":
            self.engine.step()
        elif move == "end":
            self.engine.end("ok")
        elif move == "store":
            self.engine.finish_next("ok")
        else:
            self.run(self.loop.tend())
        self.step_done()

    @rule()
    def rival_takes_over(self):
        """Where a lease ran out, another executor claims (sweeping it back to the queue)
        and runs a job to its end at once: perhaps the very job whose lease ran out."""
        if self.run(self.db.db.fetchval(
                "SELECT COUNT(*) FROM jobs WHERE lease_expires_at < $1 "
                "AND status IN ('queued', 'running')", self.clock.now)):
            lease = self.run(self.rival.claim("rival"))
            if lease is not None:
                self.run(self.rival.complete(lease, ["rival.png"]))
        self.step_done()

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def cancel(self, data):
        job_id = data.draw(st.sampled_from(sorted(self.jobs)))
        job = self.run(self.rival.job(job_id))
        if job.status not in TERMINAL:
            self.canceled.add(job_id)
        self.run(self.rival.cancel(job=job_id, by="test"))
        self.step_done()

    @rule(meanwhile=st.lists(st.sampled_from(MOVES), max_size=3))
    def pause_a_while(self, meanwhile):
        """An admin pauses the queue (jobs claimed ahead go back), then resumes it."""
        self.run(self.rival.pause("test"))
        self.step_done()
        for move in meanwhile:
            self.move(move)
        self.run(self.rival.resume("test"))
        self.step_done()

    @precondition(lambda self: not self.signaled and self.steps_since_start >= 8)
    @rule(grace=st.sampled_from([0.0, 60.0]))
    def sigterm(self, grace):
        self.signaled = True
        self.run(self.signal(grace))
        self.step_done()

    async def signal(self, grace: float) -> None:
        self.loop.drain(grace)  # as the signal handler calls it: on the event loop

    @precondition(lambda self: self.signaled)
    @rule()
    def new_executor(self):
        """The executor that was signalled leaves (what it runs ends well meanwhile); a new
        one, under another name, takes its place."""
        self.finish_draining()
        self.start_executor()

    # --- after every step --------------------------------------------------------------
    @invariant()
    def consistent(self):
        if not hasattr(self, "loop"):
            return
        assert self.loop.problems() == []
        assert self.trouble.lines() == []
        working = {r.key for r in self.engine.group} | \
            {r.key for r, done in self.engine.waiting if not done.done()}
        assert working <= self.loop.runs.keys()  # every run the engine has, the loop knows
        if self.task.done():
            assert self.task.exception() is None and self.task.result() == 0

    @invariant()
    def nothing_held_unknowingly(self):
        """After a heartbeat that handed back, with no failure since: every lease of the
        executor's owner in the database is one the loop holds."""
        if not hasattr(self, "loop") or self.reconciled_at != self.db.failures \
                or self.faults_pending or self.task.done():
            return
        rows = self.run(self.db.db.fetch(
            "SELECT id, lease_token FROM jobs WHERE lease_owner = $1 AND lease_token IS NOT "
            "NULL AND status IN ('queued', 'running')", self.loop.owner))
        held = {j.run.key for j in self.loop.runs.values() if j.renewing} | \
            {lease.key for lease in self.loop.prefetch.ahead}
        assert {(r["id"], r["lease_token"]) for r in rows} <= held

    # --- the end -------------------------------------------------------------------------
    def teardown(self):
        if not hasattr(self, "loop"):
            return
        try:
            self.check_the_end()
        finally:
            self.close()

    def close(self) -> None:
        if not self.task.done():  # (a failed example's executor)
            self.loop.stopping.set()
            self.run(asyncio.wait({self.task}, timeout=10))
        for queue in (self.queue, self.rival):
            self.run(close_bells(queue))

    def check_the_end(self):
        # The database well again: a live executor finishes every job left, on its own.
        self.db.faults, self.db.down = [], False
        self.run(self.rival.resume("test"))
        self.run(self.settle())
        if self.signaled:
            self.new_executor()
        for _ in range(30 * len(self.jobs) + 10):
            if self.run(self.rival.active_counts()).total == 0:
                break
            self.run(self.loop.tend())
            self.clock.advance(LEASE / 2)  # past backoffs, and past the leases of executors
            self.work_flows(1)             # that left without handing back: not this one's
        unfinished = [j for j in self.run(self.rival.page_jobs(limit=1000))
                      if j.status not in TERMINAL]
        assert unfinished == [], f"a live executor left jobs unfinished: {unfinished}"
        self.finish_draining(stop=True)
        leases = self.run(self.db.db.fetch(
            "SELECT id, lease_owner FROM jobs WHERE lease_token IS NOT NULL "
            "AND status IN ('queued', 'running')"))
        assert leases == [], f"left behind: {leases}"
        self.check_ends()
        assert self.trouble.lines() == []

    def finish_draining(self, *, stop: bool = False) -> None:
        """Until the executor has exited (told to stop now, with `stop`): the device and
        the finishes end well meanwhile. It exits 0, handing back what it still held."""
        if stop and not self.task.done():
            self.run(self.signal(0.0))
        for _ in range(200):
            if self.task.done():
                break
            self.run(self.loop.tend())
            self.engine.end("ok")
            while self.engine.finish_next("ok"):
                pass
            self.run(self.settle())
        assert self.task.done(), "the executor did not stop"
        assert self.task.exception() is None and self.task.result() == 0

    def check_ends(self):
        jobs = {job_id: self.run(self.rival.job(job_id)) for job_id in self.jobs}
        kinds = defaultdict(list)
        for e in self.run(self.rival.events_after(0, 100_000)):
            if e.job_id is not None and e.kind != "progress":
                kinds[e.job_id].append(e.kind)
        stored = {key for engine in self.engines for key in engine.stored}
        for job_id, job in jobs.items():
            ends = [k for k in kinds[job_id] if k in TERMINAL]
            assert len(ends) == 1 and kinds[job_id][-1] == ends[0], (job_id, kinds[job_id])
            expected = "canceled" if job_id in self.canceled else "succeeded"
            assert job.status == expected, (job_id, job.status, kinds[job_id])
            if expected == "succeeded":
                (image,) = job.outputs
                made_here = image.split("-")[0] == str(job_id)
                assert image in ("rival.png", "finisher.png") or made_here, image
                if made_here:  # by a run that generated it and stored it
                    assert any(f"{j}-{t[:8]}.png" == image for j, t in stored), image


@pytest.mark.slow
def test_the_executor_loop_keeps_its_leases_consistent_through_any_interleaving(db_url):
    examples = int(os.environ.get("GENBOT_LOOP_MODEL_EXAMPLES", "35"))  # more: a longer hunt
    runner = asyncio.Runner()
    clock = FakeClock()
    real = runner.run(Database(db_url).open())
    trouble = Trouble()
    logging.getLogger().addHandler(trouble)
    genbot = logging.getLogger("genbot")
    level, genbot.level = genbot.level, logging.INFO  # what the executor tells, counted
    LoopMachine.runner, LoopMachine.clock, LoopMachine.trouble = runner, clock, trouble
    LoopMachine.db = FlakyDatabase(real)
    try:
        run_state_machine_as_test(LoopMachine, settings=settings(
            max_examples=examples, stateful_step_count=60, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
        print(f"\nthe loop's model, {db_url.split(':')[0]}: {dict(trouble.seen)}")
    finally:
        genbot.setLevel(level)
        logging.getLogger().removeHandler(trouble)
        runner.run(real.close())
        runner.close()


# --- the cases the machine is for, as fixed sequences ---------------------------------

@contextlib.contextmanager
def scripted(db_url: str, max_batch: int = 1):
    """The machine as a harness for one fixed sequence of its rules; its teardown's checks
    (every job ended once, as the model says; nothing left leased) run at the end."""
    runner = asyncio.Runner()
    real = runner.run(Database(db_url).open())
    trouble = Trouble()
    logging.getLogger().addHandler(trouble)
    genbot = logging.getLogger("genbot")
    level, genbot.level = genbot.level, logging.INFO
    LoopMachine.runner, LoopMachine.clock, LoopMachine.trouble = runner, FakeClock(), trouble
    LoopMachine.db = FlakyDatabase(real)
    machine = LoopMachine()
    try:
        machine.begin(max_batch)
        try:
            yield machine
        except BaseException:
            machine.close()
            raise
        machine.consistent()
        machine.teardown()
    finally:
        genbot.setLevel(level)
        logging.getLogger().removeHandler(trouble)
        runner.run(real.close())
        runner.close()


def job_row(m: LoopMachine, job_id: int):
    return m.run(m.rival.job(job_id))


def test_a_stale_run_ending_never_touches_the_newer_run_of_its_job(db_url):
    """The worker that died with KeyError: after its lease ran out, the executor took its
    own job again while the old run was still finishing; the old run's clean-up removed
    the new run's entry. Now each run ends only itself."""
    with scripted(db_url) as m:
        m.submit(1)
        (first,) = m.loop.runs
        m.end_generation("ok")  # the first run finishes (stores its image) slowly...
        m.time_passes(LEASE + 1)  # ...past its lease: the executor takes its job again
        (stale, fresh) = sorted(m.loop.runs, key=lambda key: key != first)
        assert stale == first and fresh[0] == first[0] and fresh != first
        assert m.loop.runs[stale].stop == "lease lost" and m.engine.group[0].key == fresh
        m.finish("ok")  # the stale run ends: it records nothing
        assert list(m.loop.runs) == [fresh]
        m.consistent()
        m.work_flows(1)  # the new run ends: the job succeeds, once
        job = job_row(m, first[0])
        assert (job.status, job.attempts) == ("succeeded", 2)
        assert job.outputs == [f"{fresh[0]}-{fresh[1][:8]}.png"]
        assert m.trouble.seen["lease lost"] == 1


def test_a_start_the_database_did_not_answer_is_tried_again_not_forgotten(db_url):
    """The job stranded on a live worker: a group claimed ahead whose start failed was
    dropped from the group ahead but still renewed. Now it stays ahead until started."""
    with scripted(db_url) as m:
        m.submit(2)
        (running,) = m.loop.runs
        (ahead,) = m.loop.prefetch.ahead  # held while the first generates
        m.fault(0, "before")  # the next statement, the start of the group ahead, fails
        m.end_generation("ok")  # the first leaves the device: the group ahead starts
        assert m.db.failures == 1  # (the start failed once, and was tried again)
        assert ahead.key in m.loop.runs and m.engine.group[0].key == ahead.key
        assert job_row(m, ahead.job_id).attempts == 1
        m.work_flows(2)
        assert m.trouble.seen["handed back jobs"] == 0


def test_a_start_whose_answer_was_lost_still_runs_its_group(db_url):
    """Found by the machine: the start of the group ahead committed but its answer was
    lost; the start tried again found the group running and dropped it, so nobody ran it
    until a heartbeat handed it back."""
    with scripted(db_url) as m:
        m.submit(2)
        (ahead,) = m.loop.prefetch.ahead
        m.fault(0, "after")  # the next statement commits, its answer lost: the start
        m.outage(1.0, ["end"])
        m.tend()
        m.consistent()
        m.nothing_held_unknowingly()
        assert ahead.key in m.loop.runs and job_row(m, ahead.job_id).attempts == 1
        m.work_flows(2)
        assert m.trouble.seen["handed back jobs"] == 0


def test_a_claim_whose_answer_was_lost_is_handed_back_by_the_next_heartbeat(db_url):
    with scripted(db_url) as m:
        m.db.fail(0, "after")  # the claim the submit wakes commits, its answer lost
        m.submit(1)
        assert m.loop.runs == {} and m.loop.prefetch.ahead == []
        (job,) = m.jobs
        held = job_row(m, job)
        assert (held.status, held.lease_owner) == ("running", m.loop.owner)  # unknowingly
        m.tend()  # the heartbeat hands it back, its attempt given back...
        assert m.trouble.seen["handed back jobs"] == 1
        assert job in {key[0] for key in m.loop.runs}  # ...and the executor takes it again
        m.work_flows(1)
        assert (job_row(m, job).status, job_row(m, job).attempts) == ("succeeded", 1)


def test_sigterm_hands_back_every_job_the_executor_holds(db_url):
    """Running, claimed ahead, and held without knowing: all back at once, none waiting
    out a lease."""
    with scripted(db_url) as m:
        m.submit(3)
        (running,) = m.loop.runs
        (ahead,) = m.loop.prefetch.ahead
        m.fault(0, "after")  # whatever the executor sends next is lost after it commits
        m.run(m.rival.enqueue(Submission("t", "test:bob", [NewJob(2, {}, "m")])))
        m.sigterm(0.0)
        m.finish_draining()
        leased = m.run(m.db.db.fetch("SELECT id FROM jobs WHERE lease_token IS NOT NULL"))
        assert leased == []
        assert job_row(m, running[0]).attempts == 0 and job_row(m, ahead.job_id).attempts == 0
        m.jobs |= {j.id for j in m.run(m.rival.page_jobs(limit=100))}


def test_an_outage_longer_than_a_lease_is_told_in_lines_not_tracebacks(db_url):
    with scripted(db_url) as m:
        m.submit(2)
        m.outage(LEASE + 1, ["end", "store", "tend"])
        m.rival_takes_over()
        m.work_flows(3)
        assert m.trouble.lines() == []


def test_two_executors_of_one_name_on_one_queue_are_refused_in_one_process(db_url, tmp_path):
    """Each would hand back the other's jobs as held by nobody it knows of. On two queues
    (a benchmark's side by side) the same name is fine."""
    with scripted(db_url) as m:
        twin = Loop(CONFIG, m.queue, ScriptedEngine(1), owner=m.loop.owner)
        with pytest.raises(ValueError, match="already runs on this queue"):
            m.run(twin.run())
        other = m.run(Database(f"sqlite:///{tmp_path / 'other.sqlite3'}").open())
        try:
            elsewhere = Loop(CONFIG, Queue(other, CONFIG[QueueConfig]), ScriptedEngine(1),
                             owner=m.loop.owner)
            elsewhere.stopping.set()
            assert m.run(elsewhere.run()) == 0
        finally:
            m.run(other.close())


def test_a_job_canceled_before_its_first_step_says_so(db_url):
    """Canceled while its group was started but before any step of it: "canceled before
    it started", not "canceled at step 0 of 0"; one canceled after a step says which."""
    with scripted(db_url, max_batch=2) as m:
        m.submit(2)
        first, second = sorted(m.loop.runs)  # one group, on the device, no step yet
        m.run(m.rival.cancel(job=second[0], by="test"))
        m.canceled.add(second[0])
        m.tend()
        assert job_row(m, second[0]).error == "canceled before it started"
        m.step()
        m.run(m.rival.cancel(job=first[0], by="test"))
        m.canceled.add(first[0])
        m.tend()
        assert job_row(m, first[0]).error == "canceled at step 1 of 1000"
        m.work_flows(1)
