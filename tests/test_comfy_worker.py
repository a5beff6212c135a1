"""The ComfyUI executor against a ComfyUI server on loopback (tests/comfyfake.py): rows
run as prompts and come back as images, and every fault ends in a clear per-row outcome,
nothing run twice that finished, nothing lost."""

from __future__ import annotations

import asyncio
import io
import json
import time
import uuid
from pathlib import Path

import pytest
from PIL import Image

from bot.intake.check import SheetRows, check_sheet
from executor.comfy_worker import ComfyWorker
from storage.files import open_store
from storage.queue import Status, Submission, open_queue
from storage.workers import Workers
from tests.comfyfake import FakeComfy, read_fake_info
from tests.conftest import ROOT, executor_config
from tests.test_comfy_template import TXT2IMG, WORKFLOWS

BOTTLE = (ROOT / "examples" / "assets" / "bottle.png").read_bytes()
IMG2IMG = {**{k: v for k, v in TXT2IMG.items() if k != "5"},
           "10": {"class_type": "LoadImage", "inputs": {"image": "example.png",
                                                        "upload": "image"},
                  "_meta": {"title": "Photo"}},
           "12": {"class_type": "VAEEncode", "inputs": {"pixels": ["10", 0], "vae": ["4", 2]}}}
IMG2IMG["3"] = {**TXT2IMG["3"], "inputs": {**TXT2IMG["3"]["inputs"], "latent_image": ["12", 0],
                                           "denoise": 0.7}}
TXT2IMG_CKPT = json.loads(json.dumps(TXT2IMG).replace("sd15.safetensors",
                                                      "dreamshaper_8.safetensors"))
IMG2IMG = json.loads(json.dumps(IMG2IMG).replace("sd15.safetensors", "dreamshaper_8.safetensors"))


def templates(folder: Path) -> Path:
    folder.mkdir()
    common = {"prompt": {"type": "text", "required": True, "to": ["Positive.text"]},
              "seed": {"type": "seed", "to": ["3.seed"]},
              "steps": {"type": "int", "to": ["3.steps"]}}
    for name, workflow, extra in (
            ("portrait", TXT2IMG_CKPT, {}),
            ("photo", IMG2IMG, {"picture": {"type": "image", "required": True,
                                            "to": ["Photo.image"]}})):
        (folder / f"{name}.workflow.json").write_text(json.dumps(workflow))
        (folder / f"{name}.json").write_text(json.dumps({
            "name": name, "engine": "comfyui", "workflow": f"{name}.workflow.json",
            "params": {**common, **extra}, "output": "{prompt}/{row}.png"}))
    return folder


class Rig:
    """A queue on a SQLite file, and the ComfyUI executor for one server, in this process."""

    def __init__(self, tmp_path: Path, demo_models: Path, comfy: FakeComfy, **comfyui):
        self.comfy = comfy
        self.config = executor_config(
            tmp_path / "data", demo_models, templates={"dir": str(templates(tmp_path / "t"))},
            comfyui={"servers": [comfy.url], "backoff_max": 0.2, **comfyui},
            queue={"heartbeat_seconds": 0.5})
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> Rig:
        self.queue = await open_queue(self.config)
        self.store = open_store(self.config)
        self.worker = ComfyWorker(self.config, self.queue, self.comfy.url, owner="comfy:1")
        return self

    def start(self) -> None:
        self.task = asyncio.create_task(self.worker.run())

    async def __aexit__(self, *exc) -> None:
        if self.task:
            self.worker.stopping.set()
            await asyncio.wait_for(self.task, 30)
        await self.queue.close()

    async def submit(self, template: str, rows: list[dict]) -> int:
        from executor.workflow import load_templates
        t = load_templates(self.config.templates_dir)[0][template]

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


@pytest.fixture
async def comfy():
    async with FakeComfy() as server:
        yield server


