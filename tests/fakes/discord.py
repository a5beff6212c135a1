"""Discord on loopback: its HTTP API (v10), its attachment CDN and its gateway, as discord.py
2.7.1 speaks to them, with fault switches; and helpers that build the interactions Discord
sends, either over the gateway (INTERACTION_CREATE) or signed with Ed25519 and POSTed to an
app's Interactions Endpoint URL.

Facts come from /work/shared/docs/chat-platforms.md ("Discord" and "What a local fake must
speak"; authoritative here), from discord.py 2.7.1's source (http.py, gateway.py, state.py,
utils.py, interactions.py, webhook/async_.py) and from Discord's own documentation, the
discord/discord-api-docs repository (developers/topics/opcodes-and-status-codes.mdx,
topics/rate-limits.mdx, reference.mdx, interactions/receiving-and-responding.mdx,
interactions/application-commands.mdx, resources/message.mdx, resources/channel.mdx,
components/reference.mdx, events/gateway.mdx, events/gateway-events.mdx). Values marked
*(unconfirmed)* could not be checked there; where a refusal's error-tree code is not in
Discord's documentation it is marked so.

The server runs on the caller's event loop: discord.py is async throughout (no blocking call,
unlike lark-oapi), so the fake needs no thread of its own.

Pointing clients at it:
- discord.py: `discord.http.Route.BASE = fake.base` (REST, interaction callbacks and webhooks:
  every Route is built from that class attribute) and
  `discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.gateway)`. A plain
  `discord.Client` never asks GET /gateway/bot (only AutoShardedClient does): it connects to
  DEFAULT_GATEWAY, and after a drop resumes at READY's resume_gateway_url (this fake's
  gateway too). `with fake.patch_discord_py():` sets both and puts them back.
- any HTTP client: base `fake.base` ("http://127.0.0.1:P/api/v10"), header
  `Authorization: Bot {TOKEN}` on bot routes; the interaction callback and the webhook routes
  need only the interaction's token in the path.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import importlib
import io
import json
import math
import mimetypes
import re
import secrets
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import aiohttp
import regex  # type: ignore[import-untyped]  # \p{sc=Deva}, as Discord's name regex
from aiohttp import BodyPartReader, MultipartReader, WSMsgType, web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.fakes.chat import ServiceWorld

# --- the app ---------------------------------------------------------------------------------
APP_ID = "1290000000000000001"
# Apps made since 2019 or so have a bot user whose id is the application's id *(unconfirmed as a
# rule; discord.py relies on neither)*.
BOT_ID = APP_ID
BOT_NAME = "genbot"
OWNER = {"id": "1290000000000000002", "username": "genbot-owner", "discriminator": "0",
         "global_name": "genbot owner", "avatar": None, "public_flags": 0}
# A bot token is base64(bot id) "." timestamp "." HMAC; discord.py sends it verbatim after "Bot ".
TOKEN = (base64.b64encode(BOT_ID.encode()).decode().rstrip("=")
         + ".GfAkE0.genbot-discord-fake-token-not-a-secret")
# The Ed25519 key pair inbound HTTP interactions are signed with: PUBLIC_KEY (hex) is what the
# Developer Portal shows as the app's public key and what the service's config holds; the
# private key stays here. Derived from a fixed seed so the public key is a constant.
PRIVATE_KEY = Ed25519PrivateKey.from_private_bytes(
    hashlib.sha256(b"genbot tests: the Discord fake's interaction signing key").digest())
PUBLIC_KEY = "aa2fa04a60b3ee027357162e38a1e1bd888d806393efa297eaf85104d65ae99f"
assert PRIVATE_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex() == PUBLIC_KEY

API_VERSION = 10
API_PREFIX = f"/api/v{API_VERSION}"
GATEWAY_PATH = "/gateway"
DISCORD_EPOCH_MS = 1_420_070_400_000  # reference.mdx, Snowflakes: the first second of 2015

KiB, MiB = 1024, 1024 * 1024
# --- messages (resources/message.mdx, Create Message; components/reference.mdx) --------------
CONTENT_MAX = 2000  # "Message contents (up to 2000 characters)"
EMBEDS_MAX = 10  # "Up to 10 rich embeds (up to 6000 characters)"
EMBED_CHARS_MAX = 6000
REQUEST_MAX = 25 * MiB  # "The maximum request size when sending a message is 25 MiB"
FILE_MAX = 10 * MiB  # reference.mdx, Uploading Files: "The default limit is 10 MiB" per file
FILES_MAX = 10  # attachments per message *(unconfirmed: Discord's clients allow 10)*
ROWS_MAX = 5  # the shared doc: legacy components, ≤ 5 action rows …
ROW_BUTTONS_MAX = 5  # … "Up to 5 contextually grouped buttons" per row
V2_COMPONENTS_MAX = 40  # "Messages allow up to 40 total components" (IS_COMPONENTS_V2)
CUSTOM_ID_MAX = 100  # "custom_id … a string of 1 to 100 characters"
LABEL_MAX = 80  # button label "max 80 characters"
URL_MAX = 512  # link button url "max 512 characters"
# message flags (resources/message.mdx, Message Flags)
SUPPRESS_EMBEDS, HAS_THREAD, EPHEMERAL, LOADING = 1 << 2, 1 << 5, 1 << 6, 1 << 7
SUPPRESS_NOTIFICATIONS, IS_VOICE_MESSAGE, IS_COMPONENTS_V2 = 1 << 12, 1 << 13, 1 << 15
# component types (components/reference.mdx)
ACTION_ROW, BUTTON = 1, 2
SELECT_TYPES = {3, 5, 6, 7, 8}  # string, user, role, mentionable, channel selects
LINK_STYLE, PREMIUM_STYLE = 5, 6
# message types (resources/message.mdx): DEFAULT, and CHAT_INPUT_COMMAND for a slash
# command's responses (which type a component interaction's reply gets is *(unconfirmed)*: 0)
DEFAULT_MESSAGE, CHAT_INPUT_COMMAND_MESSAGE = 0, 20

# --- channels (resources/channel.mdx) ----------------------------------------------------------
GUILD_TEXT, DM, GUILD_ANNOUNCEMENT = 0, 1, 5
ANNOUNCEMENT_THREAD, PUBLIC_THREAD, PRIVATE_THREAD = 10, 11, 12
GUILD_FORUM, GUILD_MEDIA = 15, 16
THREAD_TYPES = {ANNOUNCEMENT_THREAD, PUBLIC_THREAD, PRIVATE_THREAD}
THREAD_NAME_MAX = 100  # Start Thread from Message: "1-100 character channel name"
ARCHIVE_DURATIONS = (60, 1440, 4320, 10080)  # "can be set to: 60, 1440, 4320, 10080"

# --- interactions (interactions/receiving-and-responding.mdx) ----------------------------------
PING, APPLICATION_COMMAND, MESSAGE_COMPONENT, AUTOCOMPLETE, MODAL_SUBMIT = 1, 2, 3, 4, 5
PONG, CHANNEL_MESSAGE, DEFERRED_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE = 1, 4, 5, 6, 7
AUTOCOMPLETE_RESULT, MODAL = 8, 9
# Which callback types each interaction type takes: 6 and 7 "only valid for component-based
# interactions" (and modal submits); MODAL "not available for MODAL_SUBMIT and PING"; an
# autocomplete interaction is answered with choices only (that it takes nothing else is
# *(unconfirmed)*). PONG answers a PING, over HTTP only.
CALLBACKS = {APPLICATION_COMMAND: {CHANNEL_MESSAGE, DEFERRED_MESSAGE, MODAL},
             MESSAGE_COMPONENT: {CHANNEL_MESSAGE, DEFERRED_MESSAGE, DEFERRED_UPDATE,
                                 UPDATE_MESSAGE, MODAL},
             AUTOCOMPLETE: {AUTOCOMPLETE_RESULT},
             MODAL_SUBMIT: {CHANNEL_MESSAGE, DEFERRED_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE}}
INITIAL_RESPONSE_S = 3.0  # "you must send an initial response within 3 seconds"
TOKEN_TTL_S = 15 * 60.0  # "Interaction tokens are valid for 15 minutes"
CHOICES_MAX = 25  # autocomplete "max of 25 choices"; choice name "1-100 character"
MODAL_TITLE_MAX = 45  # modal "title … max 45 characters", "Between 1 and 5 … components"

# --- application commands (interactions/application-commands.mdx) -------------------------------
# "CHAT_INPUT command names and command option names must match the following regex … with the
# unicode flag set. If there is a lowercase variant of any letters used, you must use those."
COMMAND_NAME = regex.compile(r"^[-_'\p{L}\p{N}\p{sc=Deva}\p{sc=Thai}]{1,32}$")
COMMAND_DESCRIPTION_MAX = 100
OPTIONS_MAX = 25
GLOBAL_CHAT_INPUT_MAX = 100  # the shared doc: "≤ 100 global CHAT_INPUT commands"
CHAT_INPUT, USER_COMMAND, MESSAGE_COMMAND, PRIMARY_ENTRY_POINT = 1, 2, 3, 4
SUB_COMMAND, SUB_COMMAND_GROUP, STRING, INTEGER, BOOLEAN = 1, 2, 3, 4, 5
NUMBER, ATTACHMENT = 10, 11
OPTION_TYPES = set(range(1, 12))
AUTOCOMPLETE_OPTION_TYPES = {STRING, INTEGER, NUMBER}  # "autocomplete" on STRING/INTEGER/NUMBER
LOCALES = frozenset({  # reference.mdx, Locales
    "id", "da", "de", "en-GB", "en-US", "es-ES", "es-419", "fr", "hr", "it", "lt", "hu", "nl",
    "no", "pl", "pt-BR", "ro", "fi", "sv-SE", "vi", "tr", "cs", "el", "bg", "ru", "uk", "hi",
    "th", "zh-CN", "ja", "zh-TW", "ko"})

# --- the gateway (events/gateway.mdx, topics/opcodes-and-status-codes.mdx) ----------------------
OP_DISPATCH, OP_HEARTBEAT, OP_IDENTIFY, OP_PRESENCE, OP_VOICE_STATE = 0, 1, 2, 3, 4
OP_RESUME, OP_RECONNECT, OP_REQUEST_MEMBERS, OP_INVALID_SESSION = 6, 7, 8, 9
OP_HELLO, OP_HEARTBEAT_ACK = 10, 11
GUILDS, GUILD_MEMBERS, GUILD_PRESENCES = 1 << 0, 1 << 1, 1 << 8
GUILD_MESSAGES, DIRECT_MESSAGES, MESSAGE_CONTENT = 1 << 9, 1 << 12, 1 << 15
PRIVILEGED_INTENTS = GUILD_MEMBERS | GUILD_PRESENCES | MESSAGE_CONTENT
ALL_INTENTS = (1 << 26) - 1  # bits 0…25 as documented today *(unconfirmed: the exact top bit)*
# close codes: 4000 unknown error, 4001 unknown opcode, 4002 decode error, 4003 not
# authenticated, 4004 authentication failed, 4005 already authenticated, 4012 invalid API
# version, 4013 invalid intent(s), 4014 disallowed intent(s)
CLOSE_UNKNOWN, CLOSE_UNKNOWN_OPCODE, CLOSE_DECODE = 4000, 4001, 4002
CLOSE_NOT_AUTHENTICATED, CLOSE_AUTH_FAILED, CLOSE_ALREADY_AUTHENTICATED = 4003, 4004, 4005
CLOSE_INVALID_VERSION, CLOSE_INVALID_INTENTS, CLOSE_DISALLOWED_INTENTS = 4012, 4013, 4014
# The interval in events/gateway.mdx's Hello example (Discord's real value varies a little,
# *(unconfirmed)*); tests set a small one: discord.py heartbeats at once after HELLO, then
# every interval, from a thread.
HEARTBEAT_INTERVAL_MS = 41250
# The events each intent gates (events/gateway.mdx, List of Intents); MESSAGE_* take
# GUILD_MESSAGES or DIRECT_MESSAGES by where the message is. Others (INTERACTION_CREATE,
# READY, RESUMED …) need none.
EVENT_INTENTS = {name: GUILDS for name in (
    "GUILD_CREATE", "GUILD_UPDATE", "GUILD_DELETE", "GUILD_ROLE_CREATE", "GUILD_ROLE_UPDATE",
    "GUILD_ROLE_DELETE", "CHANNEL_CREATE", "CHANNEL_UPDATE", "CHANNEL_DELETE",
    "THREAD_CREATE", "THREAD_UPDATE", "THREAD_DELETE", "THREAD_LIST_SYNC",
    "THREAD_MEMBER_UPDATE")} | {name: GUILD_MEMBERS for name in (
        "GUILD_MEMBER_ADD", "GUILD_MEMBER_UPDATE", "GUILD_MEMBER_REMOVE")}
# application flags (resources/application.mdx): the "limited" ones a bot in under 100 servers
# gets when a privileged intent is switched on in the Developer Portal
APP_PRESENCE_LIMITED, APP_MEMBERS_LIMITED, APP_MESSAGE_CONTENT_LIMITED = 1 << 13, 1 << 15, 1 << 19

# --- permissions (topics/permissions.mdx) ------------------------------------------------------
VIEW_CHANNEL, SEND_MESSAGES, EMBED_LINKS, ATTACH_FILES = 1 << 10, 1 << 11, 1 << 14, 1 << 15
READ_MESSAGE_HISTORY, USE_APPLICATION_COMMANDS = 1 << 16, 1 << 31
CREATE_PUBLIC_THREADS, SEND_MESSAGES_IN_THREADS = 1 << 35, 1 << 38
EVERYONE_PERMISSIONS = (VIEW_CHANNEL | SEND_MESSAGES | EMBED_LINKS | ATTACH_FILES
                        | READ_MESSAGE_HISTORY | USE_APPLICATION_COMMANDS
                        | CREATE_PUBLIC_THREADS | SEND_MESSAGES_IN_THREADS)

# --- the CDN (reference.mdx, Signed Attachment CDN URLs) --------------------------------------
# ex: "Hex timestamp indicating when an attachment CDN URL will expire"; is: when issued; hm:
# the signature. How long a URL lives is *(unconfirmed)*: 24 hours here.
CDN_TTL_S = 24 * 3600
# What the CDN answers for an expired or forged URL: the text people report; the status 404
# is *(unconfirmed)*.
CDN_GONE = "This content is no longer available."
# Every Discord API response passes Google's load balancer and says so in `Via`; discord.py
# treats a 429 without Via as a Cloudflare ban (http.py). The exact value is *(unconfirmed)*.
VIA = "1.1 google"
FILE_FIELD = re.compile(r"files\[(\d+)\]")


class NotConnected(RuntimeError):
    """`FakeDiscord.interaction` with no gateway session: Discord would have no one to send
    the interaction to (and the user would see "This interaction failed")."""


# --- refusals ----------------------------------------------------------------------------------
class Refusal(Exception):
    """Discord's JSON error answer: {"message", "code"} (and "errors", the Invalid Form Body
    tree), with its HTTP status (topics/opcodes-and-status-codes.mdx, JSON)."""

    def __init__(self, status: int, code: int, message: str, errors: dict | None = None,
                 headers: Mapping[str, str] | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.errors, self.headers = errors, dict(headers or {})

    def __call__(self) -> Refusal:
        """A fresh one to raise (a module-level refusal is a template)."""
        return Refusal(self.status, self.code, self.message, self.errors, self.headers)

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"message": self.message, "code": self.code}
        if self.errors is not None:
            body["errors"] = self.errors
        return body

    def response(self) -> web.Response:
        return _json(self.body(), self.status, self.headers)


# The messages as the API words them: the documentation lists the codes with their meanings;
# the exact message texts below ("Unknown Channel", "Invalid Webhook Token" …) are the API's
# own wording as libraries and bug reports quote it, *(unconfirmed)* against the docs where
# they differ from the table's wording.
UNAUTHORIZED = Refusal(401, 0, "401: Unauthorized")
NOT_FOUND = Refusal(404, 0, "404: Not Found")
UNKNOWN_CHANNEL = Refusal(404, 10003, "Unknown Channel")
UNKNOWN_GUILD = Refusal(404, 10004, "Unknown Guild")
UNKNOWN_MESSAGE = Refusal(404, 10008, "Unknown Message")
UNKNOWN_WEBHOOK = Refusal(404, 10015, "Unknown Webhook")
UNKNOWN_INTERACTION = Refusal(404, 10062, "Unknown interaction")
TOO_LARGE = Refusal(413, 40005, "Request entity too large")
ALREADY_ACKNOWLEDGED = Refusal(400, 40060, "Interaction has already been acknowledged.")
MISSING_ACCESS = Refusal(403, 50001, "Missing Access")
NOT_AUTHOR = Refusal(403, 50005, "Cannot edit a message authored by another user")
EMPTY_MESSAGE = Refusal(400, 50006, "Cannot send an empty message")
MISSING_PERMISSIONS = Refusal(403, 50013, "Missing Permissions")
WRONG_CHANNEL_TYPE = Refusal(400, 50024, "Cannot execute action on this channel type")
INVALID_WEBHOOK_TOKEN = Refusal(401, 50027, "Invalid Webhook Token")
INVALID_JSON = Refusal(400, 50109, "The request body contains invalid JSON.")
THREAD_EXISTS = Refusal(400, 160004, "A thread has already been created for this message")


def form_body(errors: dict) -> Refusal:
    """50035 Invalid Form Body with the errors tree (reference.mdx, Error Messages):
    {"field": {"_errors": [{"code", "message"}]}}, arrays keyed by index."""
    return Refusal(400, 50035, "Invalid Form Body", errors)


# 50035 is also "invalid Content-Type provided" (the JSON error codes table); the tree's code
# and message for it are *(unconfirmed)*.
CONTENT_TYPE_INVALID = form_body({"_errors": [{
    "code": "CONTENT_TYPE_INVALID",
    "message": "Expected \"Content-Type\" header to be one of {'application/json', "
               "'multipart/form-data', 'application/x-www-form-urlencoded'}."}]})


class _Errors:
    """An Invalid Form Body errors tree being built. The codes BASE_TYPE_REQUIRED,
    BASE_TYPE_CHOICES and the tree's shape are documented (reference.mdx); BASE_TYPE_MAX_LENGTH
    ("Must be 2000 or fewer in length.") and COMPONENT_CUSTOM_ID_DUPLICATED ("Component custom
    id was already specified", discord-api-docs#3673) are quoted from real answers; the other
    codes here are *(unconfirmed)*."""

    def __init__(self) -> None:
        self.tree: dict[str, Any] = {}

    def add(self, path: Iterable[str | int], code: str, message: str) -> None:
        node = self.tree
        for key in path:
            node = node.setdefault(str(key), {})
        node.setdefault("_errors", []).append({"code": code, "message": message})

    def length(self, path: tuple[str | int, ...], value: Any, low: int, high: int) -> None:
        """A string's length in [low, high] (a missing one counts as length 0)."""
        if value is None and low > 0:
            self.add(path, "BASE_TYPE_REQUIRED", "This field is required")
        elif not isinstance(value, str):
            self.add(path, "BASE_TYPE_STRING", "Must be a string.")
        elif not low <= len(value) <= high:
            if low == 0:
                self.add(path, "BASE_TYPE_MAX_LENGTH", f"Must be {high} or fewer in length.")
            else:
                self.add(path, "BASE_TYPE_BAD_LENGTH", f"Must be between {low} and {high} in "
                                                       "length.")

    def most(self, path: tuple[str | int, ...], items: list, high: int) -> None:
        if len(items) > high:
            self.add(path, "BASE_TYPE_MAX_LENGTH", f"Must be {high} or fewer in length.")

    def check(self) -> None:
        if self.tree:
            raise form_body(self.tree)


# --- records -----------------------------------------------------------------------------------
@dataclass(eq=False)
class StoredAttachment:
    """A file on the CDN: one a person sent (`FakeDiscord.attach`) or one the bot uploaded."""
    id: str
    filename: str
    data: bytes
    content_type: str
    description: str | None = None
    channel_id: str | None = None  # the message's channel (None until the message exists)
    ephemeral: bool = False  # served under /ephemeral-attachments/{app}/… (slash command files)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def is_image(self) -> bool:
        return self.content_type.startswith("image/")


MENTION = re.compile(r"<@!?(\d{17,20})>|<@&(\d{17,20})>|@(everyone|here)")


def pings(content: str, allowed: Any) -> list[str]:
    """Whom a message notifies, as Discord reads its content under `allowed_mentions`
    (reference/channel.mdx, Allowed Mentions Object): without it, every mention it holds;
    with it, the kinds in `parse` and the ids in `users` / `roles`. Users as their id,
    roles as "&id", @everyone / @here as "everyone" / "here"."""
    allowed = allowed if isinstance(allowed, dict) else {"parse": ["users", "roles", "everyone"]}
    parse = set(allowed.get("parse") or [])
    users = {str(u) for u in allowed.get("users") or []}  # (snowflakes: strings or numbers)
    roles = {str(r) for r in allowed.get("roles") or []}
    found = []
    for user, role, everyone in MENTION.findall(content):
        if user and ("users" in parse or user in users):
            found.append(user)
        elif role and ("roles" in parse or role in roles):
            found.append(f"&{role}")
        elif everyone and "everyone" in parse:
            found.append(everyone)
    return found


@dataclass(eq=False)
class StoredMessage:
    """A message in a channel, as the records keep it. `channel_id` is where it is: a thread's
    id for a message in a thread (`parent_id` is then the thread's channel). `edits` holds the
    state after each edit (content, attachments' filenames, components, embeds, flags, via:
    "channel" | "webhook" | "interaction")."""
    id: str
    channel_id: str
    author: dict[str, Any]
    timestamp: str
    guild_id: str | None = None
    parent_id: str | None = None
    content: str = ""
    embeds: list[dict[str, Any]] = field(default_factory=list)
    components: list[dict[str, Any]] = field(default_factory=list)
    flags: int = 0
    attachments: list[StoredAttachment] = field(default_factory=list)
    sticker_ids: list[str] = field(default_factory=list)
    poll: dict[str, Any] | None = None
    type: int = DEFAULT_MESSAGE
    interaction_id: str | None = None
    webhook_id: str | None = None
    reference: dict[str, Any] | None = None
    edited_timestamp: str | None = None
    edits: list[dict[str, Any]] = field(default_factory=list)
    deleted: bool = False
    thread_id: str | None = None  # the thread started from this message
    pinged: list[str] = field(default_factory=list)  # whom posting it notified (`pings`)

    @property
    def by_bot(self) -> bool:
        return bool(self.author.get("id") == BOT_ID)

    @property
    def loading(self) -> bool:
        """A deferred response still "thinking" (flag LOADING, until its first edit)."""
        return bool(self.flags & LOADING)

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & EPHEMERAL)

    @property
    def in_thread(self) -> bool:
        return self.parent_id is not None

    @property
    def filenames(self) -> list[str]:
        return [a.filename for a in self.attachments]


