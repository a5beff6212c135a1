"""The executor's loop on the demo models: every template end to end, and each way a job
can end (done, failed, canceled mid-step, out of memory, timed out, handed back)."""

from __future__ import annotations

import asyncio
import copy
import logging

import numpy as np
import pytest
from PIL import Image

from executor.diffusers.ops.image import read_metadata
from storage.files import FileStore
from storage.queue import NewJob, Status, open_queue
from templates.settings import models_dir
from tests.conftest import executor_config
from tests.fakes.executor import Harness
from tests.fakes.jobs import example_jobs, with_generate

torch = pytest.importorskip("torch")


@pytest.fixture
def config(tmp_path, demo_models):
    return executor_config(tmp_path / "data", demo_models)


@pytest.mark.parametrize("name, size", [("product_main", (128, 128)),  # demo 64 px, upscaled 2x
                                        ("material_swap", (64, 64)),
                                        ("social_thumb", (1080, 1080))])
async def test_every_template_runs_end_to_end_from_its_example_sheet(config, name, size):
    async with Harness(config) as h:
        jobs = await h.run(name, await example_jobs(config, name))
    assert [j.status for j in jobs] == ["succeeded"] * len(jobs)
    for job in jobs:
        path = FileStore(config.data_dir).path(job.outputs[0])
        assert path.is_relative_to(config.data_dir / "outputs" / f"batch_{job.batch_id}")
        with Image.open(path) as im:
            assert im.format == "PNG"
        meta = read_metadata(path)
        assert meta["template"] == name and meta["row"] == job.row
        assert meta["workflow"] == job.workflow and meta["genbot"]
    assert Image.open(FileStore(config.data_dir).path(jobs[0].outputs[0])).size == size


async def test_a_flux_row_runs_through_the_executor_like_any_other(config):
    """product_main's row on the FLUX demo instead of SDXL + ControlNet (and without its
    negative prompt, which FLUX reads none of): generated, upscaled 2x and saved, its
    metadata naming the model that made it."""
    row = (await example_jobs(config, "product_main"))[0]
    job = with_generate(row, model="flux", controlnet=None, control_image=None, steps=2,
                        guidance=None, negative="")
    async with Harness(config) as h:
        (done,) = await h.run("product_main", [NewJob(job.row, job.workflow, affinity="flux")])
    assert done.status == "succeeded", done.error
    path = FileStore(config.data_dir).path(done.outputs[0])
    assert Image.open(path).size == (128, 128)  # the demo's 64 px, upscaled 2x
    assert "flux" in read_metadata(path)["models"]


@pytest.mark.parametrize("template, family_models", [
    ("poster_zh", {"qwen_image"}), ("edit_instruction", {"flux_kontext"}),
    ("edit_instruction", {"qwen_image_edit"})])
async def test_the_new_families_templates_run_their_example_sheets(config, template,
                                                                   family_models):
    """poster_zh (Qwen-Image draws the headline and price from the sheet's columns) and
    edit_instruction (a picture and a sentence to FLUX.1 Kontext, or to Qwen-Image-Edit
    when the model column says so) run their example sheets on the demo models: one image
    per row, the prompt and instruction as the row said."""
    jobs = await example_jobs(config, template)
    if family_models == {"qwen_image_edit"}:
        for job in jobs:
            next(s for s in job.workflow["nodes"] if s["id"] == "edit")["inputs"]["model"] = \
                "qwen_image_edit"
    async with Harness(config) as h:
        done = await h.run(template, jobs)
    assert [d.status for d in done] == ["succeeded"] * 2, [d.error for d in done]
    for d in done:
        meta = read_metadata(FileStore(config.data_dir).path(d.outputs[0]))
        assert set(meta["models"]) == family_models
    steps = {s["id"]: s["inputs"] for s in jobs[0].workflow["nodes"]}
    if template == "poster_zh":
        prompt = steps["gen"]["prompt"]
        assert "写着“春茶上新”" in prompt and "价格标签写着“限时价 ¥99”" in prompt
    else:
        assert steps["edit"]["instruction"] == "把背景换成海滩"


