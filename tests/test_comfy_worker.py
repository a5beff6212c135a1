"""The ComfyUI executor against a ComfyUI server on loopback (tests/fakes/comfyui.py): rows
run as prompts and come back as images, and every fault ends in a clear per-row outcome,
nothing run twice that finished, nothing lost."""

from __future__ import annotations

import asyncio
import io
import json
import time
import uuid

import msgspec
import pytest
from PIL import Image

from executor.worker import executor_loop
from storage.queue import Status
from storage.workers import Workers
from templates.settings import templates_dir
from tests.conftest import ROOT
from tests.fakes.comfyui import FakeComfy, read_fake_info
from tests.fakes.executor import Rig
from tests.fakes.workflows import WORKFLOWS, templates


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
        assert {p["client_id"] for p in comfy.prompts} == {rig.worker.engine.client_id}
        assert [p["prompt_id"] for p in comfy.prompts] == [
            json.loads(Image.open(io.BytesIO(rig.image(j.outputs[0]))).info["genbot"])
            ["prompt_id"] for j in jobs]
        # ComfyUI's progress became the job's step progress.
        steps = [e.data for e in await rig.queue.events_after(0)
                 if e.kind == "progress" and e.job_id == jobs[1].id]
        assert steps and steps[-1]["step"] == steps[-1]["total"] == 4
        assert steps[-1]["node"] == "KSampler" and steps[-1]["row"] == 3


async def test_vary_feeds_the_parent_image_into_the_image_input_and_again_draws_new_seeds(
        tmp_path, demo_models, comfy):
    """App.act on a ComfyUI image, through the real executor: vary uploads the parent's
    file and names it in the template's image input (LoadImage "Photo"), with new seeds;
    again keeps the row's picture and draws new seeds; two children of one ask each keep
    their own file."""
    import hashlib

    from bot.app.application import App, load_templates
    from bot.app.iterate import ActionRequest
    from bot.app.permissions import Who
    from bot.errors import Invalid
    from templates.jobs import ComfyJob, Upload, decode
    async with Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        app = App(rig.config, rig.queue, rig.store, load_templates(rig.config))
        (parent,) = await rig.finished(await rig.submit("photo", [
            {"prompt": "red bottle", "seed": 11, "picture": "bottle.png"}]))
        assert parent.status == Status.SUCCEEDED, parent.error
        (bottle,) = comfy.uploads  # the row's picture, uploaded for the parent
        me = Who("test", "U1")  # Rig.submit's submitter: the image is theirs

        def prompt_of(job_id: int) -> dict:
            (p,) = [p for p in comfy.prompts if p["extra_data"]["genbot"]["job"] == job_id]
            return p["prompt"]

        # The executor has registered (allow: comfyui:photo): the placement check passes.
        varied = await rig.finished((await app.act(
            me, parent.id, ActionRequest("vary", count=2))).batch_id)
        assert [c.status for c in varied] == [Status.SUCCEEDED] * 2, [c.error for c in varied]
        assert {(c.parent_job_id, c.action) for c in varied} == {(parent.id, "vary")}
        made = rig.image(parent.outputs[0])
        (sent,) = [name for name, data in comfy.uploads.items() if data == made]
        assert sent != bottle and sent.startswith("genbot-")
        folder = f"outputs/batch_{varied[0].batch_id}/red bottle"
        assert [c.outputs for c in varied] == [[f"{folder}/2.png"], [f"{folder}/2_2.png"]]
        for child in varied:
            bound = decode(child.workflow)
            assert isinstance(bound, ComfyJob) and bound.named == {}  # not bottle.png now
            assert bound.uploads == [Upload("10", "image", parent.outputs[0])]
            assert child.values["picture"] == parent.outputs[0]
            sampled = prompt_of(child.id)
            assert sampled["10"]["inputs"]["image"] == sent  # LoadImage "Photo"
            assert sampled["3"]["inputs"]["seed"] == child.values["seed"] != 11
            assert sampled["6"]["inputs"]["text"] == "red bottle"
            info = read_fake_info(rig.image(child.outputs[0]))  # its own, not its sibling's
            assert info["image_sha256"] == hashlib.sha256(made).hexdigest()
            assert info["seed"] == child.values["seed"]
        varied_seeds = {c.values["seed"] for c in varied}
        assert len(varied_seeds) == 2

        redone = await rig.finished((await app.act(
            me, parent.id, ActionRequest("again", count=2))).batch_id)
        assert [c.status for c in redone] == [Status.SUCCEEDED] * 2, [c.error for c in redone]
        seeds = [prompt_of(c.id)["3"]["inputs"]["seed"] for c in redone]
        assert seeds == [c.values["seed"] for c in redone]
        assert len(set(seeds)) == 2 and not ({11} | varied_seeds) & set(seeds)
        assert {prompt_of(c.id)["10"]["inputs"]["image"] for c in redone} == {bottle}
        assert [read_fake_info(rig.image(c.outputs[0]))["seed"] for c in redone] == seeds

        # A template with no image input has nowhere to feed the picture: refused, saying so.
        (plain,) = await rig.finished(await rig.submit("portrait", [{"prompt": "x", "seed": 1}]))
        with pytest.raises(Invalid) as refused:
            await app.act(me, plain.id, ActionRequest("vary"))
        assert refused.value.code == "vary_no_image" and '"portrait"' in refused.value.render()


