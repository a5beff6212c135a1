"""ComfyUI templates: a team's own API-format workflow, its inputs bound to sheet columns.

The workflow file ("Save (API Format)" in ComfyUI: node id -> {class_type, inputs,
_meta}) stays beside the template, untouched. The template gives typed parameters —
the same types, aliases, checks and sheet intake as genbot's own templates — each with
`"to"`: the node inputs it sets, by node id or by the node's title (`_meta.title`, what
people set in ComfyUI), e.g. `"to": ["Positive.text", "3.seed"]`. Everything is checked
when the template loads, from the file alone; what a server lacks (a node class, a
model file) is the executor's check, against that server (executor.comfyui.worker).

`import_workflow` writes such a template from a workflow with its bindings guessed.
Nothing here talks to a server or loads torch.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from storage.names import shown
from templates.jsonfile import JsonFileError, read_json
from templates.params import normalize_header

ENGINE = "comfyui"
TEMPLATE_KEYS = ("name", "description", "engine", "workflow", "params", "output", "vary_image")
# What a parameter may set, by the literal the workflow holds there.
PARAM_TYPES = ("text", "int", "float", "bool", "seed", "choice", "image")
SAMPLERS = ("KSampler", "KSamplerAdvanced", "SamplerCustom", "SamplerCustomAdvanced")
WORKFLOW_MAX_BYTES = 16 * 2**20  # exported workflows are kilobytes; each job stores a copy
UI_FORMAT = ("this is a ComfyUI workflow in the UI format (it has \"nodes\" and \"links\"); "
             "export it for the API instead: in ComfyUI, Workflow → Export (API), or "
             "Save (API Format) with dev mode on")


class WorkflowError(ValueError):
    """A file that is not a usable API-format workflow: where, and what is wrong."""


@dataclass(frozen=True)
class Target:
    """One node input a parameter sets."""
    node: str  # the node's id in the workflow
    input: str
    written: str  # as the template wrote it ("Positive.text")


@dataclass(frozen=True)
class ComfyGraph:
    file: str  # the workflow file, as the template names it
    prompt: dict[str, Any]  # the API-format graph, as the file has it
    targets: dict[str, tuple[Target, ...]]  # parameter -> the inputs it sets

    def title(self, node: str) -> str:
        meta = self.prompt.get(node, {}).get("_meta") or {}
        return str(meta.get("title") or self.prompt.get(node, {}).get("class_type") or node)


def read_workflow_file(path: Path, file: str | None = None) -> tuple[bytes, dict[str, Any]]:
    """The file's bytes (kept as they are) and its workflow, checked (`read_workflow`);
    else WorkflowError, one line. `file`: how messages name it (default: the path)."""
    try:
        raw, data = read_json(path, WORKFLOW_MAX_BYTES, file)
    except JsonFileError as e:
        raise WorkflowError(str(e)) from None
    return raw, read_workflow(data, str(path) if file is None else file)


def read_workflow(data: Any, file: str) -> dict[str, Any]:
    """`data` checked to be an API-format workflow, else WorkflowError saying why and
    where (the node id, the key): every node an object with a string class_type, an
    object of inputs and, if any, an object _meta whose title is a string — what the
    binding, the import and the executor then rely on without looking again."""
    if isinstance(data, dict) and isinstance(data.get("nodes"), list) and "links" in data:
        raise WorkflowError(f"{file}: {UI_FORMAT}")
    if isinstance(data, dict) and isinstance(data.get("prompt"), dict) and "client_id" in data:
        data = data["prompt"]  # a /prompt request body saved whole
    if isinstance(data, dict) and isinstance(data.get("params"), dict) \
            and "class_type" not in data["params"] and ("nodes" in data or "engine" in data):
        raise WorkflowError(f"{file}: this is a genbot template, not a ComfyUI workflow")
    if not isinstance(data, dict):
        raise WorkflowError(f"{file}: {_kind(data)}, not a ComfyUI API-format workflow "
                            "(expected an object of nodes: id -> {class_type, inputs})")
    if not data:
        raise WorkflowError(f"{file}: no nodes (expected an object of nodes: id -> "
                            "{class_type, inputs})")
    for nid, node in data.items():
        if not nid.strip():
            raise WorkflowError(f'{file}: node "{shown(nid)}": a node id cannot be blank')
        where = f"{file}: node {shown(nid)}"
        if not isinstance(node, dict):
            raise WorkflowError(f"{where}: {_kind(node)}, expected an object "
                                "{class_type, inputs} — not a ComfyUI API-format workflow")
        kind = node.get("class_type")
        if kind is None:
            raise WorkflowError(f"{where}: no class_type — not a ComfyUI API-format workflow")
        if not isinstance(kind, str) or not kind.strip():
            raise WorkflowError(f"{where}: class_type is {_kind(kind)}, expected the node "
                                "class's name")
        if "inputs" not in node:
            raise WorkflowError(f"{where} ({shown(kind)}): no inputs (an API-format node has "
                                "\"inputs\": {...}, empty when it takes none)")
        if not isinstance(node["inputs"], dict):
            raise WorkflowError(f"{where} ({shown(kind)}): inputs is {_kind(node['inputs'])}, "
                                "expected an object of input name -> value")
        meta = node.get("_meta")
        if meta is not None and not isinstance(meta, dict):
            raise WorkflowError(f"{where} ({shown(kind)}): _meta is {_kind(meta)}, expected an "
                                "object such as {\"title\": \"Positive\"}")
        if meta and meta.get("title") is not None and not isinstance(meta["title"], str):
            raise WorkflowError(f"{where} ({shown(kind)}): _meta.title is {_kind(meta['title'])}, "
                                "expected text")
    return data


def _kind(value: Any) -> str:
    """What a JSON value is, for people: "a list", "a number" …"""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "a string" if isinstance(value, str) else "a number"


def is_link(value: Any) -> bool:
    """An input fed by another node's output: [node id, output index]."""
    return (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
            and isinstance(value[1], int) and not isinstance(value[1], bool))


