"""A generated picture made into each channel's file (templates.renditions) and the
channel's rules checked on the file itself (templates.deliver_checks): read back with
Pillow, and the labels with readers of their own."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess

import numpy as np
import pytest
from PIL import Image, ImageDraw

from templates.channels import Deliverable, Rendition, presets
from templates.deliver_checks import check
from templates.renditions import Provenance, make, plain_background, read_implicit_label
from tests.fakes.debian import exiftool
from tests.fakes.media import product_shot, scene

PROVENANCE = Provenance("genbot-test", "genbot-b1-j1", {"template": "product_main", "row": 2})


def deliverable(channel: str, i: int = 0, *, labelled: bool = True, **changes) -> Deliverable:
    ch = presets()[channel]
    r = ch.renditions[i]
    if changes:
        import msgspec
        r = msgspec.structs.replace(r, **changes)
    return Deliverable(channel, r, f"x.{r.format}", ch.ai_label if labelled else None)


@pytest.mark.parametrize("channel, i", [(c, i) for c, ch in presets().items()
                                        for i in range(len(ch.renditions))])
def test_every_preset_rendition_of_a_product_shot_meets_its_channels_rules(channel, i):
    labelled = presets()[channel].label == "required"
    d = deliverable(channel, i, labelled=labelled)
    made = make(product_shot(), d, PROVENANCE)
    assert check(d, made) == []
    with Image.open(io.BytesIO(made.data)) as im:
        assert im.size == d.rendition.size
        assert im.format == {"jpg": "JPEG", "webp": "WEBP", "png": "PNG"}[d.rendition.format]
    if d.rendition.max_kb:
        assert len(made.data) <= d.rendition.max_kb * 1024
    assert made.product is not None  # the bottle is in the frame, whole
    left, top, right, bottom = made.product
    assert 0 < left < right < d.rendition.size[0] and 0 < top < bottom < d.rendition.size[1]


def test_a_white_rule_makes_an_off_white_background_pure_and_amazon_filled_to_85():
    d = deliverable("amazon", labelled=False)
    made = make(product_shot(), d, PROVENANCE)
    with Image.open(io.BytesIO(made.data)) as im:
        a = np.asarray(im.convert("RGB"))
    assert (a[:40] == 255).all() and (a[-40:] == 255).all()  # pure RGB 255, JPEG and all
    left, top, right, bottom = made.product
    assert max(right - left, bottom - top) / 2000 >= 0.85
    assert plain_background(product_shot()) == (247, 246, 244)


def test_a_scene_on_a_white_channel_is_marked_with_what_it_breaks():
    d = deliverable("amazon", labelled=False)
    made = make(scene(), d, PROVENANCE)
    assert made.product is None
    assert [f.code for f in check(d, made)] == ["background", "no_product"]
    assert check(d, made)[0].details["percent"] < 50


def test_the_visible_label_is_at_least_five_percent_of_the_short_side_in_its_corner():
    for channel in ("taobao", "douyin", "xiaohongshu"):
        d = deliverable(channel)
        made = make(product_shot(), d, PROVENANCE)
        assert made.label is not None
        W, H = d.rendition.size
        left, top, right, bottom = made.label
        assert (bottom - top) / min(W, H) >= 0.05
        top_m, right_m, bottom_m, _ = d.rendition.safe  # bottom right, inside the safe area
        assert right <= W * (1 - right_m) and bottom <= H * (1 - bottom_m)
        assert left > W / 2 and top > H / 2
    bare = make(product_shot(), deliverable("taobao", labelled=False), PROVENANCE)
    assert bare.label is None
    d = deliverable("taobao")
    assert [f.code for f in check(d, bare)] == ["label_missing"]  # asked for, not drawn


def test_the_label_where_it_is_drawn_changes_the_pixels_and_nowhere_else():
    base = make(product_shot(), deliverable("taobao", labelled=False), PROVENANCE)
    labelled = make(product_shot(), deliverable("taobao"), PROVENANCE)
    a = np.asarray(Image.open(io.BytesIO(base.data)).convert("L"), dtype=np.int16)
    b = np.asarray(Image.open(io.BytesIO(labelled.data)).convert("L"), dtype=np.int16)
    changed = np.argwhere(np.abs(a - b) > 40)
    assert len(changed)
    top, left = changed.min(axis=0)
    assert top > 600 and left > 500  # only the bottom-right corner of the 800 px frame


def test_the_implicit_label_and_the_colour_profile_are_in_every_format():
    for fmt in ("jpg", "webp", "png"):
        d = deliverable("taobao", format=fmt, file="{sku}.{ext}")
        made = make(product_shot(), d, PROVENANCE)
        with Image.open(io.BytesIO(made.data)) as im:
            fields = read_implicit_label(im.info)
            assert fields is not None, fmt
            assert fields["Label"] == "1" and fields["ContentProducer"] == "genbot-test"
            assert fields["ProduceID"] == "genbot-b1-j1"
            pixels = im.convert("RGB").tobytes()
            assert im.info.get("icc_profile")
        if fmt == "png":  # lossless: the integrity field is the pixels' own hash
            import hashlib
            assert fields["ReservedCode1"] == hashlib.sha256(pixels).hexdigest()
        assert check(d, made) == []


def test_exiftool_reads_the_implicit_label(tmp_path):
    tool = str(exiftool())
    for fmt in ("jpg", "webp", "png"):
        d = deliverable("taobao", format=fmt, file="{sku}.{ext}")
        path = tmp_path / f"x.{fmt}"
        path.write_bytes(make(product_shot(), d, PROVENANCE).data)
        out = subprocess.run([tool, "-j", "-XMP:all", str(path)], capture_output=True,
                             text=True, check=True)
        value = json.loads(out.stdout)[0]["Aigc"]
        assert json.loads(value)["Label"] == "1", fmt


def test_a_file_over_its_channels_size_is_made_at_a_lower_quality_or_marked():
    d = deliverable("wechat_moments")  # 300 KiB
    noisy = scene((1024, 1024))
    made = make(noisy, d, PROVENANCE)
    assert made.quality is not None and made.quality < 85  # lowered to fit
    assert len(made.data) <= 300 * 1024 and check(d, made) == []
    tiny = deliverable("wechat_moments", max_kb=20)
    made = make(noisy, tiny, PROVENANCE)
    assert made.quality == 60
    assert [(f.code, f.details["max_kib"]) for f in check(tiny, made)] == [("file_size", 20)]


def test_crop_keeps_the_product_in_a_frame_of_another_aspect():
    wide = Image.new("RGB", (1600, 900), (250, 250, 250))
    ImageDraw.Draw(wide).ellipse((1250, 300, 1450, 700), fill=(20, 90, 200))  # far right
    d = deliverable("douyin")  # 9:16 from 16:9
    made = make(wide, d, PROVENANCE)
    left, top, right, bottom = made.product
    assert left > 0 and right < 1080  # the product whole, though the frame is a third of it


def test_a_rendition_of_a_size_it_does_not_have_is_found_by_the_check():
    d = deliverable("taobao")
    made = make(product_shot(), d, PROVENANCE)
    other = Deliverable("taobao", Rendition("main", (700, 700)), "x.jpg", d.label)
    found = check(other, made)
    assert [f.code for f in found] == ["size"]
    assert found[0].plain() == {"check": "size", "width": 800, "height": 800,
                                "want_width": 700, "want_height": 700}


def test_a_signed_file_carries_credentials_c2pas_own_reader_validates(tmp_path):
    from templates import provenance
    creds = provenance.local_credentials(tmp_path / "c2pa")
    assert provenance.local_credentials(tmp_path / "c2pa") == creds  # made once, then read
    signer = provenance.Signer(creds)
    photo = io.BytesIO()
    product_shot((256, 256)).save(photo, "PNG")
    for fmt in ("jpg", "png", "webp"):
        d = deliverable("taobao", format=fmt, file="{sku}.{ext}")
        made = make(product_shot(), d, PROVENANCE)
        data = signer.sign(made.data, fmt, f"A1.{fmt}", {"template": "product_main", "row": 2},
                           [("bottle.png", photo.getvalue())], model="sdxl")
        trusted = provenance.read(data, fmt, anchors=creds.anchors)
        assert (trusted.state, trusted.failures) == ("Trusted", []), fmt
        assert provenance.read(data, fmt).state == "Valid"  # a root it was not told of
        actions = next(a for a in trusted.manifest["assertions"]
                       if a["label"].startswith("c2pa.actions"))["data"]["actions"]
        created = actions[0]
        assert created["action"] == "c2pa.created"
        assert created["digitalSourceType"] == provenance.TRAINED
        assert created["softwareAgent"]["name"] == "genbot (sdxl)"
        assert [i["title"] for i in trusted.manifest["ingredients"]] == ["bottle.png"]
        about = next(a for a in trusted.manifest["assertions"] if a["label"] == "com.genbot.job")
        assert about["data"] == {"template": "product_main", "row": 2}
        with Image.open(io.BytesIO(data)) as im:  # the implicit label survives the signing
            assert read_implicit_label(im.info)["Label"] == "1"
        signed = dataclasses.replace(made, data=data, signed=True)
        assert check(d, signed) == []
        at = data.index(b"genbot-b1-j1")  # one byte of the implicit label changed
        tampered = dataclasses.replace(signed, data=data[:at] + b"X" + data[at + 1:])
        assert provenance.read(tampered.data, fmt).state == "Invalid", fmt
        # (a PNG's chunk checksum gives it away before the signature does)
        assert [f.code for f in check(d, tampered)] == ["unreadable" if fmt == "png" else "c2pa"]
