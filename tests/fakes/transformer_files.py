"""Transformer files as people keep them, written from a diffusers transformer: FLUX.1 and
FLUX.2 in Black Forest Labs' layout (optionally ComfyUI's `model.diffusion_model.` prefix,
fp8), Z-Image in its original layout, Qwen-Image as diffusers names it, and GGUFs of each
written with the `gguf` package as city96's ComfyUI-GGUF converter writes them. The inverse of what
executor.models.transformer_file reads: tests write tiny ones and load them back."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from executor.models.transformer_file import (
    _DOUBLE,
    _DOUBLE_NORMS,
    _SINGLE,
    _SINGLE_NORMS,
    _TOP,
    _blocks,
    _halves_swapped,
    _renamed,
)


def _flipped(names: Mapping[str, str]) -> dict[str, str]:
    """genbot's diffusers -> BFL renames, the other way round (_renamed moves theirs to ours)."""
    return {b: a for a, b in names.items()}


def to_bfl(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """diffusers' FluxTransformer2DModel state dict in Black Forest Labs' layout (what
    flux1-dev.safetensors holds): the inverse of diffusers' own converter."""
    sd = dict(sd)
    out: dict[str, torch.Tensor] = {}
    _renamed(sd, out, "", "", _flipped(_TOP), {})
    for p in ("weight", "bias"):
        out[f"final_layer.adaLN_modulation.1.{p}"] = _halves_swapped(sd.pop(f"norm_out.linear.{p}"))
    for i in _blocks(sd, "transformer_blocks."):
        s, t = f"transformer_blocks.{i}.", f"double_blocks.{i}."
        _renamed(sd, out, t, s, _flipped(_DOUBLE), _flipped(_DOUBLE_NORMS))
        for p in ("weight", "bias"):
            out[f"{t}img_attn.qkv.{p}"] = torch.cat(
                [sd.pop(f"{s}attn.to_{x}.{p}") for x in "qkv"], dim=0)
            out[f"{t}txt_attn.qkv.{p}"] = torch.cat(
                [sd.pop(f"{s}attn.add_{x}_proj.{p}") for x in "qkv"], dim=0)
    for i in _blocks(sd, "single_transformer_blocks."):
        s, t = f"single_transformer_blocks.{i}.", f"single_blocks.{i}."
        _renamed(sd, out, t, s, _flipped(_SINGLE), _flipped(_SINGLE_NORMS))
        for p in ("weight", "bias"):
            out[f"{t}linear1.{p}"] = torch.cat(
                [sd.pop(f"{s}attn.to_{x}.{p}") for x in "qkv"] + [sd.pop(f"{s}proj_mlp.{p}")])
    if sd:
        raise ValueError(f"to_bfl: keys not converted: {sorted(sd)[:8]}")
    return out


# FLUX.2 in diffusers' names -> Black Forest Labs' (flux2-dev.safetensors): the inverse of
# diffusers' convert_flux2_transformer_checkpoint_to_diffusers, which genbot loads with.
_FLUX2_TOP = {
    "x_embedder": "img_in", "context_embedder": "txt_in", "proj_out": "final_layer.linear",
    "time_guidance_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_guidance_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "time_guidance_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
    "time_guidance_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
    "double_stream_modulation_img.linear": "double_stream_modulation_img.lin",
    "double_stream_modulation_txt.linear": "double_stream_modulation_txt.lin",
    "single_stream_modulation.linear": "single_stream_modulation.lin"}
_FLUX2_DOUBLE = {
    "attn.norm_q": "img_attn.norm.query_norm", "attn.norm_k": "img_attn.norm.key_norm",
    "attn.to_out.0": "img_attn.proj", "ff.linear_in": "img_mlp.0", "ff.linear_out": "img_mlp.2",
    "attn.norm_added_q": "txt_attn.norm.query_norm",
    "attn.norm_added_k": "txt_attn.norm.key_norm", "attn.to_add_out": "txt_attn.proj",
    "ff_context.linear_in": "txt_mlp.0", "ff_context.linear_out": "txt_mlp.2"}
_FLUX2_SINGLE = {"attn.to_qkv_mlp_proj": "linear1", "attn.to_out": "linear2",
                 "attn.norm_q": "norm.query_norm", "attn.norm_k": "norm.key_norm"}


def to_flux2_bfl(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """diffusers' Flux2Transformer2DModel state dict in Black Forest Labs' layout: fused
    qkv per stream, norms as `.scale`, the final modulation's halves swapped."""
    sd = dict(sd)
    out = {f"{b}.weight": sd.pop(f"{a}.weight") for a, b in _FLUX2_TOP.items()}
    out["final_layer.adaLN_modulation.1.weight"] = _halves_swapped(sd.pop("norm_out.linear.weight"))
    for prefix, target, names in (("transformer_blocks.", "double_blocks.", _FLUX2_DOUBLE),
                                  ("single_transformer_blocks.", "single_blocks.", _FLUX2_SINGLE)):
        for i in _blocks(sd, prefix):
            s, t = f"{prefix}{i}.", f"{target}{i}."
            for a, b in names.items():
                out[t + b + (".scale" if "norm" in a else ".weight")] = sd.pop(f"{s}{a}.weight")
            if target == "double_blocks.":
                out[f"{t}img_attn.qkv.weight"] = torch.cat(
                    [sd.pop(f"{s}attn.to_{x}.weight") for x in "qkv"])
                out[f"{t}txt_attn.qkv.weight"] = torch.cat(
                    [sd.pop(f"{s}attn.add_{x}_proj.weight") for x in "qkv"])
    if sd:
        raise ValueError(f"to_flux2_bfl: keys not converted: {sorted(sd)[:8]}")
    return out


def to_zimage_original(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """diffusers ZImageTransformer2DModel -> the original (Tongyi / ComfyUI) layout: fused
    attention.qkv, attention.out, q_norm/k_norm, x_embedder, final_layer. Inverse of
    diffusers' convert_z_image_transformer_checkpoint_to_diffusers."""
    out: dict[str, torch.Tensor] = {}
    sd = dict(sd)
    for k in [k for k in sd if k.endswith(".attention.to_q.weight")]:
        base = k[: -len("to_q.weight")]
        out[base + "qkv.weight"] = torch.cat([sd.pop(base + f"to_{x}.weight") for x in "qkv"])
    ren = {"all_final_layer.2-1.": "final_layer.", "all_x_embedder.2-1.": "x_embedder.",
           ".attention.to_out.0.": ".attention.out.", ".attention.norm_k.": ".attention.k_norm.",
           ".attention.norm_q.": ".attention.q_norm."}
    for k, v in sd.items():
        for a, b in ren.items():
            k = k.replace(a, b)
        out[k] = v
    return out


# --------------------------------------------------------------------------- common ----

def to_original(transformer: Any) -> dict[str, torch.Tensor]:
    """The state dict in the layout original / ComfyUI single files use."""
    name = type(transformer).__name__
    sd = {k: v.detach() for k, v in transformer.state_dict().items()}
    if name == "FluxTransformer2DModel":
        return to_bfl(sd)
    if name == "Flux2Transformer2DModel":
        return to_flux2_bfl(sd)
    if name == "ZImageTransformer2DModel":
        return to_zimage_original(sd)
    if name == "QwenImageTransformer2DModel":
        return sd  # ComfyUI's Qwen-Image uses diffusers' names; diffusers maps it by identity
    raise ValueError(f"no original layout known for {name}")


def _arch_of(transformer: Any) -> str:
    return {"FluxTransformer2DModel": "flux", "Flux2Transformer2DModel": "flux2",
            "ZImageTransformer2DModel": "lumina2",
            "QwenImageTransformer2DModel": "qwen_image"}[type(transformer).__name__]


def write_single_file(transformer: Any, path: str | Path, prefix: str = "",
                      dtype: torch.dtype | None = None) -> Path:
    """Save `transformer` as one .safetensors in the original layout, keys prefixed with
    `prefix` (ComfyUI checkpoints: "model.diffusion_model."), tensors cast to `dtype`
    (e.g. torch.float8_e4m3fn, as flux1-dev-fp8.safetensors; None keeps them)."""
    from safetensors.torch import save_file
    sd = to_original(transformer)
    if dtype is not None:
        sd = {k: v.to(dtype) for k, v in sd.items()}
    path = Path(path)
    save_file({prefix + k: v.contiguous() for k, v in sd.items()}, str(path),
              metadata={"format": "pt"})
    return path


def write_gguf(transformer: Any, path: str | Path, qtype: Any = "Q8_0", arch: str | None = None,
               min_quant_params: int = 1024) -> dict[str, str]:
    """Write `transformer` as a GGUF in the original layout, like city96's ComfyUI-GGUF files:
    general.architecture = arch ("flux", "qwen_image", "lumina2" for Z-Image); 1-D tensors and
    tensors of <= min_quant_params elements F32; 2-D+ weights quantized to `qtype` ("Q8_0",
    "Q4_0", ... or "F16"), falling back to F16 where the last dim is not a multiple of the
    block size (32 for Q8_0/Q4_0). Returns {tensor name: type written}."""
    import gguf
    import numpy as np
    qt = gguf.GGMLQuantizationType[qtype] if isinstance(qtype, str) else qtype
    arch = arch or _arch_of(transformer)
    sd = to_original(transformer)
    path = Path(path)
    writer = gguf.GGUFWriter(path=None, arch=arch)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    file_type = {gguf.GGMLQuantizationType.F16: gguf.LlamaFileType.MOSTLY_F16,
                 gguf.GGMLQuantizationType.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
                 gguf.GGMLQuantizationType.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0}.get(qt)
    if file_type is not None:
        writer.add_file_type(file_type)
    written: dict[str, str] = {}
    for name, t in sd.items():
        data = t.detach().to(torch.float32).cpu().numpy()
        if data.ndim == 1 or data.size <= min_quant_params:
            q = gguf.GGMLQuantizationType.F32
        else:
            q = qt
            block = gguf.GGML_QUANT_SIZES[q][0]
            if data.shape[-1] % block:
                q = gguf.GGMLQuantizationType.F16
        if q == gguf.GGMLQuantizationType.F32:
            arr = data.astype(np.float32)
        elif q == gguf.GGMLQuantizationType.F16:
            arr = data.astype(np.float16)
        else:
            arr = gguf.quants.quantize(data, q)
        writer.add_tensor(name, arr, raw_dtype=q)
        written[name] = q.name
    writer.write_header_to_file(path=path)
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return written
