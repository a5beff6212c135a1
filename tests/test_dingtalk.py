"""The DingTalk adapter against a fake DingTalk OpenAPI and Stream gateway on loopback:
Stream frames really pushed over a websocket, HTTP callbacks really signed."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest

from tests.conftest import executor_config
from tests.fakes.dingtalk import (
    APP_KEY,
    APP_SECRET,
    DingWorld,
    FakeDingTalk,
    ding_config,
    links,
    post_callback,
    robot_message,
    sign,
)
from tests.fakes.hostile import BOTTLE, HOSTILE, UNUSED, as_written, hostile_sheet, read
from tests.fakes.service import raw_post, tracebacks


@pytest.fixture
async def fake():
    f = await FakeDingTalk().start()
    yield f
    await f.stop()


@pytest.mark.parametrize("mode", ["stream", "http"])
async def test_the_whole_story_in_a_one_to_one_chat(tmp_path, demo_models, fake, mode):
    async with DingWorld(ding_config(tmp_path, demo_models, fake, mode=mode), fake) as w:
        await w.send_sheet_and_pictures()
        got = await w.until(lambda: fake.session_replies)
        # Chinese by default
        assert got[0]["text"]["content"].startswith("已收到 social_thumb.xlsx")
        await w.say(text="/gen social_thumb social_thumb.xlsx")
        accepted = await w.until(lambda: [r for r in fake.session_replies
                                          if "已接收" in r["text"]["content"]])
        assert accepted[0]["text"]["content"].startswith("批次 1 已接收：2 个 social_thumb 任务")
        w.start_executor()
        await w.finish(timeout=120)
        to = "user:staff1"
        captions = [t for t in fake.texts(to) if t.startswith("批次 1 · 第")]
        assert captions == ["批次 1 · 第 2 行 · 新品上市 · 限时九折 · 1:1",
                            "批次 1 · 第 3 行 · Autumn collection · 4:5"]
        assert len(fake.images(to)) == 3  # two images and the contact sheet
        summary = [r for r in fake.session_replies if "已完成" in r["text"]["content"]]
        assert "at" not in summary[0]  # a 1:1 chat: nobody to @-mention
        assert summary[0]["msgtype"] == "markdown"  # the text shows the contact sheet
        (results,) = [m for m in fake.sent if m["key"] == "sampleFile"]
        assert results["param"]["fileName"] == "results.xlsx" and results["to"] == to
        assert fake.media[results["param"]["mediaId"]][0] == "file"


async def test_a_file_sent_in_one_to_one_and_gen_in_a_group(tmp_path, demo_models, fake):
    async with DingWorld(ding_config(tmp_path, demo_models, fake, mode="http"), fake) as w:
        await w.say(group="cidGroup1", text="@genbot /gen social_thumb")
        (none,) = await w.until(lambda: fake.session_replies)
        assert none["text"]["content"].startswith("我还没有收到你的表格")
        assert none["text"]["content"].endswith(
            "请先在与我的单聊中发送文件；之后即可在这里用 /gen 引用它。")
        await w.send_sheet_and_pictures()
        await w.gen("@genbot gen social_thumb social_thumb.xlsx", group="cidGroup1")
        w.start_executor()
        await w.finish(timeout=120)
        group = "group:cidGroup1"
        assert [t for t in fake.texts(group) if t.startswith("批次 1 · 第")] == [
            "批次 1 · 第 2 行 · 新品上市 · 限时九折 · 1:1",
            "批次 1 · 第 3 行 · Autumn collection · 4:5"]
        assert len(fake.images(group)) == 3
        assert await w.queue.batches_of("dingtalk:staff1") == [1]
        await w.say(group="cidGroup1", text="@genbot help", expired=True)  # its reply link is gone
        (help_,) = await w.until(lambda: [m for m in fake.sent if m["key"] == "sampleMarkdown"
                                          and m["param"]["title"].startswith("命令")])
        assert help_["to"] == group and help_["param"]["title"].startswith("命令")
        assert "  \n/gen TEMPLATE" in help_["param"]["text"]


async def test_bad_signatures_and_stale_timestamps_are_refused(tmp_path, demo_models, fake):
    async with DingWorld(ding_config(tmp_path, demo_models, fake, mode="http"), fake) as w:
        body = robot_message(fake, text="/help")
        stale = int((time.time() - 2 * 3600) * 1000)
        assert await post_callback(w.session, w.url, body, secret="wrong") == 403
        assert await post_callback(w.session, w.url, body, timestamp=stale) == 403
        async with w.session.post(f"{w.url}/dingtalk/callback", json=body) as r:
            assert r.status == 403  # no signature at all
        assert fake.session_replies == [] and fake.sent == []


def ding_headers(timestamp: bytes, signature: bytes) -> bytes:
    return b"timestamp: %s\r\nsign: %s\r\n" % (timestamp, signature)


def now_ms() -> bytes:
    return b"%d" % (time.time() * 1000)


HOSTILE_DING_HEADERS = {
    "a superscript timestamp": ding_headers("²".encode(), b"x"),  # isdigit() is true; int() no
    "letters for a timestamp": ding_headers(b"abc", b"x"),
    "a timestamp past int()": ding_headers(b"9" * 5000, b"x"),
    "a non-ASCII sign": ding_headers(now_ms(), "é".encode()),  # hmac.compare_digest raised
    "a sign not UTF-8": ding_headers(now_ms(), b"\xff\xfe"),
    "an empty sign": ding_headers(now_ms(), b""),
    "no signature at all": b"",
}
HOSTILE_DING_BODIES: dict[str, tuple[bytes, int]] = {  # each signed: the body, its answer
    "a list": (b"[]", 400),
    "a string": (b'"x"', 400),
    "a number": (b"5", 400),
    "null": (b"null", 400),
    "not JSON": (b"{", 400),
    "not UTF-8": (b"\xff\xfe{}", 400),
    "nested past the recursion limit": (b"[" * 100_000, 400),
    "an empty object": (b"{}", 200),
    **{name: (json.dumps({"msgId": f"bad{i}", "senderStaffId": "s1", "conversationType": "1",
                          "msgtype": "text", "text": {"content": "/help"}, **fields}).encode(), 200)
       for i, (name, fields) in enumerate({
           "text that is a string": {"text": "x"},
           "content that is a number": {"msgtype": "file", "content": 5},
           "content that is broken JSON": {"msgtype": "picture", "content": "[[[["},
           "a conversationType that is a list": {"conversationType": []},
           "a conversationType that is true": {"conversationType": True},
           "a sender that is a list": {"senderStaffId": [], "senderId": {}},
           "a group with no conversationId": {"conversationType": "2"},
           "richText that is a string": {"msgtype": "richText", "content": {"richText": "x"}},
           "an unknown msgtype": {"msgtype": ["text"]},
       }.items())},
}


async def test_hostile_headers_and_bodies_get_a_4xx_json_never_a_500(tmp_path, demo_models, fake,
                                                                     caplog):
    """Whatever a header or a body holds: a JSON answer under 500, no traceback, nothing
    handled. Written over a raw socket: aiohttp's client will not send such bytes."""
    async with DingWorld(ding_config(tmp_path, demo_models, fake, mode="http"), fake) as w:
        for name, headers in HOSTILE_DING_HEADERS.items():
            status, answer = await raw_post(w.url, "/dingtalk/callback", headers)
            assert status == 403 and "error" in json.loads(answer), name
        for name, (body, expected) in HOSTILE_DING_BODIES.items():
            ts = w.timestamp()
            status, answer = await raw_post(w.url, "/dingtalk/callback", ding_headers(
                b"%d" % ts, sign(ts).encode()), body)
            assert status == expected, name
            assert isinstance(json.loads(answer), dict), name
        ts = w.timestamp()
        status, _ = await raw_post(w.url, "/dingtalk/callback", ding_headers(
            b"%d" % ts, sign(ts).encode()) + b"Content-Type: application/json; charset=bogus\r\n")
        assert status == 200  # a charset no codec has: the body is read as bytes
        await asyncio.sleep(0.3)  # anything handled would have been answered by now
        assert fake.session_replies == [] and fake.sent == []
    assert tracebacks(caplog) == []


