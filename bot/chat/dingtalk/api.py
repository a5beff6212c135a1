"""DingTalk's OpenAPI over aiohttp: tokens, file downloads, media uploads, robot messages, cards.

Never the SDK's blocking helpers (they use `requests`) on the event loop. The access
token is cached and refreshed five minutes before it expires, and again when a call
answers 401. DingTalk's refusals become DeliveryError: the QPS limit (403
QpsLimit…) and flow-controlled users wait and retry; other 4xx are permanent.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from bot.chat.platform import DeliveryError, DownloadError

REFRESH_EARLY = 300.0  # seconds before expiry a token is replaced
QPS_WAIT = 1.0  # DingTalk counts queries per second: a second later is a new window
FLOW_WAIT = 60.0  # a user DingTalk throttled ("flow controlled") gets the next message later


class DingTalkAPI:
    def __init__(self, *, app_key: str, app_secret: str, robot_code: str, api_url: str,
                 oapi_url: str, clock: Callable[[], float] = time.time):
        self.app_key, self.app_secret, self.robot_code = app_key, app_secret, robot_code
        self.api_url, self.oapi_url = api_url.rstrip("/"), oapi_url.rstrip("/")
        self.clock = clock
        self._token: tuple[str, float] | None = None  # (token, expires at)
        self._lock = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    # --- the token --------------------------------------------------------------------
    async def token(self) -> str:
        async with self._lock:
            if self._token and self._token[1] - REFRESH_EARLY > self.clock():
                return self._token[0]
            async with self.session.post(f"{self.api_url}/v1.0/oauth2/accessToken", json={
                    "appKey": self.app_key, "appSecret": self.app_secret}) as r:
                body = await r.json(content_type=None)
                if r.status != 200 or "accessToken" not in body:
                    raise DeliveryError(f"access token refused: {body.get('message') or r.status}",
                                        permanent=400 <= r.status < 500 and r.status != 429)
            self._token = (body["accessToken"], self.clock() + float(body.get("expireIn", 7200)))
            return self._token[0]

    def forget_token(self) -> None:
        self._token = None

    # --- calls --------------------------------------------------------------------------
    async def call(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """An OpenAPI call (api.dingtalk.com), retried once with a fresh token on 401."""
        for attempt in (1, 2):
            headers = {"x-acs-dingtalk-access-token": await self.token()}
            async with self.session.request(method, f"{self.api_url}{path}", json=body,
                                            headers=headers) as r:
                answer = await r.json(content_type=None) if r.content_length != 0 else {}
                answer = answer or {}
                if r.status == 401 and attempt == 1:
                    self.forget_token()
                    continue
                if r.status < 300:
                    return answer
                raise _refusal(r.status, answer.get("code"), answer.get("message"),
                               r.headers.get("Retry-After"))
        raise DeliveryError("the access token was refused twice")

    async def download(self, download_code: str, *, max_bytes: int) -> bytes:
        """A file someone sent the robot: downloadCode -> a temporary URL -> its bytes."""
        try:
            answer = await self.call("POST", "/v1.0/robot/messageFiles/download",
                                     {"downloadCode": download_code, "robotCode": self.robot_code})
            async with self.session.get(answer["downloadUrl"]) as r:
                if r.status != 200:
                    raise DownloadError("download_failed",
                                        reason=f"DingTalk answered HTTP {r.status}")
                data = await r.content.read(max_bytes + 1)
        except DeliveryError as e:
            raise DownloadError("download_failed", reason=e.reason) from None
        except (TimeoutError, aiohttp.ClientError, KeyError) as e:
            raise DownloadError("download_failed", reason=str(e) or type(e).__name__) from None
        if len(data) > max_bytes:
            raise DownloadError("file_too_big", size_mb=len(data) / 2**20, max_mb=max_bytes / 2**20)
        return data

    async def upload(self, kind: str, name: str, data: bytes) -> str:
        """media/upload (oapi): an image or a file -> its media_id."""
        for attempt in (1, 2):
            form = aiohttp.FormData()
            form.add_field("type", kind)
            form.add_field("media", data, filename=name)
            async with self.session.post(f"{self.oapi_url}/media/upload",
                                         params={"access_token": await self.token()},
                                         data=form) as r:
                answer = await r.json(content_type=None) or {}
            code = answer.get("errcode", r.status if r.status >= 300 else 0)
            if code == 0 and answer.get("media_id"):
                return answer["media_id"]
            if code in (40001, 40014, 42001, 401) and attempt == 1:  # the token went stale
                self.forget_token()
                continue
            raise _refusal(r.status if r.status >= 300 else 400, str(code), answer.get("errmsg"),
                           r.headers.get("Retry-After"), legacy=code)
        raise DeliveryError("the access token was refused twice")

    async def send(self, conversation: str, msg_key: str, params: dict[str, Any]) -> str:
        """A robot message to "user:<staffId>" (1:1) or "group:<openConversationId>"."""
        kind, _, target = conversation.partition(":")
        body = {"robotCode": self.robot_code, "msgKey": msg_key,
                "msgParam": json.dumps(params, ensure_ascii=False)}
        if kind == "user":
            answer = await self.call("POST", "/v1.0/robot/oToMessages/batchSend",
                                     {**body, "userIds": [target]})
            if target in (answer.get("invalidStaffIdList") or []):
                raise DeliveryError(f"DingTalk does not know user {target}", permanent=True)
            if target in (answer.get("flowControlledStaffIdList") or []):
                raise DeliveryError(f"DingTalk is holding messages to {target} back",
                                    retry_after=FLOW_WAIT)
        else:
            answer = await self.call("POST", "/v1.0/robot/groupMessages/send",
                                     {**body, "openConversationId": target})
        return answer.get("processQueryKey") or ""

    async def reply(self, session_webhook: str, message: dict[str, Any]) -> None:
        """A reply by the message's sessionWebhook (text and markdown only; it expires)."""
        async with self.session.post(session_webhook, json=message) as r:
            answer = await r.json(content_type=None) or {}
        if r.status >= 300 or answer.get("errcode", 0) != 0:
            raise DeliveryError(f"sessionWebhook: {answer.get('errmsg') or r.status}")

    async def card(self, conversation: str, template: str, card_id: str, text: str, *,
                   update: bool) -> None:
        """An interactive card with a `text` variable: sent, or updated in place."""
        data = {"cardParamMap": {"text": text}}
        if update:
            await self.call("PUT", "/v1.0/im/robots/interactiveCards",
                            {"cardBizId": card_id, "cardData": json.dumps(data)})
            return
        kind, _, target = conversation.partition(":")
        where = {"openConversationId": target} if kind == "group" else \
            {"singleChatReceiver": json.dumps({"userId": target})}
        await self.call("POST", "/v1.0/im/v1.0/robot/interactiveCards/send", {
            "cardTemplateId": template, "cardBizId": card_id, "robotCode": self.robot_code,
            "cardData": json.dumps(data), **where})


def _refusal(status: int, code: str | None, message: str | None, retry_after: str | None,
             legacy: int | None = None) -> DeliveryError:
    reason = f"{status} {code or ''}: {message or ''}".strip()
    if (code and "QpsLimit" in code) or legacy == 90018 or status == 429:
        return DeliveryError(reason, retry_after=float(retry_after or QPS_WAIT))
    if status >= 500:
        return DeliveryError(reason)
    return DeliveryError(reason, permanent=True)
