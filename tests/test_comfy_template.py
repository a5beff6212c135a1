"""ComfyUI templates: bindings checked when they load, rows bound into a copy of the
workflow, and `genbot template import` on workflows exported by others."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import pytest

from templates.binding import bind
from templates.comfy import WORKFLOW_MAX_BYTES, import_workflow
from templates.jobs import decode, encode
from templates.loader import TemplateError, load_template, load_templates
from tests.fakes.workflows import TXT2IMG, WORKFLOWS

needs_workflows = pytest.mark.skipif(WORKFLOWS is None, reason="no ../shared/comfyui-workflows")


def bound(*args, **kwargs):
    """A row bound, as the queue stores it."""
    return encode(bind(*args, **kwargs))


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
    wf = bound(t, {"prompt": 'say "hi" {x} \\ 🎉', "seed": None, "steps": 30,
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
    assert decode(wf).affinity == "comfyui:portrait" and wf["uploads"] == []


def test_an_image_column_is_uploaded_at_run_time(tmp_path):
    workflow = {**TXT2IMG, "10": {"class_type": "LoadImage",
                                  "inputs": {"image": "example.png", "upload": "image"}}}
    t = load_template(write(tmp_path, {"photo": {"type": "image", "required": True,
                                                 "to": ["10.image"]}}, workflow=workflow))
    wf = bound(t, {"photo": "inputs/abc.png"}, row=2)
    assert wf["uploads"] == [["10", "image", "inputs/abc.png"]]
    assert wf["outputs"] == {"images": "2.png"}


def test_vary_feeds_the_image_parameter_the_template_names(tmp_path):
    """`vary_image` names which image input a vary feeds (a workflow may also take a mask
    or a ControlNet image); a name that is no image parameter is refused at load."""
    from templates.actions import vary
    from templates.jobs import decode
    from templates.params import Problem
    workflow = {**TXT2IMG, **{n: {"class_type": "LoadImage", "inputs": {
        "image": "example.png", "upload": "image"}} for n in ("10", "11")}}
    params = {"mask": {"type": "image", "to": ["10.image"]},
              "photo": {"type": "image", "to": ["11.image"]},
              "seed": {"type": "seed", "to": ["3.seed"]}}
    t = load_template(write(tmp_path, params, workflow=workflow, vary_image="photo"))
    parent = decode(bound(t, {"mask": "inputs/m.png", "photo": "inputs/p.png", "seed": 7},
                          row=2))
    child = vary(t, parent, "outputs/batch_1/2.png")
    assert sorted((u.node, u.input, u.stored) for u in child.uploads) == [
        ("10", "image", "inputs/m.png"),
        ("11", "image", "outputs/batch_1/2.png")]
    assert child.params["seed"] != 7
    with pytest.raises(Problem) as e:
        vary(t, parent, "outputs/batch_1/2.png", 0.5)  # the workflow's denoise is its own
    assert e.value.code == "vary_strength_comfy"
    with pytest.raises(TemplateError) as broken:
        load_template(write(tmp_path, params, workflow=workflow, vary_image="seed"))
    assert broken.value.path == "vary_image" and "one of mask, photo" in broken.value.message


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
    with pytest.raises(TemplateError, match=r"workflow: .*portrait.workflow.json: cannot read: "
                                            "No such file"):
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
    from bot.intake.writer import example_rows
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
        assert t.params["lora_strength"].uses == ("10.strength_model", "10.strength_clip")


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


# --- `genbot template import`: refusals, replacing, node ids, ranges ---------------------------

@pytest.fixture
def genbot(tmp_path, monkeypatch):
    """`genbot`'s main, run in a folder whose config keeps the templates in ./t."""
    from bot.cli.genbot import main
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GENBOT_CONFIG", raising=False)
    (tmp_path / "config.toml").write_text('[templates]\ndir = "t"\n')
    (tmp_path / "good.json").write_text(json.dumps(TXT2IMG))
    return main