async def test_a_signature_serves_one_message_and_a_message_is_handled_once(tmp_path,
                                                                             demo_models, fake):
    """DingTalk signs only the timestamp: a captured (timestamp, sign) pair must not carry
    another body. DingTalk re-delivers a message it thinks we missed: answered, handled once."""
    async with DingWorld(ding_config(tmp_path, demo_models, fake, mode="http"), fake) as w:
        first, other = (robot_message(fake, text="/help") for _ in range(2))

        async def post(body: dict, ts: int) -> tuple[int, dict]:
            async with w.session.post(f"{w.url}/dingtalk/callback", json=body, headers={
                    "timestamp": str(ts), "sign": sign(ts)}) as r:
                return r.status, await r.json()

        ts = w.timestamp()
        assert await post(first, ts) == (200, {})
        await w.until(lambda: fake.session_replies)
        assert await post(other, ts) == (403, {"error": "signature already used"})
        assert await post({**first, "text": {"content": "/pause"}}, ts) == (200, {})
        assert await post(first, ts) == (200, {})  # DingTalk again, same signature
        assert await post(first, w.timestamp()) == (200, {})  # again, signed anew
        assert await post(other, w.timestamp()) == (200, {})  # its own signature: fine
        await w.until(lambda: len(fake.session_replies) >= 2)
        await asyncio.sleep(0.3)  # anything handled twice would have been answered by now
        assert [r["text"]["content"][:2] for r in fake.session_replies] == ["命令"] * 2
        assert w.service.platforms[0].pairs.get((str(ts), sign(ts)), time.time() * 1000)


