"""The Slack adapter against a fake Slack Web API on loopback: requests really signed and
posted to the service's /slack/events, files really downloaded and uploaded."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import io
import json
import re
import time

import pytest
from openpyxl import load_workbook
from PIL import Image

from bot.chat.slack import escaped, unescaped
from bot.settings import IntakeConfig
from templates.jobs import decode
from tests.conftest import ROOT, executor_config, free_port
from tests.fakes.hostile import FILE, HOSTILE, UNUSED, hostile_sheet
from tests.fakes.service import healthy, raw_post, start_serve, tracebacks
from tests.fakes.slack import (
    APP_TOKEN,
    BOT,
    SECRET,
    TOKEN,
    FakeSlack,
    SlackClient,
    SlackWorld,
    signed_headers,
    six_thumbs,
    slack_config,
)

ASSETS = ROOT / "examples" / "assets"


@pytest.fixture
async def fake():
    f = await FakeSlack().start()
    yield f
    await f.stop()


def share_examples(fake: FakeSlack, template: str) -> list[dict]:
    return [fake.share(f"{template}.xlsx", (ROOT / "examples" / f"{template}.xlsx").read_bytes()),
            *[fake.share(n, (ASSETS / n).read_bytes()) for n in ("bottle.png", "chair.png")]]


def slack_signed(body: bytes, content_type: bytes = b"application/json") -> bytes:
    """Slack's headers for `body`, signed over its bytes (which need not be UTF-8)."""
    ts = int(time.time())
    digest = hmac.new(SECRET.encode(), b"v0:%d:%s" % (ts, body), hashlib.sha256).hexdigest()
    return (b"Content-Type: %s\r\nX-Slack-Request-Timestamp: %d\r\n"
            b"X-Slack-Signature: v0=%s\r\n" % (content_type, ts, digest.encode()))


def slack_headers(signature: bytes, timestamp: bytes | None = None) -> bytes:
    ts = b"%d" % time.time() if timestamp is None else timestamp
    return b"X-Slack-Request-Timestamp: %s\r\nX-Slack-Signature: %s\r\n" % (ts, signature)


HEX = b"0" * 64
HOSTILE_SLACK_HEADERS = {
    "non-ASCII signature": slack_headers("v0=é".encode()),  # hmac.compare_digest raised
    "signature not UTF-8": slack_headers(b"v0=\xff\xfe" + HEX[2:]),
    "signature not hex": slack_headers(b"v0=" + b"z" * 64),
    "letters for a timestamp": slack_headers(b"v0=" + HEX, b"abc"),  # int() raised
    "a superscript timestamp": slack_headers(b"v0=" + HEX, "²".encode()),  # isdigit() is true
    "a timestamp past int()": slack_headers(b"v0=" + HEX, b"9" * 5000),
    "a negative timestamp": slack_headers(b"v0=" + HEX, b"-1"),
    "no signature at all": b"",
    "a second, malformed signature": slack_headers(b"v0=" + HEX) + "X-Slack-Signature: é\r\n"
    .encode(),
    "a cookie and a charset not UTF-8": slack_headers(b"v0=" + HEX) + b"Cookie: \xff=\xfe\r\n"
    b"Content-Type: application/json; charset=\xff-bogus\r\n",
}
HOSTILE_SLACK_BODIES = {  # each signed: the shapes a prober (or a bug) can put in a body
    "not UTF-8": b"\xff\xfe{}",
    "a list": b"[]",
    "a string": b'"x"',
    "nested past the recursion limit": b"[" * 100_000,
    "authorizations of the wrong type": b'{"authorizations": 5}',
    "an event that is a string": b'{"type": "event_callback", "event": "x"}',
    "a message of wrong types": json.dumps({
        "type": "event_callback", "team_id": "T1", "event_id": "Ev1", "event": {
            "type": "message", "text": 5, "channel": [], "user": {}, "ts": 1, "files": "x",
            "channel_type": "im"},
        "authorizations": [{"team_id": "T1", "user_id": BOT, "is_bot": True}]}).encode(),
    "a DM whose files have wrong shapes": json.dumps({  # the one usable: its text, no files
        "type": "event_callback", "team_id": "T1", "event_id": "Ev2", "event": {
            "type": "message", "text": "hi", "channel": "D1", "user": "U1", "ts": "1.2",
            "channel_type": "im", "files": [5, {"id": 7}, {"name": "no id"}]},
        "authorizations": [{"team_id": "T1", "user_id": BOT, "is_bot": True}]}).encode(),
}
HOSTILE_SLACK_FORMS = {
    "a payload that is not JSON": b"payload=not-json",
    "a payload that is a list": b"payload=%5B1%5D",
    "a click of wrong shapes": b"payload=" + json.dumps({
        "type": "block_actions", "team": {"id": "T1"}, "user": "U1", "channel": 5,
        "actions": [{"action_id": "cancel_batch", "value": 5}]}).encode(),
    "a slash command missing its user": b"command=%2Fgenbot&text=queue&channel_id=C1",
}


