"""Executor benchmark on the demo models: prints figures and ratios; asserts nothing.
Record results in docs/benchmarks.md.

  python bench/executor_bench.py [--device cpu|cuda] [--dtype auto|float16|...] [--size 64]
                                 [--steps 8] [--jobs 60] [--rounds 3] [--large 512]

1. Overhead: N generate+save jobs through queue + executor (outputs saved, progress
   recorded) vs the bare diffusers calls for the same images in a loop, saving PNGs, in
   alternating rounds, at max_batch 1 and at the default 4, on the SD 1.5 demo and on the
   FLUX.1 demo (a transformer with CLIP and T5) and the Qwen-Image demo (Qwen2.5-VL, real
   CFG), at --size and at --large
   (fewer rows, one step: a demo image at 512 px takes ~20 s on a CPU). Steady state:
   seconds from the first image stored to the last, per image; whole: from enqueue
   (the loop's start) to the last. Target at max_batch 1: steady state <= 1.02.
2. Affinity: 60 jobs alternating among 3 checkpoints with a cache that holds one:
   model loads with the claim preferring the resident model vs strict FIFO.
   Target: loads = 3 (the number of distinct models) at equal priority.
3. Batching: images/s at max_batch 4 vs 1 (on a GPU expect >= 1.5x; on a CPU the
   batch mostly shares the per-call overhead).
4. Finish off the GPU's path: rows generated at --size, enlarged to 1024 px and saved as
   PNG with genbot's metadata (the encode+save cost per image is measured alone
   first). The GPU gap — from one generation's end to the next one's start — in the
   bare loop (it encodes in line), in genbot with finish_threads = 0 (in line too) and
   with the default finish threads; with the local store, and with S3 (moto's server on
   loopback). The pipeline's gap should not grow with the encode and upload.
Each pair runs side by side in one process, one after the other, on the same models.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from PIL import Image  # noqa: E402

from executor.models import demo  # noqa: E402
from executor.settings import ExecutorConfig  # noqa: E402
from executor.worker import executor_loop, quiet_libraries  # noqa: E402
from storage import config as cfg  # noqa: E402
from storage.db import Database, sqlite_path  # noqa: E402
from storage.queue import NewJob, Submission, open_queue  # noqa: E402


def workflow(row: int, model: str, seed: int, steps: int, size: int, enlarge: int = 0) -> dict:
    """A bound generate -> [resize ->] save workflow, as intake would store it."""
    big = [{"id": "big", "op": "resize", "inputs": {"image": {"@": "gen.image"},
                                                    "size": [enlarge, enlarge], "width": None,
                                                    "scale": None, "aspect": None}}]
    return {"template": "bench", "row": row, "params": {"seed": seed},
            "nodes": [{"id": "gen", "op": "generate", "inputs": {
                "prompt": f"a product photo, row {row}", "negative": "", "model": model,
                "seed": seed, "steps": steps, "guidance": 5.0, "size": [size, size],
                "sampler": None, "init_image": None, "strength": 0.75, "control_image": None,
                "controlnet": None, "control_scale": 1.0, "loras": []}},
                      *(big if enlarge else []),
                      {"id": "out", "op": "save", "inputs": {
                          "image": {"@": "big.image" if enlarge else "gen.image"},
                          "name": f"{row}.png", "format": "png"}}],
            "outputs": {"out": f"{row}.png"}}


DTYPE = "auto"


def make_config(data: Path, models: Path, device: str, storage: dict | None = None,
                **executor) -> cfg.Config:
    (data / "models").mkdir(parents=True, exist_ok=True)
    if not (data / "models" / "demo").exists():
        (data / "models" / "demo").symlink_to(models)
    return cfg.from_dict({
        "service": {"data_dir": str(data), "log_level": "warning"},
        **({"storage": storage} if storage else {}),
        "queue": {"poll_interval": 0.05, "max_queue_size": 100_000},
        "executor": {"device": device, "dtype": DTYPE, **executor},
        "models": {"sd15_b": str(models / "sd15_b"), "sd15_c": str(models / "sd15_c")}})


MIGRATED: list[Path] = []  # an empty database with every migration applied, made once


async def migrated_copy(config: cfg.Config) -> None:
    """The config's SQLite file, where there is none yet, as a copy of one migrated once:
    the same tables, rows and schema version a first open makes, without its half second
    of CPU for each of the bench's data folders (nothing measured includes it)."""
    path = sqlite_path(config.database_url)
    if path.exists():
        return
    if not MIGRATED:
        template = path.parent.parent / "migrated.sqlite3"
        await (await Database(f"sqlite:///{template}").open()).close()
        MIGRATED.append(template)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(MIGRATED[0], path)


