"""A submission's sales channels (`/gen … --channels taobao,douyin`, a sheet's `channels`
column, the API's `channels`), bound into each row's job; and the executor making,
checking and recording every rendition after the job's image."""

from __future__ import annotations

import io

import msgspec
import pytest
from PIL import Image

from bot.app.application import Accepted, SubmitOptions
from bot.errors import Invalid
from bot.intake.check import IntakeReport, SheetFile
from storage.files import FileStore
from storage.renditions import Renditions
from templates.jobs import decode
from templates.renditions import read_implicit_label
from tests.conftest import executor_config
from tests.fakes.apps import ALICE, PRODUCTS, app_on, pictures
from tests.fakes.executor import Harness


@pytest.fixture
async def app(tmp_path, db_url):
    async with app_on(tmp_path, db_url) as made:
        yield made


async def submitted(app, sheet=PRODUCTS, template="product_main", **options):
    done = await app.submit(ALICE, template, sheet, pictures,
                            SubmitOptions(wait_for_executor=True, **options))
    assert isinstance(done, Accepted), done.report() if isinstance(done, IntakeReport) else done
    return [decode(j.workflow) for j in await app.queue.batch_jobs(done.batch_id)]


async def test_every_row_gets_each_channels_files_named_by_its_pattern(app):
    jobs = await submitted(app, channels=("taobao", "douyin"))
    assert [[(d.channel, d.rendition.name, d.file) for d in j.deliver] for j in jobs] == [
        [("taobao", "main", "A1_taobao_1.jpg"), ("taobao", "portrait", "A1_taobao_2.jpg"),
         ("taobao", "white", "A1_taobao_white.png"), ("douyin", "cover", "A1_douyin_1.jpg")],
        [("taobao", "main", "A2_taobao_1.jpg"), ("taobao", "portrait", "A2_taobao_2.jpg"),
         ("taobao", "white", "A2_taobao_white.png"), ("douyin", "cover", "A2_douyin_1.jpg")]]
    assert all(d.label is not None and d.label.text == "AI生成" for d in jobs[0].deliver)
    plain = await submitted(app)
    assert [j.deliver for j in plain] == [[], []]


async def test_a_sheets_channels_column_adds_a_rows_own(app):
    sheet = SheetFile("p.csv", b"sku,product_image,prompt,channels\n"
                               b"A1,bottle.png,a bottle,jd\nA2,bottle.png,a jar,\n")
    jobs = await submitted(app, sheet, channels=("pinduoduo",))
    assert [[d.channel for d in j.deliver] for j in jobs] == [["pinduoduo", "jd"], ["pinduoduo"]]
    report = await app.submit(ALICE, "product_main", sheet, pictures, SubmitOptions(
        wait_for_executor=True, dry_run=True))
    assert report.unused_columns == []  # the channels column is read, not unused


async def test_a_sweeps_jobs_of_one_row_get_names_of_their_own(app):
    jobs = await submitted(app, channels=("jd",), vary=("steps=1,2",))
    assert sorted(d.file for j in jobs for d in j.deliver) == \
        ["A1_jd_1-2.jpg", "A1_jd_1.jpg", "A2_jd_1-2.jpg", "A2_jd_1.jpg"]


@pytest.mark.parametrize("lang, says", [
    ("en", 'No sales channel "douyn" — did you mean "douyin"?'),
    ("zh", "没有销售渠道“douyn”——是不是“douyin”？")])
async def test_an_unknown_channel_is_refused_before_the_sheet_is_read(app, lang, says):
    with pytest.raises(Invalid) as caught:
        await app.submit(ALICE, "product_main", SheetFile("p.csv", b"not read"), pictures,
                         SubmitOptions(channels=("taobao", "douyn")))
    assert caught.value.render(lang).startswith(says), caught.value.render(lang)


async def test_a_rule_no_picture_of_the_template_can_meet_is_refused_in_one_sentence(app):
    with pytest.raises(Invalid) as caught:  # Amazon's main image: no words, label optional
        await app.submit(ALICE, "product_main", PRODUCTS, pictures,
                         SubmitOptions(channels=("amazon",)))
    assert caught.value.code == "channel_label_words"
    assert "[deliver] unlabelled" in caught.value.render("en")
    assert "[deliver] unlabelled" in caught.value.render("zh")
    with pytest.raises(Invalid) as caught:  # social_thumb writes a title over its picture
        await app.submit(ALICE, "social_thumb", PRODUCTS, pictures,
                         SubmitOptions(channels=("taobao",)))
    assert caught.value.code == "channel_words"
    assert "text, watermark" in caught.value.render("en")