async def test_hostile_headers_and_bodies_get_a_4xx_never_a_500(tmp_path, demo_models, fake,
                                                                caplog):
    """Whatever a header, a cookie or a body holds: a 4xx (JSON where refused), no traceback,
    nothing handled. Written over a raw socket: aiohttp's client will not send such bytes."""
    async with SlackWorld(slack_config(tmp_path, demo_models, fake), fake) as w:
        for name, headers in HOSTILE_SLACK_HEADERS.items():
            status, body = await raw_post(w.url, "/slack/events", headers)
            assert status == 401, name
            assert "error" in json.loads(body), name
        signed = [(name, slack_signed(body), body) for name, body in HOSTILE_SLACK_BODIES.items()]
        signed += [(name, slack_signed(body, b"application/x-www-form-urlencoded"), body)
                   for name, body in HOSTILE_SLACK_FORMS.items()]
        for name, headers, body in signed:
            status, answer = await raw_post(w.url, "/slack/events", headers, body)
            assert status < 500, name
            if status >= 400:
                assert "error" in json.loads(answer), name
        (hi,) = await w.until(lambda: fake.messages)
        assert (hi["channel"], hi["text"]) == ("D1", 'unknown command "hi"; /help lists the '
                                                     "commands")
        await asyncio.sleep(0.3)  # anything else handled would have been answered by now
        assert len(fake.messages) == 1 and fake.responses == [] and fake.calls["files.info"] == 0
    assert tracebacks(caplog) == []


async def test_url_verification_and_requests_not_from_slack(tmp_path, demo_models, fake):
    async with SlackWorld(slack_config(tmp_path, demo_models, fake), fake) as w:
        body = json.dumps({"type": "url_verification", "challenge": "c-123", "token": "x"})
        async with w.slack.session.post(w.slack.url, data=body,
                                        headers=signed_headers(body, "application/json")) as r:
            assert r.status == 200 and (await r.json())["challenge"] == "c-123"
        bad, _ = await w.slack.message("<@UBOT> help", secret="not-the-secret")
        stale, _ = await w.slack.message("<@UBOT> help", timestamp=int(time.time()) - 600)
        assert (bad.status, stale.status) == (401, 401)
        await asyncio.sleep(0.3)
        assert fake.messages == []  # nothing was handled


@pytest.mark.parametrize("lang", ["en", "zh"])
async def test_the_whole_story_upload_gen_progress_images_summary(tmp_path, demo_models, fake,
                                                                  lang):
    chat = {"languages": ["slack:T1=zh"]} if lang == "zh" else {}
    async with SlackWorld(slack_config(tmp_path, demo_models, fake, chat=chat), fake) as w:
        files = share_examples(fake, "product_main")
        r, _ = await w.slack.message("", channel="D1", im=True, files=files)  # a DM with the files
        assert r.status == 200
        got = await w.until(lambda: fake.top("D1"))
        assert got[0]["text"].startswith("Got product_main.xlsx" if lang == "en"
                                         else "已收到 product_main.xlsx")

        r = await w.slack.command("/gen", "product_main product_main.xlsx")
        assert r.status == 200
        (accepted,) = await w.until(lambda: fake.top("C1"))
        assert accepted["text"].startswith("Batch 1 accepted: 2 product_main jobs" if lang == "en"
                                           else "批次 1 已接收：2 个 product_main 任务")
        progress = (await w.until(lambda: fake.thread(accepted["ts"])))[0]
        assert progress["blocks"][1]["elements"][0]["value"] == "/cancel 1"

        w.start_executor()
        await w.finish(timeout=120)
        thread = fake.thread(accepted["ts"])
        assert progress["updates"], "the progress message was edited in place"
        final = progress["updates"][-1]
        assert "2/2" in final["text"] and len(final["blocks"]) == 1  # no Cancel button now
        images = fake.images(thread)
        assert [x["text"].split(" · ")[:2] for x in images] == (
            [["row 2", "BTL-001"], ["row 3", "BTL-002"]] if lang == "en"
            else [["第 2 行", "BTL-001"], ["第 3 行", "BTL-002"]])
        assert all(Image.open(io.BytesIO(x["file"]["data"])).size == (128, 128) for x in images)
        names = [x.get("name") for x in thread]
        assert names[-2:] == ["contact.png", "results.xlsx"]  # the summary: one message,
        contact, results = thread[-2:]  # its text with both files (one completeUpload)
        assert contact["comment"] == results["comment"] and contact["comment"].startswith(
            ("<@U1> Batch 1 fin", "<@U1> 批次 1 已完成"))
        assert contact["comment"].endswith(("Made with product_main@1.",  # its version
                                            "使用模板 product_main@1。"))
        rows = list(load_workbook(io.BytesIO(results["data"])).active.iter_rows(values_only=True))
        assert len(rows) == 3 and rows[1][0] == 2
        assert len(fake.files) == 4  # two images, the contact sheet, the results: once each
        assert fake.calls["files.completeUploadExternal"] == 3  # two images, one summary
        # Besides the images (each one message with its buttons): the acceptance, one
        # progress message (edited), the summary.
        posts = fake.posts("C1")
        assert len(posts) - len(images) == 3 and len(images) == 2


