"""The ops a template's nodes run, by name: `REGISTRY` (executor.diffusers.ops.base.Op each).

  base.py       Context, OpError, the registry and the `@op` decorator
  image.py      pillow ops: crop, resize, pad, canny, palette, text, watermark, save
  diffusion.py  model ops: generate (batched, diffusers), edit, upscale; torch loads on
                first use
  fill.py       fill: a region repainted, a canvas extended, the rest kept exactly

Adding an op: declare its signature in templates.signatures, write one function in the
module that fits and register it with `@op(...)`; the import check below holds the two
together.
"""

from executor.diffusers.ops import diffusion, fill, image  # noqa: F401  (each registers its ops)
from executor.diffusers.ops.base import REGISTRY, Context, Op, OpError, check_registry

__all__ = ["REGISTRY", "Context", "Op", "OpError"]

check_registry()
