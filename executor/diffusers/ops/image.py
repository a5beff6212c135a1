"""The pillow ops: geometry, edges, colours, text, watermarks, and `save`.

Pillow and numpy only (no torch): these run per job, on whatever the earlier nodes gave.
`save` writes the image into the batch's output folder with enough metadata to make it
again.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any, cast

import numpy as np
from PIL import Image, ImageDraw, ImageFont, PngImagePlugin

from executor import VERSION
from executor.diffusers.ops.base import Context, ImageInput, OpError, op
from storage.files import batch_folder
from templates.fonts import FontError, font_sizes
from templates.jobs import encode
from templates.signatures import OPS
from templates.text import Align, Block, FontAt, lay_out
from templates.text import draw as draw_block

# --- the product kept intact -------------------------------------------------------------

@op()
def keep_product(ctx: Context, image: ImageInput, product: ImageInput | None,
                 mask: ImageInput | None = None, blend: int = 2,
                 shadow: float = 0.0, beside: str | None = None) -> Image.Image:
    """The photo's pixels over the image wherever the product is, unchanged: inside the
    mask (eroded by `blend` px) each pixel is the photo's own, stretched to the image's
    size as the generation's control image was (at the photo's size: byte for byte the
    photo). The `blend` px inside the mask's edge fade into the scene; `shadow` darkens a
    soft band just below the product. No mask and no transparency: the product cut out by
    the executor's background-removal model ([executor] matting), its mask saved beside
    the image named `beside` for review; no such model: the image as made."""
    from PIL import ImageFilter
    made = ctx.image(image)
    if product is None:
        return made
    photo = ctx.image(product)
    alpha = _mask(ctx, product, mask)
    if alpha is None and ctx.matting:
        alpha = _cut_out(ctx, photo, beside)
    if alpha is None:
        return made
    size = made.size
    if photo.size != size:
        photo = photo.resize(size, Image.Resampling.LANCZOS)
    if alpha.size != size:
        alpha = alpha.resize(size, Image.Resampling.LANCZOS)
    hard = alpha.point(lambda v: 255 if v >= 128 else 0)  # the product, inside and out
    if shadow > 0:  # a soft shadow falling just below it, onto the scene
        radius = max(2, round(min(size) / 40))
        under = Image.new("L", size, 0)  # moved down (ImageChops.offset would wrap it round)
        under.paste(hard.crop((0, 0, size[0], size[1] - radius)), (0, radius))
        under = under.filter(ImageFilter.GaussianBlur(radius))
        dark = under.point(lambda v: round(v * shadow))
        made = Image.composite(Image.new("RGB", size, "black"), made, dark)
    return Image.composite(photo, made, inward(hard, blend))


def inward(hard: Image.Image, px: int) -> Image.Image:
    """A hard mask (0 or 255) with its edge faded inward over `px` pixels: 255 past them
    inside, 0 everywhere outside — so a composite by it keeps every pixel outside the mask
    exactly (keep_product: the scene; fill: the picture)."""
    from PIL import ImageChops, ImageFilter
    if px <= 0:
        return hard
    # eroded by half of `px` (a box average is 255 only where the whole box is), then a
    # box blur of that half ramps it from 0 at the edge to 255 at `px` inside. BoxBlur's
    # cost does not grow with the box: a Gaussian's did (three times the rest at 1 MP),
    # a MinFilter's grows with its area.
    core = hard.filter(ImageFilter.BoxBlur(px / 2)).point(lambda v: 255 if v == 255 else 0)
    soft = core.filter(ImageFilter.BoxBlur(px / 2))
    return ImageChops.lighter(ImageChops.darker(soft, hard), core)


def _cut_out(ctx: Context, photo: Image.Image, beside: str | None) -> Image.Image:
    """The product's mask from the background-removal model, saved beside the image."""
    from executor.models import matting
    from executor.models.registry import ModelError
    info = ctx.models.registry.get(ctx.matting, "matting")
    try:
        alpha = matting.cut_out(info.path, photo)
    except matting.MattingError as e:
        raise ModelError(f'model "{ctx.matting}": {e}') from None
    ctx.used_models.append(ctx.matting)
    if beside:
        out = io.BytesIO()
        alpha.save(out, "PNG")
        named = PurePosixPath(f"{batch_folder(ctx.batch_id)}/{beside}")
        ctx.store.write(str(named.with_name(f"{named.stem}.mask.png")), out.getvalue())
    return alpha


