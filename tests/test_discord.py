"""The Discord adapter against a fake Discord on loopback (tests/fakes/discord.py):
interactions really signed with Ed25519 as Discord sends them and posted to the service's
own endpoint, or dispatched over the fake's gateway; every call out made by discord.py."""

from __future__ import annotations

import re

import pytest

from tests.fakes.dingtalk import ASSETS, SHEET
from tests.fakes.discord import (
    DiscordWorld,
    FakeDiscord,
    discord_config,
    shown,
    signed,
)
from tests.fakes.hostile import FILE, HOSTILE, NO_HTML, UNUSED, hostile_sheet, read
from tests.fakes.service import raw_post, tracebacks

DEFERRED, DEFERRED_UPDATE, EPHEMERAL = 5, 6, 64


@pytest.fixture
async def fake():
    f = await FakeDiscord().start()
    with f.patch_discord_py():
        yield f
    await f.stop()


def gen_options(fake: FakeDiscord) -> dict:
    return {"template": "social_thumb",
            "sheet": fake.attach("social_thumb.xlsx", SHEET),
            "picture1": fake.attach("bottle.png", (ASSETS / "bottle.png").read_bytes()),
            "picture2": fake.attach("chair.png", (ASSETS / "chair.png").read_bytes())}


async def test_a_slash_command_batch_is_one_thread_with_one_edited_progress_message(
        tmp_path, demo_models, fake):
    """/gen with the sheet and pictures attached: answered within Discord's 3 s (deferred,
    for the sender alone); the acceptance for everyone and a thread started from it; in
    the thread one progress message edited, each image one message with its buttons, the
    summary with results.xlsx — three messages besides the images."""
    async with DiscordWorld(discord_config(tmp_path, demo_models, fake), fake) as w:
        answer = await w.slash("gen", gen_options(fake))
        assert (answer["status"], answer["json"]) == (200, {"type": DEFERRED, "data": {
            "flags": EPHEMERAL}})
        assert answer["seconds"] < 3
        (accepted,) = await w.until(lambda: w.public(w.channel))
        assert shown(accepted.content).startswith("Batch 1 accepted: 2 social_thumb jobs")
        w.start_executor()
        await w.finish(timeout=120)
        thread = accepted.id  # (a thread's id is the id of the message it started from)
        done = await w.until(lambda: [m for m in w.public(thread) if "results.xlsx" in
                                      m.filenames])
        assert [t["parent_id"] for t in fake.threads if t["id"] == thread] == [w.channel["id"]]
        posted = w.public(thread)
        images = [m for m in posted if m not in fake.non_image(posted) and m.components]
        assert len(images) == 2 and all(len(m.attachments) == 1 for m in images)
        labels = {c["label"] for row in images[0].components for c in row["components"]}
        assert {"⭐ Keep", "👎 Reject"} <= labels and any("Upscale" in x for x in labels), labels
        besides = [accepted, *[m for m in posted if m not in images]]
        assert len(besides) == 3, [m.content for m in besides]
        (progress,) = [m for m in besides if fake.edits_of(m.id)]
        assert "2/2" in shown(progress.content)
        assert shown(done[0].content).startswith(f"<@{w.alice['id']}> Batch 1 finished")
        assert sorted(done[0].filenames) == ["contact.png", "results.xlsx"]
        # the "thinking…" Alice alone saw said nothing: it is gone
        assert not [m for m in fake.messages_in(w.channel, bot_only=True) if m.loading]
        assert await w.queue.batches_of(f"discord:{w.alice['id']}") == [1]


