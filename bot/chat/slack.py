"""Slack: slack-bolt's AsyncApp over the chat core. Thin by design — every feature is the core's.

Inbound (events, slash commands and button clicks share /slack/events, or arrive over
Socket Mode): Bolt checks the signature and answers url_verification; each listener
acknowledges at once and hands an `Incoming` to the core in a background task, so
Slack hears back well within its 3 s. One message can come as both `message` and
`app_mention`, and Slack retries what it thinks was not acknowledged: a message is
handled once per channel and ts (and /gen is idempotent on it across restarts).

Slack's facts (docs/slack.md): slash commands carry no files and cannot run in
threads, so `/gen product_main sheet.xlsx` names a file uploaded earlier (the inbox
records every `file_share` the bot sees); `/status` is Slack's own, so `/genbot status`
works for every command; a wrong token downloads an HTML login page with status 200.

Outbound: chat.postMessage (mentions as <@U…>), chat.update with Block Kit for the
progress message and its Cancel button, files_upload_v2 into the batch's thread. An image
with buttons is one message: the file is uploaded unshared, then posted with its caption,
an image block (slack_file) and its buttons. Text is
mrkdwn on Slack's side and plain in the core (bot.chat.markup): what a person typed comes
in with Slack's entities undone, and goes out with &, < and > escaped, so a file named
"<!channel> <https://evil.example|sign in>.csv" is shown as named and pings no one. The
SDK retries rate limits and server errors once; what still fails goes back to the
outbox as a DeliveryError (with Retry-After), or as permanent for errors no retry fixes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import re
import shlex
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncAck as Ack
from slack_bolt.async_app import AsyncApp
from slack_bolt.async_app import AsyncBoltContext as Context
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.models.blocks import ImageBlock
from slack_sdk.models.blocks.basic_components import SlackFile
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from bot import i18n
from bot.chat.markup import Markup
from bot.chat.platform import (
    Button,
    DeliveryError,
    DownloadError,
    FileRef,
    Form,
    Inbound,
    Incoming,
    Outgoing,
    Platform,
    Receive,
    refuse,
    text_of,
)
from bot.messages import say
from bot.settings import IntakeConfig, SlackConfig
from storage.config import Config

log = logging.getLogger("genbot.slack")

# Errors no retry can fix: record and report them.
PERMANENT = frozenset({
    "channel_not_found", "not_in_channel", "is_archived", "invalid_auth", "not_authed",
    "account_inactive", "token_revoked", "token_expired", "missing_scope", "no_permission",
    "restricted_action", "message_not_found", "cant_update_message", "msg_too_long",
    "invalid_blocks", "file_not_found", "file_deleted", "invalid_arguments",
})
# Seconds between tries of an image message whose file Slack has not finished processing
# (completeUploadExternal answers first, processes after): then the outbox tries later.
FILE_READY_WAITS = (0.5, 1.0, 2.0, 4.0)
FILE_NOT_READY_RETRY = 30.0
DOWNLOAD_TIMEOUT = aiohttp.ClientTimeout(total=120)  # a sheet of up to [intake] max_file_mb
RESPOND_TIMEOUT = aiohttp.ClientTimeout(total=30)  # a short answer to the person who asked
CONNECT_TIMEOUT = 30.0  # seconds for Socket Mode to connect before trying again
BACKOFF_MAX = 60.0
SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")  # what Slack sends: hex of an HMAC-SHA256
TEXT_MAX = 3000  # characters in a Block Kit section's text
ALT_MAX = 2000  # characters in an image block's alt_text
BLOCK_IMAGES = (".png", ".jpg", ".jpeg", ".gif")  # what an image block's slack_file can show
FORM = "genbot_form"  # the callback_id of the modals genbot opens


def escaped(line: str) -> str:
    """Slack's documented escaping for mrkdwn, and all it needs: with &, < and > as
    entities no <!channel>, <@U…> or <url|text> can form; Slack shows the entities as
    the characters. (Emphasis such as *bold* has no escape in mrkdwn, and links nothing.)"""
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescaped(text: str) -> str:
    """What a person typed: Slack sends &, < and > in message and command text as those
    entities (its own <@U…> mentions stay markup, which the grammar reads)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


