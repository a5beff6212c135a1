"""The sender on SQLite and PostgreSQL: faults retried, permanent errors recorded and
reported, order per thread kept, progress edited in place at most every few seconds."""

from __future__ import annotations

import asyncio

import pytest

from bot.chat.sender import Sender
from storage.db import Database
from storage.files import FileStore
from storage.outbox import Outbox
from tests.fakes.chat import MemoryPlatform, permanent, rate_limited, server_error


@pytest.fixture
async def outbox(db_url, clock):
    db = await Database(db_url).open()
    yield Outbox(db, backoff=2.0, backoff_max=60.0, clock=clock)
    await db.close()


def sender(outbox, platform, tmp_path, clock, **kw) -> Sender:
    return Sender(outbox, platform, FileStore(tmp_path), clock=clock, **kw)


async def owe(outbox, key, *, thread="@batch:1", kind="text", platform="test", **payload):
    await outbox.put(key, platform=platform, conversation="C1", thread=thread, kind=kind,
                     payload={"text": key, "lang": "en", **payload})


async def settle(s: Sender, clock, *, step: float = 1.0, rounds: int = 400) -> None:
    """Run the sender while moving the clock on, until nothing is pending."""
    for _ in range(rounds):
        await s.run_once()
        if await s.outbox.next_due(s.platform.name) is None:
            return
        clock.advance(step)
    raise AssertionError("the outbox never emptied")


async def test_a_batch_threads_under_its_acceptance(outbox, tmp_path, clock):
    p = MemoryPlatform()
    await owe(outbox, "batch:1:accepted")
    for i in range(3):
        await owe(outbox, f"job:{i}:image:0", row=i + 2)
    await settle(sender(outbox, p, tmp_path, clock), clock)
    root, *rest = p.posts
    assert root.thread is None and [x.thread for x in rest] == [root.id] * 3
    assert (await outbox.get("job:0:image:0")).platform_id == rest[0].id


async def test_without_threads_everything_goes_to_the_conversation(outbox, tmp_path, clock):
    p = MemoryPlatform(has_threads=False, has_buttons=False)
    await owe(outbox, "batch:1:accepted")
    await outbox.put_progress("batch:1:progress", platform="test", conversation="C1",
                              thread="@batch:1", payload={"text": "0/1", "buttons": [
                                  {"label": "Cancel", "command": "/cancel 1"}]})
    await settle(sender(outbox, p, tmp_path, clock), clock)
    assert [x.thread for x in p.posts] == [None, None] and p.posts[1].buttons == ()


async def test_rate_limits_5xx_and_timeouts_are_retried_honouring_retry_after(outbox, tmp_path,
                                                                            clock):
    p = MemoryPlatform()
    p.faults = [rate_limited(30), server_error(), TimeoutError(), OSError("reset")]
    s = sender(outbox, p, tmp_path, clock)
    await owe(outbox, "batch:1:accepted")
    await s.run_once()
    m = await outbox.get("batch:1:accepted")
    assert m.error == "429 rate limited" and m.next_at == clock() + 30  # Retry-After, not 2 s
    clock.advance(29)
    await s.run_once()
    assert p.calls == 1  # not before the platform said
    await settle(s, clock)
    assert [x.text for x in p.posts] == ["batch:1:accepted"] and p.calls == 5
    assert (await outbox.get("batch:1:accepted")).status == "sent"


async def test_a_permanent_error_is_recorded_and_reported_in_the_conversation(outbox, tmp_path,
                                                                             clock):
    p = MemoryPlatform()
    await owe(outbox, "batch:1:accepted")
    await owe(outbox, "job:7:image:0", kind="image", row=4, path="outputs/x.png")
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "x.png").write_bytes(b"png")
    s = sender(outbox, p, tmp_path, clock)
    await s.run_once()
    p.faults = [permanent("not_in_channel")]
    await settle(s, clock)
    failed = await outbox.get("job:7:image:0")
    assert (failed.status, failed.error, failed.attempts) == ("failed", "not_in_channel", 1)
    assert p.posts[-1].text == "I could not post the image of row 4 here: not_in_channel"
    assert p.posts[-1].thread == p.posts[0].id


async def test_a_message_that_keeps_failing_is_given_up_after_its_attempts(outbox, tmp_path,
                                                                          clock):
    p = MemoryPlatform()
    p.faults = [server_error() for _ in range(3)]
    await owe(outbox, "reply:test:M1:0", thread=None)
    await settle(sender(outbox, p, tmp_path, clock, attempts=3), clock, step=100)
    m = await outbox.get("reply:test:M1:0")
    assert (m.status, m.attempts) == ("failed", 3)
    assert [x.text for x in p.posts] == ["I could not post a message here: 500 internal error"]


async def test_a_429_storm_delivers_every_image_once_in_order(outbox, tmp_path, clock):
    p = MemoryPlatform()
    await owe(outbox, "batch:1:accepted")
    await owe(outbox, "batch:2:accepted", thread="@batch:2")
    for i in range(20):
        await owe(outbox, f"job:{i}:image:0", thread=f"@batch:{1 + i % 2}")
    p.faults = [rate_limited(1.0) if i % 3 else server_error() for i in range(30)]
    await settle(sender(outbox, p, tmp_path, clock), clock, step=2.0)
    texts = [x.text for x in p.posts]
    assert sorted(texts) == sorted(["batch:1:accepted", "batch:2:accepted"] +
                                   [f"job:{i}:image:0" for i in range(20)])
    for batch in (1, 2):  # in order within each thread
        thread = [x.text for x in p.posts if x.thread == p.posts[texts.index(
            f"batch:{batch}:accepted")].id]
        assert thread == [f"job:{i}:image:0" for i in range(20) if 1 + i % 2 == batch]