@pytest.mark.skipif(WORKFLOWS is None, reason="no ../shared/comfyui-workflows")
async def test_a_workflow_with_two_output_nodes_gives_both_images_named_in_order(
        tmp_path, demo_models, comfy):
    from templates.comfy import import_workflow
    assert WORKFLOWS is not None
    source = WORKFLOWS / "comfyui-api__sd1.5-multi-output.json"
    async with Rig(tmp_path, demo_models, comfy) as rig:
        template, _ = import_workflow(json.loads(source.read_text()), str(source), "multi")
        folder = templates_dir(rig.config)
        (folder / "multi.workflow.json").write_bytes(source.read_bytes())
        (folder / "multi.json").write_text(json.dumps(template))
        rig.worker = executor_loop(rig.config, rig.queue, comfyui=comfy.url, owner="comfy:1")
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
        from bot.web.workers import Worker  # what GET /api/v1/workers and the dashboard show
        shown = msgspec.to_builtins(Worker.of(down))
        assert shown["doing"] == {"what": "server_down", "models": [comfy.url]}
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
        assert comfy.sockets.count(rig.worker.engine.client_id) == 2  # the same client, again


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
        from bot.web.workers import Worker
        assert Worker.of(me).cannot_run == me.cannot_run == me.stats["cannot_run"]
        # Nor does a diffusers executor take it.
        assert await rig.queue.claim("gpu") is None


async def test_a_missing_model_file_is_said_at_start(tmp_path, demo_models):
    async with FakeComfy(checkpoints=["other.safetensors"]) as comfy, \
            Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        await rig.until(lambda: _true(rig.worker.engine.cannot))
        assert rig.worker.engine.cannot["portrait"] == (
            'node 4 "Load Checkpoint" (CheckpointLoaderSimple) needs ckpt_name = '
            '"dreamshaper_8.safetensors", which this server does not have')


async def _true(x):
    return x


async def test_gen_in_chat_runs_on_comfyui_and_every_image_comes_to_the_thread(
        tmp_path, demo_models, comfy):
    """The whole way: a sheet and /gen in chat, jobs on the ComfyUI server, progress,
    each image and the summary in the batch's thread — the diffusers path's own code."""
    from tests.fakes.chat import World
    rig = Rig(tmp_path, demo_models, comfy)
    comfy.step_delay = 0.01
    async with World(rig.config) as w:
        w.worker = executor_loop(rig.config, w.queue, comfyui=comfy.url, owner="comfy:1")
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
    from storage.workers import Workers as W
    rig = Rig(tmp_path, demo_models, comfy)
    async with rig:
        batch = await rig.submit("portrait", [{"prompt": "from a process", "seed": 9}])
        process = await rig.worker_process()
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