async def test_files_named_earlier_downloads_checked_and_a_retried_event_queues_once(
        tmp_path, demo_models, fake):
    async with SlackWorld(slack_config(tmp_path, demo_models, fake), fake) as w:
        sheet = fake.share("thumbs.csv", b"image,title\nbottle.png,A\n", complete=False)
        image = fake.share("bottle.png", (ASSETS / "bottle.png").read_bytes())
        event = {"type": "message", "subtype": "file_share", "user": "U1", "channel": "C1",
                 "channel_type": "channel", "text": f"<@{BOT}> gen social_thumb",
                 "ts": "1600000000.000001", "files": [sheet, image]}
        first = await w.slack.event(event, event_id="EvSAME")
        again = await w.slack.event(event, event_id="EvSAME", retry=1)  # Slack's retry
        mention = await w.slack.event({**event, "type": "app_mention"}, event_id="EvOTHER")
        assert (first.status, again.status, mention.status) == (200, 200, 200)
        # The thread of the message is the batch's thread: acceptance and progress go there.
        await w.until(lambda: len(fake.thread("1600000000.000001")) >= 2)
        await asyncio.sleep(0.3)
        assert await w.queue.batches_of("slack:U1") == [1]
        assert fake.calls["files.info"] == 1  # the incomplete file object, looked up once

        # A download with a wrong token gets Slack's login page: said plainly.
        adapter = w.service.platforms[0]
        adapter.settings = dataclasses.replace(adapter.settings, bot_token="xoxb-wrong")
        await w.slack.message(f"<@{BOT}> gen social_thumb", files=[
            fake.share("other.csv", b"image,title\nbottle.png,B\n"), image])
        reply = await w.until(lambda: [m for m in fake.messages if "sign-in page" in m["text"]])
        assert reply[0]["text"].startswith(
            'could not fetch "other.csv": Slack sent its sign-in page')


async def test_pause_refused_to_a_submitter_and_the_cancel_button_checks_who_clicks(
        tmp_path, demo_models, fake):
    async with SlackWorld(slack_config(tmp_path, demo_models, fake), fake) as w:
        await w.slack.command("/genbot", "pause", user="U1")
        refused = await w.until(lambda: fake.responses)  # for the person, not the channel
        assert refused[0] == {
            "response_type": "ephemeral",
            "text": "/pause needs the admin role; you are submitter. Ask an admin."}
        assert fake.top("C1") == []
        await w.slack.message("", channel="D1", im=True, files=share_examples(fake, "social_thumb"))
        await w.slack.command("/gen", "social_thumb social_thumb.xlsx --at +2h")
        accepted = (await w.until(
            lambda: [m for m in fake.top("C1") if "accepted" in m["text"]]))[0]
        progress = (await w.until(lambda: fake.thread(accepted["ts"])))[0]

        await w.slack.click(progress, user="V")  # answered to whoever clicked, alone
        no = await w.until(lambda: [r for r in fake.responses if "needs" in r["text"]][1:])
        assert no[0]["text"] == "/cancel needs the submitter role; you are viewer. Ask an admin."
        await w.slack.click(progress, user="U1")
        yes = await w.until(lambda: [r for r in fake.responses if r["text"].startswith("Canceled")])
        assert yes[0]["text"] == "Canceled: 2 queued jobs ended, 0 running told to stop."
        assert not [m for m in fake.thread(accepted["ts"]) if "needs" in m["text"]]
        assert {j.status for j in await w.queue.batch_jobs(1)} == {"canceled"}
        audit = [(a.user, a.action, a.allowed) for a in
                 reversed(await w.core.access.audit_log())]
        assert audit == [("U1", "pause", False), ("V", "cancel", False)]


async def test_a_six_row_batch_is_three_messages_and_one_per_image_with_its_buttons(
        tmp_path, demo_models, fake):
    """Each image is one message: the file uploaded unshared, shown by an image block
    (slack_file) with its caption and its row of buttons. Slack finishes a file after
    completeUploadExternal answers: a block naming it before is refused, and tried again.
    A button under an image still acts on it."""
    fake.processing = 1  # each file is still processing when first named
    async with SlackWorld(slack_config(tmp_path, demo_models, fake), fake) as w:
        _, ts = await w.slack.message(f"<@{BOT}> gen social_thumb six.csv",
                                      files=six_thumbs(fake))
        w.start_executor()
        await w.finish(timeout=120)
        await w.until(lambda: [f for f in fake.files if f["name"] == "results.xlsx"])
        posts = fake.posts("C1")
        images = fake.images(posts)
        rest = [m["text"] if "blocks" in m else m["comment"] for m in posts if m not in images]
        assert len(posts) == 3 + 6 and len(rest) == 3, rest  # acceptance, progress, summary
        assert rest[0].startswith("Batch 1 accepted") and rest[2].startswith("<@U1> Batch 1 fin")
        assert [m["text"] for m in images] == [f"row {r} · Title {r - 2}" for r in range(2, 8)]
        for m in images:
            section, image, actions = m["blocks"]
            assert image["slack_file"] == {"id": m["file"]["id"]} and image["alt_text"]
            assert Image.open(io.BytesIO(m["file"]["data"])).format == "PNG"
            assert actions["elements"][0]["action_id"] == "image_keep"
            jobs = {b["value"].split()[1] for b in actions["elements"]}
            assert len(jobs) == 1, jobs  # every button acts on this image's job
        assert [f["channel"] for f in fake.files if f["name"].startswith("thumb_")] == [None] * 6
        assert sorted(fake.not_ready) == sorted(m["file"]["id"] for m in images)  # each retried

        keep = images[3]["blocks"][2]["elements"][0]["value"]
        assert keep.startswith("/keep j")
        job = int(keep.removeprefix("/keep j"))
        await w.slack.click(images[3], action="image_keep")

        async def kept():
            return (await w.queue.job(job)).rating == 1
        await w.until(kept)
        assert (await w.queue.job(job)).row == 5  # row 5: the fourth image


