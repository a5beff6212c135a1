"""What live previews cost the executor: 8 jobs running at once (one micro-batch of 8),
through the queue and the real loop, with previews off and on, in alternating rounds,
on the demo models; a service listens to every preview (storage.previews), as a
dashboard's would. Prints figures and ratios; asserts nothing. Record results in
docs/benchmarks.md.

  python bench/preview_bench.py [--steps 30] [--size 64] [--rounds 3] [--interval 0.5]
                                [--demo-models DIR] [--smoke]

Per model (sd15 draws its previews with its tiny VAE, the demo TAESD; flux with colours
fitted on its own VAE), per round: seconds per image with [executor] preview_interval 0
and with --interval (the default 0.5 s: at most two pictures a second per job), and the
pictures the listener heard. Then the same at an interval of 0 s between pictures (one
per step: what the throttle saves). The target: on/off per image < 1.02.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from executor.models import demo  # noqa: E402
from executor.worker import executor_loop, quiet_libraries  # noqa: E402
from storage import config as cfg  # noqa: E402
from storage.previews import Glimpse  # noqa: E402
from storage.queue import NewJob, Submission, open_queue  # noqa: E402

JOBS = 8  # running at once: one micro-batch


def workflow(row: int, model: str, steps: int, size: int) -> dict:
    return {"template": "bench", "row": row, "params": {"seed": row},
            "nodes": [{"id": "gen", "op": "generate", "inputs": {
                "prompt": f"a product photo, row {row}", "negative": "", "model": model,
                "seed": row, "steps": steps, "guidance": 5.0, "size": [size, size],
                "sampler": None, "init_image": None, "strength": 0.75, "control_image": None,
                "controlnet": None, "control_scale": 1.0, "loras": []}},
                {"id": "out", "op": "save", "inputs": {"image": {"@": "gen.image"},
                                                      "name": f"{row}.png", "format": "png"}}],
            "outputs": {"out": f"{row}.png"}}


async def ended(queue, worker: asyncio.Task) -> None:
    """Until nothing is queued or running; a worker that stopped meanwhile says why."""
    while (await queue.active_counts()).total:
        if worker.done():
            raise RuntimeError(f"the executor stopped: {worker.exception() or worker.result()}")
        await asyncio.sleep(0.005)


async def one_round(data: Path, model: str, interval: float, steps: int, size: int
                    ) -> tuple[float, int, float]:
    """(seconds per image, previews heard, the previews' share of the device's time) for
    JOBS jobs of `model` in one micro-batch."""
    config = cfg.from_dict({
        "service": {"data_dir": str(data), "log_level": "warning"},
        "queue": {"poll_interval": 0.05},
        "executor": {"device": "cpu", "max_batch": JOBS, "preview_interval": interval,
                     "finish_threads": 2}})
    heard: list[Glimpse] = []
    service = await open_queue(config)  # the service's side: hears every picture
    await service.previews.listen(heard.append)
    queue = await open_queue(config)
    worker = executor_loop(config, queue, owner="bench")
    task = asyncio.create_task(worker.run())
    try:
        warm = [NewJob(1, workflow(1, model, 2, size), model)]  # models loaded, colours fitted
        await queue.enqueue(Submission("bench", "alice", warm))
        await ended(queue, task)
        heard.clear()
        timed = worker.engine.runner.seconds  # (the runner's own clock: previews, calls)
        timed.update(device=0.0, previews=0.0)
        jobs = [NewJob(r, workflow(r, model, steps, size), model) for r in range(2, 2 + JOBS)]
        started = time.perf_counter()
        await queue.enqueue(Submission("bench", "alice", jobs))
        await ended(queue, task)
        seconds = time.perf_counter() - started
        share = timed["previews"] / timed["device"] if timed["device"] else 0.0
        await asyncio.sleep(0.2)  # the last pictures on their way
    finally:
        worker.stopping.set()
        await task
        await queue.close()
        await service.close()
    return seconds / JOBS, len(heard), share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--models", default="sd15,flux")
    parser.add_argument("--demo-models", type=Path, help="demo models built before")
    parser.add_argument("--smoke", action="store_true", help="one round, few steps, off and on "
                        "only")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.steps, args.size = 1, 6, 64
    import torch
    quiet_libraries()
    torch.set_num_threads(1)  # one core's figure, steady from run to run
    print(f"# preview_bench on {platform.machine()}, {platform.python_version()}, torch "
          f"{torch.__version__}: {JOBS} jobs at once, {args.steps} steps, {args.size} px, "
          f"{args.rounds} alternating rounds, previews every {args.interval:g} s")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        demo.place(base / "models" / "demo", args.demo_models)
        n = 0
        for model in args.models.split(","):
            times: dict[str, list[float]] = {"off": [], "on": [], "every step": []}
            pictures: dict[str, list[int]] = {k: [] for k in times}
            shares: dict[str, list[float]] = {k: [] for k in times}
            for _ in range(args.rounds):
                for label, interval in (("off", 0.0), ("on", args.interval),
                                        *(() if args.smoke else (("every step", 1e-9),))):
                    n += 1
                    data = base / f"run{n}"
                    (data / "models").mkdir(parents=True)
                    (data / "models" / "demo").symlink_to(base / "models" / "demo")
                    per_image, got, share = asyncio.run(one_round(data, model, interval,
                                                                  args.steps, args.size))
                    times[label].append(per_image)
                    pictures[label].append(got)
                    shares[label].append(share)
            off = statistics.median(times["off"])
            for label in [k for k in ("on", "every step") if times[k]]:
                t = statistics.median(times[label])
                print(f"{model}: previews {label:10} {t * 1000:8.1f} ms/image vs off "
                      f"{off * 1000:8.1f}  ratio {t / off:.3f}  pictures heard per job "
                      f"{statistics.median(pictures[label]) / JOBS:.1f}  making them: "
                      f"{statistics.median(shares[label]) * 100:.2f} % of the device's time")
        print("preview cost: ratios above (target: on/off < 1.02; the share measured directly, "
              "by the runner's clock, is the figure noise does not blur)")


if __name__ == "__main__":
    main()
