"""A Hypothesis state machine drives the real queue and a plain-Python reference model
side by side (enqueue, claim, claim ahead and start, heartbeat, complete, fail, release,
an operator's hand-back, cancel, pause, resume, time passing past leases and backoffs)
and demands the same answers, the same job states and the same event history, on SQLite
and on PostgreSQL. Every state the reference gives a job comes from the transition table
(storage.states.after), so this is also the table's proof on both backends."""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from dataclasses import dataclass, field

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

from storage.db import Database
from storage.queue import NewJob, Priority, Queue, QueueFull, Submission
from storage.states import Change, Status, after
from tests.conftest import FakeClock, queue_settings

SETTINGS = queue_settings(max_queue_size=12, lease_seconds=10.0, heartbeat_seconds=1.0,
                          max_attempts=2, retry_backoff=5.0, retry_backoff_max=20.0)


@dataclass
class RefJob:
    id: int
    batch: int
    priority: int
    submitter: str
    rank: int
    affinity: str | None
    not_before: float
    status: str = "queued"
    attempts: int = 0
    token: str | None = None
    expires: float | None = None
    cancel_requested: bool = False
    ahead: bool = False  # queued, but claimed ahead by an executor (token, expires set)
    events: list[str] = field(default_factory=list)


class Reference:
    """The queue's specification, written as directly as possible."""

    def __init__(self, s):
        self.s = s
        self.jobs: dict[int, RefJob] = {}
        self.keys: dict[str, tuple[int, int]] = {}
        self.paused = False

    def queued(self, now, **match):
        return [j for j in self.jobs.values() if j.status == "queued" and j.not_before <= now
                and all(getattr(j, k) == v for k, v in match.items())]

    def move(self, job, change):
        """The table's answer, and the event the database's trigger writes for it."""
        status = after(Status(job.status), change, cancel_asked=job.cancel_requested)
        if status != job.status:
            job.status = status.value
            job.events.append(status.value)

    # Returns ("existing", batch, n) | ("full", free) | ("new", start_rank)
    def check_enqueue(self, submitter, priority, n, now, key):
        if key in self.keys:
            return ("existing",) + self.keys[key]
        active = sum(j.status in ("queued", "running") for j in self.jobs.values())
        if active + n > self.s.max_queue_size:
            return ("full", max(0, self.s.max_queue_size - active))
        due = [j.rank for j in self.queued(now, priority=priority)]
        waiting = [j.rank for j in self.jobs.values()
                   if j.status == "queued" and j.priority == priority]
        turn = min(due) if due else (max(waiting) + 1 if waiting else 0)
        own = [j.rank for j in self.jobs.values() if j.status == "queued"
               and j.priority == priority and j.submitter == submitter]
        return ("new", turn if not own else max(turn, max(own) + 1))

    def add(self, batch, ids, submitter, priority, start, affinities, not_before, key):
        for i, (job_id, aff) in enumerate(zip(ids, affinities)):
            self.jobs[job_id] = RefJob(job_id, batch, priority, submitter, start + i, aff,
                                       not_before)
        if key:
            self.keys[key] = (batch, len(ids))

    def expired(self, now):
        return [j for j in self.jobs.values()
                if (j.status == "running" or j.ahead) and j.expires < now]

    def free(self, j):
        j.token = j.expires = None
        j.ahead = False

    def sweep(self, now):
        for j in self.expired(now):
            if j.ahead:  # never started: simply free again
                self.free(j)
                continue
            self.free(j)
            self.move(j, Change.EXPIRE_SPENT if j.attempts >= self.s.max_attempts
                      else Change.EXPIRE)

    def claim(self, now, prefer, ahead=False):
        pick = self.take(now, prefer, ahead)
        if pick is None:
            if self.expired(now):
                self.sweep(now)
                pick = self.take(now, prefer, ahead)
        elif self.expired(now):
            self.sweep(now)
        return pick

    def free_queued(self, now, **match):
        return [j for j in self.queued(now, **match) if not j.ahead]

    def take(self, now, prefer, ahead=False):
        if self.paused:
            return None
        due = self.free_queued(now)
        if not due:
            return None
        head = min(due, key=lambda j: (j.priority, j.rank, j.id))
        pick = head
        if prefer:
            mine = [j for j in self.free_queued(now, priority=head.priority,
                                                submitter=head.submitter)
                    if j.affinity in prefer]
            if mine:
                pick = min(mine, key=lambda j: (j.rank, j.id))
        pick.expires = now + self.s.lease_seconds
        if ahead:
            pick.ahead = True
        else:
            pick.attempts += 1
            self.move(pick, Change.CLAIM)
        if prefer and pick.affinity in prefer:
            rest = [j for j in self.free_queued(now, priority=pick.priority,
                                                submitter=pick.submitter) if j is not pick]
            if rest:
                first = min(rest, key=lambda j: (j.rank, j.id))
                if first.rank < pick.rank:
                    first.rank = pick.rank
        return pick

    def holder(self, job_id, token):
        j = self.jobs[job_id]
        return j if j.status == "running" and j.token == token else None

    def start(self, job_id, token, now):
        j = self.jobs[job_id]
        if j.status == "running" and j.token == token:  # started already (its answer lost)
            return True
        if not (j.ahead and j.token == token):
            return False
        if self.paused:  # the claim is dropped
            self.free(j)
            return False
        j.ahead = False
        j.attempts += 1
        j.expires = now + self.s.lease_seconds
        self.move(j, Change.CLAIM)
        return True

    def heartbeat(self, job_id, token, now):
        j = self.holder(job_id, token)
        if j is None and self.jobs[job_id].ahead and self.jobs[job_id].token == token:
            j = self.jobs[job_id]
        if j is None:
            return (False, False)
        j.expires = now + self.s.lease_seconds
        return (True, j.cancel_requested)

    def complete(self, job_id, token):
        j = self.holder(job_id, token)
        if j is None:
            return None
        j.token = j.expires = None
        self.move(j, Change.SUCCEED)
        return j.status

    def fail(self, job_id, token, retry, now):
        j = self.holder(job_id, token)
        if j is None:
            return None
        j.token = j.expires = None
        self.move(j, Change.RETRY if retry and j.attempts < self.s.max_attempts
                  else Change.FAIL)
        if j.status == "queued":  # tried again after a backoff
            backoff = min(self.s.retry_backoff * 2 ** (j.attempts - 1), self.s.retry_backoff_max)
            j.not_before = now + backoff
        return j.status

    def release(self, job_id, token):
        j = self.holder(job_id, token)
        if j is None:
            return None
        j.token = j.expires = None
        if not j.cancel_requested:
            j.attempts -= 1  # handed back: the attempt was not used
        self.move(j, Change.RELEASE)
        return j.status

    def hand_back(self, job_ids):
        handed = []
        for job_id in job_ids:
            j = self.jobs[job_id]
            if j.ahead:  # claimed ahead, never started: free again, untouched
                self.free(j)
            elif j.status == "running":
                self.free(j)
                if not j.cancel_requested:
                    j.attempts -= 1
                self.move(j, Change.HAND_BACK)
            else:
                continue
            handed.append(job_id)
        return sorted(handed)

    def cancel(self, match):
        ended, asked = [], []
        for j in self.jobs.values():
            if not match(j):
                continue
            if j.status == "queued":
                self.free(j)
                self.move(j, Change.CANCEL)
                ended.append(j.id)
            elif j.status == "running" and not j.cancel_requested:
                j.cancel_requested = True
                j.events.append("cancel_requested")
                asked.append(j.id)
        return sorted(ended), sorted(asked)


