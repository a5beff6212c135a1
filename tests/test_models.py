"""The model registry: names from the config, what each file or folder is, offline only."""

from __future__ import annotations

import json

import pytest

from executor import demo
from executor.models import ModelError, Registry
from storage import config as cfg
from tests.conftest import executor_config


def test_demo_models_are_what_the_registry_says(tmp_path, demo_models):
    registry = Registry(executor_config(tmp_path, demo_models))
    kinds = {n: (registry.get(n).kind, registry.get(n).family) for n in registry.names}
    assert kinds == {"sd15": ("checkpoint", "sd15"), "sdxl": ("checkpoint", "sdxl"),
                     "canny_sd15": ("controlnet", "sd15"), "canny_sdxl": ("controlnet", "sdxl"),
                     "walnut": ("lora", "sd15"), "brushed_steel": ("lora", "sd15"),
                     "upscaler": ("upscaler", "sd15")}
    sd15 = registry.get("sd15")
    assert (sd15.steps, sd15.guidance) == (demo.DEMO_STEPS, demo.DEMO_GUIDANCE)
    assert registry.needs_demo() == []


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
    (tmp_path / "odd" / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    config = executor_config(tmp_path, demo_models, models={
        "gone": str(tmp_path / "nowhere"), "junk": str(tmp_path / "junk"),
        "bad": str(tmp_path / "bad.safetensors"), "odd": str(tmp_path / "odd")})
    registry = Registry(config)
    with pytest.raises(ModelError, match='no model "nope" in \\[models\\]'):
        registry.get("nope")
    with pytest.raises(ModelError, match=r'\[models\] gone = ".*nowhere": .* does not exist$'):
        registry.get("gone")
    with pytest.raises(ModelError, match="not a diffusers pipeline, ControlNet or LoRA folder"):
        registry.get("junk")
    with pytest.raises(ModelError, match="not a readable .safetensors file"):
        registry.get("bad")
    with pytest.raises(ModelError, match="FluxPipeline pipelines are not supported"):
        registry.get("odd")
    with pytest.raises(ModelError, match='"walnut" is a lora, not a checkpoint'):
        registry.get("walnut", "checkpoint")


def test_a_demo_model_not_built_yet_says_how_to_build_it(tmp_path):
    registry = Registry(cfg.from_dict({"service": {"data_dir": str(tmp_path)}}))
    assert sorted(registry.needs_demo()) == sorted(cfg.DEMO_MODELS)
    with pytest.raises(ModelError, match="run `genbot models demo`"):
        registry.get("sdxl")


def test_models_config_is_checked_whole(tmp_path):
    for models, message in [
        ({"x": 5}, 'expected "path" or'),
        ({"x": {"path": "/m", "stepz": 3}}, "unknown key stepz — did you mean steps"),
        ({"x": {"path": "/m", "steps": 0}}, "steps = 0: expected a number from 1 to 200"),
        ({"x y": "/m"}, "a model name is letters, digits"),
        ({"x": {"steps": 3}}, "path: expected a diffusers folder"),
    ]:
        with pytest.raises(cfg.ConfigError, match=message):
            cfg.from_dict({"models": models})
    config = cfg.from_dict({"models": {"sdxl": "/real/sdxl"}},
                           env={"GENBOT_MODELS_MINE": "/m/mine.safetensors"})
    assert config.models["sdxl"].path == "/real/sdxl" and config.models["sd15"].path == "demo:sd15"
    assert config.models["mine"].path == "/m/mine.safetensors"


@pytest.mark.parametrize("keys, kind, family", [
    (["conditioner.embedders.1.model.ln_final.weight", "model.diffusion_model.out.0.weight"],
     "checkpoint", "sdxl"),
    (["cond_stage_model.transformer.text_model.final_layer_norm.weight",
      "model.diffusion_model.out.0.weight"], "checkpoint", "sd15"),
    (["control_model.input_blocks.0.0.weight"], "controlnet", None),
    (["lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k.lora_down.weight"],
     "lora", "sd15"),
])
def test_a_single_file_says_what_it_holds_by_its_tensor_names(tmp_path, keys, kind, family):
    import numpy as np
    from safetensors.numpy import save_file
    shape = (4, 768) if "lora_down" in keys[0] else (2,)
    save_file({k: np.zeros(shape, dtype=np.float32) for k in keys}, tmp_path / "m.safetensors")
    config = cfg.from_dict({"models": {"m": str(tmp_path / "m.safetensors")}})
    info = Registry(config).get("m")
    assert (info.kind, info.family, info.single_file) == (kind, family, kind != "lora")


def test_a_single_file_config_folder_is_resolved_like_a_path(tmp_path):
    config = cfg.from_dict({"models": {"m": {"path": "m.safetensors", "config": "base"}}},
                           base_dir=str(tmp_path))
    assert config.models["m"].config == "base"
    with pytest.raises(cfg.ConfigError, match="config: expected the path of a diffusers folder"):
        cfg.from_dict({"models": {"m": {"path": "m.safetensors", "config": ""}}})