@dataclass(eq=False)
class IssuedInteraction:
    """An interaction Discord issued: its token works on the callback route until the first
    response (3 s) and on the webhook routes for 15 minutes. `response` is the initial
    response's callback type; `original_id` the message it made (types 4 and 5)."""
    id: str
    token: str
    type: int
    application_id: str
    payload: dict[str, Any]
    issued: float  # the fake's clock (`FakeDiscord.now`)
    via: str  # "gateway" | "http" | "issued" (registered only)
    channel_id: str | None = None
    guild_id: str | None = None
    message_id: str | None = None  # a component's message
    response: int | None = None
    original_id: str | None = None
    followup_ids: list[str] = field(default_factory=list)


@dataclass(eq=False)
class _Upload:
    filename: str
    data: bytes
    content_type: str | None


@dataclass(eq=False)
class _Fault:
    kind: str  # "429" | "cloudflare" | "5xx"
    route: str | None
    times: int
    retry_after: float = 0.2
    scope: str = "user"
    global_: bool = False
    status: int = 500


@dataclass(eq=False)
class GatewayConnection:
    """One WebSocket to the gateway."""
    ws: web.WebSocketResponse
    request: web.Request
    compress: str | None
    compressor: Callable[[bytes], bytes] | None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    session: GatewaySession | None = None
    heartbeats: int = 0
    closed_by_fake: bool = False


