"""The shipped family configs: the published models' shapes, CLIP's tokenizer, and a folder
diffusers' from_single_file takes as config= offline. Models are built on the meta device."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from executor import families

CASES = [(t, None) for t in families.FAMILIES] + [("v2", "epsilon")]
IDS = [t if p is None else f"{t}-{p}" for t, p in CASES]

# Parameter counts of the published models' components (see the report for sources).
CLIP_L, OPENCLIP_H_23, OPENCLIP_BIGG_PROJ = 123_060_480, 340_387_840, 694_659_840
VAE, SD15_UNET, SD2_UNET = 83_653_863, 859_520_964, 865_910_724
SDXL_UNET, REFINER_UNET = 2_567_463_684, 2_259_526_660
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


def test_families_say_what_genbot_needs():
    expected = {
        "v1": ("sd15", "StableDiffusionPipeline", 512),
        "inpainting": ("sd15", "StableDiffusionInpaintPipeline", 512),
        "v2": ("sd2", "StableDiffusionPipeline", 768),
        "xl_base": ("sdxl", "StableDiffusionXLPipeline", 1024),
        "xl_refiner": ("sdxl", "StableDiffusionXLImg2ImgPipeline", 1024),
        "xl_inpaint": ("sdxl", "StableDiffusionXLInpaintPipeline", 1024),
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
