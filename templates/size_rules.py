"""How an op sizes the image it makes: the rule each op's signature declares.

Intake bounds a row's images before anything runs ([intake] max_output_pixels) by
following each node's image through the graph (templates/sizes.py). It reads these
rules, never op names, so a new op that makes images bigger cannot slip past the bound:
an op's signature must say how it sizes (templates.signatures.check_signatures).

A signature's rules are tried in order; the first that knows a size gives it. `source` is
the size of the image that came in (the node's `image` or `init_image`), None when unknown
(an uploaded picture, the model's own size): unknown sizes are bounded when the pictures
are read ([intake] max_image_pixels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

Size = tuple[int, int]


class SizeRule(Protocol):
    def size(self, inputs: dict[str, Any], source: Size | None) -> Size | None: ...


@dataclass(frozen=True)
class Given:
    """The [width, height] in input `name`, when the node sets one."""
    name: str = "size"

    def size(self, inputs: dict[str, Any], source: Size | None) -> Size | None:
        return pair(inputs.get(self.name))


@dataclass(frozen=True)
class Width:
    """A width in input `name`, the height from input `aspect` ("W:H") or else the
    source's proportions."""
    name: str = "width"
    aspect: str = "aspect"

    def size(self, inputs: dict[str, Any], source: Size | None) -> Size | None:
        width, aspect = number(inputs.get(self.name)), inputs.get(self.aspect)
        if not width:
            return None
        if isinstance(aspect, str) and aspect.count(":") == 1:
            w, h = (number(_int(x)) for x in aspect.split(":"))
            if w and h:
                return int(width), max(1, round(width * h / w))
        if source:
            return int(width), max(1, round(source[1] * width / source[0]))
        return None


@dataclass(frozen=True)
class Scaled:
    """The source times the factor in input `name` (`default` when the node leaves it)."""
    name: str = "scale"
    default: float | None = None

    def size(self, inputs: dict[str, Any], source: Size | None) -> Size | None:
        factor = number(inputs.get(self.name))
        factor = factor if factor is not None else self.default
        if factor is None or source is None:
            return None
        return round(source[0] * factor), round(source[1] * factor)


Margins = tuple[int, int, int, int]  # px added on the left, right, top, bottom


def grown(source: Size, margins: Margins, aspect: str | None = None) -> Margins:
    """The margins an extend adds around a picture of size `source`: the ones given, then
    what widens (or heightens) the canvas to `aspect` ("9:16"), split evenly on both
    sides. The picture is never cropped: an aspect it already is wider than adds height."""
    left, right, top, bottom = (max(0, int(m)) for m in margins)
    width, height = source[0] + left + right, source[1] + top + bottom
    if aspect:
        w, h = (int(x) for x in aspect.split(":"))
        if width * h < height * w:  # too narrow for the aspect: wider
            extra = round(height * w / h) - width
            left, right = left + extra // 2, right + extra - extra // 2
        else:
            extra = round(width * h / w) - height
            top, bottom = top + extra // 2, bottom + extra - extra // 2
    return left, right, top, bottom


def same_shape(a: Size, b: Size) -> bool:
    """Two sizes of one proportion, within 1 % (a mask drawn at another scale)."""
    return abs(a[0] / a[1] - b[0] / b[1]) <= 0.01 * b[0] / b[1]


@dataclass(frozen=True)
class Grown:
    """The source with the margins in inputs left, right, top and bottom added, then grown
    to the input `aspect` around it (an extend: templates.size_rules.grown)."""

    def size(self, inputs: dict[str, Any], source: Size | None) -> Size | None:
        if source is None:
            return None
        aspect = inputs.get("aspect")
        left, right, top, bottom = grown(source, tuple(  # type: ignore[arg-type]
            int(number(inputs.get(side)) or 0) for side in ("left", "right", "top", "bottom")),
            aspect if isinstance(aspect, str) and aspect.count(":") == 1 else None)
        return source[0] + left + right, source[1] + top + bottom


@dataclass(frozen=True)
class Same:
    """No bigger than the image that came in (crops, overlays, saving)."""

    def size(self, inputs: dict[str, Any], source: Size | None) -> Size | None:
        return source


@dataclass(frozen=True)
class Native:
    """The model's own size: unknown before it runs (and bounded by the model)."""

    def size(self, inputs: dict[str, Any], source: Size | None) -> Size | None:
        return None


@dataclass(frozen=True)
class NoImage:
    """The op makes no image (a colour, a measurement)."""

    def size(self, inputs: dict[str, Any], source: Size | None) -> Size | None:
        return None


def sized(rules: tuple[SizeRule, ...], inputs: dict[str, Any], source: Size | None
          ) -> Size | None:
    """The size the first rule that knows one gives, else None."""
    return next((s for rule in rules if (s := rule.size(inputs, source)) is not None), None)


def pair(value: Any) -> Size | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(map(number, value)):
        return int(value[0]), int(value[1])
    return None


def number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return float(value) if ok and math.isfinite(value) else None


def _int(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None
