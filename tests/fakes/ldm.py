"""Write a diffusers SD 1.5-family pipeline as one original-format (LDM) .safetensors
file: the kind of single-file checkpoint people download. The inverse of diffusers'
own single-file conversion, for the layouts the demo models use; tests only."""

from __future__ import annotations

import re
from pathlib import Path

RESNET = [("norm1", "in_layers.0"), ("conv1", "in_layers.2"), ("norm2", "out_layers.0"),
          ("conv2", "out_layers.3"), ("time_emb_proj", "emb_layers.1"),
          ("conv_shortcut", "skip_connection")]
UNET_LAYERS = {"time_embedding.linear_1": "time_embed.0", "time_embedding.linear_2": "time_embed.2",
               "conv_in": "input_blocks.0.0", "conv_norm_out": "out.0", "conv_out": "out.2"}
VAE_ATTENTION = [("group_norm", "norm"), ("to_q", "q"), ("to_k", "k"), ("to_v", "v"),
                 ("to_out.0", "proj_out")]


def _resnet(rest: str) -> str:
    for new, old in RESNET:
        rest = rest.replace(new, old)
    return rest


def unet_key(key: str, layers: int, attention_blocks: set[int]) -> str:
    per = layers + 1
    for new, old in UNET_LAYERS.items():
        if key.startswith(new + "."):
            return old + key[len(new):]
    if m := re.match(r"down_blocks\.(\d+)\.(resnets|attentions)\.(\d+)\.(.*)", key):
        b, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
        i = 1 + b * per + j
        return f"input_blocks.{i}.0.{_resnet(rest)}" if kind == "resnets" else \
            f"input_blocks.{i}.1.{rest}"
    if m := re.match(r"down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.*)", key):
        return f"input_blocks.{1 + int(m[1]) * per + layers}.0.op.{m[2]}"
    if m := re.match(r"mid_block\.resnets\.(\d)\.(.*)", key):
        return f"middle_block.{2 * int(m[1])}.{_resnet(m[2])}"
    if m := re.match(r"mid_block\.attentions\.0\.(.*)", key):
        return f"middle_block.1.{m[1]}"
    if m := re.match(r"up_blocks\.(\d+)\.(resnets|attentions)\.(\d+)\.(.*)", key):
        b, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
        i = b * per + j
        return f"output_blocks.{i}.0.{_resnet(rest)}" if kind == "resnets" else \
            f"output_blocks.{i}.1.{rest}"
    if m := re.match(r"up_blocks\.(\d+)\.upsamplers\.0\.conv\.(.*)", key):
        b = int(m[1])
        return f"output_blocks.{b * per + layers}.{2 if b in attention_blocks else 1}.conv.{m[2]}"
    raise KeyError(key)


def vae_key(key: str, up_blocks: int) -> str:
    side, rest = key.split(".", 1)
    if m := re.match(r"(down|up)_blocks\.(\d+)\.resnets\.(\d+)\.(.*)", rest):
        i = int(m[2]) if m[1] == "down" else up_blocks - 1 - int(m[2])
        return f"{side}.{m[1]}.{i}.block.{m[3]}.{m[4].replace('conv_shortcut', 'nin_shortcut')}"
    if m := re.match(r"down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.*)", rest):
        return f"{side}.down.{m[1]}.downsample.conv.{m[2]}"
    if m := re.match(r"up_blocks\.(\d+)\.upsamplers\.0\.conv\.(.*)", rest):
        return f"{side}.up.{up_blocks - 1 - int(m[1])}.upsample.conv.{m[2]}"
    if m := re.match(r"mid_block\.resnets\.(\d)\.(.*)", rest):
        return f"{side}.mid.block_{int(m[1]) + 1}.{m[2].replace('conv_shortcut', 'nin_shortcut')}"
    if m := re.match(r"mid_block\.attentions\.0\.(.*)", rest):
        attn = m[1]
        for new, old in VAE_ATTENTION:
            attn = attn.replace(new + ".", old + ".")
        return f"{side}.mid.attn_1.{attn}"
    return key.replace("conv_norm_out", "norm_out")


def write_single_file(folder: Path, out: Path) -> None:
    from diffusers import StableDiffusionPipeline
    from safetensors.torch import save_file
    pipe = StableDiffusionPipeline.from_pretrained(folder, local_files_only=True,
                                                   safety_checker=None,
                                                   requires_safety_checker=False)
    state = ldm_state(pipe.unet, pipe.vae, pipe.text_encoder)
    save_file({k: v.contiguous() for k, v in state.items()}, str(out))


