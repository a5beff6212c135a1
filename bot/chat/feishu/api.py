"""Feishu's (Lark's) OpenAPI as genbot uses it, through the official SDK `lark-oapi`.

Every call runs the SDK's plain (blocking) method in a worker thread. Its async twins
(acreate, areply …) open a new httpx client per call — an SSL context built on the event
loop each time, tens of milliseconds that showed as a 115 ms p99 in answering Feishu's
events while the executor was busy (bench/ack_bench.py) — and fetch a missing tenant
token with a blocking `requests` call on the loop. The token is fetched here, cached until
ten minutes before it lapses (as the SDK would) and dropped when Feishu says it is no
longer valid (the call is then made once more with a new one); the client is built with
`enable_set_token` so the SDK uses it.

Every answer is `{"code", "msg", "data"}`; a code other than 0 becomes a DeliveryError:
throttling (99991400, HTTP 429) carries the `x-ogw-ratelimit-reset` seconds to wait
(the outbox retries then; the SDK itself does not retry), and what cannot succeed on a
retry (a chat the bot is not in, a message it may not edit) is permanent.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import lark_oapi as lark
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
from lark_oapi.core.http import Transport
from lark_oapi.core.token.create_self_tenant_token_request import CreateSelfTenantTokenRequest
from lark_oapi.core.token.create_token_request_body import CreateTokenRequestBody

from bot.chat.platform import DeliveryError, DownloadError

R = TypeVar("R")

THROTTLED = {99991400, 230020}  # the app's frequency limit (HTTP 429); 5 PATCHes a second
# on one message
STALE_TOKEN = {99991661, 99991663, 99991668}  # a tenant token missing, invalid or expired
# Codes no retry can mend: the bot not in the chat, a message it may not edit or reply
# to, content Feishu refuses (the card's schema, a size).
PERMANENT = {230001, 230002, 230006, 230011, 230013, 230017, 230025, 230031, 230099,
             231001, 232009, 234001, 234006, 200621}
EARLY = 600  # s: a token is fetched again this long before it lapses


class FeishuAPI:
    def __init__(self, *, app_id: str, app_secret: str, domain: str, timeout: float = 30.0):
        self.app_id, self.app_secret, self.domain = app_id, app_secret, domain.rstrip("/")
        self.client = (lark.Client.builder().app_id(app_id).app_secret(app_secret)
                       .domain(self.domain).enable_set_token(True).timeout(timeout)
                       .log_level(lark.LogLevel.WARNING).build())
        self._token: tuple[str, float] | None = None  # the token, and when to fetch again

    async def token(self) -> str:
        if self._token is not None and self._token[1] > time.time():
            return self._token[0]
        request = CreateSelfTenantTokenRequest.builder().request_body(
            CreateTokenRequestBody.builder().app_id(self.app_id).app_secret(self.app_secret)
            .build()).build()
        raw = await asyncio.to_thread(Transport.execute, self.client.config, request)
        try:
            body = json.loads(raw.content or b"{}")
        except ValueError:
            body = {}
        if body.get("code") != 0 or not body.get("tenant_access_token"):
            raise DeliveryError(f"feishu: no tenant token (code {body.get('code')}: "
                                f"{body.get('msg') or raw.status_code})",
                                permanent=raw.status_code in (400, 401, 403))
        lasts = float(body.get("expire") or 7200)
        self._token = (body["tenant_access_token"], time.time() + max(60.0, lasts - EARLY))
        return self._token[0]

    async def _call(self, what: str, call: Callable[[lark.RequestOption], R]) -> R:
        """`call` (a blocking SDK method, run in a thread) with the tenant token; once more
        with a new one if Feishu calls it stale."""
        for attempt in (1, 2):
            option = lark.RequestOption.builder().tenant_access_token(await self.token()).build()
            resp: Any = await asyncio.to_thread(call, option)
            if resp.code in STALE_TOKEN and attempt == 1:
                self._token = None
                continue
            if resp.code != 0:
                raise refusal(what, resp)
            return resp
        raise AssertionError("unreachable")

    # --- messages -----------------------------------------------------------------------
    async def send(self, chat_id: str, msg_type: str, content: dict[str, Any],
                   uuid: str) -> str:
        body = CreateMessageRequestBody.builder().receive_id(chat_id).msg_type(msg_type) \
            .content(json.dumps(content, ensure_ascii=False)).uuid(uuid).build()
        request = CreateMessageRequest.builder().receive_id_type("chat_id") \
            .request_body(body).build()
        resp = await self._call("send", lambda o: self.client.im.v1.message.create(request, o))
        return str(resp.data.message_id)

    async def reply(self, message_id: str, msg_type: str, content: dict[str, Any],
                    uuid: str) -> str:
        """A reply in the thread `message_id` roots (made one if it is not yet)."""
        body = ReplyMessageRequestBody.builder().msg_type(msg_type).reply_in_thread(True) \
            .content(json.dumps(content, ensure_ascii=False)).uuid(uuid).build()
        request = ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
        resp = await self._call("reply", lambda o: self.client.im.v1.message.reply(request, o))
        return str(resp.data.message_id)

    async def patch(self, message_id: str, card: dict[str, Any]) -> None:
        body = PatchMessageRequestBody.builder().content(
            json.dumps(card, ensure_ascii=False)).build()
        request = PatchMessageRequest.builder().message_id(message_id).request_body(body).build()
        await self._call("update", lambda o: self.client.im.v1.message.patch(request, o))

    # --- files --------------------------------------------------------------------------
    async def upload_image(self, data: bytes) -> str:
        def call(o: lark.RequestOption) -> Any:
            body = CreateImageRequestBody.builder().image_type("message") \
                .image(io.BytesIO(data)).build()
            return self.client.im.v1.image.create(
                CreateImageRequest.builder().request_body(body).build(), o)
        resp = await self._call("upload image", call)
        return str(resp.data.image_key)

    async def upload_file(self, name: str, data: bytes) -> str:
        def call(o: lark.RequestOption) -> Any:
            body = CreateFileRequestBody.builder().file_type(file_type(name)).file_name(name) \
                .file(io.BytesIO(data)).build()
            return self.client.im.v1.file.create(
                CreateFileRequest.builder().request_body(body).build(), o)
        resp = await self._call("upload file", call)
        return str(resp.data.file_key)

    async def download(self, message_id: str, key: str, kind: str, max_bytes: int,
                       name: str = "") -> bytes:
        """A file or image a person sent in `message_id` (DownloadError: gone, too big).
        The answer is the bytes, or Feishu's JSON refusal, read from the raw answer (the
        SDK's async twin loses both the name and the code: it looks its headers up
        capitalised, and httpx lowercases them)."""
        request = GetMessageResourceRequest.builder().message_id(message_id).file_key(key) \
            .type(kind).build()
        for attempt in (1, 2):
            option = lark.RequestOption.builder().tenant_access_token(await self.token()).build()
            resp = await asyncio.to_thread(self.client.im.v1.message_resource.get, request,
                                           option)
            raw = resp.raw
            if raw is not None and raw.status_code == 200:
                data = bytes(raw.content or b"")
                if len(data) > max_bytes:
                    raise DownloadError("file_too_big", file=name or key,
                                        size_mb=len(data) / 2**20,
                                        max_mb=max_bytes / 2**20)
                return data
            try:
                said = json.loads(raw.content or b"{}") if raw is not None else {}
            except ValueError:
                said = {}
            code = said.get("code") if isinstance(said, dict) else None
            if code in STALE_TOKEN and attempt == 1:
                self._token = None
                continue
            raise DownloadError("download_failed", file=name or key, reason=(
                f"Feishu answered code {code}: "
                f"{said.get('msg') if isinstance(said, dict) else raw.status_code if raw else ''}"
            )[:200])
        raise AssertionError("unreachable")


def refusal(what: str, resp: Any) -> DeliveryError:
    """Feishu's refusal as the outbox reads it: when to try again, or never."""
    headers = {k.lower(): v for k, v in ((resp.raw.headers or {}) if resp.raw else {}).items()}
    status = resp.raw.status_code if resp.raw is not None else 0
    reason = f"feishu {what}: code {resp.code}: {resp.msg or status}"
    if resp.code in THROTTLED or status == 429:
        try:
            wait = float(headers.get("x-ogw-ratelimit-reset", "1"))
        except ValueError:
            wait = 1.0
        return DeliveryError(reason, retry_after=max(0.5, min(wait, 60.0)))
    return DeliveryError(reason, permanent=resp.code in PERMANENT or status in (400, 403, 404)
                         and resp.code not in STALE_TOKEN)


# file_type as im/v1/files takes it: the kinds it previews, else "stream"
FILE_TYPES = {".xls": "xls", ".xlsx": "xls", ".xlsm": "xls", ".pdf": "pdf", ".doc": "doc",
              ".docx": "doc", ".ppt": "ppt", ".pptx": "ppt", ".mp4": "mp4", ".opus": "opus"}


def file_type(name: str) -> str:
    dot = name.rfind(".")
    return FILE_TYPES.get(name[dot:].lower(), "stream") if dot >= 0 else "stream"