MRKDWN = Markup(escape=escaped, mention=lambda user: f"<@{user}>")
# Reactions that rate an image: ⭐ and 👍 keep, 👎 rejects.
REACTIONS = {"star": "keep", "star2": "keep", "+1": "keep", "thumbsup": "keep",
             "-1": "reject", "thumbsdown": "reject"}


def not_served() -> str:
    """Said in every language offered: whoever asks has not been heard in any yet."""
    return " · ".join(say("not_served", code) for code in i18n.languages().codes)


class Slack(Platform):
    name = "slack"
    can_edit = True
    bundles_files = True
    has_buttons = True
    has_forms = True
    has_threads = True

    def __init__(self, config: Config):
        s = self.settings = config[SlackConfig]
        self.inline_buttons = s.image_buttons  # in the image's own message (see `show`)
        self.max_bytes = int(config[IntakeConfig].max_file_mb * 2**20)
        self.client = AsyncWebClient(token=s.bot_token, base_url=s.api_url, retry_handlers=[
            AsyncConnectionErrorRetryHandler(), AsyncRateLimitErrorRetryHandler(max_retry_count=1),
            AsyncServerErrorRetryHandler(max_retry_count=1)])
        self.app = AsyncApp(client=self.client, signing_secret=s.signing_secret,
                            request_verification_enabled=bool(s.signing_secret))
        self.app.command(re.compile(r"^/"))(self.on_command)
        self.app.event("message")(self.on_message)
        self.app.event("app_mention")(self.on_message)
        self.app.action(re.compile(r"^(cancel_batch|image_\w+|sweep_yes)$"))(self.on_button)
        self.app.view(FORM)(self.on_form)
        self.app.event("reaction_added")(self.on_reaction)
        self.app.event("reaction_removed")(self.on_reaction)
        self.app.error(self.on_error)
        # Checked before bolt (which verifies again): bolt parses a body before verifying it.
        self.verifier = SignatureVerifier(s.signing_secret) if s.signing_secret else None
        self.receive: Receive | None = None
        self.people: dict[str, tuple[str | None, str | None]] = {}  # user -> (locale, tz)
        self._session: aiohttp.ClientSession | None = None
        self.socket: Any = None  # slack-bolt's AsyncSocketModeHandler, in Socket Mode

    @property
    def session(self) -> aiohttp.ClientSession:
        """One session for file downloads and response_url answers, made when first needed;
        each call says its own time limit (DOWNLOAD_TIMEOUT, RESPOND_TIMEOUT)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    # --- wiring -------------------------------------------------------------------------
    def attach(self, app: Any, chat: Inbound) -> None:
        self.receive = chat.receive
        if self.settings.signing_secret:
            app.router.add_post("/slack/events", self.endpoint)

    async def endpoint(self, request: web.Request) -> web.Response:
        """/slack/events: only a well-formed, correctly signed request reaches bolt. Bolt's own
        verifier raises on a non-ASCII signature or a non-numeric timestamp, and bolt parses
        (and trips over) a body before verifying it: each would be a 500 with a traceback."""
        headers: dict[str, str] = {}
        for name, value in request.headers.items():  # the first of each, as checked here
            if not name.lower().startswith("x-slack-bolt-"):  # bolt's own, never Slack's
                headers.setdefault(name.lower(), value)
        timestamp = headers.get("x-slack-request-timestamp", "")
        signature = headers.get("x-slack-signature", "")
        if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12
                and SIGNATURE.fullmatch(signature)):
            return refuse(401, "missing or malformed signature")
        try:
            body = (await request.read()).decode()
        except web.HTTPRequestEntityTooLarge:
            return refuse(413, "request body too large")
        except UnicodeDecodeError:
            return refuse(400, "request body is not UTF-8")
        assert self.verifier is not None, "the endpoint is only added with a signing secret"
        if not self.verifier.is_valid(body, timestamp, signature):
            return refuse(401, "invalid or stale signature")
        try:
            bolt_request = AsyncBoltRequest(body=body, query=request.query_string,
                                            headers=dict(headers))
        except Exception as e:  # noqa: BLE001 - signed, yet a shape that bolt's parser trips on
            log.warning("slack: unreadable request body (%s: %s)", type(e).__name__, e)
            return refuse(400, "malformed request body")
        return await to_aiohttp_response(await self.app.async_dispatch(bolt_request))

    async def on_error(self, error: Exception, response: BoltResponse | None
                       ) -> BoltResponse | None:
        """Bolt's error handler: a body of the wrong shape is answered 400, with a warning
        rather than bolt's default ERROR traceback and 500 (Slack would retry it)."""
        log.warning("slack: could not handle a request (%s: %s)", type(error).__name__, error)
        log.debug("slack: the request's error", exc_info=error)
        if response is not None:  # not yet acknowledged
            return BoltResponse(status=400, body={"error": "malformed request"})
        return None

    async def start(self) -> None:
        """Socket Mode connects in the background: a refused token or an unreachable
        Slack must not hold up the service, the other platforms or a clean shutdown."""
        self.spawn(self._check(), name="slack-auth-test")
        if self.settings.app_token:
            self.spawn(self._connect(), name="slack-socket-mode")

    async def _check(self) -> None:
        """One clear line at start: whom the bot token signs in as, or why it cannot."""
        try:
            me = await self.client.auth_test()
            log.info("slack: signed in as %s in %s", me.get("user"), me.get("team"))
            self.mark_signed_in(True)
        except SlackApiError as e:
            log.warning("slack: the bot token is refused (%s): check [slack] bot_token",
                        e.response.get("error"))
            self.mark_signed_in(False, f"the bot token is refused ({e.response.get('error')})")
        except Exception as e:  # noqa: BLE001 - slack.com out of reach: messages wait in the outbox
            why = str(e)[:200] or type(e).__name__
            log.warning("slack: cannot reach Slack to check the bot token (%s)", why)
            self.mark_signed_in(False, f"Slack out of reach ({why})")

    @property
    def inbound(self) -> str:
        return "socket_mode" if self.settings.app_token else "events_api"

    def connected(self) -> bool | None:
        return self.socket is not None if self.settings.app_token else None

    async def _connect(self) -> None:
        from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
        delay = 1.0
        while True:
            try:
                # Asked once first: the SDK's own connect retries a refused token forever,
                # a traceback each time. Its handler is made only for a token Slack takes:
                # closing one that never connected logs a line of its own.
                await self.client.apps_connections_open(app_token=self.settings.app_token)
                self.socket = AsyncSocketModeHandler(self.app, self.settings.app_token)
                await asyncio.wait_for(self.socket.connect_async(), CONNECT_TIMEOUT)
                log.info("slack: connected over Socket Mode")
                return
            except Exception as e:  # noqa: BLE001 - a refused token, or slack.com out of reach
                reason = getattr(getattr(e, "response", None), "get", lambda _: None)("error") \
                    or str(e) or type(e).__name__
                log.warning("slack: Socket Mode connection failed (%s); trying again in %.0f s",
                            str(reason)[:200], delay)
                if self.socket is not None:
                    with contextlib.suppress(Exception):
                        await self.socket.close_async()
                self.socket = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)

    async def close(self) -> None:
        if self.socket is not None:
            await self.socket.close_async()
        await super().close()
        if self._session is not None:
            await self._session.close()

    def _spawn(self, incoming: Incoming) -> None:
        """The core's work runs after the acknowledgement, never in its way."""
        receive = self.receive
        assert receive is not None, "attach() comes before any message"

        async def handle() -> None:
            locale, tz = await self.person(incoming.user)
            await receive(dataclasses.replace(incoming, lang=locale, tz=tz))
        self.spawn(handle())

    def serves(self, channel: str, direct: bool) -> bool:
        return direct or not self.settings.channels or channel in self.settings.channels

    async def person(self, user: str) -> tuple[str | None, str | None]:
        """Their locale and time zone, if the app may read them (users:read)."""
        if user not in self.people:
            try:
                info = (await self.client.users_info(user=user, include_locale=True))["user"]
                self.people[user] = (info.get("locale"), info.get("tz"))
            except (TimeoutError, SlackApiError, aiohttp.ClientError, KeyError):
                self.people[user] = (None, None)
        return self.people[user]

    # --- inbound ------------------------------------------------------------------------
    async def on_command(self, ack: Ack, command: dict) -> None:
        """/gen … and /genbot <any command>."""
        name, user, channel = (text_of(command, k) for k in ("command", "user_id", "channel_id"))
        if not (name and user and channel):  # not a slash command Slack would send
            await ack()
            return
        direct = command.get("channel_name") == "directmessage" or channel.startswith("D")
        if not self.serves(channel, direct):
            await ack(not_served())
            return
        await ack()
        name, text = name.lstrip("/"), unescaped(text_of(command, "text") or "")
        self._spawn(Incoming(
            self.name, user, channel, text if name == "genbot" else f"{name} {text}",
            message=f"command:{text_of(command, 'trigger_id')}",
            workspace=text_of(command, "team_id"),
            context={"response_url": text_of(command, "response_url")}))

    async def on_message(self, event: dict, body: dict, context: Context) -> None:
        """A DM, or a channel message that mentions the bot; files come as file_share."""
        if event.get("subtype") not in (None, "file_share", "thread_broadcast") or \
                event.get("bot_id"):
            return
        channel, text = text_of(event, "channel") or "", text_of(event, "text") or ""
        user, ts = text_of(event, "user"), text_of(event, "ts")
        direct = event.get("channel_type") == "im"
        if not (direct or f"<@{context.bot_user_id}>" in text) or not (user and ts and channel):
            return
        if not self.serves(channel, direct) or not self.once(f"{channel}:{ts}"):
            return
        shared = event.get("files")
        files = tuple([await self.file(f) for f in shared if isinstance(f, dict)
                       and text_of(f, "id")] if isinstance(shared, list) else [])
        self._spawn(Incoming(
            self.name, user, channel, unescaped(text), message=f"{channel}:{ts}",
            thread=text_of(event, "thread_ts") or (None if direct else ts), files=files,
            workspace=text_of(body, "team_id")))

    async def on_button(self, ack: Ack, body: dict, action: dict) -> None:
        """The Cancel button: the command it carries, as typed by whoever clicked."""
        await ack()
        container = body.get("container")
        container = container if isinstance(container, dict) else {}
        user, channel = (text_of(body.get(k), "id") for k in ("user", "channel"))
        command = text_of(action, "value")
        if not (user and channel and command):  # not a click Slack would send
            return
        self._spawn(Incoming(
            self.name, user, channel, command,
            message=f"action:{container.get('message_ts')}:{action.get('action_ts')}",
            thread=text_of(container, "thread_ts") or text_of(container, "message_ts"),
            workspace=text_of(body.get("team"), "id"),
            context={"response_url": text_of(body, "response_url"),
                     "trigger_id": text_of(body, "trigger_id")}))

    async def open_form(self, context: dict[str, Any], form: Form) -> None:
        """A modal with one input per field, filled in; its submission is `on_form`'s."""
        trigger = context.get("trigger_id")
        if not trigger:
            raise DeliveryError("no trigger to open a form with", permanent=True)
        blocks = [{
            "type": "input", "block_id": f"f{i}", "optional": True,
            "label": {"type": "plain_text", "text": f.label[:2000]},
            "element": {"type": "plain_text_input", "action_id": f.name[:255],
                        "multiline": f.multiline,
                        **({"initial_value": f.value[:3000]} if f.value else {})}}
            for i, f in enumerate(form.fields[:100])]
        await self._call(self.client.views_open, trigger_id=trigger, view={
            "type": "modal", "callback_id": FORM, "blocks": blocks,
            "title": {"type": "plain_text", "text": form.title[:24]},
            "submit": {"type": "plain_text", "text": form.submit[:24]},
            "private_metadata": json.dumps({
                "command": form.command, "channel": form.conversation, "thread": form.thread,
                "words": [f.name for f in form.fields if f.words]})})

    async def on_form(self, ack: Ack, body: dict, view: dict) -> None:
        """A submitted form: its command with NAME=VALUE for each field changed from its
        first value, typed by whoever submitted it, in the form's channel and thread; the
        modal closes at once and the answer is shown to them alone."""
        await ack()
        user = text_of(body.get("user"), "id")
        try:
            where = json.loads(text_of(view, "private_metadata") or "")
        except ValueError:
            return
        if not (user and isinstance(where, dict) and isinstance(where.get("command"), str)
                and isinstance(where.get("channel"), str)):
            return  # not a form genbot opened
        first = {b.get("block_id"): (b.get("element") or {}).get("initial_value") or ""
                 for b in view.get("blocks") or () if isinstance(b, dict)}
        changed = []
        words = where.get("words")
        words = words if isinstance(words, list) else []
        state = (view.get("state") or {}).get("values") or {}
        for block_id, inputs in state.items():
            for name, answer in (inputs or {}).items():
                value = (answer or {}).get("value") or ""
                if value != first.get(block_id, ""):
                    changed.append(shlex.quote(value if name in words else f"{name}={value}"))
        self._spawn(Incoming(
            self.name, user, where["channel"], " ".join([where["command"], *changed]),
            message=f"form:{text_of(view, 'id')}:{text_of(view, 'hash')}",
            thread=where.get("thread") if isinstance(where.get("thread"), str) else None,
            workspace=text_of(body.get("team"), "id"), context={"ephemeral_to": user}))

    async def on_reaction(self, event: dict, body: dict, context: Context) -> None:
        """⭐ or 👍 on an image keeps it, 👎 rejects it; taking the reaction back takes the
        rating back. Only reactions on the bot's own messages count, and they are answered
        by nothing but the rating (a reaction is its own feedback)."""
        item = event.get("item")
        user, emoji = text_of(event, "user"), text_of(event, "reaction")
        if not (isinstance(item, dict) and item.get("type") == "message" and user and emoji):
            return
        if event.get("item_user") != context.bot_user_id:
            return
        channel, ts = text_of(item, "channel"), text_of(item, "ts")
        rating = REACTIONS.get(emoji.split("::")[0])  # (a skin tone: "+1::skin-tone-2")
        if not (channel and ts and rating):
            return
        if event.get("type") == "reaction_removed":
            rating = "unkeep"
        receive = self.receive
        assert receive is not None, "attach() comes before any event"

        async def rate() -> None:
            target = await self.file_in(channel, ts) or ts
            await receive(Incoming(
                self.name, user, channel, f"{rating} @message:{target}",
                message=f"reaction:{channel}:{ts}:{user}:{emoji}:{text_of(event, 'event_ts')}",
                workspace=text_of(body, "team_id"), context={"quiet": True}))
        self.spawn(rate())

    async def file_in(self, channel: str, ts: str) -> str | None:
        """The file a message shares, if it is a file share (an image genbot uploaded with
        its caption: what the outbox knows it by), from reactions.get, which reads any
        message, thread replies too. A message genbot posted with blocks (an image with its
        buttons) is known by its own ts."""
        try:
            found = await self.client.reactions_get(channel=channel, timestamp=ts)
        except (TimeoutError, SlackApiError, aiohttp.ClientError):
            return None
        message = found.get("message") or {}
        if any(isinstance(b, dict) and b.get("type") == "image"
               for b in message.get("blocks") or ()):
            return None
        files = message.get("files") or []
        first = files[0] if files and isinstance(files[0], dict) else {}
        return text_of(first, "id")

    async def file(self, f: dict) -> FileRef:
        """A shared file as the inbox records it (files.info when the event left it out)."""
        if f.get("file_access") == "check_file_info" or not f.get("url_private_download"):
            try:
                f = (await self.client.files_info(file=f["id"]))["file"]
            except SlackApiError as e:
                log.warning("slack: files.info %s: %s", f.get("id"), e.response.get("error"))
        size = f.get("size")
        size = size if isinstance(size, int) and size >= 0 else 0  # 0: not known
        url = text_of(f, "url_private_download") or text_of(f, "url_private")
        return FileRef(text_of(f, "name") or text_of(f, "title") or f["id"], size,
                       {"id": f["id"], "url": url, "size": size})

    async def download(self, handle: dict) -> bytes:
        size = handle.get("size") or 0
        if size > self.max_bytes:
            raise DownloadError("file_too_big", size_mb=size / 2**20, max_mb=self.max_bytes / 2**20)
        if not handle.get("url"):
            raise DownloadError("download_failed", reason="Slack gave no download link")
        try:
            async with self.session.get(handle["url"], timeout=DOWNLOAD_TIMEOUT, headers={
                    "Authorization": f"Bearer {self.settings.bot_token}"}) as r:
                if r.status != 200:
                    raise DownloadError("download_failed", reason=f"Slack answered HTTP {r.status}")
                if r.content_type == "text/html":  # the login page: a wrong token or scope
                    raise DownloadError("download_html")
                data = await r.content.read(self.max_bytes + 1)
        except (TimeoutError, aiohttp.ClientError) as e:
            raise DownloadError("download_failed", reason=str(e) or type(e).__name__) from None
        if len(data) > self.max_bytes:
            raise DownloadError("file_too_big", size_mb=len(data) / 2**20,
                                max_mb=self.max_bytes / 2**20)
        if size and len(data) != size:
            raise DownloadError("download_size", got=len(data), expected=size)
        return data

    # --- outbound -----------------------------------------------------------------------
    async def send(self, out: Outgoing) -> str:
        text = MRKDWN.render(out.text, out.mention)
        if out.files:  # one message: the text and every file (files.completeUploadExternal)
            done = await self._call(self.client.files_upload_v2, channel=out.conversation,
                                    thread_ts=out.thread, initial_comment=text or None,
                                    file_uploads=[{"file": str(f), "filename": f.name,
                                                   "title": f.name} for f in out.files])
            return done["files"][0]["id"] if done.get("files") else "files"
        url = out.context.get("response_url")
        if out.private and url:  # a slash command's answer: for the person who typed it
            await self._respond(url, text, out.buttons)
            return "response_url"
        if out.private and out.context.get("ephemeral_to") and out.file is None:
            done = await self._call(self.client.chat_postEphemeral, channel=out.conversation,
                                    user=out.context["ephemeral_to"], text=text,
                                    thread_ts=out.thread,
                                    blocks=blocks(text, out.buttons) if out.buttons else None)
            return done.get("message_ts") or "ephemeral"
        if out.file is not None and out.image and out.buttons and \
                out.file.suffix.lower() in BLOCK_IMAGES:
            return await self.show(out, text)
        if out.file is not None:
            done = await self._call(self.client.files_upload_v2, channel=out.conversation,
                                    thread_ts=out.thread, file=str(out.file),
                                    filename=out.file.name, title=out.file.name,
                                    initial_comment=text or None)
            if out.buttons:  # an image no image block shows (WebP): its buttons under it
                await self._buttons_under(out, text)
            return done["file"]["id"]
        try:
            sent = await self._call(self.client.chat_postMessage, channel=out.conversation,
                                    text=text, thread_ts=out.thread,
                                    blocks=blocks(text, out.buttons) if out.buttons else None)
        except DeliveryError as e:
            if not (e.permanent and e.reason in ("not_in_channel", "channel_not_found") and url):
                raise
            await self._respond(url, text)  # answer the person alone where the bot is not in
            return "response_url"
        return sent["ts"]

    async def _buttons_under(self, out: Outgoing, text: str) -> None:
        """The buttons of an image shared as a file, in a message of their own. The image
        is posted already: were this refused, trying the whole again would post it twice,
        so a refusal is logged and its actions are left to be typed (/again 3)."""
        try:
            await self._call(self.client.chat_postMessage, channel=out.conversation,
                             thread_ts=out.thread, text=text, blocks=blocks(text, out.buttons))
        except DeliveryError as e:
            log.warning("slack: the buttons under %s were not posted (%s)", out.file, e.reason)

    async def show(self, out: Outgoing, text: str) -> str:
        """An image and its buttons as one message: the file uploaded unshared (no channel:
        sharing would post a message of its own), then a message showing it by slack_file.
        Slack finishes a file after completeUploadExternal answers; until then a block
        naming it is refused as invalid_blocks ("invalid slack file"): try again a little
        later, as Slack's SDK maintainers advise."""
        assert out.file is not None
        done = await self._call(self.client.files_upload_v2, file=str(out.file),
                                filename=out.file.name, title=out.file.name)
        image = ImageBlock(slack_file=SlackFile(id=done["file"]["id"]),
                           alt_text=out.text[:ALT_MAX] or out.file.name)
        message: dict[str, Any] = {"channel": out.conversation, "text": text,
                                   "thread_ts": out.thread,
                                   "blocks": blocks(text, out.buttons, image=image.to_dict())}
        for wait in FILE_READY_WAITS:
            try:
                sent = await self.client.chat_postMessage(
                    **{k: v for k, v in message.items() if v is not None})
                return str(sent["ts"])
            except SlackApiError as e:
                if not file_not_ready(e):
                    raise delivery_error(e) from None
            await asyncio.sleep(wait)
        return str((await self._call(self.client.chat_postMessage, **message))["ts"])

    async def edit(self, message_id: str, out: Outgoing) -> None:
        text = MRKDWN.render(out.text)
        await self._call(self.client.chat_update, channel=out.conversation, ts=message_id,
                         text=text, blocks=blocks(text, out.buttons))

    async def _call(self, method: Callable[..., Awaitable[Any]], **kwargs: Any) -> Any:
        try:
            return await method(**{k: v for k, v in kwargs.items() if v is not None})
        except SlackApiError as e:
            raise delivery_error(e) from None
        except SlackRequestError as e:  # the upload step of files_upload_v2
            raise DeliveryError(str(e)[:300]) from None

    async def _respond(self, url: str, text: str, buttons: Sequence[Button] = ()) -> None:
        answer: dict[str, Any] = {"response_type": "ephemeral", "text": text}
        if buttons:
            answer["blocks"] = blocks(text, buttons)
        async with self.session.post(url, timeout=RESPOND_TIMEOUT, json=answer) as r:
            if r.status >= 400:
                raise DeliveryError(f"response_url answered HTTP {r.status}",
                                    permanent=r.status < 500)