def resolve_target(prompt: dict[str, Any], written: str) -> Target:
    """"6.text" or "Positive.text" -> the node input, or ValueError saying what is wrong.
    A node id wins over a title; a title must name one node."""
    node, dot, name = written.rpartition(".")
    if not dot or not node or not name:
        raise ValueError(f'"{written}" is not NODE.input (a node id or title, a dot, an '
                         "input name), e.g. \"6.text\" or \"Positive.text\"")
    if node not in prompt:
        titled = [nid for nid, n in prompt.items()
                  if str((n.get("_meta") or {}).get("title", "")) == node]
        if len(titled) > 1:
            raise ValueError(f'the title "{node}" names nodes {", ".join(titled)}: bind by id, '
                             f'e.g. "{titled[0]}.{name}"')
        if not titled:
            known = sorted({*prompt, *(str((n.get("_meta") or {}).get("title"))
                                       for n in prompt.values() if n.get("_meta"))})
            raise ValueError(f'no node "{node}" (by id or title) in the workflow; it has '
                             + ", ".join(known[:20]))
        node = titled[0]
    inputs = prompt[node].get("inputs", {})
    if name not in inputs:
        raise ValueError(f'node {node} ({prompt[node]["class_type"]}) has no input "{name}"; '
                         f"it has {', '.join(inputs) or 'none'}")
    return Target(node, name, written)


def fits(kind: str, literal: Any) -> str | None:
    """Why a parameter of type `kind` cannot replace `literal`, or None if it can."""
    if is_link(literal):
        return (f"is fed by node {literal[0]} (a link, not a value): bind an input that "
                "holds a value")
    ok = {"text": isinstance(literal, str), "choice": isinstance(literal, str),
          "image": isinstance(literal, str),
          "int": isinstance(literal, int) and not isinstance(literal, bool),
          "seed": isinstance(literal, int) and not isinstance(literal, bool),
          "float": isinstance(literal, (int, float)) and not isinstance(literal, bool),
          "bool": isinstance(literal, bool)}[kind]
    return None if ok else f"holds {json.dumps(literal)[:40]}, which a {kind} cannot replace"