def _mask(ctx: Context, product: ImageInput, mask: ImageInput | None) -> Image.Image | None:
    """Where the product is (white): the mask picture, else the photo's transparency kept
    beside it when the sheet's picture was stored (storage.files.FileStore.mask_of)."""
    if mask is not None:
        return ctx.image(mask).convert("L")
    if not isinstance(product, str):
        return None
    beside = ctx.store.mask_of(product)
    if not ctx.store.path(beside).exists():
        return None
    with Image.open(ctx.store.path(beside)) as im:
        return im.convert("L")


# --- geometry ---------------------------------------------------------------------------

def _ratio(aspect: str) -> float:
    w, h = (int(x) for x in aspect.split(":"))
    return w / h


@op()
def crop(ctx: Context, image: ImageInput, aspect: str) -> Image.Image:
    im = ctx.image(image)
    want = _ratio(aspect)
    w, h = im.size
    if w / h > want:  # too wide: trim the sides
        nw = max(1, round(h * want))
        left = (w - nw) // 2
        return im.crop((left, 0, left + nw, h))
    nh = max(1, round(w / want))
    top = (h - nh) // 2
    return im.crop((0, top, w, top + nh))


@op()
def resize(ctx: Context, image: ImageInput, size: list[int] | None = None,
           width: int | None = None, scale: float | None = None,
           aspect: str | None = None) -> Image.Image:
    """`aspect` with `width`: the height the aspect gives (4:5 at 1080 is 1350 tall),
    not what a crop's rounding left (1349)."""
    im = ctx.image(image)
    given = [n for n, v in (("size", size), ("width", width), ("scale", scale)) if v is not None]
    if len(given) != 1:
        raise OpError("resize takes exactly one of size, width or scale"
                      + (f" (got {', '.join(given)})" if given else ""))
    w, h = im.size
    if size is not None:
        target = (int(size[0]), int(size[1]))
    elif width is not None and aspect:
        target = (int(width), max(1, round(int(width) / _ratio(aspect))))
    elif width is not None:
        target = (int(width), max(1, round(h * width / w)))
    else:
        assert scale is not None  # exactly one of the three was given
        target = (max(1, round(w * scale)), max(1, round(h * scale)))
    return im if target == im.size else im.resize(target, Image.Resampling.LANCZOS)


