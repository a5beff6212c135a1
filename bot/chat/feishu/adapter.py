"""Feishu / Lark: events by long connection or HTTP callback, through the official SDK
`lark-oapi`, over the chat core.

Feishu's facts shape it (docs/feishu.md):

- Events and card button presses arrive over the long connection genbot opens
  (bot.chat.feishu.connection), or at `/feishu/events`, encrypted with the app's Encrypt
  Key and signed (`X-Lark-Signature`): the SDK's EventDispatcherHandler decrypts, checks
  the signature and the verification token, and answers Feishu's url_verification.
  Feishu wants an answer within 3 s and pushes an event again when it gets none: the work
  is handed to the core in the background, and an `event_id` seen lately is not handled
  twice (a signed request replayed is the same event).
- A person is their `open_id` (the id this app sees), or their `union_id` ([feishu]
  identity; the same in all of a developer's apps); mentions use the open_id the message
  came with. A chat is its `chat_id`; a thread is its root message: replies go there with
  `reply_in_thread`.
- Text goes as a card: one `markdown` element (escaped: bot.chat.feishu.markup), so it can
  carry buttons and, for a batch's progress, be updated in place (PATCH, cards only). An
  image goes as a card too, uploaded first (im/v1/images), under its caption with its
  buttons — one message each. A file (the results sheet) is uploaded (im/v1/files) and
  sent as a file message, which carries no text: its caption goes just before it.
- Each message carries a `uuid` made from its outbox key, so a send the outbox retries
  after a lost answer is not posted twice (Feishu keeps a uuid for an hour).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import lark_oapi as lark
from aiohttp import web
from lark_oapi.api.im.v1 import P2ImMessageReceiveV1
from lark_oapi.event.callback.model.p2_card_action_trigger import (
    P2CardActionTrigger,
    P2CardActionTriggerResponse,
)

from bot.chat.feishu.api import FeishuAPI
from bot.chat.feishu.connection import LongConnection
from bot.chat.feishu.markup import CARD
from bot.chat.platform import (
    Button,
    DeliveryError,
    FileRef,
    Inbound,
    Incoming,
    Outgoing,
    Platform,
    Receive,
    body_of,
    image_within,
    refuse,
)
from bot.settings import FeishuConfig, IntakeConfig
from storage.config import Config

log = logging.getLogger("genbot.feishu")
IMAGE_MAX = 10 * 2**20  # im/v1/images takes up to 10 MB
FILE_MAX = 30 * 2**20  # im/v1/files takes up to 30 MB
BODY_MAX = 1 * 2**20  # an event is a few KB; Feishu's callbacks are small


class Feishu(Platform):
    name = "feishu"
    can_edit = True  # a card updated in place (PATCH)
    has_buttons = True  # card buttons, pressed: a card.action.trigger callback
    inline_buttons = True  # an image's buttons in its own card
    has_threads = True  # reply_in_thread
    captions = True  # an image in a card, under its caption
    file_captions = False  # a file message carries no text: its caption goes first
    default_lang = "zh"
    file_hint = "file_hint_feishu"

    def __init__(self, config: Config):
        f = self.settings = config[FeishuConfig]
        self.max_bytes = int(config[IntakeConfig].max_file_mb * 2**20)
        self.api = FeishuAPI(app_id=f.app_id, app_secret=f.app_secret, domain=f.base)
        logging.getLogger("Lark").setLevel(logging.CRITICAL)
        self.receive: Receive | None = None
        # (the SDK logs each event it refuses with a traceback: a forged request is no fault
        # of the service's; the refusal is logged here, in one line, instead)
        self.events = (lark.EventDispatcherHandler.builder(
            f.encrypt_key, f.verification_token, lark.LogLevel.CRITICAL)
            .register_p2_im_message_receive_v1(self._message)
            .register_p2_card_action_trigger(self._pressed).build())
        self.uploaded: dict[tuple[str, int, int], str] = {}  # a file -> its image key
        self.connection: LongConnection | None = None

    # --- wiring -------------------------------------------------------------------------
    def attach(self, app: Any, chat: Inbound) -> None:
        self.receive = chat.receive
        if self.settings.mode == "callback":
            app.router.add_post("/feishu/events", self.callback)

    @property
    def inbound(self) -> str:
        return self.settings.mode

    def connected(self) -> bool | None:
        return self.connection.connected.is_set() if self.connection else None

    async def start(self) -> None:
        self.spawn(self.sign_in(self.api.token, self.settings.app_id,
                                "[feishu] app_id, app_secret and domain"), name="feishu-token")
        if self.settings.mode == "long_connection":
            self.connection = LongConnection(self.settings, self.events, self.spawn)
            self.spawn(self.connection.run(), name="feishu-connection")

    # --- inbound ------------------------------------------------------------------------
    async def callback(self, request: web.Request) -> web.Response:
        """Decrypted, verified and dispatched by the SDK (the handlers only hand work to
        the core); answered at once. What the SDK refuses — a body another key encrypted,
        a signature or token that does not match — is a 403, not its 500; what is not a
        JSON object, a 400."""
        raw = await body_of(request, BODY_MAX)
        if isinstance(raw, web.Response):
            return raw
        try:
            shaped = isinstance(json.loads(raw), dict)
        except (ValueError, RecursionError):
            shaped = False
        if not shaped:
            return refuse(400, "not a JSON object")
        req = lark.RawRequest()
        req.uri, req.body = request.path, raw
        # The SDK reads the signature's headers by their exact names, and adds them as
        # strings: spelled as it spells them (a proxy may lowercase them), "" when absent
        # (a signature that cannot match, refused as such)
        req.headers = {**request.headers, **{name: request.headers.get(name, "") for name in (
            "X-Lark-Request-Timestamp", "X-Lark-Request-Nonce", "X-Lark-Signature")}}
        try:
            resp = self.events.do(req)
        except Exception:  # noqa: BLE001 - the SDK answers what it refuses; this is a bug of its
            log.exception("feishu: event handler failed")
            return refuse(500, "event not handled")
        if resp.status_code != 200:
            said = (resp.content or b"").decode("utf-8", "replace")[:200]
            if "processor not found" in said:  # an event genbot does not read: taken, so
                return web.json_response({})  # Feishu does not push it again and again
            log.warning("feishu: event refused (not encrypted, signed or tokened by this "
                        "app's keys): %s", said)
            return refuse(403, "event refused")
        return web.Response(body=resp.content or b"{}", content_type="application/json")

    def _message(self, data: P2ImMessageReceiveV1) -> None:
        event_id = data.header.event_id if data.header else None
        incoming = self.incoming(data)
        if incoming is None or (event_id and not self.once(f"event:{event_id}")):
            return
        if incoming.message and not self.once(f"message:{incoming.message}"):
            return  # (one message, delivered under two event ids)
        assert self.receive is not None, "attach() comes before any event"
        self.spawn(self.receive(incoming))

    def incoming(self, data: P2ImMessageReceiveV1) -> Incoming | None:
        """The message Feishu describes, or None for what genbot does not read (a sticker,
        another bot, a message with no sender)."""
        event = data.event
        message, sender = (event.message, event.sender) if event else (None, None)
        if message is None or sender is None or sender.sender_type != "user":
            return None
        user, open_id = self.person(sender.sender_id)
        if not user or not message.chat_id or not message.message_id:
            return None
        try:
            content = json.loads(message.content or "{}")
        except ValueError:
            content = {}
        if not isinstance(content, dict):
            content = {}
        text, files = "", tuple[FileRef, ...]()
        kind = message.message_type
        if kind == "text" and isinstance(content.get("text"), str):
            text = content["text"]
            for m in message.mentions or []:  # "@_user_1": the bot's name or a person's
                if m.key:
                    text = text.replace(m.key, "")
            text = text.strip()
        elif kind == "post":
            text = post_text(content)
        elif kind == "file" and isinstance(content.get("file_key"), str):
            name = str(content.get("file_name") or "file")
            files = (FileRef(name, 0, {"message": message.message_id, "name": name,
                                       "key": content["file_key"], "type": "file"}),)
        elif kind == "image" and isinstance(content.get("image_key"), str):
            name = f"{content['image_key'][-8:]}.png"
            files = (FileRef(name, 0, {"message": message.message_id, "name": name,
                                       "key": content["image_key"], "type": "image"}),)
        else:
            return None
        return Incoming(
            self.name, user, message.chat_id, text, message=message.message_id,
            thread=message.root_id or message.message_id, files=files,
            workspace=sender.tenant_key or None,
            context={"chat_type": message.chat_type or "", "open_ids": {user: open_id}})

    def person(self, ids: Any) -> tuple[str | None, str | None]:
        """Who an event's sender or operator is to genbot ([feishu] identity), and their
        open_id (what a mention names)."""
        open_id = getattr(ids, "open_id", None) or None
        if self.settings.identity == "union_id":
            return getattr(ids, "union_id", None) or None, open_id
        return open_id, open_id

    def _pressed(self, data: P2CardActionTrigger) -> P2CardActionTriggerResponse:
        """A card button: its command, typed by whoever pressed it, in the card's thread."""
        event = data.event
        value = event.action.value if event and event.action else None
        user, open_id = self.person(event.operator if event else None)
        chat = event.context.open_chat_id if event and event.context else None
        card = event.context.open_message_id if event and event.context else None
        command = value.get("command") if isinstance(value, dict) else None
        event_id = data.header.event_id if data.header else None
        if isinstance(command, str) and user and chat and \
                (not event_id or self.once(f"event:{event_id}")):
            assert self.receive is not None, "attach() comes before any event"
            thread = value.get("thread") if isinstance(value, dict) else None
            self.spawn(self.receive(Incoming(
                self.name, user, chat, command, message=f"press:{event_id or card}",
                thread=thread if isinstance(thread, str) else card,
                context={"open_ids": {user: open_id}})))
        return P2CardActionTriggerResponse({})

    async def download(self, handle: dict) -> bytes:
        return await self.api.download(handle["message"], handle["key"], handle["type"],
                                       self.max_bytes, handle.get("name", ""))

    # --- outbound -----------------------------------------------------------------------
    async def send(self, out: Outgoing) -> str:
        """A card (text, an image under its caption, buttons), or a file message."""
        if out.file is not None and not out.image:
            return await self._post(out, "file", {"file_key": await self._file(out.file)})
        image = await self._image(out.file) if out.file is not None else None
        return await self._post(out, "interactive", card(out, image))

    async def edit(self, message_id: str, out: Outgoing) -> None:
        await self.api.patch(message_id, card(out, None))

    async def _post(self, out: Outgoing, msg_type: str, content: dict[str, Any]) -> str:
        """In the thread where there is one, else in the chat. Every try of one outbox
        message carries one uuid (its key's; a caption sent before its file has its own):
        Feishu posts a uuid once an hour, so a send retried after a lost answer is not
        posted twice — and two messages that say the same (/help asked twice) both are."""
        said = [out.key, msg_type] if out.key else \
            [out.conversation, out.thread, msg_type, content]  # (no outbox: what it says)
        uuid = hashlib.sha256(json.dumps(said, ensure_ascii=False, sort_keys=True).encode()
                              ).hexdigest()[:50]
        if out.thread:
            return await self.api.reply(out.thread, msg_type, content, uuid)
        return await self.api.send(out.conversation, msg_type, content, uuid)

    async def _image(self, path: Path) -> str:
        stat = await asyncio.to_thread(path.stat)
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key not in self.uploaded:  # a retried send uploads nothing again
            data = await asyncio.to_thread(path.read_bytes)
            if len(data) > IMAGE_MAX:
                data, _ = await asyncio.to_thread(image_within, data, path.name, IMAGE_MAX)
            self.uploaded[key] = await self.api.upload_image(data)
            if len(self.uploaded) > 1000:
                self.uploaded.pop(next(iter(self.uploaded)))
        return self.uploaded[key]

    async def _file(self, path: Path) -> str:
        data = await asyncio.to_thread(path.read_bytes)
        if len(data) > FILE_MAX:
            raise DeliveryError(f"{path.name} is over Feishu's 30 MB", permanent=True)
        return await self.api.upload_file(path.name, data)


