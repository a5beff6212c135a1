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
from typing import TYPE_CHECKING, Any

from executor.models import families, transformer_file
from storage.config import Config
from templates import families as catalog
from templates.settings import ModelEntry, model_path, models, saved_family

if TYPE_CHECKING:  # the generation stack, imported only where a model is read
    import torch
    from safetensors import safe_open

PIPELINES = {  # model_index.json _class_name -> (kind, family)
    **{cls: ("checkpoint", family) for cls, family in catalog.SAVED_AS.items()},
    "StableDiffusionUpscalePipeline": ("upscaler", "sd15"),
}
PICKLES = (".ckpt", ".pt", ".pth", ".bin")  # weights that can run code when loaded
TEXT_WIDTH = {768: "sd15", 1024: "sd2", 2048: "sdxl"}  # cross-attention width -> family
LORA_FILE = "pytorch_lora_weights.safetensors"
# A transformer family's LoRA, told by the layers its tensor names reach (diffusers/peft's
# dotted names, kohya's and ComfyUI's underscored or prefixed ones), first match wins:
# FLUX.2's layers of its own (in diffusers' names), FLUX.1's blocks (double_blocks and
# single_blocks in Black Forest Labs' and kohya's names, which diffusers converts: they
# hold img_mlp and img_mod too, so before Qwen-Image), Qwen-Image's per-stream MLPs and
# modulation, Z-Image's refiners and layers. A LoRA of attention layers only names none of
# these: its family is not told, and it loads where asked.
LORA_LAYERS = tuple(
    (family, re.compile(r"(?:^|[._])(?:" + layers + r")[._]")) for family, layers in (
        ("flux2", r"to_qkv_mlp_proj|ff_context[._]linear_in|single_stream_modulation"),
        ("flux", r"(?:single_transformer_blocks|double_blocks|single_blocks)[._]\d+"),
        ("qwen_image", r"img_mlp|txt_mlp|img_mod|txt_mod"),
        ("zimage", r"noise_refiner|context_refiner|layers[._]\d+[._](?:attention|feed_forward)"),
    ))


class ModelError(Exception):
    """A model that cannot be used: unknown name, missing files, wrong kind or family."""


@dataclass(frozen=True)
class ModelInfo:
    name: str
    path: Path
    kind: str  # checkpoint | controlnet | lora | upscaler | matting | ip_adapter |
    #            segmentation | preview (a tiny VAE)
    family: str | None  # sd15 | sd2 | sdxl | flux | None when unknown (some LoRAs)
    single_file: bool
    entry: ModelEntry
    defaults: dict  # a demo's genbot.json: steps, guidance
    model_type: str | None = None  # a single-file checkpoint's, as diffusers names it (v1 …)
    prediction_type: str | None = None  # SD 2.x: v_prediction (768) or epsilon (512 base)

    @property
    def config_dir(self) -> str | None:
        """A configuration folder named in [models]; None: genbot's own (models.families)."""
        return self.entry.config

    @property
    def inpainting(self) -> bool:
        return self.model_type in ("inpainting", "xl_inpaint")

    @property
    def steps(self) -> int:
        return self.entry.steps or self.defaults.get("steps") or catalog.profile(
            self.family).steps

    @property
    def size(self) -> int | None:
        """Width and height when a job names none: the config's, a demo's, else None (the
        pipeline's own native size)."""
        return self.entry.size or self.defaults.get("size")

    @property
    def guidance(self) -> float:
        if self.entry.guidance is not None:
            return self.entry.guidance
        own = self.defaults.get("guidance")
        return own if own is not None else catalog.profile(self.family).guidance


