"""Discord's markdown, and how plain text is shown as written in it.

A message's `content` renders markdown — emphasis (* _ ~~ __), code (`), spoilers (||),
quotes (>), headings (# at a line's start), lists (- and 1.), subtext (-#), masked links
[x](y) — and mentions (<@id>, <@&role>, @everyone, @here). discord.py's own escapes do
the work: `escape_markdown` writes a backslash before each character or line start that
would be markup (Discord shows an escaped character as itself), `escape_mentions` puts a
zero-width space after the "@" of a mention. The one rule they leave out, a numbered
list's "1.", is escaped here. And every message is sent with allowed_mentions naming only
the person it is for, so not even what slipped past could ping. A bare address stays a
link, as in any message a person writes: it shows where it leads.
"""

from __future__ import annotations

import re

from discord.utils import escape_markdown, escape_mentions

from bot.chat.markup import Markup

NUMBERED = re.compile(r"^(\s*\d+)([.)])")


def escaped(line: str) -> str:
    """One line of plain text as Discord markdown that shows it as written."""
    return NUMBERED.sub(r"\1\\\2", escape_mentions(escape_markdown(line)))


MARKDOWN = Markup(escape=escaped, mention=lambda user: f"<@{user}>")
