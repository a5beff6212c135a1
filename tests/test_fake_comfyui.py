"""The ComfyUI fake against ComfyUI's real workflows, driven with aiohttp's client only."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import uuid
from pathlib import Path

import aiohttp
import pytest
from PIL import Image

from tests.fakes.comfyui import FakeComfy, fake_color, read_fake_info

WORKFLOWS = Path("/work/shared/comfyui-workflows")


def workflow(name: str) -> dict:
    path = WORKFLOWS / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return json.loads(path.read_text())


def png(size: tuple[int, int], color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


async def run(session: aiohttp.ClientSession, comfy: FakeComfy, prompt: dict,
              on_progress: object = None) -> tuple[str, list[dict]]:
    """Post a prompt as a client does and collect its messages until `executing` null."""
    client_id = uuid.uuid4().hex
    prompt_id = str(uuid.uuid4())
    messages: list[dict] = []
    async with session.ws_connect(f"{comfy.url}/ws?clientId={client_id}") as ws:
        first = await ws.receive_json()
        assert first["type"] == "status" and first["data"]["sid"] == client_id
        body = {"prompt": prompt, "client_id": client_id, "prompt_id": prompt_id}
        async with session.post(f"{comfy.url}/prompt", json=body) as r:
            assert r.status == 200, await r.text()
            answer = await r.json()
        assert answer["prompt_id"] == prompt_id and answer["node_errors"] == {}
        async with asyncio.timeout(5):
            async for msg in ws:
                m = json.loads(msg.data)
                messages.append(m)
                if m["type"] == "progress" and callable(on_progress):
                    await on_progress(m)
                if m["type"] == "executing" and m["data"]["node"] is None:
                    assert m["data"]["prompt_id"] == prompt_id
                    break
    return prompt_id, messages


def types(messages: list[dict]) -> list[str]:
    return [m["type"] for m in messages if m["type"] not in ("status", "progress_state")]


async def history(session: aiohttp.ClientSession, comfy: FakeComfy, prompt_id: str) -> dict:
    async with session.get(f"{comfy.url}/history/{prompt_id}") as r:
        return await r.json()


async def test_a_two_output_workflow_runs_and_its_images_can_be_fetched():
    prompt = workflow("comfyui-api__sd1.5-multi-output.json")
    async with FakeComfy() as comfy, aiohttp.ClientSession() as session:
        prompt_id, messages = await run(session, comfy, prompt)
        kinds = types(messages)
        assert kinds[:2] == ["execution_start", "execution_cached"]
        assert kinds[-2:] == ["execution_success", "executing"]
        progress = [m["data"] for m in messages if m["type"] == "progress"]
        assert [p["value"] for p in progress] == list(range(1, 21)) * 2
        assert {p["node"] for p in progress} == {"3", "14"} and progress[0]["max"] == 20
        executed = {m["data"]["node"]: m["data"]["output"] for m in messages
                    if m["type"] == "executed"}
        assert set(executed) == {"11", "16"}

        entry = (await history(session, comfy, prompt_id))[prompt_id]
        assert entry["status"]["status_str"] == "success" and entry["status"]["completed"]
        assert [m[0] for m in entry["status"]["messages"]] == [
            "execution_start", "execution_cached", "execution_success"]
        assert entry["prompt"][1] == prompt_id and entry["outputs"] == executed
        seeds = {}
        for node, out in entry["outputs"].items():
            (image,) = out["images"]
            assert image["type"] == "output" and image["filename"].endswith("_00001_.png")
            params = {"filename": image["filename"], "subfolder": "", "type": "output"}
            async with session.get(f"{comfy.url}/view", params=params) as r:
                assert r.status == 200 and r.content_type == "image/png"
                data = await r.read()
            info = read_fake_info(data)
            assert info["prompt"].startswith("beautiful scenery") and info["width"] == 512
            assert info["ckpt_name"] == "dreamshaper_8.safetensors"
            with Image.open(io.BytesIO(data)) as img:
                assert img.size == (64, 64) and img.getpixel((0, 0)) == fake_color(info)
            seeds[node] = info["seed"]
        assert seeds == {"11": 986110750609924, "16": 1120337778160860}
        assert {f["filename"] for f in [executed["11"]["images"][0]]} == {"ComfyUI1_00001_.png"}

        # the same prompt again runs nothing and reports the same files, as ComfyUI's cache
        again, messages = await run(session, comfy, prompt)
        cached = next(m["data"]["nodes"] for m in messages if m["type"] == "execution_cached")
        assert sorted(cached) == sorted(prompt)
        assert "progress" not in types(messages)
        assert (await history(session, comfy, again))[again]["outputs"] == executed


async def test_refusals_have_comfyuis_shapes():
    prompt = workflow("comfyui__basic_api_example.json")
    async with FakeComfy(missing_nodes={"VAEDecode"}) as comfy, \
            aiohttp.ClientSession() as session:
        async with session.post(f"{comfy.url}/prompt", json={"prompt": prompt}) as r:
            assert r.status == 400
            body = await r.json()
        assert body["error"]["type"] == "missing_node_type" and body["node_errors"] == {}
        assert body["error"]["extra_info"]["class_type"] == "VAEDecode"

        comfy.missing_nodes = set()
        bad = json.loads(json.dumps(prompt))
        bad["4"]["inputs"]["ckpt_name"] = "x.safetensors"
        bad["3"]["inputs"]["steps"] = 0
        async with session.post(f"{comfy.url}/prompt", json={"prompt": bad}) as r:
            assert r.status == 400
            body = await r.json()
        assert body["error"]["type"] == "prompt_outputs_failed_validation"
        assert body["error"]["message"] == "Prompt outputs failed validation"
        errors = body["node_errors"]
        assert set(errors) == {"3", "4"}
        assert errors["4"]["class_type"] == "CheckpointLoaderSimple"
        assert errors["4"]["dependent_outputs"] == ["9"]
        (error,) = errors["4"]["errors"]
        assert error["type"] == "value_not_in_list" and error["message"] == "Value not in list"
        assert error["details"].startswith("ckpt_name: 'x.safetensors' not in [")
        assert errors["3"]["errors"][0]["type"] == "value_smaller_than_min"

        async with session.post(f"{comfy.url}/prompt", json={"client_id": "x"}) as r:
            assert r.status == 400 and (await r.json())["error"]["type"] == "no_prompt"
        async with session.post(f"{comfy.url}/prompt",
                                json={"prompt": prompt, "prompt_id": "not-a-uuid"}) as r:
            assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_prompt_id"

    async with FakeComfy(error_style="classic", missing_nodes={"VAEDecode"}) as comfy, \
            aiohttp.ClientSession() as session:
        async with session.post(f"{comfy.url}/prompt", json={"prompt": prompt}) as r:
            body = await r.json()
        assert body["error"]["message"] == "Cannot execute because node VAEDecode does not exist."
        assert len(comfy.prompts) == 0 and len(comfy.rejected) == 1


async def test_an_uploaded_image_feeds_img2img():
    prompt = workflow("comfyui-api__sd1.5-img2img.json")
    first, other = png((40, 30), (200, 10, 10)), png((40, 30), (10, 200, 10))
    async with FakeComfy() as comfy, aiohttp.ClientSession() as session:
        async def upload(data: bytes) -> dict:
            form = aiohttp.FormData()
            form.add_field("image", data, filename="example.png", content_type="image/png")
            form.add_field("type", "input")
            form.add_field("overwrite", "false")
            async with session.post(f"{comfy.url}/upload/image", data=form) as r:
                assert r.status == 200
                return await r.json()

        assert await upload(first) == {"name": "example.png", "subfolder": "", "type": "input"}
        assert (await upload(first))["name"] == "example.png"  # same bytes: no copy
        assert (await upload(other))["name"] == "example (1).png"
        async with session.get(f"{comfy.url}/object_info/LoadImage") as r:
            choices = (await r.json())["LoadImage"]["input"]["required"]["image"][0]
        assert choices == ["example (1).png", "example.png"]

        prompt_id, _ = await run(session, comfy, prompt)
        (image,) = (await history(session, comfy, prompt_id))[prompt_id]["outputs"]["9"]["images"]
        params = {"filename": image["filename"], "type": "output"}
        async with session.get(f"{comfy.url}/view", params=params) as r:
            data = await r.read()
        info = read_fake_info(data)
        assert info["image"] == "example.png"
        assert info["image_sha256"] == hashlib.sha256(first).hexdigest()
        assert (info["width"], info["height"], info["denoise"]) == (40, 30, 0.8700000000000001)
        with Image.open(io.BytesIO(data)) as img:
            assert img.size == (40, 30)

        comfy.reject_uploads = True
        form = aiohttp.FormData()
        form.add_field("image", first, filename="x.png", content_type="image/png")
        async with session.post(f"{comfy.url}/upload/image", data=form) as r:
            assert r.status == 400


async def test_an_interrupt_stops_the_running_prompt():
    prompt = workflow("comfyui__basic_api_example.json")
    async with FakeComfy(step_delay=0.005) as comfy, aiohttp.ClientSession() as session:
        async def interrupt(progress: dict) -> None:
            if progress["data"]["value"] == 2:
                async with session.post(f"{comfy.url}/interrupt",
                                        json={"prompt_id": progress["data"]["prompt_id"]}) as r:
                    assert r.status == 200

        prompt_id, messages = await run(session, comfy, prompt, on_progress=interrupt)
        assert "execution_success" not in types(messages)
        stopped = next(m["data"] for m in messages if m["type"] == "execution_interrupted")
        assert stopped["node_id"] == "3" and stopped["node_type"] == "KSampler"
        assert max(m["data"]["value"] for m in messages if m["type"] == "progress") < 20
        status = (await history(session, comfy, prompt_id))[prompt_id]["status"]
        assert status["status_str"] == "error" and status["completed"] is False
        assert status["messages"][-1][0] == "execution_interrupted"
        assert comfy.interrupts == [{"prompt_id": prompt_id}]


async def test_failures_and_an_oom_are_reported_as_comfyui_does():
    prompt = workflow("comfyui__sd-1.5-lora-0.json")
    async with FakeComfy(oom_once=True) as comfy, aiohttp.ClientSession() as session:
        prompt_id, messages = await run(session, comfy, prompt)
        error = next(m["data"] for m in messages if m["type"] == "execution_error")
        assert error["exception_type"] == "torch.OutOfMemoryError"
        assert error["exception_message"].startswith("Allocation on device")
        assert error["node_type"] == "KSampler" and "10" in error["executed"]
        assert (await history(session, comfy, prompt_id))[prompt_id]["status"]["status_str"] \
            == "error"
        prompt_id, messages = await run(session, comfy, prompt)  # the retry works
        assert "execution_success" in types(messages)
        (image,) = (await history(session, comfy, prompt_id))[prompt_id]["outputs"]["9"]["images"]
        async with session.get(f"{comfy.url}/view",
                               params={"filename": image["filename"]}) as r:
            assert read_fake_info(await r.read())["lora_name"] == "epi_noiseoffset2.safetensors"

        comfy.fail_node = {"node_type": "VAEDecode", "message": "boom"}
        prompt["3"]["inputs"]["seed"] = 1
        _, messages = await run(session, comfy, prompt)
        error = next(m["data"] for m in messages if m["type"] == "execution_error")
        assert (error["exception_type"], error["exception_message"]) == ("RuntimeError", "boom\n")


async def test_a_restart_loses_the_queue_and_history_but_keeps_the_port():
    prompt = workflow("comfyui__basic_api_example.json")
    async with FakeComfy() as comfy, aiohttp.ClientSession() as session:
        url = comfy.url
        prompt_id, _ = await run(session, comfy, prompt)
        assert prompt_id in await history(session, comfy, prompt_id)
        await comfy.restart()
        assert comfy.url == url
        assert await history(session, comfy, prompt_id) == {}
        async with session.get(f"{comfy.url}/queue") as r:
            assert await r.json() == {"queue_running": [], "queue_pending": []}

        await comfy.stop()
        with pytest.raises(aiohttp.ClientConnectionError):
            async with session.get(f"{url}/system_stats"):
                pass
        await comfy.start()
        async with session.get(f"{url}/system_stats") as r:
            assert r.status == 200


async def test_a_restart_mid_job_drops_the_socket_and_forgets_the_prompt():
    prompt = workflow("comfyui__basic_api_example.json")
    async with FakeComfy(restart_mid_job=True, step_delay=0.001) as comfy, \
            aiohttp.ClientSession() as session:
        client_id = uuid.uuid4().hex
        async with session.ws_connect(f"{comfy.url}/ws?clientId={client_id}") as ws:
            await ws.receive_json()
            async with session.post(f"{comfy.url}/prompt",
                                    json={"prompt": prompt, "client_id": client_id}) as r:
                prompt_id = (await r.json())["prompt_id"]
            async with asyncio.timeout(5):
                async for _ in ws:
                    pass
        assert ws.closed
        await asyncio.sleep(0.05)
        assert await history(session, comfy, prompt_id) == {}
        prompt_id, messages = await run(session, comfy, prompt)  # the new process works
        assert "execution_success" in types(messages)


async def test_a_dropped_socket_can_rejoin_and_history_may_lag():
    prompt = workflow("comfyui__basic_api_example.json")
    async with FakeComfy(drop_socket_after_steps=3, history_delay=0.2, step_delay=0.02) as comfy, \
            aiohttp.ClientSession() as session:
        client_id = uuid.uuid4().hex
        async with session.ws_connect(f"{comfy.url}/ws?clientId={client_id}") as ws:
            await ws.receive_json()
            async with session.post(f"{comfy.url}/prompt",
                                    json={"prompt": prompt, "client_id": client_id}) as r:
                prompt_id = (await r.json())["prompt_id"]
            seen = [json.loads(m.data) async for m in ws]
        assert [m["data"]["value"] for m in seen if m["type"] == "progress"] == [1, 2, 3]
        async with session.ws_connect(f"{comfy.url}/ws?clientId={client_id}") as ws:
            assert (await ws.receive_json())["data"]["sid"] == client_id
            assert await ws.receive_json() == {"type": "executing", "data": {"node": "3"}}
            async with asyncio.timeout(5):
                while (m := await ws.receive_json())["type"] != "executing" \
                        or m["data"]["node"] is not None:
                    pass
        assert comfy.sockets == [client_id, client_id]
        assert await history(session, comfy, prompt_id) == {}  # done, but not yet recorded
        await asyncio.sleep(0.25)
        assert prompt_id in await history(session, comfy, prompt_id)


async def test_a_controlnet_batch_with_a_preview():
    async with FakeComfy() as comfy, aiohttp.ClientSession() as session:
        (comfy.dirs["input"] / "pose.png").write_bytes(png((96, 48), (1, 2, 3)))
        prompt = workflow("comfyui__basic_api_example.json")
        prompt["5"]["inputs"].update(width=768, height=512, batch_size=2)
        prompt.update({
            "20": {"class_type": "LoadImage", "inputs": {"image": "pose.png"}},
            "21": {"class_type": "Canny", "inputs": {"image": ["20", 0], "low_threshold": 0.4,
                                                     "high_threshold": 0.8}},
            "22": {"class_type": "ControlNetLoader",
                   "inputs": {"control_net_name": "control_v11p_sd15_canny.pth"}},
            "23": {"class_type": "ControlNetApplyAdvanced", "inputs": {
                "positive": ["6", 0], "negative": ["7", 0], "control_net": ["22", 0],
                "image": ["21", 0], "strength": 1.0, "start_percent": 0.0, "end_percent": 1.0}},
            "24": {"class_type": "PreviewImage", "inputs": {"images": ["21", 0]}}})
        prompt["3"]["inputs"].update(positive=["23", 0], negative=["23", 1])
        prompt_id, _ = await run(session, comfy, prompt)
        outputs = (await history(session, comfy, prompt_id))[prompt_id]["outputs"]
        saved = outputs["9"]["images"]
        assert [i["filename"] for i in saved] == ["ComfyUI_00001_.png", "ComfyUI_00002_.png"]
        (preview,) = outputs["24"]["images"]
        assert preview["type"] == "temp" and "_temp_" in preview["filename"]
        infos = []
        for image in saved + [preview]:
            params = {"filename": image["filename"], "type": image["type"]}
            async with session.get(f"{comfy.url}/view", params=params) as r:
                data = await r.read()
            with Image.open(io.BytesIO(data)) as img:
                infos.append((img.size, read_fake_info(data)))
        (size0, first), (size1, second), (_, canny) = infos
        assert size0 == size1 == (64, 43) and (first["width"], first["height"]) == (768, 512)
        assert first["controlnets"] == ["control_v11p_sd15_canny.pth"]
        assert (first["batch_index"], second["batch_index"]) == (0, 1)
        assert fake_color(first) != fake_color(second)
        assert canny["canny"] == [0.4, 0.8] and canny["image"] == "pose.png"


def txt2img() -> dict:
    from tests.fakes.workflows import TXT2IMG
    return json.loads(json.dumps(TXT2IMG).replace("sd15.safetensors",
                                                  "dreamshaper_8.safetensors"))


async def test_a_hostile_save_node_writes_and_serves_what_it_says_through_the_same_routes():
    from tests.fakes import media
    async with FakeComfy(hostile="html") as comfy, aiohttp.ClientSession() as session:
        prompt_id, messages = await run(session, comfy, txt2img())
        entry = (await history(session, comfy, prompt_id))[prompt_id]
        assert entry["outputs"]["9"] == {"images": [
            {"filename": "x_00001_.html", "subfolder": "", "type": "output"}]}
        async with session.get(f"{comfy.url}/view", params={"filename": "x_00001_.html"}) as r:
            assert r.status == 200 and await r.read() == media.HTML
        comfy.hostile = "webm"
        prompt_id, _ = await run(session, comfy, {**txt2img(), "3": {**txt2img()["3"], "inputs": {
            **txt2img()["3"]["inputs"], "seed": 2}}})
        out = (await history(session, comfy, prompt_id))[prompt_id]["outputs"]["9"]
        assert out["animated"] == [True] and out["images"][0]["filename"].endswith("_.webm")


@pytest.mark.parametrize(("mode", "odd"), [
    ("nul_name", lambda e, p: e[p]["outputs"]["9"]["images"][0]["filename"].endswith("\0.png")),
    ("dotdot_name", lambda e, p: e[p]["outputs"]["9"]["images"][0]["subfolder"] == "../../.."),
    ("odd_node", lambda e, p: "²" in e[p]["outputs"] and "9" not in e[p]["outputs"]),
    ("outputs_list", lambda e, p: isinstance(e[p]["outputs"], list)),
    ("status_list", lambda e, p: isinstance(e[p]["status"], list)),
    ("entry_list", lambda e, p: isinstance(e[p], list)),
    ("history_list", lambda e, p: isinstance(e, list))])
async def test_a_hostile_history_answer_is_odd_in_one_way(mode, odd):
    async with FakeComfy(hostile=mode) as comfy, aiohttp.ClientSession() as session:
        prompt_id, _ = await run(session, comfy, txt2img())
        assert odd(await history(session, comfy, prompt_id), prompt_id)
        comfy.hostile = None  # the entry itself is as ComfyUI keeps it
        assert (await history(session, comfy, prompt_id))[prompt_id]["outputs"]["9"]


def test_an_unknown_hostile_mode_is_refused():
    with pytest.raises(ValueError, match="hostile is one of html, "):
        FakeComfy(hostile="nope")
