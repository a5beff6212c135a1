"""The queue's conformance suite: every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from storage.db import Database
from storage.queue import LeaseState, NewJob, Priority, Queue, QueueFull, Status, Submission
from storage.records import KEPT, REJECTED, ActiveCounts
from tests.conftest import queue_settings


def sub(submitter="alice", n=1, *, priority=Priority.NORMAL, key=None, not_before=0.0,
        affinity=None, template="t"):
    jobs = [NewJob(row=i + 2, workflow={"prompt": f"{submitter}-{i}"},
                   affinity=affinity[i] if isinstance(affinity, list) else affinity)
            for i in range(n)]
    return Submission(template=template, submitter=submitter, jobs=jobs, priority=priority,
                      idempotency_key=key, not_before=not_before)


async def drain(queue: Queue, owner="w", prefer=()):
    """Claim and complete until nothing is claimable; returns the leases in order."""
    done = []
    while (lease := await queue.claim(owner, prefer)) is not None:
        assert await queue.complete(lease, [f"{lease.job_id}.png"]) == Status.SUCCEEDED
        done.append(lease)
    return done


# --- enqueue ------------------------------------------------------------------------

async def test_enqueue_stores_batch_and_jobs_whole(queue):
    result = await queue.enqueue(sub("alice", 3))
    assert result.created and result.jobs == 3
    batch = await queue.batch(result.batch_id)
    assert batch.template == "t" and batch.submitter == "alice" and batch.total_jobs == 3
    leases = await drain(queue)
    assert [lease.row for lease in leases] == [2, 3, 4]
    assert [lease.workflow for lease in leases] == [{"prompt": f"alice-{i}"} for i in range(3)]
    job = await queue.job(leases[0].job_id)
    assert job.status == "succeeded" and job.outputs == [f"{leases[0].job_id}.png"]


async def test_params_round_trip_unchanged(queue):
    nasty = {"prompt": 'say "hi"\n\\ {x} $y "}] 🎨 提示词', "n": 42, "f": 0.5, "b": True,
             "nested": {"list": [1, None, "x"]}}
    await queue.enqueue(Submission("t", "alice", [NewJob(2, nasty)]))
    lease = await queue.claim("w")
    assert lease.workflow == nasty


async def test_idempotency_key_returns_existing_batch(queue):
    first = await queue.enqueue(sub("alice", 2, key="slack:evt-1"))
    again = await queue.enqueue(sub("alice", 5, key="slack:evt-1"))
    assert again.batch_id == first.batch_id and not again.created and again.jobs == 2
    assert sum((await queue.counts())["queued"].values()) == 2


async def test_concurrent_identical_submissions_create_one_batch(db_url, clock):
    db = await Database(db_url).open()
    queue = Queue(db, queue_settings(), clock=clock)
    try:
        results = await asyncio.gather(*[queue.enqueue(sub("alice", 3, key="msg-42"))
                                         for _ in range(50)])
        assert len({r.batch_id for r in results}) == 1
        assert sum(r.created for r in results) == 1
        assert sum((await queue.counts())["queued"].values()) == 3
    finally:
        await queue.close()


async def test_oversize_submission_refused_whole(db_url, clock):
    db = await Database(db_url).open()
    queue = Queue(db, queue_settings(max_queue_size=10), clock=clock)
    try:
        await queue.enqueue(sub("alice", 7))
        with pytest.raises(QueueFull) as err:
            await queue.enqueue(sub("bob", 4))
        assert (err.value.requested, err.value.free, err.value.limit) == (4, 3, 10)
        assert "room for 3 more jobs" in str(err.value) and "has 4" in str(err.value)
        assert "nothing was queued" in str(err.value)
        counts = await queue.counts()
        assert sum(counts["queued"].values()) == 7  # not truncated, nothing of bob's
        assert await queue.enqueue(sub("bob", 3))  # exactly fits
        # Finished jobs free their slots.
        await drain(queue)
        assert await queue.enqueue(sub("carol", 10))
    finally:
        await queue.close()


async def test_empty_submission_is_an_error(queue):
    with pytest.raises(ValueError):
        await queue.enqueue(Submission("t", "alice", []))


# --- claim order --------------------------------------------------------------------

async def test_priority_classes_first(queue):
    await queue.enqueue(sub("alice", 2, priority=Priority.LOW))
    await queue.enqueue(sub("bob", 2, priority=Priority.NORMAL))
    await queue.enqueue(sub("carol", 1, priority=Priority.URGENT))
    await queue.enqueue(sub("dave", 1, priority=Priority.HIGH))
    order = [(lease.submitter, lease.priority) for lease in await drain(queue)]
    assert [p for _, p in order] == [Priority.URGENT, Priority.HIGH, Priority.NORMAL,
                                     Priority.NORMAL, Priority.LOW, Priority.LOW]


async def test_round_robin_between_submitters_fifo_within(queue):
    await queue.enqueue(sub("alice", 4))
    await queue.enqueue(sub("bob", 2))
    await queue.enqueue(sub("alice", 1))  # alice's second batch continues after her first
    await queue.enqueue(sub("carol", 1))
    leases = await drain(queue)
    assert [lease.submitter for lease in leases] == ["alice", "bob", "carol", "alice", "bob",
                                                     "alice", "alice", "alice"]
    alice = [lease.workflow["prompt"] for lease in leases if lease.submitter == "alice"]
    assert alice == ["alice-0", "alice-1", "alice-2", "alice-3", "alice-0"]
    assert [lease.batch_id for lease in leases if lease.submitter == "alice"] == sorted(
        lease.batch_id for lease in leases if lease.submitter == "alice")


async def test_a_batch_moved_to_the_front_goes_first_among_its_submitters_own_only(queue):
    """An admin moves alice's second batch ahead of her first: it takes her first turns,
    but the round-robin between submitters is exactly as before (bob's turns do not move);
    a job claimed ahead stays where it is; moving it back restores her FIFO."""
    first = (await queue.enqueue(sub("alice", 4))).batch_id
    await queue.enqueue(sub("bob", 2))
    second = (await queue.enqueue(sub("alice", 2))).batch_id
    await queue.enqueue(sub("carol", 1))
    assert await queue.move(batch=second, to="front") == 2
    assert await queue.move(batch=999, to="front") == 0
    with pytest.raises(ValueError):
        await queue.move(batch=second, to="sideways")
    leases = await drain(queue)
    # Each turn still holds one job of each submitter waiting (within a turn, the oldest
    # job first: alice's moved ones are newer than bob's).
    assert [lease.submitter for lease in leases] == ["bob", "alice", "carol", "bob", "alice",
                                                     "alice", "alice", "alice", "alice"]
    assert [lease.batch_id for lease in leases if lease.submitter == "alice"] == [
        second, second, first, first, first, first]


async def test_a_job_moved_to_the_back_waits_for_its_submitters_others(queue):
    batch = (await queue.enqueue(sub("alice", 3))).batch_id
    jobs = [j.id for j in await queue.batch_jobs(batch)]
    assert await queue.move(job=jobs[0], to="back") == 1
    assert [lease.job_id for lease in await drain(queue)] == [jobs[1], jobs[2], jobs[0]]
    assert await queue.move(job=jobs[0], to="front") == 0  # (not waiting any more)


async def test_newcomer_behind_a_big_batch_starts_within_a_few_claims(db_url, clock):
    db = await Database(db_url).open()
    queue = Queue(db, queue_settings(max_queue_size=2000), clock=clock)
    try:
        await queue.enqueue(sub("alice", 1000))
        for _ in range(37):  # alice's batch is under way
            await queue.complete(await queue.claim("w"))
        await queue.enqueue(sub("bob", 10))
        started = []
        for _ in range(20):
            lease = await queue.claim("w")
            started.append(lease.submitter)
            await queue.complete(lease)
        assert started.count("bob") == 10
        assert started == ["alice", "bob"] * 10
    finally:
        await queue.close()


async def test_not_before_is_respected(queue, clock):
    await queue.enqueue(sub("alice", 1, not_before=clock.now + 60))
    await queue.enqueue(sub("bob", 1))
    bob = await queue.claim("w")
    assert bob.submitter == "bob"
    await queue.complete(bob)
    assert await queue.claim("w") is None
    clock.advance(59)
    assert await queue.claim("w") is None
    clock.advance(1)
    assert (await queue.claim("w")).submitter == "alice"


async def test_affinity_preference_stays_within_the_submitters_turn(queue):
    await queue.enqueue(sub("alice", 4, affinity=["sd", "sdxl", "sd", "sdxl"]))
    await queue.enqueue(sub("bob", 2, affinity=["sdxl", "sdxl"]))
    await queue.enqueue(sub("vip", 1, affinity="sd", priority=Priority.HIGH))
    order = []
    while (lease := await queue.claim("w", prefer=["sdxl"])) is not None:
        order.append((lease.submitter, lease.affinity))
        await queue.complete(lease)
    # The higher class goes first even though its model is not the loaded one; then
    # alice's turn takes her sdxl job first, bob's turn is bob's, and so on.
    assert order == [("vip", "sd"), ("alice", "sdxl"), ("bob", "sdxl"), ("alice", "sdxl"),
                     ("bob", "sdxl"), ("alice", "sd"), ("alice", "sd")]


async def test_a_worker_takes_only_jobs_for_models_it_may_run(queue):
    await queue.enqueue(sub("alice", 3, affinity=["sdxl", "sd", None]))
    await queue.enqueue(sub("bob", 2, affinity=["flux", "sdxl"], priority=Priority.HIGH))
    small = []  # a worker with room for sd only: the head jobs (flux, sdxl) are not its
    while (lease := await queue.claim("small-gpu", only=["sd"])) is not None:
        small.append((lease.submitter, lease.affinity))
        await queue.complete(lease)
    assert small == [("alice", "sd"), ("alice", None)]
    big = []  # one that may run both takes the rest, its loaded model first in a turn
    while (lease := await queue.claim("big-gpu", prefer=["sdxl"], only=["sdxl", "flux"])) \
            is not None:
        big.append((lease.submitter, lease.affinity))
        await queue.complete(lease)
    assert big == [("bob", "sdxl"), ("bob", "flux"), ("alice", "sdxl")]  # sdxl loaded


async def test_another_engines_jobs_go_only_to_that_engines_workers(queue):
    """ComfyUI jobs ("comfyui:TEMPLATE") and diffusers jobs share one queue, order and
    fairness; each engine's workers take only their own, a ComfyUI worker only the
    templates its server can run."""
    await queue.enqueue(sub("alice", 4, affinity=["comfyui:portrait", "sdxl", None,
                                                  "comfyui:product"]))
    await queue.enqueue(sub("bob", 2, affinity=["comfyui:product", "comfyui:portrait"],
                            priority=Priority.HIGH))
    diffusers = []  # with no allow-list and with one: never a ComfyUI job
    while (lease := await queue.claim("gpu", prefer=["sdxl"])) is not None:
        diffusers.append((lease.submitter, lease.affinity))
        await queue.complete(lease)
    assert diffusers == [("alice", "sdxl"), ("alice", None)]
    assert await queue.claim("gpu-small", only=["sd"]) is None
    portrait = []  # a server with only the portrait template's nodes and models
    while (lease := await queue.claim("comfy-a", only=["comfyui:portrait"], engine=True)) \
            is not None:
        portrait.append((lease.submitter, lease.affinity))
        await queue.complete(lease)
    assert portrait == [("bob", "comfyui:portrait"), ("alice", "comfyui:portrait")]
    both = await queue.claim("comfy-b", only=["comfyui:portrait", "comfyui:product"],
                             engine=True)
    assert both is not None and (both.submitter, both.affinity) == ("bob", "comfyui:product")
    await queue.complete(both)
    with pytest.raises(ValueError):
        await queue.claim("comfy-c", engine=True)  # an engine names what it takes
    last = await queue.claim("comfy-c", only=["comfyui:product"], engine=True)
    assert last is not None and last.affinity == "comfyui:product"


async def test_affinity_groups_one_submitters_jobs_by_model(queue):
    models = ["a", "b", "c"] * 10
    await queue.enqueue(sub("alice", 30, affinity=models))
    loaded, loads = None, 0
    while (lease := await queue.claim("w", prefer=[loaded] if loaded else [])) is not None:
        if lease.affinity != loaded:
            loaded, loads = lease.affinity, loads + 1
        await queue.complete(lease)
    assert loads == 3


# --- leases, heartbeats, fencing ----------------------------------------------------

async def test_heartbeat_extends_lease(queue, clock):
    await queue.enqueue(sub("alice", 1))
    lease = await queue.claim("w1")
    for _ in range(5):
        clock.advance(8)  # lease is 10 s
        assert (await queue.heartbeat(lease)).held
    assert await queue.claim("w2") is None  # still w1's
    assert await queue.complete(lease) == Status.SUCCEEDED


async def test_expired_lease_reclaimed_counting_an_attempt(queue, clock):
    await queue.enqueue(sub("alice", 1))
    first = await queue.claim("w1")
    assert first.attempts == 1
    clock.advance(10)
    assert await queue.claim("w2") is None  # not yet expired: expiry is strictly after
    clock.advance(0.5)
    second = await queue.claim("w2")
    assert second.job_id == first.job_id and second.attempts == 2 and second.owner == "w2"
    # Fencing: the stale executor's heartbeat and completion change nothing.
    assert not (await queue.heartbeat(first)).held
    assert await queue.complete(first, ["stale.png"]) is None
    assert await queue.fail(first, "boom") is None
    assert await queue.complete(second, ["fresh.png"]) == Status.SUCCEEDED
    job = await queue.job(first.job_id)
    assert job.outputs == ["fresh.png"] and job.attempts == 2 and job.lease_owner == "w2"


async def test_a_dead_owners_jobs_come_back_without_waiting_out_the_lease(queue, clock):
    await queue.enqueue(sub("alice", 2))
    dead, alive = await queue.claim("host:41"), await queue.claim("host:42")
    assert await queue.owner_died("host:41") == 1  # its supervisor saw it exit
    clock.advance(0.001)
    again = await queue.claim("host:43")
    assert (again.job_id, again.attempts) == (dead.job_id, 2)
    assert not (await queue.heartbeat(dead)).held  # fenced, as after any lost lease
    assert (await queue.heartbeat(alive)).held  # another owner's lease is untouched
    assert await queue.owner_died("host:41") == 0  # nothing left to take back


async def test_poison_job_fails_after_max_attempts_and_queue_moves_on(queue, clock):
    await queue.enqueue(sub("alice", 1))
    poison = None
    for attempt in (1, 2, 3):  # max_attempts = 3; each executor dies holding the job
        lease = await queue.claim(f"doomed-{attempt}")
        poison = poison or lease.job_id
        assert (lease.job_id, lease.attempts) == (poison, attempt)
        clock.advance(11)
    await queue.enqueue(sub("bob", 1))
    assert (await queue.claim("w")).submitter == "bob"  # the queue moved on
    job = await queue.job(poison)
    assert job.status == "failed" and job.attempts == 3
    assert "lease expired" in job.error and "doomed-3" in job.error
    assert await queue.claim("w") is None


async def test_a_claim_that_sees_an_expired_lease_sweeps_it(queue, clock):
    await queue.enqueue(sub("alice", 1))
    lost = await queue.claim("crashed")
    await queue.enqueue(sub("bob", 1))
    clock.advance(11)
    # This claim takes bob's job in one statement and notices alice's lost lease...
    assert (await queue.claim("w1")).submitter == "bob"
    assert (await queue.job(lost.job_id)).status == "queued"
    # ...so the very next claim runs it again.
    again = await queue.claim("w2")
    assert (again.job_id, again.attempts) == (lost.job_id, 2)


async def test_failed_attempt_retries_with_backoff_then_fails(queue, clock):
    await queue.enqueue(sub("alice", 1))
    lease = await queue.claim("w")
    assert await queue.fail(lease, "CUDA hiccup") == Status.QUEUED
    clock.advance(4.9)  # first backoff 5 s
    assert await queue.claim("w") is None
    clock.advance(0.1)
    lease = await queue.claim("w")
    assert await queue.fail(lease, "again") == Status.QUEUED
    clock.advance(9.9)  # doubled: 10 s
    assert await queue.claim("w") is None
    clock.advance(0.1)
    lease = await queue.claim("w")
    assert lease.attempts == 3
    assert await queue.fail(lease, "third time") == Status.FAILED
    job = await queue.job(lease.job_id)
    assert job.status == "failed" and job.error == "third time"


async def test_non_retryable_failure_fails_at_once(queue):
    await queue.enqueue(sub("alice", 1))
    lease = await queue.claim("w")
    assert await queue.fail(lease, "bad input image", retry=False) == Status.FAILED


# --- cancel ---------------------------------------------------------------------------

async def test_cancel_queued_is_immediate_and_final(queue, clock):
    b = await queue.enqueue(sub("alice", 3))
    result = await queue.cancel(batch=b.batch_id, by="slack:U1")
    assert len(result.ended) == 3 and result.asked == []
    assert await queue.claim("w") is None
    job = await queue.job(result.ended[0])
    assert job.status == "canceled" and job.error == "canceled by slack:U1"
    again = await queue.cancel(batch=b.batch_id)
    assert again.ended == [] and again.asked == []


async def test_cancel_running_is_recorded_then_observed(queue, clock):
    await queue.enqueue(sub("alice", 1))
    lease = await queue.claim("w")
    result = await queue.cancel(job=lease.job_id, by="admin")
    assert result.asked == [lease.job_id] and result.ended == []
    state = await queue.heartbeat(lease)
    assert state.held and state.cancel_requested
    # The executor stops and reports it; the job ends canceled and is never retried.
    assert await queue.fail(lease, "stopped at step 3/20") == Status.CANCELED
    clock.advance(100)
    assert await queue.claim("w") is None
    assert (await queue.job(lease.job_id)).status == "canceled"


async def test_cancel_wins_over_a_late_completion_and_over_lease_expiry(queue, clock):
    await queue.enqueue(sub("alice", 2))
    a = await queue.claim("w1")
    await queue.cancel(job=a.job_id)
    assert await queue.complete(a, ["x.png"]) == Status.CANCELED
    b = await queue.claim("w2")
    await queue.cancel(job=b.job_id)
    clock.advance(11)  # w2 died after the cancel: the sweep ends the job canceled, no retry
    assert await queue.claim("w3") is None
    assert (await queue.job(b.job_id)).status == "canceled"


async def test_cancel_scopes(queue):
    a1 = await queue.enqueue(sub("alice", 2))
    a2 = await queue.enqueue(sub("alice", 1))
    b1 = await queue.enqueue(sub("bob", 2))
    c1 = await queue.enqueue(sub("carol", 2))
    first = await queue.claim("w")  # alice's first job, running
    job_only = await queue.cancel(job=first.job_id + 1)
    assert job_only.ended == [first.job_id + 1]
    by_submitter = await queue.cancel(submitter="alice")
    assert by_submitter.asked == [first.job_id] and len(by_submitter.ended) == 1
    by_batch = await queue.cancel(batch=b1.batch_id)
    assert len(by_batch.ended) == 2
    rest = await queue.cancel(everything=True)
    assert len(rest.ended) == 2 and rest.asked == []  # the running one was asked already
    with pytest.raises(ValueError):
        await queue.cancel(job=1, batch=2)
    progress = await queue.batch_progress(c1.batch_id)
    assert progress.counts == {"canceled": 2} and progress.done == 2
    assert a2 and a1


# --- pause ------------------------------------------------------------------------------

async def test_pause_holds_across_restart(db_url, clock):
    db = await Database(db_url).open()
    queue = Queue(db, queue_settings(), clock=clock)
    await queue.enqueue(sub("alice", 2))
    running = await queue.claim("w")
    assert await queue.pause("admin") is True
    assert await queue.pause("admin") is False
    assert await queue.claim("w") is None
    assert await queue.complete(running) == Status.SUCCEEDED  # the running job finishes
    await queue.close()

    db = await Database(db_url).open()  # a restart
    queue = Queue(db, queue_settings(), clock=clock)
    try:
        state = await queue.state()
        assert state.paused and state.changed_by == "admin"
        assert await queue.claim("w") is None
        await queue.enqueue(sub("bob", 1))  # submissions are still accepted while paused
        assert await queue.claim("w") is None
        assert await queue.resume("admin") is True
        assert (await queue.claim("w")).submitter == "alice"
    finally:
        await queue.close()


# --- queries ----------------------------------------------------------------------------

async def test_positions_counts_eta_and_progress(queue, clock):
    a = await queue.enqueue(sub("alice", 3))
    b = await queue.enqueue(sub("bob", 2))
    u = await queue.enqueue(sub("carol", 1, priority=Priority.URGENT))
    assert await queue.batch_jobs_ahead(u.batch_id) == 0
    assert await queue.batch_jobs_ahead(a.batch_id) == 1
    assert await queue.batch_jobs_ahead(b.batch_id) == 2  # alice-0 and the urgent one
    assert await queue.eta(3) is None  # nothing finished yet: no basis
    for _ in range(2):
        lease = await queue.claim("w")
        clock.advance(4)
        await queue.complete(lease)
    assert await queue.average_duration() == pytest.approx(4)
    counts = await queue.counts()
    assert counts["succeeded"] == {"urgent": 1, "normal": 1}
    assert counts["queued"] == {"normal": 4}
    progress = await queue.batch_progress(b.batch_id)
    assert progress.total == 2 and progress.counts == {"queued": 2}
    assert progress.jobs_ahead == 0  # bob's turn is next
    # bob's last job has alice-1 and bob-0 ahead, then itself: 4 jobs of 4 s.
    assert progress.eta_seconds == pytest.approx(12)
    job = (await queue.claim("w"))
    assert await queue.jobs_ahead(job.job_id) is None  # running, not queued
    assert await queue.active_counts() == ActiveCounts(queued=3, running=1)
    assert await queue.batch_progress(999) is None


async def test_jobs_are_found_by_row_swept_value_and_template_version(queue):
    """A gallery's narrower filters: the sheet's row, a swept value (a number however it
    was typed: 6, 6.0; a comparison's side), the template version the batch ran."""
    def swept(row: int, steps: int, guidance: float, variant: str) -> NewJob:
        return NewJob(row, {"axes": {"steps": steps, "guidance": guidance,
                                     "variant": variant}})
    v1 = await queue.enqueue(Submission("t", "alice", [swept(2, 20, 6.0, "A"),
                                                       swept(3, 30, 7.5, "B")],
                                        meta={"version": 1}))
    v2 = await queue.enqueue(Submission("t", "alice", [swept(2, 20, 6.0, "B")],
                                        meta={"version": 2}))
    a, b = (j.id for j in await queue.batch_jobs(v1.batch_id))
    (c,) = (j.id for j in await queue.batch_jobs(v2.batch_id))

    async def found(**filters) -> list[int]:
        jobs = sorted(j.id for j in await queue.page_jobs(**filters))
        assert await queue.count_jobs(**filters) == len(jobs)
        return jobs
    assert await found(row=2) == [a, c]
    assert await found(axis=("steps", "20")) == [a, c]
    assert await found(axis=("guidance", "6")) == await found(axis=("guidance", "6.0")) == [a, c]
    assert await found(axis=("guidance", "7.5")) == [b]
    assert await found(axis=("variant", "B")) == [b, c]
    assert await found(axis=("variant", "B"), version=2) == [c]
    assert await found(version=1, row=3) == [b]
    assert await found(axis=("seed", "1")) == [] and await found(axis=("steps", "x")) == []
    assert await found(axis=("it's", "1")) == []  # a key is a parameter, never SQL


async def test_pages_of_jobs_and_batches_by_cursor_and_offset(queue):
    a = await queue.enqueue(sub("alice", 3))
    b = await queue.enqueue(sub("bob", 2))
    await drain(queue)  # all five succeed
    c = await queue.enqueue(sub("alice", 2))
    ids = [j.id for j in await queue.page_jobs(limit=100)]
    assert ids == sorted(ids, reverse=True) and len(ids) == 7
    assert [j.id for j in await queue.page_jobs(offset=2, limit=3)] == ids[2:5]
    assert [j.id for j in await queue.page_jobs(before=ids[2], limit=3)] == ids[3:6]
    assert await queue.page_jobs(offset=50) == []
    assert await queue.count_jobs() == 7
    assert await queue.count_jobs(submitter="alice") == 5
    assert await queue.count_jobs(status="queued") == 2
    assert await queue.count_jobs(batch=b.batch_id, status="succeeded") == 2
    # By rating: kept, rejected, or not rated (NULL, unfinished jobs too).
    assert await queue.rate(ids[2], KEPT, "vic") and await queue.rate(ids[4], KEPT, "vic")
    assert await queue.rate(ids[3], REJECTED, "vic")
    assert [j.id for j in await queue.page_jobs(rating="kept")] == [ids[2], ids[4]]
    assert [j.id for j in await queue.page_jobs(rating="kept", offset=1)] == [ids[4]]
    assert [j.id for j in await queue.page_jobs(rating="rejected")] == [ids[3]]
    unrated = [ids[0], ids[1], ids[5], ids[6]]
    assert [j.id for j in await queue.page_jobs(rating="unrated")] == unrated
    assert [j.id for j in await queue.page_jobs(rating="unrated", status="queued")] == ids[:2]
    assert [j.id for j in await queue.page_jobs(rating="kept", submitter="bob")] == [ids[2]]
    assert (await queue.count_jobs(rating="kept"), await queue.count_jobs(rating="rejected"),
            await queue.count_jobs(rating="unrated")) == (2, 1, 4)
    assert await queue.count_jobs(rating="kept", batch=a.batch_id) == 1  # ids[4]; ids[2] bob's
    with pytest.raises(ValueError):
        await queue.page_jobs(rating="loved")
    batches = await queue.page_batches()
    assert [(x.batch.id, x.batch.total_jobs, x.counts) for x in batches] == [
        (c.batch_id, 2, {"queued": 2}), (b.batch_id, 2, {"succeeded": 2}),
        (a.batch_id, 3, {"succeeded": 3})]
    assert [x.batch.id for x in await queue.page_batches(before=c.batch_id, limit=1)] == \
        [b.batch_id]
    assert [x.batch.id for x in await queue.page_batches(submitter="alice")] == [c.batch_id,
                                                                               a.batch_id]
    assert await queue.page_batches(before=a.batch_id) == []


async def test_event_log_records_every_transition_in_order(queue, clock):
    b = await queue.enqueue(sub("alice", 2))
    lease = await queue.claim("w")
    await queue.fail(lease, "oops")
    await queue.cancel(batch=b.batch_id, by="me")
    await queue.pause("me")
    await queue.resume("me")
    events = await queue.events_after(0)
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    kinds = [(e.kind, e.job_id) for e in events]
    j1, j2 = lease.job_id, lease.job_id + 1
    assert kinds[:3] == [("submitted", None), ("running", j1), ("queued", j1)]
    assert sorted(kinds[3:5]) == [("canceled", j1), ("canceled", j2)]  # one statement, any order
    assert kinds[5:] == [("paused", None), ("resumed", None)]
    assert events[0].data["jobs"] == 2 and events[0].batch_id == b.batch_id
    assert events[2].data["error"] == "oops" and events[2].data["from"] == "running"
    # Consumers resume from their last sequence number.
    assert await queue.events_after(events[3].seq) == events[4:]
    assert await queue.last_event_seq() == events[-1].seq


async def test_cancel_request_on_running_job_is_an_event(queue):
    await queue.enqueue(sub("alice", 1))
    lease = await queue.claim("w")
    await queue.cancel(job=lease.job_id)
    kinds = [e.kind for e in await queue.events_after(0)]
    assert kinds == ["submitted", "running", "cancel_requested"]


async def test_wait_for_work_wakes_on_enqueue_in_process(queue):
    assert await queue.wait_for_work(0.01) is True  # first call: starts listening
    waiter = asyncio.create_task(queue.wait_for_work(30))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await queue.enqueue(sub("alice", 1))
    assert await asyncio.wait_for(waiter, 10) is True
    assert await queue.claim("w") is not None


# --- what the executor needs: micro-batches, progress, cancel polling, hand-back ------

async def test_claim_followers_takes_the_batchs_next_jobs_for_the_same_model(queue):
    await queue.enqueue(sub("alice", 6, affinity=["sd", "sd", "xl", "sd", "sd", "sd"]))
    await queue.enqueue(sub("bob", 2, affinity="sd"))
    first = await queue.claim("w")
    more = await queue.claim_followers(first, 3)
    assert [m.row for m in more] == [3, 5, 6]  # alice's next "sd" jobs, in order; not bob's
    assert all(m.batch_id == first.batch_id and m.owner == "w" for m in more)
    for lease in [first, *more]:  # each is a real lease, fenced by its token
        assert (await queue.heartbeat(lease)).held
        assert await queue.complete(lease, ["x.png"]) == Status.SUCCEEDED
    assert await queue.claim_followers(first, 0) == []


async def test_claim_followers_respects_pause_and_not_before(queue, clock):
    await queue.enqueue(sub("alice", 3, affinity="sd"))
    first = await queue.claim("w")
    await queue.pause("admin")
    assert await queue.claim_followers(first, 3) == []
    await queue.resume("admin")
    await queue.enqueue(sub("alice", 2, affinity="sd", not_before=clock() + 60))
    assert len(await queue.claim_followers(first, 9)) == 2  # the later batch is not this one


async def test_progress_is_an_event_only_while_the_lease_is_held(queue, clock):
    await queue.enqueue(sub("alice", 1))
    lease = await queue.claim("w")
    assert await queue.progress(lease, {"node": "gen", "step": 3, "total": 8})
    clock.advance(60)
    other = await queue.claim("w2")  # the lease expired: w2 took the job over
    assert other.job_id == lease.job_id
    assert not await queue.progress(lease, {"node": "gen", "step": 4, "total": 8})
    events = [e for e in await queue.events_after(0) if e.kind == "progress"]
    assert [(e.job_id, e.data["step"]) for e in events] == [(lease.job_id, 3)]


async def test_cancels_asked_lists_the_owners_running_jobs_to_stop(queue):
    await queue.enqueue(sub("alice", 3))
    a, b = await queue.claim("w"), await queue.claim("w")
    c = await queue.claim("other")
    assert await queue.cancels_asked("w") == set()
    await queue.cancel(job=a.job_id, by="admin")
    await queue.cancel(job=c.job_id, by="admin")
    assert await queue.cancels_asked("w") == {a.job_id}
    assert await queue.fail(a, "canceled", retry=False) == Status.CANCELED
    assert await queue.cancels_asked("w") == set()
    assert b.job_id not in await queue.cancels_asked("other")


async def test_release_hands_the_job_back_without_using_an_attempt(queue):
    await queue.enqueue(sub("alice", 2))
    lease = await queue.claim("w")
    assert await queue.release(lease, "executor stopped") == Status.QUEUED
    again = await queue.claim("w")
    assert again.job_id == lease.job_id and again.attempts == 1
    assert await queue.release(lease, "stale") is None  # fenced: the old token is gone
    await queue.cancel(job=again.job_id, by="admin")
    assert await queue.release(again, "executor stopped") == Status.CANCELED
    assert len(await queue.batch_jobs(lease.batch_id)) == 2


async def test_retention_forgets_only_batches_wholly_finished_before_the_cutoff(queue, clock):
    old = (await queue.enqueue(sub("alice", 2))).batch_id
    lingering = (await queue.enqueue(sub("bob", 2))).batch_id
    for lease in [await queue.claim("exec") for _ in range(4)]:
        if (lease.batch_id, lease.row) != (lingering, 3):  # bob's second job keeps running
            await queue.complete(lease, [f"outputs/batch_{lease.batch_id}/{lease.row}.png"])
    clock.advance(10 * 86400)
    recent = (await queue.enqueue(sub("carol", 1))).batch_id
    await drain(queue)  # bob's job ends only now (its lease long expired), then carol's
    assert await queue.forget_finished(clock() - 7 * 86400) == [old]
    assert await queue.batch(old) is None and await queue.batch_jobs(old) == []
    assert [e for e in await queue.events_after(0) if e.batch_id == old] == []
    assert await queue.batch(lingering) is not None and await queue.batch(recent) is not None
    assert await queue.forget_finished(clock() - 7 * 86400) == []


async def test_event_readers_hear_new_events_from_another_connection(db_url, clock):
    """PostgreSQL rings every reader when anyone writes an event (a worker on another
    host); SQLite readers are told nothing and poll."""
    writer = Queue(await Database(db_url).open(), queue_settings(), clock=clock)
    reader = Queue(await Database(db_url).open(), queue_settings(), clock=clock)
    try:
        bell = reader.bell
        assert await bell.wait(bell.rung, 0.01) is bell.live  # first wait: starts listening
        seen = bell.rung
        if not bell.live:
            assert await bell.wait(seen, 0.05) is False
            return
        waiting = [asyncio.create_task(bell.wait(seen, 30)) for _ in range(3)]
        await asyncio.sleep(0.05)
        await writer.enqueue(sub("alice", 1))
        assert await asyncio.gather(*waiting) == [True] * 3  # rung, not timed out
        assert await bell.wait(seen, 30) is True  # a ring since `seen` is not missed
        assert [e.kind for e in await reader.events_after(0)] == ["submitted"]
    finally:
        await writer.close()
        await reader.close()


async def test_counts_are_kept_by_the_database_through_every_transition(queue, clock):
    """The kept counts (migration 0012) always equal counting the jobs themselves."""
    async def truth():
        out = {s.value: {} for s in Status}
        for row in await queue.db.fetch(
                "SELECT status, priority, COUNT(*) AS n FROM jobs GROUP BY status, priority"):
            out[row["status"]][Priority(row["priority"]).label] = row["n"]
        return out

    first = await queue.enqueue(sub("alice", 40))
    await queue.enqueue(sub("bob", 3, priority=Priority.URGENT))
    assert await queue.counts() == await truth()
    leases = [await queue.claim("w") for _ in range(6)]
    await queue.complete(leases[0])
    await queue.fail(leases[1], "boom", retry=False)
    await queue.fail(leases[2], "again later")  # back to queued
    await queue.cancel(job=leases[3].job_id)
    assert await queue.counts() == await truth()
    await queue.cancel(batch=first.batch_id)
    for lease in leases[4:]:
        await queue.complete(lease)
    clock.advance(10_000)
    assert await queue.counts() == await truth()
    await queue.forget_finished(clock() + 1)
    counts = await queue.counts()
    assert counts == await truth()
    assert all(n > 0 for by_priority in counts.values() for n in by_priority.values())


async def test_a_waker_leaves_no_empty_folder_behind(tmp_path):
    """Every process listening on a database shares one folder of sockets; the last to
    close removes it (an hour of trying things once left dozens behind)."""
    from storage.wakeup import SocketWaker
    one, two = SocketWaker(tmp_path / "q.db"), SocketWaker(tmp_path / "q.db")
    await one.listen()
    await two.listen()
    assert one.folder == two.folder and len(list(one.folder.iterdir())) == 2
    await one.close()
    assert two.folder.is_dir()  # the other is still listening
    await two.close()
    assert not two.folder.exists()


async def test_a_batchs_models_are_read_without_its_jobs(queue):
    b = await queue.enqueue(sub("alice", 3, affinity=["sdxl", None, "sd15"]))
    assert await queue.batch_models(b.batch_id) == ["sd15", "sdxl"]


# --- claiming ahead -------------------------------------------------------------------

async def test_a_job_claimed_ahead_waits_leased_and_others_pass_it_by(queue):
    await queue.enqueue(sub("alice", 3))
    current = await queue.claim("w1")
    ahead = await queue.claim("w1", ahead=True)
    assert not ahead.started and ahead.row == current.row + 1
    job = await queue.job(ahead.job_id)
    assert (job.status, job.attempts, job.lease_owner) == ("queued", 0, "w1")
    assert (await queue.active_counts()).running == 1  # it waits: counts say so
    other = await queue.claim("w2")  # another executor passes it by
    assert other.row == ahead.row + 1
    (started,) = await queue.start([ahead])
    assert started.started and started.attempts == 1
    job = await queue.job(ahead.job_id)
    assert (job.status, job.attempts, job.lease_owner) == ("running", 1, "w1")
    assert await queue.complete(started, ["a.png"]) == Status.SUCCEEDED
    kinds = [e.kind for e in await queue.events_after(0) if e.job_id == ahead.job_id]
    assert kinds == ["running", "succeeded"]  # claiming ahead is no transition


async def test_claiming_ahead_keeps_claim_order(db_url, clock):
    """Executors claiming ahead take jobs in exactly the order plain claims would."""
    orders = []
    for ahead in (False, True):
        db = await Database(db_url).open()
        await db.execute("DELETE FROM jobs")
        queue = Queue(db, queue_settings(), clock=clock)
        await queue.enqueue(sub("alice", 6, priority=Priority.LOW))
        await queue.enqueue(sub("bob", 3))
        await queue.enqueue(sub("carol", 2, priority=Priority.HIGH))
        order, held = [], None
        while True:
            if ahead:
                nxt = await queue.claim("w", ahead=True)
                if held is not None:
                    await queue.complete(held)
                if nxt is None:
                    break
                (held,) = await queue.start([nxt])
            else:
                held = await queue.claim("w")
                if held is None:
                    break
                await queue.complete(held)
            order.append((held.submitter, held.row))
        orders.append(order)
        await queue.close()
    assert orders[0] == orders[1] and len(orders[0]) == 11


async def test_cancel_ends_a_job_claimed_ahead_at_once(queue):
    await queue.enqueue(sub("alice", 2))
    await queue.claim("w")
    ahead = await queue.claim("w", ahead=True)
    result = await queue.cancel(job=ahead.job_id, by="admin")
    assert result.ended == [ahead.job_id] and result.asked == []
    job = await queue.job(ahead.job_id)
    assert (job.status, job.attempts, job.lease_owner) == ("canceled", 0, None)
    assert await queue.start([ahead]) == []  # the executor learns it is gone
    assert not (await queue.heartbeat_all([ahead])).states[ahead.key].held


async def test_pause_hands_jobs_claimed_ahead_back_at_once(queue):
    await queue.enqueue(sub("alice", 2))
    running = await queue.claim("w")
    ahead = await queue.claim("w", ahead=True)
    assert await queue.pause(by="admin")
    job = await queue.job(ahead.job_id)
    assert (job.status, job.attempts, job.lease_owner) == ("queued", 0, None)
    assert await queue.start([ahead]) == []  # paused: nothing starts
    assert (await queue.heartbeat(running)).held  # the running one finishes
    assert await queue.resume(by="admin")
    again = await queue.claim("w2")
    assert (again.job_id, again.attempts) == (ahead.job_id, 1)


async def test_start_is_refused_when_paused_after_a_racing_claim_ahead(queue):
    await queue.enqueue(sub("alice", 1))
    ahead = await queue.claim("w", ahead=True)
    await queue.db.execute("UPDATE queue_state SET paused = TRUE, changed_at = 1 WHERE id = 1")
    assert await queue.start([ahead]) == []
    job = await queue.job(ahead.job_id)
    assert (job.status, job.lease_owner) == ("queued", None)  # the claim was dropped too


async def test_a_claim_ahead_left_to_expire_comes_back_without_an_attempt(queue, clock):
    await queue.enqueue(sub("alice", 1))
    ahead = await queue.claim("crashed", ahead=True)
    clock.advance(10.5)
    again = await queue.claim("w2")
    assert (again.job_id, again.attempts) == (ahead.job_id, 1)
    assert await queue.start([ahead]) == []  # fenced: the stale claim starts nothing
    assert (await queue.job(ahead.job_id)).lease_owner == "w2"


async def test_a_dead_owners_claims_ahead_come_back_at_once(queue, clock):
    await queue.enqueue(sub("alice", 2))
    running = await queue.claim("host:41")
    ahead = await queue.claim("host:41", ahead=True)
    assert await queue.owner_died("host:41") == 2
    clock.advance(0.001)
    first, second = await queue.claim("host:43"), await queue.claim("host:43")
    assert (first.job_id, first.attempts) == (running.job_id, 2)  # it had started
    assert (second.job_id, second.attempts) == (ahead.job_id, 1)  # it had not


async def test_poison_job_does_not_use_up_the_attempts_of_the_job_claimed_behind_it(queue,
                                                                                    clock):
    await queue.enqueue(sub("alice", 2))
    for attempt in (1, 2, 3):  # each executor dies running the first, the second ahead
        poison = await queue.claim(f"doomed-{attempt}")
        innocent = await queue.claim(f"doomed-{attempt}", ahead=True)
        assert poison.attempts == attempt and innocent.attempts == 0
        clock.advance(11)
    survivor = await queue.claim("w")
    assert (survivor.job_id, survivor.attempts) == (innocent.job_id, 1)
    assert (await queue.job(poison.job_id)).status == "failed"


async def test_heartbeat_all_extends_every_lease_in_one_statement(queue, clock):
    await queue.enqueue(sub("alice", 3))
    a, b = await queue.claim("w"), await queue.claim("w")
    ahead = await queue.claim("w", ahead=True)
    for _ in range(3):
        clock.advance(8)
        states = (await queue.heartbeat_all([a, b, ahead])).states
        assert all(s.held for s in states.values())
    await queue.cancel(job=b.job_id, by="admin")
    states = (await queue.heartbeat_all([a, b, ahead])).states
    assert states[b.key].cancel_requested and not states[a.key].cancel_requested
    assert await queue.claim("w2") is None  # all three still held
    clock.advance(10.5)
    taken = await queue.claim("w2")  # sweeps the lapsed leases, takes one over
    states = (await queue.heartbeat_all([a, b, ahead])).states
    stale = next(x for x in (a, b, ahead) if x.job_id == taken.job_id)
    assert not states[stale.key].held


async def test_followers_claimed_ahead_start_with_their_head(queue):
    await queue.enqueue(sub("alice", 4, affinity="sd15"))
    head = await queue.claim("w", ahead=True)
    more = await queue.claim_followers(head, 2)
    assert [m.row for m in more] == [3, 4] and not any(m.started for m in more)
    assert [j.status for j in await queue.batch_jobs(head.batch_id)] == ["queued"] * 4
    started = await queue.start([head, *more])
    assert [s.row for s in started] == [2, 3, 4] and all(s.attempts == 1 for s in started)
    assert [j.status for j in await queue.batch_jobs(head.batch_id)] == \
        ["running", "running", "running", "queued"]


async def test_complete_and_claim_is_one_round_trip(queue):
    await queue.enqueue(sub("alice", 3))
    from storage.queue import Claim
    lease = await queue.claim("w")
    status, nxt = await queue.complete_and_claim(lease, ["1.png"], Claim("w"))
    assert status == Status.SUCCEEDED and nxt.started and nxt.row == lease.row + 1
    status, ahead = await queue.complete_and_claim(nxt, ["2.png"], Claim("w", ahead=True))
    assert status == Status.SUCCEEDED and not ahead.started
    assert (await queue.job(ahead.job_id)).status == "queued"
    # A lost lease records nothing, and the claim still happens.
    await queue.enqueue(sub("bob", 1))
    stale = await queue.claim("w")
    fresh = await queue.start([ahead])
    fenced = type(stale)(**{**stale.__dict__, "token": "stale"})
    status, taken = await queue.complete_and_claim(fenced, [], Claim("w"))
    assert status is None and taken is None  # nothing left to take
    assert (await queue.job(stale.job_id)).status == "running"
    assert await queue.complete(fresh[0]) == Status.SUCCEEDED
    assert [e.kind for e in await queue.events_after(0) if e.job_id == lease.job_id] == \
        ["running", "succeeded"]


async def test_complete_and_claim_keeps_affinity_preference_fair(queue):
    await queue.enqueue(sub("alice", 4, affinity=["a", "b", "a", "b"]))
    from storage.queue import Claim
    lease = await queue.claim("w", prefer=["a"])
    rows = [lease.row]
    while True:
        _, lease = await queue.complete_and_claim(lease, [], Claim("w", prefer=("a",)))
        if lease is None:
            break
        rows.append(lease.row)
    assert rows == [2, 4, 3, 5]  # the "a" jobs first, within alice's own turns


# --- leases an executor holds without knowing: handed back by its heartbeat ----------

async def test_a_second_job_under_a_reused_token_is_neither_started_nor_renewed(queue):
    """A claim sent again after its answer was lost takes a second job under the same
    token. Leases are fenced by job and token, so the first job is not started, renewed
    or handed back along with the one the executor knows of."""
    await queue.enqueue(sub("alice", 2))
    lost = await queue.claim("w", ahead=True)  # its answer never came...
    await queue.db.execute("UPDATE jobs SET lease_token = 't1' WHERE id = $1", lost.job_id)
    known = await queue.claim("w", ahead=True)  # ...the same claim sent again, same token
    await queue.db.execute("UPDATE jobs SET lease_token = 't1' WHERE id = $1", known.job_id)
    lost, known = (type(x)(**{**x.__dict__, "token": "t1"}) for x in (lost, known))
    assert lost.job_id != known.job_id
    renewal = await queue.heartbeat_all([known])
    assert renewal.states == {known.key: LeaseState(True, False)} and not renewal.handed_back
    (started,) = await queue.start([known])
    assert started.job_id == known.job_id
    lost_job = await queue.job(lost.job_id)  # not started with it, but still leased
    assert (lost_job.status, lost_job.attempts, lost_job.lease_owner) == ("queued", 0, "w")
    assert (await queue.heartbeat_all([started], owner="w")).handed_back == [lost.job_id]


async def test_a_start_sent_again_after_its_answer_was_lost_finds_its_jobs_started(queue):
    """(Found by tests/test_loop_model.py.) The first start committed, its answer lost; the
    same start again must not drop the jobs it started: they are the executor's to run."""
    await queue.enqueue(sub("alice", 3, affinity="m"))
    head = await queue.claim("w", ahead=True)
    group = [head, *await queue.claim_followers(head, 2)]
    first = await queue.start(group)  # (its answer lost on the way)
    again = await queue.start(group)
    assert [(x.job_id, x.attempts, x.started) for x in again] == \
        [(x.job_id, 1, True) for x in first]
    assert [j.status for j in await queue.batch_jobs(head.batch_id)] == ["running"] * 3
    assert (await queue.heartbeat_all(again, owner="w")).handed_back == []


async def test_the_heartbeat_hands_back_what_its_executor_does_not_know_it_holds(queue):
    await queue.enqueue(sub("alice", 5))
    known = await queue.claim("w")
    lost_running = await queue.claim("w")  # answers lost: the executor never saw them
    lost_ahead = await queue.claim("w", ahead=True)
    other = await queue.claim("w2")  # another executor's: never touched
    renewal = await queue.heartbeat_all([known], owner="w")
    assert renewal.states[known.key].held
    assert renewal.handed_back == sorted([lost_running.job_id, lost_ahead.job_id])
    running = await queue.job(lost_running.job_id)
    assert (running.status, running.attempts, running.lease_owner) == ("queued", 0, None)
    assert "held it without knowing" in running.error
    ahead = await queue.job(lost_ahead.job_id)
    assert (ahead.status, ahead.attempts, ahead.lease_owner) == ("queued", 0, None)
    assert (await queue.job(other.job_id)).lease_owner == "w2"
    assert (await queue.job(known.job_id)).status == "running"
    ahead = await queue.claim("w", ahead=True)  # known: renewed like any other
    renewal = await queue.heartbeat_all([known, ahead], owner="w")
    assert renewal.handed_back == [] and renewal.states[ahead.key].held
    # Nothing held at all (an executor leaving): everything of its goes back.
    renewal = await queue.heartbeat_all([], owner="w")
    assert renewal.handed_back == sorted([known.job_id, ahead.job_id])
    kinds = [e.kind for e in await queue.events_after(0) if e.job_id == lost_running.job_id]
    assert kinds == ["running", "queued"]  # one run given back, as a release is


async def test_a_lease_held_without_knowing_with_a_cancel_asked_ends_canceled(queue):
    await queue.enqueue(sub("alice", 1))
    lost = await queue.claim("w")
    await queue.cancel(job=lost.job_id, by="admin")
    assert (await queue.heartbeat_all([], owner="w")).handed_back == [lost.job_id]
    job = await queue.job(lost.job_id)
    assert (job.status, job.attempts) == ("canceled", 1)


async def test_leased_jobs_are_listed_by_how_long_they_showed_no_sign_of_life(queue, clock):
    await queue.enqueue(sub("alice", 3))
    running = await queue.claim("w")
    clock.advance(3)
    ahead = await queue.claim("w", ahead=True)
    busy = await queue.claim("w2")
    clock.advance(5)
    assert await queue.progress(busy, {"step": 1})  # a sign of life
    clock.advance(2)
    idle = {j.id: (j.status, j.idle_seconds, j.lease_owner) for j in await queue.leased_idle()}
    assert idle == {running.job_id: ("running", 10.0, "w"),
                    ahead.job_id: ("queued", 7.0, "w"), busy.job_id: ("running", 2.0, "w2")}
    assert [j.id for j in await queue.leased_idle()] == [running.job_id, ahead.job_id,
                                                          busy.job_id]
    assert (await queue.leased_idle())[1].ahead
    # A stale progress event (a lost lease) is no sign of life of the job's new run.
    stale = type(busy)(**{**busy.__dict__, "token": "gone"})
    clock.advance(0.5)
    assert not await queue.progress(stale, {"step": 9})
    assert {j.id: j.idle_seconds for j in await queue.leased_idle()}[busy.job_id] == 2.5


async def test_an_operator_hands_back_stuck_jobs_and_their_holder_is_fenced(queue):
    await queue.enqueue(sub("alice", 3))
    running = await queue.claim("w")
    ahead = await queue.claim("w", ahead=True)
    assert await queue.hand_back([running.job_id, ahead.job_id, 999], "handed back by ops") \
        == sorted([running.job_id, ahead.job_id])
    job = await queue.job(running.job_id)
    assert (job.status, job.attempts, job.lease_owner, job.error) == \
        ("queued", 0, None, "handed back by ops")
    assert (await queue.job(ahead.job_id)).lease_owner is None
    assert not (await queue.heartbeat_all([running])).states[running.key].held
    assert await queue.complete(running, ["late.png"]) is None  # the old run is fenced
    assert await queue.hand_back([running.job_id], "again") == []  # not leased: nothing
    again = await queue.claim("w2")
    assert (again.job_id, again.attempts) == (running.job_id, 1)


async def test_progress_of_several_jobs_in_one_statement(queue, clock):
    await queue.enqueue(sub("alice", 2))
    a, b = await queue.claim("w"), await queue.claim("w")
    recorded = await queue.progress_all([(a, {"step": 1}, 100.0), (b, {"step": 1}, 100.5),
                                         (a, {"step": 2}, 101.0)])
    assert recorded == 3
    stale = type(b)(**{**b.__dict__, "token": "gone"})
    assert await queue.progress_all([(stale, {"step": 9}, 102.0)]) == 0
    progress = [(e.job_id, e.data["step"], e.at) for e in await queue.events_after(0)
                if e.kind == "progress"]
    assert progress == [(a.job_id, 1, 100.0), (b.job_id, 1, 100.5), (a.job_id, 2, 101.0)]


# --- placement: what an autoscaler sizes pools by ----------------------------------

async def test_placement_counts_the_work_each_kind_of_executor_could_take(db_url):
    import time
    db = await Database(db_url).open()
    queue = Queue(db, queue_settings(), clock=time.time)
    try:
        assert await queue.placement() == []
        await queue.enqueue(sub("alice", 3, affinity=["sd15", "sd15", None]))
        await queue.enqueue(sub("bob", 2, affinity="comfyui:portrait", template="portrait"))
        await queue.enqueue(sub("carol", 1, affinity="sdxl", not_before=time.time() + 3600))
        running = await queue.claim("gpu1", only=["sd15"])
        ahead = await queue.claim("gpu1", only=["sd15"], ahead=True)
        assert running and ahead and {running.affinity, ahead.affinity} <= {"sd15", None}
        await asyncio.sleep(0.05)
        rows = {(p.engine, p.affinity): p for p in await queue.placement()}
        assert set(rows) == {("diffusers", "sd15"), ("diffusers", ""), ("diffusers", "sdxl"),
                             ("comfyui", "portrait")}
        by = {key: (p.ready, p.ahead, p.running, p.delayed) for key, p in rows.items()}
        assert by[("comfyui", "portrait")] == (2, 0, 0, 0)
        assert by[("diffusers", "sdxl")] == (0, 0, 0, 1)
        assert sum(by[k][i] for k in (("diffusers", "sd15"), ("diffusers", ""))
                   for i in range(3)) == 3  # 1 ready, 1 ahead, 1 running, over the two
        assert by[("diffusers", "sd15")][2] + by[("diffusers", "")][2] == 1
        assert by[("diffusers", "sd15")][1] + by[("diffusers", "")][1] == 1
        assert 0.05 <= rows[("comfyui", "portrait")].oldest_ready_seconds < 60
        assert rows[("diffusers", "sdxl")].oldest_ready_seconds == 0  # none ready
        await queue.pause("admin")  # nothing can be taken: nothing to scale up for
        paused = {(p.engine, p.affinity): p.ready for p in await queue.placement()}
        assert set(paused.values()) == {0}
    finally:
        await queue.close()


# --- batched claims and completions ----------------------------------------------------

async def test_claim_many_takes_jobs_in_claim_order_in_one_statement(queue):
    await queue.enqueue(sub("alice", 3))
    await queue.enqueue(sub("bob", 2))
    await queue.enqueue(sub("zoe", 1, priority=Priority.HIGH))
    first = await queue.claim_many("w", 4)
    assert [lease.submitter for lease in first] == ["zoe", "alice", "bob", "alice"]
    assert len({lease.token for lease in first}) == 1  # one lease for the group
    rest = await queue.claim_many("w2", 10)
    assert [lease.submitter for lease in rest] == ["bob", "alice"]
    assert await queue.claim_many("w3", 10) == []
    jobs = {lease.job_id: await queue.job(lease.job_id) for lease in first + rest}
    assert {(j.status, j.attempts) for j in jobs.values()} == {("running", 1)}


async def test_claim_many_keeps_placement_and_the_pause(queue):
    await queue.enqueue(sub("alice", 4, affinity=["sd15", "sdxl", None, "comfyui:portrait"]))
    taken = await queue.claim_many("gpu", 10, only=["sd15"])
    assert sorted(str(lease.affinity) for lease in taken) == ["None", "sd15"]
    assert [lease.affinity for lease in await queue.claim_many(
        "cf", 10, only=["comfyui:portrait"], engine=True)] == ["comfyui:portrait"]
    await queue.pause("admin")
    assert await queue.claim_many("any", 10) == []
    await queue.resume("admin")
    assert [lease.affinity for lease in await queue.claim_many("any", 10)] == ["sdxl"]


async def test_complete_many_is_fenced_per_lease_and_logs_each_end(queue, clock):
    await queue.enqueue(sub("alice", 3))
    leases = await queue.claim_many("w", 3)
    await queue.cancel(job=leases[1].job_id, by="admin")  # asked while it runs
    clock.advance(6)
    assert (await queue.heartbeat(leases[2])).held  # only the last job's lease renewed
    clock.advance(6)  # the others expire; another executor takes the first one back
    again = await queue.claim("w2")
    assert again is not None and again.job_id == leases[0].job_id
    assert (await queue.job(leases[1].job_id)).status == "canceled"
    ended = await queue.complete_many([(lease, [f"{lease.job_id}.png"]) for lease in leases])
    assert ended == {leases[2].job_id: Status.SUCCEEDED}
    assert (await queue.job(leases[0].job_id)).status == "running"  # w2's now, untouched
    done = await queue.job(leases[2].job_id)
    assert done.outputs == [f"{leases[2].job_id}.png"]
    kinds = [(e.job_id, e.kind) for e in await queue.events_after(0) if e.job_id]
    assert kinds.count((leases[2].job_id, "succeeded")) == 1


async def test_complete_many_and_claim_is_one_round_trip_for_both(queue):
    await queue.enqueue(sub("alice", 5))
    leases = await queue.claim_many("w", 2)
    ended, more = await queue.complete_many_and_claim(
        [(lease, ["x.png"]) for lease in leases], "w", 2)
    assert ended == {lease.job_id: Status.SUCCEEDED for lease in leases}
    assert len(more) == 2 and {lease.job_id for lease in more}.isdisjoint(ended)
    ended, last = await queue.complete_many_and_claim([(m, []) for m in more], "w", 2)
    assert set(ended) == {m.job_id for m in more} and len(last) == 1
    ended, none = await queue.complete_many_and_claim([(last[0], [])], "w", 2)
    assert list(ended) == [last[0].job_id] and none == []
    jobs = await queue.batch_jobs(leases[0].batch_id)
    assert [j.status for j in jobs] == ["succeeded"] * 5
    events = [e for e in await queue.events_after(0) if e.job_id]
    for kind in ("running", "succeeded"):  # each job's each transition logged once
        assert sorted(e.job_id for e in events if e.kind == kind) == [j.id for j in jobs]


async def test_a_burst_leaves_postgresql_planning_claims_on_the_queue_index(pg_url):
    """After 10,000 jobs enqueued into an empty queue the claim reads the queue's index in
    order (LIMIT k), instead of sorting every queued job on each claim until autovacuum's
    next look (as it did with the statistics of the empty table)."""
    db = await Database(pg_url).open()
    queue = Queue(db, queue_settings(max_queue_size=20_000))
    try:
        for i in range(20):
            await queue.enqueue(sub(f"user{i % 7}", 500))
        sql, args, _ = queue._many_statement("w", 10, None, False, queue.clock())
        plan = "\n".join(r["QUERY PLAN"] for r in await db.fetch("EXPLAIN " + sql, args))
        assert "Index Scan using jobs_queued on jobs" in plan and "Sort" not in plan, plan
        assert len(await queue.claim_many("w", 10)) == 10
    finally:
        await queue.close()


async def test_table_sizes_show_each_table_with_its_indexes(queue):
    await queue.enqueue(sub("alice", 3))
    await drain(queue)
    sizes = {row["name"]: row for row in await queue.table_sizes()}
    assert {"jobs", "events", "batches", "outbox"} <= set(sizes)
    assert sizes["jobs"]["bytes"] > 0
    if queue.db.dialect == "postgres":  # its statistics' row estimates, live and dead
        assert sizes["jobs"]["live"] is not None and sizes["jobs"]["dead"] is not None


async def test_a_workflow_comes_back_exactly_as_it_was_enqueued(queue):
    """One statement inserts a submission's jobs from a JSON list: nothing in a workflow
    is re-rendered on the way (big seeds, small floats, any text)."""
    workflow = {"seed": 18446744073709551615, "cfg": 1e-07, "w": 7.5, "n": None,
                "prompt": "瓶子 \u2028 \"quoted\" \\ \U0001f600", "nested": [{"a": [1, 2.0]}]}
    batch = (await queue.enqueue(Submission("t", "alice", [
        NewJob(row=7, workflow=workflow, affinity="sd15", parent=None, action="again"),
        NewJob(row=9, workflow={}, affinity=None)]))).batch_id
    first, second = await queue.batch_jobs(batch)
    assert first.workflow == workflow and (first.row, first.affinity) == (7, "sd15")
    assert (second.workflow, second.row, second.affinity, second.id) == ({}, 9, None,
                                                                         first.id + 1)


async def test_an_open_snapshot_shows_as_its_age(db_url, queue):
    if queue.db.dialect == "sqlite":
        assert await queue.oldest_snapshot() is None  # no such thing on SQLite
        return
    import asyncpg
    assert await queue.oldest_snapshot() == 0
    holder = await asyncpg.connect(db_url.split("?")[0])  # (any session on the database)
    try:
        await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await holder.fetchval("SELECT 1")  # takes its snapshot
        await asyncio.sleep(0.3)
        assert await queue.oldest_snapshot() >= 0.3
        await holder.execute("ROLLBACK")
        assert await queue.oldest_snapshot() == 0
    finally:
        await holder.close()


async def test_now_and_next_tells_the_job_an_executor_is_on_from_those_it_holds_next(queue,
                                                                                   clock):
    """A group started together is worked through one job at a time: the job that has
    stepped (or, before any step, the group's first) is on the device; the rest of the
    group and the jobs claimed ahead are next. Another executor's job is its own."""
    await queue.enqueue(sub("alice", 4))
    first, second, third = await queue.claim_many("w1", 3)
    assert [(j.id, j.working) for j in await queue.now_and_next()] == [
        (1, True), (2, False), (3, False)]  # no step yet: its first
    clock.advance(1)
    await queue.progress(second, {"step": 1, "total": 4})
    ahead = await queue.claim("w1", ahead=True)
    await queue.enqueue(sub("bob", 1))
    other = await queue.claim("w2")
    held = await queue.now_and_next()
    assert [(j.id, j.working, j.lease_owner, j.status) for j in held] == [
        (2, True, "w1", Status.RUNNING), (other.job_id, True, "w2", Status.RUNNING),
        (1, False, "w1", Status.RUNNING), (3, False, "w1", Status.RUNNING),
        (ahead.job_id, False, "w1", Status.QUEUED)]
    assert {j.template for j in held} == {"t"}
