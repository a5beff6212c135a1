"""The bot's settings: spreadsheets in, the chat platforms, the REST API and dashboard,
outgoing webhooks ([intake], [chat], [api], [slack], [dingtalk], [webhook], [[webhooks]];
the loader is storage.config)."""

from __future__ import annotations

import base64
import binascii
import difflib
import hashlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from storage.config import Config, ConfigError, key, section, table
from storage.records import Priority
from templates.settings import assets_folder

# The most urgent priority a role may use: normal at least, so a plain submission goes.
PRIORITY_CEILINGS = tuple(p.label for p in Priority if p <= Priority.NORMAL)


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
    assets_dir: str = key("", "Image cells may name files under this folder (relative "
                          "to the config file's folder) instead of [assets] dir. Empty: "
                          "[assets] dir.")
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
    workers: int = key(0, "Submissions whose sheet and pictures are checked at once, each's CPU "
                       "work in a thread off the event loop (the rest wait their turn; the "
                       "service answers meanwhile). 0: one per CPU.", min=0, max=256)


def assets_dir(config: Config) -> Path:
    """The folder image cells may name files under: [intake] assets_dir (as configs
    before [assets] named it), else [assets] dir."""
    own = config[IntakeConfig].assets_dir
    return config.path(own) if own else assets_folder(config)


@section("i18n", order=85)
@dataclass(frozen=True)
class I18nConfig:
    """The languages people read, one gettext catalog each (docs/architecture.md)."""

    languages: list[str] = key((), "Languages offered (chat, the dashboard, --lang), e.g. "
                               "[\"en\", \"zh\"]. Empty: every language with a catalog in "
                               "genbot's bot/locales or in locales_dir.")
    locales_dir: str = key("", "A folder of more catalogs, as <locale>/LC_MESSAGES/genbot.po "
                           "(relative to the config file's folder): a language of your own, or "
                           "your words for a shipped one. Empty: genbot's own only.")


