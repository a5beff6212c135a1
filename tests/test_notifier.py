"""The notifier on SQLite and PostgreSQL: queue events in, owed messages out, once."""

from __future__ import annotations

import io

import pytest
from openpyxl import load_workbook
from PIL import Image

from bot.chat.notifier import Notifier
from storage.db import Database
from storage.files import FileStore
from storage.outbox import Outbox
from storage.queue import NewJob, Queue, Submission
from templates.loader import load_templates
from tests.conftest import ROOT, queue_settings

TEMPLATES, _ = load_templates(ROOT / "templates" / "shipped")


@pytest.fixture
async def env(db_url, clock, tmp_path):
    db = await Database(db_url).open()
    queue = Queue(db, queue_settings(), clock=clock)
    outbox = Outbox(db, clock=clock)
    store = FileStore(tmp_path)
    yield queue, outbox, store, Notifier(queue, outbox, store, platforms={"slack"},
                                         editable={"slack"}, bundles={"slack"},
                                         templates=TEMPLATES, clock=clock)
    await queue.close()


def workflow(row: int, sku: str) -> dict:
    return {"template": "social_thumb", "row": row, "nodes": [], "outputs": {},
            "params": {"watermark": "genbot", "image": "inputs/abc.png", "title": f"新品 {sku}",
                       "aspect": "1:1", "width": 1080, "position": "bottom",
                       "text_color": "auto", "band_color": "auto"}}


async def run_jobs(queue, store, clock, *, fail_row: int) -> None:
    """What an executor does: claim, report a step, write the image, complete (or fail)."""
    while (lease := await queue.claim("exec")) is not None:
        clock.advance(2)
        await queue.progress(lease, {"node": "gen", "step": 3, "total": 8, "row": lease.row})
        if lease.row == fail_row:
            await queue.fail(lease, "node gen (generate): out of memory", retry=False)
            continue
        path = f"outputs/batch_{lease.batch_id}/{lease.row}.png"
        buf = io.BytesIO()
        Image.new("RGB", (32, 32), "#336699").save(buf, "PNG")
        store.write(path, buf.getvalue())
        await queue.complete(lease, [path])


async def owed(outbox) -> dict:
    rows = await outbox.db.fetch("SELECT key, kind, payload FROM outbox ORDER BY id")
    return {r["key"]: (r["kind"], (await outbox.get(r["key"])).payload) for r in rows}


async def test_a_batch_from_acceptance_to_summary(env, clock):
    queue, outbox, store, notifier = env
    batch = (await queue.enqueue(Submission(
        "social_thumb", "slack:U1", [NewJob(r, workflow(r, f"SKU{r}")) for r in (2, 3, 4)],
        platform="slack", conversation="C1", thread="1712.1", meta={"lang": "zh"}))).batch_id
    await notifier.run_once()
    first = await owed(outbox)
    assert first[f"batch:{batch}:accepted"][1]["text"].startswith(
        f"批次 {batch} 已接收：3 个 social_thumb 任务。前面还有 0 个任务")
    await run_jobs(queue, store, clock, fail_row=3)
    handled = await notifier.run_once()
    assert handled > 0
    messages = await owed(outbox)
    images = {k: p for k, (kind, p) in messages.items() if ":image:" in k}
    assert sorted(p["row"] for p in images.values()) == [2, 4]
    # only what tells the rows apart: every row's 1:1 and 1080 would be noise
    assert images[next(iter(images))]["text"] == "第 2 行 · 新品 SKU2"
    (failure,) = [p for k, (_, p) in messages.items() if k.endswith(":failed")]
    assert failure["text"] == "第 3 行失败：node gen (generate): out of memory"
    progress = messages[f"batch:{batch}:progress"][1]
    assert (progress["done"], progress["total"], progress["failed"], progress["finished"]) == \
        (3, 3, 1, True)
    assert progress["buttons"] == []  # finished: no Cancel button
    kind, summary = messages[f"batch:{batch}:summary"]
    assert summary["mention"] == "slack:U1" and "3 张中成功 2 张，失败 1" in summary["text"]
    keys = list(messages)
    assert keys[-1] == f"batch:{batch}:summary"  # one message, last: the text and both files
    contact_path, results_path = summary["paths"]
    assert kind == "file" and results_path.endswith("results.xlsx")
    assert summary["delete_after"] == []  # auto_save keeps the images
    sheet = load_workbook(store.path(results_path)).active
    rows = [list(r) for r in sheet.iter_rows(values_only=True)]
    assert rows[0] == ["行号", "image", "title", "aspect", "width", "position", "text_color",
                       "band_color", "watermark", "状态", "输出文件", "错误", "任务", "来源任务",
                       "操作", "审核", "模型", "模板版本"]
    assert rows[1][:5] == [2, "inputs/abc.png", "新品 SKU2", "1:1", 1080]
    assert rows[2][0] == 3 and rows[2][9] == "failed" and "out of memory" in rows[2][11]
    assert Image.open(store.path(contact_path)).size[0] > 0


