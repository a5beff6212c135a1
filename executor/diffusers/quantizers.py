"""The quantization libraries an executor's models do not use, kept from loading.

diffusers and transformers import every quantization backend that is installed the
moment they are imported: bitsandbytes brings torch's compiler (inductor) with it and
torchao its own kernels, and each logs warnings about kernels a CPU or an offline host
lacks. A quarter of an executor's start (importing the engine: 5.3 s → 4.0 s on a 2-core
machine, bench/loader_bench.py), paid each time a fleet that scales to zero wakes. An
executor knows its models when it starts: a backend none of them names is marked absent
in `sys.modules`, so the libraries see it as not installed and nothing imports it. A
model with `quantize = "nf4"` (bitsandbytes) or `"fp8"` (torchao) keeps its backend,
loaded as before.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

BACKENDS = {"nf4": "bitsandbytes", "fp8": "torchao"}  # [models] quantize -> its library


def leave_unused(quantize: Iterable[str | None]) -> list[str]:
    """Keep the backends that no model's `quantize` names from being imported (Python
    then raises ImportError for them and `importlib.util.find_spec` finds nothing);
    which ones. One already imported stays: this runs before diffusers is."""
    used = {BACKENDS[q] for q in quantize if q in BACKENDS}
    left = [name for name in BACKENDS.values() if name not in used and name not in sys.modules]
    for name in left:
        sys.modules[name] = None  # type: ignore[assignment]  # (the documented "absent" mark)
    return left
