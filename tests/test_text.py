"""Any text a cell can hold is laid out and drawn (templates.text), by both of Pillow's
layout engines: no text makes the layout, the `text` op, the `watermark` op or a contact
sheet caption raise, and what is drawn stays in its box. Then a real row: social_thumb
with a two-line title runs through the executor to an image that shows two lines."""

from __future__ import annotations

import asyncio
import csv
import io
import logging
import unicodedata
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageDraw, ImageFont, features

from bot.app.contact import CAPTION_H, CELL, contact_sheet
from executor.diffusers.ops import REGISTRY, Context
from storage.files import FileStore
from templates import fonts
from templates.fonts import load_font
from templates.text import ELLIPSIS, Block, lay_out, paragraphs, render

ENGINES = [pytest.param(ImageFont.Layout.BASIC, id="basic"),
           pytest.param(ImageFont.Layout.RAQM, id="raqm",
                        marks=pytest.mark.skipif(not features.check("raqm"),
                                                 reason="this Pillow has no raqm"))]

HARD = ["Summer Sale\nsecond line", "a\r\nb\rc\x0bd\x0ce\x1cf\x85g\u2028h\u2029i", "tab\there",
        "\x00\x07\x1b[31mred\x7f\x9b", "\u200b\u200c\u200d\u2060\ufeff\u00ad\u202e\u2066\u0600",
        # a thumb with a skin tone, a family (ZWJ sequence), a flag, Scotland's (tags), a
        # red heart (variation selector)
        "\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 "
        "\U0001f1e8\U0001f1f3 \U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074"
        "\U000e007f \u2764\ufe0f",
        "e\u0301\u0302\u0303", "Z" + "\u0336\u0301" * 40, "שלום עולם", "مرحبا بالعالم",
        "新品上市，限时九折！「秋季」系列。", "ｆｕｌｌ\u3000ｗｉｄｔｈ",
        "\U000f0000\uffff\U0010ffff", "\ud800 lone \udfff", "\n\n\n", " ", "", "\u0301\u0301",
        "a\u00a0b\u202fc", "x" * 300, "\t\t"]
PIECES = st.one_of(st.sampled_from(HARD),
                   st.text(st.characters(exclude_categories=["Cs"]), max_size=40))
TEXTS = st.one_of(
    st.lists(PIECES, max_size=6).map("".join),
    st.builds(lambda s: (s * 10_000)[:10_000], PIECES.filter(bool)),  # 10,000 characters
)
BREAKS = {"\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"}


def font_at(engine):
    return lambda size: load_font("", size, engine)


def ink(im: Image.Image) -> tuple[int, int, int, int] | None:
    return im.convert("L").point(lambda v: 255 if v else 0).getbbox()


def drawn_unclipped(block: Block, margin: int) -> Image.Image:
    """The block's lines drawn where it says, on a canvas larger than it by `margin`."""
    canvas = Image.new("L", (block.width + 2 * margin, block.height + 2 * margin), 0)
    draw = ImageDraw.Draw(canvas)
    for line in block.lines:
        if line.text:
            draw.text((margin + line.x, margin + line.baseline), line.text, font=block.font,
                      fill=255, anchor="ls", stroke_width=block.stroke, stroke_fill=255)
    return canvas


# --- the layout ---------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=40, deadline=None)
@given(text=TEXTS, box=st.tuples(st.integers(1, 400), st.integers(1, 160)),
       size=st.integers(1, 80), floor=st.floats(0, 1), one_line=st.booleans(),
       align=st.sampled_from(["left", "center", "right"]), stroke=st.integers(0, 3))
def test_any_text_lays_out_within_its_box(engine, text, box, size, floor, one_line, align,
                                          stroke):
    block = lay_out(text, font_at(engine), box, size, min_size=max(1, round(size * floor)),
                    align=align, one_line=one_line, stroke=lambda s: stroke)
    assert block.width <= box[0] and block.height <= box[1]
    assert 0 <= block.ink_top <= block.ink_bottom <= block.height
    for line in block.lines:
        assert not BREAKS & set(line.text)
        assert not any(unicodedata.category(c) in ("Cc", "Cs") for c in line.text)
    if one_line:
        assert len(block.lines) <= 1
    if block.cut and block.lines:
        assert block.lines[-1].text in ("", ) or block.lines[-1].text.endswith(ELLIPSIS)
    if block.lines:  # what the block says it holds, drawn without any clipping, it holds
        margin = 2 * block.size + 8
        drawn = ink(drawn_unclipped(block, margin))
        if drawn is not None:
            x0, y0, x1, y1 = drawn
            assert margin <= x0 and x1 <= margin + block.width, (drawn, block)
            assert margin + block.ink_top <= y0 and y1 <= margin + block.ink_bottom, (drawn,
                                                                                       block)


