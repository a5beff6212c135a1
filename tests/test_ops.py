"""The pillow ops, the saved image's metadata, and the contact sheet. No torch here."""

from __future__ import annotations

import inspect
import io

import numpy as np
import pytest
from PIL import Image, ImageDraw

from bot.app.contact import contact_sheet
from executor.diffusers.ops import REGISTRY, Context, OpError
from executor.diffusers.ops.image import contrast_ratio, read_metadata
from storage.files import FileStore
from templates.fonts import load_font
from templates.jobs import decode, encode
from templates.signatures import OPS
from tests.conftest import ROOT


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
    runner = (ROOT / "executor" / "diffusers" / "runner.py").read_text()
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
    ctx.job = decode({"template": "t", "row": 3, "params": {"seed": 5, "title": "标题"},
                      "nodes": [{"id": "g", "op": "generate", "inputs": {"seed": 5}}],
                      "outputs": {"s": f"a/3.{fmt}"}})
    path = REGISTRY["save"].run(ctx, square(), f"a/3.{fmt}", fmt)
    assert path == f"outputs/batch_7/a/3.{fmt}"
    full = ctx.store.path(path)
    meta = read_metadata(full)
    assert meta["workflow"] == encode(ctx.job) and meta["seeds"] == [5]
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


def text_runs(a: np.ndarray, rows: np.ndarray) -> int:
    """How many separate runs of `rows` have white text in them."""
    lit = rows & (a.min(axis=2) > 160).any(axis=1)
    return int(np.count_nonzero(lit[1:] & ~lit[:-1]) + lit[0])


def test_a_title_with_a_line_break_is_two_lines_on_a_band_grown_to_hold_them(ctx):
    grey = Image.new("RGB", (400, 300), (128, 128, 128))
    bands = {}
    for title in ("Summer Sale", "Summer Sale\nsecond line", "Summer Sale\r\nsecond line"):
        out = np.asarray(REGISTRY["text"].run(ctx, grey, title, band="#000000",
                                              color="#ffffff")).astype(int)
        band = (out[:, 0] == 0).all(axis=1)
        assert band[-1] and not band[0]  # at the bottom
        bands[title] = (int(band.sum()), text_runs(out, band))
    one, two, crlf = bands.values()
    assert one[1] == 1 and two[1] == 2 and crlf == two
    assert two[0] > one[0] * 1.5  # the band grew for the second line


def test_a_watermark_with_a_line_break_is_two_lines_in_its_corner(ctx):
    base = Image.new("RGB", (300, 200), "#000000")
    out = np.asarray(REGISTRY["watermark"].run(ctx, base, "genbot\nstudio", opacity=1.0))
    rows = (out.max(axis=2) > 0).any(axis=1)
    lit = np.flatnonzero(rows)
    assert lit.min() > 100 and out[:, :150].max() == 0  # bottom right, as one line was
    assert np.count_nonzero(rows[1:] & ~rows[:-1]) == 2  # two lines, a gap between


def test_a_font_file_that_is_no_font_is_an_op_error(ctx, tmp_path):
    (tmp_path / "not-a-font.ttf").write_text("<html>nope</html>")
    ctx.font = str(tmp_path / "not-a-font.ttf")
    with pytest.raises(OpError, match="cannot read the font .*not-a-font.ttf"):
        REGISTRY["text"].run(ctx, square(), "x")


def test_contact_sheet_draws_a_card_for_an_output_that_is_no_image(tmp_path):
    good = tmp_path / "good.png"
    square().save(good)
    png = good.read_bytes()
    (tmp_path / "clip.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(200))
    (tmp_path / "page.html").write_text("<!doctype html><title>x</title>")
    (tmp_path / "cut.png").write_bytes(png[:len(png) // 2])  # a PNG cut short
    names = ["good.png", "clip.mp4", "page.html", "cut.png", "gone.png"]
    sheet = np.asarray(Image.open(io.BytesIO(contact_sheet(
        [(tmp_path / n, f"row {i + 2}") for i, n in enumerate(names)]))))
    assert sheet.shape == (2 * (256 + 28), 3 * 256, 3)
    cards = []
    for i in range(len(names)):
        x, y = (i % 3) * 256, (i // 3) * (256 + 28)
        cards.append(tuple(sheet[y + 20, x + 128]))  # inside the card or the thumbnail
    assert cards[0] != (228, 228, 228)  # a real thumbnail
    assert cards[1:] == [(228, 228, 228)] * 4  # a grey card for each of the others


def test_a_failed_nodes_row_values_are_named_briefly_and_escaped():
    """What an unexpected error in an op says of the row (the runner's `fed_by`)."""
    from executor.diffusers.runner import fed_by
    from templates.jobs import Step
    job = decode({"template": "t", "row": 2, "nodes": [], "outputs": {},
                  "params": {"title": 'Summer "Sale"\nsecond line', "sku": "BTL-001",
                             "picture": "inputs/3f9a.png", "width": 320, "shadow": True,
                             "note": "long " * 20, "aspect": "1:1"},
                  "named": {"picture": "assets/bottle.png"}})
    titled = Step("titled", "text", {"image": {"@": "cropped.image"},
                                     "text": 'Summer "Sale"\nsecond line', "font_size": 320})
    assert fed_by(job, titled) == r'title "Summer \"Sale\"\nsecond line", width "320"'
    templated = Step("t", "text", {"image": "inputs/3f9a.png", "text": "BTL-001 on sale"})
    assert fed_by(job, templated) == 'sku "BTL-001", picture "assets/bottle.png"'
    note = Step("n", "watermark", {"text": "long " * 20})
    assert fed_by(job, note) == f'note "{("long " * 8)[:39]}…"'
    crowded = Step("c", "x", {"a": "BTL-001", "b": "inputs/3f9a.png", "c": 320, "d": "1:1",
                              "e": 'Summer "Sale"\nsecond line'})
    assert fed_by(job, crowded).endswith(" and 2 more")
    assert fed_by(job, Step("out", "save", {"image": {"@": "titled.image"},
                                            "name": "thumb_2.png"})) == ""