class QueueMachine(RuleBasedStateMachine):
    runner: asyncio.Runner
    queue: Queue
    clock: FakeClock

    def run(self, coro):
        return self.runner.run(coro)

    @initialize()
    def reset(self):
        db = self.queue.db
        for sql in ("DELETE FROM events", "DELETE FROM jobs", "DELETE FROM batches",
                    "UPDATE queue_state SET paused = FALSE"):
            self.run(db.execute(sql))
        self.ref = Reference(SETTINGS)
        self.leases = []
        self.batches = []
        self.pause_events = []
        self.first_seq = self.run(self.queue.last_event_seq())

    @rule(submitter=st.sampled_from(["alice", "bob", "carol"]),
          priority=st.sampled_from([Priority.HIGH, Priority.NORMAL, Priority.NORMAL]),
          affinities=st.lists(st.sampled_from([None, "m1", "m2"]), min_size=1, max_size=4),
          delay=st.sampled_from([0.0, 0.0, 0.0, 7.0]),
          key=st.sampled_from([None, None, "k1", "k2"]))
    def enqueue(self, submitter, priority, affinities, delay, key):
        now = self.clock.now
        expect = self.ref.check_enqueue(submitter, int(priority), len(affinities), now, key)
        sub = Submission("t", submitter,
                         [NewJob(i + 2, {"i": i}, a) for i, a in enumerate(affinities)],
                         priority=priority, idempotency_key=key, not_before=now + delay)
        try:
            result = self.run(self.queue.enqueue(sub))
        except QueueFull as e:
            assert expect == ("full", e.free)
            return
        if expect[0] == "existing":
            assert (not result.created, result.batch_id, result.jobs) == (True,) + expect[1:]
            return
        assert expect[0] == "new" and result.created
        rows = self.run(self.queue.db.fetch(
            "SELECT id, fair_rank FROM jobs WHERE batch_id = $1 ORDER BY id", result.batch_id))
        assert [r["fair_rank"] for r in rows] == [expect[1] + i for i in range(len(rows))]
        self.ref.add(result.batch_id, [r["id"] for r in rows], submitter, int(priority),
                     expect[1], affinities, now + delay, key)
        self.batches.append(result.batch_id)

    @rule(prefer=st.sampled_from([(), (), ("m1",), ("m2",), ("m1", "m2")]),
          owner=st.sampled_from(["w1", "w2"]), ahead=st.sampled_from([False, False, True]))
    def claim(self, prefer, owner, ahead):
        expected = self.ref.claim(self.clock.now, prefer, ahead)
        lease = self.run(self.queue.claim(owner, prefer, ahead=ahead))
        assert (lease and lease.job_id) == (expected and expected.id)
        if lease:
            assert lease.attempts == expected.attempts and lease.started == (not ahead)
            expected.token = lease.token
            self.leases.append(lease)

    @precondition(lambda self: any(not lease.started for lease in self.leases))
    @rule(data=st.data())
    def start(self, data):
        lease = data.draw(st.sampled_from([x for x in self.leases if not x.started]))
        expected = self.ref.start(lease.job_id, lease.token, self.clock.now)
        started = self.run(self.queue.start([lease]))
        assert bool(started) == expected
        if started:
            self.leases.append(started[0])

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def heartbeat(self, data):
        lease = data.draw(st.sampled_from(self.leases))
        expected = self.ref.heartbeat(lease.job_id, lease.token, self.clock.now)
        state = self.run(self.queue.heartbeat(lease))
        assert (state.held, state.cancel_requested) == expected

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def complete(self, data):
        lease = data.draw(st.sampled_from(self.leases))
        expected = self.ref.complete(lease.job_id, lease.token)
        assert self.run(self.queue.complete(lease, ["out.png"])) == expected

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), retry=st.booleans())
    def fail(self, data, retry):
        lease = data.draw(st.sampled_from(self.leases))
        expected = self.ref.fail(lease.job_id, lease.token, retry, self.clock.now)
        assert self.run(self.queue.fail(lease, "boom", retry=retry)) == expected

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def release(self, data):
        lease = data.draw(st.sampled_from(self.leases))
        expected = self.ref.release(lease.job_id, lease.token)
        assert self.run(self.queue.release(lease, "stopping")) == expected

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def hand_back(self, data):
        jobs = data.draw(st.lists(st.sampled_from(sorted(self.ref.jobs)), min_size=1,
                                  max_size=3, unique=True))
        expected = self.ref.hand_back(jobs)
        assert self.run(self.queue.hand_back(jobs, "operator")) == expected

    @precondition(lambda self: self.batches)
    @rule(data=st.data(), scope=st.sampled_from(["job", "batch", "submitter", "all"]))
    def cancel(self, data, scope):
        if scope == "job":
            target = data.draw(st.sampled_from(sorted(self.ref.jobs)))
            match, kwargs = (lambda j: j.id == target), {"job": target}
        elif scope == "batch":
            target = data.draw(st.sampled_from(self.batches))
            match, kwargs = (lambda j: j.batch == target), {"batch": target}
        elif scope == "submitter":
            target = data.draw(st.sampled_from(["alice", "bob", "carol"]))
            match, kwargs = (lambda j: j.submitter == target), {"submitter": target}
        else:
            match, kwargs = (lambda j: True), {"everything": True}
        expected = self.ref.cancel(match)
        result = self.run(self.queue.cancel(**kwargs, by="test"))
        assert (result.ended, result.asked) == expected

    @rule()
    def pause(self):
        changed = self.run(self.queue.pause("admin"))
        for j in self.ref.jobs.values():
            if j.ahead:  # handed back at once
                self.ref.free(j)
        assert changed == (not self.ref.paused)
        if changed:
            self.pause_events.append("paused")
        self.ref.paused = True

    @rule()
    def resume(self):
        changed = self.run(self.queue.resume("admin"))
        assert changed == self.ref.paused
        if changed:
            self.pause_events.append("resumed")
        self.ref.paused = False

    @rule(seconds=st.sampled_from([0.5, 3.0, 6.0, 10.0, 11.0]))
    def time_passes(self, seconds):
        self.clock.advance(seconds)

    @invariant()
    def same_jobs(self):
        if not hasattr(self, "ref"):
            return
        rows = self.run(self.queue.db.fetch(
            "SELECT id, status, attempts, cancel_requested, fair_rank, lease_token FROM jobs "
            "ORDER BY id"))
        actual = [(r["id"], r["status"], r["attempts"], bool(r["cancel_requested"]),
                   r["status"] == "queued" and r["lease_token"] is not None) for r in rows]
        expected = [(j.id, j.status, j.attempts, j.cancel_requested, j.ahead)
                    for j in sorted(self.ref.jobs.values(), key=lambda j: j.id)]
        assert actual == expected

    def teardown(self):
        if not hasattr(self, "ref"):
            return
        events = self.run(self.queue.events_after(self.first_seq, 100_000))
        by_job = defaultdict(list)
        for e in events:
            if e.job_id is not None:
                by_job[e.job_id].append(e.kind)
        assert dict(by_job) == {j.id: j.events for j in self.ref.jobs.values() if j.events}
        assert [e.kind for e in events if e.kind in ("paused", "resumed")] == self.pause_events
        assert sum(e.kind == "submitted" for e in events) == len(self.batches)


@pytest.mark.slow
@pytest.mark.parametrize("examples", [int(os.environ.get("GENBOT_QUEUE_MODEL_EXAMPLES", "80"))])
def test_queue_matches_reference_model(db_url, examples):
    """(80 examples of 80 steps each, within the suite's budget; more: a longer hunt,
    GENBOT_QUEUE_MODEL_EXAMPLES=500.)"""
    runner = asyncio.Runner()
    clock = FakeClock()
    db = runner.run(Database(db_url).open())
    QueueMachine.runner = runner
    QueueMachine.clock = clock
    QueueMachine.queue = Queue(db, SETTINGS, clock=clock)
    try:
        run_state_machine_as_test(QueueMachine, settings=settings(
            max_examples=examples, stateful_step_count=80, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
    finally:
        runner.run(QueueMachine.queue.close())
        runner.close()