async def test_a_sweep_runs_on_the_new_families_with_their_own_guidance(config):
    """A sweep of poster_zh's model and guidance (Qwen-Image's true_cfg_scale, Z-Image's
    guidance_scale): four jobs of one row, each made by the model it names; within a model
    the guidance changes the image, and one seed is shared across the grid."""
    from templates.jobs import decode, encode
    from templates.loader import load_templates
    from templates.settings import templates_dir
    from templates.sweeps import expand, plan
    template = load_templates(templates_dir(config))[0]["poster_zh"]
    first = (await example_jobs(config, "poster_zh"))[0]
    bound = [decode(first.workflow)]
    sweep = plan(template, ["model=qwen_image,zimage", "guidance=1,4"])
    swept = expand(template, bound, sweep)
    jobs = [NewJob(b.row, encode(b), b.affinity) for b in swept]
    async with Harness(config) as h:
        done = await h.run("poster_zh", jobs)
    assert [d.status for d in done] == ["succeeded"] * 4, [d.error for d in done]
    made = {}
    for d, b in zip(done, swept):
        meta = read_metadata(FileStore(config.data_dir).path(d.outputs[0]))
        assert meta["models"] == [b.params["model"]]
        made[(b.params["model"], b.params["guidance"])] = h.image(d)
    for model in ("qwen_image", "zimage"):
        assert not np.array_equal(made[(model, 1.0)], made[(model, 4.0)])
    assert len({b.params["seed"] for b in swept}) == 1


async def test_png_metadata_reproduces_the_image(config):
    async with Harness(config) as h:
        first = (await h.run("product_main", (await example_jobs(config, "product_main"))[:1]))[0]
        meta = read_metadata(FileStore(config.data_dir).path(first.outputs[0]))
        assert meta["seeds"] == [first.values["seed"]]
        assert set(meta["models"]) == {"sdxl", "canny_sdxl"}
        again = (await h.run("product_main", [NewJob(row=meta["row"], workflow=meta["workflow"],
                                                     affinity="sdxl")]))[0]
        assert np.array_equal(h.image(first), h.image(again))
        other_seed = with_generate(NewJob(first.row, meta["workflow"]), seed=meta["seeds"][0] + 1)
        different = (await h.run("product_main", [other_seed]))[0]
        assert not np.array_equal(h.image(first), h.image(different))


async def test_lora_swap_between_rows_keeps_the_base_loaded(config):
    async with Harness(config) as h:
        jobs = await h.run("material_swap", await example_jobs(config, "material_swap"))
        stats = h.worker.engine.cache.stats
        assert [j.workflow["nodes"][1]["inputs"]["loras"][0]["name"] for j in jobs] == \
            ["walnut", "brushed_steel"]
        assert (stats["loads:sd15"], stats["lora_loads:walnut"],
                stats["lora_loads:brushed_steel"]) == (1, 1, 1)
        await h.run("material_swap", await example_jobs(config, "material_swap"))
        assert (stats["loads:sd15"], stats["lora_loads"]) == (1, 2)
        assert stats["lora_hits"] >= 2
    assert not np.array_equal(h.image(jobs[0]), h.image(jobs[1]))


async def test_jobs_of_one_shape_run_as_one_pipeline_call(config, caplog):
    config = executor_config(config.data_dir, models_dir(config) / "demo",
                             executor={"max_batch": 4})
    base = (await example_jobs(config, "product_main"))[0]
    jobs = [with_generate(base, row=r, seed=100 + r) for r in range(2, 7)]  # 5 jobs
    caplog.set_level(logging.INFO, logger="genbot.executor")
    async with Harness(config) as h:
        done = await h.run("product_main", jobs)
    assert [j.status for j in done] == ["succeeded"] * 5
    calls = [r.jobs for r in caplog.records
             if r.getMessage() == "node start" and r.op == "generate"]
    assert sorted(len(c) for c in calls) == [1, 4]  # max_batch 4, then the fifth
    assert len({tuple(j.outputs) for j in done}) == 5  # each job its own image


async def test_progress_goes_to_the_event_log_per_step(config):
    async with Harness(config) as h:
        job = with_generate((await example_jobs(config, "product_main"))[0], steps=5)
        done = (await h.run("product_main", [job]))[0]
        progress = [e.data for e in await h.queue.events_after(0)
                    if e.kind == "progress" and e.job_id == done.id]
    assert [(p["node"], p["step"], p["total"]) for p in progress] == \
        [("gen", s, 5) for s in range(1, 6)]
    assert all(p["row"] == done.row for p in progress)


