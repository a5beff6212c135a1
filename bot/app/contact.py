"""A contact sheet: every image of a batch as a captioned thumbnail grid, one PNG.

An output that is not a readable image — a video, an HTML page a ComfyUI workflow saved, a
PNG cut short, a file gone from the store — gets a grey placeholder card with its file
name instead of a thumbnail: the sheet still shows every row, and one odd file never
breaks a batch's summary. Captions are laid out by templates.text: any text fits one line,
cut with "…".
"""

from __future__ import annotations

import io
import logging
import math
from pathlib import Path

from PIL import Image, ImageDraw

from templates.fonts import font_sizes
from templates.text import draw, lay_out

CELL = 256
CAPTION_H = 28

log = logging.getLogger("genbot.contact")


def contact_sheet(images: list[tuple[Path, str]], *, font: str = "", columns: int = 0) -> bytes:
    """PNG bytes: each (image file, caption) as a thumbnail with its caption below."""
    if not images:
        raise ValueError("a contact sheet needs at least one image")
    cols = columns or min(len(images), max(1, math.ceil(math.sqrt(len(images)))))
    rows = math.ceil(len(images) / cols)
    sheet = Image.new("RGB", (cols * CELL, rows * (CELL + CAPTION_H)), "white")

    for i, (path, caption) in enumerate(images):
        x, y = (i % cols) * CELL, (i // cols) * (CELL + CAPTION_H)
        thumb = thumbnail(path, CELL - 8)
        if thumb is None:
            thumb = placeholder(path, CELL - 8, font)
        sheet.paste(thumb, (x + (CELL - thumb.width) // 2, y + (CELL - thumb.height) // 2))
        # one line at 16 px, its top where the old single line's was; cut with "…"
        block = lay_out(caption, font_sizes(font, caption), (CELL - 8, CAPTION_H - 4), 16,
                        min_size=16, one_line=True)
        draw(sheet, block, (x + 4, y + CELL + 4), "black")
    buf = io.BytesIO()
    sheet.save(buf, "PNG")
    return buf.getvalue()


def thumbnail(path: Path, side: int) -> Image.Image | None:
    """The image at `path` shrunk to fit `side` × `side`, or None when it cannot be read as
    one. Pillow says so in many ways (OSError for an unknown or truncated file, ValueError,
    SyntaxError and EOFError from some decoders, DecompressionBombError for one too large):
    any of them means no thumbnail, never a failed summary."""
    try:
        with Image.open(path) as im:
            im.draft("RGB", (side, side))  # a JPEG decodes at a fraction of its size
            thumb = im.convert("RGB")
    except Exception as e:  # noqa: BLE001 - whatever the decoder raised: no thumbnail
        log.warning("contact sheet: %s is not a readable image (%s: %s)", path.name,
                    type(e).__name__, e)
        return None
    thumb.thumbnail((side, side))
    return thumb


def placeholder(path: Path, side: int, font: str = "") -> Image.Image:
    """A grey card with the file's name: where an output that is no image would go."""
    card = Image.new("RGB", (side, side), "#e4e4e4")
    ImageDraw.Draw(card).rectangle((0, 0, side - 1, side - 1), outline="#a0a0a0", width=2)
    block = lay_out(path.name, font_sizes(font, path.name), (side - 24, side - 24), 18,
                    min_size=10, align="center")
    draw(card, block, ((side - block.width) // 2, (side - block.height) // 2), "#505050")
    return card
