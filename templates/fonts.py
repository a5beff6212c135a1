"""The font text is drawn in: the team's own, or the bundled CJK-and-Latin one — and, for
a text it has no glyphs for, another font at hand that has them.

Both sides draw text — the executor's text and watermark ops, the bot's contact sheets
— and both must show Chinese, so the font ships with the templates as package data.
WenQuanYi has no Hebrew, Arabic or emoji: a text in those would be a row of boxes. So each
block of text is set in the font that has the most of its characters (`font_for`): the
chosen one first, then any other font bundled beside it, then common system fonts where
the host has them (DejaVu Sans has Hebrew, Arabic and monochrome emoji). One font a
block, not one a character: raqm then orders and joins right-to-left text as a whole.
"""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Callable
from functools import cache, lru_cache
from importlib.resources import files
from pathlib import Path

from PIL import ImageFont

BUNDLED_FONT = Path(str(files("templates") / "shipped" / "fonts" / "wqy-microhei.ttc"))
FONT_SUFFIXES = (".ttf", ".otf", ".ttc")
# Fonts many Linux hosts have (Debian: fonts-dejavu-core, fonts-freefont-ttf): used only
# for a text the chosen font lacks, and only where present.
SYSTEM_FONTS = ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                "/usr/share/fonts/truetype/freefont/FreeSans.ttf")

LAYOUT: ImageFont.Layout | None = None
"""The layout engine text is set with. None: Pillow's choice — raqm (which joins Arabic and
orders right-to-left text) where Pillow was built with it, else basic. templates.text
works with either; tests pin each in turn."""


class FontError(Exception):
    """The configured font file is not there, or is no font."""


@cache
def font_file(path: str) -> str:
    chosen = Path(path) if path else BUNDLED_FONT
    if not chosen.is_file():
        raise FontError(f"font not found: {chosen} (set [executor] font to a .ttf/.otf file)")
    return str(chosen)


def load_font(path: str, size: int,
              layout: ImageFont.Layout | None = None) -> ImageFont.FreeTypeFont:
    """`path`, or the bundled CJK-and-Latin font when it is empty, at `size` pixels, set
    with `layout` (else LAYOUT). A new font each call: FreeType faces are not shared
    between the threads that draw."""
    return _opened(font_file(path), size, layout if layout is not None else LAYOUT)


def _opened(path: str, size: int, layout: ImageFont.Layout | None) -> ImageFont.FreeTypeFont:
    try:
        return ImageFont.truetype(path, size, layout_engine=layout)
    except OSError:  # FreeType's "unknown file format", "broken file" and the like
        raise FontError(f"cannot read the font {path}: not a .ttf/.otf/.ttc font file "
                        "(set [executor] font to one)") from None


def font_sizes(path: str, text: str) -> Callable[[int], ImageFont.FreeTypeFont]:
    """The font to set `text` in (`font_for`), at any size: what templates.text.lay_out
    takes."""
    chosen = font_for(path, text)
    return lambda size: load_font(chosen, size)


def font_for(path: str, text: str) -> str:
    """The font file for `text`: `path` (or the bundled font), unless it lacks some of the
    text's characters and another font at hand (`fallback_fonts`) has more of them."""
    primary = font_file(path)
    wanted = _drawn(text)
    have = sum(has_glyph(primary, c) for c in wanted)
    best = primary
    if have < len(wanted):
        for other in fallback_fonts():
            if other == primary:
                continue
            try:
                count = sum(has_glyph(other, c) for c in wanted)
            except FontError:  # a broken system font is no fallback
                continue
            if count > have:
                best, have = other, count
    return best


@cache
def fallback_fonts() -> tuple[str, ...]:
    """The bundled font, any other font bundled beside it (by name), then SYSTEM_FONTS
    this host has."""
    beside = sorted(str(p) for p in BUNDLED_FONT.parent.iterdir()
                    if p.suffix.lower() in FONT_SUFFIXES and p != BUNDLED_FONT)
    return (str(BUNDLED_FONT), *beside, *(p for p in SYSTEM_FONTS if Path(p).is_file()))


_NOT_DRAWN = {"Cc", "Cf", "Cs", "Co", "Cn", "Mn", "Me", "Zs", "Zl", "Zp"}


def _drawn(text: str, most: int = 256) -> list[str]:
    """The distinct characters of `text` that a font must have a glyph for (not spaces,
    controls, marks that sit on a letter, private or unassigned code points); the first
    `most` of them, from the part of the text any box could show."""
    seen: dict[str, None] = {}
    for c in text[:4096]:
        if c not in seen and unicodedata.category(c) not in _NOT_DRAWN:
            seen[c] = None
            if len(seen) == most:
                break
    return list(seen)


_probes = threading.local()  # a font each thread probes with: FreeType faces are not shared


@lru_cache(maxsize=1 << 16)
def has_glyph(path: str, char: str) -> bool:
    """Whether the font at `path` draws `char` as something other than its missing-glyph
    box (Pillow has no cmap lookup; the box is what a code point no font maps draws)."""
    probes = _probes.__dict__.setdefault("fonts", {})
    if path not in probes:
        font = _opened(path, 24, ImageFont.Layout.BASIC)
        box = font.getmask("\U0010ffff")
        probes[path] = font, (box.size, bytes(box))
    font, missing = probes[path]
    mask = font.getmask(char)
    return (mask.size, bytes(mask)) != missing
