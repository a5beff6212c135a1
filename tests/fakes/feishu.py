"""Feishu's (Lark's) OpenAPI on loopback, as the official SDK `lark-oapi` talks to it, with
fault switches; and helpers that build what Feishu POSTs to an app's callback URL
(im.message.receive_v1, card.action.trigger, url_verification), encrypted and signed; and
Feishu's long connection (the WebSocket event gateway lark-oapi's `ws.Client` speaks: the
endpoint, protobuf frames, ping/pong, acks, dropped and refused connections).

Facts come from /work/shared/docs/chat-platforms.md ("Feishu / Lark"; authoritative here),
from lark-oapi 1.7.5's source, and from Feishu's API pages where a comment names them.
Values marked *(unconfirmed)* could not be checked against Feishu's own documentation.

The server runs on its own thread and event loop, not the test's: lark-oapi's async calls
(`acreate`, `areply` …) fetch a missing tenant token with a *blocking* `requests` call
(core/token/manager.py, via core/token/auth.verify), which would deadlock a server sharing
the caller's loop.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import io
import json
import mimetypes
import random
import secrets
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import BodyPartReader, WSCloseCode, WSMsgType, web
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from lark_oapi.ws.const import (
    AUTH_FAILED,
    EXCEED_CONN_LIMIT,
    GEN_ENDPOINT_URI,
    HEADER_HANDSHAKE_AUTH_ERRCODE,
    HEADER_HANDSHAKE_MSG,
    HEADER_HANDSHAKE_STATUS,
    HEADER_MESSAGE_ID,
    HEADER_SEQ,
    HEADER_SUM,
    HEADER_TRACE_ID,
    HEADER_TYPE,
    SYSTEM_BUSY,
)
from lark_oapi.ws.enum import FrameType, MessageType
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from tests.fakes.chat import ServiceWorld
from tests.fakes.dingtalk import ASSETS, SHEET

APP_ID = "cli_genbot_test"
APP_SECRET = "feishu-test-secret"
ENCRYPT_KEY = "feishu-test-encrypt-key"
VERIFICATION_TOKEN = "feishu-test-verification-token"
BOT_OPEN_ID = "ou_genbot_bot"
BOT_UNION_ID = "on_genbot_bot"
BOT_NAME = "genbot"
TENANT_KEY = "genbot_tenant"

KB, MB = 1024, 1024 * 1024
TEXT_MAX = 150 * KB  # the shared doc: "Text body ≤ 150 KB; card and post body ≤ 30 KB"
CARD_MAX = 30 * KB
IMAGE_MAX = 10 * MB  # the shared doc: image "≤ 10 MB and not empty"
FILE_MAX = 30 * MB  # the shared doc: file "≤ 30 MB and not empty"
PATCH_DAYS = 14  # the shared doc and im-v1/message/patch: "≤ 14 days old"
UUID_TTL = 3600.0  # the shared doc: "requests with the same uuid send at most one message per hour"
MSG_TYPES = {"text", "post", "image", "file", "interactive"}  # this fake's (Feishu has more)
FILE_TYPES = {"opus", "mp4", "pdf", "doc", "xls", "ppt", "stream"}  # the shared doc, im/v1/files
# im/v1/files: an opus upload is sent as msg_type audio, an mp4 as media (230055 otherwise)
FILE_MSG_TYPE = {"opus": "audio", "mp4": "media"}


class Refusal(Exception):
    """Feishu's `{"code", "msg"}` answer to a request it refuses, with its HTTP status."""

    def __init__(self, code: int, msg: str, status: int = 400,
                 headers: dict[str, str] | None = None):
        super().__init__(f"{code}: {msg}")
        self.code, self.msg, self.status, self.headers = code, msg, status, headers

    def __call__(self) -> Refusal:
        """A fresh one to raise (a module-level refusal is a template)."""
        return Refusal(self.code, self.msg, self.status, self.headers)

    def response(self) -> web.Response:
        return web.json_response({"code": self.code, "msg": self.msg, "data": {}},
                                 status=self.status, headers=self.headers)


# --- Feishu's refusals, and where each came from --------------------------------------------
def invalid(ext: str) -> Refusal:
    """230001, HTTP 400: "Your request contains an invalid request parameter, ext=…" (the
    im-v1 message pages' error tables and Feishu's "how to resolve error 230001" page)."""
    return Refusal(230001, f"Your request contains an invalid request parameter, ext={ext}")


def field_validation(field: str, why: str) -> Refusal:
    """99992402 "field validation failed", HTTP 400: Feishu's gateway check of a request's
    declared fields (seen for a missing receive_id_type; its use for other fields and for a
    uuid over 50 characters is *(unconfirmed)*)."""
    return Refusal(99992402, f"field validation failed: {field} {why}")


def card_refusal(sub: int, what: str, value: str = "") -> Refusal:
    """230099 "Failed to create card content" with the sub-code in `ext` (the reply page's
    230099 sub-code table: 200621 parse card json err, 200570 invalid image keys, 200861
    schema V2 no longer supports this). Which sub-code Feishu gives for an unknown property or
    tag is *(unconfirmed)*: this fake says 200621 with the detail in ErrorValue."""
    tail = f"; ErrorValue: {value}" if value else ""
    return Refusal(230099, f"Failed to create card content, ext=ErrCode: {sub}; ErrMsg: {what}"
                           f"{tail}")


TOO_LONG = Refusal(230025, "The length of the message content reaches its limit.")  # im-v1 pages
NOT_IN_CHAT = Refusal(230002, "The bot can not be outside the group.")  # im-v1 message pages
TOO_OLD = Refusal(230031, "Message can only be modified within 14 days after sending.")  # patch
TOO_FAST = Refusal(230020, "This operation triggers the frequency limit.")  # patch: 5 QPS/message
NOT_OWNER = Refusal(230017, "Bot is NOT the owner of the resource.")  # reply page's table
KIND_MISMATCH = Refusal(230055, "The type of file upload does not match the type of message "
                                "being sent.")  # reply page's table
# im/v1/images and im/v1/files (Feishu's upload-image page's table: 234001, 234006, 234010);
# 234011 for bytes that are no image is *(unconfirmed)*.
UPLOAD_PARAM = Refusal(234001, "Invalid request param.")
UPLOAD_TOO_BIG = Refusal(234006, "The file size exceed the max value.")
UPLOAD_EMPTY = Refusal(234010, "File's size can't be 0.")
NOT_AN_IMAGE = Refusal(234011, "Can't regonnize the image format.")
# message resources: the code for a file_key that is not in that message *(unconfirmed)*
NOT_IN_MESSAGE = Refusal(234003, "File not in msg.")
# Tokens. 99991661 / 99991663 and their texts are Feishu's generic error codes (99991663's
# text as Feishu answers it, e.g. satorijs/satori#310); the HTTP status 400 is *(unconfirmed)*.
NO_TOKEN = Refusal(99991661, "Missing access token for authorization. Please make a request "
                             "with token attached.")
