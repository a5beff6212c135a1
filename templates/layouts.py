"""Layouts: the words, price, badge and logo a channel's file carries, placed per aspect and
per locale, as data.

A layout is a JSON file (shipped ones in templates/shipped/layouts/, the team's in the
assets folder's `layouts/`), read and checked here like a template: msgspec refuses an
unknown key, every box, colour, size and font is checked at load, and a logo the layout
names must be a picture (`LayoutError` names the file, the key and what was expected).

    {"title": "Launch", "title_zh": "上新",
     "locales": {"zh": {"currency": "CNY"}, "ar": {"currency": "AED", "direction": "rtl"}},
     "aspects": {"1:1": [{"kind": "text", "text": "{headline}", "box": [0.05, 0.05, 0.9, 0.2]},
                         {"kind": "price", "text": "{price}", "box": [0.6, 0.8, 0.35, 0.12]},
                         {"kind": "logo", "asset": "logo.png", "box": [0.05, 0.8, 0.2, 0.12]}],
                 "9:16": […]}}

Each element's words are a pattern of the sheet's columns (`{headline}`), per locale where
they differ (`{"zh": "到手价 {price}", "en": "Now {price}"}`); a price's fields are set as
money by Babel in the row's locale (¥129.00 in zh_CN; dollars, dirhams …). A row's locale is
its `locale` (语言) cell, else the layout's first. Boxes are shares (x, y, width, height)
of the rendition's safe area — the frame less the margins the channel keeps clear —
except the picture's, which is of the whole frame; a right-to-left locale mirrors them.
The aspect used is the layout's nearest to the rendition's.

Words are set as large as `size` (a share of the short side) and shrunk to fit their box
down to `min_size`; a row whose words do not fit even then is refused at submission,
naming its column (`Overflow`) — never cut in a file that goes live. A rendition that
allows no words (Amazon's main image) gets no layout.

Binding (at submission) turns a row into an `Overlay` per rendition: the words filled in,
fonts and logos as the file store keeps them (an executor on another host reads them
there). Drawing is templates.renditions'.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import msgspec
from babel import Locale as BabelLocale
from babel import UnknownLocaleError
from babel.numbers import format_currency, get_currency_name
from PIL import Image, ImageColor

from templates.fonts import FONT_SUFFIXES, FontError, font_sizes
from templates.params import normalize_header
from templates.patterns import Unknown, pattern_fields
from templates.text import Block, lay_out

KINDS = ("text", "price", "badge", "logo", "picture")
WORDS = ("text", "price", "badge")  # kinds that set words
LOCALE_COLUMNS = ("locale", "语言")
MAX_ELEMENTS = 16
MAX_LOGO_MB = 20
SHIPPED = Path(str(files("templates") / "shipped" / "layouts"))
FOLDER = "layouts"  # under the assets folder: the team's layouts

Share = tuple[float, float, float, float]  # x, y, width, height: shares of an area


class LayoutError(Exception):
    """A layout that cannot be used, said with its file, key and what was expected."""

    def __init__(self, file: str, where: str, message: str):
        super().__init__(f"{file}: {where}: {message}")
        self.file, self.where, self.message = file, where, message


class Element(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    kind: Literal["text", "price", "badge", "logo", "picture"]
    box: Share
    text: str | dict[str, str] = ""  # words: a pattern of columns, or one per locale
    asset: str = ""  # a logo: a picture under the assets folder (a pattern of columns too)
    size: float = 0.06  # the largest font size, a share of the short side
    min_size: float = 0.025  # the smallest it is shrunk to before the row is refused
    colour: str = "#ffffff"
    plate: str = ""  # a colour behind the words ("#00000099"); a badge's fill
    shape: Literal["rect", "round", "circle"] = "round"
    align: Literal["start", "center", "end"] = "center"  # start: left, or right in rtl
    optional: bool = False  # an empty cell leaves it out (else the row is refused)


class Locale(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    font: str = ""  # a font file under the assets folder; empty: the bundled ones
    direction: Literal["ltr", "rtl"] = "ltr"
    currency: str = "CNY"  # ISO 4217: what a price is set in
    numbers: str = ""  # the Babel locale prices are written for (zh_CN); empty: the key


class Layout(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    title: str
    title_zh: str
    aspects: dict[str, list[Element]]
    locales: dict[str, Locale] = msgspec.field(default_factory=lambda: {"zh": Locale()})
    background: str = "#ffffff"  # around a picture box that does not fill the frame
    name: str = ""  # its file's name (set when loaded)
    source: str = ""  # the file it came from


# --- reading ----------------------------------------------------------------------------

def load_file(path: Path, assets: Path | None = None) -> Layout:
    """One layout file, checked; its fonts and fixed logos read from `assets`."""
    file = str(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise LayoutError(file, "-", f"cannot be read: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise LayoutError(file, "-", f"is not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise LayoutError(file, "-", "expected an object with title, title_zh and aspects")
    try:
        layout = msgspec.convert({**raw, "name": path.stem, "source": file}, Layout)
    except msgspec.ValidationError as e:
        message, _, where = str(e).partition(" - at `$")
        raise LayoutError(file, where.rstrip("`").lstrip(".") or "-", message) from None
    _check(file, layout, assets)
    return layout


def aspect_ratio(key: str) -> float:
    """"9:16" -> 0.5625; ValueError for anything else."""
    m = re.fullmatch(r"\s*(\d{1,4})\s*:\s*(\d{1,4})\s*", key)
    if not m or not int(m[1]) or not int(m[2]):
        raise ValueError(key)
    return int(m[1]) / int(m[2])


def colour(value: str) -> tuple[int, int, int, int]:
    """A CSS colour ("#fff", "#00000099", "red") as RGBA; ValueError."""
    c = ImageColor.getcolor(value, "RGBA")
    return c if isinstance(c, tuple) else (c, c, c, 255)  # type: ignore[return-value]


def _check(file: str, layout: Layout, assets: Path | None) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", layout.name):
        raise LayoutError(file, "-", "a layout's file name is lowercase letters, digits and _ "
                          "(at most 40), starting with a letter: it is typed in --layout")
    if not layout.aspects:
        raise LayoutError(file, "aspects", 'is empty: give at least one, such as "1:1"')
    if not layout.locales:
        raise LayoutError(file, "locales", 'is empty: give at least one, such as "zh"')
    _colour(file, "background", layout.background)
    for key, loc in layout.locales.items():
        at = f"locales.{key}"
        try:
            BabelLocale.parse(loc.numbers or key, sep="-" if "-" in (loc.numbers or key)
                              else "_")
        except (ValueError, UnknownLocaleError):
            raise LayoutError(file, at, f'"{loc.numbers or key}" is no locale Babel knows '
                              '(zh, zh_CN, en_US, ar …): set "numbers" to one') from None
        if get_currency_name(loc.currency, locale="en") == loc.currency:
            raise LayoutError(file, f"{at}.currency", f'"{loc.currency}": expected an ISO '
                              "4217 code such as CNY, USD, EUR")
        if loc.font:
            _font(file, f"{at}.font", loc.font, assets)
    for key, elements in layout.aspects.items():
        try:
            aspect_ratio(key)
        except ValueError:
            raise LayoutError(file, f"aspects.{key}", 'expected an aspect "W:H", such as '
                              '"1:1" or "9:16"') from None
        if len(elements) > MAX_ELEMENTS:
            raise LayoutError(file, f"aspects.{key}", f"has {len(elements)} elements; at "
                              f"most {MAX_ELEMENTS}")
        if sum(e.kind == "picture" for e in elements) > 1:
            raise LayoutError(file, f"aspects.{key}", "places the picture twice")
        for i, e in enumerate(elements):
            _check_element(file, f'aspects["{key}"][{i}]', e, layout, assets)


def _check_element(file: str, at: str, e: Element, layout: Layout, assets: Path | None) -> None:
    x, y, w, h = e.box
    if not (0 <= x < 1 and 0 <= y < 1 and 0 < w <= 1 and 0 < h <= 1
            and x + w <= 1.0001 and y + h <= 1.0001):
        raise LayoutError(file, f"{at}.box", f"{list(e.box)}: expected [x, y, width, height], "
                          "shares from 0 to 1 that stay inside the frame")
    if e.kind in WORDS:
        texts = e.text.values() if isinstance(e.text, dict) else [e.text]
        if not any(t.strip() for t in texts):
            raise LayoutError(file, f"{at}.text", f"a {e.kind} needs words: a column in "
                              'braces ("{headline}") or fixed words')
        if isinstance(e.text, dict) and (extra := set(e.text) - set(layout.locales)):
            raise LayoutError(file, f"{at}.text", f"names locales the layout lacks: "
                              f"{', '.join(sorted(extra))}")
        for t in texts:
            try:
                pattern_fields(t)
            except ValueError as err:
                raise LayoutError(file, f"{at}.text", f'"{t}": {err}') from None
        if not 0.005 <= e.min_size <= e.size <= 0.5:
            raise LayoutError(file, f"{at}.size", f"size {e.size}, min_size {e.min_size}: "
                              "expected shares of the short side, 0.005 ≤ min_size ≤ size ≤ 0.5")
        _colour(file, f"{at}.colour", e.colour)
        if e.plate:
            _colour(file, f"{at}.plate", e.plate)
    if e.kind == "logo":
        if not e.asset:
            raise LayoutError(file, f"{at}.asset", "a logo needs a picture under the assets "
                              'folder ("logo.png", or a column: "logos/{brand}.png")')
        try:
            fields = pattern_fields(e.asset)
        except ValueError as err:
            raise LayoutError(file, f"{at}.asset", f'"{e.asset}": {err}') from None
        if not fields:
            try:
                logo_file(e.asset, assets)
            except LayoutProblem as p:
                raise LayoutError(file, f"{at}.asset", p.message) from None


def _colour(file: str, at: str, value: str) -> None:
    try:
        colour(value)
    except ValueError:
        raise LayoutError(file, at, f'"{value}": expected a colour such as "#ffffff", '
                          '"#00000099" or "white"') from None


def _font(file: str, at: str, name: str, assets: Path | None) -> Path:
    path = _under(assets, name)
    if path is None or path.suffix.lower() not in FONT_SUFFIXES or not path.is_file():
        raise LayoutError(file, at, f'"{name}": expected a .ttf, .otf or .ttc file in the '
                          f"assets folder ({assets})")
    try:
        font_sizes(str(path), "A")(12)
    except FontError as err:
        raise LayoutError(file, at, str(err)) from None
    return path


def _under(assets: Path | None, name: str) -> Path | None:
    """`name` inside the assets folder; None outside it (or with no folder)."""
    if assets is None:
        return None
    path = (assets / name).resolve()
    return path if path.is_relative_to(assets.resolve()) else None


class LayoutProblem(Exception):
    """What is wrong with a row's part of a layout: `code` names the message."""

    def __init__(self, code: str, message: str = "", column: str | None = None, **details: Any):
        super().__init__(code)
        self.code, self.message, self.column, self.details = code, message, column, details


