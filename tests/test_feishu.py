"""The Feishu adapter against a fake Feishu OpenAPI on loopback (tests/fakes/feishu.py):
events really encrypted and signed as Feishu sends them, posted to the service's own
endpoint; every call out made by the official SDK."""

from __future__ import annotations

import json

import pytest

from tests.fakes.dingtalk import ASSETS, SHEET
from tests.fakes.feishu import (
    ALICE,
    APP_ID,
    APP_SECRET,
    CHAT,
    FakeFeishu,
    FeishuWorld,
    buttons,
    card_action_event,
    feishu_config,
    signed,
    url_verification,
    words,
)
from tests.fakes.service import raw_post, tracebacks


@pytest.fixture
async def fake():
    f = await FakeFeishu().start()
    yield f
    await f.stop()


async def test_a_batch_in_a_one_to_one_chat_is_one_thread_with_one_card_updated(
        tmp_path, demo_models, fake):
    """Sheet and pictures sent; /gen; the acceptance, one progress card updated in place,
    the summary — three messages besides the images — all in the command's thread; in
    Chinese by default; each image a card with its buttons."""
    async with FeishuWorld(feishu_config(tmp_path, demo_models, fake), fake) as w:
        await w.send_sheet_and_pictures()
        await w.until(lambda: any("social_thumb.xlsx" in c for c in w.cards()))
        command = await w.say(text="/gen social_thumb social_thumb.xlsx")
        root = command["event"]["message"]["message_id"]
        await w.until(lambda: any("已接收" in words(m["content"])
                                  for m in fake.in_thread(root)))
        w.start_executor()
        await w.finish(timeout=120)
        thread = await w.until(lambda: [m for m in fake.in_thread(root) if "已完成" in words(
            fake.shown(m))] and fake.in_thread(root))
        texts = [words(fake.shown(m)) for m in fake.non_image(thread)
                 if m["msg_type"] == "interactive"]
        assert texts[0].startswith("批次 1 已接收：2 个 social_thumb 任务")
        progress = [m for m in thread if m["edits"]]
        assert len(progress) == 1  # one card, updated in place
        assert "2/2" in words(fake.shown(progress[0]))
        files = [m for m in thread if m["msg_type"] == "file"]
        assert [fake.files[m["content"]["file_key"]][1] for m in files] == ["results.xlsx"]
        shown = [m for m in thread if m["msg_type"] == "interactive"
                 and any(e.get("tag") == "img" for e in m["content"]["body"]["elements"])]
        captions = [words(m["content"]) for m in shown if "第" in words(m["content"])]
        assert captions == ["第 2 行 · 新品上市 · 限时九折 · 1:1",  # (its thread says the batch)
                            "第 3 行 · Autumn collection · 4:5"]
        (first,) = [m for m in shown if words(m["content"]).startswith("第 2 行")]
        labels = {label.split(" ", 1)[-1] for label in buttons(first["content"])}
        assert {"保留", "修改", "放大", "淘汰"} <= labels, labels
        # besides each image's card: the acceptance, the progress card, the summary (with
        # the contact sheet), and the results sheet it carries
        said = [words(fake.shown(m)) for m in thread if m["msg_type"] == "interactive"
                and not words(m["content"]).startswith("第")]
        assert len(said) == 3 and "已完成，用时" in said[2], said
        assert said[2].startswith(f"<at id={ALICE}></at> 批次 1 已完成")
        assert await w.queue.batches_of(f"feishu:{ALICE}") == [1]


async def test_a_button_pressed_is_its_command_from_whoever_pressed_it(tmp_path, demo_models,
                                                                       fake):
    async with FeishuWorld(feishu_config(tmp_path, demo_models, fake), fake) as w:
        await w.send_sheet_and_pictures()
        command = await w.say(text="/gen social_thumb social_thumb.xlsx")
        root = command["event"]["message"]["message_id"]
        w.start_executor()
        await w.finish(timeout=120)
        card, press = await upscale_pressed(w, root)
        again = press["event"]["action"]["value"]["command"]
        assert await w.post(press) == 200
        assert await w.post(press) == 200  # pushed again: handled once
        await w.until(lambda: [c for c in w.cards() if "已排队（批次 2）" in c])
        batch = await w.queue.batch(2)
        assert batch.submitter == f"feishu:{ALICE}" and batch.meta["action"] == "upscale"
        stranger = card_action_event(open_id="ou_stranger", chat_id=CHAT,
                                     message_id=card["message_id"], value={"command": again})
        assert await w.post(stranger) == 200
        await w.until(lambda: [c for c in w.cards() if c.startswith(  # (not theirs to act on)
            "批次 1 由 feishu:ou_alice 提交；只有提交者或管理员可以对其执行 /upscale")])
        assert len([c for c in w.cards() if "已排队（批次" in c]) == 1  # the press: once
        assert await w.queue.batch(3) is None


