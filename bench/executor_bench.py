"""Executor benchmark on the demo models: prints figures and ratios; asserts nothing.
Record results in docs/benchmarks.md.

  python bench/executor_bench.py [--device cpu|cuda] [--dtype auto|float16|...] [--size 64]
                                 [--steps 8] [--jobs 100]

1. Overhead: N generate+save jobs through queue + executor (outputs saved, progress
   recorded) vs the bare diffusers calls for the same images in a loop, saving PNGs.
   Wall-time ratio; target <= 1.05.
2. Affinity: 60 jobs alternating among 3 checkpoints with a cache that holds one:
   model loads with the claim preferring the resident model vs strict FIFO.
   Target: loads = 3 (the number of distinct models) at equal priority.
3. Batching: images/s at max_batch 4 vs 1 (on a GPU expect >= 1.5x; on a CPU the
   batch mostly shares the per-call overhead).
Each pair runs side by side in one process, one after the other, on the same models.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from executor import demo  # noqa: E402
from executor.worker import Worker, quiet_libraries  # noqa: E402
from storage import config as cfg  # noqa: E402
from storage.queue import NewJob, Submission, open_queue  # noqa: E402


def workflow(row: int, model: str, seed: int, steps: int, size: int) -> dict:
    """A bound generate -> save workflow, as intake would store it."""
    return {"template": "bench", "row": row, "params": {"seed": seed},
            "nodes": [{"id": "gen", "op": "generate", "inputs": {
                "prompt": f"a product photo, row {row}", "negative": "", "model": model,
                "seed": seed, "steps": steps, "guidance": 5.0, "size": [size, size],
                "sampler": None, "init_image": None, "strength": 0.75, "control_image": None,
                "controlnet": None, "control_scale": 1.0, "loras": []}},
                      {"id": "out", "op": "save", "inputs": {"image": {"@": "gen.image"},
                                                             "name": f"{row}.png",
                                                             "format": "png"}}],
            "outputs": {"out": f"{row}.png"}}


DTYPE = "auto"


def make_config(data: Path, models: Path, device: str, **executor) -> cfg.Config:
    (data / "models").mkdir(parents=True, exist_ok=True)
    if not (data / "models" / "demo").exists():
        (data / "models" / "demo").symlink_to(models)
    return cfg.from_dict({
        "service": {"data_dir": str(data), "log_level": "warning"},
        "queue": {"poll_interval": 0.05, "max_queue_size": 100_000},
        "executor": {"device": device, "dtype": DTYPE, **executor},
        "models": {"sd15_b": str(models / "sd15_b"), "sd15_c": str(models / "sd15_c")}})


class Executor:
    """A queue and a running in-process worker on their own data folder."""

    def __init__(self, config: cfg.Config, *, fifo: bool = False):
        self.config, self.fifo = config, fifo

    async def __aenter__(self):
        self.queue = await open_queue(self.config)
        self.worker = Worker(self.config, self.queue, owner="bench")
        if self.fifo:
            self.worker.cache.resident = lambda: []  # strict FIFO: no preference
        self.task = asyncio.create_task(self.worker.run())
        return self

    async def __aexit__(self, *exc):
        self.worker.stopping.set()
        await self.task
        await self.queue.close()

    async def run(self, jobs: list[NewJob]) -> float:
        """Seconds from enqueue until every job has ended."""
        started = time.perf_counter()
        await self.queue.enqueue(Submission("bench", "alice", jobs))
        while True:
            counts = await self.queue.active_counts()
            if not counts.total:
                return time.perf_counter() - started
            await asyncio.sleep(0.02)


def bare_pipeline(models: Path, device: str, dtype):
    from diffusers import StableDiffusionPipeline
    pipe = StableDiffusionPipeline.from_pretrained(models / "sd15", local_files_only=True,
                                                   torch_dtype=dtype,
                                                   safety_checker=None,
                                                   requires_safety_checker=False).to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def bare_loop(pipe, rows: range, steps: int, size: int, out: Path) -> float:
    """The same images with diffusers alone: a pipeline call and a PNG save per image."""
    import torch
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for row in rows:
        image = pipe(prompt=f"a product photo, row {row}", negative_prompt="",
                     num_inference_steps=steps, guidance_scale=5.0, height=size, width=size,
                     generator=torch.Generator("cpu").manual_seed(row)).images[0]
        image.save(out / f"{row}.png")
    return time.perf_counter() - started


def gen_jobs(rows: range, steps: int, size: int, models=("sd15",)) -> list[NewJob]:
    return [NewJob(r, workflow(r, models[i % len(models)], r, steps, size), models[i % len(models)])
            for i, r in enumerate(rows)]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--dtype", default="auto",
                        choices=("auto", "float32", "float16", "bfloat16"))
    parser.add_argument("--smoke", action="store_true", help="a few of each, to prove it "
                        "runs (the test suite): figures mean nothing")
    args = parser.parse_args()
    alternating, batch_rounds = (6, 1) if args.smoke else (60, 4)
    global DTYPE
    DTYPE = args.dtype
    from executor import devices
    _, dtype = devices.pick(cfg.ExecutorConfig(device=args.device, dtype=args.dtype))
    quiet_libraries()
    tmp = Path(tempfile.mkdtemp(prefix="genbot-bench-"))
    try:
        models = tmp / "models"
        demo.build(models)
        for copy_name in ("sd15_b", "sd15_c"):  # a third and fourth "model", same weights
            shutil.copytree(models / "sd15", models / copy_name)
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python "
              f"{platform.python_version()}, device {args.device} {str(dtype)[6:]}; demo models, "
              f"{args.size}x{args.size}, {args.steps} steps")

        # 1. overhead, in rounds that alternate the two sides (the machine's speed drifts)
        n, size, steps, rounds = args.jobs, args.size, args.steps, 5
        per = n // rounds
        pipe = bare_pipeline(models, args.device, dtype)
        bare_loop(pipe, range(1, 3), steps, size, tmp / "warm")
        bare = queued = 0.0
        config = make_config(tmp / "o", models, args.device, max_batch=1, progress_interval=1.0)
        async with Executor(config) as ex:
            await ex.run(gen_jobs(range(1, 3), steps, size))  # loads the model
            for r in range(rounds):
                rows = range(100 + r * per, 100 + (r + 1) * per)
                bare += bare_loop(pipe, rows, steps, size, tmp / "bare")
                queued += await ex.run(gen_jobs(rows, steps, size))
        print(f"overhead: {per * rounds} jobs  bare diffusers {bare:.2f} s  queue+executor "
              f"{queued:.2f} s  ratio {queued / bare:.3f} (target <= 1.05)")

        # 2. affinity
        names = ("sd15", "sd15_b", "sd15_c")
        one_model = 8 / 1024  # GB: the demo checkpoints are 6-7 MB
        loads = {}
        for label, fifo in (("preference", False), ("fifo", True)):
            config = make_config(tmp / f"a-{label}", models, args.device, max_batch=1,
                                 vram_budget_gb=one_model, ram_budget_gb=0.0)
            async with Executor(config, fifo=fifo) as ex:
                await ex.run(gen_jobs(range(2, 2 + alternating), 2, 64, names))
                loads[label] = ex.worker.cache.stats["loads"]
        print(f"affinity: {alternating} jobs alternating over 3 models, cache holds 1  model "
              f"loads with "
              f"preference {loads['preference']}  strict FIFO {loads['fifo']} (target: 3)")

        # 3. batching, in alternating rounds
        seconds = {1: 0.0, 4: 0.0}
        images = 0
        async with Executor(make_config(tmp / "b1", models, args.device, max_batch=1,
                                        progress_interval=1.0)) as one, \
                Executor(make_config(tmp / "b4", models, args.device, max_batch=4,
                                     progress_interval=1.0)) as four:
            for ex in (one, four):
                await ex.run(gen_jobs(range(1, 5), steps, size))  # loads the model
            for r in range(batch_rounds):
                rows = range(100 + r * 16, 116 + r * 16)
                seconds[1] += await one.run(gen_jobs(rows, steps, size))
                seconds[4] += await four.run(gen_jobs(rows, steps, size))
                images += len(rows)
        rate = {k: images / v for k, v in seconds.items()}
        print(f"batching: images/s max_batch 1 {rate[1]:.2f}  max_batch 4 {rate[4]:.2f}  "
              f"ratio {rate[4] / rate[1]:.2f} (GPU target >= 1.5)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
