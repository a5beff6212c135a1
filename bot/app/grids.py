"""A sweep's labelled grids: per sheet row, its images with one swept value across and one
down, the values in the headers — AUTOMATIC1111's X/Y plot, as one PNG per grid.

Which axes: those the sweep names for its grid (`--grid KEY1,KEY2`), else its first two;
a third axis, and each seed of `--seeds`, makes one grid per value ("page"), so within a
grid the seed is the same and only the swept values differ. A cell is the job's own file
scaled to fit; an image that failed or cannot be read is a grey card. The grid keeps
within MAX_SIDE pixels a side (chat previews and DingTalk's limits), shrinking its cells
as it must; past MOST values across or down it is split into several grids. Each PNG
carries its layout as a text chunk (`genbot-grid`: the headers' text and boxes, each
cell's job and box), for tests and tools to read.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, PngImagePlugin

from bot.app.contact import placeholder, thumbnail
from storage.files import FileStore, grids_folder
from storage.records import Batch, Job, Status
from templates.binding import as_text
from templates.fonts import font_sizes
from templates.text import draw, lay_out

MAX_SIDE = 2048  # pixels, of a whole grid: what chat previews show whole, quickly encoded
CELL_MAX, CELL_MIN = 512, 96  # pixels, of a cell's side
TITLE = 48  # the title's height
HEADER_MIN, HEADER_MAX = 40, 96  # the column headers' height (the row headers: 4x as wide)
PAD = 4
MOST = 16  # values across or down one grid; more are split into several grids
SEED = "seed"  # the name of the seed number among a sweep job's axes


@dataclass
class Grid:
    """One grid: a row of the sheet, one page of the other axes; its cells by (x, y)."""
    row: int
    page: dict[str, Any]  # the values of the axes not across or down (the seed, a 3rd axis)
    x: str | None
    y: str | None
    xs: list[Any] = field(default_factory=list)
    ys: list[Any] = field(default_factory=list)
    cells: dict[tuple[int, int], Job] = field(default_factory=dict)


def axes_of(batch: Batch) -> tuple[str | None, str | None]:
    """The grid's axes (across, down): the sweep's --grid, else its first two varied
    values, else its seeds across."""
    sweep = batch.meta.get("sweep") or {}
    chosen = list(sweep.get("grid") or sweep.get("axes") or [])
    if not chosen and int(sweep.get("seeds") or 1) > 1:
        chosen = [SEED]
    return (chosen[0] if chosen else None), (chosen[1] if len(chosen) > 1 else None)


def grids_of(batch: Batch, jobs: list[Job]) -> list[Grid]:
    """The batch's grids, in sheet order and the order values were swept."""
    across, down = axes_of(batch)
    found: dict[tuple[int, str], Grid] = {}
    for job in sorted(jobs, key=lambda j: j.id):
        axes = job.workflow.get("axes") or {}
        if not axes:
            continue
        page = {k: v for k, v in axes.items() if k not in (across, down)}
        grid = found.setdefault((job.row, json.dumps(page, sort_keys=True, default=str)),
                                Grid(job.row, page, across, down))
        x = _index(grid.xs, axes.get(across)) if across else 0
        y = _index(grid.ys, axes.get(down)) if down else 0
        grid.cells[x, y] = job
    return list(found.values())


def split(grid: Grid, most: int = MOST) -> list[Grid]:
    """A grid of more than `most` values across or down, as grids of at most `most` each
    way (each cell still big enough to see at chat preview size)."""
    parts = []
    for i0 in range(0, max(1, len(grid.xs)), most):
        for j0 in range(0, max(1, len(grid.ys)), most):
            part = Grid(grid.row, grid.page, grid.x, grid.y, grid.xs[i0:i0 + most],
                        grid.ys[j0:j0 + most])
            part.cells = {(i - i0, j - j0): job for (i, j), job in grid.cells.items()
                          if i0 <= i < i0 + most and j0 <= j < j0 + most}
            if part.cells:
                parts.append(part)
    return parts


def _index(values: list[Any], value: Any) -> int:
    if value not in values:
        values.append(value)
    return values.index(value)


