"""The model registry: names from the config, what each file or folder is, offline only."""

from __future__ import annotations

import json

import pytest

from executor.models import demo
from executor.models.registry import ModelError, Registry
from storage import config as cfg
from templates.settings import DEMO_MODELS, models
from tests.conftest import executor_config


def test_demo_models_are_what_the_registry_says(tmp_path, demo_models):
    registry = Registry(executor_config(tmp_path, demo_models))
    kinds = {n: (registry.get(n).kind, registry.get(n).family) for n in registry.names}
    assert kinds == {"sd15": ("checkpoint", "sd15"), "sdxl": ("checkpoint", "sdxl"),
                     "canny_sd15": ("controlnet", "sd15"), "canny_sdxl": ("controlnet", "sdxl"),
                     "walnut": ("lora", "sd15"), "brushed_steel": ("lora", "sd15"),
                     "upscaler": ("upscaler", "sd15"), "ip_sd15": ("ip_adapter", "sd15"),
                     "taesd": ("preview", "sd15"),  # the tiny VAE of sd15's live previews
                     **{name: ("checkpoint", name) for name in (
                         "flux", "flux_kontext", "flux_fill", "flux2", "qwen_image",
                         "qwen_image_edit", "zimage", "sd3")}}
    sd15 = registry.get("sd15")
    assert (sd15.steps, sd15.guidance) == (demo.DEMO_STEPS, demo.DEMO_GUIDANCE)
    zimage = registry.get("zimage")  # Z-Image-Turbo: no CFG, as the real one is run
    assert (zimage.guidance, zimage.size) == (0.0, 64)
    flux = registry.get("flux")  # FLUX.1 [dev]'s distilled guidance; 64 px like the others
    assert (flux.steps, flux.guidance, flux.size) == (demo.DEMO_STEPS, 3.5, 64)
    assert registry.needs_demo() == []


def test_flux_schnell_is_told_by_its_transformer_and_gets_4_steps_without_guidance(
        tmp_path, demo_models):
    """A FLUX.1 folder whose transformer has no guidance embedding is [schnell]: distilled
    to 4 steps, guidance unused; [dev] (the demo) keeps FLUX's defaults; [models] wins."""
    import shutil
    schnell = tmp_path / "schnell"
    shutil.copytree(demo_models / "flux", schnell)
    (schnell / "genbot.json").unlink()
    config_file = schnell / "transformer" / "config.json"
    config_file.write_text(json.dumps(json.loads(config_file.read_text())
                                      | {"guidance_embeds": False}))
    dev = tmp_path / "dev"
    shutil.copytree(demo_models / "flux", dev)
    (dev / "genbot.json").unlink()
    registry = Registry(executor_config(tmp_path / "data", demo_models, models={
        "schnell": str(schnell), "dev": str(dev),
        "mine": {"path": str(schnell), "steps": 6, "guidance": 1.0}}))
    got = {n: (registry.get(n).family, registry.get(n).steps, registry.get(n).guidance)
           for n in ("schnell", "dev", "mine")}
    assert got == {"schnell": ("flux", 4, 0.0), "dev": ("flux", 28, 3.5),
                   "mine": ("flux", 6, 1.0)}


def test_config_defaults_override_the_models_own(tmp_path, demo_models):
    config = executor_config(tmp_path, demo_models, models={
        "sd15": {"path": "demo:sd15", "steps": 25, "guidance": 6}})
    info = Registry(config).get("sd15")
    assert (info.steps, info.guidance) == (25, 6.0)


def test_unknown_missing_and_wrong_kind_are_named(tmp_path, demo_models):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "readme.txt").write_text("hi")
    (tmp_path / "bad.safetensors").write_bytes(b"not a tensor file")
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "model_index.json").write_text(
        json.dumps({"_class_name": "WuerstchenPipeline"}))
    config = executor_config(tmp_path, demo_models, models={
        "gone": str(tmp_path / "nowhere"), "junk": str(tmp_path / "junk"),
        "bad": str(tmp_path / "bad.safetensors"), "odd": str(tmp_path / "odd")})
    registry = Registry(config)
    with pytest.raises(ModelError, match='no model "nope" in \\[models\\]'):
        registry.get("nope")
    with pytest.raises(ModelError, match=r'\[models\] gone = ".*nowhere": .* does not exist$'):
        registry.get("gone")
    with pytest.raises(ModelError, match=r"not a diffusers pipeline, ControlNet, LoRA, "
                                         r"IP-Adapter, CLIPSeg or tiny VAE \(AutoencoderTiny\) "
                                         "folder"):
        registry.get("junk")
    with pytest.raises(ModelError, match="not a readable .safetensors file"):
        registry.get("bad")
    with pytest.raises(ModelError, match="WuerstchenPipeline pipelines are not supported"):
        registry.get("odd")
    with pytest.raises(ModelError, match='"walnut" is a lora, not a checkpoint'):
        registry.get("walnut", "checkpoint")