async def test_the_executor_keeps_its_row_in_the_worker_registry(config, slow_gpu):
    import socket

    from storage.workers import Workers
    async with Harness(config) as h:
        workers = Workers.of(h.queue)
        job = with_generate((await example_jobs(config, "product_main"))[0], steps=6)
        batch = await h.submit("product_main", [job])
        h.start()
        async with asyncio.timeout(60):  # busy on it, while it runs
            while not [w for w in await workers.all() if w.state == "busy"]:
                await asyncio.sleep(0.02)
        (busy,) = await workers.all()
        assert (busy.id, busy.host, busy.device, busy.job_id) == \
            ("test-executor", socket.gethostname(), "cpu", (await h.queue.batch_jobs(batch))[0].id)
        await h.wait(batch)
        async with asyncio.timeout(10):
            while (row := (await workers.all())[0]).state != "idle":
                await asyncio.sleep(0.02)
        assert row.job_id is None and row.stats["jobs"] == 1 and row.memory_used > 0
        assert row.models == ["sdxl"] and row.version and row.stats["cache"]["loads"]
        await h.stop()
        assert [w.state for w in await workers.all()] == ["stopped"]


async def test_an_executor_takes_only_jobs_for_models_it_may_run_and_can_hold(tmp_path,
                                                                             demo_models):
    from storage.config import ConfigError
    from storage.workers import Workers
    only_sdxl = executor_config(tmp_path / "a", demo_models, executor={"models": ["sdxl"]})
    async with Harness(only_sdxl) as h:
        swap = (await example_jobs(only_sdxl, "material_swap"))[0]  # needs sd15
        main = with_generate((await example_jobs(only_sdxl, "product_main"))[0], steps=2)
        left = await h.submit("material_swap", [swap])
        done = (await h.run("product_main", [main]))[0]
        assert done.status == "succeeded"
        assert [j.status for j in await h.queue.batch_jobs(left)] == ["queued"]
        assert (await Workers.of(h.queue).all())[0].allow == ["sdxl"]
    # A device too small for any checkpoint: only jobs that need no model.
    tiny = executor_config(tmp_path / "b", demo_models, executor={"vram_budget_gb": 0.001})
    async with Harness(tiny) as h:
        main = with_generate((await example_jobs(tiny, "product_main"))[0], steps=2)
        left = await h.submit("product_main", [main])
        thumb = (await h.run("social_thumb", (await example_jobs(tiny, "social_thumb"))[:1]))[0]
        assert thumb.status == "succeeded"
        assert [j.status for j in await h.queue.batch_jobs(left)] == ["queued"]
        allow = (await Workers.of(h.queue).all())[0].allow
        assert "sdxl" not in allow and "sd15" not in allow  # (small LoRAs would fit)
    unknown = executor_config(tmp_path / "c", demo_models, executor={"models": ["sdxxl"]})
    async with Harness(unknown) as h:
        with pytest.raises(ConfigError, match="sdxxl not in \\[models\\]"):
            await h.worker.run()


async def test_cancel_lands_within_one_denoising_step(config):
    async with Harness(config) as h:
        job = with_generate((await example_jobs(config, "product_main"))[0], steps=100)
        batch = await h.submit("product_main", [job])
        h.start()
        job_id = (await h.queue.batch_jobs(batch))[0].id

        async def steps() -> list[int]:
            return [e.data["step"] for e in await h.queue.events_after(0)
                    if e.kind == "progress" and e.job_id == job_id]
        async with asyncio.timeout(60):
            while len(await steps()) < 3:
                await asyncio.sleep(0.01)
        other = await open_queue(config)  # the service's, in another process: its bell rings
        try:
            await other.cancel(job=job_id, by="test:admin")
        finally:
            await other.close()
        at_cancel = max(await steps())
        await h.wait(batch)
        await asyncio.sleep(0.3)  # nothing runs it again
        ended = (await h.queue.batch_jobs(batch))[0]
        assert ended.status == Status.CANCELED and ended.attempts == 1
        assert max(await steps()) <= at_cancel + 1 < 100
        assert ended.outputs == []


async def test_out_of_memory_retries_once_at_batch_one_then_fails_only_that_job(config,
                                                                                monkeypatch):
    from executor.diffusers.ops import diffusion as generation
    config = executor_config(config.data_dir, models_dir(config) / "demo",
                             executor={"max_batch": 4})
    base = (await example_jobs(config, "product_main"))[0]
    jobs = [with_generate(base, row=r, seed=1000 + r) for r in (2, 3, 4)]
    real, calls = generation.generate_batch, []

    def runs_out_of_memory_on_row_3(ctx, batch):
        calls.append(sorted(i["seed"] for i in batch))
        if any(i["seed"] == 1003 for i in batch):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(ctx, batch)
    monkeypatch.setattr(generation, "generate_batch", runs_out_of_memory_on_row_3)
    async with Harness(config) as h:
        done = await h.run("product_main", jobs)
        clears = h.worker.engine.cache.stats["clears"]
    assert calls == [[1002, 1003, 1004], [1002], [1003], [1004]]
    assert [j.status for j in done] == ["succeeded", "failed", "succeeded"]
    assert "out of memory" in done[1].error and done[1].attempts == 1
    assert clears >= 2  # the cache was freed after each out-of-memory error