async def test_each_row_runs_as_a_prompt_and_its_image_comes_back_with_metadata(
        tmp_path, demo_models, comfy):
    async with Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        batch = await rig.submit("photo", [
            {"prompt": "red bottle", "seed": 11, "picture": "bottle.png"},
            {"prompt": "blue bottle", "seed": 22, "picture": "bottle.png", "steps": 4},
            {"prompt": "green bottle", "picture": "bottle.png"}])
        jobs = await rig.finished(batch)
        assert [j.status for j in jobs] == [Status.SUCCEEDED] * 3
        assert [j.outputs for j in jobs] == [[f"outputs/batch_{batch}/red bottle/2.png"],
                                             [f"outputs/batch_{batch}/blue bottle/3.png"],
                                             [f"outputs/batch_{batch}/green bottle/4.png"]]
        for job in jobs:  # the row's own values reached the sampler that made its image
            png = rig.image(job.outputs[0])
            info = read_fake_info(png)
            assert info["prompt"] == job.values["prompt"] and info["seed"] == job.values["seed"]
            assert info["ckpt_name"] == "dreamshaper_8.safetensors"
            with Image.open(io.BytesIO(png)) as im:
                meta = json.loads(im.info["genbot"])
            assert meta["engine"] == "comfyui" and meta["template"] == "photo"
            assert meta["row"] == job.row and meta["seeds"] == [job.values["seed"]]
            assert meta["workflow"]["6"]["inputs"]["text"] == job.values["prompt"]
            uuid.UUID(meta["prompt_id"])  # genbot made it
        assert read_fake_info(rig.image(jobs[1].outputs[0]))["steps"] == 4
        # The picture went up once, by content, and every prompt used it.
        assert len(comfy.uploads) == 1 and next(iter(comfy.uploads)).startswith("genbot-")
        assert {p["prompt"]["10"]["inputs"]["image"] for p in comfy.prompts} == \
            set(comfy.uploads)
        assert {p["client_id"] for p in comfy.prompts} == {rig.worker.client_id}
        assert [p["prompt_id"] for p in comfy.prompts] == [
            json.loads(Image.open(io.BytesIO(rig.image(j.outputs[0]))).info["genbot"])
            ["prompt_id"] for j in jobs]
        # ComfyUI's progress became the job's step progress.
        steps = [e.data for e in await rig.queue.events_after(0)
                 if e.kind == "progress" and e.job_id == jobs[1].id]
        assert steps and steps[-1]["step"] == steps[-1]["total"] == 4
        assert steps[-1]["node"] == "KSampler" and steps[-1]["row"] == 3


@pytest.mark.skipif(WORKFLOWS is None, reason="no ../shared/comfyui-workflows")
async def test_a_workflow_with_two_output_nodes_gives_both_images_named_in_order(
        tmp_path, demo_models, comfy):
    from executor.comfy_template import import_workflow
    assert WORKFLOWS is not None
    source = WORKFLOWS / "comfyui-api__sd1.5-multi-output.json"
    async with Rig(tmp_path, demo_models, comfy) as rig:
        template, _ = import_workflow(json.loads(source.read_text()), str(source), "multi")
        folder = rig.config.templates_dir
        (folder / "multi.workflow.json").write_bytes(source.read_bytes())
        (folder / "multi.json").write_text(json.dumps(template))
        rig.worker = ComfyWorker(rig.config, rig.queue, comfy.url, owner="comfy:1")
        rig.start()
        batch = await rig.submit("multi", [{"prompt": "a glass bottle", "seed": 5}])
        (job,) = await rig.finished(batch)
        assert job.status == Status.SUCCEEDED
        assert job.outputs == [f"outputs/batch_{batch}/2.png", f"outputs/batch_{batch}/2-2.png"]
        first, second = (read_fake_info(rig.image(o)) for o in job.outputs)
        assert first["prompt"] == second["prompt"] == "a glass bottle"
        assert first["seed"] == second["seed"] == 5


async def test_comfyui_refusing_a_row_fails_that_row_only_and_is_not_retried(
        tmp_path, demo_models, comfy):
    async with Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        batch = await rig.submit("portrait", [{"prompt": "fine", "seed": 1},
                                              {"prompt": "no steps", "seed": 1, "steps": 0}])
        good, bad = await rig.finished(batch)
        assert good.status == Status.SUCCEEDED
        assert bad.status == Status.FAILED and bad.attempts == 1
        assert bad.error.startswith("ComfyUI refused the workflow: node 3 (KSampler): ")
        assert "steps" in bad.error and "0" in bad.error


async def test_a_node_error_fails_the_row_with_the_node_and_its_message(
        tmp_path, demo_models, comfy):
    comfy.fail_node = {"node_type": "KSampler", "message": "tensor shapes do not match",
                       "exception_type": "RuntimeError"}
    async with Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        (job,) = await rig.finished(await rig.submit("portrait", [{"prompt": "x", "seed": 1}]))
        assert job.status == Status.FAILED and job.attempts == 1
        assert job.error.startswith("node 3 (KSampler): RuntimeError: tensor shapes do not match")


