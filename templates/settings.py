"""The template layer's settings: where templates come from, the models they may name,
and the ComfyUI servers that run ComfyUI templates.

These are the settings both sides read: the bot checks a template's models against
[models] (and says which are genbot's demo models), draws contact sheets in [templates]
font and starts one executor per [comfyui] server; the executor loads the models,
draws text in the font and drives the servers. (storage.config is the loader.)
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.config import Config, ConfigError, key, section, table
from templates.families import PROFILES, SAVED_AS, refusals
from templates.graph import Template
from templates.loader import TemplateError, load_templates, shipped_dir


@section("templates", order=50)
@dataclass(frozen=True)
class TemplatesConfig:
    """Workflow templates: JSON files, checked at start-up and on demand."""

    dir: str = key("", "Folder of *.json templates. Empty: the templates shipped with genbot.")
    font: str = key("", "TrueType/OpenType font for text, watermarks and contact sheets. "
                    "Empty: the bundled WenQuanYi Micro Hei, which covers Chinese and Latin.")
    edit_model: str = key("", "The [models] name an image is edited by instruction with "
                          "(/edit 3 把背景换成海滩): a FLUX.1 Kontext, Qwen-Image-Edit or "
                          "FLUX.2 model. Empty: the first in [models] whose family edits.")
    fill_model: str = key("", "The [models] name a region is repainted (/repaint) and a "
                          "canvas extended (/extend 3 9:16) with: FLUX.1 Fill, or a model of "
                          "a family that inpaints. Empty: the image's own model where its "
                          "family inpaints, else the first in [models] that does.")
    segmentation_model: str = key("", "The [models] name (a CLIPSeg folder, such as "
                                  "CIDAS/clipseg-rd64-refined) that finds a region named in "
                                  "words for a repaint (/repaint 3 region=瓶子 …). Empty: "
                                  "regions are painted or sent as masks only.")


def edit_model(config: Config) -> str | None:
    """The model instruction edits run on: [templates] edit_model, else the first [models]
    entry whose family edits (templates.families), real ones before demos; None: none."""
    if chosen := config[TemplatesConfig].edit_model:
        return chosen
    editing = [name for name in models(config)
               if (fam := family_of(config, name)) in PROFILES and PROFILES[fam].edits]
    real = [n for n in editing if not models(config)[n].path.startswith("demo:")]
    return next(iter(real or editing), None)


def fill_model(config: Config, own: str | None = None) -> str | None:
    """The model repaints and extends run on: [templates] fill_model, else `own` (the
    model that made the image) where its family inpaints, else the first [models] entry
    whose family does, FLUX.1 Fill first and real ones before demos; None: none."""
    if chosen := config[TemplatesConfig].fill_model:
        return chosen

    def inpaints(name: str) -> bool:
        fam = family_of(config, name)
        return fam in PROFILES and PROFILES[fam].runs("inpaint")
    if own is not None and own in models(config) and inpaints(own):
        return own
    ranked = sorted((name for name in models(config) if inpaints(name)), key=lambda n: (
        models(config)[n].path.startswith("demo:"), family_of(config, n) != "flux_fill"))
    return next(iter(ranked), None)


def templates_dir(config: Config) -> Path:
    """The folder templates are read from: [templates] dir, else the shipped ones."""
    folder = config[TemplatesConfig].dir
    return config.path(folder) if folder else shipped_dir()


@section("assets", order=54)
@dataclass(frozen=True)
class AssetsConfig:
    """The team's own files: pictures, layouts, logos, fonts (docs/deliver.md)."""

    dir: str = key("./assets", "Folder of the team's files (relative to the config file's "
                   "folder): pictures image cells may name, layouts in layouts/*.json, and "
                   "the logos and fonts layouts name.")


def assets_folder(config: Config) -> Path:
    """[assets] dir, where the team's layouts, logos and fonts are."""
    return config.path(config[AssetsConfig].dir)


