"""The platform interface: all the chat core needs from Slack, DingTalk, a terminal or a test.

An adapter does two things and nothing more:

- inbound, it turns what arrives (a message with its text and files, a button press)
  into an `Incoming` and hands it to `bot.chat.receive.Chat.receive`;
- outbound, it implements `Platform`: send text, send an image or a file, edit a
  message (if `can_edit`), show buttons (if `has_buttons`), and download a file it
  announced.

Everything else — grammar, permissions, the inbox, the outbox and its retries,
languages — is the core's, written once. A third platform is one module.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from bot.errors import Coded


@dataclass(frozen=True)
class FileRef:
    """A file someone sent the bot, as the platform announced it."""
    name: str
    size: int
    handle: dict[str, Any]  # what `download` needs: a URL, a file id, a downloadCode


@dataclass(frozen=True)
class Incoming:
    """A message addressed to the bot, or a button press turned into the command it stands for."""
    platform: str
    user: str
    conversation: str
    text: str = ""
    message: str | None = None  # the platform's id: ties files to it, makes a retry a no-op
    thread: str | None = None  # where replies go; None: the conversation itself
    files: tuple[FileRef, ...] = ()
    workspace: str | None = None  # Slack team, DingTalk corp: a unit languages can be set for
    lang: str | None = None  # the person's locale, if the platform knows it
    tz: str | None = None  # their IANA time zone, if the platform knows it
    platform_role: str | None = None  # the role the platform's groups give (config maps them)
    context: dict[str, Any] = field(default_factory=dict)  # opaque to the core, for replies


@dataclass(frozen=True)
class Button:
    """A button that, pressed, comes back as `command` typed by whoever pressed it."""
    label: str
    command: str
    confirm: str | None = None  # a question to confirm first, where the platform can ask
    deny: str | None = None  # the answer that leaves things as they are
    id: str = "cancel_batch"  # what the platform calls it (Slack's action_id)

    @classmethod
    def of(cls, kept: dict[str, Any]) -> Button:
        """A button as the outbox keeps it (a message's payload)."""
        return cls(kept["label"], kept["command"], kept.get("confirm"), kept.get("deny"),
                   kept.get("id", "cancel_batch"))


@dataclass(frozen=True)
class Field:
    """One value a form asks for, shown filled in."""
    name: str  # what the answer is keyed by (a template parameter)
    label: str
    value: str = ""
    multiline: bool = False
    words: bool = False  # answered as a sentence after the command, not NAME=VALUE


@dataclass(frozen=True)
class Form:
    """A small form (Slack: a modal) whose answers come back as `command` followed by
    NAME=VALUE for each field the person changed (a `words` field's answer as a quoted
    sentence), typed by whoever submitted it, in `conversation` and `thread`."""
    title: str
    command: str
    fields: tuple[Field, ...]
    submit: str
    conversation: str
    thread: str | None = None


@dataclass(frozen=True)
class Outgoing:
    """One thing to post: text, an image or a file (with text as its caption). The text is
    plain — names and values from outside quoted as written — and the adapter escapes it
    for its wire format as it sends (bot.chat.markup)."""
    conversation: str
    thread: str | None  # the platform's thread id, or None
    text: str = ""
    file: Path | None = None
    image: bool = False  # `file` is an image to show inline
    files: tuple[Path, ...] = ()  # several files the text carries (where `bundles_files`)
    mention: str | None = None  # a user id (without platform) to mention
    buttons: tuple[Button, ...] = ()
    context: dict[str, Any] = field(default_factory=dict)  # from the Incoming it answers
    progress: bool = False  # a batch's progress message (edited later where `can_edit`)
    private: bool = False  # an answer for the person who asked alone, where the platform can
    key: str = ""  # the outbox row's key: the same on every try of one message (a platform
    #   that de-duplicates by a request id uses it, so a retried send posts once)


@dataclass(frozen=True)
class Health:
    """How a platform is doing, as this service sees it (the dashboard, /metrics)."""
    platform: str
    inbound: str  # how what people send arrives: its [platform] mode ("gateway", "stream" …)
    signed_in: bool | None  # its credentials worked at start; None: not known yet
    connected: bool | None  # the connection it keeps open is up; None: it keeps none
    problem: str = ""  # why it could not sign in, in one line


SEEN = 5000  # message keys remembered by `once`


class DeliveryError(Exception):
    """The platform did not take a message. `retry_after`: it said when to try again;
    `permanent`: trying again cannot help (a deleted channel, a revoked token)."""

    def __init__(self, reason: str, *, retry_after: float | None = None, permanent: bool = False):
        self.reason, self.retry_after, self.permanent = reason, retry_after, permanent
        super().__init__(reason)


class DownloadError(Coded):
    """A file could not be fetched, as a message code (bot.messages) and its details."""


Receive = Callable[[Incoming], Awaitable[None]]


class Inbound(Protocol):
    """What an adapter hands what arrives to: the core's side (bot.chat.receive.Chat)."""

    async def receive(self, msg: Incoming) -> None:
        """Handle a message or press; never raises."""

    def suggest(self, msg: Incoming, field: str, typed: str) -> list[tuple[str, str]]:
        """What `msg`'s sender may pick for a command's `field` ("template") as they type
        `typed`: (shown, value) pairs, best first (a platform's autocomplete)."""

    async def buttons(self, platform: str, conversation: str,
                      message: str) -> tuple[Button, ...]:
        """The buttons under a message we posted, the platform's id for it `message`:
        where a button cannot carry its whole command (Discord's 100 characters), a press
        finds it here, after a restart too."""


class Platform:
    """Override `send` and `download`; `edit` where the platform can edit; `attach` and
    `start` where messages arrive by HTTP routes or a connection the adapter opens."""

    name = "platform"
    can_edit = False
    has_buttons = False
    has_forms = False  # `open_form` shows a form, for a button press that carries a trigger
    inline_buttons = False  # an image's buttons in its own message (Slack: blocks; DingTalk: links)
    has_threads = False
    captions = True  # an image or file can carry text; else the text goes just before it
    file_captions = True  # a file (not an image) can carry text too
    bundles_files = False  # one message can carry text and several files (the summary)
    default_lang: str | None = None  # e.g. DingTalk: zh, unless [chat] languages says otherwise
    file_hint: str | None = None  # a message code: how to send this platform's bot a file

    async def send(self, out: Outgoing) -> str:
        """Post `out`; return the platform's id of what was posted (to edit or thread it)."""
        raise NotImplementedError

    async def edit(self, message_id: str, out: Outgoing) -> None:
        raise NotImplementedError(f"{self.name} cannot edit messages")

    async def download(self, handle: dict[str, Any]) -> bytes:
        """The bytes of a file announced with `handle`, or DownloadError."""
        raise NotImplementedError

    async def open_form(self, context: dict[str, Any], form: Form) -> None:
        """Show `form` to the person whose press `context` came from (where `has_forms`);
        DeliveryError when it cannot (the trigger expired): the caller answers in text."""
        raise NotImplementedError(f"{self.name} has no forms")

    # --- what every adapter needs inbound ----------------------------------------------
    def once(self, key: str) -> bool:
        """True the first time a message key is seen lately: platforms retry deliveries
        they think were missed, and may send one message as two events."""
        seen = self.__dict__.setdefault("_seen", OrderedDict())
        if key in seen:
            return False
        seen[key] = None
        if len(seen) > SEEN:
            seen.popitem(last=False)
        return True

    def spawn(self, work: Awaitable[Any], name: str | None = None) -> asyncio.Task:
        """Run `work` in the background (after the platform was answered), kept until done
        and canceled by `close`."""
        tasks = self.__dict__.setdefault("_tasks", set())
        task = asyncio.ensure_future(work)
        if name:
            task.set_name(name)
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    # --- how it is doing -----------------------------------------------------------------
    @property
    def inbound(self) -> str:
        """How what people send arrives (its [platform] mode)."""
        return ""

    def connected(self) -> bool | None:
        """Whether the connection it keeps open (a gateway, a stream) is up; None where
        messages come to the service's own endpoint instead."""
        return None

    def mark_signed_in(self, ok: bool, problem: str = "") -> None:
        """Record whether its credentials worked (health)."""
        self.__dict__["_signed"] = (ok, problem)

    def health(self) -> Health:
        ok, problem = self.__dict__.get("_signed", (None, ""))
        return Health(self.name, self.inbound, ok, self.connected(), problem)

    async def sign_in(self, token: Callable[[], Awaitable[Any]], app: str, keys: str) -> None:
        """One clear line at start: the app's credentials work (`token()` gets one), or why
        not — refused, or the platform out of reach: said once, holding nothing up.
        `keys`: the settings to check ("[dingtalk] app_key and app_secret")."""
        log = logging.getLogger(f"genbot.{self.name}")
        try:
            await token()
            log.info("%s: signed in as app %s", self.name, app)
            self.mark_signed_in(True)
        except Exception as e:  # noqa: BLE001 - refused, or out of reach: said once, here
            why = str(getattr(e, "reason", "") or e)[:200] or type(e).__name__
            log.warning("%s: cannot sign in as app %s (%s): check %s", self.name, app, why,
                        keys)
            self.mark_signed_in(False, why)

    def attach(self, app: Any, chat: Inbound) -> None:
        """Add the platform's routes to the service's aiohttp app; hand what arrives to
        `chat.receive` (bot.chat.receive.Chat)."""

    async def start(self) -> None:
        """Open what the platform needs open (a Socket Mode or Stream connection)."""

    async def close(self) -> None:
        """Release connections; stop background work."""
        for task in list(self.__dict__.get("_tasks", ())):
            task.cancel()


def image_within(data: bytes, name: str, limit: int) -> tuple[bytes, str]:
    """An image a platform takes (at most `limit` bytes): as it is, else re-encoded as
    JPEG, smaller if need be."""
    if len(data) <= limit:
        return data, name
    import io

    from PIL import Image
    image = Image.open(io.BytesIO(data)).convert("RGB")
    while True:
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=90)
        if buf.tell() <= limit:
            return buf.getvalue(), f"{Path(name).stem}.jpg"
        image = image.resize((int(image.width * 0.8), int(image.height * 0.8)))


def text_of(d: Any, key: str) -> str | None:
    """A string field of a platform's payload, or None: what arrives may have any shape."""
    value = d.get(key) if isinstance(d, dict) else None
    return value if isinstance(value, str) else None


async def body_of(request: web.Request, limit: int) -> bytes | web.Response:
    """An endpoint's request body; or, where it cannot be read (400) or is over `limit`
    bytes (413), the refusal to answer with."""
    try:
        raw = await request.content.read(limit + 1)
    except (web.HTTPException, ConnectionError):
        return refuse(400, "unreadable body")
    return refuse(413, "request body too large") if len(raw) > limit else raw


def refuse(status: int, error: str) -> web.Response:
    """An adapter's endpoint says no, as JSON."""
    return web.json_response({"error": error}, status=status)
