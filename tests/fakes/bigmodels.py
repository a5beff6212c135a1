"""Full-size single-file checkpoints, built here with random weights and loaded the way
a user's would be: run by tests/test_generation.py in a process of their own, so the
12–18 GB they take is given back whole (the pytest process keeps what it once held, and
tests that measure memory drift would see it).

  python -m tests.fakes.bigmodels sd15|sdxl FOLDER
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from executor.diffusers.cache import ModelCache
from executor.diffusers.ops import Context
from executor.diffusers.ops.diffusion import generate_batch
from executor.models.registry import Registry
from storage import config as cfg
from storage.files import FileStore
from tests.conftest import ROOT


def inputs(**over):
    base = dict(prompt="a bottle", negative="", model="sd15", seed=1, steps=4, guidance=5.0,
                size=None, sampler=None, init_image=None, strength=0.75, control_image=None,
                controlnet=None, control_scale=1.0, loras=[])
    return {**base, **over}


def make_cache(config) -> ModelCache:
    return ModelCache(Registry(config), "cpu", torch.float32, vram_budget=float("inf"),
                      ram_budget=float("inf"))


def named(model, name: str):
    """A model's parameter by its name (a text encoder's may or may not start with
    "text_model.", by transformers version)."""
    found = [p for n, p in model.named_parameters() if n == name or n.endswith("." + name)]
    assert len(found) == 1, name
    return found[0]


def sd15(tmp_path: Path) -> None:
    """The real SD 1.5 architecture (random weights, fp16, the original single-file key
    layout, as model sites and ComfyUI keep it), named in [models] with nothing else:
    genbot tells its family from the tensors, supplies configs and tokenizer itself, and
    makes an image with no network; a single-file ControlNet likewise. (About a minute and
    12 GB here: docs/benchmarks.md.)"""
    import gc
    import time

    from accelerate import init_empty_weights
    from diffusers import AutoencoderKL, ControlNetModel, UNet2DConditionModel
    from safetensors.torch import save_file
    from transformers import CLIPTextConfig, CLIPTextModel

    from executor.models import families
    from tests.fakes.ldm import controlnet_ldm_state, ldm_state
    started = time.monotonic()
    folder = families.materialise("v1", tmp_path / "reference")
    with init_empty_weights():
        unet = UNet2DConditionModel.from_config(UNet2DConditionModel.load_config(folder / "unet"))
        vae = AutoencoderKL.from_config(AutoencoderKL.load_config(folder / "vae"))
        text = CLIPTextModel(CLIPTextConfig.from_pretrained(folder / "text_encoder"))
        control = ControlNetModel.from_config(families.controlnet_config("v1"))
    generator = torch.Generator().manual_seed(0)
    for model in (unet, vae, text, control):
        model.to_empty(device="cpu")
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.02, generator=generator)
    assert sum(p.numel() for p in unet.parameters()) == 859_520_964  # SD 1.5's UNet
    probes = {  # a few weights, to see each arrive where it belongs
        ("unet", "down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k.weight"): unet,
        ("unet", "up_blocks.2.resnets.1.conv_shortcut.weight"): unet,
        ("vae", "decoder.mid_block.attentions.0.to_q.weight"): vae,
        ("text_encoder", "encoder.layers.3.self_attn.q_proj.weight"): text,
        ("controlnet", "controlnet_down_blocks.3.weight"): control,
        ("controlnet", "controlnet_cond_embedding.blocks.2.weight"): control}
    expected = {key: named(model, key[1]).detach().half().float().clone()
                for key, model in probes.items()}
    file = tmp_path / "v1-5-random.safetensors"
    save_file({k: v.contiguous() for k, v in ldm_state(unet, vae, text, torch.float16).items()},
              str(file))
    canny = tmp_path / "control_v11p_sd15_canny.safetensors"
    save_file({k: v.contiguous() for k, v in controlnet_ldm_state(control, torch.float16).items()},
              str(canny))
    assert sum(p.numel() for p in control.parameters()) == 361_279_120  # an SD 1.5 ControlNet
    del unet, vae, text, control
    gc.collect()
    built = time.monotonic() - started
    config = cfg.from_dict({"service": {"data_dir": str(tmp_path / "data")},
                            "models": {"real": str(file), "cn": str(canny)}})
    cache = make_cache(config)
    info = cache.registry.get("real")
    assert (info.kind, info.family, info.model_type, info.config_dir) == \
        ("checkpoint", "sd15", "v1", None)
    assert (cache.registry.get("cn").kind, cache.registry.get("cn").family) == \
        ("controlnet", "sd15")
    store = FileStore(config.data_dir)
    store.write("inputs/bottle.png", (ROOT / "examples" / "assets" / "bottle.png").read_bytes())
    ctx = Context(store, cache)
    (image,) = generate_batch(ctx, [inputs(model="real", size=[64, 64], steps=1)])
    assert image.size == (64, 64)
    (guided,) = generate_batch(ctx, [inputs(model="real", size=[64, 64], steps=1,
                                            controlnet="cn", control_image="inputs/bottle.png")])
    assert guided.size == (64, 64)
    pipe = cache.pipeline("real", "txt2img")
    assert sum(p.numel() for p in pipe.unet.parameters()) == 859_520_964
    loaded = {"unet": pipe.unet, "vae": pipe.vae, "text_encoder": pipe.text_encoder,
              "controlnet": cache.units["cn"].obj}
    for (part, name), want in expected.items():
        assert torch.equal(named(loaded[part], name).detach().float(), want), name
    assert pipe.tokenizer("a photo of a cat").input_ids == [49406, 320, 1125, 539, 320, 2368,
                                                           49407]
    print(f"\nfull-size SD 1.5: built and written in {built:.0f} s, loaded and ran one step "
          f"in {time.monotonic() - started - built:.0f} s; file {file.stat().st_size / 2**30:.2f} "
          "GiB")


def sdxl(tmp_path: Path) -> None:
    """SDXL base at full size (3.5 billion random weights, fp16 on disk: 6.5 GiB) in the
    original layout, with nothing else. Loaded in bfloat16 to stay within this machine's
    24 GB; the cost is in docs/benchmarks.md."""
    import gc
    import time

    from accelerate import init_empty_weights
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from safetensors.torch import save_file
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    from executor.models import families
    from tests.fakes.ldm import sdxl_ldm_state
    started = time.monotonic()
    folder = families.materialise("xl_base", tmp_path / "reference")
    with init_empty_weights():
        unet = UNet2DConditionModel.from_config(UNet2DConditionModel.load_config(folder / "unet"))
        vae = AutoencoderKL.from_config(AutoencoderKL.load_config(folder / "vae"))
        text = CLIPTextModel(CLIPTextConfig.from_pretrained(folder / "text_encoder"))
        text_2 = CLIPTextModelWithProjection(
            CLIPTextConfig.from_pretrained(folder / "text_encoder_2"))
    generator = torch.Generator().manual_seed(0)
    for model in (unet, vae, text, text_2):
        model.to(torch.float16)
        model.to_empty(device="cpu")
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.02, generator=generator)
    assert sum(p.numel() for p in unet.parameters()) == 2_567_463_684  # SDXL's UNet
    probes = {("unet", "add_embedding.linear_1.weight"): unet,
              ("unet", "down_blocks.2.attentions.1.transformer_blocks.9.attn2.to_v.weight"): unet,
              ("text_encoder_2", "encoder.layers.30.self_attn.k_proj.weight"): text_2,
              ("text_encoder_2", "text_projection.weight"): text_2}
    expected = {key: named(model, key[1]).detach().clone() for key, model in probes.items()}
    file = tmp_path / "sd_xl_random.safetensors"
    save_file(sdxl_ldm_state(unet, vae, text, text_2), str(file))
    del unet, vae, text, text_2
    gc.collect()
    built = time.monotonic() - started
    config = cfg.from_dict({"service": {"data_dir": str(tmp_path / "data")},
                            "models": {"xl": str(file)}})
    cache = ModelCache(Registry(config), "cpu", torch.bfloat16, vram_budget=float("inf"),
                       ram_budget=float("inf"))
    info = cache.registry.get("xl")
    assert (info.kind, info.family, info.model_type) == ("checkpoint", "sdxl", "xl_base")
    ctx = Context(FileStore(config.data_dir), cache)
    (image,) = generate_batch(ctx, [inputs(model="xl", size=[64, 64], steps=1)])
    assert image.size == (64, 64)
    pipe = cache.pipeline("xl", "txt2img")
    loaded = {"unet": pipe.unet, "text_encoder_2": pipe.text_encoder_2}
    for (part, name), want in expected.items():
        got = named(loaded[part], name).detach()
        assert torch.equal(got.float(), want.to(torch.bfloat16).float()), name
    print(f"\nfull-size SDXL: built and written in {built:.0f} s, loaded and ran one step in "
          f"{time.monotonic() - started - built:.0f} s; file {file.stat().st_size / 2**30:.2f} GiB")


if __name__ == "__main__":
    {"sd15": sd15, "sdxl": sdxl}[sys.argv[1]](Path(sys.argv[2]))