class Executor:
    """A queue and a running in-process worker on their own data folder."""

    def __init__(self, config: cfg.Config, *, fifo: bool = False):
        self.config, self.fifo = config, fifo

    async def __aenter__(self):
        await migrated_copy(self.config)
        self.queue = await open_queue(self.config)
        self.worker = executor_loop(self.config, self.queue, owner="bench")
        if self.fifo:
            self.worker.engine.cache.resident = lambda: []  # strict FIFO: no preference
        self.task = asyncio.create_task(self.worker.run())
        return self

    async def __aexit__(self, *exc):
        self.worker.stopping.set()
        await self.task
        await self.queue.close()

    async def run(self, jobs: list[NewJob]) -> float:
        """Seconds from enqueue until every job has ended."""
        return (await self.timed(jobs))[0]

    async def timed(self, jobs: list[NewJob], after: int = 1) -> tuple[float, float, int]:
        """(whole, steady, n): seconds from enqueue until every job has ended; from the
        `after`th job's completion (the first micro-batch's, when batching) to the last's;
        the jobs that succeeded."""
        started = time.perf_counter()
        batch = (await self.queue.enqueue(Submission("bench", "alice", jobs))).batch_id
        while (await self.queue.active_counts()).total:
            await asyncio.sleep(0.005)
        whole = time.perf_counter() - started
        ends = sorted(j.finished_at for j in await self.queue.batch_jobs(batch)
                      if j.status == "succeeded")
        return whole, ends[-1] - ends[after - 1], len(ends)
def bare_pipeline(models: Path, device: str, dtype, name: str = "sd15"):
    """diffusers' own pipeline for a demo model (its class from its model_index.json)."""
    from diffusers import DiffusionPipeline
    extra = {"safety_checker": None, "requires_safety_checker": False} if name == "sd15" else {}
    pipe = DiffusionPipeline.from_pretrained(models / name, local_files_only=True,
                                             torch_dtype=dtype, **extra).to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def bare_loop(pipe, rows: range, steps: int, size: int, out: Path, *, enlarge: int = 0,
              gaps: list[float] | None = None, family: str = "sd15") -> tuple[float, float]:
    """The same images with diffusers alone: a pipeline call and a PNG save per image
    (enlarged first, with `enlarge`); the call as the family is called (its guidance
    argument; a negative prompt where it reads one). (whole, steady): seconds for all; from
    the first image saved to the last."""
    import torch

    from templates.families import profile
    runs = profile(family)
    call = {runs.cfg: 5.0, **({"negative_prompt": runs.no_negative} if runs.negative else {})}
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    saved, ended = [], None
    for row in rows:
        began = time.perf_counter()
        if ended is not None and gaps is not None:
            gaps.append(began - ended)
        image = pipe(prompt=f"a product photo, row {row}", num_inference_steps=steps,
                     height=size, width=size, generator=torch.Generator("cpu").manual_seed(row),
                     **call).images[0]
        ended = time.perf_counter()
        if enlarge:
            image = image.resize((enlarge, enlarge), Image.Resampling.LANCZOS)
        image.save(out / f"{row}.png", pnginfo=png_info(row))
        saved.append(time.perf_counter())
    return saved[-1] - started, saved[-1] - saved[0]


