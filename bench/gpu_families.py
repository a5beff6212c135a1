"""The newer families on a GPU, at full size: one prepared run for a lent GPU machine.

  python bench/gpu_families.py [--families zimage,flux,sd3,qwen_image] [--steps 8]
  python bench/gpu_families.py --tiny        # the demo models on the CPU (the test suite)

No weights can be downloaded there, so each family is built at its published dimensions
with random weights (bf16, made on the GPU), saved as a diffusers folder on the local disk,
and then run through genbot's own model cache and `generate`, as an executor runs it.
Per family it prints: the load time (the folder into the cache, onto the GPU), peak GPU
memory, seconds per image at 1024x1024 (and per step), and images/s at max_batch 1 vs 4
(one generate call of 1 and of 4 images). Each folder is deleted after its family's run;
Qwen-Image's (58 GB) needs that much free disk, so it is not in the default list. Random
weights make noise at the speed of real ones: the figures are the engine's, not the
images'. Record them in docs/benchmarks.md with the card's name.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

def full(family: str) -> Any:
    """The family's pipeline at its published dimensions, random weights (current device
    and default dtype). Tokenizers are genbot's demo ones: token ids fall inside the real
    vocabularies, and the prompt's length is what costs."""
    import diffusers as d
    import transformers as t

    from executor.models import tiny_text as text
    flux_vae = {"latent_channels": 16, "block_out_channels": (128, 256, 512, 512),
                "down_block_types": ("DownEncoderBlock2D",) * 4,
                "up_block_types": ("UpDecoderBlock2D",) * 4, "layers_per_block": 2,
                "use_quant_conv": False, "use_post_quant_conv": False}
    t5 = t.T5EncoderModel(t.T5Config(vocab_size=32128, d_model=4096, d_ff=10240, d_kv=64,
                                     num_heads=64, num_layers=24,
                                     feed_forward_proj="gated-gelu")) \
        if family in ("flux", "sd3") else None
    clip, bos, eos = text.clip_tokenizer()

    def clip_model(width: int, layers: int, heads: int, projection: bool) -> Any:
        cls = t.CLIPTextModelWithProjection if projection else t.CLIPTextModel
        return cls(t.CLIPTextConfig(vocab_size=49408, hidden_size=width,
                                    intermediate_size=4 * width, num_hidden_layers=layers,
                                    num_attention_heads=heads, projection_dim=width,
                                    bos_token_id=bos, eos_token_id=eos, pad_token_id=eos))
    if family == "flux":  # FLUX.1 [dev]: diffusers' defaults are its transformer's
        return d.FluxPipeline(
            transformer=d.FluxTransformer2DModel(guidance_embeds=True),
            vae=d.AutoencoderKL(shift_factor=0.1159, scaling_factor=0.3611, **flux_vae),
            text_encoder=clip_model(768, 12, 12, False), tokenizer=clip,
            text_encoder_2=t5, tokenizer_2=text.t5_tokenizer(),
            scheduler=d.FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True))
    if family == "sd3":  # SD 3.5 Large
        return d.StableDiffusion3Pipeline(
            transformer=d.SD3Transformer2DModel(
                num_layers=38, attention_head_dim=64, num_attention_heads=38,
                joint_attention_dim=4096, caption_projection_dim=2432,
                pooled_projection_dim=2048, pos_embed_max_size=192, qk_norm="rms_norm"),
            vae=d.AutoencoderKL(shift_factor=0.0609, scaling_factor=1.5305, **flux_vae),
            text_encoder=clip_model(768, 12, 12, True), tokenizer=clip,
            text_encoder_2=clip_model(1280, 32, 20, True), tokenizer_2=clip,
            text_encoder_3=t5, tokenizer_3=text.t5_tokenizer(),
            scheduler=d.FlowMatchEulerDiscreteScheduler(shift=3.0))
    tok = text.qwen_tokenizer(text.QWEN3_CHAT_TEMPLATE if family == "zimage" else None)
    ids = tok.convert_tokens_to_ids
    special = {"bos_token_id": ids("<|endoftext|>"), "eos_token_id": ids("<|im_end|>"),
               "pad_token_id": ids("<|endoftext|>")}
    if family == "zimage":  # Z-Image-Turbo: diffusers' defaults are its transformer's
        transformer = d.ZImageTransformer2DModel()
        import torch
        with torch.no_grad():
            transformer.x_pad_token.fill_(1.0)
            transformer.cap_pad_token.fill_(1.0)
        return d.ZImagePipeline(
            transformer=transformer,
            vae=d.AutoencoderKL(shift_factor=0.1159, scaling_factor=0.3611, **flux_vae),
            text_encoder=t.Qwen3Model(t.Qwen3Config(
                vocab_size=151936, hidden_size=2560, intermediate_size=9728,
                num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                head_dim=128, **special)),
            tokenizer=tok, scheduler=d.FlowMatchEulerDiscreteScheduler(shift=3.0))
    if family == "qwen_image":  # Qwen-Image: diffusers' defaults; Qwen2.5-VL-7B
        return d.QwenImagePipeline(
            transformer=d.QwenImageTransformer2DModel(), vae=d.AutoencoderKLQwenImage(),
            text_encoder=t.Qwen2_5_VLForConditionalGeneration(t.Qwen2_5_VLConfig(
                text_config={"vocab_size": 152064, "hidden_size": 3584,
                             "intermediate_size": 18944, "num_hidden_layers": 28,
                             "num_attention_heads": 28, "num_key_value_heads": 4,
                             "rope_scaling": {"mrope_section": [16, 24, 24],
                                              "rope_type": "default", "type": "default"},
                             **special},
                vision_config={"depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
                               "num_heads": 16, "out_hidden_size": 3584,
                               "fullatt_block_indexes": [7, 15, 23, 31]},
                image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
                vision_start_token_id=ids("<|vision_start|>"),
                vision_end_token_id=ids("<|vision_end|>"))),
            tokenizer=tok,
            scheduler=d.FlowMatchEulerDiscreteScheduler(
                base_image_seq_len=256, base_shift=0.5, max_image_seq_len=8192, max_shift=0.9,
                shift=1.0, shift_terminal=0.02, time_shift_type="exponential",
                use_dynamic_shifting=True))
    raise SystemExit(f"gpu_families: no full-size build for {family}")