async def test_token_expiry_qps_limits_and_throttled_users_lose_nothing(tmp_path, demo_models,
                                                                         fake, monkeypatch,
                                                                         quick_retries):
    monkeypatch.setattr("bot.chat.dingtalk.api.FLOW_WAIT", 0.5)  # DingTalk's minute, shortened
    async with DingWorld(ding_config(tmp_path, demo_models, fake), fake) as w:
        await w.send_sheet_and_pictures()
        await w.gen()
        fake.expire_tokens()  # mid-batch: the next robot call is refused with 401
        fake.faults = ["qps", "qps", "flow", "500", "qps", "flow", "qps"]
        w.start_executor()
        await w.finish(timeout=120)
        assert fake.faults == [] and fake.calls["token"] >= 2
        # Each picture and file uploaded once, however often its send was refused.
        assert sorted(name for _, name, _ in fake.media.values()) == [
            "contact.png", "results.xlsx", "thumb_2.png", "thumb_3.png"]
        to = "user:staff1"
        assert [t for t in fake.texts(to) if t.startswith("批次 1 · 第")] == [
            "批次 1 · 第 2 行 · 新品上市 · 限时九折 · 1:1",
            "批次 1 · 第 3 行 · Autumn collection · 4:5"]
        assert len(fake.images(to)) == 3


async def test_a_restart_mid_batch_delivers_the_rest_exactly_once(tmp_path, demo_models, fake,
                                                                  quick_retries):
    config = ding_config(tmp_path, demo_models, fake, mode="http")
    async with DingWorld(config, fake) as w:
        await w.send_sheet_and_pictures()
        await w.gen()
        fake.faults = ["ok"] * 3 + ["500"] * 40  # three posts get through, then the service dies
        w.start_executor()
        async with asyncio.timeout(60):
            while (await w.queue.active_counts()).total or fake.faults[:1] == ["ok"]:
                await asyncio.sleep(0.05)
        before = len(fake.sent)
    assert before == 3
    fake.faults = []
    async with DingWorld(config, fake) as again:
        await again.finish(timeout=120)
    to = "user:staff1"
    captions = [t for t in fake.texts(to) if t.startswith("批次 1 · 第")]
    assert captions == ["批次 1 · 第 2 行 · 新品上市 · 限时九折 · 1:1",
                        "批次 1 · 第 3 行 · Autumn collection · 4:5"]
    assert len(fake.images(to)) == 3 \
        and len([m for m in fake.sent if m["key"] == "sampleFile"]) == 1
    texts = [str(m["param"]) for m in fake.sent]
    assert len(texts) == len(set(texts))  # nothing twice


