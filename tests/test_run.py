"""`genbot run`, `genbot models` and `genbot worker` from a shell, as a newcomer uses them."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from PIL import Image

from tests.conftest import PYTHON, ROOT, executor_config, free_port, python_env
from tests.fakes.service import start_serve, write_config


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
    """A sweep, too: each row at steps 2 and 3, side by side in its grid; pinned to the
    template's first version (the file as it is: a fresh install's version 1); and each
    image made into JD's file, said and copied with the rest."""
    done = genbot("run", "product_main@1", str(ROOT / "examples" / "product_main.xlsx"),
                  "--out", "results", "--vary", "steps=2,3", "--channels", "jd", cwd=home)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "batch 1: 4 jobs of product_main from product_main.xlsx"
    assert lines[2] == "[------------------------------] 0/4 · starting the executor"
    assert lines[-12].startswith("[##############################] 4/4")
    assert lines[-11].startswith("made here, by this command's executor (")
    assert lines[-10] == f"4 images in {home / 'data' / 'outputs' / 'batch_1'}"
    assert lines[-9] == f"contact sheet: {home / 'data' / 'outputs' / 'batch_1' / 'contact.png'}"
    assert lines[-8:-6] == [f"grid: {home / 'data' / 'grids' / 'batch_1' / name}"
                            for name in ("grid_1_row2.png", "grid_2_row3.png")]
    assert lines[-6] == \
        f"4 files for jd in {home / 'data' / 'outputs' / 'batch_1' / 'deliver'}"
    # the demo models' noise is no product on white: each file says why it is held
    assert sorted(lines[-5:-1]) == [
        f"  jd/{name} — needs review: the background is not pure white: 0% of the edge is "
        "RGB 255, and the channel asks for all of it"
        for name in ("BTL-001_jd_1-2.jpg", "BTL-001_jd_1.jpg", "BTL-002_jd_1-2.jpg",
                     "BTL-002_jd_1.jpg")]
    copied = sorted(p.relative_to(home / "results").as_posix()
                    for p in (home / "results").rglob("*.*g"))
    assert copied == ["BTL-001/2.png", "BTL-001/2_2.png", "BTL-002/3.png", "BTL-002/3_2.png",
                      "contact.png", "deliver/jd/BTL-001_jd_1-2.jpg", "deliver/jd/BTL-001_jd_1.jpg",
                      "deliver/jd/BTL-002_jd_1-2.jpg", "deliver/jd/BTL-002_jd_1.jpg",
                      "grids/grid_1_row2.png", "grids/grid_2_row3.png"]
    assert Image.open(home / "results" / "BTL-001" / "2.png").size == (128, 128)