class Registry:
    def __init__(self, config: Config):
        self.config = config
        self._known: dict[str, ModelInfo] = {}

    @property
    def names(self) -> list[str]:
        return sorted(models(self.config))

    def needs_demo(self) -> list[str]:
        """Demo models the config names that are not built yet."""
        return [n for n, e in models(self.config).items()
                if e.path.startswith("demo:") and not model_path(self.config, e).exists()]

    def get(self, name: str, kind: str | None = None) -> ModelInfo:
        if name not in self._known:
            self._known[name] = self._inspect(name)
        info = self._known[name]
        if kind and info.kind != kind:
            raise ModelError(f'model "{name}" is a {info.kind}, not a {kind}')
        return info

    def _inspect(self, name: str) -> ModelInfo:
        entry = models(self.config).get(name)
        if entry is None:
            raise ModelError(f'no model "{name}" in [models] (known: {", ".join(self.names)})')
        path = model_path(self.config, entry)
        where = f'[models] {name} = "{entry.path}"'
        if not path.exists():
            hint = " (run `genbot models demo`)" if entry.path.startswith("demo:") else ""
            raise ModelError(f"{where}: {path} does not exist{hint}")
        defaults: dict[str, Any] = {}
        if _schnell(path):  # FLUX.1 [schnell]: distilled to 4 steps without guidance
            defaults = dict(catalog.FLUX_SCHNELL)
        if path.is_dir() and (path / "genbot.json").is_file():
            defaults |= json.loads((path / "genbot.json").read_text())
        if path.is_dir():
            kind, family, file = self._folder(path, where)
        elif path.suffix in (".safetensors", ".gguf") and (found := _transformer(path, where)):
            return self._transformer_info(name, path, entry, where, *found)
        elif path.suffix == ".safetensors":
            kind, family, model_type, prediction = self._single_file(path, where)
            file = path
        elif path.suffix.lower() == ".onnx":  # a background-removal model (executor.models.matting)
            return ModelInfo(name, path, "matting", None, True, entry, {}, None, None)
        elif path.suffix.lower() in PICKLES:
            raise ModelError(f"{where}: {path.name} is a pickle ({path.suffix}): loading one can "
                             "run any code in it, so genbot does not; use the model's "
                             ".safetensors release, or convert it once with a tool you trust")
        else:
            raise ModelError(f"{where}: expected a diffusers folder, a .safetensors file, a "
                             "transformer's .gguf or a background-removal model's .onnx")
        if path.is_dir():
            model_type = prediction = None
        family = defaults.get("family", family)
        if entry.family and family and entry.family != family:
            raise ModelError(f'{where}: family = "{entry.family}" in the config, but its files '
                             f"are {catalog.profile(family).label} ({family})")
        if entry.config:
            entry = replace(entry,
                            config=str(model_path(self.config, replace(entry, path=entry.config))))
        if entry.quantize and not (kind == "checkpoint" and path.is_dir()
                                   and (path / "transformer").is_dir()):
            raise ModelError(f'{where}: quantize = "{entry.quantize}" is for a diffusers folder '
                             "with a transformer (FLUX, Qwen-Image, Z-Image, SD 3.5): this is "
                             f"{'a ' + kind if kind != 'checkpoint' else 'no such folder'}")
        return ModelInfo(name, file, kind, family, file.is_file() and kind != "lora", entry,
                         defaults, model_type, prediction)

    def _transformer_info(self, name: str, path: Path, entry: ModelEntry, where: str,
                          kind: transformer_file.Transformer,
                          found: dict[str, tuple[int, ...]]) -> ModelInfo:
        """A transformer kept on its own: its family (the config's word, else its config
        folder's pipeline, else what its tensors say) and the folder the rest comes from."""
        folder = model_path(self.config, replace(entry, path=entry.config)) \
            if entry.config else None
        saved = saved_family(folder) if folder else None
        family = entry.family or saved or kind.families[0]
        if family not in kind.families:
            said = f'family = "{family}"' if entry.family else f"its config folder {folder} is"
            raise ModelError(f"{where}: a {kind.name} transformer, but {said} "
                             f"{catalog.profile(family).label}; a {kind.name} transformer runs "
                             f"as {' or '.join(catalog.profile(f).label for f in kind.families)}")
        if folder is None:
            raise ModelError(f"{where}: a {kind.name} transformer on its own, as ComfyUI keeps "
                             f'them: set config = "<a diffusers folder of '
                             f'{catalog.profile(family).label}>" for its text encoders, VAE and '
                             "scheduler")
        if entry.quantize:
            raise ModelError(f'{where}: quantize = "{entry.quantize}" is for a diffusers folder; '
                             "a transformer file loads at the precision it is stored at (a GGUF "
                             "quantized, an fp8 file upcast)")
        fast = kind.name == "FLUX.1" and transformer_file.distilled_fast(found)
        return ModelInfo(name, path, "checkpoint", family, True,
                         replace(entry, config=str(folder)),
                         dict(catalog.FLUX_SCHNELL) if fast else {}, "transformer")

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
                family = "sdxl" if config.get("addition_embed_type") == "text_time" else \
                    TEXT_WIDTH.get(config.get("cross_attention_dim"), "sd15")
                return "controlnet", family, path
            if config.get("model_type") == "clipseg":  # (executor.models.segmentation)
                return "segmentation", None, path
            if config.get("_class_name") == "AutoencoderTiny":  # TAESD: live previews
                return "preview", None, path
        if (path / LORA_FILE).is_file():
            return "lora", Registry._single_file(path / LORA_FILE, where)[1], path / LORA_FILE
        if (path / "image_encoder" / "config.json").is_file():
            return ("ip_adapter", *_ip_adapter(path, where))
        raise ModelError(f"{where}: not a diffusers pipeline, ControlNet, LoRA, IP-Adapter, "
                         "CLIPSeg or tiny VAE (AutoencoderTiny) folder")

    @staticmethod
    def _single_file(path: Path, where: str) -> tuple[str, str | None, str | None, str | None]:
        """(kind, family, model type, prediction type) of a .safetensors file, from its
        tensor names and shapes alone (nothing is loaded but SD 2.x's one telling bias)."""
        from safetensors import safe_open
        try:
            with safe_open(str(path), framework="np") as f:
                keys = list(f.keys())
                # A LoRA's cross-attention key projection takes the text width: 768 for
                # SD 1.5, 1024 for SD 2.x, 2048 for SDXL (diffusers/peft and kohya styles).
                shapes = {k: f.get_slice(k).get_shape() for k in keys
                          if re.search(r"attn2[._]to_k", k) and ("lora_A" in k or "lora_down" in k)}
                if any(k.startswith("model.diffusion_model.") for k in keys):
                    family, model_type, prediction = _checkpoint_family(f, keys, path, where)
                    kind = "upscaler" if model_type == "upscale" else "checkpoint"
                    return kind, family, model_type, prediction
                if any(k.startswith("control_model.") or
                       k.startswith("controlnet_cond_embedding.") for k in keys):
                    return ("controlnet", *_controlnet_family(f, keys, where), None)
        except ModelError:
            raise
        except Exception as e:  # noqa: BLE001 - any unreadable file gets the same answer
            raise ModelError(f"{where}: not a readable .safetensors file ({e})") from None
        if any("lora" in k for k in keys):
            for family, layers in LORA_LAYERS:
                if any(layers.search(k) for k in keys):
                    return "lora", family, None, None
            dims = {shape[-1] for shape in shapes.values()}
            return "lora", TEXT_WIDTH.get(next(iter(dims), 0)), None, None
        shown = ", ".join(sorted(keys)[:3]) + (" …" if len(keys) > 3 else "")
        raise ModelError(f"{where}: not a Stable Diffusion checkpoint, LoRA or ControlNet genbot "
                         f"knows: its {len(keys)} tensors are named like {shown or 'nothing'}")