@section("chat", order=90)
@dataclass(frozen=True)
class ChatConfig:
    """What people reach through Slack, DingTalk or the terminal."""

    inbox_keep_hours: float = key(72.0, "How long a file sent to the bot stays available for a "
                                  "later /gen to name it, in hours.", min=0.1, max=8760)
    default_role: str = key("submitter", "Role of everyone not listed below and not given one by "
                            "/grant; none: they may only ask for /help.",
                            choices=("submitter", "reviewer", "viewer", "none"))
    admins: list[str] = key((), "Admins, as platform:user id, e.g. [\"slack:U024BE7LH\", "
                            "\"dingtalk:manager4220\"]. Always admins; /revoke cannot demote them.")
    submitters: list[str] = key((), "Submitters (platform:user id), when default_role is lower.")
    reviewers: list[str] = key((), "Reviewers (platform:user id): review images (approve, "
                               "reject, request changes) and sign batches off; no submitting.")
    viewers: list[str] = key((), "Viewers (platform:user id): status only.")
    conversations: list[str] = key((), "Conversations the bot serves, as platform:conversation "
                                   "id. Empty: every conversation it is in.")
    submitter_max_rows: int = key(2000, "Rows one submission of a submitter may have (admins: "
                                  "[intake] max_rows).", min=1, max=1_000_000)
    submitter_max_queued: int = key(5000, "Queued and running jobs one submitter may have.",
                                    min=1, max=10_000_000)
    submitter_per_minute: int = key(5, "Submissions one submitter may make in a minute.",
                                    min=1, max=10_000)
    submitter_max_priority: str = key(
        "normal", "The most urgent priority a submitter may ask for (/gen --priority, the API, "
        "schedules, the dashboard). Levels do not take turns: one urgent sheet goes before "
        "every normal one. /grant USER ROLE --priority P raises it for one person; viewers "
        "cannot submit at all.", choices=PRIORITY_CEILINGS)
    admin_max_priority: str = key("urgent", "The most urgent priority an admin may ask for.",
                                  choices=PRIORITY_CEILINGS)
    confirm_over: int = key(100, "A sweep (/gen --vary, --seeds) of more jobs than this is "
                            "queued only when asked again with --yes, after the bot says how "
                            "many jobs, models and minutes it is.", min=1, max=10_000_000)
    language: str = key("en", "Language of replies where neither languages below, the person's "
                        "own locale, nor the platform's default (DingTalk: zh) says otherwise: "
                        "one of [i18n] languages.")
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
    send_claim_seconds: float = key(30.0, "How long a message being posted belongs to the "
                                    "service posting it (renewed while the call runs): a "
                                    "service that dies mid-post leaves it to another this long "
                                    "after.", min=1, max=3600)
    digest: str = key("", "Where a daily digest of the last 24 hours goes, as "
                      "platform:conversation (e.g. \"slack:C0123\"); empty: no digest.")
    digest_at: str = key("09:00", "When the digest is posted: HH:MM in [chat] timezone.")

    def check(self, source: str) -> None:
        for entry in self.languages:
            where, _, lang = entry.rpartition("=")
            if not where or not lang:  # (whether it is offered: bot.i18n.use)
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
    public_url: str = key("", "The service's address as others reach it, e.g. "
                          "https://genbot.example.com: webhooks link to images and results "
                          "with it. Empty: their links are paths under /api/v1.")
    max_body_mb: float = key(0.0, "Largest request body the API reads (a sheet and its "
                             "pictures), in MB; 0: [intake] max_file_mb plus 10 pictures at "
                             "[intake] max_image_mb.", min=0, max=65536)

    def check(self, source: str) -> None:
        if self.public_url and urlsplit(self.public_url).scheme not in ("http", "https"):
            raise ConfigError(f"{source}: [api] public_url: expected http(s)://host[:port]")
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
    client_id: str = key("", "Client ID of the Slack app (Basic Information): with "
                         "client_secret, the dashboard offers \"Sign in with Slack\" (OpenID "
                         "Connect): people act as slack:USER with their chat role, no token "
                         "pasted. Add <public_url>/dashboard/signin/slack/callback to the app's "
                         "redirect URLs.")
    client_secret: str = key("", "Client Secret of the Slack app, for sign-in; env "
                             "GENBOT_SLACK_CLIENT_SECRET.", secret=True)
    team_id: str = key("", "Only people of this workspace (T…) may sign in; empty: whoever "
                       "Slack vouches for (roles still decide what they may do).")
    image_buttons: bool = key(True, "Under each posted image, in its message, a row of "
                              "buttons (Keep, Again, Vary, Upscale, Edit); reactions "
                              "(⭐ 👍 👎) on it rate the image. false: images alone; the same "
                              "actions are typed in the thread (/again 3).")

    @property
    def signs_in(self) -> bool:
        return bool(self.client_id and self.client_secret)

    def check(self, source: str) -> None:
        if bool(self.client_id) != bool(self.client_secret):
            raise ConfigError(f"{source}: [slack] client_id and client_secret go together "
                              "(sign in with Slack): expected both, or neither")
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
    sign_in: bool = key(False, "The dashboard offers \"Sign in with DingTalk\" (scan to sign in, "
                        "OAuth 2): people open it as the same person and role as in chat. Add "
                        "<public_url>/dashboard/signin/dingtalk/callback to the app's redirect "
                        "URLs (docs/dingtalk.md).")
    login_url: str = key("https://login.dingtalk.com", "DingTalk's login page's base URL (a "
                         "test server).")

    @property
    def signs_in(self) -> bool:
        return self.sign_in and bool(self.app_key and self.app_secret)

    def check(self, source: str) -> None:
        if self.app_key and not self.app_secret:
            raise ConfigError(f"{source}: [dingtalk] app_key is set: expected app_secret too")
        if self.sign_in and not self.app_key:
            raise ConfigError(f"{source}: [dingtalk] sign_in = true: expected app_key and "
                              "app_secret (the app people sign in through)")


FEISHU_DOMAINS = {"feishu": "https://open.feishu.cn", "lark": "https://open.larksuite.com"}


