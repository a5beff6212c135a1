"""Checks of a generated picture before a person looks (executor.inspection): the real
NudeNet and RapidOCR models that ship in their packages, on pictures drawn here."""

from __future__ import annotations

import io

import pytest
from PIL import Image, ImageDraw

from executor.deliver import pack
from executor.inspection import Inspector, misspelt, nsfw_findings, prompts, quoted
from storage.config import ConfigError
from storage.config import from_dict as config_from
from storage.files import FileStore
from templates.channels import plan, presets
from templates.fonts import load_font
from templates.jobs import ComfyJob, DiffusersJob, Step
from tests.fakes.media import product_shot


def poster(*lines: str) -> Image.Image:
    """A poster with `lines` written large on it, as a text-rendering model draws them."""
    im = product_shot()
    draw = ImageDraw.Draw(im)
    for i, line in enumerate(lines):
        draw.text((60, 60 + i * 130), line, font=load_font("", 88), fill=(25, 25, 25))
    return im


def job(prompt: str, channels=("taobao",), **kw) -> DiffusersJob:
    chosen = plan(presets(), channels, unlabelled=["amazon"])
    return DiffusersJob(template="poster_zh", row=2, params={}, outputs={},
                        nodes=[Step("encode", "encode", {"prompt": prompt,
                                                         "negative_prompt": "“水印”"})],
                        deliver=chosen.bind(chosen.every_row, {"sku": "S1"}), **kw)


def test_the_phrases_a_prompt_quotes_are_what_the_model_was_asked_to_write():
    assert quoted(['海报顶部写着“夏日特惠”，价签写着“¥129”', 'a sign saying "OPEN"',
                   "「新品」 and 『限时』", '"" and “ ” and “夏日特惠”']) == \
        ["夏日特惠", "¥129", "OPEN", "新品", "限时"]
    assert prompts(job("写着“夏日特惠”")) == ["写着“夏日特惠”"]  # not the negative prompt
    comfy = ComfyJob(template="c", row=2, params={}, outputs={}, prompt={
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "写着“新品”"},
              "_meta": {"title": "CLIP Text Encode (Positive Prompt)"}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "“水印”"},
              "_meta": {"title": "CLIP Text Encode (Negative Prompt)"}}})
    assert prompts(comfy) == ["写着“新品”"]


def test_spelling_is_compared_on_letters_and_a_near_miss_says_what_was_read():
    assert misspelt("夏日特惠", ["夏日 特惠！清凉一夏"]) is None
    assert misspelt("Summer Sale", ["SUMMER-SALE 50%"]) is None
    ratio, read = misspelt("夏日特惠", ["夏日特价 清凉一夏"])
    assert read == "夏日特价" and 0.7 <= ratio < 0.85
    assert misspelt("夏日特惠", []) == (0.0, "")


@pytest.fixture(scope="module")
def inspector():
    return Inspector(frozenset({"nsfw", "text", "words"}))


def test_words_a_prompt_quotes_are_read_back_and_a_misspelling_is_found(inspector):
    picture = poster("夏日特惠 清凉一夏", "到手价 ¥129")
    assert inspector.inspect(picture, job("顶部写着“夏日特惠 清凉一夏”，价签“¥129”", ("jd",))) \
        == [[]]
    ((found,),) = inspector.inspect(picture, job("顶部写着“夏日特价”", ("jd",)))
    assert found.code == "text" and found.details["want"] == "夏日特价"
    assert found.details["read"] == "夏日特惠"


def test_a_picture_with_words_is_refused_only_for_a_channel_that_allows_none(inspector):
    words = inspector.inspect(poster("限时特价"), job("a bottle", ("amazon", "jd")))
    assert [[f.code for f in fs] for fs in words] == [["words"], []]  # amazon main, jd main
    assert "限时特价" in words[0][0].details["read"]
    assert inspector.inspect(product_shot(), job("a bottle", ("amazon",))) == [[]]


