"""Layouts (templates.layouts): read and checked like templates, bound per row (locale,
price, words that fit or a refusal naming the column), and drawn on a channel's file
(templates.renditions) — the words, price, badge and logo where the layout puts them, the
AI label clear of them."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

from bot.app.application import Accepted, SubmitOptions
from bot.errors import Invalid
from bot.intake.check import IntakeReport, SheetFile
from templates import layouts
from templates.channels import catalogue as channel_catalogue
from templates.channels import plan
from templates.jobs import decode
from templates.layouts import Binder, LayoutError, LayoutProblem, load_file
from templates.renditions import Provenance, make
from templates.settings import AssetsConfig
from tests.fakes.apps import ALICE, PRODUCTS, app_on, pictures
from tests.fakes.media import product_png, product_shot

RED_PLATE = "#e4393c"


def team_layout(assets, body: dict, name: str = "ours"):
    folder = assets / "layouts"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")
    return folder / f"{name}.json"


def logo_png(path, colour=(0, 0, 255, 255), size=(200, 100)):
    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.new("RGBA", size, (0, 0, 0, 0))
    im.paste(colour, (10, 10, size[0] - 10, size[1] - 10))
    im.save(path)
    return path


SIMPLE = {"title": "Ours", "title_zh": "我们的",
          "locales": {"zh": {"currency": "CNY", "numbers": "zh_CN"},
                      "en": {"currency": "USD", "numbers": "en_US"},
                      "ar": {"currency": "AED", "numbers": "ar_AE", "direction": "rtl"}},
          "aspects": {"1:1": [
              {"kind": "text", "text": "{headline}", "box": [0.05, 0.05, 0.9, 0.15],
               "size": 0.07, "min_size": 0.03, "plate": "#000000"},
              {"kind": "logo", "asset": "brand/logo.png", "box": [0.05, 0.25, 0.2, 0.1]},
              {"kind": "price", "text": {"zh": "到手价 {price}", "en": "Now {price}",
                                         "ar": "{price}"},
               "box": [0.55, 0.82, 0.4, 0.13], "plate": RED_PLATE, "min_size": 0.03}],
              "9:16": [{"kind": "picture", "box": [0, 0.3, 1, 0.7]},
                       {"kind": "text", "text": "{headline}", "box": [0.05, 0.05, 0.9, 0.2],
                        "size": 0.09, "min_size": 0.03}]}}


@pytest.fixture
def assets(tmp_path):
    folder = tmp_path / "assets"
    logo_png(folder / "brand" / "logo.png")
    team_layout(folder, SIMPLE)
    return folder


def binder(assets, name="ours"):
    kept = {}

    def keep(path):
        kept[path.name] = path
        return str(path)
    return Binder(layouts.chosen(name, assets), assets, keep), kept


def test_the_shipped_layout_and_a_teams_own_are_listed_and_read():
    found = layouts.catalogue(None)
    assert "launch" in found
    launch = layouts.chosen("launch", None)
    assert set(launch.aspects) >= {"1:1", "3:4", "9:16", "16:9"}
    assert list(launch.locales)[0] == "zh" and launch.locales["ar"].direction == "rtl"
    assert layouts.layout_columns(launch) == ["headline", "logo", "price"]


def test_a_teams_layout_is_found_in_the_assets_folder_and_a_typo_gets_its_nearest(assets):
    assert set(layouts.catalogue(assets)) == {"launch", "ours"}
    with pytest.raises(layouts.Unknown) as e:
        layouts.chosen("our", assets)
    assert e.value.close == "ours"


@pytest.mark.parametrize("change, where, says", [
    ({"colour_of_it": 1}, "-", "unknown field"),
    ({"aspects": {"square": []}}, "aspects.square", '"W:H"'),
    ({"aspects": {"1:1": [{"kind": "text", "text": "{h}", "box": [0.5, 0, 0.6, 0.1]}]}},
     'aspects["1:1"][0].box', "inside the frame"),
    ({"aspects": {"1:1": [{"kind": "text", "text": "{h}", "box": [0, 0, 1, 0.1],
                           "colour": "ink"}]}}, 'aspects["1:1"][0].colour', "a colour"),
    ({"aspects": {"1:1": [{"kind": "price", "text": "", "box": [0, 0, 1, 0.1]}]}},
     'aspects["1:1"][0].text', "needs words"),
    ({"aspects": {"1:1": [{"kind": "text", "text": "{h}", "box": [0, 0, 1, 0.1],
                           "size": 0.01, "min_size": 0.02}]}}, 'aspects["1:1"][0].size',
     "min_size ≤ size"),
    ({"locales": {"zh": {"currency": "RMB"}}}, "locales.zh.currency", "ISO 4217"),
    ({"locales": {"zh": {"font": "fonts/none.ttf"}}}, "locales.zh.font", ".ttf, .otf or .ttc"),
    ({"aspects": {"1:1": [{"kind": "logo", "asset": "missing.png", "box": [0, 0, 1, 0.1]}]}},
     'aspects["1:1"][0].asset', "no such file"),
    ({"aspects": {"1:1": [{"kind": "logo", "asset": "notes.txt", "box": [0, 0, 1, 0.1]}]}},
     'aspects["1:1"][0].asset', "is not a picture"),
])
def test_a_layout_that_cannot_be_used_says_its_file_key_and_what_was_expected(
        tmp_path, change, where, says):
    assets = tmp_path / "assets"
    assets.mkdir()
    (assets / "notes.txt").write_text("not a logo")
    path = team_layout(assets, {**SIMPLE, **change}, "broken")
    with pytest.raises(LayoutError) as e:
        load_file(path, assets)
    assert e.value.file == str(path) and e.value.where == where
    assert says in e.value.message


def test_a_rows_locale_sets_its_price_its_fixed_words_and_for_arabic_mirrors_the_boxes(assets):
    b, _ = binder(assets)
    zh = b.bind({"headline": "夏季新款", "price": 129.9}, (800, 800), (0, 0, 0, 0), "taobao main")
    en = b.bind({"headline": "Summer", "price": "1,299", "Locale": "en_us"}, (800, 800),
                (0, 0, 0, 0), "x")
    ar = b.bind({"headline": "قميص", "price": 99, "语言": "ar"}, (800, 800), (0, 0, 0, 0), "x")
    assert (zh.locale, en.locale, ar.locale) == ("zh", "en", "ar")
    assert [e.words for e in zh.elements if e.kind == "price"] == ["到手价 ¥129.90"]
    assert [e.words for e in en.elements if e.kind == "price"] == ["Now $1,299.00"]
    assert "د.إ" in next(e.words for e in ar.elements if e.kind == "price")
    price_box = next(e.box for e in ar.elements if e.kind == "price")
    assert price_box == pytest.approx((0.05, 0.82, 0.4, 0.13))  # mirrored from x=0.55
    assert ar.rtl and next(e.align for e in ar.elements if e.kind == "price") == "center"


@pytest.mark.parametrize("row, code, column", [
    ({"headline": "x", "price": "abc"}, "layout_price", "price"),
    ({"headline": "", "price": 9}, "layout_empty_field", "headline"),
    ({"headline": "x", "price": 9, "locale": "fr"}, "layout_locale_unknown", "locale"),
    ({"headline": "很长的标题" * 60, "price": 9}, "layout_overflow", "headline"),
])
def test_a_row_the_layout_cannot_use_is_refused_naming_its_column(assets, row, code, column):
    b, _ = binder(assets)
    with pytest.raises(LayoutProblem) as e:
        b.bind(row, (800, 800), (0, 0, 0, 0), "taobao main")
    assert (e.value.code, e.value.column) == (code, column)


def test_words_are_shrunk_to_fit_before_a_row_is_refused(assets):
    b, _ = binder(assets)
    short = b.bind({"headline": "新品", "price": 1}, (800, 800), (0, 0, 0, 0), "x")
    longer = b.bind({"headline": "夏季新款冰丝凉感短袖T恤 男女同款 透气速干 多色可选",
                     "price": 1}, (800, 800), (0, 0, 0, 0), "x")
    small, large = (layouts.set_words(o.elements[0], (800, 800), (0, 0, 0, 0), "").size
                    for o in (longer, short))
    assert small < large <= round(0.07 * 800)
    assert small >= round(0.03 * 800)  # still at or above min_size: it fit


def test_a_logo_a_column_names_must_be_a_picture_in_the_assets_folder(tmp_path):
    assets = tmp_path / "assets"
    (assets / "logos").mkdir(parents=True)
    (assets / "logos" / "acme.png").write_bytes(b"GIF89a this is not a picture")
    logo_png(assets / "logos" / "zenith.png")
    team_layout(assets, {**SIMPLE, "aspects": {"1:1": [
        {"kind": "logo", "asset": "logos/{brand}.png", "box": [0, 0, 0.2, 0.1]}]}})
    b, kept = binder(assets)
    assert b.bind({"brand": "zenith"}, (800, 800), (0, 0, 0, 0), "x").elements[0].logo
    assert "zenith.png" in kept
    for brand, code in (("acme", "layout_logo_not_image"), ("nobody", "layout_logo_missing"),
                        ("../../etc", "layout_logo_missing")):
        with pytest.raises(LayoutProblem) as e:
            b.bind({"brand": brand}, (800, 800), (0, 0, 0, 0), "x")
        assert (e.value.code, e.value.column) == (code, "brand")


def ink(im, box, colour, tolerance=40):
    """The share of `box`'s pixels within `tolerance` of `colour`."""
    a = np.asarray(im.convert("RGB").crop(box), dtype=np.int16)
    return float((np.abs(a - np.array(colour)).max(axis=2) <= tolerance).mean())


