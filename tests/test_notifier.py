"""The notifier on SQLite and PostgreSQL: queue events in, owed messages out, once."""

from __future__ import annotations

import io

import pytest
from openpyxl import load_workbook
from PIL import Image

from bot.chat.notifier import Notifier
from executor.workflow import load_templates
from storage.db import Database
from storage.files import FileStore
from storage.outbox import Outbox
from storage.queue import NewJob, Queue, Submission
from tests.conftest import ROOT, queue_settings

TEMPLATES, _ = load_templates(ROOT / "templates")


@pytest.fixture
async def env(db_url, clock, tmp_path):
    db = await Database(db_url).open()
    queue = Queue(db, queue_settings(), clock=clock)
    outbox = Outbox(db, clock=clock)
    store = FileStore(tmp_path)
    yield queue, outbox, store, Notifier(queue, outbox, store, platforms={"slack"},
                                         editable={"slack"}, templates=TEMPLATES, clock=clock)
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
    assert images[next(iter(images))]["text"] == "第 2 行 · 新品 SKU2 · 1:1 · 1080"
    (failure,) = [p for k, (_, p) in messages.items() if k.endswith(":failed")]
    assert failure["text"] == "第 3 行失败：node gen (generate): out of memory"
    progress = messages[f"batch:{batch}:progress"][1]
    assert (progress["done"], progress["total"], progress["failed"], progress["finished"]) == \
        (3, 3, 1, True)
    assert progress["buttons"] == []  # finished: no Cancel button
    summary = messages[f"batch:{batch}:summary"][1]
    assert summary["mention"] == "slack:U1" and "3 张中成功 2 张，失败 1" in summary["text"]
    keys = list(messages)
    assert keys[-3:] == [f"batch:{batch}:summary", f"batch:{batch}:summary:contact",
                         f"batch:{batch}:summary:results"]  # the summary comes last, in order
    results = messages[f"batch:{batch}:summary:results"][1]
    assert results["delete_after"] == []  # auto_save keeps the images
    sheet = load_workbook(store.path(results["path"])).active
    rows = [list(r) for r in sheet.iter_rows(values_only=True)]
    assert rows[0] == ["行号", "image", "title", "aspect", "width", "position", "text_color",
                       "band_color", "watermark", "状态", "输出文件", "错误"]
    assert rows[1][:5] == [2, "inputs/abc.png", "新品 SKU2", "1:1", 1080]
    assert rows[2][0] == 3 and rows[2][9] == "failed" and "out of memory" in rows[2][11]
    contact = messages[f"batch:{batch}:summary:contact"]
    assert contact[0] == "image" and Image.open(store.path(contact[1]["path"])).size[0] > 0


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
        "social_thumb", "dingtalk:U1", [NewJob(r, workflow(r, "A")) for r in range(2, 6)],
        platform="dingtalk", conversation="C1"))).batch_id
    while (lease := await queue.claim("exec")) is not None:  # the notifier keeps up
        buf = io.BytesIO()
        Image.new("RGB", (16, 16), "#aa3300").save(buf, "PNG")
        path = store.write(f"outputs/batch_{batch}/{lease.row}.png", buf.getvalue())
        await queue.complete(lease, [path])
        await notifier.run_once()
    messages = await owed(outbox)
    assert f"batch:{batch}:progress" not in messages
    milestones = [p["text"] for k, (_, p) in messages.items() if ":milestone:" in k]
    assert milestones == [f"Batch {batch}: 25% — 1/4 done, 0 failed",
                          f"Batch {batch}: 50% — 2/4 done, 0 failed",
                          f"Batch {batch}: 75% — 3/4 done, 0 failed"]  # 100%: the summary
    results = messages[f"batch:{batch}:summary:results"][1]
    assert sorted(results["delete_after"]) == [f"outputs/batch_{batch}/{r}.png"
                                               for r in range(2, 6)]
    assert all(m.thread == f"@batch:{batch}" for m in [await outbox.get(k) for k in messages])