async def test_a_failing_job_fails_alone_with_a_clear_error(config):
    async with Harness(config) as h:
        good, bad = await example_jobs(config, "social_thumb")
        bad.workflow["nodes"][0]["inputs"]["image"] = "inputs/missing.png"
        done = await h.run("social_thumb", [good, bad])
    assert [j.status for j in done] == ["succeeded", "failed"]
    assert done[1].error.startswith("node cropped (crop): cannot read input image "
                                       "inputs/missing.png")
    assert done[1].attempts == 1  # bad input: not retried


async def test_a_job_past_its_timeout_is_stopped_and_failed(config):
    config = executor_config(config.data_dir, models_dir(config) / "demo",
                             executor={"job_timeout": 1.0})
    async with Harness(config) as h:
        job = with_generate((await example_jobs(config, "product_main"))[0], steps=100)
        done = (await h.run("product_main", [job]))[0]
        steps = [e.data["step"] for e in await h.queue.events_after(0) if e.kind == "progress"]
    assert done.status == Status.FAILED and "timed out after 1 s" in done.error
    assert max(steps, default=0) < 100 and done.attempts == 1


async def test_stopping_hands_the_running_job_back_without_using_an_attempt(config):
    async with Harness(config) as h:
        job = with_generate((await example_jobs(config, "product_main"))[0], steps=100)
        batch = await h.submit("product_main", [job])
        h.start()
        async with asyncio.timeout(60):
            while not any(e.kind == "progress" for e in await h.queue.events_after(0)):
                await asyncio.sleep(0.01)
        await h.stop()
        back = (await h.queue.batch_jobs(batch))[0]
    assert back.status == Status.QUEUED and back.attempts == 0


async def test_memory_drift_past_the_bound_rebuilds_the_model_cache(config):
    config = executor_config(config.data_dir, models_dir(config) / "demo",
                             executor={"memory_drift_mb": 150})
    import ctypes
    # This test process ran other tests before: what their models left in the C heap, given
    # back to the system in the middle of the leaky run (glibc trims when it can), once hid
    # the leak below. Given back first, the baseline is this test's own.
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    async with Harness(config) as h:
        jobs = await example_jobs(config, "product_main")
        await h.run("product_main", jobs)
        await h.run("product_main", jobs)
        assert h.worker.engine.stats["drift_rebuilds"] == 0
        assert h.worker.engine.cache.resident() == ["sdxl"]
        leak = bytearray(b"\x01") * (600 * 2**20)  # held across jobs, like a leak
        await h.run("product_main", jobs)
        assert h.worker.engine.stats["drift_rebuilds"] == 1
        assert h.worker.engine.cache.resident() == []  # dropped, to be loaded afresh
        del leak


async def test_upscale_uses_the_configured_diffusers_upscaler(config):
    config = executor_config(config.data_dir, models_dir(config) / "demo",
                             executor={"upscaler": "upscaler"})
    async with Harness(config) as h:
        done = (await h.run("product_main", (await example_jobs(config, "product_main"))[:1]))[0]
        assert h.worker.engine.cache.stats["loads:upscaler"] == 1
    path = FileStore(config.data_dir).path(done.outputs[0])
    assert Image.open(path).size == (128, 128)
    assert "upscaler" in read_metadata(path)["models"]


async def test_batch_delay_rests_between_jobs_and_recycling_ends_the_loop(config):
    config = executor_config(config.data_dir, models_dir(config) / "demo",
                             queue={"batch_delay": 0.5}, executor={"recycle_after_jobs": 2})
    async with Harness(config) as h:
        jobs = await example_jobs(config, "social_thumb")
        batch = await h.submit("social_thumb", jobs + [copy.deepcopy(jobs[0])])
        exit_code = await asyncio.wait_for(h.worker.run(), 60)
        done = sorted(await h.queue.batch_jobs(batch), key=lambda j: j.id)
    assert exit_code == 75  # EXIT_RECYCLE: the supervisor starts a fresh executor at once
    assert [j.status for j in done] == ["succeeded", "succeeded", "queued"]
    assert done[1].started_at - done[0].finished_at >= 0.5  # the rest between jobs


# --- the pipeline: claim ahead, finish beside the GPU ---------------------------------