def test_a_channels_file_carries_the_words_price_and_logo_where_the_layout_puts_them(assets):
    b, _ = binder(assets)
    p = plan(channel_catalogue(), ["taobao", "amazon"], layout=b, unlabelled=["amazon"])
    files = p.bind(p.every_row, {"sku": "A1", "headline": "夏季新款", "price": 129})
    main = next(d for d in files if d.channel == "taobao" and d.rendition.name == "main")
    amazon = next(d for d in files if d.channel == "amazon")
    assert amazon.overlay is None  # a file that allows no words gets no layout
    made = make(product_shot(), main, Provenance("genbot", "t"), asset=lambda n: assets / n)
    im = Image.open(io.BytesIO(made.data))
    W = im.width
    price = (round(0.55 * W), round(0.82 * W), round(0.95 * W), round(0.95 * W))
    logo = (round(0.05 * W), round(0.25 * W), round(0.25 * W), round(0.35 * W))
    headline = (round(0.05 * W), round(0.05 * W), round(0.95 * W), round(0.2 * W))
    assert ink(im, price, (0xE4, 0x39, 0x3C)) > 0.5  # the plate, with white words on it
    assert ink(im, price, (255, 255, 255)) > 0.02
    assert ink(im, logo, (0, 0, 255)) > 0.3
    assert ink(im, headline, (0, 0, 0)) > 0.5 and ink(im, headline, (255, 255, 255)) > 0.02
    # the AI label (bottom right by default) moved clear of the price plate there
    x0, y0, x1, y1 = made.label
    assert not (x0 < price[2] and price[0] < x1 and y0 < price[3] and price[1] < y1)