async def test_sigterm_drains_the_worker_process_its_job_finishes_and_it_deregisters(
        tmp_path, demo_models):
    """A scale-down as Kubernetes does it: SIGTERM to `genbot worker` mid-job. The job on
    the server finishes (once, no attempt lost), the next one goes back untouched, the
    process leaves the registry and exits 0."""
    import signal

    from storage.workers import Workers as W
    async with FakeComfy(step_delay=0.1) as comfy:
        rig = Rig(tmp_path, demo_models, comfy)
        async with rig:
            batch = await rig.submit("portrait", [{"prompt": "x", "seed": 1},
                                                  {"prompt": "y", "seed": 2}])
            first, second = await rig.queue.batch_jobs(batch)
            process = await rig.worker_process()
            try:
                async def running():
                    return (await rig.queue.job(first.id)).status == "running"
                await rig.until(running)
                process.send_signal(signal.SIGTERM)
                _, err = await asyncio.wait_for(process.communicate(), 60)
            finally:
                if process.returncode is None:
                    process.kill()
            done, back = await rig.queue.batch_jobs(batch)
            (me,) = [w for w in await W.of(rig.queue).all() if w.pid == process.pid]
    assert process.returncode == 0, err.decode()
    assert (done.status, done.attempts) == ("succeeded", 1)
    assert (back.status, back.attempts) == ("queued", 0)
    assert me.state == "stopped" and b"draining" in err and b"Traceback" not in err


@pytest.mark.slow
async def test_serve_runs_one_supervised_executor_per_comfyui_server(tmp_path, demo_models):
    """[comfyui] servers: `genbot serve` starts an executor for each, beside its own."""
    from bot.service import Service
    async with FakeComfy() as a, FakeComfy() as b:
        from storage import config as cfg
        rig = Rig(tmp_path, demo_models, a)  # (links the demo models, writes the templates)
        file = tmp_path / "config.toml"  # the executors are processes: they read the file
        file.write_text(f'[service]\ndata_dir = "{rig.config.data_dir}"\nport = 0\n'
                        f'[templates]\ndir = "{templates_dir(rig.config)}"\n'
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
        f'[templates]\ndir = "{templates_dir(rig.config)}"\n'
        f'[comfyui]\nservers = ["{comfy.url}"]\n[queue]\npoll_interval = 0.1\n')
    (tmp_path / "sheet.csv").write_text("prompt,seed\nhello,4\n")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "run", "portrait", "sheet.csv", cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0] == "batch 1: 1 job of portrait from sheet.csv"
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
        "(genbot docs comfyui)")


@pytest.mark.skipif(WORKFLOWS is None, reason="no ../shared/comfyui-workflows")
@pytest.mark.parametrize("file", ["comfyui__basic_api_example.json",
                                  "comfyui__default_graph_sdxl1_0.json",
                                  "comfyui-api__sd1.5-img2img.json",
                                  "comfyui__sd-1.5-lora-0.json"])