def card(out: Outgoing, image: str | None) -> dict[str, Any]:
    """A JSON 2.0 card: the text as markdown (escaped), the image, the buttons in a row.
    update_multi: every reader sees the update (JSON 2.0's default, said anyway)."""
    elements: list[dict[str, Any]] = []
    if out.text or out.mention:  # (a person known by union_id is mentioned by open_id)
        mention = (out.context.get("open_ids") or {}).get(out.mention) or out.mention \
            if out.mention else None
        elements.append({"tag": "markdown", "content": CARD.render(out.text, mention)})
    if image is not None:
        elements.append({"tag": "img", "img_key": image,
                         "alt": {"tag": "plain_text", "content": out.file.name
                                 if out.file else ""}})
    if out.buttons:
        elements.append({"tag": "column_set", "columns": [
            {"tag": "column", "width": "auto", "elements": [button(b)]}
            for b in out.buttons]})
    return {"schema": "2.0", "config": {"update_multi": True},
            "body": {"elements": elements or [{"tag": "markdown", "content": " "}]}}


def button(b: Button) -> dict[str, Any]:
    made: dict[str, Any] = {
        "tag": "button", "text": {"tag": "plain_text", "content": b.label},
        "type": "default", "behaviors": [{"type": "callback", "value": {"command": b.command}}]}
    if b.confirm:
        made["confirm"] = {"title": {"tag": "plain_text", "content": b.label},
                           "text": {"tag": "plain_text", "content": b.confirm}}
    return made


def post_text(content: dict[str, Any]) -> str:
    """A rich-text ("post") message's words: its title and every text run, in order."""
    body = content
    if "content" not in body:  # {"zh_cn": {"title", "content"}}: the first language's
        body = next((v for v in content.values() if isinstance(v, dict)), {})
    words = [str(body.get("title") or "")]
    for line in body.get("content") or []:
        if isinstance(line, list):
            words += [str(run.get("text") or "") for run in line
                      if isinstance(run, dict) and run.get("tag") in ("text", "a")]
    return " ".join(w for w in words if w).strip()