async def test_a_button_is_its_command_from_whoever_pressed_it_once(tmp_path, demo_models,
                                                                    fake):
    async with DiscordWorld(discord_config(tmp_path, demo_models, fake), fake) as w:
        await w.slash("gen", gen_options(fake))
        (accepted,) = await w.until(lambda: w.public(w.channel))
        w.start_executor()
        await w.finish(timeout=120)
        image = await w.until(lambda: next((m for m in w.public(accepted.id) if any(
            a.is_image for a in m.attachments)), None))
        answer = await w.press(image, "Upscale")
        assert answer["json"] == {"type": DEFERRED_UPDATE}
        await w.until(lambda: w.queue.batch(2))
        batch = await w.queue.batch(2)
        assert batch.submitter == f"discord:{w.alice['id']}" and \
            batch.meta["action"] == "upscale"
        # Bob's press: refused, in his language, to him alone; nothing queued
        await w.press(image, "Upscale", user=w.bob, locale="zh-CN")
        refusal = await w.until(lambda: [t for t in w.private(accepted.id)
                                         if "只有提交者或管理员" in t])
        assert refusal and await w.queue.batch(3) is None


async def test_forged_stale_and_replayed_interactions_are_refused_or_run_once(
        tmp_path, demo_models, fake, caplog):
    async with DiscordWorld(discord_config(tmp_path, demo_models, fake), fake) as w:
        url = f"{w.url}/discord/interactions"
        pong = await fake.post_interaction(url, fake.ping())
        assert pong["status"] == 200 and pong["json"] == {"type": 1}  # (Discord's URL check)

        def status() -> dict:
            return fake.command_interaction("status", {}, user=w.alice, channel=w.channel,
                                            guild_id=w.guild["id"], locale="en-US")

        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        forged = await fake.post_interaction(url, status(), key=Ed25519PrivateKey.generate())
        assert forged["status"] == 401
        raw, headers = signed(status(), timestamp=int(fake.now()))
        headers["X-Signature-Timestamp"] = str(int(fake.now()) + 1)  # the signature covers it
        assert (await raw_post(w.url, "/discord/interactions", lines(headers), raw))[0] == 401
        stale = await fake.post_interaction(url, status(), timestamp=int(fake.now()) - 3600)
        assert stale["status"] == 401  # signed, but older than a token lives
        for junk in (b"", b"[]", b"{", b"\xff\xfe", b"[" * 100_000, b'{"type": 2}'):
            code, _ = await raw_post(w.url, "/discord/interactions",
                                     lines(signed_raw(junk)), junk)
            assert 400 <= code < 500, junk[:20]
        assert [m for m in fake.messages if m.by_bot] == []
        # the same signed interaction twice (a replay): answered, run once
        replayed, at = status(), int(fake.now())
        assert (await fake.post_interaction(url, replayed, timestamp=at))["status"] == 200
        raw, headers = signed(replayed, timestamp=at)  # the very bytes, sent again
        assert (await raw_post(w.url, "/discord/interactions", lines(headers), raw))[0] == 200
        await w.until(lambda: w.private())
        await w.core.settle()
        assert len(w.private()) == 1
        assert tracebacks(caplog) == []


def lines(headers: dict[str, str]) -> bytes:
    return b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items())


def signed_raw(body: bytes) -> dict[str, str]:
    """Discord's two headers over raw bytes (for bodies that are no JSON)."""
    import time

    from tests.fakes.discord import PRIVATE_KEY
    ts = str(int(time.time()))
    return {"X-Signature-Ed25519": PRIVATE_KEY.sign(ts.encode() + body).hex(),
            "X-Signature-Timestamp": ts, "Content-Type": "application/json"}