async def until(check, timeout: float = 60.0, every: float = 0.01):
    """Poll the async `check` until it returns something true; return that."""
    async with asyncio.timeout(timeout):
        while not (found := await check()):
            await asyncio.sleep(every)
    return found


def slow_rows(base: NewJob, n: int, steps: int = 8) -> list[NewJob]:
    """Rows that each take `steps` denoising steps: with slow_gpu, seconds."""
    return [with_generate(base, row=r, steps=steps) for r in range(2, 2 + n)]


@pytest.fixture
def slow_gpu(monkeypatch):
    """Each denoising step takes a quarter of a second longer, asleep on the GPU's thread
    (as a real GPU leaves the CPU idle): a job lasts long enough to watch what happens
    around it, without the tens of steps of CPU that made it last before."""
    import time

    from executor.loop import Loop
    step = Loop.step

    def slowed(self, runs, node, at, total):
        step(self, runs, node, at, total)
        time.sleep(0.25)
    monkeypatch.setattr(Loop, "step", slowed)


@pytest.fixture
def one_by_one(config):
    """max_batch 1: one job per group."""
    return executor_config(config.data_dir, models_dir(config) / "demo", executor={"max_batch": 1})


@pytest.fixture
async def base(one_by_one) -> NewJob:
    """A product_main job to copy."""
    return (await example_jobs(one_by_one, "product_main"))[0]


async def test_the_next_job_is_claimed_ahead_while_one_generates(one_by_one, base, slow_gpu):
    from storage.workers import Workers
    async with Harness(one_by_one) as h:
        batch = await h.submit("product_main", slow_rows(base, 3))
        h.start()
        first, second, third = await h.queue.batch_jobs(batch)

        async def ahead():
            jobs = {j.id: j for j in await h.queue.batch_jobs(batch)}
            return jobs[first.id].status == "running" and jobs[second.id].lease_owner
        await until(ahead)
        job = await h.queue.job(second.id)
        assert (job.status, job.attempts, job.lease_owner) == ("queued", 0, "test-executor")
        assert (await h.queue.job(third.id)).lease_owner is None  # one group ahead, no more
        row = await until(lambda: _registry_with_ahead(Workers.of(h.queue)))
        assert row.stats["ahead"] == [second.id] and row.job_id == first.id
        await h.wait(batch)
        done = await h.queue.batch_jobs(batch)
    assert [j.status for j in done] == ["succeeded"] * 3 and [j.attempts for j in done] == [1] * 3
    assert done[0].finished_at <= done[1].finished_at <= done[2].finished_at


async def _registry_with_ahead(workers):
    rows = [w for w in await workers.all() if w.stats.get("ahead")]
    return rows[0] if rows else None


async def test_a_cancel_ends_the_job_claimed_ahead_at_once(one_by_one, base, slow_gpu):
    async with Harness(one_by_one) as h:
        batch = await h.submit("product_main", slow_rows(base, 3))
        h.start()
        first, second, third = await h.queue.batch_jobs(batch)
        await until(lambda: _leased(h.queue, second.id))
        result = await h.queue.cancel(job=second.id, by="test:admin")
        assert result.ended == [second.id]  # ended now, not asked to stop
        assert (await h.queue.job(second.id)).status == Status.CANCELED
        await h.wait(batch)
        done = {j.id: j for j in await h.queue.batch_jobs(batch)}
        started = [e.job_id for e in await h.queue.events_after(0) if e.kind == "running"]
    assert (done[second.id].status, done[second.id].attempts) == ("canceled", 0)
    assert [done[i].status for i in (first.id, third.id)] == ["succeeded", "succeeded"]
    assert started == [first.id, third.id]


async def _leased(queue, job_id):
    job = await queue.job(job_id)
    return job.status == "queued" and job.lease_owner is not None


async def test_a_pause_hands_the_job_claimed_ahead_back_at_once(one_by_one, base, slow_gpu):
    async with Harness(one_by_one) as h:
        batch = await h.submit("product_main", slow_rows(base, 2))
        h.start()
        first, second = await h.queue.batch_jobs(batch)
        await until(lambda: _leased(h.queue, second.id))
        await h.queue.pause(by="test:admin")
        job = await h.queue.job(second.id)
        assert (job.status, job.attempts, job.lease_owner) == ("queued", 0, None)
        await until(lambda: _status(h.queue, first.id, "succeeded"))  # the running one ends
        await asyncio.sleep(0.5)
        assert (await h.queue.job(second.id)).status == "queued"  # nothing starts
        await h.queue.resume(by="test:admin")
        await h.wait(batch)
        assert (await h.queue.job(second.id)).attempts == 1