async def test_a_webp_image_is_shared_as_a_file_and_its_buttons_follow(tmp_path, demo_models,
                                                                       fake):
    """Slack's image block shows png, jpg and gif only: a WebP output is shared with its
    caption, as a file, and its buttons come in the next message."""
    import shutil

    from templates.settings import shipped_dir
    folder = tmp_path / "templates"
    shutil.copytree(shipped_dir(), folder)
    thumb = json.loads((folder / "social_thumb.json").read_text(encoding="utf-8"))
    thumb["nodes"]["out"]["inputs"]["format"] = "webp"
    thumb["output"] = "thumb_{row}.webp"
    (folder / "social_thumb.json").write_text(json.dumps(thumb), encoding="utf-8")
    config = slack_config(tmp_path, demo_models, fake,
                          sections={"templates": {"dir": str(folder)}})
    async with SlackWorld(config, fake) as w:
        _, ts = await w.slack.message(f"<@{BOT}> gen social_thumb one.csv", files=[
            fake.share("one.csv", b"image,title\nbottle.png,Title 0\n"),
            fake.share("bottle.png", (ASSETS / "bottle.png").read_bytes())])
        w.start_executor()
        await w.finish(timeout=120)
        await w.until(lambda: [f for f in fake.files if f["name"] == "results.xlsx"])
        (image,) = [f for f in fake.thread(ts) if f.get("name") == "thumb_2.webp"]
        after = fake.thread(ts)[fake.thread(ts).index(image) + 1]
        assert image["comment"].startswith("row 2 · Title 0") and after["text"] == image["comment"]
        assert after["blocks"][-1]["elements"][0]["value"].startswith("/keep j")
        assert fake.images(fake.posts("C1")) == []


async def test_the_fake_refuses_blocks_slack_would(fake):
    """What Slack answers invalid_blocks to, the fake does too: an image block without
    alt_text, a slack_file id unknown or whose upload never completed, an empty text."""
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    client = AsyncWebClient(token=TOKEN, base_url=fake.api_url)
    started = await client.files_getUploadURLExternal(filename="a.png", length=3)  # not completed
    done = await client.files_upload_v2(content=b"png", filename="b.png")  # shared nowhere
    assert fake.posts("C1") == [] and done["file"]["id"]

    def image(**block):
        return [{"type": "section", "text": {"type": "mrkdwn", "text": "row 2"}},
                {"type": "image", **block}]
    cases = {
        "missing required field: alt_text [json-pointer:/blocks/1]":
            image(slack_file={"id": done["file"]["id"]}),
        "invalid slack file [json-pointer:/blocks/1/slack_file]":
            image(slack_file={"id": "F404"}, alt_text="x"),
        "invalid slack file [json-pointer:/blocks/1/slack_file] ":
            image(slack_file={"id": started["file_id"]}, alt_text="x"),
        "must be 1 to 3000 characters [json-pointer:/blocks/0/text/text]":
            [{"type": "section", "text": {"type": "mrkdwn", "text": ""}}],
    }
    for error, blocks in cases.items():
        with pytest.raises(SlackApiError) as refused:
            await client.chat_postMessage(channel="C1", text="x", blocks=blocks)
        assert refused.value.response["error"] == "invalid_blocks"
        assert refused.value.response["errors"] == [error.strip()], error
    sent = await client.chat_postMessage(channel="C1", text="x", blocks=image(
        slack_file={"id": done["file"]["id"]}, alt_text="row 2"))
    assert [m["ts"] for m in fake.images(fake.posts("C1"))] == [sent["ts"]]


