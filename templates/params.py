"""Template parameters: their types, and turning what a spreadsheet cell holds into a value.

A cell may hold text, a number (Excel has no integers: 42 arrives as 42.0), a boolean
or a date; people type full-width digits and 是/否. Every failure is a `Problem` with a
code and its arguments, phrased for people by the front (in English or Chinese).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TYPES = ("text", "int", "float", "bool", "choice", "seed", "image", "reference", "color", "size")
# Picture columns: a cell names a file (beside the sheet, in the assets folder, a link). A
# reference steers a generation (an IP-Adapter, an edit model's second picture) and has a
# scale column of its own (templates.loader adds <name>_scale where it feeds an IP-Adapter).
PICTURES = ("image", "reference")
REFERENCE_SCALE = 0.6  # how strongly a reference steers, where its template says nothing
SEED_MAX = 2**32 - 1  # what every diffusers generator and every user's tools accept
SIZE_MIN, SIZE_MAX = 8, 8192
TRUE = {"true", "yes", "y", "1", "on", "是", "对", "真"}
FALSE = {"false", "no", "n", "0", "off", "否", "不", "假"}


def draw_seed() -> int:
    """A new seed, for a row that left its seed empty or a job that needs new noise."""
    import secrets
    return secrets.randbelow(SEED_MAX + 1)


class Problem(Exception):
    """A value that does not fit; `code` names the message, `args` fill it in."""

    def __init__(self, code: str, **details: Any):
        super().__init__(code)
        self.code, self.details = code, details


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    required: bool = False
    default: Any = None
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    help: str = ""
    example: Any = None
    uses: tuple[str, ...] = field(default=(), compare=False)  # "node.input" it feeds
    scale: float | None = None  # a reference's scale column's default (REFERENCE_SCALE)

    @property
    def picture(self) -> bool:
        """A cell of it names a picture (PICTURES): read, found and stored as one."""
        return self.type in PICTURES

    @property
    def allowed(self) -> str:
        """Its choices or range, for people: "1:1, 4:5" or "1..100" (or "")."""
        if self.choices:
            return ", ".join(self.choices)
        if self.min is None and self.max is None:
            return ""
        return (f"{'' if self.min is None else f'{self.min:g}'}.."
                f"{'' if self.max is None else f'{self.max:g}'}")


def normalize_header(text: Any) -> str:
    """How headers are compared: trimmed, full-width folded to half-width, case-free."""
    return unicodedata.normalize("NFKC", str(text)).strip().casefold()


def is_blank(raw: Any) -> bool:
    return raw is None or (isinstance(raw, str) and raw.strip() == "")


def _number_text(raw: str) -> str:
    return unicodedata.normalize("NFKC", raw).strip().replace(",", "").replace("_", "")


def _whole(raw: Any) -> int:
    if isinstance(raw, bool):
        raise ValueError
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        if raw.is_integer():
            return int(raw)
        raise ValueError
    text = _number_text(str(raw))
    try:
        return int(text)
    except ValueError:
        value = float(text)  # "42.0" from a CSV
        if value.is_integer():
            return int(value)
        raise


def _check_range(p: Param, value: float) -> None:
    if p.min is not None and value < p.min:
        raise Problem("too_small", value=value, min=p.min)
    if p.max is not None and value > p.max:
        raise Problem("too_large", value=value, max=p.max)


def parse_size(raw: Any) -> list[int]:
    if isinstance(raw, (list, tuple)) and len(raw) == 2:
        w, h = (_whole(v) for v in raw)
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        w = h = _whole(raw)
    else:
        text = unicodedata.normalize("NFKC", str(raw)).strip().lower()
        m = re.fullmatch(r"(\d+)\s*[x×*,]\s*(\d+)", text)
        if m:
            w, h = int(m[1]), int(m[2])
        elif text.isdigit():
            w = h = int(text)
        else:
            raise ValueError
    if not (SIZE_MIN <= w <= SIZE_MAX and SIZE_MIN <= h <= SIZE_MAX):
        raise ValueError
    return [w, h]


def parse_color(raw: Any) -> str:
    from PIL import ImageColor  # pillow, not torch: cheap
    text = unicodedata.normalize("NFKC", str(raw)).strip().lower()
    if text == "auto":
        return "auto"
    r, g, b = ImageColor.getrgb(text)[:3]
    return f"#{r:02x}{g:02x}{b:02x}"


def parse_aspect(raw: Any) -> str:
    text = unicodedata.normalize("NFKC", str(raw)).strip()
    m = re.fullmatch(r"(\d+)\s*[:：/x×]\s*(\d+)", text)
    if not m or int(m[1]) == 0 or int(m[2]) == 0:
        raise ValueError
    return f"{int(m[1])}:{int(m[2])}"


def coerce(p: Param, raw: Any) -> Any:
    """The typed value of one cell for parameter `p` (blank: its default; seed: None = draw)."""
    if is_blank(raw):
        if p.required and p.default is None:
            raise Problem("required")
        return p.default
    read = CELL_READERS.get(p.type)
    if read is None:
        raise AssertionError(f"unknown parameter type {p.type}")
    return read(p, raw)


def _text_cell(p: Param, raw: Any) -> str:
    """Text as the cell shows it: a number typed as an SKU without Excel's ".0", a date
    in ISO form."""
    if isinstance(raw, float) and raw.is_integer():
        return str(int(raw))  # an SKU typed as a number
    if isinstance(raw, (dt.datetime, dt.date, dt.time)):
        return raw.isoformat()
    return raw if isinstance(raw, str) else str(raw)


def _whole_cell(p: Param, raw: Any) -> int:
    """An int or a seed: a whole number however the cell holds it, in the range allowed."""
    try:
        value = _whole(raw)
    except ValueError:
        raise Problem("not_whole", value=raw) from None
    if p.type == "seed" and not 0 <= value <= SEED_MAX:
        raise Problem("bad_seed", value=value, max=SEED_MAX)
    _check_range(p, value)
    return value


def _float_cell(p: Param, raw: Any) -> float:
    """A finite number in the range allowed; true and false are no numbers here."""
    if isinstance(raw, bool):
        raise Problem("not_number", value=raw)
    try:
        number = float(raw if isinstance(raw, (int, float)) else _number_text(str(raw)))
    except ValueError:
        raise Problem("not_number", value=raw) from None
    if not math.isfinite(number):
        raise Problem("not_number", value=raw)
    _check_range(p, number)
    return number


def _bool_cell(p: Param, raw: Any) -> bool:
    """A checkbox, 1 or 0, or a word for yes or no (TRUE, FALSE) in either language."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, (int, float)):
        text = str(int(raw)) if float(raw).is_integer() else str(raw)
    else:
        text = _number_text(str(raw)).casefold()
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise Problem("not_bool", value=raw)