@pytest.mark.parametrize("engine", ENGINES)
def test_every_kind_of_line_break_starts_a_line(engine):
    lines = lay_out(HARD[1], font_at(engine), (400, 400), 20).lines
    assert [line.text for line in lines] == list("abcdefghi")
    assert paragraphs("Summer Sale\r\n\r\nsecond line\n\n") == ["Summer Sale", "", "second line"]


def test_controls_go_tabs_are_spaces_and_shaping_marks_stay_only_for_raqm():
    assert paragraphs("\x07a\tb\x1b\x7f\x9bc") == ["a bc"]
    assert paragraphs("zero\u200bwidth\u00adsoft\ufeff\u2060") == ["zerowidthsoft"]
    family = "👨\u200d👩\u200d👧"
    assert paragraphs(family) == [family]  # raqm joins it into one picture
    assert paragraphs(family, shaping=False) == ["👨👩👧"]  # basic would draw boxes for them
    assert paragraphs("\u202eevil", shaping=False) == ["evil"]
    assert paragraphs("half \ud800 pair") == ["half \ufffd pair"]  # visible, not dropped
    assert paragraphs("cafe\u0301") == ["café"]  # one letter, as the basic engine can draw it
    assert paragraphs("Z" + "\u0301" * 50) == ["Ź" + "\u0301" * 4]  # no tower of marks
    assert paragraphs("\x07\u200b \n\t") == []  # nothing visible


@pytest.mark.parametrize("engine", ENGINES)
def test_chinese_wraps_by_character_and_never_starts_a_line_with_closing_punctuation(engine):
    text = "新品上市，限时九折！秋季系列全场包邮。" * 3
    block = lay_out(text, font_at(engine), (200, 400), 20, min_size=20)
    assert len(block.lines) > 2 and not block.cut
    assert "".join(line.text for line in block.lines) == text
    assert all(line.text[0] not in "，！。" for line in block.lines)
    font = load_font("", 20, engine)
    assert all(font.getlength(line.text) <= 200 for line in block.lines)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_font_size_fits_the_whole_block_and_what_cannot_fit_ends_in_an_ellipsis(engine):
    one = lay_out("Autumn", font_at(engine), (300, 100), 40)
    assert one.size == 40 and len(one.lines) == 1  # fits as asked: unchanged
    two = lay_out("Autumn\ncollection of chairs and tables", font_at(engine), (300, 100), 40)
    assert two.size < 40 and two.height <= 100 and two.width <= 300
    assert [line.text for line in two.lines][0] == "Autumn"  # one size for every line
    long = lay_out("word " * 2000, font_at(engine), (300, 100), 40, min_size=20)
    assert long.cut and long.size == 20 and long.lines[-1].text.endswith("word" + ELLIPSIS)
    words = lay_out("Summer Sale\nsecond line", font_at(engine), (600, 200), 40)
    assert [line.text for line in words.lines] == ["Summer Sale", "second line"]


def test_raqm_itself_refuses_a_line_break_which_is_why_lines_are_split_first():
    if not features.check("raqm"):
        pytest.skip("this Pillow has no raqm")
    with pytest.raises(RuntimeError, match="raqm_layout"):
        load_font("", 20, ImageFont.Layout.RAQM).getlength("a\nb")


# --- the font a block is set in ----------------------------------------------------------

def test_the_bundled_font_sets_chinese_and_latin_and_a_font_with_hebrew_sets_hebrew():
    bundled = str(fonts.BUNDLED_FONT)
    assert fonts.font_for("", "新品上市 · Autumn 2026") == bundled
    assert fonts.font_for("", "") == bundled and fonts.font_for("", "\x07\u200b") == bundled
    assert not fonts.has_glyph(bundled, "ש") and fonts.has_glyph(bundled, "新")
    others = [f for f in fonts.fallback_fonts() if fonts.has_glyph(f, "ש")]
    if not others:
        pytest.skip("no font here has Hebrew (Debian: fonts-dejavu-core)")
    assert fonts.font_for("", "מבצע קיץ 50%") == others[0]
    assert fonts.font_for("", "新品上市 ש") == bundled  # most of it is Chinese