async def _status(queue, job_id, status):
    return (await queue.job(job_id)).status == status


async def test_stopping_hands_the_job_claimed_ahead_back_untouched(one_by_one, base, slow_gpu):
    async with Harness(one_by_one) as h:
        batch = await h.submit("product_main", slow_rows(base, 2, steps=20))
        h.start()
        first, second = await h.queue.batch_jobs(batch)
        await until(lambda: _leased(h.queue, second.id))
        await h.stop()
        jobs = await h.queue.batch_jobs(batch)
    assert [(j.status, j.attempts) for j in jobs] == [("queued", 0), ("queued", 0)]
    assert jobs[1].lease_owner is None  # never started: no trace of the claim


# --- scaling down: drain on SIGTERM, exit when idle ------------------------------------

async def test_draining_hands_back_the_job_ahead_at_once_and_lets_the_running_one_finish(
        one_by_one, base, slow_gpu):
    from storage.workers import Workers
    async with Harness(one_by_one) as h:
        batch = await h.submit("product_main", slow_rows(base, 2))
        h.start()
        first, second = await h.queue.batch_jobs(batch)
        await until(lambda: _leased(h.queue, second.id))
        h.worker.drain(60)
        job = await until(lambda: _unleased(h.queue, second.id), timeout=5)
        assert (job.status, job.attempts) == ("queued", 0)  # another worker may take it now
        assert await asyncio.wait_for(h.task, 60) == 0
        h.task = None
        done = await h.queue.job(first.id)
        rows = await Workers.of(h.queue).all()
        assert (await h.queue.job(second.id)).status == "queued"  # never started here
    assert (done.status, done.attempts) == ("succeeded", 1)  # finished, not run twice
    assert [w.state for w in rows] == ["stopped"]  # deregistered


async def _unleased(queue, job_id):
    job = await queue.job(job_id)
    return job if job.lease_owner is None else None


async def test_a_job_still_running_when_the_drain_grace_ends_goes_back_without_an_attempt(
        one_by_one, base, slow_gpu):
    async with Harness(one_by_one) as h:
        batch = await h.submit("product_main", slow_rows(base, 1, steps=20))
        h.start()
        job = (await h.queue.batch_jobs(batch))[0]
        await until(lambda: _status(h.queue, job.id, "running"))
        h.worker.drain(0.3)
        assert await asyncio.wait_for(h.task, 60) == 0
        h.task = None
        job = (await h.queue.batch_jobs(batch))[0]
    assert (job.status, job.attempts) == ("queued", 0)


async def test_a_worker_with_nothing_to_do_exits_after_exit_when_idle(one_by_one, base):
    from storage.workers import Workers
    config = executor_config(one_by_one.data_dir, models_dir(one_by_one) / "demo",
                             executor={"max_batch": 1, "exit_when_idle": 0.5})
    async with Harness(config) as h:
        batch = await h.submit("product_main", slow_rows(base, 1, steps=2))
        h.start()
        assert await asyncio.wait_for(h.task, 60) == 0  # the job, then half a second idle
        h.task = None
        job = (await h.queue.batch_jobs(batch))[0]
        rows = await Workers.of(h.queue).all()
    assert (job.status, job.attempts) == ("succeeded", 1)
    assert [w.state for w in rows] == ["stopped"]


class Timeline:
    """When each generation and each file write began and ended, across threads."""

    def __init__(self, monkeypatch, *, write_seconds: float = 0.0, fail_name: str = "",
                 slow_name: str = ""):
        import threading
        import time

        from executor.diffusers.ops import diffusion
        self.marks: list[tuple[str, str, float]] = []
        self.lock = threading.Lock()
        real_generate, real_write = diffusion.generate_batch, FileStore.write

        def mark(what, key):
            with self.lock:
                self.marks.append((what, key, time.time()))

        def generate(ctx, batch):
            key = ",".join(str(i["seed"]) for i in batch)
            mark("gen start", key)
            try:
                return real_generate(ctx, batch)
            finally:
                mark("gen end", key)

        def write(store, relative, data):
            mark("write start", relative)
            time.sleep(write_seconds)  # a slow disk, or S3
            if slow_name and relative.endswith(slow_name):
                time.sleep(0.6)
            if fail_name and relative.endswith(fail_name):
                raise OSError(f"disk full writing {relative}")
            try:
                return real_write(store, relative, data)
            finally:
                mark("write end", relative)
        monkeypatch.setattr(diffusion, "generate_batch", generate)
        monkeypatch.setattr(FileStore, "write", write)

    def at(self, what: str, key: str) -> float:
        return next(t for w, k, t in self.marks if w == what and key in k)