@section("deliver", order=55)
@dataclass(frozen=True)
class DeliverConfig:
    """Sales channels: the files each takes from a row's image (docs/deliver.md)."""

    channels: str = key("", "A TOML file of the team's own channels, added to the shipped "
                        "presets (a channel of a preset's name replaces it). Empty: the "
                        "presets only (GET /api/v1/channels lists them).")
    unlabelled: list[str] = key((), "Channels whose renditions carry no visible AI label "
                                "(\"AI生成\"): only channels whose preset makes the label "
                                "optional (shops outside China that forbid words on the "
                                "picture). The label in the file's metadata stays.")
    producer: str = key("genbot", "Who made the content, as the implicit AI-content label "
                        "(GB 45438-2025, ContentProducer) names it: the provider's name "
                        "or code.")
    max_rerolls: int = key(0, "Make an image again with a new seed, this many times at most, "
                           "when a channel's file of it breaks a rule a new picture may mend "
                           "(a background not white, a product too small in its frame): "
                           "counted in the submitter's limits. 0: the file is marked needs "
                           "review instead.", min=0, max=5)
    checks: list[str] = key(("nsfw", "text", "words", "product"), "Checks of each "
                            "generated picture before its files are made: nsfw (NudeNet: "
                            "exposed parts), text (RapidOCR: the words a prompt quotes are "
                            "spelt right in the picture), words (none in a picture whose "
                            "channel allows none), product (a template that keeps its "
                            "product: the photo's pixels are still there inside its mask). "
                            "A file that fails one needs review. Empty: the channels' "
                            "rules only.")
    folder: str = key("", "A shared folder the files that ship are put in, as "
                      "batch_<id>/<channel>/<file name>. Empty: none.")
    bucket: str = key("", "An S3-compatible bucket the files that ship are put in (its "
                      "address and keys: [storage] endpoint, region, access_key, "
                      "secret_key). Empty: none.")
    prefix: str = key("", "Key prefix in that bucket, e.g. \"launch/\".")
    c2pa_cert: str = key("", "The team's C2PA signing certificate: a PEM chain, the signing "
                         "certificate first (ES256). Empty: genbot's own, made once in the "
                         "data folder (c2pa/); readers then call the signer untrusted.")
    c2pa_key: str = key("", "The private key of c2pa_cert (PEM).", secret=True)

    def check(self, source: str) -> None:
        from templates.channels import ChannelError, catalogue
        if bool(self.c2pa_cert) != bool(self.c2pa_key):
            raise ConfigError(f"{source}: [deliver] c2pa_cert and c2pa_key: set both (the "
                              "certificate chain and its private key), or neither")
        try:
            known = catalogue(self.channels)
        except ChannelError as e:
            raise ConfigError(f"{source}: [deliver] channels: {e}") from None
        from templates.deliver_checks import PICTURE_CHECKS
        for check in self.checks:
            if check not in PICTURE_CHECKS:
                raise ConfigError(f'{source}: [deliver] checks: "{check}" is no check; '
                                  f"expected some of {', '.join(PICTURE_CHECKS)}")
        for name in self.unlabelled:
            if name not in known:
                raise ConfigError(f'{source}: [deliver] unlabelled: "{name}" is no channel '
                                  f"(known: {', '.join(sorted(known))})")
            if known[name].label != "optional":
                raise ConfigError(f'{source}: [deliver] unlabelled: "{name}" requires its '
                                  "visible AI label (its preset says label = \"required\"): "
                                  "published in China, AI pictures must carry it")


@section("comfyui", order=60)
@dataclass(frozen=True)
class ComfyUIConfig:
    """ComfyUI servers a team already runs: genbot queues, they generate (docs/comfyui.md)."""

    servers: list[str] = key((), "ComfyUI servers (http://host:8188) for templates with "
                             "\"engine\": \"comfyui\"; genbot serve runs one executor for each. "
                             "Empty: none (genbot worker --comfyui URL runs one anywhere).")
    connect_timeout: float = key(10.0, "Seconds to connect to a server before it counts as down.",
                                 min=0.1, max=600)
    backoff_max: float = key(60.0, "Longest wait, in seconds, between tries to reach a server "
                             "that is down; the wait doubles from 1 s.", min=0.1, max=3600)
    free_after_jobs: int = key(0, "Ask the server to unload its models and free memory (POST "
                               "/free) after this many jobs (0: never; [executor] "
                               "recycle_after_jobs applies too).", min=0, max=10_000_000)

    def check(self, source: str) -> None:
        for url in self.servers:
            if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
                raise ConfigError(f'{source}: [comfyui] servers: "{url}": expected a ComfyUI '
                                  'server\'s address such as "http://127.0.0.1:8188"')
        if len({u.rstrip("/") for u in self.servers}) != len(self.servers):
            raise ConfigError(f"{source}: [comfyui] servers: a server is named twice (one "
                              "executor per server: it gets one prompt at a time)")


