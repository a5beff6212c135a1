"""The dashboard's Chinese web font has every Chinese character the catalogs use: a new
message with a new character fails here until bot/web/cjk_font.py is run again. (That
the page renders with it, in a real Chromium: tests/test_pseudo_locale.py.)"""

from __future__ import annotations

import re
import unicodedata

from babel.messages.pofile import read_po
from fontTools.ttLib import TTFont

from bot import i18n
from bot.web import cjk_font as generator
from tests.conftest import ROOT

STATIC = ROOT / "bot" / "web" / "static"
RUN = "run bot/web/cjk_font.py (its docstring says how)"


def faces() -> dict[str, set[int]]:
    """Each @font-face of app.css: its file -> the code points of its unicode-range."""
    css = (STATIC / "app.css").read_text(encoding="utf-8")
    found = {}
    for face in re.findall(r"@font-face\s*{[^}]*}", css):
        (name,) = re.findall(r'url\("fonts/([\w.-]+)"\)', face)
        (ranges,) = re.findall(r"unicode-range:\s*([^;]+);", face)
        found[name] = {c for lo, hi in re.findall(r"U\+([0-9A-F]+)(?:-([0-9A-F]+))?", ranges)
                       for c in range(int(lo, 16), int(hi or lo, 16) + 1)}
    return found


def catalog_text() -> str:
    """Every msgid and msgstr of the template and of every shipped catalog."""
    parts = []
    for po in [i18n.TEMPLATE, *sorted(i18n.SHIPPED.glob("*/LC_MESSAGES/*.po"))]:
        with po.open("rb") as f:
            parts += [form for m in read_po(f) for text in (m.id, m.string)
                      for form in (text if isinstance(text, tuple) else (text,))
                      if isinstance(form, str)]
    return "".join(parts)


def test_every_chinese_character_of_the_catalogs_is_in_the_face_that_serves_it():
    declared = faces()
    assert set(declared) == {"genbot-cjk.woff2", "genbot-cjk-names.woff2"}
    assert generator.css_rules() in (STATIC / "app.css").read_text(encoding="utf-8"), \
        f"app.css's @font-face rules are not the generator's: {RUN}"
    covered = set().union(*declared.values())
    assert covered == {c for lo, hi in generator.RANGES for c in range(lo, hi + 1)}
    assert sum(map(len, declared.values())) == len(covered)  # (one face for each character)
    chinese = {ch for ch in catalog_text() if unicodedata.name(ch, "").startswith("CJK")
               or ord(ch) in covered}
    assert len(chinese) > 500  # (the catalogs were read)
    outside = sorted(ch for ch in chinese if ord(ch) not in covered)
    assert not outside, f"Chinese outside the fonts' unicode-range: {outside}"
    for name, points in declared.items():
        cmap = TTFont(STATIC / "fonts" / name).getBestCmap()
        assert set(cmap) <= points, name  # (what it holds, it is fetched for)
        missing = "".join(sorted(ch for ch in chinese if ord(ch) in points - set(cmap)))
        assert not missing, f"fonts/{name} lacks {missing!r}: {RUN}"


def test_the_font_is_small_licensed_and_holds_the_common_characters():
    fonts = STATIC / "fonts"
    assert sum(f.stat().st_size for f in fonts.glob("*.woff2")) < 1.5 * 2**20
    assert (fonts / "genbot-cjk-names.woff2").stat().st_size < 20_000  # (on every page)
    assert "SIL OPEN FONT LICENSE Version 1.1" in (fonts / "OFL.txt").read_text()
    held = set().union(*(TTFont(f).getBestCmap() for f in fonts.glob("*.woff2")))
    level1 = {bytes((row, cell)).decode("gb2312") for row in range(0xB0, 0xD8)
              for cell in range(0xA1, 0xFF) if (row, cell) < (0xD7, 0xFA)}
    assert len(level1) == 3755 and all(ord(ch) in held for ch in level1)