async def test_progress_is_edited_in_place_at_most_every_few_seconds(outbox, tmp_path, clock):
    p = MemoryPlatform()
    s = sender(outbox, p, tmp_path, clock, progress_every=3.0)

    async def progress(done):
        await outbox.put_progress("batch:1:progress", platform="test", conversation="C1",
                                  thread="@batch:1", payload={"text": f"{done}/9"})
    await owe(outbox, "batch:1:accepted")
    await progress(0)
    await s.run_once()
    await s.run_once()
    for done in range(1, 6):  # five states within two seconds
        await progress(done)
        clock.advance(0.4)
        await s.run_once()
    assert p.posts[1].edits == []  # held: 3 s have not passed
    clock.advance(1.0)
    await s.run_once()
    assert p.posts[1].edits == ["5/9"] and len(p.posts) == 2  # the newest state, one edit


async def test_auto_save_off_deletes_a_batchs_images_once_its_summary_is_sent(outbox, tmp_path,
                                                                             clock):
    store = FileStore(tmp_path)
    image = store.write("outputs/batch_1/a.png", b"png")
    results = store.write("outputs/batch_1/results.xlsx", b"xlsx")
    await owe(outbox, "batch:1:accepted")
    await owe(outbox, "job:1:image:0", kind="image", path=image)
    await owe(outbox, "batch:1:summary:results", kind="file", path=results,
              delete_after=[image])
    p = MemoryPlatform()
    s = sender(outbox, p, tmp_path, clock)
    await s.run_once()
    await s.run_once()
    assert store.path(image).exists()  # delivered, but the summary is still owed
    await s.run_once()
    assert not store.path(image).exists() and store.path(results).exists()
    assert [x.file for x in p.posts] == [None, "a.png", "results.xlsx"]


async def test_two_services_sending_from_one_outbox_post_each_message_once(outbox, tmp_path,
                                                                           clock):
    platform = MemoryPlatform()
    for i in range(20):
        await owe(outbox, f"job:{i}:text", thread=f"@batch:{i % 3}")
    # Two senders (as two services on one database would run) in overlapping rounds.
    a, b = sender(outbox, platform, tmp_path, clock), sender(outbox, platform, tmp_path, clock)
    for _ in range(40):
        await asyncio.gather(a.run_once(), b.run_once(), a.run_once())
    texts = [p.text for p in platform.posts]
    assert sorted(texts) == sorted(f"job:{i}:text" for i in range(20))


async def test_a_slow_send_keeps_its_claim_and_a_dead_senders_message_falls_due_soon(
        outbox, tmp_path):
    """Claims are renewed while a send lasts, so another service never posts a long upload
    again; a sender that dies mid-send lets go of its message within one claim's length."""
    real = Outbox(outbox.db)  # the real clock: claims are renewed in real time
    platform = MemoryPlatform()
    a, b = (Sender(real, platform, FileStore(tmp_path), claim_seconds=1.5) for _ in range(2))
    platform.faults = [3.0]  # the first send takes two claim lengths
    await owe(real, "job:1:text", thread="@batch:1")
    slow = asyncio.create_task(a.run_once())
    while platform.calls < 1:  # a is sending
        await asyncio.sleep(0.02)
    while not slow.done():  # the other service looks for due messages all along
        await b.run_once()
        await asyncio.sleep(0.1)
    assert [p.text for p in platform.posts] == ["job:1:text"]

    platform.faults = [60.0]  # a hangs in its next send, and dies there
    await owe(real, "job:2:text", thread="@batch:2")
    dying = asyncio.create_task(a.run_once())
    while platform.calls < 2:
        await asyncio.sleep(0.02)
    dying.cancel()
    async with asyncio.timeout(10):  # falls due 1.5 s after its last renewal
        while len(platform.posts) < 2:
            await b.run_once()
            await asyncio.sleep(0.05)
    assert [p.text for p in platform.posts] == ["job:1:text", "job:2:text"]


async def test_a_stop_lets_the_post_under_way_finish_and_be_marked_sent(tmp_path, db_url):
    """A stop is normal operation: a post the platform is taking when the service stops
    (ChatCore.stop) is marked sent before the sender ends — cut off between the two, it
    would be owed still and posted again on restart (a DingTalk image twice, seen under
    load). No new post starts once stopping: the thread's next message stays owed."""
    from bot.chat.hub import ChatCore
    from tests.fakes.apps import app_on
    platform = MemoryPlatform()
    platform.faults = [0.5]  # the first post takes half a second
    async with app_on(tmp_path, db_url) as app:
        core = ChatCore(app, [platform])
        await owe(core.outbox, "job:1:text", thread="@batch:1")
        await owe(core.outbox, "job:2:text", thread="@batch:1")  # next in its thread
        core.start()
        while platform.calls < 1:  # posting job 1
            await asyncio.sleep(0.01)
        await core.stop()
        assert [p.text for p in platform.posts] == ["job:1:text"]
        assert [m.key for m in await core.outbox.due("test", 10)] == ["job:2:text"]