@section("feishu", order=125)
@dataclass(frozen=True)
class FeishuConfig:
    """The Feishu / Lark bot (docs/feishu.md). Off until app_id is set."""

    app_id: str = key("", "App ID (cli_…) of the Feishu or Lark custom app whose bot this is.")
    app_secret: str = key("", "App Secret; env GENBOT_FEISHU_APP_SECRET.", secret=True)
    mode: str = key("long_connection", "long_connection: genbot connects out to Feishu (no "
                    "public URL needed); callback: Feishu posts events to /feishu/events.",
                    choices=("long_connection", "callback"))
    encrypt_key: str = key("", "The Encrypt Key of the app's event subscription (callback "
                           "mode): events come encrypted and signed, and unsigned ones are "
                           "refused.", secret=True)
    verification_token: str = key("", "The Verification Token of the app's event "
                                  "subscription (callback mode).", secret=True)
    domain: str = key("feishu", "feishu (open.feishu.cn), lark (open.larksuite.com), or a "
                      "base URL (a proxy, or a test server).")
    identity: str = key("open_id", "Which of Feishu's ids a person is to genbot ([chat] roles, "
                        "grants, whose batch): open_id (ou_…, this app's) or union_id (on_…, "
                        "the same in every app of your developer account: keeps people's roles "
                        "and batches when the team moves to another app).",
                        choices=("open_id", "union_id"))

    @property
    def base(self) -> str:
        return FEISHU_DOMAINS.get(self.domain, self.domain)

    def check(self, source: str) -> None:
        if not self.app_id:
            return
        if not self.app_id.startswith("cli_"):
            raise ConfigError(f'{source}: [feishu] app_id: "{self.app_id[:40]}" is not an '
                              "App ID: Feishu's start with cli_ (the app's Credentials page)")
        if not self.app_secret:
            raise ConfigError(f"{source}: [feishu] app_id is set: expected app_secret too "
                              "(the app's Credentials page)")
        if self.mode == "callback" and not (self.encrypt_key and self.verification_token):
            raise ConfigError(f"{source}: [feishu] mode = \"callback\": expected "
                              "encrypt_key and verification_token (the app's Events & "
                              "Callbacks > Encryption page): genbot takes no unsigned events")
        if self.domain not in FEISHU_DOMAINS and not self.domain.startswith(
                ("https://", "http://127.0.0.1", "http://localhost")):
            raise ConfigError(f'{source}: [feishu] domain: "{self.domain}": expected feishu, '
                              "lark, or an https:// base URL")


DISCORD_ROLE = re.compile(r"^(\d{17,20})=(admin|submitter|reviewer|viewer)$")