def refused(main, *argv: str) -> str:
    """The one line `genbot` exits with, checked to be one line and no traceback."""
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    line = str(e.value)
    assert line.startswith("genbot: ") and "\n" not in line and "Traceback" not in line, line
    return line


def files(folder: Path) -> dict[str, bytes]:
    """Every entry of the folder, hidden ones too (a leftover staging folder would show)."""
    return {p.name: p.read_bytes() if p.is_file() else b"<folder>" for p in folder.iterdir()}


def huge(path: Path) -> None:
    with path.open("wb") as f:  # sparse: nothing is written, the size is what counts
        f.write(b'{"3": ')
        f.truncate(WORKFLOW_MAX_BYTES + 1)


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def sampler(**inputs) -> dict:
    return {"class_type": "KSampler", "inputs": inputs}


def changed(nid: str, **inputs) -> dict:
    """TXT2IMG with these inputs of node `nid` changed."""
    node = TXT2IMG[nid]
    return {**TXT2IMG, nid: {**node, "inputs": {**node["inputs"], **inputs}}}


# (what the file holds, what the refusal says)
HOSTILE = {
    "no inputs": ({"3": {"class_type": "KSampler"}}, "node 3 (KSampler): no inputs"),
    "_meta a string": ({"3": {**sampler(), "_meta": "Positive"}},
                       "node 3 (KSampler): _meta is a string, expected an object"),
    "_meta.title a number": ({"3": {**sampler(), "_meta": {"title": 5}}},
                             "node 3 (KSampler): _meta.title is a number, expected text"),
    "no class_type": ({"3": {"inputs": {}}}, "node 3: no class_type"),
    "class_type a number": ({"3": {"class_type": 7, "inputs": {}}},
                            "node 3: class_type is a number, expected the node class's name"),
    "inputs a list": ({"3": {"class_type": "KSampler", "inputs": [1, 2]}},
                      "node 3 (KSampler): inputs is a list, expected an object"),
    "a node that is a string": ({"3": "KSampler"},
                                "node 3: a string, expected an object {class_type, inputs}"),
    "a list": ([TXT2IMG["3"]], "a list, not a ComfyUI API-format workflow"),
    "a scalar": (42, "a number, not a ComfyUI API-format workflow"),
    "null": (None, "null, not a ComfyUI API-format workflow"),
    "no nodes": ({}, "no nodes"),
    "a blank node id": ({" ": sampler()}, 'node " ": a node id cannot be blank'),
    "a line break in a node id": ({"3\n4": {"inputs": {}}}, "node 3\\n4: no class_type"),
    "100,000 deep": (b"[" * 100_000 + b"]" * 100_000, "line 1 column 65: nested more than 64 deep"),
    "an input 100 deep": ({"3": sampler(x=nested(100))}, "3.inputs.x: nested more than 64 deep"),
    "invalid UTF-8": (b'{"3": {"class_type": "K\xffS"}}',
                      "line 1: not UTF-8 text (byte 0xff at offset 23)"),
    "not JSON": (b'{"3": {', "line 1 column 8: not valid JSON: Expecting property name"),
    "huge": (huge, "larger than 16 MiB"),
    "the UI format": ({"nodes": [], "links": []}, "UI format"),
    "a genbot template": ({"name": "x", "params": {}, "nodes": {}},
                          "this is a genbot template, not a ComfyUI workflow"),
}
# Workflows that read well but that import cannot make a template of, as they are.
UNIMPORTABLE = {
    "steps 0": (changed("3", steps=0),
                "node 3 (KSampler): steps is 0, outside the 1..10000 ComfyUI allows"),
    "cfg 150": (changed("3", cfg=150),
                "node 3 (KSampler): cfg is 150, outside the 0..100 ComfyUI allows"),
    "width 8": (changed("5", width=8),
                "node 5 (EmptyLatentImage): width is 8, outside the 16..16384 ComfyUI allows"),
    "nothing to bind": ({"9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "x"}}},
                        "found nothing to make a column of"),
}


def put(path: Path, content) -> None:
    if callable(content):
        content(path)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(json.dumps(content))


@pytest.mark.parametrize("case", [*HOSTILE, *UNIMPORTABLE])
def test_import_refuses_a_bad_workflow_in_one_line_and_keeps_the_template_it_would_replace(
        genbot, tmp_path, case):
    content, says = HOSTILE.get(case) or UNIMPORTABLE[case]
    put(tmp_path / "bad.json", content)
    line = refused(genbot, "template", "import", "bad.json", "--name", "fresh")
    assert line.startswith("genbot: bad.json: ") and says in line, line
    assert not (tmp_path / "t").exists()  # nothing half-made
    assert genbot(["template", "import", "good.json", "--name", "w"]) == 0
    before = files(tmp_path / "t")
    assert sorted(before) == ["w.json", "w.workflow.json"]
    line = refused(genbot, "template", "import", "bad.json", "--name", "w", "--force")
    assert says in line, line
    assert files(tmp_path / "t") == before  # both files as they were, no staging left


@pytest.mark.parametrize("case", HOSTILE)
def test_a_bad_workflow_beside_its_template_is_listed_as_broken_not_a_crash(
        genbot, tmp_path, capsys, case):
    content, says = HOSTILE[case]
    assert genbot(["template", "import", "good.json", "--name", "ok"]) == 0
    assert genbot(["template", "import", "good.json", "--name", "w"]) == 0
    put(tmp_path / "t" / "w.workflow.json", content)
    capsys.readouterr()
    assert genbot(["templates"]) == 1
    out, err = capsys.readouterr()
    assert [line.split()[0] for line in out.splitlines()] == ["ok"]
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"BROKEN {tmp_path / 't' / 'w.json'}: workflow: ") and says in err, err
    with pytest.raises(SystemExit, match="template w is broken: .*" + re.escape(says)):
        genbot(["template", "show", "w"])


