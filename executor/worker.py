"""The executor: claim -> generate -> finish -> complete, a pipeline that keeps the GPU busy.

One process per GPU: `genbot worker`, or a supervised child of `genbot serve`, so a
CUDA crash, a segfault or a leak never takes the chat bot down; a job whose executor
died comes back through its lease. Read `Worker.run` top to bottom.

While a group of jobs is on the GPU (the device thread), the executor already holds
the next one, claimed ahead (docs/queue.md); what a job does after its last GPU node —
pillow ops, encoding, metadata, saving, uploading — runs on the finish threads while
the next job generates, and the job is completed once its files are stored. So between
two generations the GPU waits for one database statement (starting the job claimed
ahead), not for a PNG encoder, an upload or the registry. Nothing on the GPU's thread
waits on the database: progress and cancel checks go to the event loop, which writes
them in batches, and heartbeats renew every lease the executor holds in one statement.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import time
import warnings
from collections import Counter
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from executor import VERSION
from executor.runner import JobRun, Stop
from storage.config import Config, ConfigError
from storage.files import open_store
from storage.logs import setup_logging
from storage.queue import Claim, Lease, Queue, Status, open_queue
from storage.workers import Workers, owner_name

log = logging.getLogger("genbot.executor")

EXIT_RECYCLE = 75  # "start me again": after recycle_after_jobs, or memory drift

AHEAD, DEVICE, FINISHING = "ahead", "device", "finishing"  # where a held job is


@dataclass
class Held:
    """A job this executor holds a lease on: claimed ahead, on the GPU, or finishing."""
    lease: Lease
    phase: str
    started: float = 0.0  # when it went to the GPU (monotonic): its timeout counts from here
    stop: Stop | None = None  # why it must stop
    recorded: bool = False  # its end is already written (e.g. canceled mid-run)
    last_progress: float = 0.0
    step: int = 0
    total: int = 0


@dataclass
class Worker:
    config: Config
    queue: Queue
    owner: str = field(default_factory=owner_name)

    def __post_init__(self):
        from executor import devices  # loads torch: the executor is where it lives
        from executor.cache import ModelCache
        from executor.models import Registry
        from executor.ops import Context
        from executor.runner import Runner
        s = self.config.executor
        self.settings = s
        self.device, self.dtype = devices.pick(s)
        vram = s.vram_budget_gb * 2**30 or devices.total_memory(self.device) * 0.85
        self.registry = Registry(self.config)
        self.cache = ModelCache(self.registry, self.device, self.dtype, vram_budget=vram,
                                ram_budget=s.ram_budget_gb * 2**30)
        self.runner = Runner(Context(open_store(self.config), self.cache, font=s.font,
                                     upscaler=s.upscaler),
                             control=self, max_batch=s.max_batch, on_oom=self.cache.clear)
        self.gpu: ThreadPoolExecutor | None = None  # these two are made by run()
        self.finishers: ThreadPoolExecutor | None = None
        self.held: dict[int, Held] = {}
        self.ahead: list[Lease] = []  # the next group, claimed ahead
        self.claiming: asyncio.Task | None = None  # a claim ahead in flight
        self.ahead_wanted = False  # the next completion should claim ahead
        self.finishing: set[asyncio.Task] = set()
        self.last_end: asyncio.Future | None = None  # set when the last job handed on ended
        self.finish_room: asyncio.Semaphore | None = None  # back-pressure: see run()
        self.progress: list[tuple[Lease, dict[str, Any], float]] = []  # to write, in order
        self.poked = asyncio.Event()  # a step happened: write progress, look for cancels
        self.progress_lock = asyncio.Lock()
        self.stopping = asyncio.Event()
        self.stats: Counter = Counter()
        self.taken = 0  # jobs that went to the GPU (recycle_after_jobs counts these)
        self.baseline: int | None = None
        self.exit_code = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.workers = Workers.of(self.queue)
        self.allowed: list[str] | None = None  # set by placement() once models are on disk
        self.started_at = time.time()
        self.memory: tuple[int | None, float] = (None, float("inf"))  # in use, total
        self.doing: dict | None = None  # what keeps it from its jobs now (the registry says it)
        self.beating: asyncio.Task | None = None
        self.beat_again = False
        self.was_busy, self.last_beat = False, 0.0  # what the registry row last said, when
        self.beat_now = asyncio.Event()
        self.beat_lock = asyncio.Lock()  # one write at a time: the last one says the latest
        self.cache.on_load = self.loading

    # --- the loop --------------------------------------------------------------------
    async def run(self) -> int:
        self.loop = asyncio.get_running_loop()
        # One thread owns the GPU; finishes run beside it (0 threads: on the GPU's own,
        # in line, as a bare loop would).
        self.gpu = ThreadPoolExecutor(1, thread_name_prefix="genbot-gpu")
        threads = self.settings.finish_threads
        self.finishers = ThreadPoolExecutor(threads, thread_name_prefix="genbot-finish") \
            if threads else self.gpu
        # A small queue of finished images: past it, the GPU waits for storage.
        self.finish_room = asyncio.Semaphore(2 * self.settings.max_batch)
        if self.registry.needs_demo():
            self.doing = {"what": "building_demo", "models": self.registry.needs_demo()}
            await self.beat()
        await asyncio.to_thread(self.build_missing_demo_models)
        self.doing = None
        self.allowed = self.placement()
        log.info("executor ready", extra={"owner": self.owner, "device": self.device,
                                          "dtype": str(self.dtype).removeprefix("torch.")})
        await self.queue.cancel_bell.listen()
        beating = asyncio.create_task(self.beat_forever())
        watching = asyncio.create_task(self.watch())
        try:
            while not self.stopping.is_set():
                leases = await self.next_group()
                if not leases:
                    await self.idle()
                    continue
                await self.generate(leases)
                self.after_jobs()
                self.beat_soon()  # idle or busy again, with fresh memory figures
                if self.exit_code:
                    break
                if self.config.queue.batch_delay:  # a real rest: nothing overlaps it
                    await self.finished()
                    await self.sleep(self.config.queue.batch_delay)
        finally:
            await self.wind_down()
            beating.cancel()
            watching.cancel()
            with contextlib.suppress(Exception):  # the database may be what failed
                await self.workers.stopped(self.owner)
            self.finishers.shutdown(wait=False)
            self.gpu.shutdown(wait=False)
        return self.exit_code

    def placement(self) -> list[str] | None:
        """The models this executor takes jobs for: [executor] models (or all of [models])
        less those whose files would not fit its device memory; None: anything."""
        chosen = list(self.settings.models)
        unknown = sorted(set(chosen) - set(self.registry.names))
        if unknown:
            raise ConfigError(f"[executor] models: {', '.join(unknown)} not in [models] "
                              f"(known: {', '.join(self.registry.names) or 'none'})")
        budget = self.cache.vram_budget
        if not chosen and budget == float("inf"):
            return None
        too_big = {n for n in self.registry.names if self.registry.size(n) > budget}
        if too_big:
            log.info("models too big for this executor's memory, left to others: %s",
                     ", ".join(sorted(too_big)))
        return [n for n in chosen or self.registry.names if n not in too_big]

    def wanted(self, *, ahead: bool = False) -> Claim:
        return Claim(self.owner, self.preferred(), self.allowed, ahead=ahead)

    def preferred(self) -> tuple[str, ...]:
        """The models to prefer in a claim: those the GPU will hold when the claimed job
        starts — the group on it now (claiming ahead: it may still be loading its model,
        evicting the one resident), else what is resident."""
        on_gpu = sorted({h.lease.affinity for h in self.held.values()
                         if h.phase == DEVICE and h.lease.affinity})
        return tuple(on_gpu) if on_gpu else tuple(self.cache.resident())

    async def next_group(self) -> list[Lease]:
        """The jobs to put on the GPU now: the group claimed ahead, started (one
        statement), or else a fresh claim."""
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
        first = await self.queue.claim(self.owner, prefer=self.preferred(),
                                       only=self.allowed, ahead=ahead)
        return await self.with_followers(first)

    async def with_followers(self, first: Lease | None) -> list[Lease]:
        if first is None:
            return []
        more = await self.queue.claim_followers(first, self.settings.max_batch - 1) \
            if self.settings.max_batch > 1 else []
        return [first, *more]

    def may_claim_ahead(self) -> bool:
        limit = self.settings.recycle_after_jobs
        return not (self.stopping.is_set() or self.exit_code or self.ahead
                    or self.claiming is not None or self.config.queue.batch_delay
                    or (limit and self.taken + self.settings.max_batch > limit))

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
        if self.stopping.is_set() or self.exit_code:
            with contextlib.suppress(Exception):  # else their claims run out
                await self.queue.unclaim(leases)
            return
        self.ahead = leases
        for lease in leases:
            self.held[lease.job_id] = Held(lease, AHEAD)

    async def idle(self) -> None:
        waiting = asyncio.ensure_future(self.queue.wait_for_work())
        stopping = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        for task in (waiting, stopping):
            task.cancel()

    async def sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stopping.wait(), seconds)
        except TimeoutError:
            pass

    async def generate(self, leases: list[Lease]) -> None:
        """The group's GPU part; then each job's finish goes beside the next group."""
        assert self.loop is not None and self.finish_room is not None
        now = time.monotonic()
        for lease in leases:
            self.held[lease.job_id] = Held(lease, DEVICE, now)
        self.taken += len(leases)
        self.beat_soon()  # busy, at once
        self.claim_ahead()
        runs = [JobRun(lease.job_id, lease.batch_id, lease.workflow) for lease in leases]
        try:
            await self.loop.run_in_executor(self.gpu, self.runner.run_device, runs)
        except Exception as e:  # noqa: BLE001 - a bug here must not stop the executor
            log.exception("the runner failed; its jobs will be retried")
            for run in runs:
                if run.live and not run.outputs:
                    run.error, run.retryable = f"executor error: {type(e).__name__}: {e}", True
        for run in runs:
            await self.finish_room.acquire()  # back-pressure: storage is behind
            self.held[run.id].phase = FINISHING
            before, self.last_end = self.last_end, self.loop.create_future()
            task = asyncio.create_task(self.finish(run, before, self.last_end))
            self.finishing.add(task)
            task.add_done_callback(self.finishing.discard)

    async def finish(self, run: JobRun, before: asyncio.Future | None,
                     ended: asyncio.Future) -> None:
        """Off the GPU's path: the job's finish (encode, save, upload), then its end —
        recorded after the end of the job before it, so jobs end in the order they
        started (a chat thread gets row 2's image before row 3's) however the finish
        threads interleave."""
        assert self.loop is not None and self.finish_room is not None
        try:
            job = self.held[run.id]
            if run.live and not job.recorded and job.stop is None:
                await self.loop.run_in_executor(self.finishers, self.runner.finish, run)
            if before is not None:
                await before
            await self.record(run)
        except Exception:  # noqa: BLE001 - the lease brings the job back
            log.exception("could not record the end of job %s", run.id)
        finally:
            ended.set_result(None)
            self.held.pop(run.id, None)
            self.finish_room.release()
            self.beat_soon()  # its count, at once
            if self.ahead_wanted and len(self.finishing) <= 1:  # no completion will carry it
                self.claim_ahead(now=True)

    async def record(self, run: JobRun) -> None:
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
        if not (self.ahead_wanted and self.may_claim_ahead()):
            return await self.queue.complete(lease, outputs)
        self.ahead_wanted = False
        done: asyncio.Future[tuple[Status | None, Lease | None]] = \
            asyncio.get_running_loop().create_future()

        async def claimed() -> list[Lease]:
            try:
                done.set_result(await self.queue.complete_and_claim(
                    lease, outputs, self.wanted(ahead=True)))
            except Exception as e:
                done.set_exception(e)
                return []
            return await self.with_followers(done.result()[1])
        self.claiming = asyncio.create_task(self.hold(claimed()))
        return (await done)[0]

    async def finished(self) -> None:
        """Until every job handed to the finish threads has ended."""
        while self.finishing:
            await asyncio.wait(set(self.finishing))

    async def wind_down(self) -> None:
        """Stopping: what is claimed ahead goes back untouched; what is finishing ends
        (its files are stored and it is completed) before the executor exits."""
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
        await self.finished()

    def after_jobs(self) -> None:
        """Memory hygiene after every group: collect, empty the CUDA cache, watch drift."""
        from executor import devices
        devices.release(self.device, refreeze=self.cache.changed)
        self.cache.changed = False
        in_use = devices.in_use(self.device)
        used = in_use - self.cache.resident_bytes()
        self.report(in_use, devices.total_memory(self.device))
        if self.baseline is None:
            self.baseline = used
        drift = (used - self.baseline) / 2**20
        limit = self.settings.memory_drift_mb
        if limit and drift > limit:
            self.stats["drift_rebuilds"] += 1
            log.warning("memory drift: rebuilding the model cache",
                        extra={"drift_mb": round(drift), "limit_mb": limit,
                               "recycle": self.settings.recycle_on_drift})
            if self.settings.recycle_on_drift:
                self.exit_code = EXIT_RECYCLE
            self.cache.clear()
            gc.collect()
            self.baseline = None
        jobs_limit = self.settings.recycle_after_jobs
        if jobs_limit and self.taken >= jobs_limit:
            log.info("recycling the executor", extra={"jobs": self.taken})
            self.exit_code = EXIT_RECYCLE

    def report(self, in_use: int, total: float) -> None:
        self.memory = (in_use, total)

    # --- the worker registry ------------------------------------------------------------
    async def beat_forever(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(self.config.queue.heartbeat_seconds)

    def beat_soon(self) -> None:
        """Write the registry row in the background: the GPU does not wait for it. A
        change between idle and busy is written at once; otherwise at most once a second,
        the latest state last."""
        self.beat_again = True
        if (self.current_job() is not None) != self.was_busy:
            self.beat_now.set()
        if self.beating is None or self.beating.done():
            self.beating = asyncio.create_task(self.beat_while_asked())

    async def beat_while_asked(self) -> None:
        while self.beat_again:
            wait = self.last_beat + 1.0 - time.monotonic()
            if wait > 0 and not self.beat_now.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.beat_now.wait(), wait)
            self.beat_now.clear()
            self.beat_again = False
            await self.beat()

    def current_job(self) -> int | None:
        """The job the registry shows: the one on the GPU, else one being finished."""
        for phase in (DEVICE, FINISHING):
            if found := next((i for i, h in self.held.items() if h.phase == phase), None):
                return found
        return None

    async def beat(self) -> None:
        """This executor's row in the registry: where it runs, what it holds and does —
        what /queue, the API, the dashboard and /metrics show of it, on any host."""
        async with self.beat_lock:
            await self._beat()

    async def _beat(self) -> None:
        in_use, total = self.memory
        job = self.current_job()
        self.was_busy, self.last_beat = job is not None, time.monotonic()
        try:
            await self.workers.beat(
                self.owner, host=socket.gethostname(), pid=os.getpid(), device=str(self.device),
                version=VERSION, job=job, memory_used=in_use,
                memory_total=None if total == float("inf") else int(total),
                models=sorted(self.cache.resident()), allow=self.allowed,
                started_at=self.started_at,
                stats={"doing": self.doing, "jobs": self.stats["jobs"],
                       "ahead": [lease.job_id for lease in self.ahead],
                       "finishing": sum(h.phase == FINISHING for h in self.held.values()),
                       "models_resident": self.cache.resident_bytes(),
                       "cache": {k: v for k, v in self.cache.stats.items() if ":" not in k}})
        except Exception as e:  # noqa: BLE001 - the database away for a moment: next beat
            log.warning("cannot write to the worker registry: %s", e)

    def loading(self, model: str | None) -> None:
        """From the runner's thread: a model starts (or ends, None) loading; said at once."""
        self.doing = {"what": "loading", "models": [model]} if model else None
        if self.loop is not None:
            asyncio.run_coroutine_threadsafe(self.beat(), self.loop)

    def build_missing_demo_models(self) -> None:
        missing = [self.config.models[n].path.removeprefix("demo:")
                   for n in self.registry.needs_demo()]
        if missing:
            from executor import demo
            unknown = sorted(set(missing) - set(demo.ALL))
            if unknown:
                raise ConfigError(f"[models]: no demo model {', '.join(unknown)} "
                                  f"(demo models: {', '.join(demo.ALL)})")
            log.info("building demo models", extra={"models": missing})
            demo.build(self.config.models_dir / "demo", missing)

    # --- beside the GPU: leases, cancels, timeouts, progress ----------------------------
    async def watch(self) -> None:
        """For every held job: progress written in batches after each step; cancels
        looked for when the queue's cancel bell rings (a running job was asked to stop)
        or every half second at the latest; timeouts; one heartbeat for all leases."""
        beat = asked = time.monotonic()
        tick = min(0.5, self.config.queue.heartbeat_seconds)
        bell = asyncio.ensure_future(self.queue.cancel_bell.wait(3600))
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
                    if time.monotonic() - beat >= self.config.queue.heartbeat_seconds:
                        beat = time.monotonic()
                        await self.heartbeat()
                except Exception:  # noqa: BLE001 - e.g. the database away for a moment
                    log.exception("heartbeat or cancel check failed; retrying")
        finally:
            bell.cancel()

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
                # The job ends now; its pipeline stops at the end of this step.
                await self.queue.fail(job.lease, f"canceled at step {job.step} of {job.total}",
                                      retry=False)
                job.recorded = True
                log.info("job canceled", extra={"job": job_id, "step": job.step})
            elif job.phase == DEVICE and now - job.started > self.settings.job_timeout:
                job.stop = Stop.TIMEOUT

    def stepped(self, job_ids: list[int], node: str, step: int, total: int, at: float) -> None:
        """On the event loop, after a denoising step: progress to write, cancels to see."""
        now = time.monotonic()
        for job_id in job_ids:
            job = self.held.get(job_id)
            if job is None:
                continue
            job.step, job.total = step, total
            if job.stop or job.recorded:
                continue
            if step == total or now - job.last_progress >= self.settings.progress_interval:
                job.last_progress = now
                self.progress.append((job.lease, {"node": node, "step": step, "total": total,
                                                  "row": job.lease.row}, at))
        self.poked.set()

    # Control, called from the GPU's thread; neither waits for anything:
    def step(self, job_ids: list[int], node: str, step: int, total: int) -> None:
        """After each denoising step: tell the event loop, and carry on."""
        assert self.loop is not None  # set by run(), which starts every job
        self.loop.call_soon_threadsafe(self.stepped, job_ids, node, step, total, time.time())

    def stop_reason(self, job_id: int) -> Stop | None:
        job = self.held.get(job_id)
        return job.stop if job else None