@section("discord", order=127)
@dataclass(frozen=True)
class DiscordConfig:
    """The Discord bot (docs/discord.md). Off until token is set."""

    token: str = key("", "Bot token of the Discord application (Bot page); env "
                     "GENBOT_DISCORD_TOKEN.", secret=True)
    mode: str = key("gateway", "gateway: genbot connects out to Discord (no public URL "
                    "needed); interactions: Discord posts slash commands and button presses "
                    "to /discord/interactions (the app's Interactions Endpoint URL).",
                    choices=("gateway", "interactions"))
    public_key: str = key("", "The application's Public Key (General Information; 64 hex "
                          "digits): every request to /discord/interactions is checked with "
                          "it (interactions mode).")
    guilds: list[str] = key((), "Server (guild) ids whose slash commands genbot registers at "
                            "start, where they appear at once. Empty: global commands (every "
                            "server the app is in).")
    roles: list[str] = key((), "Discord roles that give a genbot role, as ROLE_ID=role: "
                           "[\"1234567890123456789=admin\", \"2234567890123456789=reviewer\"]; "
                           "the highest a person has counts. /grant and [chat] lists still win.")
    platform_admins: bool = key(False, "Members with Discord's Administrator permission are "
                                "genbot admins.")
    message_content: bool = key(False, "Also read messages that @-mention the bot (a sheet "
                                "attached, the command typed) in gateway mode: needs the "
                                "privileged Message Content intent turned on for the bot.")
    api_url: str = key("https://discord.com/api/v10", "Discord's API base URL (a proxy, or a "
                       "test server).")

    def role_of(self, role_ids: list[str]) -> str | None:
        """The highest genbot role `role_ids` (a member's Discord roles) give, or None."""
        given = dict(r.split("=", 1) for r in self.roles)
        found = {given[r] for r in role_ids if r in given}
        return next((r for r in ("admin", "submitter", "reviewer", "viewer") if r in found),
                    None)

    def check(self, source: str) -> None:
        if not self.token:
            return
        if self.token.count(".") != 2 or len(self.token) < 50:
            raise ConfigError(f"{source}: [discord] token: expected a bot token (three parts "
                              "joined by dots, from the app's Bot page), not a client secret "
                              "or an application id")
        if self.mode == "interactions" and not re.fullmatch(r"[0-9a-fA-F]{64}",
                                                             self.public_key):
            raise ConfigError(f"{source}: [discord] mode = \"interactions\": expected "
                              "public_key, the 64 hex digits of the app's Public Key (General "
                              "Information): genbot takes no unsigned interactions")
        for g in self.guilds:
            if not g.isdigit():
                raise ConfigError(f'{source}: [discord] guilds: "{g[:40]}" is not a server id '
                                  "(digits: Copy Server ID with Developer Mode on)")
        for r in self.roles:
            if not DISCORD_ROLE.match(r):
                raise ConfigError(f'{source}: [discord] roles: "{r[:60]}": expected '
                                  "ROLE_ID=admin|submitter|reviewer|viewer (a role's id: Copy "
                                  "Role ID with Developer Mode on)")
        if not self.api_url.startswith(("https://", "http://127.0.0.1", "http://localhost")):
            raise ConfigError(f'{source}: [discord] api_url: "{self.api_url}": expected an '
                              "https:// base URL")


def kept_secret(path: Path, make: Callable[[], str]) -> str:
    """The secret in `path`, made (readable by this user only) when missing or empty."""
    try:
        if text := path.read_text().strip():
            return text
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    text = make()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    return text


# --- outgoing webhooks (bot.webhooks) ------------------------------------------------------
EVENTS = ("batch.queued", "batch.finished", "batch.canceled", "batch.approved",
          "batch.delivered", "job.succeeded", "job.failed")
ENDPOINT_KEYS = ("url", "secret", "events", "description", "name")
SECRET_PREFIX = "whsec_"


@section("webhook", order=130)
@dataclass(frozen=True)
class WebhookConfig:
    """How webhooks are sent: signed, from the outbox, retried (docs/webhooks.md)."""

    retry_hours: float = key(24.0, "Keep retrying a delivery this long: waits of 5 s, 25 s, "
                             "2 min … growing fivefold up to 6 h, each with ±20% jitter; then "
                             "it fails (genbot webhooks redeliver sends it again).",
                             min=0.001, max=720)
    timeout: float = key(10.0, "Seconds a receiver has to answer one delivery.", min=0.1, max=120)
    concurrency: int = key(8, "Deliveries in flight to one endpoint at once (each endpoint "
                           "has its own: a slow one holds up no other).", min=1, max=100)
    callback_secret: str = key("", "Signs deliveries to a submission's callback_url (whsec_ "
                               "and base64). Empty: a random one kept in data_dir/callback.key "
                               "(genbot webhooks list shows it). Env "
                               "GENBOT_WEBHOOK_CALLBACK_SECRET.", secret=True)
    callback_allowlist: list[str] = key((), "Hosts a callback_url may name even though they "
                                        "resolve to private or loopback addresses (internal "
                                        "services); every other such host is refused.")

    def check(self, source: str) -> None:
        if self.callback_secret:
            secret_bytes(self.callback_secret, f"{source}: [webhook] callback_secret")


def secret_bytes(secret: str, where: str) -> bytes:
    """A Standard Webhooks secret's key: whsec_ then base64 of 24 to 64 random bytes."""
    try:
        raw = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if not secret.startswith(SECRET_PREFIX) or not 24 <= len(raw) <= 64:
        raise ConfigError(f"{where}: expected whsec_ then base64 of 24 to 64 random bytes "
                          "(make one: genbot webhooks secret)")
    return raw


