"""Edit, region edit and extend: genbot's op against the bare pipeline call it makes.

  python bench/fill_bench.py [--size 64] [--steps 4] [--repeat 9] [--smoke]
                             [--demo-models DIR]

On the demo models (built here, or linked from --demo-models), side by side in one
process, each pair alternating so the machine's drift falls on both (median of --repeat):

  edit     the `edit` op (FLUX.1 Kontext: a picture changed by a sentence) vs its
           pipeline called with the same picture, prompt, size, steps and seed
  repaint  the `fill` op with a mask (SD 1.5 and FLUX.1 Fill) vs the inpaint pipeline
           called with the same picture and mask
  extend   the `fill` op growing the canvas to 9:16 vs the inpaint pipeline called on the
           canvas and mask genbot prepares (the edge stretched over the margins)

and then what putting the picture back costs on its own (`kept_outside`: the region's
feathered edge, the composite) per megapixel at 1 and 4 MP. Printed: milliseconds and
genbot/bare; the target is 1.05 at most. --smoke: one of each on SD 1.5, unwarmed (the
test suite: figures mean nothing).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def alternating(pairs: dict[str, tuple[Callable[[], Any], Callable[[], Any]]],
                repeat: int, warm: bool = True) -> dict[str, tuple[float, float]]:
    """Median seconds of each side of each pair, the sides taking turns."""
    times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in pairs}
    for name, (ours, bare) in pairs.items():
        if warm:  # the pipeline built, the first call's allocations made
            ours(), bare()
        for _ in range(repeat):
            for side, run in enumerate((ours, bare)):
                began = time.perf_counter()
                run()
                times[name][side].append(time.perf_counter() - began)
    return {k: (statistics.median(a), statistics.median(b)) for k, (a, b) in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--demo-models", type=Path)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    repeat = 1 if args.smoke else args.repeat

    import numpy as np
    import torch
    from PIL import Image

    from executor.diffusers.cache import ModelCache
    from executor.diffusers.ops import Context
    from executor.diffusers.ops.diffusion import edit
    from executor.diffusers.ops.fill import extended, fill, kept_outside, padded
    from executor.models import demo
    from executor.models.registry import Registry
    from executor.worker import quiet_libraries
    from storage import config as cfg
    from storage.files import FileStore
    from templates.size_rules import grown
    quiet_libraries()
    torch.set_num_threads(1)  # one core's figure, steady from run to run

    print(f"# fill_bench on {platform.machine()} {platform.processor() or ''}, Python "
          f"{platform.python_version()}, torch {torch.__version__}: demo models, "
          f"{args.size} px, {args.steps} steps, median of {repeat}")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        demo.place(data / "models" / "demo", args.demo_models)
        config = cfg.from_dict({"service": {"data_dir": str(data)}})
        ctx = Context(FileStore(data / "store"), ModelCache(
            Registry(config), "cpu", torch.float32, vram_budget=float("inf"),
            ram_budget=float("inf")))
        side = args.size
        rng = np.random.default_rng(1)
        picture = Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8))
        mask = Image.new("L", (side, side), 0)
        mask.paste(255, (side // 4, side // 4, side * 3 // 4, side * 3 // 4))

        def generator() -> torch.Generator:
            return torch.Generator("cpu").manual_seed(3)

        def bare_fill(model: str, canvas: Image.Image, paint: Image.Image) -> Callable[[], Any]:
            pipe = ctx.models.pipeline(model, "inpaint")
            guidance = ctx.models.units[model].info.guidance
            return lambda: pipe(image=canvas, mask_image=paint, prompt="sand", strength=1.0,
                                height=canvas.height, width=canvas.width,
                                num_inference_steps=args.steps, guidance_scale=guidance,
                                generator=generator())

        kontext = ctx.models.pipeline("flux_kontext", "edit")
        guidance = ctx.models.units["flux_kontext"].info.guidance
        pairs: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
            "edit (FLUX.1 Kontext)": (
                lambda: edit(ctx, picture, "make it sand", "flux_kontext", seed=3,
                             steps=args.steps, size=[side, side]),
                lambda: kontext(image=picture, prompt="make it sand", height=side, width=side,
                                num_inference_steps=args.steps, guidance_scale=guidance,
                                generator=generator(), _auto_resize=False,
                                max_area=side * side))}
        for model in ("sd15",) if args.smoke else ("sd15", "flux_fill"):
            canvas, paint, _ = extended(picture, mask, (0, 0, 0, 0))
            pairs[f"repaint ({model})"] = (
                lambda model=model: fill(ctx, picture, model, seed=3, prompt="sand",
                                         mask=mask, steps=args.steps),
                bare_fill(model, canvas, paint))
            margins = grown(picture.size, (0, 0, 0, 0), "9:16")
            canvas, paint, _ = extended(picture, None, margins)
            step = 8 if model == "sd15" else 16  # (the bare call at the model's multiples)
            h = -(-canvas.height // step) * step
            tall_canvas, tall_paint = padded(canvas, side, h, "edge"), padded(paint, side, h, 255)
            pairs[f"extend 9:16 ({model})"] = (
                lambda model=model: fill(ctx, picture, model, seed=3, prompt="sand",
                                         aspect="9:16", steps=args.steps),
                bare_fill(model, tall_canvas, tall_paint))
        for name, (ours, bare) in alternating(pairs, repeat, warm=not args.smoke).items():
            print(f"{name:26} genbot {ours * 1000:8.1f} ms  bare {bare * 1000:8.1f} ms  "
                  f"ratio {ours / bare:.3f}")

        for megapixels in (1, 4) if not args.smoke else (0.25,):
            w = h = int((megapixels * 1e6) ** 0.5)
            big = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
            region = Image.new("L", (w, h), 0)
            region.paste(255, (w // 4, h // 4, w * 3 // 4, h * 3 // 4))
            canvas, paint, new = extended(big, region, (0, 0, 0, 0))
            made = big.transpose(Image.Transpose.ROTATE_180)
            times = []
            for _ in range(max(repeat, 3)):
                began = time.perf_counter()
                kept_outside(canvas, made, paint, new, 8)
                times.append(time.perf_counter() - began)
            ms = statistics.median(times) * 1000
            print(f"compositing at {w}x{h}: {ms:.1f} ms, {ms / (w * h / 1e6):.1f} ms per "
                  "megapixel")
    print("fill cost: ratios above")


if __name__ == "__main__":
    main()
