"""DingTalk's two text formats, and how plain text is shown as written in each.

A robot's markdown message renders a subset of markdown — headings (#), quotes (>),
bold and italic (** *), links [x](y), images ![x](y), lists (- and 1.), line breaks
("  \\n") — and its PC client renders HTML too (<font>, <a>). Markdown is a phishing
surface: "[genbot: sign in again](https://evil.example)" would show only its words.
So each character that can start markup is written as a numeric character reference
(&#91; for "["): no markdown reader takes a reference for markup, and DingTalk's
renderer shows it as the character. (A backslash escape would depend on which
characters this renderer honours; a reference does not.) What starts markup only at
the start of a line — #, -, +, =, "1." — is written so there, and the blanks that lead a
line as references too (spaces and tabs as no-break spaces), so no line of a person's
text becomes a heading, a list, a rule, a setext underline or a code block, even for a
renderer that trims every kind of blank.

A text message renders nothing but shows what it holds. In both, a mention pings only
whom the message's `at` field lists (genbot lists only the person it answers); still,
"@all" or "@13800000000" from a cell or a file name should not even look like one, so
a WORD JOINER (invisible) follows every "@" of the text.

A bare address (https://…) is linked by DingTalk's clients in either format, as in any
message a person sends: it shows where it leads, so it is left alone.
"""

from __future__ import annotations

import re

from bot.chat.markup import Markup

WORD_JOINER = "\u2060"
INLINE = str.maketrans({c: f"&#{ord(c)};" for c in "&<>\\`*_~[]|"})
LINE_START = re.compile(r"(\s*)([#+=-]|\d+[.)])?")


def unmentioned(line: str) -> str:
    """No "@" of the text reads as a mention."""
    return line.replace("@", "@" + WORD_JOINER)


def escaped(line: str) -> str:
    """One line of plain text as markdown that shows it as written."""
    line = unmentioned(line).translate(INLINE)
    start = LINE_START.match(line)
    assert start is not None, "the pattern matches the empty string"
    indent, marker = start.group(1), start.group(2) or ""
    if marker:  # "#", "-", "1." …: the character that would make it markup, referenced
        marker = f"{marker[:-1]}&#{ord(marker[-1])};"
    return "".join(map(blank, indent)) + marker + line[start.end():]


def blank(ch: str) -> str:
    """A blank that leads a line, as a reference: shown, never taken for indentation."""
    return "&#160;" if ch in " \t" else f"&#{ord(ch)};"


MARKDOWN = Markup(escape=escaped, line_break="  \n")  # two spaces: DingTalk's line break
TEXT = Markup(escape=unmentioned)
