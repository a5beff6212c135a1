"""Retention: `genbot prune --finished-before AGE` and the daily run forget what finished
long ago — batches with their jobs, events and outputs, loose events, sent messages —
archiving each batch first when asked, and leave everything younger or unfinished."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from bot.app.retention import duration
from bot.cli.genbot import main
from storage import config as cfg
from storage.files import open_store
from storage.outbox import Outbox
from storage.queue import NewJob, Queue, Submission
from storage.queue import open_queue as open_queue_at
from storage.renditions import Rendition, Renditions

DAY = 86400.0


def test_ages_read_as_people_write_them():
    assert [duration(t) for t in ("30d", "12h", "90m", "2w", "45", "1.5d")] == \
        [30 * DAY, 12 * 3600, 90 * 60, 14 * DAY, 45, 1.5 * DAY]
    with pytest.raises(ValueError, match="like 30d"):
        duration("thirty days")


async def history(config: cfg.Config) -> dict[str, int]:
    """Two batches finished ten days ago (one with an output file), one finished today,
    one still queued; an old pause and resume; an old sent chat message."""
    ten_days_ago = time.time() - 10 * DAY
    queue = await open_queue_at(config)
    old = Queue(queue.db, queue.settings, clock=lambda: ten_days_ago)
    store = open_store(config)
    ids = {}
    try:
        for name in ("old", "old2"):
            ids[name] = (await old.enqueue(Submission("t", "cli:me", [NewJob(2, {})]))).batch_id
            lease = await old.claim("exec")
            path = store.write(f"outputs/batch_{ids[name]}/2.png", b"png")
            await Renditions(queue.db).record(lease.job_id, [Rendition(  # a channel's file
                lease.job_id, ids[name], "jd", "main", "A1_jd_1.jpg",
                f"outputs/batch_{ids[name]}/deliver/jd/A1_jd_1.jpg", 8, 8, 3, "0" * 64)])
            await old.complete(lease, [path])
        await old.pause("admin")
        await old.resume("admin")
        outbox = Outbox(queue.db, clock=lambda: ten_days_ago)
        await outbox.put("m1", platform="slack", conversation="C1", thread=None, kind="text",
                         payload={"text": "hi"})
        (message,) = await outbox.due("slack")
        await outbox.sent(message, "ts1")
        ids["recent"] = (await queue.enqueue(Submission("t", "cli:me", [NewJob(2, {})]))).batch_id
        await queue.complete(await queue.claim("exec"), [])
        ids["waiting"] = (await old.enqueue(Submission("t", "cli:me", [NewJob(2, {})]))).batch_id
    finally:
        await queue.close()
    return ids


def test_prune_forgets_what_finished_before_the_age_and_archives_it(tmp_path, monkeypatch,
                                                                    capsys):
    monkeypatch.chdir(tmp_path)
    config = cfg.load(None, env={})
    ids = asyncio.run(history(config))
    assert main(["prune", "--finished-before", "7d", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith(
        "would forget 2 batches finished before ")
    archive = tmp_path / "archive" / "old.jsonl"
    assert main(["prune", "--finished-before", "7d", "--archive", str(archive)]) == 0
    said = capsys.readouterr().out
    assert said.startswith("forgot 2 batches finished before ") and \
        "2 other events and 1 chat message; archived to" in said, said
    lines = [json.loads(line) for line in archive.read_text().splitlines()]
    assert [line["batch"]["id"] for line in lines] == [ids["old"], ids["old2"]]
    assert [j["status"] for j in lines[0]["jobs"]] == ["succeeded"]
    assert [e["kind"] for e in lines[0]["events"]] == ["submitted", "running", "succeeded"]

    async def left():
        queue = await open_queue_at(config)
        try:
            batches = {name: await queue.batch(i) is not None for name, i in ids.items()}
            kinds = [e.kind for e in await queue.events_after(0) if e.batch_id is None]
            messages = await Outbox(queue.db).counts()
            made = [len(await Renditions(queue.db).of_batch(i)) for i in ids.values()]
            return batches, kinds, messages, made
        finally:
            await queue.close()
    batches, loose, messages, made = asyncio.run(left())
    assert batches == {"old": False, "old2": False, "recent": True, "waiting": True}
    assert made == [0, 0, 0, 0]  # (the old batches' channel files went with them)
    assert loose == [] and messages == {}
    assert not (tmp_path / "data" / "outputs" / f"batch_{ids['old']}").exists()
    assert main(["prune", "--finished-before", "7d"]) == 0  # nothing left to take
    assert capsys.readouterr().out.startswith("forgot 0 batches")


def test_a_bad_age_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["prune", "--finished-before", "a month"])
    assert "is not a duration: a number and a unit, like 30d" in capsys.readouterr().err
