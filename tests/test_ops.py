"""The pillow ops, the saved image's metadata, and the contact sheet. No torch here."""

from __future__ import annotations

import inspect
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from executor.contact import contact_sheet
from executor.ops import REGISTRY, Context, OpError
from executor.ops.image import contrast_ratio, load_font, read_metadata
from executor.signatures import OPS
from storage.files import FileStore


@pytest.fixture
def ctx(tmp_path):
    return Context(FileStore(tmp_path))


def square(size=(120, 80), inner="#204080", outer="#f0e0c0") -> Image.Image:
    im = Image.new("RGB", size, outer)
    ImageDraw.Draw(im).rectangle((30, 20, 89, 59), fill=inner)
    return im


def test_every_signature_has_an_op_taking_exactly_its_inputs():
    assert set(REGISTRY) == set(OPS)
    for name, spec in REGISTRY.items():
        params = list(inspect.signature(spec.run).parameters)[1:]
        # a batched op takes its inputs as a list of dicts, one per job
        assert params == (["batch"] if spec.batched else list(OPS[name].inputs))


def test_ops_declare_what_the_runner_needs():
    """The runner matches no op by name: batching and where a result goes are declared."""
    assert [n for n, spec in REGISTRY.items() if spec.batched] == ["generate"]
    assert REGISTRY["generate"].shape is not None
    assert REGISTRY["save"].output == "path" and REGISTRY["crop"].output == "image"
    runner = (Path(__file__).resolve().parent.parent / "executor" / "runner.py").read_text()
    assert '"generate"' not in runner and '"save"' not in runner


def test_crop_to_an_aspect_keeps_the_centre(ctx):
    assert REGISTRY["crop"].run(ctx, square(), "1:1").size == (80, 80)
    assert REGISTRY["crop"].run(ctx, square(), "1:2").size == (40, 80)
    assert REGISTRY["crop"].run(ctx, square((60, 200)), "3:2").size == (60, 40)


def test_resize_by_size_width_or_scale_and_exactly_one(ctx):
    resize = REGISTRY["resize"].run
    assert resize(ctx, square(), size=[30, 30]).size == (30, 30)
    assert resize(ctx, square(), width=60).size == (60, 40)
    assert resize(ctx, square(), scale=0.5).size == (60, 40)
    with pytest.raises(OpError, match="exactly one of size, width or scale"):
        resize(ctx, square())
    with pytest.raises(OpError, match=r"\(got size, width\)"):
        resize(ctx, square(), size=[1, 1], width=5)


def test_pad_centres_and_picks_the_border_colour(ctx):
    out = REGISTRY["pad"].run(ctx, square(), [200, 100])
    assert out.size == (200, 100) and out.getpixel((0, 0)) == (240, 224, 192)
    assert out.getpixel((100, 50)) == (32, 64, 128)
    assert REGISTRY["pad"].run(ctx, square(), [60, 60], "#ff0000").size == (60, 60)  # fits inside


def test_palette_gives_the_dominant_colour_and_one_that_reads_on_it(ctx):
    result = REGISTRY["palette"].run(ctx, square())
    assert result["dominant"] == "#f0e0c0"
    rgb = tuple(int(result["contrast"][i:i + 2], 16) for i in (1, 3, 5))
    assert contrast_ratio(rgb, (240, 224, 192)) >= 4.5


def test_canny_finds_the_square_outline_and_nothing_else(ctx):
    edges = np.asarray(REGISTRY["canny"].run(ctx, square()).convert("L")) > 0
    assert edges.any() and not edges[:, :20].any() and not edges[:10].any()
    assert not edges[30:50, 45:75].any()  # the flat inside
    assert edges[20:60, 26:34].any(axis=1).all()  # the left side, every row of it


def test_text_draws_chinese_and_latin_glyphs_not_boxes(ctx):
    font = load_font("", 40)
    missing = font.getmask("\U000f0000").getbbox()  # a code point no font has
    for text in ("新品上市", "Autumn"):
        assert font.getmask(text[0]).getbbox() != missing
    out = REGISTRY["text"].run(ctx, square((400, 300)), "新品上市 · Autumn")
    assert out.size == (400, 300) \
        and not np.array_equal(np.asarray(out), np.asarray(square((400, 300))))
    top = REGISTRY["text"].run(ctx, square((400, 300)), "x", position="top", band="#000000",
                           color="#ffffff")
    assert top.getpixel((2, 2)) == (0, 0, 0)


def test_watermark_is_translucent(ctx):
    base = Image.new("RGB", (300, 200), "#000000")
    out = np.asarray(REGISTRY["watermark"].run(ctx, base, "genbot", opacity=0.5))
    assert 0 < out.max() < 200  # white at half opacity over black: grey, not white
    assert out[:100].max() == 0  # bottom right only


def test_missing_input_image_and_font_are_op_errors(ctx, tmp_path):
    with pytest.raises(OpError, match="cannot read input image inputs/none.png"):
        REGISTRY["crop"].run(ctx, "inputs/none.png", "1:1")
    ctx.font = str(tmp_path / "none.ttf")
    with pytest.raises(OpError, match="font not found"):
        REGISTRY["watermark"].run(ctx, square(), "x")


@pytest.mark.parametrize("fmt", ["png", "jpg", "webp"])
def test_save_writes_atomically_under_the_batch_with_metadata(ctx, fmt):
    ctx.batch_id, ctx.used_models = 7, ["sdxl"]
    ctx.workflow = {"template": "t", "row": 3, "params": {"seed": 5, "title": "标题"},
                    "nodes": [{"id": "g", "op": "generate", "inputs": {"seed": 5}}],
                    "outputs": {"s": f"a/3.{fmt}"}}
    path = REGISTRY["save"].run(ctx, square(), f"a/3.{fmt}", fmt)
    assert path == f"outputs/batch_7/a/3.{fmt}"
    full = ctx.store.path(path)
    meta = read_metadata(full)
    assert meta["workflow"] == ctx.workflow and meta["seeds"] == [5]
    assert meta["models"] == ["sdxl"] and meta["params"]["title"] == "标题"
    assert [p.name for p in full.parent.iterdir()] == [f"3.{fmt}"]  # no temp files left


def test_contact_sheet_tiles_captioned_thumbnails(tmp_path):
    paths = []
    for i in range(5):
        paths.append((tmp_path / f"{i}.png", f"row {i + 2} · 第{i}行"))
        square().save(paths[-1][0])
    sheet = Image.open(io.BytesIO(contact_sheet(paths)))
    assert sheet.size == (3 * 256, 2 * (256 + 28))
    with pytest.raises(ValueError):
        contact_sheet([])


def test_resize_to_a_width_with_an_aspect_gives_the_aspects_height(ctx):
    cropped = REGISTRY["crop"].run(ctx, Image.new("RGB", (1200, 902), "#123456"), "4:5")
    assert REGISTRY["resize"].run(ctx, cropped, width=1080).size == (1080, 1349)  # rounding
    assert REGISTRY["resize"].run(ctx, cropped, width=1080, aspect="4:5").size == (1080, 1350)


def test_a_watermark_keeps_off_the_title_band(ctx):
    base = Image.new("RGB", (300, 200), "#000000")
    out = np.asarray(REGISTRY["watermark"].run(ctx, base, "genbot", opacity=0.5,
                                                avoid="bottom"))
    assert out[100:].max() == 0 and out[:100].max() > 0  # moved to the top edge