@pytest.mark.parametrize("case", ["100,000 deep", "invalid UTF-8", "not JSON"])
def test_a_template_file_that_is_not_json_is_listed_as_broken_not_a_crash(
        genbot, tmp_path, capsys, case):
    content, says = HOSTILE[case]
    assert genbot(["template", "import", "good.json", "--name", "ok"]) == 0
    put(tmp_path / "t" / "w.json", content)
    capsys.readouterr()
    assert genbot(["templates"]) == 1
    out, err = capsys.readouterr()
    assert [line.split()[0] for line in out.splitlines()] == ["ok"]
    assert err.startswith(f"BROKEN {tmp_path / 't' / 'w.json'}: {says}")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_template_file_past_the_size_limit_is_broken_unread(tmp_path):
    from templates.loader import TEMPLATE_MAX_BYTES
    with (tmp_path / "big.json").open("wb") as f:
        f.truncate(TEMPLATE_MAX_BYTES + 1)
    templates, errors = load_templates(tmp_path)
    assert templates == {} and [e.message for e in errors] == [
        "larger than 4 MiB, the most genbot reads of such a file"]


@pytest.mark.parametrize("name, says", [
    ("../outside.workflow.json", "it leads out of its folder"),
    ("/etc/passwd", "it is an absolute path"),
    ("a\x00b.json", "it holds a control or invisible character"),
])
def test_a_template_naming_a_workflow_outside_its_folder_is_broken(tmp_path, name, says):
    path = write(tmp_path, {"p": {"type": "text", "to": ["6.text"]}})
    path.write_text(json.dumps({**json.loads(path.read_text()), "workflow": name}))
    templates, errors = load_templates(tmp_path)
    assert templates == {} and len(errors) == 1
    assert errors[0].path == "workflow" and says in errors[0].message