async def test_an_admin_may_leave_the_label_off_an_optional_channel(tmp_path, db_url):
    from storage import config as cfg
    from tests.fakes.apps import App, FakeClock, load_templates, open_queue, open_store
    config = cfg.from_dict({"service": {"data_dir": str(tmp_path / "data")},
                            "database": {"url": db_url}, "deliver": {"unlabelled": ["amazon"]},
                            "chat": {"submitters": ["test:ALICE"]}})
    queue = await open_queue(config, clock=FakeClock(1.8e9))
    try:
        app = App(config, queue, open_store(config), load_templates(config))
        jobs = await submitted(app, channels=("amazon",))
        assert [(d.file, d.label) for d in jobs[0].deliver] == [("A1.MAIN.jpg", None)]
    finally:
        await queue.close()


async def test_a_sheet_whose_rows_cannot_name_their_files_says_which_row_and_column(app):
    no_sku = SheetFile("p.csv", b"product_image,prompt\nbottle.png,a bottle\n")
    report = await app.submit(ALICE, "product_main", no_sku, pictures,
                              SubmitOptions(channels=("taobao",)))
    assert isinstance(report, IntakeReport) and not report.jobs
    assert 'p.csv: channel taobao names its files by "{sku}", and the sheet has no "sku" ' \
        "column: add one" in report.report("en")
    assert "渠道 taobao 用“{sku}”给文件命名" in report.report("zh")
    unknown = SheetFile("p.csv", b"sku,product_image,prompt,channels\nA1,bottle.png,a,\n"
                                 b"A3,bottle.png,d,ebay\n")
    report = await app.submit(ALICE, "product_main", unknown, pictures,
                              SubmitOptions(channels=("jd",)))
    assert [(p["row"], p["column"], p["code"]) for p in report.problems()] == [
        (3, "channels", "channel_unknown")]


async def test_rows_of_one_sku_get_files_of_their_own_and_the_report_says_so(app):
    twice = SheetFile("p.csv", b"sku,product_image,prompt\nA1,bottle.png,a\n"
                               b"A1,bottle.png,b\nA1,bottle.png,c\n")
    report = await app.submit(ALICE, "product_main", twice, pictures,
                              SubmitOptions(channels=("jd",), dry_run=True))
    assert report.ok and [n.code for n in report.notes] == ["channel_files_repeat"]
    assert '2 file names repeat ones earlier rows give (first, row 3: "A1_jd_1.jpg", as ' \
        "row 2)" in report.report("en")
    jobs = await submitted(app, twice, channels=("jd",))
    assert [d.file for j in jobs for d in j.deliver] == \
        ["A1_jd_1.jpg", "A1_jd_1-2.jpg", "A1_jd_1-3.jpg"]


async def test_the_executor_makes_checks_and_records_every_rendition(tmp_path, demo_models):
    from tests.fakes.jobs import example_jobs
    config = executor_config(tmp_path / "data", demo_models)
    jobs = await example_jobs(config, "product_main")
    from templates.channels import plan, presets
    chosen = plan(presets(), ["taobao", "douyin"])
    for job in jobs[:2]:
        job.workflow["deliver"] = [
            msgspec.to_builtins(d)
            for d in chosen.bind(chosen.every_row, {"sku": f"BTL-{job.row}"})]
    async with Harness(config) as h:
        done = await h.run("product_main", jobs[:2])
        assert [j.status for j in done] == ["succeeded", "succeeded"]
        made = await Renditions(h.queue.db).of_batch(done[0].batch_id)
    store = FileStore(config.data_dir)
    assert [(r.job_id, r.channel, r.name) for r in made] == [
        (job.id, ch, f"BTL-{job.row}_{ch}_{n}")
        for job in done for ch, n in (("taobao", "1.jpg"), ("taobao", "2.jpg"),
                                       ("taobao", "white.png"), ("douyin", "1.jpg"))]
    for r in made:
        data = store.path(r.path).read_bytes()
        assert len(data) == r.bytes and r.path.endswith(f"/deliver/{r.channel}/{r.name}")
        with Image.open(io.BytesIO(data)) as im:
            assert im.size == (r.width, r.height)
            assert read_implicit_label(im.info)["ProduceID"] == r.labels["implicit"]["ProduceID"]
        assert r.labels["explicit"] == "AI生成"
        # the demo model's 64 px noise has no plain background: the white file says so
        assert r.passed == (r.rendition != "white"), (r.name, r.findings)
    white = next(r for r in made if r.rendition == "white")
    assert white.findings[0]["check"] == "background"