async def test_a_restart_replays_events_and_owes_nothing_twice(env, clock):
    queue, outbox, store, notifier = env
    await queue.enqueue(Submission("t", "slack:U1", [NewJob(2, workflow(2, "A"))],
                                   platform="slack", conversation="C1"))
    await run_jobs(queue, store, clock, fail_row=0)
    await notifier.run_once()
    before = await owed(outbox)
    await outbox.advance(notifier.cursor, 0)  # as if the cursor had not been saved
    again = Notifier(queue, outbox, store, platforms={"slack"}, editable={"slack"},
                     templates=TEMPLATES, clock=clock)
    assert await again.run_once() > 0
    assert await owed(outbox) == before


async def test_batches_from_other_fronts_owe_nothing_here(env, clock):
    queue, outbox, store, notifier = env
    await queue.enqueue(Submission("t", "cli:me", [NewJob(2, workflow(2, "A"))], platform="cli"))
    await run_jobs(queue, store, clock, fail_row=0)
    assert await notifier.run_once() > 0
    assert await owed(outbox) == {}


async def test_where_messages_cannot_be_edited_progress_comes_as_milestones(env, clock):
    queue, outbox, store, _ = env
    notifier = Notifier(queue, outbox, store, platforms={"dingtalk"}, templates=TEMPLATES,
                        auto_save=False, clock=clock)
    batch = (await queue.enqueue(Submission(
        "social_thumb", "dingtalk:U1", [NewJob(r, workflow(r, "A")) for r in range(2, 10)],
        platform="dingtalk", conversation="C1"))).batch_id
    while (lease := await queue.claim("exec")) is not None:  # the notifier keeps up
        buf = io.BytesIO()
        Image.new("RGB", (16, 16), "#aa3300").save(buf, "PNG")
        path = store.write(f"outputs/batch_{batch}/{lease.row}.png", buf.getvalue())
        await queue.complete(lease, [path])
        await notifier.run_once()
    messages = await owed(outbox)
    assert f"batch:{batch}:progress" not in messages
    milestones = [p["text"] for k, (_, p) in messages.items()
                  if ":milestone:" in k or k.endswith(":started")]
    assert milestones == [f"Batch {batch}: started — 8 images on their way",
                          f"Batch {batch}: 25% — 2/8 done, 0 failed",
                          f"Batch {batch}: 50% — 4/8 done, 0 failed",
                          f"Batch {batch}: 75% — 6/8 done, 0 failed"]  # 100%: the summary
    kind, summary = messages[f"batch:{batch}:summary"]  # the text captions the contact sheet
    assert kind == "image" and summary["path"].endswith("contact.png") and summary["text"]
    assert list(messages)[-1] == f"batch:{batch}:summary:results"
    results = messages[f"batch:{batch}:summary:results"][1]
    assert sorted(results["delete_after"]) == sorted(f"outputs/batch_{batch}/{r}.png"
                                                     for r in range(2, 10))
    assert all(m.thread == f"@batch:{batch}" for m in [await outbox.get(k) for k in messages])


