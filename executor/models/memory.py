"""What a model needs in device memory, planned from its files before anything is loaded.

Weights are counted from the files' own tensor tables (a safetensors header, a GGUF's
tensor infos): each floating-point tensor at the dtype the executor loads at, quantized
ones (GGUF blocks) as stored. Working memory (activations, the VAE's decode) comes from the
family's profile at its native size, scaled to the size the model runs at and the batch.
How much of that must sit on the device depends on the offload: none (all of it), model
(diffusers' enable_model_cpu_offload: one component at a time) or sequential (one layer at
a time). `plan` picks the least offloading that fits a budget, or says it cannot.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from templates.families import profile

OFFLOADS = ("none", "model", "sequential")  # least offloading first: the fastest first
FLOAT_TYPES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}
WEIGHT_SUFFIXES = (".safetensors", ".gguf")


@dataclass(frozen=True)
class Need:
    """A model's memory: bytes per component at the load dtype, its largest tensor, and
    the working memory one image at its size takes."""
    parts: dict[str, int]
    largest: int
    work: int

    @property
    def weights(self) -> int:
        return sum(self.parts.values())

    def on_device(self, offload: str, batch: int = 1) -> int:
        """Bytes on the device while it runs, with that offload and batch."""
        work = self.work * batch
        if offload == "none":
            return self.weights + work
        if offload == "model":
            return max(self.parts.values(), default=0) + work
        return 4 * self.largest + work  # a layer's weights in flight, a few at a time


@dataclass(frozen=True)
class Plan:
    offload: str | None  # None: nothing fits
    need: Need
    budget: float

    def why_not(self, wanted: str) -> str:
        """Why the model does not fit, for the placement's "cannot run" line."""
        gib = self.need.on_device(wanted if wanted != "auto" else "sequential") / 2**30
        how = "even one layer at a time (offload = \"sequential\")" if wanted in (
            "auto", "sequential") else f'with offload = "{wanted}"'
        hint = ""
        if wanted not in ("auto", "sequential"):
            fits = next((o for o in OFFLOADS if self.need.on_device(o) <= self.budget), None)
            hint = f'; offload = "{fits}" would fit' if fits else ""
        return (f"it needs about {gib:.1f} GiB {how}, more than the {self.budget / 2**30:.1f} "
                f"GiB this executor may use{hint}")


def need(path: Path, family: str | None, *, dtype_bytes: int, pixels: int | None = None,
         work_gib: float | None = None, beside: Path | None = None,
         quantized: Mapping[str, float] | None = None) -> Need:
    """What a model at `path` (a diffusers folder or one weights file) needs at a dtype of
    `dtype_bytes`, making images of `pixels` (None: its family's native size); `work_gib`:
    its own working memory at the native size where it is not the family's (a demo's).
    `beside`: for a transformer file, the folder the rest comes from (its transformer, if
    it has one, left out). `quantized`: the components whose matrices are stored quantized,
    and the bytes a weight takes there (templates.families.BYTES_PER_WEIGHT)."""
    files = [path] if path.is_file() else _weights(path)
    if beside is not None:
        files += [f for f in _weights(beside) if f.parent.name != "transformer"]
    parts: dict[str, int] = {}
    largest = 0
    for file in files:
        if file == path:  # one file: the model, or the transformer beside its folder
            part = "transformer" if beside else file.stem
        else:  # a component's folder names it
            part = file.stem if file.parent in (path, beside) else file.parent.name
        for size in _tensor_bytes(file, dtype_bytes, (quantized or {}).get(part)):
            parts[part] = parts.get(part, 0) + size
            largest = max(largest, size)
    runs = profile(family)
    native = runs.native * runs.native
    own = runs.work_gib if work_gib is None else work_gib
    work = math.ceil(own * 2**30 * (pixels or native) / native * dtype_bytes / 2)
    return Need(parts, largest, work)


def _weights(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix in WEIGHT_SUFFIXES and p.is_file())


def plan(need: Need, budget: float, offload: str = "auto", batch: int = 1) -> Plan:
    """The offload a model runs with under `budget` bytes: the one configured if it fits;
    with "auto" the least offloading that fits. Plan.offload None: it does not fit."""
    tried: Iterable[str] = OFFLOADS if offload == "auto" else (offload,)
    fits = next((o for o in tried if need.on_device(o, batch) <= budget), None)
    return Plan(fits, need, budget)


def _tensor_bytes(file: Path, dtype_bytes: int, matrices: float | None = None
                  ) -> Iterable[int]:
    """Each tensor's bytes once loaded: floating point at the load dtype (matrices at
    `matrices` bytes a weight where they are quantized), else as stored."""
    if file.suffix == ".gguf":
        import gguf

        for t in gguf.GGUFReader(str(file)).tensors:
            quantized = t.tensor_type not in (gguf.GGMLQuantizationType.F32,
                                              gguf.GGMLQuantizationType.F16,
                                              gguf.GGMLQuantizationType.BF16)
            yield int(t.n_bytes) if quantized else int(t.n_elements) * dtype_bytes
        return
    from safetensors import safe_open
    with safe_open(str(file), framework="np") as f:
        names = f.keys()  # (safe_open is not iterable)
        for key in names:
            piece = f.get_slice(key)
            shape = piece.get_shape()
            count = math.prod(shape)
            kind = piece.get_dtype()
            per = matrices if matrices and len(shape) == 2 else dtype_bytes
            yield math.ceil(count * (per if kind in FLOAT_TYPES else _STORED.get(kind, 8)))


_STORED = {"I8": 1, "U8": 1, "BOOL": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8,
           "U64": 8}
