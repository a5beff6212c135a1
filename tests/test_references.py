"""Reference pictures through an IP-Adapter (SD 1.5 and SDXL families), on the demo
models: a reference steers the image by its scale (0: the image as without one), each
image of a batch its own reference as alone, the adapter unloaded for a job without one;
what cannot take a reference is refused in one sentence."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from executor.diffusers.ops import Context, OpError
from executor.diffusers.ops.diffusion import generate_batch
from executor.models.registry import ModelError
from storage.files import FileStore
from tests.conftest import executor_config
from tests.fakes.executor import demo_context


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, demo_models) -> Context:
    return demo_context(tmp_path_factory.mktemp("references"), demo_models)


def picture(seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (48, 48, 3), dtype=np.uint8))


def job(**kw) -> dict:
    return {"prompt": "a bottle 瓶子", "negative": "", "model": "sd15", "seed": 5, "steps": 3,
            "guidance": None, "size": [64, 64], "sampler": None, "init_image": None,
            "strength": 0.75, "control_image": None, "controlnet": None, "control_scale": 1.0,
            "loras": [], **kw}


def run(ctx: Context, *jobs: dict) -> list[np.ndarray]:
    return [np.asarray(im, dtype=np.int16) for im in generate_batch(ctx, list(jobs))]


def test_a_reference_steers_the_image_by_its_scale_and_goes_when_not_asked(ctx):
    (plain,) = run(ctx, job())
    steered = dict(ip_adapter="ip_sd15", reference=picture(1))
    (zero,) = run(ctx, job(**steered, reference_scale=0.0))
    (full,) = run(ctx, job(**steered, reference_scale=1.0))
    (other,) = run(ctx, job(ip_adapter="ip_sd15", reference=picture(2), reference_scale=1.0))
    assert np.abs(zero - plain).max() <= 2  # scale 0: as without a reference
    assert np.abs(full - plain).mean() > 2 and np.abs(full - other).mean() > 1
    (again,) = run(ctx, job())  # the adapter unloaded: the plain image, exactly as before
    assert np.array_equal(again, plain)
    assert ctx.models.units["sd15"].ip_adapter is None


def test_jobs_share_a_call_only_with_the_same_reference_and_match_their_own_run(ctx):
    """diffusers steers a call by one reference per IP-Adapter: jobs of one stored
    reference share a call (each image as it would be alone); another reference is
    another shape, so another call."""
    from executor.diffusers.ops.diffusion import shape
    stored = ctx.store.put_input(_png(picture(3)))
    jobs = [job(ip_adapter="ip_sd15", reference=stored, reference_scale=1.0, seed=n)
            for n in (3, 4)]
    together = run(ctx, *jobs)
    alone = [run(ctx, j)[0] for j in jobs]
    for a, b in zip(together, alone, strict=True):
        assert np.abs(a - b).max() <= 3
    other = job(ip_adapter="ip_sd15", reference=ctx.store.put_input(_png(picture(4))),
                reference_scale=1.0)
    assert shape(jobs[0]) == shape(jobs[1]) != shape(other) != shape(job())


def _png(im: Image.Image) -> bytes:
    import io
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def test_what_cannot_take_a_reference_is_refused_plainly(ctx):
    with pytest.raises(OpError, match=r"a reference picture needs an IP-Adapter model"):
        run(ctx, job(reference=picture(1)))
    with pytest.raises(OpError, match=r"reference pictures run through an IP-Adapter on Stable "
                                      r"Diffusion 1\.5, SDXL models, not FLUX\.1: on an edit "
                                      r"model give them as pictures 2 and 3"):
        run(ctx, job(model="flux", negative="", ip_adapter="ip_sd15", reference=picture(1)))
    with pytest.raises(ModelError, match=r'model "walnut" is a lora, not a ip_adapter'):
        run(ctx, job(ip_adapter="walnut", reference=picture(1)))
    with pytest.raises(ModelError, match=r'IP-Adapter "ip_sd15" is for sd15; model "sdxl" is '
                                         r"sdxl"):
        run(ctx, job(model="sdxl", ip_adapter="ip_sd15", reference=picture(1)))


async def test_a_templates_reference_column_and_a_sweep_of_its_scale_run_on_the_executor(
        tmp_path, demo_models):
    """A template whose generate node takes a `style` picture column as its reference
    (through the demo IP-Adapter) and a `style_strength` column as its scale: a row with
    a style runs, one without runs as a plain row, and a sweep over the strength (0, 1)
    makes one image per value — the 0 one the plain row's image."""
    import json

    from storage.queue import NewJob
    from templates.binding import bind
    from templates.jobs import encode
    from templates.loader import load_template
    from templates.sweeps import expand, plan
    from tests.fakes.executor import Harness
    (tmp_path / "styled.json").write_text(json.dumps({
        "name": "styled", "description": "a product in a reference's style",
        "params": {"prompt": {"type": "text", "required": True},
                   "style": {"type": "image", "aliases": ["风格图"]},
                   "style_strength": {"type": "float", "default": 0.6, "min": 0, "max": 2},
                   "seed": {"type": "seed"}},
        "nodes": {"gen": {"op": "generate", "inputs": {
            "prompt": "$prompt", "model": "sd15", "seed": "$seed", "steps": 2,
            "size": [64, 64], "reference": "$style", "reference_scale": "$style_strength",
            "ip_adapter": "ip_sd15"}},
            "out": {"op": "save", "inputs": {"image": "@gen"}}},
        "output": "{row}.png"}))
    template = load_template(tmp_path / "styled.json")
    config = executor_config(tmp_path / "data", demo_models)
    store = FileStore(config.data_dir)
    style = store.put_input(_png(picture(7)))
    rows = [bind(template, {"prompt": "a bottle", "style": style, "seed": 9}, row=2),
            bind(template, {"prompt": "a bottle", "style": None, "seed": 9}, row=3)]
    base = bind(template, {"prompt": "a bottle", "style": style, "seed": 9}, row=4)
    swept = expand(template, [base], plan(template, ["style_strength=0,1"]))  # 4.png, 4_2.png
    jobs = [*rows, *swept]
    async with Harness(config) as h:
        done = await h.run("styled", [NewJob(j.row, encode(j), j.affinity) for j in jobs])
    assert [d.status for d in done] == ["succeeded"] * 4, [d.error for d in done]
    images = [np.asarray(Image.open(store.path(d.outputs[0])), dtype=np.int16) for d in done]
    styled, plain, at_zero, at_one = images
    assert np.abs(at_zero - plain).max() <= 2  # strength 0: the row as without a style
    assert np.abs(at_one - plain).mean() > 2 and np.abs(styled - plain).mean() > 1