@pytest.mark.parametrize("rows, together, expected", [
    (2, False, ["started — 2 images", "50% — 1/2 done"]),  # never "25% — 1/2" then "50% — 1/2"
    (4, False, ["started — 4 images", "50% — 2/4 done"]),  # a small batch: halfway only
    (4, True, ["started — 4 images"]),  # generated in one go: still told it started
])
async def test_milestones_tell_real_progress_once_and_small_batches_see_work_start(
        env, clock, rows, together, expected):
    queue, outbox, store, _ = env
    notifier = Notifier(queue, outbox, store, platforms={"dingtalk"}, templates=TEMPLATES,
                        clock=clock)
    await queue.enqueue(Submission(
        "social_thumb", "dingtalk:U1", [NewJob(r, workflow(r, f"S{r}")) for r in range(rows)],
        platform="dingtalk", conversation="C1"))
    leases = []
    while (lease := await queue.claim("exec")) is not None:
        leases.append(lease)
        if not together:
            await notifier.run_once()
            await queue.complete(lease, [])
            await notifier.run_once()
    await notifier.run_once()  # all running
    for lease in leases if together else ():
        await queue.complete(lease, [])
    await notifier.run_once()
    told = [p["text"].split(": ", 1)[1] for k, (_, p) in (await owed(outbox)).items()
            if ":milestone:" in k or k.endswith(":started")]
    assert [t[:len(e)] for t, e in zip(told, expected, strict=True)] == expected


async def test_twenty_actions_cost_the_thread_their_images_and_nothing_else(env, clock):
    """An action's batch (meta action, in the parent's thread) owes its images (each with
    its row of buttons in its own message) and no acceptance, progress,
    milestone or summary: after 20 actions the thread holds the first batch's messages
    and 20 images."""
    queue, outbox, store, _ = env
    notifier = Notifier(queue, outbox, store, platforms={"slack"}, editable={"slack"},
                        bundles={"slack"}, inline={"slack"}, templates=TEMPLATES, clock=clock)
    first = (await queue.enqueue(Submission("social_thumb", "slack:U1", [
        NewJob(2, workflow(2, "SKU2"))], platform="slack", conversation="C1"))).batch_id
    await run_jobs(queue, store, clock, fail_row=0)
    while await notifier.run_once():
        pass
    before = set(await owed(outbox))
    for _ in range(20):
        await queue.enqueue(Submission(
            "social_thumb", "slack:U1", [NewJob(2, workflow(2, "SKU2"), parent=1,
                                                action="again")],
            platform="slack", conversation="C1", thread=f"@batch:{first}",
            meta={"action": "again", "parent_job": 1, "root_batch": first}))
        await run_jobs(queue, store, clock, fail_row=0)
    while await notifier.run_once():
        pass
    new = {k: v for k, v in (await owed(outbox)).items() if k not in before}
    assert len(new) == 20 and all(k.startswith("job:") for k in new)
    images = [p for k, (kind, p) in new.items() if kind == "image"]
    assert len(images) == 20 and all("again of job 1" in p["text"].lower()
                                     for p in images)
    assert all(p["buttons"][0]["command"].startswith("/keep j") for p in images)
    assert {p["batch"] for _, p in new.values()} == set(range(first + 1, first + 21))
    rows = await outbox.db.fetch("SELECT DISTINCT thread FROM outbox")
    assert {r["thread"] for r in rows} == {f"@batch:{first}"}  # all in the first's thread