def _ip_adapter(path: Path, where: str) -> tuple[str | None, Path]:
    """An IP-Adapter folder as h94/IP-Adapter's models/ (SD 1.5) and sdxl_models/ are: its
    image encoder in image_encoder/, and the one .safetensors of image_proj.* and
    ip_adapter.* weights; its family from the width the key projections read (the text
    encoder's: 768 SD 1.5, 2048 SDXL)."""
    from safetensors import safe_open
    files = sorted(path.glob("*.safetensors"))
    if len(files) != 1:
        raise ModelError(f"{where}: an IP-Adapter folder holds one .safetensors of its "
                         f"weights beside image_encoder/, not {len(files)}")
    try:
        with safe_open(str(files[0]), framework="np") as f:
            keys = list(f.keys())
            first = next((k for k in keys if k.endswith("to_k_ip.weight")), None)
            width = f.get_slice(first).get_shape()[1] if first else None
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same answer
        raise ModelError(f"{where}: not a readable .safetensors file ({e})") from None
    if first is None or not any(k.startswith("image_proj.") for k in keys):
        raise ModelError(f"{where}: {files[0].name} holds no IP-Adapter weights (image_proj.* "
                         "and ip_adapter.*)")
    return TEXT_WIDTH.get(int(width or 0)), files[0]


