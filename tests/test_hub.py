"""The whole chat story on the in-process test platform: files and /gen in, every image and
the summary out, in English and Chinese; and a restart mid-batch delivers the rest once."""

from __future__ import annotations

import asyncio
import io
from collections import Counter

import pytest
from openpyxl import load_workbook
from PIL import Image

from tests.conftest import ROOT, executor_config
from tests.fakes.chat import MemoryPlatform, World, example, rate_limited, server_error


def chat_config(tmp_path, demo_models, **chat):
    return executor_config(tmp_path / "data", demo_models,
                           chat={"progress_every": 0.5, **chat})


def upload_examples(platform: MemoryPlatform):
    sheet = platform.upload("social_thumb.xlsx", example("social_thumb.xlsx"))
    images = [platform.upload(n, (ROOT / "examples" / "assets" / n).read_bytes())
              for n in ("bottle.png", "chair.png")]
    return (sheet, *images)


@pytest.mark.parametrize("lang", ["en", "zh"])
async def test_the_whole_story_from_upload_to_summary(tmp_path, demo_models, lang):
    languages = ["test:C1=zh"] if lang == "zh" else []
    async with World(chat_config(tmp_path, demo_models, languages=languages)) as w:
        p = w.platform
        (got,) = await w.send(files=upload_examples(p))  # a DM with the sheet and its pictures
        assert ("Got social_thumb.xlsx, bottle.png, chair.png" if lang == "en" else
                "已收到 social_thumb.xlsx, bottle.png, chair.png") in got.text

        accepted, progress = await w.send("/gen social_thumb social_thumb.xlsx")
        assert accepted.thread is None and progress.thread == accepted.id  # a thread per batch
        assert accepted.text == ("Batch 1 accepted: 2 social_thumb jobs. 0 jobs ahead; waits "
                                 "for an executor." if lang == "en" else
                                 "批次 1 已接收：2 个 social_thumb 任务。"
                                 "前面还有 0 个任务；等待执行器。")
        assert [b.command for b in progress.buttons] == ["/cancel 1"]

        w.start_executor()
        await w.finish()
        thread = p.in_thread(accepted.id)
        assert thread[0] is progress
        assert progress.shown.startswith("Batch 1 ████████████████████ 2/2 done, 0 failed"
                                         if lang == "en" else
                                         "批次 1 ████████████████████ 已完成 2/2")
        assert progress.buttons == ()  # finished: the Cancel button is gone
        images = [x for x in thread if x.image and x.file != "contact.png"]
        assert [x.text for x in images] == (
            ["row 2 · 新品上市 · 限时九折 · 1:1", "row 3 · Autumn collection · 4:5"]
            if lang == "en" else
            ["第 2 行 · 新品上市 · 限时九折 · 1:1",
             "第 3 行 · Autumn collection · 4:5"])
        for x in images:
            assert Image.open(io.BytesIO(x.data)).size[0] == 1080
        summary, results = thread[-2:]  # the summary's text captions the contact sheet
        assert summary.mention == "U1" and ("2 of 2 images, 0 failed" in summary.text
                                            or "2 张中成功 2 张" in summary.text)
        assert summary.image and summary.file == "contact.png"
        sheet = load_workbook(io.BytesIO(results.data)).active
        assert results.file == "results.xlsx" and sheet.max_row == 3
        assert len(p.posts) == 2 + len(thread)  # nothing else, nothing twice
        assert await w.core.outbox.counts() == {"sent": len(p.posts)}


async def test_a_restart_mid_batch_under_429s_delivers_the_rest_exactly_once(tmp_path, demo_models,
                                                                            quick_retries):
    config = chat_config(tmp_path, demo_models)
    platform = MemoryPlatform()
    async with World(config, [platform]) as w:
        await w.send(files=upload_examples(platform))
        await w.send("/gen social_thumb social_thumb.xlsx")
        w.start_executor()
        async with asyncio.timeout(60):
            while (await w.queue.active_counts()).total:
                await asyncio.sleep(0.05)
        await w.stop_executor()
        while await w.core.notifier.run_once():
            pass
        platform.faults = [rate_limited(0.0), server_error()]
        sender = w.core.senders["test"]
        for _ in range(3):
            await sender.run_once()  # a 429, a 500, one more post; then the service dies
        delivered = len(platform.posts)
    # A new process: fresh objects over the same database and the same chat account.
    platform.faults = [rate_limited(0.0), rate_limited(0.0), server_error()]
    async with World(config, [platform]) as again:
        await again.finish()
    assert platform.faults == []
    names = Counter((x.thread, x.text, x.file) for x in platform.posts)
    assert all(n == 1 for n in names.values()), names
    assert delivered < len(platform.posts)
    assert sum(1 for x in platform.posts if x.image) == 3  # two images and the contact sheet


async def test_the_background_loops_deliver_without_being_pumped(tmp_path, demo_models):
    """What `genbot serve` runs: the notifier and sender loops, woken by what is owed."""
    async with World(chat_config(tmp_path, demo_models)) as w:
        w.core.start()
        try:
            p = w.platform
            await w.core.chat.receive(p.message("/help"))
            await w.core.chat.receive(p.message(files=upload_examples(p)))
            await w.core.chat.receive(p.message("/gen social_thumb social_thumb.xlsx"))
            w.start_executor()
            async with asyncio.timeout(60):
                while not any(x.file == "results.xlsx" for x in p.posts):
                    await asyncio.sleep(0.05)
            assert p.posts[0].text.startswith("Commands") and p.posts[1].text.startswith("Got ")
            assert sum(1 for x in p.posts if x.image) == 3
        finally:
            await w.core.stop()
