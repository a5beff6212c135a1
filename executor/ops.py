"""The ops: one small function per op in executor.signatures, registered by name.

Pillow and numpy only; `generate` and a model-backed `upscale` live in
executor.generation, which imports torch when first called. Every op takes the
run's Context first, then exactly the inputs its signature declares (checked at
import), and returns its output: one value, or a dict when the op has several.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont, PngImagePlugin

from executor.signatures import OPS
from storage.files import FileStore

BUNDLED_FONT = Path(__file__).resolve().parent / "fonts" / "wqy-microhei.ttc"
VERSION = "0.1.0"


class OpError(Exception):
    """A problem with a job's own inputs: retrying the same job would fail the same way."""


@dataclass
class Context:
    """What ops may use while running one job (or one micro-batch of jobs)."""
    store: FileStore
    models: Any = None  # executor.cache.ModelCache; None where no op needs a model
    font: str = ""
    upscaler: str = ""
    # Filled per job by the runner:
    batch_id: int = 0
    workflow: dict[str, Any] = field(default_factory=dict)
    used_models: list[str] = field(default_factory=list)
    on_step: Callable[[int, int], bool] | None = None  # (step, total) -> stop?

    def image(self, value: Any) -> Image.Image:
        """An image input: another node's output, or a file-store path from the sheet."""
        if isinstance(value, Image.Image):
            return value
        if isinstance(value, str):
            try:
                with Image.open(self.store.path(value)) as im:
                    return im.convert("RGB")
            except (OSError, ValueError) as e:
                raise OpError(f"cannot read input image {value}: {e}") from None
        raise OpError(f"expected an image, got {type(value).__name__}")


REGISTRY: dict[str, Callable[..., Any]] = {}


