"""A submission's sales channels (`/gen … --channels taobao,douyin`, a sheet's `channels`
column, the API's `channels`), bound into each row's job; and the executor making,
checking and recording every rendition after the job's image."""

from __future__ import annotations

import dataclasses
import hashlib
import io

import msgspec
import pytest
from PIL import Image

from bot.app.application import Accepted, SubmitOptions
from bot.errors import Invalid
from bot.intake.check import IntakeReport, SheetFile
from storage.files import FileStore
from storage.renditions import Renditions
from templates import provenance
from templates.jobs import decode
from templates.renditions import read_implicit_label
from tests.conftest import executor_config, migrated_sqlite
from tests.fakes.apps import ALICE, PRODUCTS, app_on, pictures
from tests.fakes.executor import Harness
from tests.fakes.media import product_png


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
    async with app_on(tmp_path, db_url, deliver={"unlabelled": ["amazon"]}) as app:
        jobs = await submitted(app, channels=("amazon",))
        assert [(d.file, d.label) for d in jobs[0].deliver] == [("A1.MAIN.jpg", None)]


async def test_a_team_file_broken_after_start_is_said_not_thrown(tmp_path, db_url):
    team = tmp_path / "team.toml"
    team.write_text('[ours]\ntitle = "Ours"\ntitle_zh = "我们"\n[[ours.renditions]]\n'
                    'name = "main"\nsize = [100, 100]\n', encoding="utf-8")
    async with app_on(tmp_path, db_url, deliver={"channels": str(team)}) as app:
        assert [d.channel for d in (await submitted(app, channels=("ours",)))[0].deliver] \
            == ["ours"]
        team.write_text("[ours\n", encoding="utf-8")
        with pytest.raises(Invalid) as caught:
            await app.submit(ALICE, "product_main", PRODUCTS, pictures,
                             SubmitOptions(channels=("ours",)))
        assert caught.value.render("en").startswith(
            f"The team's channels file cannot be used now: {team}: -: is not TOML")
        assert "团队的渠道文件" in caught.value.render("zh")


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
    local = provenance.local_credentials(config.data_dir / "c2pa")  # made by the executor
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
        source = next(j for j in done if j.id == r.job_id).outputs[0]
        assert r.labels["c2pa"] == {"signer": "local", "source": source, "made_from": None,
                                    "ingredients": ["assets/bottle.png"]}
        signed = provenance.read(data, r.name.rsplit(".", 1)[1], anchors=local.anchors)
        assert (signed.state, signed.failures) == ("Trusted", []), r.name
        # the chain: this file, opened from the generated picture, made by the model from
        # the product photo — each manifest carried in the file, each validated
        rendition, picture = signed.lineage()
        assert [a["action"] for a in actions_of(rendition)] == \
            ["c2pa.opened", "c2pa.resized", "c2pa.edited"]
        assert [a["action"] for a in actions_of(picture)] == ["c2pa.created", "c2pa.placed"]
        assert [i["title"] for i in picture["ingredients"]] == ["assets/bottle.png"]
        # the demo model's 64 px noise has no plain background: the white file says so
        assert r.passed == (r.rendition != "white"), (r.name, r.findings)
    white = next(r for r in made if r.rendition == "white")
    assert white.findings[0]["check"] == "background"
    for job in done:  # the generated picture itself is signed, once, in place
        picture = provenance.read(store.path(job.outputs[0]).read_bytes(), "png",
                                  anchors=local.anchors)
        assert (picture.state, picture.failures) == ("Trusted", [])


def actions_of(manifest: dict) -> list[dict]:
    return next(a for a in manifest["assertions"]
                if a["label"].startswith("c2pa.actions"))["data"]["actions"]


