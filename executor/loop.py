"""The executor's loop: claim -> generate -> finish -> record, the same for every engine.

One loop per executor process (one per GPU, one per ComfyUI server). Read `Loop.run`
top to bottom for the life of a job:

  claim      the next group of jobs (a micro-batch of one template): the group claimed
             ahead, started in one statement, or a fresh claim (executor.prefetch)
  generate   the engine's device or server part; meanwhile the loop claims the next
             group ahead, writes progress in batches, renews every held lease in one
             statement (handing back any it holds without knowing), and stops a run
             that is canceled (the cancel bell), timed out, or whose lease was lost
  finish     the rest of each job (saving, uploading, its sales channels' renditions)
             beside the next generation; back pressure past 2 x max_batch finishing jobs
  record     each job's end, in the order the jobs started: completed (claiming the
             next group ahead in the same round trip), failed, canceled, timed out,
             handed back on shutdown, given back when the engine's server went down;
             tried again while the database is away

Everything the loop holds is a run of a job under one lease, known by its lease
(`Run.key`: job id and token), never by the job alone: after an outage longer than a
lease the same job can come back to this executor while its stale run still finishes,
and each must end only itself. `problems` states the invariant that ties the runs to
the group claimed ahead; a model-based test (tests/test_loop_model.py) drives the loop
through claims, completions, lost answers, outages and signals in random order and
checks it after every step.

This module and executor.prefetch are the only ones of the executor that call the
queue's lease operations. Nothing here waits on the engine's threads, and nothing on
them waits on the database. Trouble is told once per episode (executor.told).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from executor.deliver import Packer
from executor.engine import Engine, Run, Stop
from executor.prefetch import Prefetch
from executor.presence import Presence
from executor.settings import ExecutorConfig
from executor.told import Told
from storage import previews
from storage.config import Config, QueueConfig
from storage.db import connection_lost
from storage.queue import TERMINAL, Claim, Lease, LeaseKey, Queue, Status
from storage.workers import owner_name

if TYPE_CHECKING:
    from PIL import Image

log = logging.getLogger("genbot.executor")

EXIT_RECYCLE = 75  # "start me again": after recycle_after_jobs, or memory drift

DEVICE, FINISHING = "device", "finishing"  # where a run is

# The kinds of trouble told once per episode (executor.told).
CLAIMING = "claiming jobs"
STORING = "storing a job's images"
RECORDING = "recording the end of a job"
TENDING = "heartbeats and cancel checks"
LEAVING = "handing back what this executor holds, on leaving"

_running_owners: set[tuple[str, str]] = set()  # running here: (database, owner)


@dataclass
class Held:
    """A run of a job whose lease this executor holds: generating, or finishing."""
    run: Run
    phase: str
    started: float  # when it went to the engine (monotonic): its timeout counts from here
    stop: Stop | None = None  # why it must stop
    recorded: bool = False  # its end is written (e.g. canceled mid-run)
    ending: bool = False  # its end is being written
    last_progress: float = 0.0
    last_preview: float = 0.0  # (monotonic) when its last preview was made
    showing: bool = False  # a preview of it is on its way to the service
    step: int = 0
    total: int = 0

    @property
    def lease(self) -> Lease:
        return self.run.lease

    @property
    def renewing(self) -> bool:
        """Whether its lease is still this executor's to renew."""
        return not self.recorded and self.stop != Stop.LEASE_LOST


