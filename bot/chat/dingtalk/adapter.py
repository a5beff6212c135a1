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
import io
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

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
from bot.chat.platform import DeliveryError, FileRef, Incoming, Outgoing, Platform, Receive
from storage.config import Config

log = logging.getLogger("genbot.dingtalk")
SIGN_WINDOW_MS = 3_600_000  # DingTalk's callback timestamps are good for an hour
MEDIA_MAX = 20 * 2**20  # media/upload takes images and files up to 20 MB
BACKOFF_MAX = 30.0


class DingTalk(Platform):
    name = "dingtalk"
    has_threads = False
    has_buttons = False
    captions = False
    default_lang = "zh"
    file_hint = "file_hint_dm"

    def __init__(self, config: Config):
        d = self.settings = config.dingtalk
        self.can_edit = bool(d.card_template_id)  # a card updated in place; else milestones
        self.max_bytes = int(config.intake.max_file_mb * 2**20)
        self.api = DingTalkAPI(app_key=d.app_key, app_secret=d.app_secret,
                               robot_code=d.robot_code or d.app_key, api_url=d.api_url,
                               oapi_url=d.oapi_url)
        self.receive: Receive | None = None
        self.stream: Stream | None = None

    # --- wiring -------------------------------------------------------------------------
    def attach(self, app: Any, receive: Receive) -> None:
        self.receive = receive
        if self.settings.mode == "http":
            app.router.add_post("/dingtalk/callback", self.callback)

    async def start(self) -> None:
        if self.settings.mode == "stream":
            self.stream = Stream(self)
            self.spawn(self.stream.run(), name="dingtalk-stream")

    async def close(self) -> None:
        await super().close()
        await self.api.close()

    # --- inbound ------------------------------------------------------------------------
    async def callback(self, request: web.Request) -> web.Response:
        """HTTP callback mode: check the signature, answer at once, work after."""
        if not self.signed(request.headers.get("timestamp", ""), request.headers.get("sign", "")):
            return web.json_response({"error": "bad or stale signature"}, status=403)
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "not JSON"}, status=400)
        self.handle(body)
        return web.json_response({})

    def signed(self, timestamp: str, sign: str, now_ms: float | None = None) -> bool:
        if not timestamp.isdigit() or not sign:
            return False
        now_ms = time.time() * 1000 if now_ms is None else now_ms
        if abs(now_ms - int(timestamp)) > SIGN_WINDOW_MS:
            return False
        secret = self.settings.app_secret.encode()
        expected = base64.b64encode(hmac.new(secret, f"{timestamp}\n{self.settings.app_secret}"
                                             .encode(), hashlib.sha256).digest()).decode()
        return hmac.compare_digest(expected, sign)

    def handle(self, body: dict) -> None:
        """A robot message, from either mode: handed to the core once, in the background."""
        incoming = self.incoming(body)
        if incoming is None or not self.once(incoming.message or uuid.uuid4().hex):
            return
        assert self.receive is not None, "attach() comes before any message"
        self.spawn(self.receive(incoming))

    def incoming(self, body: dict) -> Incoming | None:
        user = body.get("senderStaffId") or body.get("senderId")
        if not user:
            return None
        direct = str(body.get("conversationType")) == "1"
        conversation = f"user:{user}" if direct else f"group:{body.get('conversationId')}"
        kind = body.get("msgtype")
        content = body.get("content") or {}
        if isinstance(content, str):
            try:
                content = json.loads(content)
            except ValueError:
                content = {}
        text, files = "", tuple[FileRef, ...]()
        if kind == "text":
            text = (body.get("text") or {}).get("content", "").strip()
        elif kind == "file" and content.get("downloadCode"):
            files = (FileRef(content.get("fileName") or "file", int(content.get("fileSize") or 0),
                             {"code": content["downloadCode"]}),)
        elif kind == "picture" and content.get("downloadCode"):
            files = (FileRef(f"picture-{body.get('msgId', 'x')}.png", 0,
                             {"code": content["downloadCode"]}),)
        elif kind == "richText":
            parts = content.get("richText") or []
            text = " ".join(p["text"] for p in parts if p.get("text")).strip()
        else:
            return None
        expires = float(body.get("sessionWebhookExpiredTime") or 0) / 1000
        return Incoming(
            self.name, user, conversation, text, message=body.get("msgId"), files=files,
            workspace=body.get("senderCorpId"),
            platform_admin=bool(body.get("isAdmin")) and self.settings.platform_admins,
            context={"session_webhook": body.get("sessionWebhook"), "session_expires": expires})

    async def download(self, handle: dict) -> bytes:
        return await self.api.download(handle["code"], max_bytes=self.max_bytes)

    # --- outbound -----------------------------------------------------------------------
    async def send(self, out: Outgoing) -> str:
        if out.file is not None:
            return await self._send_file(out)
        if out.progress and self.can_edit:
            card = uuid.uuid4().hex
            await self.api.card(out.conversation, self.settings.card_template_id, card, out.text,
                                update=False)
            return card
        text = f"@{out.mention} {out.text}" if out.mention else out.text
        hook, expires = out.context.get("session_webhook"), out.context.get("session_expires", 0)
        if hook and expires - 60 > time.time():  # the message's own reply channel, while it lasts
            message: dict[str, Any] = {"msgtype": "text", "text": {"content": text}}
            if out.mention:
                message["at"] = {"atUserIds": [out.mention]}
            try:
                await self.api.reply(hook, message)
                return f"session:{uuid.uuid4().hex[:12]}"
            except (TimeoutError, DeliveryError, aiohttp.ClientError) as e:
                log.info("dingtalk: sessionWebhook refused (%s); using the robot API", e)
        if "\n" in text:  # several lines: markdown keeps them apart and titles the notice
            title = text.splitlines()[0][:40]
            return await self.api.send(out.conversation, "sampleMarkdown", {
                "title": title, "text": "  \n".join(text.splitlines())})
        return await self.api.send(out.conversation, "sampleText", {"content": text})

    async def edit(self, message_id: str, out: Outgoing) -> None:
        await self.api.card(out.conversation, self.settings.card_template_id, message_id,
                            out.text, update=True)

    async def _send_file(self, out: Outgoing) -> str:
        assert out.file is not None
        data = await asyncio.to_thread(out.file.read_bytes)
        name = out.file.name
        if out.image:
            data, name = await asyncio.to_thread(fit_image, data, name)
            media = await self.api.upload("image", name, data)
            return await self.api.send(out.conversation, "sampleImageMsg", {"photoURL": media})
        if len(data) > MEDIA_MAX:
            raise DeliveryError(f"{name} is over DingTalk's 20 MB", permanent=True)
        media = await self.api.upload("file", name, data)
        return await self.api.send(out.conversation, "sampleFile", {
            "mediaId": media, "fileName": name, "fileType": Path(name).suffix.lstrip(".")})


def fit_image(data: bytes, name: str) -> tuple[bytes, str]:
    """An image DingTalk takes (<= 20 MB): as it is, else re-encoded as JPEG, smaller if need be."""
    if len(data) <= MEDIA_MAX:
        return data, name
    from PIL import Image
    image = Image.open(io.BytesIO(data)).convert("RGB")
    while True:
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=90)
        if buf.tell() <= MEDIA_MAX:
            return buf.getvalue(), f"{Path(name).stem}.jpg"
        image = image.resize((int(image.width * 0.8), int(image.height * 0.8)))


class Handler(CallbackHandler):
    def __init__(self, adapter: DingTalk):
        super().__init__()
        self.adapter = adapter

    async def process(self, callback):
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
            except Exception as e:
                log.warning("dingtalk: Stream connection failed (%s); again in %.0f s", e, delay)
            self.connected.clear()
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)
