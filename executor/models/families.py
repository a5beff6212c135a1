"""The Stable Diffusion families a single-file checkpoint can be, with their diffusers
configs. (What each family runs, for which mode, is templates.families: data the template
checker reads too.)

A checkpoint in the original LDM layout ("A1111", ComfyUI) holds weights only. diffusers'
``Pipeline.from_single_file(path, config=FOLDER, local_files_only=True)`` takes the rest from
a folder laid out like a diffusers repository: model_index.json plus each component's config
and the tokenizer files, no weights. The configs of the published models ship here, under
families/<folder>/ (see families/NOTICE for where each came from); the CLIP BPE vocabulary
ships once, and each tokenizer's vocab.json and merges.txt are derived from it.
:func:`materialise` writes such a folder, offline, for the model type diffusers' own detector
(``infer_diffusers_model_type``) names.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("families")
BPE = DATA / "bpe_simple_vocab_16e6.txt.gz"
CLIP_VOCAB_SIZE = 49408
TOKENIZER_DIRS = ("tokenizer", "tokenizer_2")
DERIVATION = "clip-bpe-1"  # bump when the derived files change: they land in a new folder


@dataclass(frozen=True)
class Family:
    model_type: str  # what diffusers' infer_diffusers_model_type returns
    family: str  # genbot's name: sd15 | sd2 | sdxl
    pipeline: str  # the diffusers pipeline class from_single_file is called on
    resolution: int  # native width and height
    prediction_type: str  # epsilon | v_prediction (the scheduler config's)
    source: str  # the published diffusers repository the configs are those of
    folder: str  # families/<folder>/


FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    Family("v1", "sd15", "StableDiffusionPipeline", 512, "epsilon",
           "stable-diffusion-v1-5/stable-diffusion-v1-5", "v1"),
    Family("inpainting", "sd15", "StableDiffusionInpaintPipeline", 512, "epsilon",
           "stable-diffusion-v1-5/stable-diffusion-inpainting", "inpainting"),
    Family("v2", "sd2", "StableDiffusionPipeline", 768, "v_prediction",
           "stabilityai/stable-diffusion-2-1", "v2"),
    Family("xl_base", "sdxl", "StableDiffusionXLPipeline", 1024, "epsilon",
           "stabilityai/stable-diffusion-xl-base-1.0", "xl_base"),
    Family("xl_refiner", "sdxl", "StableDiffusionXLImg2ImgPipeline", 1024, "epsilon",
           "stabilityai/stable-diffusion-xl-refiner-1.0", "xl_refiner"),
    Family("xl_inpaint", "sdxl", "StableDiffusionXLInpaintPipeline", 1024, "epsilon",
           "diffusers/stable-diffusion-xl-1.0-inpainting-0.1", "xl_inpaint"),
    # The x4 upscaler: SD 2.x's text encoder (OpenCLIP ViT-H, 1024 wide), its own UNet and
    # VAE. Resolution is its output: a 128x128 image in (the UNet's 128 latents are the
    # low-res pixels, noised and concatenated), 512x512 out (the VAE scales by 4).
    Family("upscale", "sd2", "StableDiffusionUpscalePipeline", 512, "v_prediction",
           "stabilityai/stable-diffusion-x4-upscaler", "upscale"),
)}
# diffusers detects one "v2" for both SD 2.x models; the 512 base predicts epsilon.
V2_BASE = Family("v2", "sd2", "StableDiffusionPipeline", 512, "epsilon",
                 "stabilityai/stable-diffusion-2-1-base", "v2_base")
VARIANTS = {("v2", "epsilon"): V2_BASE}


def family(model_type: str, prediction_type: str | None = None) -> Family:
    """The family for a detected model type; prediction_type picks SD 2.x's 512 epsilon base."""
    try:
        found = FAMILIES[model_type]
    except KeyError:
        raise ValueError(f"unsupported model type {model_type!r}: genbot supports "
                         f"{', '.join(FAMILIES)}") from None
    if prediction_type is None or prediction_type == found.prediction_type:
        return found
    if (model_type, prediction_type) in VARIANTS:
        return VARIANTS[model_type, prediction_type]
    raise ValueError(f"{model_type!r} has no {prediction_type!r} variant")


def v2_prediction_type(checkpoint: Mapping[str, Any]) -> str:
    """Guess whether an SD 2.x checkpoint predicts v (768) or epsilon (512 base).

    A .ckpt's global_step 875000 is the 512 base (diffusers' legacy rule). Otherwise
    ComfyUI's rule: the last output block's first norm bias spreads wider (std > 0.09) in v
    models. A state dict with neither says v_prediction, diffusers' default. Pass
    ``prediction_type`` to :func:`materialise` to override a guess."""
    if checkpoint.get("global_step") == 875000:
        return "epsilon"
    bias = checkpoint.get(
        "model.diffusion_model.output_blocks.11.1.transformer_blocks.0.norm1.bias")
    if bias is not None:
        import torch

        return "v_prediction" if torch.std(bias.float(), unbiased=False) > 0.09 else "epsilon"
    return "v_prediction"