def test_an_edits_files_carry_the_chain_back_through_the_picture_it_changed(tmp_path):
    """A rendition of an edit: the edit's picture opened and edited from its parent's,
    which the model made from the product photo — c2pa's own reader validates each."""
    from executor.deliver import pack
    from templates.channels import plan, presets
    from templates.jobs import DiffusersJob, Step
    store = FileStore(tmp_path / "data")
    creds = provenance.local_credentials(tmp_path / "data" / "c2pa")
    signer = provenance.Signer(creds)
    chosen = plan(presets(), ["jd"])
    photo = store.put_input(product_png())
    first = DiffusersJob(template="product_main", row=2, params={"product_image": photo},
                         named={"product_image": "bottle.png"}, outputs={}, nodes=[
                             Step("g", "generate", {"prompt": "a bottle"})],
                         deliver=chosen.bind(chosen.every_row, {"sku": "A1"}))
    made = store.write("outputs/batch_1/A1/2.png", product_png())
    pack(store, first, 1, 1, [made], producer="genbot", signer=signer)
    edit = msgspec.structs.replace(first, made_from=made)
    edited = store.write("outputs/batch_2/A1/2_edit.png", product_png((300, 300)))
    (r,) = pack(store, edit, 2, 2, [edited], producer="genbot", signer=signer)
    assert r.labels["c2pa"]["made_from"] == made
    found = provenance.read(store.path(r.path).read_bytes(), "jpg", anchors=creds.anchors)
    assert (found.state, found.failures) == ("Trusted", [])
    rendition, picture, parent = found.lineage()
    assert [a["action"] for a in actions_of(picture)] == \
        ["c2pa.opened", "c2pa.edited", "c2pa.placed"]
    assert actions_of(picture)[1]["digitalSourceType"] == provenance.EDITED
    assert [(i["title"], i["relationship"]) for i in picture["ingredients"]] == \
        [("outputs/batch_1/A1/2.png", "parentOf"), ("bottle.png", "componentOf")]
    assert actions_of(parent)[0]["action"] == "c2pa.created"
    assert [i["title"] for i in parent["ingredients"]] == ["bottle.png"]
    assert rendition["title"] == "A1_jd_1.jpg"


TEAM = """
[shop_a]
title = "Shop A"
title_zh = "甲店"
[[shop_a.renditions]]
name = "white"
size = [160, 160]
fit = "pad"
background = "white"
format = "png"
fill = 0.5
file = "{sku}_white.{ext}"

[shop_b]
title = "Shop B"
title_zh = "乙店"
[[shop_b.renditions]]
name = "story"
size = [90, 160]
format = "webp"
safe = [0.1, 0.05, 0.15, 0.05]

[shop_c]
title = "Shop C"
title_zh = "丙店"
[[shop_c.renditions]]
name = "feed"
size = [128, 160]
max_kb = 40
file = "{channel}-{sku}.{ext}"

[shop_d]
title = "Shop D"
title_zh = "丁店"
label = "optional"
[[shop_d.renditions]]
name = "main"
size = [200, 200]
fit = "pad"
background = "white"
text = false
fill = 0.8
file = "{sku}.MAIN.{ext}"
"""


async def finish_as_product_shots(app, batch_id: int) -> list:
    """Every queued job completed with a product on an off-white studio background."""
    while (lease := await app.queue.claim("test-executor")) is not None:
        path = app.store.write(f"outputs/batch_{lease.batch_id}/{lease.job_id}.png",
                               product_png())
        await app.queue.complete(lease, [path])
    return await app.queue.batch_jobs(batch_id)


@pytest.fixture
async def bucket():
    from tests.fakes.s3 import S3Server
    server = S3Server()
    server.start()
    import boto3
    s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                      aws_access_key_id="test", aws_secret_access_key="test")
    s3.create_bucket(Bucket="launch")
    try:
        yield server, s3
    finally:
        server.stop()


