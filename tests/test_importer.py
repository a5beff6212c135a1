"""A ComfyUI workflow made a template from chat (bot.app.importer through /template import):
an admin sends the workflow, or a PNG ComfyUI saved, and names the template."""

from __future__ import annotations

import json
import shutil

from templates.settings import shipped_dir
from tests.conftest import executor_config
from tests.fakes.chat import World
from tests.fakes.comfyui import FakeComfy
from tests.fakes.workflows import TXT2IMG, WORKFLOWS, saved_png


async def test_an_admin_imports_a_workflow_from_chat_and_it_is_a_template_at_once(
        tmp_path, demo_models):
    folder = tmp_path / "t"
    shutil.copytree(shipped_dir(), folder)
    async with FakeComfy() as comfy:
        config = executor_config(tmp_path / "data", demo_models,
                                 chat={"admins": ["test:BOSS"], "submitters": ["test:U1"]},
                                 templates={"dir": str(folder)},
                                 comfyui={"servers": [comfy.url]})
        async with World(config) as w:
            p = w.platform
            # a submitter may not
            await w.send("", user="U1", files=(p.upload("flow.json",
                                                        json.dumps(TXT2IMG).encode()),))
            (no,) = await w.send("/template import mine", user="U1")
            assert "admin" in no.text and not (folder / "mine.json").exists()
            # an admin sends the frontend's default graph inside a PNG (UI format)
            assert WORKFLOWS is not None
            ui = (WORKFLOWS / "ui-format__comfyui-frontend-default.json").read_text()
            await w.send("", user="BOSS", files=(p.upload("shared.png", saved_png(
                workflow=ui)),))
            (done,) = await w.send("/template import shared", user="BOSS")
            assert "Template shared@1 imported from the UI-format workflow in the picture" \
                in done.text, done.text
            assert "prompt (text)" in done.text and "checkpoint (choice)" in done.text
            assert ("GET", "/object_info") in comfy.requests
            assert json.loads((folder / "shared.workflow.json").read_text())["3"][
                "class_type"] == "KSampler"
            (shown,) = (await w.send("/template shared", user="U1"))[:1]
            assert "prompt" in shown.text  # served at once, with an example sheet
            # again, without --replace: refused; with it: version 2 if the content changed
            (again,) = await w.send("/template import shared shared.png", user="BOSS")
            assert "--replace" in again.text
            # a picture without a workflow says so, in Chinese too
            await w.send("", user="BOSS", files=(p.upload("plain.png", saved_png()),))
            (plain,) = await w.send("/template import other plain.png", user="BOSS", lang="zh")
            assert "无法导入该工作流" in plain.text and "carries no ComfyUI workflow" in plain.text