@dataclass(eq=False)
class GatewaySession:
    """A session IDENTIFY opened: its events (for a RESUME's replay) and its connection, None
    while the client is away. A client closing with 1000 or 1001 ends it."""
    id: str
    intents: int
    identify: dict[str, Any]
    shard: tuple[int, int] | None = None
    seq: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    connection: GatewayConnection | None = None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FakeDiscord:
    """Discord for one app (APP_ID, its bot user BOT_ID, TOKEN) on http://127.0.0.1:<port>:
    the API at `base`, the CDN at `cdn`, the gateway at `gateway`. Everything it knows it
    records in plain lists and dicts the test reads while it runs.

    `message_content` etc. are the privileged intents switched on for the app in the Developer
    Portal: an IDENTIFY asking for one that is off is closed with 4014."""

    def __init__(self, *, token: str = TOKEN, message_content: bool = True,
                 members: bool = False, presences: bool = False,
                 interactions_endpoint_url: str | None = None) -> None:
        self.token = token
        self.privileged = ((MESSAGE_CONTENT if message_content else 0)
                           | (GUILD_MEMBERS if members else 0)
                           | (GUILD_PRESENCES if presences else 0))
        self.interactions_endpoint_url = interactions_endpoint_url
        self.bot_user: dict[str, Any] = {
            "id": BOT_ID, "username": BOT_NAME, "discriminator": "4242", "global_name": None,
            "avatar": None, "bot": True, "system": False, "public_flags": 0, "flags": 0,
            "banner": None, "accent_color": None, "avatar_decoration_data": None}
        # the world, set up by the helpers (guild, text_channel, dm_channel, member …)
        self.users: dict[str, dict[str, Any]] = {BOT_ID: self.bot_user}
        self.guilds: dict[str, dict[str, Any]] = {}
        self.roles: dict[str, list[dict[str, Any]]] = {}  # guild id -> its roles
        self.members: dict[tuple[str, str], dict[str, Any]] = {}  # (guild, user) -> member
        self.channels: dict[str, dict[str, Any]] = {}  # id -> channel (threads too)
        # what happened
        self.messages: list[StoredMessage] = []  # every message, people's and the bot's
        self.threads: list[dict[str, Any]] = []  # threads the bot started (channel objects)
        self.responses: list[dict[str, Any]] = []  # initial responses (callback and HTTP)
        self.http_answers: list[dict[str, Any]] = []  # what the app's endpoint answered
        self.interactions: dict[str, IssuedInteraction] = {}
        self.commands: dict[str | None, list[dict[str, Any]]] = {}  # guild id (None: global)
        self.calls: Counter[str] = Counter()  # "METHOD /route/{template}" -> requests
        self.log: list[str] = []  # "METHOD /path" of every API request, in order
        self.downloads: list[str] = []  # attachment ids the CDN served
        self.throttled = 0  # 429s answered (switches and real bucket overflows)
        self.faults: list[_Fault] = []
        # per-route buckets: `bucket_limit` requests per `bucket_window` seconds, per route and
        # top-level resource (channel, guild, webhook): loose by default so discord.py never
        # waits on them; a test can tighten them to see real 429s
        self.bucket_limit, self.bucket_window = 50, 1.0
        # the gateway
        self.heartbeat_interval_ms = HEARTBEAT_INTERVAL_MS
        self.connections: list[GatewayConnection] = []  # open now
        self.connected = 0  # connections ever opened
        self.sessions: dict[str, GatewaySession] = {}
        self.identifies: list[dict[str, Any]] = []  # IDENTIFY payloads (d), in order
        self.readies = 0  # READY events sent
        self.resumes = 0  # RESUMEs answered with RESUMED
        self.heartbeats = 0
        self.client_ops: list[dict[str, Any]] = []  # presence, voice, member requests sent
        self.ws_errors: list[str] = []
        self.echo = True  # the bot's own messages come back as MESSAGE_CREATE / _UPDATE
        # internals
        self.offset = 0.0  # seconds added to the wall clock (`advance`)
        self._messages: dict[str, StoredMessage] = {}
        self._files: dict[str, StoredAttachment] = {}
        self._tokens: dict[str, str] = {}  # interaction token -> interaction id
        self._windows: dict[str, tuple[float, int]] = {}
        self._secret = secrets.token_bytes(32)  # signs CDN URLs
        self._last_snowflake = 0
        self._default: dict[str, Any] | None = None
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None
        self.origin = self.base = self.cdn = self.gateway = ""

    # --- the server ---------------------------------------------------------------------------
    async def start(self) -> FakeDiscord:
        app = web.Application(client_max_size=64 * MiB, middlewares=[self._api])
        r = app.router
        a = API_PREFIX
        r.add_get(f"{a}/users/@me", self.get_me)
        r.add_get(f"{a}/users/{{user_id}}", self.get_user)
        r.add_get(f"{a}/oauth2/applications/@me", self.get_application)
        r.add_get(f"{a}/applications/@me", self.get_application)
        r.add_get(f"{a}/gateway", self.get_gateway)
        r.add_get(f"{a}/gateway/bot", self.get_gateway_bot)
        r.add_get(f"{a}/applications/{{app_id}}/commands", self.get_commands)
        r.add_put(f"{a}/applications/{{app_id}}/commands", self.put_commands)
        r.add_get(f"{a}/applications/{{app_id}}/guilds/{{guild_id}}/commands", self.get_commands)
        r.add_put(f"{a}/applications/{{app_id}}/guilds/{{guild_id}}/commands", self.put_commands)
        r.add_post(f"{a}/interactions/{{interaction_id}}/{{token}}/callback", self.callback)
        r.add_post(f"{a}/webhooks/{{app_id}}/{{token}}", self.execute_webhook)
        hook = f"{a}/webhooks/{{app_id}}/{{token}}/messages/{{message_id}}"
        r.add_get(hook, self.get_webhook_message)
        r.add_patch(hook, self.edit_webhook_message)
        r.add_delete(hook, self.delete_webhook_message)
        r.add_get(f"{a}/channels/{{channel_id}}", self.get_channel)
        r.add_post(f"{a}/channels/{{channel_id}}/messages", self.create_message)
        one = f"{a}/channels/{{channel_id}}/messages/{{message_id}}"
        r.add_get(one, self.get_message)
        r.add_patch(one, self.edit_message)
        r.add_delete(one, self.delete_message)
        r.add_post(f"{one}/threads", self.start_thread)
        r.add_post(f"{a}/channels/{{channel_id}}/typing", self.typing)
        r.add_get(GATEWAY_PATH, self.gateway_socket)
        for prefix in ("", "/media"):  # url (cdn.discordapp.com), proxy_url (media.discordapp.net)
            r.add_get(prefix + "/attachments/{parent}/{attachment_id}/{filename}", self.cdn_file)
            r.add_get(prefix + "/ephemeral-attachments/{parent}/{attachment_id}/{filename}",
                      self.cdn_file)
        # lingering_time: after a refusal sent before the body was read (413 on Content-Length)
        # the client stops sending; aiohttp would wait 10 s for the rest before closing
        self._runner = web.AppRunner(app, access_log=None, lingering_time=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.origin = f"http://127.0.0.1:{port}"
        self.base = self.origin + API_PREFIX
        self.cdn = self.origin
        self.gateway = f"ws://127.0.0.1:{port}{GATEWAY_PATH}"
        self._client = aiohttp.ClientSession()
        return self

    async def stop(self) -> None:
        for conn in list(self.connections):
            conn.closed_by_fake = True
            with contextlib.suppress(Exception):
                await conn.ws.close(code=1001, message=b"the fake is stopping")
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @contextlib.contextmanager
    def patch_discord_py(self) -> Iterator[None]:
        """discord.py's REST base (Route.BASE) and gateway (DiscordWebSocket.DEFAULT_GATEWAY)
        point here inside the block; both are class attributes, restored after."""
        import yarl
        from discord.gateway import DiscordWebSocket
        from discord.http import Route
        old = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
        Route.BASE = self.base
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.gateway)
        try:
            yield
        finally:
            Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = old

    # --- time and ids -------------------------------------------------------------------------
    def now(self) -> float:
        """The fake's Unix time: the wall clock plus what `advance` added. Interaction
        deadlines, token lifetimes and CDN expiry follow it; rate-limit windows follow the
        real monotonic clock (discord.py really sleeps on them)."""
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        """Move the fake's clock on (e.g. past an interaction's 3 s or 15 min, or a CDN URL's
        expiry) without waiting."""
        self.offset += seconds

    def snowflake(self) -> str:
        """A new id: ms since the Discord epoch << 22 | worker 1 | process 1 | increment
        (reference.mdx, Snowflakes), strictly increasing."""
        value = ((int(self.now() * 1000) - DISCORD_EPOCH_MS) << 22) | (1 << 17) | (1 << 12)
        value = max(value, self._last_snowflake + 1)
        self._last_snowflake = value
        return str(value)

    # --- the world: helpers that set it up -------------------------------------------------------
    def user(self, name: str = "alice", *, id: str | int | None = None,
             global_name: str | None = None, bot: bool = False) -> dict[str, Any]:
        """A Discord user (a person, unless bot=True)."""
        uid = str(id) if id is not None else self.snowflake()
        user = {"id": uid, "username": name, "discriminator": "0", "global_name": global_name
                or name.capitalize(), "avatar": None, "bot": bot, "system": False,
                "public_flags": 0, "banner": None, "accent_color": None,
                "avatar_decoration_data": None}
        self.users[uid] = user
        return user

    def guild(self, name: str = "genbot test", *, id: str | int | None = None,
              owner: dict[str, Any] | str | int | None = None,
              locale: str = "zh-CN") -> dict[str, Any]:
        """A server the bot is in: its @everyone role (the guild's id) and the bot's member are
        made with it."""
        gid = str(id) if id is not None else self.snowflake()
        owner_id = _id(owner) if owner is not None else BOT_ID
        guild: dict[str, Any] = {"id": gid, "name": name, "icon": None, "splash": None,
                 "discovery_splash": None, "owner_id": owner_id, "afk_channel_id": None,
                 "afk_timeout": 300, "verification_level": 0,
                 "default_message_notifications": 0, "explicit_content_filter": 0,
                 "features": [], "mfa_level": 0, "application_id": None,
                 "system_channel_id": None, "system_channel_flags": 0, "rules_channel_id": None,
                 "vanity_url_code": None, "description": None, "banner": None,
                 "premium_tier": 0, "premium_subscription_count": 0, "preferred_locale": locale,
                 "public_updates_channel_id": None, "nsfw_level": 0, "nsfw": False,
                 "premium_progress_bar_enabled": False, "max_members": 500000,
                 "max_video_channel_users": 25, "joined_at": _iso(self.now())}
        self.guilds[gid] = guild
        self.roles[gid] = [self._role_object(gid, "@everyone", EVERYONE_PERMISSIONS, 0)]
        self.member(gid, self.bot_user)
        return guild

    def role(self, guild: dict[str, Any] | str | int, name: str, *,
             permissions: int = 0, id: str | int | None = None) -> dict[str, Any]:
        gid = _id(guild)
        role = self._role_object(str(id) if id is not None else self.snowflake(), name,
                                 permissions, len(self.roles[gid]))
        self.roles[gid].append(role)
        return role

    @staticmethod
    def _role_object(rid: str, name: str, permissions: int, position: int) -> dict[str, Any]:
        return {"id": rid, "name": name, "color": 0, "colors": {"primary_color": 0},
                "hoist": False, "icon": None, "unicode_emoji": None, "position": position,
                "permissions": str(permissions), "managed": False, "mentionable": False,
                "flags": 0}

    def member(self, guild: dict[str, Any] | str | int, user: dict[str, Any],
               roles: Iterable[dict[str, Any] | str | int] = (), *,
               nick: str | None = None) -> dict[str, Any]:
        """`user` is in `guild` with these roles (besides @everyone)."""
        gid = _id(guild)
        member = {"user": user, "nick": nick, "avatar": None, "banner": None,
                  "roles": [_id(r) for r in roles], "joined_at": _iso(self.now()),
                  "premium_since": None, "deaf": False, "mute": False, "flags": 0,
                  "pending": False, "communication_disabled_until": None}
        self.users.setdefault(user["id"], user)
        self.members[(gid, user["id"])] = member
        return member

    def text_channel(self, guild: dict[str, Any] | str | int, name: str = "general", *,
                     id: str | int | None = None, type: int = GUILD_TEXT) -> dict[str, Any]:
        """A guild text channel (type 0; GUILD_ANNOUNCEMENT 5, GUILD_FORUM 15 … by `type`)."""
        gid = _id(guild)
        position = sum(1 for c in self.channels.values() if c.get("guild_id") == gid)
        channel: dict[str, Any] = {
            "id": str(id) if id is not None else self.snowflake(), "type": type,
                   "guild_id": gid, "name": name, "position": position,
                   "permission_overwrites": [], "parent_id": None, "topic": None,
                   "nsfw": False, "last_message_id": None, "rate_limit_per_user": 0,
                   "flags": 0}
        self.channels[channel["id"]] = channel
        return channel

    def dm_channel(self, user: dict[str, Any], *, id: str | int | None = None) -> dict[str, Any]:
        """The bot's DM channel with `user` (type 1)."""
        self.users.setdefault(user["id"], user)
        channel: dict[str, Any] = {
            "id": str(id) if id is not None else self.snowflake(), "type": DM,
                   "last_message_id": None, "flags": 0, "recipients": [user]}
        self.channels[channel["id"]] = channel
        return channel

    def thread(self, channel: dict[str, Any] | str | int, name: str = "a thread", *,
               owner: dict[str, Any] | None = None, message_id: str | None = None,
               auto_archive_duration: int = 1440) -> dict[str, Any]:
        """A public thread (type 11) in `channel`, e.g. one a person started (the bot's own
        come from the threads route). With `message_id` it hangs off that message."""
        parent = self._channel(_id(channel))
        tid = message_id or self.snowflake()
        created = _iso(self.now())
        thread = {"id": tid, "type": PUBLIC_THREAD, "guild_id": parent.get("guild_id"),
                  "parent_id": parent["id"], "owner_id": (owner or self.bot_user)["id"],
                  "name": name, "last_message_id": None, "rate_limit_per_user": 0,
                  "message_count": 0, "member_count": 1, "total_message_sent": 0,
                  "flags": 0, "thread_metadata": {
                      "archived": False, "auto_archive_duration": auto_archive_duration,
                      "archive_timestamp": created, "locked": False,
                      "create_timestamp": created}}
        self.channels[tid] = thread
        if message_id and message_id in self._messages:
            source = self._messages[message_id]
            source.thread_id, source.flags = tid, source.flags | HAS_THREAD
        return thread

    def attach(self, filename: str, data: bytes, content_type: str | None = None, *,
               channel: dict[str, Any] | str | int | None = None,
               description: str | None = None) -> dict[str, Any]:
        """A file a person uploads: the attachment object {id, filename, size, url, proxy_url,
        content_type …} with a signed CDN URL, as a slash command's ATTACHMENT option resolves
        it (without `channel`: an ephemeral attachment, /ephemeral-attachments/…) or as it sits
        on a message in `channel`. Its bytes are served by the CDN route."""
        att = StoredAttachment(id=self.snowflake(), filename=filename, data=data,
                               content_type=content_type or _guess_type(filename),
                               description=description,
                               channel_id=_id(channel) if channel is not None else None,
                               ephemeral=channel is None)
        self._files[att.id] = att
        return self.attachment_object(att)

    def post_as(self, user: dict[str, Any], channel: dict[str, Any] | str | int,
                content: str = "", *, attachments: Iterable[dict[str, Any]] = ()
                ) -> StoredMessage:
        """A person's message in a channel (recorded only: `dispatch("MESSAGE_CREATE",
        fake.message_object(m))` delivers it to the bot). `attachments` are `attach(…)`
        objects."""
        ch = self._channel(_id(channel))
        files = [self._files[a["id"]] for a in attachments]
        for f in files:
            f.channel_id, f.ephemeral = ch["id"], False
        return self._record(ch, user, {"content": content, "attachments": files})

    async def deliver(self, m: StoredMessage, event: str = "MESSAGE_CREATE") -> int:
        """Send a recorded message to the bot as MESSAGE_CREATE (or _UPDATE): the message
        object with guild_id and the author's partial member in a guild, through `dispatch`'s
        intent rules."""
        data = self.message_object(m)
        if m.guild_id:
            data["guild_id"] = m.guild_id
            member = self.members.get((m.guild_id, str(m.author.get("id"))))
            if member is not None:
                data["member"] = {k: v for k, v in member.items() if k != "user"}
        return await self.dispatch(event, data)

    def default_channel(self) -> dict[str, Any]:
        """A guild "genbot test" with a text channel "general" and a member alice, made on
        first use: where the interaction helpers act when given no channel."""
        if self._default is None:
            guild = self.guild()
            self._default = self.text_channel(guild)
            self.member(guild, self.user("alice"))
        return self._default

    # --- what tests read --------------------------------------------------------------------------
    def message(self, message_id: str | int) -> StoredMessage:
        return self._messages[str(message_id)]

    def messages_in(self, channel: dict[str, Any] | str | int, *,
                    bot_only: bool = False) -> list[StoredMessage]:
        """The messages (not deleted; ephemeral ones included, `m.ephemeral`) in a channel or
        thread, in order: a thread's messages are under the thread's id, not its parent's."""
        cid = _id(channel)
        return [m for m in self.messages if m.channel_id == cid and not m.deleted
                and (m.by_bot or not bot_only)]

    @staticmethod
    def non_image(messages: Iterable[StoredMessage]) -> list[StoredMessage]:
        """The messages that carry no picture (no attachment whose content type is image/*)."""
        return [m for m in messages if not any(a.is_image for a in m.attachments)]

    def edits_of(self, message_id: str | int) -> list[dict[str, Any]]:
        return self._messages[str(message_id)].edits

    def interaction_of(self, token: str) -> IssuedInteraction:
        return self.interactions[self._tokens[token]]

    # --- fault switches ---------------------------------------------------------------------------
    def limit(self, route: str | None = None, *, times: int = 1, retry_after: float = 0.2,
              scope: str = "user", global_: bool = False) -> None:
        """The next `times` API requests whose "METHOD /path" (path under /api/v10, e.g.
        "POST /channels/123/messages") contains `route` (None: any) are answered 429
        {"message": "You are being rate limited.", "retry_after", "global"} with Retry-After,
        X-RateLimit-* (Scope; Global when global_) and Via (topics/rate-limits.mdx)."""
        self.faults.append(_Fault("429", route, times, retry_after=retry_after, scope=scope,
                                  global_=global_))

    def cloudflare(self, route: str | None = None, *, times: int = 1,
                   retry_after: float | None = None) -> None:
        """The next `times` matching requests get a Cloudflare ban: 429 with an HTML body and
        no Via (discord.py raises HTTPException at once), with a Retry-After header when
        `retry_after` is given. The page's words and the header are *(unconfirmed)*:
        Cloudflare's "error code: 1015"."""
        self.faults.append(_Fault("cloudflare", route, times,
                                  retry_after=-1.0 if retry_after is None else retry_after))

    def fail(self, route: str | None = None, *, status: int = 500, times: int = 1) -> None:
        """The next `times` matching requests get a server error {"message": "500: Internal
        Server Error", "code": 0} (discord.py retries 500, 502, 504 and 524 after 1 + 2n s;
        any other 5xx it raises as DiscordServerError)."""
        self.faults.append(_Fault("5xx", route, times, status=status))

    def _take_fault(self, what: str) -> _Fault | None:
        for fault in self.faults:
            if fault.times > 0 and (fault.route is None or fault.route in what):
                fault.times -= 1
                if fault.times == 0:
                    self.faults.remove(fault)
                return fault
        return None

    def _fault_response(self, fault: _Fault, bucket: str) -> web.Response:
        if fault.kind == "cloudflare":
            self.throttled += 1
            return web.Response(
                status=429, content_type="text/html",
                text="<!DOCTYPE html><html><head><title>Access denied | discord.com used "
                     "Cloudflare to restrict access</title></head><body>error code: 1015"
                     "</body></html>", headers={"Server": "cloudflare", **(
                         {"Retry-After": str(math.ceil(fault.retry_after))}
                         if fault.retry_after >= 0 else {})})
        if fault.kind == "5xx":
            return _json({"message": f"{fault.status}: {_reason(fault.status)}", "code": 0},
                         fault.status,
                         {"Via": VIA})
        self.throttled += 1
        headers = {"Retry-After": str(math.ceil(fault.retry_after)),
                   "X-RateLimit-Scope": fault.scope, "Via": VIA}
        if fault.global_:
            headers["X-RateLimit-Global"] = "true"
        else:
            headers |= self._limit_headers(bucket, self.bucket_limit, 0, fault.retry_after)
        return _json({"message": "You are being rate limited.",
                      "retry_after": fault.retry_after, "global": fault.global_}, 429, headers)

    @staticmethod
    def _limit_headers(bucket: str, limit: int, remaining: int,
                       reset_after: float) -> dict[str, str]:
        return {"X-RateLimit-Limit": str(limit), "X-RateLimit-Remaining": str(remaining),
                "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
                "X-RateLimit-Reset-After": f"{reset_after:.3f}",
                "X-RateLimit-Bucket": hashlib.sha256(bucket.encode()).hexdigest()[:32]}

    def _count(self, request: web.Request, template: str) -> tuple[dict[str, str], float | None]:
        """Counts a request in its bucket (per route, with the method, and per top-level
        resource: channel, guild, webhook or interaction token): its X-RateLimit-* headers and,
        past the limit, how long until the window resets."""
        bucket = f"{request.method} {template}"
        info = request.match_info
        major = "+".join(info[k] for k in ("channel_id", "guild_id", "app_id", "interaction_id",
                                           "token") if k in info)
        key = f"{bucket}:{major}"
        now = time.monotonic()
        start, count = self._windows.get(key, (now, 0))
        if now - start >= self.bucket_window:
            start, count = now, 0
        count += 1
        self._windows[key] = (start, count)
        reset_after = max(start + self.bucket_window - now, 0.0)
        headers = self._limit_headers(bucket, self.bucket_limit,
                                      max(self.bucket_limit - count, 0), reset_after)
        return headers, (reset_after if count > self.bucket_limit else None)

    @web.middleware
    async def _api(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every /api/v10 request: counted per route, fault switches, buckets, refusals as
        Discord's JSON, X-RateLimit-* and Via on every answer."""
        if not request.path.startswith(API_PREFIX + "/"):
            return await handler(request)
        resource = request.match_info.route.resource
        path = request.path[len(API_PREFIX):]
        template = resource.canonical[len(API_PREFIX):] if resource is not None else None
        self.calls[f"{request.method} {template or path}"] += 1
        self.log.append(f"{request.method} {path}")
        fault = self._take_fault(f"{request.method} {path}")
        if fault is not None:
            return self._fault_response(fault, f"{request.method} {template or path}")
        headers: dict[str, str] = {"Via": VIA}
        if template is not None:
            limits, wait = self._count(request, template)
            headers |= limits
            if wait is not None:
                self.throttled += 1
                return _json({"message": "You are being rate limited.", "retry_after":
                              round(wait, 3), "global": False}, 429,
                             headers | {"Retry-After": str(math.ceil(wait)),
                                        "X-RateLimit-Scope": "user"})
        try:
            response = await handler(request)
        except Refusal as refusal:
            response = refusal.response()
        except web.HTTPException as e:  # no such route (404) or method (405)
            response = _json({"message": f"{e.status}: {e.reason}", "code": 0}, e.status)
        response.headers.update(headers)
        return response

    def _bot(self, request: web.Request) -> None:
        """Bot routes want `Authorization: Bot <token>`."""
        if request.headers.get("Authorization") != f"Bot {self.token}":
            raise UNAUTHORIZED()

    # --- users, the application, the gateway's address --------------------------------------------
    async def get_me(self, request: web.Request) -> web.Response:
        """What discord.py's login (HTTPClient.static_login) reads; a 401 is its LoginFailure."""
        self._bot(request)
        return _json(self.bot_user | {"verified": True, "mfa_enabled": False,
                                      "locale": "en-US", "email": None, "premium_type": 0,
                                      "bio": ""})

    async def get_user(self, request: web.Request) -> web.Response:
        self._bot(request)
        user = self.users.get(request.match_info["user_id"])
        if user is None:
            raise Refusal(404, 10013, "Unknown User")
        return _json(user)

    def app_flags(self) -> int:
        return ((APP_MESSAGE_CONTENT_LIMITED if self.privileged & MESSAGE_CONTENT else 0)
                | (APP_MEMBERS_LIMITED if self.privileged & GUILD_MEMBERS else 0)
                | (APP_PRESENCE_LIMITED if self.privileged & GUILD_PRESENCES else 0))

    async def get_application(self, request: web.Request) -> web.Response:
        """GET oauth2/applications/@me, which discord.py's Client.login reads after
        users/@me (AppInfo wants id, name, description, icon, bot_public,
        bot_require_code_grant, owner, verify_key; with interactions_endpoint_url set it
        warns that the gateway will bring no interactions)."""
        self._bot(request)
        return _json({"id": APP_ID, "name": BOT_NAME, "icon": None,
                      "description": "genbot: batch image generation", "summary": "",
                      "type": None, "bot_public": False, "bot_require_code_grant": False,
                      "verify_key": PUBLIC_KEY, "owner": OWNER, "team": None,
                      "flags": self.app_flags(), "hook": True, "redirect_uris": [],
                      "interactions_endpoint_url": self.interactions_endpoint_url,
                      "role_connections_verification_url": None, "tags": [],
                      "integration_types_config": {"0": {}}, "bot": self.bot_user,
                      "approximate_guild_count": len(self.guilds)})

    async def get_gateway(self, request: web.Request) -> web.Response:
        return _json({"url": self.gateway})

    async def get_gateway_bot(self, request: web.Request) -> web.Response:
        """{url, shards, session_start_limit}: what AutoShardedClient asks (a plain Client
        does not: it connects to DiscordWebSocket.DEFAULT_GATEWAY)."""
        self._bot(request)
        return _json({"url": self.gateway, "shards": 1, "session_start_limit": {
            "total": 1000, "remaining": 1000 - len(self.identifies),
            "reset_after": 86_400_000, "max_concurrency": 1}})

    # --- application commands ---------------------------------------------------------------------
    async def put_commands(self, request: web.Request) -> web.Response:
        """Bulk overwrite (global or one guild's): validated as the command docs say, stored,
        answered with the stored commands. A command keeps its id across overwrites while its
        name and type stay (*(unconfirmed)* that Discord keeps them)."""
        self._bot(request)
        guild_id = self._command_scope(request)
        body = await _read_json(request)
        if not isinstance(body, list):
            raise form_body({"_errors": [{"code": "BASE_TYPE_ARRAY",
                                          "message": "Must be an array."}]})
        errors = _Errors()
        _check_commands(errors, body, global_=guild_id is None)
        errors.check()
        old = {(c["type"], c["name"]): c for c in self.commands.get(guild_id, [])}
        stored = []
        for command in body:
            kind = command.get("type", CHAT_INPUT)
            previous = old.get((kind, command["name"]))
            item = {"id": previous["id"] if previous else self.snowflake(),
                    "application_id": APP_ID, "version": self.snowflake(), "type": kind,
                    "name": command["name"], "description": command.get("description", ""),
                    "name_localizations": command.get("name_localizations"),
                    "description_localizations": command.get("description_localizations"),
                    "options": command.get("options") or [],
                    "default_member_permissions": command.get("default_member_permissions"),
                    "nsfw": bool(command.get("nsfw", False)),
                    "contexts": command.get("contexts"),
                    "integration_types": command.get("integration_types") or [0]}
            if guild_id is not None:
                item["guild_id"] = guild_id
            else:
                item["dm_permission"] = command.get("dm_permission", True)
            stored.append(item)
        self.commands[guild_id] = stored
        return _json(stored)

    async def get_commands(self, request: web.Request) -> web.Response:
        """The stored commands; the localization dictionaries only with
        ?with_localizations=true (application-commands.mdx, Retrieving localized commands)."""
        self._bot(request)
        guild_id = self._command_scope(request)
        full = _true(request.query.get("with_localizations"))
        out = []
        for command in self.commands.get(guild_id, []):
            out.append(command if full else _strip_localizations(command))
        return _json(out)

    def _command_scope(self, request: web.Request) -> str | None:
        """The guild a command route is for (None: global). Another app's id, or a guild the
        bot is not in, is refused with 403 50001 Missing Access *(unconfirmed)*."""
        if request.match_info["app_id"] != APP_ID:
            raise MISSING_ACCESS()
        guild_id = request.match_info.get("guild_id")
        if guild_id is not None and guild_id not in self.guilds:
            raise MISSING_ACCESS()
        return guild_id

    def command_id(self, name: str, guild_id: str | None = None) -> str | None:
        for scope in (guild_id, None):
            for command in self.commands.get(scope, []):
                if command["name"] == name:
                    return str(command["id"])
        return None

    # --- channels and messages --------------------------------------------------------------------
    def _channel(self, channel_id: str) -> dict[str, Any]:
        channel = self.channels.get(channel_id)
        if channel is None:
            raise UNKNOWN_CHANNEL()
        return channel

    def _message_in(self, channel: dict[str, Any], message_id: str) -> StoredMessage:
        """A message of this channel for the bot routes: unknown, deleted, in another channel
        or ephemeral (reachable only through its interaction's token *(unconfirmed)*): 10008."""
        m = self._messages.get(message_id)
        if m is None or m.deleted or m.channel_id != channel["id"] or m.ephemeral:
            raise UNKNOWN_MESSAGE()
        return m

    async def get_channel(self, request: web.Request) -> web.Response:
        self._bot(request)
        return _json(self._channel(request.match_info["channel_id"]))

    async def typing(self, request: web.Request) -> web.Response:
        self._bot(request)
        self._channel(request.match_info["channel_id"])
        return web.Response(status=204)

    async def create_message(self, request: web.Request) -> web.Response:
        """POST channels/{id}/messages: JSON, or multipart with payload_json and files[n]. A
        thread's id is a channel id: posting there posts in the thread."""
        self._bot(request)
        channel = self._channel(request.match_info["channel_id"])
        if channel["type"] in (GUILD_FORUM, GUILD_MEDIA):
            raise Refusal(400, 40058, "Cannot send a message in a forum channel")
        payload, uploads = await self._read_message_body(request)
        fields = self._check_message(payload, uploads)
        m = self._record(channel, self.bot_user, fields)
        if isinstance(payload.get("message_reference"), dict):
            m.reference = payload["message_reference"]
        await self._echo("MESSAGE_CREATE", m)
        return _json(self.message_object(m))

    async def get_message(self, request: web.Request) -> web.Response:
        self._bot(request)
        channel = self._channel(request.match_info["channel_id"])
        return _json(self.message_object(self._message_in(channel,
                                                          request.match_info["message_id"])))

    async def edit_message(self, request: web.Request) -> web.Response:
        """PATCH channels/{id}/messages/{mid}: the bot's own messages only (403 50005 for
        another's); `attachments` lists the files to keep (reference.mdx, Editing Message
        Attachments)."""
        self._bot(request)
        channel = self._channel(request.match_info["channel_id"])
        m = self._message_in(channel, request.match_info["message_id"])
        if not m.by_bot:
            raise NOT_AUTHOR()
        payload, uploads = await self._read_message_body(request)
        self._apply_edit(m, self._check_message(payload, uploads, existing=m), "channel")
        await self._echo("MESSAGE_UPDATE", m)
        return _json(self.message_object(m))

    async def delete_message(self, request: web.Request) -> web.Response:
        """The bot deletes its own messages; another's needs MANAGE_MESSAGES, which this fake's
        bot lacks (403 50013)."""
        self._bot(request)
        channel = self._channel(request.match_info["channel_id"])
        m = self._message_in(channel, request.match_info["message_id"])
        if not m.by_bot:
            raise MISSING_PERMISSIONS()
        m.deleted = True
        return web.Response(status=204)

    async def start_thread(self, request: web.Request) -> web.Response:
        """POST channels/{channel}/messages/{mid}/threads: a public thread (type 11; 10 in an
        announcement channel) whose id is the message's id. One per message (400 160004);
        not in DMs (400 50024) nor in forum or media channels or threads (50024
        *(unconfirmed)* for those). Answers 201 with the channel *(unconfirmed: the status)*."""
        self._bot(request)
        channel = self._channel(request.match_info["channel_id"])
        if channel["type"] not in (GUILD_TEXT, GUILD_ANNOUNCEMENT):
            raise WRONG_CHANNEL_TYPE()
        m = self._message_in(channel, request.match_info["message_id"])
        body = await _read_json(request)
        if not isinstance(body, dict):
            body = {}
        errors = _Errors()
        errors.length(("name",), body.get("name"), 1, THREAD_NAME_MAX)
        duration = body.get("auto_archive_duration")
        if duration is None:
            duration = 1440  # *(unconfirmed)*: the channel's default, 24 h unless set
        elif duration not in ARCHIVE_DURATIONS:
            errors.add(("auto_archive_duration",), "BASE_TYPE_CHOICES",
                       f"Value must be one of {set(ARCHIVE_DURATIONS)}.")
        slowmode = body.get("rate_limit_per_user")
        if slowmode is not None and not (isinstance(slowmode, int) and 0 <= slowmode <= 21600):
            errors.add(("rate_limit_per_user",), "NUMBER_TYPE_MAX",
                       "int value should be less than or equal to 21600.")
        errors.check()
        if m.thread_id is not None:
            raise THREAD_EXISTS()
        thread = self.thread(channel, body["name"], message_id=m.id,
                             auto_archive_duration=duration)
        if channel["type"] == GUILD_ANNOUNCEMENT:
            thread["type"] = ANNOUNCEMENT_THREAD
        thread["rate_limit_per_user"] = slowmode or 0
        thread["member"] = {"id": thread["id"], "user_id": BOT_ID, "flags": 0,
                            "join_timestamp": thread["thread_metadata"]["create_timestamp"]}
        self.threads.append(thread)
        await self.dispatch("THREAD_CREATE", thread | {"newly_created": True})
        return _json(thread, 201)

    # --- interactions: the callback ---------------------------------------------------------------
    async def callback(self, request: web.Request) -> web.Response:
        """POST interactions/{id}/{token}/callback: the initial response, once, within 3 s.
        204, or 200 with the interaction callback response under ?with_response=true
        (discord.py always asks with_response=1)."""
        it = self.interactions.get(request.match_info["interaction_id"])
        if it is None or it.token != request.match_info["token"]:
            raise UNKNOWN_INTERACTION()
        payload, uploads = await self._read_message_body(request)
        answer = await self._initial(it, payload, uploads, "callback")
        if _true(request.query.get("with_response")):
            return _json(answer)
        return web.Response(status=204)

    async def _initial(self, it: IssuedInteraction, payload: dict[str, Any],
                       uploads: dict[int, _Upload], via: str) -> dict[str, Any]:
        """An initial response (callback route or HTTP answer): checked, recorded in
        `responses` (refused ones too, with their status and code), carried out. Returns the
        interaction callback response object."""
        record: dict[str, Any] = {
            "interaction": it.id, "interaction_type": it.type, "type": payload.get("type"),
            "data": payload.get("data"), "files": [u.filename for u in uploads.values()],
            "via": via, "after": round(self.now() - it.issued, 3), "status": 200,
            "code": None}
        self.responses.append(record)
        try:
            if it.response is not None:
                raise ALREADY_ACKNOWLEDGED()
            if self.now() - it.issued > INITIAL_RESPONSE_S:
                raise UNKNOWN_INTERACTION()
            return await self._respond(it, payload, uploads)
        except Refusal as refusal:
            record["status"], record["code"] = refusal.status, refusal.code
            raise

    async def _respond(self, it: IssuedInteraction, payload: dict[str, Any],
                       uploads: dict[int, _Upload]) -> dict[str, Any]:
        kind = payload.get("type")
        data = payload.get("data") or {}
        if not isinstance(data, dict):
            raise form_body({"data": {"_errors": [{"code": "DICT_TYPE_CONVERT",
                                                   "message": "Only dictionaries may be used "
                                                              "in a DictType"}]}})
        if kind not in CALLBACKS.get(it.type, set()):
            raise form_body({"type": {"_errors": [{
                "code": "INTERACTION_RESPONSE_TYPE_INVALID",  # *(unconfirmed)*
                "message": f"Value {kind!r} is not a valid response to an interaction of type "
                           f"{it.type}."}]}})
        answer: dict[str, Any] = {"id": it.id, "type": it.type}
        message: StoredMessage | None = None
        if kind == CHANNEL_MESSAGE:
            fields = self._check_message(data, uploads, ephemeral=True)
            message = self._record(self._interaction_channel(it), self.bot_user, fields,
                                   interaction=it)
            it.original_id = message.id
        elif kind == DEFERRED_MESSAGE:
            flags = data.get("flags") or 0
            if not isinstance(flags, int) or flags & ~EPHEMERAL:
                # "the only valid message flag you may use is EPHEMERAL"
                raise form_body({"data": {"flags": {"_errors": [{
                    "code": "INTERACTION_RESPONSE_FLAGS_INVALID",  # *(unconfirmed)*
                    "message": "Only the EPHEMERAL flag may be set on a deferred response."}]}}})
            message = self._record(self._interaction_channel(it), self.bot_user,
                                   {"flags": LOADING | (flags & EPHEMERAL)}, interaction=it)
            it.original_id = message.id
        elif kind == UPDATE_MESSAGE:
            target = self._messages.get(it.message_id or "")
            if target is not None:
                self._apply_edit(target, self._check_message(data, uploads, existing=target),
                                 "interaction")
                message = target
        elif kind == AUTOCOMPLETE_RESULT:
            _check_choices(data)
        elif kind == MODAL:
            _check_modal(data)
        it.response = kind
        if message is not None:
            answer |= {"response_message_id": message.id,
                       "response_message_loading": message.loading,
                       "response_message_ephemeral": message.ephemeral}
            if not message.ephemeral:
                await self._echo("MESSAGE_UPDATE" if kind == UPDATE_MESSAGE
                                 else "MESSAGE_CREATE", message)
        resource: dict[str, Any] = {"type": kind}
        if message is not None and kind in (CHANNEL_MESSAGE, UPDATE_MESSAGE):
            resource["message"] = self.message_object(message)
        return {"interaction": answer, "resource": resource}

    def _interaction_channel(self, it: IssuedInteraction) -> dict[str, Any]:
        channel = self.channels.get(it.channel_id or "")
        if channel is None:  # a channel the test never made: the payload's own
            channel = dict(it.payload.get("channel") or {"id": it.channel_id, "type": GUILD_TEXT})
        return channel

    # --- interactions: the webhook routes ---------------------------------------------------------
    def _hooked(self, request: web.Request) -> IssuedInteraction:
        """The interaction a webhook route's token belongs to. An unknown token, or one older
        than 15 minutes: 401 50027 (discord-api-docs#6851: 401 after the 15 minutes). Another
        app's id: 404 10015 *(unconfirmed)*. A token whose interaction got no initial response
        within 3 s was invalidated: 404 10015, as is a followup before any initial response
        (the 404 "Unknown Webhook" of discord-api-docs#6851 and #7220; the exact cases
        *(unconfirmed)*)."""
        iid = self._tokens.get(request.match_info["token"])
        if iid is None:
            raise INVALID_WEBHOOK_TOKEN()
        it = self.interactions[iid]
        if self.now() - it.issued > TOKEN_TTL_S:
            raise INVALID_WEBHOOK_TOKEN()
        if request.match_info["app_id"] != it.application_id:
            raise UNKNOWN_WEBHOOK()
        if it.response is None and self.now() - it.issued > INITIAL_RESPONSE_S:
            raise UNKNOWN_WEBHOOK()
        return it

    def _hooked_message(self, it: IssuedInteraction, message_id: str) -> StoredMessage:
        """@original exists once a type 4 or 5 response made it; a followup id must be one of
        this token's messages; anything else is 404 10008."""
        mid = it.original_id if message_id == "@original" else message_id
        if mid is None or (mid != it.original_id and mid not in it.followup_ids):
            raise UNKNOWN_MESSAGE()
        m = self._messages.get(mid)
        if m is None or m.deleted:
            raise UNKNOWN_MESSAGE()
        return m

    async def execute_webhook(self, request: web.Request) -> web.Response:
        """POST webhooks/{app}/{token}: a followup ("wait is always true" for interactions:
        the message comes back). Right after a type-5 defer, while the original still
        "thinks", it edits the original instead (documented, deprecated): no new message, and
        the original keeps its ephemeral state."""
        it = self._hooked(request)
        if it.response is None:
            raise UNKNOWN_WEBHOOK()
        payload, uploads = await self._read_message_body(request)
        original = self._messages.get(it.original_id or "")
        if it.response == DEFERRED_MESSAGE and original is not None and original.loading:
            fields = self._check_message(payload, uploads, existing=original)
            fields["flags"] = original.flags
            self._apply_edit(original, fields, "webhook")
            if not original.ephemeral:
                await self._echo("MESSAGE_UPDATE", original)
            return _json(self.message_object(original))
        fields = self._check_message(payload, uploads, ephemeral=True)
        m = self._record(self._interaction_channel(it), self.bot_user, fields, interaction=it)
        it.followup_ids.append(m.id)
        if not m.ephemeral:
            await self._echo("MESSAGE_CREATE", m)
        return _json(self.message_object(m))

    async def get_webhook_message(self, request: web.Request) -> web.Response:
        it = self._hooked(request)
        return _json(self.message_object(self._hooked_message(it,
                                                              request.match_info["message_id"])))

    async def edit_webhook_message(self, request: web.Request) -> web.Response:
        """PATCH …/messages/@original or …/messages/{id}: edits (a deferred original stops
        "thinking" at its first edit)."""
        it = self._hooked(request)
        m = self._hooked_message(it, request.match_info["message_id"])
        payload, uploads = await self._read_message_body(request)
        self._apply_edit(m, self._check_message(payload, uploads, existing=m), "webhook")
        if not m.ephemeral:
            await self._echo("MESSAGE_UPDATE", m)
        return _json(self.message_object(m))

    async def delete_webhook_message(self, request: web.Request) -> web.Response:
        it = self._hooked(request)
        self._hooked_message(it, request.match_info["message_id"]).deleted = True
        return web.Response(status=204)

    # --- message bodies ---------------------------------------------------------------------------
    async def _read_message_body(self, request: web.Request
                                 ) -> tuple[dict[str, Any], dict[int, _Upload]]:
        """JSON, or multipart/form-data (payload_json + files[n]); anything else is 50035
        (invalid Content-Type). Over 25 MiB in all, or a file over 10 MiB: 413 40005 (for a
        single file Discord may answer 50045 "File uploaded exceeds the maximum size"
        instead *(unconfirmed)*)."""
        if request.content_length is not None and request.content_length > REQUEST_MAX:
            raise TOO_LARGE()
        if not request.body_exists:
            return {}, {}
        kind = request.content_type
        if kind == "multipart/form-data":
            return await _read_multipart(MultipartReader(request.headers, request.content))
        if kind != "application/json":
            raise CONTENT_TYPE_INVALID()
        body = _parse_json(await _read_limited(request.content))
        if not isinstance(body, dict):
            raise form_body({"_errors": [{"code": "DICT_TYPE_CONVERT",
                                          "message": "Only dictionaries may be used in a "
                                                     "DictType"}]})
        return body, {}

    def _check_message(self, payload: dict[str, Any], uploads: dict[int, _Upload], *,
                       existing: StoredMessage | None = None,
                       ephemeral: bool = False) -> dict[str, Any]:
        """A create (existing=None) or edit body, checked as Discord does: form errors (50035)
        first, then an empty result (50006). Returns the fields to set. `ephemeral`: the route
        takes the EPHEMERAL flag (interaction responses and followups)."""
        errors = _Errors()
        fields: dict[str, Any] = {}
        if "content" in payload:
            content = payload["content"] if payload["content"] is not None else ""
            errors.length(("content",), content, 0, CONTENT_MAX)
            fields["content"] = content if isinstance(content, str) else ""
            if existing is None:  # (an edit notifies nobody)
                fields["pinged"] = pings(fields["content"], payload.get("allowed_mentions"))
        if "embeds" in payload:
            embeds = payload["embeds"] or []
            if not isinstance(embeds, list):
                errors.add(("embeds",), "BASE_TYPE_ARRAY", "Must be an array.")
                embeds = []
            errors.most(("embeds",), embeds, EMBEDS_MAX)
            if sum(_embed_chars(e) for e in embeds) > EMBED_CHARS_MAX:
                errors.add(("embeds",), "MAX_EMBED_SIZE_EXCEEDED",  # *(unconfirmed)*
                           f"Embed size exceeds maximum size of {EMBED_CHARS_MAX}")
            fields["embeds"] = embeds
        flags = existing.flags if existing is not None else 0
        if payload.get("flags") is not None:
            requested = payload["flags"]
            if not isinstance(requested, int):
                errors.add(("flags",), "NUMBER_TYPE_COERCE", f"Value \"{requested}\" is not "
                                                             "int.")
            elif existing is None:
                # which flags a sender may set (Create Message, Execute Webhook); others are
                # dropped *(unconfirmed: Discord may refuse them instead)*
                allowed = (SUPPRESS_EMBEDS | SUPPRESS_NOTIFICATIONS | IS_VOICE_MESSAGE
                           | IS_COMPONENTS_V2 | (EPHEMERAL if ephemeral else 0))
                flags = requested & allowed
            else:  # Edit Message: SUPPRESS_EMBEDS set or unset, IS_COMPONENTS_V2 only set
                flags = (flags & ~SUPPRESS_EMBEDS) | (requested
                                                      & (SUPPRESS_EMBEDS | IS_COMPONENTS_V2))
        fields["flags"] = flags
        v2 = bool(flags & IS_COMPONENTS_V2)
        if "components" in payload:
            components = payload["components"] or []
            _check_components(errors, components, v2=v2)
            fields["components"] = components if isinstance(components, list) else []
        if v2 and (fields.get("content", existing.content if existing else "")
                   or fields.get("embeds", existing.embeds if existing else [])):
            # "Providing content, embeds … will fail with a 400 BAD REQUEST" (the code in the
            # tree is *(unconfirmed)*)
            errors.add(("content",), "MESSAGE_CANNOT_USE_LEGACY_FIELDS_WITH_COMPONENTS_V2",
                       "The 'content' and 'embeds' fields cannot be used when using "
                       "MessageFlags.IS_COMPONENTS_V2")
        for key in ("sticker_ids", "poll"):
            if key in payload:
                fields[key] = payload[key] or ([] if key == "sticker_ids" else None)
        fields["attachments"] = self._attachments(errors, payload, uploads, existing)
        errors.check()
        after = {k: fields.get(k, getattr(existing, k) if existing else None)
                 for k in ("content", "embeds", "attachments", "components", "sticker_ids",
                           "poll")}
        if not any(after.values()):
            raise EMPTY_MESSAGE()
        return fields

    def _attachments(self, errors: _Errors, payload: dict[str, Any],
                     uploads: dict[int, _Upload],
                     existing: StoredMessage | None) -> list[StoredAttachment]:
        """The message's files after this request. Create: every files[n], with the filename
        and description its `attachments` entry {id: n} gives (a file the list leaves out is
        still attached *(unconfirmed)*). Edit: without `attachments` the old ones stay and new
        files are added; with it, only the listed ones (old ids, new n) remain."""
        kept = list(existing.attachments) if existing is not None else []
        listed = payload.get("attachments")
        if listed is None:
            result = kept + [_stored(u, self.snowflake()) for _, u in sorted(uploads.items())]
        else:
            if not isinstance(listed, list):
                errors.add(("attachments",), "BASE_TYPE_ARRAY", "Must be an array.")
                listed = []
            old = {a.id: a for a in kept}
            result, used = [], set()
            for i, entry in enumerate(listed):
                ref = str(entry.get("id")) if isinstance(entry, dict) else ""
                description = entry.get("description") if isinstance(entry, dict) else None
                if ref in old:
                    if description is not None:
                        old[ref].description = description
                    result.append(old[ref])
                elif ref.isdigit() and int(ref) in uploads:
                    used.add(int(ref))
                    upload = uploads[int(ref)]
                    att = _stored(upload, self.snowflake())
                    att.filename = entry.get("filename") or upload.filename
                    att.description = description
                    result.append(att)
                else:
                    errors.add(("attachments", i, "id"), "ATTACHMENT_NOT_FOUND",  # *(unconf.)*
                               f"Unknown attachment id {ref or None}")
            if existing is None:
                result += [_stored(u, self.snowflake()) for n, u in sorted(uploads.items())
                           if n not in used]
        errors.most(("attachments",), result, FILES_MAX)
        return result

    def _record(self, channel: dict[str, Any], author: dict[str, Any], fields: dict[str, Any],
                *, interaction: IssuedInteraction | None = None) -> StoredMessage:
        thread = channel.get("type") in THREAD_TYPES
        m = StoredMessage(id=self.snowflake(), channel_id=channel["id"], author=author,
                          timestamp=_iso(self.now()), guild_id=channel.get("guild_id"),
                          parent_id=channel.get("parent_id") if thread else None)
        if interaction is not None:
            m.interaction_id, m.webhook_id = interaction.id, interaction.application_id
            m.type = (CHAT_INPUT_COMMAND_MESSAGE if interaction.type == APPLICATION_COMMAND
                      else DEFAULT_MESSAGE)
        for key, value in fields.items():
            setattr(m, key, value)
        self._adopt(m)
        self.messages.append(m)
        self._messages[m.id] = m
        channel["last_message_id"] = m.id
        if thread:
            channel["message_count"] = channel.get("message_count", 0) + 1
            channel["total_message_sent"] = channel.get("total_message_sent", 0) + 1
        return m

    def _adopt(self, m: StoredMessage) -> None:
        """The message's files are served from the CDN under its channel."""
        for att in m.attachments:
            if att.channel_id is None:
                att.channel_id = m.channel_id
                att.ephemeral = m.ephemeral
            self._files[att.id] = att

    def _apply_edit(self, m: StoredMessage, fields: dict[str, Any], via: str) -> None:
        for key, value in fields.items():
            setattr(m, key, value)
        m.flags &= ~LOADING
        m.edited_timestamp = _iso(self.now())
        self._adopt(m)
        m.edits.append({"via": via, "at": m.edited_timestamp, "content": m.content,
                        "attachments": m.filenames, "components": m.components,
                        "embeds": m.embeds, "flags": m.flags})

    # --- what the API answers for a message, a file -----------------------------------------------
    def message_object(self, m: StoredMessage) -> dict[str, Any]:
        """The message object (resources/message.mdx), with freshly signed attachment URLs, as
        the API returns it (and, with guild_id, as MESSAGE_CREATE carries it)."""
        out: dict[str, Any] = {
            "id": m.id, "type": m.type, "channel_id": m.channel_id, "author": m.author,
            "content": m.content, "timestamp": m.timestamp,
            "edited_timestamp": m.edited_timestamp, "tts": False, "mention_everyone": False,
            "mentions": [], "mention_roles": [], "mention_channels": [],
            "attachments": [self.attachment_object(a) for a in m.attachments],
            "embeds": m.embeds, "pinned": False, "flags": m.flags, "components": m.components}
        if m.sticker_ids:
            out["sticker_items"] = [{"id": s, "name": "sticker", "format_type": 1}
                                    for s in m.sticker_ids]
        if m.poll:
            out["poll"] = m.poll
        if m.webhook_id:
            out["webhook_id"] = out["application_id"] = m.webhook_id
        if m.interaction_id:
            it = self.interactions.get(m.interaction_id)
            payload = it.payload if it else {}
            user = payload.get("user") or (payload.get("member") or {}).get("user") \
                or self.bot_user
            out["interaction_metadata"] = {
                "id": m.interaction_id, "type": it.type if it else APPLICATION_COMMAND,
                "user": user, "authorizing_integration_owners":
                    payload.get("authorizing_integration_owners", {})}
            if it is not None and it.original_id and it.original_id != m.id:
                out["interaction_metadata"]["original_response_message_id"] = it.original_id
        if m.reference:
            out["message_reference"] = m.reference
        if m.thread_id and m.thread_id in self.channels:
            out["thread"] = self.channels[m.thread_id]
        return out

    def attachment_object(self, att: StoredAttachment) -> dict[str, Any]:
        """The attachment object, its url and proxy_url signed now (ex = now + 24 h)."""
        url = self.signed_url(att)
        out: dict[str, Any] = {"id": att.id, "filename": att.filename, "size": att.size,
                               "url": url, "proxy_url": url.replace(self.cdn, self.cdn + "/media",
                                                                    1),
                               "content_type": att.content_type}
        if att.description is not None:
            out["description"] = att.description
        if att.ephemeral:
            out["ephemeral"] = True
        if att.is_image:
            size = _image_size(att.data)
            if size is not None:
                out["width"], out["height"] = size
        return out

    def signed_url(self, att: StoredAttachment, *, issued: float | None = None,
                   ttl: float = CDN_TTL_S) -> str:
        """https://cdn…/attachments/{channel}/{id}/{filename}?ex=…&is=…&hm=…& on this fake
        (ephemeral ones under /ephemeral-attachments/{app}/…)."""
        is_ = int(self.now() if issued is None else issued)
        ex = int(is_ + ttl)
        return (f"{self.cdn}/{self._cdn_path(att)}?ex={ex:x}&is={is_:x}"
                f"&hm={self._hm(att, ex, is_)}&")

    def _cdn_path(self, att: StoredAttachment) -> str:
        if att.ephemeral or att.channel_id is None:
            return f"ephemeral-attachments/{APP_ID}/{att.id}/{quote(att.filename, safe='')}"
        return f"attachments/{att.channel_id}/{att.id}/{quote(att.filename, safe='')}"

    def _hm(self, att: StoredAttachment, ex: int, is_: int) -> str:
        return hmac.new(self._secret, f"{att.id}/{att.filename}/{ex:x}/{is_:x}".encode(),
                        hashlib.sha256).hexdigest()

    async def cdn_file(self, request: web.Request) -> web.Response:
        """GET a signed attachment URL (no auth header): the bytes, or 404 "This content is no
        longer available." for a URL expired (ex, the fake's clock), unsigned, or forged."""
        att = self._files.get(request.match_info["attachment_id"])
        try:
            ex, is_ = int(request.query["ex"], 16), int(request.query["is"], 16)
        except (KeyError, ValueError):
            return _gone()
        if att is None or att.filename != request.match_info["filename"] \
                or not hmac.compare_digest(request.query.get("hm", ""), self._hm(att, ex, is_)) \
                or ex < self.now():
            return _gone()
        self.downloads.append(att.id)
        return web.Response(body=att.data, headers={"Content-Type": att.content_type})

    # --- the gateway ---------------------------------------------------------------------------
    async def gateway_socket(self, request: web.Request) -> web.StreamResponse:
        """The gateway: ?v=10&encoding=json[&compress=zlib-stream|zstd-stream]. HELLO, then
        IDENTIFY → READY (+ GUILD_CREATE per guild) or RESUME → the missed events + RESUMED;
        heartbeats are ACKed. discord.py 2.7.1 asks zstd-stream when it can import zstandard
        (or Python 3.14's compression.zstd), else zlib-stream."""
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        query = request.query
        compress = query.get("compress")
        compressor = _compressor(compress) if compress else None
        conn = GatewayConnection(ws=ws, request=request, compress=compress,
                                 compressor=compressor)
        if query.get("v", str(API_VERSION)) != str(API_VERSION):
            await ws.close(code=CLOSE_INVALID_VERSION, message=b"Invalid API version")
            return ws
        if query.get("encoding", "json") != "json" or (compress and compressor is None):
            # ETF, an unknown compression, or zstd here without a zstd library: the fake
            # speaks JSON only (Discord would speak ETF)
            await ws.close(code=CLOSE_DECODE, message=b"Unsupported encoding or compression")
            return ws
        self.connections.append(conn)
        self.connected += 1
        try:
            await self._send(conn, {"op": OP_HELLO, "s": None, "t": None, "d": {
                "heartbeat_interval": self.heartbeat_interval_ms,
                "_trace": ["[\"gateway-prd-fake\",{\"micros\":0.0}]"]}})
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    await self._client_payload(conn, msg.data)
                elif msg.type == WSMsgType.BINARY:  # ETF or compressed: not spoken here
                    await self._close(conn, CLOSE_DECODE, "Error while decoding payload.")
        finally:
            if conn in self.connections:
                self.connections.remove(conn)
            session = conn.session
            if session is not None and session.connection is conn:
                session.connection = None
                if not conn.closed_by_fake and ws.close_code in (1000, 1001):
                    self.sessions.pop(session.id, None)  # a clean close ends the session
        return ws

    async def _close(self, conn: GatewayConnection, code: int, reason: str) -> None:
        conn.closed_by_fake = True
        await conn.ws.close(code=code, message=reason.encode())

    async def _send(self, conn: GatewayConnection, payload: dict[str, Any]) -> None:
        """One gateway payload: a text frame, or with transport compression the payload
        through the connection's one compression context, flushed (zlib: Z_SYNC_FLUSH, the
        00 00 ff ff discord.py waits for), as one binary frame."""
        data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
        async with conn.lock:
            if conn.ws.closed:
                return
            try:
                if conn.compressor is not None:
                    await conn.ws.send_bytes(conn.compressor(data.encode()))
                else:
                    await conn.ws.send_str(data)
            except (ConnectionResetError, RuntimeError) as e:
                self.ws_errors.append(f"send failed: {e!r}")

    async def _client_payload(self, conn: GatewayConnection, text: str) -> None:
        try:
            payload = json.loads(text)
            op, data = payload["op"], payload.get("d")
        except (ValueError, KeyError, TypeError):
            await self._close(conn, CLOSE_DECODE, "Error while decoding payload.")
            return
        if op == OP_HEARTBEAT:
            self.heartbeats += 1
            conn.heartbeats += 1
            await self._send(conn, {"op": OP_HEARTBEAT_ACK, "d": None, "s": None, "t": None})
        elif op == OP_IDENTIFY:
            await self._identify(conn, data if isinstance(data, dict) else {})
        elif op == OP_RESUME:
            await self._resume(conn, data if isinstance(data, dict) else {})
        elif conn.session is None:
            await self._close(conn, CLOSE_NOT_AUTHENTICATED, "Not authenticated.")
        elif op in (OP_PRESENCE, OP_VOICE_STATE, OP_REQUEST_MEMBERS):
            self.client_ops.append(payload)
        else:
            await self._close(conn, CLOSE_UNKNOWN_OPCODE, "Unknown opcode.")

    def _token_ok(self, token: Any) -> bool:
        return isinstance(token, str) and token.removeprefix("Bot ") == self.token

    async def _identify(self, conn: GatewayConnection, data: dict[str, Any]) -> None:
        """IDENTIFY: the token (4004), intents (4013 invalid, 4014 a privileged intent the app
        does not have), then READY: v, user, guilds (unavailable), session_id,
        resume_gateway_url, shard, application {id, flags}; then GUILD_CREATE for each guild
        (GUILDS intent). discord.py holds on_ready until no GUILD_CREATE has come for
        `guild_ready_timeout` seconds (2 s by default)."""
        if conn.session is not None:
            await self._close(conn, CLOSE_ALREADY_AUTHENTICATED, "Already authenticated.")
            return
        self.identifies.append(data)
        intents = data.get("intents")
        if not self._token_ok(data.get("token")):
            await self._close(conn, CLOSE_AUTH_FAILED, "Authentication failed.")
            return
        if not isinstance(intents, int) or intents < 0 or intents & ~ALL_INTENTS:
            await self._close(conn, CLOSE_INVALID_INTENTS, "Invalid intent(s).")
            return
        if intents & PRIVILEGED_INTENTS & ~self.privileged:
            await self._close(conn, CLOSE_DISALLOWED_INTENTS, "Disallowed intent(s).")
            return
        shard = data.get("shard")
        session = GatewaySession(id=secrets.token_hex(16), intents=intents, identify=data,
                                 shard=(int(shard[0]), int(shard[1])) if shard else None,
                                 connection=conn)
        conn.session = session
        self.sessions[session.id] = session
        guilds = [g for g in self.guilds.values() if _on_shard(g["id"], session.shard)]
        ready: dict[str, Any] = {
            "v": API_VERSION, "user": self.bot_user | {"verified": True, "mfa_enabled": False,
                                                       "email": None},
            "guilds": [{"id": g["id"], "unavailable": True} for g in guilds],
            "session_id": session.id, "resume_gateway_url": self.gateway,
            "application": {"id": APP_ID, "flags": self.app_flags()},
            "private_channels": [], "relationships": [], "presences": [],
            "guild_join_requests": [], "geo_ordered_rtc_regions": [], "user_settings": {},
            "session_type": "normal", "auth": {}, "_trace": ["[\"gateway-prd-fake\",{}]"]}
        if session.shard is not None:
            ready["shard"] = list(session.shard)
        await self._dispatch_to(session, "READY", ready)
        self.readies += 1
        if intents & GUILDS:
            for guild in guilds:
                await self._dispatch_to(session, "GUILD_CREATE", self.guild_create(guild))

    async def _resume(self, conn: GatewayConnection, data: dict[str, Any]) -> None:
        """RESUME {token, session_id, seq}: the events after seq again, then RESUMED. An
        unknown session (or one a clean close ended): INVALID_SESSION d=false, and discord.py
        identifies anew."""
        session = self.sessions.get(str(data.get("session_id")))
        if session is None or not self._token_ok(data.get("token")):
            await self._send(conn, {"op": OP_INVALID_SESSION, "d": False, "s": None, "t": None})
            return
        old = session.connection
        if old is not None and old is not conn:
            await self._close(old, CLOSE_UNKNOWN, "Session resumed elsewhere.")
        session.connection, conn.session = conn, session
        seq = data.get("seq") or 0
        for event in list(session.events):
            if event["s"] > seq:
                await self._send(conn, event)
        await self._dispatch_to(session, "RESUMED", {"_trace": ["[\"gateway-prd-fake\",{}]"]})
        self.resumes += 1

    async def _dispatch_to(self, session: GatewaySession, event: str,
                           data: dict[str, Any]) -> None:
        session.seq += 1
        payload = {"op": OP_DISPATCH, "t": event, "s": session.seq, "d": data}
        session.events.append(payload)
        if session.connection is not None:
            await self._send(session.connection, payload)

    def guild_create(self, guild: dict[str, Any]) -> dict[str, Any]:
        """GUILD_CREATE's guild: the guild with roles, channels (not threads), active threads,
        members (the bot's among them) and the rest discord.py reads."""
        gid = guild["id"]
        channels = [{k: v for k, v in c.items() if k != "guild_id"}
                    for c in self.channels.values()
                    if c.get("guild_id") == gid and c["type"] not in THREAD_TYPES]
        threads = [c for c in self.channels.values()
                   if c.get("guild_id") == gid and c["type"] in THREAD_TYPES]
        members = [m for (g, _), m in self.members.items() if g == gid]
        return guild | {"unavailable": False, "large": False, "member_count": len(members),
                        "roles": self.roles.get(gid, []), "emojis": [], "stickers": [],
                        "channels": channels, "threads": threads, "members": members,
                        "voice_states": [], "presences": [], "stage_instances": [],
                        "guild_scheduled_events": [], "soundboard_sounds": []}

    async def dispatch(self, event: str, data: dict[str, Any]) -> int:
        """Send a DISPATCH (op 0) `event` to every session whose intents cover it (a session
        whose client is away keeps it for its RESUME). MESSAGE_CREATE/UPDATE in a guild reach
        a session without MESSAGE_CONTENT with content, embeds, attachments and components
        emptied, unless the bot wrote it or is mentioned. Returns how many sessions got it."""
        sent = 0
        for session in list(self.sessions.values()):
            needed = EVENT_INTENTS.get(event, 0)
            if event.startswith("MESSAGE_"):
                needed = GUILD_MESSAGES if data.get("guild_id") else DIRECT_MESSAGES
            if needed and not session.intents & needed:
                continue
            shaped = data
            if event in ("MESSAGE_CREATE", "MESSAGE_UPDATE") and data.get("guild_id") \
                    and not session.intents & MESSAGE_CONTENT \
                    and (data.get("author") or {}).get("id") != BOT_ID \
                    and not any(u.get("id") == BOT_ID for u in data.get("mentions") or []):
                shaped = data | {"content": "", "embeds": [], "attachments": [],
                                 "components": []}
            await self._dispatch_to(session, event, shaped)
            sent += 1
        return sent

    async def _echo(self, event: str, m: StoredMessage) -> None:
        """The bot's own message comes back over the gateway, as on Discord (`echo`)."""
        if self.echo and self.sessions:
            await self.deliver(m, event)

    async def drop(self, code: int | None = 4000) -> int:
        """Every gateway connection is lost: closed with `code` (4000 or 1001: discord.py
        reconnects to resume_gateway_url and RESUMEs; a code it cannot handle, like 4004,
        makes it give up), or with code=None cut with no close frame. How many."""
        dropped = list(self.connections)
        for conn in dropped:
            conn.closed_by_fake = True
            if code is None:
                if conn.request.transport is not None:
                    conn.request.transport.abort()
            else:
                await conn.ws.close(code=code, message=b"dropped by the fake")
        return len(dropped)

    async def request_reconnect(self) -> int:
        """op 7 RECONNECT to every connection: discord.py closes and resumes."""
        for conn in list(self.connections):
            await self._send(conn, {"op": OP_RECONNECT, "d": None, "s": None, "t": None})
        return len(self.connections)

    async def invalidate_sessions(self, *, resumable: bool = False) -> None:
        """op 9 INVALID_SESSION to every connection (d=false: the sessions end)."""
        for conn in list(self.connections):
            if not resumable and conn.session is not None:
                self.sessions.pop(conn.session.id, None)
            await self._send(conn, {"op": OP_INVALID_SESSION, "d": resumable, "s": None,
                                     "t": None})

    async def wait_connected(self, n: int = 1, timeout: float = 5.0) -> None:
        """Until `n` gateway connections are open."""
        await _until(lambda: len(self.connections) >= n, timeout,
                     lambda: f"{len(self.connections)} gateway connections open, not {n}")

    async def wait_ready(self, n: int = 1, timeout: float = 5.0) -> None:
        """Until READY has been sent `n` times in all."""
        await _until(lambda: self.readies >= n, timeout, lambda: f"{self.readies} READY sent")

    async def wait_resumed(self, n: int = 1, timeout: float = 5.0) -> None:
        await _until(lambda: self.resumes >= n, timeout, lambda: f"{self.resumes} RESUMED sent")

    # --- interactions: issuing them -------------------------------------------------------------
    def issue(self, payload: dict[str, Any], *, via: str = "issued") -> IssuedInteraction:
        """Register an interaction Discord has issued (now, by the fake's clock) so the
        callback and webhook routes know its token; `interaction` and `post_interaction` call
        it. Alone, it suits tests that drive the routes directly."""
        if payload["id"] in self.interactions:
            raise ValueError(f"interaction {payload['id']} was issued already")
        message = payload.get("message") or {}
        it = IssuedInteraction(
            id=payload["id"], token=payload["token"], type=payload["type"],
            application_id=payload["application_id"], payload=payload, issued=self.now(),
            via=via, channel_id=payload.get("channel_id"), guild_id=payload.get("guild_id"),
            message_id=message.get("id"))
        self.interactions[it.id] = it
        self._tokens[it.token] = it.id
        return it

    async def interaction(self, payload: dict[str, Any]) -> IssuedInteraction:
        """Deliver an interaction over the gateway as INTERACTION_CREATE (the default for an
        app without an Interactions Endpoint URL). NotConnected without a session."""
        if not self.sessions:
            raise NotConnected("no gateway session: Discord would fail the interaction")
        it = self.issue(payload, via="gateway")
        await self.dispatch("INTERACTION_CREATE", payload)
        return it

    async def post_interaction(self, url: str, payload: dict[str, Any], *,
                               timeout: float = INITIAL_RESPONSE_S,
                               timestamp: int | str | None = None,
                               key: Ed25519PrivateKey | None = None) -> dict[str, Any]:
        """POST an interaction to the app's Interactions Endpoint URL, signed (`signed`), with
        Discord's 3 s deadline; the answer is recorded in `http_answers` ({interaction, type,
        status, json, text, content_type, error ("timeout" | the connection error), seconds})
        and returned. A 200 answer {type, data} (JSON, or multipart with payload_json and
        files) is the initial response: checked and carried out as the callback route would
        (a refused one is recorded in `responses` with its status and code, and in the answer
        under "refusal"). A PING's answer must be {"type": 1}; "pong" says whether it was."""
        it = self.issue(payload, via="http")
        raw, headers = signed(payload, timestamp=timestamp, key=key)
        record: dict[str, Any] = {"interaction": it.id, "type": it.type, "status": None,
                                  "json": None, "text": None, "content_type": None,
                                  "error": None}
        self.http_answers.append(record)
        assert self._client is not None, "start() the fake first"
        started = time.monotonic()
        answer: dict[str, Any] | None = None
        uploads: dict[int, _Upload] = {}
        try:
            async with self._client.post(url, data=raw, headers=headers,
                                         timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                record["status"], record["content_type"] = resp.status, resp.content_type
                if resp.content_type == "multipart/form-data":
                    answer, uploads = await _read_multipart(
                        MultipartReader(resp.headers, resp.content))
                    record["json"] = answer
                else:
                    record["text"] = await resp.text()
                    if resp.content_type == "application/json":
                        with contextlib.suppress(ValueError):
                            record["json"] = json.loads(record["text"])
                            answer = record["json"] if isinstance(record["json"], dict) \
                                else None
        except TimeoutError:
            record["error"] = "timeout"
        except (aiohttp.ClientError, Refusal) as e:
            record["error"] = repr(e)
        record["seconds"] = round(time.monotonic() - started, 3)
        if it.type == PING:
            record["pong"] = record["status"] == 200 and answer == {"type": PONG}
            it.response = PONG if record["pong"] else None
        elif record["status"] == 200 and answer is not None:
            try:
                await self._initial(it, answer, uploads, "http")
            except Refusal as refusal:
                record["refusal"] = refusal.body()
        return record

    def _interaction_base(self, kind: int, *, user: dict[str, Any] | None,
                          channel: dict[str, Any] | str | int | None, locale: str,
                          app_permissions: int | None, attachment_size_limit: int,
                          member: dict[str, Any] | None = None,
                          guild_id: str | int | None = None) -> dict[str, Any]:
        """The fields every interaction has (receiving-and-responding.mdx, Interaction
        Structure): in a guild member (with permissions), guild_id, guild, guild_locale,
        context 0; in a DM user, context 1. The channel is the partial channel object (a
        thread's with parent_id and thread_metadata). Without `channel`: the first text
        channel of `guild_id`, else `default_channel()`. `member` (from `member(…)`) names the
        invoker with its roles."""
        if channel is not None:
            ch = self._channel(_id(channel))
        elif guild_id is not None:
            ch = next(c for c in self.channels.values()
                      if c.get("guild_id") == str(guild_id) and c["type"] == GUILD_TEXT)
        else:
            ch = self.default_channel()
        if member is not None:
            user = member["user"]
        gid = ch.get("guild_id")
        iid = self.snowflake()
        token = base64.urlsafe_b64encode(
            f"interaction:{iid}:{secrets.token_urlsafe(96)}".encode()).decode().rstrip("=")
        perms = EVERYONE_PERMISSIONS if app_permissions is None else app_permissions
        payload: dict[str, Any] = {
            "id": iid, "application_id": APP_ID, "type": kind, "token": token, "version": 1,
            "channel_id": ch["id"], "channel": _partial_channel(ch, perms),
            "app_permissions": str(perms), "locale": locale, "entitlements": [],
            "attachment_size_limit": attachment_size_limit}
        if gid is not None:
            if user is None:
                user = next((m["user"] for (g, u), m in self.members.items()
                             if g == gid and u != BOT_ID), None) or self.user("alice")
            member = member or self.members.get((gid, user["id"])) or self.member(gid, user)
            guild = self.guilds.get(gid, {"id": gid, "preferred_locale": "en-US"})
            payload |= {"guild_id": gid, "member": member | {
                "permissions": str(self._permissions(gid, member))},
                "guild": {"id": gid, "locale": guild.get("preferred_locale", "en-US"),
                          "features": guild.get("features", [])},
                "guild_locale": guild.get("preferred_locale", "en-US"), "context": 0,
                "authorizing_integration_owners": {"0": gid}}
        else:
            if user is None:
                recipients = ch.get("recipients") or []
                user = recipients[0] if recipients else self.user("alice")
            payload |= {"user": user, "context": 1,
                        "authorizing_integration_owners": {"0": "0"}}
        return payload

    def _permissions(self, guild_id: str, member: dict[str, Any]) -> int:
        guild = self.guilds.get(guild_id, {})
        if member["user"]["id"] == guild.get("owner_id"):
            return (1 << 51) - 1  # every permission *(unconfirmed: the current top bit)*
        value = 0
        for role in self.roles.get(guild_id, []):
            if role["id"] == guild_id or role["id"] in member["roles"]:
                value |= int(role["permissions"])
        return value

    def command_interaction(self, name: str = "gen",
                            options: Mapping[str, Any] | list[dict[str, Any]] | None = None,
                            attachments: Mapping[str, dict[str, Any]]
                            | Iterable[dict[str, Any]] | None = None, *,
                            user: dict[str, Any] | None = None,
                            member: dict[str, Any] | None = None,
                            guild_id: str | int | None = None,
                            channel: dict[str, Any] | str | int | None = None,
                            locale: str = "zh-CN", command_id: str | None = None,
                            app_permissions: int | None = None,
                            attachment_size_limit: int = FILE_MAX) -> dict[str, Any]:
        """A slash command (type 2, data {id, name, type 1, options, resolved.attachments}).
        `options` is a list of option objects, or {name: value} where a str is STRING (3), an
        int INTEGER (4), a bool BOOLEAN (5), a float NUMBER (10) and an `attach(…)` object an
        ATTACHMENT (11) whose value is the attachment's id (resolved for you)."""
        payload = self._interaction_base(APPLICATION_COMMAND, user=user, channel=channel,
                                         locale=locale, app_permissions=app_permissions,
                                         attachment_size_limit=attachment_size_limit,
                                         member=member, guild_id=guild_id)
        opts, resolved = _options(options)
        if attachments is not None:
            items = attachments.values() if isinstance(attachments, Mapping) else attachments
            resolved |= {a["id"]: a for a in items}
        data: dict[str, Any] = {
            "id": command_id or self.command_id(name, payload.get("guild_id"))
            or self.snowflake(), "name": name, "type": CHAT_INPUT, "options": opts}
        if resolved:
            data["resolved"] = {"attachments": resolved}
        if any(c["name"] == name for c in self.commands.get(payload.get("guild_id"), [])):
            data["guild_id"] = payload["guild_id"]
        payload["data"] = data
        return payload

    def autocomplete_interaction(self, name: str = "gen",
                                 options: Mapping[str, Any] | list[dict[str, Any]]
                                 | None = None, *, focused: str, value: str = "",
                                 user: dict[str, Any] | None = None,
                                 member: dict[str, Any] | None = None,
                                 guild_id: str | int | None = None,
                                 channel: dict[str, Any] | str | int | None = None,
                                 locale: str = "zh-CN") -> dict[str, Any]:
        """An autocomplete request (type 4): the options typed so far, the `focused` one (a
        STRING with its partial `value`) marked focused: true. Answer with type 8."""
        payload = self._interaction_base(AUTOCOMPLETE, user=user, channel=channel,
                                         locale=locale, app_permissions=None,
                                         attachment_size_limit=FILE_MAX, member=member,
                                         guild_id=guild_id)
        opts, _ = _options(options)
        opts = [o for o in opts if o["name"] != focused]
        opts.append({"name": focused, "type": STRING, "value": value, "focused": True})
        payload["data"] = {"id": self.command_id(name, payload.get("guild_id"))
                           or self.snowflake(), "name": name, "type": CHAT_INPUT,
                           "options": opts}
        return payload

    def button_interaction(self, custom_id: str,
                           message: StoredMessage | dict[str, Any] | str | int | None = None,
                           *, user: dict[str, Any] | None = None,
                           member: dict[str, Any] | None = None,
                           component_type: int = BUTTON,
                           values: list[str] | None = None,
                           locale: str = "zh-CN") -> dict[str, Any]:
        """A click on a button (type 3, data {custom_id, component_type 2}; a select's
        `values` with its component_type) on `message` (a recorded message, its id, or a
        message object), in that message's channel."""
        if isinstance(message, str | int):
            message = self.message(message)
        if isinstance(message, StoredMessage):
            message_obj = self.message_object(message)
        else:
            message_obj = message or {}
        channel = message_obj.get("channel_id")
        payload = self._interaction_base(MESSAGE_COMPONENT, user=user, channel=channel,
                                         locale=locale, app_permissions=None,
                                         attachment_size_limit=FILE_MAX, member=member)
        data: dict[str, Any] = {"custom_id": custom_id, "component_type": component_type}
        if values is not None:
            data["values"] = values
        payload["data"] = data
        if message_obj:
            payload["message"] = message_obj
        return payload

    def ping(self) -> dict[str, Any]:
        """PING (type 1), what Discord POSTs when the endpoint URL is saved (and now and
        then): answer {"type": 1}."""
        iid = self.snowflake()
        return {"id": iid, "application_id": APP_ID, "type": PING, "version": 1,
                "token": base64.urlsafe_b64encode(
                    f"interaction:{iid}:{secrets.token_urlsafe(48)}".encode()).decode()
                .rstrip("="), "user": self.bot_user, "entitlements": []}


# --- inbound: what Discord POSTs to an Interactions Endpoint URL ---------------------------------
def signed(body: dict[str, Any] | bytes, *, timestamp: int | str | None = None,
           key: Ed25519PrivateKey | None = None) -> tuple[bytes, dict[str, str]]:
    """The raw bytes Discord POSTs and its headers: X-Signature-Ed25519 = hex(Ed25519 over
    timestamp + raw body), X-Signature-Timestamp (Unix seconds), Content-Type
    application/json. `key` signs with another key (a forged request). The User-Agent is
    Discord's *(unconfirmed)*."""
    raw = body if isinstance(body, bytes) else json.dumps(
        body, separators=(",", ":"), ensure_ascii=False).encode()
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = (key or PRIVATE_KEY).sign(ts.encode() + raw).hex()
    return raw, {"Content-Type": "application/json", "X-Signature-Ed25519": signature,
                 "X-Signature-Timestamp": ts,
                 "User-Agent": "Discord-Interactions/1.0 (+https://discord.com)"}


# --- checks ---------------------------------------------------------------------------------------
def _check_components(errors: _Errors, components: Any, *, v2: bool) -> None:
    """Legacy components: ≤ 5 action rows (type 1), each ≤ 5 buttons or one select; with
    IS_COMPONENTS_V2 ≤ 40 components in all. custom_ids 1–100 characters, unique in the
    message."""
    if not isinstance(components, list):
        errors.add(("components",), "BASE_TYPE_ARRAY", "Must be an array.")
        return
    seen: set[str] = set()
    if v2:
        flat = list(_walk(components))
        if len(flat) > V2_COMPONENTS_MAX:
            errors.add(("components",), "BASE_TYPE_MAX_LENGTH",  # *(unconfirmed)*: the code
                       f"Must be {V2_COMPONENTS_MAX} or fewer in length.")
        for path, c in _walk_paths(components, ("components",)):
            if "custom_id" in c:
                _custom_id(errors, path, c["custom_id"], seen)
        return
    errors.most(("components",), components, ROWS_MAX)
    for i, row in enumerate(components):
        row_path: tuple[str | int, ...] = ("components", i)
        if not isinstance(row, dict) or row.get("type") != ACTION_ROW:
            errors.add((*row_path, "type"), "BASE_TYPE_CHOICES",  # *(unconfirmed)*: the code
                       "Value must be one of {1}.")
            continue
        children = row.get("components")
        if not isinstance(children, list) or not children:
            errors.add((*row_path, "components"), "BASE_TYPE_MIN_LENGTH",
                       "Must be 1 or more in length.")
            continue
        errors.most((*row_path, "components"), children, ROW_BUTTONS_MAX)
        if len(children) > 1 and any(isinstance(c, dict) and c.get("type") in SELECT_TYPES
                                     for c in children):
            errors.add((*row_path, "components"), "COMPONENT_LAYOUT_WIDTH_EXCEEDED",  # unconf.
                       "The specified component exceeds the maximum width")
        for j, child in enumerate(children):
            where = (*row_path, "components", j)
            kind = child.get("type") if isinstance(child, dict) else None
            if kind == BUTTON:
                _check_button(errors, where, child, seen)
            elif kind in SELECT_TYPES:
                _custom_id(errors, (*where, "custom_id"), child.get("custom_id"), seen)
            else:
                errors.add((*where, "type"), "BASE_TYPE_CHOICES",  # *(unconfirmed)*
                           "Value must be one of {2, 3, 5, 6, 7, 8}.")


def _check_button(errors: _Errors, path: tuple[str | int, ...], button: dict[str, Any],
                  seen: set[str]) -> None:
    """Styles 1–4 need a custom_id and take no url; style 5 (link) needs a url and takes no
    custom_id; label ≤ 80. The codes for a wrong field on a style are *(unconfirmed)*."""
    style = button.get("style")
    if style not in (1, 2, 3, 4, LINK_STYLE, PREMIUM_STYLE):
        errors.add((*path, "style"), "BASE_TYPE_CHOICES", "Value must be one of {1, 2, 3, 4, "
                                                          "5, 6}.")
        return
    if button.get("label") is not None:
        errors.length((*path, "label"), button["label"], 0, LABEL_MAX)
    if style == LINK_STYLE:
        if button.get("url") is None:
            errors.add((*path, "url"), "BASE_TYPE_REQUIRED", "This field is required")
        else:
            errors.length((*path, "url"), button["url"], 1, URL_MAX)
        if button.get("custom_id") is not None:
            errors.add((*path, "custom_id"), "BUTTON_COMPONENT_CUSTOM_ID_NOT_ALLOWED",
                       "A link button cannot have a custom_id")
    elif style == PREMIUM_STYLE:
        if button.get("sku_id") is None:
            errors.add((*path, "sku_id"), "BASE_TYPE_REQUIRED", "This field is required")
    else:
        if button.get("url") is not None:
            errors.add((*path, "url"), "BUTTON_COMPONENT_URL_NOT_ALLOWED",
                       "Only link buttons can have a url")
        _custom_id(errors, (*path, "custom_id"), button.get("custom_id"), seen)


def _custom_id(errors: _Errors, path: tuple[str | int, ...], value: Any, seen: set[str]) -> None:
    errors.length(path, value, 1, CUSTOM_ID_MAX)
    if isinstance(value, str):
        if value in seen:
            errors.add(path, "COMPONENT_CUSTOM_ID_DUPLICATED",
                       "Component custom id was already specified")
        seen.add(value)


def _walk(components: list) -> Iterator[dict[str, Any]]:
    for _, c in _walk_paths(components, ()):
        yield c


def _walk_paths(components: list, path: tuple[str | int, ...]
                ) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any]]]:
    for i, c in enumerate(components):
        if not isinstance(c, dict):
            continue
        here = (*path, i)
        yield here, c
        for key in ("components",):
            if isinstance(c.get(key), list):
                yield from _walk_paths(c[key], (*here, key))
        for key in ("accessory", "component"):
            if isinstance(c.get(key), dict):
                yield from _walk_paths([c[key]], (*here, key))