async def test_a_429_storm_delivers_every_image_once_in_order(tmp_path, demo_models, fake,
                                                              quick_retries):
    async with SlackWorld(slack_config(tmp_path, demo_models, fake), fake) as w:
        _, ts = await w.slack.message(f"<@{BOT}> gen social_thumb six.csv",
                                      files=six_thumbs(fake))
        await w.until(lambda: len(fake.thread(ts)) >= 2)  # acceptance and progress, in its thread
        # From here on, most calls are refused with 429 (Retry-After 0 or 1) or a 500.
        fake.faults = [(429, {"Retry-After": "1" if i % 5 == 1 else "0"}) if i % 4 else (500, {})
                       for i in range(24)]
        w.start_executor()
        await w.finish(timeout=120)
        images = [x["text"] for x in fake.images(fake.thread(ts))]
        assert images == [f"row {r} · Title {r - 2}" for r in range(2, 8)]
        assert len(fake.files) == 6 + 2 and fake.faults == []  # every fault was met


async def test_socket_mode_for_a_bot_with_no_public_url(tmp_path, demo_models, fake):
    config = slack_config(tmp_path, demo_models, fake, signing_secret="", app_token=APP_TOKEN)
    async with SlackWorld(config, fake) as w:
        await w.until(lambda: fake.sockets)
        envelope = await fake.push("slash_commands", {
            "command": "/genbot", "text": "help status", "user_id": "U1", "channel_id": "C1",
            "team_id": "T1", "trigger_id": "t1", "response_url": fake.response_url()})
        await w.until(lambda: [a for a in fake.acks if a.get("envelope_id") == envelope])
        (reply,) = await w.until(lambda: fake.responses)  # the person's own answer
        assert reply["text"].startswith("usage: /status [BATCH]")
        async with w.slack.session.post(w.slack.url, data="{}") as r:
            assert r.status == 404  # no HTTP endpoint without a signing secret


async def test_channels_not_served_are_told_so_at_once(tmp_path, demo_models, fake):
    async with SlackWorld(slack_config(tmp_path, demo_models, fake, channels=["C9"]), fake) as w:
        r = await w.slack.command("/genbot", "queue", channel="C1")
        assert r.status == 200 and "genbot does not serve this channel" in await r.text()
        await w.slack.message(f"<@{BOT}> queue", channel="C1")
        await w.slack.command("/genbot", "queue", channel="C9")
        (served,) = await w.until(lambda: fake.responses)
        assert served["text"].startswith("The queue is running")
        await asyncio.sleep(0.3)
        assert fake.top("C1") == []


async def test_a_command_where_the_bot_is_not_invited_is_answered_to_the_person_alone(
        tmp_path, demo_models, fake):
    fake.not_in.add("C7")
    async with SlackWorld(slack_config(tmp_path, demo_models, fake), fake) as w:
        await w.slack.command("/genbot", "queue", channel="C7")
        (answer,) = await w.until(lambda: fake.responses)
        assert answer == {"response_type": "ephemeral",
                          "text": "The queue is running.\n0 queued, 0 running\nNo executor is "
                                  "running: queued jobs wait until one starts."}

        async def sent():  # the fake has the answer a moment before the row is marked sent
            return await w.core.outbox.counts() == {"sent": 1}
        assert await w.until(sent)


async def test_downloads_cut_short_or_too_big_are_refused_plainly(tmp_path, demo_models, fake):
    config = slack_config(tmp_path, demo_models, fake)
    config = config.replaced(IntakeConfig, max_file_mb=1)
    async with SlackWorld(config, fake) as w:
        short = {**fake.share("short.csv", b"image,title\n"), "size": 999}
        await w.slack.message(f"<@{BOT}> gen social_thumb short.csv", files=[short])
        (cut,) = await w.until(lambda: fake.thread(fake.messages[0]["thread_ts"])
                               if fake.messages else None)
        assert cut["text"] == ('could not fetch "short.csv" whole: got 12 bytes of 999; send it '
                               "again")
        assert fake.calls["download"] == 1
        big = {**fake.share("big.csv", b"x"), "size": 5 * 2**20}
        _, ts = await w.slack.message(f"<@{BOT}> gen social_thumb big.csv", files=[big])
        (refused,) = await w.until(lambda: fake.thread(ts))
        assert refused["text"] == '"big.csv" is 5.0 MB; the limit is 1 MB'
        assert fake.calls["download"] == 1  # refused before downloading


