"""Plain text in, a platform's formatted text out: nothing a person, a file or a server
wrote can ping a channel, show a link or format text in genbot's voice.

Everything the core hands an adapter — `Outgoing.text`, a button's label — is plain
text: the catalogue's sentences (bot.messages.say) with whatever came from outside (a
file's name, a cell, a template or column name, an executor's error, a platform's
refusal) quoted exactly as it was written. The core writes no markup. An adapter turns
that text into its wire format as it sends, with a `Markup`: its platform's escaping rule
applied to every line, then the markup that is genbot's own — the mention of the person
a message is for, the platform's line breaks — put around the escaped text (and an
image embedded, buttons, by the adapter itself). The terminal and the test platform
show text as it is.

Why the whole text is escaped, not only the details `say` fills in (with delimiters
that an adapter would look for):

- nothing is lost: no catalogue entry uses markup (a test checks), and everything
  genbot formats on purpose — mentions, line breaks, images, buttons — is the adapter's,
  added after escaping;
- nothing can be missed: text reaches the outbox from places that never pass a value
  through `say` as a detail (a template's description in /templates, a picture's name,
  the error a platform gave, the scheduler's digest), and a rule applied to the whole
  text covers the next such place too;
- nothing leaks: `say` also writes the REST API's errors, the CLI's lines, results.xlsx
  and the contact sheet's labels, where delimiters would be stray characters;
- the outbox stays neutral: a message is stored once, before it is sent, as plain text,
  and each adapter renders it at the last moment for its own format — DingTalk even
  picks one of two (text or markdown) per message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def as_written(line: str) -> str:
    """A format in which nothing a line holds is markup."""
    return line


@dataclass(frozen=True)
class Markup:
    """A wire format: how one line of plain text is shown as written (`escape`), how a
    person is mentioned, what ends a line. `escape` sees one line at a time, so rules
    about a line's start (a markdown heading, a list) apply to every line, whatever
    separated them in the text (\\r, \\n, U+2028 …)."""

    escape: Callable[[str], str] = as_written
    mention: Callable[[str], str] = lambda user: f"@{user}"
    line_break: str = "\n"

    def render(self, text: str, mention: str | None = None) -> str:
        """`text` (plain) in this format, after the mention of `mention` (a user id)."""
        body = self.line_break.join(self.escape(line) for line in text.splitlines())
        return f"{self.mention(mention)} {body}" if mention else body