def _choice_cell(p: Param, raw: Any) -> str:
    """One of the choices, as the template spells it, matched as headers are (case- and
    width-free)."""
    text = normalize_header(raw if not (isinstance(raw, float) and raw.is_integer())
                            else int(raw))
    for choice in p.choices:
        if normalize_header(choice) == text:
            return choice
    raise Problem("not_choice", value=raw, choices=p.choices)


def _image_cell(p: Param, raw: Any) -> str:
    """A reference to a picture; the intake resolves and checks the file."""
    return str(raw).strip()


def _color_cell(p: Param, raw: Any) -> str:
    try:
        return parse_color(raw)
    except ValueError:
        raise Problem("not_color", value=raw) from None


def _size_cell(p: Param, raw: Any) -> list[int]:
    try:
        return parse_size(raw)
    except (ValueError, TypeError):
        raise Problem("not_size", value=raw, min=SIZE_MIN, max=SIZE_MAX) from None


# How a cell is read for each parameter type (TYPES): a non-blank cell's typed value, or
# Problem saying why it is not one.
CELL_READERS: dict[str, Callable[[Param, Any], Any]] = {
    "text": _text_cell, "int": _whole_cell, "seed": _whole_cell, "float": _float_cell,
    "bool": _bool_cell, "choice": _choice_cell, "image": _image_cell,
    "reference": _image_cell, "color": _color_cell, "size": _size_cell,
}