async def test_replies_go_to_the_sender_alone_in_their_language_split_to_fit(
        tmp_path, demo_models, fake):
    """/help in Chinese: the deferred answer replaced by the first part, the rest as
    follow-ups, each ≤ 2,000 characters, all for the sender alone; a submitter's /pause
    refused the same way; autocomplete lists the templates that match."""
    async with DiscordWorld(discord_config(tmp_path, demo_models, fake), fake) as w:
        assert (await w.slash("help", locale="zh-CN"))["json"]["type"] == DEFERRED
        parts = await w.until(lambda: len(w.private()) >= 2 and w.private())
        assert all(len(p) <= 2000 for p in parts) and "/gen" in "".join(parts)
        assert "帮助" in "".join(parts) or "命令" in "".join(parts)
        await w.slash("pause")
        await w.until(lambda: [t for t in w.private() if "/pause needs the admin role" in t])
        assert not await w.queue.paused()
        asked = fake.autocomplete_interaction("gen", {"template": "soc"}, focused="template",
                                              value="soc", user=w.alice,
                                              guild_id=w.guild["id"], channel=w.channel)
        answer = await fake.post_interaction(f"{w.url}/discord/interactions", asked)
        choices = answer["json"]["data"]["choices"]
        assert choices[0]["value"] == "social_thumb" and len(choices) == 1
        assert choices[0]["name"].startswith("social_thumb — ")


async def test_a_role_mapped_in_config_may_pause_and_rate_limits_are_waited_out(
        tmp_path, demo_models, fake):
    role = "777000000000000007"
    config = discord_config(tmp_path, demo_models, fake, roles=[f"{role}=admin"])
    async with DiscordWorld(config, fake) as w:
        fake.role(w.guild, "genbot admins", id=role)
        boss = fake.member(w.guild, fake.user("carol"), roles=[role])
        fake.limit("/messages", times=3, retry_after=0.1)  # discord.py waits each out
        await w.slash("pause", user=boss["user"], member=boss)
        await w.until(lambda: w.queue.paused())
        said = await w.until(lambda: w.public(w.channel))  # an announcement: for everyone
        await w.until(lambda: not [m for m in fake.messages_in(w.channel) if m.loading])
        assert len(said) == 1 and fake.throttled == 3
        # A 429 without Discord's Via is Cloudflare's: discord.py gives up at once; the
        # outbox tries again after its Retry-After, and the message is posted once.
        fake.cloudflare("/messages", times=1, retry_after=1)
        await w.slash("resume", user=boss["user"], member=boss)
        await w.until(lambda: len(w.public(w.channel)) == 2, timeout=60)
        assert not await w.queue.paused()


async def test_over_the_gateway_interactions_and_mentions_arrive_and_a_drop_resumes(
        tmp_path, demo_models, fake):
    """Gateway mode (no public URL): discord.py connects with the intents genbot needs; a
    slash command over INTERACTION_CREATE is answered at once through the callback; a
    message that @-mentions the bot with the sheet and pictures attached starts a batch in
    a thread from that message; a DM is answered in the DM; a dropped connection resumes."""
    from tests.fakes.discord import BOT_ID
    config = discord_config(tmp_path, demo_models, fake, mode="gateway", public_key="",
                            message_content=True)
    async with DiscordWorld(config, fake) as w:
        await fake.wait_ready()
        assert fake.identifies[0]["intents"] & (1 << 15)  # MESSAGE_CONTENT, asked for
        payload = fake.command_interaction("status", {}, user=w.alice, channel=w.channel,
                                           guild_id=w.guild["id"], locale="en-US")
        await fake.interaction(payload)
        await w.until(lambda: [r for r in fake.responses if r["interaction"] == payload["id"]
                               and r["type"] == DEFERRED])
        await w.until(lambda: [t for t in w.private() if "batch" in t.lower()])
        files = [fake.attach("social_thumb.xlsx", SHEET, channel=w.channel),
                 *[fake.attach(n, (ASSETS / n).read_bytes(), channel=w.channel)
                   for n in ("bottle.png", "chair.png")]]
        asked = fake.post_as(w.alice, w.channel, f"<@{BOT_ID}> /gen social_thumb",
                             attachments=files)
        await fake.deliver(asked)
        accepted = await w.until(lambda: w.public(asked.id))  # the thread from Alice's message
        assert shown(accepted[0].content).startswith("Batch 1 accepted: 2 social_thumb jobs")
        dm = fake.dm_channel(w.bob)
        await fake.deliver(fake.post_as(w.bob, dm, "帮助"))
        helped = await w.until(lambda: w.public(dm))
        assert "/gen" in shown(helped[0].content) and "生成" in shown(helped[0].content)
        assert not [t for t in fake.threads if t["parent_id"] == dm["id"]]
        await fake.drop(4000)
        await fake.wait_resumed()
        again = fake.command_interaction("queue", {}, user=w.alice, channel=w.channel,
                                         guild_id=w.guild["id"], locale="en-US")
        await fake.interaction(again)
        await w.until(lambda: [r for r in fake.responses if r["interaction"] == again["id"]])
        health = await w.until(lambda: (h := w.platforms[0].health()).connected and h)
        assert (health.inbound, health.signed_in) == ("gateway", True)