async def test_out_of_memory_frees_the_server_and_runs_the_row_once_more(
        tmp_path, demo_models, comfy):
    comfy.oom_once = True
    async with Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        (job,) = await rig.finished(await rig.submit("portrait", [{"prompt": "x", "seed": 1}]))
        assert job.status == Status.SUCCEEDED and comfy.frees == 1 and len(comfy.prompts) == 2


async def test_cancel_interrupts_the_prompt_within_a_second(tmp_path, demo_models, comfy):
    comfy.step_delay = 0.2
    async with Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        batch = await rig.submit("portrait", [{"prompt": "slow", "seed": 1, "steps": 50}])

        async def stepping():
            return [e for e in await rig.queue.events_after(0) if e.kind == "progress"]
        await rig.until(stepping)
        asked = time.monotonic()
        await rig.queue.cancel(batch=batch)
        await rig.until(lambda: _true(comfy.interrupts))
        assert time.monotonic() - asked < 1.0
        (job,) = await rig.finished(batch)
        assert job.status == Status.CANCELED and job.error.startswith("canceled at step ")
        assert comfy.interrupts[0].get("prompt_id") == comfy.prompts[0]["prompt_id"]
        assert ("POST", "/queue") in comfy.requests  # and dropped if it still waited


async def test_a_server_that_is_down_costs_no_attempt_and_says_so(tmp_path, demo_models, comfy):
    await comfy.stop()
    async with Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        batch = await rig.submit("portrait", [{"prompt": "later", "seed": 1}])

        async def said_down():
            return [w for w in await Workers.of(rig.queue).all()
                    if w.doing == ("server_down", [comfy.url])]
        (down,) = await rig.until(said_down)
        from bot.web.api import _worker  # what GET /api/v1/workers and the dashboard show
        assert _worker(down)["doing"] == {"what": "server_down", "models": [comfy.url]}
        assert down.stats["server_error"].startswith("GET /object_info: ")
        assert (await rig.queue.batch_progress(batch)).counts == {"queued": 1}
        await comfy.start()
        (job,) = await rig.finished(batch)
        assert job.status == Status.SUCCEEDED and job.attempts == 1
        (me,) = await Workers.of(rig.queue).all()
        assert me.doing is None and me.allow == ["comfyui:photo", "comfyui:portrait"]


async def test_a_restart_mid_job_sends_the_job_back_without_using_an_attempt(
        tmp_path, demo_models, comfy):
    comfy.restart_mid_job = True
    comfy.step_delay = 0.02
    async with Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        (job,) = await rig.finished(await rig.submit("portrait", [{"prompt": "x", "seed": 3}]))
        assert job.status == Status.SUCCEEDED and job.attempts == 1 and job.error is None
        assert len(comfy.prompts) == 2  # the lost one, then the one that ran
        assert read_fake_info(rig.image(job.outputs[0]))["seed"] == 3


async def test_a_dropped_socket_is_reopened_and_the_job_finishes(tmp_path, demo_models, comfy):
    comfy.step_delay = 0.02
    comfy.drop_socket_after_steps = 3
    async with Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        (job,) = await rig.finished(await rig.submit("portrait", [{"prompt": "x", "seed": 3,
                                                                   "steps": 12}]))
        assert job.status == Status.SUCCEEDED and len(comfy.prompts) == 1
        assert comfy.sockets.count(rig.worker.client_id) == 2  # the same client, again


async def test_a_late_history_is_waited_for_not_taken_for_a_loss(tmp_path, demo_models, comfy):
    comfy.history_delay = 1.0
    async with Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        (job,) = await rig.finished(await rig.submit("portrait", [{"prompt": "x", "seed": 3}]))
        assert job.status == Status.SUCCEEDED and len(comfy.prompts) == 1