@pytest.mark.slow
async def test_fifty_rows_times_four_channels_ship_labelled_and_identical_everywhere(
        tmp_path, bucket):
    """A launch: 50 rows, 4 channels of a team's own file, one generation each. Every file
    meets its channel's rules, is named by its pattern, carries both AI labels and valid
    C2PA credentials; the zip, the shared folder and the bucket hold the same bytes; the
    "delivered" event counts them. (One backend: what is proved here is not the queue's.)"""
    db_url = migrated_sqlite(f"sqlite:///{tmp_path / 'genbot.sqlite3'}")
    import zipfile

    from bot.app.deliveries import Shipper, drops
    from executor.deliver import pack
    from storage.outbox import Outbox
    from storage.renditions import DELIVERED
    from templates.provenance import Signer, local_credentials
    server, s3 = bucket
    (tmp_path / "team.toml").write_text(TEAM, encoding="utf-8")
    rows = "".join(f"SKU-{n:03},bottle.png,bottle {n}\n" for n in range(50))
    sheet = SheetFile("launch.csv", f"sku,product_image,prompt\n{rows}".encode())
    async with app_on(tmp_path, db_url, deliver={
            "channels": str(tmp_path / "team.toml"), "unlabelled": ["shop_d"],
            "folder": str(tmp_path / "share"), "bucket": "launch", "prefix": "genbot/"},
            storage={"endpoint": server.endpoint, "access_key": "test",
                     "secret_key": "test"}) as app:
        done = await app.submit(ALICE, "product_main", sheet, pictures, SubmitOptions(
            wait_for_executor=True, channels=("shop_a", "shop_b", "shop_c", "shop_d")))
        assert isinstance(done, Accepted) and done.jobs == 50
        shipper = Shipper(app.queue, app.store, Outbox(app.queue.db), drops(app.config))
        await shipper.start()
        jobs = await finish_as_product_shots(app, done.batch_id)
        creds = local_credentials(tmp_path / "data" / "c2pa")
        signer, renditions = Signer(creds), Renditions(app.queue.db)
        for job in jobs:  # the executor's pack, on each job's image
            await renditions.record(job.id, pack(app.store, decode(job.workflow), job.id,
                                                 job.batch_id, job.outputs,
                                                 producer="Acme", signer=signer))
        await shipper.run_once()
        made = await renditions.of_batch(done.batch_id)
        delivered = [e for e in await app.queue.events_after(0) if e.kind == DELIVERED]
    assert len(made) == 50 * 4 and [r.findings for r in made if r.findings] == []
    by_job = {j.id: decode(j.workflow).params["sku"] for j in jobs}
    assert {(r.channel, r.name) for r in made if by_job[r.job_id] == "SKU-007"} == {
        ("shop_a", "SKU-007_white.png"),
        ("shop_b", "SKU-007_shop_b_1.webp"), ("shop_c", "shop_c-SKU-007.jpg"),
        ("shop_d", "SKU-007.MAIN.jpg")}
    for r in made:  # (each file's labels and credentials were checked as it was made: no
        assert r.labels["explicit"] == (None if r.channel == "shop_d" else "AI生成")  # finding)
    for r in made[:4]:  # and read here again, trusting the data folder's own root
        data = app.store.path(r.path).read_bytes()
        fmt = r.name.rsplit(".", 1)[1]
        assert provenance.read(data, fmt, anchors=creds.anchors).state == "Trusted", r.name
        with Image.open(io.BytesIO(data)) as im:
            assert read_implicit_label(im.info)["ContentProducer"] == "Acme"
    # the zip, the folder and the bucket: the same files, byte for byte
    async with app_on(tmp_path, db_url) as again:
        from bot.app.deliveries import delivery, zip_entries
        from bot.app.results import write_zip
        batch = await again.batch(done.batch_id)
        ships = delivery(batch, jobs, made).ships
        path = write_zip(again.store, batch, zip_entries(ships), "deliverables.zip")
    with zipfile.ZipFile(path) as z:
        zipped = {n: z.read(n) for n in z.namelist()}
    assert len(zipped) == 200
    share = tmp_path / "share" / f"batch_{done.batch_id}"
    folder = {str(p.relative_to(share)): p.read_bytes() for p in share.rglob("*")
              if p.is_file()}
    assert zipped == folder
    listed = s3.list_objects_v2(Bucket="launch", Prefix=f"genbot/batch_{done.batch_id}/")
    in_bucket = {o["Key"].split("/", 2)[2]: o["ETag"].strip('"') for o in listed["Contents"]}
    assert in_bucket == {n: hashlib.md5(b).hexdigest() for n, b in zipped.items()}  # noqa: S324
    assert [e.data["files"] for e in delivered] == [200]