def _check_choices(data: dict[str, Any]) -> None:
    """APPLICATION_COMMAND_AUTOCOMPLETE_RESULT: data.choices, ≤ 25, each {name 1–100, value
    (a string ≤ 100, or a number)}."""
    errors = _Errors()
    choices = data.get("choices")
    if not isinstance(choices, list):
        errors.add(("data", "choices"), "BASE_TYPE_REQUIRED", "This field is required")
        choices = []
    errors.most(("data", "choices"), choices, CHOICES_MAX)
    for i, choice in enumerate(choices):
        where = ("data", "choices", i)
        if not isinstance(choice, dict):
            errors.add(where, "DICT_TYPE_CONVERT", "Only dictionaries may be used in a DictType")
            continue
        errors.length((*where, "name"), choice.get("name"), 1, 100)
        value = choice.get("value")
        if isinstance(value, str):
            errors.length((*where, "value"), value, 0, 100)
        elif not isinstance(value, int | float) or isinstance(value, bool):
            errors.add((*where, "value"), "BASE_TYPE_REQUIRED", "This field is required")
    errors.check()


def _check_modal(data: dict[str, Any]) -> None:
    errors = _Errors()
    errors.length(("data", "custom_id"), data.get("custom_id"), 1, CUSTOM_ID_MAX)
    errors.length(("data", "title"), data.get("title"), 1, MODAL_TITLE_MAX)
    components = data.get("components")
    if not isinstance(components, list) or not 1 <= len(components) <= 5:
        errors.add(("data", "components"), "BASE_TYPE_BAD_LENGTH",
                   "Must be between 1 and 5 in length.")
    errors.check()


