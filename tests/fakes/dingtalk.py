"""DingTalk's OpenAPI, legacy oapi and Stream gateway on loopback, with fault switches;
and helpers that build robot messages, sign HTTP callbacks, and push Stream frames."""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import re
import time
from collections import Counter
from pathlib import Path

import aiohttp
from aiohttp import web

from tests.fakes.chat import ServiceWorld

APP_KEY = "dingtest"
APP_SECRET = "dingtalk-test-secret"
TOPIC = "/v1.0/im/bot/messages/get"


DTMD = re.compile(r"\[([^\]]*)\]\(dtmd://dingtalkclient/sendMessage\?content=([^)]*)\)")


def _words(markdown: str) -> str:
    """A markdown message as read: its lines, without the images it shows or the line of
    links that send a command (`links` reads those)."""
    markdown = re.sub(r"\n*(?:\[[^\]]*\]\(dtmd://[^)]*\)(?: · )?)+$", "", markdown)
    return re.sub(r"\n*!\[[^\]]*\]\([^)]*\)", "", markdown).replace("  \n", "\n")


def links(markdown: str) -> dict[str, str]:
    """The links of a markdown message that make the client send a message: label ->
    the text the client would send, as a person tapping it would."""
    from urllib.parse import unquote
    return {label: unquote(content) for label, content in DTMD.findall(markdown)}