@pytest.mark.slow
async def test_the_service_killed_mid_batch_delivers_the_rest_exactly_once(tmp_path, demo_models,
                                                                           fake):
    import signal
    executor_config(tmp_path / "data", demo_models)  # links the demo models into data/
    port = free_port()
    config = tmp_path / "config.toml"
    config.write_text(f"""
[service]
data_dir = "{tmp_path / 'data'}"
port = {port}
[queue]
poll_interval = 0.1
[chat]
progress_every = 0.5
send_claim_seconds = 3  # the killed service's upload falls due again soon
[slack]
bot_token = "{TOKEN}"
signing_secret = "{SECRET}"
api_url = "{fake.api_url}"
""")
    url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "serve.log", "ab") as log:
        serve = await start_serve(config, log)
        slack = SlackClient(url, fake)
        try:
            await healthy(url)
            fake.stall_after = 3  # the fourth file upload hangs: the service dies meanwhile
            _, ts = await slack.message(f"<@{BOT}> gen social_thumb six.csv",
                                        files=six_thumbs(fake))
            async with asyncio.timeout(120):
                await fake.stalled.wait()
            serve.send_signal(signal.SIGKILL)
            await serve.wait()
            fake.release.set()
            delivered = len(fake.files)
            serve = await start_serve(config, log)
            async with asyncio.timeout(180):
                while not any(f["name"] == "results.xlsx" for f in fake.files):
                    await asyncio.sleep(0.1)
        finally:
            await slack.close()
            if serve.returncode is None:
                serve.send_signal(signal.SIGTERM)
                await serve.wait()
    thread = fake.thread(ts)
    names = [fake.label(x) for x in thread]
    thumbs = [n for n in names if n.startswith("thumb_")]
    assert delivered == 3 and sorted(thumbs) == [f"thumb_{r}.png" for r in range(2, 8)]
    assert len(set(names)) == len(names), names  # nothing twice: images, summary, acceptance
    assert names[-2:] == ["contact.png", "results.xlsx"]


def test_the_committed_manifest_asks_for_what_the_adapter_uses():
    import yaml
    manifest = yaml.safe_load((ROOT / "docs" / "slack-manifest.yaml").read_text())
    commands = {c["command"] for c in manifest["features"]["slash_commands"]}
    assert commands == {"/gen", "/genbot"}
    settings = manifest["settings"]
    urls = [c["url"] for c in manifest["features"]["slash_commands"]] + \
        [settings["event_subscriptions"]["request_url"], settings["interactivity"]["request_url"]]
    assert all(u.endswith("/slack/events") for u in urls)
    assert {"app_mention", "message.im", "message.channels"} <= \
        set(settings["event_subscriptions"]["bot_events"])
    assert {"chat:write", "files:write", "files:read", "commands", "reactions:read"} <= \
        set(manifest["oauth_config"]["scopes"]["bot"])
    assert {"reaction_added", "reaction_removed"} <= set(settings["event_subscriptions"][
        "bot_events"])
    # Sign in with Slack (bot/web/signin.py): the scopes it asks for, where it comes back
    assert {"openid", "profile"} <= set(manifest["oauth_config"]["scopes"]["user"])
    assert [u.endswith("/dashboard/signin/slack/callback")
            for u in manifest["oauth_config"]["redirect_urls"]] == [True]


async def test_downloads_and_answers_each_keep_their_own_time_limit(tmp_path, monkeypatch):
    """The shared HTTP session is made by whichever call comes first; each call still
    waits only as long as it should (a download minutes, an ephemeral answer seconds)."""
    import aiohttp
    from aiohttp import web

    from bot.chat import slack as adapter
    from bot.chat.platform import DownloadError
    from storage import config as cfg

    async def sheet(request: web.Request) -> web.Response:
        await asyncio.sleep(0.5)  # a slow download, still well within its limit
        return web.Response(body=b"a,b\n1,2\n", content_type="text/csv")

    async def answer(request: web.Request) -> web.Response:
        await asyncio.sleep(2.0)  # slower than an answer may take
        return web.json_response({"ok": True})

    server = web.Application()
    server.router.add_get("/sheet.csv", sheet)
    server.router.add_post("/respond", answer)
    runner = web.AppRunner(server)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    monkeypatch.setattr(adapter, "RESPOND_TIMEOUT", aiohttp.ClientTimeout(total=0.3))
    monkeypatch.setattr(adapter, "DOWNLOAD_TIMEOUT", aiohttp.ClientTimeout(total=0.3))
    slack = adapter.Slack(cfg.from_dict({"service": {"data_dir": str(tmp_path)},
                                         "slack": {"bot_token": TOKEN, "signing_secret": SECRET}}))
    try:
        with pytest.raises(DownloadError):  # a download slower than its limit is refused
            await slack.download({"url": f"{base}/sheet.csv", "size": 8})
        monkeypatch.setattr(adapter, "DOWNLOAD_TIMEOUT", aiohttp.ClientTimeout(total=5))
        assert await slack.download({"url": f"{base}/sheet.csv", "size": 8}) == b"a,b\n1,2\n"
        started = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):  # the session the download made: 0.3 s here
            await slack._respond(f"{base}/respond", "only for you")
        assert time.monotonic() - started < 1.5
    finally:
        await slack.close()
        await runner.cleanup()


async def test_files_shared_in_a_channel_with_only_a_mention_are_answered_as_in_a_dm(
        tmp_path, demo_models, fake):
    async with SlackWorld(slack_config(tmp_path, demo_models, fake), fake) as w:
        _, ts = await w.slack.message(f"<@{BOT}>", files=share_examples(fake, "product_main"))
        (got,) = await w.until(lambda: fake.thread(ts))
        assert got["text"] == ("Got product_main.xlsx, bottle.png, chair.png. To run a sheet: "
                               "/gen TEMPLATE product_main.xlsx (/templates lists the templates).")


