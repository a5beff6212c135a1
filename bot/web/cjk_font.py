"""Make the dashboard's Chinese web font: bot/web/static/fonts/genbot-cjk*.woff2.

A subset of Noto Sans CJK SC Regular (SIL Open Font License 1.1; the licence is beside
the font, OFL.txt) holding every Chinese character genbot's catalogs use, GB2312's 3,755
level-1 characters (the common ones: what a person types into a sheet or a template's
name), CJK punctuation and the full-width forms — nothing outside RANGES. It is two faces
of one family, each declared in app.css for its own unicode-range (this script writes
those rules there), since a browser fetches a face only for a page showing a character in
its range: genbot-cjk-names.woff2 holds just the characters of the languages' own names
(the language menu's "中文", on every page: a few kB), genbot-cjk.woff2 all the rest (what
only a page in Chinese shows).

Run it again when a catalog gains a character the font lacks (tests/test_cjk_font.py
fails until then, naming them); the suite never runs it. It needs the full font, from
Debian's fonts-noto-cjk or https://github.com/notofonts/noto-cjk (NotoSansCJKsc-Regular.otf
or NotoSansSC-Regular.otf), and fontTools with brotli (genbot's dev extras):

    apt-get install fonts-noto-cjk
    python -m bot.web.cjk_font /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc

The same font, catalogs and fontTools make the same file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from babel.messages.pofile import read_po

ROOT = Path(__file__).resolve().parents[2]
LOCALES = ROOT / "bot" / "locales"
STATIC = ROOT / "bot" / "web" / "static"
OUT = STATIC / "fonts" / "genbot-cjk.woff2"
NAMES_OUT = STATIC / "fonts" / "genbot-cjk-names.woff2"
CSS = STATIC / "app.css"
BEGIN, END = "/* @font-face rules: written by bot/web/cjk_font.py */", "/* (end of them) */"
# What the font is for (tests/test_cjk_font.py holds app.css's ranges to these): CJK
# symbols and punctuation, the unified ideographs, the half- and full-width forms.
RANGES = ((0x3000, 0x303F), (0x4E00, 0x9FFF), (0xFF00, 0xFFEF))
FACE = "Noto Sans CJK SC"  # the face of a collection (.ttc) to take


def covered(ch: str) -> bool:
    return any(lo <= ord(ch) <= hi for lo, hi in RANGES)


def catalog_characters(code: str | None = None) -> set[str]:
    """Every character in RANGES that any catalog under bot/locales (and the template)
    holds — in message `code` only, if given."""
    found: set[str] = set()
    for po in [LOCALES / "genbot.pot", *sorted(LOCALES.glob("*/LC_MESSAGES/*.po"))]:
        with po.open("rb") as f:
            for message in read_po(f):
                if code is None or message.context == code:
                    texts = [message.id, message.string]  # (or, NP_'s, their forms)
                    found |= {ch for text in texts for form in (
                        text if isinstance(text, tuple) else (text,))
                        if isinstance(form, str) for ch in form if covered(ch)}
    return found


def names() -> set[str]:
    """The characters of the languages' own names (the language menu's)."""
    return catalog_characters("language_name")


def gb2312_level1() -> set[str]:
    """GB2312's level-1 hanzi: rows 0xB0 to 0xD7 (3,755 characters)."""
    found = set()
    for row in range(0xB0, 0xD8):
        for cell in range(0xA1, 0xFF):
            try:
                found.add(bytes((row, cell)).decode("gb2312"))
            except UnicodeDecodeError:
                continue  # (the end of row 0xD7)
    return found


def punctuation() -> set[str]:
    return {chr(c) for lo, hi in (RANGES[0], RANGES[2]) for c in range(lo, hi + 1)}


def wanted() -> set[str]:
    return catalog_characters() | gb2312_level1() | punctuation()


def spans(points: set[int]) -> list[tuple[int, int]]:
    """Code points as the fewest ranges."""
    out: list[tuple[int, int]] = []
    for c in sorted(points):
        if out and out[-1][1] == c - 1:
            out[-1] = (out[-1][0], c)
        else:
            out.append((c, c))
    return out


def unicode_range(points: set[int]) -> str:
    return ", ".join(f"U+{lo:04X}" if lo == hi else f"U+{lo:04X}-{hi:04X}"
                     for lo, hi in spans(points))


def faces() -> list[tuple[Path, set[str], str]]:
    """Each face: its file, the characters it holds, the unicode-range app.css gives it."""
    named = names()
    everything = {c for lo, hi in RANGES for c in range(lo, hi + 1)}
    return [(NAMES_OUT, named, unicode_range({ord(ch) for ch in named})),
            (OUT, wanted() - named, unicode_range(everything - {ord(ch) for ch in named}))]


def css_rules() -> str:
    rules = [BEGIN]
    for path, _, ranges in faces():
        rules.append(f'@font-face {{ font-family: "genbot CJK"; font-style: normal; '
                     f"font-weight: 400;\n             font-display: swap; "
                     f'src: url("fonts/{path.name}") format("woff2");\n'
                     f"             unicode-range: {ranges}; }}")
    return "\n".join([*rules, END])


def write_css() -> None:
    css = CSS.read_text(encoding="utf-8")
    start, end = css.index(BEGIN), css.index(END) + len(END)
    CSS.write_text(css[:start] + css_rules() + css[end:], encoding="utf-8")


def make(source: Path, out: Path, characters: set[str]) -> Path:
    from fontTools import subset
    from fontTools.ttLib import TTCollection, TTFont

    if source.suffix.lower() in (".ttc", ".otc"):
        faces = TTCollection(str(source)).fonts
        font = next((f for f in faces if f["name"].getDebugName(4) == FACE), None)
        if font is None:
            sys.exit(f"{source}: no face named {FACE!r}")
    else:
        font = TTFont(str(source))
    options = subset.Options()
    options.flavor = "woff2"
    options.hinting = False  # (screens hint CJK themselves; a third of the size)
    options.desubroutinize = True  # (Brotli packs plain outlines tighter)
    options.layout_features = ["*"]
    options.name_IDs = ["*"]  # the copyright and licence notices stay in the file
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes={ord(ch) for ch in characters})
    subsetter.subset(font)
    font.flavor = "woff2"
    font.recalcTimestamp = False  # (the source's date, not today's: the same bytes again)
    out.parent.mkdir(parents=True, exist_ok=True)
    font.save(str(out), reorderTables=False)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="Noto Sans CJK (a .ttc or the SC .otf)")
    args = parser.parse_args()
    for path, characters, _ in faces():
        made = make(args.source, path, characters)
        print(f"{made.relative_to(ROOT)}: {made.stat().st_size:,} bytes, "
              f"{len(characters):,} characters")
    write_css()
    print(f"{CSS.relative_to(ROOT)}: its @font-face rules")


if __name__ == "__main__":
    main()