def test_a_safe_picture_passes_the_real_detector_and_exposed_parts_are_a_finding(inspector):
    assert inspector.inspect(product_shot(), job("a bottle", ("jd",))) == [[]]
    found = nsfw_findings([
        {"class": "FACE_FEMALE", "score": 0.9, "box": [0, 0, 9, 9]},
        {"class": "FEMALE_BREAST_COVERED", "score": 0.8, "box": [0, 0, 9, 9]},
        {"class": "BUTTOCKS_EXPOSED", "score": 0.62, "box": [0, 0, 9, 9]},
        {"class": "FEMALE_BREAST_EXPOSED", "score": 0.71, "box": [0, 0, 9, 9]},
        {"class": "MALE_GENITALIA_EXPOSED", "score": 0.3, "box": [0, 0, 9, 9]}])
    assert [(f.code, f.details) for f in found] == [("nsfw", {
        "parts": "female_breast_exposed, buttocks_exposed", "percent": 71})]
    assert nsfw_findings([{"class": "FACE_MALE", "score": 0.99, "box": [0, 0, 1, 1]}]) == []


def test_every_file_made_from_a_misspelt_picture_needs_review_and_says_why(tmp_path, inspector):
    store = FileStore(tmp_path)
    buf = io.BytesIO()
    poster("夏日特惠").save(buf, "PNG")
    out = store.write("outputs/batch_1/1.png", buf.getvalue())
    made = pack(store, job("写着“冬日特惠”", ("jd", "douyin")), 1, 1, [out],
                producer="genbot", inspector=inspector)
    assert [[f["check"] for f in r.findings] for r in made] == [["text"], ["text"]]
    assert made[0].findings[0]["read"] == "夏日特惠"
    plain = pack(store, job("写着“冬日特惠”", ("jd", "douyin")), 1, 1, [out],
                 producer="genbot")
    assert [r.findings for r in plain] == [[], []]


def test_the_checks_a_config_names_must_be_known(tmp_path):
    with pytest.raises(ConfigError, match=r'\[deliver\] checks: "ocr" is no check; expected '
                                          "some of nsfw, text, words"):
        config_from({"service": {"data_dir": str(tmp_path)}, "deliver": {"checks": ["ocr"]}})


def keeping_job(product: str, mask: str | None = None) -> DiffusersJob:
    return DiffusersJob(template="product_main", row=2, params={"product_image": product},
                        outputs={"save": "A1/2.png"}, nodes=[
                            Step("g", "generate", {"prompt": "a bottle"}),
                            Step("keep_save", "keep_product", {
                                "image": {"@": "g.image"}, "product": product, "mask": mask,
                                "blend": 2, "shadow": 0.0, "beside": "A1/2.png"}),
                            Step("save", "save", {"image": {"@": "keep_save.image"},
                                                  "name": "A1/2.png", "format": "png"})],
                        deliver=job("a bottle", ("jd",)).deliver)


@pytest.mark.parametrize("mask_at", ["photo", "column", "matting"])
def test_a_kept_product_that_is_not_the_photos_pixels_needs_review(tmp_path, mask_at):
    """Wherever its mask comes from (the photo's transparency, a mask column, the mask the
    background-removal model cut and saved beside the image)."""
    store = FileStore(tmp_path)
    photo = product_shot((256, 256))
    mask = Image.new("L", (256, 256), 0)
    ImageDraw.Draw(mask).rectangle((90, 60, 170, 220), fill=255)  # the bottle, roughly
    buf, mbuf = io.BytesIO(), io.BytesIO()
    photo.save(buf, "PNG")
    mask.save(mbuf, "PNG")
    product = store.put_input(buf.getvalue())
    column = None
    if mask_at == "photo":
        store.write(store.mask_of(product), mbuf.getvalue())
    elif mask_at == "column":
        column = store.put_input(mbuf.getvalue(), ".mask.png")
    else:
        store.write("outputs/batch_7/A1/2.mask.png", mbuf.getvalue())
    scene = Image.new("RGB", (512, 512), (30, 90, 60))  # made at twice the photo's size
    kept = Image.composite(photo.resize((512, 512), Image.Resampling.LANCZOS), scene,
                           mask.resize((512, 512), Image.Resampling.LANCZOS)
                           .point(lambda v: 255 if v >= 128 else 0))
    checks = Inspector(frozenset({"product"}))
    assert checks.inspect(kept, keeping_job(product, column), store, 7) == [[]]
    drifted = kept.copy()
    ImageDraw.Draw(drifted).rectangle((190, 130, 330, 300), fill=(40, 40, 200))  # repainted
    ((found,),) = checks.inspect(drifted, keeping_job(product, column), store, 7)
    assert found.code == "product" and found.details["want"] == 98
    assert 20 < found.details["percent"] < 90
    plain = DiffusersJob(template="t", row=2, params={}, outputs={}, nodes=[],
                         deliver=keeping_job(product).deliver)
    assert checks.inspect(drifted, plain, store, 7) == [[]]  # it keeps no product
