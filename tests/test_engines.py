"""Both engines behave the same under the one loop (executor.loop): a cancel, a timeout,
a lost lease and a row's own failure end a job the same way, in the same words.

Each case runs against the diffusers engine (the demo models) and the ComfyUI engine (a
fake ComfyUI server on loopback), with the same assertions."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from bot.intake.check import SheetRows, check_sheet
from executor.worker import executor_loop
from storage.files import open_store
from storage.queue import NewJob, Status, Submission, open_queue
from templates.loader import load_templates
from templates.settings import templates_dir
from tests.conftest import executor_config
from tests.fakes.comfyui import FakeComfy
from tests.fakes.jobs import example_jobs, with_generate
from tests.fakes.workflows import TXT2IMG

pytest.importorskip("torch")

ENGINES = ("diffusers", "comfyui")
STEPS = 60


class Side:
    """One engine under test: a queue, and its executor in this process."""

    def __init__(self, kind: str, tmp_path: Path, demo_models: Path, **executor):
        self.kind, self.tmp_path, self.demo_models = kind, tmp_path, demo_models
        self.executor = executor
        self.comfy: FakeComfy | None = None

    async def __aenter__(self) -> Side:
        sections: dict = {}
        if self.kind == "comfyui":
            self.comfy = await FakeComfy(step_delay=0.05).__aenter__()
            folder = self.tmp_path / "t"
            folder.mkdir()
            workflow = json.dumps(TXT2IMG).replace("sd15.safetensors", "dreamshaper_8.safetensors")
            (folder / "portrait.workflow.json").write_text(workflow)
            (folder / "portrait.json").write_text(json.dumps({
                "name": "portrait", "engine": "comfyui", "workflow": "portrait.workflow.json",
                "params": {"prompt": {"type": "text", "required": True, "to": ["6.text"]},
                           "seed": {"type": "seed", "to": ["3.seed"]},
                           "steps": {"type": "int", "to": ["3.steps"]}}}))
            sections = {"templates": {"dir": str(folder)},
                        "comfyui": {"servers": [self.comfy.url], "backoff_max": 0.2}}
        self.config = executor_config(self.tmp_path / "data", self.demo_models,
                                      executor={"max_batch": 1, **self.executor},
                                      queue={"heartbeat_seconds": 0.5}, **sections)
        self.queue = await open_queue(self.config)
        self.loop = executor_loop(self.config, self.queue, owner=f"{self.kind}:1",
                                  comfyui=self.comfy.url if self.comfy else None)
        self.task = asyncio.create_task(self.loop.run())
        return self

    async def __aexit__(self, *exc) -> None:
        self.loop.stopping.set()
        await asyncio.wait_for(self.task, 60)
        await self.queue.close()
        if self.comfy is not None:
            await self.comfy.__aexit__(None, None, None)

    async def submit(self, jobs: list[NewJob]) -> int:
        return (await self.queue.enqueue(Submission("t", "test:alice", jobs))).batch_id

    async def slow(self) -> int:
        """A batch of one job of STEPS steps."""
        if self.kind == "diffusers":
            job = (await example_jobs(self.config, "product_main"))[0]
            return await self.submit([with_generate(job, steps=STEPS)])
        return await self.submit([await self.comfy_job({"prompt": "slow", "seed": 1,
                                                        "steps": STEPS})])

    async def broken(self) -> int:
        """A batch of one job whose own row fails in a node."""
        if self.kind == "diffusers":
            job = (await example_jobs(self.config, "social_thumb"))[0]
            job.workflow["nodes"][0]["inputs"]["image"] = "inputs/missing.png"
            return await self.submit([job])
        assert self.comfy is not None
        self.comfy.fail_node = {"node_type": "KSampler", "message": "bad sampler input",
                                "exception_type": "ValueError"}
        return await self.submit([await self.comfy_job({"prompt": "x", "seed": 1})])

    async def comfy_job(self, row: dict) -> NewJob:
        template = load_templates(templates_dir(self.config))[0]["portrait"]
        report = await check_sheet(template, SheetRows([row]), config=self.config,
                                   store=open_store(self.config))
        assert report.ok, report.report()
        return report.jobs[0]

    async def steps(self, job_id: int) -> list[int]:
        return [e.data["step"] for e in await self.queue.events_after(0)
                if e.kind == "progress" and e.job_id == job_id]

    async def until(self, check, timeout: float = 60.0):
        async with asyncio.timeout(timeout):
            while not (found := await check()):
                if self.task.done():
                    self.task.result()
                await asyncio.sleep(0.02)
        return found

    async def stepping(self, batch: int) -> int:
        """The batch's job, once it has made a few steps."""
        job_id = (await self.queue.batch_jobs(batch))[0].id

        async def three():
            return len(await self.steps(job_id)) >= 3
        await self.until(three)
        return job_id

    async def ended(self, batch: int):
        async def done():
            (job,) = await self.queue.batch_jobs(batch)
            return job if job.status not in (Status.QUEUED, Status.RUNNING) else None
        return await self.until(done)

    def interrupted(self) -> bool:
        """The engine stopped the work itself (diffusers: between steps, which the step
        counts show; ComfyUI: it asked the server to interrupt the prompt)."""
        return self.comfy is None or bool(self.comfy.interrupts)


