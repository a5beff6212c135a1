"""Discord: slash commands, buttons and messages over discord.py, over the chat core.

Discord's facts shape it (docs/discord.md):

- Interactions (a slash command, a button press, autocomplete) come over the gateway
  discord.py keeps open, or as signed POSTs to /discord/interactions
  ([discord] mode); both are read by bot.chat.discord.inbound. Each gets its first
  answer at once — Discord drops an interaction unanswered for 3 s: a command is
  deferred ("genbot is thinking…", shown to its sender alone), a press acknowledged with
  no change, an autocomplete answered with the templates that match — and its work is
  handed to the core in the background.
- The answer to a command: a reply for the sender alone replaces the "thinking…"
  (PATCH @original, an ephemeral message; more follow it, on the interaction's token, for
  15 minutes); one for everyone (a batch's acceptance) is posted by the bot in the
  channel, and the "thinking…" deleted. (A follow-up cannot be it: after a deferral the
  first follow-up takes the deferral's place, ephemeral too.)
- A batch's thread is started from its acceptance message (a thread's id is the id of
  the message it was started from, so the core's thread reference needs no mapping);
  progress is one message in it, edited; each image is one message, the picture
  attached and its buttons (components) under it; the summary carries the result files.
  Where threads cannot be (a DM), messages go to the channel.
- discord.py's HTTP client keeps Discord's rate-limit buckets: it waits a 429's
  retry_after and tries again; a wait longer than 30 s comes back as the outbox's
  Retry-After. Every message names whom it may ping (allowed_mentions): the person it
  is for, nobody else.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import io
import json
import logging
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import aiohttp
import discord
from aiohttp import web
from discord.http import Route

from bot import i18n
from bot.chat.commands import COMMANDS
from bot.chat.discord.commands import focused, slash_commands
from bot.chat.discord.inbound import TOKEN_LIFE, incoming, message_incoming, payload_of, verified
from bot.chat.discord.markup import MARKDOWN
from bot.chat.platform import (
    Button,
    DeliveryError,
    DownloadError,
    Inbound,
    Incoming,
    Outgoing,
    Platform,
    body_of,
    image_within,
    refuse,
)
from bot.messages import say
from bot.settings import DiscordConfig, IntakeConfig
from storage.config import Config

log = logging.getLogger("genbot.discord")
BODY_MAX = 1 * 2**20  # an interaction is a few KB
FILE_MAX = 10 * 2**20  # an attachment, where the server has no boost (Discord's default)
CONTENT_MAX = 2000  # characters of a message's content
CUSTOM_ID_MAX = 100
EPHEMERAL = 64  # the message flag: seen by the interaction's sender alone
PONG, MESSAGE, DEFERRED, DEFERRED_UPDATE, CHOICES = 1, 4, 5, 6, 8  # interaction responses
THREAD_MADE, NOT_HERE, NO_MESSAGE = 160004, 50024, 10008  # Discord's error codes
KEPT = 5000  # interaction tokens answered and thread names remembered


class Discord(Platform):
    name = "discord"
    can_edit = True  # the progress message, edited
    has_buttons = True  # components under a message
    inline_buttons = True  # an image's buttons in its own message
    has_threads = True  # a thread per batch, from its acceptance
    captions = True
    file_captions = True
    bundles_files = True  # up to 10 attachments a message: the summary's files with it
    file_hint = "file_hint_discord"

    def __init__(self, config: Config):
        s = self.settings = config[DiscordConfig]
        self.max_bytes = int(config[IntakeConfig].max_file_mb * 2**20)
        Route.BASE = s.api_url.rstrip("/")  # (discord.py's routes, webhooks too, read it)
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = True
        intents.message_content = s.message_content
        self.client = Client(self, intents=intents, max_ratelimit_timeout=30.0)
        self.chat: Inbound | None = None
        self.login_lock = asyncio.Lock()
        self.signed_in = False
        self.threads: set[str] = set()  # thread ids known to exist
        self.flat: set[str] = set()  # channels where no thread can be started (DMs)
        self.answered: OrderedDict[str, str] = OrderedDict()  # a token -> the key answering
        self.names: OrderedDict[str, str] = OrderedDict()  # a message id -> a thread name
        self.session: aiohttp.ClientSession | None = None

    # --- wiring -------------------------------------------------------------------------
    def attach(self, app: Any, chat: Inbound) -> None:
        self.chat = chat
        if self.settings.mode == "interactions":
            app.router.add_post("/discord/interactions", self.endpoint)

    async def start(self) -> None:
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        self.spawn(self.sign_in(self.ready, bot_id(self.settings.token), "[discord] token"),
                   name="discord-login")
        self.spawn(self.register(), name="discord-commands")
        if self.settings.mode == "gateway":
            self.spawn(self.connect(), name="discord-gateway")

    @property
    def inbound(self) -> str:
        return self.settings.mode

    def connected(self) -> bool | None:
        if self.settings.mode != "gateway":
            return None
        ws = self.client.ws
        return ws is not None and ws.open

    async def close(self) -> None:
        await super().close()
        if self.signed_in:
            await self.client.close()
        if self.session is not None:
            await self.session.close()

    async def ready(self) -> None:
        """Signed in (discord.py's HTTP session open, the application known), once."""
        async with self.login_lock:
            if not self.signed_in:
                try:
                    await self.client.login(self.settings.token)
                except discord.LoginFailure as e:
                    raise DeliveryError(f"Discord refused the token: {e}", permanent=True) \
                        from None
                except discord.HTTPException as e:
                    raise refused(e) from None
                self.signed_in = True

    async def register(self) -> None:
        """The slash commands, from the command registry: per server where [discord]
        guilds lists some (they show at once), else globally."""
        wait = 5.0
        while True:
            try:
                await self.ready()
                app = self.client.application_id
                assert app is not None, "login reads the application"
                body = slash_commands(COMMANDS)
                for guild in self.settings.guilds:
                    await self.client.http.bulk_upsert_guild_commands(app, int(guild), body)
                if not self.settings.guilds:
                    await self.client.http.bulk_upsert_global_commands(app, body)
                log.info("discord: %d slash commands registered (%s)", len(body),
                         ", ".join(self.settings.guilds) or "global")
                return
            except (DeliveryError, discord.HTTPException, aiohttp.ClientError, OSError) as e:
                if isinstance(e, DeliveryError) and e.permanent:
                    return  # (said by sign_in)
                log.warning("discord: registering the slash commands failed (%s); again in "
                            "%.0f s", str(e)[:200], wait)
                await asyncio.sleep(wait)
                wait = min(wait * 2, 300.0)

    async def connect(self) -> None:
        """The gateway, kept open (discord.py resumes and reconnects; this waits out a
        Discord that cannot be reached at start)."""
        wait = 5.0
        while True:
            try:
                await self.ready()
                await self.client.connect(reconnect=True)
                return
            except DeliveryError as e:
                if e.permanent:
                    return
            except (discord.GatewayNotFound, discord.ConnectionClosed, aiohttp.ClientError,
                    OSError) as e:
                log.warning("discord: gateway connection failed (%s); again in %.0f s",
                            str(e)[:200], wait)
            await asyncio.sleep(wait)
            wait = min(wait * 2, 300.0)

    # --- inbound ------------------------------------------------------------------------
    async def endpoint(self, request: web.Request) -> web.Response:
        """/discord/interactions: signed by Discord (Ed25519, the app's Public Key), else
        401, as Discord requires; answered at once."""
        raw = await body_of(request, BODY_MAX)
        if isinstance(raw, web.Response):
            return raw
        if not verified(self.settings.public_key, request.headers.get("X-Signature-Ed25519", ""),
                        request.headers.get("X-Signature-Timestamp", ""), raw):
            log.warning("discord: an interaction refused (not signed with this app's key, "
                        "or stale)")
            return refuse(401, "invalid request signature")
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError):
            payload = None
        if not isinstance(payload, dict):
            return refuse(400, "not a JSON object")
        answer = await self.answer(payload)
        if answer is None:
            return refuse(400, "not an interaction genbot reads")
        return web.json_response(answer)

    async def answer(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """The first answer to an interaction (due within 3 s), its work handed on."""
        kind = payload.get("type")
        if kind == 1:
            return {"type": PONG}
        if kind == 4:
            data = payload.get("data")
            asked = focused(data) if isinstance(data, dict) else None
            msg = incoming({**payload, "type": 2}, self.settings)
            choices = self.chat.suggest(msg, *asked) if self.chat and msg and asked else []
            return {"type": CHOICES, "data": {"choices": [
                {"name": shown, "value": value} for shown, value in choices]}}
        msg = incoming(payload, self.settings)
        if msg is None:
            return None
        if kind == 3:
            custom = msg.text
            button = await self.posted(msg, payload, custom) if custom.startswith(
                ("#", "?")) else None
            if custom.startswith("#"):  # a command too long for a custom_id
                if button is None:
                    return {"type": MESSAGE, "data": {"flags": EPHEMERAL, "content": say(
                        "button_expired", self.lang(msg.lang))}}
                custom = f"?{button.command}" if button.confirm else button.command
            if custom.startswith("?"):  # asks first: the same command, without asking
                return {"type": MESSAGE, "data": {
                    "flags": EPHEMERAL, "content": MARKDOWN.render(self.question(
                        custom, button, payload, msg.lang)),
                    "components": [{"type": 1, "components": [component(Button(
                        say("button_yes", self.lang(msg.lang)), custom[1:]))]}]}}
            msg = dataclasses.replace(msg, text=custom)
        if not msg.message or self.once(msg.message):  # (a replay is answered, not run)
            if msg.thread:
                self.threads.add(msg.thread)
            assert self.chat is not None, "attach() comes before any interaction"
            self.spawn(self.chat.receive(msg))
        if kind == 3:
            return {"type": DEFERRED_UPDATE}
        return {"type": DEFERRED, "data": {"flags": EPHEMERAL}}

    async def posted(self, msg: Incoming, payload: dict[str, Any],
                      custom: str) -> Button | None:
        """The button pressed, as the outbox keeps the message it is under (the service
        that posted it may since have restarted, or be another)."""
        message = (payload.get("message") or {}).get("id")
        if not message or self.chat is None:
            return None
        for b in await self.chat.buttons(self.name, msg.conversation, str(message)):
            if self.custom_id(b) == custom:
                return b
        return None

    def question(self, custom: str, button: Button | None, payload: dict[str, Any],
                 locale: str | None) -> str:
        """A button that asks first: its question (as it was posted), else the button's
        own label, asked."""
        if button is not None and button.confirm:
            return button.confirm
        label = next((c.get("label") for row in (payload.get("message") or {}).get(
            "components") or [] for c in row.get("components") or []
            if c.get("custom_id") == custom), None)
        return say("button_sure", self.lang(locale), label=label or custom[1:])

    @staticmethod
    def lang(locale: str | None) -> str:
        """The catalog language for a Discord locale ("zh-CN" → zh), else English."""
        found = i18n.languages().find(locale)
        return found.code if found else "en"

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """Gateway mode: the same answer, sent to the interaction's callback."""
        payload = payload_of(interaction)
        answer = await self.answer(payload)
        if answer is None:
            return
        try:
            await self.client.http.request(Route(
                "POST", "/interactions/{interaction_id}/{interaction_token}/callback",
                interaction_id=payload["id"], interaction_token=payload["token"]), json=answer)
        except discord.HTTPException as e:
            log.warning("discord: interaction %s not answered: %s", payload["id"], e)

    async def on_message(self, message: discord.Message) -> None:
        """Gateway mode with [discord] message_content: a message @-mentioning the bot."""
        me = self.client.user
        msg = message_incoming(message, me.id, self.settings) if me else None
        if msg is None or (msg.message and not self.once(msg.message)):
            return
        if not (msg.text or msg.files):
            return
        if message.guild is None:
            self.flat.add(msg.conversation)
        assert self.chat is not None, "attach() comes before any message"
        self.spawn(self.chat.receive(msg))

    async def download(self, handle: dict) -> bytes:
        """An attachment's bytes, from its signed CDN address (no token needed)."""
        assert self.session is not None, "start() comes before any download"
        name = str(handle.get("name") or "file")
        try:
            async with self.session.get(handle["url"]) as r:
                if r.status != 200:
                    raise DownloadError("download_failed", file=name, reason=(
                        f"Discord answered HTTP {r.status}" + (
                            " (the link expired: send the file again)" if r.status in (403, 404)
                            else "")))
                if (r.content_length or 0) > self.max_bytes:
                    raise DownloadError("file_too_big", size_mb=(r.content_length or 0) / 2**20,
                                        max_mb=self.max_bytes / 2**20)
                data = await r.content.read(self.max_bytes + 1)
        except aiohttp.ClientError as e:
            raise DownloadError("download_failed", file=name, reason=str(e) or
                                type(e).__name__) from None
        if len(data) > self.max_bytes:
            raise DownloadError("file_too_big", size_mb=len(data) / 2**20,
                                max_mb=self.max_bytes / 2**20)
        return data

    # --- outbound -----------------------------------------------------------------------
    async def send(self, out: Outgoing) -> str:
        """A reply for the person who asked alone, on the interaction's token where it may
        (where it was asked, while the token lives); anything else, by the bot, in its
        thread or channel — a public reply to a command then clears the "thinking…"."""
        await self.ready()
        call = out.context.get("interaction")
        if not (isinstance(call, dict) and not out.progress and
                (out.thread or out.conversation) == call.get("channel") and
                time.time() - float(call.get("at") or 0) < TOKEN_LIFE - 60):
            return await self.post(out)
        first = self.answered.setdefault(call["token"], out.key) == out.key
        if len(self.answered) > KEPT:
            self.answered.popitem(last=False)
        if out.private:
            return await self.answer_privately(call, out, first)
        sent = await self.post(out)
        if first and call.get("kind") == "command":  # the "thinking…" said nothing
            try:
                await self.client.http.request(original(call, "DELETE"))
            except discord.HTTPException as e:
                log.info("discord: the deferred answer stays (%s)", e)
        return sent

    async def post(self, out: Outgoing) -> str:
        """By the bot, in `out`'s thread (started if need be) or channel; split where over
        2,000 characters, the files and buttons on the last part."""
        channel = await self.channel_for(out)
        *before, last = chunks(MARKDOWN.render(out.text, out.mention))
        for part in before:
            await self.call(self.client.http.send_message(channel, params=await self.params(
                out, part, files=False)))
        sent = await self.call(self.client.http.send_message(
            channel, params=await self.params(out, last)))
        self.remember(str(sent["id"]), out.text)
        return str(sent["id"])

    async def answer_privately(self, call: dict[str, Any], out: Outgoing, first: bool) -> str:
        """Seen by the person alone (ephemeral): a command's first reply replaces its
        "thinking…"; the others, and a press's, are follow-ups."""
        *parts, last = chunks(MARKDOWN.render(out.text, out.mention))
        if first and call.get("kind") == "command":
            head = parts.pop(0) if parts else None
            if head is None:
                sent = await self.call(self.client.http.request(
                    original(call, "PATCH"), **form(await self.params(out, last))))
                return str(sent["id"])
            await self.call(self.client.http.request(original(call, "PATCH"),
                                                     json=part_of(head, 0)))
        for part in parts:
            await self.call(self.client.http.request(followup(call), params={"wait": "true"},
                                                     json=part_of(part, EPHEMERAL)))
        sent = await self.call(self.client.http.request(followup(call), params={"wait": "true"},
                                                        **form(await self.params(
                                                            out, last, flags=EPHEMERAL))))
        return str(sent["id"])

    async def edit(self, message_id: str, out: Outgoing) -> None:
        await self.ready()
        channel = out.thread or out.conversation
        await self.call(self.client.http.edit_message(channel, message_id, params=await self.params(
            out, chunks(MARKDOWN.render(out.text, out.mention))[0], files=False)))

    async def channel_for(self, out: Outgoing) -> str:
        """Where `out` is posted: its thread — started from the message whose id it is,
        the first time — or, where no thread can be, its channel."""
        thread = out.thread
        if thread is None or out.conversation in self.flat:
            return out.conversation
        if thread in self.threads:
            return thread
        name = self.names.get(thread) or "genbot"
        try:
            await self.client.http.start_thread_with_message(
                out.conversation, thread, name=name, auto_archive_duration=1440)
        except discord.HTTPException as e:
            if e.code == NOT_HERE:  # a DM: no threads
                self.flat.add(out.conversation)
                return out.conversation
            if e.code not in (THREAD_MADE, NO_MESSAGE):  # (NO_MESSAGE: a thread not
                raise refused(e) from None  # started from a message is its own id)
        self.threads.add(thread)
        return thread

    async def params(self, out: Outgoing, text: str, *, files: bool = True,
                     flags: int = 0) -> Any:
        """discord.py's message parameters: the text, the files, the buttons, and the one
        person the message may ping."""
        attached: list[discord.File] = []
        if files:
            for path in ([out.file] if out.file is not None else []) + list(out.files):
                attached.append(await asyncio.to_thread(self.file, path, out.image))
        view = self.view(out.buttons) if out.buttons else discord.utils.MISSING
        return discord.http.handle_message_parameters(
            content=text or (None if attached or out.buttons else "\u200b"),
            files=attached or discord.utils.MISSING, view=view,
            flags=discord.MessageFlags(ephemeral=True) if flags & EPHEMERAL
            else discord.utils.MISSING,
            allowed_mentions=discord.AllowedMentions(
                everyone=False, roles=False, replied_user=False,
                users=[discord.Object(int(out.mention))] if out.mention and
                out.mention.isdigit() else False))

    @staticmethod
    def file(path: Path, image: bool) -> discord.File:
        data = path.read_bytes()
        name = path.name
        if image and len(data) > FILE_MAX:
            data, name = image_within(data, name, FILE_MAX)
        if len(data) > FILE_MAX:
            raise DeliveryError(f"{path.name} is over Discord's 10 MiB an attachment",
                                permanent=True)
        return discord.File(io.BytesIO(data), filename=name)

    def view(self, buttons: tuple[Button, ...]) -> discord.ui.View:
        made = discord.ui.View(timeout=None)
        for b in buttons[:25]:
            made.add_item(discord.ui.Button(**component_args(b, self.custom_id(b))))
        return made

    @staticmethod
    def custom_id(b: Button) -> str:
        """The command itself where it fits, "?" before it where the button asks first;
        a longer one by its digest, found again from the outbox when pressed."""
        custom = f"?{b.command}" if b.confirm else b.command
        if len(custom) <= CUSTOM_ID_MAX:
            return custom
        return "#" + hashlib.sha256(custom.encode()).hexdigest()[:40]

    def remember(self, message_id: str, text: str) -> None:
        """A message's first line: the name of a thread started from it."""
        self.names[message_id] = (text.strip().splitlines() or ["genbot"])[0][:100]
        if len(self.names) > KEPT:
            self.names.popitem(last=False)

    async def call(self, request: Any) -> Any:
        """A discord.py request; what Discord refuses, as a DeliveryError."""
        try:
            return await request
        except discord.RateLimited as e:
            raise DeliveryError(f"Discord rate limit: {e}", retry_after=e.retry_after) from None
        except discord.HTTPException as e:
            raise refused(e) from None


class Client(discord.Client):
    """discord.py's client, its events handed to the adapter."""

    def __init__(self, adapter: Discord, **options: Any):
        super().__init__(**options)
        self.adapter = adapter

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        await self.adapter.on_interaction(interaction)

    async def on_message(self, message: discord.Message) -> None:
        await self.adapter.on_message(message)


def bot_id(token: str) -> str:
    """The bot's user id, which a bot token's first part encodes (base64)."""
    head = token.split(".", 1)[0]
    try:
        return base64.b64decode(head + "=" * (-len(head) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return "?"


def refused(e: discord.HTTPException) -> DeliveryError:
    """What Discord said, as the outbox reads it: a 429 past discord.py's own wait (a
    Cloudflare block) is retried later; 5xx too; what it refuses (400 a message it will
    not take, 403 a missing permission, 404 a channel gone) cannot mend by trying again."""
    said = f"Discord HTTP {e.status} (code {e.code}): {e.text}"[:300]
    if e.status == 429:
        return DeliveryError(said, retry_after=float(e.response.headers.get("Retry-After") or 60))
    return DeliveryError(said, permanent=400 <= e.status < 500 and e.status != 408)


def followup(call: dict[str, Any]) -> Route:
    """A follow-up message on an interaction's token (Execute Webhook)."""
    return Route("POST", "/webhooks/{webhook_id}/{webhook_token}", webhook_id=call["app"],
                 webhook_token=call["token"])


def original(call: dict[str, Any], method: str) -> Route:
    """An interaction's first answer (the "thinking…" its deferral shows)."""
    return Route(method, "/webhooks/{webhook_id}/{webhook_token}/messages/@original",
                 webhook_id=call["app"], webhook_token=call["token"])


def part_of(text: str, flags: int) -> dict[str, Any]:
    """One part of a long answer: words only, pinging nobody."""
    return {"content": text, "flags": flags, "allowed_mentions": {"parse": []}}


def form(params: Any) -> dict[str, Any]:
    """discord.py's message parameters as `request` takes them: JSON, or multipart with
    the files."""
    if params.files:
        return {"files": params.files, "form": params.multipart}
    return {"json": params.payload}


def chunks(text: str) -> list[str]:
    """`text` in messages of at most 2000 characters, split between lines where it can."""
    if len(text) <= CONTENT_MAX:
        return [text]
    out, current = [], ""
    for line in text.split("\n"):
        while len(line) > CONTENT_MAX:
            if current:
                out.append(current)
                current = ""
            out.append(line[:CONTENT_MAX])
            line = line[CONTENT_MAX:]
        if current and len(current) + 1 + len(line) > CONTENT_MAX:
            out.append(current)
            current = line
        else:
            current = f"{current}\n{line}" if current else line
    return out + [current] if current else out


def component_args(b: Button, custom_id: str) -> dict[str, Any]:
    style = discord.ButtonStyle.danger if b.id == "cancel_batch" else \
        discord.ButtonStyle.secondary
    return {"label": b.label[:80], "custom_id": custom_id, "style": style}


def component(b: Button) -> dict[str, Any]:
    """A button as raw JSON (an answer made before discord.py's views are at hand)."""
    return {"type": 2, "style": 1, "label": b.label[:80], "custom_id": b.command[:CUSTOM_ID_MAX]}
