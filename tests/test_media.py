"""Outputs told by their bytes: the kinds genbot keeps, what is refused and why, a bomb
refused by its header without its pixels being allocated."""

from __future__ import annotations

import tracemalloc

import pytest

from storage import media
from storage.media import NotMedia, output, sniff_file
from tests.fakes import media as samples


@pytest.mark.parametrize(("data", "kind"), [
    (samples.image("PNG"), media.PNG), (samples.image("JPEG"), media.JPEG),
    (samples.image("WEBP"), media.WEBP), (samples.image("GIF"), media.GIF),
    (samples.webm(), media.WEBM), (samples.mp4(), media.MP4)])
def test_each_kept_kind_is_told_by_its_bytes(data, kind):
    assert output(data) is kind


@pytest.mark.parametrize(("data", "why"), [
    (samples.HTML, "it is not an image or a video genbot keeps (PNG, JPEG, WebP, GIF, WebM, "
                   "MP4); it starts as markup (HTML, SVG or XML)"),
    (samples.TEXT, "it is not an image or a video genbot keeps (PNG, JPEG, WebP, GIF, WebM, "
                   "MP4); it starts as text"),
    ("中文说明".encode() * 20, "it starts as text"),  # a character cut at byte 64 is still text
    (b"", "it starts empty"),
    (b"\x00\x01\x02\x03\x04\x05\x06\x07\x08", "it starts with other bytes: 00 01 02 03"),
    (b"\x1a\x45\xdf\xa3\x88\x42\x82\x88matroska", "it is not an image or a video"),  # an MKV
    (b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00", "it is not an image or a video"),  # HEIF
    (samples.image("PNG")[:45], "it starts as a PNG image but is not a whole one"),
    (samples.image("WEBP")[:30], "it starts as a WebP image but is not a whole one"),
])
def test_what_is_not_a_kept_kind_or_not_whole_is_refused_saying_why(data, why):
    with pytest.raises(NotMedia) as e:
        output(data)
    assert why in str(e.value) and "\n" not in str(e.value)


def test_a_bomb_is_refused_by_its_header_with_the_limit_named_and_nothing_allocated():
    bomb = samples.bomb_png(100_000, 100_000)  # 30 GB of pixels, declared in 100 bytes
    tracemalloc.start()
    try:
        with pytest.raises(NotMedia) as e:
            output(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(e.value) == ("it declares 100000×100000 pixels, more than the limit of "
                            f"{media.MAX_PIXELS} (MAX_IMAGE_PIXELS)")
    assert peak < 4 * 2**20
    assert output(samples.bomb_png(64, 64)) is media.PNG  # the same file, small, is fine
    with pytest.raises(NotMedia, match="64×64 pixels, more than the limit of 100"):
        output(samples.bomb_png(64, 64), max_pixels=100)


def test_a_stored_file_is_told_by_its_bytes_not_its_name(tmp_path):
    from openpyxl import Workbook
    (tmp_path / "x.png").write_bytes(samples.HTML)
    (tmp_path / "x.html").write_bytes(samples.image("PNG"))
    (tmp_path / "v.png").write_bytes(samples.webm())
    book = Workbook()
    book.save(tmp_path / "r.xlsx")
    (tmp_path / "z.xlsx").write_bytes(b"PK\x03\x04 not really a zip")
    assert sniff_file(tmp_path / "x.png") is None
    assert sniff_file(tmp_path / "x.html") is media.PNG
    assert sniff_file(tmp_path / "v.png") is media.WEBM
    assert sniff_file(tmp_path / "r.xlsx") is media.XLSX
    assert sniff_file(tmp_path / "z.xlsx") is None



def test_a_webp_bomb_is_refused_by_its_header_with_its_size_named():
    """Pillow's WebP reader refuses a canvas over twice its limit as it opens, before the
    size could be said (and reserves a canvas under that): the header is read first."""
    for width, height in ((16_383, 16_383), (10_000, 9_000)):
        with pytest.raises(NotMedia) as e:
            output(samples.bomb_webp(width, height))
        assert str(e.value) == (f"it declares {width}×{height} pixels, more than the limit "
                                f"of {media.MAX_PIXELS} (MAX_IMAGE_PIXELS)")
    assert output(samples.bomb_webp(100, 100)) is media.WEBP
    with pytest.raises(NotMedia) as e:  # a limit above Pillow's own: Pillow's refusal, said
        output(samples.bomb_webp(), max_pixels=10**9)
    assert str(e.value) == "it declares more pixels than Pillow opens (178956970, twice " \
                           "MAX_IMAGE_PIXELS)"
