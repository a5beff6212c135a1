"""In-process executors over a queue on one data folder: the diffusers engine's (`Harness`),
what the executor's own tests and the tests of what runs on it (a product kept intact,
say) drive; and a ComfyUI server's (`Rig`), what the ComfyUI engine's tests drive."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from storage.files import FileStore, open_store
from storage.queue import NewJob, Submission, open_queue
from templates.settings import templates_dir
from tests.conftest import ROOT, executor_config
from tests.fakes.workflows import templates

if TYPE_CHECKING:
    from tests.fakes.comfyui import FakeComfy

BOTTLE = (ROOT / "examples" / "assets" / "bottle.png").read_bytes()


class Harness:
    """A queue and an in-process executor (the loop over the diffusers engine) on one data
    folder."""

    def __init__(self, config):
        self.config = config

    async def __aenter__(self):
        from executor.worker import executor_loop
        self.queue = await open_queue(self.config)
        self.worker = executor_loop(self.config, self.queue, owner="test-executor")
        self.task = None
        return self

    async def __aexit__(self, *exc):
        await self.stop()
        await self.queue.close()

    def start(self):
        self.worker.stopping.clear()
        self.task = asyncio.create_task(self.worker.run())

    async def stop(self):
        if self.task:
            self.worker.stopping.set()
            await self.task
            self.task = None

    async def submit(self, name: str, jobs: list[NewJob]) -> int:
        return (await self.queue.enqueue(Submission(name, "test:alice", jobs))).batch_id

    async def run(self, name: str, jobs: list[NewJob], timeout: float = 120) -> list[dict]:
        """Queue `jobs`, run the executor until all have ended, return them."""
        batch = await self.submit(name, jobs)
        await self.wait(batch, timeout)
        return await self.queue.batch_jobs(batch)

    async def wait(self, batch: int, timeout: float = 120) -> None:
        if self.task is None:
            self.start()
        async with asyncio.timeout(timeout):
            while True:
                if self.task.done():
                    self.task.result()  # raises what killed the loop
                jobs = await self.queue.batch_jobs(batch)
                if all(j.status in ("succeeded", "failed", "canceled") for j in jobs):
                    return
                await asyncio.sleep(0.05)

    def image(self, job: dict, i: int = 0) -> np.ndarray:
        path = FileStore(self.config.data_dir).path(job.outputs[i])
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"), dtype=np.int16)


def demo_context(folder, demo_models, models: dict | None = None):
    """An op context on the demo models, on the CPU at float32, memory unbounded: what the
    op-level tests call ops with (a store and a data folder under `folder`; `models`:
    [models] entries beside the demos)."""
    import torch

    from executor.diffusers.cache import ModelCache
    from executor.diffusers.ops import Context
    from executor.models.registry import Registry
    from storage.files import FileStore
    from tests.conftest import executor_config
    config = executor_config(folder / "data", demo_models, models=models)
    return Context(FileStore(folder / "store"), ModelCache(
        Registry(config), "cpu", torch.float32, vram_budget=float("inf"),
        ram_budget=float("inf")))


class Rig:
    """A queue on a SQLite file, and the ComfyUI executor for one server, in this process."""

    def __init__(self, tmp_path: Path, demo_models: Path, comfy: FakeComfy, *,
                 executor: dict | None = None, **comfyui):
        self.comfy = comfy
        self.config = executor_config(
            tmp_path / "data", demo_models, templates={"dir": str(templates(tmp_path / "t"))},
            comfyui={"servers": [comfy.url], "backoff_max": 0.2, **comfyui},
            queue={"heartbeat_seconds": 0.5}, executor=executor)
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> Rig:
        from executor.worker import executor_loop
        self.queue = await open_queue(self.config)
        self.store = open_store(self.config)
        self.worker = executor_loop(self.config, self.queue, comfyui=self.comfy.url,
                                    owner="comfy:1")
        return self

    def start(self) -> None:
        self.task = asyncio.create_task(self.worker.run())

    async def __aexit__(self, *exc) -> None:
        if self.task:
            self.worker.stopping.set()
            await asyncio.wait_for(self.task, 30)
        await self.queue.close()

    async def submit(self, template: str, rows: list[dict]) -> int:
        from bot.intake.check import SheetRows, check_sheet
        from templates.loader import load_templates
        t = load_templates(templates_dir(self.config))[0][template]

        async def pictures(name: str) -> bytes | None:
            return BOTTLE if name == "bottle.png" else None
        report = await check_sheet(t, SheetRows(rows), config=self.config, store=self.store,
                                   attachments=pictures)
        assert report.ok, report.report()
        return (await self.queue.enqueue(Submission(template, "test:U1", report.jobs))).batch_id

    async def until(self, check, timeout: float = 30.0):
        async with asyncio.timeout(timeout):
            while not (found := await check()):
                if self.task and self.task.done():
                    self.task.result()
                await asyncio.sleep(0.02)
        return found

    async def finished(self, batch: int, timeout: float = 30.0) -> list:
        async def done():
            p = await self.queue.batch_progress(batch)
            return p is not None and p.done >= p.total
        await self.until(done, timeout)
        return await self.queue.batch_jobs(batch)

    def image(self, relative: str) -> bytes:
        return self.store.path(relative).read_bytes()

    async def worker_process(self, service: str = "") -> asyncio.subprocess.Process:
        """`genbot worker --comfyui URL` on this queue, as `genbot serve` runs one per
        server; `service`: more [service] lines (e.g. the log format)."""
        import os
        import subprocess
        import sys
        config_file = self.config.data_dir.parent / "config.toml"
        config_file.write_text(
            f'[service]\ndata_dir = "{self.config.data_dir}"\n{service}'
            f'[templates]\ndir = "{templates_dir(self.config)}"\n'
            '[queue]\npoll_interval = 0.1\nheartbeat_seconds = 0.5\n')
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "worker", "--config", str(config_file),
            "--comfyui", self.comfy.url, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE)
