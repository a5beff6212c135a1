"""Feishu's two text formats, and how plain text is shown as written in each.

A card's `markdown` element renders markdown — bold, italic, links [x](y), lists,
headings, code — plus Feishu's own tags (<at id=…>, <font>, <text_tag> …), and takes
HTML character references for the characters it would read as markup (Feishu's card
docs list &#42; for "*", &lt; for "<"): so every such character is written as one, and
what starts markup only at the start of a line, the same way (DingTalk's rule, the same
renderer family: bot.chat.dingtalk.markup). Genbot sends its words as cards only (a
text message could not be updated or carry buttons); its own mention, <at id=…>, is
added after escaping.
"""

from __future__ import annotations

from bot.chat.dingtalk.markup import escaped
from bot.chat.markup import Markup

CARD = Markup(escape=escaped, mention=lambda user: f"<at id={user}></at>")
