"""Pictures of an image forming on the diffusers engine: the pipeline's latents at a
step, made into a small picture for a few milliseconds.

Two ways, the better one where it is set up:

- **a tiny VAE** (diffusers' `AutoencoderTiny`: TAESD for SD 1.x/2.x, TAESDXL, TAEF1 for
  FLUX, TAESD3), named for a model by `[models.X] preview = "taesd"`: a picture close to
  the finished image. It decodes the latents as the pipeline would if it were the
  pipeline's VAE (divided by its scaling factor, plus its shift);
- **colours straight from the latents** otherwise: a linear map from the latent channels
  to RGB, plus an offset, fitted once per VAE by encoding a few colour fields with the
  model's own VAE and solving least squares — no weights to pull and no table per family.
  One pixel per latent (8 or 16 px of the image), blurry: what a forming image needs.

The latents a step callback sees are in the pipeline's layout and space. Layout: (B, C, h,
w) for UNet pipelines, SD 3.5 and Z-Image; packed 2x2 patches (B, h/2·w/2, 4C) for FLUX
and Qwen-Image, unpacked with the pipeline's own `_unpack_latents` (Qwen-Image's is then
(B, C, 1, h, w)). Space: the VAE's latents normalised per channel (scaled, shifted, or by
a mean and deviation), which `_normalised` does to the fitting data too. A pipeline whose
latents are neither (FLUX.2 patchifies and batch-normalises them) gets no colours, told
once in the log: a preview never fails a job.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
from PIL import Image

log = logging.getLogger(__name__)

FIT_SIDE = 8  # latents per side of each colour field the colours are fitted on
FIT_FIELDS = 12  # colour fields: flat ones and smooth mixtures

Decode = Callable[[Any], list[Image.Image]]  # the step's latents -> one picture per image

_colours: weakref.WeakKeyDictionary[Any, tuple[torch.Tensor, torch.Tensor] | None] = \
    weakref.WeakKeyDictionary()  # a VAE -> its fitted colours (None: it has none)
_told: set[str] = set()  # models whose latents cannot be previewed, told once each


class Lazy:
    """A decoder made at its first use; what making it took (loading a tiny VAE, fitting
    colours) is set apart (`setup`), so it is not counted as the previews' running cost."""

    def __init__(self, make: Callable[[], Decode | None]):
        self.make: Callable[[], Decode | None] = make
        self.decode: Decode | None = None
        self.made, self.setup = False, 0.0

    def __call__(self, latents: Any) -> list[Image.Image]:
        if not self.made:
            started = time.perf_counter()
            self.decode, self.made = self.make(), True
            self.setup = time.perf_counter() - started
        return self.decode(latents) if self.decode is not None else []

    def take_setup(self) -> float:
        taken, self.setup = self.setup, 0.0
        return taken