@dataclass(frozen=True)
class ModelEntry:
    """A logical model name -> where its weights are, and defaults a sheet may leave empty."""

    path: str  # a diffusers folder, a .safetensors file, or "demo:<name>" (built by genbot)
    steps: int | None = None  # None: the model's own (a demo's genbot.json, else 30)
    guidance: float | None = None
    size: int | None = None  # None: the model's native resolution
    # For a single-file checkpoint: a diffusers folder of the same family to take the
    # configuration (and tokenizers) from. None: genbot's own for the family it detects
    # (executor.models.families); needed only for what genbot does not ship (a ControlNet file).
    config: str | None = None
    # Its family (templates.families), when genbot cannot read it here: a single file, or a
    # folder on the executors' hosts only. Lets templates be checked against it at load.
    family: str | None = None
    # How much of it may wait in CPU RAM while it runs (executor.models.memory): "auto" the
    # least offloading that fits the executor's device memory; none, model or sequential.
    offload: str = "auto"
    # Its transformer's weights stored quantized, the matmuls at the executor's dtype:
    # "fp8" (torchao's float8 weight-only; half a bf16 transformer's memory, any device) or
    # "nf4" (bitsandbytes' 4-bit NormalFloat; about a quarter, CUDA GPUs). None: as stored.
    quantize: str | None = None
    # Another [models] entry: a tiny VAE (TAESD, TAESDXL, TAEF1, TAESD3) the executor draws
    # this model's live previews with. None: colours fitted from its own VAE (blurrier).
    preview: str | None = None


# The demo models `genbot models demo` builds (tiny, random weights; images are noise).
# The shipped templates name these, so a fresh install runs every template on a CPU.
DEMO_MODELS = {
    "sd15": ModelEntry("demo:sd15", family="sd15", preview="taesd"),
    "sdxl": ModelEntry("demo:sdxl", family="sdxl"),
    "canny_sd15": ModelEntry("demo:canny_sd15"),
    "canny_sdxl": ModelEntry("demo:canny_sdxl"),
    "walnut": ModelEntry("demo:walnut"),
    "brushed_steel": ModelEntry("demo:brushed_steel"),
    "upscaler": ModelEntry("demo:upscaler"),  # used when [executor] upscaler = "upscaler"
    "ip_sd15": ModelEntry("demo:ip_sd15"),  # an IP-Adapter: a generate node's reference picture
    "flux": ModelEntry("demo:flux", family="flux"),  # FLUX.1 [dev]'s design
    "flux_kontext": ModelEntry("demo:flux_kontext", family="flux_kontext"),
    "flux_fill": ModelEntry("demo:flux_fill", family="flux_fill"),
    "flux2": ModelEntry("demo:flux2", family="flux2"),
    "qwen_image": ModelEntry("demo:qwen_image", family="qwen_image"),
    "qwen_image_edit": ModelEntry("demo:qwen_image_edit", family="qwen_image_edit"),
    "zimage": ModelEntry("demo:zimage", family="zimage"),  # Z-Image-Turbo's design
    "sd3": ModelEntry("demo:sd3", family="sd3"),  # Stable Diffusion 3.5's design
    "taesd": ModelEntry("demo:taesd"),  # a tiny VAE: sd15's live previews
}
MODEL_KEYS = ("path", "steps", "guidance", "size", "config", "family", "offload", "quantize",
              "preview")
OFFLOADS = ("auto", "none", "model", "sequential")
QUANTIZE = ("fp8", "nf4")