def logo_file(name: str, assets: Path | None) -> Path:
    """A logo under the assets folder that is a picture Pillow reads (LayoutProblem)."""
    path = _under(assets, name)
    if path is None or not path.is_file():
        raise LayoutProblem("layout_logo_missing", f'"{name}": no such file in the assets '
                            f"folder ({assets})", name=name)
    if path.stat().st_size > MAX_LOGO_MB << 20:
        raise LayoutProblem("layout_logo_not_image", f'"{name}" is larger than '
                            f"{MAX_LOGO_MB} MB", name=name)
    try:
        with Image.open(path) as im:
            im.verify()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise LayoutProblem("layout_logo_not_image", f'"{name}" is not a picture '
                            f"({type(e).__name__}: {e})", name=name) from None
    return path


def catalogue(assets: Path | None) -> dict[str, Path]:
    """Each layout's file: the shipped ones, and the team's (the assets folder's
    layouts/*.json) over them. Read when chosen: one broken file refuses only itself."""
    found = {p.stem: p for p in sorted(SHIPPED.glob("*.json"))}
    folder = assets / FOLDER if assets else None
    if folder and folder.is_dir():
        found.update((p.stem, p) for p in sorted(folder.glob("*.json")))
    return found


def _stamp(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return -1


@lru_cache(maxsize=64)
def _read(path: Path, stamp: int, assets: Path | None) -> Layout:
    return load_file(path, assets)


def chosen(name: str, assets: Path | None) -> Layout:
    """The layout named, read (again when its file changed) and checked (Unknown,
    LayoutError). A shipped layout's logos and fonts are the team's too."""
    known = catalogue(assets)
    key = name.strip().lower()
    if key not in known:
        raise Unknown(key, known)
    path = known[key]
    return _read(path, _stamp(path), assets)


# --- a row bound --------------------------------------------------------------------------

class Drawn(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One element as a job carries it: its words filled in, its logo and font as the file
    store keeps them ("" for the bundled fonts)."""
    kind: str
    box: Share
    words: str = ""
    logo: str = ""
    font: str = ""
    size: float = 0.06
    min_size: float = 0.025
    colour: str = "#ffffff"
    plate: str = ""
    shape: str = "round"
    align: str = "center"
    column: str = ""  # where its words came from (said when they do not fit)


class Overlay(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A layout bound to one row, for one rendition's aspect."""
    layout: str
    aspect: str
    locale: str
    rtl: bool
    background: str
    elements: list[Drawn]

    @property
    def picture(self) -> Share | None:
        return next((e.box for e in self.elements if e.kind == "picture"), None)


def nearest_aspect(layout: Layout, size: tuple[int, int]) -> str:
    want = math.log(size[0] / size[1])
    return min(layout.aspects, key=lambda k: abs(math.log(aspect_ratio(k)) - want))


def layout_columns(layout: Layout, *, needed: bool = False) -> list[str]:
    """Every column the layout's words and logos read, each once, in order; `needed`:
    only those of elements it does not leave out when their cell is empty."""
    out: dict[str, None] = {}
    for elements in layout.aspects.values():
        for e in elements:
            if needed and e.optional:
                continue
            texts = e.text.values() if isinstance(e.text, dict) else [e.text]
            for t in [*texts, e.asset]:
                out.update(dict.fromkeys(pattern_fields(t)))
    return list(out)


def price(value: Any, currency: str, numbers: str) -> str:
    """A cell as money in a locale: 129.9 -> "¥129.90" (ValueError: not a number)."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, (int, float)):
        amount = Decimal(str(value))
    else:
        cleaned = re.sub(r"[\s,，¥￥$€£]", "", str(value))
        try:
            amount = Decimal(cleaned)
        except InvalidOperation:
            raise ValueError(value) from None
    if not amount.is_finite() or amount < 0:
        raise ValueError(value)
    return format_currency(amount, currency, locale=numbers.replace("-", "_"))


def _cell(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return "" if value is None else str(value).strip()


@dataclass
class Binder:
    """A layout ready to bind rows: where its assets are, and how a font or logo is kept
    where every executor reads it (`keep`: a local file -> its name in the file store)."""
    layout: Layout
    assets: Path | None
    keep: Callable[[Path], str]
    _kept: dict[Path, str] = field(default_factory=dict)

    def kept(self, path: Path) -> str:
        if path not in self._kept:
            self._kept[path] = self.keep(path)
        return self._kept[path]

    def columns(self) -> list[str]:
        return layout_columns(self.layout)

    def missing(self, headers: Iterable[str]) -> list[str]:
        """The columns the layout needs (for words it does not leave out when empty) that
        are not among `headers`: said before any row is read."""
        have = {normalize_header(h) for h in headers}
        return [f for f in layout_columns(self.layout, needed=True)
                if normalize_header(f) not in have]

    def locale(self, values: Mapping[str, Any]) -> str:
        """The row's locale: its locale cell (en_US finds en), else the layout's first
        (LayoutProblem)."""
        cell = next((_cell(v) for k, v in values.items()
                     if normalize_header(k) in LOCALE_COLUMNS and _cell(v)), "")
        if not cell:
            return next(iter(self.layout.locales))
        said = cell.lower().replace("-", "_")
        for key in self.layout.locales:  # the same locale, else the same language
            if key.lower().replace("-", "_") == said:
                return key
        for key in self.layout.locales:
            if key.lower().replace("-", "_") == said.split("_")[0]:
                return key
        column = next(str(k) for k, v in values.items()
                      if normalize_header(k) in LOCALE_COLUMNS and _cell(v))
        raise LayoutProblem("layout_locale_unknown", column=column, locale=cell,
                            layout=self.layout.name, known=", ".join(self.layout.locales))

    def bind(self, values: Mapping[str, Any], size: tuple[int, int], safe: Share,
             what: str) -> Overlay:
        """The row's overlay for a rendition of `size` (with its safe margins: top, right,
        bottom, left): words filled, checked to fit (LayoutProblem names the column)."""
        words = {normalize_header(k): v for k, v in values.items()}
        key = self.locale(values)
        loc = self.layout.locales[key]
        font_path = _under(self.assets, loc.font) if loc.font else None
        aspect = nearest_aspect(self.layout, size)
        out = []
        for e in self.layout.aspects[aspect]:
            box = mirrored(e.box) if loc.direction == "rtl" else e.box
            if e.kind == "picture":
                out.append(Drawn("picture", box))
                continue
            if e.kind == "logo":
                logo = self._logo(e, words)
                if logo is not None:
                    out.append(Drawn("logo", box, logo=logo))
                continue
            pattern = e.text.get(key, "") if isinstance(e.text, dict) else e.text
            filled, column = self._words(e, pattern, words, loc, key)
            if not filled:
                continue
            drawn = Drawn(e.kind, box, words=filled, size=e.size, min_size=e.min_size,
                          colour=e.colour, plate=e.plate, shape=e.shape,
                          align=_align(e.align, loc.direction), column=column)
            fits(drawn, size, safe, str(font_path) if font_path else "", what)
            out.append(msgspec.structs.replace(
                drawn, font=self.kept(font_path) if font_path else ""))
        return Overlay(self.layout.name, aspect, key, loc.direction == "rtl",
                       self.layout.background, out)

    def _words(self, e: Element, pattern: str, words: Mapping[str, Any], loc: Locale,
               key: str) -> tuple[str, str]:
        fields = pattern_fields(pattern)
        filled: dict[str, str] = {}
        for f in fields:
            value = words.get(normalize_header(f))
            if _cell(value) == "":
                if e.optional:
                    return "", f
                raise LayoutProblem("layout_empty_field", column=f, layout=self.layout.name)
            if e.kind == "price":
                try:
                    filled[f] = price(value, loc.currency, loc.numbers or key)
                except ValueError:
                    raise LayoutProblem("layout_price", column=f, value=_cell(value)[:40]) \
                        from None
            else:
                filled[f] = _cell(value)
        return pattern.format(**filled).strip(), (fields[0] if fields else "")

    def _logo(self, e: Element, words: Mapping[str, Any]) -> str | None:
        fields = pattern_fields(e.asset)
        filled = {}
        for f in fields:
            if _cell(words.get(normalize_header(f))) == "":
                if e.optional:
                    return None
                raise LayoutProblem("layout_empty_field", column=f, layout=self.layout.name)
            filled[f] = _cell(words[normalize_header(f)])
        name = e.asset.format(**filled)
        try:
            return self.kept(logo_file(name, self.assets))
        except LayoutProblem as p:
            p.column = fields[0] if fields else None
            raise


def mirrored(box: Share) -> Share:
    x, y, w, h = box
    return (max(0.0, 1 - x - w), y, w, h)


def _align(align: str, direction: str) -> str:
    if align == "center":
        return "center"
    rtl = direction == "rtl"
    return ("right" if rtl else "left") if align == "start" else ("left" if rtl else "right")


# --- placing ------------------------------------------------------------------------------

def area(size: tuple[int, int], safe: Share) -> tuple[int, int, int, int]:
    """The safe area of a frame: left, top, right, bottom in pixels."""
    W, H = size
    top, right, bottom, left = safe
    return round(left * W), round(top * H), W - round(right * W), H - round(bottom * H)


def placed(box: Share, within: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """A box of shares in pixels within an area: left, top, right, bottom."""
    left, top, right, bottom = within
    w, h = right - left, bottom - top
    return (left + round(box[0] * w), top + round(box[1] * h),
            left + round((box[0] + box[2]) * w), top + round((box[1] + box[3]) * h))


def inner(d: Drawn, box: tuple[int, int, int, int]) -> tuple[int, int]:
    """The room words have inside their box: less the padding of a plate or a badge."""
    w, h = box[2] - box[0], box[3] - box[1]
    if d.kind == "badge" and d.shape == "circle":
        side = min(w, h)
        return round(side * 0.68), round(side * 0.5)  # a square inside a circle, and air
    pad = round(min(w, h) * 0.12) if (d.plate or d.kind == "badge") else 0
    return max(0, w - 2 * pad), max(0, h - 2 * pad)


def set_words(d: Drawn, size: tuple[int, int], safe: Share, font: str) -> Block:
    """The element's words set to fit its box, from its size down to its min_size."""
    box = placed(d.box, area(size, safe))
    short = min(size)
    return lay_out(d.words, font_sizes(font, d.words), inner(d, box),
                   max(4, round(d.size * short)), min_size=max(4, round(d.min_size * short)),
                   align=d.align)  # type: ignore[arg-type]


def fits(d: Drawn, size: tuple[int, int], safe: Share, font: str, what: str) -> None:
    """LayoutProblem ("layout_overflow", naming the column) when the words do not fit
    their box even at the element's min_size. (Set once, at min_size: what fits there is
    set larger where it can when drawn.)"""
    box = placed(d.box, area(size, safe))
    smallest = max(4, round(d.min_size * min(size)))
    if not _fit(d.words, font, inner(d, box), smallest, d.align):
        raise LayoutProblem("layout_overflow", column=d.column or None,
                            words=d.words[:40] + ("…" if len(d.words) > 40 else ""),
                            rendition=what, size=f"{size[0]}×{size[1]}", min=smallest)


@lru_cache(maxsize=4096)
def _fit(words: str, font: str, room: tuple[int, int], size: int, align: str) -> bool:
    """Whether the words fit `room` at `size`. (Cached — a sheet's rows repeat words, a
    badge, a price, across renditions — as a yes or no: a set block would keep its font,
    which no other thread may draw with.)"""
    block = lay_out(words, font_sizes(font, words), room, size, min_size=size,
                    align=align)  # type: ignore[arg-type]
    return bool(block.lines) and not block.cut
