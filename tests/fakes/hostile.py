"""Text made to ping, link or format in genbot's voice, as names, cells and titles; and a
real CommonMark reader (markdown-it, which rich already brings) to read DingTalk's
markdown back: the hostile inputs of tests/test_markup.py, test_slack.py, test_dingtalk.py."""

from __future__ import annotations

import csv
import io
import re
from html import unescape
from pathlib import Path

from markdown_it import MarkdownIt

from bot.chat.dingtalk.markup import WORD_JOINER

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ["<!channel>", "<!here>", "<@U123>", "<https://evil.example|sign in>",
           "&lt;b&gt; already escaped", "[click](https://evil.example)",
           "![x](https://evil.example/x.png)", "# heading", "@all", "*bold*"]
FILE = "<!channel> <https://evil.example/login|genbot: sign in again>.csv"
UNUSED = "<!here> [x](https://evil.example)"  # a column no template has: named in the report
BOTTLE = (ROOT / "examples" / "assets" / "bottle.png").read_bytes()


def hostile_sheet(titles: list[str] = HOSTILE, aspects: list[str] = HOSTILE) -> bytes:
    """A social_thumb sheet: each row's title and aspect from the lists (an aspect that is
    not one of the choices is quoted in the report), and a column no template uses."""
    buf = io.StringIO()
    out = csv.writer(buf)
    out.writerow(["image", "title", "aspect", UNUSED])
    for title, aspect in zip(titles, aspects, strict=True):
        out.writerow(["bottle.png", title, aspect, "x"])
    return buf.getvalue().encode()


READER = MarkdownIt("commonmark").enable(["table", "strikethrough"])
NO_HTML = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough"])  # Discord's kind


def read(markdown: str, reader: MarkdownIt = READER) -> str:
    """The text a markdown reader shows for `markdown`, its lines joined by \\n; fails if
    the reader made anything but paragraphs and line breaks of it (a link, an image, a
    heading, emphasis, a list, a quote, code, a table, HTML …)."""
    html = reader.render(markdown).strip()
    if not html:
        return ""
    assert html.startswith("<p>") and html.endswith("</p>"), html
    lines = html[3:-4].split("<br />\n")
    assert all("<" not in line for line in lines), html
    return "\n".join(unescape(line) for line in lines)


def as_written(line: str) -> str:
    """How a line should read after DingTalk's markdown rule: as written, with an invisible
    word joiner after each "@" and leading blanks kept as no-break spaces."""
    line = line.replace("@", "@" + WORD_JOINER)
    lead = re.match(r"\s*", line).group()  # type: ignore[union-attr]
    return lead.replace(" ", "\xa0").replace("\t", "\xa0") + line[len(lead):]