def png_info(row: int):
    """Metadata of the size genbot writes (its workflow as JSON), so both encode alike."""
    from PIL import PngImagePlugin
    info = PngImagePlugin.PngInfo()
    info.add_itxt("genbot", json.dumps(workflow(row, "sd15", row, 8, 64)))
    return info


def gen_jobs(rows: range, steps: int, size: int, models=("sd15",), enlarge: int = 0
             ) -> list[NewJob]:
    return [NewJob(r, workflow(r, models[i % len(models)], r, steps, size, enlarge),
                   models[i % len(models)]) for i, r in enumerate(rows)]


class Gaps:
    """Seconds from the end of one generate call to the start of the next, in this
    process (the executor's GPU thread): how long the GPU waited between images."""

    def __init__(self):
        from executor.diffusers.ops import diffusion
        self.gaps: list[float] = []
        self.ended: float | None = None
        real = diffusion.generate_batch

        def timed(ctx, batch):
            began = time.perf_counter()
            if self.ended is not None and self.recording:
                self.gaps.append(began - self.ended)
            try:
                return real(ctx, batch)
            finally:
                self.ended = time.perf_counter()
        diffusion.generate_batch = timed
        self.recording = False

    def start(self) -> list[float]:
        self.gaps, self.ended, self.recording = [], None, True
        return self.gaps


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


async def overhead(models: Path, tmp: Path, args, pipe, *, size: int, steps: int, rows: int,
                   rounds: int, max_batch: int, label: str, model: str = "sd15") -> None:
    """Section 1: genbot against the bare loop, alternating, same rows both sides."""
    bare_loop(pipe, range(1, 3), steps, size, tmp / "warm", family=model)
    totals = {"bare": [0.0, 0.0], "genbot": [0.0, 0.0]}
    images = 0
    group = min(max_batch, rows)  # images that come out together: steady state starts after
    config = make_config(tmp / f"o-{label}", models, args.device, max_batch=max_batch,
                         progress_interval=1.0)
    async with Executor(config) as ex:
        await ex.run(gen_jobs(range(1, 3), steps, size, (model,)))  # loads the model
        for r in range(rounds):
            base = 1000 * (r + 1)
            sides = [("bare", None), ("genbot", None)]
            for side, _ in (sides if r % 2 == 0 else sides[::-1]):
                rng = range(base, base + rows)
                if side == "bare":
                    whole, steady = bare_loop(pipe, rng, steps, size, tmp / "bare",
                                              family=model)
                else:
                    whole, steady, done = await ex.timed(gen_jobs(rng, steps, size, (model,)),
                                                         after=group)
                    assert done == rows, f"{rows - done} jobs did not succeed"
                totals[side][0] += whole
                totals[side][1] += steady
            images += rows
    after = images - rounds * group  # images after each round's first (micro-batch)
    per = {"bare": (totals["bare"][0] / images, totals["bare"][1] / max(1, images - rounds)),
           "genbot": (totals["genbot"][0] / images,
                      totals["genbot"][1] / after if after > 0 else float("nan"))}
    print(f"overhead {label}: {images} images, {rounds} alternating rounds  "
          f"steady state per image: bare {per['bare'][1] * 1000:.1f} ms  genbot "
          f"{per['genbot'][1] * 1000:.1f} ms  ratio {per['genbot'][1] / per['bare'][1]:.3f}  |  "
          f"whole: ratio {per['genbot'][0] / per['bare'][0]:.3f}")