async def test_workflows_exported_by_others_import_and_run(tmp_path, demo_models, comfy, file):
    """Imported as they are, a row each: its prompt and seed reach the server's sampler;
    a LoRA's strength column sets both its strengths (model and CLIP)."""
    from templates.comfy import import_workflow
    assert WORKFLOWS is not None
    source = WORKFLOWS / file
    async with Rig(tmp_path, demo_models, comfy) as rig:
        template, _ = import_workflow(json.loads(source.read_text()), str(source), "theirs")
        folder = templates_dir(rig.config)
        (folder / "theirs.workflow.json").write_bytes(source.read_bytes())
        (folder / "theirs.json").write_text(json.dumps(template))
        rig.worker = executor_loop(rig.config, rig.queue, comfyui=comfy.url, owner="comfy:1")
        rig.start()
        row = {"prompt": "a lighthouse at dusk", "seed": 77, "steps": 3}
        if "image" in template["params"]:
            row["image"] = "bottle.png"
        if "lora" in template["params"]:
            row["lora_strength"] = 0.6
        (job,) = await rig.finished(await rig.submit("theirs", [row]))
        assert job.status == Status.SUCCEEDED, job.error
        info = read_fake_info(rig.image(job.outputs[0]))
        assert info["prompt"] == "a lighthouse at dusk" and info["seed"] == 77
        if "lora" in template["params"]:
            lora = comfy.prompts[-1]["prompt"]["10"]["inputs"]
            assert (lora["strength_model"], lora["strength_clip"]) == (0.6, 0.6)


@pytest.mark.skipif(WORKFLOWS is None, reason="no ../shared/comfyui-workflows")
async def test_a_ui_format_workflow_converted_with_the_servers_object_info_runs(
        tmp_path, demo_models, comfy):
    """The frontend's default graph, saved in the UI format, converted with the server's
    own /object_info and imported: a row runs on it, its prompt and seed reaching the
    sampler and its checkpoint one of the server's."""
    import aiohttp

    from templates.comfy import import_workflow
    from templates.comfy_ui import to_api
    assert WORKFLOWS is not None
    name = "ui-format__comfyui-frontend-default.json"
    async with aiohttp.ClientSession() as http, http.get(f"{comfy.url}/object_info") as r:
        info = await r.json()
    prompt = to_api(json.loads((WORKFLOWS / name).read_text()), info, name)
    async with Rig(tmp_path, demo_models, comfy) as rig:
        template, _ = import_workflow(prompt, name, "ui", info)
        assert template["params"]["checkpoint"]["choices"] == comfy.checkpoints
        folder = templates_dir(rig.config)
        (folder / "ui.workflow.json").write_text(json.dumps(prompt))
        (folder / "ui.json").write_text(json.dumps(template))
        rig.worker = executor_loop(rig.config, rig.queue, comfyui=comfy.url, owner="comfy:1")
        rig.start()
        (job,) = await rig.finished(await rig.submit("ui", [{
            "prompt": "a lighthouse at dusk", "seed": 77, "steps": 3,
            "checkpoint": comfy.checkpoints[-1]}]))
        assert job.status == Status.SUCCEEDED, job.error
        info_seen = read_fake_info(rig.image(job.outputs[0]))
        assert (info_seen["prompt"], info_seen["seed"], info_seen["ckpt_name"]) == \
            ("a lighthouse at dusk", 77, comfy.checkpoints[-1])


# --- hostile or broken servers: one row fails, saying why; the executor lives on -----------

