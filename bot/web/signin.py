"""Sign in as yourself: a designer opens the dashboard as the same person — the same
role, limits and audit trail — they are in the Slack or DingTalk chat, with no token
pasted (docs/dashboard.md, "Signing in").

  GET /dashboard/signin/<platform>            -> the platform's own sign-in page (state
                                                 and nonce in a signed cookie, 10 minutes)
  GET /dashboard/signin/<platform>/callback   -> the code traded for who the person is on
                                                 that platform, a session cookie, the
                                                 dashboard

Slack: OpenID Connect (slack_sdk makes the authorize URL and calls openid.connect.token
and openid.connect.userInfo); only the configured workspace, where one is set. DingTalk:
its OAuth 2 login page (scan to sign in), the code traded for the person's token
(oauth2/userAccessToken), their unionId (contact/users/me) looked up in the app's
organisation (topapi/user/getbyunionid): the staff id chat knows them by; someone of
another organisation is refused. A failure says why on the sign-in page
(?signin_error=…), never with a traceback.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import NoReturn
from urllib.parse import urlencode, urlsplit

import aiohttp
from aiohttp import web
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.oauth import OpenIDConnectAuthorizeUrlGenerator
from slack_sdk.web.async_client import AsyncWebClient

from bot.settings import ApiConfig, DingTalkConfig, SlackConfig
from bot.web.sessions import Sessions
from storage.config import Config

log = logging.getLogger("genbot.signin")
STATE = "genbot_signin"  # the cookie that carries state and nonce across the platform's page
STATE_SECONDS = 600
USER_ID = "https://slack.com/user_id"  # userInfo's claims (Slack's OpenID Connect)
TEAM_ID = "https://slack.com/team_id"


class SignIn:
    """What every platform's sign-in shares: its two routes, the state cookie, the session."""
    platform: str

    def __init__(self, config: Config, sessions: Sessions):
        self.sessions = sessions
        self.public_url = config[ApiConfig].public_url.rstrip("/")

    @property
    def path(self) -> str:
        return f"/dashboard/signin/{self.platform}"

    def routes(self, app: web.Application) -> None:
        app.router.add_get(self.path, self.start)
        app.router.add_get(f"{self.path}/callback", self.callback)

    def redirect_uri(self, request: web.Request) -> str:
        return f"{self.public_url or str(request.url.origin())}{self.path}/callback"

    async def start(self, request: web.Request) -> NoReturn:
        state, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        response = web.HTTPFound(self.page(request, state, nonce))
        # Lax, not Strict: it must come back on the top-level redirect from their page.
        response.set_cookie(STATE, self.sessions.signed(
            f"{self.platform} {state} {nonce} {int(time.time())}"), max_age=STATE_SECONDS,
            path="/dashboard/signin/", httponly=True, samesite="Lax", secure=request.secure)
        raise response

    def page(self, request: web.Request, state: str, nonce: str) -> str:
        """The platform's sign-in page to send the person to."""
        raise NotImplementedError

    def checked(self, request: web.Request) -> None:
        """The callback answers the sign-in this browser started here, in time."""
        saved = self.sessions.unsigned(request.cookies.get(STATE, ""))
        if saved is None or len(saved.split()) != 4:
            self.failed("state")
        platform, state, _, made = saved.split()
        if platform != self.platform or \
                not secrets.compare_digest(state, request.query.get("state", "")) or \
                time.time() - int(made) > STATE_SECONDS:
            self.failed("state")

    def signed_in(self, request: web.Request, user: str) -> NoReturn:
        response = web.HTTPFound("/dashboard/")
        self.sessions.set_cookie(response, self.sessions.issue_signed_in(self.platform, user),
                                 request)
        response.del_cookie(STATE, path="/dashboard/signin/")
        raise response

    @staticmethod
    def failed(why: str) -> NoReturn:
        raise web.HTTPFound(f"/dashboard/?signin_error={why}")

    async def callback(self, request: web.Request) -> NoReturn:
        raise NotImplementedError

    async def close(self, app: web.Application) -> None:
        """Whatever it holds open (an HTTP session), at shutdown."""


