"""The demo models of the flow-matching transformer families: FLUX.1 (+ Kontext, Fill),
FLUX.2, Qwen-Image, Z-Image and Stable Diffusion 3.5, each the real architecture at toy
size with random weights, built offline in a fraction of a second (executor.models.demo
builds and places them with the others).

Their VAEs scale by 2 where the real ones scale by 8 (Qwen-Image's by 8, as its edit
pipelines encode pictures near 1024 px), so sizes are multiples of 4 px on the demos,
16 px on the real models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from executor.models import tiny_text as text


def _vae(latent_channels: int, **kw: Any) -> Any:
    """An AutoencoderKL of 2 blocks (scales by 2)."""
    from diffusers import AutoencoderKL
    return AutoencoderKL(block_out_channels=(32, 64), in_channels=3, out_channels=3,
                         down_block_types=("DownEncoderBlock2D",) * 2,
                         up_block_types=("UpDecoderBlock2D",) * 2, layers_per_block=1,
                         latent_channels=latent_channels, sample_size=64, norm_num_groups=32,
                         use_quant_conv=False, use_post_quant_conv=False, **kw)


def _flux_text() -> dict[str, Any]:
    """FLUX.1's CLIP (the pooled prompt) and T5 (the token sequence)."""
    tok, bos, eos = text.clip_tokenizer()
    t5 = text.t5_tokenizer()
    return {"text_encoder": text.clip_encoder(len(tok), bos, eos, False), "tokenizer": tok,
            "text_encoder_2": text.t5_encoder(len(t5)), "tokenizer_2": t5}


def _flux_transformer(in_channels: int = 16, out_channels: int | None = None) -> Any:
    from diffusers import FluxTransformer2DModel
    return FluxTransformer2DModel(
        patch_size=1, in_channels=in_channels, out_channels=out_channels, num_layers=1,
        num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
        joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=[4, 4, 8],
        guidance_embeds=True)


def _flux_parts(transformer: Any) -> dict[str, Any]:
    from diffusers import FlowMatchEulerDiscreteScheduler
    return {"scheduler": FlowMatchEulerDiscreteScheduler(shift=3.0), "transformer": transformer,
            "vae": _vae(4, shift_factor=0.0609, scaling_factor=1.5035), **_flux_text()}


def build_flux(out: Path) -> None:
    """FLUX.1 [dev]'s design: a guidance-distilled MMDiT transformer on packed 2x2 latents
    (4 latent channels here, 16 in the real VAE), CLIP and T5."""
    import torch
    from diffusers import FluxPipeline
    torch.manual_seed(1)
    FluxPipeline(**_flux_parts(_flux_transformer())).save_pretrained(out)


def build_flux_kontext(out: Path) -> None:
    """FLUX.1 Kontext [dev]: FLUX.1's transformer; the picture's packed latents join the
    sequence at run time."""
    import torch
    from diffusers import FluxKontextPipeline
    torch.manual_seed(11)
    FluxKontextPipeline(**_flux_parts(_flux_transformer()), image_encoder=None,
                        feature_extractor=None).save_pretrained(out)


def build_flux_fill(out: Path) -> None:
    """FLUX.1 Fill [dev]: the transformer reads the packed noise (16 channels), the packed
    masked picture (16) and the packed mask (the VAE's scale squared x 4 = 16): 48 in."""
    import torch
    from diffusers import FluxFillPipeline
    torch.manual_seed(12)
    FluxFillPipeline(**_flux_parts(_flux_transformer(48, 16))).save_pretrained(out)


def build_flux2(out: Path) -> None:
    """FLUX.2 [dev]: Flux2Transformer2DModel, AutoencoderKLFlux2 (which patchifies 2x2
    itself: 4 latent channels, 16 for the transformer) and a Mistral 3 text encoder."""
    import torch
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2Pipeline,
        Flux2Transformer2DModel,
    )
    torch.manual_seed(13)
    tok = text.mistral_tokenizer()
    transformer = Flux2Transformer2DModel(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=48, timestep_guidance_channels=256,
        axes_dims_rope=[4, 4, 4, 4], guidance_embeds=True)
    vae = AutoencoderKLFlux2(block_out_channels=(32, 64),
                             down_block_types=("DownEncoderBlock2D",) * 2,
                             up_block_types=("UpDecoderBlock2D",) * 2, layers_per_block=1,
                             latent_channels=4, norm_num_groups=32, sample_size=64,
                             use_quant_conv=False, use_post_quant_conv=False)
    Flux2Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True),
                  vae=vae, text_encoder=text.mistral3_encoder(tok), tokenizer=tok,
                  transformer=transformer).save_pretrained(out)


