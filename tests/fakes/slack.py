"""A Slack Web API on loopback, speaking what genbot and slack_sdk call, with fault switches;
and helpers that sign requests as Slack does and post them to the service's /slack/events."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
from aiohttp import web
from slack_sdk.signature import SignatureVerifier

from tests.fakes.chat import ServiceWorld

TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-test-token"
SECRET = "test-signing-secret"
CLIENT_ID, CLIENT_SECRET = "1111.2222", "test-client-secret"  # Sign in with Slack
BOT = "UBOT"
LOGIN_PAGE = "<!DOCTYPE html><html><body>Sign in to Slack</body></html>"


IMAGE_TYPES = (".png", ".jpg", ".jpeg", ".gif")  # what an image block's slack_file may show
BLOCK_TYPES = {"section", "image", "actions", "context", "divider", "header", "input"}


class FakeSlack:
    def __init__(self):
        # what the bot posted: channel, ts, thread_ts, text, blocks, updates; and for a
        # message with an image block, `file`: the uploaded file it shows
        self.messages: list[dict] = []
        # what the bot uploaded: id, name, data, channel, thread_ts, comment, ts (the
        # message that shares it; channel, thread_ts and ts are None for a file not shared)
        self.files: list[dict] = []
        # How many times each newly completed file is "still processing" when a block names
        # it (Slack finishes files after completeUploadExternal answers), and the refusals.
        self.processing = 0
        self.not_ready: list[str] = []
        self.shared: dict[str, dict] = {}  # files people shared: id -> {name, data}
        self.responses: list[dict] = []  # posts to response_url
        self.views: list[dict] = []  # modals opened: {"id", "trigger_id", "view"}
        self.ephemeral: list[dict] = []  # chat.postEphemeral: channel, user, text, thread_ts
        self.people: dict[str, dict] = {}  # users.info answers
        self.faults: list[tuple[int, dict]] = []  # (status, headers) for the next Web API calls
        self.calls: Counter = Counter()
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self._uploads: dict[str, dict] = {}
        self._done: dict[str, dict] = {}  # completed uploads by id
        self.not_in: set[str] = set()  # channels the bot was never invited to
        self.sockets: list[web.WebSocketResponse] = []  # Socket Mode connections
        self.acks: list[dict] = []  # what came back over them
        # Stall the upload that completes after this many: the test kills the service meanwhile.
        self.stall_after: int | None = None
        self.stalled = asyncio.Event()
        self.release = asyncio.Event()
        # Sign in with Slack (OpenID Connect): who consents on the authorize page (None:
        # they press Cancel), the codes given and the access tokens they were traded for.
        self.signin: tuple[str, str] | None = ("U1", "T1")  # user, team
        self.codes: dict[str, dict] = {}
        self.access: dict[str, tuple[str, str]] = {}

    async def start(self) -> FakeSlack:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/api/{method}", self.api)
        app.router.add_get("/api/{method}", self.api)
        app.router.add_get("/download/{id}", self.download)
        app.router.add_post("/upload/{id}", self.upload)
        app.router.add_post("/respond/{id}", self.respond)
        app.router.add_get("/socket", self.socket)
        app.router.add_get("/openid/connect/authorize", self.authorize)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.base = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def stop(self) -> None:
        await self.runner.cleanup()

    @property
    def api_url(self) -> str:
        return f"{self.base}/api/"

    # --- what people do -------------------------------------------------------------
    def share(self, name: str, data: bytes, *, complete: bool = True) -> dict:
        """A file a person shares, as a file_share event lists it."""
        fid = f"F{next(self._ids):04d}"
        self.shared[fid] = {"name": name, "data": data}
        if not complete:  # Slack sometimes sends only the id: files.info tells the rest
            return {"id": fid, "file_access": "check_file_info"}
        return self._file(fid)

    def _file(self, fid: str) -> dict:
        f = self.shared[fid]
        return {"id": fid, "name": f["name"], "title": f["name"], "size": len(f["data"]),
                "mimetype": "application/octet-stream",
                "url_private": f"{self.base}/download/{fid}",
                "url_private_download": f"{self.base}/download/{fid}?dl=1"}

    def response_url(self) -> str:
        return f"{self.base}/respond/{next(self._ids)}"

    # --- reading what the bot did -------------------------------------------------------
    def thread(self, ts: str) -> list[dict]:
        """Everything in a thread, messages and shared files, in the order posted."""
        items = [m for m in self.messages if m["thread_ts"] == ts] + \
            [f for f in self.files if f["thread_ts"] == ts]
        return sorted(items, key=lambda x: x["order"])

    def top(self, channel: str) -> list[dict]:
        return [m for m in self.messages if m["channel"] == channel and not m["thread_ts"]]

    def posts(self, channel: str) -> list[dict]:
        """Every message the bot put in a channel (its threads too), as people count them:
        a chat.postMessage is one, a file share is one however many files it carries."""
        shares = {f["ts"]: f for f in self.files if f["channel"] == channel}
        items = [m for m in self.messages if m["channel"] == channel] + list(shares.values())
        return sorted(items, key=lambda x: x["order"])

    @staticmethod
    def images(items: list[dict]) -> list[dict]:
        """The messages among `items` that show an image (an image block)."""
        return [m for m in items if m.get("file")]

    @staticmethod
    def label(item: dict) -> str:
        """A post as told apart in a thread: the name of the file it shows or shares, else
        the start of its text."""
        return (item.get("file") or item).get("name") or item["text"][:20]

    # --- the Web API ------------------------------------------------------------------
    async def api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        self.calls[method] += 1
        args = dict(request.query)
        if request.content_type == "application/json":
            args.update(await request.json())
        elif request.can_read_body:
            args.update(await request.post())
        if method == "openid.connect.token":
            return web.json_response(self.oidc_token(request, args))
        if method == "openid.connect.userInfo":
            return web.json_response(self.oidc_user(request, args))
        token = (request.headers.get("Authorization", "").removeprefix("Bearer ")
                 or args.get("token"))
        if token != (APP_TOKEN if method == "apps.connections.open" else TOKEN):
            return web.json_response({"ok": False, "error": "invalid_auth"})
        if self.faults and method not in ("auth.test", "users.info"):
            status, headers = self.faults.pop(0)
            error = "ratelimited" if status == 429 else "internal_error"
            return web.json_response({"ok": False, "error": error}, status=status, headers=headers)
        if method == "files.completeUploadExternal" and self.stall_after is not None and \
                len(self.files) >= self.stall_after:
            self.stall_after = None
            self.stalled.set()
            await self.release.wait()
            if request.transport is None or request.transport.is_closing():
                return web.Response(status=499)  # the caller died: nothing was posted
        if method == "chat.postMessage" and args.get("channel") in self.not_in:
            return web.json_response({"ok": False, "error": "not_in_channel"})
        handler = getattr(self, "m_" + method.replace(".", "_"), None)
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"})
        return web.json_response({"ok": True, **handler(args)})

    # --- Sign in with Slack: as docs.slack.dev describes openid/connect/authorize,
    # openid.connect.token (client id and secret by HTTP Basic or in the form, one use per
    # code, the same redirect_uri) and openid.connect.userInfo (the access token) -----------
    async def authorize(self, request: web.Request) -> web.StreamResponse:
        q = request.query
        scopes = set(q.get("scope", "").replace(",", " ").split())
        if q.get("response_type") != "code" or q.get("client_id") != CLIENT_ID or \
                "openid" not in scopes or not q.get("redirect_uri") or not q.get("state"):
            return web.Response(status=400, text="bad authorize request")
        target = q["redirect_uri"]
        if self.signin is None:
            raise web.HTTPFound(f"{target}?error=access_denied&state={q['state']}")
        code = f"code-{next(self._ids)}"
        self.codes[code] = {"redirect_uri": target, "who": self.signin, "nonce": q.get("nonce")}
        raise web.HTTPFound(f"{target}?code={code}&state={q['state']}")

    def oidc_token(self, request: web.Request, args: dict) -> dict:
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            client, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
        else:
            client, secret = args.get("client_id", ""), args.get("client_secret", "")
        if (client, secret) != (CLIENT_ID, CLIENT_SECRET):
            return {"ok": False, "error": "invalid_client_id"}
        given = self.codes.pop(args.get("code", ""), None)
        if given is None:
            return {"ok": False, "error": "invalid_code"}
        if given["redirect_uri"] != args.get("redirect_uri"):
            return {"ok": False, "error": "bad_redirect_uri"}
        token = f"xoxp-signin-{next(self._ids)}"
        self.access[token] = given["who"]
        return {"ok": True, "access_token": token, "token_type": "Bearer", "id_token": "x.y.z"}

    def oidc_user(self, request: web.Request, args: dict) -> dict:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ") \
            or args.get("token", "")
        if token not in self.access:
            return {"ok": False, "error": "invalid_auth"}
        user, team = self.access[token]
        return {"ok": True, "sub": user, "https://slack.com/user_id": user,
                "https://slack.com/team_id": team, "name": f"person {user}"}

    def m_auth_test(self, a):
        return {"url": "https://fake.slack.com/", "team": "Fake", "user": "genbot",
                "team_id": "T1", "user_id": BOT, "bot_id": "B1"}

    def m_apps_connections_open(self, a):
        return {"url": f"{self.base.replace('http', 'ws')}/socket"}

    async def socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"type": "hello", "num_connections": 1,
                            "debug_info": {"host": "fake"}, "connection_info": {"app_id": "A1"}})
        self.sockets.append(ws)
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                self.acks.append(json.loads(msg.data))
        self.sockets.remove(ws)
        return ws

    async def push(self, kind: str, payload: dict) -> str:
        """An envelope down the Socket Mode connection, as Slack sends one."""
        envelope = f"env-{next(self._ids)}"
        await self.sockets[-1].send_json({"envelope_id": envelope, "type": kind,
                                          "payload": payload, "accepts_response_payload": True,
                                          "retry_attempt": 0})
        return envelope

    def m_users_info(self, a):
        return {"user": {"id": a["user"], **self.people.get(a["user"], {})}}

    def m_files_info(self, a):
        return {"file": self._file(a["file"])}

    def m_chat_postMessage(self, a):
        ts = f"{1_700_000_000 + next(self._ts)}.000100"
        blocks = self.checked(a.get("blocks"))
        shown = [self._done[b["slack_file"]["id"]] for b in blocks or ()
                 if b["type"] == "image" and "slack_file" in b]
        self.messages.append({"channel": a["channel"], "ts": ts, "thread_ts": a.get("thread_ts"),
                              "text": a.get("text", ""), "updates": [], "order": time.monotonic(),
                              "blocks": blocks, **({"file": shown[0]} if shown else {})})
        return {"channel": a["channel"], "ts": ts}

    def checked(self, blocks) -> list[dict] | None:
        """`blocks` as Slack reads them, or Slack's refusal: invalid_blocks, each error with
        its json-pointer (a missing alt_text, a slack_file not uploaded, not completed or
        still processing, an empty text, a button without an action_id, …)."""
        if blocks is None:
            return None
        try:
            blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
        except ValueError:
            raise refusal("invalid_blocks_format") from None
        if not isinstance(blocks, list) or len(blocks) > 50:
            raise refusal("invalid_blocks_format")
        errors = [f"{problem} [json-pointer:/blocks/{i}{where}]"
                  for i, block in enumerate(blocks) for problem, where in self._block(block)]
        if errors:
            raise refusal("invalid_blocks", errors=errors,
                          response_metadata={"messages": [f"[ERROR] {e}" for e in errors]})
        return blocks

    def _block(self, b) -> list[tuple[str, str]]:
        if not isinstance(b, dict) or b.get("type") not in BLOCK_TYPES:
            return [("unsupported type", "/type")]
        if b["type"] == "section":
            return text_problems(b.get("text"), "/text", 3000)
        if b["type"] == "actions":
            elements = b.get("elements")
            if not isinstance(elements, list) or not 0 < len(elements) <= 25:
                return [("must have 1 to 25 elements", "/elements")]
            return [(p, f"/elements/{i}{w}") for i, e in enumerate(elements)
                    for p, w in button_problems(e)]
        if b["type"] != "image":
            return []
        problems = []
        alt = b.get("alt_text")
        if not isinstance(alt, str):
            problems.append(("missing required field: alt_text", ""))
        elif not 0 < len(alt) <= 2000:
            problems.append(("must be 1 to 2000 characters", "/alt_text"))
        if ("image_url" in b) == ("slack_file" in b):
            return [*problems, ("must provide either image_url or slack_file", "")]
        if "slack_file" in b:
            ref = b["slack_file"]
            fid = ref.get("id") if isinstance(ref, dict) and "url" not in ref else None
            if not self._ready(fid):
                problems.append(("invalid slack file", "/slack_file"))
        return problems

    def _ready(self, fid) -> bool:
        """An uploaded, completed image, processed by now (see `processing`)."""
        f = self._done.get(fid) if isinstance(fid, str) else None
        if f is None or not f["name"].lower().endswith(IMAGE_TYPES):
            return False
        if f["processing"] > 0:
            f["processing"] -= 1
            self.not_ready.append(fid)
            return False
        return True

    def m_views_open(self, a):
        """A modal; Slack refuses a trigger used before or older than 3 s (here: used)."""
        view = json.loads(a["view"]) if isinstance(a["view"], str) else a["view"]
        if any(v["trigger_id"] == a["trigger_id"] for v in self.views):
            raise refusal("expired_trigger_id")
        opened = {"id": f"V{next(self._ids):04d}", "hash": f"h{next(self._ids)}",
                  "trigger_id": a["trigger_id"], "view": view}
        self.views.append(opened)
        return {"view": {"id": opened["id"], "hash": opened["hash"], **view}}

    def m_reactions_get(self, a):
        """A message by channel and ts, with the files it shares (a message of ours, or a
        file upload's share)."""
        for m in self.messages:
            if (m["channel"], m["ts"]) == (a["channel"], a["timestamp"]):
                return {"type": "message", "channel": m["channel"],
                        "message": {"ts": m["ts"], "text": m["text"], "blocks": m["blocks"]}}
        for f in self.files:
            if (f["channel"], f["ts"]) == (a["channel"], a["timestamp"]):
                return {"type": "message", "channel": f["channel"], "message": {
                    "ts": f["ts"], "text": f["comment"] or "", "files": [{"id": f["id"]}]}}
        raise refusal("message_not_found")

    def m_chat_postEphemeral(self, a):
        self.checked(a.get("blocks"))
        self.ephemeral.append({"channel": a["channel"], "user": a["user"],
                               "text": a.get("text", ""), "thread_ts": a.get("thread_ts")})
        return {"message_ts": f"{1_700_000_000 + next(self._ts)}.000100"}

    def m_chat_update(self, a):
        m = next((m for m in self.messages if m["ts"] == a["ts"]), None)
        if m is None:
            raise refusal("message_not_found")
        m["updates"].append({"text": a.get("text", ""), "blocks": self.checked(a.get("blocks"))})
        return {"channel": a["channel"], "ts": a["ts"]}

    def m_files_getUploadURLExternal(self, a):
        fid = f"FU{next(self._ids):04d}"
        self._uploads[fid] = {"name": a["filename"], "length": int(a["length"]), "data": None}
        return {"upload_url": f"{self.base}/upload/{fid}", "file_id": fid}

    def m_files_completeUploadExternal(self, a):
        """Without channel_id the files stay private (the bot's, shared nowhere); with it
        one message shares them all (the comment its text)."""
        done = []
        channel = a.get("channel_id")
        ts = f"{1_700_000_000 + next(self._ts)}.000100" if channel else None
        for f in json.loads(a["files"]):
            up = self._uploads.get(f["id"])
            if up is None or up["data"] is None:
                raise refusal("file_not_found" if up is None else "file_upload_not_complete")
            self.files.append({"id": f["id"], "name": up["name"], "data": up["data"],
                               "channel": channel, "thread_ts": a.get("thread_ts") if channel
                               else None, "comment": a.get("initial_comment"),
                               "order": time.monotonic(), "ts": ts,  # the message sharing it
                               "processing": self.processing})
            self._done[f["id"]] = self.files[-1]
            done.append({"id": f["id"], "name": up["name"], "title": f.get("title")})
        return {"files": done}

    async def upload(self, request: web.Request) -> web.Response:
        self._uploads[request.match_info["id"]]["data"] = await request.read()
        return web.Response(text="OK")

    async def download(self, request: web.Request) -> web.Response:
        self.calls["download"] += 1
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.Response(text=LOGIN_PAGE, content_type="text/html")  # as Slack does
        return web.Response(body=self.shared[request.match_info["id"]]["data"],
                            content_type="application/octet-stream")

    async def respond(self, request: web.Request) -> web.Response:
        self.responses.append(await request.json())
        return web.Response(text="ok")


def refusal(error: str, **more) -> web.HTTPOk:
    """Slack's way of saying no: HTTP 200, ok false, the error (and details)."""
    return web.HTTPOk(text=json.dumps({"ok": False, "error": error, **more}),
                      content_type="application/json")


def text_problems(text, where: str, limit: int) -> list[tuple[str, str]]:
    if not isinstance(text, dict) or text.get("type") not in ("mrkdwn", "plain_text"):
        return [("must be a text object", where)]
    if not isinstance(text.get("text"), str) or not 0 < len(text["text"]) <= limit:
        return [(f"must be 1 to {limit} characters", f"{where}/text")]
    return []


def button_problems(e) -> list[tuple[str, str]]:
    if not isinstance(e, dict) or e.get("type") != "button":
        return [("unsupported type", "/type")]
    problems = text_problems(e.get("text"), "/text", 75)
    if e.get("text", {}).get("type") != "plain_text":
        problems.append(("must be plain_text", "/text/type"))
    if not isinstance(e.get("action_id"), str) or not 0 < len(e["action_id"]) <= 255:
        problems.append(("must be 1 to 255 characters", "/action_id"))
    if not isinstance(e.get("value", ""), str) or len(e.get("value", "")) > 2000:
        problems.append(("must be at most 2000 characters", "/value"))
    return problems


# --- Slack's side of /slack/events ---------------------------------------------------------

def signed_headers(body: str, content_type: str, *, timestamp: int | None = None,
                   secret: str = SECRET, retry: int | None = None) -> dict:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    headers = {"Content-Type": content_type, "X-Slack-Request-Timestamp": ts,
               "X-Slack-Signature": SignatureVerifier(secret).generate_signature(
                   timestamp=ts, body=body)}
    if retry is not None:
        headers.update({"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"})
    return headers


class SlackClient:
    """Posts signed events, slash commands and clicks to the service, as Slack would."""

    def __init__(self, service_url: str, fake: FakeSlack):
        self.url = f"{service_url}/slack/events"
        self.fake = fake
        self._n = itertools.count(1)
        self.session = aiohttp.ClientSession()

    async def close(self) -> None:
        await self.session.close()

    async def post(self, body: str, content_type: str, **sign) -> aiohttp.ClientResponse:
        async with self.session.post(self.url, data=body.encode(),
                                     headers=signed_headers(body, content_type, **sign)) as r:
            await r.read()
            return r

    async def event(self, event: dict, *, event_id: str | None = None, **sign):
        body = json.dumps({"token": "x", "team_id": "T1", "api_app_id": "A1",
                           "type": "event_callback", "event_id": event_id or f"Ev{next(self._n)}",
                           "event_time": int(time.time()), "event": event,
                           "authorizations": [{"team_id": "T1", "user_id": BOT, "is_bot": True}]})
        return await self.post(body, "application/json", **sign)

    async def message(self, text: str, *, user: str = "U1", channel: str = "C1",
                      files: list[dict] = (), im: bool = False, thread_ts: str | None = None,
                      **sign):
        ts = f"{1_600_000_000 + next(self._n)}.000200"
        event = {"type": "message", "user": user, "channel": channel, "text": text, "ts": ts,
                 "channel_type": "im" if im else "channel", "event_ts": ts}
        if files:
            event.update(subtype="file_share", files=list(files))
        if thread_ts:
            event["thread_ts"] = thread_ts
        return await self.event(event, **sign), ts

    async def submit(self, opened: dict, answers: dict[str, str], *, user: str = "U1",
                     **sign):
        """The person submits a modal the bot opened, with `answers` (field -> text;
        the others as they were filled in), as Slack posts a view_submission."""
        view = opened["view"]
        values = {}
        for block in view["blocks"]:
            element = block["element"]
            value = answers.get(element["action_id"], element.get("initial_value"))
            values[block["block_id"]] = {element["action_id"]: {"type": "plain_text_input",
                                                               "value": value}}
        payload = {"type": "view_submission", "team": {"id": "T1"}, "user": {"id": user},
                   "api_app_id": "A1", "trigger_id": f"t{next(self._n)}",
                   "view": {**view, "id": opened["id"], "hash": opened["hash"],
                            "state": {"values": values}}}
        return await self.post(urlencode({"payload": json.dumps(payload)}),
                               "application/x-www-form-urlencoded", **sign)

    async def react(self, message: dict, emoji: str, *, user: str = "U1",
                    removed: bool = False, **sign):
        """A person puts an emoji on (or takes it off) a message the bot posted."""
        return await self.event({
            "type": "reaction_removed" if removed else "reaction_added", "user": user,
            "reaction": emoji, "item_user": BOT, "event_ts": f"{time.time():.6f}",
            "item": {"type": "message", "channel": message["channel"], "ts": message["ts"]}},
            **sign)

    async def command(self, command: str, text: str = "", *, user: str = "U1",
                      channel: str = "C1", **sign):
        body = urlencode({"token": "x", "team_id": "T1", "team_domain": "fake",
                          "channel_id": channel, "channel_name": "general", "user_id": user,
                          "user_name": user.lower(), "command": command, "text": text,
                          "api_app_id": "A1", "response_url": self.fake.response_url(),
                          "trigger_id": f"trig{next(self._n)}"})
        return await self.post(body, "application/x-www-form-urlencoded", **sign)

    async def click(self, message: dict, *, user: str = "U1", action: str | None = None,
                    action_ts: str | None = None, **sign):
        """A click on the message's button (its first, or the one whose action_id is
        `action`); `action_ts` as Slack stamps it (the same for a resent interaction)."""
        shown = message["updates"][-1]["blocks"] if message["updates"] else message["blocks"]
        buttons = shown[-1]["elements"]
        button = next(b for b in buttons if action in (None, b["action_id"]))
        payload = {"type": "block_actions", "user": {"id": user}, "team": {"id": "T1"},
                   "api_app_id": "A1", "channel": {"id": message["channel"]},
                   "container": {"type": "message", "message_ts": message["ts"],
                                 "thread_ts": message["thread_ts"],
                                 "channel_id": message["channel"]},
                   "response_url": self.fake.response_url(), "trigger_id": f"t{next(self._n)}",
                   "actions": [{"action_id": button["action_id"], "block_id": "b",
                                "value": button["value"], "type": "button",
                                "action_ts": action_ts or f"{time.time():.6f}"}]}
        return await self.post(urlencode({"payload": json.dumps(payload)}),
                               "application/x-www-form-urlencoded", **sign)


# --- the service with the Slack adapter, on this fake ---------------------------------

ASSETS = Path(__file__).resolve().parents[2] / "examples" / "assets"


def slack_config(tmp_path, demo_models, fake: FakeSlack, *, chat=None, sections=None,
                 **slack):
    """`sections`: more of the config, e.g. {"webhooks": [...]}."""
    from tests.conftest import executor_config
    return executor_config(
        tmp_path / "data", demo_models, service={"port": 0},
        chat={"progress_every": 0.5, "admins": ["slack:BOSS"], "viewers": ["slack:V"],
              **(chat or {})},
        slack={"bot_token": TOKEN, "signing_secret": SECRET, "api_url": fake.api_url, **slack},
        **(sections or {}))


class SlackWorld(ServiceWorld):
    """The real service with the Slack adapter, and a Slack that signs what it posts."""

    def __init__(self, config, fake: FakeSlack):
        super().__init__(config)
        self.fake = fake

    async def __aenter__(self) -> SlackWorld:
        await super().__aenter__()
        self.slack = SlackClient(self.url, self.fake)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.slack.close()
        await super().__aexit__(*exc)


def six_thumbs(fake: FakeSlack) -> list[dict]:
    """six.csv (six social_thumb rows) and the two pictures it names, shared on `fake`."""
    rows = "\n".join(f"{n},Title {i}" for i, n in enumerate(["bottle.png", "chair.png"] * 3))
    return [fake.share("six.csv", f"image,title\n{rows}\n".encode()),
            *[fake.share(n, (ASSETS / n).read_bytes()) for n in ("bottle.png", "chair.png")]]
