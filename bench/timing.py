"""What the benchmarks time with: the median of a few runs after a warm one."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_ms(run: Callable[[], object], repeat: int) -> float:
    """Milliseconds of one `run()`, the median of `repeat` after one to warm up."""
    run()
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000
