"""What happens when someone writes to the bot, on any platform.

`Chat.receive` records the files a message carries in the inbox, parses its command
(bot.chat.commands declares them), checks that the person may run it, runs its handler,
and owes the replies in the outbox for the sender to post. It never raises: any text
gets a reply — a coded error in the person's language, at worst an apology with a
reference to the log — never a traceback.

What a batch then owes (acceptance, progress, images, summary) is the notifier's;
replies here are only about the command itself.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from zoneinfo import ZoneInfo

from bot import i18n
from bot.app.application import App
from bot.app.permissions import Who
from bot.chat.commands import COMMANDS
from bot.chat.grammar import only_mentions
from bot.chat.platform import Button, Incoming, Platform
from bot.chat.turn import Reply, Turn
from bot.chat.uploads import quoted
from bot.conventions import reply_key
from bot.errors import Coded
from bot.messages import say
from bot.settings import ChatConfig
from storage.inbox import Inbox, is_sheet
from storage.outbox import Outbox
from storage.records import Upload

log = logging.getLogger("genbot.chat")
SUGGESTED = 25  # choices an autocomplete shows at most (Discord's limit)


def _first_word(text: str) -> str:
    """The message's first word, past mentions and a "/"."""
    words = [w for w in text.split() if not w.startswith(("<@", "@"))]
    return words[0].lstrip("/")[:8] if words else ""


class Chat:
    def __init__(self, app: App, *, inbox: Inbox, outbox: Outbox,
                 platforms: dict[str, Platform], on_owed: Callable[[], None] = lambda: None):
        self.app, self.inbox, self.outbox = app, inbox, outbox
        self.platforms, self.on_owed = platforms, on_owed

    # --- where and in what language --------------------------------------------------
    def language(self, msg: Incoming) -> str:
        """Most specific first: the person, the conversation, the workspace, the platform
        (from [chat] languages); then the person's own locale; then the platform's default;
        then [chat] language."""
        p, settings, offered = msg.platform, self.app.config[ChatConfig], i18n.languages()
        given = offered.find(settings.language_at(
            f"{p}:{msg.user}", f"{p}:{msg.conversation}",
            f"{p}:{msg.workspace}" if msg.workspace else None, p))
        # who writes 帮助 or 你好 reads Chinese, whatever the locale
        found = given or offered.written_in(_first_word(msg.text)) or offered.find(msg.lang)
        if found:
            return found.code
        platform = self.platforms.get(p)
        return offered.code(platform.default_lang if platform else None,
                            offered.code(settings.language))

    def zone(self, msg: Incoming) -> ZoneInfo:
        for name in (msg.tz, self.app.config[ChatConfig].timezone):
            try:
                if name:
                    return ZoneInfo(name)
            except (ValueError, KeyError, OSError):
                continue  # a zone this machine does not know: the next one
        return ZoneInfo("UTC")

    # --- receiving ----------------------------------------------------------------------
    async def receive(self, msg: Incoming) -> None:
        """Handle one message; owe its replies. Never raises."""
        turn = Turn(msg, Who(msg.platform, msg.user, msg.conversation, msg.platform_role),
                    self.app, self.inbox, self.platforms)
        try:
            turn.lang, turn.zone = self.language(msg), self.zone(msg)
            uploads = [await self.inbox.record(
                platform=msg.platform, user=msg.user, conversation=msg.conversation,
                name=f.name, size=f.size, handle=f.handle, message=msg.message)
                for f in msg.files]
            if uploads and only_mentions(msg.text):  # files shared with just "@genbot"
                self.acknowledge(turn, uploads)
            else:
                await self.command(turn)
        except Exception:
            ref = uuid.uuid4().hex[:8]
            log.exception("chat: error handling a message (ref %s) from %s:%s", ref,
                          msg.platform, msg.user)
            turn.replies = [Reply(say("internal_error", turn.lang, ref=ref))]
        await self.owe(turn)

    def suggest(self, msg: Incoming, field: str, typed: str) -> list[tuple[str, str]]:
        """A platform's autocomplete: the templates whose name (first) or description
        holds what was typed, as "name — description" and the name; at most SUGGESTED."""
        if field != "template":
            return []
        typed = typed.strip().lower()
        found = sorted(
            (not name.lower().startswith(typed), name) for name, t in self.app.templates.items()
            if typed in name.lower() or typed in (t.description or "").lower())
        return [(f"{name} — {self.app.templates[name].description}".rstrip(" —")[:100], name)
                for _, name in found[:SUGGESTED]]

    async def buttons(self, platform: str, conversation: str,
                      message: str) -> tuple[Button, ...]:
        """The buttons under a message we posted, as the outbox keeps them."""
        key = await self.outbox.key_of(platform, conversation, message)
        posted = await self.outbox.get(key) if key else None
        return tuple(Button.of(b) for b in posted.payload.get("buttons") or ()) if posted else ()

    def acknowledge(self, turn: Turn, uploads: list[Upload]) -> None:
        """Files with no command: say what came and how to use it."""
        sheets = [u.name for u in uploads if is_sheet(u.name)]
        names = ", ".join(u.name for u in uploads)
        if sheets:
            turn.say("file_received", names=names, name=quoted(sheets[0]))
        else:
            turn.say("images_received", names=names)

    async def command(self, turn: Turn) -> None:
        """Parse, check the person may, run the handler; a coded error is the reply."""
        try:
            cmd = COMMANDS.parse(turn.msg.text, now=turn.now)
            spec = COMMANDS[cmd.name]
            await self.app.permit(turn.who, spec.action)
            await spec.handler(turn, cmd)
        except Coded as e:
            turn.reply(e.render(turn.lang))

    async def owe(self, turn: Turn) -> None:
        """The replies, in order, in the message's thread; a retried message owes nothing new."""
        msg = turn.msg
        if msg.context.get("quiet"):  # e.g. a reaction: it is its own answer
            return
        message = msg.message or uuid.uuid4().hex
        for i, reply in enumerate(turn.replies):
            kind = "text" if reply.file is None else ("image" if reply.image else "file")
            await self.outbox.put(reply_key(msg.platform, message, i), platform=msg.platform,
                                  conversation=msg.conversation, thread=msg.thread, kind=kind,
                                  payload={"text": reply.text, "path": reply.file,
                                           "lang": turn.lang, "context": msg.context,
                                           "private": reply.file is None and not reply.public,
                                           **({"buttons": list(reply.buttons)}
                                              if reply.buttons else {})})
        if turn.replies:
            self.on_owed()
