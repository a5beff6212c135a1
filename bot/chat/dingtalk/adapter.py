"""DingTalk: Stream mode (the official dingtalk-stream SDK) or HTTP callback, over the chat core.

DingTalk's facts shape it (docs/dingtalk.md): files reach a robot only in a 1:1 chat;
in groups it gets text that @mentions it; robot messages have no threads, so every
image is captioned with its batch and row; the sessionWebhook that comes with a message
carries text only and expires, so it answers at once and the robot API does the rest;
images and files go through media/upload first.

Conversations are "user:<staffId>" for 1:1 chats and "group:<openConversationId>" for
groups: what the robot API needs to send there. Receiving in both modes goes through
one parser (`incoming`); the Stream client reuses the SDK's frames, handlers and acks
but opens its connection with aiohttp and reconnects with a doubling backoff, instead
of the SDK's blocking `requests` call on the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import time
import uuid
from collections.abc import Hashable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web
from dingtalk_stream import (
    AckMessage,
    CallbackHandler,
    ChatbotMessage,
    Credential,
    DingTalkStreamClient,
)

from bot.chat.dingtalk.api import DingTalkAPI
from bot.chat.dingtalk.markup import MARKDOWN, TEXT
from bot.chat.platform import (
    DeliveryError,
    FileRef,
    Inbound,
    Incoming,
    Outgoing,
    Platform,
    Receive,
    image_within,
    refuse,
    text_of,
)
from bot.settings import DingTalkConfig, IntakeConfig
from storage.config import Config

log = logging.getLogger("genbot.dingtalk")
SIGN_WINDOW_MS = 3_600_000  # DingTalk's callback timestamps are good for an hour
MEDIA_MAX = 20 * 2**20  # media/upload takes images and files up to 20 MB
MEDIA_KEEP_MS = 24 * 3_600_000  # how long an uploaded media id is reused (DingTalk keeps 3 days)
BACKOFF_MAX = 30.0


class DingTalk(Platform):
    name = "dingtalk"
    has_threads = False
    has_buttons = False
    inline_buttons = True  # an image's actions as links in its markdown (one-to-one chats)
    captions = True  # a markdown message shows the image (by media id) under its caption
    file_captions = False  # a file message has no text: its caption goes just before it
    default_lang = "zh"
    file_hint = "file_hint_dm"

    def __init__(self, config: Config):
        d = self.settings = config[DingTalkConfig]
        self.can_edit = bool(d.card_template_id)  # a card updated in place; else milestones
        self.max_bytes = int(config[IntakeConfig].max_file_mb * 2**20)
        self.api = DingTalkAPI(app_key=d.app_key, app_secret=d.app_secret,
                               robot_code=d.robot_code or d.app_key, api_url=d.api_url,
                               oapi_url=d.oapi_url)
        self.receive: Receive | None = None
        self.stream: Stream | None = None
        self.pairs = Recent()  # (timestamp, sign) -> the message it was taken for
        self.media = Recent()  # (path, size, mtime) -> media_id: a retried send uploads nothing
        self.pictures: dict[str, int] = {}  # user -> pictures named so far (图片1.png, …)
        self.delivered = Recent()  # msgIds handled lately

    # --- wiring -------------------------------------------------------------------------
    def attach(self, app: Any, chat: Inbound) -> None:
        self.receive = chat.receive
        if self.settings.mode == "http":
            app.router.add_post("/dingtalk/callback", self.callback)

    @property
    def inbound(self) -> str:
        return self.settings.mode

    def connected(self) -> bool | None:
        return self.stream.connected.is_set() if self.stream else None

    async def start(self) -> None:
        self.spawn(self.sign_in(self.api.token, self.settings.app_key,
                                "[dingtalk] app_key and app_secret"), name="dingtalk-token")
        if self.settings.mode == "stream":
            self.stream = Stream(self)
            self.spawn(self.stream.run(), name="dingtalk-stream")

    async def close(self) -> None:
        await super().close()
        await self.api.close()

    # --- inbound ------------------------------------------------------------------------
    async def callback(self, request: web.Request) -> web.Response:
        """HTTP callback mode: check the signature, answer at once, work after. DingTalk signs
        the timestamp alone, so a captured pair would carry any body for an hour: each pair
        serves one message (seen again with it: DingTalk re-delivering, answered 200)."""
        timestamp, sign = request.headers.get("timestamp", ""), request.headers.get("sign", "")
        if not self.signed(timestamp, sign):
            return refuse(403, "bad or stale signature")
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return refuse(413, "request body too large")
        try:
            body = json.loads(raw)  # bytes: no charset from a header to trip over
        except (ValueError, RecursionError):
            body = None
        msg_id = body.get("msgId") if isinstance(body, dict) else None
        key = msg_id if isinstance(msg_id, str) and msg_id else \
            f"sha256:{hashlib.sha256(raw).hexdigest()}"
        now_ms = time.time() * 1000
        first = self.pairs.get((timestamp, sign), now_ms)
        if first is None:
            self.pairs.add((timestamp, sign), key, int(timestamp) + SIGN_WINDOW_MS + 1, now_ms)
        elif first != key:
            log.warning("dingtalk: a used signature came back with another message; refused")
            return refuse(403, "signature already used")
        if not isinstance(body, dict):
            return refuse(400, "not a JSON object")
        if first is None:
            self.handle(body)
        return web.json_response({})

    def signed(self, timestamp: str, sign: str, now_ms: float | None = None) -> bool:
        """DingTalk's HMAC of the timestamp. Headers may hold anything: only ASCII digits are a
        timestamp ("²".isdigit() is true) and only ASCII a sign (compare_digest raises else)."""
        if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 16
                and sign.isascii() and sign):
            return False
        now_ms = time.time() * 1000 if now_ms is None else now_ms
        if abs(now_ms - int(timestamp)) > SIGN_WINDOW_MS:
            return False
        secret = self.settings.app_secret.encode()
        expected = base64.b64encode(hmac.new(secret, f"{timestamp}\n{self.settings.app_secret}"
                                             .encode(), hashlib.sha256).digest())
        return hmac.compare_digest(expected, sign.encode())

    def handle(self, body: Any) -> None:
        """A robot message, from either mode: handed to the core once, in the background.
        DingTalk delivers a message again when it missed our answer: a msgId seen within the
        signature window is not handled twice."""
        incoming = self.incoming(body)
        if incoming is None:
            return
        if incoming.message:
            now_ms = time.time() * 1000
            if self.delivered.get(incoming.message, now_ms) is not None:
                return
            self.delivered.add(incoming.message, True, now_ms + SIGN_WINDOW_MS, now_ms)
        assert self.receive is not None, "attach() comes before any message"
        self.spawn(self.receive(incoming))

    def incoming(self, body: Any) -> Incoming | None:
        """The message DingTalk describes, or None for anything else: a body may have any
        shape, and each field any type."""
        if not isinstance(body, dict):
            return None
        user = text_of(body, "senderStaffId") or text_of(body, "senderId")
        kind = body.get("conversationType")  # "1": a 1:1 chat, "2": a group
        if not user or type(kind) not in (str, int) or str(kind) not in ("1", "2"):
            return None
        direct = str(kind) == "1"
        group = text_of(body, "conversationId")
        if not (direct or group):
            return None
        conversation = f"user:{user}" if direct else f"group:{group}"
        msg_id = text_of(body, "msgId")
        content = body.get("content")
        if isinstance(content, str):
            try:
                content = json.loads(content)
            except (ValueError, RecursionError):
                content = None
        if not isinstance(content, dict):
            content = {}
        text, files, code = "", tuple[FileRef, ...](), text_of(content, "downloadCode")
        msgtype = body.get("msgtype")
        if msgtype == "text" and (said := text_of(body.get("text"), "content")) is not None:
            text = said.strip()
        elif msgtype == "file" and code:
            files = (FileRef(text_of(content, "fileName") or "file",
                             int(number(content.get("fileSize"))), {"code": code}),)
        elif msgtype == "picture" and code:  # a name a person can type into a sheet
            self.pictures[user] = self.pictures.get(user, 0) + 1
            files = (FileRef(f"图片{self.pictures[user]}.png", 0, {"code": code}),)
        elif msgtype == "richText" and isinstance(parts := content.get("richText"), list):
            text = " ".join(t for p in parts if (t := text_of(p, "text"))).strip()
        else:
            return None
        expires = number(body.get("sessionWebhookExpiredTime")) / 1000
        return Incoming(
            self.name, user, conversation, text, message=msg_id, files=files,
            workspace=text_of(body, "senderCorpId"),
            platform_role="admin" if body.get("isAdmin") is True and self.settings.platform_admins
            else None,
            context={"session_webhook": text_of(body, "sessionWebhook"),
                     "session_expires": expires})

    async def download(self, handle: dict) -> bytes:
        return await self.api.download(handle["code"], max_bytes=self.max_bytes)

    # --- outbound -----------------------------------------------------------------------
    async def send(self, out: Outgoing) -> str:
        """Text, or an image under its caption as one markdown message (the image shown by
        its media id, as DingTalk's own examples do), through the message's own reply
        link while it lasts (it can @-mention), else the robot API. A file, or an image
        with no caption, goes by the robot API (the reply link carries neither). The text
        is plain (bot.chat.markup), escaped for the format it goes in
        (bot.chat.dingtalk.markup); the mention and the image are genbot's own. A card's
        text is the progress line, all genbot's, and goes as it is."""
        if out.progress and self.can_edit:
            card = uuid.uuid4().hex
            await self.api.card(out.conversation, self.settings.card_template_id, card, out.text,
                                update=False)
            return card
        if out.file is not None and not (out.image and out.text):
            return await self._send_file(out)
        picture = await self._media(out.file, True) if out.file is not None else None
        mention = out.mention if out.conversation.startswith("group:") else None  # 1:1: no @
        lines = out.text.splitlines() or [""]
        title = f"@{mention} {lines[0]}" if mention else lines[0]  # the notice: plain text
        markdown = {"title": title[:40], "text": MARKDOWN.render(out.text, mention) + (
            f"\n\n![{MARKDOWN.escape(out.file.name)}]({picture})" if out.file and picture
            else "") + self._links(out)}
        text = TEXT.render(out.text, mention)
        hook, expires = out.context.get("session_webhook"), out.context.get("session_expires", 0)
        if hook and expires - 60 > time.time():  # the message's own reply channel, while it lasts
            message: dict[str, Any] = {"msgtype": "markdown", "markdown": markdown} \
                if picture or len(lines) > 1 else {"msgtype": "text", "text": {"content": text}}
            if mention:
                message["at"] = {"atUserIds": [mention]}
            try:
                await self.api.reply(hook, message)
                return f"session:{uuid.uuid4().hex[:12]}"
            except (TimeoutError, DeliveryError, aiohttp.ClientError) as e:
                log.info("dingtalk: sessionWebhook refused (%s); using the robot API", e)
        if picture or len(lines) > 1:  # markdown keeps lines apart and titles the notice
            return await self.api.send(out.conversation, "sampleMarkdown", markdown)
        return await self.api.send(out.conversation, "sampleText", {"content": text})

    def _links(self, out: Outgoing) -> str:
        """An image's buttons as links that make the DingTalk client send their command
        (dtmd://dingtalkclient/sendMessage). Only in one-to-one chats: in a group the
        robot hears only messages that @-mention it, which such a link cannot make."""
        if not out.buttons or out.conversation.startswith("group:"):
            return ""
        return "\n\n" + " · ".join(
            f"[{MARKDOWN.escape(b.label)}](dtmd://dingtalkclient/sendMessage?content="
            f"{quote(b.command, safe='')})" for b in out.buttons)

    async def edit(self, message_id: str, out: Outgoing) -> None:
        await self.api.card(out.conversation, self.settings.card_template_id, message_id,
                            out.text, update=True)

    async def _send_file(self, out: Outgoing) -> str:
        """An image alone, or a file. The media id is reused when a send is retried
        (DingTalk keeps uploads for days): throttling does not double the uploads."""
        assert out.file is not None
        name, media = out.file.name, await self._media(out.file, out.image)
        if out.image:
            return await self.api.send(out.conversation, "sampleImageMsg", {"photoURL": media})
        return await self.api.send(out.conversation, "sampleFile", {
            "mediaId": media, "fileName": name, "fileType": Path(name).suffix.lstrip(".")})

    async def _media(self, path: Path, image: bool) -> str:
        stat = await asyncio.to_thread(path.stat)
        key, now_ms = (str(path), stat.st_size, stat.st_mtime_ns, image), time.time() * 1000
        if (known := self.media.get(key, now_ms)) is not None:
            return known
        data = await asyncio.to_thread(path.read_bytes)
        name = path.name
        if image:
            data, name = await asyncio.to_thread(image_within, data, name, MEDIA_MAX)
        elif len(data) > MEDIA_MAX:
            raise DeliveryError(f"{name} is over DingTalk's 20 MB", permanent=True)
        media = await self.api.upload("image" if image else "file", name, data)
        self.media.add(key, media, now_ms + MEDIA_KEEP_MS, now_ms)
        return media


class Recent:
    """Keys seen lately, each forgotten once its time is up (ms since the epoch): memory is
    bounded by what arrives within the signature window, however long the service runs."""

    def __init__(self) -> None:
        self.entries: dict[Hashable, tuple[float, Any]] = {}
        self.mark = 64  # sweep for expired entries when there are this many

    def get(self, key: Hashable, now_ms: float) -> Any:
        until, value = self.entries.get(key, (0.0, None))
        return value if until > now_ms else None

    def add(self, key: Hashable, value: Any, until_ms: float, now_ms: float) -> None:
        self.entries[key] = (until_ms, value)
        if len(self.entries) >= self.mark:  # amortized: the mark doubles with what is kept
            self.entries = {k: e for k, e in self.entries.items() if e[0] > now_ms}
            self.mark = max(64, 2 * len(self.entries))

    def __len__(self) -> int:
        return len(self.entries)


def number(value: Any) -> float:
    """A size or a time in a payload: a non-negative number, else 0 (not known)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if 0 <= value < 2**53 else 0.0


class Handler(CallbackHandler):
    def __init__(self, adapter: DingTalk):
        super().__init__()
        self.adapter = adapter

    async def process(self, callback: Any) -> tuple[int, str]:
        self.adapter.handle(callback.data if isinstance(callback.data, dict) else {})
        return AckMessage.STATUS_OK, "OK"


class Stream(DingTalkStreamClient):
    """The SDK's client, connecting with aiohttp (not `requests` on the loop) and
    reconnecting with a doubling backoff when the connection drops."""

    def __init__(self, adapter: DingTalk):
        super().__init__(Credential(adapter.settings.app_key, adapter.settings.app_secret),
                         logger=logging.getLogger("genbot.dingtalk.stream"))
        self.adapter = adapter
        self.register_callback_handler(ChatbotMessage.TOPIC, Handler(adapter))
        self.connected = asyncio.Event()
        self.connections = 0

    async def open(self) -> dict:
        topics = [{"type": "CALLBACK", "topic": t} for t in self.callback_handler_map]
        async with self.adapter.api.session.post(
                f"{self.adapter.api.api_url}/v1.0/gateway/connections/open",
                json={"clientId": self.credential.client_id,
                      "clientSecret": self.credential.client_secret, "subscriptions": topics,
                      "ua": "genbot", "localIp": ""}) as r:
            if r.status != 200:
                raise ConnectionError(f"gateway/connections/open answered HTTP {r.status}")
            return await r.json(content_type=None)

    async def run(self) -> None:
        from urllib.parse import quote_plus

        import websockets
        self.pre_start()
        delay = 1.0
        while True:
            try:
                connection = await self.open()
                uri = f'{connection["endpoint"]}?ticket={quote_plus(connection["ticket"])}'
                async with websockets.connect(uri) as websocket:
                    self.websocket = websocket
                    self.connections += 1
                    self.connected.set()
                    delay = 1.0
                    log.info("dingtalk: Stream connected")
                    async for raw in websocket:
                        self.adapter.spawn(self.background_task(json.loads(raw)))
                log.warning("dingtalk: Stream closed; reconnecting")
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - any failure of the connection: reconnect
                log.warning("dingtalk: Stream connection failed (%s); again in %.0f s", e, delay)
            self.connected.clear()
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)