def bind_comfy(graph: ComfyGraph, params: dict[str, Any],
               values: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """A copy of the workflow with this row's values set, and the pictures to upload
    ([node, input, stored path]: the executor sends each and puts its server name in)."""
    prompt = copy.deepcopy(graph.prompt)
    uploads = []
    for name, targets in graph.targets.items():
        value = values.get(name)
        if value is None:
            continue  # left as the workflow has it
        for t in targets:
            if params[name].picture:
                uploads.append((t.node, t.input, value))
            prompt[t.node]["inputs"][t.input] = value
    return prompt, uploads


# --- import: a template from a workflow, bindings guessed ---------------------------------

# ComfyUI's own limits for the inputs import makes columns of (nodes.py and
# comfy_extras/nodes_sd3.py INPUT_TYPES: min, max, step), used unless the import asks a
# server, whose /object_info says what it allows (`object_info_limits`).
COMFY_LIMITS: dict[str, dict[str, tuple[float, float, float]]] = {
    "KSampler": {"steps": (1, 10000, 1), "cfg": (0.0, 100.0, 0.1), "denoise": (0.0, 1.0, 0.01)},
    "KSamplerAdvanced": {"steps": (1, 10000, 1), "cfg": (0.0, 100.0, 0.1)},
    "EmptyLatentImage": {"width": (16, 16384, 8), "height": (16, 16384, 8)},
    "EmptySD3LatentImage": {"width": (16, 16384, 16), "height": (16, 16384, 16)},
    "LoraLoader": {"strength_model": (-100.0, 100.0, 0.01),
                   "strength_clip": (-100.0, 100.0, 0.01)},
    # FLUX, Qwen-Image, Z-Image: comfy_extras/nodes_flux.py, nodes_custom_sampler.py,
    # nodes_model_advanced.py; nodes.py's LoraLoaderModelOnly
    "EmptyFlux2LatentImage": {"width": (16, 16384, 16), "height": (16, 16384, 16)},
    "FluxGuidance": {"guidance": (0.0, 100.0, 0.1)},
    "CLIPTextEncodeFlux": {"guidance": (0.0, 100.0, 0.1)},
    "SamplerCustom": {"cfg": (0.0, 100.0, 0.1)},
    "CFGGuider": {"cfg": (0.0, 100.0, 0.1)},
    "BasicScheduler": {"steps": (1, 10000, 1), "denoise": (0.0, 1.0, 0.01)},
    "Flux2Scheduler": {"steps": (1, 4096, 1), "width": (16, 16384, 1), "height": (16, 16384, 1)},
    "ModelSamplingFlux": {"width": (16, 16384, 8), "height": (16, 16384, 8)},
    "LoraLoaderModelOnly": {"strength_model": (-100.0, 100.0, 0.01)},
}
# The parts a custom sampler (SamplerCustomAdvanced) takes from nodes of their own: the
# noise (RandomNoise: the seed), the guider (BasicGuider, CFGGuider: the prompts, cfg),
# the sampler (KSamplerSelect: the method) and the sigmas (BasicScheduler, Flux2Scheduler:
# steps, schedule, denoise). Their settings are the sampler's.
SAMPLER_PARTS = ("noise", "guider", "sampler", "sigmas")
# Nodes whose output is the value they hold (comfy_extras/nodes_primitive.py), and the
# switch that passes on one of its inputs by a boolean (nodes_logic.py; ComfyUI runs only
# the branch it takes): a value fed through them is bound where it is held.
PRIMITIVES = ("PrimitiveInt", "PrimitiveFloat", "PrimitiveBoolean", "PrimitiveString",
              "PrimitiveStringMultiline")
SWITCHES = ("ComfySwitchNode",)
# The text inputs of the nodes that encode a prompt: CLIPTextEncode's text, the Qwen-Image
# edit encoders' prompt (the instruction), CLIPTextEncodeFlux's clip_l and t5xxl,
# CLIPTextEncodeSDXL's text_g and text_l. A conditioning on its way to a sampler is followed
# back to one through the nodes that pass it on (FluxGuidance, ReferenceLatent, a ControlNet
# …), except where it is zeroed: FLUX's and Z-Image's "negative" is no prompt.
TEXT_INPUTS = ("text", "prompt", "clip_l", "t5xxl", "text_g", "text_l")
ZEROED = ("ConditioningZeroOut",)
# The latents whose size is the picture's, and the nodes sized alike (a FLUX model's
# shift, FLUX.2's schedule): a column each joins where they hold the same size.
LATENTS = ("EmptyLatentImage", "EmptySD3LatentImage", "EmptyFlux2LatentImage")
SIZED = (*LATENTS, "ModelSamplingFlux", "Flux2Scheduler")
# A LoraLoader's strength whose value differs from its other one: its column's suffix, and
# what it applies to.
LORA_STRENGTHS = {"strength_model": ("strength", "the model"),
                  "strength_clip": ("clip_strength", "the prompt (CLIP)")}
NOTHING_TO_BIND = ("found nothing to make a column of (a sampler's CLIPTextEncode prompt, "
                   "seed, steps, cfg or guidance; an EmptyLatentImage's size; a LoadImage; a "
                   "checkpoint, diffusion model or LoRA loader): write the template's \"to\" "
                   "bindings by hand (genbot docs comfyui)")


def object_info_limits(info: dict[str, Any], kind: str, name: str) -> tuple[float, float,
                                                                             float | None] | None:
    """(min, max, step) a server's /object_info gives node class `kind`'s number input
    `name` (["INT" | "FLOAT", {"min": …, "max": …, "step": …}]), or None where it says
    nothing usable."""
    spec = info.get(kind)
    inputs = spec.get("input") if isinstance(spec, dict) else None
    if not isinstance(inputs, dict):
        return None
    for group in ("required", "optional"):
        entry = inputs.get(group)
        entry = entry.get(name) if isinstance(entry, dict) else None
        if not (isinstance(entry, list) and len(entry) > 1 and entry[0] in ("INT", "FLOAT")
                and isinstance(entry[1], dict)):
            continue
        low, high, step = entry[1].get("min"), entry[1].get("max"), entry[1].get("step")
        if _finite(low) and _finite(high) and low <= high:
            return low, high, (step if _finite(step) and step > 0 else None)
    return None


def object_info_choices(info: dict[str, Any], kind: str, name: str) -> list[str] | None:
    """The values a server's /object_info lists for node class `kind`'s input `name` (a
    choice: [[…values…], {…}], or as the newer nodes give one, ["COMBO", {"options":
    […values…]}]), or None."""
    spec = info.get(kind)
    inputs = spec.get("input") if isinstance(spec, dict) else None
    for group in ("required", "optional"):
        entry = inputs.get(group) if isinstance(inputs, dict) else None
        entry = entry.get(name) if isinstance(entry, dict) else None
        listed = combo_options(entry)
        if listed is not None and all(isinstance(v, str) for v in listed):
            return list(listed)
    return None


def combo_options(entry: Any) -> list[Any] | None:
    """The choices of an /object_info input spec: [[…values…], {…}] or ["COMBO",
    {"options": […values…]}]; None for any other input."""
    if not isinstance(entry, list) or not entry:
        return None
    if isinstance(entry[0], list):
        return entry[0]
    options = entry[1] if entry[0] == "COMBO" and len(entry) > 1 and isinstance(
        entry[1], dict) else None
    listed = options.get("options") if options is not None else None
    return listed if isinstance(listed, list) else None


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def import_workflow(data: Any, file: str, name: str, info: dict[str, Any] | None = None,
                    ) -> tuple[dict[str, Any], list[str]]:
    """The template (as JSON data) for the workflow in `data`, and one line per column it
    made, saying what the column sets. `info`: a ComfyUI server's /object_info, whose
    limits the number columns take (default: ComfyUI's own, COMFY_LIMITS).

    A column joins inputs that hold the same value (a base and a refiner sampler's
    steps); an input holding another value gets a column of its own, so an empty cell
    leaves each node as the workflow has it. A value a primitive node feeds (through the
    branch a switch takes) is bound on the primitive; a node that only a switch's other
    branch uses never runs, and makes no column."""
    prompt = read_workflow(data, file)
    columns = _Columns(prompt, file, info)
    runs = [nid for nid in prompt if nid in columns.live]  # (not a switch's other branch)
    for nid in runs:  # the samplers' columns first: prompt, seed, steps …
        if prompt[nid]["class_type"] in SAMPLERS:
            columns.sampler(nid)
    for nid in runs:  # the picture's size, before the nodes sized alike join it
        if prompt[nid]["class_type"] in LATENTS:
            columns.size(nid)
    for nid in runs:
        columns.loader_or_input(nid)
    if not columns.params:
        raise WorkflowError(f"{file}: {NOTHING_TO_BIND}")
    template = {"name": name, "engine": ENGINE, "workflow": f"{name}.workflow.json",
                "description": f"ComfyUI workflow imported from {Path(file).name}",
                "params": columns.params, "output": "{row}.png"}
    return template, columns.said()


class _Columns:
    """The columns an import makes of one workflow, as they are guessed node by node: each
    parameter's spec with its "to" bindings, and which node each binding sets."""

    def __init__(self, prompt: dict[str, Any], file: str, info: dict[str, Any] | None) -> None:
        self.prompt, self.file, self.info = prompt, file, info
        self.params: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, list[str]] = {}  # column -> the node ids it sets, for `said`
        self.bound: set[tuple[str, str]] = set()
        self.live = _live(prompt)

    def source(self, node: str, inp: str) -> tuple[str, str]:
        """Where the value of `node`.`inp` is held (`_source`)."""
        return _source(self.prompt, node, inp)

    def value(self, node: str, inp: str) -> Any:
        """The value `node`.`inp` takes, where it is held; a link where it is computed."""
        held, key = self.source(node, inp)
        return self.prompt[held]["inputs"].get(key)

    def said(self) -> list[str]:
        """One line per column, for the person importing: what it sets, by node title."""
        return [f"{column} ({spec['type']}) → "
                + ", ".join(f"{shown(to)} [{shown(_title(self.prompt, node))}]"
                            for to, node in zip(spec["to"], self.nodes[column]))
                for column, spec in self.params.items()]

    def bind(self, column: str, spec: dict[str, Any], node: str, inp: str) -> None:
        """Bind a node input to a column: one input, one column; a column that already sets
        an input holding another value is not reused (an empty cell must leave each node
        as the workflow has it), and one that is takes the range both inputs allow."""
        if (node, inp) in self.bound:  # one input, one column
            return
        params = self.params
        if column in params and "default" in spec \
                and params[column].get("default") != spec["default"]:
            column = _column(column, params, node)  # another value: its own column
        if column not in params:
            params[column], self.nodes[column] = {**spec, "to": []}, []
        else:  # the range every input it sets allows
            have = params[column]
            if "min" in spec:
                have["min"] = max(have.get("min", spec["min"]), spec["min"])
            if "max" in spec:
                have["max"] = min(have.get("max", spec["max"]), spec["max"])
        params[column]["to"].append(f"{node}.{inp}")
        self.nodes[column].append(node)
        self.bound.add((node, inp))

    def number(self, column: str, kind: str, node: str, inp: str, help_: str) -> None:
        """A number column with the range ComfyUI (or the server) allows for that input,
        bound where its value is held (a primitive node feeding it: `source`)."""
        held, key = self.source(node, inp)
        value, cls = self.prompt[held]["inputs"][key], self.prompt[node]["class_type"]
        limits = object_info_limits(self.info, cls, inp) if self.info is not None else None
        source = "the server"
        if limits is None:
            limits, source = COMFY_LIMITS.get(cls, {}).get(inp), "ComfyUI"
        bounds: dict[str, Any] = {}
        if limits is not None:
            low, high, step = limits
            if not low <= value <= high:
                raise WorkflowError(f"{self.file}: node {shown(node)} ({shown(cls)}): {inp} is "
                                    f"{value}, outside the {low:g}..{high:g} {source} allows")
            bounds = {"min": math.ceil(low), "max": math.floor(high)} if kind == "int" \
                else {"min": float(low), "max": float(high)}
            if kind == "int" and step and step > 1:
                help_ += f" (a multiple of {step:g})"
        spec = {"type": kind, **bounds, "default": value, "help": help_}
        self.bind(column, spec, held, key)

    def choice(self, kind: str, inp: str, value: str, help_: str) -> dict[str, Any]:
        """A choice column: of the files the server lists for that input (its /object_info)
        — the workflow's own the default where the server has it — else of that one."""
        listed = object_info_choices(self.info, kind, inp) if self.info is not None else None
        if not listed:
            return {"type": "choice", "choices": [value], "default": value,
                    "help": f"{help_} (add the others to choices)"}
        return {"type": "choice", "choices": listed, "help": help_,
                **({"default": value} if value in listed else {"required": True})}

    def conditioning(self, link: Any) -> tuple[list[tuple[str, str]], list[str]]:
        """What makes the conditioning a link carries: the text inputs of the encoder it
        comes from (where their text is held), followed back through the nodes that pass
        a conditioning on — FluxGuidance, ReferenceLatent, a ControlNet (its positive or
        negative, by the output taken), the branch a switch takes — and the nodes on the
        way that set a guidance; nothing where it is zeroed (ConditioningZeroOut)."""
        guided: list[str] = []
        for _ in range(64):  # (a chain that long is a loop: no prompt at its end)
            if not is_link(link) or link[0] not in self.prompt:
                break
            nid, slot = link
            kind, inputs = self.prompt[nid]["class_type"], self.prompt[nid]["inputs"]
            if kind in ZEROED:
                break
            if kind in SWITCHES:
                branch = _branch(self.prompt, nid)
                link = inputs.get(branch) if branch else None
                continue
            if "guidance" in inputs and _finite(self.value(nid, "guidance")):
                guided.append(nid)
            texts = [self.source(nid, key) for key in TEXT_INPUTS
                     if key in inputs and isinstance(self.value(nid, key), str)]
            if texts:
                return texts, guided
            passed = "conditioning" if is_link(inputs.get("conditioning")) else \
                ("positive", "negative")[slot] if slot in (0, 1) else None
            link = inputs.get(passed) if passed else None
        return [], guided

    def sampler(self, nid: str) -> None:
        """A sampler's columns: the prompts feeding it (through its guider, for a custom
        sampler), then its own settings and those of the parts it takes (its noise's
        seed, its scheduler's steps …), then the guidance set on its prompt's way."""
        inputs = self.prompt[nid]["inputs"]
        parts = [nid, *(inputs[k][0] for k in SAMPLER_PARTS
                        if is_link(inputs.get(k)) and inputs[k][0] in self.prompt)]
        positive: list[tuple[str, str]] = []
        negative: list[tuple[str, str]] = []
        guided: list[str] = []
        for part in parts:
            for key, texts in (("positive", positive), ("conditioning", positive),
                               ("negative", negative)):
                found, guiding = self.conditioning(self.prompt[part]["inputs"].get(key))
                texts += found
                guided += guiding
        for node, key in positive:
            self.bind("prompt", {"type": "text", "required": True,
                                 "help": "What to make (the positive prompt)",
                                 "example": self.prompt[node]["inputs"][key].strip()},
                      node, key)
        for node, key in negative:
            if (node, key) not in positive:
                self.bind("negative", {"type": "text", "default": self.prompt[node]["inputs"][key],
                                       "help": "What to avoid (the negative prompt)"},
                          node, key)
        for part in parts:
            self.sampler_settings(part)
        for node in guided:
            self.number("guidance", "float", node, "guidance",
                        "Guidance (FLUX's distilled guidance: how closely it follows the prompt)")

    def sampler_settings(self, nid: str) -> None:
        """A sampler's (or its part's) seed, steps, cfg, sampling method and schedule
        (where the server lists them) and, for img2img, its strength: each where its
        value is held (a primitive feeding it, the branch a switch takes)."""
        inputs, kind = self.prompt[nid]["inputs"], self.prompt[nid]["class_type"]
        for key in ("seed", "noise_seed"):
            if key in inputs and _whole(self.value(nid, key)):
                held, at = self.source(nid, key)
                self.bind("seed", {"type": "seed", "help": "Empty: a random seed, stored with "
                                   "the job"}, held, at)
        if "steps" in inputs and _whole(self.value(nid, "steps")):
            self.number("steps", "int", nid, "steps", "Sampling steps")
        if "cfg" in inputs and _finite(self.value(nid, "cfg")):
            self.number("cfg", "float", nid, "cfg", "Guidance (CFG)")
        for key, column, what in (("sampler_name", "sampler", "Sampling method"),
                                  ("scheduler", "scheduler", "Noise schedule")):
            listed = object_info_choices(self.info, kind, key) \
                if self.info is not None else None  # (only where the server says what there is)
            value = self.value(nid, key) if key in inputs else None
            if listed and isinstance(value, str) and value in listed:
                held, at = self.source(nid, key)
                self.bind(column, {"type": "choice", "choices": listed, "default": value,
                                   "help": what}, held, at)
        denoise = self.value(nid, "denoise") if "denoise" in inputs else None
        if _finite(denoise) and denoise < 1:  # img2img: its strength
            self.number("denoise", "float", nid, "denoise",
                        "How much of the picture is redrawn (0: none, 1: all)")

    def size(self, nid: str) -> None:
        """A latent's width and height (or those of a node sized alike: a FLUX model's
        shift, FLUX.2's schedule), joining the picture's where they are the same."""
        for key in ("width", "height"):
            if key in self.prompt[nid]["inputs"] and _whole(self.value(nid, key)):
                self.number(key, "int", nid, key, f"Image {key} in pixels")

    def loader_or_input(self, nid: str) -> None:
        """The columns of a node that is not a sampler: a latent's size, a picture to load,
        a checkpoint, a LoRA."""
        inputs, kind = self.prompt[nid]["inputs"], self.prompt[nid]["class_type"]
        if kind in SIZED:
            self.size(nid)
        elif kind == "LoadImage" and isinstance(inputs.get("image"), str):
            self.load_image(nid)
        elif isinstance(inputs.get("ckpt_name"), str):
            self.bind(_column("checkpoint", self.params, nid), self.choice(
                kind, "ckpt_name", inputs["ckpt_name"], "The checkpoint file on the ComfyUI "
                "server"), nid, "ckpt_name")
        elif kind == "UNETLoader" and isinstance(inputs.get("unet_name"), str):
            self.bind(_column("model", self.params, nid), self.choice(
                kind, "unet_name", inputs["unet_name"], "The diffusion model file on the "
                "ComfyUI server"), nid, "unet_name")
        if kind in ("LoraLoader", "LoraLoaderModelOnly") \
                and isinstance(inputs.get("lora_name"), str):
            self.lora(nid)

    def load_image(self, nid: str) -> None:
        """A LoadImage's picture: a column named by the node's title while no column has
        it, so that a sheet's header says which picture it is."""
        titled = _titled(self.prompt, nid, "image")
        taken = {normalize_header(c) for c in self.params}
        self.bind(titled if titled != "image" and normalize_header(titled) not in taken
                  else _column("image", self.params, nid), {
                      "type": "image", "required": True,
                      "help": f"The picture for {shown(_title(self.prompt, nid))}",
                      "example": self.prompt[nid]["inputs"]["image"]}, nid, "image")

    def lora(self, nid: str) -> None:
        """A LoraLoader's file and, beside it, how strongly it applies: one column sets
        both its strengths (on the model and on the prompt's CLIP) where the workflow has
        them equal, as a LoRA is usually meant; where they differ, each its own column, so
        that an empty cell leaves each as the workflow has it."""
        inputs = self.prompt[nid]["inputs"]
        column = _column("lora", self.params, nid)
        self.bind(column, self.choice(self.prompt[nid]["class_type"], "lora_name",
                                      inputs["lora_name"], "The LoRA file on the ComfyUI server"),
                  nid, "lora_name")
        strengths = [k for k in ("strength_model", "strength_clip") if _finite(inputs.get(k))]
        if len({inputs[k] for k in strengths}) == 1:
            both = _column(f"{column}_strength", self.params)
            for key in strengths:
                self.number(both, "float", nid, key, "How strongly the LoRA applies")
            return
        for key in strengths:
            self.number(_column(f"{column}_{LORA_STRENGTHS[key][0]}", self.params), "float",
                        nid, key, f"How strongly the LoRA applies to {LORA_STRENGTHS[key][1]}")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _source(prompt: dict[str, Any], node: str, inp: str, depth: int = 0) -> tuple[str, str]:
    """Where the value `node`.`inp` takes is held: that input itself, or where it is fed
    by a primitive node (PrimitiveInt …), the primitive's `value`; through a switch, where
    the branch it takes holds it. A link to any other node: the input itself."""
    for _ in range(64):
        value = prompt[node]["inputs"].get(inp)
        if not is_link(value) or value[0] not in prompt or depth > 64:
            break
        upstream = prompt[value[0]]
        if upstream["class_type"] in PRIMITIVES and "value" in upstream["inputs"]:
            node, inp = value[0], "value"
        elif upstream["class_type"] in SWITCHES \
                and (branch := _branch(prompt, value[0], depth + 1)):
            node, inp = value[0], branch
        else:
            break
    return node, inp