class FakeDingTalk:
    def __init__(self):
        self.sent: list[dict] = []  # robot messages: to, key, param (parsed), order
        self.session_replies: list[dict] = []
        self.cards: dict[str, list[str]] = {}  # cardBizId -> texts (first send, then updates)
        self.files: dict[str, bytes] = {}  # downloadCode -> bytes people sent the robot
        self.media: dict[str, tuple[str, str, bytes]] = {}  # media_id -> (type, name, bytes)
        self.tokens: set[str] = set()
        self.faults: list[str] = []  # "qps" | "401" | "flow" | "500" for the next robot sends
        self.acks: list[dict] = []  # what came back over the Stream connection
        self.sockets: list[web.WebSocketResponse] = []
        self.connections = 0
        self.calls: Counter = Counter()
        self._n = itertools.count(1)
        # Sign in with DingTalk: who scans the login page's code next (unionId, staff id in
        # this organisation or None for someone of another one), or None: they refuse
        self.signin: tuple[str, str | None] | None = ("union-1", "S1")
        self.codes: dict[str, tuple[str, str | None]] = {}  # authCode -> the person, once
        self.people: dict[str, tuple[str, str | None]] = {}  # user access token -> person

    async def start(self) -> FakeDingTalk:
        app = web.Application(client_max_size=64 * 2**20)
        r = app.router
        r.add_post("/v1.0/oauth2/accessToken", self.access_token)
        r.add_post("/v1.0/robot/messageFiles/download", self.file_url)
        r.add_get("/files/{code}", self.file)
        r.add_post("/media/upload", self.upload)
        r.add_post("/v1.0/robot/oToMessages/batchSend", self.robot_send)
        r.add_post("/v1.0/robot/groupMessages/send", self.robot_send)
        r.add_post("/robot/sendBySession/{id}", self.session_reply)
        r.add_post("/v1.0/im/v1.0/robot/interactiveCards/send", self.card_send)
        r.add_put("/v1.0/im/robots/interactiveCards", self.card_update)
        r.add_post("/v1.0/gateway/connections/open", self.open_connection)
        r.add_get("/oauth2/auth", self.login_page)
        r.add_post("/v1.0/oauth2/userAccessToken", self.user_access_token)
        r.add_get("/v1.0/contact/users/me", self.users_me)
        r.add_post("/topapi/user/getbyunionid", self.by_union_id)
        r.add_get("/stream", self.stream)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.base = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def stop(self) -> None:
        for ws in list(self.sockets):
            await ws.close()
        await self.runner.cleanup()

    # --- tokens -------------------------------------------------------------------------
    async def access_token(self, request: web.Request) -> web.Response:
        body = await request.json()
        if (body.get("appKey"), body.get("appSecret")) != (APP_KEY, APP_SECRET):
            return web.json_response({"code": "invalidClientIdOrSecret"}, status=400)
        token = f"tok-{next(self._n)}"
        self.tokens.add(token)
        self.calls["token"] += 1
        return web.json_response({"accessToken": token, "expireIn": 7200})

    def expire_tokens(self) -> None:
        self.tokens.clear()

    def _authorized(self, request: web.Request) -> bool:
        token = (request.headers.get("x-acs-dingtalk-access-token")
                 or request.query.get("access_token"))
        return token in self.tokens

    # --- Sign in with DingTalk, as open.dingtalk.com documents it: the login page
    # (login.dingtalk.com/oauth2/auth: redirect_uri, response_type=code, client_id, scope
    # openid, state; back with authCode and state), oauth2/userAccessToken (clientId,
    # clientSecret, code once, grantType authorization_code), contact/users/me (the user's
    # token in x-acs-dingtalk-access-token) and topapi/user/getbyunionid (the app's token;
    # errcode 60121 for someone not in the organisation) -------------------------------------
    async def login_page(self, request: web.Request) -> web.StreamResponse:
        q = request.query
        if q.get("response_type") != "code" or q.get("client_id") != APP_KEY or \
                "openid" not in q.get("scope", "").split() or not q.get("redirect_uri"):
            return web.Response(status=400, text="bad oauth2/auth request")
        target = q["redirect_uri"]
        state = f"&state={q['state']}" if q.get("state") else ""
        if self.signin is None:  # closed the page: DingTalk sends nobody back with a code
            raise web.HTTPFound(f"{target}?{state.lstrip('&')}")
        code = f"auth-{next(self._n)}"
        self.codes[code] = self.signin
        raise web.HTTPFound(f"{target}?authCode={code}{state}")

    async def user_access_token(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls["userAccessToken"] += 1
        if (body.get("clientId"), body.get("clientSecret")) != (APP_KEY, APP_SECRET):
            return web.json_response({"code": "invalidClientIdOrSecret"}, status=400)
        person = self.codes.pop(body.get("code", ""), None)
        if body.get("grantType") != "authorization_code" or person is None:
            return web.json_response({"code": "invalidParameter.authCode.notFound",
                                      "message": "不合法的临时授权码"}, status=400)
        token = f"user-{next(self._n)}"
        self.people[token] = person
        return web.json_response({"accessToken": token, "refreshToken": f"r{token}",
                                  "expireIn": 7200})

    async def users_me(self, request: web.Request) -> web.Response:
        person = self.people.get(request.headers.get("x-acs-dingtalk-access-token", ""))
        if person is None:
            return web.json_response({"code": "InvalidAuthentication"}, status=401)
        return web.json_response({"nick": f"person {person[0]}", "unionId": person[0],
                                  "openId": f"open-{person[0]}", "stateCode": "86"})

    async def by_union_id(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"errcode": 40014, "errmsg": "不合法的access_token"})
        union = (await request.json()).get("unionid")
        staff = next((s for u, s in self.people.values() if u == union), None)
        if staff is None:
            return web.json_response({"errcode": 60121, "errmsg": "找不到该用户"})
        return web.json_response({"errcode": 0, "errmsg": "ok",
                                  "result": {"contact_type": 0, "userid": staff}})

    # --- files ----------------------------------------------------------------------------
    def give(self, name: str, data: bytes) -> str:
        """A file a person sends the robot; returns its downloadCode."""
        code = f"dc{next(self._n)}"
        self.files[code] = data
        return code

    async def file_url(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"code": "InvalidAuthentication"}, status=401)
        body = await request.json()
        return web.json_response({"downloadUrl": f"{self.base}/files/{body['downloadCode']}"})

    async def file(self, request: web.Request) -> web.Response:
        return web.Response(body=self.files[request.match_info["code"]])

    async def upload(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"errcode": 40014, "errmsg": "invalid access_token"})
        form = await request.post()
        media = form["media"]
        media_id = f"@media{next(self._n)}"
        self.media[media_id] = (form["type"], media.filename, media.file.read())
        return web.json_response({"errcode": 0, "errmsg": "ok", "media_id": media_id,
                                  "type": form["type"], "created_at": int(time.time() * 1000)})

    # --- messages -----------------------------------------------------------------------
    async def robot_send(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"code": "InvalidAuthentication"}, status=401)
        body = await request.json()
        to = body.get("openConversationId") and f"group:{body['openConversationId']}" or \
            f"user:{body['userIds'][0]}"
        if self.faults:
            fault = self.faults.pop(0)  # "ok" lets one through
            if fault == "qps":
                return web.json_response({"code": "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi",
                                          "message": "too many requests"}, status=403)
            if fault == "500":
                return web.json_response({"code": "ServiceUnavailable"}, status=500)
            if fault == "flow":
                return web.json_response({"processQueryKey": "", "flowControlledStaffIdList":
                                          [body["userIds"][0]]})
        self.sent.append({"to": to, "key": body["msgKey"], "param": json.loads(body["msgParam"]),
                          "order": time.monotonic()})
        return web.json_response({"processQueryKey": f"pqk{next(self._n)}"})

    async def session_reply(self, request: web.Request) -> web.Response:
        body = await request.json()
        read = body.get("text") or {"content": _words(body.get("markdown", {}).get("text", ""))}
        self.session_replies.append({"id": request.match_info["id"], **body, "text": read,
                                     "order": time.monotonic()})
        return web.json_response({"errcode": 0, "errmsg": "ok"})

    async def card_send(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"code": "InvalidAuthentication"}, status=401)
        body = await request.json()
        self.cards[body["cardBizId"]] = [json.loads(body["cardData"])["cardParamMap"]["text"]]
        return web.json_response({"processQueryKey": "card"})

    async def card_update(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"code": "InvalidAuthentication"}, status=401)
        body = await request.json()
        self.cards[body["cardBizId"]].append(json.loads(body["cardData"])["cardParamMap"]["text"])
        return web.json_response({"success": True})

    def texts(self, to: str) -> list[str]:
        """Text and markdown messages, as their readers read them (a markdown image aside)."""
        return [m["param"].get("content") or _words(m["param"].get("text", ""))
                for m in self.sent
                if m["to"] == to and m["key"] in ("sampleText", "sampleMarkdown")]

    def images(self, to: str) -> list[bytes]:
        """Every picture shown: image messages, and images markdown shows by media id."""
        shown = []
        for m in self.sent + [{"to": to, "key": "session", "param": r.get("markdown", {})}
                              for r in self.session_replies]:
            if m["to"] != to:
                continue
            if m["key"] == "sampleImageMsg":
                shown.append(m["param"]["photoURL"])
            shown += re.findall(r"!\[[^\]]*\]\((@[^)]+)\)", m["param"].get("text", ""))
        return [self.media[media][2] for media in shown]

    def messages(self, to: str) -> list[dict]:
        """What the conversation shows, in order: robot messages and replies by link."""
        sent = [m for m in self.sent if m["to"] == to]
        return sorted(sent + [r for r in self.session_replies if r.get("to", to) == to],
                      key=lambda m: m["order"])

    # --- the Stream gateway ------------------------------------------------------------------
    async def open_connection(self, request: web.Request) -> web.Response:
        body = await request.json()
        if (body.get("clientId"), body.get("clientSecret")) != (APP_KEY, APP_SECRET):
            return web.json_response({"code": "invalid"}, status=401)
        assert {"type": "CALLBACK", "topic": TOPIC} in body["subscriptions"]
        return web.json_response({"endpoint": f"{self.base.replace('http', 'ws')}/stream",
                                  "ticket": f"ticket-{next(self._n)}"})

    async def stream(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        self.sockets.append(ws)
        try:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    self.acks.append(json.loads(msg.data))
        finally:
            self.sockets.remove(ws)
        return ws

    async def push(self, data: dict) -> str:
        """A robot message down the Stream connection, as a CALLBACK frame."""
        message_id = f"frame-{next(self._n)}"
        await self.sockets[-1].send_json({
            "specVersion": "1.0", "type": "CALLBACK",
            "headers": {"messageId": message_id, "topic": TOPIC, "contentType": "application/json",
                        "time": str(int(time.time() * 1000)), "appId": APP_KEY},
            "data": json.dumps(data, ensure_ascii=False)})
        return message_id

    async def ping(self) -> str:
        """The gateway's keep-alive: a SYSTEM frame the client must echo."""
        message_id = f"ping-{next(self._n)}"
        await self.sockets[-1].send_json({
            "specVersion": "1.0", "type": "SYSTEM",
            "headers": {"messageId": message_id, "topic": "ping", "contentType": "application/json",
                        "time": str(int(time.time() * 1000))},
            "data": json.dumps({"opaque": message_id})})
        return message_id

    async def drop(self) -> None:
        """The connection dies (a network blip, a gateway restart)."""
        for ws in list(self.sockets):
            await ws.close()


def robot_message(fake: FakeDingTalk, *, user: str = "staff1", group: str | None = None,
                  text: str | None = None, file: tuple[str, bytes] | None = None,
                  admin: bool = False, expired: bool = False) -> dict:
    """What DingTalk delivers for one message to the robot (callback body or Stream data)."""
    n = next(fake._n)
    body = {"msgId": f"msg{n}", "createAt": int(time.time() * 1000),
            "conversationType": "2" if group else "1",
            "conversationId": group or f"cid-{user}", "senderId": f"$:{user}",
            "senderStaffId": user, "senderNick": user, "senderCorpId": "corp1",
            "isAdmin": admin, "chatbotUserId": "$:bot", "robotCode": APP_KEY,
            "sessionWebhook": f"{fake.base}/robot/sendBySession/{n}",
            "sessionWebhookExpiredTime": int((time.time() + (-10 if expired else 5400)) * 1000)}
    if file:
        body.update(msgtype="file", content={"downloadCode": fake.give(*file), "fileName": file[0]})
    else:
        body.update(msgtype="text", text={"content": f" {text}" if group else text})
    return body


def sign(timestamp: int, secret: str = APP_SECRET) -> str:
    return base64.b64encode(hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(),
                                     hashlib.sha256).digest()).decode()


