"""The Feishu fake speaks to the real SDK (lark-oapi) and refuses what Feishu refuses; its
inbound helpers produce what lark-oapi's own EventDispatcherHandler decrypts, verifies and
dispatches. If these fail, tests of genbot's Feishu adapter prove nothing."""

from __future__ import annotations

import asyncio
import io
import json
import time
from urllib.parse import parse_qs, urlparse

import httpx
import lark_oapi as lark
import pytest
import websockets
from lark_oapi.api.im.v1 import (
    CreateFileRequest,
    CreateFileRequestBody,
    CreateImageRequest,
    CreateImageRequestBody,
    CreateMessageRequest,
    CreateMessageRequestBody,
    GetMessageResourceRequest,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.exception import ObtainAccessTokenException
from lark_oapi.core.utils import Files
from lark_oapi.event.callback.model.p2_card_action_trigger import P2CardActionTriggerResponse
from lark_oapi.ws.client import Client as WsSdkClient
from lark_oapi.ws.client import _new_ping_frame, _parse_ws_conn_exception
from lark_oapi.ws.const import GEN_ENDPOINT_URI
from lark_oapi.ws.enum import FrameType
from lark_oapi.ws.exception import ClientException as WsClientException
from lark_oapi.ws.exception import ServerException as WsServerException
from lark_oapi.ws.pb.pbbp2_pb2 import Frame
from PIL import Image
from websockets.exceptions import InvalidHandshake

from tests.fakes.feishu import (
    APP_ID,
    APP_SECRET,
    BOT_OPEN_ID,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    FakeFeishu,
    NotConnected,
    card_action_event,
    forget_sdk_token,
    signed,
    url_verification,
)

GROUP = "oc_team"
ALICE = "ou_alice"


@pytest.fixture
async def fake():
    fake = await FakeFeishu().start()
    yield fake
    await fake.stop()


def sdk(fake: FakeFeishu, secret: str = APP_SECRET) -> lark.Client:
    """The SDK as an app builds it, on the fake's origin; it fetches tokens itself."""
    return lark.Client.builder().app_id(APP_ID).app_secret(secret).domain(fake.base) \
        .log_level(lark.LogLevel.CRITICAL).build()


def png(size=(8, 8)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


def card(*elements, **config) -> dict:
    return {"schema": "2.0", "config": config,
            "header": {"title": {"tag": "plain_text", "content": "Batch 7"}},
            "body": {"elements": list(elements)}}


CANCEL = {"tag": "button", "text": {"tag": "plain_text", "content": "Cancel"}, "type": "danger",
          "behaviors": [{"type": "callback", "value": {"action": "cancel", "batch": 7}}]}


async def send(client, chat_id: str, msg_type: str, content: dict | str, *, uuid=None,
               id_type: str = "chat_id"):
    body = CreateMessageRequestBody.builder().receive_id(chat_id).msg_type(msg_type).content(
        content if isinstance(content, str) else json.dumps(content, ensure_ascii=False))
    if uuid:
        body = body.uuid(uuid)
    request = CreateMessageRequest.builder().receive_id_type(id_type) \
        .request_body(body.build()).build()
    return await client.im.v1.message.acreate(request)


async def reply(client, message_id: str, msg_type: str, content: dict, *, uuid=None):
    body = ReplyMessageRequestBody.builder().msg_type(msg_type).reply_in_thread(True) \
        .content(json.dumps(content, ensure_ascii=False))
    if uuid:
        body = body.uuid(uuid)
    request = ReplyMessageRequest.builder().message_id(message_id) \
        .request_body(body.build()).build()
    return await client.im.v1.message.areply(request)


async def patch(client, message_id: str, content: dict | str):
    request = PatchMessageRequest.builder().message_id(message_id).request_body(
        PatchMessageRequestBody.builder().content(
            content if isinstance(content, str) else json.dumps(content)).build()).build()
    return await client.im.v1.message.apatch(request)


async def upload_image(client, data: bytes):
    request = CreateImageRequest.builder().request_body(
        CreateImageRequestBody.builder().image_type("message").image(io.BytesIO(data)).build()
    ).build()
    return await client.im.v1.image.acreate(request)


async def upload_file(client, data: bytes, name: str = "result.xlsx", file_type: str = "xls"):
    request = CreateFileRequest.builder().request_body(
        CreateFileRequestBody.builder().file_type(file_type).file_name(name)
        .file(io.BytesIO(data)).build()).build()
    return await client.im.v1.file.acreate(request)


# --- sending ------------------------------------------------------------------------------------
async def test_text_and_replies_in_a_thread(fake):
    client = sdk(fake)
    command = fake.message_event(chat_id=GROUP, open_id=ALICE, chat_type="group",
                                 text="/gen product_main sheet.xlsx", mention_bot=True)
    root = command["event"]["message"]["message_id"]

    sent = await send(client, GROUP, "text", {"text": "hello"})
    assert sent.success(), sent.msg
    first = await reply(client, root, "text", {"text": "accepted"})
    assert first.success(), first.msg
    # a reply to a message already in the thread lands in the same thread
    second = await reply(client, first.data.message_id, "text", {"text": "row 1 done"})

    assert (first.data.root_id, second.data.root_id) == (root, root)
    assert first.data.thread_id and first.data.thread_id == second.data.thread_id
    assert [m["content"]["text"] for m in fake.in_thread(root)] == ["accepted", "row 1 done"]
    assert [m["by"] for m in fake.in_chat(GROUP)] == [ALICE, "bot", "bot", "bot"]
    top = fake.in_chat(GROUP)[1]
    assert (top["message_id"], top["root_id"], top["msg_type"]) == \
        (sent.data.message_id, None, "text")
    assert fake.calls["token"] == 1  # the SDK fetched one token and kept it


async def test_a_chat_the_bot_is_not_in_and_unknown_messages_are_refused(fake):
    client = sdk(fake)
    resp = await send(client, "oc_elsewhere", "text", {"text": "hi"})
    assert (resp.code, resp.raw.status_code) == (230002, 400)
    resp = await reply(client, "om_nothing", "text", {"text": "hi"})
    assert resp.code == 230001 and "invalid message_id" in resp.msg
    fake.join(GROUP)
    assert (await send(client, GROUP, "sticker", {"file_key": "x"})).code == 230001
    assert (await send(client, GROUP, "text", {"words": "hi"})).code == 230001
    assert (await send(client, GROUP, "text", "not json")).code == 230001
    assert (await send(client, GROUP, "text", {"text": "x" * 160_000})).code == 230025
    assert fake.messages == []


async def test_a_direct_message_by_open_id_reuses_the_persons_chat(fake):
    client = sdk(fake)
    fake.message_event(chat_id="oc_dm_alice", open_id=ALICE, text="hi")
    resp = await send(client, ALICE, "text", {"text": "hello"}, id_type="open_id")
    assert resp.success() and resp.data.chat_id == "oc_dm_alice"


async def test_uuid_sends_once(fake):
    client = sdk(fake)
    fake.join(GROUP)
    a = await send(client, GROUP, "text", {"text": "done"}, uuid="batch-7-done")
    b = await send(client, GROUP, "text", {"text": "done"}, uuid="batch-7-done")
    assert a.success() and b.success()
    assert a.data.message_id == b.data.message_id
    assert len(fake.in_chat(GROUP)) == 1 and fake.calls["create"] == 2
    root = a.data.message_id
    c = await reply(client, root, "text", {"text": "x"}, uuid="r1")
    d = await reply(client, root, "text", {"text": "x"}, uuid="r1")
    assert c.data.message_id == d.data.message_id and len(fake.in_thread(root)) == 1
    assert (await send(client, GROUP, "text", {"text": "x"}, uuid="u" * 51)).code == 99992402


# --- cards ----------------------------------------------------------------------------------------
async def test_a_card_is_sent_and_updated_in_place(fake):
    client = sdk(fake)
    fake.join(GROUP)
    progress = card({"tag": "markdown", "content": "**0/3** rows"},
                    {"tag": "column_set", "columns": [
                        {"tag": "column", "elements": [{"tag": "div", "text": {
                            "tag": "lark_md", "content": "queued"}}]},
                        {"tag": "column", "elements": [CANCEL]}]},
                    {"tag": "hr"})
    sent = await send(client, GROUP, "interactive", progress)
    assert sent.success(), sent.msg
    message_id = sent.data.message_id
    for n in (1, 2):
        done = card({"tag": "markdown", "content": f"**{n}/3** rows"}, CANCEL)
        resp = await patch(client, message_id, done)
        assert resp.success(), resp.msg
    [m] = fake.in_chat(GROUP)
    assert m["content"] == progress
    assert [e["body"]["elements"][0]["content"] for e in m["edits"]] == \
        ["**1/3** rows", "**2/3** rows"]
    assert fake.shown(m) == m["edits"][-1]
    assert fake.calls["patch"] == 2


async def test_patches_feishu_refuses(fake):
    client = sdk(fake)
    fake.join(GROUP)
    text = await send(client, GROUP, "text", {"text": "hi"})
    resp = await patch(client, text.data.message_id, card({"tag": "hr"}))
    assert resp.code == 230001 and "NOT a card" in resp.msg

    # JSON 1.0 cards are not shared unless they say so; nor is a 2.0 card that turns it off
    v1 = {"config": {"wide_screen_mode": True},
          "elements": [{"tag": "div", "text": {"tag": "plain_text", "content": "a"}}]}
    old = await send(client, GROUP, "interactive", v1)
    assert old.success(), old.msg
    assert (await patch(client, old.data.message_id, v1)).code == 230001
    shared_v1 = {**v1, "config": {"update_multi": True}}
    shared = await send(client, GROUP, "interactive", shared_v1)
    assert (await patch(client, shared.data.message_id, shared_v1)).success()
    unshared = await send(client, GROUP, "interactive", card({"tag": "hr"}))
    resp = await patch(client, unshared.data.message_id, card({"tag": "hr"}, update_multi=False))
    assert resp.code == 230001

    # not after 14 days, and not more than 5 a second on one message
    fake.in_chat(GROUP)[-1]["create_time"] -= 15 * 86400 * 1000
    assert (await patch(client, unshared.data.message_id, card({"tag": "hr"}))).code == 230031
    fresh = await send(client, GROUP, "interactive", card({"tag": "hr"}))
    fake.clock = lambda: 1000.0  # all six within one second, however slow the machine
    codes = [(await patch(client, fresh.data.message_id, card({"tag": "hr"}))).code
             for _ in range(6)]
    assert codes == [0] * 5 + [230020]
    assert (await patch(client, "om_nothing", card({"tag": "hr"}))).code == 230001


BAD_CARDS = {
    "unknown top-level property": {**card({"tag": "hr"}), "elements": []},
    "unknown tag": card({"tag": "fancy_chart"}),
    "1.0 action in 2.0": card({"tag": "action", "actions": [CANCEL]}),
    "image not uploaded": card({"tag": "img", "img_key": "img_v3_nobody"}),
    "button without text": card({"tag": "button", "type": "primary"}),
    "bad behavior": card({**CANCEL, "behaviors": [{"type": "callback"}]}),
    "no body": {"schema": "2.0", "header": {"title": {"tag": "plain_text", "content": "x"}}},
    "bad schema": {**card({"tag": "hr"}), "schema": "3.0"},
    "not json": "{not json",
}


@pytest.mark.parametrize("bad", BAD_CARDS.values(), ids=BAD_CARDS.keys())
async def test_bad_cards_are_refused(fake, bad):
    client = sdk(fake)
    fake.join(GROUP)
    resp = await send(client, GROUP, "interactive", bad if isinstance(bad, str)
                      else json.dumps(bad))
    assert resp.code == 230099 and "Failed to create card content" in resp.msg, resp.msg
    assert fake.messages == []


async def test_a_card_over_30_kb_is_refused(fake):
    client = sdk(fake)
    fake.join(GROUP)
    big = card({"tag": "markdown", "content": "x" * 31_000})
    assert (await send(client, GROUP, "interactive", big)).code == 230025


# --- uploads --------------------------------------------------------------------------------------
async def test_images_and_files_are_uploaded_and_sent(fake):
    client = sdk(fake)
    fake.join(GROUP)
    image = await upload_image(client, png())
    assert image.success(), image.msg
    key = image.data.image_key
    assert key.startswith("img_v3_") and fake.images[key] == png()
    file = await upload_file(client, b"PK\x03\x04 a workbook", "结果.xlsx")
    assert file.success(), file.msg
    assert fake.files[file.data.file_key] == ("xls", "结果.xlsx", b"PK\x03\x04 a workbook")

    assert (await send(client, GROUP, "image", {"image_key": key})).success()
    assert (await send(client, GROUP, "file", {"file_key": file.data.file_key})).success()
    picture = card({"tag": "img", "img_key": key, "alt": {"tag": "plain_text", "content": ""}})
    assert (await send(client, GROUP, "interactive", picture)).success()
    assert (await send(client, GROUP, "interactive", card(
        {"tag": "img", "img_key": key}, {"tag": "markdown", "content": "row 3"}))).success()
    sent = fake.in_chat(GROUP)
    assert [m["msg_type"] for m in fake.non_image(sent)] == ["file", "interactive"]
    assert fake.calls["image"] == 1 and fake.calls["file"] == 1


async def test_uploads_and_keys_feishu_refuses(fake):
    client = sdk(fake)
    fake.join(GROUP)
    assert (await upload_image(client, b"%PDF-1.4 not a picture")).code == 234011
    assert (await upload_image(client, b"")).code == 234010
    assert (await upload_file(client, b"")).code == 234010
    assert (await upload_file(client, b"x", file_type="xlsx")).code == 234001
    assert (await send(client, GROUP, "image", {"image_key": "img_v3_nobody"})).code == 230001
    # a person's file is not the bot's to send
    event = fake.message_event(chat_id=GROUP, open_id=ALICE, file=("a.xlsx", b"x"))
    key = json.loads(event["event"]["message"]["content"])["file_key"]
    assert (await send(client, GROUP, "file", {"file_key": key})).code == 230017
    video = await upload_file(client, b"\x00\x00\x00\x18ftypmp42", "a.mp4", "mp4")
    assert (await send(client, GROUP, "file", {"file_key": video.data.file_key})).code == 230055
    assert fake.images == {}


# --- what people send -----------------------------------------------------------------------------
async def test_a_persons_file_is_downloaded(fake):
    client = sdk(fake)
    data = b"PK\x03\x04" + bytes(range(256)) * 8
    event = fake.message_event(chat_id="oc_dm", open_id=ALICE, file=("销售 表,1.xlsx", data))
    message = event["event"]["message"]
    content = json.loads(message["content"])
    assert (message["message_type"], content["file_name"]) == ("file", "销售 表,1.xlsx")
    request = GetMessageResourceRequest.builder().message_id(message["message_id"]) \
        .file_key(content["file_key"]).type("file").build()

    resp = await client.im.v1.message_resource.aget(request)
    assert resp.success() and resp.file.read() == data
    # aget reads the name with the header's canonical spelling from httpx's lower-cased
    # headers, so it finds none: the header itself carries it (the sync get reads it)
    assert resp.file_name is None
    disposition = resp.raw.headers["content-disposition"]
    assert Files.parse_file_name({"Content-Disposition": disposition}) == "销售 表,1.xlsx"
    sync = await asyncio.to_thread(client.im.v1.message_resource.get, request)
    assert (sync.file_name, sync.file.read()) == ("销售 表,1.xlsx", data)
    assert fake.calls["resource"] == 2

    wrong = GetMessageResourceRequest.builder().message_id(message["message_id"]) \
        .file_key("file_v3_other").type("file").build()
    resp = await client.im.v1.message_resource.aget(wrong)
    assert not resp.success() and resp.raw.status_code == 400
    assert json.loads(resp.raw.content)["code"] == 234003


async def test_a_persons_picture_is_downloaded(fake):
    client = sdk(fake)
    event = fake.message_event(chat_id="oc_dm", open_id=ALICE, image=png())
    message = event["event"]["message"]
    key = json.loads(message["content"])["image_key"]
    request = GetMessageResourceRequest.builder().message_id(message["message_id"]) \
        .file_key(key).type("image").build()
    resp = await client.im.v1.message_resource.aget(request)
    assert resp.success() and resp.file.read() == png()


# --- faults and tokens ----------------------------------------------------------------------------
async def test_throttling_and_server_errors(fake):
    client = sdk(fake)
    fake.join(GROUP)
    fake.faults += ["429", "500", "ok"]
    resp = await send(client, GROUP, "text", {"text": "a"})
    assert (resp.code, resp.msg, resp.raw.status_code) == \
        (99991400, "request trigger frequency limit", 429)
    assert resp.raw.headers["x-ogw-ratelimit-reset"] == "1"
    assert resp.raw.headers["x-ogw-ratelimit-limit"]
    resp = await send(client, GROUP, "text", {"text": "a"})
    assert resp.raw.status_code == 500 and not resp.success()
    assert (await send(client, GROUP, "text", {"text": "a"})).success()  # "ok" lets one by
    fake.faults.append("429")
    assert (await upload_image(client, png())).code == 99991400
    assert len(fake.messages) == 1 and not fake.faults


async def test_an_expired_token_is_replaced(fake):
    client = sdk(fake)
    fake.join(GROUP)
    assert (await send(client, GROUP, "text", {"text": "a"})).success()
    fake.expire_tokens()
    resp = await send(client, GROUP, "text", {"text": "b"})
    assert (resp.code, resp.raw.status_code) == (99991663, 400)
    forget_sdk_token()  # what the client does on 99991663: the SDK never does it itself
    assert (await send(client, GROUP, "text", {"text": "b"})).success()
    assert fake.calls["token"] == 2
    assert [m["content"]["text"] for m in fake.messages] == ["a", "b"]


async def test_tokens_need_the_right_credentials(fake):
    with pytest.raises(ObtainAccessTokenException) as refused:
        await send(sdk(fake, secret="wrong"), GROUP, "text", {"text": "a"})
    assert refused.value.code == 10014
    async with httpx.AsyncClient() as http:
        r = await http.post(f"{fake.base}/open-apis/im/v1/messages?receive_id_type=chat_id",
                            json={"receive_id": GROUP, "msg_type": "text", "content": "{}"})
        assert r.json()["code"] == 99991661
        r = await http.post(f"{fake.base}/open-apis/auth/v3/tenant_access_token/internal",
                            json={"app_id": "cli_other", "app_secret": APP_SECRET})
        assert r.json()["code"] == 10003


# --- inbound: lark-oapi's own dispatcher reads what the helpers build -----------------------------
class Dispatcher:
    """lark-oapi's EventDispatcherHandler with the fake app's keys, recording what it gets."""

    def __init__(self, encrypt_key: str = ENCRYPT_KEY, token: str = VERIFICATION_TOKEN):
        self.messages: list = []
        self.clicks: list = []
        self.handler = lark.EventDispatcherHandler.builder(encrypt_key, token) \
            .register_p2_im_message_receive_v1(self.messages.append) \
            .register_p2_card_action_trigger(self.click).build()

    def click(self, data):
        self.clicks.append(data)
        return P2CardActionTriggerResponse({"toast": {"type": "info", "content": "cancelled"}})

    def post(self, raw: bytes, headers: dict[str, str]) -> tuple[int, dict]:
        request = lark.RawRequest()
        request.uri, request.headers, request.body = "/feishu/events", headers, raw
        response = self.handler.do(request)
        return response.status_code, json.loads(response.content)


async def test_a_message_event_is_decrypted_and_dispatched(fake):
    app = Dispatcher()
    event = fake.message_event(chat_id=GROUP, open_id=ALICE, chat_type="group",
                               text="/gen product_main sheet.xlsx", mention_bot=True,
                               union_id="on_alice")
    raw, headers = signed(event)
    assert set(json.loads(raw)) == {"encrypt"}
    assert app.post(raw, headers) == (200, {"msg": "success"})
    [got] = app.messages
    assert got.header.event_type == "im.message.receive_v1"
    assert got.header.token == VERIFICATION_TOKEN and got.header.app_id == APP_ID
    message = got.event.message
    assert (message.chat_id, message.chat_type, message.message_type) == \
        (GROUP, "group", "text")
    assert json.loads(message.content) == {"text": "@_user_1 /gen product_main sheet.xlsx"}
    assert message.mentions[0].key == "@_user_1"
    assert message.mentions[0].id.open_id == BOT_OPEN_ID
    assert got.event.sender.sender_id.open_id == ALICE
    assert got.event.sender.sender_id.union_id == "on_alice"
    assert got.event.sender.sender_type == "user"
    assert message.message_id == fake.messages[-1]["message_id"]
    assert fake.messages[-1]["by"] == ALICE


async def test_a_file_event_in_a_thread(fake):
    app = Dispatcher()
    root = fake.message_event(chat_id=GROUP, open_id=ALICE, chat_type="group", text="hi")
    root_id = root["event"]["message"]["message_id"]
    event = fake.message_event(chat_id=GROUP, open_id=ALICE, chat_type="group",
                               file=("sheet.xlsx", b"PK"), root_id=root_id)
    assert app.post(*signed(event))[0] == 200
    message = app.messages[0].event.message
    assert (message.root_id, message.parent_id) == (root_id, root_id)
    assert message.thread_id
    content = json.loads(message.content)
    assert content["file_name"] == "sheet.xlsx" and content["file_key"].startswith("file_")
    assert fake.in_thread(root_id)[0]["msg_type"] == "file"
    assert "root_id" not in root["event"]["message"]  # a top-level message has none


async def test_a_card_click_is_dispatched_and_answered(fake):
    app = Dispatcher()
    event = card_action_event(open_id=ALICE, chat_id=GROUP, message_id="om_card",
                              value={"action": "cancel", "batch": 7})
    status, answer = app.post(*signed(event))
    assert (status, answer) == (200, {"toast": {"type": "info", "content": "cancelled"}})
    [click] = app.clicks
    assert click.header.event_type == "card.action.trigger"
    assert click.event.operator.open_id == ALICE
    assert click.event.action.tag == "button"
    assert click.event.action.value == {"action": "cancel", "batch": 7}
    assert (click.event.context.open_message_id, click.event.context.open_chat_id) == \
        ("om_card", GROUP)
    assert click.event.token.startswith("c-")


async def test_url_verification_is_answered(fake):
    body = url_verification("challenge-123")
    assert Dispatcher().post(*signed(body)) == (200, {"challenge": "challenge-123"})
    assert Dispatcher().post(*signed(body, encrypt=False)) == (200, {"challenge": "challenge-123"})


async def test_tampered_requests_are_refused(fake):
    app = Dispatcher()
    event = fake.message_event(chat_id=GROUP, open_id=ALICE, text="hi")
    raw, headers = signed(event)
    # the signature covers the timestamp, the nonce and the exact body
    for changed in ({"X-Lark-Signature": "0" * 64},
                    {"X-Lark-Request-Timestamp": str(int(time.time()) + 1)},
                    {"X-Lark-Request-Nonce": "another"}):
        assert app.post(raw, {**headers, **changed})[0] == 500
    assert app.post(raw.replace(b'"}', b'" }'), headers)[0] == 500
    # another app's Encrypt Key, or another app's Verification Token
    assert app.post(*signed(event, key="someone-elses-key"))[0] == 500
    assert Dispatcher(token="another-token").post(raw, headers)[0] == 500
    assert app.messages == []
    assert app.post(raw, headers)[0] == 200  # the untouched request still passes


# --- the long connection --------------------------------------------------------------------------
class WsClient:
    """The long connection as lark-oapi's ws.Client speaks it (ws/client.py: `_get_conn_url`,
    `_connect`, `_new_ping_frame`, `_handle_data_frame`, `_combine`), on the test's loop: the
    SDK's own client cannot run there (it takes a module-level loop and run_until_complete)."""

    def __init__(self, url: str, conn) -> None:
        self.url, self.conn = url, conn
        self.service_id = int(parse_qs(urlparse(url).query)["service_id"][0])
        self.parts: dict[str, list[bytes]] = {}

    @staticmethod
    async def endpoint(fake: FakeFeishu, secret: str = APP_SECRET) -> httpx.Response:
        async with httpx.AsyncClient() as http:
            return await http.post(fake.base + GEN_ENDPOINT_URI, headers={"locale": "zh"},
                                   json={"AppID": APP_ID, "AppSecret": secret})

    @classmethod
    async def open(cls, fake: FakeFeishu) -> WsClient:
        answer = (await cls.endpoint(fake)).json()
        assert answer["code"] == 0, answer
        url = answer["data"]["URL"]
        return cls(url, await websockets.connect(url, proxy=None))

    async def frame(self, timeout: float = 5.0) -> Frame:
        frame = Frame()
        frame.ParseFromString(await asyncio.wait_for(self.conn.recv(), timeout))
        return frame

    async def event(self) -> tuple[Frame, dict, list[Frame]]:
        """The next whole event: the frame that completed it, its JSON, and every frame."""
        frames = []
        while True:
            frame = await self.frame()
            frames.append(frame)
            assert frame.method == FrameType.DATA.value
            h = headers(frame)
            total, seq = int(h["sum"]), int(h["seq"])
            parts = self.parts.setdefault(h["message_id"], [b""] * total)
            parts[seq] = frame.payload
            if all(parts):
                del self.parts[h["message_id"]]
                return frame, json.loads(b"".join(parts)), frames

    async def ack(self, frame: Frame, code: int = 200) -> None:
        header = frame.headers.add()
        header.key, header.value = "biz_rt", "3"
        frame.payload = json.dumps({"code": code}).encode()
        await self.conn.send(frame.SerializeToString())

    async def ping(self) -> None:
        await self.conn.send(_new_ping_frame(self.service_id).SerializeToString())


def headers(frame: Frame) -> dict[str, str]:
    return {h.key: h.value for h in frame.headers}


@pytest.fixture
async def ws_client(fake):
    client = await WsClient.open(fake)
    await fake.wait_connected()
    yield client
    await client.conn.close()


def ws_sdk(fake: FakeFeishu, secret: str = APP_SECRET, handler=None) -> WsSdkClient:
    client = WsSdkClient(APP_ID, secret, domain=fake.base, event_handler=handler,
                         log_level=lark.LogLevel.CRITICAL)
    client._cache._cron.cancel()  # a clean-up task it starts on whichever loop is current
    return client


async def test_the_endpoint_hands_out_a_connection_url(fake):
    fake.ping_interval, fake.reconnect_interval = 7, 2
    answer = (await WsClient.endpoint(fake)).json()
    assert (answer["code"], answer["msg"]) == (0, "ok")
    url = urlparse(answer["data"]["URL"])
    query = parse_qs(url.query)
    assert (url.scheme, url.hostname) == ("ws", "127.0.0.1")
    assert query["device_id"][0] and int(query["service_id"][0]) == fake.service_id
    assert answer["data"]["ClientConfig"] == {"ReconnectCount": -1, "ReconnectInterval": 2,
                                              "ReconnectNonce": 0, "PingInterval": 7}
    # the SDK's own endpoint call reads it and takes the ClientConfig
    client = ws_sdk(fake)
    assert (await asyncio.to_thread(client._get_conn_url)).startswith("ws://127.0.0.1:")
    assert (client._ping_interval, client._reconnect_interval, client._reconnect_nonce,
            client._reconnect_count) == (7, 2, 0, -1)
    assert fake.calls["endpoint"] == 2 and fake.connections == 0


async def test_wrong_credentials_are_refused_for_good(fake):
    r = await WsClient.endpoint(fake, secret="wrong")
    assert (r.status_code, r.json()["code"]) == (200, 1000040345)
    with pytest.raises(WsClientException) as refused:  # the SDK gives up, it does not retry
        await asyncio.to_thread(ws_sdk(fake, secret="wrong")._get_conn_url)
    assert refused.value.code == 1000040345
    assert fake.calls["endpoint"] == 2


async def test_refused_connections_are_server_errors_the_sdk_retries(fake):
    fake.refuse_connections = True
    r = await WsClient.endpoint(fake)
    assert (r.status_code, r.json()["code"]) == (500, 1)
    client = ws_sdk(fake)
    with pytest.raises(WsServerException) as busy:
        await asyncio.to_thread(client._get_conn_url)
    assert busy.value.code == 500
    fake.refusal_status = 200  # the code alone says "system busy"
    with pytest.raises(WsServerException) as busy:
        await asyncio.to_thread(client._get_conn_url)
    assert (busy.value.code, str(busy.value)) == (1, "1: system busy")
    fake.refuse_connections = False
    assert (await WsClient.endpoint(fake)).json()["code"] == 0
    assert fake.calls["endpoint"] == 4 and fake.connections == 0


async def test_an_event_is_pushed_and_acked(fake, ws_client):
    event = fake.message_event(chat_id=GROUP, open_id=ALICE, chat_type="group",
                               text="/gen product_main sheet.xlsx", mention_bot=True)
    message_id = await fake.push(event)
    frame, body, frames = await ws_client.event()
    assert len(frames) == 1 and body == event  # plaintext: no encryption, no signature
    h = headers(frame)
    assert (frame.method, frame.service) == (FrameType.DATA.value, fake.service_id)
    assert (h["type"], h["message_id"], h["sum"], h["seq"]) == ("event", message_id, "1", "0")
    assert h["trace_id"]
    await ws_client.ack(frame)
    ack = await fake.ack_of(message_id)
    assert ack["payload"] == {"code": 200} and ack["headers"]["biz_rt"] == "3"
    assert ack["headers"]["type"] == "event" and ack["service"] == fake.service_id
    assert fake.pushed[message_id]["body"] == event and fake.ws_errors == []
    assert fake.connections == 1 and len(fake.sockets) == 1


async def test_a_split_event_is_combined(fake, ws_client):
    click = card_action_event(open_id=ALICE, chat_id=GROUP, message_id="om_card",
                              value={"action": "cancel", "batch": 7})
    message_id = await fake.push(click, split=3)
    frame, body, frames = await ws_client.event()
    assert body == click
    assert [headers(f)["seq"] for f in frames] == ["0", "1", "2"]
    assert {headers(f)["sum"] for f in frames} == {"3"}
    assert {headers(f)["message_id"] for f in frames} == {message_id}
    assert len({headers(f)["trace_id"] for f in frames}) == 1
    await ws_client.ack(frame)
    assert (await fake.ack_of(message_id))["headers"]["seq"] == "2"
    # kind card: the header says so
    await fake.push(click, kind="card")
    assert headers((await ws_client.event())[0])["type"] == "card"
    with pytest.raises(ValueError):
        await fake.push({}, split=3)  # "{}" has 2 bytes: a part would be empty


async def test_the_sdks_own_frame_handling_reads_pushes_and_acks_them(fake, ws_client):
    """lark-oapi's ws.Client's message handling (not its loop) on frames the fake pushed: it
    combines, dispatches to the registered handlers and writes the ack the fake records."""
    got, clicks = [], []

    def click(data):
        clicks.append(data)
        return P2CardActionTriggerResponse({"toast": {"type": "info", "content": "cancelled"}})

    handler = lark.EventDispatcherHandler.builder("", "") \
        .register_p2_im_message_receive_v1(got.append) \
        .register_p2_card_action_trigger(click).build()
    client = ws_sdk(fake, handler=handler)
    client._conn = ws_client.conn
    event = fake.message_event(chat_id=GROUP, open_id=ALICE, text="hi " * 200)
    message_id = await fake.push(event, split=4)
    for _ in range(4):
        await client._handle_message(await ws_client.conn.recv())
    assert json.loads(got[0].event.message.content) == {"text": "hi " * 200}
    ack = await fake.ack_of(message_id)
    assert ack["payload"] == {"code": 200} and "biz_rt" in ack["headers"]

    press = card_action_event(open_id=ALICE, chat_id=GROUP, message_id="om_card",
                              value={"action": "cancel"})
    message_id = await fake.push(press)
    await client._handle_message(await ws_client.conn.recv())
    assert clicks[0].event.action.value == {"action": "cancel"}
    ack = await fake.ack_of(message_id)
    assert ack["answer"] == {"toast": {"type": "info", "content": "cancelled"}}

    # a pong applies the ClientConfig it carries
    fake.ping_interval = 9
    await ws_client.ping()
    await client._handle_message(await ws_client.conn.recv())
    assert client._ping_interval == 9
    assert fake.ws_errors == []


async def test_a_ping_is_answered_with_a_pong(fake, ws_client):
    await ws_client.ping()
    pong = await ws_client.frame()
    assert (pong.method, headers(pong)["type"]) == (FrameType.CONTROL.value, "pong")
    assert json.loads(pong.payload) == fake.client_config()
    fake.pong_config = False
    await ws_client.ping()
    assert (await ws_client.frame()).payload == b""
    assert fake.calls["ping"] == 2 and fake.acks == [] and fake.ws_errors == []


async def test_a_dropped_connection_is_reopened_through_the_endpoint(fake, ws_client):
    assert await fake.drop() == 1
    with pytest.raises(websockets.ConnectionClosedError):
        await ws_client.frame()
    assert fake.sockets == []
    with pytest.raises(NotConnected):
        await fake.push(fake.message_event(chat_id=GROUP, open_id=ALICE, text="lost"))
    # the old URL does not open again: the SDK would retry, so a client must ask anew
    with pytest.raises(InvalidHandshake) as refused:
        await websockets.connect(ws_client.url, proxy=None)
    with pytest.raises(WsServerException):
        _parse_ws_conn_exception(refused.value)

    again = await WsClient.open(fake)
    await fake.wait_connected()
    assert (fake.calls["endpoint"], fake.connections) == (2, 2)
    message_id = await fake.push(fake.message_event(chat_id=GROUP, open_id=ALICE, text="b"))
    frame, body, _ = await again.event()
    await again.ack(frame)
    assert (await fake.ack_of(message_id))["payload"] == {"code": 200}

    assert await fake.drop(graceful=True) == 1
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await again.frame()
    assert closed.value.rcvd.code == 1001
    assert fake.sockets == [] and fake.connections == 2


async def test_each_event_goes_to_one_connection(fake):
    first, second = await WsClient.open(fake), await WsClient.open(fake)
    await fake.wait_connected(2)
    event = fake.message_event(chat_id=GROUP, open_id=ALICE, text="once")
    await fake.push(event)
    done, pending = await asyncio.wait(
        [asyncio.ensure_future(c.frame(timeout=1)) for c in (first, second)],
        return_when=asyncio.FIRST_COMPLETED)
    assert len(done) == 1
    await asyncio.gather(*pending, return_exceptions=True)  # the other one times out
    assert [json.loads(t.result().payload) for t in done] == [event]
    await first.conn.close()
    await second.conn.close()
