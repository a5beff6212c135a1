"""The executor's loop: claim -> generate -> finish -> record, the same for every engine.

One loop per executor process (one per GPU, one per ComfyUI server). Read `Loop.run`
top to bottom for the life of a job:

  claim      the next group of jobs (a micro-batch of one template), or the group
             already claimed ahead, started in one statement
  generate   the engine's device or server part; meanwhile the loop claims the next
             group ahead (docs/queue.md), writes progress in batches, renews every held
             lease in one statement, and stops a job that is canceled (the cancel bell),
             timed out, or whose lease was lost
  finish     the rest of each job (saving, uploading) beside the next generation; back
             pressure past 2 x max_batch finishing jobs
  record     each job's end, in the order the jobs started: completed (claiming the
             next group ahead in the same round trip), failed, canceled, timed out,
             handed back on shutdown, given back when the engine's server went down

This is the one module of the executor that calls the queue's lease operations.
Nothing here waits on the engine's threads, and nothing on them waits on the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from executor.engine import Engine, Run, Stop
from executor.presence import Presence
from executor.settings import ExecutorConfig
from storage.config import Config, QueueConfig
from storage.db import DatabaseUnavailable, connection_lost
from storage.queue import Claim, Lease, Queue, Status
from storage.workers import owner_name

log = logging.getLogger("genbot.executor")

EXIT_RECYCLE = 75  # "start me again": after recycle_after_jobs, or memory drift

AHEAD, DEVICE, FINISHING = "ahead", "device", "finishing"  # where a held job is


@dataclass
class Held:
    """A job this executor holds a lease on: claimed ahead, generating, or finishing."""
    lease: Lease
    phase: str
    started: float = 0.0  # when it went to the engine (monotonic): its timeout counts from here
    stop: Stop | None = None  # why it must stop
    recorded: bool = False  # its end is already written (e.g. canceled mid-run)
    last_progress: float = 0.0
    step: int = 0
    total: int = 0


@dataclass
class Loop:
    config: Config
    queue: Queue
    engine: Engine
    owner: str = field(default_factory=owner_name)

    def __post_init__(self):
        self.settings = self.config[ExecutorConfig]
        self.held: dict[int, Held] = {}
        self.ahead: list[Lease] = []  # the next group, claimed ahead
        self.claiming: asyncio.Task | None = None  # a claim ahead in flight
        self.ahead_wanted = False  # the next completion should claim ahead
        self.finishing: set[asyncio.Task] = set()
        self.last_end: asyncio.Future | None = None  # set when the last job handed on ended
        self.finish_room = asyncio.Semaphore(2 * self.engine.max_batch)  # back-pressure
        self.progress: list[tuple[Lease, dict[str, Any], float]] = []  # to write, in order
        self.poked = asyncio.Event()  # a step happened: write progress, look for cancels
        self.progress_lock = asyncio.Lock()
        self.stopping = asyncio.Event()  # stop now: jobs on the device are handed back
        self.draining = asyncio.Event()  # take nothing more; what runs may finish
        self.idle_since: float | None = None  # (monotonic) nothing taken since then
        self.stats: Counter = Counter()
        self.taken = 0  # jobs that went to the engine (recycle_after_jobs counts these)
        self.exit_code = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.presence = Presence(self.config, self.queue, self.owner, self.engine, self.state)

    # --- the loop --------------------------------------------------------------------
    async def run(self) -> int:
        self.loop = asyncio.get_running_loop()
        await self.engine.start(self)
        await self.queue.cancel_bell.listen()
        beating = asyncio.create_task(self.presence.beat_forever())
        watching = asyncio.create_task(self.watch())
        try:
            while not (self.stopping.is_set() or self.draining.is_set()):
                if not await self.engine.ready():
                    await self.sleep(self.engine.backoff())
                    continue
                try:
                    leases = await self.next_group()
                except DatabaseUnavailable as e:  # past a statement's patience: wait on
                    log.warning("cannot claim jobs: %s; trying again", e)
                    await self.sleep(1.0)
                    continue
                if not leases:
                    if self.idle_too_long():
                        break
                    await self.idle()
                    continue
                self.idle_since = None
                runs = await self.generate(leases)
                if await self.engine.after(runs, self.taken):
                    self.exit_code = EXIT_RECYCLE
                self.recycle_when_due()
                self.presence.soon()  # idle or busy again, with fresh memory figures
                if self.exit_code:
                    break
                if self.config[QueueConfig].batch_delay:  # a real rest: nothing overlaps it
                    await self.finished()
                    await self.sleep(self.config[QueueConfig].batch_delay)
        finally:
            await self.wind_down()
            beating.cancel()
            watching.cancel()
            await asyncio.gather(beating, watching, return_exceptions=True)
            await self.presence.stopped()
            await self.engine.close(recycling=self.exit_code == EXIT_RECYCLE)
        return self.exit_code

    def drain(self, grace: float) -> None:
        """Stop taking jobs (a scale-down, a node drained): what is claimed ahead goes
        back at once; the jobs on the device may finish for `grace` seconds, then they
        are handed back (no attempt used). Asked twice, or with no grace: at once."""
        if grace <= 0 or self.draining.is_set():
            log.info("stopping: jobs under way go back to the queue")
            self.stopping.set()
            return
        log.info("draining: taking no more jobs; those under way may finish",
                 extra={"grace_s": grace})
        self.draining.set()
        asyncio.get_running_loop().call_later(grace, self.stopping.set)
        hand_back = asyncio.ensure_future(self.hand_back_ahead())
        self.finishing.add(hand_back)  # (awaited by wind_down like a finish)
        hand_back.add_done_callback(self.finishing.discard)

    def idle_too_long(self) -> bool:
        """Nothing to take for [executor] exit_when_idle seconds (and nothing held): time
        to exit, so a pool can shrink to zero."""
        limit = self.settings.exit_when_idle
        if not limit or self.held or self.finishing:
            return False
        now = time.monotonic()
        if self.idle_since is None:
            self.idle_since = now
        if now - self.idle_since < limit:
            return False
        log.info("no work for a while; exiting", extra={"idle_s": round(now - self.idle_since)})
        return True

    def wanted(self, *, ahead: bool = False) -> Claim | None:
        want = self.engine.wanted()
        if want is None:
            return None
        return Claim(self.owner, want.prefer, want.only, engine=want.engine, ahead=ahead)

    async def next_group(self) -> list[Lease]:
        """The jobs to run now: the group claimed ahead, started (one statement), or else
        a fresh claim."""
        if self.claiming is not None:
            await asyncio.wait({self.claiming})
        ahead, self.ahead = self.ahead, []
        self.ahead_wanted = False
        if ahead:
            started = await self.queue.start(ahead)
            for lease in ahead:  # canceled, paused or lost while it waited
                self.held.pop(lease.job_id, None)
            if started:
                return started
        return await self.claim()

    async def claim(self, *, ahead: bool = False) -> list[Lease]:
        want = self.wanted(ahead=ahead)
        if want is None:
            return []
        first = await self.queue.claim(want.owner, prefer=want.prefer, only=want.only,
                                       engine=want.engine, ahead=ahead)
        return await self.with_followers(first)

    async def with_followers(self, first: Lease | None) -> list[Lease]:
        if first is None:
            return []
        more = await self.queue.claim_followers(first, self.engine.max_batch - 1) \
            if self.engine.max_batch > 1 else []
        return [first, *more]

    def may_claim_ahead(self) -> bool:
        limit = self.settings.recycle_after_jobs
        return self.engine.claims_ahead and not (
            self.stopping.is_set() or self.draining.is_set() or self.exit_code or self.ahead
            or self.claiming is not None or self.config[QueueConfig].batch_delay
            or (limit and self.taken + self.engine.max_batch > limit))

    def claim_ahead(self, *, now: bool = False) -> None:
        """Hold the next group while this one runs: with the completion of a job being
        finished (one round trip for both), or, with none under way, now."""
        if not self.may_claim_ahead():
            return
        if self.finishing and not now:
            self.ahead_wanted = True
            return
        self.ahead_wanted = False
        self.claiming = asyncio.create_task(self.hold(self.claim(ahead=True)))

    async def hold(self, claim: Awaitable[list[Lease]]) -> None:
        """Keep what a claim ahead took as the next group (or hand it back if stopping)."""
        try:
            leases = await claim
        except Exception as e:  # noqa: BLE001 - the next group is claimed when needed instead
            log.warning("could not claim the next job ahead: %s", e)
            leases = []
        finally:
            self.claiming = None
        if self.stopping.is_set() or self.draining.is_set() or self.exit_code:
            with contextlib.suppress(Exception):  # else their claims run out
                await self.queue.unclaim(leases)
            return
        self.ahead = leases
        for lease in leases:
            self.held[lease.job_id] = Held(lease, AHEAD)

    async def idle(self) -> None:
        timeout = None
        if self.settings.exit_when_idle and self.idle_since is not None:
            left = self.settings.exit_when_idle - (time.monotonic() - self.idle_since)
            timeout = max(0.0, min(left, self.config[QueueConfig].poll_interval))
        waiting = asyncio.ensure_future(self.queue.wait_for_work(timeout))
        stopping = asyncio.ensure_future(self.stopping.wait())
        draining = asyncio.ensure_future(self.draining.wait())
        interrupted = self.engine.interrupted()
        await asyncio.wait({t for t in (waiting, stopping, draining, interrupted)
                            if t is not None}, return_when=asyncio.FIRST_COMPLETED)
        for task in (waiting, stopping, draining):
            task.cancel()

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    def recycle_when_due(self) -> None:
        limit = self.settings.recycle_after_jobs
        if limit and self.taken >= limit and not self.exit_code:
            log.info("recycling the executor", extra={"jobs": self.taken})
            self.exit_code = EXIT_RECYCLE

    # --- one group ---------------------------------------------------------------------
    async def generate(self, leases: list[Lease]) -> list[Run]:
        """The group's device or server part; then each job's finish goes beside the next
        group."""
        assert self.loop is not None
        now = time.monotonic()
        runs = []
        for lease in leases:
            self.held[lease.job_id] = Held(lease, DEVICE, now)
            try:
                runs.append(self.engine.prepare(lease))
            except Exception as e:  # noqa: BLE001 - a job this engine cannot read: its fault
                run = Run(lease)
                run.fail(f"not a job this executor can run: {e}")
                runs.append(run)
        self.taken += len(leases)
        self.presence.soon()  # busy, at once
        self.claim_ahead()
        try:
            await self.engine.generate([r for r in runs if r.live])
        except Exception as e:  # noqa: BLE001 - a bug here must not stop the executor
            log.exception("the engine failed; its jobs will be retried")
            for run in runs:
                if run.live and not run.outputs:
                    run.fail(f"executor error: {type(e).__name__}: {e}", retry=True)
        for run in runs:
            await self.finish_room.acquire()  # back-pressure: storage is behind
            self.held[run.id].phase = FINISHING
            before, self.last_end = self.last_end, self.loop.create_future()
            task = asyncio.create_task(self.finish(run, before, self.last_end))
            self.finishing.add(task)
            task.add_done_callback(self.finishing.discard)
        return runs

    async def finish(self, run: Run, before: asyncio.Future | None,
                     ended: asyncio.Future) -> None:
        """Off the engine's path: the job's finish, then its end — recorded after the end
        of the job before it, so jobs end in the order they started (a chat thread gets
        row 2's image before row 3's) however the finishes interleave."""
        try:
            job = self.held[run.id]
            if run.live and not job.recorded and job.stop is None:
                try:
                    await self.engine.finish(run)
                except Exception as e:  # noqa: BLE001 - the store away: the job runs again
                    log.exception("could not finish job %s", run.id)
                    run.fail(f"executor error: {type(e).__name__}: {e}", retry=True)
            if before is not None:
                await before
            await self.record(run)
        except Exception:  # noqa: BLE001 - the lease brings the job back
            log.exception("could not record the end of job %s", run.id)
        finally:
            ended.set_result(None)
            self.held.pop(run.id, None)
            self.finish_room.release()
            self.presence.soon()  # its count, at once
            if self.ahead_wanted and len(self.finishing) <= 1:  # no completion will carry it
                self.claim_ahead(now=True)

    async def record(self, run: Run) -> None:
        """The job's end, worded the same for every engine."""
        job = self.held[run.id]
        lease, extra = job.lease, {"batch": job.lease.batch_id, "job": run.id}
        stop = job.stop or run.stopped
        if job.recorded or stop == Stop.LEASE_LOST:
            return
        if any(update[0] is lease for update in self.progress) or self.progress_lock.locked():
            with contextlib.suppress(Exception):  # its steps before its end, if they can be
                await self.write_progress()
        if stop == Stop.SHUTDOWN:
            await self.queue.release(lease, "executor stopped; the job will run again")
        elif stop == Stop.CANCELED:
            await self.queue.fail(lease, "canceled", retry=False)
        elif stop == Stop.TIMEOUT:
            await self.queue.fail(lease, f"timed out after {self.settings.job_timeout:g} s "
                                  "([executor] job_timeout)", retry=False)
        elif run.give_back:
            await self.queue.release(lease, run.give_back)
            log.warning("job given back", extra={**extra, "reason": run.give_back})
        elif run.error:
            status = await self.queue.fail(lease, run.error, retry=run.retryable)
            log.warning("job failed", extra={**extra, "status": status, "error": run.error})
        else:
            status = await self.complete(lease, run.outputs)
            log.info("job done", extra={**extra, "status": status, "outputs": run.outputs,
                                        "seconds": round(time.monotonic() - job.started, 3)})
        self.stats["jobs"] += 1

    async def complete(self, lease: Lease, outputs: list[str]) -> Status | None:
        """Complete a job; when the next group is wanted, claim it ahead in the same round
        trip (its followers, for a micro-batch, come after)."""
        want = self.wanted(ahead=True) if self.ahead_wanted and self.may_claim_ahead() \
            else None
        if want is None:
            return await self.queue.complete(lease, outputs)
        self.ahead_wanted = False
        done: asyncio.Future[tuple[Status | None, Lease | None]] = \
            asyncio.get_running_loop().create_future()

        async def claimed() -> list[Lease]:
            try:
                done.set_result(await self.queue.complete_and_claim(lease, outputs, want))
            except Exception as e:
                done.set_exception(e)
                return []
            return await self.with_followers(done.result()[1])
        self.claiming = asyncio.create_task(self.hold(claimed()))
        return (await done)[0]

    async def finished(self) -> None:
        """Until every job handed to finishing has ended."""
        while self.finishing:
            await asyncio.wait(set(self.finishing))

    async def wind_down(self) -> None:
        """Stopping: what is claimed ahead goes back untouched; what is finishing ends
        (its files are stored and it is completed) before the executor exits."""
        await self.hand_back_ahead()
        await self.finished()

    async def hand_back_ahead(self) -> None:
        """The group claimed ahead (or being claimed) goes back to the queue untouched."""
        if self.claiming is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait({self.claiming})
        ahead, self.ahead = self.ahead, []
        try:
            await self.queue.unclaim(ahead)
        except Exception as e:  # noqa: BLE001 - their leases run out instead
            log.warning("could not hand back the jobs claimed ahead: %s", e)
        for lease in ahead:
            self.held.pop(lease.job_id, None)

    def state(self) -> tuple[int | None, dict[str, Any]]:
        """What the registry row says of the loop: its current job, and its counts."""
        return self.current_job(), {
            "jobs": self.stats["jobs"], "ahead": [lease.job_id for lease in self.ahead],
            "finishing": sum(h.phase == FINISHING for h in self.held.values())}

    def current_job(self) -> int | None:
        """The job the registry shows: the one generating, else one being finished."""
        for phase in (DEVICE, FINISHING):
            if found := next((i for i, h in self.held.items() if h.phase == phase), None):
                return found
        return None

    # --- beside the engine: leases, cancels, timeouts, progress -------------------------
    async def watch(self) -> None:
        """For every held job: progress written in batches after each step; cancels
        looked for when the queue's cancel bell rings (a running job was asked to stop)
        or every half second at the latest; timeouts; one heartbeat for all leases."""
        beat = asked = time.monotonic()
        tick = min(0.5, self.config[QueueConfig].heartbeat_seconds)
        bell = asyncio.ensure_future(self.queue.cancel_bell.wait(3600))
        failing = False  # the last round failed: told once, not every tick
        try:
            while True:
                poke = asyncio.ensure_future(self.poked.wait())
                done, _ = await asyncio.wait({bell, poke}, timeout=tick,
                                             return_when=asyncio.FIRST_COMPLETED)
                poke.cancel()
                self.poked.clear()
                rung = bell in done
                if rung:
                    bell = asyncio.ensure_future(self.queue.cancel_bell.wait(3600))
                try:
                    await self.write_progress()
                    if rung or time.monotonic() - asked >= tick:
                        asked = time.monotonic()
                        await self.check_stops()
                    if time.monotonic() - beat >= self.config[QueueConfig].heartbeat_seconds:
                        beat = time.monotonic()
                        await self.heartbeat()
                except Exception as e:  # noqa: BLE001 - e.g. the database away for a while
                    beat = 0.0  # the leases are renewed at the next tick, not a beat later
                    if failing:
                        log.debug("heartbeat or cancel check failed again: %s", e)
                    elif connection_lost(e):  # storage.db tells the outage (once)
                        log.info("heartbeat or cancel check failed (retrying every %g s): "
                                 "%s", tick, e)
                    else:  # a bug: its traceback, once
                        log.exception("heartbeat or cancel check failed; retrying")
                    failing = True
                else:
                    if failing:
                        log.info("heartbeats and cancel checks work again")
                    failing = False
        finally:
            bell.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await bell

    async def write_progress(self) -> None:
        """Every progress update not yet written, in one statement (one writer at a time,
        so the event log keeps each job's steps in order)."""
        async with self.progress_lock:
            if self.progress:
                updates, self.progress = self.progress, []
                await self.queue.progress_all(updates)

    async def heartbeat(self) -> None:
        held = [h for h in self.held.values() if not h.recorded and h.stop != Stop.LEASE_LOST]
        states = await self.queue.heartbeat_all([h.lease for h in held])
        for h in held:
            if states[h.lease.job_id].held:
                continue
            if self.held.get(h.lease.job_id) is not h or h.recorded:
                continue  # it ended while the heartbeat was on its way: not lost, done
            if h.phase == AHEAD:  # canceled while it waited, or its claim ran out
                self.ahead = [lease for lease in self.ahead if lease.job_id != h.lease.job_id]
                self.held.pop(h.lease.job_id, None)
                continue
            h.stop = Stop.LEASE_LOST
            log.warning("lease lost: another executor may run the job",
                        extra={"job": h.lease.job_id})

    async def check_stops(self) -> None:
        if self.stopping.is_set():
            for job in self.held.values():
                if job.phase == DEVICE:
                    job.stop = job.stop or Stop.SHUTDOWN
        running = [(i, h) for i, h in self.held.items() if h.phase != AHEAD and not h.stop]
        if not running:
            return
        canceled = await self.queue.cancels_asked(self.owner)
        now = time.monotonic()
        for job_id, job in running:
            if job.stop:
                continue
            if job_id in canceled:
                job.stop = Stop.CANCELED
                # The job ends now; the engine stops it at its next step or poll.
                await self.queue.fail(job.lease, f"canceled at step {job.step} of {job.total}",
                                      retry=False)
                job.recorded = True
                log.info("job canceled", extra={"job": job_id, "step": job.step})
            elif job.phase == DEVICE and now - job.started > self.settings.job_timeout:
                job.stop = Stop.TIMEOUT

    def stepped(self, job_ids: list[int], node: str, step: int, total: int, at: float) -> None:
        """On the event loop, after a step: progress to write, cancels to see."""
        now = time.monotonic()
        for job_id in job_ids:
            job = self.held.get(job_id)
            if job is None:
                continue
            job.step, job.total = step, total
            if job.stop or job.recorded:
                continue
            if step == total or now - job.last_progress >= \
                    self.settings.progress_interval:
                job.last_progress = now
                self.progress.append((job.lease, {"node": node, "step": step, "total": total,
                                                  "row": job.lease.row}, at))
        self.poked.set()

    # --- Control: what the engine calls, from any thread; none of these waits -----------
    def step(self, job_ids: list[int], node: str, step: int, total: int) -> None:
        assert self.loop is not None  # set by run(), which starts every job
        self.loop.call_soon_threadsafe(self.stepped, job_ids, node, step, total, time.time())

    def stop_reason(self, job_id: int) -> Stop | None:
        job = self.held.get(job_id)
        return job.stop if job else None

    def doing(self, what: dict[str, Any] | None) -> None:
        self.presence.doing = what
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.presence.now)
