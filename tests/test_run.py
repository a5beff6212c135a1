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
    """A sweep, too: each row at steps 2 and 3, side by side in its grid; and pinned to
    the template's first version (the file as it is: a fresh install's version 1)."""
    done = genbot("run", "product_main@1", str(ROOT / "examples" / "product_main.xlsx"),
                  "--out", "results", "--vary", "steps=2,3", cwd=home)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "batch 1: 4 jobs of product_main from product_main.xlsx"
    assert lines[2] == "[------------------------------] 0/4 · starting the executor"
    assert lines[-7].startswith("[##############################] 4/4")
    assert lines[-6].startswith("made here, by this command's executor (")
    assert lines[-5] == f"4 images in {home / 'data' / 'outputs' / 'batch_1'}"
    assert lines[-4] == f"contact sheet: {home / 'data' / 'outputs' / 'batch_1' / 'contact.png'}"
    assert lines[-3:-1] == [f"grid: {home / 'data' / 'grids' / 'batch_1' / name}"
                            for name in ("grid_1_row2.png", "grid_2_row3.png")]
    copied = sorted(p.relative_to(home / "results").as_posix()
                    for p in (home / "results").rglob("*.png"))
    assert copied == ["BTL-001/2.png", "BTL-001/2_2.png", "BTL-002/3.png", "BTL-002/3_2.png",
                      "contact.png", "grids/grid_1_row2.png", "grids/grid_2_row3.png"]
    assert Image.open(home / "results" / "BTL-001" / "2.png").size == (128, 128)


@pytest.mark.slow
def test_a_newcomers_first_run_from_any_folder_says_what_the_executor_is_doing(tmp_path):
    """No data yet: the example is written with its picture beside it, and the bar says
    the executor is building the demo models before any step (15–30 s on first use)."""
    done = genbot("template", "example", "product_main", "-o", "s.xlsx", cwd=tmp_path)
    assert done.returncode == 0 and (tmp_path / "assets" / "bottle.png").is_file()
    done = genbot("run", "product_main", "s.xlsx", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == ("note: demo model (sdxl) — images are noise; see README, Models, "
                        "for real ones")
    assert "[------------------------------] 0/2 · building demo models: sd15, sdxl, " \
        "canny_sd15, canny_sdxl, walnut, brushed_steel, upscaler" in lines
    assert lines[-2] == f"2 images in {tmp_path / 'data' / 'outputs' / 'batch_1'}"


async def test_the_bar_says_which_executor_took_the_jobs(tmp_path, demo_models):
    """With a service running on the same queue, its executor may take the jobs first."""
    from bot.cli.run import _executor_doing
    from storage.queue import NewJob, Submission, open_queue
    from storage.workers import Workers, owner_name

    class Ours:
        pid = 4242
    queue = await open_queue(executor_config(tmp_path / "data", demo_models))
    try:
        batch = await queue.enqueue(Submission("t", "cli:me", [NewJob(2, {})]))
        workers = Workers.of(queue)

        async def doing() -> str:
            progress = await queue.batch_progress(batch.batch_id)
            assert progress is not None
            return await _executor_doing(queue, workers, progress, [Ours()])  # type: ignore
        assert await doing() == "starting the executor"
        me = owner_name(4242)
        await workers.beat(me, host="h", pid=4242, device="cpu", version="0", job=None,
                           stats={"doing": {"what": "loading", "models": ["sdxl"]}})
        assert await doing() == "loading sdxl"
        await queue.claim("gpu9:77")
        assert await doing() == ("taken by executor gpu9:77 (a running genbot service's)")
    finally:
        await queue.close()


@pytest.mark.slow
def test_run_names_a_missing_model_file_instead_of_waiting_or_failing_every_row(home):
    """The executor says it cannot run sdxl (its file is not there), so the command ends
    saying so, and cancels its batch, before any row is tried."""
    (home / "config.toml").write_text('[models]\nsdxl = "./no-such-model"\n')
    done = genbot("run", "product_main", str(ROOT / "examples" / "product_main.xlsx"), cwd=home)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("genbot: no executor can run model sdxl (")
    assert "no-such-model does not exist on " in last and last.endswith("; batch 1 canceled")
    assert "Traceback" not in done.stderr + done.stdout


def test_run_refuses_a_bad_sheet_before_queueing_anything(home):
    sheet = home / "bad.csv"
    sheet.write_text("image,title\n,hello\n")
    done = genbot("run", "social_thumb", str(sheet), cwd=home)
    assert done.returncode == 1
    assert "row 2" in done.stderr and "image" in done.stderr
    assert not (home / "data" / "genbot.sqlite3").exists()


def test_run_refuses_a_priority_above_what_the_config_lets_its_user_use(home):
    """The person at the shell is a local admin, whose highest priority the config sets."""
    (home / "config.toml").write_text('[chat]\nadmin_max_priority = "high"\n')
    done = genbot("run", "social_thumb", str(ROOT / "examples" / "social_thumb.xlsx"),
                  "--priority", "urgent", cwd=home)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("genbot: you may use priority high or lower, not urgent; ")


def test_models_lists_the_registry_with_what_each_model_is(home):
    (home / "config.toml").write_text('[models]\nmine = "./missing.safetensors"\n')
    done = genbot("models", cwd=home)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()}
    assert "checkpoint, sdxl" in rows["sdxl"] and "lora, sd15" in rows["walnut"]
    assert "NOT USABLE" in rows["mine"] and "does not exist" in rows["mine"]


def test_models_on_a_fresh_install_says_the_demo_models_come_at_first_start(tmp_path):
    done = genbot("models", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()}
    assert "NOT USABLE" not in done.stdout
    assert rows["sdxl"].endswith("not built yet (the executor builds it on first start; or "
                                 "`genbot models demo`) — demo model: images are noise "
                                 "(README, Models: real ones)")


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


def test_worker_for_a_comfyui_server_wants_its_address(tmp_path):
    done = genbot("worker", "--comfyui", "nowhere", cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert "genbot: 'nowhere' is not a ComfyUI server's address" in done.stderr
    done = genbot("worker", "--comfyui", "http://127.0.0.1:1", "--device", "cpu", cwd=tmp_path)
    assert done.returncode == 2 and "not allowed with argument --comfyui" in done.stderr


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