def delivery_error(e: SlackApiError) -> DeliveryError:
    """What the outbox makes of Slack's refusal: when to try again, or that no try helps."""
    status, error = e.response.status_code, e.response.get("error") or "error"
    if status == 429:
        return DeliveryError(f"429 {error}", retry_after=float(
            e.response.headers.get("Retry-After") or e.response.headers.get(
                "retry-after") or 1))
    if status >= 500:
        return DeliveryError(f"{status} {error}")
    if file_not_ready(e):
        return DeliveryError(f"{error}: the image is not processed yet",
                             retry_after=FILE_NOT_READY_RETRY)
    return DeliveryError(error, permanent=error in PERMANENT)


def file_not_ready(e: SlackApiError) -> bool:
    """Slack's answer to a block naming a file it has not finished: invalid_blocks, with
    "invalid slack file [json-pointer:/blocks/N/slack_file]" among its errors."""
    errors = e.response.get("errors")
    return e.response.get("error") == "invalid_blocks" and isinstance(errors, list) and any(
        "slack_file" in str(x) for x in errors)


def blocks(text: str, buttons: Sequence[Button], *, image: dict | None = None) -> list[dict]:
    """A text section (`text` is mrkdwn, escaped already), the image (an image block) if
    any, and the buttons (each with a confirmation) in an actions block; their labels are
    plain_text, shown as written."""
    out: list[dict] = [{"type": "section", "text": {"type": "mrkdwn",
                                                    "text": within(text, TEXT_MAX)}}]
    if image is not None:
        out.append(image)
    if buttons:
        out.append({"type": "actions", "elements": [{
            "type": "button", "action_id": b.id,
            **({"style": "danger"} if b.confirm else {}),
            "text": {"type": "plain_text", "text": b.label}, "value": b.command,
            **({"confirm": {"title": {"type": "plain_text", "text": b.label[:100]},
                            "text": {"type": "plain_text", "text": b.confirm},
                            "confirm": {"type": "plain_text", "text": b.label[:30]},
                            "deny": {"type": "plain_text", "text": b.deny or "✕"},
                            "style": "danger"}} if b.confirm else {})} for b in buttons]})
    return out


def within(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, never through an entity ("&am" would show)."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    amp = head.rfind("&")
    return head[:amp] if amp != -1 and ";" not in head[amp:] else head
