"""Dashboard sessions: signed cookies that end with their token, expire, and resist forgery."""

from __future__ import annotations

import stat

from bot.web.sessions import Sessions, session_secret


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_cookie_carries_its_user_until_it_expires():
    clock = Clock()
    sessions = Sessions({"tok-a": "alice"}, b"k" * 32, hours=1, clock=clock)
    cookie = sessions.issue("tok-a")
    session = sessions.read(cookie)
    assert session.user == "api:alice" and session.expires == clock.now + 3600
    assert sessions.issue("tok-b") is None
    clock.now += 3599
    assert sessions.read(cookie) is not None
    clock.now += 2
    assert sessions.read(cookie) is None


def test_a_person_slack_vouched_for_keeps_a_session_while_that_sign_in_is_configured():
    slack = Sessions({}, b"k" * 32, signins={"slack": "1111.2222"})
    cookie = slack.issue_signed_in("slack", "U1")
    assert slack.read(cookie).user == "slack:U1"
    again = Sessions({}, b"k" * 32, signins={"slack": "9999.0000"})  # another Slack app
    gone = Sessions({}, b"k" * 32)  # sign-in taken out of the config
    assert again.read(cookie) is None and gone.read(cookie) is None
    tokens = Sessions({"tok-a": "U1"}, b"k" * 32)  # a token's api:U1 is not slack:U1
    assert tokens.read(cookie) is None
    assert slack.unsigned(slack.signed("state nonce 12")) == "state nonce 12"
    body, _, signature = slack.signed("state nonce 12").partition(".")
    assert slack.unsigned(body + "." + signature[::-1]) is None
    assert slack.unsigned("") is None


def test_forged_or_altered_cookies_are_nothing():
    sessions = Sessions({"tok-a": "alice", "tok-z": "zed"}, b"k" * 32)
    cookie = sessions.issue("tok-a")
    body, _, signature = cookie.partition(".")
    other = Sessions({"tok-a": "alice"}, b"another key....................")
    assert other.read(cookie) is None  # signed with another key
    assert sessions.read(body + "." + signature[::-1]) is None
    assert sessions.read(body) is None and sessions.read("") is None
    zed = sessions.issue("tok-z").partition(".")[0]
    assert sessions.read(zed + "." + signature) is None  # a body with someone else's signature
    assert sessions.read("%%%." + signature) is None


def test_taking_a_token_out_of_the_config_ends_its_sessions():
    cookie = Sessions({"tok-a": "alice"}, b"k" * 32).issue("tok-a")
    assert Sessions({"tok-a": "alice"}, b"k" * 32).read(cookie) is not None
    assert Sessions({"tok-new": "alice"}, b"k" * 32).read(cookie) is None  # rotated
    assert Sessions({}, b"k" * 32).read(cookie) is None


def test_each_session_has_its_own_csrf_token():
    sessions = Sessions({"tok-a": "alice"}, b"k" * 32)
    one, two = sessions.read(sessions.issue("tok-a")), sessions.read(sessions.issue("tok-a"))
    assert one.csrf and one.csrf != two.csrf


def test_the_session_key_is_kept_private_across_restarts(tmp_path):
    key = session_secret("", tmp_path)
    assert session_secret("", tmp_path) == key and len(key) == 32
    assert stat.S_IMODE((tmp_path / "session.key").stat().st_mode) == 0o600
    assert session_secret("configured", tmp_path) == b"configured"


def test_any_text_is_a_wrong_token_or_cookie_never_an_error():
    """Headers keep undecodable bytes as surrogates and JSON may hold a lone one."""
    sessions = Sessions({"tok-a": "alice"}, b"k" * 32)
    for text in ("\udcff\udcfe", "\ud800", "é", "tok-a\x00", "ｔｏｋ-a", ""):
        assert sessions.user_of(text) is None
        assert sessions.issue(text) is None
        assert sessions.read(text) is None and sessions.read(f"{text}.{text}") is None
    body = sessions.issue("tok-a").partition(".")[0]
    assert sessions.read(f"{body}.é") is None and sessions.read(f"{body}é.x") is None
