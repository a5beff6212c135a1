"""`genbot chat`: the same commands and replies in a terminal, driven from standard input."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bot.chat.terminal import attach
from tests.conftest import PYTHON, ROOT, executor_config, python_env


def test_a_path_becomes_an_upload_named_by_its_file_name(tmp_path):
    sheet = tmp_path / "my sheet.xlsx"
    sheet.write_bytes(b"x")
    text, files = attach(f'/gen social_thumb "{sheet}" --priority high')
    assert text == "/gen social_thumb 'my sheet.xlsx' --priority high"
    (f,) = files
    assert (f.name, f.size, f.handle) == ("my sheet.xlsx", 1, {"path": str(sheet),
                                                               "folder": str(tmp_path)})
    assert attach("/gen social_thumb nothing.xlsx") == ("/gen social_thumb nothing.xlsx", ())
    assert attach('/gen "unclosed') == ('/gen "unclosed', ())


def write_config(tmp_path: Path, demo_models: Path, **chat) -> Path:
    executor_config(tmp_path / "data", demo_models)  # links the demo models into data/
    lines = ["[service]", f'data_dir = "{tmp_path / "data"}"',
             "[queue]", "poll_interval = 0.1", "[chat]", "progress_every = 0.5"]
    lines += [f"{k} = {v!r}".replace("'", '"') for k, v in chat.items()]
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def genbot_chat(config: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "bot.cli", "chat", "--config", str(config), *args],
                          input=script, capture_output=True, text=True, cwd=ROOT,
                          env=python_env(), timeout=240)


def test_a_script_runs_a_sheet_and_sees_replies_progress_and_images(tmp_path, demo_models):
    config = write_config(tmp_path, demo_models)
    done = genbot_chat(config, "/queue\n/gen social_thumb examples/social_thumb.xlsx\n")
    out = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert out[0].startswith("genbot chat as terminal:") and "(admin)" in out[0]
    assert out[1:3] == ["The queue is running.", "0 queued, 0 running"]
    accepted = next(i for i, line in enumerate(out) if line.startswith("Batch 1 accepted"))
    assert out[accepted].startswith("Batch 1 accepted: 2 social_thumb jobs.")
    # Then the executor, if it has said hello yet (it starts beside the chat).
    # (its own executor is starting, never "no executor")
    assert all(line.startswith(("executor ", "The executor is starting"))
               for line in out[3:accepted]), out
    images = [line for line in out if line.startswith("image: ")]
    assert len(images) == 3 and images[-1].split("  ")[0].endswith("contact.png")
    assert images[0].endswith("row 2 · 新品上市 · 限时九折 · 1:1")
    for line in images:
        assert Path(line.removeprefix("image: ").split("  ")[0]).is_file()
    assert images[-1].split("  ")[1].startswith("Batch 1 finished")  # captions the sheet
    (results,) = [line for line in out if line.startswith("file: ")]
    assert results.endswith("results.xlsx") and Path(results.removeprefix("file: ")).is_file()
    assert "Traceback" not in done.stderr


def test_as_another_user_the_roles_apply(tmp_path, demo_models):
    config = write_config(tmp_path, demo_models, default_role="viewer", language="zh")
    done = genbot_chat(config, "/pause\n/status\n", "--as", "bob", "--no-executor")
    out = done.stdout.splitlines()
    assert out[0].startswith("genbot chat：你是 terminal:bob（查看者）")  # the banner too
    assert out[1:] == ["/pause 需要管理员角色，你的角色是查看者。请联系管理员。",
                       "你还没有提交过批次。"]
    assert done.returncode == 0