def _check_commands(errors: _Errors, commands: list, *, global_: bool) -> None:
    """A bulk overwrite's commands (application-commands.mdx): type 1–4; CHAT_INPUT names by
    the documented regex and lowercase, descriptions 1–100, ≤ 25 options; localization keys
    from the locale list; names unique per type; ≤ 100 global CHAT_INPUT commands. The
    error-tree codes beyond the BASE_TYPE_* ones are *(unconfirmed)*."""
    seen: set[tuple[int, str]] = set()
    if global_ and sum(1 for c in commands if isinstance(c, dict)
                       and c.get("type", CHAT_INPUT) == CHAT_INPUT) > GLOBAL_CHAT_INPUT_MAX:
        errors.add((), "APPLICATION_COMMANDS_TOO_MANY",
                   f"Maximum number of application commands reached ({GLOBAL_CHAT_INPUT_MAX})")
    for i, command in enumerate(commands):
        if not isinstance(command, dict):
            errors.add((i,), "DICT_TYPE_CONVERT", "Only dictionaries may be used in a DictType")
            continue
        kind = command.get("type", CHAT_INPUT)
        if kind not in (CHAT_INPUT, USER_COMMAND, MESSAGE_COMMAND, PRIMARY_ENTRY_POINT):
            errors.add((i, "type"), "BASE_TYPE_CHOICES", "Value must be one of {1, 2, 3, 4}.")
            continue
        name = command.get("name")
        chat = kind == CHAT_INPUT
        _check_name(errors, (i, "name"), name, chat=chat)
        if chat:
            errors.length((i, "description"), command.get("description"), 1,
                          COMMAND_DESCRIPTION_MAX)
        _check_localizations(errors, (i,), command, chat=chat)
        if isinstance(name, str):
            if (kind, name) in seen:
                errors.add((i, "name"), "APPLICATION_COMMANDS_DUPLICATE_NAME",
                           "Application command names must be unique")
            seen.add((kind, name))
        if command.get("options") is not None:
            if chat:
                _check_options(errors, (i, "options"), command["options"], parent=None)
            elif command["options"]:
                errors.add((i, "options"), "APPLICATION_COMMAND_OPTIONS_NOT_ALLOWED",
                           "Only CHAT_INPUT commands take options")