async def test_the_threads_summary_counts_the_files_and_says_why_some_need_review(app):
    from bot.chat.notifier import Notifier
    from storage.renditions import Rendition
    from tests.fakes.jobs import finish_all
    accepted = await app.submit(ALICE, "product_main", PRODUCTS, pictures, SubmitOptions(
        wait_for_executor=True, channels=("jd",)))
    done = await finish_all(app, accepted.batch_id)
    batch = await app.batch(accepted.batch_id)
    made = [Rendition(j.id, batch.id, "jd", "main", f"A{n}_jd_1.jpg", f"x/{n}.jpg", 800, 800,
                      1000, "0" * 64, findings, {}, id=n)
            for n, (j, findings) in enumerate(zip(done, ([], [{"check": "background",
                                                               "percent": 62}])), 1)]
    notifier = Notifier(app.queue, None, app.store, platforms=["test"],
                        public_url="https://genbot.example/")
    en = notifier.deliver_summary(batch, done, made, "en")
    assert en == ("\nSales channels (jd): 2 files, 1 ready to ship, 1 held.\n• A2_jd_1.jpg — "
                  "needs review: the background is not pure white: 62% of the edge is RGB 255, "
                  "and the channel asks for all of it\nEvery file, its checks and the zip: "
                  f"https://genbot.example/dashboard/#/batches/{batch.id}")
    zh = notifier.deliver_summary(batch, done, made, "zh")
    assert "2 个文件，1 个可交付，1 个暂缓" in zh and "需要审核：背景不是纯白" in zh


async def test_the_sheet_sent_comes_back_filled_in_in_the_thread_beside_the_results(app):
    from openpyxl import load_workbook

    from bot.chat.notifier import Notifier
    from storage.outbox import Outbox
    from storage.renditions import Rendition
    from tests.fakes.jobs import finish_all
    from tests.fakes.sheets import xlsx as xlsx_bytes
    sheet = SheetFile("launch.xlsx", xlsx_bytes([["sku", "product_image", "prompt", "owner"],
                                                 ["A1", "bottle.png", "a bottle", "Mei"]]))
    accepted = await app.submit(ALICE, "product_main", sheet, pictures, SubmitOptions(
        wait_for_executor=True, channels=("jd",)))
    (job,) = await finish_all(app, accepted.batch_id)
    await Renditions(app.queue.db).record(job.id, [Rendition(
        job.id, accepted.batch_id, "jd", "main", "A1_jd_1.jpg", "x/1.jpg", 800, 800, 1000,
        "0" * 64, [], {})])
    outbox = Outbox(app.queue.db)
    notifier = Notifier(app.queue, outbox, app.store, platforms=["test"], editable=["test"],
                        templates=app.templates)
    await notifier.summary(await app.batch(accepted.batch_id))
    summary = await outbox.get(f"batch:{accepted.batch_id}:summary")
    assert "results sheet attached. And launch.xlsx as you sent it, each row's files and " \
        "status filled in on the right.\nSales channels (jd)" in summary.payload["text"]
    filled = await outbox.get(f"batch:{accepted.batch_id}:summary:filled")
    assert filled.kind == "file" and filled.payload["path"].endswith("launch.filled.xlsx")
    rows = list(load_workbook(app.store.path(filled.payload["path"])).active.values)
    assert rows[0][:4] == ("sku", "product_image", "prompt", "owner")  # theirs, untouched
    assert "A1_jd_1.jpg" in rows[1] and rows[1][3] == "Mei"
    plain = await app.submit(ALICE, "product_main", sheet, pictures, SubmitOptions(
        wait_for_executor=True))  # no channels: the results sheet alone, as before
    await finish_all(app, plain.batch_id)
    await notifier.summary(await app.batch(plain.batch_id))
    assert await outbox.get(f"batch:{plain.batch_id}:summary:filled") is None


