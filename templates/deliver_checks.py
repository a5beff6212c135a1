"""A channel's rules, checked on the file a rendition made — before a person looks.

Each check reads the encoded file back (what the shop will get, not what was meant to be
written) and says what is wrong as a `Finding`: its code (a message in bot/messages.py,
`check_<code>`, in English and Chinese) and the figures that fill it in. No finding: the
rendition passes. Adding a check: a function here, listed in CHECKS, and its message.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageCms

from templates import provenance
from templates.channels import FORMATS, Deliverable
from templates.renditions import WHITE, Made, edge_ring, read_implicit_label

PURE = 0.99  # of the edge ring outside the product that must be RGB 255 on a white rule


@dataclass(frozen=True)
class Finding:
    code: str  # check_<code> in bot/messages.py
    details: dict[str, Any]

    def plain(self) -> dict[str, Any]:
        return {"check": self.code, **self.details}


def size(d: Deliverable, made: Made, im: Image.Image) -> Finding | None:
    want = tuple(d.rendition.size)
    return None if im.size == want else Finding("size", {
        "width": im.width, "height": im.height, "want_width": want[0], "want_height": want[1]})


def file_format(d: Deliverable, made: Made, im: Image.Image) -> Finding | None:
    want = FORMATS[d.rendition.format]
    return None if im.format == want else Finding("format", {"found": im.format, "want": want})


def file_size(d: Deliverable, made: Made, im: Image.Image) -> Finding | None:
    limit = d.rendition.max_kb
    return None if not limit or len(made.data) <= limit * 1024 else Finding("file_size", {
        "kib": round(made.kib), "max_kib": limit})


def colour_profile(d: Deliverable, made: Made, im: Image.Image) -> Finding | None:
    icc = im.info.get("icc_profile")
    if icc:
        name = ImageCms.getProfileDescription(ImageCms.ImageCmsProfile(io.BytesIO(icc)))
        if "srgb" in name.lower():
            return None
    return Finding("profile", {})


def background(d: Deliverable, made: Made, im: Image.Image) -> Finding | None:
    """On a white rule: the edge ring, outside the product's box, is pure white."""
    if d.rendition.background != "white":
        return None
    a = np.asarray(im.convert("RGB"))
    if made.product:  # the product may touch the edge: its box is not background
        left, top, right, bottom = made.product
        a = a.copy()
        a[top:bottom, left:right] = WHITE
    ring = edge_ring(a)
    share = float((ring == 255).all(axis=1).mean())
    return None if share >= PURE else Finding("background", {"percent": round(share * 100)})


def fill(d: Deliverable, made: Made, im: Image.Image) -> Finding | None:
    """The product's box spans at least `fill` of the frame's width or height (how Amazon
    measures its 85 %)."""
    want = d.rendition.fill
    if not want:
        return None
    if made.product is None:
        return Finding("no_product", {})
    left, top, right, bottom = made.product
    span = max((right - left) / im.width, (bottom - top) / im.height)
    return None if span >= want else Finding("fill", {"percent": round(span * 100),
                                                       "want": round(want * 100)})


def visible_label(d: Deliverable, made: Made, im: Image.Image) -> Finding | None:
    """The visible AI label is there and tall enough (its words' ink, against the short
    side)."""
    if d.label is None:
        return None
    if made.label is None:
        return Finding("label_missing", {})
    height = (made.label[3] - made.label[1]) / min(im.size)
    return None if height + 1e-9 >= d.label.height else Finding("label_small", {
        "percent": round(height * 100, 1), "want": round(d.label.height * 100, 1)})


def implicit_label(d: Deliverable, made: Made, im: Image.Image) -> Finding | None:
    found = read_implicit_label(im.info)
    return None if found and found.get("Label") == "1" else Finding("implicit_label", {})


def credentials(d: Deliverable, made: Made, im: Image.Image) -> Finding | None:
    """A signed file's C2PA manifest validates (its signer may be one the reader does not
    trust: that is the reader's list, not the file's fault)."""
    if not made.signed:
        return None
    found = provenance.read(made.data, d.rendition.format)
    if found.state in ("Valid", "Trusted"):
        return None
    return Finding("c2pa", {"codes": ", ".join(found.failures) or "no manifest"})


# Findings that are the picture's, which a new seed may mend (a scene where a product shot
# was asked, a product too small in its frame): [deliver] max_rerolls makes the image again
# for these. The rest are genbot's or the channel file's and would come back the same.
MENDED_BY_A_NEW_SEED = frozenset({"background", "fill", "no_product", "text", "words",
                                  "product"})

# Checks of the generated picture itself, by small models that ship in their packages
# (executor.inspection): [deliver] checks names those that run.
PICTURE_CHECKS = ("nsfw", "text", "words", "product")


Check = Callable[[Deliverable, Made, Image.Image], "Finding | None"]
CHECKS: tuple[Check, ...] = (size, file_format, file_size, colour_profile, background, fill,
                             visible_label, implicit_label, credentials)


def check(d: Deliverable, made: Made) -> list[Finding]:
    """Every rule the rendition breaks, read from its file; [] when it passes. A file no
    reader can open breaks them all: that one finding says so."""
    try:
        with Image.open(io.BytesIO(made.data)) as im:
            im.load()
            return [f for c in CHECKS if (f := c(d, made, im)) is not None]
    except (OSError, SyntaxError, ValueError) as e:  # (Pillow's words for a broken file)
        return [Finding("unreadable", {"error": str(e)[:200]})]