# --- process entry -------------------------------------------------------------------------

def quiet_libraries() -> None:
    """Strictly offline, and no progress bars or chatter from the libraries."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore", module="peft")
    warnings.filterwarnings("ignore", category=FutureWarning)
    for name in ("diffusers", "transformers", "peft", "accelerate", "huggingface_hub"):
        logging.getLogger(name).setLevel(logging.ERROR)


async def serve_worker(config: Config, *, owner: str | None = None) -> int:
    queue = await open_queue(config)
    try:
        worker = Worker(config, queue, **({"owner": owner} if owner else {}))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, worker.stopping.set)
        orphan_watch = asyncio.create_task(_stop_when_orphaned(worker))
        try:
            return await worker.run()
        finally:
            orphan_watch.cancel()
    finally:
        await queue.close()


async def _stop_when_orphaned(worker: Worker) -> None:
    """Under `genbot serve`: stop (handing the job back) if the service process is gone."""
    parent = os.environ.get("GENBOT_SUPERVISOR_PID")
    if not parent:
        return
    while os.getppid() == int(parent):
        await asyncio.sleep(1.0)
    log.warning("the service that started this executor is gone; stopping")
    worker.stopping.set()


def main(argv: list[str] | None = None) -> int:
    from storage import config as cfg
    parser = argparse.ArgumentParser(prog="genbot worker", description="Run one executor.")
    parser.add_argument("--config", help="config file (default: $GENBOT_CONFIG or ./config.toml)")
    parser.add_argument("--device", help="override [executor] device, e.g. cuda:1")
    args = parser.parse_args(argv)
    quiet_libraries()
    env = dict(os.environ)
    if args.device:
        env["GENBOT_EXECUTOR_DEVICE"] = args.device
    try:
        config = cfg.load(args.config, env)
    except cfg.ConfigError as e:
        print(f"genbot: {e}", file=sys.stderr)
        return 2
    setup_logging(config.service.log_level, config.service.log_format)
    try:
        return asyncio.run(serve_worker(config))
    except cfg.ConfigError as e:
        print(f"genbot: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