@table("models", order=65)
@dataclass(frozen=True)
class ModelsConfig:
    """[models]: logical model name -> its weights. Names given replace the demo models."""

    entries: Mapping[str, ModelEntry]

    @classmethod
    def parse(cls, body: Any, source: str, env: Mapping[str, str]) -> ModelsConfig:
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: models must be a [models] table of name = \"path\"")
        entries = dict(DEMO_MODELS)
        entries.update({name: _model_entry(name, value, f"{source}: [models] {name}")
                        for name, value in body.items()})
        for var, raw in env.items():
            if var.startswith(cls.env_prefix()):
                model = var.removeprefix(cls.env_prefix()).lower()
                entries[model] = _model_entry(model, raw, f"environment {var}")
        for name, entry in entries.items():
            if entry.preview is not None and entry.preview not in entries:
                raise ConfigError(f'{source}: [models] {name}: preview = "{entry.preview}" names '
                                  "no model in [models] (a tiny VAE such as TAESD: `genbot "
                                  "models pull madebyollin/taesd`, then [models] taesd = …)")
        return cls(entries)

    @classmethod
    def env_prefix(cls) -> str:
        return "GENBOT_MODELS_"

    @classmethod
    def example(cls) -> list[str]:
        return [
            "# Logical model name -> weights: a diffusers folder (SD 1.5, SD 2.x or SDXL family, a",
            "# ControlNet, an upscaler), a single-file .safetensors checkpoint (its family told",
            "# from its tensors, no config needed), or a LoRA .safetensors file (kohya or",
            "# diffusers). Loaded strictly offline; `genbot models pull REPO --write` fetches and",
            "# adds one (docs/models.md). A table sets defaults a sheet may leave empty:",
            '#   sdxl = { path = "/models/sdxl-base", steps = 30, guidance = 5.0 }',
            '#   dreamshaper = "/models/checkpoints/dreamshaper_8.safetensors"',
            "# Names given here replace the defaults below, which are genbot's demo models: tiny,",
            "# random weights (their images are noise), built on first start or by",
            "# `genbot models demo`, so every shipped template runs on a CPU out of the box.",
            "[models]",
            *(f'{name} = "{entry.path}"' for name, entry in DEMO_MODELS.items())]

    def demo(self, names: Any) -> list[str]:
        """Which of these model names are genbot's demo models (their images are noise)."""
        return sorted({n for n in names if n in self.entries
                       and self.entries[n].path.startswith("demo:")})


def models(config: Config) -> Mapping[str, ModelEntry]:
    return config[ModelsConfig].entries


def models_dir(config: Config) -> Path:
    """Where genbot keeps models it builds or pulls (the demo models under demo/)."""
    return config.data_dir / "models"


def model_path(config: Config, entry: ModelEntry) -> Path:
    if entry.path.startswith("demo:"):
        return models_dir(config) / "demo" / entry.path.removeprefix("demo:")
    return config.path(entry.path)


