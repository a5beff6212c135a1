"""A transformer kept on its own, as ComfyUI users keep one: `flux1-dev.safetensors` in
Black Forest Labs' layout (or ComfyUI's, under `model.diffusion_model.`), an fp8 file, or a
GGUF (city96's ComfyUI-GGUF files, Q8_0 … Q4_0: what FLUX and Qwen-Image run on 12–24 GB
cards in) of FLUX.1, FLUX.1 Fill, FLUX.2, Qwen-Image or Z-Image.

Such a file holds the transformer only: the text encoders, VAE, scheduler and tokenizers
come from the `config` folder its [models] entry names (a diffusers folder of the family,
as `genbot models pull` fetches one). Its family is read from its tensor names and shapes
(:func:`kind_of`); what cannot be told from them (FLUX.1 Kontext has FLUX.1 [dev]'s
tensors) from the config folder's pipeline. Loading is diffusers' `from_single_file`
(GGUF through `GGUFQuantizationConfig`, the weights kept quantized); FLUX.1's layout is
converted here first, because diffusers' converter assumes FLUX.1's full width (3072) and
cannot read a file of any other, such as the tests' tiny ones (FLUX.2's converter reads
any width: diffusers converts that one).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the generation stack, imported only where a file is loaded
    import torch

COMFY_PREFIX = "model.diffusion_model."


@dataclass(frozen=True)
class Transformer:
    """What a file on its own can be: its diffusers class and the families it serves."""
    name: str  # as genbot says it
    cls: str  # the diffusers class from_single_file is called on
    families: tuple[str, ...]  # the first when nothing else tells (its config folder does)


TRANSFORMERS = {t.name: t for t in (
    Transformer("FLUX.1", "FluxTransformer2DModel", ("flux", "flux_kontext")),
    Transformer("FLUX.1 Fill", "FluxTransformer2DModel", ("flux_fill",)),
    Transformer("FLUX.2", "Flux2Transformer2DModel", ("flux2",)),
    Transformer("Qwen-Image", "QwenImageTransformer2DModel", ("qwen_image", "qwen_image_edit")),
    Transformer("Z-Image", "ZImageTransformer2DModel", ("zimage",)),
)}
# Transformers genbot recognises but loads only from their diffusers folders for now.
FOLDER_ONLY = {"joint_blocks.0.x_block.attn.qkv.weight": "Stable Diffusion 3.5"}


def shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's name and shape, from the file's header alone (a safetensors JSON
    header; a GGUF's tensor infos, shapes in torch's order): nothing is loaded. ValueError
    says what is wrong with a file that cannot be read (truncated, not that format)."""
    size = path.stat().st_size
    if path.suffix == ".gguf":
        import gguf
        try:
            reader = gguf.GGUFReader(str(path))
        except Exception as e:  # noqa: BLE001 - gguf raises what numpy and struct raise
            raise ValueError(f"not a complete GGUF file ({size} bytes: {e})") from None
        return {t.name: tuple(int(n) for n in reversed(t.shape.tolist())) for t in reader.tensors}
    with path.open("rb") as f:
        head = f.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else size
        if length > size - 8:
            raise ValueError(f"not a readable .safetensors file (its header is cut short: "
                             f"{size} bytes)")
        try:
            table = json.loads(f.read(length))
        except ValueError as e:
            raise ValueError(f"not a readable .safetensors file ({e})") from None
    return {k: tuple(v["shape"]) for k, v in table.items() if k != "__metadata__"}


def kind_of(found: Mapping[str, tuple[int, ...]]) -> Transformer | str | None:
    """The transformer a file holds, told by its tensor names (and FLUX.1 Fill by the width
    of its input: 384 channels, the masked picture and mask beside the latents); the name
    of one genbot reads only as a folder; None: no transformer it knows."""
    keys = {k.removeprefix(COMFY_PREFIX) for k in found}
    for key, name in FOLDER_ONLY.items():
        if key in keys:
            return name
    if "single_stream_modulation.lin.weight" in keys:  # (its blocks are named as FLUX.1's)
        return TRANSFORMERS["FLUX.2"]
    if "double_blocks.0.img_attn.norm.key_norm.scale" in keys:
        width = next((s[-1] for k, s in found.items()
                      if k.removeprefix(COMFY_PREFIX) == "img_in.weight"), 0)
        return TRANSFORMERS["FLUX.1 Fill" if width == 384 else "FLUX.1"]
    if {"txt_norm.weight", "img_in.weight"} <= keys and any(
            k.startswith("transformer_blocks.0.img_mod.") for k in keys):
        return TRANSFORMERS["Qwen-Image"]
    if "layers.0.adaLN_modulation.0.weight" in keys:
        return TRANSFORMERS["Z-Image"]
    return None


def distilled_fast(found: Mapping[str, tuple[int, ...]]) -> bool:
    """A FLUX.1 transformer without a guidance embedding: [schnell]."""
    return not any(k.removeprefix(COMFY_PREFIX).startswith("guidance_in.") for k in found)


def load(path: Path, kind: Transformer, config: str, dtype: torch.dtype) -> Any:
    """The transformer in `path`, its configuration from the `config` folder's transformer:
    a GGUF keeps its quantized weights (dequantized per layer as it runs)."""
    import diffusers
    quantization: dict[str, Any] = {}
    if path.suffix == ".gguf":
        from diffusers.models.model_loading_utils import load_gguf_checkpoint
        state = load_gguf_checkpoint(str(path))
        quantization["quantization_config"] = diffusers.GGUFQuantizationConfig(
            compute_dtype=dtype)
    else:
        from safetensors.torch import load_file
        state = _unscaled(load_file(str(path)), dtype)
    state = {k.removeprefix(COMFY_PREFIX): v for k, v in state.items()}
    if kind.cls == "FluxTransformer2DModel":
        state = from_bfl(state)
    cls = getattr(diffusers, kind.cls)
    return cls.from_single_file(state, config=config, subfolder="transformer",
                                local_files_only=True, torch_dtype=dtype, **quantization)