async def upscale_pressed(w: FeishuWorld, root: str) -> tuple[dict, dict]:
    """The first image card in the thread that offers Upscale, and its press by Alice."""
    card = await w.until(lambda: next((m for m in w.fake.in_thread(root)
                                       if m["msg_type"] == "interactive" and any(
                                           "放大" in b for b in buttons(m["content"]))), None))
    command = next(c for b, c in buttons(card["content"]).items() if "放大" in b)
    return card, card_action_event(open_id=ALICE, chat_id=CHAT, message_id=card["message_id"],
                                   value={"command": command})


async def test_forged_unsigned_and_replayed_events_are_refused_or_handled_once(
        tmp_path, demo_models, fake, caplog):
    async with FeishuWorld(feishu_config(tmp_path, demo_models, fake), fake) as w:
        body = fake.message_event(chat_id=CHAT, open_id=ALICE, text="/help")
        assert await w.post(body, key="not-the-key") == 403  # encrypted with another key
        raw, headers = signed(body)
        headers["X-Lark-Signature"] = "0" * 64
        async with w.session.post(f"{w.url}/feishu/events", data=raw, headers=headers) as r:
            assert r.status == 403
        for name in ("X-Lark-Signature", "X-Lark-Request-Timestamp"):
            raw, headers = signed(body)
            del headers[name]
            async with w.session.post(f"{w.url}/feishu/events", data=raw,
                                      headers=headers) as r:
                assert r.status == 403, name
        raw, headers = signed(body, timestamp=1)  # the signature covers the timestamp:
        headers["X-Lark-Request-Timestamp"] = "2"  # another one breaks it
        async with w.session.post(f"{w.url}/feishu/events", data=raw, headers=headers) as r:
            assert r.status == 403
        plain = {**body, "header": {**body["header"], "token": "forged"}}
        assert await w.post(plain, encrypt=False) == 403  # a wrong verification token
        assert [m for m in fake.messages if m["by"] == "bot"] == []
        # the same signed event twice (Feishu's retry, or a replay): answered, handled once
        raw, headers = signed(body)
        for _ in range(2):
            async with w.session.post(f"{w.url}/feishu/events", data=raw,
                                      headers=headers) as r:
                assert r.status == 200
        helps = await w.until(lambda: [c for c in w.cards() if "/gen" in c])
        await w.until(lambda: True)
        assert len(helps) == 1
        # Feishu checks the URL when it is saved: the challenge comes back
        async with w.session.post(f"{w.url}/feishu/events", data=signed(
                url_verification("c-123"))[0], headers={"Content-Type": "application/json"}
                ) as r:
            assert r.status == 200 and (await r.json())["challenge"] == "c-123"
        for junk in (b"", b"[]", b"{", b"\xff\xfe", b'{"encrypt": 5}', b"[" * 100_000):
            status, _ = await raw_post(w.url, "/feishu/events", b"", junk)
            assert 400 <= status < 500, junk[:20]
        assert tracebacks(caplog) == []


async def test_throttling_is_waited_out_and_a_stale_token_fetched_again(tmp_path, demo_models,
                                                                        fake):
    async with FeishuWorld(feishu_config(tmp_path, demo_models, fake), fake) as w:
        fake.faults = ["429", "429"]
        await w.say(text="/help")
        await w.until(lambda: [c for c in w.cards() if "/gen" in c], timeout=30)
        assert len([c for c in w.cards() if "/gen" in c]) == 1  # posted once, after the wait
        fake.expire_tokens()
        await w.say(text="/templates")
        await w.until(lambda: [c for c in w.cards() if "social_thumb" in c])
        assert fake.calls["token"] >= 2