@pytest.mark.parametrize("engine", ENGINES)
def test_hebrew_is_drawn_as_letters_and_raqm_sets_it_right_to_left(engine):
    chosen = fonts.font_for("", "אבגד")
    if not fonts.has_glyph(chosen, "א"):
        pytest.skip("no font here has Hebrew (Debian: fonts-dejavu-core)")

    def drawn(text, layout=engine):
        block = lay_out(text, lambda s: load_font(chosen, s, layout), (400, 100), 40)
        return np.asarray(render(block, "white"))

    assert not np.array_equal(drawn("אבגד"), drawn("הוזח"))  # letters, not four boxes
    if engine == ImageFont.Layout.RAQM:  # the letters in visual order: last typed leftmost
        assert np.array_equal(drawn("אבגד"), drawn("דגבא", ImageFont.Layout.BASIC))


# --- the ops and the contact sheet --------------------------------------------------------

@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return Context(FileStore(tmp_path_factory.mktemp("store")))


@contextmanager
def pinned(engine):
    """The ops and the contact sheet set text with `engine` inside this block."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fonts, "LAYOUT", engine)
        yield


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=25, deadline=None)
@given(text=TEXTS, size=st.tuples(st.integers(16, 320), st.integers(16, 240)),
       position=st.sampled_from(["top", "bottom", "center", "bottom_left", "top_right"]),
       font_size=st.one_of(st.none(), st.integers(1, 400)))
def test_the_text_op_draws_any_text_inside_its_band(ctx, engine, text, size, position,
                                                     font_size):
    base = Image.new("RGB", size, (128, 128, 128))
    with pinned(engine):
        out = REGISTRY["text"].run(ctx, base, text, position=position, band="#000000",
                                   color="#ffffff", font_size=font_size)
    assert out.size == size
    a = np.asarray(out)
    changed = (a != np.asarray(base)).any(axis=2)
    band = (a[:, 0] == 0).all(axis=1)  # the band spans the width; the text keeps off col 0
    if not band.any():  # nothing visible fits (or is there): the image as it was
        assert not changed.any()
        return
    rows = np.flatnonzero(band)
    assert rows[-1] - rows[0] + 1 == len(rows)  # one band
    assert not changed[~band].any()  # the text is within it


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=25, deadline=None)
@given(text=TEXTS, size=st.tuples(st.integers(16, 320), st.integers(16, 240)),
       position=st.sampled_from(["bottom_right", "top_left", "bottom", "center"]))
def test_the_watermark_op_draws_any_text_inside_its_corner(ctx, engine, text, size, position):
    base = Image.new("RGB", size, (0, 0, 0))
    with pinned(engine):
        out = REGISTRY["watermark"].run(ctx, base, text, position=position, opacity=0.5)
    assert out.size == size
    box = ink(out)
    if box is not None:
        x0, y0, x1, y1 = box
        assert x1 - x0 <= int(size[0] * 0.5) and y1 - y0 <= int(size[1] * 0.25)
        if position.endswith("right"):  # in its corner (past the margin on small images)
            assert x1 > size[0] // 2
        if position.startswith("top"):
            assert y0 < size[1] // 2


@pytest.fixture(scope="module")
def picture(tmp_path_factory):
    path = tmp_path_factory.mktemp("contact") / "p.png"
    Image.new("RGB", (64, 48), (200, 60, 60)).save(path)
    return path


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=15, deadline=None)
@given(caption=TEXTS)
def test_a_contact_sheet_caption_of_any_text_stays_on_its_line(picture, engine, caption):
    with pinned(engine):
        sheet = np.asarray(Image.open(io.BytesIO(contact_sheet([(picture, caption)]))))
        bare = np.asarray(Image.open(io.BytesIO(contact_sheet([(picture, "")]))))
    assert sheet.shape == bare.shape == (CELL + CAPTION_H, CELL, 3)
    changed = np.argwhere((sheet != bare).any(axis=2))
    if len(changed):
        assert changed[:, 0].min() >= CELL + 4 and changed[:, 0].max() < CELL + CAPTION_H
        assert changed[:, 1].min() >= 4 and changed[:, 1].max() < CELL - 4


# --- a real row through the executor ------------------------------------------------------

def text_rows(a: np.ndarray, band: np.ndarray) -> list[tuple[int, int]]:
    """Runs of consecutive band rows with text (white) in them: one per line of text."""
    lit = band & (a.min(axis=2) > 160).any(axis=1)
    runs, start = [], None
    for y, on in enumerate(lit):
        if on and start is None:
            start = y
        if not on and start is not None:
            runs.append((start, y))
            start = None
    return runs


async def run_rows(config, jobs) -> list:
    """Queue `jobs` and run the executor (the loop over the diffusers engine) until they
    have all ended."""
    from executor.worker import executor_loop
    from storage.queue import Submission, open_queue
    queue = await open_queue(config)
    try:
        batch = (await queue.enqueue(Submission("social_thumb", "test:alice", jobs))).batch_id
        loop = executor_loop(config, queue, owner="test-text")
        task = asyncio.create_task(loop.run())
        try:
            async with asyncio.timeout(120):
                while True:
                    if task.done():
                        task.result()
                    done = await queue.batch_jobs(batch)
                    if all(j.status in ("succeeded", "failed", "canceled") for j in done):
                        return done
                    await asyncio.sleep(0.05)
        finally:
            loop.stopping.set()
            await task
    finally:
        await queue.close()


async def social_thumb_jobs(config, tmp_path, titles: list[str]):
    """social_thumb's jobs for a sheet (a CSV) with these titles, as the bot queues them."""
    from bot.intake.check import intake
    from bot.intake.images import ImageResolver, folder_attachments
    from bot.settings import assets_dir
    from templates.loader import load_templates
    from templates.settings import templates_dir
    Image.new("RGB", (400, 300), (128, 128, 128)).save(tmp_path / "grey.png")
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["image", "title", "aspect", "width", "text_color", "band_color"])
    for title in titles:
        writer.writerow(["grey.png", title, "1:1", "320", "#ffffff", "#000000"])
    templates, _ = load_templates(templates_dir(config))
    images = ImageResolver(config.intake, FileStore(config.data_dir),
                           assets_dir=assets_dir(config),
                           attachments=folder_attachments(tmp_path))
    result = await intake(templates["social_thumb"], "titles.csv", buf.getvalue().encode(),
                          settings=config.intake, images=images)
    assert result.ok, result.report()
    return result.jobs


