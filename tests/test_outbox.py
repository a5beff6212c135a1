"""The outbox on SQLite and PostgreSQL: owed once, in order per thread, retried, edited."""

from __future__ import annotations

import pytest

from storage.db import Database
from storage.outbox import Outbox


@pytest.fixture
async def outbox(db_url, clock):
    db = await Database(db_url).open()
    yield Outbox(db, backoff=2.0, backoff_max=60.0, clock=clock)
    await db.close()


async def owe(outbox, key, thread="T1", conversation="C1", kind="text", **payload):
    return await outbox.put(key, platform="slack", conversation=conversation, thread=thread,
                            kind=kind, payload=payload or {"text": key})


async def test_a_message_is_owed_once_by_key(outbox):
    assert await owe(outbox, "batch:1:accepted")
    assert not await owe(outbox, "batch:1:accepted", text="replayed after a restart")
    (m,) = await outbox.due("slack")
    assert m.payload == {"text": "batch:1:accepted"} and m.status == "pending"
    assert await outbox.sent(m, "1712.0001")
    assert await outbox.due("slack") == []
    assert (await outbox.get("batch:1:accepted")).platform_id == "1712.0001"
    assert not await owe(outbox, "batch:1:accepted")  # sent: still not owed again


async def test_each_thread_gets_its_messages_in_order_even_while_one_is_retried(outbox, clock):
    for i in range(3):
        await owe(outbox, f"job:{i}:image", kind="image", path=f"{i}.png")
    await owe(outbox, "other", thread="T2")
    first, other = await outbox.due("slack")
    assert (first.key, other.key) == ("job:0:image", "other")
    await outbox.retry(first, "429 rate limited", retry_after=30)
    assert [m.key for m in await outbox.due("slack")] == ["other"]  # T1 waits for its first image
    clock.advance(29)
    assert [m.key for m in await outbox.due("slack")] == ["other"]
    clock.advance(2)
    (again, _) = await outbox.due("slack")
    assert again.key == "job:0:image" and again.error == "429 rate limited"
    assert again.attempts == 0  # a rate limit is the platform's pace, not a failed try
    await outbox.sent(again, "F1")
    assert [m.key for m in await outbox.due("slack")][0] == "job:1:image"


async def test_retries_back_off_and_a_permanent_error_is_recorded(outbox, clock):
    await owe(outbox, "k")
    (m,) = await outbox.due("slack")
    await outbox.retry(m, "503")
    clock.advance(1.9)
    assert await outbox.due("slack") == []
    clock.advance(0.2)
    (m,) = await outbox.due("slack")
    await outbox.retry(m, "timeout")  # 4 s now
    clock.advance(3.9)
    assert await outbox.due("slack") == []
    clock.advance(0.2)
    (m,) = await outbox.due("slack")
    await outbox.failed(m, "channel_not_found")
    assert await outbox.due("slack") == [] and await outbox.counts() == {"failed": 1}
    assert (await outbox.get("k")).error == "channel_not_found"


async def test_progress_is_one_message_edited_with_the_newest_state(outbox):
    async def progress(done):
        await outbox.put_progress("batch:1:progress", platform="slack", conversation="C1",
                                  thread="T1", payload={"done": done})
    await progress(1)
    await progress(2)  # not sent yet: simply the newer state
    (m,) = await outbox.due("slack")
    assert m.payload == {"done": 2} and m.platform_id is None
    await progress(3)  # arrives while m is being sent
    assert not await outbox.sent(m, "MSG1")  # stays pending, with the message's id
    (m,) = await outbox.due("slack")
    assert (m.payload, m.platform_id) == ({"done": 3}, "MSG1")  # an edit of MSG1
    assert await outbox.sent(m, "MSG1")
    await progress(3)  # the same state again: nothing to edit
    assert await outbox.due("slack") == []
    await progress(4)
    (m,) = await outbox.due("slack")
    assert m.platform_id == "MSG1" and m.kind == "progress"


async def test_progress_edits_wait_out_the_hold_and_never_hold_up_images(outbox, clock):
    async def progress(done):
        await outbox.put_progress("batch:1:progress", platform="slack", conversation="C1",
                                  thread="T1", payload={"done": done})
    await owe(outbox, "batch:1:accepted")
    await progress(0)
    (accepted,) = await outbox.due("slack")  # the edit waits for the older acceptance
    assert accepted.key == "batch:1:accepted"
    await outbox.sent(accepted, "ROOT")
    (m,) = await outbox.due("slack")
    await outbox.sent(m, "MSG1", hold=3.0)
    await progress(1)
    assert await outbox.due("slack") == [] and await outbox.next_due("slack") == clock() + 3.0
    await owe(outbox, "job:1:image", kind="image")
    assert [m.key for m in await outbox.due("slack")] == ["job:1:image"]  # the edit is held
    clock.advance(3.1)
    assert {m.key for m in await outbox.due("slack")} == {"batch:1:progress", "job:1:image"}


async def test_each_platform_is_handed_only_its_own_messages(outbox, clock):
    await owe(outbox, "s")
    await outbox.put("d", platform="dingtalk", conversation="C1", thread=None, kind="text",
                     payload={"text": "d"})
    assert [m.key for m in await outbox.due("dingtalk")] == ["d"]
    assert [m.key for m in await outbox.due("slack")] == ["s"]
    assert await outbox.next_due("dingtalk") == clock()
    assert await outbox.due("teams") == [] and await outbox.next_due("teams") is None


async def test_cursors_resume_where_the_reader_stopped(outbox):
    assert await outbox.cursor("notifier") == 0
    await outbox.advance("notifier", 41)
    await outbox.advance("notifier", 42)
    assert await outbox.cursor("notifier") == 42 and await outbox.cursor("other") == 0


async def test_a_due_message_is_claimed_by_one_sender_and_falls_due_again_if_it_dies(outbox,
                                                                                    clock):
    await owe(outbox, "job:1:image", kind="image", path="1.png")
    (m,) = await outbox.due("slack")
    (same,) = await outbox.due("slack")  # another service read it too
    assert await outbox.claim(m, seconds=60)
    assert not await outbox.claim(same, seconds=60)  # one sender only
    assert await outbox.due("slack") == []  # claimed: not due to anyone
    clock.advance(61)  # the claimer died without a word
    (again,) = await outbox.due("slack")
    held = await outbox.claim(again, seconds=60)
    assert again.id == m.id and held is not None
    clock.advance(50)
    renewed = await outbox.renew(again, held, seconds=60)  # the upload goes on: still mine
    assert renewed == clock() + 60
    assert await outbox.renew(again, held) is None  # only the latest claim time holds it
    clock.advance(50)  # 100 s after the claim
    assert await outbox.due("slack") == []
    assert await outbox.sent(again, "P1")
    assert await outbox.renew(again, renewed) is None  # sent: nothing left to hold
    assert await outbox.counts() == {"sent": 1}