async def test_the_stream_connection_dropped_mid_batch_reconnects_and_goes_on(tmp_path,
                                                                              demo_models, fake):
    async with DingWorld(ding_config(tmp_path, demo_models, fake), fake) as w:
        await w.send_sheet_and_pictures()
        await w.gen()
        w.start_executor()
        ping = await fake.ping()
        (echo,) = await w.until(lambda: [a for a in fake.acks
                                         if a["headers"]["messageId"] == ping])
        assert echo["code"] == 200 and json.loads(echo["data"]) == {"opaque": ping}
        await fake.drop()
        await w.until(lambda: fake.connections >= 2 and fake.sockets, timeout=30)
        await w.say(text="/status 1")
        await w.finish(timeout=120)
        status = [r for r in fake.session_replies if r["text"]["content"].startswith("批次 1 · ")]
        assert status, "a command over the new connection was answered"
        assert len(fake.images("user:staff1")) == 3


async def test_progress_on_a_card_and_platform_admins(tmp_path, demo_models, fake):
    config = ding_config(tmp_path, demo_models, fake, card_template_id="tpl.progress",
                         platform_admins=True, chat={"languages": ["dingtalk=en"]})
    async with DingWorld(config, fake) as w:
        await w.say(user="staff2", text="/pause")
        refused = await w.until(lambda: fake.session_replies)
        assert refused[0]["text"]["content"].startswith("/pause needs the admin role")
        await w.say(user="staff3", text="/pause", admin=True)  # a DingTalk admin
        await w.until(lambda: len(fake.session_replies) >= 2)
        assert fake.session_replies[1]["text"]["content"].startswith("Paused")
        await w.say(user="staff3", text="/resume", admin=True)
        await w.send_sheet_and_pictures()
        await w.gen()
        w.start_executor()
        await w.finish(timeout=120)
        (card,) = fake.cards.values()
        assert card[0].startswith("Batch 1 ░") and card[-1].startswith("Batch 1 ████")
        assert not [m for m in fake.sent if "25%" in m["param"].get("content", "")]


def test_messages_are_parsed_alike_from_both_modes_and_signatures_checked(tmp_path, demo_models):
    import io
    import os

    from PIL import Image

    from bot.chat.dingtalk.adapter import MEDIA_MAX, DingTalk
    from bot.chat.platform import image_within
    from tests.fakes.dingtalk import sign
    config = executor_config(tmp_path / "data", demo_models, dingtalk={
        "app_key": APP_KEY, "app_secret": APP_SECRET, "platform_admins": True})
    ding = DingTalk(config)
    rich = {"msgtype": "richText", "msgId": "m1", "senderStaffId": "s1", "conversationType": "2",
            "conversationId": "cid9", "isAdmin": True,
            "content": '{"richText": [{"text": "@genbot"}, {"text": "status 3"}]}'}
    got = ding.incoming(rich)
    assert (got.text, got.conversation, got.platform_role) == ("@genbot status 3", "group:cid9",
                                                                "admin")
    picture = {"msgtype": "picture", "msgId": "m2", "senderStaffId": "s1",
               "conversationType": "1", "content": {"downloadCode": "dc9"}}
    (f,) = ding.incoming(picture).files
    assert (f.name, f.handle) == ("图片1.png", {"code": "dc9"})
    assert ding.incoming({"msgtype": "audio", "senderStaffId": "s1"}) is None
    now = 1_800_000_000_000
    assert ding.signed(str(now), sign(now), now_ms=now)
    assert not ding.signed(str(now), sign(now, "other"), now_ms=now)
    assert not ding.signed(str(now - 3_600_001), sign(now - 3_600_001), now_ms=now)
    # An image over DingTalk's 20 MB is re-encoded as a JPEG that fits.
    noise = Image.frombytes("RGB", (3000, 3000), os.urandom(3000 * 3000 * 3))
    buf = io.BytesIO()
    noise.save(buf, "BMP")
    assert len(buf.getvalue()) > MEDIA_MAX
    data, name = image_within(buf.getvalue(), "big.bmp", MEDIA_MAX)
    assert name == "big.jpg" and len(data) <= MEDIA_MAX
    assert image_within(b"small", "a.png", MEDIA_MAX) == (b"small", "a.png")


