"""ComfyUI workflows as people share them: the UI format converted with a server's
/object_info (the fake ComfyUI's, in ComfyUI's shape), and images that carry a workflow."""

from __future__ import annotations

import asyncio
import copy
import io
import json
from importlib.util import find_spec
from pathlib import Path

import pytest
from PIL import Image

from templates.comfy import WorkflowError, read_workflow
from templates.comfy_ui import VIRTUAL, from_image, is_ui_format, read_shared, to_api
from tests.fakes.comfyui import node_classes
from tests.fakes.workflows import TXT2IMG, WORKFLOWS, saved_png

needs_workflows = pytest.mark.skipif(WORKFLOWS is None, reason="no ../shared/comfyui-workflows")
UI_DEFAULT = "ui-format__comfyui-frontend-default.json"


def object_info(checkpoints=("v1-5-pruned-emaonly-fp16.safetensors",)) -> dict:
    """/object_info as the fake ComfyUI answers it (its node classes, ComfyUI's inputs)."""
    classes = node_classes(list(checkpoints), ["add_detail.safetensors"], [], ["example.png"])
    return {name: {"input": c["input"], "input_order": {k: list(v) for k, v in c["input"].items()},
                   "display_name": c["display_name"]} for name, c in classes.items()}


def default_ui() -> dict:
    assert WORKFLOWS is not None
    return json.loads((WORKFLOWS / UI_DEFAULT).read_text())


def links_of(prompt: dict) -> set[tuple[str, str, str, int]]:
    return {(nid, name, value[0], value[1]) for nid, node in prompt.items()
            for name, value in node["inputs"].items() if isinstance(value, list)}


@needs_workflows
def test_the_frontends_default_graph_is_comfyuis_default_prompt():
    """The frontend's default graph, saved in the UI format, and ComfyUI's own default
    prompt in the API format are one graph: the same nodes, links and inputs; the values
    are the UI file's."""
    assert WORKFLOWS is not None
    prompt = to_api(default_ui(), object_info(), UI_DEFAULT)
    reference = json.loads((WORKFLOWS / "comfyui__basic_api_example.json").read_text())
    assert {k: n["class_type"] for k, n in prompt.items()} == \
        {k: n["class_type"] for k, n in reference.items()}
    assert links_of(prompt) == links_of(reference)
    assert {k: sorted(n["inputs"]) for k, n in prompt.items()} == \
        {k: sorted(n["inputs"]) for k, n in reference.items()}
    sampler = prompt["3"]["inputs"]
    assert (sampler["seed"], sampler["steps"], sampler["cfg"], sampler["sampler_name"],
            sampler["scheduler"], sampler["denoise"]) == \
        (156680208700286, 20, 8, "euler", "normal", 1)  # the seed's "randomize" skipped
    assert prompt["5"]["inputs"] == {"width": 512, "height": 512, "batch_size": 1}
    assert prompt["9"]["inputs"]["filename_prefix"] == "ComfyUI"  # never set: its default
    assert prompt["4"]["_meta"]["title"] == "Load Checkpoint"
    read_workflow(prompt, "converted")  # a workflow genbot runs


