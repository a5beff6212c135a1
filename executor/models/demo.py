"""Tiny random-weight demo models, built locally in seconds: nothing is downloaded.

They have the real architectures (UNet, VAE, CLIP text encoders, ControlNet, LoRA; the
transformer families of executor.models.demo_flow) at toy sizes, so every template runs end to end
on a CPU and every code path the real checkpoints take is exercised. Their images are
noise; real checkpoints give real images. Native size 64 px.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executor.models import demo_flow
from executor.models import tiny_text as text
from templates.families import profile

if TYPE_CHECKING:  # the generation stack, imported only while the models are built
    from diffusers import EulerDiscreteScheduler

DEMO_STEPS = 8
DEMO_GUIDANCE = 5.0
DEMO_WORK_GIB = 0.0005  # working memory at its 64 px, at 16 bits
CHECKPOINTS = ("sd15", "sdxl", "flux", "flux_kontext", "flux_fill", "flux2", "qwen_image",
               "qwen_image_edit", "zimage", "sd3")
CONTROLNETS = {"canny_sd15": "sd15", "canny_sdxl": "sdxl"}
LORAS = {"walnut": ("sd15", 1), "brushed_steel": ("sd15", 2)}  # name -> (family, seed)
UPSCALERS = ("upscaler",)
IP_ADAPTERS = {"ip_sd15": "sd15"}  # name -> the family whose UNet it conditions
PREVIEWS = {"taesd": "sd15"}  # tiny VAEs (live previews) -> the family whose latents they decode
ALL = (*CHECKPOINTS, *CONTROLNETS, *LORAS, *UPSCALERS, *IP_ADAPTERS, *PREVIEWS)


def _unet_kwargs(family: str) -> dict[str, Any]:
    common = dict(block_out_channels=(32, 64), layers_per_block=1, norm_num_groups=32,
                  down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"))
    if family == "sdxl":
        # text_time conditioning: 6 size/crop ids x 8 + the pooled text embedding (32)
        return {**common, "cross_attention_dim": 64, "addition_embed_type": "text_time",
                "addition_time_embed_dim": 8, "projection_class_embeddings_input_dim": 80,
                "use_linear_projection": True, "attention_head_dim": (2, 4)}
    return {**common, "cross_attention_dim": 32, "attention_head_dim": 8}


def _scheduler() -> EulerDiscreteScheduler:
    from diffusers import EulerDiscreteScheduler
    return EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                  steps_offset=1, timestep_spacing="leading")


def build_checkpoint(family: str, out: Path) -> None:
    if family in demo_flow.BUILDERS:
        demo_flow.BUILDERS[family](out)
        return
    import torch
    from diffusers import (
        AutoencoderKL,
        StableDiffusionPipeline,
        StableDiffusionXLPipeline,
        UNet2DConditionModel,
    )
    torch.manual_seed({"sd15": 15, "sdxl": 10}[family])
    tok, bos, eos = text.clip_tokenizer()
    vocab = len(tok)
    unet = UNet2DConditionModel(sample_size=32, in_channels=4, out_channels=4,
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
                                **_unet_kwargs(family))
    vae = AutoencoderKL(block_out_channels=(32, 64), in_channels=3, out_channels=3,
                        down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4,
                        sample_size=64, norm_num_groups=32)
    if family == "sdxl":
        pipe = StableDiffusionXLPipeline(
            unet=unet, vae=vae, scheduler=_scheduler(),
            text_encoder=text.clip_encoder(vocab, bos, eos, False), tokenizer=tok,
            text_encoder_2=text.clip_encoder(vocab, bos, eos, True), tokenizer_2=tok)
    else:
        pipe = StableDiffusionPipeline(
            unet=unet, vae=vae, scheduler=_scheduler(),
            text_encoder=text.clip_encoder(vocab, bos, eos, False), tokenizer=tok,
            safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(out)


def build_controlnet(family: str, out: Path) -> None:
    import torch
    from diffusers import ControlNetModel
    torch.manual_seed({"sd15": 115, "sdxl": 110}[family])
    kwargs = _unet_kwargs(family)
    ControlNetModel(in_channels=4, conditioning_embedding_out_channels=(16, 32),
                    **kwargs).save_pretrained(out)


def build_preview_vae(out: Path) -> None:
    """A tiny VAE (TAESD's design, diffusers' AutoencoderTiny) for the demo SD 1.5's latents:
    4 channels, one latent per 2 px as its VAE."""
    import torch
    from diffusers import AutoencoderTiny
    torch.manual_seed(16)
    AutoencoderTiny(encoder_block_out_channels=(16, 16), decoder_block_out_channels=(16, 16),
                    num_encoder_blocks=(1, 1), num_decoder_blocks=(1, 1),
                    latent_channels=4).save_pretrained(out)


def build_upscaler(out: Path) -> None:
    """A Stable Diffusion upscaler (the x4 upscaler's design) that doubles the size."""
    import torch
    from diffusers import (
        AutoencoderKL,
        DDIMScheduler,
        DDPMScheduler,
        StableDiffusionUpscalePipeline,
        UNet2DConditionModel,
    )
    torch.manual_seed(4)
    tok, bos, eos = text.clip_tokenizer()
    # 7 input channels: the latents and the low-resolution image; noise level as a class.
    unet = UNet2DConditionModel(sample_size=32, in_channels=7, out_channels=4,
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
                                num_class_embeds=1000, **_unet_kwargs("sd15"))
    vae = AutoencoderKL(block_out_channels=(32, 64), in_channels=3, out_channels=3,
                        down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4,
                        norm_num_groups=32, scaling_factor=0.08333)
    StableDiffusionUpscalePipeline(
        vae=vae, text_encoder=text.clip_encoder(len(tok), bos, eos, False), tokenizer=tok,
        unet=unet, low_res_scheduler=DDPMScheduler(),
        scheduler=DDIMScheduler(prediction_type="v_prediction"),
        max_noise_level=350).save_pretrained(out)


def build_ip_adapter(base: Path, out: Path) -> None:
    """An IP-Adapter for the demo SD UNet, laid out as h94/IP-Adapter's models/ folder is:
    a CLIP vision encoder in image_encoder/ and ip-adapter.safetensors beside it — the
    image projection (4 tokens) and a key and value projection for each cross-attention
    layer, numbered as the original weights are (1, 3, 5 …), random and visible."""
    import torch
    from diffusers import UNet2DConditionModel
    from safetensors.torch import save_file
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection
    torch.manual_seed(21)
    unet = UNet2DConditionModel.from_pretrained(base / "unet", local_files_only=True)
    encoder = CLIPVisionModelWithProjection(CLIPVisionConfig(
        hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
        image_size=32, patch_size=8, projection_dim=32))
    encoder.save_pretrained(out / "image_encoder")
    cross, embed = unet.config.cross_attention_dim, encoder.config.projection_dim
    state = {"image_proj.proj.weight": torch.randn(4 * cross, embed) * 0.2,
             "image_proj.proj.bias": torch.zeros(4 * cross),
             "image_proj.norm.weight": torch.ones(cross),
             "image_proj.norm.bias": torch.zeros(cross)}
    blocks = unet.config.block_out_channels
    key = 1
    for name in unet.attn_processors:
        if name.endswith("attn1.processor"):
            continue
        if name.startswith("mid_block"):
            hidden = blocks[-1]
        elif name.startswith("up_blocks"):
            hidden = list(reversed(blocks))[int(name[len("up_blocks.")])]
        else:
            hidden = blocks[int(name[len("down_blocks.")])]
        for kv in ("k", "v"):
            state[f"ip_adapter.{key}.to_{kv}_ip.weight"] = torch.randn(hidden, cross) * 0.5
        key += 2
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / "ip-adapter.safetensors"))