BAD_TOKEN = Refusal(99991663, "Invalid access token for authorization. Please make a request "
                              "with token attached.")
# The token endpoint: 10003 "invalid param" (an unknown app_id) and 10014 "app secret invalid"
# as third-party code records Feishu answering; their HTTP status 400 is *(unconfirmed)*.
BAD_APP = Refusal(10003, "invalid param")
BAD_SECRET = Refusal(10014, "app secret invalid")
# Faults. The shared doc: HTTP 429 {"code": 99991400, "msg": "request trigger frequency limit"}
# with x-ogw-ratelimit-limit / x-ogw-ratelimit-reset (seconds). The 500's body: code 1500
# "internal error" from Feishu's generic error-code page.
THROTTLED = Refusal(99991400, "request trigger frequency limit", status=429,
                    headers={"x-ogw-ratelimit-limit": "50", "x-ogw-ratelimit-reset": "1"})
SERVER_ERROR = Refusal(1500, "internal error", status=500)
# The long connection's endpoint (POST /callback/ws/endpoint, lark-oapi ws/const.py and
# ws/client.py `_get_conn_url`). The SDK reads a non-200 status or code SYSTEM_BUSY (1) or
# INTERNAL_ERROR as a server error (ServerException: it retries) and any other code as the
# client's (ClientException: it gives up). 1000040345 for an unknown app or the wrong secret is
# what third-party code records Feishu answering for forged credentials; its text and its HTTP
# status 200 are *(unconfirmed)* (with any other status the SDK would retry, not give up).
WS_BAD_CREDENTIALS = Refusal(1000040345, "app_id or app_secret is invalid", status=200)
WS_MAX_CONNECTIONS = 50  # the shared doc: "At most 50 connections per app"
WS_PATH = "/ws/v2"  # the path of the URL Feishu hands out (wss://msg-frontier…/ws/v2?…)


class NotConnected(RuntimeError):
    """`FakeFeishu.push` with no long connection open: Feishu would have no one to send to."""


# --- cards ------------------------------------------------------------------------------------
# JSON 2.0 (Feishu's card JSON 2.0 structure page): these top-level properties and no others
# (2.0 "rejects unknown properties", the shared doc); body and config properties as documented.
V2_TOP = {"schema", "config", "card_link", "header", "body"}
V2_BODY = {"elements", "direction", "padding", "horizontal_spacing", "horizontal_align",
           "vertical_spacing", "vertical_align"}
V2_CONFIG = {"streaming_mode", "streaming_config", "summary", "locales", "enable_forward",
             "update_multi", "width_mode", "use_custom_translation",
             "enable_forward_interaction", "style"}
V1_TOP = {"config", "header", "elements", "card_link", "i18n_elements", "i18n_header"}
HEADER = {"title", "subtitle", "text_tag_list", "i18n_text_tag_list", "template", "icon",
          "ud_icon", "padding"}
# The element tags this fake supports (Feishu documents more: a card with one of those is
# refused here as if Feishu had refused it, so keep genbot's cards to these).
V2_TAGS = {"markdown", "img", "button", "column_set", "hr", "div"}
V1_TAGS = {"markdown", "img", "column_set", "hr", "div", "action", "note"}
V1_ONLY = {"action", "note"}  # 1.0 containers that 2.0 dropped (sub-code 200861)
TEXT_TAGS = {"plain_text", "lark_md"}
BUTTON_TYPES = {"default", "primary", "danger", "text", "primary_text", "danger_text",
                "primary_filled", "danger_filled", "laser"}


def _text_object(value: Any, where: str) -> None:
    if not (isinstance(value, dict) and value.get("tag") in TEXT_TAGS
            and isinstance(value.get("content"), str)):
        raise card_refusal(200621, "parse card json err", f"{where} must be "
                                                          "{tag: plain_text|lark_md, content}")


def leaves(elements: list) -> list[dict]:
    """A card's elements with the containers (column_set, column, action, note) opened."""
    out: list[dict] = []
    for element in elements or []:
        if not isinstance(element, dict):
            continue
        tag = element.get("tag")
        if tag == "column_set":
            for column in element.get("columns") or []:
                out += leaves((column or {}).get("elements") or [])
        elif tag == "action":
            out += leaves(element.get("actions") or [])
        elif tag == "note":
            out += leaves(element.get("elements") or [])
        else:
            out.append(element)
    return out


def card_elements(card: dict) -> list:
    """The element list of a card, JSON 2.0 (body.elements) or 1.0 (elements)."""
    if card.get("schema") == "2.0":
        return (card.get("body") or {}).get("elements") or []
    return card.get("elements") or []


@dataclass
class Resource:
    """A file or picture a person sent in a message: what the resources route serves."""
    name: str
    data: bytes
    kind: str  # "file" | "image": the `type` the resources route wants