def op(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Register an op under its function name (trailing _ dropped)."""
    REGISTRY[fn.__name__.rstrip("_")] = fn
    return fn


# --- geometry ---------------------------------------------------------------------------

def _ratio(aspect: str) -> float:
    w, h = (int(x) for x in aspect.split(":"))
    return w / h


@op
def crop(ctx: Context, image, aspect: str) -> Image.Image:
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


@op
def resize(ctx: Context, image, size=None, width=None, scale=None) -> Image.Image:
    im = ctx.image(image)
    given = [n for n, v in (("size", size), ("width", width), ("scale", scale)) if v is not None]
    if len(given) != 1:
        raise OpError("resize takes exactly one of size, width or scale"
                      + (f" (got {', '.join(given)})" if given else ""))
    w, h = im.size
    if size is not None:
        target = (int(size[0]), int(size[1]))
    elif width is not None:
        target = (int(width), max(1, round(h * width / w)))
    else:
        target = (max(1, round(w * scale)), max(1, round(h * scale)))
    return im if target == im.size else im.resize(target, Image.Resampling.LANCZOS)


@op
def pad(ctx: Context, image, size, color: str = "auto") -> Image.Image:
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


@op
def upscale(ctx: Context, image, scale: float = 2.0, model=None) -> Image.Image:
    im = ctx.image(image)
    name = model or ctx.upscaler
    target = (round(im.width * scale), round(im.height * scale))
    if name:
        from executor.generation import upscale_with_model
        im = upscale_with_model(ctx, name, im)
        ctx.used_models.append(name)
    return im if im.size == target else im.resize(target, Image.Resampling.LANCZOS)


# --- analysis ---------------------------------------------------------------------------

@op
def canny(ctx: Context, image, low: int = 100, high: int = 200) -> Image.Image:
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
        c = c / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(c) for c in color)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def _hex(color: tuple[int, ...]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*color[:3])


def _rgb(color: str) -> tuple[int, int, int]:
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


def _swatches(im: Image.Image, n: int = 6) -> list[tuple[int, int, int]]:
    """The image's main colours, most frequent first."""
    small = im.convert("RGB").copy()
    small.thumbnail((128, 128))
    q = small.quantize(colors=n, method=Image.Quantize.MEDIANCUT)
    pal = q.getpalette()
    counts = sorted(q.getcolors(), reverse=True)
    return [tuple(pal[i * 3:i * 3 + 3]) for _, i in counts]


def _dominant(im: Image.Image) -> str:
    return _hex(_swatches(im)[0])


def _contrasting(background: tuple[int, int, int], candidates) -> str:
    """A swatch that reads on `background` (WCAG ratio 4.5), else black or white."""
    for c in candidates:
        if contrast_ratio(c, background) >= 4.5:
            return _hex(c)
    black, white = (0, 0, 0), (255, 255, 255)
    return _hex(max((black, white), key=lambda c: contrast_ratio(c, background)))


@op
def palette(ctx: Context, image) -> dict[str, str]:
    swatches = _swatches(ctx.image(image))
    return {"dominant": _hex(swatches[0]), "contrast": _contrasting(swatches[0], swatches[1:])}


# --- text -------------------------------------------------------------------------------

@cache
def _font_file(path: str) -> str:
    chosen = Path(path) if path else BUNDLED_FONT
    if not chosen.is_file():
        raise OpError(f"font not found: {chosen} (set [executor] font to a .ttf/.otf file)")
    return str(chosen)


def load_font(path: str, size: int) -> ImageFont.FreeTypeFont:
    """`path`, or the bundled CJK-and-Latin font when it is empty."""
    return ImageFont.truetype(_font_file(path), size)


def _font(ctx: Context, size: int) -> ImageFont.FreeTypeFont:
    return load_font(ctx.font, size)


def _fit(ctx: Context, text: str, max_width: int, size: int) -> ImageFont.FreeTypeFont:
    """The largest font up to `size` whose rendering of `text` fits `max_width`."""
    while size > 6:
        font = _font(ctx, size)
        if font.getlength(text) <= max_width:
            return font
        size = max(6, int(size * 0.9))
    return _font(ctx, 6)


def _place(position: str, box: tuple[int, int], inner: tuple[int, int], margin: int):
    (W, H), (w, h) = box, inner
    x = {"left": margin, "right": W - w - margin}.get(position.split("_")[-1], (W - w) // 2)
    if position.startswith("top"):
        y = margin
    elif position.startswith("bottom"):
        y = H - h - margin
    else:
        y = (H - h) // 2
    return x, y


@op
def text(ctx: Context, image, text: str, position: str = "bottom", color: str = "auto",
         band: str = "auto", font_size=None) -> Image.Image:
    im = ctx.image(image).copy()
    W, H = im.size
    font = _fit(ctx, text, int(W * 0.9), int(font_size or max(12, H // 14)))
    left, top, right, bottom = font.getbbox(text)
    band_h = int((bottom - top) * 1.8) + 2
    _, band_y = _place(position, (W, H), (W, band_h), 0)
    if band == "auto":  # the image's main colour that stands out from what the band covers
        under = _rgb(_dominant(im.crop((0, band_y, W, band_y + band_h))))
        band = next((_hex(c) for c in _swatches(im) if contrast_ratio(c, under) >= 1.6),
                    _hex(under))
    if color == "auto":
        color = _contrasting(_rgb(band), _swatches(im))
    draw = ImageDraw.Draw(im)
    draw.rectangle((0, band_y, W, band_y + band_h), fill=band)
    x, _ = _place(position, (W, band_h), (right - left, 0), max(4, W // 40))
    y = band_y + (band_h - (bottom - top)) // 2 - top
    draw.text((x - left, y), text, font=font, fill=color)
    return im


@op
def watermark(ctx: Context, image, text: str, position: str = "bottom_right",
              opacity: float = 0.35) -> Image.Image:
    im = ctx.image(image).convert("RGBA")
    font = _fit(ctx, text, int(im.width * 0.5), max(10, min(im.size) // 18))
    left, top, right, bottom = font.getbbox(text)
    layer = Image.new("RGBA", im.size, (0, 0, 0, 0))
    x, y = _place(position, im.size, (right - left, bottom - top), max(4, min(im.size) // 40))
    alpha = round(255 * opacity)
    ImageDraw.Draw(layer).text((x - left, y - top), text, font=font, fill=(255, 255, 255, alpha),
                               stroke_width=max(1, font.size // 16),
                               stroke_fill=(0, 0, 0, alpha))
    return Image.alpha_composite(im, layer).convert("RGB")


# --- generation (torch, loaded on first use) ---------------------------------------------

@op
def generate(ctx: Context, **inputs) -> Image.Image:
    from executor.generation import generate_batch
    return generate_batch(ctx, [inputs])[0]


# --- output -----------------------------------------------------------------------------

def metadata(ctx: Context) -> dict[str, Any]:
    """What a saved image carries: enough to make it again."""
    wf = ctx.workflow
    seeds = [n["inputs"]["seed"] for n in wf.get("nodes", []) if n["op"] == "generate"]
    return {"genbot": VERSION, "template": wf.get("template"), "row": wf.get("row"),
            "batch": ctx.batch_id, "params": wf.get("params"), "seeds": seeds,
            "models": sorted(set(ctx.used_models)), "workflow": wf}


@op
def save(ctx: Context, image, name: str, format: str = "png") -> str:
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
    return ctx.store.write(f"outputs/batch_{ctx.batch_id}/{name}", buf.getvalue())


def read_metadata(path: Path) -> dict[str, Any] | None:
    """The genbot metadata of a saved image, or None when it has none."""
    with Image.open(path) as im:
        raw = im.info.get("genbot") or im.getexif().get(0x010E)
    return json.loads(raw) if raw else None


def _check_registry() -> None:
    """Every op declared in signatures has an implementation taking exactly its inputs."""
    import inspect
    if set(REGISTRY) != set(OPS):
        raise RuntimeError(f"ops without a signature or implementation: {set(REGISTRY) ^ set(OPS)}")
    for name, fn in REGISTRY.items():
        params = list(inspect.signature(fn).parameters.values())[1:]
        if any(p.kind is p.VAR_KEYWORD for p in params):
            continue
        if [p.name for p in params] != list(OPS[name].inputs):
            raise RuntimeError(f"op {name} does not take exactly the inputs of its signature")


_check_registry()
