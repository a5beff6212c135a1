"""A VAE whose latents are a fixed linear function of each patch's mean colour.

A trained VAE's latents nearly are (why a linear map of them previews an image: ComfyUI's
"latent2rgb", genbot's fitted colours); the random demo VAEs' are not — their group norms
wash a flat colour out — so what the fitted colours must recover is proved on this one.
It has a real VAE's surface as previews use it: `config`, `dtype`, parameters, and
`encode(x).latent_dist.mode()`, one frame in and out for a video VAE's config (Qwen-Image).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch


class LinearVae(torch.nn.Module):
    def __init__(self, channels: int, scale: int, config: dict[str, Any]):
        super().__init__()
        self.mix = torch.nn.Conv2d(3, channels, scale, stride=scale)
        with torch.no_grad():
            g = torch.Generator().manual_seed(channels)
            colour = torch.randn(channels, 3, generator=g)  # latent channel <- RGB
            self.mix.weight.copy_(colour[:, :, None, None].expand(-1, -1, scale, scale)
                                  / scale ** 2)
            self.mix.bias.copy_(torch.randn(channels, generator=g))
        self.config = SimpleNamespace(**config)

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def encode(self, x: torch.Tensor) -> SimpleNamespace:
        frames = x.ndim == 5
        z = self.mix(x[:, :, 0] if frames else x)
        z = z[:, :, None] if frames else z
        return SimpleNamespace(latent_dist=SimpleNamespace(mode=lambda: z))
