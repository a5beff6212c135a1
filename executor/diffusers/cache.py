"""The model cache: pipelines stay resident between jobs. Imports torch and diffusers.

- A checkpoint is loaded once; its txt2img, img2img and ControlNet pipelines are built
  with `from_pipe`, sharing its UNet, VAE and text encoders.
- LoRAs are adapters on the resident UNet: loaded once, switched per call, never a
  reload of the base.
- Device memory is a budget: past it, the least recently used model moves to CPU RAM
  (the tier below); past the RAM budget, the least recently used there is dropped.
- Counters (loads, hits, ...) are what the tests and benchmarks read.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from executor.diffusers import devices
from executor.models.registry import ModelError, ModelInfo, Registry
from templates.families import profile
from templates.settings import models_dir
from templates.signatures import RUN_MODES

log = logging.getLogger("genbot.executor")

MAX_ADAPTERS = 8  # LoRAs kept loaded on one checkpoint


@dataclass
class Unit:
    """One loaded model: a checkpoint's base pipeline, a ControlNet or an upscaler."""
    info: ModelInfo
    obj: Any
    bytes: int
    tier: str  # "device" | "ram"
    adapters: OrderedDict  # LoRA name -> None, least recently used first
    scheduler: dict | None = None  # the checkpoint's own scheduler config ("sampler: none")
    offloaded: bool = False  # its pipeline's parts wait in RAM between uses (Unit.offloads)
    ip_adapter: tuple[str, Any, int] | None = None  # (the IP-Adapter its UNet has, on which
    # pipeline, the bytes it added: its image encoder and attention layers, in `bytes` too)


def _modules(obj: Any) -> list[torch.nn.Module]:
    if isinstance(obj, torch.nn.Module):
        return [obj]
    return [m for m in obj.components.values() if isinstance(m, torch.nn.Module)]


def _size(obj: Any) -> int:
    seen, total = set(), 0
    for module in _modules(obj):
        for t in [*module.parameters(), *module.buffers()]:
            if id(t) not in seen:
                seen.add(id(t))
                total += t.numel() * t.element_size()
    return total


def _quantized_transformer(info: ModelInfo, common: dict[str, Any], device: str) -> Any:
    """A folder's transformer with its linear weights stored quantized, each layer's matmul
    at the executor's dtype: "fp8" as float8 (torchao's weight-only config), half a bf16
    one's memory; "nf4" as 4-bit NormalFloat (bitsandbytes, which diffusers runs on CUDA
    GPUs only, loading it straight onto `device`), about a quarter."""
    import json

    import diffusers
    _, cls_name = json.loads((info.path / "model_index.json").read_text())["transformer"]
    cls = getattr(diffusers, cls_name)
    if info.entry.quantize == "nf4":
        return cls.from_pretrained(
            str(info.path), subfolder="transformer", **common, device_map=device,
            quantization_config=diffusers.BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4",
                bnb_4bit_compute_dtype=common["torch_dtype"]))
    from torchao.quantization import Float8WeightOnlyConfig
    return cls.from_pretrained(str(info.path), subfolder="transformer", **common,
                               quantization_config=diffusers.TorchAoConfig(
                                   Float8WeightOnlyConfig()))


def _own_parts(family: str | None, folder: Path) -> dict[str, Any]:
    """Parts genbot loads itself rather than by the class a folder names: Qwen-Image-Edit's
    processor without the video half that would need torchvision (qwen_processor)."""
    if family != "qwen_image_edit":
        return {}
    from executor.models import qwen_processor
    return {"processor": qwen_processor.load(folder)}