@pytest.mark.parametrize("kind", ENGINES)
async def test_a_cancel_ends_the_job_at_once_in_the_same_words(kind, tmp_path, demo_models):
    async with Side(kind, tmp_path, demo_models) as side:
        batch = await side.slow()
        job_id = await side.stepping(batch)
        await side.queue.cancel(job=job_id, by="test:admin")
        job = await side.ended(batch)
        assert job.status == Status.CANCELED and job.attempts == 1 and job.outputs == []
        assert re.fullmatch(rf"canceled at step \d+ of {STEPS}", job.error), job.error
        await asyncio.sleep(0.5)  # the engine stopped: no step comes after the end
        steps = await side.steps(job_id)
        assert max(steps) < STEPS and side.interrupted()
        assert (await side.queue.batch_jobs(batch))[0].status == Status.CANCELED


@pytest.mark.parametrize("kind", ENGINES)
async def test_a_job_past_its_timeout_fails_in_the_same_words(kind, tmp_path, demo_models):
    async with Side(kind, tmp_path, demo_models, job_timeout=1.0) as side:
        batch = await side.slow()
        job = await side.ended(batch)
        assert job.status == Status.FAILED and job.attempts == 1
        assert job.error == "timed out after 1 s ([executor] job_timeout)"
        assert max(await side.steps(job.id), default=0) < STEPS and side.interrupted()


@pytest.mark.parametrize("kind", ENGINES)
async def test_a_lost_lease_stops_the_work_and_records_nothing(kind, tmp_path, demo_models):
    async with Side(kind, tmp_path, demo_models) as side:
        batch = await side.slow()
        job_id = await side.stepping(batch)
        # Another executor took the job over (its lease ran out while this one was cut off).
        await side.queue.db.execute("UPDATE jobs SET lease_token = ?, lease_owner = ? "
                                    "WHERE id = ?", "someone-else", "elsewhere:1", job_id)

        async def stopped():
            return not side.loop.runs and side.interrupted()
        await side.until(stopped)
        (job,) = await side.queue.batch_jobs(batch)
        assert job.status == Status.RUNNING and job.attempts == 1 and job.outputs == []
        assert max(await side.steps(job_id)) < STEPS  # it stopped; the new owner finishes it


@pytest.mark.parametrize("kind", ENGINES)
async def test_a_rows_own_failure_names_its_node_and_is_not_retried(kind, tmp_path,
                                                                     demo_models):
    async with Side(kind, tmp_path, demo_models) as side:
        job = await side.ended(await side.broken())
        assert job.status == Status.FAILED and job.attempts == 1
        # "node ID (KIND): what went wrong", whichever engine ran it
        assert re.match(r"node \w+ \(\w+\): \S", job.error), job.error


@pytest.mark.parametrize("kind", ENGINES)
async def test_stopping_hands_the_running_job_back_without_an_attempt(kind, tmp_path,
                                                                       demo_models):
    async with Side(kind, tmp_path, demo_models) as side:
        batch = await side.slow()
        await side.stepping(batch)
        side.loop.stopping.set()
        await asyncio.wait_for(side.task, 60)
        (job,) = await side.queue.batch_jobs(batch)
        assert job.status == Status.QUEUED and job.attempts == 0 and side.interrupted()
        assert job.error is None or "executor stopped" in job.error


def test_only_the_loop_and_its_prefetch_call_the_queues_lease_operations():
    from tests.conftest import ROOT
    lease_ops = re.compile(r"\.(claim|claim_followers|start|unclaim|heartbeat_all|heartbeat|"
                           r"complete|complete_and_claim|fail|release|progress|progress_all|"
                           r"cancels_asked)\(")
    callers = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "executor").rglob("*.py")
                     if re.search(r"queue" + lease_ops.pattern, p.read_text(encoding="utf-8")))
    assert callers == ["executor/loop.py", "executor/prefetch.py"]