def seed_of(job) -> str:
    return str(next(n["inputs"]["seed"] for n in job.workflow["nodes"] if n["op"] == "generate"))


async def test_saving_runs_beside_the_next_generation_and_completes_after_the_file(
        one_by_one, base, monkeypatch):
    timeline = Timeline(monkeypatch, write_seconds=0.4)
    jobs = [with_generate(base, row=r, seed=500 + r, steps=3) for r in (2, 3, 4)]
    async with Harness(one_by_one) as h:
        done = await h.run("product_main", jobs)
    assert [j.status for j in done] == ["succeeded"] * 3
    for job, nxt in zip(done, done[1:]):
        name = job.outputs[0]
        # The next image started while this one was still being written...
        assert timeline.at("gen start", seed_of(nxt)) < timeline.at("write end", name)
        # ...and the job was completed only once its file was stored.
        assert job.finished_at >= timeline.at("write end", name)
        assert FileStore(one_by_one.data_dir).path(name).stat().st_size > 0


async def test_with_no_finish_threads_the_job_finishes_before_the_next_starts(
        one_by_one, base, monkeypatch):
    config = executor_config(one_by_one.data_dir, models_dir(one_by_one) / "demo",
                             executor={"max_batch": 1, "finish_threads": 0})
    timeline = Timeline(monkeypatch, write_seconds=0.2)
    jobs = [with_generate(base, row=r, seed=600 + r, steps=2) for r in (2, 3)]
    async with Harness(config) as h:
        first, second = await h.run("product_main", jobs)
    assert timeline.at("gen start", seed_of(second)) >= \
        timeline.at("write end", first.outputs[0])


async def test_a_failing_save_touches_only_that_job(one_by_one, base, monkeypatch):
    Timeline(monkeypatch, fail_name="row_3.png")
    jobs = [with_generate(base, row=r, seed=700 + r, steps=2) for r in (2, 3, 4)]
    config = executor_config(one_by_one.data_dir, models_dir(one_by_one) / "demo",
                             executor={"max_batch": 1}, queue={"retry_backoff": 600})
    async with Harness(config) as h:
        batch = await h.submit("product_main", jobs)
        h.start()
        first, bad, last = await h.queue.batch_jobs(batch)
        for job in (first, last):
            await until(lambda job=job: _status(h.queue, job.id, "succeeded"))
        failed = await h.queue.job(bad.id)
    # A storage error may pass: the job waits for its retry, the others are done.
    assert (failed.status, failed.attempts, failed.outputs) == ("queued", 1, [])
    assert failed.error.startswith("node out (save): OSError: disk full writing")


