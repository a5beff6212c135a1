"""Which device and dtype to run on, and how much memory is in use there. Imports torch."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import torch

from executor.settings import ExecutorConfig
from storage.config import ConfigError


def pick(settings: ExecutorConfig) -> tuple[str, torch.dtype]:
    """The configured device and dtype; "auto": cuda, then mps, then cpu, with the dtype
    each runs fastest without overflow (bf16 where CUDA supports it: SDXL's VAE overflows
    in fp16)."""
    device = settings.device
    if device == "auto":
        device = ("cuda" if torch.cuda.is_available() else
                  "mps" if torch.backends.mps.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"[executor] device = {device!r}: CUDA is not available here "
                          f"(torch {torch.__version__}; use cpu, or install a CUDA build of torch)")
    if settings.dtype != "auto":
        return device, getattr(torch, settings.dtype)
    if device.startswith("cuda"):
        return device, torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return device, torch.float16 if device == "mps" else torch.float32


def total_memory(device: str) -> float:
    """Bytes on the device; infinite for the CPU (its budget is ram_budget_gb)."""
    if device.startswith("cuda"):
        return float(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    return float("inf")


def in_use(device: str) -> int:
    """Bytes in use: tensors allocated on a GPU; on the CPU the process's resident
    anonymous memory (resident less file-backed pages). File-backed pages (shared
    libraries, memory-mapped weights) are not a leak, and the kernel evicts them under
    memory pressure: counted, they made the resident set fall by hundreds of MB while a
    neighbour loaded a big model, hiding real drift."""
    if device.startswith("cuda"):
        return torch.cuda.memory_allocated(torch.device(device))
    if device == "mps":
        return torch.mps.current_allocated_memory()
    with Path("/proc/self/statm").open() as f:
        resident, shared = (int(n) for n in f.read().split()[1:3])
    return (resident - shared) * os.sysconf("SC_PAGE_SIZE")


def release(device: str, *, refreeze: bool = False, dropped: bool = True) -> None:
    """Give freed memory back: after every job, and after an out-of-memory error.

    A full collection walks every object: with diffusers and transformers loaded that is
    about 0.25 s on a slow CPU, a tax on every job. So the long-lived objects (modules,
    loaded models) are frozen out of the collector's view after each change of the model
    cache (`refreeze`), and the per-job collection only walks what the job created. Only
    a change that `dropped` something (a model, a LoRA) needs the frozen objects walked
    again — what it dropped was frozen, and its reference cycles are freed by nothing
    else; a model only added is frozen in with the rest."""
    if refreeze:
        if dropped:
            gc.unfreeze()
        gc.collect()
        gc.freeze()
    else:
        gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    elif device == "mps":
        torch.mps.empty_cache()


def offload(pipe: Any, how: str, device: str) -> None:
    """Let a pipeline run from CPU RAM: "model" moves one component (text encoder,
    transformer, VAE) onto the device at a time, "sequential" one layer at a time (slowest,
    least memory); its VAE decodes in tiles. diffusers' own hooks; a GPU only."""
    if how == "model":
        pipe.enable_model_cpu_offload(device=device)
    else:
        pipe.enable_sequential_cpu_offload(device=device)
    vae = getattr(pipe, "vae", None)
    if vae is not None and hasattr(vae, "enable_tiling"):
        vae.enable_tiling()


def out_of_memory(error: BaseException) -> bool:
    return isinstance(error, torch.OutOfMemoryError) or (
        type(error) is RuntimeError and "out of memory" in str(error).lower())