async def test_a_sweeps_summary_carries_its_grids_and_the_results_its_swept_values(env, clock):
    queue, outbox, store, notifier = env
    jobs = []
    for width in (256, 512):
        for aspect in ("1:1", "4:5"):
            wf = workflow(2, "SKU2")
            wf["params"].update(width=width, aspect=aspect)
            wf["axes"] = {"width": width, "aspect": aspect}
            jobs.append(NewJob(2, wf))
    batch = (await queue.enqueue(Submission(
        "social_thumb", "slack:U1", jobs, platform="slack", conversation="C1",
        meta={"sweep": {"vary": ["width=256,512", "aspect=1:1,4:5"], "seeds": 1,
                        "axes": ["width", "aspect"], "grid": []}}))).batch_id
    await run_jobs(queue, store, clock, fail_row=0)
    while await notifier.run_once():
        pass
    captions = [p["text"] for k, (kind, p) in (await owed(outbox)).items() if kind == "image"
                and k.startswith("job:")]
    assert captions[0].endswith(" · width=256 · aspect=1:1")  # by key, not a bare "1:1"
    assert captions[0].startswith("row 2 · job ")  # several images a row: each its job
    summary = (await outbox.get(f"batch:{batch}:summary")).payload
    contact, results, grid = summary["paths"]
    assert grid == f"grids/batch_{batch}/grid_1_row2.png"
    sheet = load_workbook(store.path(results)).active
    rows = [list(r) for r in sheet.iter_rows(values_only=True)]
    assert rows[0][-1] == "swept values"
    assert [r[-1] for r in rows[1:]] == ["width=256 · aspect=1:1", "width=256 · aspect=4:5",
                                         "width=512 · aspect=1:1", "width=512 · aspect=4:5"]


async def ended_in_part(queue, store, clock, lang: str) -> tuple[int, int]:
    """Two batches: one canceled before anything ran; one whose row 2 made its image,
    row 3 failed and rows 4 and 5 were canceled while queued."""
    def submission(rows):
        return Submission("social_thumb", "slack:U1", [NewJob(r, workflow(r, f"S{r}"))
                                                       for r in rows],
                          platform="slack", conversation="C1", meta={"lang": lang})
    whole = (await queue.enqueue(submission((2, 3, 4)))).batch_id
    await queue.cancel(batch=whole, by="slack:U1")
    part = (await queue.enqueue(submission((2, 3, 4, 5)))).batch_id
    made = await queue.claim("exec")
    clock.advance(3)
    path = f"outputs/batch_{part}/2.png"
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), "#336699").save(buf, "PNG")
    store.write(path, buf.getvalue())
    await queue.complete(made, [path])
    await queue.fail(await queue.claim("exec"), "out of memory", retry=False)
    await queue.cancel(batch=part, by="slack:U1")
    return whole, part


@pytest.mark.parametrize("lang", ["en", "zh"])
async def test_a_canceled_batch_says_canceled_and_what_each_job_came_to(env, clock, lang):
    """Not "3/3 done … finished: 0 of 3 images" under a full bar: canceled, with how many
    were canceled, made images and failed, each its own segment of the bar."""
    queue, outbox, store, notifier = env
    whole, part = await ended_in_part(queue, store, clock, lang)
    while await notifier.run_once():
        pass
    messages = await owed(outbox)

    def said(batch, what):
        return messages[f"batch:{batch}:{what}"][1]["text"]
    assert said(whole, "summary") == {
        "en": f"Batch {whole} canceled: all 3 jobs were canceled before they made an image. "
              "Results sheet attached.",
        "zh": f"批次 {whole} 已取消：全部 3 个任务在生成图片前被取消。附结果表。"}[lang]
    assert said(whole, "progress") == {
        "en": f"Batch {whole} {'▒' * 20} canceled: 3 of 3 jobs canceled, 0 made images, 0 failed",
        "zh": f"批次 {whole} {'▒' * 20} 已取消：3 个任务中取消 3 个，成功生成图片 0 个，失败 0 个",
    }[lang]
    assert said(part, "summary") == {
        "en": f"Batch {part} canceled after 3 s: 2 of 4 jobs canceled, 1 made images, 1 failed. "
              "Contact sheet and results sheet attached.",
        "zh": f"批次 {part} 已取消，用时 3 秒：4 个任务中取消 2 个，成功生成图片 1 个，失败 1 个。"
              "附联系表和结果表。"}[lang]
    assert said(part, "progress").startswith(
        f"{'Batch' if lang == 'en' else '批次'} {part} {'█' * 5}{'▓' * 5}{'▒' * 10} ")
