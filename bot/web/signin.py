"""Sign in with Slack: OpenID Connect, so a designer opens the dashboard as the same
person — the same role, limits and audit trail — they are in the Slack chat, with no
token pasted (docs/dashboard.md, "Signing in").

  GET /dashboard/signin/slack            -> Slack's authorize page (state and nonce in a
                                            signed cookie, 10 minutes)
  GET /dashboard/signin/slack/callback   -> the code traded for a token (openid.connect.token),
                                            the person read (openid.connect.userInfo), the
                                            workspace checked, a session cookie, the dashboard

slack_sdk makes the authorize URL and calls the two Web API methods; a failure says why
on the sign-in page (?signin_error=…), never with a traceback.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import NoReturn
from urllib.parse import urlsplit

from aiohttp import web
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.oauth import OpenIDConnectAuthorizeUrlGenerator
from slack_sdk.web.async_client import AsyncWebClient

from bot.settings import ApiConfig, SlackConfig
from bot.web.sessions import Sessions
from storage.config import Config

log = logging.getLogger("genbot.signin")
STATE = "genbot_signin"  # the cookie that carries state and nonce across Slack's page
STATE_SECONDS = 600
CALLBACK = "/dashboard/signin/slack/callback"
USER_ID = "https://slack.com/user_id"  # userInfo's claims (Slack's OpenID Connect)
TEAM_ID = "https://slack.com/team_id"


class SlackSignIn:
    def __init__(self, config: Config, sessions: Sessions):
        self.settings, self.sessions = config[SlackConfig], sessions
        self.public_url = config[ApiConfig].public_url.rstrip("/")
        self.client = AsyncWebClient(base_url=self.settings.api_url)

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/dashboard/signin/slack", self.start)
        app.router.add_get(CALLBACK, self.callback)

    def _redirect_uri(self, request: web.Request) -> str:
        return f"{self.public_url or str(request.url.origin())}{CALLBACK}"

    def _authorize_url(self) -> str:
        """Slack's page beside its Web API: https://slack.com/openid/connect/authorize."""
        api = urlsplit(self.settings.api_url)
        return f"{api.scheme}://{api.netloc}/openid/connect/authorize"

    async def start(self, request: web.Request) -> NoReturn:
        state, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        url = OpenIDConnectAuthorizeUrlGenerator(
            client_id=self.settings.client_id, redirect_uri=self._redirect_uri(request),
            scopes=["openid", "profile"], authorization_url=self._authorize_url(),
        ).generate(state=state, nonce=nonce, team=self.settings.team_id or None)
        response = web.HTTPFound(url)
        # Lax, not Strict: it must come back on the top-level redirect from Slack's page.
        response.set_cookie(STATE, self.sessions.signed(f"{state} {nonce} {int(time.time())}"),
                            max_age=STATE_SECONDS, path="/dashboard/signin/",
                            httponly=True, samesite="Lax", secure=request.secure)
        raise response

    async def callback(self, request: web.Request) -> NoReturn:
        q = request.query
        saved = self.sessions.unsigned(request.cookies.get(STATE, ""))
        if q.get("error"):  # the person said no on Slack's page
            self._failed("denied")
        if saved is None or len(saved.split()) != 3:
            self._failed("state")
        state, _, made = saved.split()
        if not secrets.compare_digest(state, q.get("state", "")) or \
                time.time() - int(made) > STATE_SECONDS or not q.get("code"):
            self._failed("state")
        try:
            token = await self.client.openid_connect_token(
                client_id=self.settings.client_id, client_secret=self.settings.client_secret,
                code=q["code"], redirect_uri=self._redirect_uri(request))
            info = await self.client.openid_connect_userInfo(token=token["access_token"])
        except (SlackApiError, SlackClientError, KeyError, OSError) as e:
            log.warning("sign in with Slack: %s", e)
            self._failed("slack")
        user, team = info.get(USER_ID), info.get(TEAM_ID)
        if not user:
            self._failed("slack")
        if self.settings.team_id and team != self.settings.team_id:
            self._failed("team")
        response = web.HTTPFound("/dashboard/")
        self.sessions.set_cookie(response, self.sessions.issue_signed_in("slack", str(user)),
                                 request)
        response.del_cookie(STATE, path="/dashboard/signin/")
        raise response

    @staticmethod
    def _failed(why: str) -> NoReturn:
        raise web.HTTPFound(f"/dashboard/?signin_error={why}")