def test_a_demo_model_not_built_yet_says_how_to_build_it(tmp_path):
    registry = Registry(cfg.from_dict({"service": {"data_dir": str(tmp_path)}}))
    assert sorted(registry.needs_demo()) == sorted(DEMO_MODELS)
    with pytest.raises(ModelError, match="run `genbot models demo`"):
        registry.get("sdxl")


def test_models_config_is_checked_whole(tmp_path):
    for entries, message in [
        ({"x": 5}, 'expected "path" or'),
        ({"x": {"path": "/m", "stepz": 3}}, "unknown key stepz — did you mean steps"),
        ({"x": {"path": "/m", "steps": 0}}, "steps = 0: expected a number from 1 to 200"),
        ({"x y": "/m"}, "a model name is letters, digits"),
        ({"x": {"steps": 3}}, "path: expected a diffusers folder"),
    ]:
        with pytest.raises(cfg.ConfigError, match=message):
            cfg.from_dict({"models": entries})
    config = cfg.from_dict({"models": {"sdxl": "/real/sdxl"}},
                           env={"GENBOT_MODELS_MINE": "/m/mine.safetensors"})
    known = models(config)
    assert known["sdxl"].path == "/real/sdxl" and known["sd15"].path == "demo:sd15"
    assert known["mine"].path == "/m/mine.safetensors"


UNET_IN = "model.diffusion_model.input_blocks.0.0.weight"
CLIP_L = "cond_stage_model.transformer.text_model.embeddings.position_embedding.weight"
XL_BASE = "conditioner.embedders.1.model.transformer.resblocks.9.mlp.c_proj.bias"
XL_REFINER = "conditioner.embedders.0.model.transformer.resblocks.9.mlp.c_proj.bias"
V2_ATTN = "model.diffusion_model.input_blocks.2.1.transformer_blocks.0.attn2.to_k.weight"
KOHYA_K = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k.lora_down.weight"


@pytest.mark.parametrize("tensors, found", [
    ({UNET_IN: (320, 4, 3, 3), CLIP_L: (77, 768)}, ("checkpoint", "sd15", "v1")),
    ({UNET_IN: (320, 9, 3, 3), CLIP_L: (77, 768)}, ("checkpoint", "sd15", "inpainting")),
    ({UNET_IN: (320, 4, 3, 3), V2_ATTN: (320, 1024)}, ("checkpoint", "sd2", "v2")),
    ({UNET_IN: (320, 4, 3, 3), XL_BASE: (1280,)}, ("checkpoint", "sdxl", "xl_base")),
    ({UNET_IN: (384, 4, 3, 3), XL_REFINER: (1280,)}, ("checkpoint", "sdxl", "xl_refiner")),
    ({UNET_IN: (320, 9, 3, 3), XL_BASE: (1280,)}, ("checkpoint", "sdxl", "xl_inpaint")),
    ({"control_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight": (320, 768)},
     ("controlnet", "sd15", "v1")),
    ({"control_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight": (320, 1024)},
     ("controlnet", "sd2", "v2")),
    ({"controlnet_cond_embedding.conv_in.weight": (16, 3, 3, 3), "add_embedding.linear_1.weight":
      (1280, 2816), "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_k.weight":
      (640, 640)}, ("controlnet", "sdxl", "xl_base")),
    ({UNET_IN: (256, 7, 3, 3),
      "model.diffusion_model.input_blocks.10.0.skip_connection.bias": (512,)},
     ("upscaler", "sd2", "upscale")),
    ({KOHYA_K: (4, 768)}, ("lora", "sd15", None)),
    ({KOHYA_K: (4, 1024)}, ("lora", "sd2", None)),
    ({KOHYA_K.replace("lora_down", "lora_up"): (4, 4), KOHYA_K: (4, 2048)}, ("lora", "sdxl", None)),
])
def test_a_single_file_says_what_it_holds_by_its_tensor_names_and_shapes(tmp_path, tensors,
                                                                         found):
    """diffusers' own detector names the family; nothing else is needed to load it."""
    import numpy as np
    from safetensors.numpy import save_file
    save_file({k: np.zeros(shape, dtype=np.float16) for k, shape in tensors.items()},
              tmp_path / "m.safetensors")
    config = cfg.from_dict({"models": {"m": str(tmp_path / "m.safetensors")}})
    info = Registry(config).get("m")
    assert (info.kind, info.family, info.model_type) == found
    assert info.single_file == (found[0] != "lora")
    if found[:3:2] == ("checkpoint", "v2"):  # no telling bias: SD 2.x 768 v-prediction
        assert info.prediction_type == "v_prediction"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("spread, prediction", [(0.2, "v_prediction"), (0.01, "epsilon")])