async def test_an_image_made_again_or_upscaled_comes_with_its_rows_channel_files(app):
    from bot.app.iterate import ActionRequest
    from tests.fakes.jobs import finish_all
    accepted = await app.submit(ALICE, "product_main", PRODUCTS, pictures, SubmitOptions(
        wait_for_executor=True, channels=("jd",)))
    first, _ = await finish_all(app, accepted.batch_id)
    for action in ("again", "upscale"):
        done = await app.act(ALICE, first.id, ActionRequest(action, wait_for_executor=True))
        (child,) = done.jobs
        assert [(d.channel, d.file) for d in decode(child.workflow).deliver] == \
            [("jd", "A1_jd_1.jpg")], action


async def test_the_sheet_sent_comes_back_filled_in_their_columns_untouched(app):
    """Their .xlsx — a title block above the header, a formula, a second sheet — comes
    back with the results to the right of their header, on their rows; a ;-separated CSV
    with a BOM in its own dialect and encoding."""
    from openpyxl import Workbook, load_workbook
    from openpyxl.styles import Font

    from bot.app.filled import write_filled
    from executor.deliver import pack
    book = Workbook()
    ws = book.active
    ws.append(["Spring launch", None, None, None])
    ws.append([])
    ws.append(["sku", "product_image", "prompt", "price"])
    ws["A3"].font = Font(bold=True)
    ws.append(["A1", "bottle.png", "a bottle", 10])
    ws.append(["A2", "bottle.png", "a jar", 12])
    ws["E4"] = "=D4*2"
    book.create_sheet("notes")["A1"] = "ours"
    buf = io.BytesIO()
    book.save(buf)
    sheet = SheetFile("launch.xlsx", buf.getvalue())
    accepted = await app.submit(ALICE, "product_main", sheet, pictures, SubmitOptions(
        wait_for_executor=True, channels=("jd",)))
    jobs = await finish_as_product_shots(app, accepted.batch_id)
    made = []
    for job in jobs:
        made += pack(app.store, decode(job.workflow), job.id, job.batch_id, job.outputs,
                     producer="genbot")
    batch = await app.batch(accepted.batch_id)
    path = write_filled(app.store, batch, jobs, made)
    back = load_workbook(app.store.path(path))
    ws = back.worksheets[0]
    rows = [list(r) for r in ws.iter_rows(values_only=True)]
    assert rows[0][:4] == ["Spring launch", None, None, None] and ws["A3"].font.bold
    assert rows[2] == ["sku", "product_image", "prompt", "price", None, "status", "output",
                       "review", "jd files"]
    assert rows[3][:5] == ["A1", "bottle.png", "a bottle", 10, "=D4*2"]
    assert rows[3][5:] == ["succeeded", jobs[0].outputs[0], "unreviewed", "A1_jd_1.jpg"]
    assert rows[4][8] == "A2_jd_1.jpg" and back["notes"]["A1"].value == "ours"
    # (the formula's column, unheaded, is theirs: the results start right of it)

    csv_sheet = SheetFile("launch.csv", "\ufeffsku;product_image;prompt\nA1;bottle.png;"
                          "瓶子\nA2;bottle.png;罐子\n".encode())
    accepted = await app.submit(ALICE, "product_main", csv_sheet, pictures, SubmitOptions(
        wait_for_executor=True, lang="zh"))
    jobs = await finish_as_product_shots(app, accepted.batch_id)
    path = write_filled(app.store, await app.batch(accepted.batch_id), jobs, [])
    text = app.store.path(path).read_bytes().decode("utf-8-sig").splitlines()
    assert text[0] == "sku;product_image;prompt;状态;输出文件;审核"
    assert text[1].startswith("A1;bottle.png;瓶子;成功;outputs/batch_")