async def finish_off_the_gpu(models: Path, tmp: Path, args, pipe, s3: str | None) -> None:
    """Section 4: the encode+save cost, and the GPU's gap between images with it."""
    import io

    from executor.diffusers.ops.base import Context
    from executor.diffusers.ops.image import save
    from storage.files import FileStore
    from templates.jobs import decode as diffusers_job
    size, steps, rows = args.size, args.steps, (2 if args.smoke else 12)
    enlarge = 256 if args.smoke else 1024
    image = Image.new("RGB", (size, size), (120, 80, 40)).resize((enlarge, enlarge))
    noise = Image.effect_noise((enlarge, enlarge), 64).convert("RGB")
    image = Image.blend(image, noise, 0.5)  # a photo-like image compresses like one
    ctx = Context(FileStore(tmp / "encode"), job=diffusers_job(workflow(2, "sd15", 2, 8, 64)),
                  batch_id=1)
    times = []
    for i in range(5):
        began = time.perf_counter()
        save(ctx, image, f"{i}.png")
        times.append(time.perf_counter() - began)
    buf = io.BytesIO()
    image.save(buf, "PNG")
    print(f"finish: encode+save of one {enlarge} px PNG with metadata: "
          f"{median(times) * 1000:.0f} ms ({len(buf.getvalue()) / 2**20:.1f} MB)")
    gaps = Gaps()
    gaps_bare: list[float] = []
    bare_loop(pipe, range(1, 3), steps, size, tmp / "warm")
    bare_loop(pipe, range(1, rows + 1), steps, size, tmp / "bare-big", enlarge=enlarge,
              gaps=gaps_bare)
    results = {"bare loop": median(gaps_bare)}
    stores = [("local", {})] + ([("S3", {"backend": "s3", "bucket": "genbot", "endpoint": s3,
                                        "access_key": "test", "secret_key": "test"})]
                                if s3 else [])
    for store, storage in stores:
        for threads in (0, 2):
            config = make_config(tmp / f"f-{store}-{threads}", models, args.device,
                                 max_batch=1, progress_interval=1.0, finish_threads=threads,
                                 storage=storage)
            async with Executor(config) as ex:
                await ex.run(gen_jobs(range(1, 3), steps, size, enlarge=enlarge))
                recorded = gaps.start()
                await ex.run(gen_jobs(range(100, 100 + rows), steps, size, enlarge=enlarge))
                gaps.recording = False
                results[f"genbot {store}, finish_threads {threads}"] = median(recorded)
    print("finish: the GPU's wait between two images (median), "
          + "  ".join(f"{k} {v * 1000:.1f} ms" for k, v in results.items()))



