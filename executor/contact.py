"""A contact sheet: every image of a batch as a captioned thumbnail grid, one PNG."""

from __future__ import annotations

import io
import math
from pathlib import Path

from PIL import Image, ImageDraw

from executor.ops.image import load_font

CELL = 256


def contact_sheet(images: list[tuple[Path, str]], *, font: str = "", columns: int = 0) -> bytes:
    """PNG bytes: each (image file, caption) as a thumbnail with its caption below."""
    if not images:
        raise ValueError("a contact sheet needs at least one image")
    cols = columns or min(len(images), max(1, math.ceil(math.sqrt(len(images)))))
    rows = math.ceil(len(images) / cols)
    caption_h = 28
    sheet = Image.new("RGB", (cols * CELL, rows * (CELL + caption_h)), "white")
    draw = ImageDraw.Draw(sheet)
    text_font = load_font(font, 16)
    for i, (path, caption) in enumerate(images):
        x, y = (i % cols) * CELL, (i // cols) * (CELL + caption_h)
        with Image.open(path) as im:
            thumb = im.convert("RGB")
            thumb.thumbnail((CELL - 8, CELL - 8))
        sheet.paste(thumb, (x + (CELL - thumb.width) // 2, y + (CELL - thumb.height) // 2))
        while caption and text_font.getlength(caption) > CELL - 8:
            caption = caption[:-2] + "…"
        draw.text((x + 4, y + CELL + 4), caption, font=text_font, fill="black")
    buf = io.BytesIO()
    sheet.save(buf, "PNG")
    return buf.getvalue()