@op()
def pad(ctx: Context, image: ImageInput, size: list[int], color: str = "auto") -> Image.Image:
    im = ctx.image(image)
    target = (int(size[0]), int(size[1]))
    if im.width > target[0] or im.height > target[1]:
        im = im.copy()
        im.thumbnail(target, Image.Resampling.LANCZOS)
    if color == "auto":
        color = _dominant(_border(im))
    out = Image.new("RGB", target, color)
    out.paste(im, ((target[0] - im.width) // 2, (target[1] - im.height) // 2))
    return out


def _border(im: Image.Image) -> Image.Image:
    a = np.asarray(im)
    edge = np.concatenate([a[0], a[-1], a[:, 0], a[:, -1]])
    return Image.fromarray(edge[None, :, :])


# --- analysis ---------------------------------------------------------------------------

@op()
def canny(ctx: Context, image: ImageInput, low: int = 100, high: int = 200) -> Image.Image:
    """Canny edges as white lines on black, the control image a canny ControlNet was
    trained on: Sobel gradients (|gx| + |gy|, thresholds on the same scale as OpenCV's
    Canny), non-maximum suppression, hysteresis."""
    g = np.asarray(ctx.image(image).convert("L"), dtype=np.float32)
    p = np.pad(g, 1, mode="edge")
    gx = (p[:-2, 2:] + 2 * p[1:-1, 2:] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[1:-1, :-2] + p[2:, :-2])
    gy = (p[2:, :-2] + 2 * p[2:, 1:-1] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[:-2, 1:-1] + p[:-2, 2:])
    mag = np.abs(gx) + np.abs(gy)
    angle = (np.rad2deg(np.arctan2(gy, gx)) + 180) % 180
    m = np.pad(mag, 1)
    # Neighbours along the gradient, for each of the four quantised directions.
    pairs = {0: ((1, 0), (1, 2)), 45: ((0, 2), (2, 0)), 90: ((0, 1), (2, 1)), 135: ((0, 0), (2, 2))}
    sector = (((angle + 22.5) // 45) % 4 * 45).astype(int)
    keep = np.zeros_like(mag, dtype=bool)
    h, w = mag.shape
    for deg, ((r1, c1), (r2, c2)) in pairs.items():
        n1 = m[r1:r1 + h, c1:c1 + w]
        n2 = m[r2:r2 + h, c2:c2 + w]
        keep |= (sector == deg) & (mag >= n1) & (mag >= n2)
    thin = np.where(keep, mag, 0)
    strong = thin >= high
    weak = thin >= low
    edges = strong
    while True:  # hysteresis: weak pixels touching strong ones become strong
        grown = np.pad(edges, 1)
        near = np.zeros_like(edges)
        for dr in range(3):
            for dc in range(3):
                near |= grown[dr:dr + h, dc:dc + w]
        nxt = weak & near
        if (nxt == edges).all():
            break
        edges = nxt
    return Image.fromarray((edges * 255).astype(np.uint8)).convert("RGB")


def _luminance(color: tuple[int, int, int]) -> float:
    def channel(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(c) for c in color)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def _hex(color: tuple[int, ...]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*color[:3])


def _rgb(color: str) -> tuple[int, int, int]:
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return r, g, b


def _swatches(im: Image.Image, n: int = 6) -> list[tuple[int, int, int]]:
    """The image's main colours, most frequent first."""
    small = im.convert("RGB").copy()
    small.thumbnail((128, 128))
    q = small.quantize(colors=n, method=Image.Quantize.MEDIANCUT)
    pal, colors = q.getpalette(), q.getcolors()
    # A quantized image has a palette and at most `n` colours, each a palette index.
    assert pal is not None and colors is not None
    counts = sorted(cast(list[tuple[int, int]], colors), reverse=True)
    return [(pal[i * 3], pal[i * 3 + 1], pal[i * 3 + 2]) for _, i in counts]


def _dominant(im: Image.Image) -> str:
    return _hex(_swatches(im)[0])


def _contrasting(background: tuple[int, int, int],
                 candidates: Iterable[tuple[int, int, int]]) -> str:
    """A swatch that reads on `background` (WCAG ratio 4.5), else black or white."""
    for c in candidates:
        if contrast_ratio(c, background) >= 4.5:
            return _hex(c)
    black, white = (0, 0, 0), (255, 255, 255)
    best = max((black, white), key=lambda c: contrast_ratio(c, background))
    return _hex(best)


@op()
def palette(ctx: Context, image: ImageInput) -> dict[str, str]:
    swatches = _swatches(ctx.image(image))
    return {"dominant": _hex(swatches[0]), "contrast": _contrasting(swatches[0], swatches[1:])}


# --- text -------------------------------------------------------------------------------
# Any text a cell holds is laid out by templates.text: cleaned, split at its line breaks,
# wrapped, sized to fit, cut with "…" past the lines there is room for.

def _font_at(ctx: Context, text: str) -> FontAt:
    """The font for `text` (templates.fonts.font_for) at any size; a missing or broken
    font file is the op's error, said as such."""
    try:
        sizes = font_sizes(ctx.font, text)
    except FontError as e:
        raise OpError(str(e)) from None

    def font_at(size: int) -> ImageFont.FreeTypeFont:
        try:
            return sizes(size)
        except FontError as e:
            raise OpError(str(e)) from None
    return font_at


def _align(position: str) -> Align:
    """How the lines of a block line up: as the position's side (top_left …), else centred."""
    side = position.split("_")[-1]
    return "left" if side == "left" else "right" if side == "right" else "center"


def _place(position: str, box: tuple[int, int], inner: tuple[float, float],
           margin: int) -> tuple[float, float]:
    (W, H), (w, h) = box, inner
    x = {"left": margin, "right": W - w - margin}.get(position.split("_")[-1], (W - w) // 2)
    y: float  # text boxes measure in floats
    if position.startswith("top"):
        y = margin
    elif position.startswith("bottom"):
        y = H - h - margin
    else:
        y = (H - h) // 2
    return x, y


def title_band(size: tuple[int, int], block: Block, position: str) -> tuple[int, int]:
    """Where the `text` op's band goes (its top and height): tall enough for the block's
    lines with room above and below — for one line, 1.8 times its ink, as it always was."""
    W, H = size
    ink = block.ink_height
    room = ink if len(block.lines) == 1 else block.size * 0.75  # ~ one line's capitals
    band_h = min(H, int(ink + 0.8 * room) + 2)
    _, band_y = _place(position, (W, H), (W, band_h), 0)
    return int(band_y), band_h


@op()
def text(ctx: Context, image: ImageInput, text: str, position: str = "bottom",
         color: str = "auto", band: str = "auto", font_size: int | None = None) -> Image.Image:
    """A band across the image holding `text`: as many lines as it has and as wrapping
    makes, in a font that fits them all within 90% of the width and 40% of the height."""
    im = ctx.image(image).copy()
    W, H = im.size
    size = int(font_size or max(12, H // 14))
    margin = max(4, W // 40)  # from the side, for text to the left or right
    box = (min(int(W * 0.9), W - 2 * margin), int(H * 0.4))
    block = lay_out(str(text), _font_at(ctx, str(text)), box, size,
                    min_size=max(6, size // 2), align=_align(position))
    if not block.width:  # nothing visible to write (no text, or only invisible marks)
        return im
    band_y, band_h = title_band((W, H), block, position)
    if band == "auto":  # the image's main colour that stands out from what the band covers
        under = _rgb(_dominant(im.crop((0, band_y, W, band_y + band_h))))
        band = next((_hex(c) for c in _swatches(im) if contrast_ratio(c, under) >= 1.6),
                    _hex(under))
    if color == "auto":
        color = _contrasting(_rgb(band), _swatches(im))
    ImageDraw.Draw(im).rectangle((0, band_y, W, band_y + band_h), fill=band)
    x, _ = _place(position, (W, band_h), (block.width, 0), margin)
    y = band_y + (band_h - block.ink_height) // 2 - block.ink_top
    draw_block(im, block, (x, y), color)
    return im


def watermark_block(ctx: Context, size: tuple[int, int], text: str, position: str) -> Block:
    """The watermark's lines: within half the width and a quarter of the height (and
    inside the margins of a tiny image)."""
    W, H = size
    start = max(10, min(size) // 18)
    margin = max(4, min(size) // 40)
    box = (min(int(W * 0.5), W - 2 * margin), min(int(H * 0.25), H - 2 * margin))
    return lay_out(str(text), _font_at(ctx, str(text)), box, start,
                   min_size=max(6, start // 2), align=_align(position),
                   stroke=lambda s: max(1, s // 16))


@op()
def watermark(ctx: Context, image: ImageInput, text: str, position: str = "bottom_right",
              opacity: float = 0.35, avoid: str | None = None) -> Image.Image:
    """`avoid`: where a title band sits (top, bottom): the mark moves to the other edge
    rather than over the title."""
    if avoid and position.split("_")[0] == avoid:
        position = position.replace(avoid, "top" if avoid == "bottom" else "bottom", 1)
    im = ctx.image(image).convert("RGB")
    block = watermark_block(ctx, im.size, text, position)
    # Placed by the letters, the outline around them reaching into the margin.
    outline = block.stroke
    x, y = _place(position, im.size, (block.width - 2 * outline, block.ink_height - 2 * outline),
                  max(4, min(im.size) // 40))
    alpha = round(255 * opacity)
    draw_block(im, block, (x - outline, y - outline - block.ink_top), (255, 255, 255, alpha),
               stroke_fill=(0, 0, 0, alpha))
    return im


# --- output -----------------------------------------------------------------------------

def metadata(ctx: Context) -> dict[str, Any]:
    """What a saved image carries: enough to make it again."""
    job = ctx.job
    seeds = [n.inputs["seed"] for n in job.nodes if OPS[n.op].modes] if job else []
    return {"genbot": VERSION, "template": job and job.template, "row": job and job.row,
            "batch": ctx.batch_id, "params": job and job.params, "seeds": seeds,
            "models": sorted(set(ctx.used_models)), "workflow": job and encode(job)}


@op(output="path")
def save(ctx: Context, image: ImageInput, name: str, format: str = "png") -> str:
    im = ctx.image(image)
    meta = metadata(ctx)
    buf = io.BytesIO()
    if format == "png":
        info = PngImagePlugin.PngInfo()
        info.add_itxt("genbot", json.dumps(meta, ensure_ascii=False, separators=(",", ":")))
        info.add_text("Software", f"genbot {VERSION}")
        im.save(buf, "PNG", pnginfo=info)
    else:
        exif = Image.Exif()
        exif[0x0131] = f"genbot {VERSION}"  # Software
        # ImageDescription is ASCII: escaped JSON still reads back exactly.
        exif[0x010E] = json.dumps(meta, separators=(",", ":"))
        im.save(buf, "JPEG" if format == "jpg" else "WEBP", quality=95, exif=exif)
    return ctx.store.write(f"{batch_folder(ctx.batch_id)}/{name}", buf.getvalue())


def read_metadata(path: Path) -> dict[str, Any] | None:
    """The genbot metadata of a saved image, or None when it has none."""
    with Image.open(path) as im:
        raw = im.info.get("genbot") or im.getexif().get(0x010E)
    return json.loads(raw) if raw else None
