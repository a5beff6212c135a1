"""Loader benchmark: a FLUX.1 transformer from the files people keep, against diffusers.

  python bench/loader_bench.py [--double 1] [--single 2] [--repeat 5] [--smoke]

One FLUX.1 transformer at the real width (3072: diffusers' own single-file converter reads
no other) with --double / --single blocks of the 19 / 38 (random weights, bf16), saved as
a diffusers folder, as Black Forest Labs' single file and as a GGUF (Q8_0, written with the
`gguf` package as city96's converter writes them). Then, median of --repeat loads each,
side by side in one process:

  diffusers from_pretrained (the folder)                  the baseline
  genbot, the single file (executor.models.transformer_file)  vs  diffusers' from_single_file
  genbot, the GGUF                                            vs  diffusers' from_single_file

Each time is the load and one forward pass (safetensors loads are memory maps: the pass
reads every weight, and dequantizes a GGUF's). Ratios over the baseline are printed;
record them in docs/benchmarks.md.

Then what an executor pays before it can load any model: a fresh process importing the
engine and diffusers' pipelines, with every installed quantization library (bitsandbytes,
torchao: diffusers and transformers import them all) against leaving those no model uses
(executor.diffusers.quantizers, as `genbot worker` does), alternated, --repeat each.

--smoke: the
demo's toy width, no diffusers single-file side (its converter cannot read that width),
and start-up processes that import nothing, to prove the script runs (the test suite);
figures mean nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(load, repeat: int) -> float:
    """Median seconds to load the transformer and run one forward pass with it: safetensors
    loads are memory maps, so without the pass a load would be timed before its weights
    were read (and a GGUF's dequantized)."""
    import torch

    def loaded_and_run() -> None:
        model = load()
        c = model.config
        tokens, words = 64, 8
        with torch.no_grad():
            model(hidden_states=torch.randn(1, tokens, c.in_channels, dtype=model.dtype),
                  encoder_hidden_states=torch.randn(1, words, c.joint_attention_dim,
                                                    dtype=model.dtype),
                  pooled_projections=torch.randn(1, c.pooled_projection_dim, dtype=model.dtype),
                  timestep=torch.tensor([0.5]), img_ids=torch.zeros(tokens, 3),
                  txt_ids=torch.zeros(words, 3), guidance=torch.tensor([3.5]))
    loaded_and_run()  # warm: imports, the page cache
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        loaded_and_run()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


START = """
import importlib, sys, time
began = time.perf_counter()
from executor.diffusers import quantizers
if sys.argv[1] == "leave":
    quantizers.leave_unused([None])
for name in sys.argv[2:]:
    importlib.import_module(name)
print(time.perf_counter() - began)
"""
# What an executor imports before it loads a model: the engine, diffusers' pipelines.
ENGINE = ["executor.diffusers.engine", "diffusers.pipelines.flux.pipeline_flux",
          "diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion"]


def start_seconds(leave: bool, modules: list[str]) -> float:
    """Seconds a fresh process takes to import `modules`, leaving the unused quantization
    libraries or not."""
    done = subprocess.run([sys.executable, "-c", START, "leave" if leave else "all", *modules],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--double", type=int, default=1, help="double-stream blocks (19 real)")
    parser.add_argument("--single", type=int, default=2, help="single-stream blocks (38 real)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    import torch
    from diffusers import FluxTransformer2DModel, GGUFQuantizationConfig

    from executor.models import transformer_file
    from executor.worker import quiet_libraries
    from tests.fakes.transformer_files import write_gguf, write_single_file
    quiet_libraries()
    dtype = torch.bfloat16
    dims = (dict(attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                 pooled_projection_dim=32, in_channels=16, axes_dims_rope=[4, 4, 8])
            if args.smoke else {})  # else diffusers' defaults: FLUX.1's own dimensions
    repeat = 1 if args.smoke else args.repeat
    with tempfile.TemporaryDirectory(prefix="genbot-loaders-") as tmp:
        out = Path(tmp)
        torch.manual_seed(0)
        with torch.device("meta"):
            shape = FluxTransformer2DModel(num_layers=args.double, guidance_embeds=True,
                                           num_single_layers=args.single, **dims)
        model = FluxTransformer2DModel.from_config(shape.config).to(dtype)
        params = sum(p.numel() for p in model.parameters())
        model.save_pretrained(out / "folder" / "transformer")
        write_single_file(model, out / "flux1.safetensors")
        write_gguf(model, out / "flux1-Q8_0.gguf", "Q8_0")
        del model
        sizes = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python "
              f"{platform.python_version()}, torch {torch.__version__}; a FLUX.1 transformer "
              f"of {args.double}+{args.single} blocks, {params / 1e6:.0f} M weights; "
              f"single file {sizes['flux1.safetensors'] / 2**20:.0f} MiB, GGUF Q8_0 "
              f"{sizes['flux1-Q8_0.gguf'] / 2**20:.0f} MiB")
        folder = str(out / "folder")
        kinds = transformer_file.TRANSFORMERS["FLUX.1"]
        quant = {"quantization_config": GGUFQuantizationConfig(compute_dtype=dtype)}
        single = {"config": folder, "subfolder": "transformer", "local_files_only": True,
                  "torch_dtype": dtype}
        runs = {
            "diffusers from_pretrained": lambda: FluxTransformer2DModel.from_pretrained(
                folder, subfolder="transformer", torch_dtype=dtype),
            "genbot single file": lambda: transformer_file.load(
                out / "flux1.safetensors", kinds, folder, dtype),
            "genbot GGUF": lambda: transformer_file.load(
                out / "flux1-Q8_0.gguf", kinds, folder, dtype)}
        if not args.smoke:
            runs["diffusers from_single_file"] = lambda: FluxTransformer2DModel.from_single_file(
                str(out / "flux1.safetensors"), **single)
            runs["diffusers from_single_file GGUF"] = \
                lambda: FluxTransformer2DModel.from_single_file(
                    str(out / "flux1-Q8_0.gguf"), **single, **quant)
        seconds = {name: timed(load, repeat) for name, load in runs.items()}
    base = seconds["diffusers from_pretrained"]
    for name, s in seconds.items():
        print(f"load {name}: {s * 1000:.0f} ms  ratio {s / base:.2f}")
    if not args.smoke:
        print(f"genbot / diffusers, single file: "
              f"{seconds['genbot single file'] / seconds['diffusers from_single_file']:.2f}  "
              f"GGUF: {seconds['genbot GGUF'] / seconds['diffusers from_single_file GGUF']:.2f}")
    starts: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(repeat):
        for leave in (False, True):
            starts[leave].append(start_seconds(leave, [] if args.smoke else ENGINE))
    every, left = statistics.median(starts[False]), statistics.median(starts[True])
    print(f"executor start (imports): every quantization library {every:.1f} s, unused ones "
          f"left {left:.1f} s  ratio {left / every:.2f}")


if __name__ == "__main__":
    main()
