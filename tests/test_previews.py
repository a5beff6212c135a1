"""Live previews: pictures of a job forming, from the executor to whoever watches
/events, on both databases — small enough for PostgreSQL's NOTIFY, decoded from the
latents by a tiny VAE or by colours fitted on the model's own VAE, throttled per job, and
never written to the database."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json

import pytest
from PIL import Image

from storage.db import Database
from storage.previews import MAX_PICTURE, Glimpse, Previews, picture_of
from storage.queue import Status, Submission, open_queue
from tests.conftest import executor_config
from tests.fakes.executor import Harness
from tests.fakes.jobs import example_jobs, with_generate

torch = pytest.importorskip("torch")


@contextlib.asynccontextmanager
async def watched(queue):
    """As a service with a dashboard watching previews: says so ten times a second (a
    service says it every WATCH_EVERY seconds; an executor that starts listening meanwhile
    hears the next)."""
    async def say():
        while True:
            await queue.previews.watching()
            await asyncio.sleep(0.1)
    saying = asyncio.create_task(say())
    try:
        yield
    finally:
        saying.cancel()


def noisy(side: int) -> Image.Image:
    """The worst case for a small file: every pixel random."""
    return Image.frombytes("RGB", (side, side), bytes(torch.randint(0, 256, (side * side * 3,),
                                                                    dtype=torch.uint8).numpy()))


def test_a_preview_fits_notify_whatever_the_picture():
    """A flat picture stays 256 px; pure noise is made smaller until it fits, so its
    base64 and JSON stay under PostgreSQL's 8000-byte NOTIFY payload."""
    flat = picture_of(Image.new("RGB", (1024, 768), "orange"))
    with Image.open(io.BytesIO(flat)) as im:
        assert im.format == "WEBP" and im.size == (256, 192)
    worst = picture_of(noisy(1024))
    assert len(worst) <= MAX_PICTURE
    with Image.open(io.BytesIO(worst)) as im:
        assert im.format == "WEBP" and 32 <= im.width < 256
    glimpse = Glimpse(1, 2, 3, 4, 5.0, base64.b64encode(worst).decode())
    from storage.previews import encoded
    assert len(encoded(glimpse)) < 8000


async def test_previews_travel_from_a_sender_to_every_listener_and_are_not_stored(db_url):
    """Two listening services hear what an executor sends (a NOTIFY on PostgreSQL, a
    datagram on SQLite); the database holds no trace of it."""
    db = await Database(db_url).open()
    senders, one, two = Previews(db), Previews(db), Previews(db)
    heard: dict[str, list[Glimpse]] = {"one": [], "two": []}
    try:
        await one.listen(heard["one"].append)
        await two.listen(heard["two"].append)
        picture = picture_of(Image.new("RGB", (64, 64), "red"))
        for step in (1, 2, 3):
            await senders.send(7, 3, step, 3, 100.0 + step, picture)
        async with asyncio.timeout(10):
            while len(heard["one"]) < 3 or len(heard["two"]) < 3:
                await asyncio.sleep(0.02)
        assert [(g.job_id, g.batch_id, g.step, g.total) for g in heard["one"]] == \
            [(7, 3, s, 3) for s in (1, 2, 3)]
        assert base64.b64decode(heard["two"][0].picture) == picture
        with pytest.raises(ValueError, match="at most"):
            await senders.send(7, 3, 1, 3, 0.0, b"x" * (MAX_PICTURE + 1))
        assert await db.fetchval("SELECT count(*) FROM events") == 0
    finally:
        for p in (senders, one, two):
            await p.close()
        await db.close()