async def test_a_template_the_server_cannot_run_is_said_and_its_jobs_left_to_others(
        tmp_path, demo_models):
    async with FakeComfy(missing_nodes={"LoadImage"}) as comfy, \
            Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        photo = await rig.submit("photo", [{"prompt": "x", "picture": "bottle.png"}])
        portrait = await rig.submit("portrait", [{"prompt": "y", "seed": 1}])
        (done,) = await rig.finished(portrait)
        assert done.status == Status.SUCCEEDED
        (me,) = await Workers.of(rig.queue).all()
        assert me.allow == ["comfyui:portrait"]
        assert me.stats["cannot_run"] == {"photo": 'node 10 "Photo" needs LoadImage, which this '
                                          "server lacks (a custom node not installed?)"}
        assert (await rig.queue.batch_progress(photo)).counts == {"queued": 1}
        from bot.web.api import _worker
        assert _worker(me)["cannot_run"] == me.cannot_run == me.stats["cannot_run"]
        # Nor does a diffusers executor take it.
        assert await rig.queue.claim("gpu") is None


async def test_a_missing_model_file_is_said_at_start(tmp_path, demo_models):
    async with FakeComfy(checkpoints=["other.safetensors"]) as comfy, \
            Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        await rig.until(lambda: _true(rig.worker.cannot))
        assert rig.worker.cannot["portrait"] == (
            'node 4 "Load Checkpoint" (CheckpointLoaderSimple) needs ckpt_name = '
            '"dreamshaper_8.safetensors", which this server does not have')


async def _true(x):
    return x


async def test_gen_in_chat_runs_on_comfyui_and_every_image_comes_to_the_thread(
        tmp_path, demo_models, comfy):
    """The whole way: a sheet and /gen in chat, jobs on the ComfyUI server, progress,
    each image and the summary in the batch's thread — the diffusers path's own code."""
    from tests.chatfake import World
    rig = Rig(tmp_path, demo_models, comfy)
    comfy.step_delay = 0.01
    async with World(rig.config) as w:
        w.worker = ComfyWorker(rig.config, w.queue, comfy.url, owner="comfy:1")
        w.task = asyncio.create_task(w.worker.run())
        p = w.platform
        sheet = p.upload("sheet.csv", b"prompt,seed\nred bottle,1\nblue bottle,2\n")
        accepted, progress = await w.send("/gen portrait", files=(sheet,))
        assert accepted.text.startswith("Batch 1 accepted: 2 portrait jobs")
        await w.finish()
        thread = p.in_thread(accepted.id)
        images = [post for post in thread if post.image and post.file != "contact.png"]
        assert [post.file for post in images] == ["2.png", "3.png"]
        assert [read_fake_info(post.data)["prompt"] for post in images] == \
            ["red bottle", "blue bottle"]
        summary = next(post for post in thread if post.text.startswith("Batch 1 finished"))
        assert ": 2 of 2 images, 0 failed, 0 canceled." in summary.text
        assert progress.edits, "the progress message was never edited"


@pytest.mark.slow
async def test_genbot_worker_comfyui_runs_as_its_own_process(tmp_path, demo_models, comfy):
    """`genbot worker --comfyui URL`, the process `genbot serve` supervises per server."""
    import os
    import subprocess
    import sys

    from storage.workers import Workers as W
    rig = Rig(tmp_path, demo_models, comfy)
    config_file = tmp_path / "config.toml"
    config_file.write_text(
        f'[service]\ndata_dir = "{rig.config.data_dir}"\n'
        f'[templates]\ndir = "{rig.config.templates_dir}"\n'
        '[queue]\npoll_interval = 0.1\nheartbeat_seconds = 0.5\n')
    async with rig:
        batch = await rig.submit("portrait", [{"prompt": "from a process", "seed": 9}])
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "worker", "--config", str(config_file),
            "--comfyui", comfy.url, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stderr=subprocess.PIPE)
        try:
            (job,) = await rig.finished(batch, timeout=60)
            assert job.status == Status.SUCCEEDED and job.lease_owner.endswith(f":{process.pid}")
            (me,) = [w for w in await W.of(rig.queue).all() if w.pid == process.pid]
            assert me.device == comfy.url and me.stats["engine"] == "comfyui"
        finally:
            process.terminate()
            _, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        assert b"Traceback" not in err


