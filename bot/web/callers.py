"""Who is asking: api:USER, from a Bearer token of [api] tokens or the dashboard's
session cookie (or slack:U…, signed in with Slack), settled before anything else is
looked at (401, never a 404 that would say what exists); then the application layer says
whether they may."""

from __future__ import annotations

from typing import TypeVar

from aiohttp import web
from msgspec import Struct

from bot.app.application import App
from bot.app.permissions import Who
from bot.settings import ApiConfig, DingTalkConfig, SlackConfig
from bot.web.http import PREFIX, SMALL_BODY, ApiError, json_body
from bot.web.sessions import API, Sessions, session_secret

R = TypeVar("R", bound=Struct)
EVENTS = f"{PREFIX}/events"  # scripts' WebSockets may not set headers: a token in the query


def who_of(principal: str) -> Who:
    """platform:user as the application layer knows them: the same person, role and
    limits as in that platform's chat (asking from the API, not a conversation)."""
    platform, _, user = principal.partition(":")
    return Who(platform, user, API)


class Callers:
    def __init__(self, app: App):
        self.app = app
        config = app.config
        self.tokens = {t: u for t, _, u in (e.partition("=") for e in config[ApiConfig].tokens)}
        slack, dingtalk = config[SlackConfig], config[DingTalkConfig]
        signins = {**({"slack": slack.client_id} if slack.signs_in else {}),
                   **({"dingtalk": dingtalk.app_key} if dingtalk.signs_in else {})}
        self.sessions = Sessions(self.tokens, session_secret(config[ApiConfig].session_secret,
                                                             config.data_dir),
                                 hours=config[ApiConfig].session_hours, clock=app.clock,
                                 ended=app.access.session_ended,
                                 signins=signins)

    async def who(self, request: web.Request) -> Who:
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else ""
        if not token and request.path == EVENTS:
            token = request.query.get("token", "")
        if token:
            user = self.sessions.user_of(token)
            principal = None if user is None else f"{API}:{user}"
        elif (session := await self.sessions.of(request)) is not None:
            if (why := self.sessions.forged(request, session)) is not None:
                raise ApiError(403, "csrf", why)
            principal = session.user
        else:
            principal = None
        if principal is None:
            raise ApiError(401, "unauthorized", "a valid Bearer token is required",
                           headers_hint="Authorization: Bearer TOKEN")
        return who_of(principal)

    async def asking(self, request: web.Request, record: type[R], action: str,
                     most: int = SMALL_BODY) -> tuple[Who, R]:
        """Who asks, and the JSON body read as `record`. A body that cannot be read is
        refused to one who may not take `action` as that first: a 403, not a 400 that
        tells them how to get past it."""
        who = await self.who(request)
        try:
            return who, await json_body(request, record, most)
        except ApiError:
            await self.app.permit(who, action)
            raise

    async def allowed(self, request: web.Request, action: str) -> Who:
        """Who asks, if they may take `action` (a read, or before reading a body)."""
        who = await self.who(request)
        await self.app.permit(who, action)
        return who