def test_fields_of_wrong_types_are_read_or_ignored_and_replay_memory_expires(tmp_path,
                                                                            demo_models):
    from bot.chat.dingtalk.adapter import SIGN_WINDOW_MS, DingTalk, Recent
    ding = DingTalk(executor_config(tmp_path / "data", demo_models, dingtalk={
        "app_key": APP_KEY, "app_secret": APP_SECRET, "platform_admins": True}))
    base = {"msgId": "m1", "senderStaffId": "s1", "conversationType": "1"}
    (f,) = ding.incoming({**base, "msgtype": "file", "content": {
        "downloadCode": "dc1", "fileName": 5, "fileSize": "abc"}}).files
    assert (f.name, f.size, f.handle) == ("file", 0, {"code": "dc1"})  # size not known
    odd = ding.incoming({**base, "msgtype": "richText", "isAdmin": "yes",
                         "sessionWebhookExpiredTime": "abc", "sessionWebhook": 5,
                         "content": {"richText": [5, {"text": 7}, {"text": "status"}]}})
    assert (odd.text, odd.platform_role, odd.context) == (
        "status", None, {"session_webhook": None, "session_expires": 0.0})
    huge = ding.incoming({**base, "msgtype": "file", "sessionWebhookExpiredTime": 10**400,
                          "content": {"downloadCode": "dc2", "fileSize": 1e309}})
    assert (huge.files[0].size, huge.context["session_expires"]) == (0, 0.0)
    for body in ([], "x", None, 5, {}, {**base, "msgtype": "text", "text": {"content": 5}},
                 {**base, "conversationType": 1.0, "msgtype": "text", "text": {"content": "x"}}):
        assert ding.incoming(body) is None, body
    assert not ding.signed("²", "x") and not ding.signed("1" * 5000, "x")
    assert not ding.signed(str(int(time.time() * 1000)), "é")
    # Entries go with their time: memory follows the window, not how long the service runs.
    recent, now = Recent(), 1_800_000_000_000
    for i in range(1000):
        recent.add(("t", i), "m", now + SIGN_WINDOW_MS, now)
    assert len(recent) == 1000 and recent.get(("t", 5), now) == "m"
    later = now + SIGN_WINDOW_MS + 1
    assert recent.get(("t", 5), later) is None
    for i in range(100):
        recent.add(("u", i), "m", later + SIGN_WINDOW_MS, later)
    assert len(recent) <= 100


async def test_refused_credentials_are_said_once_and_hold_nothing_up(tmp_path, demo_models,
                                                                     fake, caplog):
    import logging
    caplog.set_level(logging.INFO)
    config = ding_config(tmp_path, demo_models, fake, mode="http", app_secret="wrong")
    async with asyncio.timeout(20):
        async with DingWorld(config, fake) as w:
            async with w.session.get(f"{w.url}/healthz") as r:
                assert r.status == 200  # the service is up meanwhile
            await w.until(lambda: [r for r in caplog.records
                                   if "dingtalk: cannot sign in as app" in r.getMessage()])
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_names_and_cells_from_people_reach_dingtalk_neutralised(tmp_path, demo_models,
                                                                      fake):
    """A file named as a heading with a phishing link and @all, cells and a column name
    full of markdown, titles that end up in captions: read by a CommonMark reader, no
    markdown message genbot sends holds a link, an image, a heading, emphasis or HTML
    other than the picture it shows itself; each reads as written, and no "@" of theirs
    reads as a mention."""
    from bot.chat.dingtalk.markup import WORD_JOINER
    name = "# [genbot: sign in again](https://evil.example) @all.csv"
    async with DingWorld(ding_config(tmp_path, demo_models, fake, mode="http"), fake) as w:
        await w.say(file=(name, hostile_sheet()))
        await w.say(file=("bottle.png", BOTTLE))
        got = (await w.until(lambda: fake.session_replies))[0]
        assert got["msgtype"] == "text"  # one line: a text message, which renders nothing
        assert got["text"]["content"].replace(WORD_JOINER, "").startswith(f"已收到 {name}。")
        assert "@all" not in got["text"]["content"]
        await w.say(text="/gen social_thumb")
        report = (await w.until(lambda: [r for r in fake.session_replies if "未提交" in
                                         r["text"]["content"]]))[0]
        assert report["msgtype"] == "markdown"
        shown = read(report["markdown"]["text"]).split("\n")  # fails on any markup
        assert shown[0] == as_written(f"{name}：10 行中有 10 行有问题，未提交任何任务。")
        assert [re.search(r"“aspect”列：“(.*)”不是", line)[1] for line in shown[1:-1]] == \
            [as_written(value) for value in HOSTILE]
        assert shown[-1] == as_written(f'social_thumb 未使用这些列："{UNUSED}"')

        titles = ["[click](https://evil.example) @all", "![x](https://evil.example/x.png) *b*"]
        await w.say(file=("titles.csv", hostile_sheet(titles, ["1:1", "1:1"])))
        await w.gen("/gen social_thumb titles.csv")
        w.start_executor()
        await w.finish(timeout=120)
        captions = [m["param"]["text"] for m in fake.sent if m["key"] == "sampleMarkdown"
                    and re.search("第 [23] 行", m["param"]["text"])]
        own = re.compile(r"\n\n!\[thumb&#95;[23]\.png\]\(@media\d+\)"  # the picture, and
                         r"\n\n(\[[^\]]*\]\(dtmd://[^)]*\)( · )?)+$")  # its actions' links
        assert [read(own.sub("", text)) for text in captions] == [
            as_written(f"批次 1 · 第 {row} 行 · {title}") for row, title in enumerate(titles, 2)]
        assert all(own.search(text) for text in captions)