class Loop:
    def __init__(self, config: Config, queue: Queue, engine: Engine,
                 owner: str | None = None):
        """`owner`: what the executor is called in leases and the worker registry (host:pid
        by default). It must be unique among live executors: the heartbeat hands back
        whatever its owner holds that this loop does not know of."""
        self.config, self.queue, self.engine = config, queue, engine
        self.owner = owner or owner_name()
        self.settings = self.config[ExecutorConfig]
        self.told = Told(log)
        self.runs: dict[LeaseKey, Held] = {}  # on the device or finishing, by lease
        self.prefetch = Prefetch(queue, max_batch=engine.max_batch, told=self.told,
                                 wanted=self.wanted, may_hold=self.may_hold_ahead,
                                 taking=self.taking, landed=self.landed)
        self.finishing: set[asyncio.Task] = set()
        self.packer = Packer(config, queue.db)  # renditions for the channels a batch named
        self.showing: set[asyncio.Task] = set()  # previews on their way
        self.watched_until = 0.0  # (monotonic) make previews until then: someone watches
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
        me = (self.queue.db.url, self.owner)  # two names alike on one queue would hand
        if me in _running_owners:               # back each other's jobs as unheld
            raise ValueError(f"an executor called {self.owner} already runs on this queue "
                             "in this process: each needs an owner of its own")
        _running_owners.add(me)
        try:
            return await self.serve()
        finally:
            _running_owners.discard(me)

    async def serve(self) -> int:
        await self.engine.start(self)
        await self.queue.cancel_bell.listen()
        if self.settings.preview_interval:
            await self.queue.previews.hear_watchers(self.watched)
        beating = asyncio.create_task(self.presence.beat_forever())
        watching = asyncio.create_task(self.watch())
        try:
            while self.taking():
                if not await self.engine.ready():
                    await self.sleep(self.engine.backoff())
                    continue
                try:
                    leases = await self.prefetch.take()
                except Exception as e:  # noqa: BLE001 - the database away: wait for it
                    self.told.failed(CLAIMING, e)
                    await self.sleep(1.0)
                    continue
                self.told.worked(CLAIMING)
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

    def taking(self) -> bool:
        """Whether the executor takes work now (not stopping, draining or recycling)."""
        return not (self.stopping.is_set() or self.draining.is_set() or self.exit_code)

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
        hand_back = asyncio.ensure_future(self.prefetch.hand_back())
        self.finishing.add(hand_back)  # (awaited by wind_down like a finish)
        hand_back.add_done_callback(self.finishing.discard)

    def idle_too_long(self) -> bool:
        """Nothing to take for [executor] exit_when_idle seconds (and nothing held): time
        to exit, so a pool can shrink to zero."""
        limit = self.settings.exit_when_idle
        if not limit or self.runs or self.prefetch.ahead or self.finishing:
            return False
        now = time.monotonic()
        if self.idle_since is None:
            self.idle_since = now
        if now - self.idle_since < limit:
            return False
        log.info("no work for a while; exiting", extra={"idle_s": round(now - self.idle_since)})
        return True

    def wanted(self, ahead: bool = False) -> Claim | None:
        """The next claim's arguments: what the engine can take now (None: nothing)."""
        want = self.engine.wanted()
        if want is None:
            return None
        return Claim(self.owner, want.prefer, want.only, engine=want.engine, ahead=ahead)

    def may_hold_ahead(self) -> bool:
        """Whether holding the next group while one runs is worth it and allowed now."""
        limit = self.settings.recycle_after_jobs
        return self.engine.claims_ahead and self.taking() and not (
            self.config[QueueConfig].batch_delay
            or (limit and self.taken + self.engine.max_batch > limit))

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
        # (a database away makes waiting raise: the next claim says so, once)
        await asyncio.gather(waiting, stopping, draining, return_exceptions=True)

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):  # (not wait_for: it can swallow a cancel
            async with asyncio.timeout(seconds):  # on 3.11; see storage.wakeup.Waker.wait)
                await self.stopping.wait()

    def recycle_when_due(self) -> None:
        limit = self.settings.recycle_after_jobs
        if limit and self.taken >= limit and not self.exit_code:
            log.info("recycling the executor", extra={"jobs": self.taken})
            self.exit_code = EXIT_RECYCLE

    # --- what it holds -------------------------------------------------------------------
    def landed(self, leases: list[Lease]) -> None:
        """Leases just taken. A job taken again means the database gave it out anew: an
        older run of it here has lost its lease (after an outage longer than a lease)."""
        fresh = {lease.job_id: lease.key for lease in leases}
        for job in self.runs.values():
            if job.renewing and fresh.get(job.run.id, job.run.key) != job.run.key:
                self.lose(job, "the job was given out again")
        self.check()

    def lose(self, job: Held, why: str) -> None:
        job.stop = Stop.LEASE_LOST
        log.warning("lease lost (%s): this run of the job stops and records nothing", why,
                    extra={"job": job.run.id, "batch": job.lease.batch_id})

    def problems(self) -> list[str]:
        """What breaks the loop's invariant now; nothing, ever, unless there is a bug. The
        leases this executor renews are its runs' (on the device or finishing) and the
        group claimed ahead: each lease in one place, no job under two live leases, the
        group ahead not started, every run kept under its own lease."""
        found = []
        for key, job in self.runs.items():
            if key != job.run.key or job.phase not in (DEVICE, FINISHING):
                found.append(f"run {job.run.key} kept as {key} ({job.phase})")
        ahead = self.prefetch.ahead
        if both := sorted({lease.key for lease in ahead} & self.runs.keys()):
            found.append(f"leases both ahead and running: {both}")
        if started := sorted(lease.key for lease in ahead if lease.started):
            found.append(f"started leases left ahead: {started}")
        live = Counter([j.run.id for j in self.runs.values() if j.renewing]
                       + [lease.job_id for lease in ahead])
        if twice := sorted(job for job, n in live.items() if n > 1):
            found.append(f"jobs held under two leases: {twice}")
        return found

    def check(self) -> None:
        if found := self.problems():
            log.error("the executor's record of its leases is inconsistent (a bug; the "
                      "heartbeat hands back what it cannot account for): %s", "; ".join(found))

    # --- one group ---------------------------------------------------------------------
    async def generate(self, leases: list[Lease]) -> list[Run]:
        """The group's device or server part; then each job's finish goes beside the next
        group."""
        assert self.loop is not None
        now = time.monotonic()
        jobs = []
        for lease in leases:
            try:
                run = self.engine.prepare(lease)
            except Exception as e:  # noqa: BLE001 - a job this engine cannot read: its fault
                run = Run(lease)
                run.fail(f"not a job this executor can run: {e}")
            job = self.runs[run.key] = Held(run, DEVICE, now)
            jobs.append(job)
        self.landed(leases)
        self.taken += len(leases)
        self.presence.soon()  # busy, at once
        self.prefetch.want_next(finishing=bool(self.finishing))
        runs = [job.run for job in jobs]
        try:
            await self.engine.generate([r for r in runs if r.live])
        except Exception as e:  # noqa: BLE001 - a bug here must not stop the executor
            log.exception("the engine failed; its jobs will be retried")
            for run in runs:
                if run.live and not run.outputs:
                    run.fail(f"executor error: {type(e).__name__}: {e}", retry=True)
        for job in jobs:
            await self.finish_room.acquire()  # back-pressure: storage is behind
            job.phase = FINISHING
            before, self.last_end = self.last_end, self.loop.create_future()
            task = asyncio.create_task(self.finish(job, before, self.last_end))
            self.finishing.add(task)
            task.add_done_callback(self.finishing.discard)
        return runs

    async def finish(self, job: Held, before: asyncio.Future | None,
                     ended: asyncio.Future) -> None:
        """Off the engine's path: the job's finish, then its end — recorded after the end
        of the job before it, so jobs end in the order they started (a chat thread gets
        row 2's image before row 3's) however the finishes interleave."""
        run = job.run
        try:
            if run.live and not job.recorded and job.stop is None:
                try:
                    await self.engine.finish(run)
                    if run.live:
                        await self.packer.run(run.lease, run.outputs)
                except OSError as e:  # the machine's (a full disk, a store away): it runs again
                    self.told.failed(STORING, e, job=run.id, expected=True)
                    run.fail(f"could not store its images: {type(e).__name__}: {e}", retry=True)
                except Exception as e:  # noqa: BLE001 - a bug: the job runs again
                    self.told.failed(STORING, e, job=run.id)
                    run.fail(f"executor error: {type(e).__name__}: {e}", retry=True)
                else:
                    if run.live:
                        self.told.worked(STORING)
            if before is not None:
                await before
            await self.record(job)
        except Exception:  # noqa: BLE001 - a bug: the lease brings the job back
            log.exception("could not record the end of job %s", run.id)
        finally:
            ended.set_result(None)
            self.runs.pop(run.key, None)
            self.finish_room.release()
            self.presence.soon()  # its count, at once
            if self.prefetch.wanted and len(self.finishing) <= 1:  # no completion will carry it
                self.prefetch.want_next(finishing=False)
            self.check()

    async def record(self, job: Held) -> None:
        """The job's end, worded the same for every engine. While the database is away it
        is tried again (the run's lease renewed meanwhile by the heartbeat, should the
        database answer that first) until it answers — or, once the executor is stopping,
        given up after one more try: the lease then brings the job back."""
        job.ending = True
        tries = 0
        while True:
            try:
                await self.record_once(job, again=tries > 0)
            except Exception as e:
                if not connection_lost(e):
                    raise
                tries += 1
                self.told.failed(RECORDING, e, job=job.run.id)
                if self.stopping.is_set() and tries > 1:
                    log.info("stopping before the end of a job could be recorded; its lease "
                             "brings it back", extra={"job": job.run.id})
                    return
                await self.sleep(min(0.5 * tries, 5.0))
                continue
            self.told.worked(RECORDING)
            return

    async def record_once(self, job: Held, *, again: bool) -> None:
        run, lease = job.run, job.lease
        extra = {"batch": lease.batch_id, "job": run.id}
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
            status = await self.prefetch.complete(lease, run.outputs)
            if status is None and again:  # the first try may have landed, its answer lost
                status = await self.ended_here(run)
            if status is None:
                log.info("job's completion refused: its lease ran out before it was "
                         "recorded, and the job runs again", extra=extra)
            else:
                log.info("job done", extra={**extra, "status": status, "outputs": run.outputs,
                                            "seconds": round(time.monotonic() - job.started, 3)})
        job.recorded = True
        self.stats["jobs"] += 1

    async def ended_here(self, run: Run) -> Status | None:
        """How the job ended, if it was this executor's completion of this run that ended
        it (an earlier try whose answer the database lost); None otherwise."""
        found = await self.queue.job(run.id)
        if found is not None and found.status in TERMINAL and \
                found.lease_owner == self.owner and found.outputs == run.outputs:
            return found.status
        return None

    async def finished(self) -> None:
        """Until every job handed to finishing has ended."""
        while self.finishing:
            await asyncio.wait(set(self.finishing))

    async def wind_down(self) -> None:
        """Stopping: what is claimed ahead goes back untouched; what is finishing ends
        (its files are stored and it is completed); then whatever this executor still
        holds a lease on goes back too, so nothing waits out a lease for it."""
        await self.prefetch.hand_back()
        await self.finished()
        for task in self.showing:  # a preview matters no more
            task.cancel()
        try:
            async with self.prefetch.gate:
                renewal = await self.queue.heartbeat_all([], owner=self.owner)
        except Exception as e:  # noqa: BLE001 - the database away: their leases run out
            self.told.failed(LEAVING, e)
            return
        if renewal.handed_back:
            log.info("handed back on leaving: jobs this executor still held",
                     extra={"jobs": renewal.handed_back})

    def state(self) -> tuple[int | None, dict[str, Any]]:
        """What the registry row says of the loop: its current job, and its counts."""
        return self.current_job(), {
            "jobs": self.stats["jobs"], **self.prefetch.state(),
            "finishing": sum(j.phase == FINISHING for j in self.runs.values())}

    def current_job(self) -> int | None:
        """The job the registry shows: the one generating, else one being finished."""
        for phase in (DEVICE, FINISHING):
            if found := next((j.run.id for j in self.runs.values() if j.phase == phase), None):
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
        try:
            while True:
                poke = asyncio.ensure_future(self.poked.wait())
                try:
                    done, _ = await asyncio.wait({bell, poke}, timeout=tick,
                                                 return_when=asyncio.FIRST_COMPLETED)
                finally:  # (also when the watch itself is canceled, on leaving)
                    poke.cancel()
                self.poked.clear()
                rung = bell in done
                if rung:
                    bell = asyncio.ensure_future(self.queue.cancel_bell.wait(3600))
                now = time.monotonic()
                check = rung or now - asked >= tick
                due = now - beat >= self.config[QueueConfig].heartbeat_seconds
                asked = now if check else asked
                beat = now if due else beat
                if not await self.tend(check=check, beat=due):
                    beat = 0.0  # the leases are renewed at the next tick, not a beat later
        finally:
            bell.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await bell

    async def tend(self, *, check: bool = True, beat: bool = True) -> bool:
        """One round beside the engine: progress written; with `check`, stops looked
        for; with `beat`, every lease renewed. False: it failed (told once per episode)."""
        try:
            await self.write_progress()
            if check:
                await self.check_stops()
            if beat:
                await self.heartbeat()
        except Exception as e:  # noqa: BLE001 - e.g. the database away for a while
            self.told.failed(TENDING, e)
            return False
        self.told.worked(TENDING)
        return True

    async def write_progress(self) -> None:
        """Every progress update not yet written, in one statement (one writer at a time,
        so the event log keeps each job's steps in order)."""
        async with self.progress_lock:
            if self.progress:
                updates, self.progress = self.progress, []
                await self.queue.progress_all(updates)

    async def heartbeat(self) -> None:
        """Renew every lease this executor holds — its runs' and the group ahead — in one
        statement; with no claim on its way, hand back in the same statement whatever
        else it holds without knowing (Queue.heartbeat_all). Runs whose lease is gone
        stop; leases ahead that are gone are dropped."""
        runs = [j for j in self.runs.values() if j.renewing]
        ahead = list(self.prefetch.ahead)
        leases = [j.lease for j in runs] + ahead
        if self.prefetch.gate.locked():  # a claim on its way: renew only, this once
            renewal = await self.queue.heartbeat_all(leases)
        else:
            async with self.prefetch.gate:
                renewal = await self.queue.heartbeat_all(leases, owner=self.owner)
        if renewal.handed_back:
            log.warning("handed back jobs this executor held a lease on without knowing (a "
                        "claim whose answer the database lost)",
                        extra={"jobs": renewal.handed_back})
        for job in runs:
            if renewal.states[job.run.key].held:
                continue
            if self.runs.get(job.run.key) is not job or job.recorded or job.ending:
                continue  # it ended while the heartbeat was on its way: not lost, done
            self.lose(job, "another executor may run the job")
        self.prefetch.drop({lease.key for lease in ahead
                            if not renewal.states[lease.key].held})
        self.check()

    async def check_stops(self) -> None:
        if self.stopping.is_set():
            for job in self.runs.values():
                if job.phase == DEVICE:
                    job.stop = job.stop or Stop.SHUTDOWN
        running = [j for j in self.runs.values() if not j.stop and not j.recorded]
        if not running:
            return
        canceled = await self.queue.cancels_asked(self.owner)
        now = time.monotonic()
        for job in running:
            if job.stop or job.recorded or self.runs.get(job.run.key) is not job:
                continue
            if job.run.id in canceled:
                job.stop = Stop.CANCELED
                # The job ends now; the engine stops it at its next step or poll. One
                # whose group started but that never stepped had not begun at all.
                await self.queue.fail(job.lease,
                                      f"canceled at step {job.step} of {job.total}"
                                      if job.total else "canceled before it started",
                                      retry=False)
                job.recorded = True
                log.info("job canceled", extra={"job": job.run.id, "step": job.step})
            elif job.phase == DEVICE and now - job.started > self.settings.job_timeout:
                job.stop = Stop.TIMEOUT

    def stepped(self, keys: list[LeaseKey], node: str, step: int, total: int,
                at: float) -> None:
        """On the event loop, after a step: progress to write, cancels to see."""
        now = time.monotonic()
        for key in keys:
            job = self.runs.get(key)
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
    def step(self, runs: list[Run], node: str, step: int, total: int) -> None:
        assert self.loop is not None  # set by run(), which starts every job
        self.loop.call_soon_threadsafe(self.stepped, [r.key for r in runs], node, step,
                                       total, time.time())

    def stop_reason(self, run: Run) -> Stop | None:
        job = self.runs.get(run.key)
        return job.stop if job else None

    def watched(self) -> None:
        """A service says someone watches previews: make them for a while."""
        self.watched_until = time.monotonic() + previews.WATCHED_FOR

    def preview_due(self, run: Run) -> bool:
        every = self.settings.preview_interval
        job = self.runs.get(run.key)
        if not every or job is None or job.stop or job.recorded or job.showing:
            return False
        now = time.monotonic()
        if now > self.watched_until:  # nobody watches: nothing is decoded
            return False
        if now - job.last_preview < every:
            return False
        job.last_preview = now  # (a float set from the engine's thread: atomic)
        return True

    def preview(self, run: Run, picture: Image.Image, step: int, total: int) -> None:
        assert self.loop is not None  # set by run(), which starts every job
        small = previews.picture_of(picture)  # on the engine's thread, not the loop's
        self.loop.call_soon_threadsafe(self.glimpsed, run.key, small, step, total, time.time())

    def glimpsed(self, key: LeaseKey, picture: bytes, step: int, total: int, at: float) -> None:
        """On the event loop: the picture on its way, one per job at a time (a slow
        database drops pictures, never delays a job)."""
        job = self.runs.get(key)
        if job is None or job.stop or job.recorded or job.showing:
            return
        job.showing = True
        lease = job.lease

        async def send() -> None:
            try:
                await self.queue.previews.send(lease.job_id, lease.batch_id, step, total, at,
                                               picture)
            finally:
                job.showing = False
        task = asyncio.ensure_future(send())
        self.showing.add(task)
        task.add_done_callback(self.showing.discard)

    def doing(self, what: dict[str, Any] | None) -> None:
        self.presence.doing = what
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.presence.now)
