"""One generated picture made into a channel's file: fitted, labelled, encoded.

`make` is pillow and numpy only (no model): the executor runs it beside the next
generation, for every rendition a job carries (templates.channels.Deliverable). In order:

  1. find the product: what differs from a plain background (the picture's edge colour);
     a scene with no plain background has no product box, and is framed by its centre
  2. whiten a light background to pure white where the rendition asks for white
  3. fit: crop to the rendition's aspect around the product, or pad the picture (or, with
     a `fill` rule, the product's box) into the frame with the background
  4. draw the layout (templates.layouts): the picture in its box, then the words, price,
     badge and logo, each in its box within the safe margins
  5. draw the visible AI-content label in a corner, inside the safe margins, over all
  6. encode with an sRGB profile, the implicit AI-content label (XMP, GB 45438-2025) and
     genbot's own metadata, lowering the quality until the file is within max_kb

The channel's rules are then checked on the file itself (templates.deliver_checks).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import msgspec
import numpy as np
from PIL import Image, ImageChops, ImageCms, ImageDraw, ImageOps, PngImagePlugin

from templates.channels import CORNERS, FORMATS, AiLabel, Deliverable, Rendition
from templates.fonts import font_sizes
from templates.layouts import Drawn, Overlay, area, colour, inner, placed, set_words
from templates.text import Block, lay_out
from templates.text import draw as draw_block

Box = tuple[int, int, int, int]  # left, top, right, bottom
WHITE = (255, 255, 255)
EDGE = 0.02  # the ring whose colour is the background's: 2 % of the short side
PLAIN = 0.6  # a background is plain when this share of the ring is its colour
TOLERANCE = 28  # how far (per channel) a pixel may be from the background's colour
LIGHT = 225  # a background this light (each channel) may be made pure white
LOWEST_QUALITY = 60  # max_kb is met by lowering JPEG/WebP quality down to this
MARGIN = 0.03  # of the short side: around the label, and around a padded product
TC260_NS = "http://www.tc260.org.cn/ns/AIGC/1.0/"


@dataclass(frozen=True)
class Provenance:
    """What the implicit label says (GB 45438-2025's metadata fields) and what genbot's
    own metadata carries (the source picture's: enough to make it again)."""
    producer: str  # ContentProducer: the service provider's name or code
    produce_id: str  # ProduceID: unique per file
    genbot: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Made:
    data: bytes
    size: tuple[int, int]
    format: str  # jpg, webp, png
    quality: int | None  # what the file was encoded at; None for PNG
    product: Box | None  # the product's box in the rendition; None: no plain background
    label: Box | None  # the visible label's ink; None: none drawn
    sha256: str
    signed: bool = False  # carries a C2PA manifest (templates.provenance)

    @property
    def kib(self) -> float:
        return len(self.data) / 1024


@dataclass
class Source:
    """A generated picture read once for all its renditions: its plain background's colour
    and the product's box (None for a scene), and its whitened copy when one asks."""
    image: Image.Image
    background: tuple[int, int, int] | None
    product: Box | None
    far: Image.Image | None  # per pixel, how far from the background (the widest channel)
    _white: Image.Image | None = None

    def white(self) -> Image.Image:
        if self._white is None:
            assert self.background is not None and self.far is not None
            self._white = whitened(self.image, self.far)
        return self._white


def prepare(picture: Image.Image) -> Source:
    im = picture.convert("RGB")
    background = plain_background(im)
    if background is None:
        return Source(im, None, None, None)
    far = distance(im, background)
    return Source(im, background, product_box(far), far)


Asset = Callable[[str], Path]  # a font's or logo's name in the file store -> a file here


def make(source: Image.Image | Source, d: Deliverable, provenance: Provenance, *,
         font: str = "", asset: Asset | None = None) -> Made:
    """`font`: the label's. `asset`: where the layout's fonts and logos are read."""
    src = source if isinstance(source, Source) else prepare(source)
    r = d.rendition
    im, background, product = src.image, src.background, src.product
    if r.background == "white" and background and min(background) >= LIGHT:
        im, background = src.white(), WHITE
    fill = WHITE if r.background == "white" else (background or WHITE)
    frame = d.overlay.picture if d.overlay else None
    box = placed(frame, (0, 0, *r.size)) if frame else (0, 0, *r.size)
    inside = msgspec.structs.replace(r, size=(box[2] - box[0], box[3] - box[1]))
    if r.fit != "pad":  # crop; or an extend, whose picture was grown to its aspect: a resize
        im, product = cropped(im, inside.size, product)
    else:
        im, product = padded(im, inside, product, fill)
    if frame:
        canvas = Image.new("RGB", r.size, WHITE if r.background == "white" else
                           colour(d.overlay.background)[:3])  # type: ignore[union-attr]
        canvas.paste(im, box[:2])
        im = canvas
        product = _moved(product, (-box[0], -box[1]), 1.0, r.size) if product else None
    taken = drawn_layout(im, d.overlay, r, asset) if d.overlay else []
    label = drawn_label(im, d.label, r, font, avoid=taken) if d.label else None
    data, quality = encoded(im, r, provenance)
    return Made(data, im.size, r.format, quality, product, label,
                hashlib.sha256(data).hexdigest())


# --- the product -------------------------------------------------------------------------

def edge_ring(a: np.ndarray) -> np.ndarray:
    """The pixels of the picture's edge ring, as rows of RGB."""
    h, w = a.shape[:2]
    k = max(1, round(min(h, w) * EDGE))
    return np.concatenate([a[:k].reshape(-1, 3), a[-k:].reshape(-1, 3),
                           a[k:-k, :k].reshape(-1, 3), a[k:-k, -k:].reshape(-1, 3)])


def plain_background(im: Image.Image) -> tuple[int, int, int] | None:
    """The colour of a plain background (a product shot's), or None for a scene."""
    ring = edge_ring(np.asarray(im, dtype=np.int16))
    colour = np.median(ring, axis=0)
    near = (np.abs(ring - colour).max(axis=1) <= TOLERANCE).mean()
    return tuple(int(c) for c in colour) if near >= PLAIN else None  # type: ignore[return-value]


def distance(im: Image.Image, background: tuple[int, int, int]) -> Image.Image:
    """Per pixel, how far it is from the background: its widest channel's difference."""
    r, g, b = ImageChops.difference(im, Image.new("RGB", im.size, background)).split()
    return ImageChops.lighter(ImageChops.lighter(r, g), b)


def product_box(far: Image.Image) -> Box | None:
    """The box around everything that differs from the background; None if nothing does."""
    return far.point(lambda v: 255 if v > TOLERANCE else 0).getbbox()


def whitened(im: Image.Image, far: Image.Image) -> Image.Image:
    """Pixels as close to a light background as it is to itself made pure white (what a
    "white background" prompt makes is rarely RGB 255)."""
    out = im.copy()
    out.paste(WHITE, mask=far.point(lambda v: 255 if v <= TOLERANCE else 0))
    return out


# --- fitting -----------------------------------------------------------------------------

def cropped(im: Image.Image, size: tuple[int, int], product: Box | None
            ) -> tuple[Image.Image, Box | None]:
    """The largest window of the rendition's aspect, centred on the product (or the
    picture) and kept inside it, scaled to `size`."""
    W, H = im.size
    aspect = size[0] / size[1]
    w, h = (W, round(W / aspect)) if aspect >= W / H else (round(H * aspect), H)
    w, h = min(w, W), min(h, H)
    cx, cy = ((product[0] + product[2]) / 2, (product[1] + product[3]) / 2) if product \
        else (W / 2, H / 2)
    left = int(min(max(0, round(cx - w / 2)), W - w))
    top = int(min(max(0, round(cy - h / 2)), H - h))
    out = im.resize(size, Image.Resampling.LANCZOS, box=(left, top, left + w, top + h))
    return out, _moved(product, (left, top), size[0] / w, size) if product else None


def padded(im: Image.Image, r: Rendition, product: Box | None, fill: tuple[int, int, int]
           ) -> tuple[Image.Image, Box | None]:
    """The picture scaled to fit the frame, the rest the background's colour. With a fill
    rule and a product box, the product's box is what fits: spanning a little more of
    the frame than the rule asks (the picture around it cut where it would overflow)."""
    W, H = r.size
    if r.fill and product:
        span = min(0.96, r.fill + 0.06)
        pw, ph = product[2] - product[0], product[3] - product[1]
        scale = min(W * span / pw, H * span / ph)
        cx, cy = (product[0] + product[2]) / 2, (product[1] + product[3]) / 2
        left, top = round(W / 2 - cx * scale), round(H / 2 - cy * scale)
    else:
        scale = min(W / im.width, H / im.height)
        left = round((W - im.width * scale) / 2)
        top = round((H - im.height * scale) / 2)
    canvas = Image.new("RGB", (W, H), fill)
    scaled = im.resize((max(1, round(im.width * scale)), max(1, round(im.height * scale))),
                       Image.Resampling.LANCZOS)
    canvas.paste(scaled, (left, top))
    if not product:
        return canvas, None
    box = tuple(round(v * scale) + off for v, off in zip(product, (left, top, left, top)))
    return canvas, _clamped(box, (W, H))  # type: ignore[arg-type]


def _moved(box: Box, origin: tuple[int, int], scale: float, size: tuple[int, int]) -> Box:
    moved = (round((box[0] - origin[0]) * scale), round((box[1] - origin[1]) * scale),
             round((box[2] - origin[0]) * scale), round((box[3] - origin[1]) * scale))
    return _clamped(moved, size)


def _clamped(box: Box, size: tuple[int, int]) -> Box:
    return (max(0, box[0]), max(0, box[1]), min(size[0], box[2]), min(size[1], box[3]))


# --- the visible label -------------------------------------------------------------------

def label_block(text: str, size: tuple[int, int], height: float, font: str) -> Block:
    """The label's words set so their ink is at least `height` of the short side tall."""
    want = math.ceil(min(size) * height)
    at = font_sizes(font, text)
    font_size = max(8, round(want / 0.8))
    block = Block()
    for _ in range(8):  # the ink of a size is found by setting it: grow until tall enough
        block = lay_out(text, at, (size[0] // 2, want * 4), font_size, min_size=font_size,
                        one_line=True)
        if block.ink_height >= want or not block.lines:
            break
        font_size = math.ceil(font_size * max(1.05, want / max(1, block.ink_height)))
    return block


def drawn_label(im: Image.Image, label: AiLabel, r: Rendition, font: str,
                avoid: Sequence[Box] = ()) -> Box | None:
    """The label on a dark rounded plate in its corner, inside the rendition's safe
    margins — or, where the layout put something there (`avoid`), the first other corner
    left clear (else its own, over it: the law's label is never left out); the box of
    its words' ink (what the label check measures)."""
    block = label_block(label.text, im.size, label.height, font)
    if not block.lines:
        return None
    W, H = im.size
    pad = max(2, round(block.ink_height * 0.3))
    margin = round(min(W, H) * MARGIN)
    top_m, right_m, bottom_m, left_m = (round(s * d) for s, d in zip(r.safe, (H, W, H, W)))
    plate_w, plate_h = block.width + 2 * pad, block.ink_height + 2 * pad

    def corner(position: str) -> tuple[int, int]:
        vertical, horizontal = position.split("_")
        return (left_m + margin if horizontal == "left" else W - right_m - margin - plate_w,
                top_m + margin if vertical == "top" else H - bottom_m - margin - plate_h)

    def clear(xy: tuple[int, int]) -> bool:
        x, y = xy
        return not any(x < b[2] and b[0] < x + plate_w and y < b[3] and b[1] < y + plate_h
                       for b in avoid)
    corners = [corner(p) for p in (label.position, *(c for c in CORNERS
                                                      if c != label.position))]
    x, y = next((c for c in corners if clear(c)), corners[0])
    layer = Image.new("RGBA", im.size, (0, 0, 0, 0))
    ImageDraw.Draw(layer).rounded_rectangle((x, y, x + plate_w, y + plate_h), radius=pad,
                                            fill=(0, 0, 0, 150))
    im.paste(Image.alpha_composite(im.convert("RGBA"), layer).convert("RGB"))
    draw_block(im, block, (x + pad, y + pad - block.ink_top), WHITE)
    return (x + pad, y + pad, x + pad + block.width, y + pad + block.ink_height)


# --- the layout ----------------------------------------------------------------------------

BADGE = "#e4393c"  # a badge's fill where its layout names none


def drawn_layout(im: Image.Image, overlay: Overlay, r: Rendition, asset: Asset | None
                 ) -> list[Box]:
    """The overlay's words, price, badge and logo, each in its box of the safe area, in the
    layout's order (a later one over an earlier); the boxes drawn in."""
    within = area(r.size, r.safe)
    taken = []
    for e in overlay.elements:
        if e.kind == "picture":
            continue
        box = placed(e.box, within)
        taken.append(box)
        if e.kind == "logo":
            drawn_logo(im, asset(e.logo) if asset else Path(e.logo), box)
        else:
            font = str(asset(e.font)) if e.font and asset else e.font
            drawn_words(im, e, box, r, font)
    return taken


def drawn_words(im: Image.Image, e: Drawn, box: tuple[int, int, int, int], r: Rendition,
                font: str) -> None:
    """Words on their plate (or badge), set to fit (checked at submission: they do)."""
    plate = e.plate or (BADGE if e.kind == "badge" else "")
    if plate:
        layer = Image.new("RGBA", im.size, (0, 0, 0, 0))
        draw = ImageDraw.Draw(layer)
        fill = colour(plate)
        if e.kind == "badge" and e.shape == "circle":
            side = min(box[2] - box[0], box[3] - box[1])
            cx, cy = (box[0] + box[2]) // 2, (box[1] + box[3]) // 2
            draw.ellipse((cx - side // 2, cy - side // 2, cx + side // 2, cy + side // 2),
                         fill=fill)
        elif e.shape == "rect":
            draw.rectangle(box, fill=fill)
        else:
            draw.rounded_rectangle(box, radius=min(box[2] - box[0], box[3] - box[1]) // 4,
                                   fill=fill)
        im.paste(Image.alpha_composite(im.convert("RGBA"), layer).convert("RGB"))
    block = set_words(e, r.size, r.safe, font)
    room_w, _ = inner(e, box)
    pad = ((box[2] - box[0]) - room_w) // 2
    if e.align == "left":
        x = box[0] + pad
    elif e.align == "right":
        x = box[2] - pad - block.width
    else:
        x = (box[0] + box[2] - block.width) // 2
    y = (box[1] + box[3]) // 2 - (block.ink_top + block.ink_bottom) // 2
    draw_block(im, block, (x, y), colour(e.colour))


def drawn_logo(im: Image.Image, path: Path, box: tuple[int, int, int, int]) -> None:
    """The logo as large as its box holds, its aspect kept, centred, its transparency
    kept (checked at submission to be a picture)."""
    with Image.open(path) as opened:
        logo = ImageOps.exif_transpose(opened).convert("RGBA")
    w, h = box[2] - box[0], box[3] - box[1]
    scale = min(w / logo.width, h / logo.height)
    logo = logo.resize((max(1, round(logo.width * scale)), max(1, round(logo.height * scale))),
                       Image.Resampling.LANCZOS)
    im.paste(logo, ((box[0] + box[2] - logo.width) // 2, (box[1] + box[3] - logo.height) // 2),
             logo)


# --- the file ----------------------------------------------------------------------------

_SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def implicit_label(provenance: Provenance, pixels: bytes) -> str:
    """The XMP packet of GB 45438-2025's implicit label: TC260:AIGC, a JSON string of its
    seven fields (Label "1": the content is AI-generated). ReservedCode1, the producer's
    own integrity field, is the SHA-256 of the picture's RGB pixels."""
    fields = {"Label": "1", "ContentProducer": provenance.producer,
              "ProduceID": provenance.produce_id,
              "ReservedCode1": hashlib.sha256(pixels).hexdigest(),
              "ContentPropagator": "", "PropagateID": "", "ReservedCode2": ""}
    value = escape(json.dumps(fields, ensure_ascii=False, separators=(",", ":")))
    return ('<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>'
            '<x:xmpmeta xmlns:x="adobe:ns:meta/">'
            '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
            f'<rdf:Description rdf:about="" xmlns:TC260="{TC260_NS}">'
            f"<TC260:AIGC>{value}</TC260:AIGC>"
            "</rdf:Description></rdf:RDF></x:xmpmeta>"
            '<?xpacket end="w"?>')


def encoded(im: Image.Image, r: Rendition, provenance: Provenance) -> tuple[bytes, int | None]:
    """The file, and the quality it took to be within max_kb (the largest file meeting
    it; at LOWEST_QUALITY, the file as it is: the size check then says it is over)."""
    xmp = implicit_label(provenance, im.tobytes())
    meta = json.dumps(provenance.genbot, ensure_ascii=False, separators=(",", ":"))
    limit = r.max_kb * 1024 or None
    if r.format == "png":
        info = PngImagePlugin.PngInfo()
        info.add_itxt("XML:com.adobe.xmp", xmp, zip=False)
        info.add_itxt("genbot", meta)
        buf = io.BytesIO()
        im.save(buf, "PNG", pnginfo=info, icc_profile=_SRGB, optimize=limit is not None)
        return buf.getvalue(), None
    exif = Image.Exif()
    exif[0x0131] = "genbot"  # Software
    exif[0x010E] = json.dumps(provenance.genbot, separators=(",", ":"))  # ASCII, as `save`
    quality = r.quality
    while True:
        buf = io.BytesIO()
        im.save(buf, FORMATS[r.format], quality=quality, icc_profile=_SRGB, exif=exif,
                xmp=xmp.encode())
        if limit is None or buf.tell() <= limit or quality <= LOWEST_QUALITY:
            return buf.getvalue(), quality
        quality = max(LOWEST_QUALITY, quality - 5)


def read_implicit_label(info: Mapping[Any, Any]) -> dict[str, str] | None:
    """The TC260:AIGC fields of a file's XMP (Pillow's `im.info`), or None."""
    import xml.etree.ElementTree as ET
    raw = info.get("xmp") or info.get("XML:com.adobe.xmp")
    if not raw:
        return None
    try:
        root = ET.fromstring(raw if isinstance(raw, (bytes, str)) else bytes(raw))
    except ET.ParseError:
        return None
    found = root.find(f".//{{{TC260_NS}}}AIGC")
    if found is None or not found.text:
        return None
    try:
        value = json.loads(found.text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
