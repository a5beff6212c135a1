"""The pictures an example sheet names, so an example genbot hands out runs as it is.

A template's image columns give example values such as `assets/bottle.png`. Where the
team keeps that file in its assets folder, that file is the picture; otherwise genbot
draws one (the two pictures the shipped templates name, or a card showing the name), so
`genbot template example` can write the pictures beside the sheet and a sheet sent back
from chat's `/template` finds them. Drawn here with pillow: nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import io
from functools import cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from bot.intake.images import Attachments, folder_attachments, relative_name

if TYPE_CHECKING:
    from PIL.Image import Image

    from templates.graph import Template


def picture_names(template: Template) -> list[str]:
    """The relative file names the template's example rows give its picture columns."""
    names: list[str] = []
    for p in template.params.values():
        if not p.picture:
            continue
        values = p.example if isinstance(p.example, list) else [p.example]
        for value in values:
            name = relative_name(value) if isinstance(value, str) and "://" not in value else None
            if name and name not in names:
                names.append(name)
    return names


async def example_pictures(template: Template, assets_dir: Path) -> dict[str, bytes]:
    """Name -> PNG bytes for every picture the template's examples name."""
    assets = folder_attachments(assets_dir)
    out: dict[str, bytes] = {}
    for name in picture_names(template):
        found = await assets(name)
        out[name] = found if found is not None else drawn(name)
    return out


def example_attachments(template: Template) -> Attachments:
    """genbot's drawing for a name the template's examples give, asked for last (after
    the files sent with a sheet and the assets folder): an example sheet sent back as
    it is runs. The intake report says when one was used."""
    names = set(picture_names(template))

    async def get(name: str) -> bytes | None:
        return await asyncio.to_thread(drawn, name) if name in names else None
    return get


@cache
def drawn(name: str) -> bytes:
    """genbot's own picture for an example name (drawn once: the same every time)."""
    stem = PurePosixPath(name).stem.lower()
    img = DRAWINGS[stem]() if stem in DRAWINGS else _card(name)
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def _bottle() -> Image:
    from PIL import Image, ImageDraw, ImageFilter
    img = Image.new("RGB", (512, 512))
    draw = ImageDraw.Draw(img)
    for y in range(512):  # a warm backdrop gradient
        draw.line([(0, y), (511, y)], fill=(235 - y // 6, 200 - y // 5, 160 - y // 6))
    draw.rounded_rectangle([176, 170, 336, 440], radius=36, fill=(40, 90, 120))
    draw.rectangle([226, 110, 286, 175], fill=(40, 90, 120))
    draw.rectangle([216, 80, 296, 112], fill=(180, 150, 60))
    draw.ellipse([200, 230, 250, 330], fill=(120, 180, 210))  # a highlight
    return img.filter(ImageFilter.GaussianBlur(1))


def _chair() -> Image:
    from PIL import Image, ImageDraw
    img = Image.new("RGB", (512, 512), (220, 222, 226))
    draw = ImageDraw.Draw(img)
    wood = (150, 100, 60)
    draw.rectangle([150, 90, 360, 290], outline=wood, width=18)       # back
    draw.rectangle([130, 280, 380, 320], fill=wood)                   # seat
    for x in (140, 350):
        draw.rectangle([x, 320, x + 20, 470], fill=wood)              # legs
    draw.polygon([(130, 320), (380, 320), (400, 340), (110, 340)], fill=(120, 80, 50))
    return img


def _card(name: str) -> Image:
    """A plain card showing the name: an example picture a template names but nobody drew."""
    from PIL import Image, ImageDraw
    img = Image.new("RGB", (512, 512), (200, 205, 215))
    draw = ImageDraw.Draw(img)
    draw.rectangle([24, 24, 487, 487], outline=(90, 100, 120), width=6)
    draw.text((48, 240), f"example: {name}"[:60], fill=(40, 45, 60))
    return img


DRAWINGS = {"bottle": _bottle, "chair": _chair}