def graph_with_extras() -> dict:
    """The default graph, plus what people's graphs have: a Reroute on the VAE, a
    PrimitiveNode driving the seed, a bypassed LoRA between checkpoint and sampler, a
    muted second SaveImage, a Note, and a title."""
    ui = copy.deepcopy(default_ui())
    nodes = {n["id"]: n for n in ui["nodes"]}
    links = ui["links"]
    # Reroute 20 on link 8 (checkpoint VAE -> VAEDecode.vae)
    links[:] = [x for x in links if x[0] != 8]
    links += [[30, 4, 2, 20, 0, "VAE"], [31, 20, 0, 8, 1, "VAE"]]
    nodes[8]["inputs"][1]["link"] = 31
    ui["nodes"].append({"id": 20, "type": "Reroute", "mode": 0,
                        "inputs": [{"name": "", "type": "*", "link": 30}],
                        "outputs": [{"name": "", "type": "VAE", "links": [31]}]})
    # PrimitiveNode 21 -> KSampler.seed (a widget turned into an input)
    nodes[3]["inputs"].append({"name": "seed", "type": "INT", "link": 32,
                               "widget": {"name": "seed"}})
    links.append([32, 21, 0, 3, 4, "INT"])
    ui["nodes"].append({"id": 21, "type": "PrimitiveNode", "mode": 0, "outputs": [
        {"name": "INT", "type": "INT", "links": [32], "widget": {"name": "seed"}}],
        "widgets_values": [424242, "fixed"]})
    # a bypassed LoraLoader 22 between the checkpoint's MODEL and the sampler
    links[:] = [x for x in links if x[0] != 1]
    links += [[33, 4, 0, 22, 0, "MODEL"], [34, 4, 1, 22, 1, "CLIP"],
              [35, 22, 0, 3, 0, "MODEL"]]
    nodes[3]["inputs"][0]["link"] = 35
    ui["nodes"].append({"id": 22, "type": "LoraLoader", "mode": 4, "inputs": [
        {"name": "model", "type": "MODEL", "link": 33}, {"name": "clip", "type": "CLIP",
                                                          "link": 34}],
        "outputs": [{"name": "MODEL", "type": "MODEL", "links": [35]},
                    {"name": "CLIP", "type": "CLIP", "links": []}],
        "widgets_values": ["add_detail.safetensors", 1, 1]})
    # a muted SaveImage 23, a Note 24, and a title on the positive prompt
    links.append([36, 8, 0, 23, 0, "IMAGE"])
    ui["nodes"].append({"id": 23, "type": "SaveImage", "mode": 2, "inputs": [
        {"name": "images", "type": "IMAGE", "link": 36}], "widgets_values": ["muted"]})
    ui["nodes"].append({"id": 24, "type": "Note", "mode": 0, "widgets_values": ["hi"]})
    nodes[6]["title"] = "Positive"
    return ui


@needs_workflows
def test_reroutes_primitives_bypassed_and_muted_nodes_resolve_as_the_frontend_does():
    prompt = to_api(graph_with_extras(), object_info(), "extras.json")
    assert set(prompt) == {"3", "4", "5", "6", "7", "8", "9"}  # no reroute, primitive,
    assert prompt["8"]["inputs"]["vae"] == ["4", 2]  # bypassed, muted node or note
    assert prompt["3"]["inputs"]["seed"] == 424242  # the primitive's value, as a literal
    assert prompt["3"]["inputs"]["model"] == ["4", 0]  # through the bypassed LoRA
    assert prompt["6"]["_meta"]["title"] == "Positive"


@needs_workflows
def test_a_node_the_server_lacks_or_values_it_cannot_place_are_said():
    ui = default_ui()
    ui["nodes"][0]["type"] = "IPAdapterAdvanced"
    with pytest.raises(WorkflowError, match=r"node 7 \(IPAdapterAdvanced\): this ComfyUI "
                                            r"server has no such node class"):
        to_api(ui, object_info(), "x.json")
    ui = default_ui()
    ui["nodes"][0]["type"] = "workflow>prompts"
    with pytest.raises(WorkflowError, match="group node of the old frontend.*subgraph"):
        to_api(ui, object_info(), "x.json")
    ui = default_ui()  # saved before the node had its later widgets: their defaults
    sampler = next(n for n in ui["nodes"] if n["type"] == "KSampler")
    sampler["widgets_values"] = sampler["widgets_values"][:3]
    assert to_api(ui, object_info(), "x.json")["3"]["inputs"]["cfg"] == 8.0
    text = next(n for n in ui["nodes"] if n["type"] == "CLIPTextEncode")
    text["widgets_values"] = []  # a text has no default to fall back on
    with pytest.raises(WorkflowError, match="no value for its input text"):
        to_api(ui, object_info(), "x.json")



@needs_workflows
def test_a_picture_comfyui_saved_carries_its_workflow():
    ui = json.dumps(default_ui())
    both = saved_png(prompt=json.dumps(TXT2IMG), workflow=ui)
    assert from_image(both, "a.png") == ("api", TXT2IMG)  # what ran, first
    kind, found = from_image(saved_png(workflow=ui), "b.png")
    assert kind == "ui" and is_ui_format(found)
    webp = io.BytesIO()  # SaveAnimatedWEBP: "prompt:{…}" in EXIF 0x0110
    image = Image.new("RGB", (8, 8), "blue")
    exif = image.getexif()
    exif[0x0110] = "prompt:" + json.dumps(TXT2IMG)
    exif[0x010F] = "workflow:" + ui
    image.save(webp, "WEBP", exif=exif)
    assert from_image(webp.getvalue(), "c.webp") == ("api", TXT2IMG)
    with pytest.raises(WorkflowError, match="carries no ComfyUI workflow"):
        from_image(saved_png(), "plain.png")
    with pytest.raises(WorkflowError, match="not a picture"):
        from_image(b"\x89PNG\r\n\x1a\nbroken", "broken.png")