def _transformer(path: Path, where: str) -> tuple[transformer_file.Transformer,
                                                  dict[str, tuple[int, ...]]] | None:
    """The transformer a single file holds with its tensor table, or None (another kind of
    .safetensors file: the SD detector reads it)."""
    try:
        found = transformer_file.shapes(path)
    except ValueError as e:
        raise ModelError(f"{where}: {e}") from None
    kind = transformer_file.kind_of(found)
    if isinstance(kind, str):
        raise ModelError(f"{where}: a {kind} transformer on its own: genbot loads {kind} from "
                         "its diffusers folder; give that folder's path")
    if kind is None and path.suffix == ".gguf":
        shown = ", ".join(sorted(found)[:3])
        raise ModelError(f"{where}: a GGUF of no transformer genbot knows (its tensors are "
                         f"named like {shown or 'nothing'}); genbot reads FLUX.1, FLUX.1 Fill, "
                         "Qwen-Image and Z-Image GGUFs")
    return (kind, found) if kind else None


def _schnell(path: Path) -> bool:
    """A FLUX.1 folder whose transformer has no guidance embedding: [schnell]."""
    config = path / "transformer" / "config.json"
    if not config.is_file():
        return False
    read = json.loads(config.read_text())
    return read.get("_class_name") == "FluxTransformer2DModel" and not read.get(
        "guidance_embeds", False)


def _checkpoint_family(f: safe_open, keys: list[str], path: Path,
                       where: str) -> tuple[str, str, str | None]:
    """(family, model type, prediction type) of an original-layout checkpoint, by
    diffusers' own detector (infer_diffusers_model_type)."""
    from types import SimpleNamespace

    from diffusers.loaders.single_file_utils import infer_diffusers_model_type

    # Tensor name -> something with its .shape: all diffusers' detector reads.
    shapes = {k: SimpleNamespace(shape=tuple(f.get_slice(k).get_shape())) for k in keys}
    model_type = infer_diffusers_model_type(shapes)
    if model_type not in families.FAMILIES:
        raise ModelError(f"{where}: a {model_type} checkpoint (as diffusers names it); genbot "
                         "runs SD 1.5, SD 2.x and SDXL (base, refiner, inpainting) checkpoints "
                         "and the x4 upscaler")
    prediction = None
    if model_type == "v2":
        key = "model.diffusion_model.output_blocks.11.1.transformer_blocks.0.norm1.bias"
        bias = {key: _tensor(path, key)} if key in shapes else {}
        prediction = families.v2_prediction_type(bias)
    return families.family(model_type, prediction).family, model_type, prediction


def _controlnet_family(f: safe_open, keys: list[str], where: str) -> tuple[str, str]:
    """(family, the model type whose UNet it mirrors) of a single-file ControlNet, in the
    original layout (control_model.*) or diffusers' own naming."""
    if "add_embedding.linear_1.weight" in keys:  # SDXL: only diffusers-named files exist
        if "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_k.weight" not in keys:
            raise ModelError(f"{where}: a reduced SDXL ControlNet (small or mid): give its "
                             'diffusers folder instead, or config = "<that folder>"')
        return "sdxl", "xl_base"
    widths = {f.get_slice(k).get_shape()[-1] for k in keys
              if re.search(r"transformer_blocks\.0\.attn2\.to_k\.weight$", k)}
    width = next(iter(widths), 0)
    if width not in (768, 1024):
        raise ModelError(f"{where}: a ControlNet whose text width ({width or 'none'}) is no "
                         "SD 1.5 (768) or SD 2.x (1024) one")
    return TEXT_WIDTH[width], "v1" if width == 768 else "v2"


def _tensor(path: Path, key: str) -> torch.Tensor:
    """One tensor, read by torch (numpy has no bfloat16, which many files are in)."""
    from safetensors import safe_open
    with safe_open(str(path), framework="pt") as f:
        return f.get_tensor(key)