def six_rows(fake: FakeDiscord) -> dict:
    rows = "\n".join(f"{n},Title {i}" for i, n in enumerate(["bottle.png", "chair.png"] * 3))
    return {"template": "social_thumb",
            "sheet": fake.attach("six.csv", f"image,title\n{rows}\n".encode()),
            "picture1": fake.attach("bottle.png", (ASSETS / "bottle.png").read_bytes()),
            "picture2": fake.attach("chair.png", (ASSETS / "chair.png").read_bytes())}


async def test_a_429_storm_delivers_every_image_once_in_order(tmp_path, demo_models, fake,
                                                              quick_retries):
    """Most posts refused for a while — 429s discord.py waits out itself, then 503s the
    outbox tries again — and still each image is in the thread once, in row order."""
    async with DiscordWorld(discord_config(tmp_path, demo_models, fake), fake) as w:
        await w.slash("gen", six_rows(fake))
        (accepted,) = await w.until(lambda: w.public(w.channel))
        await w.until(lambda: w.public(accepted.id))  # the thread, with its progress
        fake.limit("/messages", times=12, retry_after=0.05)
        fake.fail("/messages", status=503, times=4)
        w.start_executor()
        await w.finish(timeout=120)
        await w.until(lambda: [m for m in w.public(accepted.id) if "results.xlsx" in
                               m.filenames], timeout=60)
        images = [shown(m.content) for m in w.public(accepted.id) if m.components and any(
            a.is_image for a in m.attachments)]
        assert images == [f"row {r} · Title {r - 2}" for r in range(2, 8)]
        assert fake.throttled == 12 and all(f.times == 0 for f in fake.faults)


async def test_names_and_cells_from_people_reach_discord_as_written_and_ping_nobody(
        tmp_path, demo_models, fake):
    """A file named to ping the channel with a phishing link, cells and a column name
    like it, titles that end up in captions: a markdown reader shows each as written, and
    no message notifies anyone but the submitter (the summary's mention of them)."""
    async with DiscordWorld(discord_config(tmp_path, demo_models, fake), fake) as w:
        bottle = (ASSETS / "bottle.png").read_bytes()
        await w.slash("gen", {"template": "social_thumb",
                              "sheet": fake.attach(FILE, hostile_sheet()),
                              "picture1": fake.attach("bottle.png", bottle)})
        (report,) = await w.until(lambda: w.private())
        lines = report.splitlines()
        assert lines[0] == f"{FILE}: 10 of 10 rows have problems; nothing was queued."
        assert [re.search(r'"aspect": "(.*)" is not', line)[1] for line in lines[1:-1]] == HOSTILE
        assert lines[-1] == f'columns not used by social_thumb: "{UNUSED}"'
        titles = ["@everyone [click](https://evil.example)", "<@123456789012345678> *bold* #x"]
        await w.slash("gen", {"template": "social_thumb", "sheet": fake.attach(
            "titles.csv", hostile_sheet(titles, ["1:1", "1:1"])),
            "picture1": fake.attach("bottle.png", bottle)})
        (accepted,) = await w.until(lambda: w.public(w.channel))
        w.start_executor()
        await w.finish(timeout=120)
        await w.until(lambda: [m for m in w.public(accepted.id) if "results.xlsx" in
                               m.filenames])
        captions = [m.content for m in w.public(accepted.id) if m.components and any(
            a.is_image for a in m.attachments)]
        assert [read(c, NO_HTML).replace("\u200b", "") for c in captions] == [
            f"row {row} · {title}" for row, title in enumerate(titles, 2)]
        said = [m for m in fake.messages if m.by_bot]
        assert [m.pinged for m in said if m.pinged] == [[w.alice["id"]]]  # the summary
        for m in said:  # every reply, caption and progress: text, no markup (Discord shows
            read(m.content, NO_HTML)  # no HTML: a markdown reader that takes none)