def test_force_replaces_both_files_and_leaves_nothing_else(genbot, tmp_path, capsys):
    assert genbot(["template", "import", "good.json", "--name", "w"]) == 0
    lora = {**TXT2IMG, "10": {"class_type": "LoraLoader", "inputs": {
        "lora_name": "add_detail.safetensors", "strength_model": 0.5, "strength_clip": 1,
        "model": ["4", 0], "clip": ["4", 1]}}}
    (tmp_path / "lora.json").write_text(json.dumps(lora))
    assert genbot(["template", "import", "lora.json", "--name", "w", "--force"]) == 0
    after = files(tmp_path / "t")
    assert sorted(after) == ["w.json", "w.workflow.json"]
    assert after["w.workflow.json"] == (tmp_path / "lora.json").read_bytes()
    assert load_template(tmp_path / "t" / "w.json").params["lora"].uses == ("10.lora_name",)


def test_a_replace_that_fails_midway_puts_back_what_it_had_replaced(genbot, tmp_path):
    """The workflow is renamed into place first; when the template cannot follow (here a
    folder stands where its file goes), the old workflow is put back."""
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "w.workflow.json").write_bytes(b'{"old": "workflow"}')
    (folder / "w.json").mkdir()
    (folder / "w.json" / "keep").write_text("mine")
    before = files(folder)
    line = refused(genbot, "template", "import", "good.json", "--name", "w", "--force")
    assert f"cannot replace {folder / 'w.json'}: Is a directory" in line
    assert line.endswith("; kept w.json and w.workflow.json as they were")
    assert files(folder) == before and (folder / "w.json" / "keep").read_text() == "mine"


def test_install_loads_the_template_before_it_replaces_anything(tmp_path):
    from templates.install import InstallError, install_template
    write(tmp_path, {"p": {"type": "text", "to": ["6.text"]}}, name="w")
    before = files(tmp_path)
    broken = {"name": "w", "engine": "comfyui", "workflow": "w.workflow.json",
              "params": {"p": {"type": "text", "to": ["99.text"]}}}
    with pytest.raises(InstallError) as e:
        install_template(tmp_path, "w", {"w.workflow.json": b'{"6": {"class_type": "X", '
                                                             b'"inputs": {"text": ""}}}',
                                         "w.json": json.dumps(broken).encode()})
    assert str(e.value).startswith(f"the template does not load: {tmp_path / 'w.json'}: "
                                   'params.p.to[0]: no node "99"')
    assert ".install-" not in str(e.value)  # named where it would be, not where it was tried
    assert files(tmp_path) == before


def subgraph_workflow() -> dict:
    """TXT2IMG as newer ComfyUI exports it from a subgraph ("20:4" …), and three LoadImage
    nodes whose ids would make the same column name."""
    def moved(value):
        return [f"20:{value[0]}", value[1]] if isinstance(value, list) else value
    workflow = {f"20:{nid}": {**node, "inputs": {k: moved(v) for k, v in node["inputs"].items()}}
                for nid, node in TXT2IMG.items()}
    for nid in ("20:10", "21:10", "21_10"):
        workflow[nid] = {"class_type": "LoadImage", "_meta": {"title": f"Photo {nid}"},
                         "inputs": {"image": "example.png", "upload": "image"}}
    return workflow