def _check_name(errors: _Errors, path: tuple[str | int, ...], name: Any, *, chat: bool) -> None:
    errors.length(path, name, 1, 32)
    if chat and isinstance(name, str) and 1 <= len(name) <= 32 \
            and (not COMMAND_NAME.match(name) or name != name.lower()):
        errors.add(path, "APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid")


def _check_localizations(errors: _Errors, path: tuple[str | int, ...], obj: dict[str, Any], *,
                         chat: bool, description: bool = True) -> None:
    """name_localizations / description_localizations: null or {locale: value}, keys from
    reference.mdx's Locales, values by the field's own rules."""
    keys = ["name_localizations"] + (["description_localizations"] if description else [])
    for key in keys:
        table = obj.get(key)
        if table is None:
            continue
        if not isinstance(table, dict):
            errors.add((*path, key), "DICT_TYPE_CONVERT",
                       "Only dictionaries may be used in a DictType")
            continue
        for locale, value in table.items():
            where = (*path, key, locale)
            if locale not in LOCALES:
                errors.add(where, "BASE_TYPE_CHOICES",  # *(unconfirmed)*: Discord's wording
                           f"Value must be one of {sorted(LOCALES)}.")
            elif key == "name_localizations":
                _check_name(errors, where, value, chat=chat)
            else:
                errors.length(where, value, 1, COMMAND_DESCRIPTION_MAX)


