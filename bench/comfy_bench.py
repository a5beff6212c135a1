"""What does genbot's queue add per job over driving ComfyUI directly? Asserts nothing;
record results in docs/benchmarks.md.

  python bench/comfy_bench.py [--jobs 100] [--rounds 3] [--steps 4]

One ComfyUI server on loopback (tests/fakes/comfyui.py, its cache off so every prompt runs),
two ways to get the same N images from it, alternating round by round so drift on a
noisy machine hits both alike:
  direct  the least a client must do: POST /prompt, wait on the WebSocket for the end,
          GET /history, GET /view — one prompt at a time, nothing stored
  genbot  N jobs in the queue (SQLite file), the ComfyUI executor claiming, posting,
          following, fetching, storing each image with its metadata and completing it
Prints the per-job overhead (genbot − direct) / N in ms and the ratio; the goal is at
most 20 ms per job.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from executor.worker import executor_loop  # noqa: E402
from storage import config as cfg  # noqa: E402
from storage.queue import NewJob, Submission, open_queue  # noqa: E402
from templates.binding import bind  # noqa: E402
from templates.jobs import encode  # noqa: E402
from templates.loader import load_templates  # noqa: E402
from templates.settings import templates_dir  # noqa: E402
from tests.fakes.comfyui import FakeComfy  # noqa: E402
from tests.fakes.workflows import TXT2IMG  # noqa: E402

WORKFLOW = json.loads(json.dumps(TXT2IMG).replace("sd15.safetensors",
                                                  "dreamshaper_8.safetensors"))


def prompt_for(seed: int, steps: int) -> dict:
    prompt = json.loads(json.dumps(WORKFLOW))
    prompt["3"]["inputs"].update(seed=seed, steps=steps)
    return prompt


async def direct(url: str, jobs: int, steps: int, first_seed: int) -> float:
    client = uuid.uuid4().hex
    async with aiohttp.ClientSession() as http, \
            http.ws_connect(f"{url}/ws", params={"clientId": client}) as ws:
        started = time.perf_counter()
        for i in range(jobs):
            pid = str(uuid.uuid4())
            async with http.post(f"{url}/prompt", json={
                    "prompt": prompt_for(first_seed + i, steps), "client_id": client,
                    "prompt_id": pid}) as r:
                assert r.status == 200, await r.text()
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    m = json.loads(msg.data)
                    if m["type"] == "execution_success" and m["data"]["prompt_id"] == pid:
                        break
            while True:
                async with http.get(f"{url}/history/{pid}") as r:
                    entry = (await r.json()).get(pid)
                if entry:
                    break
                await asyncio.sleep(0.005)
            for out in entry["outputs"].values():
                for image in out.get("images", []):
                    async with http.get(f"{url}/view", params=image) as r:
                        await r.read()
        return time.perf_counter() - started


def write_template(folder: Path) -> None:
    """The template "bench" (engine comfyui: prompt, seed, steps) into `folder`."""
    folder.mkdir()
    (folder / "bench.workflow.json").write_text(json.dumps(WORKFLOW))
    (folder / "bench.json").write_text(json.dumps({
        "name": "bench", "engine": "comfyui", "workflow": "bench.workflow.json",
        "params": {"prompt": {"type": "text", "to": ["6.text"]},
                   "seed": {"type": "seed", "to": ["3.seed"]},
                   "steps": {"type": "int", "to": ["3.steps"]}}}))


def bench_jobs(template, n: int, first_seed: int, steps: int) -> list[NewJob]:
    """`n` rows of the "bench" template, seeds from `first_seed`."""
    jobs = []
    for i in range(n):
        wf = bind(template, {"prompt": "a bottle", "seed": first_seed + i, "steps": steps},
                  row=i + 2)
        jobs.append(NewJob(row=i + 2, workflow=encode(wf), affinity=wf.affinity))
    return jobs


async def through_genbot(config: cfg.Config, url: str, jobs: int, steps: int,
                         first_seed: int) -> float:
    queue = await open_queue(config)
    template = load_templates(templates_dir(config))[0]["bench"]
    worker = executor_loop(config, queue, comfyui=url, owner=f"bench:{first_seed}")
    task = asyncio.create_task(worker.run())
    try:
        while worker.engine.down is not None:  # connected, templates checked: as in steady state
            await asyncio.sleep(0.01)
        new = bench_jobs(template, jobs, first_seed, steps)
        started = time.perf_counter()
        batch = (await queue.enqueue(Submission("bench", "bench:me", new))).batch_id
        while (progress := await queue.batch_progress(batch)) and progress.done < jobs:
            await asyncio.sleep(0.005)
        took = time.perf_counter() - started
        assert progress is not None and progress.counts.get("succeeded") == jobs, progress
        return took
    finally:
        worker.stopping.set()
        await task
        await queue.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_template(folder / "t")
        async with FakeComfy(cache=False) as comfy:
            config = cfg.from_dict({"service": {"data_dir": str(folder / "data")},
                                    "templates": {"dir": str(folder / "t")},
                                    "queue": {"poll_interval": 0.5}})
            times: dict[str, list[float]] = {"direct": [], "genbot": []}
            seed = 1
            for r in range(args.rounds):
                order = ("direct", "genbot") if r % 2 == 0 else ("genbot", "direct")
                for way in order:
                    took = await (direct(comfy.url, args.jobs, args.steps, seed) if way == "direct"
                                  else through_genbot(config, comfy.url, args.jobs, args.steps,
                                                      seed))
                    seed += args.jobs
                    times[way].append(took)
                    print(f"round {r + 1} {way:<6} {args.jobs} jobs in {took:.3f} s "
                          f"({1000 * took / args.jobs:.1f} ms/job)", flush=True)
    d, g = statistics.median(times["direct"]), statistics.median(times["genbot"])
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, "
          f"python {platform.python_version()}")
    print(f"median: direct {1000 * d / args.jobs:.1f} ms/job, genbot {1000 * g / args.jobs:.1f} "
          f"ms/job; per-job overhead {1000 * (g - d) / args.jobs:.1f} ms (goal <= 20); "
          f"genbot/direct {g / d:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
