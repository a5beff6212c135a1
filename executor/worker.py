"""The executor: claim -> run -> save -> complete, heartbeating while it runs.

One process per GPU: `genbot worker`, or a supervised child of `genbot serve`, so a
CUDA crash, a segfault or a leak never takes the chat bot down; a job whose executor
died comes back through its lease. Read `Worker.run` top to bottom.
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
from dataclasses import dataclass, field

from executor import VERSION
from executor.runner import JobRun, Stop
from storage.config import Config, ConfigError
from storage.files import open_store
from storage.logs import setup_logging
from storage.queue import Lease, Queue, open_queue
from storage.workers import Workers, owner_name

log = logging.getLogger("genbot.executor")

EXIT_RECYCLE = 75  # "start me again": after recycle_after_jobs, or memory drift


@dataclass
class Running:
    """One job of the group being run, as the event loop tracks it."""
    lease: Lease
    started: float
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
        self.running: dict[int, Running] = {}
        self.stopping = asyncio.Event()
        self.stats: Counter = Counter()
        self.baseline: int | None = None
        self.exit_code = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.workers = Workers.of(self.queue)
        self.allowed: list[str] | None = None  # set by placement() once models are on disk
        self.started_at = time.time()
        self.memory: tuple[int | None, float] = (None, float("inf"))  # in use, total
        self.doing: dict | None = None  # what keeps it from its jobs now (the registry says it)
        self.cache.on_load = self.loading

    # --- the loop --------------------------------------------------------------------
    async def run(self) -> int:
        self.loop = asyncio.get_running_loop()
        if self.registry.needs_demo():
            self.doing = {"what": "building_demo", "models": self.registry.needs_demo()}
            await self.beat()
        await asyncio.to_thread(self.build_missing_demo_models)
        self.doing = None
        self.allowed = self.placement()
        log.info("executor ready", extra={"owner": self.owner, "device": self.device,
                                          "dtype": str(self.dtype).removeprefix("torch.")})
        beating = asyncio.create_task(self.beat_forever())
        try:
            while not self.stopping.is_set():
                leases = await self.claim()
                if not leases:
                    await self.idle()
                    continue
                await self.execute(leases)
                self.after_jobs()
                await self.beat()  # idle again, at once, with fresh memory figures
                if self.exit_code:
                    break
                if self.config.queue.batch_delay:
                    await self.sleep(self.config.queue.batch_delay)
        finally:
            beating.cancel()
            with contextlib.suppress(Exception):  # the database may be what failed
                await self.workers.stopped(self.owner)
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

    async def claim(self) -> list[Lease]:
        first = await self.queue.claim(self.owner, prefer=self.cache.resident(),
                                       only=self.allowed)
        if first is None:
            return []
        more = await self.queue.claim_followers(first, self.settings.max_batch - 1) \
            if self.settings.max_batch > 1 else []
        return [first, *more]

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

    async def execute(self, leases: list[Lease]) -> None:
        now = time.monotonic()
        self.running = {lease.job_id: Running(lease, now) for lease in leases}
        await self.beat()  # busy, at once
        runs = [JobRun(lease.job_id, lease.batch_id, lease.workflow) for lease in leases]
        watch = asyncio.create_task(self.watch())
        try:
            await asyncio.to_thread(self.runner.run, runs)
        except Exception as e:  # noqa: BLE001 - a bug here must not stop the executor
            log.exception("the runner failed; its jobs will be retried")
            for run in runs:
                if run.live and not run.outputs:
                    run.error, run.retryable = f"executor error: {type(e).__name__}: {e}", True
        finally:
            watch.cancel()
        for run in runs:
            await self.finish(run)
        self.running = {}

    async def finish(self, run: JobRun) -> None:
        job = self.running[run.id]
        lease, extra = job.lease, {"batch": job.lease.batch_id, "job": run.id}
        stop = job.stop or run.stopped
        if job.recorded or stop == Stop.LEASE_LOST:
            return
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
            status = await self.queue.complete(lease, run.outputs)
            log.info("job done", extra={**extra, "status": status, "outputs": run.outputs,
                                        "seconds": round(time.monotonic() - job.started, 3)})
        self.stats["jobs"] += 1

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
        if jobs_limit and self.stats["jobs"] >= jobs_limit:
            log.info("recycling the executor", extra={"jobs": self.stats["jobs"]})
            self.exit_code = EXIT_RECYCLE

    def report(self, in_use: int, total: float) -> None:
        self.memory = (in_use, total)

    # --- the worker registry ------------------------------------------------------------
    async def beat_forever(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(self.config.queue.heartbeat_seconds)

    async def beat(self) -> None:
        """This executor's row in the registry: where it runs, what it holds and does —
        what /queue, the API, the dashboard and /metrics show of it, on any host."""
        in_use, total = self.memory
        try:
            await self.workers.beat(
                self.owner, host=socket.gethostname(), pid=os.getpid(), device=str(self.device),
                version=VERSION, job=next(iter(self.running), None), memory_used=in_use,
                memory_total=None if total == float("inf") else int(total),
                models=sorted(self.cache.resident()), allow=self.allowed,
                started_at=self.started_at,
                stats={"doing": self.doing, "jobs": self.stats["jobs"],
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

    # --- while a group runs -------------------------------------------------------------
    async def watch(self) -> None:
        """Heartbeats, cancels, timeouts and progress of the running group."""
        beat = time.monotonic()
        tick = min(0.5, self.config.queue.heartbeat_seconds)
        while True:
            await asyncio.sleep(tick)
            try:
                await self.check_stops()
                if time.monotonic() - beat >= self.config.queue.heartbeat_seconds:
                    beat = time.monotonic()
                    await self.heartbeat()
            except Exception:  # noqa: BLE001 - e.g. the database away for a moment: try again
                log.exception("heartbeat or cancel check failed; retrying")

    async def heartbeat(self) -> None:
        for job in self.running.values():
            if job.recorded or job.stop == Stop.LEASE_LOST:
                continue
            state = await self.queue.heartbeat(job.lease)
            if not state.held:
                job.stop = Stop.LEASE_LOST
                log.warning("lease lost: another executor may run the job",
                            extra={"job": job.lease.job_id})

    async def check_stops(self) -> None:
        if self.stopping.is_set():
            for job in self.running.values():
                job.stop = job.stop or Stop.SHUTDOWN
        canceled = await self.queue.cancels_asked(self.owner)
        now = time.monotonic()
        for job_id, job in self.running.items():
            if job.stop:
                continue
            if job_id in canceled:
                job.stop = Stop.CANCELED
                # The job ends now; its pipeline stops at the end of this step.
                await self.queue.fail(job.lease, f"canceled at step {job.step} of {job.total}",
                                      retry=False)
                job.recorded = True
                log.info("job canceled", extra={"job": job_id, "step": job.step})
            elif now - job.started > self.settings.job_timeout:
                job.stop = Stop.TIMEOUT

    async def on_step(self, job_ids: list[int], node: str, step: int, total: int) -> None:
        now = time.monotonic()
        for job_id in job_ids:
            job = self.running[job_id]
            job.step, job.total = step, total
            if job.stop or job.recorded:
                continue
            if step == total or now - job.last_progress >= self.settings.progress_interval:
                job.last_progress = now
                await self.queue.progress(job.lease, {"node": node, "step": step, "total": total,
                                                      "row": job.lease.row})
        await self.check_stops()

    # Control, called from the runner's thread:
    def step(self, job_ids: list[int], node: str, step: int, total: int) -> None:
        """After each denoising step: report it, and learn of a cancel before the next."""
        assert self.loop is not None  # set by run(), which starts every job
        future = asyncio.run_coroutine_threadsafe(self.on_step(job_ids, node, step, total),
                                                  self.loop)
        try:
            future.result(timeout=30)
        except Exception as e:  # noqa: BLE001 - a slow database must not kill the job
            log.warning("progress not recorded: %s", e)

    def stop_reason(self, job_id: int) -> Stop | None:
        job = self.running.get(job_id)
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