@needs_workflows
def test_read_shared_asks_a_server_only_for_the_ui_format(tmp_path):
    asked = []

    def info():
        asked.append(1)
        return object_info()

    (tmp_path / "api.json").write_text(json.dumps(TXT2IMG))
    raw, prompt, how = read_shared(tmp_path / "api.json", info)
    assert prompt == TXT2IMG and how == "the API format" and not asked
    assert raw == (tmp_path / "api.json").read_bytes()  # kept byte for byte
    (tmp_path / "ui.png").write_bytes(saved_png(workflow=json.dumps(default_ui())))
    raw, prompt, how = read_shared(tmp_path / "ui.png", info)
    assert asked == [1] and json.loads(raw) == prompt and "UI-format" in how
    with pytest.raises(WorkflowError, match="UI format.*--server.*\\[comfyui\\] servers.*"
                                            "Export \\(API\\)"):
        read_shared(WORKFLOWS / UI_DEFAULT, lambda: None)  # type: ignore[operator]


@needs_workflows
async def test_genbot_template_import_converts_with_the_first_configured_server(
        tmp_path, monkeypatch, capsys):
    """No --server: the first of [comfyui] servers converts it; the template it writes
    loads, with its checkpoint column offering the server's files."""
    from bot.cli.genbot import main
    from templates.loader import load_templates
    from tests.fakes.comfyui import FakeComfy
    assert WORKFLOWS is not None
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GENBOT_CONFIG", raising=False)
    (tmp_path / "shared.png").write_bytes(saved_png(workflow=json.dumps(default_ui())))
    async with FakeComfy() as comfy:
        (tmp_path / "config.toml").write_text(
            f'[templates]\ndir = "t"\n[comfyui]\nservers = ["{comfy.url}"]\n')
        code = await asyncio.to_thread(main, ["template", "import", "shared.png", "--name",
                                              "shared"])
        assert ("GET", "/object_info") in comfy.requests
    out = capsys.readouterr().out
    assert code == 0 and "from the UI-format workflow in the picture" in out
    templates, broken = load_templates(tmp_path / "t")
    assert not broken and templates["shared"].comfy is not None
    checkpoint = templates["shared"].params["checkpoint"]
    assert checkpoint.choices == tuple(comfy.checkpoints) or \
        list(checkpoint.choices) == comfy.checkpoints


def official_corpus() -> Path | None:
    """The workflows ComfyUI ships (the comfyui-workflow-templates-json package)."""
    spec = find_spec("comfyui_workflow_templates_json")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "templates"


@pytest.mark.skipif(official_corpus() is None, reason="comfyui-workflow-templates-json is not "
                                                      "installed")
def test_the_official_corpus_converts_where_its_nodes_are_known(capsys):
    """Every UI-format workflow of ComfyUI's own template corpus, subgraphs unpacked:
    those whose nodes the server knows (here the fake's core nodes) convert to a workflow
    genbot runs, every link to a node of the prompt; the rest are counted."""
    folder = official_corpus()
    assert folder is not None
    info, counts, converted = object_info(), {"with subgraphs": 0, "other nodes": 0}, []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not is_ui_format(data):
            continue  # an index, a schema
        graphs = (data.get("definitions") or {}).get("subgraphs") or []
        kinds = {n.get("type") for g in [data, *graphs] for n in g.get("nodes") or []}
        if kinds - {g["id"] for g in graphs} - set(VIRTUAL) - set(info):
            counts["other nodes"] += 1
            continue
        counts["with subgraphs"] += bool(graphs)
        prompt = read_workflow(to_api(data, info, path.name), path.name)
        assert all(link[0] in prompt for _, _, *link in [(n, k, *v) for n, node in
                   prompt.items() for k, v in node["inputs"].items() if isinstance(v, list)])
        converted.append(path.name)
    with capsys.disabled():
        print(f"\nofficial corpus: {len(converted)} converted ({', '.join(converted)}), "
              f"{counts['with subgraphs']} of them with subgraphs; left: "
              f"{counts['other nodes']} with nodes the fake server lacks")
    assert len(converted) >= 3


