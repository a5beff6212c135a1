"""Every benchmark runs, at its smallest, so none rots unnoticed when the code under it
changes. The figures they print here mean nothing (docs/benchmarks.md has real ones);
what is checked is that each runs to the end and prints its summary line. One test per
script: most of them are CPU-bound, so they gain nothing from running side by side on a
small machine, and pytest-xdist spreads them over its workers."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import PG_URL, PYTHON, ROOT, python_env, require_pg

SMOKE = {  # script, its smallest run, a line its summary prints
    "intake_bench.py": (["--rows", "50", "--repeat", "1", "--long", "20000"], "capped/whole"),
    "queue_bench.py": (["--smoke", "--pg", PG_URL], "p50 ratio poll/wake"),
    "scale_bench.py": (["--smoke", "--pg", PG_URL], "p50 ratio poll/notify"),
    "ack_bench.py": (["--requests", "3", "--rounds", "1", "--rows", "20", "--settle", "0.2"],
                     "Feishu busy/idle:"),
    "executor_bench.py": (["--smoke", "--jobs", "3", "--steps", "2", "--rounds", "1",
                           "--no-s3"],  # (the object store has tests of its own)
                          "finish: the GPU's wait"),
    "dashboard_bench.py": (["--big", "60", "--small", "20", "--rounds", "1"], "dom_rows"),
    "api_bench.py": (["--small", "50", "--big", "200", "--clients", "20", "--rounds", "1"],
                     "big/small"),
    "comfy_bench.py": (["--jobs", "5", "--rounds", "1"], "per-job overhead"),
    "sweep_bench.py": (["--rows", "2", "--values", "2", "--grid", "2", "--side", "64",
                        "--rounds", "1"], "sweep/rows"),
    "webhook_bench.py": (["--events", "20", "--rounds", "1"], "fan-out 3/1"),
    "queue_peers.py": (["--smoke", "--pg", PG_URL], "genbot/pgqueuer"),
    "autoscale_bench.py": (["--quick", "--pg", PG_URL], "exactly once: yes"),
    "submit_bench.py": (["--clients", "3", "--rows", "2", "--rounds", "1"],
                        "submissions: all 201"),
    "bloat_bench.py": (["--smoke", "--pg", PG_URL], "held/free"),
    # the outage drill (issue 40): real processes through a cut, a restart and a crash
    # past the lease and a statement's patience; "yes" only with clean exits, no traceback
    # in any log and no job stranded
    "outage_bench.py": (["--quick"], "every job succeeded exactly once: yes"),
    "loader_bench.py": (["--smoke"], "executor start (imports):"),
    "keep_bench.py": (["--smoke"], "keep cost: per megapixel"),
    "deliver_bench.py": (["--smoke"], "deliver cost: make/bare"),
    "fill_bench.py": (["--smoke", "--steps", "2"], "fill cost: ratios above"),
    "preview_bench.py": (["--smoke", "--models", "flux"], "preview cost: ratios above"),
    # the GPU script for the newer families, on the demo models and the CPU
    "gpu_families.py": (["--tiny", "--families", "flux"],  # (the rest: the same code)
                        "flux: load"),
}

DEMO_MODELS = {"ack_bench.py", "executor_bench.py", "outage_bench.py", "gpu_families.py",
               "fill_bench.py", "preview_bench.py"}


@pytest.mark.slow
@pytest.mark.parametrize("script", list(SMOKE))
def test_every_benchmark_runs(script, request):
    args, summary = SMOKE[script]
    if script in DEMO_MODELS:  # this run's, not built again (seconds of CPU each)
        args = [*args, "--demo-models", str(request.getfixturevalue("demo_models"))]
    if "--pg" in args:
        require_pg()
    if script == "dashboard_bench.py":
        from tests.fakes.browser import chromium
        chromium()  # the dashboard bench drives it: installed, or the test says why not
    try:
        done = subprocess.run([PYTHON, str(ROOT / "bench" / script), *args], cwd=ROOT,
                              env=python_env(), text=True, capture_output=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{script}: still running after 600 s")
    assert done.returncode == 0 and summary in done.stdout, \
        f"{script} exited {done.returncode}:\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