async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=60, help="rows per round, at --size")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--large", type=int, default=512, help="the second size (0: skip)")
    parser.add_argument("--no-s3", action="store_true", help="skip the S3 runs")
    parser.add_argument("--demo-models", type=Path, help="demo models built before (a data "
                        "folder's models/demo): linked, not built again")
    parser.add_argument("--dtype", default="auto",
                        choices=("auto", "float32", "float16", "bfloat16"))
    parser.add_argument("--smoke", action="store_true", help="a few of each, to prove it "
                        "runs (the test suite): figures mean nothing")
    args = parser.parse_args()
    alternating, batch_rounds = (3, 1) if args.smoke else (60, 4)
    global DTYPE
    DTYPE = args.dtype
    from executor.diffusers import devices
    _, dtype = devices.pick(ExecutorConfig(device=args.device, dtype=args.dtype))
    quiet_libraries()
    import logging
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's S3 server, per request
    tmp = Path(tempfile.mkdtemp(prefix="genbot-bench-"))
    s3 = None
    try:
        models = tmp / "models"
        demo.place(models, args.demo_models)
        for copy_name in ("sd15_b", "sd15_c"):  # a third and fourth "model", same weights
            shutil.copytree(models / "sd15", models / copy_name)
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python "
              f"{platform.python_version()}, device {args.device} {str(dtype)[6:]}; demo models, "
              f"{args.size}x{args.size}, {args.steps} steps")
        pipe = bare_pipeline(models, args.device, dtype)

        # 1. overhead, in rounds that alternate the two sides (the machine's speed drifts)
        for max_batch in (1,) if args.smoke else (1, 4):  # (batching: section 3)
            await overhead(models, tmp, args, pipe, size=args.size, steps=args.steps,
                           rows=args.jobs, rounds=args.rounds, max_batch=max_batch,
                           label=f"{args.size} px, max_batch {max_batch}")
        families = () if args.smoke else (("flux", "FLUX"), ("qwen_image", "Qwen-Image"))
        for family, shown in families:  # (the smoke: none; gpu_families.py's runs them)
            family_pipe = bare_pipeline(models, args.device, dtype, family)  # its demo's design
            for max_batch in (1,) if args.smoke else (1, 4):
                await overhead(models, tmp, args, family_pipe, size=args.size,
                               steps=args.steps, rows=args.jobs, rounds=args.rounds,
                               max_batch=max_batch, model=family,
                               label=f"{shown} demo {args.size} px, max_batch {max_batch}")
        if args.large and not args.smoke:
            for max_batch, rows, rounds in ((1, 3, 2), (4, 8, 1)):
                await overhead(models, tmp, args, pipe, size=args.large, steps=1, rows=rows,
                               rounds=rounds, max_batch=max_batch,
                               label=f"{args.large} px (1 step), max_batch {max_batch}")

        # 2. affinity (the smoke: two models, three jobs)
        size, steps = args.size, args.steps
        names = ("sd15", "sd15_b") if args.smoke else ("sd15", "sd15_b", "sd15_c")
        one_model = 8 / 1024  # GB: the demo checkpoints are 6-7 MB
        loads = {}
        for label, fifo in (("preference", False), ("fifo", True)):
            config = make_config(tmp / f"a-{label}", models, args.device, max_batch=1,
                                 vram_budget_gb=one_model, ram_budget_gb=0.0)
            async with Executor(config, fifo=fifo) as ex:
                await ex.run(gen_jobs(range(2, 2 + alternating), 2, 64, names))
                loads[label] = ex.worker.engine.cache.stats["loads"]
        print(f"affinity: {alternating} jobs alternating over {len(names)} models, cache holds 1"
              f"  model loads with preference {loads['preference']}  strict FIFO "
              f"{loads['fifo']} (target: {len(names)})")

        # 3. batching, in alternating rounds
        seconds = {1: 0.0, 4: 0.0}
        images = 0
        async with Executor(make_config(tmp / "b1", models, args.device, max_batch=1,
                                        progress_interval=1.0)) as one, \
                Executor(make_config(tmp / "b4", models, args.device, max_batch=4,
                                     progress_interval=1.0)) as four:
            per_round = 4 if args.smoke else 16
            for ex in (one, four):
                await ex.run(gen_jobs(range(1, 2 if args.smoke else 5), steps, size))  # loads it
            for r in range(batch_rounds):
                rows = range(100 + r * per_round, 100 + (r + 1) * per_round)
                seconds[1] += await one.run(gen_jobs(rows, steps, size))
                seconds[4] += await four.run(gen_jobs(rows, steps, size))
                images += len(rows)
        rate = {k: images / v for k, v in seconds.items()}
        print(f"batching: images/s max_batch 1 {rate[1]:.2f}  max_batch 4 {rate[4]:.2f}  "
              f"ratio {rate[4] / rate[1]:.2f} (GPU target >= 1.5)")

        # 4. finishing off the GPU's path, with the local store and with S3
        if not args.no_s3:
            s3 = start_s3()
        await finish_off_the_gpu(models, tmp, args, pipe, s3 and s3[1])
    finally:
        if s3:
            s3[0].stop()
        shutil.rmtree(tmp, ignore_errors=True)


def start_s3():
    """moto's S3 server on a loopback port with a bucket "genbot": (server, endpoint)."""
    import socket

    import boto3
    from moto.server import ThreadedMotoServer
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                 aws_secret_access_key="test").create_bucket(Bucket="genbot")
    return server, endpoint


if __name__ == "__main__":
    asyncio.run(main())
