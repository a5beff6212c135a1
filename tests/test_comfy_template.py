"""ComfyUI templates: bindings checked when they load, rows bound into a copy of the
workflow, and `genbot template import` on workflows exported by others."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from executor.comfy_template import import_workflow
from executor.workflow import TemplateError, affinity, bind, load_template, load_templates
from tests.conftest import ROOT

WORKFLOWS = next((p for p in (ROOT.parent / "shared" / "comfyui-workflows",
                              Path("/work/shared/comfyui-workflows")) if p.is_dir()), None)
needs_workflows = pytest.mark.skipif(WORKFLOWS is None, reason="no ../shared/comfyui-workflows")

TXT2IMG = {
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd15.safetensors"},
          "_meta": {"title": "Load Checkpoint"}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512,
                                                       "batch_size": 1}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["4", 1]},
          "_meta": {"title": "Positive"}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "blurry", "clip": ["4", 1]},
          "_meta": {"title": "Negative"}},
    "3": {"class_type": "KSampler", "inputs": {
        "seed": 1, "steps": 20, "cfg": 7.0, "sampler_name": "euler", "scheduler": "normal",
        "denoise": 1.0, "model": ["4", 0], "positive": ["6", 0], "negative": ["7", 0],
        "latent_image": ["5", 0]}},
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "x", "images": ["8", 0]}},
}


def write(folder: Path, params: dict, *, workflow=TXT2IMG, name="portrait", **extra) -> Path:
    (folder / f"{name}.workflow.json").write_text(json.dumps(workflow), encoding="utf-8")
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"name": name, "engine": "comfyui",
                                "workflow": f"{name}.workflow.json", "params": params,
                                **extra}), encoding="utf-8")
    return path


def test_bindings_by_id_and_by_title_bind_a_row_into_a_copy(tmp_path):
    t = load_template(write(tmp_path, {
        "prompt": {"type": "text", "required": True, "to": ["Positive.text"],
                   "aliases": ["提示词"]},
        "seed": {"type": "seed", "to": ["3.seed"]},
        "steps": {"type": "int", "min": 1, "max": 60, "to": ["3.steps"]},
        "checkpoint": {"type": "choice", "choices": ["sd15.safetensors", "dream.safetensors"],
                       "to": ["Load Checkpoint.ckpt_name"]}}, output="{checkpoint}/{row}.png"))
    assert t.engine == "comfyui" and t.comfy is not None
    assert t.params["prompt"].uses == ("Positive.text",)
    wf = bind(t, {"prompt": 'say "hi" {x} \\ 🎉', "seed": None, "steps": 30,
                  "checkpoint": "dream.safetensors"}, row=7)
    prompt = wf["prompt"]
    assert prompt["6"]["inputs"]["text"] == 'say "hi" {x} \\ 🎉'  # as data: unchanged
    assert prompt["3"]["inputs"]["steps"] == 30
    assert prompt["4"]["inputs"]["ckpt_name"] == "dream.safetensors"
    assert isinstance(prompt["3"]["inputs"]["seed"], int) \
        and prompt["3"]["inputs"]["seed"] == wf["params"]["seed"]  # drawn, and stored
    assert prompt["7"]["inputs"]["text"] == "blurry"  # not bound: as the workflow has it
    assert TXT2IMG["6"]["inputs"]["text"] == "a cat"  # the template's copy is untouched
    assert wf["outputs"] == {"images": "dream.safetensors/7.png"}
    assert affinity(wf) == "comfyui:portrait" and wf["uploads"] == []


def test_an_image_column_is_uploaded_at_run_time(tmp_path):
    workflow = {**TXT2IMG, "10": {"class_type": "LoadImage",
                                  "inputs": {"image": "example.png", "upload": "image"}}}
    t = load_template(write(tmp_path, {"photo": {"type": "image", "required": True,
                                                 "to": ["10.image"]}}, workflow=workflow))
    wf = bind(t, {"photo": "inputs/abc.png"}, row=2)
    assert wf["uploads"] == [["10", "image", "inputs/abc.png"]]
    assert wf["outputs"] == {"images": "2.png"}


@pytest.mark.parametrize("params, where, message", [
    ({"p": {"type": "text", "to": ["99.text"]}}, "params.p.to[0]",
     'no node "99" (by id or title) in the workflow'),
    ({"p": {"type": "text", "to": ["Positive.txt"]}}, "params.p.to[0]",
     'node 6 (CLIPTextEncode) has no input "txt"; it has text, clip'),
    ({"p": {"type": "int", "to": ["Positive.text"]}}, "params.p.to[0]",
     '"Positive.text" holds "a cat", which a int cannot replace'),
    ({"p": {"type": "text", "to": ["6.clip"]}}, "params.p.to[0]",
     '"6.clip" is fed by node 4 (a link, not a value): bind an input that holds a value'),
    ({"p": {"type": "text", "to": ["text"]}}, "params.p.to[0]", "is not NODE.input"),
    ({"p": {"type": "text"}}, "params.p.to", "expected a list of node inputs"),
    ({"p": {"type": "color", "to": ["6.text"]}}, "params.p.type",
     "a ComfyUI template's parameter is one of"),
    ({"a": {"type": "text", "to": ["6.text"]}, "b": {"type": "text", "to": ["Positive.text"]}},
     "params.b.to[0]", '"Positive.text" is set by parameter "a" too'),
    ({"p": {"type": "text", "to": ["6.text"], "too": 1}}, "params.p.too", 'unknown key "too"'),
])
def test_a_broken_binding_is_one_line_with_its_json_path(tmp_path, params, where, message):
    with pytest.raises(TemplateError) as e:
        load_template(write(tmp_path, params))
    assert e.value.path == where and message in e.value.message, str(e.value)


def test_a_title_naming_two_nodes_asks_for_an_id(tmp_path):
    workflow = json.loads(json.dumps(TXT2IMG))
    workflow["7"]["_meta"]["title"] = "Positive"
    with pytest.raises(TemplateError, match='the title "Positive" names nodes 6, 7: bind by id'):
        load_template(write(tmp_path, {"p": {"type": "text", "to": ["Positive.text"]}},
                            workflow=workflow))


def test_a_missing_or_ui_format_workflow_is_said(tmp_path):
    path = write(tmp_path, {"p": {"type": "text", "to": ["6.text"]}})
    (tmp_path / "portrait.workflow.json").unlink()
    with pytest.raises(TemplateError, match=r"workflow: cannot read .*portrait.workflow.json"):
        load_template(path)
    (tmp_path / "portrait.workflow.json").write_text('{"nodes": [], "links": []}')
    with pytest.raises(TemplateError, match="UI format .* Export \\(API\\)"):
        load_template(path)


def test_workflow_files_beside_templates_are_not_reported_as_broken_templates(tmp_path):
    write(tmp_path, {"p": {"type": "text", "to": ["6.text"]}})
    templates, errors = load_templates(tmp_path)
    assert list(templates) == ["portrait"] and errors == []


# --- import ----------------------------------------------------------------------------------

def test_import_guesses_the_columns_of_a_txt2img_graph():
    template, said = import_workflow(TXT2IMG, "mine.json", "mine")
    params = template["params"]
    assert {n: p["to"] for n, p in params.items()} == {
        "prompt": ["6.text"], "negative": ["7.text"], "seed": ["3.seed"], "steps": ["3.steps"],
        "cfg": ["3.cfg"], "width": ["5.width"], "height": ["5.height"],
        "checkpoint": ["4.ckpt_name"]}
    assert params["prompt"]["required"] and params["checkpoint"]["type"] == "choice"
    assert said[0] == "prompt (text) → 6.text [Positive]"


@needs_workflows
@pytest.mark.parametrize("file", ["comfyui__basic_api_example.json",
                                  "comfyui__default_graph_sdxl1_0.json",
                                  "comfyui-api__sd1.5-img2img.json",
                                  "comfyui-api__sd1.5-multi-output.json",
                                  "comfyui__sd-1.5-lora-0.json"])
def test_import_of_workflows_exported_by_others_loads_and_gives_an_example(tmp_path, file):
    from bot.intake.sheets import example_rows
    assert WORKFLOWS is not None
    source = WORKFLOWS / file
    template, said = import_workflow(json.loads(source.read_text()), str(source), "w")
    shutil.copy(source, tmp_path / "w.workflow.json")
    (tmp_path / "w.json").write_text(json.dumps(template))
    t = load_template(tmp_path / "w.json")
    assert "prompt" in t.params and t.params["prompt"].required
    assert len(said) == len(t.params)
    headers, *rows = example_rows(t)
    assert len(rows) == 2 and "prompt" in headers
    if "sdxl" in file:  # base and refiner: one prompt, one seed, both samplers
        assert t.params["prompt"].uses == ("6.text", "17.text")
        assert t.params["seed"].uses == ("10.noise_seed", "14.noise_seed")
    if "img2img" in file:
        assert t.params["image"].type == "image" and t.params["image"].uses == ("10.image",)
    if "lora" in file:
        assert t.params["lora"].uses == ("10.lora_name",)


@needs_workflows
def test_import_refuses_a_ui_format_workflow(tmp_path, capsys, monkeypatch):
    from bot.cli.genbot import main
    assert WORKFLOWS is not None
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.toml").write_text('[templates]\ndir = "t"\n')
    with pytest.raises(SystemExit) as e:
        main(["template", "import", str(WORKFLOWS / "ui-format__comfyui-frontend-default.json"),
              "--name", "ui"])
    assert "UI format" in str(e.value) and "Export (API)" in str(e.value)
    assert not (tmp_path / "t" / "ui.json").exists()


@needs_workflows
def test_genbot_template_import_writes_both_files_and_example_works(tmp_path, capsys,
                                                                     monkeypatch):
    from bot.cli.genbot import main
    assert WORKFLOWS is not None
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.toml").write_text('[templates]\ndir = "t"\n')
    source = WORKFLOWS / "comfyui-api__sd1.5-img2img.json"
    assert main(["template", "import", str(source), "--name", "img2img"]) == 0
    out = capsys.readouterr().out
    assert "image (image) → 10.image [Load Image]" in out
    assert (tmp_path / "t" / "img2img.workflow.json").read_bytes() == source.read_bytes()
    with pytest.raises(SystemExit, match="exists already"):
        main(["template", "import", str(source), "--name", "img2img"])
    assert main(["template", "example", "img2img", "-o", "s.xlsx"]) == 0
    assert (tmp_path / "example.png").is_file()  # the picture its rows name, beside it
    assert main(["validate", "img2img", "s.xlsx"]) == 0
