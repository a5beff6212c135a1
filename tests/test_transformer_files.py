"""Transformers kept on their own, as ComfyUI users keep them (executor.models.transformer_file):
FLUX.1 in Black Forest Labs' layout (plain, ComfyUI-prefixed, fp8), GGUFs the `gguf` package
writes (FLUX.1, Qwen-Image), Z-Image in its original layout — each written here tiny, in the
real format, and run through genbot as a [models] entry with the family's folder beside it."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image

from executor.models import memory
from executor.models.registry import ModelError, Registry
from templates.families import BYTES_PER_WEIGHT
from tests.conftest import executor_config
from tests.fakes.transformer_files import write_gguf, write_single_file

torch = pytest.importorskip("torch")
from executor.diffusers.cache import ModelCache  # noqa: E402 - needs torch
from executor.diffusers.ops import Context  # noqa: E402
from executor.diffusers.ops.diffusion import generate_batch  # noqa: E402


def _changed(transformer, seed: int):
    """The demo's transformer with other weights: an image from it differs from the demo's."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in transformer.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return transformer


@pytest.fixture(scope="module")
def files(tmp_path_factory, demo_models):
    """Each format written from one changed transformer per family, and a diffusers folder
    holding the same transformer: what each file must make, as a reference."""
    from diffusers import (
        Flux2Pipeline,
        Flux2Transformer2DModel,
        FluxPipeline,
        FluxTransformer2DModel,
        QwenImagePipeline,
        QwenImageTransformer2DModel,
        ZImagePipeline,
        ZImageTransformer2DModel,
    )
    out = tmp_path_factory.mktemp("transformers")
    made = {}
    for family, cls, pipe_cls in (("flux", FluxTransformer2DModel, FluxPipeline),
                                  ("qwen_image", QwenImageTransformer2DModel, QwenImagePipeline),
                                  ("zimage", ZImageTransformer2DModel, ZImagePipeline),
                                  ("flux2", Flux2Transformer2DModel, Flux2Pipeline)):
        transformer = _changed(cls.from_pretrained(demo_models / family / "transformer"), 7)
        pipe_cls.from_pretrained(demo_models / family, transformer=transformer).save_pretrained(
            out / f"{family}_ref")
        made[family] = transformer
    flux = made["flux"]
    write_single_file(flux, out / "flux1-dev.safetensors")
    write_single_file(flux, out / "flux1-dev-comfy.safetensors", prefix="model.diffusion_model.")
    write_single_file(flux, out / "flux1-dev-fp8.safetensors", dtype=torch.float8_e4m3fn)
    _write_scaled_fp8(flux, out / "flux1-dev-scaled-fp8.safetensors")
    write_gguf(flux, out / "flux1-dev-Q8_0.gguf", "Q8_0", min_quant_params=256)
    write_gguf(made["qwen_image"], out / "qwen-image-Q8_0.gguf", "Q8_0", min_quant_params=256)
    write_single_file(made["zimage"], out / "z_image_turbo.safetensors",
                      prefix="model.diffusion_model.")
    write_single_file(made["flux2"], out / "flux2-dev.safetensors",
                      prefix="model.diffusion_model.")
    write_gguf(made["flux2"], out / "flux2-dev-Q8_0.gguf", "Q8_0", min_quant_params=256)
    data = (out / "flux1-dev-Q8_0.gguf").read_bytes()
    (out / "truncated.gguf").write_bytes(data[: len(data) // 2])
    return out


def _write_scaled_fp8(transformer, path) -> None:
    """ComfyUI's "scaled fp8" file: each matrix as fp8 of itself over a per-tensor scale,
    the scale beside it (`<name>.scale_weight`), and a `scaled_fp8` marker."""
    from safetensors.torch import save_file

    from tests.fakes.transformer_files import to_original
    state = {}
    for name, t in to_original(transformer).items():
        if t.ndim == 2 and name.endswith(".weight"):
            scale = t.abs().max() / 448
            state[name] = (t / scale).to(torch.float8_e4m3fn)
            state[name.removesuffix(".weight") + ".scale_weight"] = scale.reshape(1)
        else:
            state[name] = t.contiguous()
    state["scaled_fp8"] = torch.zeros(0, dtype=torch.float8_e4m3fn)
    save_file(state, str(path))


def _ctx(tmp_path, demo_models, models: dict) -> Context:
    config = executor_config(tmp_path / "data", demo_models, models=models)
    return Context(None, ModelCache(Registry(config), "cpu", torch.float32,
                                    vram_budget=float("inf"), ram_budget=float("inf")))


def _image(ctx: Context, model: str) -> np.ndarray:
    (im,) = generate_batch(ctx, [{"prompt": "a bottle 瓶子", "negative": "", "model": model,
                                  "seed": 5, "steps": 2, "guidance": None, "size": [64, 64],
                                  "sampler": None, "init_image": None, "strength": 0.75,
                                  "control_image": None, "controlnet": None,
                                  "control_scale": 1.0, "loras": []}])
    assert isinstance(im, Image.Image)
    return np.asarray(im, dtype=np.int16)


@pytest.mark.parametrize("file, family, within", [
    ("flux1-dev.safetensors", "flux", 1),  # of 255: the same weights
    ("flux1-dev-comfy.safetensors", "flux", 1),
    ("flux1-dev-fp8.safetensors", "flux", 12),  # fp8 weights, upcast: close (8 seen)
    ("flux1-dev-scaled-fp8.safetensors", "flux", 12),  # fp8 times its scale
    ("flux1-dev-Q8_0.gguf", "flux", 3),  # 8-bit blocks, kept quantized (1 seen)
    ("qwen-image-Q8_0.gguf", "qwen_image", 3),
    ("z_image_turbo.safetensors", "zimage", 1),
    ("flux2-dev.safetensors", "flux2", 1),  # diffusers' own FLUX.2 converter
    ("flux2-dev-Q8_0.gguf", "flux2", 3),
])
def test_a_transformer_file_runs_with_its_familys_folder(files, tmp_path, demo_models, file,
                                                         family, within):
    """The file beside the demo folder of its family (config = …) makes the image the same
    transformer makes in a diffusers folder, within what its precision loses, and not the
    demo's own image (the file's transformer is the one that ran)."""
    ctx = _ctx(tmp_path, demo_models, {
        "file": {"path": str(files / file), "config": str(demo_models / family)},
        "ref": str(files / f"{family}_ref")})
    info = ctx.models.registry.get("file")
    assert (info.kind, info.family, info.model_type) == ("checkpoint", family, "transformer")
    made, ref, demo = _image(ctx, "file"), _image(ctx, "ref"), _image(ctx, family)
    assert np.abs(made - ref).max() <= within
    assert np.abs(made - demo).max() > within


def test_a_gguf_stays_quantized_and_is_planned_at_its_size(files, tmp_path, demo_models):
    """A GGUF's weights stay in their 8-bit blocks on the model (diffusers' GGUF layers),
    and memory planning counts them so: less than the same transformer at 32 bits, the
    rest (text encoders, VAE) from the family's folder."""
    ctx = _ctx(tmp_path, demo_models, {
        "q8": {"path": str(files / "flux1-dev-Q8_0.gguf"), "config": str(demo_models / "flux")}})
    pipe = ctx.models.pipeline("q8", "txt2img")
    kinds = {type(p).__name__ for p in pipe.transformer.parameters()}
    assert "GGUFParameter" in kinds
    gguf = memory.need(files / "flux1-dev-Q8_0.gguf", "flux", dtype_bytes=4,
                       beside=demo_models / "flux")
    plain = memory.need(demo_models / "flux", "flux", dtype_bytes=4)
    assert set(gguf.parts) == set(plain.parts)
    assert gguf.parts["transformer"] < plain.parts["transformer"] / 2
    assert {k: v for k, v in gguf.parts.items() if k != "transformer"} == {
        k: v for k, v in plain.parts.items() if k != "transformer"}


def test_what_a_transformer_file_cannot_be_is_said_in_one_sentence(files, tmp_path,
                                                                   demo_models):
    """No folder for the rest; a folder of another family; a family it cannot be; a GGUF cut
    short: each refused naming the file and what was expected, before anything loads."""
    flux_gguf, qwen_gguf = str(files / "flux1-dev-Q8_0.gguf"), str(files / "qwen-image-Q8_0.gguf")
    registry = Registry(executor_config(tmp_path / "data", demo_models, models={
        "alone": flux_gguf,
        "qwen_on_flux": {"path": qwen_gguf, "config": str(demo_models / "flux")},
        "said_sd3": {"path": flux_gguf, "config": str(demo_models / "flux"), "family": "sd3"},
        "kontext": {"path": flux_gguf, "config": str(demo_models / "flux"),
                    "family": "flux_kontext"},
        "cut": {"path": str(files / "truncated.gguf"), "config": str(demo_models / "flux")}}))

    def refused(name: str) -> str:
        with pytest.raises(ModelError) as e:
            registry.get(name)
        return str(e.value)

    assert refused("alone") == (
        f'[models] alone = "{flux_gguf}": a FLUX.1 transformer on its own, as ComfyUI keeps '
        'them: set config = "<a diffusers folder of FLUX.1>" for its text encoders, VAE and '
        "scheduler")
    assert refused("qwen_on_flux") == (
        f'[models] qwen_on_flux = "{qwen_gguf}": a Qwen-Image transformer, but its config '
        f"folder {demo_models / 'flux'} is FLUX.1; a Qwen-Image transformer runs as Qwen-Image "
        "or Qwen-Image-Edit")
    assert refused("said_sd3").endswith(': a FLUX.1 transformer, but family = "sd3" Stable '
                                        "Diffusion 3.5; a FLUX.1 transformer runs as FLUX.1 or "
                                        "FLUX.1 Kontext")
    assert re.fullmatch(r'\[models\] cut = "[^"]+truncated.gguf": not a complete GGUF file '
                        r"\(\d+ bytes: .+\)", refused("cut"))
    assert registry.get("kontext").family == "flux_kontext"  # what the tensors cannot tell


def test_a_flux_file_without_guidance_is_schnell(tmp_path, demo_models):
    """FLUX.1 [schnell] is told by its tensors (no guidance embedding): 4 steps, no guidance."""
    from diffusers import FluxTransformer2DModel
    config = dict(FluxTransformer2DModel.load_config(demo_models / "flux" / "transformer"))
    config["guidance_embeds"] = False
    schnell = FluxTransformer2DModel.from_config(config)
    write_single_file(schnell, tmp_path / "flux1-schnell.safetensors")
    registry = Registry(executor_config(tmp_path / "data", demo_models, models={
        "schnell": {"path": str(tmp_path / "flux1-schnell.safetensors"),
                    "config": str(demo_models / "flux")}}))
    info = registry.get("schnell")
    assert (info.steps, info.guidance) == (4, 0.0)


def test_fp8_stores_a_folders_transformer_at_8_bits(tmp_path, demo_models):
    """quantize = "fp8": the transformer's matrices stored as float8 (torchao), the image
    close to the one at full precision; memory planned at a byte a weight for them."""
    ctx = _ctx(tmp_path, demo_models, {"fp8": {"path": "demo:flux", "quantize": "fp8"}})
    made, full = _image(ctx, "fp8"), _image(ctx, "flux")
    assert 0 < np.abs(made - full).max() <= 12
    weights = {type(p.data).__name__ for p in ctx.models.pipeline("fp8", "txt2img")
               .transformer.parameters()}
    assert "Float8Tensor" in weights
    at_fp8 = memory.need(demo_models / "flux", "flux", dtype_bytes=4,
                         quantized={"transformer": 1})
    whole = memory.need(demo_models / "flux", "flux", dtype_bytes=4)
    assert whole.parts["transformer"] / 4 < at_fp8.parts["transformer"] < \
        whole.parts["transformer"] / 2
    assert at_fp8.parts["vae"] == whole.parts["vae"]


def test_nf4_stores_a_folders_transformer_at_4_bits_where_a_gpu_is(tmp_path, demo_models,
                                                                   monkeypatch):
    """quantize = "nf4": bitsandbytes' 4-bit NormalFloat through diffusers, which loads it
    only where CUDA is. No GPU here: with CUDA said to be there (the one thing mocked;
    bitsandbytes 0.50 quantizes and multiplies on a CPU), the transformer's linear layers
    are 4-bit and the image is the model's, near the full one; memory planned at about half
    a byte a weight. Without, the load is refused naming what to use instead."""
    ctx = _ctx(tmp_path, demo_models, {"nf4": {"path": "demo:flux", "quantize": "nf4"}})
    with pytest.raises(ModelError, match=re.escape(
            'quantize = "nf4" runs on CUDA GPUs only (bitsandbytes, as diffusers loads it): on '
            'this executor use quantize = "fp8"')):
        _image(ctx, "nf4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    # bitsandbytes repacks 4-bit weights for its own CPU kernel on CPUs with AVX512-BF16,
    # which needs layers at least one 64-weight block wide (the demo's are 16): a GPU never
    # takes that path, and without it the result does not depend on this machine's CPU
    monkeypatch.setattr("bitsandbytes.nn.modules.has_avx512bf16", lambda: False)
    ctx = Context(None, ModelCache(ctx.models.registry, "cpu", torch.float32,
                                   vram_budget=float("inf"), ram_budget=float("inf")))
    made = _image(ctx, "nf4")
    monkeypatch.undo()
    full = _image(ctx, "flux")
    # of 255: 20 at most and 3 on average seen (4 bits a weight on a model this small)
    assert 0 < np.abs(made - full).max() <= 32 and np.abs(made - full).mean() < 6
    transformer = ctx.models.pipeline("nf4", "txt2img").transformer
    layers = {type(m).__name__ for m in transformer.modules()}
    assert "Linear4bit" in layers and "Linear" not in layers - {"Linear4bit"}
    at_nf4 = memory.need(demo_models / "flux", "flux", dtype_bytes=4,
                         quantized={"transformer": BYTES_PER_WEIGHT["nf4"]})
    whole = memory.need(demo_models / "flux", "flux", dtype_bytes=4)
    assert whole.parts["transformer"] / 8 < at_nf4.parts["transformer"] < \
        whole.parts["transformer"] / 4


def test_fp8_is_for_a_folder_with_a_transformer(files, tmp_path, demo_models):
    from storage import config as cfg
    registry = Registry(executor_config(tmp_path / "data", demo_models, models={
        "sd": {"path": "demo:sd15", "quantize": "fp8"},
        "gguf": {"path": str(files / "flux1-dev-Q8_0.gguf"), "config": str(demo_models / "flux"),
                 "quantize": "fp8"}}))
    with pytest.raises(ModelError, match='quantize = "fp8" is for a diffusers folder with a '
                                         "transformer"):
        registry.get("sd")
    with pytest.raises(cfg.ConfigError, match="quantize = 'int2': expected fp8 or nf4"):
        executor_config(tmp_path / "data2", demo_models, models={
            "x": {"path": "demo:flux", "quantize": "int2"}})
    with pytest.raises(ModelError, match='quantize = "fp8" is for a diffusers folder; a '
                                         "transformer file loads at the precision it is stored"):
        registry.get("gguf")