async def test_actions_typed_in_the_conversation_name_rows_as_captioned(tmp_path, demo_models,
                                                                       fake):
    """DingTalk has no threads: /修改 2 …, /保留 3 and /再来 2 name the row as its caption
    shows it, in the conversation's latest batch; in a one-to-one chat each image carries
    links that make the client send them. Each is answered in one message; a row that is
    not there, or an action the template cannot do, is one plain sentence in Chinese."""
    async with DingWorld(ding_config(tmp_path, demo_models, fake, mode="http"), fake) as w:
        await w.send_sheet_and_pictures()
        await w.gen()
        w.start_executor()
        await w.finish(timeout=120)

        # Under each image in a one-to-one chat: links that send the image's commands.
        shown = [m["param"]["text"] for m in fake.sent if m["key"] == "sampleMarkdown"
                 and "](@" in m["param"]["text"]]
        row2 = links(shown[0])
        # (social_thumb has no seed and no model: Again and Vary are not offered)
        assert row2 == {"⭐ 保留": "/keep j1", "👎 淘汰": "/reject j1 --ask",
                        "🔍 放大": "/upscale j1", "✏️ 修改": "/edit j1"}

        async def answer(text: str) -> str:
            before = len(fake.session_replies)
            await w.say(text=text)
            got = await w.until(lambda: fake.session_replies[before:])
            return got[0]["text"]["content"]

        edited = await answer('/修改 2 标题="夏季新品" 宽度=512')
        assert edited.startswith("✏️ 修改：第 2 行（任务 1）的 1 张新图已排队（批次 2）")
        shows = await answer("/修改 3")  # no values: what the row has, and how to change it
        assert shows.startswith("第 3 行（任务 2）的值：image=") and "inputs/" not in shows
        assert shows.endswith('例如 /edit j2 title="Autumn collection"\n'
                              "或用一句话修改图片本身：/edit j2 把背景换成海滩")
        assert (await answer("/保留 3")) == "⭐ 已保留第 3 行（任务 2）。"
        assert (await answer(row2["⭐ 保留"])) == "⭐ 已保留第 2 行（任务 1）。"  # a tap
        assert (await w.queue.job(2)).kept
        assert (await answer("/再来 2")).startswith("模板“social_thumb”没有种子参数")
        assert (await answer("/变体 9")) == "批次 1 没有第 9 行；它的行是 2–3。"
        assert "宽度" in (await answer("/修改 2 宽度=很大"))
        await w.finish(timeout=120)
        (child,) = await w.queue.children(1)
        assert (child.action, child.values["title"], child.values["width"]) == \
            ("edit", "夏季新品", 512)
        captions = [t for t in fake.texts("user:staff1") if "由任务 1" in t]
        assert captions and captions[0].startswith("批次 2 · 第 2 行 · 任务 3")
        assert not [r for r in fake.session_replies if "批次 2 已接收" in r["text"]["content"]]
