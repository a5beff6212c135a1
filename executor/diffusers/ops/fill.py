"""`fill`: repaint part of a picture on its model's inpaint pipeline — the region a mask
marks (a region edit: /repaint) and the margins a canvas grows by (an extend: /extend 3
9:16) — with every pixel outside them the picture's own, byte for byte.

The pipeline sees the whole canvas: the picture, its new margins filled by stretching its
edge (a start the model paints over, in the border's colours), and where to paint (white).
Width and height are rounded up to the model's multiples by painting a little more on
the right and at the bottom, which is cropped off again. What it made is then composited
over the picture by the region faded inward (`feather` px), so outside the region every
pixel is copied from the picture rather than decoded again by the VAE: a product outside
the mask, and the whole original of an extend, come back unchanged.

A region may also be named in words ("the bottle", "瓶子"): the segmentation model the
step names (`segmenter`, a CLIPSeg: executor.models.segmentation) finds it in the picture.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from PIL import Image

from executor.diffusers.ops.base import Context, ImageInput, OpError, op
from executor.diffusers.ops.diffusion import (
    model_steps,
    multiple,
    negative_prompt,
    preview_decoder,
    step_callback,
)
from executor.diffusers.ops.image import inward
from templates.families import profile
from templates.signatures import OPS
from templates.size_rules import grown, same_shape

MODE = OPS["fill"].mode_of({})


@op(device=True)
def fill(ctx: Context, image: ImageInput, model: str, seed: int, prompt: str = "",
         mask: ImageInput | None = None, region: str = "", segmenter: str | None = None,
         left: int = 0, right: int = 0, top: int = 0, bottom: int = 0,
         aspect: str | None = None, negative: str = "", steps: int | None = None,
         guidance: float | None = None, strength: float = 1.0, feather: int = 8,
         loras: list[dict[str, Any]] | None = None, if_needed: bool = False) -> Image.Image:
    import torch
    picture = ctx.image(image).convert("RGB")
    painted = _painted(ctx, mask, picture.size)
    found = _found(ctx, picture, region, segmenter) if region.strip() else None
    where = painted if found is None else found if painted is None else \
        Image.fromarray(np.maximum(np.asarray(painted), np.asarray(found)))
    margins = grown(picture.size, (left, right, top, bottom), aspect)
    if where is None and not any(margins) and if_needed:
        return picture  # (already of the aspect: a channel's extend has nothing to grow)
    if where is None and not any(margins):
        raise OpError("nothing to repaint: give a mask or a region in words, or margins or an "
                      "aspect to extend by")
    canvas, paint, new = extended(picture, where, margins)
    cache = ctx.models
    pipe = cache.pipeline(model, MODE)
    info = cache.units[model].info
    runs = profile(info.family)
    cache.use_loras(model, loras or [])
    ctx.used_models.extend([model, *(lora["name"] for lora in loras or [])])
    step = multiple(pipe)
    width, height = (math.ceil(v / step) * step for v in canvas.size)
    kwargs: dict[str, Any] = {
        "image": padded(canvas, width, height, "edge"),
        "mask_image": padded(paint, width, height, 255),
        "prompt": prompt, "height": height, "width": width, "strength": float(strength),
        "num_inference_steps": model_steps(steps or info.steps, cache.units[model]),
        runs.cfg: guidance if guidance is not None else info.guidance,
        "generator": torch.Generator("cpu").manual_seed(int(seed)),
        "callback_on_step_end": step_callback(ctx, preview_decoder(ctx, model, pipe, width,
                                                                   height))}
    kwargs.update({k: v[0] for k, v in negative_prompt(runs, model, [negative]).items()})
    made = pipe(**kwargs).images[0]
    if made.size != (width, height):  # (a pipeline that keeps its own size: resampled)
        made = made.resize((width, height), Image.Resampling.LANCZOS)
    return kept_outside(canvas, made.crop((0, 0, *canvas.size)), paint, new, feather)


def _found(ctx: Context, picture: Image.Image, words: str,
           segmenter: str | None) -> Image.Image:
    """The region `words` name in the picture (0/255), found by the step's segmenter."""
    from executor.models import segmentation
    if not segmenter:
        raise OpError("a region in words needs a segmentation model: set [templates] "
                      "segmentation_model (a CLIPSeg folder in [models])")
    info = ctx.models.registry.get(segmenter, "segmentation")
    try:
        found = segmentation.region(info.path, picture, words.strip())
    except segmentation.SegmentationError as e:
        raise OpError(str(e)) from None
    ctx.used_models.append(segmenter)
    return found


def _painted(ctx: Context, mask: ImageInput | None, size: tuple[int, int]) -> Image.Image | None:
    """The mask as 0/255 at the picture's size (one of its proportions resampled to it);
    None: no mask."""
    if mask is None:
        return None
    region = ctx.image(mask).convert("L")
    if region.size != size:
        w, h = region.size
        if not same_shape(region.size, size):
            raise OpError(f"the mask is {w}x{h} and the picture {size[0]}x{size[1]}: a mask "
                          "of the picture's proportions is needed")
        region = region.resize(size, Image.Resampling.NEAREST)
    region = region.point(lambda v: 255 if v >= 128 else 0)
    if region.getbbox() is None:
        raise OpError("the mask marks nothing to repaint (it is black all over)")
    return region


def extended(picture: Image.Image, region: Image.Image | None,
             margins: tuple[int, int, int, int]) -> tuple[Image.Image, Image.Image, Image.Image]:
    """The canvas (the picture with its edge stretched over the margins), where to paint
    (the region and the margins, white) and the margins alone (white), all at the grown
    size."""
    left, right, top, bottom = margins
    pixels = np.asarray(picture)
    canvas = Image.fromarray(np.pad(pixels, ((top, bottom), (left, right), (0, 0)), "edge"))
    new = Image.new("L", canvas.size, 255)
    new.paste(0, (left, top, left + picture.width, top + picture.height))
    paint = new.copy()
    if region is not None:
        paint.paste(region, (left, top))
        paint = Image.fromarray(np.maximum(np.asarray(paint), np.asarray(new)))
    return canvas, paint, new


def kept_outside(canvas: Image.Image, made: Image.Image, paint: Image.Image,
                 new: Image.Image, feather: int) -> Image.Image:
    """What the model made where it was to paint, the canvas (the picture) everywhere
    else: exactly, since the weight there is 0. The region's edge fades inward over
    `feather` px; the new margins are the model's alone (nothing was there before)."""
    weight = np.maximum(np.asarray(inward(paint, feather)), np.asarray(new))
    return Image.composite(made, canvas, Image.fromarray(weight))


def padded(im: Image.Image, width: int, height: int, fill: str | int) -> Image.Image:
    """`im` grown on the right and at the bottom to width x height: its edge stretched
    ("edge"), or a flat value (a mask's 255: painted, then cropped away)."""
    if im.size == (width, height):
        return im
    pad = ((0, height - im.height), (0, width - im.width)) + ((0, 0),) * (im.mode == "RGB")
    pixels = np.asarray(im)
    out = np.pad(pixels, pad, "edge") if fill == "edge" else \
        np.pad(pixels, pad, "constant", constant_values=fill)
    return Image.fromarray(out)