class ModelCache:
    def __init__(self, registry: Registry, device: str, dtype: torch.dtype, *,
                 vram_budget: float, ram_budget: float):
        self.registry = registry
        self.device, self.dtype = device, dtype
        self.vram_budget, self.ram_budget = vram_budget, ram_budget
        self.units: OrderedDict[str, Unit] = OrderedDict()  # least recently used first
        self.pipes: dict[tuple, Any] = {}
        self.stats: Counter = Counter()
        self.changed = True  # models loaded or dropped since the last look (worker hygiene)
        self.dropped = False  # and of those, a model or a LoRA dropped
        self.on_load: Callable[[str | None], None] | None = None  # a model starts/ends loading
        # model -> how it waits in CPU RAM while it runs (the engine's memory plan): "model"
        # or "sequential" pipelines are offloaded by diffusers' hooks and stay so.
        self.offloads: dict[str, str] = {}
        self.unusable: set[str] = set()  # tiny VAEs that failed to load (told once)
        import diffusers
        import transformers
        diffusers.utils.logging.disable_progress_bar()
        transformers.utils.logging.disable_progress_bar()

    # --- what is here --------------------------------------------------------------
    def resident(self) -> list[str]:
        """Checkpoints on the device now: the claim prefers jobs that need them."""
        return [n for n, u in self.units.items() if u.tier == "device"
                and u.info.kind == "checkpoint"]

    def resident_bytes(self) -> int:
        """Bytes of models in the memory the executor watches for leaks: the device's
        (on a CPU device, RAM holds both tiers)."""
        if self.device == "cpu":
            return sum(u.bytes for u in self.units.values())
        return self._bytes("device")

    def _bytes(self, tier: str) -> int:
        return sum(u.bytes for u in self.units.values() if u.tier == tier)

    def clear(self) -> None:
        """Drop every model (memory drift, or an out-of-memory error)."""
        self.units.clear()
        self.pipes.clear()
        devices.release(self.device, refreeze=True)
        self.stats["clears"] += 1

    # --- loading -------------------------------------------------------------------
    def _get(self, name: str, kind: str, keep: set[str]) -> Unit:
        unit = self.units.get(name)
        if unit is not None:
            self.units.move_to_end(name)
            if unit.tier == "device":
                self.stats["hits"] += 1
                return unit
            self._make_room(unit.bytes, keep | {name})
            self._move(unit, "device")
            self.stats["promotions"] += 1
            return unit
        info = self.registry.get(name, kind)
        started = time.perf_counter()
        if self.on_load:
            self.on_load(name)
        try:
            obj = self._load(info)
        finally:
            if self.on_load:
                self.on_load(None)
        own = dict(obj.scheduler.config) if hasattr(obj, "scheduler") else None
        unit = Unit(info, obj, _size(obj), "ram", OrderedDict(), own)
        self._make_room(unit.bytes, keep | {name})
        self._move(unit, "device")
        self.units[name] = unit
        self.changed = True
        self.stats["loads"] += 1
        self.stats[f"loads:{name}"] += 1
        log.info("model loaded", extra={"model": name, "kind": info.kind,
                                        "mb": round(unit.bytes / 2**20, 1),
                                        "seconds": round(time.perf_counter() - started, 3)})
        return unit

    def _load(self, info: ModelInfo) -> Any:
        import diffusers
        common = {"torch_dtype": self.dtype, "local_files_only": True}
        single: dict[str, Any] = {"config": info.config_dir} if info.config_dir else {}
        cls_name = None
        if info.kind == "controlnet" and info.single_file and info.model_type and \
                not info.config_dir:
            from executor.models import families
            single = {"config": str(families.materialise_controlnet(
                info.model_type, models_dir(self.registry.config) / "configs"))}
        elif info.single_file and info.model_type and not info.config_dir:
            from executor.models import families  # genbot's own configuration of its family
            single = {"config": str(families.materialise(
                info.model_type, models_dir(self.registry.config) / "configs",
                prediction_type=info.prediction_type))}
            cls_name = families.family(info.model_type, info.prediction_type).pipeline
            if info.kind == "checkpoint" and info.family in ("sd15", "sd2"):
                single["requires_safety_checker"] = False  # (none is loaded from one file)
        try:
            if info.model_type == "transformer":  # a transformer file: the rest from config
                return self._with_transformer(info, common)
            if info.kind == "preview":  # a tiny VAE: folders only (as TAESD is published)
                return diffusers.AutoencoderTiny.from_pretrained(str(info.path), **common)
            if info.kind == "controlnet":
                cls = diffusers.ControlNetModel
                return (cls.from_single_file(str(info.path), **common, **single)
                        if info.single_file else cls.from_pretrained(str(info.path), **common))
            if info.kind == "upscaler":
                cls = diffusers.StableDiffusionUpscalePipeline
                pipe = cls.from_single_file(str(info.path), **common, **single) \
                    if info.single_file else cls.from_pretrained(str(info.path), **common)
            else:
                assert info.family is not None  # the registry knows every checkpoint's family
                cls = getattr(diffusers, cls_name or profile(info.family).load_as)
                if info.single_file:
                    pipe = cls.from_single_file(str(info.path), **common, **single)
                else:
                    kwargs = {"safety_checker": None, "requires_safety_checker": False} \
                        if info.family == "sd15" else {}
                    if info.entry.quantize:
                        kwargs["transformer"] = _quantized_transformer(info, common, self.device)
                    kwargs.update(_own_parts(info.family, info.path))
                    pipe = cls.from_pretrained(str(info.path), **common, **kwargs)
        except torch.OutOfMemoryError:
            raise  # the runner's out-of-memory path frees the cache and retries
        except Exception as e:  # noqa: BLE001 - whatever the loader raises, say which model
            hint = ""
            if info.entry.quantize == "nf4" and not torch.cuda.is_available():
                hint = ('; quantize = "nf4" runs on CUDA GPUs only (bitsandbytes, as diffusers '
                        'loads it): on this executor use quantize = "fp8"')
            elif info.single_file and not info.config_dir:
                hint = (f'; a single-file checkpoint needs its configuration offline: set '
                        f'[models] {info.name} = {{ path = "...", config = "<a diffusers folder '
                        f'of the {info.family or "same"} family>" }}')
            raise ModelError(f'model "{info.name}" ({info.path}) could not be loaded offline: '
                             f"{type(e).__name__}: {str(e)[:300]}{hint}") from e
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def _with_transformer(self, info: ModelInfo, common: dict[str, Any]) -> Any:
        """A pipeline of the family's own class from its config folder, the transformer
        from the file (FLUX.1, Qwen-Image, Z-Image; a GGUF's weights kept quantized)."""
        import diffusers

        from executor.models import transformer_file
        assert info.config_dir is not None  # the registry refuses a transformer file without
        kind = transformer_file.kind_of(transformer_file.shapes(info.path))
        assert isinstance(kind, transformer_file.Transformer)  # as the registry found it
        transformer = transformer_file.load(info.path, kind, info.config_dir, self.dtype)
        cls = getattr(diffusers, profile(info.family).load_as)
        pipe = cls.from_pretrained(info.config_dir, transformer=transformer, **common,
                                   **_own_parts(info.family, Path(info.config_dir)))
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def _move(self, unit: Unit, tier: str) -> None:
        how = self.offloads.get(unit.info.name, "none") if self.device != "cpu" else "none"
        if how != "none":  # diffusers' hooks move its parts on and off the device as it runs
            if not unit.offloaded:
                devices.offload(unit.obj, how, self.device)
                unit.offloaded = True
        else:
            target = self.device if tier == "device" else "cpu"
            if target != "cpu" or unit.tier != "ram":
                unit.obj.to(target)
        unit.tier = tier

    def _make_room(self, needed: int, keep: set[str]) -> None:
        """Offload least recently used models until `needed` fits the device budget,
        then drop from RAM until the RAM budget holds."""
        moved = False
        for name, unit in list(self.units.items()):
            if self._bytes("device") + needed <= self.vram_budget:
                break
            if unit.tier == "device" and name not in keep:
                self._move(unit, "ram")
                self.stats["offloads"] += 1
                moved = True
        for name, unit in list(self.units.items()):
            if self._bytes("ram") <= self.ram_budget:
                break
            if unit.tier == "ram" and name not in keep:
                self._drop(name)
                moved = True
        if moved:  # give the device memory back before the next model lands there
            devices.release(self.device, refreeze=True)

    def _drop(self, name: str) -> None:
        self.units.pop(name)
        self.pipes = {k: p for k, p in self.pipes.items() if name not in k}
        self.stats["evictions"] += 1
        self.changed = self.dropped = True

    # --- what generation asks for ------------------------------------------------------
    def pipeline(self, model: str, mode: str, controlnet: str | None = None) -> Any:
        """The pipeline for a checkpoint in a mode (txt2img, img2img, inpaint, edit), with a
        ControlNet or not; built on the resident checkpoint's components."""
        keep = {model, *([controlnet] if controlnet else [])}
        info = self.registry.get(model, "checkpoint")
        if info.inpainting and mode != "inpaint":
            raise ModelError(f'model "{model}" is an inpainting checkpoint: it repaints part of a '
                             "picture (fill), and makes no new images; name a plain checkpoint "
                             "of its family")
        if info.model_type == "xl_refiner" and mode == "txt2img":
            raise ModelError(f'model "{model}" is an SDXL refiner: it refines an image, so give '
                             "its generate node an init image (img2img)")
        family = info.family
        assert family is not None  # the registry knows every checkpoint's family
        runs = profile(family)
        if (mode, bool(controlnet)) not in runs.pipelines:
            raise ModelError(f'model "{model}" is {runs.label} ({family}): genbot runs it for '
                             f'{", ".join(runs.modes(RUN_MODES))}, not {mode}'
                             f"{' with a ControlNet' if controlnet else ''}")
        base = self._get(model, "checkpoint", keep)
        cn = None
        if controlnet:
            cn_unit = self._get(controlnet, "controlnet", keep)
            if cn_unit.info.family not in (None, family):
                raise ModelError(f'ControlNet "{controlnet}" is for {cn_unit.info.family}; '
                                 f'model "{model}" is {family}')
            cn = cn_unit.obj
        key = (model, mode, controlnet)
        wanted = runs.pipelines[(mode, bool(controlnet))]
        if wanted == type(base.obj).__name__:
            return base.obj
        if key not in self.pipes:
            import diffusers
            cls = getattr(diffusers, wanted)
            extra = {"controlnet": cn} if controlnet else {}
            pipe = cls.from_pipe(base.obj, **extra)
            pipe.set_progress_bar_config(disable=True)
            self.pipes[key] = pipe
        return self.pipes[key]

    def use_ip_adapter(self, model: str, pipe: Any, adapter: str | None,
                       scale: float = 1.0) -> None:
        """The IP-Adapter `model`'s UNet is conditioned with for `pipe`'s next call: loaded
        onto that pipeline (its image encoder too) when it changes, and unloaded for a call
        with no reference — a UNet with IP-Adapter layers wants a picture every call. What
        it adds (an SDXL one's encoder is 3.7 GB at 16 bits) counts in the model's bytes,
        so the device budget makes room for it as for a model."""
        unit = self.units[model]
        if unit.ip_adapter is not None and unit.ip_adapter[:2] != (adapter, pipe):
            unit.ip_adapter[1].unload_ip_adapter()
            unit.bytes -= unit.ip_adapter[2]
            unit.ip_adapter = None
        if adapter is None:
            return
        if unit.ip_adapter is None:
            info = self.registry.get(adapter, "ip_adapter")
            if info.family not in (None, unit.info.family):
                raise ModelError(f'IP-Adapter "{adapter}" is for {info.family}; model '
                                 f'"{model}" is {unit.info.family}')
            before = _size(pipe)
            pipe.load_ip_adapter(str(info.path.parent), subfolder="",
                                 weight_name=info.path.name, image_encoder_folder="image_encoder",
                                 local_files_only=True)
            pipe.image_encoder.to(self.device, self.dtype)
            added = _size(pipe) - before
            unit.ip_adapter = (adapter, pipe, added)
            unit.bytes += added
            self._make_room(0, {model})
        pipe.set_ip_adapter_scale(float(scale))

    def upscaler(self, name: str) -> Any:
        return self._get(name, "upscaler", {name}).obj

    def preview_vae(self, model: str) -> Any:
        """The tiny VAE that draws this checkpoint's live previews ([models] preview), or
        None: none named, or it cannot be loaded (told once; the colours stand in)."""
        name = self.units[model].info.entry.preview
        if not name or name in self.unusable:
            return None
        try:
            return self._get(name, "preview", {name, model}).obj
        except ModelError as e:
            self.unusable.add(name)
            log.warning("live previews of %s without its tiny VAE: %s", model, e)
            return None

    def use_loras(self, model: str, loras: list[dict]) -> None:
        """Switch the checkpoint's active LoRAs (loading each the first time)."""
        unit = self.units[model]
        base = unit.obj
        if not loras:
            if unit.adapters:
                base.disable_lora()
            return
        for lora in loras:
            name = lora["name"]
            info = self.registry.get(name, "lora")
            takes = profile(unit.info.family).lora_family  # (Kontext and Fill: FLUX.1's)
            if info.family not in (None, takes):
                raise ModelError(f'LoRA "{name}" is for {info.family}; model "{model}" is '
                                 f"{unit.info.family}")
            if name in unit.adapters:
                unit.adapters.move_to_end(name)
                self.stats["lora_hits"] += 1
                continue
            if len(unit.adapters) >= MAX_ADAPTERS:
                old, _ = unit.adapters.popitem(last=False)
                base.delete_adapters(old)
                self.dropped = True
            base.load_lora_weights(str(info.path.parent), weight_name=info.path.name,
                                   adapter_name=name, local_files_only=True)
            unit.adapters[name] = None
            self.changed = True
            self.stats["lora_loads"] += 1
            self.stats[f"lora_loads:{name}"] += 1
        base.enable_lora()
        base.set_adapters([lora["name"] for lora in loras],
                          adapter_weights=[float(lora["weight"]) for lora in loras])