def test_sd2_prediction_is_told_from_its_weights_in_any_dtype(tmp_path, dtype, spread,
                                                              prediction):
    """SD 2.x's 768 v-model and 512 base share their names; the spread of one norm bias
    tells them apart (ComfyUI's rule) — in bf16 files too, which numpy cannot read."""
    import torch
    from safetensors.torch import save_file
    bias = "model.diffusion_model.output_blocks.11.1.transformer_blocks.0.norm1.bias"
    save_file({UNET_IN: torch.zeros(320, 4, 3, 3, dtype=getattr(torch, dtype)),
               V2_ATTN: torch.zeros(320, 1024, dtype=getattr(torch, dtype)),
               bias: (torch.randn(320, generator=torch.Generator().manual_seed(0)) * spread
                      ).to(getattr(torch, dtype))}, str(tmp_path / "sd2.safetensors"))
    config = cfg.from_dict({"models": {"m": str(tmp_path / "sd2.safetensors")}})
    info = Registry(config).get("m")
    assert (info.family, info.model_type, info.prediction_type) == ("sd2", "v2", prediction)


def test_a_file_genbot_cannot_run_says_what_was_found(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file
    save_file({"model.diffusion_model.joint_blocks.0.context_block.adaLN_modulation.1.bias":
               np.zeros(9216, dtype=np.float16),
               "model.diffusion_model.pos_embed": np.zeros((1, 36864, 1536), dtype=np.float16)},
              tmp_path / "sd3.safetensors")
    save_file({"encoder.weight": np.zeros(2, dtype=np.float16),
               "decoder.weight": np.zeros(2, dtype=np.float16)}, tmp_path / "what.safetensors")
    (tmp_path / "old.ckpt").write_bytes(b"a pickle")
    config = cfg.from_dict({"models": {n: str(tmp_path / f) for n, f in (
        ("sd3", "sd3.safetensors"), ("what", "what.safetensors"), ("old", "old.ckpt"))}})
    registry = Registry(config)
    with pytest.raises(ModelError, match=r"a sd3 checkpoint \(as diffusers names it\); genbot "
                                         r"runs SD 1.5, SD 2.x and SDXL"):
        registry.get("sd3")
    with pytest.raises(ModelError, match=r"not a Stable Diffusion checkpoint, LoRA or ControlNet "
                                         r"genbot knows: its 2 tensors are named like "
                                         r"decoder.weight, encoder.weight"):
        registry.get("what")
    with pytest.raises(ModelError, match=r"old.ckpt is a pickle \(.ckpt\): loading one can run "
                                         r"any code in it, so genbot does not"):
        registry.get("old")


def test_a_single_file_config_folder_is_resolved_like_a_path(tmp_path):
    config = cfg.from_dict({"models": {"m": {"path": "m.safetensors", "config": "base"}}},
                           base_dir=str(tmp_path))
    assert models(config)["m"].config == "base"
    with pytest.raises(cfg.ConfigError, match="config: expected the path of a diffusers folder"):
        cfg.from_dict({"models": {"m": {"path": "m.safetensors", "config": ""}}})