def build_lora(base: Path, seed: int, out: Path) -> None:
    """A LoRA on the demo SD UNet's attention, with visible (random, small) weights."""
    import torch
    from diffusers import StableDiffusionPipeline, UNet2DConditionModel
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict
    unet = UNet2DConditionModel.from_pretrained(base / "unet", local_files_only=True)
    torch.manual_seed(seed)
    unet.add_adapter(LoraConfig(r=4, lora_alpha=4, init_lora_weights=False,
                                target_modules=["to_q", "to_k", "to_v", "to_out.0"]))
    state = {k: v * 0.5 for k, v in get_peft_model_state_dict(unet).items()}
    StableDiffusionPipeline.save_lora_weights(out, unet_lora_layers=state,
                                              safe_serialization=True)


def build(folder: Path, names: list[str] | None = None, *, force: bool = False) -> list[str]:
    """Build the demo models under `folder` (those in `names`, default all) that are
    missing, or all of them with `force`. Returns what was built. Each model is built
    in a temporary folder and renamed into place, so a crash leaves no half model."""
    import logging
    logging.getLogger("diffusers").setLevel(logging.ERROR)
    wanted = names or list(ALL)
    unknown = set(wanted) - set(ALL)
    if unknown:
        raise ValueError(f"no demo model {', '.join(sorted(unknown))}")
    folder.mkdir(parents=True, exist_ok=True)
    built = []
    # LoRAs are cut for a checkpoint: build the checkpoints first.
    order = sorted(wanted, key=lambda n: (n not in CHECKPOINTS, n))  # (ip_* after sd15 too)
    for name in order:
        target = folder / name
        if target.exists() and not force:
            continue
        base = LORAS[name][0] if name in LORAS else IP_ADAPTERS.get(name)
        if base and not (folder / base).exists():
            build(folder, [base])
        tmp = Path(tempfile.mkdtemp(dir=folder, prefix=f".{name}-"))
        try:
            if name in CHECKPOINTS:
                build_checkpoint(name, tmp)
                family = name
            elif name in CONTROLNETS:
                build_controlnet(CONTROLNETS[name], tmp)
                family = CONTROLNETS[name]
            elif name in UPSCALERS:
                build_upscaler(tmp)
                family = "sd15"
            elif name in IP_ADAPTERS:
                family = IP_ADAPTERS[name]
                build_ip_adapter(folder / family, tmp)
            elif name in PREVIEWS:
                family = PREVIEWS[name]
                build_preview_vae(tmp)
            else:
                family, seed = LORAS[name]
                build_lora(folder / family, seed, tmp)
            # Every demo makes 64 px images (FLUX's own default would be 256 px over this
            # VAE's 2x) with a fraction of a MiB of activations (its channels are toy-sized):
            # its memory is planned at that. A flow family's guidance is its own (FLUX.1
            # [dev]'s distilled 3.5; Z-Image-Turbo's 0, no CFG).
            own = {"guidance": profile(family).guidance} if profile(family).flow else {}
            (tmp / "genbot.json").write_text(json.dumps({
                "demo": True, "family": family, "steps": DEMO_STEPS, "guidance": DEMO_GUIDANCE,
                "size": 64, "work_gib": DEMO_WORK_GIB, **own}))
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        built.append(name)
    return built


def place(folder: Path, built: Path | None = None) -> None:
    """The demo models at `folder`: with `built` (a folder build() filled before), a link to
    each of its models, so a benchmark run beside others reuses them (building imports
    diffusers and costs seconds of CPU each time); else built there."""
    if built is None:
        build(folder)
        return
    missing = sorted(set(ALL) - {p.name for p in built.iterdir()})
    if missing:
        raise ValueError(f"{built}: no demo model {', '.join(missing)}; build them with "
                         "genbot models demo")
    folder.mkdir(parents=True, exist_ok=True)
    for name in ALL:
        (folder / name).symlink_to(built / name, target_is_directory=True)
