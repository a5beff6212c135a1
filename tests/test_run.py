"""`genbot run`, `genbot models` and `genbot worker` from a shell, as a newcomer uses them."""

from __future__ import annotations

import subprocess

import pytest
from PIL import Image

from tests.conftest import PYTHON, ROOT, executor_config, python_env


def genbot(*args, cwd, env=None, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "bot.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=python_env() | (env or {}))


@pytest.fixture
def home(tmp_path, demo_models):
    """A working folder whose ./data has the demo models already built."""
    executor_config(tmp_path / "data", demo_models)
    return tmp_path


@pytest.mark.slow
def test_run_queues_the_sheet_runs_it_and_says_where_the_images_are(home):
    done = genbot("run", "product_main", str(ROOT / "examples" / "product_main.xlsx"),
                  "--out", "results", cwd=home)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "batch 1: 2 jobs of product_main from product_main.xlsx"
    assert lines[-4].startswith("[##############################] 2/2")
    assert lines[-3] == f"2 images in {home / 'data' / 'outputs' / 'batch_1'}"
    assert lines[-2] == f"contact sheet: {home / 'data' / 'outputs' / 'batch_1' / 'contact.png'}"
    copied = sorted(p.relative_to(home / "results").as_posix()
                    for p in (home / "results").rglob("*.png"))
    assert copied == ["BTL-001/2.png", "BTL-002/3.png", "contact.png"]
    assert Image.open(home / "results" / "BTL-001" / "2.png").size == (128, 128)


@pytest.mark.slow
def test_run_exits_non_zero_and_names_the_rows_when_jobs_fail(home):
    (home / "config.toml").write_text('[models]\nsdxl = "./no-such-model"\n')
    done = genbot("run", "product_main", str(ROOT / "examples" / "product_main.xlsx"), cwd=home)
    assert done.returncode == 1
    assert "row 2: failed: node gen (generate): [models] sdxl = \"./no-such-model\"" in done.stderr
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr + done.stdout


def test_run_refuses_a_bad_sheet_before_queueing_anything(home):
    sheet = home / "bad.csv"
    sheet.write_text("image,title\n,hello\n")
    done = genbot("run", "social_thumb", str(sheet), cwd=home)
    assert done.returncode == 1
    assert "row 2" in done.stderr and "image" in done.stderr
    assert not (home / "data" / "genbot.sqlite3").exists()


def test_models_lists_the_registry_with_what_each_model_is(home):
    (home / "config.toml").write_text('[models]\nmine = "./missing.safetensors"\n')
    done = genbot("models", cwd=home)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()}
    assert "checkpoint, sdxl" in rows["sdxl"] and "lora, sd15" in rows["walnut"]
    assert "NOT USABLE" in rows["mine"] and "does not exist" in rows["mine"]


def test_models_demo_builds_only_what_is_missing(home):
    done = genbot("models", "demo", cwd=home)
    assert done.returncode == 0, done.stderr
    assert "all present (--force rebuilds)" in done.stdout and "noise" in done.stdout


def test_worker_takes_a_device_and_refuses_cuda_where_there_is_none(home):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = genbot("worker", "--device", "cuda:0", cwd=home, timeout=120)
    assert done.returncode != 0
    assert "CUDA is not available here" in done.stderr


@pytest.mark.slow
def test_run_stops_with_a_clear_error_when_the_executor_cannot_start(home):
    (home / "config.toml").write_text('[executor]\ndevice = "cuda:7"\n')
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = genbot("run", "social_thumb", str(ROOT / "examples" / "social_thumb.xlsx"), cwd=home)
    assert done.returncode == 1
    assert "genbot: the executor could not start; its log:" in done.stderr
    log = next((home / "data" / "logs").glob("run-batch-*.log")).read_text()
    assert "CUDA is not available here" in log and "Traceback" not in log