def _check_options(errors: _Errors, path: tuple[str | int, ...], options: Any, *,
                   parent: int | None) -> None:
    if not isinstance(options, list):
        errors.add(path, "BASE_TYPE_ARRAY", "Must be an array.")
        return
    errors.most(path, options, OPTIONS_MAX)
    names: set[str] = set()
    optional_seen = False
    for j, option in enumerate(options):
        where = (*path, j)
        if not isinstance(option, dict):
            errors.add(where, "DICT_TYPE_CONVERT", "Only dictionaries may be used in a DictType")
            continue
        kind = option.get("type")
        if kind not in OPTION_TYPES:
            errors.add((*where, "type"), "BASE_TYPE_CHOICES",
                       f"Value must be one of {sorted(OPTION_TYPES)}.")
            continue
        _check_name(errors, (*where, "name"), option.get("name"), chat=True)
        errors.length((*where, "description"), option.get("description"), 1,
                      COMMAND_DESCRIPTION_MAX)
        _check_localizations(errors, where, option, chat=True)
        if option.get("name") in names:
            errors.add((*where, "name"), "APPLICATION_COMMAND_OPTION_NAME_ALREADY_EXISTS",
                       "Option names must be unique")
        names.add(str(option.get("name")))
        nested = kind in (SUB_COMMAND, SUB_COMMAND_GROUP)
        if nested and parent == SUB_COMMAND:
            errors.add((*where, "type"), "APPLICATION_COMMAND_OPTION_TYPE_INVALID",
                       "Subcommands cannot hold subcommands or groups")
        if parent == SUB_COMMAND_GROUP and kind != SUB_COMMAND:
            errors.add((*where, "type"), "APPLICATION_COMMAND_OPTION_TYPE_INVALID",
                       "A subcommand group holds only subcommands")
        if not nested:
            if option.get("required") and optional_seen:
                errors.add(where, "APPLICATION_COMMAND_OPTIONS_ORDER_INVALID",
                           "Required options must be placed before non-required options")
            optional_seen = optional_seen or not option.get("required")
        choices = option.get("choices")
        if option.get("autocomplete"):
            if kind not in AUTOCOMPLETE_OPTION_TYPES:
                errors.add((*where, "autocomplete"), "APPLICATION_COMMAND_OPTION_AUTOCOMPLETE_"
                           "INVALID_TYPE", "Autocomplete is for STRING, INTEGER and NUMBER "
                                           "options")
            if choices:  # "autocomplete may not be set to true if choices are present"
                errors.add((*where, "autocomplete"), "APPLICATION_COMMAND_OPTION_AUTOCOMPLETE_"
                           "WITH_CHOICES", "Autocomplete cannot be used with choices")
        if choices is not None:
            if not isinstance(choices, list):
                errors.add((*where, "choices"), "BASE_TYPE_ARRAY", "Must be an array.")
            else:
                errors.most((*where, "choices"), choices, CHOICES_MAX)
                for k, choice in enumerate(choices):
                    if isinstance(choice, dict):
                        errors.length((*where, "choices", k, "name"), choice.get("name"), 1,
                                      100)
                        _check_localizations(errors, (*where, "choices", k), choice,
                                             chat=False, description=False)
        if nested and option.get("options") is not None:
            _check_options(errors, (*where, "options"), option["options"], parent=kind)