@pytest.mark.slow
def test_a_newcomers_first_run_from_any_folder_says_what_the_executor_is_doing(tmp_path):
    """No data yet: the example is written with its picture beside it, and the bar says
    the executor is building the demo models before any step (15–30 s on first use) — in
    the newcomer's language, like every line genbot run prints."""
    done = genbot("template", "example", "product_main", "-o", "s.xlsx", cwd=tmp_path)
    assert done.returncode == 0 and (tmp_path / "assets" / "bottle.png").is_file()
    done = genbot("run", "product_main", "s.xlsx", "--lang", "zh", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "批次 1：来自 s.xlsx 的 2 个 product_main 任务"
    assert lines[1] == "注意：演示模型（sdxl）——生成的图是噪点；真实模型见 genbot docs models"
    assert "[------------------------------] 0/2 · 正在生成演示模型：sd15, sdxl, " \
        "canny_sd15, canny_sdxl, walnut, brushed_steel, upscaler, ip_sd15, flux, " \
        "flux_kontext, flux_fill, flux2, qwen_image, qwen_image_edit, zimage, sd3, " \
        "taesd" in lines
    assert lines[-3].startswith("由本命令的执行器在本机生成（")
    assert lines[-2] == f"2 张图片，位于 {tmp_path / 'data' / 'outputs' / 'batch_1'}"


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
            return await _executor_doing(queue, workers, progress, [Ours()], "en")  # type: ignore
        assert await doing() == "starting the executor"
        me = owner_name(4242)
        await workers.beat(me, host="h", pid=4242, device="cpu", version="0", job=None,
                           stats={"doing": {"what": "loading", "models": ["sdxl"]}})
        assert await doing() == "loading sdxl"
        await queue.claim("gpu9:77")
        assert await doing() == ("taken by executor gpu9:77 (a running genbot service's)")
    finally:
        await queue.close()


async def test_a_timeout_says_why_no_job_runs_and_a_dead_executor_serves_nothing(tmp_path):
    """What --timeout says (no executor; a ComfyUI server down; a paused queue), and an
    executor of this host whose process died unannounced is not one to hand jobs to."""
    import socket

    from bot.cli.run import _why_waiting
    from bot.cli.shared import GENBOT_ENGINE, live_executors
    from storage import config as cfg
    from storage.queue import open_queue
    from storage.workers import Workers
    queue = await open_queue(cfg.from_dict({"service": {"data_dir": str(tmp_path)}}))
    try:
        workers = Workers.of(queue)

        async def why() -> str:
            return await _why_waiting(queue, workers, "starting the executor", "en")
        assert await why() == "no executor runs on this database"
        server = "http://127.0.0.1:9"
        await workers.beat("h:1", host="h", pid=1, device=server, version="0", job=None,
                           stats={"doing": {"what": "server_down", "models": [server]}})
        assert await why() == f"ComfyUI server {server} does not answer"
        await queue.pause("cli:me")
        assert await why() == "the queue is paused (genbot queue resume goes on)"

        dead = subprocess.run([PYTHON, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
        here = socket.gethostname()
        for pid in (int(dead.stdout), 1):  # (pid 1 lives: init, whoever it belongs to)
            await workers.beat(f"{here}:{pid}", host=here, pid=pid, device="cpu",
                               version="0", job=None)
        assert await live_executors(queue) == {server: ["h:1"], GENBOT_ENGINE: [f"{here}:1"]}
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


def test_run_refuses_a_sheet_naming_a_picture_it_lacks_not_running_genbots_own(home):
    """Issue 42, item 5: a workbook of one's own naming assets/bottle.png, no such file
    beside it, is refused at its cell — it does not run on genbot's demo bottle."""
    from openpyxl import Workbook
    book = Workbook()
    book.active.append(["image", "title"])
    book.active.append(["assets/bottle.png", "Mine"])
    book.save(home / "mine.xlsx")
    done = genbot("run", "social_thumb", "mine.xlsx", cwd=home)
    assert done.returncode == 1, done.stdout
    assert f'row 2, column "image": no image "assets/bottle.png" beside the sheet ({home})' \
        in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "example pictures" not in done.stdout
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
                                 "(real ones: genbot docs models)")


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


# --- one executor per GPU: a running service's takes the jobs -----------------------------

def config_in(home, **tables: str) -> Path:
    """A config file for `genbot serve` and `genbot run` on home/data (where `home` linked
    the demo models); `tables`: more TOML, by table name."""
    write_config(home / "genbot.toml", home / "data", free_port(), lease=10.0, **tables)
    return home / "genbot.toml"


async def executor_ids(config_file) -> list[str]:
    from storage import config as cfg
    from storage.queue import open_queue
    from storage.workers import Workers
    queue = await open_queue(cfg.load(str(config_file)))
    try:
        return [w.id for w in await Workers.of(queue).all()]
    finally:
        await queue.close()


def executor_children(pid: int) -> set[int]:
    """The executor processes that process `pid` has running now (Linux: read from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue  # (gone meanwhile)
        if parent == pid and b"executor.worker" in command:
            found.add(int(stat.parent.name))
    return found


def run_watched(*args: str, cwd, input: str | None = None,
                ) -> tuple[subprocess.CompletedProcess, set[int]]:
    """`genbot ARGS` to its end, and the executor processes it started meanwhile."""
    proc = subprocess.Popen([PYTHON, "-m", "bot.cli", *args], cwd=cwd, env=python_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen: set[int] = set()
    outputs: list[tuple[str, str]] = []
    reader = threading.Thread(
        target=lambda: outputs.append(proc.communicate(input or "", timeout=180)))
    reader.start()
    while reader.is_alive():
        seen |= executor_children(proc.pid)
        reader.join(0.02)
    (out, err), = outputs
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), seen


@pytest.mark.slow
async def test_run_and_chat_hand_their_jobs_to_a_running_services_executor(home):
    """`genbot serve` runs an executor; `genbot run` and `genbot chat` on the same database
    start none (two copies of the models on one GPU run it out of memory), say so in one
    line, and their batches are made by the service's executor; `--own-executor` starts
    one anyway."""
    config_file = config_in(home)
    with (home / "serve.log").open("wb") as log:
        service = await start_serve(config_file, log)
        try:
            async with asyncio.timeout(120):  # its executor up (torch imported)
                while not await executor_ids(config_file):
                    assert service.returncode is None, (home / "serve.log").read_text()
                    await asyncio.sleep(0.2)
            (services,) = await executor_ids(config_file)
            assert ("not loading bitsandbytes, torchao: no model is quantized with them"
                    in (home / "serve.log").read_text())  # (its start: seconds sooner)
            served = (f"An executor already runs on this database ({services}): the jobs go "
                      "to it, and this command starts none (--own-executor starts one).")
            (home / "assets").mkdir()
            shutil.copy(ROOT / "examples" / "assets" / "bottle.png", home / "assets")
            sheet = str(home / "one.csv")  # (a template that needs no model: quick)
            (home / "one.csv").write_text("image,title\nassets/bottle.png,One executor\n")
            done, started = await asyncio.to_thread(run_watched, "run", "social_thumb", sheet,
                                                    "--config", str(config_file), cwd=home)
            assert done.returncode == 0, done.stderr
            assert not started
            lines = done.stdout.splitlines()
            assert served in lines
            assert f"made by executor {services}, already running on this database" in lines
            assert await executor_ids(config_file) == [services]  # no executor of its own

            chat, started = await asyncio.to_thread(run_watched, "chat", "--config",
                                                    str(config_file), cwd=home,
                                                    input=f"/gen social_thumb {sheet}\n")
            assert chat.returncode == 0, chat.stdout + chat.stderr
            assert chat.stdout.splitlines()[1] == served and not started

            own, started = await asyncio.to_thread(run_watched, "run", "social_thumb", sheet,
                                                   "--config", str(config_file),
                                                   "--own-executor", cwd=home)
            assert own.returncode == 0, own.stderr
            assert served not in own.stdout and len(started) == 1
        finally:
            service.terminate()
            await service.wait()


# --- genbot run owns its batch: a signal or --timeout cancels it, or says how to ---------------

def comfy_home(home, port: int):
    """A config whose only template runs on a ComfyUI server where nothing listens: the
    batch waits for ever (the executor says the server is down)."""
    from tests.fakes.workflows import templates
    templates(home / "t")
    (home / "sheet.csv").write_text("prompt\na bottle\nsecond bottle\n")
    return config_in(home, templates=f'dir = "{home / "t"}"',
                     comfyui=f'servers = ["http://127.0.0.1:{port}"]')


def started_run(config_file, home, *options: str) -> tuple[subprocess.Popen, str]:
    """`genbot run portrait sheet.csv` in the background, once it has queued its batch."""
    run = subprocess.Popen([PYTHON, "-m", "bot.cli", "run", "portrait", "sheet.csv",
                            "--config", str(config_file), *options], cwd=home,
                           env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    assert run.stdout is not None
    first = run.stdout.readline()  # (blocks until it has queued the batch, or ended)
    if not first.startswith(("batch ", "批次 ")):  # (--lang zh: 批次 N：…)
        run.kill()
        pytest.fail(first + run.communicate(timeout=60)[1])
    return run, first


async def signaled(config_file, sig, *options: str) -> tuple[int, str]:
    """`genbot run` sent `sig` once it has queued its batch: its exit code, its last line."""
    run, _ = await asyncio.to_thread(started_run, config_file, config_file.parent, *options)
    run.send_signal(sig)
    _, err = await asyncio.to_thread(run.communicate, timeout=60)
    return run.returncode, err.strip().splitlines()[-1]


async def batch_statuses(config_file, batch: int) -> set[str]:
    from storage import config as cfg
    from storage.queue import open_queue
    queue = await open_queue(cfg.load(str(config_file)))
    try:
        return {j.status for j in await queue.batch_jobs(batch)}
    finally:
        await queue.close()


@pytest.mark.slow
async def test_a_signal_cancels_the_runs_batch_or_with_keep_queued_says_how_to(tmp_path):
    home = tmp_path
    config_file = comfy_home(home, free_port())

    assert await signaled(config_file, signal.SIGINT) == (
        130, "genbot: stopped by SIGINT; batch 1 canceled.")
    assert await batch_statuses(config_file, 1) == {"canceled"}

    command = f"genbot queue cancel --batch 2 --config {config_file}"
    assert await signaled(config_file, signal.SIGTERM, "--keep-queued", "--lang", "zh") == (
        143, f"genbot：收到 SIGTERM 而停止；批次 2 仍在队列中（--keep-queued）。取消它：{command}")
    assert await batch_statuses(config_file, 2) == {"queued"}
    said = genbot(*command.split()[1:], cwd=home)  # the command it gave, as given
    assert said.returncode == 0, said.stderr
    assert await batch_statuses(config_file, 2) == {"canceled"}

    assert await signaled(config_file, signal.SIGTERM) == (
        143, "genbot: stopped by SIGTERM; batch 3 canceled.")
    assert await batch_statuses(config_file, 3) == {"canceled"}


@pytest.mark.slow
async def test_run_timeout_bounds_the_wait_says_why_and_cancels_its_batch(tmp_path):
    """The queue is paused: no executor may start the jobs, and --timeout ends the wait."""
    home = tmp_path
    config_file = comfy_home(home, free_port())
    assert genbot("queue", "pause", "--config", str(config_file), cwd=home).returncode == 0
    done = genbot("run", "portrait", "sheet.csv", "--config", str(config_file), "--timeout",
                  "1.5", cwd=home)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "genbot: batch 1 waited 1.5 s for an executor (--timeout): the queue is paused "
        "(genbot queue resume goes on); batch 1 canceled.")
    done = genbot("run", "portrait", "sheet.csv", "--config", str(config_file), "--timeout",
                  "1", "--keep-queued", cwd=home)
    assert done.returncode == 1
    assert "batch 2 stays queued (--keep-queued)" in done.stderr
    assert await batch_statuses(config_file, 1) == {"canceled"}
    assert await batch_statuses(config_file, 2) == {"queued"}
    bad = genbot("run", "portrait", "sheet.csv", "--timeout", "soon", cwd=home)
    assert bad.returncode == 2 and "'soon' is not a number of seconds above 0" in bad.stderr
