"""The dashboard: one page of plain HTML and JS over the REST API, in the same app.

Nothing is built at install: bot/web/ holds the page, its script and its styles as
served. Sign-in trades an API token for a session cookie (bot.web.sessions); the page then
calls /api/v1 with it, so the API decides everything — an admin button a viewer might
reach is refused there, not just hidden here.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from pathlib import Path

from aiohttp import web
from msgspec import Struct, structs

from bot.settings import DingTalkConfig, SlackConfig
from bot.web.api import Api
from bot.web.callers import who_of
from bot.web.http import ApiError, respond
from bot.web.me import Caller, caller
from bot.web.sessions import foreign
from bot.web.signin import DingTalkSignIn, SignIn, SlackSignIn

WEB = Path(__file__).parent / "static"
ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}
FONTS = {"genbot-cjk.woff2": "font/woff2", "genbot-cjk-names.woff2": "font/woff2",
         "OFL.txt": "text/plain; charset=utf-8"}  # in static/fonts/ (app.css)
# The page loads only its own script, styles and font; it talks to its own origin only.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "font-src 'self'; img-src 'self' data:; connect-src 'self'; "
                               "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
    "Cache-Control": "no-cache"}
SIGN_IN_TRIES = 10  # wrong tokens per address per minute before wrong ones are slowed
SLOW_DOWN = 1.0  # seconds a wrong token waits for its answer past that


class Me(Caller, kw_only=True):
    """Who is signed in (their role, what they may do, their priorities), and the CSRF
    token the page sends."""
    csrf: str


class SignedOut(Struct):
    signed_out: bool


class SignIns(Struct):
    slack: bool  # "Sign in with Slack" ([slack] client_id and client_secret)
    dingtalk: bool  # "Sign in with DingTalk" ([dingtalk] sign_in)


class Dashboard:
    def __init__(self, api: Api):
        self.api, self.sessions = api, api.sessions
        self.failures: dict[str, deque[float]] = {}
        config = api.app.config
        self.own_signins: list[SignIn] = [
            *([SlackSignIn(config, self.sessions)] if config[SlackConfig].signs_in else []),
            *([DingTalkSignIn(config, self.sessions)] if config[DingTalkConfig].signs_in
              else [])]

    def routes(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/", self.home)
        r.add_get("/dashboard", self.home)
        r.add_get("/dashboard/", self.page)
        r.add_get("/dashboard/{asset:app\\.(?:js|css)}", self.asset)
        r.add_get("/dashboard/fonts/{font}", self.font)
        r.add_get("/dashboard/session", self.session)
        r.add_post("/dashboard/session", self.sign_in)
        r.add_delete("/dashboard/session", self.sign_out)
        r.add_get("/dashboard/signins", self.signins)
        for signin in self.own_signins:
            signin.routes(app)
            app.on_cleanup.append(signin.close)

    async def signins(self, request: web.Request) -> web.Response:
        """How one may sign in besides a token (the sign-in page's buttons): public."""
        offered = {s.platform for s in self.own_signins}
        return respond(SignIns(slack="slack" in offered, dingtalk="dingtalk" in offered))

    async def home(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/dashboard/")

    async def page(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(WEB / "index.html", headers=HEADERS)

    async def asset(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["asset"]
        return web.FileResponse(WEB / name, headers={**HEADERS, "Content-Type": ASSETS[name]})

    async def font(self, request: web.Request) -> web.StreamResponse:
        """The Chinese web font (app.css) and its licence. It changes only with a release:
        cached for a day, then checked again (ETag)."""
        name = request.match_info["font"]
        if name not in FONTS:
            raise web.HTTPNotFound()
        return web.FileResponse(WEB / "fonts" / name, headers={
            **HEADERS, "Content-Type": FONTS[name], "Cache-Control": "public, max-age=86400"})

    async def session(self, request: web.Request) -> web.Response:
        """Who is signed in, their role, what they may do and the CSRF token the page sends."""
        session = await self.sessions.of(request)
        if session is None:
            raise ApiError(401, "unauthorized", "sign in with an API token")
        return respond(await self._describe(session.user, session.csrf))

    async def sign_in(self, request: web.Request) -> web.Response:
        """A valid token always signs in, however many wrong ones came from the same
        address (behind a proxy, everyone shares one); past SIGN_IN_TRIES a minute, each
        wrong one waits and is answered 429."""
        if foreign(request):  # no signing someone in from another site
            raise ApiError(403, "csrf", "sign in from the dashboard's own page")
        try:
            token = str((await request.json()).get("token", "")).strip()
        except (ValueError, AttributeError):
            raise ApiError(400, "bad_json", 'send {"token": "…"}') from None
        cookie = self.sessions.issue(token) if token else None
        if cookie is None:
            address, now = request.remote or "?", time.monotonic()
            if len(self.failures) > 10_000:  # forget addresses quiet for a minute
                self.failures = {a: d for a, d in self.failures.items() if now - d[-1] < 60}
            recent = self.failures.setdefault(address, deque(maxlen=SIGN_IN_TRIES))
            limited = len(recent) == SIGN_IN_TRIES and now - recent[0] < 60
            recent.append(now)
            if limited:
                await asyncio.sleep(SLOW_DOWN)
                raise ApiError(429, "too_many_tries", "too many wrong tokens; wait a minute",
                               headers={"Retry-After": "60"})
            raise ApiError(401, "unauthorized", "that token is not one of [api] tokens")
        session = self.sessions.read(cookie)
        assert session is not None, "a cookie just issued reads back"
        response = respond(await self._describe(session.user, session.csrf))
        self.sessions.set_cookie(response, cookie, request)
        return response

    async def sign_out(self, request: web.Request) -> web.Response:
        """Ends the session on the server too: a copy of the cookie is refused from now."""
        session = await self.sessions.of(request)
        if session is not None and (why := self.sessions.forged(request, session)):
            raise ApiError(403, "csrf", why)
        if session is not None:
            await self.api.app.access.end_session(session.nonce, session.expires)
        response = respond(SignedOut(True))
        self.sessions.clear_cookie(response)
        return response

    async def _describe(self, user: str, csrf: str) -> Me:
        found = await caller(self.api.app, who_of(user))
        return Me(**structs.asdict(found), csrf=csrf)