async def test_a_refused_app_token_never_holds_up_the_service(tmp_path, demo_models, fake,
                                                              caplog):
    """Socket Mode keeps trying in the background, one line per attempt; the service
    starts, answers and stops cleanly meanwhile."""
    import logging
    caplog.set_level(logging.INFO)
    config = slack_config(tmp_path, demo_models, fake, signing_secret="",
                          app_token="xapp-refused")
    async with asyncio.timeout(20):
        async with SlackWorld(config, fake) as w:
            async with w.slack.session.get(f"{w.url}/healthz") as r:
                assert r.status == 200
            await w.until(lambda: len([r for r in caplog.records if "Socket Mode connection "
                                       "failed (invalid_auth)" in r.message]) >= 2)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # One line per refused attempt: genbot's, with the reason; none from slack_sdk's
    # Socket Mode client besides it ("The current session () has been abandoned …").
    assert not [r.getMessage() for r in caplog.records if "abandoned" in r.getMessage()]


async def test_the_start_says_whom_the_bot_token_signs_in_as(tmp_path, demo_models, fake,
                                                            caplog):
    import logging
    caplog.set_level(logging.INFO)
    async with SlackWorld(slack_config(tmp_path, demo_models, fake), fake) as w:
        await w.until(lambda: [r for r in caplog.records
                               if r.getMessage() == "slack: signed in as genbot in Fake"])


async def test_names_and_cells_from_people_reach_slack_escaped(tmp_path, demo_models, fake):
    """A file named to ping the channel with a phishing link, cells and a column name like
    it, titles that end up in captions: on Slack's wire none is a token (a ping, a mention,
    a link), each reads back as written; genbot's own mention of the submitter still is one.
    What a person types comes in with Slack's entities undone: echoed, escaped once."""
    def tokens(text: str) -> list[str]:
        return re.findall(r"<[^>]*>", text)

    async with SlackWorld(slack_config(tmp_path, demo_models, fake), fake) as w:
        image = fake.share("bottle.png", (ASSETS / "bottle.png").read_bytes())
        _, ts = await w.slack.message(f"<@{BOT}>", files=[fake.share(FILE, hostile_sheet()),
                                                          image])
        (got,) = await w.until(lambda: fake.thread(ts))
        assert got["text"] == escaped(f'Got {FILE}, bottle.png. To run a sheet: /gen TEMPLATE '
                                      f'"{FILE}" (/templates lists the templates).')
        assert "&lt;!channel&gt; &lt;https://evil.example/login|genbot" in got["text"]
        _, ts = await w.slack.message(f"<@{BOT}> gen social_thumb")  # the sheet sent last
        (report,) = await w.until(lambda: fake.thread(ts))
        assert tokens(got["text"]) == tokens(report["text"]) == []
        lines = unescaped(report["text"]).splitlines()
        assert lines[0] == f"{FILE}: 10 of 10 rows have problems; nothing was queued."
        assert [re.search(r'"aspect": "(.*)" is not', line)[1] for line in lines[1:-1]] == HOSTILE
        assert lines[-1] == f'columns not used by social_thumb: "{UNUSED}"'
        assert '"&amp;lt;b&amp;gt; already escaped"' in report["text"]  # shown as typed

        await w.slack.command("/genbot", "frob&lt;x&gt; &amp;")  # Slack's form of frob<x> &
        (echo,) = await w.until(lambda: fake.responses)
        assert echo["text"] == 'unknown command "frob&lt;x&gt;"; /help lists the commands'

        titles = ["<!channel> [click](https://evil.example)", "<@U123> *bold* &lt;"]
        _, ts = await w.slack.message(f"<@{BOT}> gen social_thumb", files=[
            fake.share("titles.csv", hostile_sheet(titles, ["1:1", "1:1"])), image])
        await w.until(lambda: [m for m in fake.thread(ts) if "accepted" in m["text"]])
        w.start_executor()
        await w.finish(timeout=120)
        thread = fake.thread(ts)
        captions = [x["text"] for x in fake.images(thread)]
        assert captions == [escaped(f"row {row} · {title}") for row, title in enumerate(titles, 2)]
        assert [x["blocks"][1]["alt_text"] for x in fake.images(thread)] == [
            f"row {row} · {title}" for row, title in enumerate(titles, 2)]  # plain text
        assert all(tokens(m["text"]) == [] for m in fake.messages)  # replies, progress, …
        summary = thread[-1]["comment"]
        assert tokens(summary) == ["<@U1>"] and summary.startswith("<@U1> Batch 1 finished")