async def test_a_sheet_in_a_group_thread_and_words_from_people_shown_as_written(
        tmp_path, demo_models, fake):
    """In a group the bot reads what @-mentions it; what came from people (a file's name)
    cannot format text or @-mention anyone in the cards genbot sends."""
    group = "oc_team"
    fake.join(group)
    async with FeishuWorld(feishu_config(tmp_path, demo_models, fake), fake) as w:
        await w.say(chat=group, chat_type="group", file=("<at id=all></at>*x*.xlsx", SHEET))
        said = await w.until(lambda: [m for m in fake.in_chat(group) if m["by"] == "bot"])
        content = said[0]["content"]["body"]["elements"][0]["content"]
        assert "<at id=all>" not in content and "*x*" not in content
        assert "&#60;at id=all&#62;" in content or "&lt;at" in content
        await w.say(chat=group, chat_type="group", text="帮助", mention_bot=True)
        await w.until(lambda: any("/gen" in c for c in w.cards(group)))


def test_the_config_says_what_is_missing(tmp_path):
    from storage.config import ConfigError
    from storage.config import from_dict as config_from
    base = {"service": {"data_dir": str(tmp_path)}}
    with pytest.raises(ConfigError, match=r"\[feishu\] app_id: \"app1\" is not an App ID"):
        config_from({**base, "feishu": {"app_id": "app1"}})
    with pytest.raises(ConfigError, match="expected app_secret too"):
        config_from({**base, "feishu": {"app_id": APP_ID}})
    with pytest.raises(ConfigError, match='mode = "callback": expected encrypt_key and '
                                          "verification_token"):
        config_from({**base, "feishu": {"app_id": APP_ID, "app_secret": "s",
                                        "mode": "callback"}})
    assert config_from({**base, "feishu": {"app_id": APP_ID, "app_secret": "s"}})  # (long
    # connection: no keys needed)
    with pytest.raises(ConfigError, match="expected feishu, lark, or an https:// base URL"):
        config_from({**base, "feishu": {"app_id": APP_ID, "app_secret": "s", "encrypt_key": "k",
                                        "verification_token": "t", "domain": "http://x.cn"}})
    lark = config_from({**base, "feishu": {"app_id": APP_ID, "app_secret": "s",
                                           "encrypt_key": "k", "verification_token": "t",
                                           "domain": "lark"}})
    from bot.settings import FeishuConfig
    assert lark[FeishuConfig].base == "https://open.larksuite.com"
    assert json.dumps(lark[FeishuConfig].base)


class LongWorld(FeishuWorld):
    """The service connected to Feishu over the long connection."""

    async def __aenter__(self) -> LongWorld:
        await super().__aenter__()
        await self.fake.wait_connected(1, timeout=10)
        return self

    async def push(self, body: dict, split: int = 1) -> dict:
        ack = await self.fake.ack_of(await self.fake.push(body, split=split), timeout=10)
        assert ack["payload"]["code"] == 200
        return ack

    async def say(self, *, user: str = ALICE, chat: str = CHAT, **message) -> dict:
        body = self.fake.message_event(chat_id=chat, open_id=user, **message)
        await self.push(body)
        return body


async def test_over_the_long_connection_events_are_answered_and_it_reconnects(
        tmp_path, demo_models, fake, caplog):
    """No public URL: genbot connects out, answers each event at once (a split one
    reassembled), a button pressed comes back over it, and a dropped connection is opened
    again through the endpoint — the batch goes on."""
    fake.ping_interval = 1
    config = feishu_config(tmp_path, demo_models, fake, mode="long_connection",
                           encrypt_key="", verification_token="")
    async with LongWorld(config, fake) as w:
        await w.send_sheet_and_pictures()
        body = fake.message_event(chat_id=CHAT, open_id=ALICE,
                                  text="/gen social_thumb social_thumb.xlsx")
        await w.push(body, split=3)
        root = body["event"]["message"]["message_id"]
        await w.until(lambda: any("已接收" in words(m["content"]) for m in fake.in_thread(root)))
        assert await fake.drop() == 1  # the connection lost mid-batch
        await w.until(lambda: fake.connections >= 2 and fake.sockets, timeout=15)
        assert fake.calls["endpoint"] >= 2  # a new endpoint asked for, not the old URL
        w.start_executor()
        await w.finish(timeout=120)
        _, press = await upscale_pressed(w, root)
        await w.push(press)
        await w.push(press)  # Feishu pushing it again: answered, handled once
        await w.until(lambda: [c for c in w.cards() if "已排队（批次 2）" in c])
        assert len([c for c in w.cards() if "已排队（批次" in c]) == 1
        await w.until(lambda: fake.calls["ping"] >= 1)
        assert fake.ws_errors == [] and tracebacks(caplog) == []


