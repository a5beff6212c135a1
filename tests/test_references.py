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
    """… and what the IP-Adapter adds (its image encoder, its attention layers) counts in
    the model's bytes while it is on, as the device budget counts a model."""
    (plain,) = run(ctx, job())
    bare = ctx.models.units["sd15"].bytes
    steered = dict(ip_adapter="ip_sd15", reference=picture(1))
    (zero,) = run(ctx, job(**steered, reference_scale=0.0))
    unit = ctx.models.units["sd15"]
    assert unit.ip_adapter is not None and unit.bytes == bare + unit.ip_adapter[2]
    image_encoder = unit.ip_adapter[1].image_encoder
    assert unit.ip_adapter[2] > sum(t.numel() * t.element_size()  # (and its layers)
                                    for t in image_encoder.parameters()) > 0
    (full,) = run(ctx, job(**steered, reference_scale=1.0))
    (other,) = run(ctx, job(ip_adapter="ip_sd15", reference=picture(2), reference_scale=1.0))
    assert np.abs(zero - plain).max() <= 2  # scale 0: as without a reference
    assert np.abs(full - plain).mean() > 2 and np.abs(full - other).mean() > 1
    (again,) = run(ctx, job())  # the adapter unloaded: the plain image, exactly as before
    assert np.array_equal(again, plain)
    assert ctx.models.units["sd15"].ip_adapter is None
    assert ctx.models.units["sd15"].bytes == bare


def test_a_lora_and_a_reference_steer_one_image_together(ctx):
    """A LoRA (peft's layers) and an IP-Adapter (its attention processors) on one UNet:
    each steers, both together differ from either alone, and with both gone the plain
    image comes back exactly."""
    (plain,) = run(ctx, job())
    lora = [{"name": "walnut", "weight": 4.0}]  # (the demo LoRA's pull is faint at 1)
    steered = dict(ip_adapter="ip_sd15", reference=picture(1), reference_scale=1.0)
    (with_lora,) = run(ctx, job(loras=lora))
    (with_reference,) = run(ctx, job(**steered))
    (both,) = run(ctx, job(loras=lora, **steered))
    assert np.abs(with_lora - plain).mean() > 1 and np.abs(with_reference - plain).mean() > 1
    assert np.abs(both - with_lora).mean() > 1 and np.abs(both - with_reference).mean() > 1
    (again,) = run(ctx, job())
    assert np.array_equal(again, plain)


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
    """A template whose generate node takes a `style` column of type reference (through
    the demo IP-Adapter) gets its scale column, style_scale, wired for it: a row with a
    style runs, one without runs as a plain row, and a sweep over the scale (0, 1) makes
    one image per value — the 0 one the plain row's image."""
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
                   "style": {"type": "reference", "scale": 0.5, "aliases": ["风格图"]},
                   "seed": {"type": "seed"}},
        "nodes": {"gen": {"op": "generate", "inputs": {
            "prompt": "$prompt", "model": "sd15", "seed": "$seed", "steps": 2,
            "size": [64, 64], "reference": "$style", "ip_adapter": "ip_sd15"}},
            "out": {"op": "save", "inputs": {"image": "@gen"}}},
        "output": "{row}.png"}))
    template = load_template(tmp_path / "styled.json")
    scale = template.params["style_scale"]
    assert (scale.type, scale.default, scale.min, scale.max, scale.uses) == (
        "float", 0.5, 0, 2, ("gen.reference_scale",))
    assert template.params["style"].picture and list(template.params)[-1] == "style_scale"
    config = executor_config(tmp_path / "data", demo_models)
    store = FileStore(config.data_dir)
    style = store.put_input(_png(picture(7)))
    rows = [bind(template, {"prompt": "a bottle", "style": style, "seed": 9}, row=2),
            bind(template, {"prompt": "a bottle", "style": None, "seed": 9}, row=3)]
    base = bind(template, {"prompt": "a bottle", "style": style, "seed": 9}, row=4)
    swept = expand(template, [base], plan(template, ["style_scale=0,1"]))  # 4.png, 4_2.png
    jobs = [*rows, *swept]
    async with Harness(config) as h:
        done = await h.run("styled", [NewJob(j.row, encode(j), j.affinity) for j in jobs])
    assert [d.status for d in done] == ["succeeded"] * 4, [d.error for d in done]
    images = [np.asarray(Image.open(store.path(d.outputs[0])), dtype=np.int16) for d in done]
    styled, plain, at_zero, at_one = images
    assert np.abs(at_zero - plain).max() <= 2  # scale 0: the row as without a style
    assert np.abs(at_one - plain).mean() > 2 and np.abs(styled - plain).mean() > 1


@pytest.mark.parametrize("spec, path, message", [
    ({"type": "image", "scale": 0.5}, "params.style.scale",
     "a reference parameter's scale is a number from 0 to 2"),
    ({"type": "reference", "scale": 3}, "params.style.scale",
     "a reference parameter's scale is a number from 0 to 2"),
    ({"type": "reference", "default": "a.png"}, "params.style.default",
     "a picture parameter (reference) has no default"),
])
def test_a_reference_parameter_is_checked_where_it_is_declared(tmp_path, spec, path, message):
    import json

    from templates.loader import TemplateError, load_template
    (tmp_path / "t.json").write_text(json.dumps({
        "name": "t", "params": {"style": spec},
        "nodes": {"gen": {"op": "generate", "inputs": {
            "prompt": "x", "model": "sd15", "seed": 1, "reference": "$style"}},
            "out": {"op": "save", "inputs": {"image": "@gen"}}}}))
    with pytest.raises(TemplateError) as e:
        load_template(tmp_path / "t.json")
    assert e.value.path == path and message in e.value.message


def test_a_reference_given_its_own_scale_or_fed_to_an_edit_brings_no_scale_column(tmp_path):
    """The template's own <name>_scale, or the node's own reference_scale, is kept; a
    reference an edit model reads as its second picture has no scale to set."""
    import json

    from templates.expressions import ParamRef
    from templates.loader import load_template
    (tmp_path / "t.json").write_text(json.dumps({
        "name": "t", "params": {
            "style": {"type": "reference"}, "look": {"type": "reference"},
            "style_scale": {"type": "float", "default": 0.9, "max": 1.5},
            "photo": {"type": "image", "required": True}},
        "nodes": {"a": {"op": "generate", "inputs": {
                      "prompt": "x", "model": "sd15", "seed": 1, "reference": "$style"}},
                  "b": {"op": "generate", "inputs": {
                      "prompt": "x", "model": "sd15", "seed": 1, "reference": "$look",
                      "reference_scale": 0.3}},
                  "c": {"op": "edit", "inputs": {"image": "$photo", "image_2": "$look",
                                                 "instruction": "x", "model": "k", "seed": 1}},
                  "s1": {"op": "save", "inputs": {"image": "@a"}},
                  "s2": {"op": "save", "inputs": {"image": "@b"}},
                  "s3": {"op": "save", "inputs": {"image": "@c"}}}}))
    t = load_template(tmp_path / "t.json")
    assert sorted(t.params) == ["look", "photo", "style", "style_scale"]
    assert t.params["style_scale"].default == 0.9 and t.params["style_scale"].max == 1.5
    assert t.nodes["a"].inputs["reference_scale"] == ParamRef("style_scale")
    assert t.nodes["b"].inputs["reference_scale"] == 0.3
