"""Nothing a person, a file or a server wrote can ping, link or format in genbot's voice.

The core's text is plain (bot.chat.markup); each adapter's rule shows it as written in
its wire format. Here: the rules themselves — DingTalk's markdown read back by a real
CommonMark reader (tests/fakes/hostile.py) — and the real flow on the test platform,
where hostile names and cells must arrive exactly as written. The same flow against the
fakes of Slack and DingTalk is in test_slack.py and test_dingtalk.py.
"""

from __future__ import annotations

import io
import re

from hypothesis import given
from hypothesis import strategies as st

from bot.chat.dingtalk.markup import MARKDOWN, TEXT, WORD_JOINER
from bot.chat.platform import Outgoing
from bot.chat.slack import MRKDWN, escaped, unescaped
from bot.chat.terminal import Terminal
from bot.messages import CATALOG, PLURALS
from tests.conftest import executor_config
from tests.fakes.chat import World
from tests.fakes.hostile import BOTTLE, FILE, HOSTILE, UNUSED, as_written, hostile_sheet, read


def test_the_catalogue_writes_no_markup():
    """Escaping a whole message loses nothing genbot meant: no entry of the catalogue uses
    a platform's markup on purpose (its "*" and "#" are meant as written)."""
    for code, texts in [*CATALOG.items(), *PLURALS.items()]:  # (and each one's plural)
        for text in texts:
            assert not re.search(r"[<>&`]|\]\(|\*\*", text), code


def test_slack_escaping_forms_no_token_and_reads_back_as_written():
    for text in [*HOSTILE, "\n".join(HOSTILE), "a & b <> c"]:
        wire = MRKDWN.render(text)
        assert not re.search(r"[<>]", wire) and unescaped(wire) == text, text
        assert re.findall(r"<[^>]*>", MRKDWN.render(text, "U1")) == ["<@U1>"]  # genbot's own
    assert escaped("&lt;") == "&amp;lt;"  # shown as typed, not as "<"


LINE_STARTS = ["- item", "+ item", "* item", "1. first", "12) twelfth", "> quote", "===",
               "---", "***", "___", "    indented code", "\tcode", "   # three spaces",
               "\u3000# ideographic space", "| a | b |", "|---|---|", "```", "~~~",
               '<font color="red">red</font>', '<a href="https://evil.example">x</a>',
               "<img src=x>", "<https://evil.example>", "\\*not emphasis\\*", "&#91;x&#93;(y)",
               "&amp;", "~~struck~~", "`code`", "**strong** _em_", "@13800000000",
               "[a]: https://evil.example", "[a]"]


def test_dingtalk_markdown_shows_every_line_as_written():
    for line in HOSTILE + LINE_STARTS:
        assert read(MARKDOWN.render(line)) == as_written(line), line
    text = "\n".join(HOSTILE + LINE_STARTS)  # each line keeps its own line, as written
    assert read(MARKDOWN.render(text)).split("\n") == [as_written(x) for x in text.split("\n")]
    # Genbot's own: the mention ahead of the text, the line breaks between its lines.
    assert MARKDOWN.render("# a\nb", "staff1") == "@staff1 &#35; a  \nb"


@given(st.text(alphabet="#*_-+=>`[]()!<&;\\|~:. 1a@\t\u00a0\u3000", max_size=24))
def test_no_line_of_such_characters_becomes_markup(line):
    assert read(MARKDOWN.render(line)).rstrip() == as_written(line).rstrip()


def test_dingtalk_text_messages_mention_nobody_they_do_not_list():
    shown = TEXT.render("@all and @13800000000", "staff1")
    assert shown == f"@staff1 @{WORD_JOINER}all and @{WORD_JOINER}13800000000"
    assert shown.replace(WORD_JOINER, "") == "@staff1 @all and @13800000000"  # reads the same


async def test_the_terminal_shows_control_characters_rather_than_obeying_them():
    link = "\x1b]8;;https://evil.example\x1b\\sign in\x1b]8;;\x1b\\"  # OSC 8: a link
    screen = io.StringIO()
    await Terminal(screen).send(Outgoing("terminal", None, f"row 2 failed: {link}\nnext"))
    assert "\x1b" not in screen.getvalue()
    assert screen.getvalue() == ("row 2 failed: \\x1b]8;;https://evil.example\\x1b\\sign in"
                                 "\\x1b]8;;\\x1b\\\nnext\n")


async def test_the_core_hands_hostile_names_and_cells_on_as_written(tmp_path, demo_models):
    """The test platform shows text as it is: what arrives there is the core's text, and
    must be the file's name and the cells exactly, with no entity, marker or escape."""
    async with World(executor_config(tmp_path / "data", demo_models)) as w:
        p = w.platform
        (got,) = await w.send("", files=(p.upload(FILE, hostile_sheet()),
                                         p.upload("bottle.png", BOTTLE)))
        assert got.text.startswith(f"Got {FILE}, bottle.png. To run a sheet: /gen TEMPLATE "
                                   f'"{FILE}"')
        (report,) = await w.send("/gen social_thumb")
        lines = report.text.splitlines()
        assert lines[0] == f"{FILE}: 10 of 10 rows have problems; nothing was queued."
        assert lines[1:-1] == [f'row {row}, column "aspect": "{value}" is not one of: 1:1, '
                               "4:5, 9:16, 16:9, 3:4" for row, value in enumerate(HOSTILE, 2)]
        assert lines[-1] == f'columns not used by social_thumb: "{UNUSED}"'