ODD = "odd answer from the ComfyUI server: "
KEPT = "it is not an image or a video genbot keeps (PNG, JPEG, WebP, GIF, WebM, MP4)"
REFUSED = {  # FakeComfy(hostile=…) -> the row's error ({url}: the server's)
    "html": f"node 9 (SaveImage): x_00001_.html: {KEPT}; it starts as markup (HTML, SVG or XML)",
    "text_png": f"node 9 (SaveImage): x_00001_.png: {KEPT}; it starts as text",
    "bomb": "node 9 (SaveImage): x_00001_.png: it declares 100000×100000 pixels, more than the "
            "limit of 89478485 (MAX_IMAGE_PIXELS)",
    "huge_view": f"{ODD}node 9 (SaveImage): x_00001_.png: GET /view answers more than 1024 MB",
    "nul_name": f'{ODD}node 9 (SaveImage): refused the file name "x_00001_\\x00.png" from '
                "ComfyUI server {url}: it holds a control or invisible character",
    "dotdot_name": f'{ODD}node 9 (SaveImage): refused the file name "../../.." from ComfyUI '
                   "server {url}: it leads out of its folder",
    "odd_type": f'{ODD}node 9 (SaveImage): x_00001_.png: its type is "../input", not output, '
                "temp or input",
    "odd_node": f'{ODD}the history names an output of node "²", which is no node id',
    "outputs_list": f"{ODD}the history entry's outputs are a list, not an object",
    "images_string": f"{ODD}node 9 (SaveImage): its images are a string, not a list",
    "status_list": f"{ODD}the history entry's status is a list, not an object",
    "entry_list": f"{ODD}the history entry is a list, not an object",
    "history_list": f"{ODD}GET /history/{{prompt}}: a list, not an object",
    "odd_prompt_id": f'{ODD}POST /prompt: the prompt_id "../../queue" is no prompt id',
    "history_500": "the ComfyUI server went down 3 times while running this row (last: GET "
                   "/history/{prompt}: HTTP 500 boom 2030-01-01 INFO genbot: forged\\x1b[2J)",
}


@pytest.mark.parametrize("mode", sorted(REFUSED))
async def test_a_hostile_or_broken_answer_fails_the_row_saying_why_and_stores_nothing(
        tmp_path, demo_models, mode):
    async with FakeComfy(hostile=mode) as comfy, Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        batch = await rig.submit("portrait", [{"prompt": "x", "seed": 1}])
        (job,) = await rig.finished(batch)
        assert job.status == Status.FAILED and job.attempts == 1 and job.outputs == []
        prompt = comfy.prompts[-1]["prompt_id"]
        assert job.error == REFUSED[mode].format(url=comfy.url, prompt=prompt)
        folder = rig.store.path(f"outputs/batch_{batch}")
        assert not folder.exists() or not [p for p in folder.rglob("*") if p.is_file()]
        # The executor lives on: the same one runs the next row once the server behaves.
        comfy.hostile = None
        (good,) = await rig.finished(await rig.submit("portrait", [{"prompt": "y", "seed": 2}]))
        assert good.status == Status.SUCCEEDED and not rig.task.done()
        assert len({p["client_id"] for p in comfy.prompts}) == 1


@pytest.mark.parametrize(("mode", "suffix"), [("png_named_html", ".png"), ("jpeg", ".jpg"),
                                               ("webm", ".webm"), ("mp4", ".mp4")])
async def test_an_output_is_named_by_its_bytes_not_by_the_servers_name(
        tmp_path, demo_models, mode, suffix):
    from storage.media import sniff_file
    async with FakeComfy(hostile=mode) as comfy, Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        batch = await rig.submit("portrait", [{"prompt": "clip", "seed": 1}])
        (job,) = await rig.finished(batch)
        assert job.status == Status.SUCCEEDED, job.error
        assert job.outputs == [f"outputs/batch_{batch}/clip/2{suffix}"]
        assert sniff_file(rig.store.path(job.outputs[0])).suffix == suffix


async def test_a_servers_error_text_cannot_forge_a_line(tmp_path, demo_models, comfy, caplog):
    """ComfyUI's error texts hold line breaks (its tips) and may hold anything: the row's
    error is one line, terminal escapes and NULs shown, not sent."""
    comfy.fail_node = {"node_type": "KSampler", "exception_type": "RuntimeError\x1b[2J",
                       "message": "bad input\n2030-01-01 00:00:00 INFO genbot: job done\r\n"
                                  "\x1b[31mforged\x00"}
    async with Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        (job,) = await rig.finished(await rig.submit("portrait", [{"prompt": "x", "seed": 1}]))
    assert job.status == Status.FAILED
    assert job.error == ("node 3 (KSampler): RuntimeError\\x1b[2J: bad input 2030-01-01 "
                         "00:00:00 INFO genbot: job done \\x1b[31mforged\\x00")
    failed = [r for r in caplog.records if r.getMessage() == "job failed"]
    assert failed and failed[0].error == job.error