def ldm_state(unet, vae, text_encoder, dtype=None) -> dict:
    """An SD 1.5-family pipeline's weights under their original single-file names."""
    config = unet.config
    attention_blocks = {b for b, kind in enumerate(config.up_block_types) if "CrossAttn" in kind}
    state = {}
    for k, v in unet.state_dict().items():
        state["model.diffusion_model." + unet_key(k, config.layers_per_block, attention_blocks)] = v
    for k, v in vae.state_dict().items():
        state["first_stage_model." + vae_key(k, len(vae.config.up_block_types))] = v
    for k, v in text_encoder.state_dict().items():  # as in real files: text_model.*
        state["cond_stage_model.transformer." + ("" if k.startswith("text_model.")
                                                 else "text_model.") + k] = v
    return {k: v.to(dtype) if dtype is not None else v for k, v in state.items()}


def controlnet_ldm_state(controlnet, dtype=None) -> dict:
    """A ControlNet's weights under their original single-file names (control_model.*)."""
    config = controlnet.config
    state = {}
    for k, v in controlnet.state_dict().items():
        if m := re.match(r"controlnet_down_blocks\.(\d+)\.(.*)", k):
            new = f"zero_convs.{m[1]}.0.{m[2]}"
        elif m := re.match(r"controlnet_mid_block\.(.*)", k):
            new = f"middle_block_out.0.{m[1]}"
        elif m := re.match(r"controlnet_cond_embedding\.conv_in\.(.*)", k):
            new = f"input_hint_block.0.{m[1]}"
        elif m := re.match(r"controlnet_cond_embedding\.conv_out\.(.*)", k):
            new = f"input_hint_block.14.{m[1]}"
        elif m := re.match(r"controlnet_cond_embedding\.blocks\.(\d+)\.(.*)", k):
            new = f"input_hint_block.{2 * (int(m[1]) + 1)}.{m[2]}"
        else:
            new = unet_key(k, config.layers_per_block, set())
        state["control_model." + new] = v.to(dtype) if dtype is not None else v
    return state


def sdxl_ldm_state(unet, vae, text_encoder, text_encoder_2, dtype=None) -> dict:
    """An SDXL base pipeline's weights under their original single-file names: the UNet as
    SD 1.5's plus its added embedding (label_emb), CLIP-L under conditioner.embedders.0 and
    OpenCLIP bigG (fused q/k/v, open_clip's names) under conditioner.embedders.1."""
    import torch
    config = unet.config
    attention_blocks = {b for b, kind in enumerate(config.up_block_types) if "CrossAttn" in kind}
    cast = (lambda v: v.to(dtype)) if dtype is not None else (lambda v: v)
    state = {}
    for k, v in unet.state_dict().items():
        if m := re.match(r"add_embedding\.linear_([12])\.(.*)", k):
            new = f"label_emb.0.{0 if m[1] == '1' else 2}.{m[2]}"
        else:
            new = unet_key(k, config.layers_per_block, attention_blocks)
        state["model.diffusion_model." + new] = cast(v)
    for k, v in vae.state_dict().items():
        state["first_stage_model." + vae_key(k, len(vae.config.up_block_types))] = cast(v)
    for k, v in text_encoder.state_dict().items():
        state["conditioner.embedders.0.transformer." + ("" if k.startswith("text_model.")
                                                        else "text_model.") + k] = cast(v)
    sd = {k.removeprefix("text_model."): v for k, v in text_encoder_2.state_dict().items()}
    prefix = "conditioner.embedders.1.model."
    state[prefix + "token_embedding.weight"] = cast(sd["embeddings.token_embedding.weight"])
    state[prefix + "positional_embedding"] = cast(sd["embeddings.position_embedding.weight"])
    state[prefix + "ln_final.weight"] = cast(sd["final_layer_norm.weight"])
    state[prefix + "ln_final.bias"] = cast(sd["final_layer_norm.bias"])
    state[prefix + "text_projection"] = cast(sd["text_projection.weight"].T.contiguous())
    for i in range(text_encoder_2.config.num_hidden_layers):
        layer, block = f"encoder.layers.{i}.", f"{prefix}transformer.resblocks.{i}."
        for part in ("weight", "bias"):
            state[f"{block}attn.in_proj_{part}"] = cast(torch.cat(
                [sd[f"{layer}self_attn.{p}_proj.{part}"] for p in "qkv"]))
            for ours, theirs in (("self_attn.out_proj", "attn.out_proj"), ("layer_norm1", "ln_1"),
                                 ("layer_norm2", "ln_2"), ("mlp.fc1", "mlp.c_fc"),
                                 ("mlp.fc2", "mlp.c_proj")):
                state[f"{block}{theirs}.{part}"] = cast(sd[f"{layer}{ours}.{part}"])
    return state
