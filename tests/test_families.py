"""The shipped family configs: the published models' shapes, CLIP's tokenizer, and a folder
diffusers' from_single_file takes as config= offline. Models are built on the meta device."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from executor.models import families
from templates import families as catalog

CASES = [(t, None) for t in families.FAMILIES] + [("v2", "epsilon")]
IDS = [t if p is None else f"{t}-{p}" for t, p in CASES]

# Parameter counts of the published models' components (see the report for sources).
CLIP_L, OPENCLIP_H_23, OPENCLIP_BIGG_PROJ = 123_060_480, 340_387_840, 694_659_840
VAE, SD15_UNET, SD2_UNET = 83_653_863, 859_520_964, 865_910_724
SDXL_UNET, REFINER_UNET = 2_567_463_684, 2_259_526_660
X4_UNET, X4_VAE = 473_398_020, 55_325_927  # the x4 upscaler's (see the upscaler tests below)
INPAINT_INPUT = 320 * 5 * 3 * 3  # conv_in's 5 extra input channels: masked-image latents + mask
EXPECTED = {
    "v1": {"unet": SD15_UNET, "vae": VAE, "text_encoder": CLIP_L},
    "inpainting": {"unet": SD15_UNET + INPAINT_INPUT, "vae": VAE, "text_encoder": CLIP_L},
    "v2": {"unet": SD2_UNET, "vae": VAE, "text_encoder": OPENCLIP_H_23},
    "v2-epsilon": {"unet": SD2_UNET, "vae": VAE, "text_encoder": OPENCLIP_H_23},
    "xl_base": {"unet": SDXL_UNET, "vae": VAE, "text_encoder": CLIP_L,
                "text_encoder_2": OPENCLIP_BIGG_PROJ},
    "xl_refiner": {"unet": REFINER_UNET, "vae": VAE, "text_encoder_2": OPENCLIP_BIGG_PROJ},
    "xl_inpaint": {"unet": SDXL_UNET + INPAINT_INPUT, "vae": VAE, "text_encoder": CLIP_L,
                   "text_encoder_2": OPENCLIP_BIGG_PROJ},
    "upscale": {"unet": X4_UNET, "vae": X4_VAE, "text_encoder": OPENCLIP_H_23},
}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".ckpt", ".pt", ".pth", ".msgpack", ".onnx", ".gguf")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {i: families.materialise(t, root, prediction_type=p) for i, (t, p) in zip(IDS, CASES)}


def build(folder: Path) -> dict:
    """Every model component of the folder, on the meta device."""
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    models = {}
    with init_empty_weights():
        models["unet"] = UNet2DConditionModel.from_config(
            UNet2DConditionModel.load_config(folder / "unet"))
        models["vae"] = AutoencoderKL.from_config(AutoencoderKL.load_config(folder / "vae"))
        for name, cls in (("text_encoder", CLIPTextModel),
                          ("text_encoder_2", CLIPTextModelWithProjection)):
            if (folder / name).is_dir():
                models[name] = cls(CLIPTextConfig.from_pretrained(folder / name))
    return models


@pytest.mark.parametrize("case", IDS)
def test_components_have_the_published_models_parameter_counts(folders, case):
    models = build(folders[case])
    assert all(p.device.type == "meta" for m in models.values() for p in m.parameters())
    counts = {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}
    assert counts == EXPECTED[case]


@pytest.mark.parametrize("case", IDS)
def test_each_component_config_loads_offline_with_its_class(folders, case):
    import diffusers
    import transformers
    from accelerate import init_empty_weights

    folder = folders[case]
    index = diffusers.DiffusionPipeline.load_config(folder)
    model_type, prediction_type = CASES[IDS.index(case)]
    fam = families.family(model_type, prediction_type)
    assert index["_class_name"] == fam.pipeline
    components = {k: v for k, v in index.items()
                  if not k.startswith("_") and isinstance(v, list) and v[0] is not None}
    # from_single_file never loads the safety checker (SINGLE_FILE_OPTIONAL_COMPONENTS)
    components.pop("safety_checker", None)
    assert {p.name for p in folder.iterdir() if p.is_dir()} == set(components)
    for name, (library, class_name) in components.items():
        cls = getattr(diffusers if library == "diffusers" else transformers, class_name)
        if issubclass(cls, diffusers.ModelMixin):
            config = cls.load_config(folder, subfolder=name, local_files_only=True)
            assert config["_class_name"] == class_name
            with init_empty_weights():
                assert isinstance(cls.from_config(config), cls)
        elif issubclass(cls, transformers.PreTrainedModel):
            config = cls.config_class.from_pretrained(folder, subfolder=name,
                                                      local_files_only=True)
            assert config.architectures == [class_name]
        else:  # scheduler, tokenizer, image processor: the real object, from the folder
            loaded = cls.from_pretrained(folder, subfolder=name, local_files_only=True)
            assert loaded is not None
    scheduler = getattr(diffusers, components["scheduler"][1]).from_pretrained(
        folder, subfolder="scheduler", local_files_only=True)
    assert scheduler.config.prediction_type == fam.prediction_type


def test_every_family_runs_on_pipelines_diffusers_has():
    """templates.families, the one table of what genbot runs per family: each class exists,
    every family a model can be detected as has a profile, every mode is one genbot knows,
    and the families sampled by flow matching are the transformer ones."""
    import diffusers

    from executor.models.registry import PIPELINES
    detected = {f.family for f in families.FAMILIES.values()} | {
        family for _, family in PIPELINES.values()}
    assert detected <= set(catalog.PROFILES)
    for name, runs in catalog.PROFILES.items():
        for (mode, _), cls in runs.pipelines.items():
            assert mode in catalog.MODES and hasattr(diffusers, cls), (name, cls)
        assert runs.lora_family in catalog.PROFILES
        assert (runs.images > 0) == runs.runs("edit"), name
        assert runs.load_as in catalog.SAVED_AS, name  # a folder saved by it is recognised
    assert {n for n, p in catalog.PROFILES.items() if not p.flow} == {"sd15", "sd2", "sdxl"}
    assert catalog.profile("flux").modes() == ["img2img", "inpaint", "txt2img"]


def test_memory_of_a_family_at_each_precision():
    """What a family's weights take: FLUX.1 at bf16 is about 31 GiB (transformer 22 GiB,
    T5-XXL 9 GiB: what every FLUX guide says), a Q4_0 transformer under 7 GiB of it."""
    flux = catalog.profile("flux")
    assert 30 < flux.gib("bf16") < 32
    assert flux.gib("q4_0") < flux.gib("fp8") < flux.gib("q8_0") < flux.gib("bf16")
    assert flux.gib("bf16") - flux.gib("q4_0") > 15  # only the transformer shrinks
    assert flux.gib("fp32") == 2 * flux.gib("bf16")


def test_families_say_what_genbot_needs():
    expected = {
        "v1": ("sd15", "StableDiffusionPipeline", 512),
        "inpainting": ("sd15", "StableDiffusionInpaintPipeline", 512),
        "v2": ("sd2", "StableDiffusionPipeline", 768),
        "xl_base": ("sdxl", "StableDiffusionXLPipeline", 1024),
        "xl_refiner": ("sdxl", "StableDiffusionXLImg2ImgPipeline", 1024),
        "xl_inpaint": ("sdxl", "StableDiffusionXLInpaintPipeline", 1024),
        "upscale": ("sd2", "StableDiffusionUpscalePipeline", 512),
    }
    assert {t: (f.family, f.pipeline, f.resolution) for t, f in families.FAMILIES.items()} \
        == expected
    assert families.family("v2", "epsilon").resolution == 512
    assert families.family("v2", "v_prediction") is families.FAMILIES["v2"]
    assert families.family("xl_base", "epsilon") is families.FAMILIES["xl_base"]
    with pytest.raises(ValueError, match="unsupported"):
        families.family("flux-dev")
    with pytest.raises(ValueError, match="no 'v_prediction' variant"):
        families.family("v1", "v_prediction")


def test_the_model_types_are_the_ones_diffusers_detects():
    from diffusers.loaders import single_file_utils as sfu

    for model_type, fam in families.FAMILIES.items():
        assert model_type in sfu.DIFFUSERS_DEFAULT_PIPELINE_PATHS
        default = sfu.DIFFUSERS_DEFAULT_PIPELINE_PATHS[model_type]["pretrained_model_name_or_path"]
        assert default.split("/")[1] == fam.source.split("/")[1]


def test_v2_prediction_type_follows_global_step_then_the_weights():
    import torch

    key = "model.diffusion_model.output_blocks.11.1.transformer_blocks.0.norm1.bias"
    assert families.v2_prediction_type({"global_step": 875000}) == "epsilon"
    assert families.v2_prediction_type({key: torch.linspace(-1, 1, 640)}) == "v_prediction"
    assert families.v2_prediction_type({key: torch.zeros(640)}) == "epsilon"
    assert families.v2_prediction_type({}) == "v_prediction"


def test_the_clip_vocabulary_is_openais():
    vocab, merges = families.clip_vocab()
    assert len(vocab) == families.CLIP_VOCAB_SIZE == 49408 and len(merges) == 48894
    assert vocab["!"] == 0 and vocab["!</w>"] == 256 and vocab["cat</w>"] == 2368
    assert vocab["<|startoftext|>"] == 49406 and vocab["<|endoftext|>"] == 49407
    assert sorted(vocab.values()) == list(range(49408))


def test_the_tokenizers_tokenize_as_clip_does(folders):
    from transformers import CLIPTokenizer

    tok = CLIPTokenizer.from_pretrained(folders["v1"] / "tokenizer", local_files_only=True)
    assert len(tok) == 49408 and tok.model_max_length == 77
    assert tok("a photo of a cat").input_ids == [49406, 320, 1125, 539, 320, 2368, 49407]
    assert tok("A Photo   of a CAT").input_ids == [49406, 320, 1125, 539, 320, 2368, 49407]
    for text in ["一只猫坐在窗台上", "🐱🚀 café naïve", "(masterpiece:1.2), 8k, ÜBER-detailed",
                 "日本語のテキスト", "Привет мир", ""]:
        ids = tok(text, padding="max_length", max_length=77, truncation=True).input_ids
        assert len(ids) == 77 and ids[0] == 49406 and 49407 in ids
        assert all(0 <= i < 49408 for i in ids)
    assert tok.decode(tok("a photo of a cat").input_ids, skip_special_tokens=True) \
        == "a photo of a cat"
    # SD 1.5 and SDXL's first tokenizer pad with <|endoftext|>; SD 2.x and SDXL's second with
    # "!", token 0, as OpenCLIP does.
    for case, name, pad, pad_id in [("v1", "tokenizer", "<|endoftext|>", 49407),
                                    ("xl_base", "tokenizer", "<|endoftext|>", 49407),
                                    ("xl_base", "tokenizer_2", "!", 0),
                                    ("xl_refiner", "tokenizer_2", "!", 0),
                                    ("v2", "tokenizer", "!", 0)]:
        t = CLIPTokenizer.from_pretrained(folders[case] / name, local_files_only=True)
        assert (t.pad_token, t.pad_token_id) == (pad, pad_id), (case, name)
        padded = t("a photo of a cat", padding="max_length", max_length=10).input_ids
        assert padded == [49406, 320, 1125, 539, 320, 2368, 49407] + [pad_id] * 3


def test_materialise_is_idempotent_and_ships_no_weights(tmp_path):
    first = families.materialise("xl_base", tmp_path)
    stamp = (first / "unet" / "config.json").stat().st_mtime_ns
    assert families.materialise("xl_base", tmp_path) == first
    assert (first / "unet" / "config.json").stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary folder left
    files = [p for p in first.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.endswith(WEIGHT_SUFFIXES)]
    assert sum(p.stat().st_size for p in files) < 4_000_000
    for name in ("tokenizer", "tokenizer_2"):
        assert {p.name for p in (first / name).iterdir()} == {
            "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"}
    assert json.loads((first / "tokenizer" / "vocab.json").read_text(encoding="utf-8")) \
        == families.clip_vocab()[0]


def test_racing_materialisers_agree_on_one_folder(tmp_path):
    with ThreadPoolExecutor(8) as pool:
        results = set(pool.map(lambda _: families.materialise("v1", tmp_path), range(16)))
    assert len(results) == 1
    assert [p.name for p in tmp_path.iterdir()] == [results.pop().name]


def test_single_file_loading_takes_the_folder(folders, tmp_path):
    """from_single_file reads model_index.json, the scheduler, tokenizers and image processor
    from the folder; the weighted models are handed in (built on meta) so no weights load."""
    import diffusers
    import torch
    from safetensors.torch import save_file

    checkpoint = tmp_path / "tiny.safetensors"
    save_file({"model.diffusion_model.out.2.bias": torch.zeros(4)}, str(checkpoint))
    for case, (model_type, prediction_type) in zip(IDS, CASES):
        fam = families.family(model_type, prediction_type)
        pipe = families.pipeline_class(fam).from_single_file(
            str(checkpoint), config=str(folders[case]), local_files_only=True,
            **build(folders[case]))
        assert type(pipe).__name__ == fam.pipeline
        if model_type == "xl_refiner":  # scored as the refiner was trained, no text_encoder
            assert pipe.config.requires_aesthetics_score and pipe.text_encoder is None
        assert pipe.scheduler.config.prediction_type == fam.prediction_type
        assert type(pipe.scheduler).__name__ == diffusers.DiffusionPipeline.load_config(
            folders[case])["scheduler"][1]
        for name in ("tokenizer", "tokenizer_2"):
            if (folders[case] / name).is_dir():
                assert getattr(pipe, name)("a cat").input_ids == [49406, 320, 2368, 49407]


# --- The x4 upscaler (stabilityai/stable-diffusion-x4-upscaler) -------------------------------

def x4_unet_parameters() -> int:
    """The x4 upscaler UNet's parameter count worked out from Stability AI's
    configs/stable-diffusion/x4-upscaling.yaml, layer by layer as the original code
    (ldm/modules/diffusionmodules/openaimodel.py UNetModel) builds it: 7 channels in, 4 out,
    model_channels 256, channel_mult 1 2 2 4, 2 res blocks, attention at ds 2 4 8 with
    self-attention disabled in the first three levels, linear transformers with context 1024,
    1000 noise-level classes. diffusers plays no part: an independent count."""
    ctx, emb = 1024, 4 * 256

    def conv(i: int, o: int, k: int = 3) -> int:
        return k * k * i * o + o

    def linear(i: int, o: int, bias: bool = True) -> int:
        return i * o + (o if bias else 0)

    def resblock(i: int, o: int) -> int:  # GroupNorm, conv, emb projection, GroupNorm, conv
        return 2 * i + conv(i, o) + linear(emb, o) + 2 * o + conv(o, o) + \
            (conv(i, o, 1) if i != o else 0)

    def attention(c: int, kv: int) -> int:  # q, k, v without bias; out with
        return linear(c, c, False) + 2 * linear(kv, c, False) + linear(c, c)

    def transformer(c: int, self_attention: bool) -> int:  # SpatialTransformer, depth 1
        block = attention(c, c if self_attention else ctx) + attention(c, ctx) + \
            linear(c, 8 * c) + linear(4 * c, c) + 3 * 2 * c  # GEGLU feed-forward, 3 norms
        return 2 * c + linear(c, c) + block + linear(c, c)  # norm, proj_in, block, proj_out

    mult, attends, self_attends = (1, 2, 2, 4), {1, 2, 3}, {3}
    total = linear(256, emb) + linear(emb, emb) + 1000 * emb + conv(7, 256)
    skips, ch = [256], 256
    for level, m in enumerate(mult):
        for _ in range(2):
            total += resblock(ch, 256 * m) + \
                (transformer(256 * m, level in self_attends) if level in attends else 0)
            ch = 256 * m
            skips.append(ch)
        if level < len(mult) - 1:
            total += conv(ch, ch)  # downsample
            skips.append(ch)
    total += 2 * resblock(ch, ch) + transformer(ch, True)  # middle block
    for level, m in reversed(list(enumerate(mult))):
        for i in range(3):
            total += resblock(ch + skips.pop(), 256 * m) + \
                (transformer(256 * m, level in self_attends) if level in attends else 0)
            ch = 256 * m
            if level and i == 2:
                total += conv(ch, ch)  # upsample
    return total + 2 * ch + conv(ch, 4)


def test_the_x4_upscalers_counts_are_the_published_models():
    # The UNet's, counted from the original architecture as published.
    assert x4_unet_parameters() == X4_UNET
    # The sizes the Hugging Face hub shows for stabilityai/stable-diffusion-x4-upscaler's files
    # (fp32 but where named): unet 1.89 GB, unet fp16 947 MB, vae 221 MB, text_encoder
    # 1.36 GB; x4-upscaler-ema.safetensors 3.53 GB, which also holds OpenCLIP's 24th layer
    # (diffusers keeps 23: the model reads the penultimate), its projection and logit scale.
    assert (round(X4_UNET * 4 / 1e9, 2), round(X4_UNET * 2 / 1e6)) == (1.89, 947)
    assert (round(X4_VAE * 4 / 1e6), round(OPENCLIP_H_23 * 4 / 1e9, 2)) == (221, 1.36)
    layer = 12 * 1024 * 1024 + 13 * 1024  # one ViT-H text layer: q k v out, mlp, 2 norms
    single = X4_UNET + X4_VAE + OPENCLIP_H_23 + layer + 1024 * 1024 + 1
    assert round(single * 4 / 1e9, 2) == 3.53


def x4_ldm_state(unet, vae, text_encoder) -> dict:
    """The x4 upscaler's weights under their names in x4-upscaler-ema.safetensors (the
    inverse of diffusers' convert_ldm_unet_checkpoint, convert_ldm_vae_checkpoint and
    convert_open_clip_checkpoint): the UNet as SD's plus its noise-level embedding
    (label_emb), the VAE's attention as 1x1 convolutions, and OpenCLIP ViT-H's whole text
    tower (fused q/k/v, open_clip's names), whose 24th layer, projection and logit scale
    diffusers leaves unread: zeros here, in the file as in the published one."""
    import math

    import torch

    from tests.fakes.ldm import unet_key, vae_key
    up_attention = {b for b, kind in enumerate(unet.config.up_block_types) if "CrossAttn" in kind}
    state = {}
    for k, v in unet.state_dict().items():
        new = "label_emb.weight" if k == "class_embedding.weight" else \
            unet_key(k, unet.config.layers_per_block, up_attention)
        state["model.diffusion_model." + new] = v
    for k, v in vae.state_dict().items():
        new = vae_key(k, len(vae.config.up_block_types))
        if new.split(".")[-2] in ("q", "k", "v", "proj_out") and v.ndim == 2:
            v = v[:, :, None, None]
        state["first_stage_model." + new] = v
    sd = {k.removeprefix("text_model."): v for k, v in text_encoder.state_dict().items()}
    prefix, layers = "cond_stage_model.model.", text_encoder.config.num_hidden_layers
    state[prefix + "token_embedding.weight"] = sd["embeddings.token_embedding.weight"]
    state[prefix + "positional_embedding"] = sd["embeddings.position_embedding.weight"]
    state[prefix + "ln_final.weight"] = sd["final_layer_norm.weight"]
    state[prefix + "ln_final.bias"] = sd["final_layer_norm.bias"]
    for i in range(layers + 1):  # i == layers: OpenCLIP's 24th layer, shaped as the 23rd
        layer = f"encoder.layers.{min(i, layers - 1)}."
        block = f"{prefix}transformer.resblocks.{i}."
        unread = torch.zeros_like if i == layers else (lambda t: t)
        for part in ("weight", "bias"):
            state[f"{block}attn.in_proj_{part}"] = unread(torch.cat(
                [sd[f"{layer}self_attn.{p}_proj.{part}"] for p in "qkv"]))
            for ours, theirs in (("self_attn.out_proj", "attn.out_proj"), ("layer_norm1", "ln_1"),
                                 ("layer_norm2", "ln_2"), ("mlp.fc1", "mlp.c_fc"),
                                 ("mlp.fc2", "mlp.c_proj")):
                state[f"{block}{theirs}.{part}"] = unread(sd[f"{layer}{ours}.{part}"])
    like = sd["final_layer_norm.weight"]
    state[prefix + "text_projection"] = like.new_zeros(like.shape[0], like.shape[0])
    state[prefix + "logit_scale"] = like.new_full((), math.log(1 / 0.07))
    return state


def test_the_x4_single_file_layout_is_the_one_diffusers_reads(folders):
    """The layout the full-size test below writes, checked on the meta device: diffusers
    detects it as the upscaler and its own converters give back every weight of each model,
    by name and shape, with nothing left over but the unread OpenCLIP tensors."""
    from diffusers.loaders import single_file_utils as sfu

    models = build(folders["upscale"])
    state = x4_ldm_state(models["unet"], models["vae"], models["text_encoder"])
    assert sfu.infer_diffusers_model_type(state) == "upscale"
    converted = {
        "unet": sfu.convert_ldm_unet_checkpoint(state, dict(models["unet"].config)),
        "vae": sfu.convert_ldm_vae_checkpoint(state, dict(models["vae"].config)),
        "text_encoder": sfu.convert_open_clip_checkpoint(models["text_encoder"], state,
                                                         prefix="cond_stage_model.model.")}
    for name, model in models.items():
        got = {k.removeprefix("text_model."): tuple(v.shape) for k, v in converted[name].items()}
        want = {k.removeprefix("text_model."): tuple(v.shape)
                for k, v in model.state_dict().items()}
        assert got == want, name
    counted = sum(v.numel() for v in state.values())
    assert counted == X4_UNET + X4_VAE + OPENCLIP_H_23 + 12 * 1024 * 1024 + 13 * 1024 \
        + 1024 * 1024 + 1


def test_the_upscaler_loads_with_its_noise_schedule_and_latent_scale(folders, tmp_path):
    """What from_single_file builds from the folder: the published max noise level (350), the
    low-res noise schedule of x4-upscaling.yaml (LDM's "linear" from 1e-4 to 0.02 is
    diffusers' "scaled_linear"), v-prediction, the VAE's 0.08333 scale, 4x: 128 in, 512 out."""
    import torch
    from diffusers import StableDiffusionUpscalePipeline
    from safetensors.torch import save_file

    checkpoint = tmp_path / "tiny.safetensors"
    save_file({"model.diffusion_model.out.2.bias": torch.zeros(4)}, str(checkpoint))
    folder = folders["upscale"]
    pipe = StableDiffusionUpscalePipeline.from_single_file(
        str(checkpoint), config=str(folder), local_files_only=True, **build(folder))
    assert pipe.config.max_noise_level == 350
    low = pipe.low_res_scheduler
    assert type(low).__name__ == "DDPMScheduler" and low.config.prediction_type == "epsilon"
    ldm_linear = torch.linspace(1e-4 ** 0.5, 0.02 ** 0.5, 1000, dtype=torch.float64) ** 2
    assert torch.allclose(low.betas.double(), ldm_linear, rtol=1e-5, atol=0)
    assert type(pipe.scheduler).__name__ == "DDIMScheduler"
    assert pipe.scheduler.config.prediction_type == "v_prediction"
    assert pipe.vae.config.scaling_factor == 0.08333 and pipe.vae_scale_factor == 4
    assert pipe.unet.config.in_channels == 7 and pipe.unet.config.num_class_embeds == 1000
    assert pipe.unet.config.sample_size * pipe.vae_scale_factor \
        == families.FAMILIES["upscale"].resolution == 512
    assert pipe.text_encoder.config.num_hidden_layers == 23
    assert pipe.tokenizer("a cat", padding="max_length", max_length=6).input_ids \
        == [49406, 320, 2368, 49407, 0, 0]


def upscale_full_size(tmp: str) -> None:
    """The full-size test's body, run in a process of its own so its peak is its own and
    the memory goes back whole: the real x4 upscaler's shapes, random weights, fp16, in the
    original single-file layout; loaded from that file and the shipped folder alone (bfloat16,
    as CPUs run it) and asked to upscale 16x16 to 64x64 in one step."""
    import gc
    import resource
    import time

    import numpy as np
    import torch
    from diffusers import StableDiffusionUpscalePipeline
    from PIL import Image
    from safetensors.torch import save_file

    from tests.fakes.bigmodels import named
    started = time.monotonic()
    folder = families.materialise("upscale", Path(tmp) / "reference")
    models = build(folder)
    generator = torch.Generator().manual_seed(0)
    for model in models.values():
        model.to(torch.float16)
        model.to_empty(device="cpu")
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.02, generator=generator)
    probes = ["unet/class_embedding.weight",  # label_emb: the noise level's embedding
              "unet/down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_k.weight",
              "unet/up_blocks.2.upsamplers.0.conv.weight",
              "vae/decoder.mid_block.attentions.0.to_q.weight",  # a 1x1 conv in the file
              "text_encoder/encoder.layers.22.self_attn.v_proj.weight"]  # from fused q/k/v
    expected = {p: named(models[p.split("/")[0]], p.split("/", 1)[1]).detach().clone()
                for p in probes}
    file = Path(tmp) / "x4-upscaler-random.safetensors"
    save_file({k: v.contiguous() for k, v in x4_ldm_state(**models).items()}, str(file))
    del models, model, p
    gc.collect()
    built = time.monotonic() - started
    pipe = StableDiffusionUpscalePipeline.from_single_file(
        str(file), config=str(folder), local_files_only=True, torch_dtype=torch.bfloat16)
    loaded = {"unet": pipe.unet, "vae": pipe.vae, "text_encoder": pipe.text_encoder}
    for probe, want in expected.items():
        got = named(loaded[probe.split("/")[0]], probe.split("/", 1)[1]).detach()
        assert torch.equal(got.float(), want.to(torch.bfloat16).float()), probe
    assert sum(p.numel() for p in pipe.unet.parameters()) == X4_UNET
    small = Image.fromarray(np.arange(16 * 16 * 3, dtype=np.uint8).reshape(16, 16, 3))
    # The VAE decodes in float32 (a tenth of the weights): bfloat16 convolutions crawl on
    # CPUs without bf16 units, and its 64-pixel decode took 80 s of this test's 100.
    pipe.vae.to(torch.float32)
    (image,) = pipe("a bottle", image=small, num_inference_steps=1,
                    generator=torch.Generator().manual_seed(0), output_type="np").images
    assert image.shape == (64, 64, 3) and np.isfinite(image).all()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    print(f"full-size x4 upscaler: built and written in {built:.0f} s, loaded and upscaled "
          f"16x16 -> 64x64 in one step in {time.monotonic() - started - built:.0f} s; file "
          f"{file.stat().st_size / 2**30:.2f} GiB; peak memory (max RSS) {peak:.2f} GiB")


@pytest.mark.slow
@pytest.mark.xdist_group("full_size")  # GBs of RAM each: one at a time under xdist
@pytest.mark.skipif(not os.environ.get("GENBOT_HEAVY_TESTS"), reason="35 s and 20 s of CPU "
                    "at full size, past the suite's 10-minute budget on 2 cores (the layout "
                    "and the loading it proves are proved on the meta device and small by the "
                    "two tests above): run with GENBOT_HEAVY_TESTS=1")
def test_a_full_size_x4_upscaler_single_file_loads_offline_and_upscales(tmp_path):
    """x4-upscaler-ema.safetensors as published (its tensors' names, shapes and fp16; random
    values), loaded by diffusers' StableDiffusionUpscalePipeline.from_single_file with the
    shipped folder as config and no network, then 16x16 -> 64x64 in one step. In a process of
    its own (upscale_full_size): it prints the time and the peak memory."""
    import subprocess

    from tests.conftest import PYTHON, ROOT, python_env
    code = "import sys; from tests.test_families import upscale_full_size as f; f(sys.argv[1])"
    done = subprocess.run([PYTHON, "-c", code, str(tmp_path)], cwd=ROOT,
                          env=python_env() | {"HF_HUB_OFFLINE": "1"}, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    print(done.stdout.strip())


# --- a template's models against their families, when templates load ------------------------

def _edit_template(folder: Path, name: str, model: str, *, negative: str | None = None,
                   choices: list[str] | None = None) -> None:
    params: dict = {"picture": {"type": "image", "required": True},
                    "instruction": {"type": "text", "required": True},
                    "seed": {"type": "seed"}}
    if choices:
        params["model"] = {"type": "choice", "choices": choices, "default": choices[0]}
    inputs = {"image": "$picture", "instruction": "$instruction", "seed": "$seed",
              "model": "$model" if choices else model}
    if negative is not None:
        inputs["negative"] = negative
    (folder / f"{name}.json").write_text(json.dumps({
        "name": name, "description": "an instruction edit", "params": params,
        "nodes": {"edit": {"op": "edit", "inputs": inputs},
                  "out": {"op": "save", "inputs": {"image": "@edit"}}},
        "output": "{row}.png"}))


def test_a_node_whose_model_cannot_run_its_mode_breaks_its_template_at_load(tmp_path):
    """An edit on a text-to-image model, a choice column offering one, a negative prompt
    for a family that reads none: each is said when templates load, naming the model, its
    family and the mode, and that template is not served; the others load. A family is
    known from [models] family = "…", a demo's, or a diffusers folder's model_index.json."""
    from storage import config as cfg
    from templates.settings import family_of, load_configured
    folder = tmp_path / "templates"
    folder.mkdir()
    (tmp_path / "kontext").mkdir()
    (tmp_path / "kontext" / "model_index.json").write_text(
        json.dumps({"_class_name": "FluxKontextPipeline"}))
    config = cfg.from_dict({
        "service": {"data_dir": str(tmp_path)}, "templates": {"dir": str(folder)},
        "models": {"kontext": str(tmp_path / "kontext"),
                   "qwen_edit": {"path": "/elsewhere/qwen-edit.safetensors",
                                 "family": "qwen_image_edit"},
                   "dev": {"path": "/elsewhere/flux1-dev.safetensors", "family": "flux"},
                   "unknown": "/elsewhere/some.safetensors"}})
    assert [family_of(config, m) for m in ("kontext", "qwen_edit", "dev", "unknown")] == [
        "flux_kontext", "qwen_image_edit", "flux", None]
    _edit_template(folder, "fine", "kontext")
    _edit_template(folder, "fine_too", "qwen_edit", negative="blurry")  # Qwen reads one
    _edit_template(folder, "not_here", "unknown")  # its executor decides
    _edit_template(folder, "on_dev", "dev")
    _edit_template(folder, "offers_dev", "", choices=["kontext", "dev"])
    _edit_template(folder, "negative", "kontext", negative="blurry")
    templates, errors = load_configured(config)
    assert sorted(templates) == ["fine", "fine_too", "not_here"]
    said = {Path(e.file).stem: (e.path, e.message) for e in errors}
    assert said == {
        "on_dev": ("nodes.edit.model", 'model "dev" is FLUX.1 (flux), which genbot runs for '
                   "img2img, inpaint, txt2img, not edit"),
        "offers_dev": ("nodes.edit.model", 'model "dev" is FLUX.1 (flux), which genbot runs '
                       "for img2img, inpaint, txt2img, not edit"),
        "negative": ("nodes.edit.negative", 'model "kontext" is FLUX.1 Kontext (flux_kontext), '
                     "which reads no negative prompt: leave the node's negative out (say what "
                     "to avoid in the prompt instead)")}


def test_a_family_in_models_is_checked(tmp_path):
    from storage import config as cfg
    with pytest.raises(cfg.ConfigError, match=r"\[models\] x: family = 'fluxx': expected one "
                                              r"of sd15, sd2, sdxl, sd3, flux, flux_kontext"):
        cfg.from_dict({"service": {"data_dir": str(tmp_path)},
                       "models": {"x": {"path": "x.safetensors", "family": "fluxx"}}})
    with pytest.raises(cfg.ConfigError, match=r"\[models\] x: offload = 'cpu': expected one of "
                                              "auto, none, model, sequential"):
        cfg.from_dict({"service": {"data_dir": str(tmp_path)},
                       "models": {"x": {"path": "x.safetensors", "offload": "cpu"}}})


def test_the_families_table_in_the_docs_is_the_catalogs():
    docs = Path(__file__).resolve().parents[1] / "docs" / "models.md"
    assert catalog.markdown_table() in docs.read_text(encoding="utf-8")
