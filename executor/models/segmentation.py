"""Finding a region of a picture named in words ("the bottle", "瓶子") for a repaint, with
a CLIPSeg model (transformers' CLIPSegForImageSegmentation: CIDAS/clipseg-rd64-refined).

CLIPSeg reads the picture at its own size (352 px) and the words, and gives one map of
logits; where their sigmoid passes THRESHOLD is the region (0.4: the cut-off its model card
and most tools use). The map is stretched to the picture and grown by a hundredth of its
shorter side, so the repaint covers the object's edge rather than stopping inside it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageFilter

THRESHOLD = 0.4

_MODELS: dict[str, tuple[int, Any, Any]] = {}  # folder -> (its config's mtime, model, processor)
_LOCK = threading.Lock()


class SegmentationError(Exception):
    """The model cannot be read, or the words found nothing: one sentence."""


def region(folder: Path, picture: Image.Image, words: str) -> Image.Image:
    """Where `words` are in `picture`: an "L" mask of its size, 255 inside, 0 outside."""
    import torch
    model, processor = _model(folder)
    inputs = processor(text=[words], images=[picture.convert("RGB")], padding=True,
                       truncation=True, return_tensors="pt")  # (CLIP reads 77 tokens)
    with torch.inference_mode():
        logits = model(**inputs).logits
    found = torch.sigmoid(logits.float()).reshape(logits.shape[-2:]).numpy()
    hard = Image.fromarray(np.where(found >= THRESHOLD, 255, 0).astype(np.uint8), "L")
    hard = hard.resize(picture.size, Image.Resampling.BILINEAR).point(
        lambda v: 255 if v >= 128 else 0)
    if hard.getbbox() is None:
        raise SegmentationError(f'"{words}" matched nothing in the picture: name it '
                                "otherwise, or paint the region")
    grow = max(1, round(min(picture.size) / 100))
    return hard.filter(ImageFilter.MaxFilter(2 * grow + 1))


def _model(folder: Path) -> tuple[Any, Any]:
    """The model and its processor, loaded once per executor and folder (again when its
    config.json is replaced)."""
    key = str(folder)
    try:
        stamp = (folder / "config.json").stat().st_mtime_ns
    except OSError:
        stamp = 0
    with _LOCK:
        if _MODELS.get(key, (None,))[0] != stamp:
            from transformers import CLIPSegForImageSegmentation, CLIPSegProcessor
            try:
                model = CLIPSegForImageSegmentation.from_pretrained(key, local_files_only=True)
                processor = CLIPSegProcessor.from_pretrained(key, local_files_only=True)
            except (OSError, ValueError) as e:
                raise SegmentationError(f"{folder}: not a CLIPSeg model transformers can load "
                                        f"({type(e).__name__}: {str(e)[:200]})") from None
            _MODELS[key] = stamp, model.eval(), processor
        return _MODELS[key][1], _MODELS[key][2]
