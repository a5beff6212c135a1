"""Dashboard sessions: an API token — or a sign-in with Slack — traded once for a signed
cookie, and CSRF checks.

The cookie holds who (api:USER for a token, slack:U… for a person Slack vouched for), a
fingerprint of what they signed in with (the token, or the Slack app's client id), an
expiry and a nonce, signed with HMAC. Taking a token out of [api] tokens (or the
sign-in's client id out of the config) ends its sessions at once (the fingerprint no
longer matches); signing out records the nonce as ended, so a copy of the cookie is
refused too (the only thing stored server-side). It is HttpOnly and SameSite=Strict; on
top of that, anything sent with the cookie that changes state must carry the session's
CSRF token in X-CSRF-Token and come from this origin. A Bearer token needs neither: a
browser never attaches one on its own.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

from bot.settings import kept_secret

COOKIE = "genbot_session"
API = "api"  # a token's people: api:USER
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


@dataclass(frozen=True)
class Session:
    user: str  # platform:user — api:alice (a token's), slack:U024BE7LH (signed in with Slack)
    csrf: str
    expires: float
    nonce: str


async def _never_ended(nonce: str) -> bool:
    return False


class Sessions:
    def __init__(self, tokens: dict[str, str], secret: bytes, *, hours: float = 12.0,
                 clock: Callable[[], float] = time.time,
                 ended: Callable[[str], Awaitable[bool]] = _never_ended,
                 signins: dict[str, str] | None = None):
        self.tokens, self.secret, self.hours, self.clock = tokens, secret, hours, clock
        self.ended = ended
        self.signins = signins or {}  # platform -> the client id people sign in through

    # --- tokens ------------------------------------------------------------------------
    def user_of(self, token: str) -> str | None:
        """The user a token acts as, compared in constant time. Any text is a wrong
        token, never an error: bytes a header cannot hold, a lone surrogate from JSON."""
        found = None
        for known, user in self.tokens.items():
            if hmac.compare_digest(_bytes(known), _bytes(token)):
                found = user
        return found

    def _print(self, token: str) -> str:
        return hmac.new(self.secret, b"token:" + _bytes(token), hashlib.sha256).hexdigest()[:16]

    def _signin_print(self, platform: str) -> str | None:
        client = self.signins.get(platform)
        return self._print(f"signin:{platform}:{client}") if client else None

    # --- cookies -----------------------------------------------------------------------
    def issue(self, token: str) -> str | None:
        """A cookie value for a valid token, else None."""
        user = self.user_of(token)
        if user is None:
            return None
        return self._cookie(f"{API}:{user}", self._print(token))

    def issue_signed_in(self, platform: str, user: str) -> str:
        """A cookie value for a person `platform` vouched for (its sign-in is configured)."""
        fingerprint = self._signin_print(platform)
        if fingerprint is None:
            raise ValueError(f"no sign-in with {platform} is configured")
        return self._cookie(f"{platform}:{user}", fingerprint)

    def _cookie(self, who: str, fingerprint: str) -> str:
        body = _b64(json.dumps({"u": who, "t": fingerprint,
                                "e": int(self.clock() + self.hours * 3600),
                                "n": secrets.token_hex(8)}, separators=(",", ":")).encode())
        return f"{body}.{self._sign(body)}"

    def signed(self, value: str) -> str:
        """`value` with its HMAC: what a sign-in's state cookie carries."""
        body = _b64(value.encode())
        return f"{body}.{self._sign(body)}"

    def unsigned(self, signed: str) -> str | None:
        body, _, signature = signed.partition(".")
        if not body or not hmac.compare_digest(_bytes(signature), _bytes(self._sign(body))):
            return None
        try:
            return _unb64(body).decode()
        except (ValueError, UnicodeDecodeError):
            return None

    def read(self, cookie: str) -> Session | None:
        """The session a cookie carries, if it is signed by us, unexpired and its token
        is still configured."""
        body, _, signature = cookie.partition(".")
        if not body or not hmac.compare_digest(_bytes(signature), _bytes(self._sign(body))):
            return None
        try:
            data = json.loads(_unb64(body))
            user, fingerprint, expires = str(data["u"]), str(data["t"]), float(data["e"])
            nonce = str(data.get("n", ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        if expires < self.clock():
            return None
        platform, _, name = user.partition(":")
        if platform == API:
            if not any(u == name and hmac.compare_digest(self._print(t), fingerprint)
                       for t, u in self.tokens.items()):
                return None
        elif not hmac.compare_digest(self._signin_print(platform) or "", fingerprint):
            return None
        return Session(user, self._sign("csrf:" + cookie), expires, nonce)

    def _sign(self, text: str) -> str:
        return _b64(hmac.new(self.secret, _bytes(text), hashlib.sha256).digest())

    # --- requests ----------------------------------------------------------------------
    async def of(self, request: web.Request) -> Session | None:
        """The request's session: a valid cookie that has not been signed out."""
        cookie = request.cookies.get(COOKIE)
        session = self.read(cookie) if cookie else None
        if session is None or await self.ended(session.nonce):
            return None
        return session

    def forged(self, request: web.Request, session: Session) -> str | None:
        """Why a cookie-carried request must not be trusted, or None. Reading is always
        fine (another origin cannot read the answer); a change needs our CSRF token, and
        anything naming an Origin (a WebSocket too) must name ours."""
        if foreign(request):
            return f"requests from {request.headers['Origin'][:80]} are not accepted with a " \
                   "session cookie"
        if request.method not in SAFE_METHODS and not hmac.compare_digest(
                _bytes(request.headers.get(CSRF_HEADER, "")), _bytes(session.csrf)):
            return f"a change made with a session cookie needs the {CSRF_HEADER} header"
        return None

    def set_cookie(self, response: web.StreamResponse, value: str, request: web.Request) -> None:
        response.set_cookie(COOKIE, value, max_age=int(self.hours * 3600), path="/",
                            httponly=True, samesite="Strict", secure=request.secure)

    @staticmethod
    def clear_cookie(response: web.StreamResponse) -> None:
        response.del_cookie(COOKIE, path="/")


def foreign(request: web.Request) -> bool:
    """Does the request name an Origin other than this service's host? (TLS may end at a
    proxy in front, so the scheme is not compared.)"""
    origin = request.headers.get("Origin")
    if origin is None:
        return False
    try:
        return urlsplit(origin).netloc != request.host
    except ValueError:  # not a URL at all (an unclosed "[", say): not ours
        return True


def session_secret(configured: str, data_dir: Path) -> bytes:
    """[api] session_secret, else a random key kept in data_dir/session.key, so sessions
    outlive a restart."""
    if configured:
        return configured.encode()
    return bytes.fromhex(kept_secret(data_dir / "session.key", lambda: secrets.token_hex(32)))


def local_token(data_dir: Path) -> str:
    """With no [api] tokens configured, one admin token for whoever can read this
    machine's data_dir (as Jupyter does), so a fresh install's dashboard can be opened."""
    return kept_secret(data_dir / "local-admin.token", lambda: secrets.token_urlsafe(24))


def _bytes(text: str) -> bytes:
    """Any str as bytes: headers may carry undecodable bytes (kept as surrogates) and
    JSON may carry lone surrogates; both must compare as plain wrong values."""
    return text.encode("utf-8", "surrogatepass")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
