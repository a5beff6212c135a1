"""The executor's settings: its device, how it batches, caches models, and guards
against leaks ([executor]; the loader is storage.config)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from storage.config import key, section


@section("executor", order=70)
@dataclass(frozen=True)
class ExecutorConfig:
    """The GPU executor: its device, how it batches, caches models, and guards against leaks."""

    device: str = key("auto", "auto picks cuda, then mps, then cpu; or name one: cpu, cuda, "
                      "cuda:1, mps.")
    dtype: str = key("auto", "auto: bfloat16 on CUDA GPUs that support it, else float16; "
                     "float16 on mps; float32 on the CPU.",
                     choices=("auto", "float32", "float16", "bfloat16"))
    max_batch: int = key(4, "Images one pipeline call may make for jobs of one batch with the same "
                         "shape (model, size, steps, LoRAs). 1 turns micro-batching off.",
                         min=1, max=64)
    finish_threads: int = key(2, "Threads that finish jobs beside the GPU (pillow ops, encoding, "
                              "saving, uploading) while it makes the next image. 0: finish "
                              "each job on the GPU's own thread before the next one starts.",
                              min=0, max=16)
    models: list[str] = key((), "Models (names from [models]) this executor takes jobs for, e.g. "
                            "[\"sdxl\"] on a small GPU; empty: every model whose files fit its "
                            "device memory. Jobs for other models are left to other executors.")
    vram_budget_gb: float = key(0.0, "Memory the model cache may keep on the device; past it the "
                                "least recently used model moves to CPU RAM. 0: 85% of the "
                                "device's memory (no limit on the CPU).", min=0, max=4096)
    ram_budget_gb: float = key(16.0, "CPU RAM for models moved off the device; past it the least "
                               "recently used is dropped.", min=0, max=4096)
    job_timeout: float = key(900.0, "Seconds a job may run before it is stopped and failed.",
                             min=1, max=86_400)
    progress_interval: float = key(1.0, "Least seconds between two progress events of a job "
                                   "(the first and last step always go out).", min=0, max=600)
    preview_interval: float = key(0.5, "Least seconds between two previews of a running job (the "
                                  "image forming, decoded from its latents or a ComfyUI "
                                  "server's own previews), shown live in the dashboard and "
                                  "never stored. 0: no previews.", min=0, max=600)
    memory_drift_mb: float = key(2048.0, "Growth of memory in use between jobs, beyond what it was "
                                 "after the models loaded, that drops and rebuilds the model "
                                 "cache (a leak guard). 0: off.", min=0, max=1_000_000)
    recycle_after_jobs: int = key(0, "Restart the executor process after this many jobs "
                                  "(0: never); the service starts a fresh one at once.",
                                  min=0, max=10_000_000)
    recycle_on_drift: bool = key(False, "On memory drift restart the executor process instead of "
                                 "rebuilding the cache.")
    exit_when_idle: float = key(0.0, "Seconds with no job to take after which the worker exits "
                                "(status 0, deregistered): scale to zero where something starts "
                                "workers on demand. 0: never. `genbot worker --exit-when-idle`.",
                                min=0, max=86_400 * 365)
    drain_seconds: float = key(60.0, "On SIGTERM or SIGINT a standalone worker stops taking jobs, "
                               "hands back those claimed ahead at once and lets the jobs on its "
                               "device finish for this long; any still running then go back to "
                               "the queue without using an attempt. A second signal hands back "
                               "at once. (Under `genbot serve` the executor hands back at once.)",
                               min=0, max=86_400)
    upscaler: str = key("", "Model (from [models]) the upscale op uses when a template names none. "
                        "Empty: high-quality resampling (Lanczos).")
    matting: str = key("", "Background-removal model (from [models]: an .onnx file such as "
                       "BiRefNet or RMBG-2.0) that cuts the product out of a photo with no "
                       "transparency for a template's keep; its mask is saved beside the "
                       "image. Empty: such a photo is not kept.")


def add_lifetime_options(parser: argparse.ArgumentParser) -> None:
    """How long the worker lives: shared by `genbot worker` and `python -m executor.worker`."""
    parser.add_argument("--exit-when-idle", type=float, metavar="SECONDS",
                        help="exit (status 0) after this long with no job to take: scale to "
                        "zero ([executor] exit_when_idle)")
    parser.add_argument("--drain-seconds", type=float, metavar="SECONDS",
                        help="on SIGTERM, let running jobs finish for this long before handing "
                        "them back ([executor] drain_seconds)")