def _red_and_blue(side: int) -> torch.Tensor:
    """(1, 3, side, side) in [0, 1]: the left half red, the right half blue."""
    x = torch.zeros(1, 3, side, side)
    x[:, 0, :, : side // 2] = 1
    x[:, 2, :, side // 2:] = 1
    return x


@pytest.mark.parametrize("model", ["sd15", "zimage", "qwen_image", "flux"])
def test_colours_fitted_on_a_vae_picture_what_it_encoded(demo_models, model):
    """Latents of a red-and-blue picture in the pipeline's own layout and space (FLUX's
    packed patches, Qwen-Image's one-frame video with its mean and deviation, Z-Image's 16
    channels shifted and scaled), pictured by the colours fitted on the model's VAE: red
    on the left, blue on the right — no tiny VAE needed. (The VAE is one whose latents are
    linear in colour, as trained ones nearly are: tests.fakes.vae.)"""
    from types import SimpleNamespace

    from diffusers import DiffusionPipeline

    from executor.diffusers import previews
    from tests.fakes.vae import LinearVae
    real = DiffusionPipeline.from_pretrained(demo_models / model)
    config = dict(real.vae.config)
    channels = config.get("latent_channels") or config["z_dim"]
    if model == "qwen_image":
        config.update(latents_mean=[0.3] * channels, latents_std=[2.0] * channels)
    if model == "zimage":
        config.update(scaling_factor=0.3611, shift_factor=0.1159)
    vae = LinearVae(channels, real.vae_scale_factor, config)
    pipe = SimpleNamespace(vae=vae, vae_scale_factor=real.vae_scale_factor,
                           _unpack_latents=getattr(real, "_unpack_latents", None))
    if pipe._unpack_latents is None:
        del pipe._unpack_latents
    side = 64
    with torch.no_grad():
        latents = previews._normalised(vae, vae.encode(_red_and_blue(side) * 2 - 1)
                                       .latent_dist.mode())
    if model in ("flux", "qwen_image"):  # as they keep them between steps: 2x2 patches packed
        b, c, h, w = latents.shape
        latents = real._pack_latents(latents, b, c, h, w)
    decode = previews.decoder(pipe, model, side, side)
    assert decode is not None
    (picture,) = decode(latents)
    import numpy as np
    rgb = torch.from_numpy(np.asarray(picture, dtype=np.float32))
    quarter = picture.width // 4
    left, right = rgb[:, :quarter].mean((0, 1)), rgb[:, -quarter:].mean((0, 1))
    assert left[0] > 200 and left[2] < 60 and right[2] > 200 and right[0] < 60, (left, right)


def test_a_vae_of_a_layout_not_foreseen_gets_no_previews_and_fails_nothing(demo_models, caplog):
    """FLUX.2's latents (patchified, batch-normalised) are no layout the colours know: the
    decoder pictures nothing and says so once."""
    from diffusers import DiffusionPipeline

    from executor.diffusers import previews
    pipe = DiffusionPipeline.from_pretrained(demo_models / "flux2")
    with caplog.at_level("INFO"):
        decode = previews.decoder(pipe, "flux2-layout", 64, 64)
        got = [decode(torch.randn(1, 16, 16)) for _ in range(2)] if decode else [[]]
    assert all(g == [] for g in got)
    assert len([r for r in caplog.records if "no previews for model flux2-layout" in
                r.getMessage()]) == 1


def test_a_tiny_vae_draws_the_previews_where_one_is_named_and_a_wrong_one_is_told_once(
        demo_models, caplog):
    """sd15's latents through the demo TAESD: a picture of the image's size. A tiny VAE of
    other channels (16, for FLUX's latents) draws nothing, says why once, fails nothing."""
    from diffusers import AutoencoderTiny, DiffusionPipeline

    from executor.diffusers import previews
    pipe = DiffusionPipeline.from_pretrained(demo_models / "sd15")
    tiny = AutoencoderTiny.from_pretrained(demo_models / "taesd")
    latents = torch.randn(2, 4, 32, 32)
    pictures = previews.decoder(pipe, "sd15", 64, 64, tiny)(latents)
    assert [p.size for p in pictures] == [(64, 64), (64, 64)]
    wrong = AutoencoderTiny(encoder_block_out_channels=(8, 8), decoder_block_out_channels=(8, 8),
                            num_encoder_blocks=(1, 1), num_decoder_blocks=(1, 1),
                            latent_channels=16)
    decode = previews.decoder(pipe, "sd15-wrong-tiny", 64, 64, wrong)
    with caplog.at_level("INFO"):
        assert decode(latents) == [] and decode(latents) == []
    told = [r for r in caplog.records if "no previews for model sd15-wrong-tiny" in r.getMessage()]
    assert len(told) == 1 and "4 channels" not in told[0].getMessage() and \
        "16 channels" in told[0].getMessage()


@pytest.fixture
def slow_steps(monkeypatch):
    """Each denoising step a tenth of a second longer, asleep on the GPU's thread: a job
    lasts long enough for several previews at a short interval."""
    import time

    from executor.loop import Loop
    step = Loop.step

    def slowed(self, runs, node, at, total):
        step(self, runs, node, at, total)
        time.sleep(0.1)
    monkeypatch.setattr(Loop, "step", slowed)


@pytest.mark.parametrize("model", ["sd15", "flux"])
async def test_the_executor_previews_each_running_job_throttled_and_stores_none(
        tmp_path, demo_models, slow_steps, model, monkeypatch):
    """Two jobs in one micro-batch, 12 steps of 0.1 s or more, previews at most every
    0.3 s: each job's pictures arrive in step order, made at least that far apart (by
    when each was made: how many fit depends on how fast the machine steps), 64 px WebP
    pictures of it; the event log has its progress and no picture. sd15 draws them with its
    tiny VAE, FLUX with the colours of its own VAE. (The share of a call's time previews
    may take is lifted here: the interval is what is tested.)"""
    from executor.diffusers import runner
    monkeypatch.setattr(runner, "PREVIEW_SHARE", 1.0)
    config = executor_config(tmp_path / "data", demo_models,
                             executor={"preview_interval": 0.3, "max_batch": 2})
    heard: list[Glimpse] = []
    service = await open_queue(config)
    await service.previews.listen(heard.append)
    try:
        base = (await example_jobs(config, "product_main"))[0]
        jobs = [with_generate(base, row=r, steps=12, model=model, controlnet=None,
                              control_image=None, negative="", guidance=None)
                for r in (2, 3)]
        async with Harness(config) as h, watched(service):
            done = await h.run("product_main", jobs)
            events = await h.queue.events_after(0)
    finally:
        await service.close()
    assert [d.status for d in done] == ["succeeded"] * 2, [d.error for d in done]
    for d in done:
        mine = [g for g in heard if g.job_id == d.id]
        steps = [g.step for g in mine]
        assert len(mine) >= 2 and steps == sorted(steps) and steps[-1] <= 12, steps
        gaps = [b.at - a.at for a, b in zip(mine, mine[1:])]  # (less each picture's decode)
        assert min(gaps) >= 0.3 - 0.15, gaps
        with Image.open(io.BytesIO(base64.b64decode(mine[-1].picture))) as im:
            assert im.format == "WEBP" and im.size == (64, 64)
    assert {e.kind for e in events} >= {"progress", "succeeded"}
    assert not any("picture" in json.dumps(e.data) for e in events)


async def test_previews_take_no_more_than_their_share_of_a_call(tmp_path, demo_models,
                                                                 slow_steps, monkeypatch):
    """Where decoding is dear next to a step, previews come less often than the interval
    allows: past their share of the call's time, steps go without. At a share of nothing,
    only the first step's picture is made."""
    from executor.diffusers import runner
    monkeypatch.setattr(runner, "PREVIEW_SHARE", 1e-9)
    done, heard = await one_row_heard(tmp_path, demo_models, steps=8, watch=True)
    assert done.status == "succeeded" and [g.step for g in heard] == [1]


async def one_row_heard(tmp_path, demo_models, *, steps: int, watch: bool):
    """A product_main row of `steps` through an executor making previews every 0.05 s,
    watched or not: the job, and the previews a service heard."""
    config = executor_config(tmp_path / "data", demo_models, executor={"preview_interval": 0.05})
    heard: list[Glimpse] = []
    service = await open_queue(config)
    await service.previews.listen(heard.append)
    try:
        base = (await example_jobs(config, "product_main"))[0]
        async with Harness(config) as h, watched(service) if watch \
                else contextlib.nullcontext():
            (done,) = await h.run("product_main", [with_generate(base, steps=steps)])
        await asyncio.sleep(0.2)
    finally:
        await service.close()
    return done, heard


async def test_nobody_watching_nothing_is_decoded(tmp_path, demo_models, monkeypatch):
    """Previews on, but no service says anyone watches: no tiny VAE loaded, no colours
    fitted, no picture sent."""
    from executor.diffusers import previews
    made = []
    monkeypatch.setattr(previews, "decoder", lambda *a, **k: made.append(a))
    done, heard = await one_row_heard(tmp_path, demo_models, steps=6, watch=False)
    assert done.status == "succeeded" and made == [] and heard == []


async def test_no_previews_are_made_when_they_are_off(tmp_path, demo_models, monkeypatch):
    """[executor] preview_interval = 0: nothing is decoded at all (not even fitted)."""
    from executor.diffusers import previews
    calls = []
    monkeypatch.setattr(previews, "decoder", lambda *a, **k: calls.append(a))
    config = executor_config(tmp_path / "data", demo_models, executor={"preview_interval": 0})
    base = (await example_jobs(config, "product_main"))[0]
    async with Harness(config) as h:
        (done,) = await h.run("product_main", [with_generate(base, steps=3)])
    assert done.status == "succeeded" and calls == []


async def test_events_carry_previews_to_those_who_ask_and_only_to_them(tmp_path, demo_models):
    """Two dashboards on /events, one with previews=1: it gets kind "preview" messages with
    seq 0 and a data: URL picture while the job runs; the other gets only the log's
    events. Reading the log again from the start replays no preview."""
    from tests.fakes.api import ALICE, ApiWorld
    config = executor_config(tmp_path / "data", demo_models, service={"port": 0},
                             api={"tokens": [f"{ALICE}=alice"]},
                             executor={"preview_interval": 0.05})
    async with ApiWorld(config) as w:
        headers = {"Authorization": f"Bearer {ALICE}"}
        w.start_executor()
        plain = await w.http.ws_connect("/api/v1/events", headers=headers)
        await asyncio.sleep(1)  # (nobody watches yet: the executor is told of nobody)
        assert w.worker.watched_until == 0
        watching = await w.http.ws_connect("/api/v1/events?previews=1", headers=headers)
        async with asyncio.timeout(15):  # told at once (or, had it not listened yet, 5 s on)
            while w.worker.watched_until == 0:
                await asyncio.sleep(0.05)
        base = (await example_jobs(config, "product_main"))[0]
        await w.queue.enqueue(Submission("product_main", "api:alice",
                                         [with_generate(base, steps=30)]))

        async def read(ws, until: str) -> list[dict]:
            got: list[dict] = []
            async with asyncio.timeout(60):
                while not any(m["kind"] == until for m in got):
                    got.append(json.loads((await ws.receive()).data))
            return got
        seen, only_log = await read(watching, "succeeded"), await read(plain, "succeeded")
        shown = [m for m in seen if m["kind"] == "preview"]
        assert shown and all(m["seq"] == 0 and m["job_id"] for m in shown), seen
        assert shown[0]["data"]["picture"].startswith("data:image/webp;base64,")
        assert 1 <= shown[0]["data"]["step"] <= shown[0]["data"]["total"]
        assert not any(m["kind"] == "preview" for m in only_log)
        last = max(m["seq"] for m in seen)
        again = await w.http.ws_connect("/api/v1/events?previews=1&after=0", headers=headers)
        replayed: list[dict] = []
        async with asyncio.timeout(10):
            while not replayed or replayed[-1]["seq"] < last:
                replayed.append(json.loads((await again.receive()).data))
        for ws in (watching, plain, again):
            await ws.close()
        assert not any(m["kind"] == "preview" for m in replayed)


@pytest.mark.parametrize("metadata", [True, False])
async def test_a_comfyui_servers_own_previews_reach_the_watchers_of_its_job(
        tmp_path, demo_models, metadata, monkeypatch):
    """A ComfyUI server started with --preview-method sends a JPEG after each step: with
    the prompt named (the engine says it reads preview metadata) or, from an older server,
    bare (the prompt executing). Either way the job's watchers get them as small WebP
    pictures of that job, throttled; a malformed frame is dropped, not a failure."""
    from executor.comfyui import previews as comfy_previews
    from tests.fakes.comfyui import FakeComfy
    from tests.fakes.executor import Rig
    heard: list[Glimpse] = []
    async with FakeComfy(previews=True, step_delay=0.05) as comfy:
        if not metadata:  # an older server: it does not read the client's feature flags
            monkeypatch.setattr(comfy, "flags", _Forgets())
        async with Rig(tmp_path, demo_models, comfy, executor={"preview_interval": 0.1}) as rig, \
                watched(rig.queue):
            await rig.queue.previews.listen(heard.append)
            rig.start()
            batch = await rig.submit("portrait", [{"prompt": "slow", "seed": 1, "steps": 20}])
            (job,) = await rig.finished(batch)
    assert job.status == Status.SUCCEEDED, job.error
    mine = [g for g in heard if g.job_id == job.id]
    assert comfy.previewed == 20 and 2 <= len(mine) < 20, (comfy.previewed, len(mine))
    assert [g.step for g in mine] == sorted(g.step for g in mine)
    with Image.open(io.BytesIO(base64.b64decode(mine[-1].picture))) as im:
        assert im.format == "WEBP" and im.size == (64, 64)
        assert im.convert("RGB").getpixel((32, 32))[0] > 100  # a late step: the lighter red
    assert comfy_previews.frame(b"\x00\x00\x00\x04\x00\x00\x10\x00{}") is None  # cut short
    assert comfy_previews.frame(b"\x00\x00\x00\x03" + b"\x00" * 8) is None  # progress text
    assert comfy_previews.picture(b"not an image") is None


class _Forgets(dict):
    """Feature flags an older server never keeps."""

    def __setitem__(self, key, value) -> None:
        pass