@needs_workflows
def test_with_object_info_the_columns_offer_what_the_server_has():
    """Converted and imported with the server's /object_info: the sampler and scheduler
    are choices of the server's lists, the checkpoint one of its files, numbers in its
    ranges; every column defaults to what the workflow holds."""
    from templates.comfy import import_workflow
    from tests.fakes.comfyui import SAMPLERS, SCHEDULERS
    info = object_info(checkpoints=("v1-5-pruned-emaonly-fp16.safetensors", "dream.safetensors"))
    template, said = import_workflow(to_api(default_ui(), info, UI_DEFAULT), UI_DEFAULT, "d",
                                     info)
    params = template["params"]
    assert params["sampler"] == {"type": "choice", "choices": list(SAMPLERS),
                                 "default": "euler", "help": "Sampling method",
                                 "to": ["3.sampler_name"]}
    assert params["scheduler"]["choices"] == list(SCHEDULERS)
    assert params["checkpoint"]["choices"] == ["v1-5-pruned-emaonly-fp16.safetensors",
                                               "dream.safetensors"]
    assert params["checkpoint"]["default"] == "v1-5-pruned-emaonly-fp16.safetensors"
    assert "sampler (choice) → 3.sampler_name [KSampler]" in said



def subgraph_workflow() -> dict:
    """The default graph with its sampler and empty latent moved into a subgraph, as the
    newer frontend saves one: the instance node 10 of type "sg-1", fed the model and both
    prompts, promoting the sampler's steps as its own widget (12); inside, links from the
    subgraph's input node (-10) and to its output node (-20), in the object form."""
    ui = default_ui()
    nodes = {n["id"]: n for n in ui["nodes"]}
    sampler, latent = nodes.pop(3), nodes.pop(5)
    sampler = {**sampler, "inputs": [
        {"name": "model", "type": "MODEL", "link": 201},
        {"name": "positive", "type": "CONDITIONING", "link": 202},
        {"name": "negative", "type": "CONDITIONING", "link": 203},
        {"name": "latent_image", "type": "LATENT", "link": 204},
        {"name": "steps", "type": "INT", "widget": {"name": "steps"}, "link": 205}]}
    nodes[10] = {"id": 10, "type": "sg-1", "mode": 0, "inputs": [
        {"name": "model", "type": "MODEL", "link": 101},
        {"name": "positive", "type": "CONDITIONING", "link": 102},
        {"name": "negative", "type": "CONDITIONING", "link": 103},
        {"name": "steps", "type": "INT", "widget": {"name": "steps"}, "link": None}],
        "outputs": [{"name": "LATENT", "type": "LATENT", "links": [104]}],
        "widgets_values": [12]}
    nodes[8]["inputs"][0]["link"] = 104
    ui["nodes"] = list(nodes.values())
    ui["links"] = [x for x in ui["links"] if x[0] in (3, 5, 8, 9)] + [
        [101, 4, 0, 10, 0, "MODEL"], [102, 6, 0, 10, 1, "CONDITIONING"],
        [103, 7, 0, 10, 2, "CONDITIONING"], [104, 10, 0, 8, 0, "LATENT"]]

    def link(i, a, a_slot, b, b_slot, kind):
        return {"id": i, "origin_id": a, "origin_slot": a_slot, "target_id": b,
                "target_slot": b_slot, "type": kind}
    ui["definitions"] = {"subgraphs": [{
        "id": "sg-1", "name": "sampling", "nodes": [sampler, latent],
        "inputs": [{"name": n, "type": t, "linkIds": []} for n, t in (
            ("model", "MODEL"), ("positive", "CONDITIONING"), ("negative", "CONDITIONING"),
            ("steps", "INT"))],
        "outputs": [{"name": "LATENT", "linkIds": [206]}],
        "links": [link(201, -10, 0, 3, 0, "MODEL"), link(202, -10, 1, 3, 1, "CONDITIONING"),
                  link(203, -10, 2, 3, 2, "CONDITIONING"), link(204, 5, 0, 3, 3, "LATENT"),
                  link(205, -10, 3, 3, 4, "INT"), link(206, 3, 0, -20, 0, "LATENT")]}]}
    return ui


