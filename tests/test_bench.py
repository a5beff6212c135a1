"""Every benchmark runs, at its smallest, so none rots unnoticed when the code under it
changes. The figures they print here mean nothing (docs/benchmarks.md has real ones);
what is checked is that each runs to the end and prints its summary line. They run side
by side: most of their time is waiting on the processes and servers they start."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.conftest import PG_URL, PYTHON, ROOT, python_env, require_pg

SMOKE = {  # script, its smallest run, a line its summary prints
    "intake_bench.py": (["--rows", "50", "--repeat", "1"], "xlsx/csv:"),
    "queue_bench.py": (["--smoke", "--pg", PG_URL], "p50 ratio poll/wake"),
    "scale_bench.py": (["--smoke", "--pg", PG_URL], "p50 ratio poll/notify"),
    "ack_bench.py": (["--requests", "3", "--rounds", "1", "--rows", "3"], "busy/idle:"),
    "executor_bench.py": (["--smoke", "--jobs", "3", "--steps", "1", "--rounds", "1"],
                          "finish: the GPU's wait"),
    "dashboard_bench.py": (["--big", "60", "--small", "20", "--rounds", "1"], "dom_rows"),
    "api_bench.py": (["--small", "50", "--big", "200", "--clients", "20", "--rounds", "1"],
                     "big/small"),
    "comfy_bench.py": (["--jobs", "5", "--rounds", "1"], "per-job overhead"),
}


@pytest.mark.slow
def test_every_benchmark_runs():
    from tests.browser import chromium
    require_pg()
    chromium()  # the dashboard bench drives it: installed, or the test says why not
    running = {script: subprocess.Popen([PYTHON, str(ROOT / "bench" / script), *args],
                                        cwd=ROOT, env=python_env(), text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for script, (args, _) in SMOKE.items()}
    deadline = time.monotonic() + 600
    failed = []
    for script, proc in running.items():
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            failed.append(f"{script}: still running after 600 s")
            continue
        if proc.returncode != 0 or SMOKE[script][1] not in out:
            failed.append(f"{script} exited {proc.returncode}:\n{out[-1500:]}\n{err[-3000:]}")
    assert not failed, "\n\n".join(failed)
