"""The executor benchmark on a GPU: CUDA, fp16, 512x512, the demo models.

  python bench/gpu_check.py

One prepared run for a lent GPU machine (its budget is minutes): prints the device,
then the same three figures as bench/executor_bench.py (overhead ratio, model loads
with and without the affinity preference, images/s at max_batch 4 vs 1).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    sys.exit("gpu_check: CUDA is not available on this machine")
props = torch.cuda.get_device_properties(0)
print(f"gpu: {props.name}, {props.total_memory / 2**30:.0f} GiB, torch {torch.__version__}, "
      f"CUDA {torch.version.cuda}", flush=True)
bench = Path(__file__).resolve().parent / "executor_bench.py"
sys.exit(subprocess.call([sys.executable, str(bench), "--device", "cuda", "--dtype", "float16",
                          "--size", "512", "--steps", "20", "--jobs", "100"]))