@needs_workflows
def test_a_subgraph_unpacks_into_instance_prefixed_nodes_as_comfyui_runs_it():
    prompt = to_api(subgraph_workflow(), object_info(), "sub.json")
    assert set(prompt) == {"4", "6", "7", "8", "9", "10:3", "10:5"}
    sampler = prompt["10:3"]["inputs"]
    assert (sampler["model"], sampler["positive"], sampler["negative"],
            sampler["latent_image"]) == (["4", 0], ["6", 0], ["7", 0], ["10:5", 0])
    assert sampler["steps"] == 12  # the instance's promoted widget, not the inner 20
    assert sampler["seed"] == 156680208700286  # the inner widgets, as saved inside
    assert prompt["8"]["inputs"]["samples"] == ["10:3", 0]  # out through the output node
    read_workflow(prompt, "sub.json")
    saved = subgraph_workflow()  # saved without the instance's values (another frontend):
    next(n for n in saved["nodes"] if n["id"] == 10)["widgets_values"] = []
    assert to_api(saved, object_info(), "sub.json")["10:3"]["inputs"]["steps"] == 20  # inner
    # the same graph, flat, differs only by the node ids and the promoted steps
    flat = to_api(default_ui(), object_info(), UI_DEFAULT)
    assert {k: v for k, v in sampler.items() if k not in ("latent_image", "steps")} == \
        {k: v for k, v in flat["3"]["inputs"].items() if k not in ("latent_image", "steps")}


class AnyNode(dict):
    """An /object_info that knows every node class and gives none of them widgets: the
    graph's structure alone (links, subgraphs, reroutes, bypasses) is converted."""

    def get(self, key, default=None):
        return {"input": {}, "display_name": key}


@pytest.mark.skipif(official_corpus() is None, reason="comfyui-workflow-templates-json is not "
                                                      "installed")
def test_every_subgraph_of_the_official_corpus_unpacks_with_every_link_resolved(capsys):
    """ComfyUI's own workflows that use subgraphs (nested ones, bypassed and muted ones
    among them): unpacked, every input linked to another node names a node of the prompt."""
    folder = official_corpus()
    assert folder is not None
    unpacked = 0
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not is_ui_format(data) or not (data.get("definitions") or {}).get("subgraphs"):
            continue
        prompt = to_api(data, AnyNode(), path.name)
        dangling = [(nid, key, value) for nid, node in prompt.items()
                    for key, value in node["inputs"].items()
                    if isinstance(value, list) and len(value) == 2
                    and isinstance(value[0], str) and value[0] not in prompt]
        assert not dangling, (path.name, dangling[:3])
        assert any(":" in nid for nid in prompt), path.name  # its inner nodes, by path
        unpacked += 1
    with capsys.disabled():
        print(f"\nofficial corpus: {unpacked} workflows with subgraphs unpacked, every link "
              "resolved")
    assert unpacked >= 200


# --- FLUX, Qwen-Image, Z-Image: ComfyUI's own workflows for them, imported -----------------

needs_corpus = pytest.mark.skipif(official_corpus() is None,
                                  reason="comfyui-workflow-templates-json is not installed")


def official(file: str, info: dict | None = None) -> dict:
    """ComfyUI's own workflow `file`, converted with the fake server's /object_info."""
    folder = official_corpus()
    assert folder is not None
    data = json.loads((folder / file).read_text(encoding="utf-8"))
    return to_api(data, object_info() if info is None else info, file)


def imported(tmp_path: Path, file: str) -> dict[str, tuple]:
    """ComfyUI's own workflow `file` imported with the fake server's /object_info, the
    template written and loaded as genbot loads it: each column as (type, default, what it
    sets as "Class.input [title]"); a choice of the server's offers its whole list."""
    from templates.comfy import import_workflow, object_info_choices
    from templates.loader import load_template
    info = object_info()
    prompt = official(file, info)
    template, said = import_workflow(prompt, file, "official", info)
    (tmp_path / "official.workflow.json").write_text(json.dumps(prompt))
    (tmp_path / "official.json").write_text(json.dumps(template))
    assert list(load_template(tmp_path / "official.json").params) == list(template["params"])
    assert len(said) == len(template["params"])
    found = {}
    for column, spec in template["params"].items():
        sets = [to.rpartition(".") for to in spec["to"]]
        if spec["type"] == "choice":
            node, _, key = sets[0]
            assert spec["choices"] == object_info_choices(info, prompt[node]["class_type"], key)
        found[column] = (spec["type"], spec.get("default"), [
            f"{prompt[node]['class_type']}.{key} [{prompt[node]['_meta']['title']}]"
            for node, _, key in sets])
    return found