def render(store: FileStore, grid: Grid, *, font: str = "", title: str = "") -> bytes:
    """The grid as PNG bytes, its layout in the `genbot-grid` text chunk."""
    cols, rows = max(1, len(grid.xs)), max(1, len(grid.ys))
    # Headers grow with the grid, so they stay legible when a chat shrinks it to preview.
    header = max(HEADER_MIN, min(HEADER_MAX, MAX_SIDE // 24))
    label = header * 4 if grid.y else 0
    cell = max(CELL_MIN, min(CELL_MAX, (MAX_SIDE - label) // cols,
                             (MAX_SIDE - header - TITLE) // rows))
    width, height = label + cols * cell, TITLE + header + rows * cell
    size = header * 9 // 20  # the headers' text, in pixels
    sheet = Image.new("RGB", (width, height), "white")
    layout: dict[str, Any] = {"row": grid.row, "page": grid.page, "x": grid.x, "y": grid.y,
                              "headers": [], "cells": []}

    def text(words: str, box: tuple[int, int, int, int], size: int) -> None:
        left, top, w, h = box
        block = lay_out(words, font_sizes(font, words), (w - 2 * PAD, h - 2 * PAD), size,
                        min_size=10, align="center")
        draw(sheet, block, (left + (w - block.width) // 2, top + (h - block.height) // 2),
             "black")
        layout["headers"].append({"text": words, "box": list(box)})

    text(title, (0, 0, width, TITLE), 30)
    for i, value in enumerate(grid.xs if grid.x else []):
        text(f"{grid.x} = {as_text(value)}", (label + i * cell, TITLE, cell, header), size)
    for j, value in enumerate(grid.ys if grid.y else []):
        text(f"{grid.y} = {as_text(value)}", (0, TITLE + header + j * cell, label, cell), size)
    lines = ImageDraw.Draw(sheet)
    for (i, j), job in sorted(grid.cells.items()):
        left, top = label + i * cell, TITLE + header + j * cell
        picture = _picture(store, job, cell - 2 * PAD, font)
        sheet.paste(picture, (left + (cell - picture.width) // 2,
                              top + (cell - picture.height) // 2))
        lines.rectangle((left, top, left + cell - 1, top + cell - 1), outline="#d0d0d0")
        layout["cells"].append({"job": job.id, "x": i, "y": j,
                                "box": [left, top, cell, cell],
                                "image": [picture.width, picture.height]})
    info = PngImagePlugin.PngInfo()
    info.add_text("genbot-grid", json.dumps(layout, ensure_ascii=False, default=str))
    buf = io.BytesIO()
    sheet.save(buf, "PNG", pnginfo=info, compress_level=1)  # (level 6: 3x the time, -10 %)
    return buf.getvalue()


def _picture(store: FileStore, job: Job, side: int, font: str) -> Image.Image:
    path: Path | None = None
    if job.status == Status.SUCCEEDED and job.outputs:
        try:
            path = store.path(job.outputs[0])
        except ValueError:
            path = None
    found = thumbnail(path, side) if path is not None else None
    if found is None:
        return placeholder(path or Path(f"row {job.row} · {job.status}"), side, font)
    if found.width < side and found.height < side:  # small images shown as big as fits
        scale = side / max(found.width, found.height)
        found = found.resize((max(1, round(found.width * scale)),
                              max(1, round(found.height * scale))), Image.Resampling.LANCZOS)
    return found


def write_grids(store: FileStore, batch: Batch, jobs: list[Job], *, font: str = "") -> list[str]:
    """Every grid of a sweep batch, written into its grids folder; their paths (none for
    a batch that is no sweep)."""
    from bot.messages import say
    lang = batch.meta.get("lang", "en")
    paths = []
    for n, grid in enumerate([p for g in grids_of(batch, jobs) for p in split(g)], 1):
        page = " · ".join(f"{k} {as_text(v)}" for k, v in grid.page.items())
        title = say("grid_title", lang, row=grid.row, page=f" · {page}" if page else "")
        paths.append(store.write(f"{grids_folder(batch.id)}/grid_{n}_row{grid.row}.png",
                                 render(store, grid, font=font, title=title)))
    return paths