@dataclass(frozen=True)
class WebhookEntry:
    """One [[webhooks]] endpoint."""
    id: str  # its name, or one made from its URL: the outbox platform is webhook:<id>
    url: str
    secret: str
    events: tuple[str, ...]
    description: str = ""


@table("webhooks", order=131)
@dataclass(frozen=True)
class WebhooksConfig:
    """[[webhooks]]: endpoints told of events, each as its own table."""

    entries: tuple[WebhookEntry, ...] = ()

    @classmethod
    def parse(cls, body: Any, source: str, env: Mapping[str, str]) -> WebhooksConfig:
        if body == {}:
            return cls()
        if not isinstance(body, list) or not all(isinstance(e, dict) for e in body):
            raise ConfigError(f"{source}: webhooks: expected [[webhooks]] tables, each with "
                              "url and secret")
        entries = [_webhook(entry, n, source, env) for n, entry in enumerate(body, 1)]
        ids = [e.id for e in entries]
        if len(set(ids)) < len(ids):
            raise ConfigError(f"{source}: [[webhooks]]: two entries have the same name or URL")
        return cls(tuple(entries))

    @classmethod
    def env_prefix(cls) -> str:
        return "GENBOT_WEBHOOKS_SECRET_"

    @classmethod
    def example(cls) -> list[str]:
        return [
            "# Endpoints told of events by signed POSTs (Standard Webhooks: webhook-id,",
            "# webhook-timestamp, webhook-signature; docs/webhooks.md), one [[webhooks]] table",
            "# each. events: any of " + ", ".join(EVENTS[:4]) + ",",
            "# " + ", ".join(EVENTS[4:]) + " (default: all).",
            "# The secret may come from env GENBOT_WEBHOOKS_SECRET_<NAME> instead. Example:",
            "#   [[webhooks]]",
            "#   name = \"dam\"",
            "#   url = \"https://dam.example.com/hooks/genbot\"",
            "#   secret = \"whsec_…\"  # genbot webhooks secret makes one",
            "#   events = [\"batch.finished\"]",
            "#   description = \"the asset library files finished batches\""]


def endpoint_id(url: str, prefix: str = "h") -> str:
    """An endpoint's id made from its URL (the same URL, the same id, on every host)."""
    return prefix + hashlib.sha256(url.encode()).hexdigest()[:12]


def _webhook(entry: dict[str, Any], n: int, source: str,
             env: Mapping[str, str]) -> WebhookEntry:
    where = f"{source}: [[webhooks]] #{n}"
    for k in entry:
        if k not in ENDPOINT_KEYS:
            close = difflib.get_close_matches(k, ENDPOINT_KEYS, n=1, cutoff=0.6)
            hint = f" — did you mean {close[0]}?" if close else ""
            raise ConfigError(f"{where}: unknown key {k}{hint}; expected "
                              f"{', '.join(ENDPOINT_KEYS)}")
    url = entry.get("url")
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") \
            or not urlsplit(url).hostname:
        raise ConfigError(f"{where}: url: expected http(s)://host/path")
    name = entry.get("name", "")
    if not isinstance(name, str) or (name and not re.fullmatch(r"[a-z0-9_-]{1,20}", name)):
        raise ConfigError(f"{where}: name: expected up to 20 of a-z, 0-9, _ and -")
    secret = env.get(WebhooksConfig.env_prefix() + name.upper().replace("-", "_")) if name else None
    secret = secret or entry.get("secret")
    if not isinstance(secret, str):
        raise ConfigError(f"{where}: secret: expected whsec_… (or env "
                          f"{WebhooksConfig.env_prefix()}<NAME> with a name)")
    secret_bytes(secret, f"{where}: secret")
    events = entry.get("events", list(EVENTS))
    if not isinstance(events, list) or not events or any(e not in EVENTS for e in events):
        raise ConfigError(f"{where}: events: expected a list of {', '.join(EVENTS)}")
    description = entry.get("description", "")
    if not isinstance(description, str) or len(description) > 300:
        raise ConfigError(f"{where}: description: expected text of up to 300 characters")
    return WebhookEntry(name or endpoint_id(url), url, secret, tuple(events), description)