def _strip_localizations(obj: Any) -> Any:
    if isinstance(obj, list):
        return [_strip_localizations(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _strip_localizations(v) for k, v in obj.items()
                if k not in ("name_localizations", "description_localizations")}
    return obj


# --- helpers --------------------------------------------------------------------------------------
def _json(body: Any, status: int = 200, headers: Mapping[str, str] | None = None
          ) -> web.Response:
    """JSON as Discord sends it, Content-Type exactly "application/json": discord.py's
    json_or_text compares the header to that string, and aiohttp's json_response would add
    "; charset=utf-8" (discord.py would then take the body for text)."""
    return web.Response(body=json.dumps(body, ensure_ascii=False).encode(), status=status,
                        headers={**(headers or {}), "Content-Type": "application/json"})


def _gone() -> web.Response:
    return web.Response(status=404, text=CDN_GONE, content_type="text/plain")


def _reason(status: int) -> str:
    from http import HTTPStatus
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Server Error"


def _parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise INVALID_JSON() from None


async def _read_limited(stream: aiohttp.StreamReader, limit: int = REQUEST_MAX) -> bytes:
    data = bytearray()
    while chunk := await stream.read(64 * KiB):
        data += chunk
        if len(data) > limit:
            raise TOO_LARGE()
    return bytes(data)


async def _read_json(request: web.Request) -> Any:
    """A JSON-only route's body: another Content-Type is 50035, bad JSON 50109."""
    if not request.body_exists:
        return {}
    if request.content_type != "application/json":
        raise CONTENT_TYPE_INVALID()
    return _parse_json(await _read_limited(request.content))


async def _read_multipart(reader: MultipartReader) -> tuple[dict[str, Any], dict[int, _Upload]]:
    """payload_json (the JSON body), files[n] (filename from Content-Disposition), and any
    other field as a top-level value; 25 MiB in all and 10 MiB a file, else 413 40005."""
    payload: dict[str, Any] = {}
    uploads: dict[int, _Upload] = {}
    total = 0
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            raise form_body({"_errors": [{"code": "BASE_TYPE_INVALID",
                                          "message": "Nested multipart is not supported"}]})
        data = bytearray()
        while chunk := await part.read_chunk(64 * KiB):
            data += chunk
            total += len(chunk)
            if total > REQUEST_MAX:
                raise TOO_LARGE()
        name = part.name or ""
        if name == "payload_json":
            parsed = _parse_json(bytes(data))
            if not isinstance(parsed, dict):
                raise form_body({"payload_json": {"_errors": [{
                    "code": "DICT_TYPE_CONVERT",
                    "message": "Only dictionaries may be used in a DictType"}]}})
            payload |= parsed
        elif match := FILE_FIELD.fullmatch(name):
            if len(data) > FILE_MAX:
                raise TOO_LARGE()
            if not part.filename:
                raise form_body({name: {"_errors": [{  # *(unconfirmed)*: the code
                    "code": "BASE_TYPE_REQUIRED",
                    "message": "A file needs a filename in its Content-Disposition"}]}})
            uploads[int(match[1])] = _Upload(part.filename, bytes(data),
                                             part.headers.get(aiohttp.hdrs.CONTENT_TYPE))
        elif name:
            payload.setdefault(name, data.decode("utf-8", "replace"))
    return payload, uploads


def _stored(upload: _Upload, attachment_id: str) -> StoredAttachment:
    """An uploaded file as the CDN keeps it. Its content type: the part's, unless that is
    missing or application/octet-stream (what discord.py always sends), when Discord works it
    out itself (sniffing *(unconfirmed)*; here: from the filename)."""
    kind = upload.content_type
    if not kind or kind == "application/octet-stream":
        kind = _guess_type(upload.filename)
    return StoredAttachment(id=attachment_id, filename=upload.filename, data=upload.data,
                            content_type=kind)


def _guess_type(filename: str) -> str:
    kind = mimetypes.guess_type(filename)[0]
    if kind is None and filename.lower().endswith(".xlsx"):
        kind = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    return kind or "application/octet-stream"


def _image_size(data: bytes) -> tuple[int, int] | None:
    try:
        from PIL import Image
        with Image.open(io.BytesIO(data)) as im:
            return int(im.width), int(im.height)
    except Exception:  # not a picture Pillow reads: Discord would give no width/height
        return None


def _embed_chars(embed: Any) -> int:
    """The characters that count toward the 6000 across a message's embeds: title,
    description, field names and values, footer text, author name."""
    if not isinstance(embed, dict):
        return 0
    total = len(str(embed.get("title") or "")) + len(str(embed.get("description") or ""))
    for f in embed.get("fields") or []:
        if isinstance(f, dict):
            total += len(str(f.get("name") or "")) + len(str(f.get("value") or ""))
    total += len(str((embed.get("footer") or {}).get("text") or ""))
    return total + len(str((embed.get("author") or {}).get("name") or ""))


def _options(options: Mapping[str, Any] | list[dict[str, Any]] | None
             ) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Interaction data options from a list (as is) or {name: value}; and the attachments to
    resolve."""
    if options is None:
        return [], {}
    if isinstance(options, list):
        return [dict(o) for o in options], {}
    out: list[dict[str, Any]] = []
    resolved: dict[str, dict[str, Any]] = {}
    for name, value in options.items():
        if isinstance(value, dict) and "filename" in value:
            out.append({"name": name, "type": ATTACHMENT, "value": value["id"]})
            resolved[value["id"]] = value
        elif isinstance(value, bool):
            out.append({"name": name, "type": BOOLEAN, "value": value})
        elif isinstance(value, int):
            out.append({"name": name, "type": INTEGER, "value": value})
        elif isinstance(value, float):
            out.append({"name": name, "type": NUMBER, "value": value})
        else:
            out.append({"name": name, "type": STRING, "value": str(value)})
    return out, resolved


def _partial_channel(channel: dict[str, Any], app_permissions: int) -> dict[str, Any]:
    """The interaction's partial channel: "id, name, type, permissions, … parent_id, guild_id,
    flags, rate_limit_per_user, topic and position; threads also thread_metadata"."""
    keep = ("id", "name", "type", "last_message_id", "last_pin_timestamp", "nsfw",
            "parent_id", "guild_id", "flags", "rate_limit_per_user", "topic", "position",
            "thread_metadata", "recipients", "owner_id", "message_count", "member_count",
            "total_message_sent")
    out = {k: channel[k] for k in keep if k in channel}
    out["permissions"] = str(app_permissions)
    return out


def _on_shard(guild_id: str, shard: tuple[int, int] | None) -> bool:
    """events/gateway.mdx, Sharding: shard_id = (guild_id >> 22) % num_shards."""
    return shard is None or (int(guild_id) >> 22) % shard[1] == shard[0]


def _compressor(kind: str) -> Callable[[bytes], bytes] | None:
    """The connection's transport compression: one context for the connection's life, each
    payload flushed. zlib-stream: compress + flush(Z_SYNC_FLUSH). zstd-stream: one frame
    never ended, each payload a flushed block (events/gateway.mdx, Transport Compression);
    needs Python 3.14's compression.zstd or zstandard (untested here: this venv has
    neither, and then discord.py asks zlib-stream)."""
    if kind == "zlib-stream":
        z = zlib.compressobj()
        return lambda data: z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH)
    if kind != "zstd-stream":
        return None
    with contextlib.suppress(ImportError):
        stdlib = importlib.import_module("compression.zstd")
        compressor = stdlib.ZstdCompressor()
        flush_block = stdlib.ZstdCompressor.FLUSH_BLOCK
        return lambda data: compressor.compress(data, mode=flush_block)
    with contextlib.suppress(ImportError):
        zstandard = importlib.import_module("zstandard")
        obj = zstandard.ZstdCompressor().compressobj()
        block = zstandard.COMPRESSOBJ_FLUSH_BLOCK
        return lambda data: obj.compress(data) + obj.flush(block)
    return None


def _true(value: str | None) -> bool:
    """reference.mdx, Boolean Query Strings: True, true or 1."""
    return value in ("True", "true", "1")


def _id(x: dict[str, Any] | str | int) -> str:
    return str(x["id"]) if isinstance(x, dict) else str(x)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


async def _until(condition: Callable[[], bool], timeout: float,
                 why: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(why())
        await asyncio.sleep(0.01)


# --- the service against this fake (tests of the adapter; the thread-cost suite) ----------
def discord_config(tmp_path, demo_models, fake: FakeDiscord, *, chat=None, **discord):
    from tests.conftest import executor_config
    return executor_config(
        tmp_path / "data", demo_models, service={"port": 0},
        chat={"progress_every": 0.5, **(chat or {})},
        discord={"token": TOKEN, "mode": "interactions", "public_key": PUBLIC_KEY,
                 "api_url": fake.base, **discord})


class DiscordWorld(ServiceWorld):
    """The service, a server with a #general channel, and Alice and Bob in it."""

    def __init__(self, config, fake: FakeDiscord):
        super().__init__(config)
        self.fake = fake
        self.guild = fake.guild(locale="en-US")
        self.channel = fake.text_channel(self.guild)
        self.alice, self.bob = fake.user("alice"), fake.user("bob")
        fake.member(self.guild, self.alice)
        fake.member(self.guild, self.bob)

    async def slash(self, name: str, options=None, *, user=None, locale="en-US",
                    channel=None, member=None) -> dict:
        """A person uses a slash command: the answer the service gave Discord."""
        payload = self.fake.command_interaction(
            name, options, user=user or self.alice, guild_id=self.guild["id"],
            channel=channel or self.channel, locale=locale, member=member)
        return await self.fake.post_interaction(f"{self.url}/discord/interactions", payload)

    async def press(self, message: StoredMessage, label: str, user=None,
                    locale="en-US") -> dict:
        """A person presses the button labelled `label` (its words) under `message`."""
        custom = next(c["custom_id"] for row in message.components for c in row["components"]
                      if label in c.get("label", ""))
        payload = self.fake.button_interaction(custom, message, user=user or self.alice,
                                               locale=locale)
        return await self.fake.post_interaction(f"{self.url}/discord/interactions", payload)

    def public(self, channel) -> list[StoredMessage]:
        return [m for m in self.fake.messages_in(channel, bot_only=True) if not m.ephemeral]

    def private(self, channel=None) -> list[str]:
        """What only the person who asked saw (ephemeral answers), as shown now."""
        return [shown(m.content) for m in self.fake.messages_in(channel or self.channel,
                                                                bot_only=True)
                if m.ephemeral and not m.loading]


def shown(content: str) -> str:
    """A message's markdown as Discord shows it: escapes read back, no zero-width spaces."""
    return re.sub(r"\\(.)", r"\1", content).replace("\u200b", "")