def gen(model: str, seed: int, steps: int, size: int) -> dict[str, Any]:
    return {"prompt": "一张电商产品海报，写着“春茶上新”, a product poster", "negative": "",
            "model": model, "seed": seed, "steps": steps, "guidance": None, "size": [size, size],
            "sampler": None, "init_image": None, "strength": 0.75, "control_image": None,
            "controlnet": None, "control_scale": 1.0, "loras": []}


def measure(family: str, folder: Path, args: argparse.Namespace, device: str,
            dtype: Any) -> None:
    """Load the folder through genbot's model cache and time `generate` on it."""
    import torch

    from executor.diffusers.cache import ModelCache
    from executor.diffusers.ops import Context
    from executor.diffusers.ops.diffusion import generate_batch
    from executor.models.registry import Registry
    from storage import config as cfg
    data = Path(tempfile.mkdtemp(prefix="genbot-gpu-"))
    config = cfg.from_dict({"service": {"data_dir": str(data)}, "models": {family: str(folder)}})
    cache = ModelCache(Registry(config), device, dtype, vram_budget=float("inf"),
                       ram_budget=float("inf"))
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    began = time.perf_counter()
    cache.pipeline(family, "txt2img")
    loaded = time.perf_counter() - began
    ctx = Context(None, cache)
    size, steps = args.size, args.steps
    generate_batch(ctx, [gen(family, 1, 2, size)])  # warm: kernels, the scheduler
    if cuda:
        torch.cuda.synchronize()
    one = []
    for seed in (2, 3):
        began = time.perf_counter()
        generate_batch(ctx, [gen(family, seed, steps, size)])
        if cuda:
            torch.cuda.synchronize()
        one.append(time.perf_counter() - began)
    began = time.perf_counter()
    generate_batch(ctx, [gen(family, s, steps, size) for s in range(10, 14)])
    if cuda:
        torch.cuda.synchronize()
    four = time.perf_counter() - began
    per = min(one)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
    print(f"{family}: load {loaded:.1f} s  peak {peak:.1f} GiB  {size} px, {steps} steps: "
          f"{per:.2f} s/image ({per / steps:.3f} s/step)  images/s max_batch 1: "
          f"{1 / per:.3f}  max_batch 4: {4 / four:.3f}  ratio {per * 4 / four:.2f}",
          flush=True)
    cache.clear()
    shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", default="zimage,flux,sd3")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--tiny", action="store_true", help="the demo models on the CPU, "
                        "64 px, 2 steps: proves the script runs (the test suite)")
    parser.add_argument("--demo-models", type=Path, help="(--tiny) demo models built before")
    args = parser.parse_args()
    import torch

    from executor.worker import quiet_libraries
    quiet_libraries()
    families = args.families.split(",")
    if args.tiny:
        from executor.models import demo
        args.size, args.steps = 64, 2
        tmp = Path(tempfile.mkdtemp(prefix="genbot-gpu-tiny-"))
        demo.place(tmp / "demo", args.demo_models)
        for family in families:
            measure(family, tmp / "demo" / family, args, "cpu", torch.float32)
        shutil.rmtree(tmp, ignore_errors=True)
        return
    if not torch.cuda.is_available():
        sys.exit("gpu_families: CUDA is not available here (--tiny runs the demo models)")
    props = torch.cuda.get_device_properties(0)
    print(f"gpu: {props.name}, {props.total_memory / 2**30:.0f} GiB, torch "
          f"{torch.__version__}, CUDA {torch.version.cuda}", flush=True)
    dtype = torch.bfloat16
    for family in families:
        began = time.perf_counter()
        torch.set_default_dtype(dtype)
        with torch.device("cuda"):
            pipe = full(family)
        torch.set_default_dtype(torch.float32)
        folder = Path(tempfile.mkdtemp(prefix=f"genbot-{family}-"))
        pipe.save_pretrained(folder)
        del pipe
        torch.cuda.empty_cache()
        print(f"{family}: built and saved in {time.perf_counter() - began:.0f} s", flush=True)
        measure(family, folder, args, "cuda", dtype)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