async def post_callback(session: aiohttp.ClientSession, url: str, body: dict, *,
                        timestamp: int | None = None, secret: str = APP_SECRET) -> int:
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    async with session.post(f"{url}/dingtalk/callback", json=body,
                            headers={"timestamp": str(ts), "sign": sign(ts, secret)}) as r:
        return r.status


# --- the service with the DingTalk adapter, on this fake ------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ASSETS = EXAMPLES / "assets"
SHEET = (EXAMPLES / "social_thumb.xlsx").read_bytes()


def ding_config(tmp_path, demo_models, fake: FakeDingTalk, *, chat=None, **dingtalk):
    from tests.conftest import executor_config
    return executor_config(
        tmp_path / "data", demo_models, service={"port": 0},
        chat={"progress_every": 0.5, "admins": ["dingtalk:boss"], **(chat or {})},
        dingtalk={"app_key": APP_KEY, "app_secret": APP_SECRET, "api_url": fake.base,
                  "oapi_url": fake.base, **dingtalk})


class DingWorld(ServiceWorld):
    def __init__(self, config, fake: FakeDingTalk):
        super().__init__(config)
        self.fake = fake
        self.stamp = 0  # the last callback timestamp (ms): each signature serves one message

    def timestamp(self) -> int:
        self.stamp = max(int(time.time() * 1000), self.stamp + 1)
        return self.stamp

    async def __aenter__(self) -> DingWorld:
        await super().__aenter__()
        self.session = aiohttp.ClientSession()
        if self.config.dingtalk.mode == "stream":
            await self.until(lambda: self.fake.sockets)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.session.close()
        await super().__aexit__(*exc)

    async def say(self, **message) -> dict:
        """A person writes to the robot: over Stream, or by the signed HTTP callback."""
        body = robot_message(self.fake, **message)
        if self.config.dingtalk.mode == "stream":
            frame = await self.fake.push(body)
            await self.until(lambda: [a for a in self.fake.acks
                                      if a["headers"]["messageId"] == frame])
        else:
            assert await post_callback(self.session, self.url, body,
                                       timestamp=self.timestamp()) == 200
        return body

    async def gen(self, text: str = "/gen social_thumb social_thumb.xlsx", **where) -> None:
        """/gen, and wait for its acceptance (the work runs after the acknowledgement)."""
        before = len(self.fake.session_replies)
        await self.say(text=text, **where)
        await self.until(lambda: [r for r in self.fake.session_replies[before:]
                                  if "已接收" in r["text"]["content"]
                                  or "accepted" in r["text"]["content"]])

    async def send_sheet_and_pictures(self, user: str = "staff1") -> None:
        """One file per message: that is how DingTalk delivers files to a robot (1:1 only)."""
        await self.say(user=user, file=("social_thumb.xlsx", SHEET))
        for name in ("bottle.png", "chair.png"):
            await self.say(user=user, file=(name, (ASSETS / name).read_bytes()))