async def test_one_outbox_message_is_posted_once_however_often_it_is_tried(tmp_path, fake):
    """A send retried after a lost answer carries its outbox key's uuid: Feishu posts it
    once. Two messages that say the same (/help asked twice) are two keys: both post."""
    from bot.chat.feishu.adapter import Feishu
    from bot.chat.platform import Outgoing
    from storage.config import from_dict as config_from
    fake.join(CHAT)
    platform = Feishu(config_from({"service": {"data_dir": str(tmp_path)}, "feishu": {
        "app_id": APP_ID, "app_secret": APP_SECRET, "domain": fake.base}}))
    try:
        first = Outgoing(CHAT, None, "命令：/gen …", key="reply:feishu:m1:0")
        ids = {await platform.send(first) for _ in range(3)}
        again = await platform.send(Outgoing(CHAT, None, "命令：/gen …", key="reply:feishu:m2:0"))
        assert len(ids) == 1 and again not in ids
        assert len([m for m in fake.in_chat(CHAT) if m["by"] == "bot"]) == 2
    finally:
        await platform.close()


async def test_a_429_storm_delivers_every_image_once_in_order(tmp_path, demo_models, fake,
                                                              quick_retries):
    """As on Slack: most calls refused for a while (throttled, or a server error), and
    still each image is in the thread once, in row order, each card posted once."""
    async with FeishuWorld(feishu_config(tmp_path, demo_models, fake), fake) as w:
        rows = "\n".join(f"{n},Title {i}" for i, n in enumerate(["bottle.png", "chair.png"] * 3))
        await w.say(file=("six.csv", f"image,title\n{rows}\n".encode()))
        for name in ("bottle.png", "chair.png"):
            await w.say(file=(name, (ASSETS / name).read_bytes()))
        command = await w.say(text="/gen social_thumb six.csv")
        root = command["event"]["message"]["message_id"]
        await w.until(lambda: len(fake.in_thread(root)) >= 2)  # acceptance and progress
        fake.faults = ["500" if i % 4 == 0 else "429" for i in range(12)]
        w.start_executor()
        await w.finish(timeout=120)
        await w.until(lambda: [m for m in fake.in_thread(root) if m["msg_type"] == "file"],
                      timeout=60)
        captions = [words(m["content"]) for m in fake.in_thread(root)
                    if m["msg_type"] == "interactive"
                    and any(e.get("tag") == "img" for e in m["content"]["body"]["elements"])
                    and words(m["content"]).startswith("第")]
        assert captions == [f"第 {r} 行 · Title {r - 2}" for r in range(2, 8)]
        assert fake.faults == []  # every fault was met


async def test_people_can_be_known_by_union_id_and_are_still_mentioned_by_open_id(
        tmp_path, demo_models, fake):
    """[feishu] identity = "union_id": the batch is the person's union_id (roles and batches
    survive a move to another app of the same developer), a role given to it counts, and
    the summary @-mentions them by the open_id Feishu's card needs."""
    config = feishu_config(tmp_path, demo_models, fake, identity="union_id",
                           chat={"admins": ["feishu:on_alice_everywhere"]})
    async with FeishuWorld(config, fake) as w:
        rows = "image,title\nbottle.png,One\n"
        await w.say(file=("one.csv", rows.encode()), union_id="on_alice_everywhere")
        await w.say(file=("bottle.png", (ASSETS / "bottle.png").read_bytes()),
                    union_id="on_alice_everywhere")
        await w.until(lambda: len(w.cards()) >= 2)  # both files received
        command = await w.say(text="/gen social_thumb one.csv", union_id="on_alice_everywhere")
        root = command["event"]["message"]["message_id"]
        await w.until(lambda: w.queue.batch(1))
        await w.say(text="/pause", union_id="on_alice_everywhere")  # an admin, by union_id
        await w.until(lambda: w.queue.paused())
        await w.queue.resume(by="test")
        w.start_executor()
        await w.finish(timeout=120)
        batch = await w.queue.batch(1)
        assert batch is not None and batch.submitter == "feishu:on_alice_everywhere", (
            batch, w.cards())
        summary = await w.until(lambda: [m for m in fake.in_thread(root)
                                         if "已完成，用时" in words(fake.shown(m))])
        assert fake.shown(summary[0])["body"]["elements"][0]["content"].startswith(
            f"<at id={ALICE}></at>")