async def test_a_full_disk_is_one_line_per_episode_and_its_jobs_run_again_once_it_has_room(
        one_by_one, base, monkeypatch, caplog):
    """Every save failing on a full disk: each job fails its attempt (a retryable error it
    says in one line), the log says it once, not a traceback per job; once there is room
    again, the retries succeed and the log says so."""
    import errno
    import logging
    caplog.set_level(logging.DEBUG, logger="genbot.executor")
    real_write, full = FileStore.write, [True]

    def write(store, relative, data):
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device", relative)
        return real_write(store, relative, data)
    monkeypatch.setattr(FileStore, "write", write)
    jobs = [with_generate(base, row=r, seed=900 + r, steps=1) for r in (2, 3, 4)]
    config = executor_config(one_by_one.data_dir, models_dir(one_by_one) / "demo",
                             executor={"max_batch": 1}, queue={"retry_backoff": 0.5,
                                                               "max_attempts": 5})
    async with Harness(config) as h:
        batch = await h.submit("product_main", jobs)
        h.start()

        async def failed_each_once():
            done = await h.queue.batch_jobs(batch)
            return all(j.attempts >= 1 and j.status == "queued" for j in done) and done
        for job in await until(failed_each_once):
            assert job.error.endswith("OSError: [Errno 28] No space left on device: "
                                      f"'outputs/batch_{batch}/row_{job.row}.png'"), job.error
        full[0] = False  # room again
        await h.wait(batch, 120)
        done = await h.queue.batch_jobs(batch)
    assert [j.status for j in done] == ["succeeded"] * 3
    told = [r for r in caplog.records if "reading or writing a job's files" in r.getMessage()]
    warned = [r for r in told if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "[Errno 28] No space left on device" in warned[0].getMessage()
    assert any("works again" in r.getMessage() for r in told)
    assert not any(r.exc_info or "traceback" in r.__dict__ for r in caplog.records
                   if r.name == "genbot.executor"), "no traceback for a full disk"


async def test_slow_storage_holds_the_gpu_back_with_a_few_images_waiting(config, monkeypatch):
    config = executor_config(config.data_dir, models_dir(config) / "demo",
                             executor={"max_batch": 2})
    Timeline(monkeypatch, write_seconds=0.3)
    base = (await example_jobs(config, "product_main"))[0]
    jobs = [with_generate(base, row=r, seed=800 + r, steps=1) for r in range(2, 12)]
    most = 0
    async with Harness(config) as h:
        batch = await h.submit("product_main", jobs)
        h.start()
        while not all(j.status == "succeeded" for j in await h.queue.batch_jobs(batch)):
            most = max(most, len(h.worker.finishing))
            await asyncio.sleep(0.01)
    assert 2 <= most <= 4  # 2 x max_batch images wait for storage, never the whole batch


async def test_progress_is_written_in_batches_without_holding_the_gpu(one_by_one, base,
                                                                      monkeypatch):
    writes: list[int] = []
    config = executor_config(one_by_one.data_dir, models_dir(one_by_one) / "demo",
                             executor={"max_batch": 1, "progress_interval": 0})
    async with Harness(config) as h:
        real = h.queue.progress_all

        async def slow_progress(updates):
            writes.append(len(updates))
            await asyncio.sleep(0.5)  # a database across an ocean
            return await real(updates)
        monkeypatch.setattr(h.queue, "progress_all", slow_progress)
        job = with_generate(base, row=2, steps=20)
        done = (await h.run("product_main", [job]))[0]
        steps = [e.data["step"] for e in await h.queue.events_after(0)
                 if e.kind == "progress" and e.job_id == done.id]
    assert done.status == "succeeded" and steps == list(range(1, 21))
    # Several steps per statement: the steps went on while a write was in flight, so
    # the GPU never waited for one (no wall-clock assertion: this machine is noisy).
    assert len(writes) < 20 and max(writes) > 1


async def test_claiming_ahead_prefers_the_model_the_gpu_is_about_to_hold(tmp_path, demo_models):
    """One submitter's jobs alternate between two checkpoints and the cache holds one: the
    job claimed ahead is for the model the running job loads, not the one it evicts."""
    config = executor_config(tmp_path / "data", demo_models,
                             executor={"max_batch": 1, "vram_budget_gb": 0.009,
                                       "ram_budget_gb": 0.0})

    def job(row: int, model: str) -> NewJob:
        return NewJob(row, {"template": "t", "row": row, "params": {}, "outputs": {"out": "o"},
                            "nodes": [{"id": "gen", "op": "generate", "inputs": {
                                "prompt": "p", "negative": "", "model": model, "seed": row,
                                "steps": 2, "guidance": 5.0, "size": [64, 64], "sampler": None,
                                "init_image": None, "strength": 0.75, "control_image": None,
                                "controlnet": None, "control_scale": 1.0, "loras": []}},
                                {"id": "out", "op": "save", "inputs": {
                                    "image": {"@": "gen.image"}, "name": f"{row}.png",
                                    "format": "png"}}]}, affinity=model)
    async with Harness(config) as h:
        done = await h.run("t", [job(r, ("sd15", "sdxl")[r % 2]) for r in range(2, 12)])
        stats = h.worker.engine.cache.stats
        loads = {m: stats[f"loads:{m}"] for m in ("sd15", "sdxl")}
    assert [j.status for j in done] == ["succeeded"] * 10
    assert loads == {"sd15": 1, "sdxl": 1}  # each model once, as without claiming ahead
    # (sd15's tiny VAE for its live previews loads beside it, once)


async def test_jobs_end_in_the_order_they_started_however_their_finishes_interleave(
        config, monkeypatch):
    """social_thumb has no GPU op: two rows finish at once on the finish threads, the first
    one slower; the second still ends after it (the thread gets row 2's image first)."""
    timeline = Timeline(monkeypatch, slow_name="thumb_2.png")
    async with Harness(config) as h:
        done = await h.run("social_thumb", await example_jobs(config, "social_thumb"))
        ends = [e.job_id for e in await h.queue.events_after(0) if e.kind == "succeeded"]
    assert [j.status for j in done] == ["succeeded"] * 2
    assert timeline.at("write end", "thumb_3.png") < timeline.at("write end", "thumb_2.png")
    assert ends == [done[0].id, done[1].id]