async def test_a_file_a_new_picture_may_mend_has_its_image_made_again_once(tmp_path, db_url):
    """[deliver] max_rerolls = 1: a JD file on a red picture (not on white) has its image
    made again — an "again" in its thread, as its submitter — and the reroll's own file,
    no better, is left for review: one line of rerolls, as long as the setting."""
    from bot.app.deliveries import REROLL, Shipper
    from executor.deliver import pack
    from storage.outbox import Outbox
    from tests.fakes.jobs import finish_all
    async with app_on(tmp_path, db_url, deliver={"max_rerolls": 1}) as app:
        shipper = Shipper(app.queue, app.store, Outbox(app.queue.db), [], app=app)
        await shipper.start()
        accepted = await app.submit(ALICE, "product_main", PRODUCTS, pictures, SubmitOptions(
            wait_for_executor=True, channels=("jd",)))

        async def run(batch_id: int) -> list:
            done = await finish_all(app, batch_id)
            for job in done:  # (a red 64x48 picture: JD's white background cannot hold)
                await Renditions(app.queue.db).record(job.id, pack(
                    app.store, decode(job.workflow), job.id, job.batch_id, job.outputs,
                    producer="genbot"))
            await shipper.run_once()
            return done

        async def rerolled() -> list:
            batches = [await app.batch(i) for i in await app.queue.batches_of("test:ALICE")]
            return [b for b in batches if (b.idempotency_key or "").startswith(REROLL)]

        first = await run(accepted.batch_id)
        rerolls = await rerolled()
        assert sorted(b.idempotency_key for b in rerolls) == \
            sorted(f"{REROLL}{j.id}" for j in first)
        children = [j for b in rerolls for j in await app.queue.batch_jobs(b.id)]
        assert {(j.parent_job_id, j.action) for j in children} == \
            {(j.id, "again") for j in first}
        assert all(decode(j.workflow).deliver for j in children)  # its files made again
        for b in rerolls:
            await run(b.id)
        assert len(await rerolled()) == 2  # (one a row: a reroll's reroll would be a third)


async def test_a_certificate_that_cannot_sign_leaves_files_made_and_marked(app, tmp_path):
    """A team's certificate c2pa refuses: the executor says so and every file is still
    made, marked for review with why; a job whose first output is no picture (a video)
    has its files made from its first picture."""
    from executor.deliver import pack
    from templates.provenance import Credentials, ProvenanceError, Signer
    from tests.fakes.jobs import finish_all
    from tests.fakes.media import webm
    with pytest.raises(ProvenanceError, match="cannot sign"):
        Signer(Credentials(b"not a certificate", b"not a key", b"", local=False))
    accepted = await app.submit(ALICE, "product_main", PRODUCTS, pictures, SubmitOptions(
        wait_for_executor=True, channels=("douyin",)))
    job = (await finish_all(app, accepted.batch_id))[0]
    video = app.store.write(f"outputs/batch_{job.batch_id}/clip.webm", webm())
    (made,) = pack(app.store, decode(job.workflow), job.id, job.batch_id,
                   [video, *job.outputs], producer="genbot",
                   unsigned="the C2PA certificate cannot sign: bad EKU")
    assert made.findings == [{"check": "c2pa",
                              "codes": "the C2PA certificate cannot sign: bad EKU"}]
    assert made.labels["c2pa"] is None and made.name == "A1_douyin_1.jpg"
    assert pack(app.store, decode(job.workflow), job.id, job.batch_id, [video],
                producer="genbot") == []


EXTEND = """
[stories]
title = "Stories"
title_zh = "快拍"
[[stories.renditions]]
name = "story"
size = [90, 160]
fit = "extend"
file = "{sku}_story.{ext}"
[[stories.renditions]]
name = "square"
size = [100, 100]
fit = "extend"
file = "{sku}_square.{ext}"
"""


