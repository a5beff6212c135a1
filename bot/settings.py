"""The bot's settings: spreadsheets in, the chat platforms, the REST API and dashboard
([intake], [chat], [api], [slack], [dingtalk]; the loader is storage.config)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from storage.config import Config, ConfigError, key, section


@section("intake", order=80)
@dataclass(frozen=True)
class IntakeConfig:
    """Spreadsheets and the images their rows name: limits and where images may come from."""

    max_file_mb: float = key(20.0, "Largest sheet accepted, in MB.", min=0.01, max=1024)
    max_unpacked_mb: float = key(200.0, "Largest uncompressed .xlsx/.ods content, in MB; a "
                                 "zip bomb is refused before it is parsed.", min=1, max=16_384)
    max_rows: int = key(10_000, "Rows one submission may have.", min=1, max=1_000_000)
    max_problems_shown: int = key(20, "Problems listed in a validation report; the rest are "
                                  "counted (\"…and 23 more\").", min=1, max=1000)
    assets_dir: str = key("./assets", "Image cells may name files under this folder (relative "
                          "to the config file's folder).")
    url_allowlist: list[str] = key((), "Hosts image cells may download from over http(s), e.g. "
                                   "[\"cdn.example.com\"]. Empty: no downloads.")
    allow_private_urls: bool = key(False, "Let allow-listed hosts resolve to private or "
                                   "loopback addresses (off: no requests into your network).")
    max_image_mb: float = key(20.0, "Largest image file an image cell may name, in MB.",
                              min=0.01, max=1024)
    max_image_pixels: int = key(50_000_000, "Largest image, in pixels (decompression-bomb "
                                "guard).", min=1, max=1_000_000_000)
    max_cell_chars: int = key(10_000, "Longest text one cell may hold, in characters (a prompt "
                              "is a few hundred; the text encoders read 77 tokens).",
                              min=100, max=10_000_000)
    max_output_pixels: int = key(8192 * 8192, "Largest image a row may ask for, width x height "
                                 "after every upscale (8192x8192); bigger is refused at intake, "
                                 "before the executor spends memory on it.",
                                 min=64 * 64, max=2**31)


def assets_dir(config: Config) -> Path:
    """The folder image cells may name files under."""
    return config.path(config[IntakeConfig].assets_dir)


@section("chat", order=90)
@dataclass(frozen=True)
class ChatConfig:
    """What people reach through Slack, DingTalk or the terminal."""

    inbox_keep_hours: float = key(72.0, "How long a file sent to the bot stays available for a "
                                  "later /gen to name it, in hours.", min=0.1, max=8760)
    default_role: str = key("submitter", "Role of everyone not listed below and not given one by "
                            "/grant; none: they may only ask for /help.",
                            choices=("submitter", "viewer", "none"))
    admins: list[str] = key((), "Admins, as platform:user id, e.g. [\"slack:U024BE7LH\", "
                            "\"dingtalk:manager4220\"]. Always admins; /revoke cannot demote them.")
    submitters: list[str] = key((), "Submitters (platform:user id), when default_role is lower.")
    viewers: list[str] = key((), "Viewers (platform:user id): status only.")
    conversations: list[str] = key((), "Conversations the bot serves, as platform:conversation "
                                   "id. Empty: every conversation it is in.")
    submitter_max_rows: int = key(2000, "Rows one submission of a submitter may have (admins: "
                                  "[intake] max_rows).", min=1, max=1_000_000)
    submitter_max_queued: int = key(5000, "Queued and running jobs one submitter may have.",
                                    min=1, max=10_000_000)
    submitter_per_minute: int = key(5, "Submissions one submitter may make in a minute.",
                                    min=1, max=10_000)
    confirm_over: int = key(100, "A sweep (/gen --vary, --seeds) of more jobs than this is "
                            "queued only when asked again with --yes, after the bot says how "
                            "many jobs, models and minutes it is.", min=1, max=10_000_000)
    language: str = key("en", "Language of replies where neither languages below, the person's "
                        "own locale, nor the platform's default (DingTalk: zh) says otherwise.",
                        choices=("en", "zh"))
    languages: list[str] = key((), "Languages by person, conversation, workspace or platform, the "
                               "most specific winning: [\"slack:U024BE7LH=en\", "
                               "\"slack:C0123=zh\", \"slack:T0456=zh\", \"dingtalk=en\"].")
    timezone: str = key("UTC", "Time zone (IANA name, e.g. Asia/Shanghai) of times typed in "
                        "/gen --at, where the platform does not tell the person's own.")
    progress_every: float = key(3.0, "Least seconds between two edits of a batch's progress "
                                "message.", min=0.5, max=3600)
    delivery_attempts: int = key(12, "Tries to post one message (backing off, honouring "
                                 "Retry-After) before it is recorded as failed and reported.",
                                 min=1, max=1000)
    digest: str = key("", "Where a daily digest of the last 24 hours goes, as "
                      "platform:conversation (e.g. \"slack:C0123\"); empty: no digest.")
    digest_at: str = key("09:00", "When the digest is posted: HH:MM in [chat] timezone.")

    def check(self, source: str) -> None:
        for entry in self.languages:
            where, _, lang = entry.rpartition("=")
            if not where or lang not in ("en", "zh"):
                raise ConfigError(f'{source}: [chat] languages: "{entry}": expected '
                                  '"platform:id=en" or "platform:id=zh" (or "platform=zh")')
        try:
            from zoneinfo import ZoneInfo
            ZoneInfo(self.timezone)
        except (ValueError, KeyError, OSError):
            raise ConfigError(f'{source}: [chat] timezone = "{self.timezone}": expected an '
                              "IANA time zone such as UTC or Asia/Shanghai") from None
        if self.digest and not re.fullmatch(r"[a-z]+:\S+", self.digest):
            raise ConfigError(f'{source}: [chat] digest = "{self.digest}": expected '
                              '"platform:conversation", e.g. "slack:C0123"')
        if not re.fullmatch(r"([01]?\d|2[0-3]):[0-5]\d", self.digest_at):
            raise ConfigError(f'{source}: [chat] digest_at = "{self.digest_at}": expected a '
                              'time of day as HH:MM, e.g. "09:00"')

    def language_at(self, *places: str | None) -> str | None:
        """The language [chat] languages gives the first of `places` it names."""
        given = {where: lang for where, _, lang in (e.rpartition("=") for e in self.languages)}
        return next((given[p] for p in places if p and p in given), None)


@section("api", order=100)
@dataclass(frozen=True)
class ApiConfig:
    """The REST API under /api/v1 (docs/api.md)."""

    tokens: list[str] = key((), "Bearer tokens, as \"TOKEN=USER\": a request with the token acts "
                            "as api:USER, whose role [chat] gives (admins = [\"api:ci\"]). "
                            "Empty: the API is closed. Use env GENBOT_API_TOKENS for real ones.",
                            secret=True)
    session_hours: float = key(12.0, "How long a dashboard sign-in lasts (a session cookie; "
                               "removing the token from `tokens` ends it at once).")
    session_secret: str = key("", "Key that signs dashboard sessions; empty: a random one kept "
                              "in data_dir/session.key. Env GENBOT_API_SESSION_SECRET.",
                              secret=True)
    metrics_token: str = key("", "Bearer token Prometheus must send to read /metrics "
                             "(authorization: credentials in its scrape config); empty: "
                             "/metrics is open, so keep the port private. Env "
                             "GENBOT_API_METRICS_TOKEN.", secret=True)
    max_body_mb: float = key(0.0, "Largest request body the API reads (a sheet and its "
                             "pictures), in MB; 0: [intake] max_file_mb plus 10 pictures at "
                             "[intake] max_image_mb.", min=0, max=65536)

    def check(self, source: str) -> None:
        for entry in self.tokens:
            token, _, user = entry.partition("=")
            if len(token) < 16 or not user or ":" in user:
                raise ConfigError(f"{source}: [api] tokens: expected \"TOKEN=USER\" with a "
                                  "token of at least 16 characters and a user name without ':'")


@section("slack", order=110)
@dataclass(frozen=True)
class SlackConfig:
    """The Slack bot (docs/slack.md). Off until bot_token is set."""

    bot_token: str = key("", "Bot token (xoxb-…) of the Slack app; env GENBOT_SLACK_BOT_TOKEN.",
                         secret=True)
    signing_secret: str = key("", "Signing secret of the Slack app: every request to "
                              "/slack/events is checked with it.", secret=True)
    app_token: str = key("", "App-level token (xapp-…, scope connections:write): set it to use "
                         "Socket Mode, for a bot with no public URL (behind a firewall).",
                         secret=True)
    api_url: str = key("https://slack.com/api/", "Slack Web API base URL (a proxy, or a test "
                       "server).")
    channels: list[str] = key((), "Channel ids the bot serves, e.g. [\"C0123ABCD\"]; direct "
                              "messages always. Empty: every channel it is invited to.")
    image_buttons: bool = key(True, "Under each posted image, a row of buttons (Keep, Again, "
                              "Vary, Upscale, Edit) that reactions (⭐ 👍 👎) on it rate too: "
                              "one more message per image. false: images alone; the same "
                              "actions are typed in the thread (/again 3).")

    def check(self, source: str) -> None:
        if self.bot_token and not (self.signing_secret or self.app_token):
            raise ConfigError(f"{source}: [slack] bot_token is set: expected signing_secret "
                              "(for /slack/events) or app_token (for Socket Mode) too")


@section("dingtalk", order=120)
@dataclass(frozen=True)
class DingTalkConfig:
    """The DingTalk bot (docs/dingtalk.md). Off until app_key is set."""

    app_key: str = key("", "AppKey (Client ID) of the DingTalk internal app whose robot this is.")
    app_secret: str = key("", "AppSecret (Client Secret); env GENBOT_DINGTALK_APP_SECRET.",
                          secret=True)
    robot_code: str = key("", "The robot's code; empty: the AppKey (as DingTalk sets it by "
                          "default).")
    mode: str = key("stream", "stream: genbot connects out to DingTalk (no public URL needed); "
                    "http: DingTalk posts to /dingtalk/callback.", choices=("stream", "http"))
    api_url: str = key("https://api.dingtalk.com", "DingTalk OpenAPI base URL (a proxy, or a "
                       "test server).")
    oapi_url: str = key("https://oapi.dingtalk.com", "DingTalk legacy API base URL (media "
                        "upload).")
    card_template_id: str = key("", "An interactive card template with a `text` variable: "
                                "progress is one card updated in place. Empty: milestone "
                                "messages at 25/50/75%.")
    platform_admins: bool = key(False, "DingTalk's own admins (isAdmin) are genbot admins.")

    def check(self, source: str) -> None:
        if self.app_key and not self.app_secret:
            raise ConfigError(f"{source}: [dingtalk] app_key is set: expected app_secret too")
