"""Any text a cell can hold, laid out into lines that fit a box, and drawn there.

Both sides draw text — the executor's `text` and `watermark` ops, the bot's contact sheet
captions — and a cell may hold anything: line breaks, tabs, control characters, emoji,
combining marks, Hebrew and Arabic, Chinese without a space in it, ten thousand
characters. Pillow sets one line at a time (its raqm layout refuses a line break
outright), so the text is cleaned, split into lines, wrapped, and the font size chosen
here, once, for every caller.

What happens to each kind of character, and why:

- Line breaks — everything `str.splitlines` splits on: \\n, \\r\\n, \\r, vertical tab,
  form feed, U+001C–001E, U+0085, U+2028, U+2029 — start a new line. Blank lines at the
  start and end are dropped, and spaces at the ends of lines; blank lines between
  paragraphs stay.
- A tab is a space: tab stops mean nothing in a centred title.
- Other control characters (C0, DEL, C1) are dropped: they carry no text (a bell or an
  escape left by a copy-paste or a spreadsheet export) and a font draws them as boxes,
  which would look like a broken title; an escape like "\\x07" would look like code.
- Invisible format characters (Unicode's category Cf and Default_Ignorable_Code_Point:
  zero-width space, soft hyphen, byte order mark, word joiner, Hangul fillers, tag
  characters …) are dropped for the same reason — the basic layout engine and many fonts
  draw them as boxes. With raqm the ones shaping reads are kept, and raqm draws them as
  nothing: the zero-width joiner and non-joiner (emoji sequences, Arabic and Indic
  joining), the bidi marks, embeddings and isolates (the order of right-to-left runs),
  and variation selectors (emoji or text style).
- A lone surrogate (half a UTF-16 pair, which a broken export can leave) becomes U+FFFD,
  the replacement character: visible, and it says something was there.
- Text is NFC-normalised (e + U+0301 becomes é): the basic engine cannot place a
  combining mark, a precomposed letter looks right with both engines. More than four
  combining marks on one letter ("zalgo" text) are cut to four: each stacks higher, and a
  tower of them would shrink the whole block to nothing.
- A character the font has no glyph for is kept and drawn as the font's missing-glyph box,
  so a person sees that something is there. Callers pass the font that has the most of
  the text (templates.fonts.font_for: the bundled WenQuanYi has Chinese and Latin but no
  Hebrew, Arabic or emoji; DejaVu Sans, where the host has it, has those).

Lines are wrapped to the box's width: after spaces, and between characters of scripts
written without spaces (East Asian wide characters: Chinese, Japanese, Korean, most
emoji), never before closing punctuation (。，」) or after opening punctuation; a word
wider than the box breaks between grapheme clusters (never inside a letter with its
marks, an emoji sequence or a flag). The font size is the largest, from the size asked
down to `min_size`, at which the whole block fits the box; text that does not fit even
then is cut at the last line that fits, with an ellipsis "…".

Layout uses the font's ink (what is drawn) across, and its line boxes and ink down, so a
block's `width` and `height` hold every pixel drawn; `draw` clips to the block as well.
Right-to-left text is reordered and Arabic is joined by raqm (Pillow's default where it
is built with it); the basic engine draws both in the order typed, unjoined. (Pillow's
own ImageText.wrap breaks only at spaces, so not Chinese, and refuses a word wider than
the line: hence this module.)
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal

import regex  # type: ignore[import-untyped]  # \X (grapheme clusters), Unicode properties
from PIL import Image, ImageDraw, ImageFont

FontAt = Callable[[int], ImageFont.FreeTypeFont]
Align = Literal["left", "center", "right"]

ELLIPSIS = "…"
MAX_CHARS = 100_000  # read no further: more than any box shows (an .xlsx cell holds 32,767)
SMALLEST = 4  # px: no text is set smaller; it could not be read (and costs the most to set)
MAX_MARKS = 4  # combining marks kept on one letter
NO_BREAK = ("\u00a0", "\u2007", "\u202f")  # spaces that hold their neighbours together
MAX_CLUSTER = 16  # code points kept in one grapheme cluster (a family emoji is 7)

# Format characters shaping reads: kept for raqm, which draws them as nothing.
_SHAPING = regex.compile(r"[\u200c\u200d\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069"
                         r"\ufe00-\ufe0f\U000e0100-\U000e01ef]")
_INVISIBLE = regex.compile(r"[\p{Default_Ignorable_Code_Point}\p{Cf}]")
_CONTROL = regex.compile(r"\p{Cc}")
_CLUSTER = regex.compile(r"\X")


@dataclass(frozen=True)
class Line:
    """One line as drawn: `text` with its origin at (`x`, `baseline`) from the block's
    top left (Pillow's "ls" anchor)."""
    text: str
    x: int
    baseline: int


@dataclass(frozen=True)
class Block:
    """Lines that fit a box, and the font they fit in. Every pixel drawn lies within
    (0, 0, width, height); the ink itself spans rows ink_top to ink_bottom."""
    lines: tuple[Line, ...] = ()
    font: ImageFont.FreeTypeFont | None = None
    stroke: int = 0
    width: int = 0
    height: int = 0
    ink_top: int = 0
    ink_bottom: int = 0
    cut: bool = False  # some of the text is not shown (the last line ends in "…")

    @property
    def size(self) -> int:
        return int(self.font.size) if self.font is not None else 0

    @property
    def ink_height(self) -> int:
        return self.ink_bottom - self.ink_top


# --- cleaning ---------------------------------------------------------------------------

def paragraphs(text: str, *, shaping: bool = True) -> list[str]:
    """`text` as the lines a person wrote, cleaned (see the module's docstring).
    `shaping`: the layout engine shapes text (raqm), so keep what shaping reads."""
    text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    text = unicodedata.normalize("NFC", text)
    lines = [_clean_line(line, shaping) for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def _clean_line(line: str, shaping: bool) -> str:
    line = _CONTROL.sub(lambda m: " " if m.group() == "\t" else "", line)
    if shaping:
        line = _INVISIBLE.sub(lambda m: m.group() if _SHAPING.match(m.group()) else "", line)
    else:
        line = _INVISIBLE.sub("", line)
    return "".join(_tame(c) for c in _CLUSTER.findall(line)).strip()


def _tame(cluster: str) -> str:
    """A grapheme cluster with at most MAX_MARKS combining marks and MAX_CLUSTER code points."""
    if len(cluster) <= 2:
        return cluster
    kept, marks = [], 0
    for ch in cluster[:MAX_CLUSTER]:
        if unicodedata.category(ch) in ("Mn", "Me"):
            marks += 1
            if marks > MAX_MARKS:
                continue
        kept.append(ch)
    return "".join(kept)


# --- wrapping ---------------------------------------------------------------------------

class _Paragraph:
    """A paragraph's grapheme clusters and where a line may start."""

    def __init__(self, text: str):
        self.text = text
        self.clusters: list[str] = _CLUSTER.findall(text)
        self.offsets = [0]
        for c in self.clusters:
            self.offsets.append(self.offsets[-1] + len(c))
        n = len(self.clusters)
        self.breaks = [i for i in range(1, n) if _may_break(self.clusters[i - 1], self.clusters[i])]

    def __len__(self) -> int:
        return len(self.clusters)

    def slice(self, start: int, end: int) -> str:
        return self.text[self.offsets[start]:self.offsets[end]].rstrip()

    def skip_spaces(self, i: int) -> int:
        while i < len(self.clusters) and _space(self.clusters[i]):
            i += 1
        return i


def _space(cluster: str) -> bool:
    """A space a line may break after (not a no-break space)."""
    return cluster.isspace() and cluster not in NO_BREAK


def _wide(cluster: str) -> bool:
    return unicodedata.east_asian_width(cluster[0]) in ("W", "F")


def _may_break(before: str, after: str) -> bool:
    """Whether a line may start with `after` when `before` ends the previous one."""
    if _space(after):
        return False  # after the spaces, not before them
    if _space(before):
        return True
    if not (_wide(before) or _wide(after)):
        return False
    return (unicodedata.category(after[0]) not in ("Pe", "Pf", "Po")
            and unicodedata.category(before[0]) not in ("Ps", "Pi"))


def _last_fitting(count: int, at: Callable[[int], int], fits: Callable[[int], bool],
                  hint: int = 0) -> int:
    """The largest i < count with fits(at(i)), or -1, where fits holds up to some i and
    not after (a prefix's width only grows): galloping from `hint` (a guess, such as the
    length of the line before), then halving — a few measurements a line."""
    if count <= 0:
        return -1
    hint = min(max(hint, 0), count - 1)
    step = 1
    if fits(at(hint)):
        lo, hi = hint, count
        while lo + step < hi:
            if not fits(at(lo + step)):
                hi = lo + step
                break
            lo += step
            step *= 2
    else:
        lo, hi = -1, hint
        while hi - step > lo:
            if fits(at(hi - step)):
                lo = hi - step
                break
            hi -= step
            step *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(at(mid)):
            lo = mid
        else:
            hi = mid
    return lo


class _Measure:
    """Strings measured in one font with a stroke: their advance (cheap, what wrapping
    searches with) and their ink box relative to the "ls" origin (what is drawn)."""

    def __init__(self, font: ImageFont.FreeTypeFont, stroke: int):
        self.font, self.stroke = font, stroke
        self._boxes: dict[str, tuple[int, int, int, int]] = {}

    def advance(self, text: str) -> float:
        return self.font.getlength(text) + 2 * self.stroke if text else 0.0

    def box(self, text: str) -> tuple[int, int, int, int]:
        if not text:
            return 0, 0, 0, 0
        if text not in self._boxes:
            x0, y0, x1, y1 = self.font.getbbox(text, anchor="ls", stroke_width=self.stroke)
            self._boxes[text] = int(x0), int(y0), int(max(x0, x1)), int(max(y0, y1))
        return self._boxes[text]

    def width(self, text: str) -> int:
        x0, _, x1, _ = self.box(text)
        return x1 - x0

    def fits(self, text: str, width: int) -> bool:
        return self.advance(text) <= width and self.width(text) <= width


def _line_end(p: _Paragraph, pos: int, measure: _Measure, width: int,
              hint: int) -> int | None:
    """Where the line that starts at cluster `pos` ends: at the last break within the
    clusters that fit `width`, or (a word wider than the line) after the last cluster that
    fits; None when not even one does. Searched by advance from `hint` clusters, then
    checked by ink (a glyph may reach past its advance). A line holds at most 4 clusters
    a pixel (zero-width glyphs at a tiny size): no search measures the whole paragraph."""
    most = min(len(p) - pos, max(64, 4 * width))
    k = _last_fitting(most, lambda i: i + 1,
                      lambda n: measure.advance(p.slice(pos, pos + n)) <= width, hint - 1)
    k = _last_fitting(k + 1, lambda i: i + 1,
                      lambda n: measure.width(p.slice(pos, pos + n)) <= width, k)
    if k < 0:
        return None
    end = pos + k + 1
    if end == len(p):
        return end
    b = bisect_right(p.breaks, end) - 1  # the last break at or before it
    return p.breaks[b] if b >= 0 and p.breaks[b] > pos else end


def _wrap(paras: Sequence[_Paragraph], measure: _Measure, width: int,
          limit: int) -> tuple[list[str], bool] | None:
    """Up to `limit` lines no wider than `width`, and whether text is left over; None when
    one grapheme cluster alone is wider."""
    lines: list[str] = []
    hint = 8
    for p in paras:
        if len(lines) >= limit:
            return lines, True
        if not len(p):
            lines.append("")
            continue
        pos = 0
        while pos < len(p):
            if len(lines) >= limit:
                return lines, True
            end = _line_end(p, pos, measure, width, hint)
            if end is None:
                return None
            lines.append(p.slice(pos, end))
            hint, pos = end - pos, p.skip_spaces(end)
    return lines, False


def _ellipsized(line: str, measure: _Measure, width: int) -> str:
    """`line` cut so that it and "…" fit `width` ("" when not even "…" does)."""
    clusters = _CLUSTER.findall(line)

    def fits(k: int) -> bool:
        return measure.fits("".join(clusters[:k]).rstrip() + ELLIPSIS, width)

    k = _last_fitting(len(clusters) + 1, lambda j: j, fits, len(clusters))
    return "".join(clusters[:k]).rstrip() + ELLIPSIS if k >= 0 else ""


# --- the block --------------------------------------------------------------------------

def _block(lines: list[str], font: ImageFont.FreeTypeFont, measure: _Measure, align: Align,
           cut: bool) -> Block:
    ascent, descent = font.getmetrics()
    pitch = max(1, ascent + descent)
    boxes = [measure.box(t) for t in lines]
    inked = [(i, b) for i, b in enumerate(boxes) if b[2] > b[0] and b[3] > b[1]]
    width = max((b[2] - b[0] for _, b in inked), default=0)
    top = min([0] + [ascent + i * pitch + b[1] for i, b in inked])  # line boxes and ink
    bottom = max([len(lines) * pitch] + [ascent + i * pitch + b[3] for i, b in inked])
    placed = []
    for i, (t, (x0, _, x1, _)) in enumerate(zip(lines, boxes)):
        free = width - (x1 - x0)
        shift = {"left": 0, "center": free // 2, "right": free}[align]
        placed.append(Line(t, shift - x0, ascent + i * pitch - top))
    ink_top = min((ascent + i * pitch + b[1] for i, b in inked), default=0) - top
    ink_bottom = max((ascent + i * pitch + b[3] for i, b in inked), default=0) - top
    return Block(tuple(placed), font, measure.stroke, width, bottom - top, ink_top, ink_bottom,
                 cut)


def lay_out(text: str, font_at: FontAt, box: tuple[int, int], size: int, *,
            min_size: int = 6, align: Align = "left", one_line: bool = False,
            stroke: Callable[[int], int] = lambda size: 0) -> Block:
    """`text` in lines that fit `box` (width, height), in the largest font size from `size`
    down to `min_size` that holds all of it; past that, at `min_size` (or smaller, down to
    SMALLEST, when not even one line fits) and cut with "…". An empty Block when nothing
    visible is left, or not even "…" fits.

    `font_at(size)`: the font at a size (templates.fonts.load_font). `align`: the lines
    within the block. `one_line`: line breaks become spaces (a caption). `stroke(size)`:
    the outline width the text will be drawn with, counted in its ink.
    """
    box_w, box_h = max(0, int(box[0])), max(0, int(box[1]))
    size = max(SMALLEST, min(int(size), 2 * box_h + 1, 2000))
    min_size = max(SMALLEST, min(int(min_size), size))
    shaping = font_at(size).layout_engine != ImageFont.Layout.BASIC
    over = len(text) > MAX_CHARS
    found = paragraphs(text[:MAX_CHARS], shaping=shaping)
    if one_line:
        found = [" ".join(p for p in found if p)]
    paras = [_Paragraph(p) for p in found]
    if not any(len(p) for p in paras) or box_w == 0 or box_h == 0:
        return Block(cut=over or bool(paras))

    @cache  # the search and the cut may both want one size
    def attempt(s: int) -> tuple[Block | None, list[str], bool, _Measure]:
        """The whole text at size s (None if it does not fit), the lines that were
        wrapped, whether text was left over."""
        font = font_at(s)
        measure = _Measure(font, stroke(s))
        ascent, descent = font.getmetrics()
        room = 1 if one_line else max(1, (box_h - ascent - descent) // max(1, ascent + descent) + 1)
        wrapped = _wrap(paras, measure, box_w, room)
        if wrapped is None:
            return None, [], True, measure
        lines, more = wrapped
        if more or over:
            return None, lines, True, measure
        block = _block(lines, font, measure, align, cut=False)
        return (block if block.height <= box_h else None), lines, False, measure

    best = attempt(size)[0]
    if best is not None:
        return best
    lo, hi = min_size - 1, size  # attempt(hi) fails; find the largest that fits
    while hi - lo > 1:
        mid = (lo + hi) // 2
        found_block = attempt(mid)[0]
        if found_block is not None:
            best, lo = found_block, mid
        else:
            hi = mid
    if best is not None:
        return best
    s = min_size
    while True:  # cut: as many lines as fit, the last one ending in "…"
        block = _cut(attempt(s), box_w, box_h, align)
        if block is not None or s == SMALLEST:
            return block if block is not None else Block(cut=True)
        s = max(SMALLEST, s * 4 // 5)


def _cut(tried: tuple[Block | None, list[str], bool, _Measure], box_w: int, box_h: int,
         align: Align) -> Block | None:
    """As many of the lines tried as fit `box_h`, the last ending in "…" when any text is
    left out."""
    _, lines, more, measure = tried
    for n in range(len(lines), 0, -1):
        shown = lines[:n]
        cut = more or n < len(lines)
        if cut:
            shown[-1] = _ellipsized(shown[-1], measure, box_w)
        block = _block(shown, measure.font, measure, align, cut=cut)
        if block.height <= box_h:
            return block
    return None


# --- drawing ----------------------------------------------------------------------------

def render(block: Block, fill: str | tuple[int, ...],
           stroke_fill: str | tuple[int, ...] | None = None) -> Image.Image:
    """The block drawn on a transparent RGBA layer of its own size."""
    layer = Image.new("RGBA", (max(1, block.width), max(1, block.height)), (0, 0, 0, 0))
    if block.font is None:
        return layer
    draw = ImageDraw.Draw(layer)
    for line in block.lines:
        if line.text:
            draw.text((line.x, line.baseline), line.text, font=block.font, fill=fill,
                      anchor="ls", stroke_width=block.stroke, stroke_fill=stroke_fill)
    return layer


def draw(image: Image.Image, block: Block, xy: tuple[float, float],
         fill: str | tuple[int, ...], stroke_fill: str | tuple[int, ...] | None = None) -> None:
    """Draw `block` onto `image` with its top left at `xy`; a translucent `fill` (RGBA)
    blends. Nothing outside the block's box changes."""
    if not block.lines or block.width <= 0 or block.height <= 0:
        return
    layer = render(block, fill, stroke_fill)
    source = layer if image.mode in ("RGB", "RGBA") else layer.convert(image.mode)
    image.paste(source, (round(xy[0]), round(xy[1])), layer)
