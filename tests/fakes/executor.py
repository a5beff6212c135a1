"""An in-process executor over a queue on one data folder: what the executor's own tests
and the tests of what runs on it (a product kept intact, say) drive."""

from __future__ import annotations

import asyncio

import numpy as np
from PIL import Image

from storage.files import FileStore
from storage.queue import NewJob, Submission, open_queue


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
