"""Cutting a product out of its photo with a background-removal model (an .onnx file:
BiRefNet, RMBG-2.0, rembg's U²-Net), for a template's `keep` when the photo has no
transparency and no mask column says where the product is.

The model runs on onnxruntime — on a CUDA GPU where onnxruntime has one, else on the CPU —
not on torch: these models ship as ONNX, and a cut-out per product photo is small beside a
generation. Models of this kind read an RGB picture at their own size, normalised as
ImageNet's (the mean and spread every one of these was trained with), and give one map,
higher where the foreground is: probabilities, or logits (then a sigmoid). The map is
stretched to 0–255 (as rembg does) and resized to the photo.

A batch keeps one product photo over many rows (every row of a SKU, every cell of a
sweep, every action on its images): each photo is cut out once per executor, and its mask
reused (MASKS of them, by the photo's pixels and the model file as it is now).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
SIDE = 1024  # a model whose input size is left open reads the photo at this size

MASKS = 32  # masks kept (a megapixel photo's takes 1 MB)

_SESSIONS: dict[str, tuple[int, Any]] = {}  # model -> (its file's mtime, its session)
_MASKS: OrderedDict[tuple[str, int, str], Image.Image] = OrderedDict()
_LOCK = threading.Lock()


class MattingError(Exception):
    """The model cannot be read or run: one sentence naming it."""


def cut_out(model: Path, photo: Image.Image) -> Image.Image:
    """Where the product is in `photo`: an "L" mask of its size, white on the product
    (made once per photo and model: see MASKS)."""
    try:
        stamp = model.stat().st_mtime_ns
    except OSError:
        stamp = 0  # (then _session says what is wrong with it)
    key = (str(model), stamp, f"{photo.mode}{photo.size}" +
           hashlib.blake2b(photo.tobytes(), digest_size=16).hexdigest())
    with _LOCK:
        if key in _MASKS:
            _MASKS.move_to_end(key)
            return _MASKS[key].copy()
    mask = _run(model, photo)
    with _LOCK:
        _MASKS[key] = mask
        while len(_MASKS) > MASKS:
            _MASKS.popitem(last=False)
    return mask.copy()


def _run(model: Path, photo: Image.Image) -> Image.Image:
    session = _session(model)
    wanted = session.get_inputs()[0]
    height, width = (d if isinstance(d, int) and d > 0 else SIDE for d in wanted.shape[2:4])
    pixels = np.asarray(photo.convert("RGB").resize((width, height), Image.Resampling.BILINEAR),
                        dtype=np.float32) / 255.0
    batch = ((pixels - MEAN) / STD).transpose(2, 0, 1)[None].astype(np.float32)
    try:
        found = np.asarray(session.run(None, {wanted.name: batch})[0], dtype=np.float32)
    except Exception as e:  # noqa: BLE001 - onnxruntime's own errors, said with the model
        raise MattingError(f"the background-removal model {model.name} could not run: "
                           f"{type(e).__name__}: {str(e)[:200]}") from None
    found = found.reshape(found.shape[-2:])
    if found.min() < 0 or found.max() > 1:  # logits
        found = (1 / (1 + np.exp(-found))).astype(np.float32)
    low, high = float(found.min()), float(found.max())
    scaled = (found - low) / (high - low) if high > low else np.zeros_like(found)
    return Image.fromarray((scaled * 255).round().astype(np.uint8), "L").resize(
        photo.size, Image.Resampling.BILINEAR)


def _session(model: Path) -> Any:
    """The model's inference session, made once per executor and model file (again when
    the file is replaced; GPU first, where there is one to onnxruntime)."""
    import onnxruntime
    key = str(model)
    try:
        stamp = model.stat().st_mtime_ns
    except OSError:
        stamp = 0
    with _LOCK:
        if _SESSIONS.get(key, (None,))[0] != stamp:
            available = onnxruntime.get_available_providers()
            providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                         if p in available]
            try:
                _SESSIONS[key] = stamp, onnxruntime.InferenceSession(key, providers=providers)
            except Exception as e:  # noqa: BLE001 - a damaged or foreign file, said plainly
                raise MattingError(f"{model}: not a model onnxruntime can load "
                                   f"({type(e).__name__}: {str(e)[:200]})") from None
        return _SESSIONS[key][1]