def _model_entry(name: str, value: Any, where: str) -> ModelEntry:
    if not name or not name.replace("_", "a").replace("-", "a").isalnum():
        raise ConfigError(f"{where}: a model name is letters, digits, _ and -")
    if isinstance(value, str):
        value = {"path": value}
    if not isinstance(value, dict):
        raise ConfigError(f'{where}: expected "path" or {{ path = "...", steps = 30 }}')
    for k in value:
        if k not in MODEL_KEYS:
            close = difflib.get_close_matches(k, MODEL_KEYS, n=1, cutoff=0.6)
            hint = f" — did you mean {close[0]}?" if close else ""
            raise ConfigError(f"{where}: unknown key {k}{hint}; expected {', '.join(MODEL_KEYS)}")
    path = value.get("path")
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"{where}: path: expected a diffusers folder, a .safetensors file "
                          'or "demo:<name>"')
    # key -> (the number types it takes, lowest, highest); type[float] admits int
    checks: dict[str, tuple[type[float] | tuple[type[float], ...], int, int]] = {
        "steps": (int, 1, 200), "guidance": ((int, float), 0, 50), "size": (int, 64, 8192)}
    for k, (kind, low, high) in checks.items():
        v = value.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, kind)
                              or not low <= v <= high):
            raise ConfigError(f"{where}: {k} = {v!r}: expected a number from {low} to {high}")
    guidance = value.get("guidance")
    config = value.get("config")
    if config is not None and (not isinstance(config, str) or not config.strip()):
        raise ConfigError(f"{where}: config: expected the path of a diffusers folder")
    family = value.get("family")
    if family is not None and family not in PROFILES:
        raise ConfigError(f"{where}: family = {family!r}: expected one of {', '.join(PROFILES)}")
    offload = value.get("offload", "auto")
    if offload not in OFFLOADS:
        raise ConfigError(f"{where}: offload = {offload!r}: expected one of {', '.join(OFFLOADS)}")
    quantize = value.get("quantize")
    if quantize is not None and quantize not in QUANTIZE:
        raise ConfigError(f"{where}: quantize = {quantize!r}: expected {' or '.join(QUANTIZE)} "
                          "(a GGUF file is quantized already: give its path)")
    preview = value.get("preview")
    if preview is not None and (not isinstance(preview, str) or not preview.strip()):
        raise ConfigError(f"{where}: preview: expected the name of a tiny VAE in [models]")
    return ModelEntry(path, value.get("steps"), None if guidance is None else float(guidance),
                      value.get("size"), config, family, offload, quantize, preview)


def family_of(config: Config, name: str) -> str | None:
    """The family of a [models] entry when it can be told here without loading it: said in
    the config (family = "…"), a demo's, or a diffusers folder's model_index.json. None:
    not here (a single file, or a folder on another host): the executor that loads it
    refuses it then."""
    entry = models(config).get(name)
    if entry is None:
        return None
    return entry.family or saved_family(model_path(config, entry))


def prompt_tokens(config: Config, name: str) -> Callable[[str], int] | None:
    """Counts a text's tokens as a [models] entry's main text encoder reads it (special
    tokens included: CLIP's 77 count its start and end), with the tokenizer.json its
    folder holds; None where that cannot be told here (a single file, a folder on another
    host or without a tokenizer.json, a family genbot does not know) or is not worth
    telling (a demo: its byte-level tokenizer stands in for one it could not fetch).
    Chat-templated encoders (Qwen, Mistral) add their template's tokens on top, which
    their pipelines allow for."""
    entry = models(config).get(name)
    if entry is None or entry.path.startswith("demo:"):
        return None
    family = family_of(config, name)
    if family not in PROFILES:
        return None
    file = model_path(config, entry) / PROFILES[family].tokenizer / "tokenizer.json"
    try:
        stamp = file.stat().st_mtime_ns
    except OSError:
        return None
    return _counter(str(file), stamp)


@functools.lru_cache(maxsize=32)
def _counter(file: str, stamp: int) -> Callable[[str], int] | None:
    """(`stamp`: the file's mtime, so a tokenizer replaced in place is read again.)"""
    from tokenizers import Tokenizer  # (Rust, no torch: what transformers' fast ones wrap)
    try:
        tokenizer = Tokenizer.from_file(file)
    except Exception:  # noqa: BLE001 - not a tokenizer it reads: the executor's to judge
        return None
    return lambda text: len(tokenizer.encode(text).ids)


def saved_family(folder: Path) -> str | None:
    """The family a diffusers folder was saved as: its model_index.json's pipeline."""
    try:
        saved = json.loads((folder / "model_index.json").read_text())
    except (OSError, ValueError):
        return None
    saved_as = saved.get("_class_name") if isinstance(saved, dict) else None
    return SAVED_AS.get(saved_as) if isinstance(saved_as, str) else None


def load_configured(config: Config) -> tuple[dict[str, Template], list[TemplateError]]:
    """The templates of [templates] dir, each also checked against [models]: a node whose
    model's family cannot run the node's mode (an edit on a text-to-image model) breaks
    its template at load, said once, rather than failing every job of a batch."""
    templates, errors = load_templates(templates_dir(config))
    for name, t in list(templates.items()):
        if found := refusals(t, lambda model: family_of(config, model)):
            errors.append(TemplateError(t.file, *found[0]))
            del templates[name]
    return templates, errors