class SlackSignIn(SignIn):
    platform = "slack"

    def __init__(self, config: Config, sessions: Sessions):
        super().__init__(config, sessions)
        self.settings = config[SlackConfig]
        self.client = AsyncWebClient(base_url=self.settings.api_url)

    def page(self, request: web.Request, state: str, nonce: str) -> str:
        api = urlsplit(self.settings.api_url)  # the page beside the Web API: slack.com/openid/…
        return OpenIDConnectAuthorizeUrlGenerator(
            client_id=self.settings.client_id, redirect_uri=self.redirect_uri(request),
            scopes=["openid", "profile"],
            authorization_url=f"{api.scheme}://{api.netloc}/openid/connect/authorize",
        ).generate(state=state, nonce=nonce, team=self.settings.team_id or None)

    async def callback(self, request: web.Request) -> NoReturn:
        q = request.query
        if q.get("error"):  # the person said no on Slack's page
            self.failed("denied")
        self.checked(request)
        if not q.get("code"):
            self.failed("state")
        try:
            token = await self.client.openid_connect_token(
                client_id=self.settings.client_id, client_secret=self.settings.client_secret,
                code=q["code"], redirect_uri=self.redirect_uri(request))
            info = await self.client.openid_connect_userInfo(token=token["access_token"])
        except (SlackApiError, SlackClientError, KeyError, OSError) as e:
            log.warning("sign in with Slack: %s", e)
            self.failed("slack")
        user, team = info.get(USER_ID), info.get(TEAM_ID)
        if not user:
            self.failed("slack")
        if self.settings.team_id and team != self.settings.team_id:
            self.failed("team")
        self.signed_in(request, str(user))


class NotConfirmed(Exception):
    """A sign-in the platform did not confirm: `why` is the sign-in page's word for it."""

    def __init__(self, why: str, detail: str):
        super().__init__(detail)
        self.why = why


class DingTalkSignIn(SignIn):
    platform = "dingtalk"

    def __init__(self, config: Config, sessions: Sessions):
        super().__init__(config, sessions)
        self.settings = config[DingTalkConfig]
        self.http: aiohttp.ClientSession | None = None

    def page(self, request: web.Request, state: str, nonce: str) -> str:
        return f"{self.settings.login_url.rstrip('/')}/oauth2/auth?" + urlencode({
            "redirect_uri": self.redirect_uri(request), "response_type": "code",
            "client_id": self.settings.app_key, "scope": "openid", "state": state,
            "prompt": "consent"})

    async def callback(self, request: web.Request) -> NoReturn:
        self.checked(request)
        code = request.query.get("authCode") or request.query.get("code")
        if not code:  # the person closed or refused DingTalk's page
            self.failed("denied")
        try:
            staff = await self.staff_id(code)
        except NotConfirmed as e:
            log.warning("sign in with DingTalk: %s", e)
            self.failed(e.why)
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            log.warning("sign in with DingTalk: %s", e)
            self.failed("dingtalk")
        self.signed_in(request, staff)

    async def staff_id(self, auth_code: str) -> str:
        """Who signed in on DingTalk's login page, as chat knows them: the code traded for
        their token (oauth2/userAccessToken), their unionId read (contact/users/me) and
        looked up with the app's own token (oauth2/accessToken) in its organisation
        (topapi/user/getbyunionid). (Sign-ins are rare: nothing is cached.)"""
        d = self.settings
        if self.http is None:
            self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        api, oapi = d.api_url.rstrip("/"), d.oapi_url.rstrip("/")

        async def answer(r: aiohttp.ClientResponse, step: str, wanted: str) -> dict:
            body = await r.json(content_type=None)
            if r.status != 200 or not isinstance(body, dict) or not body.get(wanted):
                raise NotConfirmed("dingtalk", f"{step}: HTTP {r.status} "
                              f"{body.get('code', '') if isinstance(body, dict) else ''}")
            return body
        async with self.http.post(f"{api}/v1.0/oauth2/userAccessToken", json={
                "clientId": d.app_key, "clientSecret": d.app_secret, "code": auth_code,
                "grantType": "authorization_code"}) as r:
            user_token = (await answer(r, "userAccessToken", "accessToken"))["accessToken"]
        async with self.http.get(f"{api}/v1.0/contact/users/me", headers={
                "x-acs-dingtalk-access-token": user_token}) as r:
            union = (await answer(r, "contact/users/me", "unionId"))["unionId"]
        async with self.http.post(f"{api}/v1.0/oauth2/accessToken", json={
                "appKey": d.app_key, "appSecret": d.app_secret}) as r:
            app_token = (await answer(r, "oauth2/accessToken", "accessToken"))["accessToken"]
        async with self.http.post(f"{oapi}/topapi/user/getbyunionid",
                                  params={"access_token": app_token},
                                  json={"unionid": union}) as r:
            found = await r.json(content_type=None)
        found = found if isinstance(found, dict) else {}
        result = found.get("result") if found.get("errcode") == 0 else None
        staff = result.get("userid") if isinstance(result, dict) else None
        if not staff:  # 60121: nobody of that unionId in this app's organisation
            raise NotConfirmed("org", f"getbyunionid: {found.get('errcode')} {found.get('errmsg')}")
        return str(staff)

    async def close(self, app: web.Application) -> None:
        if self.http is not None:
            await self.http.close()
