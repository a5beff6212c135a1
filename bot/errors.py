"""The one family of coded errors everything in bot/ raises.

A coded error is a message waiting for a language: a stable `code` (what the API returns
as error.code and the audit log records) and the details that fill its text in
bot.messages. Each front translates the family once: chat replies with `render(lang)`,
the REST API maps the kind to an HTTP status. Nothing here is a traceback.
"""

from __future__ import annotations

from typing import Any

from bot.messages import say


class Coded(Exception):
    """Something a person asked for did not happen, and why, as a message code."""

    def __init__(self, code: str, /, **details: Any):
        super().__init__(code)
        self.code, self.details = code, details

    def render(self, lang: str = "en") -> str:
        return say(self.code, lang, **self.details)

    def plain(self) -> dict[str, Any]:
        """The details a JSON body can carry as they are (words in both languages as
        their English)."""
        return {k: str(v) if isinstance(v, str) else v for k, v in self.details.items()
                if isinstance(v, (str, int, float, bool, type(None)))}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.details!r})"


class NotFound(Coded):
    """What it names does not exist: no such batch, job, schedule or template."""


class Refused(Coded):
    """A rule says no: the person's role, whose batch it is, the conversation, a limit."""


class Invalid(Coded):
    """What was given cannot be used as it is: a priority, a time, a cron line, a role."""


class Conflict(Coded):
    """The state of things forbids it now: the queue is full, nothing is left to retry."""
