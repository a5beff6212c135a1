"""The model registry: logical names from the config -> what each file or folder is.

Reading what a model is needs no torch: a diffusers folder says it in
model_index.json or config.json, a .safetensors file in its tensor names. Nothing
is ever fetched: a name that points nowhere is an error naming the config key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from storage.config import Config, ModelEntry

PIPELINES = {  # model_index.json _class_name -> (kind, family)
    "StableDiffusionPipeline": ("checkpoint", "sd15"),
    "StableDiffusionImg2ImgPipeline": ("checkpoint", "sd15"),
    "StableDiffusionXLPipeline": ("checkpoint", "sdxl"),
    "StableDiffusionXLImg2ImgPipeline": ("checkpoint", "sdxl"),
    "StableDiffusionUpscalePipeline": ("upscaler", "sd15"),
}
DEFAULT_STEPS, DEFAULT_GUIDANCE = 30, {"sd15": 7.5, "sdxl": 5.0}
LORA_FILE = "pytorch_lora_weights.safetensors"


class ModelError(Exception):
    """A model that cannot be used: unknown name, missing files, wrong kind or family."""


@dataclass(frozen=True)
class ModelInfo:
    name: str
    path: Path
    kind: str  # checkpoint | controlnet | lora | upscaler
    family: str | None  # sd15 | sdxl | None when unknown (some LoRAs)
    single_file: bool
    entry: ModelEntry
    defaults: dict  # a demo's genbot.json: steps, guidance

    @property
    def config_dir(self) -> str | None:
        """Where a single-file checkpoint's configuration comes from (None: the HF cache)."""
        return self.entry.config

    @property
    def steps(self) -> int:
        return self.entry.steps or self.defaults.get("steps") or DEFAULT_STEPS

    @property
    def guidance(self) -> float:
        if self.entry.guidance is not None:
            return self.entry.guidance
        return self.defaults.get("guidance") or DEFAULT_GUIDANCE.get(self.family or "sd15", 7.5)


class Registry:
    def __init__(self, config: Config):
        self.config = config
        self._known: dict[str, ModelInfo] = {}

    @property
    def names(self) -> list[str]:
        return sorted(self.config.models)

    def size(self, name: str) -> int:
        """Bytes of a model's files on disk: about what it takes in device memory at
        16 bits (what placement compares with an executor's budget). 0: not there yet."""
        path = self.config.model_path(self.config.models[name])
        if path.is_file():
            return path.stat().st_size
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0

    def needs_demo(self) -> list[str]:
        """Demo models the config names that are not built yet."""
        return [n for n, e in self.config.models.items()
                if e.path.startswith("demo:") and not self.config.model_path(e).exists()]

    def get(self, name: str, kind: str | None = None) -> ModelInfo:
        if name not in self._known:
            self._known[name] = self._inspect(name)
        info = self._known[name]
        if kind and info.kind != kind:
            raise ModelError(f'model "{name}" is a {info.kind}, not a {kind}')
        return info

    def _inspect(self, name: str) -> ModelInfo:
        entry = self.config.models.get(name)
        if entry is None:
            raise ModelError(f'no model "{name}" in [models] (known: {", ".join(self.names)})')
        path = self.config.model_path(entry)
        where = f'[models] {name} = "{entry.path}"'
        if not path.exists():
            hint = " (run `genbot models demo`)" if entry.path.startswith("demo:") else ""
            raise ModelError(f"{where}: {path} does not exist{hint}")
        defaults = {}
        if path.is_dir() and (path / "genbot.json").is_file():
            defaults = json.loads((path / "genbot.json").read_text())
        if path.is_dir():
            kind, family, file = self._folder(path, where)
        elif path.suffix == ".safetensors":
            kind, family = self._single_file(path, where)
            file = path
        else:
            raise ModelError(f"{where}: expected a diffusers folder or a .safetensors file")
        family = defaults.get("family", family)
        if entry.config:
            entry = replace(entry,
                            config=str(self.config.model_path(replace(entry, path=entry.config))))
        return ModelInfo(name, file, kind, family, file.is_file() and kind != "lora", entry,
                         defaults)

    @staticmethod
    def _folder(path: Path, where: str) -> tuple[str, str | None, Path]:
        if (path / "model_index.json").is_file():
            cls = json.loads((path / "model_index.json").read_text()).get("_class_name")
            if cls not in PIPELINES:
                raise ModelError(f"{where}: {cls} pipelines are not supported "
                                 f"(supported: {', '.join(PIPELINES)})")
            return (*PIPELINES[cls], path)
        if (path / "config.json").is_file():
            config = json.loads((path / "config.json").read_text())
            if config.get("_class_name") == "ControlNetModel":
                family = "sdxl" if config.get("addition_embed_type") == "text_time" else "sd15"
                return "controlnet", family, path
        if (path / LORA_FILE).is_file():
            return ("lora", *Registry._single_file(path / LORA_FILE, where)[1:], path / LORA_FILE)
        raise ModelError(f"{where}: not a diffusers pipeline, ControlNet or LoRA folder")

    @staticmethod
    def _single_file(path: Path, where: str) -> tuple[str, str | None]:
        from safetensors import safe_open
        try:
            with safe_open(str(path), framework="np") as f:
                keys = list(f.keys())
                # A LoRA's cross-attention key projection takes the text width: 768 for
                # SD 1.5, 2048 for SDXL (diffusers/peft and kohya key styles).
                shapes = {k: f.get_slice(k).get_shape() for k in keys
                          if re.search(r"attn2[._]to_k", k) and ("lora_A" in k or "lora_down" in k)}
        except Exception as e:  # noqa: BLE001 - any unreadable file gets the same answer
            raise ModelError(f"{where}: not a readable .safetensors file ({e})") from None
        if any("lora" in k for k in keys):
            dims = {shape[-1] for shape in shapes.values()}
            family = {768: "sd15", 2048: "sdxl"}.get(next(iter(dims), 0))
            return "lora", family
        if any(k.startswith("conditioner.embedders.1") for k in keys):
            return "checkpoint", "sdxl"
        if any(k.startswith("control_model.") for k in keys):
            return "controlnet", None
        if any(k.startswith("cond_stage_model.") for k in keys):
            return "checkpoint", "sd15"
        raise ModelError(f"{where}: cannot tell what this .safetensors file holds")