def test_subgraph_node_ids_make_valid_columns_that_set_their_own_node(genbot, tmp_path, capsys):
    (tmp_path / "sub.json").write_text(json.dumps(subgraph_workflow()))
    assert genbot(["template", "import", "sub.json", "--name", "sub"]) == 0
    out = capsys.readouterr().out
    assert "photo_21_10 (image) → 21:10.image [Photo 21:10]" in out  # named by its title
    t = load_template(tmp_path / "t" / "sub.json")
    assert {n: p.uses for n, p in t.params.items() if p.type == "image"} == {
        "photo_20_10": ("20:10.image",), "photo_21_10": ("21:10.image",),
        "image": ("21_10.image",)}  # (its title's name is taken)
    assert t.params["prompt"].uses == ("20:6.text",) and t.params["seed"].uses == ("20:3.seed",)
    job = bound(t, {"prompt": "a fox", "seed": 3, "photo_20_10": "inputs/a.png",
                    "photo_21_10": "inputs/b.png", "image": "inputs/c.png"}, row=2)
    assert job["uploads"] == [["20:10", "image", "inputs/a.png"],
                              ["21:10", "image", "inputs/b.png"],
                              ["21_10", "image", "inputs/c.png"]]
    assert job["prompt"]["20:6"]["inputs"]["text"] == "a fox"
    assert job["prompt"]["20:3"]["inputs"]["seed"] == 3
    assert genbot(["template", "example", "sub", "-o", "s.xlsx"]) == 0  # the columns as headers
    assert genbot(["validate", "sub", "s.xlsx"]) == 0


def ranges(folder: Path, name: str) -> dict[str, tuple]:
    params = json.loads((folder / f"{name}.json").read_text())["params"]
    return {n: (p.get("min"), p.get("max")) for n, p in params.items()
            if p["type"] in ("int", "float")}


COMFY_RANGES = {"steps": (1, 10000), "cfg": (0.0, 100.0), "width": (16, 16384),
                "height": (16, 16384)}


@needs_workflows
def test_guessed_ranges_are_comfyuis_own(genbot, tmp_path):
    assert WORKFLOWS is not None
    for file, name in [("comfyui__basic_api_example.json", "basic"),
                       ("comfyui-api__sd1.5-img2img.json", "img2img"),
                       ("comfyui__sd-1.5-lora-0.json", "lora"),
                       ("comfyui__default_graph_sdxl1_0.json", "sdxl")]:
        assert genbot(["template", "import", str(WORKFLOWS / file), "--name", name]) == 0
    folder = tmp_path / "t"
    assert ranges(folder, "basic") == COMFY_RANGES
    assert ranges(folder, "img2img") == {"steps": (1, 10000), "cfg": (0.0, 100.0),
                                         "denoise": (0.0, 1.0)}
    assert ranges(folder, "lora") == {**COMFY_RANGES, "lora_strength": (-100.0, 100.0)}
    assert ranges(folder, "sdxl") == COMFY_RANGES  # KSamplerAdvanced: no denoise
    basic = load_template(folder / "basic.json").params
    assert basic["width"].help == "Image width in pixels (a multiple of 8)"
    assert load_template(folder / "img2img.json").params["denoise"].default == pytest.approx(0.87)


async def test_with_a_server_the_ranges_are_what_its_object_info_says(genbot, tmp_path, capsys):
    """The fake serves /object_info in ComfyUI's shape, with ComfyUI's limits."""
    from tests.fakes.comfyui import FakeComfy
    lora = {**TXT2IMG, "10": {"class_type": "LoraLoader", "inputs": {
        "lora_name": "add_detail.safetensors", "strength_model": 0.5, "strength_clip": 1,
        "model": ["4", 0], "clip": ["4", 1]}}}
    (tmp_path / "lora.json").write_text(json.dumps(lora))
    async with FakeComfy() as comfy:
        code = await asyncio.to_thread(genbot, ["template", "import", "lora.json", "--name", "w",
                                                "--server", comfy.url])
        assert ("GET", "/object_info") in comfy.requests
    out = capsys.readouterr().out
    assert code == 0 and f"columns of w, with the limits {comfy.url} gives:" in out
    assert ranges(tmp_path / "t", "w") == {**COMFY_RANGES, "lora_strength": (-100.0, 100.0),
                                           "lora_clip_strength": (-100.0, 100.0)}