def _branch(prompt: dict[str, Any], switch: str, depth: int = 0) -> str | None:
    """The input a switch passes on ("on_true" or "on_false", by the boolean its `switch`
    holds, or is fed by a primitive); None where that is computed by another node."""
    held, key = _source(prompt, switch, "switch", depth)
    on = prompt[held]["inputs"].get(key)
    return ("on_true" if on else "on_false") if isinstance(on, bool) else None


def _live(prompt: dict[str, Any]) -> set[str]:
    """The nodes that run: every node whose output nothing takes (the outputs; a loose
    LoadImage too, as a column's place) and what it takes, through the branch each switch
    takes — ComfyUI evaluates a switch's inputs lazily, so the other branch never runs."""
    taken = {v[0] for node in prompt.values() for v in node["inputs"].values() if is_link(v)}
    todo = [nid for nid in prompt if nid not in taken]
    live: set[str] = set()
    while todo:
        nid = todo.pop()
        if nid in live or nid not in prompt:
            continue
        live.add(nid)
        node = prompt[nid]
        branch = _branch(prompt, nid) if node["class_type"] in SWITCHES else None
        todo += [v[0] for k, v in node["inputs"].items() if is_link(v)
                 and (branch is None or k not in ("on_true", "on_false") or k == branch)]
    return live


