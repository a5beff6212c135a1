"""Templates: every mistake named by file and JSON path; binding is structural."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from templates.binding import bind, safe_output_name
from templates.jobs import decode, encode
from templates.loader import TemplateError, load_template, load_templates
from templates.params import Problem
from tests.conftest import ROOT

BASE = {
    "name": "t",
    "description": "test",
    "params": {
        "prompt": {"type": "text", "required": True, "aliases": ["提示词"]},
        "seed": {"type": "seed"},
        "steps": {"type": "int", "min": 1, "max": 500},
        "sku": {"type": "text", "required": True},
    },
    "nodes": {
        "gen": {"op": "generate", "inputs": {"prompt": "{prompt}, studio", "model": "sd15",
                                             "seed": "$seed", "steps": "$steps"}},
        "out": {"op": "save", "inputs": {"image": "@gen"}},
    },
    "output": "{sku}/{row}.png",
}


def bound(*args, **kwargs):
    """A row bound, as the queue stores it."""
    return encode(bind(*args, **kwargs))


def write(tmp_path, data, name="t"):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data, ensure_ascii=False) if not isinstance(data, str) else data,
                    encoding="utf-8")
    return path


def broken(tmp_path, mutate) -> str:
    data = copy.deepcopy(BASE)
    mutate(data)
    with pytest.raises(TemplateError) as e:
        load_template(write(tmp_path, data))
    assert str(e.value).startswith(str(tmp_path / "t.json") + ": ")
    return str(e.value).split(": ", 1)[1]


def test_base_template_loads_and_tightens_params(tmp_path):
    t = load_template(write(tmp_path, BASE))
    assert t.order == ("gen", "out")
    assert t.params["steps"].max == 200  # generate takes at most 200 steps
    assert t.params["prompt"].uses == ("gen.prompt",)
    assert t.params["sku"].uses == ("output",)
    assert t.models == ["sd15"]


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d.update(nodez={}), 'nodez: unknown key "nodez" (did you mean "nodes"?)'),
    (lambda d: d.update(name="other"), 'name: "other" should be "t", the file\'s name'),
    (lambda d: d["nodes"]["gen"].update(op="generat"),
     'nodes.gen.op: unknown op "generat" (did you mean "generate"?)'),
    (lambda d: d["nodes"]["gen"]["inputs"].update(promt="x"),
     'nodes.gen.inputs.promt: generate has no input "promt" (did you mean "prompt"?)'),
    (lambda d: d["nodes"]["gen"]["inputs"].pop("model"), "nodes.gen.inputs: generate needs model"),
    (lambda d: d["nodes"]["gen"]["inputs"].update(steps="$stepz"),
     'nodes.gen.inputs.steps: "$stepz": no such parameter (did you mean "steps"?)'),
    (lambda d: d["nodes"]["gen"]["inputs"].update(steps="$prompt"),
     'nodes.gen.inputs.steps: "$prompt" is a text parameter; this input takes a int'),
    (lambda d: d["nodes"]["gen"]["inputs"].update(guidance="lots"),
     'nodes.gen.inputs.guidance: "lots" is not a float'),
    (lambda d: d["nodes"]["gen"]["inputs"].update(guidance=99),
     "nodes.gen.inputs.guidance: 99 is outside 0..50"),
    (lambda d: d["nodes"]["gen"]["inputs"].update(sampler="fast"),
     'nodes.gen.inputs.sampler: "fast" is not one of euler, euler_a'),
    (lambda d: d["nodes"]["gen"]["inputs"].update(init_image="photo.png"),
     'nodes.gen.inputs.init_image: "photo.png" is not an image from "$param" or "@node"'),
    (lambda d: d["nodes"]["out"]["inputs"].update(image="@gn"),
     'nodes.out.inputs.image: "@gn": no such node (did you mean "gen"?)'),
    (lambda d: d["nodes"]["out"]["inputs"].update(image="@gen.picture"),
     'nodes.out.inputs.image: "@gen.picture": generate has no output "picture"'),
    (lambda d: d["nodes"].update(pal={"op": "palette", "inputs": {"image": "@gen"}},
                                 edge={"op": "canny", "inputs": {"image": "@pal.dominant"}}),
     'nodes.edge.inputs.image: "@pal" gives a color; this input takes a image'),
    (lambda d: d["nodes"].update(a={"op": "resize", "inputs": {"image": "@b"}},
                                 b={"op": "resize", "inputs": {"image": "@a"}}),
     "nodes: a cycle: a -> b -> a"),
    (lambda d: d["nodes"].update(edges={"op": "canny", "inputs": {"image": "@gen"}}),
     "nodes.edges: its image is never saved or used (add a save node that takes it)"),
    (lambda d: d["nodes"].update(out={"op": "resize", "inputs": {"image": "@gen"}}),
     "nodes.out: its image is never saved or used"),
    (lambda d: d["params"].update(unused={"type": "text"}),
     "params.unused: is never used by a node"),
    (lambda d: d["params"]["sku"].update(aliases=["Prompt"]),
     'params.sku: column "Prompt" would also match parameter "prompt"'),
    (lambda d: d["params"]["steps"].update(type="integer"),
     'params.steps.type: "integer" is not a parameter type (did you mean "int"?)'),
    (lambda d: d["params"].update(mode={"type": "choice"}),
     "params.mode.choices: a choice parameter needs a list of strings"),
    (lambda d: d["params"]["steps"].update(default="x"),
     "params.steps.default: 'x' is not a valid int (not_whole)"),
    (lambda d: d.update(output="../{sku}.png"),
     'output: "../{sku}.png" is not a safe file name (output_parent)'),
    (lambda d: d.update(output="{sku name}.png"), "output: not a file name pattern"),
    (lambda d: d["nodes"]["gen"]["inputs"].update(negative="$ 5"),
     'nodes.gen.inputs.negative: "$ 5" is not a parameter reference ($name); '
     'write $$ for a literal $'),
    (lambda d: (d["params"].update(where={"type": "text"}),
                d["nodes"].update(wm={"op": "watermark", "inputs": {
                    "image": "@gen", "text": "x", "position": "$where"}}),
                d["nodes"]["out"]["inputs"].update(image="@wm")),
     'nodes.wm.inputs.position: "$where" must be a choice parameter'),
    (lambda d: (d["params"].update(sampler={"type": "choice", "choices": ["euler", "turbo"]}),
                d["nodes"]["gen"]["inputs"].update(sampler="$sampler")),
     'params.sampler.choices: "turbo" is not a valid value for gen.inputs.sampler'),
])
def test_each_mistake_is_named_with_its_json_path(tmp_path, mutate, expected):
    assert broken(tmp_path, mutate).startswith(expected)


def test_invalid_json_names_line_and_column(tmp_path):
    with pytest.raises(TemplateError) as e:
        load_template(write(tmp_path, '{"name": "t",\n  "nodes": {,}}'))
    assert "t.json: line 2 column" in str(e.value) and "not valid JSON" in str(e.value)


def test_a_broken_template_does_not_stop_the_others(tmp_path):
    write(tmp_path, BASE, "t")
    bad = copy.deepcopy(BASE)
    bad["name"] = "bad"
    bad["nodes"]["gen"]["op"] = "nope"
    write(tmp_path, bad, "bad")
    templates, errors = load_templates(tmp_path)
    assert list(templates) == ["t"]
    assert len(errors) == 1 and errors[0].file.endswith("bad.json") \
        and errors[0].path == "nodes.gen.op"


def test_every_shipped_template_loads():
    templates, errors = load_templates(ROOT / "templates" / "shipped")
    assert errors == []
    assert set(templates) == {"product_main", "material_swap", "social_thumb", "poster_zh",
                              "edit_instruction"}
    assert templates["product_main"].models == ["sdxl", "canny_sdxl"]
    assert templates["social_thumb"].models == []  # needs no model


def test_binding_fills_defaults_draws_seeds_and_resolves_names(tmp_path):
    t = load_template(write(tmp_path, BASE))
    w = bound(t, {"prompt": "a cat", "seed": None, "steps": None, "sku": "A1"}, row=7,
             extras={"note": "x"})
    gen, out = w["nodes"]
    assert gen["inputs"]["prompt"] == "a cat, studio"
    assert 0 <= gen["inputs"]["seed"] <= 2**32 - 1 and w["params"]["seed"] == gen["inputs"]["seed"]
    assert gen["inputs"]["negative"] == "" and gen["inputs"]["strength"] == 0.75  # op defaults
    assert gen["inputs"]["steps"] is None  # the model's own, decided when it runs
    assert out["inputs"] == {"image": {"@": "gen.image"}, "name": "A1/7.png", "format": "png"}
    assert w["outputs"] == {"out": "A1/7.png"}
    assert decode(w).affinity == "sd15"
    again = bound(t, {"prompt": "a cat", "seed": 5, "steps": 30, "sku": "A1"}, row=7)
    assert again["nodes"][0]["inputs"]["seed"] == 5 and again["params"]["seed"] == 5


def test_blank_lora_is_dropped_and_blank_param_falls_back_on_the_input_default():
    templates, _ = load_templates(ROOT / "templates" / "shipped")
    t = templates["material_swap"]
    w = bound(t, {"sku": "C", "product_image": "inputs/x.png", "material": "walnut",
                 "lora_weight": 0.8, "prompt": "studio", "strength": 0.6, "seed": 1,
                 "steps": None}, row=2)
    assert w["nodes"][1]["inputs"]["loras"] == [{"name": "walnut", "weight": 0.8}]
    assert w["nodes"][1]["inputs"]["init_image"] == "inputs/x.png"


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300)


@settings(max_examples=200, deadline=None)
@given(prompt=TEXT, sku=TEXT.filter(lambda s: s and "/" not in s))
def test_any_text_survives_bind_store_load_unchanged(prompt, sku):
    t = load_template(ROOT / "templates" / "shipped" / "product_main.json")
    values = {"sku": "ok", "product_image": "inputs/x.png", "prompt": prompt,
              "negative": sku, "seed": 3, "steps": None, "guidance": None, "size": None,
              "control_scale": 0.8, "upscale": 2.0}
    w = bound(t, values, row=2)
    stored = json.dumps(w, ensure_ascii=False)  # what the queue writes
    loaded = json.loads(stored)
    assert loaded == w
    gen = loaded["nodes"][1]["inputs"]
    assert gen["prompt"] == f"{prompt}, professional product photography, high detail"
    assert gen["negative"] == sku
    assert loaded["params"]["prompt"] == prompt


@pytest.mark.parametrize("name, code", [
    ("../x.png", "output_parent"), ("a/../../x.png", "output_parent"),
    ("/etc/passwd", "output_absolute"), ("\\\\server\\share", "output_absolute"),
    ("C:\\x.png", "output_drive"), ("c:x", "output_drive"),
    ("a\x00b.png", "output_control"), ("CON.png", "output_reserved"), ("x/aux", "output_reserved"),
    ("LPT1.txt", "output_reserved"), ("a//b.png", "output_empty_part"),
    ("a/./b.png", "output_empty_part"), ("dir./x.png", "output_trailing"),
    ("ab:c.png", "output_bad_char"), ("a?b", "output_bad_char"), ("x" * 300, "output_too_long"),
])
def test_output_names_stay_inside_the_batch_folder(name, code):
    with pytest.raises(Problem) as e:
        safe_output_name(name, "png")
    assert e.value.code == code


def test_safe_output_names_pass_and_get_their_extension():
    assert safe_output_name("A1/7.png", "png") == "A1/7.png"
    assert safe_output_name("A1\\7", "png") == "A1/7.png"
    assert safe_output_name("商品/主图 1", "jpg") == "商品/主图 1.jpg"
    assert safe_output_name("x.jpeg", "jpg") == "x.jpeg"


def test_output_pattern_with_traversal_from_a_cell_is_refused_at_bind(tmp_path):
    t = load_template(write(tmp_path, BASE))
    with pytest.raises(Problem) as e:
        bound(t, {"prompt": "x", "seed": 1, "steps": None, "sku": ".."}, row=2)
    assert e.value.code == "output_parent" and e.value.details["name"] == "../2.png"


def test_docs_list_every_op_as_the_signatures_declare_them():
    from templates.signatures import markdown_table
    assert markdown_table() in (ROOT / "docs" / "templates.md").read_text(encoding="utf-8")