async def test_a_two_line_title_runs_to_an_image_with_two_lines(tmp_path, demo_models):
    pytest.importorskip("torch")
    from tests.conftest import executor_config
    config = executor_config(tmp_path / "data", demo_models)
    jobs = await social_thumb_jobs(config, tmp_path, ["Summer Sale\nsecond line", "Summer Sale"])
    done = await run_rows(config, jobs)
    assert [(j.status, j.error) for j in done] == [("succeeded", None)] * 2
    shown = []
    for job in done:
        with Image.open(FileStore(config.data_dir).path(job.outputs[0])) as im:
            a = np.asarray(im.convert("RGB")).astype(int)
        assert a.shape == (320, 320, 3)
        band = (a[:, 0] == 0).all(axis=1)
        assert band[-1] and not band[0]  # at the bottom, as asked
        shown.append(text_rows(a, band))
    two, one = shown
    assert len(two) == 2 and len(one) == 1, shown
    assert two[0][1] < two[1][0]  # two separate lines, one above the other


async def test_an_unexpected_error_in_an_op_names_the_node_and_the_rows_values(
        tmp_path, demo_models, caplog):
    pytest.importorskip("torch")
    from tests.conftest import executor_config
    config = executor_config(tmp_path / "data", demo_models)
    (job,) = await social_thumb_jobs(config, tmp_path, ["Summer Sale"])
    # A ratio no sheet could give (the column is a choice): crop divides by zero.
    job.workflow["params"]["aspect"] = "4:0"
    job.workflow["nodes"][0]["inputs"]["aspect"] = "4:0"
    with caplog.at_level(logging.ERROR, logger="genbot.executor"):
        (done,) = await run_rows(config, [job])
    assert (done.status, done.attempts) == ("failed", 1)  # the same values fail again
    assert done.error == ('node cropped (crop): failed on this row\'s image "grey.png", '
                          'aspect "4:0" (an unexpected error inside the op; the executor\'s '
                          "log has the details)")  # the picture as the sheet named it
    logged = next(r for r in caplog.records if r.getMessage().startswith("job failed"))
    assert "ZeroDivisionError: division by zero" in logged.getMessage()
    assert "Traceback" in logged.traceback and "_ratio" in logged.traceback


def test_hebrew_arabic_and_symbols_are_set_in_the_bundled_fallback_on_any_host():
    """WenQuanYi has no Hebrew or Arabic; DejaVu Sans ships beside it (package data), so
    a title in them renders on a host with no fonts installed, not as boxes."""
    from templates.fonts import BUNDLED_FONT, font_for, has_glyph
    bundled = str(BUNDLED_FONT.parent / "DejaVuSans.ttf")
    for text in ("שלום עולם", "مرحبا بالعالم", "☺ ♥ ☂"):
        assert font_for("", text) == bundled, text
        assert all(has_glyph(bundled, c) for c in text if not c.isspace())
    assert font_for("", "新品上市 Summer Sale") == str(BUNDLED_FONT)  # the CJK face first