def test_a_picture_box_puts_the_picture_there_and_the_layouts_background_around(assets):
    b, _ = binder(assets)
    p = plan(channel_catalogue(), ["douyin"], layout=b)
    cover = p.bind(p.every_row, {"sku": "A1", "headline": "新品", "price": 1})[0]
    assert cover.overlay.aspect == "9:16" and cover.overlay.picture == (0, 0.3, 1, 0.7)
    made = make(product_shot(), cover, Provenance("genbot", "t"))
    im = Image.open(io.BytesIO(made.data))
    W, H = im.size
    # the band above the picture is the layout's white; the product sits below 30 %
    assert ink(im, (0, round(0.22 * H), W, round(0.29 * H)), (255, 255, 255), 6) > 0.99
    assert made.product is not None and made.product[1] >= round(0.3 * H)


# --- a submission's layout, and the executor drawing it ------------------------------------

LAUNCH_SHEET = SheetFile("p.csv", "sku,product_image,prompt,headline,price,语言\n"
                                  "A1,bottle.png,a bottle,夏季新款,129,\n"
                                  "A2,bottle.png,a jar,Summer jar,59.5,en\n".encode())


@pytest.fixture
async def app(tmp_path, db_url, assets):
    async with app_on(tmp_path, db_url, assets={"dir": str(assets)}) as made:
        yield made