async def test_a_button_that_asks_first_asks_a_long_one_is_read_back_an_unknown_one_says_so(
        tmp_path, demo_models, fake):
    """The progress message's Cancel asks (Discord has no confirm dialog: an answer only
    the presser sees, with Yes under it); Yes cancels. A sweep's "Queue N jobs" carries a
    command past a custom_id's 100 characters: the button holds its digest and the press
    reads the command from the outbox (the service keeps no buttons in memory, so this is
    what a press after a restart meets). A digest nothing posted says to type the command."""
    config = discord_config(tmp_path, demo_models, fake, chat={"confirm_over": 5})
    async with DiscordWorld(config, fake) as w:
        await w.slash("gen", six_rows(fake))
        (accepted,) = await w.until(lambda: w.public(w.channel))
        progress = await w.until(lambda: next((m for m in w.public(accepted.id)
                                               if m.components), None))
        asked = await w.press(progress, "Cancel")
        assert asked["json"]["type"] == 4 and asked["json"]["data"]["flags"] == EPHEMERAL
        question = asked["json"]["data"]
        assert shown(question["content"]).startswith("Cancel batch 1? Queued jobs end now")
        (yes,) = [c for row in question["components"] for c in row["components"]]
        assert yes["label"] == "Yes" and yes["custom_id"] == "/cancel 1"
        assert not await _canceled(w)  # (asking cancels nothing)
        again = await w.press(progress, "Cancel", locale="zh-CN")  # its question as posted
        assert shown(again["json"]["data"]["content"]) == shown(question["content"])
        said = fake.button_interaction(yes["custom_id"], progress, user=w.alice,
                                       locale="en-US")
        await fake.post_interaction(f"{w.url}/discord/interactions", said)
        await w.until(lambda: _canceled(w))
        gone = fake.button_interaction("#" + "0" * 40, progress, user=w.alice, locale="zh-CN")
        answer = await fake.post_interaction(f"{w.url}/discord/interactions", gone)
        assert "请直接输入它的命令" in answer["json"]["data"]["content"]

        widths = ",".join(str(256 + 8 * i) for i in range(20))  # 1 row × 20 widths: past 5
        await w.slash("gen", {"template": "social_thumb", "args": f"--vary width={widths}",
                              "sheet": fake.attach("one.csv", b"image,title\nbottle.png,Hi\n"),
                              "picture1": fake.attach("bottle.png",
                                                      (ASSETS / "bottle.png").read_bytes())})
        ask = await w.until(lambda: next((m for m in fake.messages if m.components and any(
            "20" in c.get("label", "") for row in m.components for c in row["components"])),
                                         None))
        (custom,) = [c["custom_id"] for row in ask.components for c in row["components"]]
        assert custom.startswith("#") and len(custom) <= 100
        assert (await w.press(ask, "20"))["json"]["type"] == 6  # (runs it: no question)
        accepted = await w.until(lambda: next((m for m in w.public(w.channel) if shown(
            m.content).startswith("Batch 2 accepted")), None))
        assert shown(accepted.content).startswith("Batch 2 accepted: 20 social_thumb jobs")


async def _canceled(w: DiscordWorld) -> bool:
    progress = await w.queue.batch_progress(1)
    return progress is not None and progress.counts.get("canceled", 0) == 6