KSAMPLER = {"seed": ("seed", None, ["KSampler.seed [KSampler]"]),
            "sampler": ("choice", "euler", ["KSampler.sampler_name [KSampler]"]),
            "scheduler": ("choice", "simple", ["KSampler.scheduler [KSampler]"])}
MODEL = "UNETLoader.unet_name [Load Diffusion Model]"


@needs_corpus
def test_flux1_dev_text_to_image_gives_prompt_seed_steps_size_and_its_model(tmp_path):
    """FLUX.1 dev as ComfyUI ships it: a KSampler at cfg 1 whose negative is a zeroed
    conditioning (no negative column: FLUX reads none), the diffusion model a choice."""
    assert imported(tmp_path, "flux_dev_full_text_to_image.json") == {
        "prompt": ("text", None, ["CLIPTextEncode.text [CLIP Text Encode (Prompt)]"]),
        **KSAMPLER,
        "steps": ("int", 20, ["KSampler.steps [KSampler]"]),
        "cfg": ("float", 1, ["KSampler.cfg [KSampler]"]),
        "width": ("int", 1024, ["EmptySD3LatentImage.width [EmptySD3LatentImage]"]),
        "height": ("int", 1024, ["EmptySD3LatentImage.height [EmptySD3LatentImage]"]),
        "model": ("choice", "flux1-dev.safetensors", [MODEL])}


@needs_corpus
def test_flux1_with_the_custom_sampler_gives_the_noise_seed_scheduler_steps_and_guidance(
        tmp_path):
    """FLUX.1 dev Redux, ComfyUI's custom sampler: the seed is RandomNoise's, steps and
    schedule BasicScheduler's, the method KSamplerSelect's (a newer node's choice, listed
    as ["COMBO", {"options": …}]), the guidance FluxGuidance's on the prompt's way through
    two Apply Style Model; one width and height set the latent and the model's shift, as
    the workflow's primitives did; each reference picture a column."""
    assert imported(tmp_path, "flux_redux_model_example.json") == {
        "prompt": ("text", None, ["CLIPTextEncode.text [CLIP Text Encode (Positive Prompt)]"]),
        "seed": ("seed", None, ["RandomNoise.noise_seed [RandomNoise]"]),
        "sampler": ("choice", "euler", ["KSamplerSelect.sampler_name [KSamplerSelect]"]),
        "steps": ("int", 20, ["BasicScheduler.steps [BasicScheduler]"]),
        "scheduler": ("choice", "simple", ["BasicScheduler.scheduler [BasicScheduler]"]),
        "guidance": ("float", 3.5, ["FluxGuidance.guidance [FluxGuidance]"]),
        "width": ("int", 1024, ["EmptySD3LatentImage.width [EmptySD3LatentImage]",
                                "ModelSamplingFlux.width [ModelSamplingFlux]"]),
        "height": ("int", 1024, ["EmptySD3LatentImage.height [EmptySD3LatentImage]",
                                 "ModelSamplingFlux.height [ModelSamplingFlux]"]),
        "model": ("choice", "flux1-dev.safetensors", [MODEL]),
        "image": ("image", None, ["LoadImage.image [Load Image]"]),
        "image_47": ("image", None, ["LoadImage.image [Load Image]"])}


@needs_corpus
def test_flux1_kontext_gives_the_instruction_its_guidance_and_the_input_picture(tmp_path):
    """FLUX.1 Kontext: the prompt found through FluxGuidance and ReferenceLatent, the
    distilled guidance a column beside the KSampler's cfg, the picture to edit the
    LoadImage that runs (its bypassed twin none); no size: the latent is the picture's."""
    assert imported(tmp_path, "flux_kontext_dev_basic.json") == {
        "prompt": ("text", None, ["CLIPTextEncode.text [CLIP Text Encode (Positive Prompt)]"]),
        **KSAMPLER,
        "steps": ("int", 20, ["KSampler.steps [KSampler]"]),
        "cfg": ("float", 1, ["KSampler.cfg [KSampler]"]),
        "guidance": ("float", 2.5, ["FluxGuidance.guidance [FluxGuidance]"]),
        "image": ("image", None, ["LoadImage.image [Load Image]"]),
        "model": ("choice", "flux1-dev-kontext_fp8_scaled.safetensors", [MODEL])}


