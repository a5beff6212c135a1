"""Repaint a region and extend the canvas (the `fill` op) on every family's inpaint
pipeline, built from the demo models: every pixel outside the region — the whole original
of an extend — byte-identical to the picture; inside, the model's; the size exactly as
asked, whatever multiple the model needs. What cannot be painted is refused plainly."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from PIL import Image

from executor.diffusers.ops import Context, OpError
from executor.diffusers.ops.fill import extended, fill, kept_outside
from executor.models.registry import ModelError
from templates.size_rules import Grown, grown
from tests.fakes.executor import demo_context

INPAINTING = ["sd15", "sdxl", "sd3", "flux", "flux_fill", "qwen_image", "zimage"]


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, demo_models) -> Context:
    from tests.fakes.segmentation import write_clipseg
    folder = tmp_path_factory.mktemp("fill")
    write_clipseg(folder / "finder", tuned=(picture(), "the bottle"))
    write_clipseg(folder / "blind", blind=True)
    return demo_context(folder, demo_models, models={
        "finder": str(folder / "finder"), "blind": str(folder / "blind")})


def picture(size=(64, 64)) -> Image.Image:
    """Every pixel its own colour: any change shows."""
    rng = np.random.default_rng(3)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


def region(size=(64, 64), box=(16, 16, 48, 40)) -> Image.Image:
    mask = Image.new("L", size, 0)
    mask.paste(255, box)
    return mask


@pytest.mark.parametrize("model", INPAINTING)
def test_a_region_is_repainted_and_nothing_outside_it_changes(ctx, model):
    made = fill(ctx, picture(), model, seed=1, prompt="a red scarf 红围巾", mask=region(),
                steps=2, feather=4)
    before, after = np.asarray(picture()), np.asarray(made)
    outside = np.asarray(region()) == 0
    assert made.size == (64, 64)
    assert np.array_equal(after[outside], before[outside])  # identical, not "similar"
    core = np.zeros((64, 64), bool)
    core[16 + 4:40 - 4, 16 + 4:48 - 4] = True  # past the feather: the model's own pixels
    assert np.abs(after[core].astype(int) - before[core]).mean() > 10


@pytest.mark.parametrize("model", ["sd15", "flux_fill"])
def test_an_extend_grows_the_canvas_to_the_shape_and_keeps_the_picture_exactly(ctx, model):
    """64x64 to 9:16 is 64x114 — a multiple of neither 8 nor 16: the pipeline paints a
    little more, which is cropped off; the picture sits in the middle, unchanged."""
    made = fill(ctx, picture(), model, seed=2, prompt="", aspect="9:16", steps=2)
    assert made.size == (64, 114)
    top = (114 - 64) // 2
    after = np.asarray(made)
    assert np.array_equal(after[top:top + 64], np.asarray(picture()))
    assert after[:top].std() > 0 and after[top + 64:].std() > 0  # painted, not flat
    sides = fill(ctx, picture(), model, seed=2, left=24, right=8, bottom=5, steps=2)
    assert sides.size == (64 + 32, 64 + 5)
    assert np.array_equal(np.asarray(sides)[:64, 24:88], np.asarray(picture()))


def test_a_region_named_in_words_is_found_and_only_it_is_repainted(ctx):
    """/repaint 3 region="the bottle": the segmentation model (a CLIPSeg) finds the region;
    outside it every pixel is the picture's, inside the model's. With a mask too, both
    are repainted. Words that match nothing, or no segmenter, are said in one sentence."""
    from executor.models import segmentation
    found = np.asarray(segmentation.region(ctx.models.registry.get("finder", "segmentation")
                                           .path, picture(), "the bottle")) == 255
    assert 0.2 < found.mean() < 0.8  # (the tiny model's region: about half the picture)
    made = fill(ctx, picture(), "sd15", seed=1, prompt="a red bottle", region="the bottle",
                segmenter="finder", steps=2, feather=0)
    before, after = np.asarray(picture()), np.asarray(made)
    assert np.array_equal(after[~found], before[~found])
    assert np.abs(after[found].astype(int) - before[found]).mean() > 10
    assert "finder" in ctx.used_models
    with contextlib.suppress(segmentation.SegmentationError):  # (nothing found: an answer)
        segmentation.region(ctx.models.registry.get("finder", "segmentation").path,
                            picture(), "the bottle on the left " * 40)  # past 77 tokens
    both = np.asarray(fill(ctx, picture(), "sd15", seed=1, mask=region(), region="the bottle",
                           segmenter="finder", steps=2, feather=0))
    outside = ~found & (np.asarray(region()) == 0)
    assert np.array_equal(both[outside], before[outside])
    assert (both[~outside] != before[~outside]).any(axis=-1).mean() > 0.9
    with pytest.raises(OpError, match='"the bottle" matched nothing in the picture: name it '
                                      "otherwise, or paint the region"):
        fill(ctx, picture(), "sd15", seed=1, region="the bottle", segmenter="blind", steps=2)
    with pytest.raises(OpError, match=r"a region in words needs a segmentation model: set "
                                      r"\[templates\] segmentation_model"):
        fill(ctx, picture(), "sd15", seed=1, region="the bottle", steps=2)


def test_a_region_and_an_extend_in_one_go(ctx):
    made = fill(ctx, picture(), "sd15", seed=4, mask=region(), top=16, steps=2, feather=0)
    after, before = np.asarray(made)[16:], np.asarray(picture())
    outside = np.asarray(region()) == 0
    assert made.size == (64, 80) and np.array_equal(after[outside], before[outside])


def test_what_cannot_be_painted_is_refused_in_one_sentence(ctx):
    with pytest.raises(OpError, match="nothing to repaint: give a mask or a region in words, "
                                      "or margins or an aspect to extend by"):
        fill(ctx, picture(), "sd15", seed=1)
    with pytest.raises(OpError, match=r"the mask marks nothing to repaint"):
        fill(ctx, picture(), "sd15", seed=1, mask=Image.new("L", (64, 64), 0))
    with pytest.raises(OpError, match="the mask is 64x32 and the picture 64x64: a mask of "
                                      "the picture's proportions is needed"):
        fill(ctx, picture(), "sd15", seed=1, mask=region((64, 32), (0, 0, 8, 8)))
    with pytest.raises(ModelError, match=r'model "flux_kontext" is FLUX.1 Kontext '
                                         r"\(flux_kontext\): genbot runs it for .*not inpaint"):
        fill(ctx, picture(), "flux_kontext", seed=1, mask=region())


def test_a_mask_of_the_pictures_proportions_at_another_size_is_resized(ctx):
    half = region((32, 32), (8, 8, 24, 20))
    made = fill(ctx, picture(), "sd15", seed=1, mask=half, steps=2, feather=0)
    outside = np.asarray(region()) == 0  # the same region at the picture's size
    assert np.array_equal(np.asarray(made)[outside], np.asarray(picture())[outside])


def test_the_feather_fades_inward_only():
    """The composite by itself: outside the region the canvas's pixels exactly, deep
    inside the model's, at the edge inside a mix of both."""
    canvas, paint, new = extended(picture(), region(), (0, 0, 0, 0))
    made = Image.new("RGB", (64, 64), (0, 0, 0))
    out = np.asarray(kept_outside(canvas, made, paint, new, feather=6)).astype(int)
    before = np.asarray(picture()).astype(int)
    outside = np.asarray(region()) == 0
    assert np.array_equal(out[outside], before[outside])
    assert (out[28, 32] == 0).all()  # deep inside: the model's
    edge = out[16, 17:47]  # the region's top row: partly the picture still
    assert 0 < np.abs(edge).mean() < np.abs(before[16, 17:47]).mean()


@pytest.mark.parametrize("source, margins, aspect, expected", [
    ((64, 64), (0, 0, 0, 0), "9:16", (0, 0, 25, 25)),
    ((100, 50), (0, 0, 0, 0), "1:1", (0, 0, 25, 25)),
    ((50, 100), (0, 0, 0, 0), "1:1", (25, 25, 0, 0)),
    ((64, 48), (10, 0, 0, 0), "16:9", (15, 6, 0, 0)),  # margins first, then the shape
    ((160, 90), (0, 0, 0, 0), "16:9", (0, 0, 0, 0)),  # already that shape
    ((100, 100), (0, 0, 0, 0), "2:1", (50, 50, 0, 0)),
])
def test_the_margins_of_an_extend(source, margins, aspect, expected):
    assert grown(source, margins, aspect) == expected
    left, right, top, bottom = expected
    assert Grown().size({"left": margins[0], "aspect": aspect}, source) == (
        source[0] + left + right, source[1] + top + bottom)
