"""genbot's own engine: bound graphs of ops on diffusers pipelines, on one GPU.

One thread owns the GPU: it runs each group's nodes up to their last device op
(generate, upscale), jobs of one template in lockstep and micro-batched
(executor.diffusers.runner). What comes after — pillow ops, encoding, saving,
uploading — runs on the finish threads while the GPU makes the next group, so between
two generations the GPU waits for nothing but the loop starting the next job. Models
stay resident (executor.diffusers.cache); after every group the engine collects
garbage, empties the CUDA cache and watches for memory that grows (a leak guard).
torch loads when the engine is made, in the executor's process only.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from executor.engine import Control, Run, Wanted
from executor.settings import ExecutorConfig
from storage.config import Config, ConfigError
from storage.files import open_store
from storage.queue import Lease
from templates import jobs
from templates.families import BYTES_PER_WEIGHT
from templates.settings import TemplatesConfig, model_path, models, models_dir

log = logging.getLogger("genbot.executor")


class DiffusersEngine:
    kind = "diffusers"
    claims_ahead = True

    def __init__(self, config: Config):
        from executor.diffusers import devices  # loads torch: the executor is where it lives
        from executor.diffusers.cache import ModelCache
        from executor.diffusers.ops import Context
        from executor.diffusers.runner import Runner
        from executor.models.registry import Registry
        self.config, s = config, config[ExecutorConfig]
        self.settings = s
        self.max_batch = s.max_batch
        self.device, self.dtype = devices.pick(s)
        vram = s.vram_budget_gb * 2**30 or devices.total_memory(self.device) * 0.85
        self.registry = Registry(config)
        self.cache = ModelCache(self.registry, self.device, self.dtype, vram_budget=vram,
                                ram_budget=s.ram_budget_gb * 2**30)
        self.context = Context(open_store(config), self.cache, font=config[TemplatesConfig].font,
                               upscaler=s.upscaler, matting=s.matting)
        self.runner: Runner | None = None  # made by start(), with the loop's control
        self.make_runner = lambda control: Runner(self.context, control, max_batch=s.max_batch,
                                                  on_oom=self.cache.clear,
                                                  previews=s.preview_interval > 0)
        # One thread owns the GPU; finishes run beside it (0 threads: on the GPU's own,
        # in line, as a bare loop would).
        self.gpu = ThreadPoolExecutor(1, thread_name_prefix="genbot-gpu")
        self.finishers = ThreadPoolExecutor(s.finish_threads, thread_name_prefix="genbot-finish") \
            if s.finish_threads else self.gpu
        self.allowed: list[str] | None = None  # set by start() once models are on disk
        self.cannot: dict[str, str] = {}  # model -> why this executor does not take its jobs
        self.stats: Counter = Counter()
        self.baseline: int | None = None
        self.memory: tuple[int | None, float] = (None, float("inf"))  # in use, total
        self.on_gpu: tuple[str, ...] = ()  # the models of the group generating now

    # --- before the first job -------------------------------------------------------------
    async def start(self, control: Control) -> None:
        self.runner = self.make_runner(control)
        self.cache.on_load = lambda model: control.doing(
            {"what": "loading", "models": [model]} if model else None)
        if self.registry.needs_demo():
            control.doing({"what": "building_demo", "models": self.registry.needs_demo()})
            await asyncio.to_thread(self.build_missing_demo_models)
            control.doing(None)
        self.allowed = self.placement()
        log.info("executor ready", extra={"device": self.device,
                                          "dtype": str(self.dtype).removeprefix("torch.")})

    def build_missing_demo_models(self) -> None:
        missing = [models(self.config)[n].path.removeprefix("demo:")
                   for n in self.registry.needs_demo()]
        from executor.models import demo
        unknown = sorted(set(missing) - set(demo.ALL))
        if unknown:
            raise ConfigError(f"[models]: no demo model {', '.join(unknown)} "
                              f"(demo models: {', '.join(demo.ALL)})")
        log.info("building demo models", extra={"models": missing})
        demo.build(models_dir(self.config) / "demo", missing)

    def placement(self) -> list[str] | None:
        """The models this executor takes jobs for: [executor] models (or all of [models])
        less those whose files are missing or would not fit its device memory; None:
        anything. Why it leaves each other model is said in the registry (`cannot_run`),
        so a submission no executor can run is told so instead of waiting."""
        chosen = list(self.settings.models)
        unknown = sorted(set(chosen) - set(self.registry.names))
        if unknown:
            raise ConfigError(f"[executor] models: {', '.join(unknown)} not in [models] "
                              f"(known: {', '.join(self.registry.names) or 'none'})")
        self.cannot = {}
        for name in self.registry.names:
            path = model_path(self.config, models(self.config)[name])
            if chosen and name not in chosen:
                self.cannot[name] = "not among its [executor] models"
            elif not path.exists():
                self.cannot[name] = f"its file {path} does not exist on {socket.gethostname()}"
            elif why := self.plan_memory(name):
                self.cannot[name] = why
        if self.cannot:
            log.info("models this executor leaves to others", extra={"cannot_run": self.cannot})
        if not chosen and not self.cannot:
            return None
        return [n for n in self.registry.names if n not in self.cannot]

    def plan_memory(self, name: str) -> str | None:
        """Plan a model's memory from its files (executor.models.memory): the offload it
        runs with goes to the cache; a model that does not fit, or cannot be read, says why."""
        from executor.models import memory
        from executor.models.registry import ModelError
        try:
            info = self.registry.get(name)
        except ModelError as e:
            return str(e)
        need = memory.need(info.path if info.single_file or info.kind == "lora" else
                           model_path(self.config, info.entry), info.family,
                           dtype_bytes=self.dtype.itemsize,
                           pixels=info.size * info.size if info.size else None,
                           work_gib=info.defaults.get("work_gib"),
                           beside=Path(info.config_dir) if info.model_type == "transformer"
                           and info.config_dir else None,
                           quantized={"transformer": BYTES_PER_WEIGHT[info.entry.quantize]}
                           if info.entry.quantize else None)
        planned = memory.plan(need, self.cache.vram_budget, info.entry.offload)
        if planned.offload is None:
            return planned.why_not(info.entry.offload)
        self.cache.offloads[name] = planned.offload
        return None

    # --- what to claim -----------------------------------------------------------------
    async def ready(self) -> bool:
        return True

    def backoff(self) -> float:
        return 0.0

    def wanted(self) -> Wanted:
        """Prefer the models the GPU will hold when the claimed job starts: the group on it
        now (claiming ahead: it may still be loading its model, evicting the one resident),
        else what is resident."""
        return Wanted(prefer=self.on_gpu or tuple(self.cache.resident()), only=self.allowed)

    def interrupted(self) -> None:
        return None

    def prepare(self, lease: Lease) -> Run:
        from executor.diffusers.runner import JobRun
        job = jobs.decode(lease.workflow)
        if not isinstance(job, jobs.DiffusersJob):  # claims skip other engines' jobs
            raise TypeError(f"job {lease.job_id} is a {type(job).__name__}")
        return JobRun(lease, job=job)

    # --- a group of jobs ---------------------------------------------------------------
    async def generate(self, runs: list[Run]) -> None:
        """The group's GPU part, on the GPU's thread."""
        assert self.runner is not None
        from executor.diffusers.runner import JobRun
        self.on_gpu = tuple(sorted({r.lease.affinity for r in runs if r.lease.affinity}))
        try:
            await asyncio.get_running_loop().run_in_executor(
                self.gpu, self.runner.run_device, cast(list[JobRun], runs))
        finally:
            self.on_gpu = ()

    async def finish(self, run: Run) -> None:
        """The job's finish (pillow ops, encode, save, upload), off the GPU's path."""
        assert self.runner is not None
        from executor.diffusers.runner import JobRun
        await asyncio.get_running_loop().run_in_executor(
            self.finishers, self.runner.finish, cast(JobRun, run))

    async def after(self, runs: list[Run], taken: int) -> bool:
        """Memory hygiene after every group: collect, empty the CUDA cache, watch drift."""
        from executor.diffusers import devices
        devices.release(self.device, refreeze=self.cache.changed, dropped=self.cache.dropped)
        self.cache.changed = self.cache.dropped = False
        in_use = devices.in_use(self.device)
        used = in_use - self.cache.resident_bytes()
        self.memory = (in_use, devices.total_memory(self.device))
        if self.baseline is None or used < self.baseline:  # the least seen since the last
            self.baseline = used  # rebuild: a first reading swollen by a passing allocation
            # would otherwise hide that much real drift (CI saw a 400 MB leak go unnoticed)
        drift = (used - self.baseline) / 2**20
        limit = self.settings.memory_drift_mb
        if not (limit and drift > limit):
            return False
        self.stats["drift_rebuilds"] += 1
        log.warning("memory drift: rebuilding the model cache",
                    extra={"drift_mb": round(drift), "limit_mb": limit,
                           "recycle": self.settings.recycle_on_drift})
        self.cache.clear()
        gc.collect()
        self.baseline = None
        return self.settings.recycle_on_drift

    def presence(self) -> dict[str, Any]:
        in_use, total = self.memory
        return {"device": str(self.device), "memory_used": in_use,
                "memory_total": None if total == float("inf") else int(total),
                "models": sorted(self.cache.resident()), "allow": self.allowed,
                "stats": {"models_resident": self.cache.resident_bytes(),
                          "cannot_run": self.cannot,
                          "cache": {k: v for k, v in self.cache.stats.items() if ":" not in k}}}

    async def close(self, *, recycling: bool) -> None:
        self.finishers.shutdown(wait=False)
        self.gpu.shutdown(wait=False)