@needs_corpus
def test_flux2_gives_the_custom_samplers_columns_through_switches_and_primitives(tmp_path):
    """FLUX.2 dev and Klein: steps from the PrimitiveInt the "Turbo LoRA" switch passes on
    (the LoRA off: no column of it), one width and height for the latent and Flux2Scheduler;
    Klein's prompt is its top-level String primitive, fed into the subgraph by name (the
    instance saves only that input: by place it would feed the Width primitive)."""
    assert imported(tmp_path, "image_flux2_text_to_image.json") == {
        "prompt": ("text", None, ["CLIPTextEncode.text [CLIP Text Encode (Positive Prompt)]"]),
        "seed": ("seed", None, ["RandomNoise.noise_seed [RandomNoise]"]),
        "sampler": ("choice", "euler", ["KSamplerSelect.sampler_name [KSamplerSelect]"]),
        "steps": ("int", 20, ["PrimitiveInt.value [Steps]"]),
        "guidance": ("float", 4, ["FluxGuidance.guidance [FluxGuidance]"]),
        "width": ("int", 1024, ["EmptyFlux2LatentImage.width [Empty Flux 2 Latent]",
                                "Flux2Scheduler.width [Flux2Scheduler]"]),
        "height": ("int", 1024, ["EmptyFlux2LatentImage.height [Empty Flux 2 Latent]",
                                 "Flux2Scheduler.height [Flux2Scheduler]"]),
        "model": ("choice", "flux2_dev_fp8mixed.safetensors", [MODEL])}
    prompt = official("image_flux2_klein_text_to_image.json")
    (positive,) = [n for n in prompt.values() if n["_meta"]["title"].endswith("(Positive Prompt)")]
    assert prompt[positive["inputs"]["text"][0]]["_meta"]["title"] == "Prompt"
    assert {n["_meta"]["title"]: n["inputs"]["value"] for n in prompt.values()
            if n["class_type"] == "PrimitiveInt"} == {"Width": 1024, "Height": 1024}
    klein = imported(tmp_path, "image_flux2_klein_text_to_image.json")
    assert (klein["prompt"], klein["negative"], klein["cfg"], klein["width"]) == (
        ("text", None, ["PrimitiveStringMultiline.value [Prompt]"]),
        ("text", "", ["CLIPTextEncode.text [CLIP Text Encode (Negative Prompt)]"]),
        ("float", 5, ["CFGGuider.cfg [CFGGuider]"]), ("int", 1024, ["PrimitiveInt.value [Width]"]))


@needs_corpus
def test_qwen_image_gives_steps_and_cfg_from_the_primitives_its_switches_take(tmp_path):
    """Qwen-Image: its KSampler's steps and cfg come through switches ("Enable Lightning
    LoRA", off) from primitives: the columns set the ones that run (20 steps, cfg 4), not
    the 8-step Lightning ones; the switched-off LoRA is no column."""
    assert imported(tmp_path, "image_qwen_image.json") == {
        "prompt": ("text", None, ["CLIPTextEncode.text [CLIP Text Encode (Positive Prompt)]"]),
        "negative": ("text", "", ["CLIPTextEncode.text [CLIP Text Encode (Negative Prompt)]"]),
        **KSAMPLER,
        "steps": ("int", 20, ["PrimitiveInt.value [Steps]"]),
        "cfg": ("float", 4, ["PrimitiveFloat.value [CFG]"]),
        "width": ("int", 1328, ["EmptySD3LatentImage.width [EmptySD3LatentImage]"]),
        "height": ("int", 1328, ["EmptySD3LatentImage.height [EmptySD3LatentImage]"]),
        "model": ("choice", "qwen_image_fp8_e4m3fn.safetensors", [MODEL])}


