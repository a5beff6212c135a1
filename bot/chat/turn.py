"""One message being handled: who sent it, in which language and time zone, what a
handler may use, and the replies it owes."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from bot.app.application import App
from bot.app.permissions import Who
from bot.chat.platform import Incoming, Platform
from bot.messages import say
from storage.inbox import Inbox


@dataclass(frozen=True)
class Reply:
    text: str
    file: str | None = None  # relative to the file store
    image: bool = False
    public: bool = False  # for the whole conversation, even where answers can be private
    buttons: tuple[dict[str, str], ...] = ()  # label, command, id: where the platform has them


@dataclass
class Turn:
    msg: Incoming
    who: Who
    app: App
    inbox: Inbox
    platforms: dict[str, Platform]
    lang: str = "en"
    zone: ZoneInfo = field(default_factory=lambda: ZoneInfo("UTC"))
    replies: list[Reply] = field(default_factory=list)

    @property
    def now(self) -> datetime:
        """The app's clock, in the person's time zone."""
        return datetime.fromtimestamp(self.app.clock(), self.zone)

    def reply(self, text: str, file: str | None = None) -> None:
        self.replies.append(Reply(text, file))

    def say(self, code: str, **details: Any) -> None:
        self.reply(say(code, self.lang, **details))

    def announce(self, code: str, **details: Any) -> None:
        """A reply the whole conversation should see (the queue paused, say); others
        answer only the person who asked, where the platform can."""
        self.replies.append(Reply(say(code, self.lang, **details), public=True))

    def add(self, code: str, **details: Any) -> None:
        """Append to the last reply (one message rather than several)."""
        text = say(code, self.lang, **details)
        if self.replies and self.replies[-1].file is None:
            self.replies[-1] = Reply(f"{self.replies[-1].text}\n{text}")
        else:
            self.replies.append(Reply(text))

    def append(self, code: str, **details: Any) -> None:
        """Continue the last line of the last reply."""
        self.replies[-1] = Reply(self.replies[-1].text + say(code, self.lang, **details))