def _unscaled(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """ComfyUI's "scaled fp8" files keep each weight as fp8 times a `scale_weight` beside
    it: the true weights (diffusers would drop the scales and load wrong ones)."""
    if not any(k.endswith("scaled_fp8") for k in state):
        return state
    out = {}
    for k, v in state.items():
        if k.endswith(("scaled_fp8", ".scale_weight", ".scale_input")):
            continue
        scale = state.get(k.removesuffix(".weight") + ".scale_weight")
        out[k] = v.to(dtype) * scale.to(dtype) if scale is not None else v
    return out


# --- FLUX.1: Black Forest Labs' layout -> diffusers' ---------------------------------------

_TOP = {  # diffusers name -> BFL name (both without .weight / .bias)
    "time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
    "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
    "time_text_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
    "time_text_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
    "context_embedder": "txt_in", "x_embedder": "img_in", "proj_out": "final_layer.linear"}
_DOUBLE = {"norm1.linear": "img_mod.lin", "norm1_context.linear": "txt_mod.lin",
           "attn.to_out.0": "img_attn.proj", "attn.to_add_out": "txt_attn.proj",
           "ff.net.0.proj": "img_mlp.0", "ff.net.2": "img_mlp.2",
           "ff_context.net.0.proj": "txt_mlp.0", "ff_context.net.2": "txt_mlp.2"}
_DOUBLE_NORMS = {"attn.norm_q.weight": "img_attn.norm.query_norm.scale",
                 "attn.norm_k.weight": "img_attn.norm.key_norm.scale",
                 "attn.norm_added_q.weight": "txt_attn.norm.query_norm.scale",
                 "attn.norm_added_k.weight": "txt_attn.norm.key_norm.scale"}
_SINGLE = {"norm.linear": "modulation.lin", "proj_out": "linear2"}
_SINGLE_NORMS = {"attn.norm_q.weight": "norm.query_norm.scale",
                 "attn.norm_k.weight": "norm.key_norm.scale"}


def _blocks(keys: Any, prefix: str) -> list[int]:
    return sorted({int(k[len(prefix):].split(".", 1)[0]) for k in keys if k.startswith(prefix)})


def _halves_swapped(t: torch.Tensor) -> torch.Tensor:
    """BFL's final adaLN is (scale, shift); diffusers' norm_out is (shift, scale)."""
    import torch
    a, b = t.chunk(2, dim=0)
    return torch.cat([b, a], dim=0)


def from_bfl(checkpoint: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Black Forest Labs' FLUX.1 layout (fused qkv, single blocks' linear1 holding q, k, v
    and the MLP) as diffusers names it, at any width: read from img_in's rows, where
    diffusers' own converter assumes 3072. Splits whole rows only, so GGUF's quantized
    tensors (quantized along rows) split as they are."""
    import torch
    sd = dict(checkpoint)
    inner = sd["img_in.weight"].shape[0]
    out: dict[str, torch.Tensor] = {}
    _renamed(sd, out, "", "", _TOP, {})
    for p in ("weight", "bias"):
        final = sd.pop(f"final_layer.adaLN_modulation.1.{p}")
        out[f"norm_out.linear.{p}"] = _halves_swapped(final)
    for i in _blocks(sd, "double_blocks."):
        ours, theirs = f"transformer_blocks.{i}.", f"double_blocks.{i}."
        _renamed(sd, out, ours, theirs, _DOUBLE, _DOUBLE_NORMS)
        for p in ("weight", "bias"):
            for x, v in zip("qkv", torch.chunk(sd.pop(f"{theirs}img_attn.qkv.{p}"), 3, dim=0)):
                out[f"{ours}attn.to_{x}.{p}"] = v
            for x, v in zip("qkv", torch.chunk(sd.pop(f"{theirs}txt_attn.qkv.{p}"), 3, dim=0)):
                out[f"{ours}attn.add_{x}_proj.{p}"] = v
    for i in _blocks(sd, "single_blocks."):
        ours, theirs = f"single_transformer_blocks.{i}.", f"single_blocks.{i}."
        _renamed(sd, out, ours, theirs, _SINGLE, _SINGLE_NORMS)
        for p in ("weight", "bias"):
            fused = sd.pop(f"{theirs}linear1.{p}")
            q, k, v, mlp = torch.split(fused, [inner, inner, inner, fused.shape[0] - 3 * inner])
            out.update({f"{ours}attn.to_q.{p}": q, f"{ours}attn.to_k.{p}": k,
                        f"{ours}attn.to_v.{p}": v, f"{ours}proj_mlp.{p}": mlp})
    return out


def _renamed(sd: dict[str, Any], out: dict[str, Any], ours: str, theirs: str,
             layers: Mapping[str, str], norms: Mapping[str, str]) -> None:
    """Move what only changes its name from `sd` (BFL's) to `out` (diffusers')."""
    for a, b in layers.items():
        for p in ("weight", "bias"):
            if f"{theirs}{b}.{p}" in sd:
                out[f"{ours}{a}.{p}"] = sd.pop(f"{theirs}{b}.{p}")
    for a, b in norms.items():
        out[ours + a] = sd.pop(theirs + b)