def _title(prompt: dict[str, Any], nid: str) -> str:
    node = prompt.get(nid, {})
    return str((node.get("_meta") or {}).get("title") or node.get("class_type") or nid)


DEFAULT_TITLES = {"LoadImage": ("Load Image", "LoadImage")}


def _titled(prompt: dict[str, Any], nid: str, base: str) -> str:
    """A column's name from its node's title where someone gave it one ("Product photo"
    -> product_photo), else `base`: a sheet's header then says which picture it is."""
    node = prompt.get(nid, {})
    title = str((node.get("_meta") or {}).get("title") or "").strip()
    if not title or title in DEFAULT_TITLES.get(node.get("class_type", ""), ()):
        return base
    slug = re.sub(r"[^A-Za-z0-9]+", "_", title).strip("_").lower()[:40]
    return slug if slug and slug[0].isalpha() else base


def _column(base: str, params: dict[str, Any], nid: str | None = None) -> str:
    """A column name no other column has (compared as sheet headers are: case-free):
    `base`, then `base_NODE` with the node id made a name (subgraph node `20:5` →
    `image_20_5`: letters, digits and _ only, as parameter names are), then numbered."""
    taken = {normalize_header(p) for p in params}
    slug = re.sub(r"[^A-Za-z0-9]+", "_", nid or "").strip("_")[:40]
    candidates = [base, f"{base}_{slug}"] if slug else [base]
    for candidate in candidates:
        if normalize_header(candidate) not in taken:
            return candidate
    n = 2
    while normalize_header(f"{candidates[-1]}_{n}") in taken:
        n += 1
    return f"{candidates[-1]}_{n}"