def decoder(pipe: Any, model: str, width: int, height: int, tiny: Any = None) -> Decode | None:
    """How to picture this call's latents, or None where they cannot be pictured."""
    def unpacked(latents: torch.Tensor) -> torch.Tensor | None:
        if latents.ndim == 3 and hasattr(pipe, "_unpack_latents"):
            latents = pipe._unpack_latents(latents, height, width, pipe.vae_scale_factor)
        if latents.ndim == 5 and latents.shape[2] == 1:  # (B, C, frames=1, h, w)
            latents = latents[:, :, 0]
        return latents if latents.ndim == 4 else None

    if tiny is not None:
        scale = float(getattr(tiny.config, "scaling_factor", 1.0) or 1.0)
        shift = float(getattr(tiny.config, "shift_factor", 0.0) or 0.0)

        def by_tiny_vae(latents: torch.Tensor) -> list[Image.Image]:
            flat = unpacked(latents)
            if flat is None or flat.shape[1] != tiny.config.latent_channels:
                _cannot(model, f"its latents {tuple(latents.shape)} are not the tiny VAE's "
                        f"{tiny.config.latent_channels} channels")
                return []
            with torch.no_grad():
                made = tiny.decode(flat.to(tiny.device, tiny.dtype) / scale + shift).sample
            return _pictures((made + 1) / 2)
        return by_tiny_vae

    colours = colours_of(pipe.vae, model, int(pipe.vae_scale_factor))
    if colours is None:
        return None
    weights, offset = colours

    def by_colours(latents: torch.Tensor) -> list[Image.Image]:
        flat = unpacked(latents)
        if flat is None or flat.shape[1] != weights.shape[0]:
            _cannot(model, f"its latents {tuple(latents.shape)} are not its VAE's layout")
            return []
        rgb = torch.einsum("bchw,cr->brhw", flat.detach().float().cpu(), weights)
        pictures = _pictures(rgb + offset[None, :, None, None])
        side = max(width, height)  # a latent per 8 or 16 px: drawn up, smoothly
        return [p.resize((p.width * min(side, 256) // max(p.size),
                          p.height * min(side, 256) // max(p.size)), Image.Resampling.BILINEAR)
                for p in pictures]
    return by_colours


def colours_of(vae: Any, model: str, scale: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(weights C×3, offset 3): RGB in [0, 1] from the pipeline's latents, fitted on this VAE
    once (least squares over colour fields it encodes), or None where it cannot be.
    `scale`: pixels per latent (the pipeline's vae_scale_factor)."""
    if vae in _colours:
        return _colours[vae]
    try:
        found = _fit(vae, scale)
    except Exception as e:  # noqa: BLE001 - a VAE of a kind not foreseen: no previews
        _cannot(model, f"its VAE's colours could not be fitted: {type(e).__name__}: {e}")
        found = None
    _colours[vae] = found
    return found


def _fit(vae: Any, scale: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    side = FIT_SIDE * scale
    fields = _fields(FIT_FIELDS, side)  # (N, 3, side, side) in [0, 1]
    device = next(vae.parameters()).device
    pixels = (fields * 2 - 1).to(device, vae.dtype)
    with torch.no_grad():
        if _three_d(vae):  # Qwen-Image's video VAE: one frame
            latents = vae.encode(pixels[:, :, None]).latent_dist.mode()[:, :, 0]
        else:
            latents = vae.encode(pixels).latent_dist.mode()
    latents = _normalised(vae, latents.float()).cpu()
    if latents.ndim != 4:
        return None
    n, c, h, w = latents.shape
    target = torch.nn.functional.adaptive_avg_pool2d(fields, (h, w))  # the colour each covers
    x = torch.cat([latents.permute(0, 2, 3, 1).reshape(-1, c), torch.ones(n * h * w, 1)], 1)
    y = target.permute(0, 2, 3, 1).reshape(-1, 3)
    solution = torch.linalg.lstsq(x, y).solution  # (C + 1, 3)
    return solution[:c].contiguous(), solution[c].contiguous()


def _fields(n: int, side: int) -> torch.Tensor:
    """Colour fields to fit on: flat primaries and greys, then smooth random mixtures
    (the same every time: a fixed seed)."""
    g = torch.Generator().manual_seed(0)
    flat = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1], [0, 0, 0], [.5, .5, .5]],
                        dtype=torch.float32)[:n]
    fields = [c[:, None, None].expand(3, side, side) for c in flat]
    for _ in range(n - len(fields)):
        coarse = torch.rand(1, 3, 3, 3, generator=g)
        fields.append(torch.nn.functional.interpolate(coarse, size=(side, side), mode="bilinear",
                                                      align_corners=True)[0])
    return torch.stack(fields)


def _three_d(vae: Any) -> bool:
    """A video VAE (Qwen-Image's, Wan's design): it encodes frames, (B, 3, T, H, W)."""
    return hasattr(vae.config, "temperal_downsample")


def _normalised(vae: Any, latents: torch.Tensor) -> torch.Tensor:
    """The VAE's latents as its pipelines keep them between steps (the inverse of what
    they do before decoding)."""
    config = vae.config
    mean, std = getattr(config, "latents_mean", None), getattr(config, "latents_std", None)
    if mean is not None and std is not None:  # Qwen-Image: (z - mean) / std
        shape = (1, -1, 1, 1)
        return (latents - torch.tensor(mean).view(shape)) / torch.tensor(std).view(shape)
    shift = float(getattr(config, "shift_factor", 0.0) or 0.0)
    return (latents - shift) * float(getattr(config, "scaling_factor", 1.0) or 1.0)


def _pictures(rgb: torch.Tensor) -> list[Image.Image]:
    """(B, 3, h, w) in [0, 1] -> pictures."""
    array = (rgb.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).cpu()
    return [Image.fromarray(a.permute(1, 2, 0).numpy()) for a in array]


def _cannot(model: str, why: str) -> None:
    if model not in _told:
        _told.add(model)
        log.info("no previews for model %s: %s", model, why)