async def test_an_odd_name_for_an_uploaded_picture_fails_the_row(tmp_path, demo_models):
    async with FakeComfy(hostile="odd_upload_name") as comfy, \
            Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        batch = await rig.submit("photo", [{"prompt": "x", "picture": "bottle.png"}])
        (job,) = await rig.finished(batch)
        assert job.status == Status.FAILED and job.attempts == 1 and not comfy.prompts
        assert job.error.startswith(f"{ODD}POST /upload/image genbot-")
        assert job.error.endswith(f'refused the file name "../../x.png" from ComfyUI server '
                                  f"{comfy.url}: it leads out of its folder")


async def test_an_odd_object_info_is_read_as_far_as_it_goes(tmp_path, demo_models):
    """A class described as a list, inputs as a string: nothing to check there, and the
    executor connects and runs the row (ComfyUI itself validates the prompt)."""
    async with FakeComfy(hostile="odd_object_info") as comfy, \
            Rig(tmp_path, demo_models, comfy) as rig:
        rig.start()
        (job,) = await rig.finished(await rig.submit("portrait", [{"prompt": "x", "seed": 1}]))
        assert job.status == Status.SUCCEEDED


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["nul_name", "odd_node", "html"])
async def test_the_worker_process_outlives_a_hostile_server(tmp_path, demo_models, mode):
    """`genbot worker --comfyui URL` as `genbot serve` runs it: the row fails with its
    reason (not "lease expired" after the process died three times), the process stays."""
    async with FakeComfy(hostile=mode) as comfy:
        rig = Rig(tmp_path, demo_models, comfy)
        async with rig:
            batch = await rig.submit("portrait", [{"prompt": "x", "seed": 1}])
            process = await rig.worker_process('log_format = "json"\n')
            try:
                (job,) = await rig.finished(batch, timeout=60)
                assert job.status == Status.FAILED and job.attempts == 1
                assert job.error == REFUSED[mode].format(url=comfy.url,
                                                         prompt=comfy.prompts[-1]["prompt_id"])
                comfy.hostile = None
                (good,) = await rig.finished(
                    await rig.submit("portrait", [{"prompt": "y", "seed": 2}]), timeout=60)
                assert good.status == Status.SUCCEEDED
                assert good.lease_owner == job.lease_owner  # the same process
                assert process.returncode is None
            finally:
                process.terminate()
                _, err = await process.communicate()
        assert b"Traceback" not in err
        lines = err.decode().splitlines()
        assert all(json.loads(line) for line in lines)  # every log line one JSON object


async def test_a_video_output_goes_to_the_thread_as_a_file_and_the_summary_still_comes(
        tmp_path, demo_models):
    """ComfyUI's SaveWEBM: the row succeeds with a .webm, chat gets it as a file (not a
    picture a platform would try to show), and the contact sheet holds a card for it."""
    from tests.fakes.chat import World
    async with FakeComfy(hostile="webm") as comfy:
        rig = Rig(tmp_path, demo_models, comfy)
        async with World(rig.config) as w:
            w.worker = executor_loop(rig.config, w.queue, comfyui=comfy.url, owner="comfy:1")
            w.task = asyncio.create_task(w.worker.run())
            p = w.platform
            accepted = (await w.send("/gen portrait", files=(
                p.upload("sheet.csv", b"prompt,seed\nclip,1\n"),)))[0]
            await w.finish()
            thread = p.in_thread(accepted.id)
            (video,) = [x for x in thread if x.file == "2.webm"]
            assert not video.image and video.text == "row 2 · clip"
            summary = next(x for x in thread if x.text.startswith("Batch 1 finished"))
            assert ": 1 of 1 images, 0 failed, 0 canceled." in summary.text
            assert any(x.file == "contact.png" for x in thread)