@needs_corpus
def test_qwen_image_edit_gives_the_instruction_and_the_pictures(tmp_path):
    """Qwen-Image-Edit: the instruction is TextEncodeQwenImageEdit's prompt (its empty
    negative one the negative); 2511's TextEncodeQwenImageEditPlus takes two pictures,
    each a column."""
    edit = "TextEncodeQwenImageEdit.prompt [Text Encode Qwen Image Edit]"
    assert imported(tmp_path, "image_qwen_image_edit.json") == {
        "prompt": ("text", None, [edit]), "negative": ("text", "", [edit]), **KSAMPLER,
        "steps": ("int", 20, ["PrimitiveInt.value [Steps]"]),
        "cfg": ("float", 2.5, ["PrimitiveFloat.value [CFG]"]),
        "image": ("image", None, ["LoadImage.image [Load Image]"]),
        "model": ("choice", "qwen_image_edit_fp8_e4m3fn.safetensors", [MODEL])}
    plus = "TextEncodeQwenImageEditPlus.prompt"
    assert imported(tmp_path, "image_qwen_image_edit_2511.json") == {
        "prompt": ("text", None, [f"{plus} [TextEncodeQwenImageEditPlus (Positive)]"]),
        "negative": ("text", "", [f"{plus} [Text Encode Qwen Image Edit Plus]"]), **KSAMPLER,
        "steps": ("int", 40, ["PrimitiveInt.value [Steps]"]),
        "cfg": ("float", 4, ["PrimitiveFloat.value [CFG]"]),
        "image": ("image", None, ["LoadImage.image [Load Image]"]),
        "image_83": ("image", None, ["LoadImage.image [Load Image]"]),
        "model": ("choice", "qwen_image_edit_2511_fp8mixed.safetensors", [MODEL])}


@needs_corpus
def test_z_image_turbo_gives_prompt_seed_steps_size_and_its_model(tmp_path):
    assert imported(tmp_path, "image_z_image_turbo.json") == {
        "prompt": ("text", None, ["CLIPTextEncode.text [CLIP Text Encode (Prompt)]"]),
        **KSAMPLER, "sampler": ("choice", "res_multistep", ["KSampler.sampler_name [KSampler]"]),
        "steps": ("int", 8, ["KSampler.steps [KSampler]"]),
        "cfg": ("float", 1, ["KSampler.cfg [KSampler]"]),
        "width": ("int", 1024, ["EmptySD3LatentImage.width [EmptySD3LatentImage]"]),
        "height": ("int", 1024, ["EmptySD3LatentImage.height [EmptySD3LatentImage]"]),
        "model": ("choice", "z_image_turbo_bf16.safetensors", [MODEL])}


@needs_corpus
def test_a_flux_workflow_on_a_server_without_its_nodes_is_refused_naming_the_node():
    """A server without FluxGuidance (an older ComfyUI): Kontext is refused, naming the
    node inside its subgraph; a newer node's choice never set takes its first option."""
    from templates.comfy_ui import widget_default
    info = {k: v for k, v in object_info().items() if k != "FluxGuidance"}
    with pytest.raises(WorkflowError, match=r"flux_kontext_dev_basic.json: node 192:35 "
                                            r"\(FluxGuidance\): this ComfyUI server has no "
                                            r"such node class"):
        official("flux_kontext_dev_basic.json", info)
    assert widget_default(object_info()["ImageScaleToTotalPixels"], "upscale_method") == \
        "nearest-exact"


@needs_corpus
async def test_genbot_template_import_of_qwen_image_edit_asks_the_server_and_loads(
        tmp_path, monkeypatch, capsys):
    """`genbot template import` of the official Qwen-Image-Edit workflow with --server: the
    fake ComfyUI's /object_info over HTTP converts it, and the template it writes loads."""
    from bot.cli.genbot import main
    from templates.loader import load_templates
    from tests.fakes.comfyui import FakeComfy
    folder = official_corpus()
    assert folder is not None
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GENBOT_CONFIG", raising=False)
    (tmp_path / "config.toml").write_text('[templates]\ndir = "t"\n')
    async with FakeComfy() as comfy:
        code = await asyncio.to_thread(main, [
            "template", "import", str(folder / "image_qwen_image_edit.json"), "--name", "edit",
            "--server", comfy.url])
    out = capsys.readouterr().out
    assert code == 0 and "prompt (text) → 102:76.prompt [Text Encode Qwen Image Edit]" in out
    templates, broken = load_templates(tmp_path / "t")
    assert not broken and templates["edit"].params["image"].type == "image"
    assert templates["edit"].params["steps"].uses == ("102:106.value",)