def _qwen_parts(seed: int) -> dict[str, Any]:
    """Qwen-Image's transformer, its own VAE (scales by 8, like the real one) and Qwen2.5-VL
    (text and vision tower), with Qwen-Image's own scheduler settings."""
    import torch
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImageTransformer2DModel,
    )
    torch.manual_seed(seed)
    tok = text.qwen_tokenizer()
    transformer = QwenImageTransformer2DModel(
        patch_size=2, in_channels=16, out_channels=4, num_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=16, guidance_embeds=False,
        axes_dims_rope=(8, 4, 4))
    vae = AutoencoderKLQwenImage(base_dim=8, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                                 temperal_downsample=[False, True, True],
                                 latents_mean=[0.0] * 4, latents_std=[1.0] * 4)
    scheduler = FlowMatchEulerDiscreteScheduler(
        base_image_seq_len=256, base_shift=0.5, max_image_seq_len=8192, max_shift=0.9,
        num_train_timesteps=1000, shift=1.0, shift_terminal=0.02,
        time_shift_type="exponential", use_dynamic_shifting=True)
    return {"transformer": transformer, "vae": vae, "scheduler": scheduler,
            "text_encoder": text.qwen25vl_encoder(tok), "tokenizer": tok}


def build_qwen_image(out: Path) -> None:
    """Qwen-Image: Qwen2.5-VL reads the prompt."""
    from diffusers import QwenImagePipeline
    QwenImagePipeline(**_qwen_parts(14)).save_pretrained(out)


def build_qwen_image_edit(out: Path) -> None:
    """Qwen-Image-Edit (2509/2511, the pipeline that takes several pictures): Qwen-Image's
    parts; Qwen2.5-VL's vision tower reads each picture beside the instruction. Saved as a
    real folder is (its processor named as transformers' Qwen2VLProcessor, with the image
    processor's and tokenizer's files), and loaded by genbot with the picture-only one."""
    import json

    from diffusers import QwenImageEditPlusPipeline
    from transformers import Qwen2VLImageProcessor

    from executor.models.qwen_processor import PictureProcessor
    parts = _qwen_parts(19)
    processor = PictureProcessor(image_processor=Qwen2VLImageProcessor(),
                                 tokenizer=parts["tokenizer"])
    QwenImageEditPlusPipeline(**parts, processor=processor).save_pretrained(out)
    index = json.loads((out / "model_index.json").read_text())
    index["processor"] = ["transformers", "Qwen2VLProcessor"]
    (out / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")


def build_zimage(out: Path) -> None:
    """Z-Image-Turbo: a single-stream transformer with a caption refiner, Qwen3 reading the
    prompt, a 16-channel VAE."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImagePipeline, ZImageTransformer2DModel
    torch.manual_seed(17)
    tok = text.qwen_tokenizer(text.QWEN3_CHAT_TEMPLATE)
    transformer = ZImageTransformer2DModel(
        all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16, dim=32, n_layers=2,
        n_refiner_layers=1, n_heads=2, n_kv_heads=2, norm_eps=1e-5, qk_norm=True,
        cap_feat_dim=16, rope_theta=256.0, t_scale=1000.0, axes_dims=[8, 4, 4],
        axes_lens=[1536, 512, 512])
    with torch.no_grad():  # made with torch.empty: random memory, possibly NaN
        transformer.x_pad_token.copy_(torch.ones_like(transformer.x_pad_token))
        transformer.cap_pad_token.copy_(torch.ones_like(transformer.cap_pad_token))
    ZImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
                   vae=_vae(16, scaling_factor=0.3611, shift_factor=0.1159),
                   text_encoder=text.qwen3_encoder(tok), tokenizer=tok,
                   transformer=transformer).save_pretrained(out)


def build_sd3(out: Path) -> None:
    """Stable Diffusion 3.5: an MMDiT transformer (2x2 patches, RMS qk-norm), two CLIP
    encoders with projection and T5 (as wide as the two CLIPs together: SD 3 pads their
    states to T5's width), a 16-channel VAE."""
    import torch
    from diffusers import (
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    torch.manual_seed(18)
    tok, bos, eos = text.clip_tokenizer()
    t5 = text.t5_tokenizer()
    transformer = SD3Transformer2DModel(
        sample_size=32, patch_size=2, in_channels=16, out_channels=16, num_layers=2,
        attention_head_dim=8, num_attention_heads=4, caption_projection_dim=32,
        joint_attention_dim=64, pooled_projection_dim=64, pos_embed_max_size=96,
        qk_norm="rms_norm")
    StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=_vae(16, scaling_factor=1.5305, shift_factor=0.0609),
        text_encoder=text.clip_encoder(len(tok), bos, eos, True), tokenizer=tok,
        text_encoder_2=text.clip_encoder(len(tok), bos, eos, True), tokenizer_2=tok,
        text_encoder_3=text.t5_encoder(len(t5), d_model=64), tokenizer_3=t5,
        image_encoder=None, feature_extractor=None).save_pretrained(out)


BUILDERS = {"flux": build_flux, "flux_kontext": build_flux_kontext,
            "flux_fill": build_flux_fill, "flux2": build_flux2, "qwen_image": build_qwen_image,
            "qwen_image_edit": build_qwen_image_edit, "zimage": build_zimage, "sd3": build_sd3}