@pytest.mark.slow
async def test_serve_runs_one_supervised_executor_per_comfyui_server(tmp_path, demo_models):
    """[comfyui] servers: `genbot serve` starts an executor for each, beside its own."""
    from bot.service import Service
    async with FakeComfy() as a, FakeComfy() as b:
        from storage import config as cfg
        rig = Rig(tmp_path, demo_models, a)  # (links the demo models, writes the templates)
        file = tmp_path / "config.toml"  # the executors are processes: they read the file
        file.write_text(f'[service]\ndata_dir = "{rig.config.data_dir}"\nport = 0\n'
                        f'[templates]\ndir = "{rig.config.templates_dir}"\n'
                        f'[comfyui]\nservers = ["{a.url}", "{b.url}"]\n')
        config = cfg.load(str(file), env={})
        service = Service(config, executor=True, platforms=[])
        await service.start()
        try:
            async def both():
                found = {w.device for w in await Workers.of(service.queue).all() if w.live}
                return {a.url, b.url} <= found
            async with asyncio.timeout(60):
                while not await both():
                    await asyncio.sleep(0.1)
            assert len(service.comfy) == 2 and all(s.pid for s in service.comfy)
        finally:
            await service.stop()
        assert all(s.pid is None for s in service.comfy)


async def test_the_server_is_asked_to_free_its_memory_every_n_jobs(tmp_path, demo_models,
                                                                   comfy):
    async with Rig(tmp_path, demo_models, comfy, free_after_jobs=2) as rig:
        rig.start()
        jobs = await rig.finished(await rig.submit("portrait", [
            {"prompt": f"p{i}", "seed": i} for i in range(5)]))
        assert all(j.status == Status.SUCCEEDED for j in jobs)
        await rig.until(lambda: _true(comfy.frees >= 2))
        assert comfy.frees == 2  # after jobs 2 and 4


@pytest.mark.slow
async def test_genbot_run_runs_a_comfyui_template_on_the_configured_server(
        tmp_path, demo_models, comfy):
    import os
    import sys
    rig = Rig(tmp_path, demo_models, comfy)
    (tmp_path / "config.toml").write_text(
        f'[service]\ndata_dir = "{rig.config.data_dir}"\n'
        f'[templates]\ndir = "{rig.config.templates_dir}"\n'
        f'[comfyui]\nservers = ["{comfy.url}"]\n[queue]\npoll_interval = 0.1\n')
    (tmp_path / "sheet.csv").write_text("prompt,seed\nhello,4\n")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "run", "portrait", "sheet.csv", cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0] == "batch 1: 1 jobs of portrait from sheet.csv"
    assert lines[-3].startswith("made here, by this command's executor (")
    image = rig.config.data_dir / "outputs" / "batch_1" / "hello" / "2.png"
    assert read_fake_info(image.read_bytes())["seed"] == 4


def test_genbot_run_of_a_comfyui_template_without_servers_says_what_to_set(
        tmp_path, demo_models, monkeypatch, capsys):
    from bot.cli.genbot import main
    templates(tmp_path / "t")
    (tmp_path / "config.toml").write_text('[templates]\ndir = "t"\n')
    (tmp_path / "sheet.csv").write_text("prompt\nhello\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "portrait", "sheet.csv"]) == 2
    assert capsys.readouterr().err.strip() == (
        "genbot: portrait runs on ComfyUI: name your servers in [comfyui] servers "
        "(docs/comfyui.md)")


@pytest.mark.skipif(WORKFLOWS is None, reason="no ../shared/comfyui-workflows")
@pytest.mark.parametrize("file", ["comfyui__basic_api_example.json",
                                  "comfyui__default_graph_sdxl1_0.json",
                                  "comfyui-api__sd1.5-img2img.json",
                                  "comfyui__sd-1.5-lora-0.json"])
async def test_workflows_exported_by_others_import_and_run(tmp_path, demo_models, comfy, file):
    """Imported as they are, a row each: its prompt and seed reach the server's sampler."""
    from executor.comfy_template import import_workflow
    assert WORKFLOWS is not None
    source = WORKFLOWS / file
    async with Rig(tmp_path, demo_models, comfy) as rig:
        template, _ = import_workflow(json.loads(source.read_text()), str(source), "theirs")
        folder = rig.config.templates_dir
        (folder / "theirs.workflow.json").write_bytes(source.read_bytes())
        (folder / "theirs.json").write_text(json.dumps(template))
        rig.worker = ComfyWorker(rig.config, rig.queue, comfy.url, owner="comfy:1")
        rig.start()
        row = {"prompt": "a lighthouse at dusk", "seed": 77, "steps": 3}
        if "image" in template["params"]:
            row["image"] = "bottle.png"
        (job,) = await rig.finished(await rig.submit("theirs", [row]))
        assert job.status == Status.SUCCEEDED, job.error
        info = read_fake_info(rig.image(job.outputs[0]))
        assert info["prompt"] == "a lighthouse at dusk" and info["seed"] == 77
