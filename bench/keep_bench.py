"""Product-keeping benchmark: what putting the photo back costs per image.

  python bench/keep_bench.py [--sizes 1024,2048] [--repeat 5] [--smoke]

For each size, a product photo with transparency stored as a sheet's picture is (its mask
beside it, as intake keeps it), a made image of that size, then, median of --repeat each,
side by side in one process:

  bare      PIL's Image.composite(photo, made, alpha) on images already in memory
  genbot    executor.diffusers.ops.image.keep_product: reads the photo and its mask from
            the store, the 2 px edge blend, and (second row) a contact shadow

Printed: milliseconds per image and per megapixel, and genbot/bare. A generation takes
seconds per image on a GPU, so what matters is that keeping stays in milliseconds per
megapixel. --smoke: one small size, one repeat (the test suite); figures mean nothing.
"""

from __future__ import annotations

import argparse
import io
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from timing import median_ms  # noqa: E402 - bench/ is the script's own folder


def photo_png(side: int) -> bytes:
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(1)
    rgba = rng.integers(0, 256, (side, side, 4), dtype=np.uint8)
    rgba[..., 3] = 0
    rgba[side // 5: side * 4 // 5, side // 3: side * 2 // 3, 3] = 255  # the product
    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, "PNG")
    return buf.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,2048")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    sizes = [256] if args.smoke else [int(s) for s in args.sizes.split(",")]
    repeat = 1 if args.smoke else args.repeat

    print(f"# keep_bench on {platform.machine()} {platform.processor() or ''}, "
          f"Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        for side in sizes:
            measure(Path(tmp), side, repeat)
    print("keep cost: per megapixel above")


def measure(folder: Path, side: int, repeat: int) -> None:
    """One size: the photo stored as intake stores a sheet's picture, then each way."""
    import asyncio

    from PIL import Image

    from bot.intake.images import ImageResolver
    from bot.settings import IntakeConfig
    from executor.diffusers.ops import Context
    from executor.diffusers.ops.image import keep_product
    from storage.files import FileStore
    store = FileStore(folder / "store")
    (folder / "assets").mkdir(exist_ok=True)
    (folder / "assets" / "p.png").write_bytes(photo_png(side))
    resolver = ImageResolver(IntakeConfig(max_image_pixels=side * side + 1), store,
                             assets_dir=folder / "assets")
    path = asyncio.run(resolver.resolve("p.png"))
    made = Image.new("RGB", (side, side), (40, 120, 200))
    photo = Image.open(store.path(path)).convert("RGB")
    alpha = Image.open(store.path(store.mask_of(path))).convert("L")
    ctx = Context(store)
    bare = median_ms(lambda: Image.composite(photo, made, alpha), repeat)
    kept = median_ms(lambda: keep_product(ctx, made, path), repeat)
    shaded = median_ms(lambda: keep_product(ctx, made, path, shadow=0.5), repeat)
    mp = side * side / 1e6
    print(f"{side}x{side}: bare {bare:.1f} ms, genbot {kept:.1f} ms ({kept / mp:.1f} ms/MP), "
          f"with shadow {shaded:.1f} ms ({shaded / mp:.1f} ms/MP); genbot/bare "
          f"{kept / bare:.2f}")


if __name__ == "__main__":
    main()