class FakeFeishu:
    """Feishu's OpenAPI for one app (APP_ID / APP_SECRET) on http://127.0.0.1:<port>
    (`base`, the SDK's `domain`), served from its own thread (see the module's docstring).
    Its records are plain lists and dicts the test reads while it runs."""

    def __init__(self) -> None:
        # every message in every chat, in order: the bot's and the people's (fields: `_record`)
        self.messages: list[dict] = []
        self.chats: set[str] = set()  # chats the bot is in (a person writing there adds one)
        self.p2p: dict[str, str] = {}  # open_id -> the bot's 1:1 chat with them
        self.images: dict[str, bytes] = {}  # image_key -> bytes the bot uploaded
        self.files: dict[str, tuple[str, str, bytes]] = {}  # file_key -> (type, name, bytes)
        self.resources: dict[tuple[str, str], Resource] = {}  # (message_id, key) -> a person's
        self.tokens: set[str] = set()
        self.faults: list[str] = []  # "429" | "500" | "ok": the next create/reply/patch/upload
        self.calls: Counter = Counter()  # token, create, reply, patch, image, file, resource
        self.patch_qps: int | None = 5  # Feishu's per-message PATCH limit; None: unchecked
        self.clock = time.monotonic  # what the PATCH limit counts seconds with (tests freeze it)
        self._uuids: dict[str, tuple[float, dict]] = {}  # uuid -> (when, the message it sent)
        self._patches: dict[str, list[float]] = {}  # message_id -> recent PATCH times
        self._threads: dict[str, str] = {}  # root message_id -> thread_id
        self.base = ""
        # the long connection (calls["endpoint"], calls["ping"] count those requests)
        self.sockets: list[web.WebSocketResponse] = []  # the long connections open now
        self.connections = 0  # long connections ever opened
        self.pushed: dict[str, dict] = {}  # message_id -> {kind, body, frames}, as pushed
        self.acks: list[dict] = []  # the DATA frames clients sent back (`_client_frame`)
        self.ws_errors: list[str] = []  # frames from clients this fake could not read
        self.refuse_connections = False  # the endpoint answers "system busy" while true
        self.refusal_status = 500  # …with this HTTP status (200: the code alone says busy)
        # the ClientConfig the endpoint and each pong hand out (the SDK's defaults are
        # 120 s; small ones suit tests)
        self.reconnect_count, self.reconnect_interval = -1, 1
        self.reconnect_nonce, self.ping_interval = 0, 5
        self.pong_config = True  # a pong carries the ClientConfig (else an empty payload)
        self.service_id = 10_000_000 + secrets.randbelow(90_000_000)  # Frame.service: int32
        self._tickets: set[str] = set()  # connection URLs handed out and not yet used
        self._peers: dict[int, web.Request] = {}  # id(socket) -> its upgrade request
        self._seq_ids = 0

    # --- the server, on its own thread ------------------------------------------------------
    async def start(self) -> FakeFeishu:
        forget_sdk_token()  # a token another fake issued means nothing to this one
        ready: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True,
                                        name="fake-feishu")
        self._thread.start()
        self.base = f"http://127.0.0.1:{await asyncio.wrap_future(ready)}"
        return self

    async def stop(self) -> None:
        if self.sockets:  # open long connections would hold the server's shutdown
            await self._on_loop(self._drop(graceful=False))
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join, 10)

    def _serve(self, ready: concurrent.futures.Future[int]) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        app = web.Application(client_max_size=64 * MB, middlewares=[_refusals])
        r = app.router
        r.add_post("/open-apis/auth/v3/tenant_access_token/internal", self.tenant_token)
        r.add_post("/open-apis/im/v1/messages", self.create)
        r.add_post("/open-apis/im/v1/messages/{message_id}/reply", self.reply)
        r.add_patch("/open-apis/im/v1/messages/{message_id}", self.patch)
        r.add_post("/open-apis/im/v1/images", self.upload_image)
        r.add_post("/open-apis/im/v1/files", self.upload_file)
        r.add_get("/open-apis/im/v1/messages/{message_id}/resources/{file_key}", self.resource)
        r.add_post(GEN_ENDPOINT_URI, self.ws_endpoint)
        r.add_get(WS_PATH, self.ws_accept)
        runner = web.AppRunner(app, access_log=None)
        try:
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
        except BaseException as e:
            ready.set_exception(e)
            loop.close()
            return
        ready.set_result(runner.addresses[0][1])
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            loop.close()

    # --- tokens -----------------------------------------------------------------------------
    async def tenant_token(self, request: web.Request) -> web.Response:
        self.calls["token"] += 1
        body = await _json(request)
        if body.get("app_id") != APP_ID:
            raise BAD_APP()
        if body.get("app_secret") != APP_SECRET:
            raise BAD_SECRET()
        token = f"t-{secrets.token_hex(20)}"
        self.tokens.add(token)
        return web.json_response({"code": 0, "msg": "ok", "tenant_access_token": token,
                                  "expire": 7200})

    def expire_tokens(self) -> None:
        """Every token issued so far stops working (99991663): a client must fetch a new one."""
        self.tokens.clear()

    def _authorize(self, request: web.Request) -> None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme != "Bearer" or not token:
            raise NO_TOKEN()
        if token not in self.tokens:
            raise BAD_TOKEN()

    def _fault(self) -> None:
        if self.faults:
            fault = self.faults.pop(0)
            if fault == "429":
                raise THROTTLED()
            if fault == "500":
                raise SERVER_ERROR()

    # --- messages ---------------------------------------------------------------------------
    async def create(self, request: web.Request) -> web.Response:
        self.calls["create"] += 1
        self._authorize(request)
        self._fault()
        id_type = request.query.get("receive_id_type")
        if id_type not in {"open_id", "union_id", "user_id", "email", "chat_id"}:
            raise field_validation("receive_id_type", "is required (open_id|union_id|user_id|"
                                                      "email|chat_id)")
        body = await _json(request)
        receive_id = body.get("receive_id")
        if not isinstance(receive_id, str) or not receive_id:
            raise field_validation("receive_id", "is required")
        msg_type, content, uuid = self._message_fields(body)
        if (first := self._again(uuid)) is not None:
            return _ok(self._data(first))
        if id_type == "chat_id":
            if receive_id not in self.chats:
                raise NOT_IN_CHAT()
            chat_id = receive_id
        else:  # a 1:1 chat with that person (made if the bot never had one)
            chat_id = self.p2p.setdefault(receive_id, f"oc_p2p_{_hex(12)}")
            self.chats.add(chat_id)
        m = self._record(chat_id=chat_id, msg_type=msg_type, content=content, uuid=uuid)
        return _ok(self._data(m))

    async def reply(self, request: web.Request) -> web.Response:
        self.calls["reply"] += 1
        self._authorize(request)
        self._fault()
        target = self._message(request.match_info["message_id"])
        body = await _json(request)
        msg_type, content, uuid = self._message_fields(body)
        if (first := self._again(uuid)) is not None:
            return _ok(self._data(first))
        if target["chat_id"] not in self.chats:
            raise NOT_IN_CHAT()
        root = target["root_id"] or target["message_id"]
        in_thread = bool(body.get("reply_in_thread")) or root in self._threads
        m = self._record(chat_id=target["chat_id"], msg_type=msg_type, content=content,
                         uuid=uuid, root_id=root, parent_id=target["message_id"],
                         thread_id=self._thread_of(root) if in_thread else None)
        return _ok(self._data(m))

    async def patch(self, request: web.Request) -> web.Response:
        self.calls["patch"] += 1
        self._authorize(request)
        self._fault()
        m = self._message(request.match_info["message_id"])
        if m["msg_type"] != "interactive" or m["by"] != "bot":
            # the answer Feishu gives (go-lark/lark#48); for a card someone else sent the
            # code is *(unconfirmed)*
            raise invalid("This message is NOT a card")
        if time.time() * 1000 - m["create_time"] > PATCH_DAYS * 86400 * 1000:
            raise TOO_OLD()
        raw = (await _json(request)).get("content")
        if not isinstance(raw, str):
            raise field_validation("content", "must be a string")
        card = self._card(raw)
        # both the old and the new card must say update_multi: true (im-v1/message-card/patch);
        # the code for a card that does not is *(unconfirmed)*
        if not (_update_multi(self.shown(m)) and _update_multi(card)):
            raise invalid("card is not a shared card (update_multi is false)")
        if self.patch_qps is not None:
            now = self.clock()
            recent = [t for t in self._patches.get(m["message_id"], []) if now - t < 1.0]
            if len(recent) >= self.patch_qps:
                raise TOO_FAST()
            self._patches[m["message_id"]] = [*recent, now]
        m["edits"].append(card)
        m["update_time"] = int(time.time() * 1000)
        return _ok({})

    def _message(self, message_id: str) -> dict:
        for m in self.messages:
            if m["message_id"] == message_id:
                return m
        raise invalid("invalid message_id")

    def _message_fields(self, body: dict) -> tuple[str, dict, str | None]:
        """msg_type, the parsed content and uuid of a send or a reply, checked as Feishu
        does; raises its refusal."""
        msg_type, raw, uuid = body.get("msg_type"), body.get("content"), body.get("uuid")
        if not isinstance(msg_type, str) or not msg_type:
            raise field_validation("msg_type", "is required")
        if msg_type not in MSG_TYPES:
            raise invalid("invalid msg_type")  # the text larksuite/node-sdk#115 records
        if not isinstance(raw, str):
            raise field_validation("content", "must be a JSON string")
        if uuid is not None and (not isinstance(uuid, str) or len(uuid) > 50):
            raise field_validation("uuid", "must be a string of at most 50 characters")
        if len(raw.encode()) > (CARD_MAX if msg_type in ("interactive", "post") else TEXT_MAX):
            raise TOO_LONG()
        if msg_type == "interactive":
            return msg_type, self._card(raw), uuid
        try:
            content = json.loads(raw)
        except ValueError:
            raise invalid("invalid content: not JSON") from None
        if not isinstance(content, dict):
            raise invalid("invalid content")
        if msg_type == "text" and not isinstance(content.get("text"), str):
            raise invalid("invalid content: text needs {\"text\"}")
        if msg_type == "post" and not _is_post(content):
            raise invalid("invalid content: post needs {locale: {title, content: [[…]]}}")
        if msg_type == "image":
            key = content.get("image_key")
            if key not in self.images:
                raise NOT_OWNER() if _is_persons(self.resources, key) else invalid(
                    "invalid image_key")
        if msg_type == "file":
            key = content.get("file_key")
            if key not in self.files:
                raise NOT_OWNER() if _is_persons(self.resources, key) else invalid(
                    "invalid file_key")
            if self.files[key][0] in FILE_MSG_TYPE:
                raise KIND_MISMATCH()
        return msg_type, content, uuid

    def _card(self, raw: str) -> dict:
        """A card's JSON, parsed and checked; raises 230099 (or 230025) as Feishu would."""
        if len(raw.encode()) > CARD_MAX:
            raise TOO_LONG()
        try:
            card = json.loads(raw)
        except ValueError:
            raise card_refusal(200621, "parse card json err") from None
        if not isinstance(card, dict):
            raise card_refusal(200621, "parse card json err", "a card is a JSON object")
        if "type" in card and "data" in card:
            raise card_refusal(200621, "parse card json err",
                               "template and card_id cards: not supported by this fake")
        if "schema" in card:
            self._check_v2(card)
        else:
            self._check_v1(card)
        return card

    def _check_v2(self, card: dict) -> None:
        if card["schema"] != "2.0":
            raise card_refusal(200621, "parse card json err", f"schema {card['schema']!r}")
        if unknown := set(card) - V2_TOP:
            raise card_refusal(200621, "parse card json err",
                               f"unknown property {sorted(unknown)[0]!r}")
        config = card.get("config", {})
        if not isinstance(config, dict) or set(config) - V2_CONFIG:
            raise card_refusal(200621, "parse card json err", "config")
        body = card.get("body")
        if not isinstance(body, dict) or set(body) - V2_BODY or \
                not isinstance(body.get("elements"), list):
            raise card_refusal(200621, "parse card json err", "body must hold elements")
        self._check_header(card)
        self._check_elements(body["elements"], v2=True)

    def _check_v1(self, card: dict) -> None:
        if unknown := set(card) - V1_TOP:
            raise card_refusal(200621, "parse card json err",
                               f"unknown property {sorted(unknown)[0]!r}")
        if not isinstance(card.get("config", {}), dict) or \
                not isinstance(card.get("elements"), list):
            raise card_refusal(200621, "parse card json err", "elements")
        self._check_header(card)
        self._check_elements(card["elements"], v2=False)

    @staticmethod
    def _check_header(card: dict) -> None:
        header = card.get("header")
        if header is None:
            return
        if not isinstance(header, dict) or set(header) - HEADER:
            raise card_refusal(200621, "parse card json err", "header")
        _text_object(header.get("title"), "header.title")

    def _check_elements(self, elements: list, *, v2: bool) -> None:
        for element in elements:
            tag = element.get("tag") if isinstance(element, dict) else None
            if v2 and tag in V1_ONLY:
                raise card_refusal(200861, "cards of schema V2 no longer support this "
                                           "capability", f"tag {tag!r}")
            if tag not in (V2_TAGS if v2 else V1_TAGS):
                raise card_refusal(200621, "parse card json err", f"unsupported tag {tag!r}")
            self._check_element(element, v2=v2)

    def _check_element(self, element: dict, *, v2: bool) -> None:
        tag = element["tag"]
        if tag == "markdown" and not isinstance(element.get("content"), str):
            raise card_refusal(200621, "parse card json err", "markdown.content")
        if tag == "img" and element.get("img_key") not in self.images:
            raise card_refusal(200570, "card contains invalid image keys",
                               str(element.get("img_key")))
        if tag == "div" and "text" in element:
            _text_object(element["text"], "div.text")
        if tag == "button":
            _text_object(element.get("text"), "button.text")
            if element.get("type", "default") not in BUTTON_TYPES:
                raise card_refusal(200621, "parse card json err", "button.type")
            for behavior in element.get("behaviors", []):
                kind = behavior.get("type") if isinstance(behavior, dict) else None
                if not (kind == "callback" and isinstance(behavior.get("value"), dict | str)
                        or kind == "open_url" and isinstance(behavior.get("default_url"), str)):
                    raise card_refusal(200621, "parse card json err", "button.behaviors")
        if tag == "column_set":
            columns = element.get("columns", [])
            if not isinstance(columns, list) or any(
                    not isinstance(c, dict) or c.get("tag") != "column"
                    or not isinstance(c.get("elements", []), list) for c in columns):
                raise card_refusal(200621, "parse card json err", "column_set.columns")
            for column in columns:
                self._check_elements(column.get("elements", []), v2=v2)
        if tag == "action":  # 1.0: a row of buttons
            for button in element.get("actions", []):
                if not isinstance(button, dict) or button.get("tag") != "button":
                    raise card_refusal(200621, "parse card json err", "action.actions")
                self._check_element(button, v2=False)
        if tag == "note":
            for item in element.get("elements", []):
                if isinstance(item, dict) and item.get("tag") == "img":
                    self._check_element(item, v2=False)
                else:
                    _text_object(item, "note.elements")

    def _again(self, uuid: str | None) -> dict | None:
        """The message a uuid sent in the last hour: Feishu answers with it, sending nothing."""
        if uuid is None:
            return None
        seen = self._uuids.get(uuid)
        return seen[1] if seen and time.time() - seen[0] < UUID_TTL else None

    def _thread_of(self, root: str) -> str:
        return self._threads.setdefault(root, f"omt_{_hex(12)}")

    def _record(self, *, chat_id: str, msg_type: str, content: dict, uuid: str | None = None,
                root_id: str | None = None, parent_id: str | None = None,
                thread_id: str | None = None, by: str = "bot",
                message_id: str | None = None) -> dict:
        """A message as the records keep it: message_id, chat_id, msg_type, content (parsed),
        root_id (the thread's root, None outside threads), uuid, edits (each PATCH's parsed
        card), by ("bot" or the person's open_id); and parent_id, thread_id, create_time and
        update_time (ms)."""
        now = int(time.time() * 1000)
        m = {"message_id": message_id or f"om_{_hex(16)}", "chat_id": chat_id,
             "msg_type": msg_type, "content": content, "root_id": root_id, "uuid": uuid,
             "edits": [], "by": by, "parent_id": parent_id, "thread_id": thread_id,
             "create_time": now, "update_time": now}
        self.messages.append(m)
        if uuid is not None:
            self._uuids[uuid] = (time.time(), m)
        return m

    @staticmethod
    def _data(m: dict) -> dict:
        """The message as im/v1/messages answers it (data of the create and reply pages)."""
        data = {"message_id": m["message_id"], "msg_type": m["msg_type"],
                "create_time": str(m["create_time"]), "update_time": str(m["update_time"]),
                "deleted": False, "updated": bool(m["edits"]), "chat_id": m["chat_id"],
                "sender": {"id": APP_ID, "id_type": "app_id", "sender_type": "app",
                           "tenant_key": TENANT_KEY},
                "body": {"content": json.dumps(m["content"], ensure_ascii=False)}}
        for key in ("root_id", "parent_id", "thread_id"):
            if m[key]:
                data[key] = m[key]
        return data

    # --- what tests read ------------------------------------------------------------------
    def in_thread(self, root_id: str) -> list[dict]:
        """The messages in the thread under `root_id` (the root itself not included)."""
        return [m for m in self.messages if m["root_id"] == root_id]

    def in_chat(self, chat_id: str) -> list[dict]:
        return [m for m in self.messages if m["chat_id"] == chat_id]

    @staticmethod
    def non_image(messages: list[dict]) -> list[dict]:
        """The messages that are not pictures: neither msg_type image nor a card whose only
        content (its header aside) is images."""
        return [m for m in messages if m["msg_type"] != "image" and not (
            m["msg_type"] == "interactive" and _image_only(m["content"]))]

    @staticmethod
    def shown(m: dict) -> dict:
        """What a message shows now: its last edit, else what was sent."""
        return m["edits"][-1] if m["edits"] else m["content"]

    def join(self, chat_id: str) -> None:
        """The bot is added to a group chat."""
        self.chats.add(chat_id)

    # --- uploads ----------------------------------------------------------------------------
    async def upload_image(self, request: web.Request) -> web.Response:
        self.calls["image"] += 1
        self._authorize(request)
        self._fault()
        form = await _form(request)
        data = form.get("image")
        if form.get("image_type") not in (b"message", b"avatar") or data is None:
            raise UPLOAD_PARAM()
        if not data:
            raise UPLOAD_EMPTY()
        if len(data) > IMAGE_MAX:
            raise UPLOAD_TOO_BIG()
        _check_image(data)
        key = f"img_v3_{_hex(20)}"
        self.images[key] = data
        return _ok({"image_key": key})

    async def upload_file(self, request: web.Request) -> web.Response:
        self.calls["file"] += 1
        self._authorize(request)
        self._fault()
        form = await _form(request)
        data = form.get("file")
        file_type = form.get("file_type", b"").decode("utf-8", "replace")
        name = form.get("file_name", b"").decode("utf-8", "replace")
        if file_type not in FILE_TYPES or not name or data is None:
            raise UPLOAD_PARAM()
        if not data:
            raise UPLOAD_EMPTY()
        if len(data) > FILE_MAX:
            raise UPLOAD_TOO_BIG()
        key = f"file_v3_{_hex(20)}"
        self.files[key] = (file_type, name, data)
        return _ok({"file_key": key})

    # --- what people send ---------------------------------------------------------------------
    async def resource(self, request: web.Request) -> web.Response:
        """The bytes of a file or picture a person sent, as im-v1/message-resource/get serves
        them. The filename goes in Content-Disposition as `filename="<percent-encoded>"` and
        RFC 5987 `filename*=UTF-8''<percent-encoded>`: lark-oapi's Files.parse_file_name
        reads either (Feishu's exact header form is *(unconfirmed)*)."""
        self.calls["resource"] += 1
        self._authorize(request)
        kind = request.query.get("type")
        if kind not in ("file", "image"):
            raise field_validation("type", "is required (file|image)")
        found = self.resources.get((request.match_info["message_id"],
                                    request.match_info["file_key"]))
        if found is None:
            raise NOT_IN_MESSAGE()
        if found.kind != kind:
            raise UPLOAD_PARAM()  # *(unconfirmed)*
        name = quote(found.name, safe="")
        return web.Response(body=found.data, headers={
            "Content-Type": mimetypes.guess_type(found.name)[0] or "application/octet-stream",
            "Content-Disposition": f"attachment; filename=\"{name}\"; filename*=UTF-8''{name}"})

    def message_event(self, *, chat_id: str, open_id: str, chat_type: str = "p2p",
                      text: str | None = None, file: tuple[str, bytes] | None = None,
                      image: bytes | None = None, message_id: str | None = None,
                      root_id: str | None = None, mention_bot: bool = False,
                      union_id: str | None = None, user_id: str | None = None) -> dict:
        """A person sends a message (text, a file or a picture: one per message, as Feishu
        delivers them): the im.message.receive_v1 envelope Feishu POSTs to the app's callback
        URL (encrypt and sign it with `signed`). The message is recorded with `by` = open_id,
        its chat counts as one the bot is in, and a file or picture in it is served by the
        resources route.

        The shape follows the im.message.receive_v1 page and lark-oapi's P2ImMessageReceiveV1:
        content is a JSON string (`{"text"}`, `{"file_key", "file_name"}`, `{"image_key"}`);
        an @mention is `@_user_N` in the text with its details in `mentions`; root_id and
        parent_id only on a reply (parent = the root here), thread_id in a thread."""
        if sum(x is not None for x in (text, file, image)) != 1:
            raise ValueError("a Feishu message carries one of text, file or image")
        if chat_type not in ("p2p", "group"):
            raise ValueError("chat_type is p2p or group")
        message_id = message_id or f"om_{_hex(16)}"
        mentions = []
        if file is not None:
            key = f"file_v3_{_hex(20)}"
            message_type, content = "file", {"file_key": key, "file_name": file[0]}
            self.resources[(message_id, key)] = Resource(file[0], file[1], "file")
        elif image is not None:
            key = f"img_v3_{_hex(20)}"
            message_type, content = "image", {"image_key": key}
            self.resources[(message_id, key)] = Resource(f"{key}.{_image_ext(image)}", image,
                                                         "image")
        else:
            assert text is not None
            message_type, content = "text", {"text": f"@_user_1 {text}" if mention_bot else text}
            if mention_bot:
                # the bot has no user_id (*(unconfirmed)*: Feishu may send "" or omit it)
                mentions.append({"key": "@_user_1",
                                 "id": {"union_id": BOT_UNION_ID, "user_id": "",
                                        "open_id": BOT_OPEN_ID},
                                 "name": BOT_NAME, "tenant_key": TENANT_KEY})
        self.chats.add(chat_id)
        if chat_type == "p2p":
            self.p2p[open_id] = chat_id
        thread_id = self._thread_of(root_id) if root_id else None
        m = self._record(chat_id=chat_id, msg_type=message_type, content=content,
                         root_id=root_id, parent_id=root_id, thread_id=thread_id, by=open_id,
                         message_id=message_id)
        message: dict[str, Any] = {"message_id": message_id}
        if root_id:
            message |= {"root_id": root_id, "parent_id": root_id}
        message |= {"create_time": str(m["create_time"]), "update_time": str(m["update_time"]),
                    "chat_id": chat_id}
        if thread_id:
            message["thread_id"] = thread_id
        message |= {"chat_type": chat_type, "message_type": message_type,
                    "content": json.dumps(content, ensure_ascii=False), "mentions": mentions}
        return {"schema": "2.0",
                "header": _header("im.message.receive_v1", str(m["create_time"])),
                "event": {"sender": {"sender_id": _person(open_id, union_id, user_id),
                                     "sender_type": "user", "tenant_key": TENANT_KEY},
                          "message": message}}

    person_sends = message_event

    # --- the long connection ----------------------------------------------------------------
    # lark-oapi 1.7.5 ws/client.py is the reference: the client POSTs GEN_ENDPOINT_URI
    # {"AppID", "AppSecret"}, opens data.URL, sends a PING control frame every PingInterval
    # seconds, and answers each DATA frame with the same frame (headers kept, a `biz_rt` header
    # added) carrying the JSON payload {"code": 200} (plus "data": base64 of a callback's
    # answer). Frames are pbbp2.Frame: method FrameType.CONTROL (0) or DATA (1); headers
    # type (event|card|ping|pong), message_id, sum, seq, trace_id; `service` = the URL's
    # service_id. Feishu pushes an unanswered event again after 3 s: this fake does not.
    def client_config(self) -> dict:
        """The ClientConfig the endpoint and each pong carry (lark-oapi ws/model.py)."""
        return {"ReconnectCount": self.reconnect_count,
                "ReconnectInterval": self.reconnect_interval,
                "ReconnectNonce": self.reconnect_nonce, "PingInterval": self.ping_interval}

    async def ws_endpoint(self, request: web.Request) -> web.Response:
        """POST /callback/ws/endpoint: a connection URL, good for one connection
        (single use is *(unconfirmed)*; the SDK asks again before every connect)."""
        self.calls["endpoint"] += 1
        if self.refuse_connections:
            raise Refusal(SYSTEM_BUSY, "system busy", status=self.refusal_status)
        body = await _json(request)
        if body.get("AppID") != APP_ID or body.get("AppSecret") != APP_SECRET:
            raise WS_BAD_CREDENTIALS()
        ticket = _hex(16)
        self._tickets.add(ticket)
        device_id = str(7_000_000_000_000_000_000 + secrets.randbelow(10**18))
        url = (f"{self.base.replace('http://', 'ws://')}{WS_PATH}?device_id={device_id}"
               f"&service_id={self.service_id}&ticket={ticket}")
        return web.json_response({"code": 0, "msg": "ok", "data": {
            "URL": url, "ClientConfig": self.client_config()}})

    async def ws_accept(self, request: web.Request) -> web.StreamResponse:
        """The connection URL: a WebSocket of binary pbbp2 frames. A URL not handed out (or
        used already) and a 51st connection are refused at the handshake with the headers
        the SDK's `_parse_ws_conn_exception` reads (status 514 AUTH_FAILED; auth code
        EXCEED_CONN_LIMIT for the limit, which the SDK does not retry). The HTTP status and
        the auth code for a bad URL are *(unconfirmed)*."""
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets or request.query.get("service_id") != \
                str(self.service_id):
            return _handshake_refusal("ticket invalid", 0)
        if len(self.sockets) >= WS_MAX_CONNECTIONS:
            return _handshake_refusal("exceed connection limit", EXCEED_CONN_LIMIT)
        self._tickets.discard(ticket)
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        self.connections += 1
        self.sockets.append(ws)
        self._peers[id(ws)] = request
        try:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    await self._client_frame(ws, msg.data)
                else:
                    self.ws_errors.append(f"a {msg.type.name} message, not a binary frame")
        finally:
            self._forget(ws)
        return ws

    def _forget(self, ws: web.WebSocketResponse) -> None:
        if ws in self.sockets:
            self.sockets.remove(ws)
        self._peers.pop(id(ws), None)

    async def _client_frame(self, ws: web.WebSocketResponse, raw: bytes) -> None:
        """A frame a client sent: a PING is answered with a PONG (the same frame, type pong,
        payload the ClientConfig as JSON, which the SDK's `_handle_control_frame` applies);
        a DATA frame (an ack) is recorded in `acks` as {message_id, headers (a dict),
        payload (parsed), answer (its base64 "data" decoded as JSON, when present),
        service}."""
        frame = Frame()
        try:
            frame.ParseFromString(raw)
        except Exception as e:  # the bundled protobuf's DecodeError, or worse
            self.ws_errors.append(f"not a pbbp2 Frame: {e}")
            return
        headers = {h.key: h.value for h in frame.headers}
        if frame.method == FrameType.CONTROL.value:
            if headers.get(HEADER_TYPE) != MessageType.PING.value:
                self.ws_errors.append(f"a control frame of type {headers.get(HEADER_TYPE)!r}")
                return
            self.calls["ping"] += 1
            pong = Frame()
            pong.CopyFrom(frame)
            for header in pong.headers:
                if header.key == HEADER_TYPE:
                    header.value = MessageType.PONG.value
            pong.payload = json.dumps(self.client_config()).encode() if self.pong_config \
                else b""
            await ws.send_bytes(pong.SerializeToString())
        elif frame.method == FrameType.DATA.value:
            try:
                payload = json.loads(frame.payload)
            except ValueError:
                self.ws_errors.append(f"an ack whose payload is not JSON: {frame.payload!r}")
                return
            ack = {"message_id": headers.get(HEADER_MESSAGE_ID), "headers": headers,
                   "payload": payload, "service": frame.service}
            if isinstance(payload, dict) and payload.get("data"):
                try:
                    ack["answer"] = json.loads(base64.b64decode(payload["data"]))
                except ValueError:
                    self.ws_errors.append(f"an ack whose data is not base64 JSON: {payload}")
            if ack["message_id"] not in self.pushed:
                self.ws_errors.append(f"an ack for a message never pushed: {headers}")
            self.acks.append(ack)
        else:
            self.ws_errors.append(f"a frame of method {frame.method}")

    async def push(self, body: dict, *, kind: str = "event", split: int = 1) -> str:
        """Feishu sends an event (`message_event(…)`, `card_action_event(…)`) down ONE open
        long connection (a random one, as Feishu picks one random client): DATA frames with
        headers type (`kind`), message_id (new; returned), sum, seq, trace_id; `service` the
        service_id; payload the event's plaintext JSON, in `split` frames (seq 0…split-1, as
        the SDK's `_combine` joins them). Call it from the test's loop: the send runs on the
        fake's and this returns once the frames are written. NotConnected if none is open.

        card.action.trigger comes as kind "event" (the SDK handles it through its event
        dispatcher; a frame of type "card" it drops without an ack)."""
        if kind not in (MessageType.EVENT.value, MessageType.CARD.value):
            raise ValueError("kind is event or card")
        payload = json.dumps(body, ensure_ascii=False).encode()
        if not 1 <= split <= len(payload):
            raise ValueError("split is 1 … the payload's length (no frame may be empty: the "
                             "SDK's _combine takes an empty part for a missing one)")
        message_id = _hex(16)
        await self._on_loop(self._push(message_id, body, payload, kind, split))
        return message_id

    async def _push(self, message_id: str, body: dict, payload: bytes, kind: str,
                    split: int) -> None:
        if not self.sockets:
            raise NotConnected("no long connection is open")
        ws = random.choice(self.sockets)
        self.pushed[message_id] = {"kind": kind, "body": body, "frames": split}
        size, extra = divmod(len(payload), split)
        trace_id, start = _hex(16), 0
        for seq in range(split):
            end = start + size + (seq < extra)
            frame = Frame()
            self._seq_ids += 1
            frame.SeqID, frame.LogID = self._seq_ids, secrets.randbits(62)
            frame.service, frame.method = self.service_id, FrameType.DATA.value
            for key, value in ((HEADER_TYPE, kind), (HEADER_MESSAGE_ID, message_id),
                               (HEADER_SUM, str(split)), (HEADER_SEQ, str(seq)),
                               (HEADER_TRACE_ID, trace_id)):
                header = frame.headers.add()
                header.key, header.value = key, value
            frame.payload = payload[start:end]
            start = end
            await ws.send_bytes(frame.SerializeToString())

    async def drop(self, *, graceful: bool = False) -> int:
        """Every open long connection is lost (how many): by default the TCP connection is
        cut with no close frame, as a network failure would; graceful=True closes each with
        1001 going-away. A client must ask the endpoint again and connect anew."""
        return await self._on_loop(self._drop(graceful))

    async def _drop(self, graceful: bool) -> int:
        dropped = list(self.sockets)
        for ws in dropped:
            request = self._peers.get(id(ws))
            self._forget(ws)
            if graceful:
                await ws.close(code=WSCloseCode.GOING_AWAY, message=b"going away")
            elif request is not None and request.transport is not None:
                request.transport.abort()
        return len(dropped)

    async def wait_connected(self, n: int = 1, timeout: float = 5.0) -> None:
        """Until `n` long connections are open."""
        await _until(lambda: len(self.sockets) >= n, timeout,
                     lambda: f"{len(self.sockets)} long connections open, not {n}")

    async def ack_of(self, message_id: str, timeout: float = 5.0) -> dict:
        """The ack a client sent for a pushed message (waiting for it)."""
        def found() -> dict | None:
            return next((a for a in self.acks if a["message_id"] == message_id), None)
        await _until(lambda: found() is not None, timeout,
                     lambda: f"no ack for {message_id}; acks: {self.acks}")
        return found()  # type: ignore[return-value]

    async def _on_loop(self, coro: Any) -> Any:
        """Run a coroutine on the fake's loop (from the test's) and wait for its result."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))


# --- inbound: what Feishu POSTs to the app ------------------------------------------------------
def _header(event_type: str, create_time: str) -> dict:
    return {"event_id": secrets.token_hex(16), "event_type": event_type,
            "create_time": create_time, "token": VERIFICATION_TOKEN, "app_id": APP_ID,
            "tenant_key": TENANT_KEY}


def _person(open_id: str, union_id: str | None = None, user_id: str | None = None) -> dict:
    tail = open_id.removeprefix("ou_")
    return {"union_id": union_id or f"on_{tail}", "user_id": user_id or f"u_{tail}",
            "open_id": open_id}


def card_action_event(*, open_id: str, chat_id: str, message_id: str, value: dict,
                      tag: str = "button", union_id: str | None = None,
                      user_id: str | None = None) -> dict:
    """A click on a card's callback button: the card.action.trigger (schema 2.0) envelope of
    Feishu's card callback page and lark-oapi's P2CardActionTrigger. `event.token` is the
    card's update token ("c-…"), not the verification token (that is header.token); the
    header's create_time is in microseconds as in the page's example *(unconfirmed)*."""
    return {"schema": "2.0",
            "header": _header("card.action.trigger", str(int(time.time() * 1_000_000))),
            "event": {"operator": {"tenant_key": TENANT_KEY,
                                   **_person(open_id, union_id, user_id)},
                      "token": f"c-{secrets.token_hex(20)}",
                      "action": {"value": value, "tag": tag},
                      "host": "im_message",
                      "context": {"open_message_id": message_id, "open_chat_id": chat_id}}}


def url_verification(challenge: str | None = None) -> dict:
    """What Feishu POSTs when the callback URL is saved; the app answers {"challenge"}."""
    return {"challenge": challenge or secrets.token_hex(16), "token": VERIFICATION_TOKEN,
            "type": "url_verification"}


def encrypted(body: dict, key: str = ENCRYPT_KEY) -> str:
    """base64(IV ‖ AES-256-CBC(key = SHA-256(encrypt_key), IV, PKCS#7(JSON))): what
    lark-oapi's AESCipher (core/utils/decryptor.py) decrypts."""
    plaintext = json.dumps(body, ensure_ascii=False).encode()
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext) + padder.finalize()
    iv = secrets.token_bytes(16)
    encryptor = Cipher(algorithms.AES(hashlib.sha256(key.encode()).digest()),
                       modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(padded) + encryptor.finalize()).decode()


def signed(body: dict, *, encrypt: bool = True, timestamp: int | str | None = None,
           nonce: str | None = None, key: str | None = ENCRYPT_KEY) -> tuple[bytes, dict[str, str]]:
    """The raw bytes Feishu POSTs and its headers: with an Encrypt Key the body is
    `{"encrypt": …}` and X-Lark-Signature = hex(SHA-256(timestamp + nonce + encrypt_key +
    raw_body)) over exactly those bytes (the shared doc; lark-oapi's _verify_sign). With
    key=None: plaintext, unsigned (an app with no Encrypt Key); encrypt=False: plaintext, still
    signed with `key`."""
    if key and encrypt:
        raw = json.dumps({"encrypt": encrypted(body, key)}).encode()
    else:
        raw = json.dumps(body, ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        ts = str(int(time.time()) if timestamp is None else timestamp)
        nonce = nonce or secrets.token_hex(8)
        headers |= {"X-Lark-Request-Timestamp": ts, "X-Lark-Request-Nonce": nonce,
                    "X-Lark-Signature": hashlib.sha256(
                        (ts + nonce + key).encode() + raw).hexdigest()}
    return raw, headers


def forget_sdk_token(app_id: str = APP_ID) -> None:
    """Drop the tenant token lark-oapi caches process-wide (TokenManager.cache, keyed by app
    id): what a client does on 99991663 before fetching a new one. The SDK itself never
    drops it, so a token cached from an earlier fake would otherwise be sent to this one."""
    from lark_oapi.core.token.manager import TokenManager
    TokenManager.cache.set(f"self_tenant_token:{app_id}", "", 0)


# --- helpers -------------------------------------------------------------------------------------
async def _form(request: web.Request) -> dict[str, bytes]:
    """A multipart form's parts as bytes, by name: the SDK's blocking client (requests with
    requests_toolbelt) sends a file part without a filename, which aiohttp's `post()`
    would take for text and decode."""
    parts: dict[str, bytes] = {}
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if isinstance(part, BodyPartReader) and part.name:
            parts[part.name] = bytes(await part.read(decode=False))
    return parts


@web.middleware
async def _refusals(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)
    except Refusal as refusal:
        return refusal.response()


async def _json(request: web.Request) -> dict:
    try:
        body = await request.json()
    except ValueError:
        raise field_validation("body", "is not JSON") from None
    if not isinstance(body, dict):
        raise field_validation("body", "is not a JSON object")
    return body


def _handshake_refusal(msg: str, auth_code: int) -> web.Response:
    """A refused WebSocket upgrade, with the headers lark-oapi's `_parse_ws_conn_exception`
    reads (handshake-status AUTH_FAILED; handshake-autherrcode EXCEED_CONN_LIMIT is the only
    one it does not retry)."""
    return web.Response(status=403, text=msg, headers={
        HEADER_HANDSHAKE_STATUS: str(AUTH_FAILED), HEADER_HANDSHAKE_MSG: msg,
        HEADER_HANDSHAKE_AUTH_ERRCODE: str(auth_code)})


async def _until(condition: Any, timeout: float, why: Any) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(why())
        await asyncio.sleep(0.01)


def _ok(data: dict) -> web.Response:
    return web.json_response({"code": 0, "msg": "success", "data": data})


def _hex(n: int) -> str:
    return secrets.token_hex(n)


def _update_multi(card: dict) -> bool:
    """Whether a card is shared (updatable for everyone): JSON 2.0 defaults to true, 1.0 to
    false (the shared doc)."""
    default = card.get("schema") == "2.0"
    return bool((card.get("config") or {}).get("update_multi", default))


def _image_only(card: dict) -> bool:
    parts = leaves(card_elements(card))
    return bool(parts) and all(p.get("tag") == "img" for p in parts)


def _is_post(content: dict) -> bool:
    """A post's content: {locale: {title?, content: [[element…]…]}} (im/v1 message content)."""
    return bool(content) and all(
        isinstance(v, dict) and isinstance(v.get("content"), list)
        and all(isinstance(line, list) for line in v["content"]) for v in content.values())


def _is_persons(resources: dict[tuple[str, str], Resource], key: Any) -> bool:
    return any(k == key for _, k in resources)


def _check_image(data: bytes) -> None:
    """A real picture in a format Feishu takes; GIF ≤ 2000×2000, others ≤ 12000×12000 (the
    shared doc; the code for an oversized one, 234001 here, is *(unconfirmed)*)."""
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt, (width, height) = im.format, im.size
            im.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raise NOT_AN_IMAGE() from None
    if fmt not in {"JPEG", "PNG", "WEBP", "GIF", "BMP", "ICO", "TIFF", "HEIF", "MPO"}:
        raise NOT_AN_IMAGE()
    limit = 2000 if fmt == "GIF" else 12000
    if width > limit or height > limit:
        raise UPLOAD_PARAM()


def _image_ext(data: bytes) -> str:
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(io.BytesIO(data)) as im:
            return (im.format or "png").lower().replace("jpeg", "jpg")
    except (UnidentifiedImageError, OSError):
        return "png"


# --- the service against this fake (tests of the adapter; the thread-cost suite) ----------
ALICE, CHAT = "ou_alice", "oc_alice_dm"


def feishu_config(tmp_path, demo_models, fake: FakeFeishu, *, chat=None, **feishu):
    from tests.conftest import executor_config
    return executor_config(
        tmp_path / "data", demo_models, service={"port": 0},
        chat={"progress_every": 0.5, "admins": ["feishu:ou_boss"], **(chat or {})},
        feishu={"app_id": APP_ID, "app_secret": APP_SECRET, "encrypt_key": ENCRYPT_KEY,
                "verification_token": VERIFICATION_TOKEN, "domain": fake.base,
                "mode": "callback", **feishu})


class FeishuWorld(ServiceWorld):
    def __init__(self, config, fake: FakeFeishu):
        super().__init__(config)
        self.fake = fake

    async def __aenter__(self) -> FeishuWorld:
        await super().__aenter__()
        self.session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.session.close()
        await super().__aexit__(*exc)

    async def post(self, body: dict, **signing) -> int:
        raw, headers = signed(body, **signing)
        async with self.session.post(f"{self.url}/feishu/events", data=raw,
                                     headers=headers) as r:
            return r.status

    async def say(self, *, user: str = ALICE, chat: str = CHAT, **message) -> dict:
        """A person writes to the bot: the event Feishu would post, encrypted and signed."""
        body = self.fake.message_event(chat_id=chat, open_id=user, **message)
        assert await self.post(body) == 200
        return body

    def cards(self, chat: str = CHAT) -> list[str]:
        """The words of every card the bot sent in `chat`, as shown now."""
        return [words(self.fake.shown(m)) for m in self.fake.in_chat(chat)
                if m["by"] == "bot" and m["msg_type"] == "interactive"]

    async def send_sheet_and_pictures(self, user: str = ALICE, chat: str = CHAT) -> None:
        """One file per message, as Feishu delivers them."""
        await self.say(user=user, chat=chat, file=("social_thumb.xlsx", SHEET))
        for name in ("bottle.png", "chair.png"):
            await self.say(user=user, chat=chat, file=(name, (ASSETS / name).read_bytes()))


def words(card: dict) -> str:
    """A card's markdown, the references its escaping wrote read back as characters."""
    import html
    out = []
    for e in card.get("body", {}).get("elements", []):
        if e.get("tag") == "markdown":
            out.append(html.unescape(e["content"]).replace("\u2060", ""))
    return "\n".join(out)


def buttons(card: dict) -> dict[str, str]:
    """A card's buttons: label -> the command it sends."""
    found = {}
    for e in card.get("body", {}).get("elements", []):
        for column in e.get("columns", []):
            for b in column.get("elements", []):
                if b.get("tag") == "button":
                    found[b["text"]["content"]] = b["behaviors"][0]["value"]["command"]
    return found