# A server whose limits are not ComfyUI's defaults (an older or a patched one), in /object_info's
# shape: node class -> {"input": {"required": {name: [type, {min, max, step}]}}}.
NARROW = {
    "KSampler": {"input": {"required": {
        "seed": ["INT", {"default": 0, "min": 0, "max": 2**64 - 1}],
        "steps": ["INT", {"default": 20, "min": 1, "max": 150}],
        "cfg": ["FLOAT", {"default": 7.0, "min": 1.0, "max": 30.0, "step": 0.5}],
        "model": ["MODEL"]}}},
    "EmptyLatentImage": {"input": {"required": {
        "width": ["INT", {"default": 512, "min": 64, "max": 4096, "step": 64}],
        "height": ["INT", {"default": 512, "min": 64, "max": 4096, "step": 64}]}}},
    "LoraLoader": {"input": {"required": {
        "strength_model": ["FLOAT", {"default": 1.0, "min": -5.0, "max": 5.0, "step": 0.05}]}}},
}


async def serve(handler):
    """A loopback HTTP server answering GET /object_info with `handler`; (its URL, runner)."""
    from aiohttp import web
    app = web.Application()
    app.router.add_get("/object_info", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return f"http://127.0.0.1:{runner.addresses[0][1]}", runner


async def test_a_servers_own_limits_are_taken_and_a_value_past_them_refused(genbot, tmp_path):
    from aiohttp import web

    async def narrow(request):
        return web.json_response(NARROW)

    lora = {**TXT2IMG, "10": {"class_type": "LoraLoader", "inputs": {
        "lora_name": "add_detail.safetensors", "strength_model": 0.5, "strength_clip": 1,
        "model": ["4", 0], "clip": ["4", 1]}}}
    (tmp_path / "lora.json").write_text(json.dumps(lora))
    (tmp_path / "many.json").write_text(json.dumps(changed("3", steps=200)))
    url, runner = await serve(narrow)
    try:
        assert await asyncio.to_thread(genbot, ["template", "import", "lora.json", "--name", "w",
                                                "--server", url + "/"]) == 0
        assert ranges(tmp_path / "t", "w") == {
            "steps": (1, 150), "cfg": (1.0, 30.0), "width": (64, 4096), "height": (64, 4096),
            "lora_strength": (-5.0, 5.0), "lora_clip_strength": (-100.0, 100.0)}
        t = load_template(tmp_path / "t" / "w.json")
        assert t.params["width"].help == "Image width in pixels (a multiple of 64)"
        before = files(tmp_path / "t")
        line = await asyncio.to_thread(refused, genbot, "template", "import", "many.json",
                                       "--name", "w", "--force", "--server", url)
        assert "node 3 (KSampler): steps is 200, outside the 1..150 the server allows" in line
        assert files(tmp_path / "t") == before
    finally:
        await runner.cleanup()


async def test_a_server_that_cannot_say_its_limits_is_one_line_and_writes_nothing(genbot,
                                                                                  tmp_path):
    from aiohttp import web

    from tests.conftest import free_port

    async def missing(request):
        return web.Response(status=404, text="404: Not Found")

    async def html(request):
        return web.Response(text="<html>a proxy's login page</html>", content_type="text/html")

    for handler, says in [(missing, "GET /object_info answered 404 Not Found"),
                          (html, "its /object_info is not a ComfyUI answer (expected a JSON "
                                 "object of node classes)")]:
        url, runner = await serve(handler)
        try:
            line = await asyncio.to_thread(refused, genbot, "template", "import", "good.json",
                                           "--name", "w", "--server", url)
            assert line == f"genbot: cannot import with the limits of {url}: {says}"
        finally:
            await runner.cleanup()
    port = free_port()
    line = await asyncio.to_thread(refused, genbot, "template", "import", "good.json", "--name",
                                   "w", "--server", f"http://127.0.0.1:{port}")
    assert line.endswith(f"cannot connect to 127.0.0.1:{port} (Connection refused)")
    line = refused(genbot, "template", "import", "good.json", "--name", "w", "--server",
                   "gpu-a:8188")
    assert line == ("genbot: --server \"gpu-a:8188\" is not a ComfyUI server's URL (such as "
                    "http://gpu-a:8188)")
    assert not (tmp_path / "t").exists()


def test_a_column_joins_only_inputs_that_hold_its_value(genbot, tmp_path):
    """Base and refiner: the seed and an equal steps are one column each; a cfg or a
    negative prompt the refiner holds otherwise gets its own, so an empty cell leaves it."""
    refiner = {
        "14": {"class_type": "KSamplerAdvanced", "inputs": {
            "noise_seed": 5, "steps": 20, "cfg": 4.5, "model": ["4", 0], "positive": ["6", 0],
            "negative": ["11", 0], "latent_image": ["3", 0]}},
        "11": {"class_type": "CLIPTextEncode", "inputs": {"text": "ugly", "clip": ["4", 1]}}}
    (tmp_path / "two.json").write_text(json.dumps({**TXT2IMG, **refiner}))
    assert genbot(["template", "import", "two.json", "--name", "two"]) == 0
    t = load_template(tmp_path / "t" / "two.json")
    assert {n: p.uses for n, p in t.params.items()} == {
        "prompt": ("6.text",), "negative": ("7.text",), "negative_11": ("11.text",),
        "seed": ("3.seed", "14.noise_seed"), "steps": ("3.steps", "14.steps"),
        "cfg": ("3.cfg",), "cfg_14": ("14.cfg",), "width": ("5.width",),
        "height": ("5.height",), "checkpoint": ("4.ckpt_name",)}
    assert (t.params["cfg"].default, t.params["cfg_14"].default) == (7.0, 4.5)
    # A joined column takes the range both nodes allow: here the server's KSampler 1..150
    # and ComfyUI's own 1..10000 for the KSamplerAdvanced it does not describe.
    template, _ = import_workflow({**TXT2IMG, **refiner}, "two.json", "two",
                                  {"KSampler": NARROW["KSampler"]})
    steps = template["params"]["steps"]
    assert (steps["to"], steps["min"], steps["max"]) == (["3.steps", "14.steps"], 1, 150)


def test_a_workflow_saved_with_a_bom_imports_and_is_kept_byte_for_byte(genbot, tmp_path):
    data = b"\xef\xbb\xbf" + json.dumps(TXT2IMG).encode()
    (tmp_path / "bom.json").write_bytes(data)
    assert genbot(["template", "import", "bom.json", "--name", "bom"]) == 0
    assert (tmp_path / "t" / "bom.workflow.json").read_bytes() == data
    assert load_template(tmp_path / "t" / "bom.json").params["prompt"].uses == ("6.text",)
    (tmp_path / "bad.json").write_bytes(data.replace(b"a cat", b"a \xff cat"))
    line = refused(genbot, "template", "import", "bad.json", "--name", "bad")
    offset = data.index(b"a cat") + 2  # counted in the file, its BOM included
    assert line == f"genbot: bad.json: line 1: not UTF-8 text (byte 0xff at offset {offset}): " \
                   "save it as UTF-8"


def test_a_picture_column_takes_its_nodes_own_title():
    """A LoadImage someone titled ("Product photo") names its column; one left with the
    default title is `image`, as before."""
    workflow = {**TXT2IMG,
                "10": {"class_type": "LoadImage", "inputs": {"image": "a.png"},
                       "_meta": {"title": "Product photo"}},
                "11": {"class_type": "LoadImage", "inputs": {"image": "b.png"},
                       "_meta": {"title": "Load Image"}},
                "30:12": {"class_type": "LoadImage", "inputs": {"image": "c.png"},
                          "_meta": {"title": "产品图"}}}  # no header from it: by node id
    template, _ = import_workflow(workflow, "x.json", "shots")
    images = {k: v["to"] for k, v in template["params"].items() if v["type"] == "image"}
    assert images == {"product_photo": ["10.image"], "image": ["11.image"],
                      "image_30_12": ["30:12.image"]}  # (a subgraph's node id, made a name)
