"""Placement known before the wait: what no running executor can run is said at
submission, in /status, the API, the progress line and one notice in the thread — and
`genbot run` ends within seconds instead of following a batch nothing will take."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import aiohttp

from bot.app.placement import unplaced
from storage.records import WorkerInfo
from storage.workers import Workers
from templates.settings import templates_dir
from tests.conftest import ROOT, executor_config
from tests.fakes.api import ADMIN, BOTTLE, ApiWorld, api_config
from tests.fakes.comfyui import FakeComfy
from tests.fakes.workflows import templates

MISSING = ('node 4 "Load Checkpoint" (CheckpointLoaderSimple) needs ckpt_name = '
           '"dreamshaper_8.safetensors", which this server does not have')


def worker(name: str, *, engine: str = "diffusers", allow: list[str] | None = None,
           cannot: dict[str, str] | None = None, state: str = "idle",
           doing: str | None = None) -> WorkerInfo:
    stats = {"engine": engine, "cannot_run": cannot or {},
             "doing": {"what": doing, "models": []} if doing else None}
    return WorkerInfo(id=name, host="h", pid=1, device=f"dev-{name}", version="0.1.0",
                      state=state, job_id=None, memory_total=None, memory_used=None, models=[],
                      allow=allow, stats=stats, started_at=0.0, seen_at=0.0)


def test_a_need_is_unmet_only_when_every_running_executor_of_its_engine_refuses_it():
    small = worker("gpu1", allow=["sd15"], cannot={"sdxl": "it needs about 6.5 GiB"})
    anything = worker("gpu2")
    comfy = worker("cf1", engine="comfyui", allow=["comfyui:portrait"],
                   cannot={"poster": "node 3 needs a file"})
    (sdxl,) = unplaced(["sdxl", "sd15", None], [small, comfy])
    assert (sdxl.need, str(sdxl.what), sdxl.what.render("zh")) == \
        ("sdxl", "model sdxl", "模型 sdxl")
    assert sdxl.why == ("gpu1: it needs about 6.5 GiB",)
    assert unplaced(["sdxl"], [small, anything]) == []  # one that takes anything
    assert unplaced(["sdxl"], [worker("gpu3", allow=["sd15"])])[0].why == \
        ("gpu3: it takes only sd15",)
    (poster,) = unplaced(["comfyui:poster", "comfyui:portrait"], [small, comfy])
    assert (str(poster.what), poster.why) == ("ComfyUI template poster",
                                              ("dev-cf1: node 3 needs a file",))
    # Nobody there to ask, a server not connected yet, a stopped executor: no verdict.
    assert unplaced(["sdxl", "comfyui:poster"], []) == []
    assert unplaced(["comfyui:poster"], [worker("cf2", engine="comfyui", doing="server_down",
                                                cannot={"poster": "old news"})]) == []
    assert unplaced(["sdxl"], [worker("gpu4", allow=["sd15"], state="lost")]) == []


async def test_a_diffusers_executor_names_the_models_it_leaves_and_why(tmp_path, demo_models):
    """A [models] file missing on this host: the executor takes the others and says why
    not that one; a batch for it is refused at submission, or queued when asked, and
    then said to wait."""
    from tests.fakes.chat import World
    config = executor_config(tmp_path / "data", demo_models,
                             models={"ghost": "/nowhere/ghost.safetensors"})
    async with World(config) as w:
        w.start_executor()
        workers = Workers.of(w.queue)
        async with asyncio.timeout(60):
            while not (rows := [x for x in await workers.all() if x.cannot_run]):
                await asyncio.sleep(0.05)
        (me,) = rows
        assert me.cannot_run == {"ghost": "its file /nowhere/ghost.safetensors does not exist "
                                          f"on {me.host}"}
        assert me.allow is not None and "ghost" not in me.allow and "sdxl" in me.allow
        (need,) = await w.core.app.unplaced(["ghost", "sdxl"])
        assert need.why == (f"{me.id}: its file /nowhere/ghost.safetensors does not exist on "
                            f"{me.host}",)
        assert await w.core.app.unplaced([]) == []


async def test_chat_refuses_then_queues_on_request_and_says_why_it_waits(tmp_path, demo_models):
    """A ComfyUI template whose checkpoint the only server lacks: /gen says so and queues
    nothing; --wait-for-executor queues it; /status, the progress line and one notice
    in the thread say why it waits."""
    from executor.worker import executor_loop
    from tests.fakes.chat import World
    async with FakeComfy(checkpoints=["other.safetensors"]) as comfy:
        config = _comfy_config(tmp_path, demo_models, comfy.url)
        async with World(config) as w:
            w.worker = executor_loop(config, w.queue, comfyui=comfy.url, owner="comfy:1")
            w.task = asyncio.create_task(w.worker.run())
            await _until_cannot_run(w.queue)
            p = w.platform
            sheet = p.upload("sheet.csv", b"prompt,seed\nred bottle,1\n")
            (refused,) = await w.send("/gen portrait", files=(sheet,))
            assert refused.text == (
                f"no running executor can run ComfyUI template portrait: {comfy.url}: {MISSING}."
                " Nothing was queued: fix that (the missing file or node, or start an executor "
                "that has it), or send again with --wait-for-executor to queue it until one can")
            assert (await w.queue.active_counts()).total == 0
            accepted, progress = await w.send("/gen portrait sheet.csv --wait-for-executor")
            assert accepted.text.startswith("Batch 1 accepted: 1 portrait job.")
            waiting = (f"Waiting: no running executor can run ComfyUI template portrait "
                       f"({comfy.url}: {MISSING}); it runs once one that can is started.")
            assert progress.text.splitlines()[-1] == waiting
            (status,) = await w.send("/status 1")
            assert status.text.splitlines()[-1] == waiting
            (zh,) = await w.send("/status 1", lang="zh")
            assert "等待中：没有正在运行的执行器能运行 ComfyUI 模板 portrait" in zh.text
            for _ in range(3):  # looked for every few seconds: told once
                await w.core.notifier.waiting()
                await w.core.pump()
            notices = [x for x in p.in_thread(accepted.id)
                       if x.text.startswith("Batch 1 is waiting")]
            assert [x.text for x in notices] == [
                f"Batch 1 is waiting: no running executor can run ComfyUI template portrait "
                f"({comfy.url}: {MISSING}). It runs once one that can is started; /cancel 1 to "
                "drop it."]
            await w.send("/cancel 1")
            assert (await w.queue.active_counts()).total == 0


async def test_the_api_refuses_or_queues_and_the_batch_says_what_it_waits_for(tmp_path,
                                                                              demo_models):
    async with ApiWorld(api_config(tmp_path, demo_models)) as api:
        await Workers.of(api.queue).beat(
            "gpu1:7", host="gpu1", pid=7, device="cuda:0", version="0.1.0", job=None,
            allow=["sd15"], stats={"engine": "diffusers", "cannot_run": {
                "sdxl": "it needs about 6.5 GiB, more than the 4.0 GiB this executor may use"}})

        def form(**extra: str) -> aiohttp.FormData:
            data = aiohttp.FormData()
            data.add_field("template", "product_main")
            for key, value in extra.items():
                data.add_field(key, value)
            data.add_field("sheet", b"sku,product_image,prompt\nA,bottle.png,a bottle\n",
                           filename="s.csv")
            data.add_field("bottle", BOTTLE, filename="bottle.png")
            return data
        status, body = await api.call("POST", "/batches", ADMIN, data=form())
        assert (status, body["error"]["code"]) == (409, "no_executor"), body
        assert "no running executor can run model sdxl: gpu1:7: it needs about 6.5 GiB" in \
            body["error"]["message"]
        status, body = await api.call("POST", "/batches", ADMIN,
                                      data=form(wait_for_executor="true"))
        assert status == 201, body
        assert body["unplaced"] == [{"need": "sdxl", "what": "model sdxl", "why": [
            "gpu1:7: it needs about 6.5 GiB, more than the 4.0 GiB this executor may use"]}]
        await Workers.of(api.queue).stopped("gpu1:7")  # nobody left to say no: no verdict
        status, body = await api.call("GET", f"/batches/{body['id']}", ADMIN)
        assert body["unplaced"] == []


async def test_genbot_run_ends_within_seconds_naming_the_missing_checkpoint(tmp_path,
                                                                            demo_models):
    async with FakeComfy(checkpoints=["other.safetensors"]) as comfy:
        config = _comfy_config(tmp_path, demo_models, comfy.url)
        (tmp_path / "config.toml").write_text(
            f'[service]\ndata_dir = "{config.data_dir}"\n'
            f'[templates]\ndir = "{templates_dir(config)}"\n'
            f'[comfyui]\nservers = ["{comfy.url}"]\n[queue]\npoll_interval = 0.1\n')
        (tmp_path / "sheet.csv").write_text("prompt,seed\nhello,4\n")
        began = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "run", "portrait", "sheet.csv", cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 1, out.decode() + err.decode()
    assert err.decode().strip().splitlines()[-1] == (
        f"genbot: no executor can run ComfyUI template portrait ({comfy.url}: {MISSING}); "
        "batch 1 canceled")
    assert time.monotonic() - began < 100  # not for ever (no timing asserted beyond that)


def _comfy_config(tmp_path, demo_models, url: str):
    return executor_config(tmp_path / "data", demo_models,
                           templates={"dir": str(templates(tmp_path / "t"))},
                           comfyui={"servers": [url], "backoff_max": 0.2},
                           queue={"heartbeat_seconds": 0.5})


async def _until_cannot_run(queue) -> None:
    async with asyncio.timeout(30):
        while not any(w.cannot_run for w in await Workers.of(queue).all()):
            await asyncio.sleep(0.05)