async def test_a_submissions_layout_binds_each_rows_words_and_keeps_its_logo_in_the_store(app):
    done = await app.submit(ALICE, "product_main", LAUNCH_SHEET, pictures, SubmitOptions(
        wait_for_executor=True, channels=("taobao", "douyin"), layout="ours"))
    assert isinstance(done, Accepted), done
    jobs = [decode(j.workflow) for j in await app.queue.batch_jobs(done.batch_id)]
    first = jobs[0].deliver[0].overlay
    assert (first.layout, first.aspect, first.locale) == ("ours", "1:1", "zh")
    assert [e.words for e in first.elements if e.kind != "logo"] == ["夏季新款", "到手价 ¥129.00"]
    logo = next(e.logo for e in first.elements if e.kind == "logo")
    assert app.store.path(logo).read_bytes() == \
        (layouts_folder(app) / "brand" / "logo.png").read_bytes()
    assert jobs[1].deliver[0].overlay.locale == "en"
    assert next(d for d in jobs[0].deliver if d.channel == "douyin").overlay.aspect == "9:16"
    report = await app.submit(ALICE, "product_main", LAUNCH_SHEET, pictures, SubmitOptions(
        channels=("taobao",), layout="ours", dry_run=True))
    assert report.unused_columns == []  # headline, price and 语言 are the layout's


def layouts_folder(app):
    return app.config.path(app.config[AssetsConfig].dir)


@pytest.mark.parametrize("lang, says", [
    ("en", 'No layout "ous" — did you mean "ours"? Layouts: launch, ours.'),
    ("zh", "没有名为“ous”的版式——您是想用“ours”吗？")])
async def test_an_unknown_layout_is_refused_before_the_sheet_is_read(app, lang, says):
    with pytest.raises(Invalid) as caught:
        await app.submit(ALICE, "product_main", SheetFile("p.csv", b"not read"), pictures,
                         SubmitOptions(channels=("taobao",), layout="ous"))
    assert caught.value.render(lang).startswith(says), caught.value.render(lang)


async def test_a_sheet_the_layout_cannot_use_says_which_file_row_and_column(app):
    report = await app.submit(ALICE, "product_main", PRODUCTS, pictures, SubmitOptions(
        channels=("taobao",), layout="ours"))
    assert isinstance(report, IntakeReport) and not report.jobs
    assert 'p.csv: layout ours reads the column "headline", and the sheet has none' in \
        report.report("en")
    assert "版式 ours 要读取“headline”列" in report.report("zh")
    long = SheetFile("p.csv", ("sku,product_image,prompt,headline,price\n"
                               "A1,bottle.png,a,新品,9\n"
                               f"A2,bottle.png,b,{'很长的标题' * 60},9\n"
                               "A3,bottle.png,c,新品,九块九\n").encode())
    report = await app.submit(ALICE, "product_main", long, pictures, SubmitOptions(
        channels=("taobao",), layout="ours"))
    assert [(p["row"], p["column"], p["code"]) for p in report.problems()] == [
        (3, "headline", "layout_overflow"), (4, "price", "layout_price")]
    assert "does not fit its box in taobao main (800×800) even at 24 px" in report.report("en")
    assert "即使缩小到 24 像素也放不进" in report.report("zh")


async def test_the_executor_draws_the_layout_from_what_the_store_keeps(app, tmp_path):
    from executor.deliver import Packer
    done = await app.submit(ALICE, "product_main", LAUNCH_SHEET, pictures, SubmitOptions(
        wait_for_executor=True, channels=("taobao",), layout="ours"))
    lease = await app.queue.claim("test-executor")
    path = app.store.write(f"outputs/batch_{lease.batch_id}/{lease.job_id}.png", product_png())
    made = await Packer(app.config, app.queue.db).run(lease, [path])
    main = next(r for r in made if r.rendition == "main")
    with Image.open(app.store.path(main.path)) as im:
        W = im.width
        assert ink(im, (round(0.05 * W), round(0.25 * W), round(0.25 * W), round(0.35 * W)),
                   (0, 0, 255)) > 0.3  # the team's logo, read from the file store
        assert ink(im, (round(0.55 * W), round(0.82 * W), round(0.95 * W), round(0.95 * W)),
                   (0xE4, 0x39, 0x3C)) > 0.5
    assert main.passed, main.findings
    assert done.jobs == 2