def pipeline_class(fam: Family) -> type:
    """The diffusers class to call from_single_file on (imports diffusers)."""
    import diffusers

    cls: type = getattr(diffusers, fam.pipeline)
    return cls


def bytes_to_unicode() -> dict[int, str]:
    """OpenAI CLIP's reversible byte -> printable character map."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


@cache
def clip_vocab() -> tuple[dict[str, int], tuple[str, ...]]:
    """vocab.json and merges of openai/clip-vit-large-patch14, built as SimpleTokenizer does."""
    lines = gzip.decompress(BPE.read_bytes()).decode("utf-8").split("\n")
    merges = tuple(lines[1:49152 - 256 - 2 + 1])
    byte_chars = list(bytes_to_unicode().values())
    tokens = [*byte_chars, *(c + "</w>" for c in byte_chars),
              *("".join(m.split()) for m in merges), "<|startoftext|>", "<|endoftext|>"]
    vocab = {t: i for i, t in enumerate(tokens)}
    assert len(vocab) == CLIP_VOCAB_SIZE, len(vocab)
    return vocab, merges


def write_clip_tokenizer_files(folder: Path) -> None:
    """Write vocab.json and merges.txt, as Hugging Face's CLIPTokenizer reads them."""
    vocab, merges = clip_vocab()
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n",
                                       encoding="utf-8")


def _digest(source: Path) -> str:
    h = hashlib.sha256(DERIVATION.encode())
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        h.update(path.relative_to(source).as_posix().encode() + b"\0" + path.read_bytes())
    h.update(BPE.read_bytes())
    return h.hexdigest()[:16]


def materialise(model_type: str, into: Path, *, prediction_type: str | None = None) -> Path:
    """The config folder for a model type, written under ``into`` once and returned.

    Its name carries a digest of what ships, so an upgrade writes a new folder rather than
    reusing a stale one. It is built in a temporary folder beside it and renamed into place,
    so a reader never sees half a folder; when two processes race, the first rename wins."""
    fam = family(model_type, prediction_type)
    source = DATA / fam.folder
    into = Path(into)
    target = into / f"{fam.folder}-{_digest(source)}"
    if target.is_dir():
        return target
    into.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=into))
    try:
        for path in source.rglob("*"):
            if path.is_file():  # bytes, not modes: a read-only install gives a writable copy
                copy = tmp / path.relative_to(source)
                copy.parent.mkdir(parents=True, exist_ok=True)
                copy.write_bytes(path.read_bytes())
        for name in TOKENIZER_DIRS:
            if (tmp / name).is_dir():
                write_clip_tokenizer_files(tmp / name)
        tmp.chmod(0o755)
        try:
            tmp.rename(target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# --- ControlNets: a family's UNet configuration, as ControlNetModel.from_unet takes it ---------

CONTROLNET_DEFAULTS = {"conditioning_embedding_out_channels": [16, 32, 96, 256],
                       "controlnet_conditioning_channel_order": "rgb"}


def controlnet_config(model_type: str, prediction_type: str | None = None) -> dict[str, Any]:
    """The config.json of a full-size ControlNet for a family: its UNet's settings that a
    ControlNetModel takes (diffusers builds one from a UNet the same way)."""
    import inspect

    from diffusers import ControlNetModel

    fam = family(model_type, prediction_type)
    unet = json.loads((DATA / fam.folder / "unet" / "config.json").read_text())
    takes = set(inspect.signature(ControlNetModel.__init__).parameters) - {"self"}
    config = {k: v for k, v in unet.items() if k in takes}
    config["in_channels"] = 4  # an inpainting UNet's 9 channels are not a ControlNet's
    return {"_class_name": "ControlNetModel", **config, **CONTROLNET_DEFAULTS}


def materialise_controlnet(model_type: str, into: Path, *,
                           prediction_type: str | None = None) -> Path:
    """A folder holding the family's ControlNet config.json, for from_single_file(config=)."""
    config = controlnet_config(model_type, prediction_type)
    text = json.dumps(config, indent=2, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    target = Path(into) / f"controlnet-{model_type}-{digest}"
    if not (target / "config.json").is_file():
        target.mkdir(parents=True, exist_ok=True)
        tmp = target / f".config.json.{os.getpid()}"
        tmp.write_text(text)
        tmp.replace(target / "config.json")
    return target
