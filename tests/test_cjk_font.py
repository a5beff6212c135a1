"""The dashboard's Chinese web font has every Chinese character the catalogs use: a new
message with a new character fails here until tools/make_cjk_font.py is run again. (That
the page renders with it, in a real Chromium: tests/test_pseudo_locale.py.)"""

from __future__ import annotations

import re
import unicodedata

from babel.messages.pofile import read_po
from fontTools.ttLib import TTFont

from bot import i18n
from tests.conftest import ROOT

FONTS = ROOT / "bot" / "web" / "static" / "fonts"
FONT = FONTS / "genbot-cjk.woff2"


def declared_ranges() -> list[tuple[int, int]]:
    """The unicode-range app.css gives the font."""
    css = (ROOT / "bot" / "web" / "static" / "app.css").read_text(encoding="utf-8")
    (face,) = re.findall(r"@font-face\s*{[^}]*}", css)
    assert 'url("fonts/genbot-cjk.woff2")' in face
    (ranges,) = re.findall(r"unicode-range:\s*([^;]+);", face)
    return [(int(lo, 16), int(hi or lo, 16)) for lo, hi in
            re.findall(r"U\+([0-9A-F]+)(?:-([0-9A-F]+))?", ranges)]


def catalog_text() -> str:
    """Every msgid and msgstr of the template and of every shipped catalog."""
    parts = []
    for po in [i18n.TEMPLATE, *sorted(i18n.SHIPPED.glob("*/LC_MESSAGES/*.po"))]:
        with po.open("rb") as f:
            parts += [text for m in read_po(f) for text in (m.id, m.string)
                      if isinstance(text, str)]
    return "".join(parts)


def test_every_chinese_character_of_the_catalogs_is_in_the_served_font():
    ranges = declared_ranges()
    from tools.make_cjk_font import RANGES  # (the generator subsets to the same ranges)
    assert ranges == list(RANGES)
    chinese = {ch for ch in catalog_text() if unicodedata.name(ch, "").startswith("CJK")
               or any(lo <= ord(ch) <= hi for lo, hi in ranges)}
    assert len(chinese) > 500  # (the catalogs were read)
    outside = sorted(ch for ch in chinese if not any(lo <= ord(ch) <= hi for lo, hi in ranges))
    assert not outside, f"Chinese outside the font's unicode-range: {outside}"
    cmap = TTFont(FONT).getBestCmap()
    missing = "".join(sorted(ch for ch in chinese if ord(ch) not in cmap))
    assert not missing, (f"the dashboard's font lacks {missing!r}: run tools/make_cjk_font.py "
                         "(its docstring says how)")


def test_the_font_is_small_licensed_and_holds_the_common_characters_and_no_others():
    assert FONT.stat().st_size < 1.5 * 2**20
    assert "SIL OPEN FONT LICENSE Version 1.1" in (FONTS / "OFL.txt").read_text()
    cmap = TTFont(FONT).getBestCmap()
    level1 = {bytes((row, cell)).decode("gb2312") for row in range(0xB0, 0xD8)
              for cell in range(0xA1, 0xFF) if (row, cell) < (0xD7, 0xFA)}
    assert len(level1) == 3755 and all(ord(ch) in cmap for ch in level1)
    assert all(any(lo <= c <= hi for lo, hi in declared_ranges()) for c in cmap)