async def test_buttons_and_reactions_under_each_image_iterate_in_the_thread(
        tmp_path, demo_models, fake):
    """Again under an image: one job per click even when the click comes twice (a double
    click, a resent interaction); another person's click is theirs. ⭐ keeps, taking it
    off un-keeps, 👎 rejects. Edit opens a modal with the row's values; its submission
    edits what changed. The new images come into the same thread, with their buttons,
    and no acceptance, progress or summary of their own."""
    config = slack_config(tmp_path, demo_models, fake, chat={"submitters": ["slack:U1"]})
    async with SlackWorld(config, fake) as w:
        await w.slack.message("", channel="D1", im=True, files=share_examples(fake, "product_main"))
        await w.until(lambda: fake.top("D1"))
        await w.slack.command("/gen", "product_main product_main.xlsx")
        (accepted,) = await w.until(lambda: fake.top("C1"))
        w.start_executor()
        await w.finish(timeout=120)
        rows = fake.images(fake.thread(accepted["ts"]))  # each image with its buttons
        assert [m["text"].split(" · ")[:2] for m in rows] == [["row 2", "BTL-001"],
                                                            ["row 3", "BTL-002"]]
        assert [b["value"] for b in rows[0]["blocks"][-1]["elements"]] == \
            ["/keep j1", "/reject j1 --ask", "/again j1", "/vary j1", "/upscale j1", "/edit j1"]

        first = await w.slack.click(rows[0], action="image_again", action_ts="1.000001")
        assert first.status == 200
        await w.slack.click(rows[0], action="image_again", action_ts="1.000001")  # resent
        await w.slack.click(rows[0], action="image_again")  # the second click of a double
        await w.slack.click(rows[0], user="BOSS", action="image_again")  # someone else
        # (the resent copy owes nothing new: its answer is the first one's)
        await w.until(lambda: len(fake.responses) >= 3)
        again = await w.queue.children(1)
        assert sorted(j.submitter for j in again) == ["slack:BOSS", "slack:U1"]
        texts = [r["text"] for r in fake.responses]
        assert sum(t.startswith("🔁 Again: 1 new image of row 2 (job 1)") for t in texts) == 2
        assert sum("was asked a moment ago" in t for t in texts) == 1

        async def rated(rating):
            return (await w.queue.job(2)).rating == rating
        await w.slack.react(rows[1], "star")
        await w.until(lambda: rated(1))
        await w.slack.react(rows[1], "star", removed=True)
        await w.until(lambda: rated(None))
        await w.slack.react(rows[1], "-1", user="BOSS")  # anyone who may review (not a viewer)
        await w.until(lambda: rated(-1))
        await w.slack.react(rows[1], "+1")
        await w.until(lambda: rated(1))
        await w.slack.react(rows[1], "thumbsdown", user="BOSS")
        await w.until(lambda: rated(-1))
        await w.slack.react(accepted, "star")  # not an image: nothing, and no reply

        # Edit opens a modal with the row's values; submitted, only what changed is edited.
        await w.slack.click(rows[1], action="image_edit")
        (opened,) = await w.until(lambda: fake.views)
        fields = {b["element"]["action_id"]: b["element"].get("initial_value")
                  for b in opened["view"]["blocks"]}
        assert list(fields)[0] == " instruction"  # the image itself by a sentence, first
        assert fields["sku"] == "BTL-002" and fields["prompt"].startswith("a glass perfume")
        assert "product_image" not in fields and fields["seed"].isdigit()
        await w.slack.submit(opened, {"prompt": 'a "blue" bottle, moody', "steps": "3"})
        (answer,) = await w.until(lambda: fake.ephemeral)
        assert answer["text"].startswith("✏️ Edit: 1 new image of row 3 (job 2)")
        assert answer["thread_ts"] == accepted["ts"] and answer["user"] == "U1"
        (child,) = [j for j in await w.queue.children(2) if j.action == "edit"]
        assert (child.values["prompt"], child.values["steps"], child.values["seed"]) == \
            ('a "blue" bottle, moody', 3, (await w.queue.job(2)).values["seed"])
        # The modal's sentence: the image itself changed by it, on the edit model.
        await w.slack.click(rows[1], action="image_edit")
        opened = (await w.until(lambda: fake.views[1:]))[0]
        await w.slack.submit(opened, {" instruction": "make the label = gold"})
        await w.until(lambda: fake.ephemeral[1:])
        (instructed,) = [j for j in await w.queue.children(2) if j.action == "edit"
                         and j.id != child.id]
        assert decode(instructed.workflow).nodes[0].inputs["instruction"] == \
            "make the label = gold"
        await w.finish(timeout=120)
        thread = fake.thread(accepted["ts"])
        made = [x for x in fake.images(thread) if "Again of job 1" in x["text"]]
        assert len(made) == 2  # both new images, into the batch's thread
        assert len(fake.top("C1")) == 1  # no acceptance of their own
        assert [f["name"] for f in fake.files].count("results.xlsx") == 1  # no summary
        assert (await w.queue.job(2)).rating == -1 and len(fake.responses) == 3

        # Reject asks why in a modal; what is typed is the review's reason.
        await w.slack.click(rows[0], action="image_reject", user="BOSS")
        asked = (await w.until(lambda: fake.views[2:]))[0]
        assert [b["element"]["action_id"] for b in asked["view"]["blocks"]] == ["reason"]
        await w.slack.submit(asked, {"reason": "标签拼错了"}, user="BOSS")

        async def reasoned():
            job = await w.queue.job(1)
            return (job.rating, job.review_note) == (-1, "标签拼错了")
        await w.until(reasoned)