async def test_an_extend_file_grows_the_picture_to_its_shape_in_the_same_job(tmp_path, db_url):
    """fit = "extend": the row's job grows its picture on the fill model to each aspect
    that needs it (a square picture needs no growing to 1:1: saved as it is)."""
    team = tmp_path / "team.toml"
    team.write_text(EXTEND, encoding="utf-8")
    async with app_on(tmp_path, db_url, deliver={"channels": str(team)}) as app:
        (job, _) = await submitted(app, channels=("stories",))
        fills = [s for s in job.nodes if s.op == "fill"]
        assert [(s.id, s.inputs["aspect"], s.inputs["if_needed"]) for s in fills] == [
            ("extend_1x1", "1:1", True), ("extend_9x16", "9:16", True)]
        first_save = next(s for s in job.nodes if s.op == "save")
        assert fills[0].inputs["image"] == first_save.inputs["image"]  # what it writes
        assert job.nodes.index(fills[0]) > job.nodes.index(first_save)
        assert fills[0].inputs["model"] == app.fill_model()
        assert [(d.rendition.name, d.picture) for d in job.deliver] == [
            ("story", "A1/2_ext9x16.png"), ("square", "A1/2_ext1x1.png")]
        assert set(job.outputs.values()) >= {"A1/2_ext9x16.png", "A1/2_ext1x1.png"}
    from templates.channels import Conflict, load_file, plan
    for engine, model, code in (("comfyui", "sd15", "channel_extend_comfy"),
                                ("diffusers", None, "channel_extend_no_model")):
        with pytest.raises(Conflict) as caught:  # a ComfyUI workflow's steps are its own
            plan(load_file(team), ["stories"], fill_model=model, engine=engine)
        assert caught.value.code == code
        said = Invalid(caught.value.code, **caught.value.details)
        assert said.render("en").startswith('stories\'s "story" file grows the picture')
        assert "补全模型" in said.render("zh")


async def test_the_executor_grows_the_picture_and_the_chain_says_so(tmp_path, demo_models):
    from templates.actions import channel_extends
    from templates.channels import load_file, plan
    from templates.settings import fill_model
    from tests.fakes.jobs import example_jobs
    team = tmp_path / "team.toml"
    team.write_text(EXTEND, encoding="utf-8")
    config = executor_config(tmp_path / "data", demo_models)
    (job, *_) = await example_jobs(config, "product_main")
    chosen = plan(load_file(team), ["stories"], fill_model=fill_model(config))
    bound = decode(job.workflow)
    bound.deliver = chosen.bind(chosen.every_row, {"sku": "BTL-1"})
    job = dataclasses.replace(job, workflow=msgspec.to_builtins(
        channel_extends(bound, fill_model(config))))
    async with Harness(config) as h:
        (done,) = await h.run("product_main", [job])
        assert done.status == "succeeded", done.error
        made = await Renditions(h.queue.db).of_batch(done.batch_id)
    store = FileStore(config.data_dir)
    grown = next(o for o in done.outputs if o.endswith("_ext9x16.png"))
    with Image.open(store.path(grown)) as im, Image.open(store.path(done.outputs[0])) as first:
        w, h = im.size
        assert abs(w / h - 9 / 16) < 0.02 and w == first.width  # grown, not squeezed
    story = next(r for r in made if r.rendition == "story")
    assert (story.width, story.height) == (90, 160) and story.labels["c2pa"]["source"] == grown
    local = provenance.local_credentials(config.data_dir / "c2pa")
    found = provenance.read(store.path(story.path).read_bytes(), "jpg", anchors=local.anchors)
    assert (found.state, found.failures) == ("Trusted", [])
    rendition, extended, picture = found.lineage()
    assert [a["action"] for a in actions_of(extended)][:2] == ["c2pa.opened", "c2pa.edited"]
    assert actions_of(extended)[1]["softwareAgent"]["name"] == f"genbot ({fill_model(config)})"
    assert actions_of(picture)[0]["action"] == "c2pa.created"
