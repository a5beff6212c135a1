"""ComfyUI templates: a team's own API-format workflow, its inputs bound to sheet columns.

The workflow file ("Save (API Format)" in ComfyUI: node id -> {class_type, inputs,
_meta}) stays beside the template, untouched. The template gives typed parameters —
the same types, aliases, checks and sheet intake as genbot's own templates — each with
`"to"`: the node inputs it sets, by node id or by the node's title (`_meta.title`, what
people set in ComfyUI), e.g. `"to": ["Positive.text", "3.seed"]`. Everything is checked
when the template loads, from the file alone; what a server lacks (a node class, a
model file) is the executor's check, against that server (executor.comfy_worker).

`import_workflow` writes such a template from a workflow with its bindings guessed.
Nothing here talks to a server or loads torch.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENGINE = "comfyui"
TEMPLATE_KEYS = ("name", "description", "engine", "workflow", "params", "output")
# What a parameter may set, by the literal the workflow holds there.
PARAM_TYPES = ("text", "int", "float", "bool", "seed", "choice", "image")
SAMPLERS = ("KSampler", "KSamplerAdvanced")
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


def read_workflow(data: Any, file: str) -> dict[str, Any]:
    """`data` checked to be an API-format workflow, else WorkflowError saying why."""
    if isinstance(data, dict) and isinstance(data.get("nodes"), list) and "links" in data:
        raise WorkflowError(f"{file}: {UI_FORMAT}")
    if isinstance(data, dict) and isinstance(data.get("prompt"), dict) and "client_id" in data:
        data = data["prompt"]  # a /prompt request body saved whole
    if not isinstance(data, dict) or not data:
        raise WorkflowError(f"{file}: not a ComfyUI API-format workflow (expected an object "
                            "of nodes: id -> {class_type, inputs})")
    for nid, node in data.items():
        if not isinstance(node, dict) or not isinstance(node.get("class_type"), str):
            raise WorkflowError(f"{file}: node {nid}: no class_type — not a ComfyUI "
                                "API-format workflow")
        if not isinstance(node.get("inputs", {}), dict):
            raise WorkflowError(f"{file}: node {nid}: inputs is not an object")
    return data


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


def bind_comfy(graph: ComfyGraph, params: dict[str, Any], values: dict[str, Any]) -> dict:
    """A copy of the workflow with this row's values set, and the pictures to upload
    ([node, input, stored path]: the executor sends each and puts its server name in)."""
    prompt = copy.deepcopy(graph.prompt)
    uploads = []
    for name, targets in graph.targets.items():
        value = values.get(name)
        if value is None:
            continue  # left as the workflow has it
        for t in targets:
            if params[name].type == "image":
                uploads.append([t.node, t.input, value])
            prompt[t.node]["inputs"][t.input] = value
    return {"prompt": prompt, "uploads": uploads}


# --- import: a template from a workflow, bindings guessed ---------------------------------

def import_workflow(data: Any, file: str, name: str) -> tuple[dict[str, Any], list[str]]:
    """The template (as JSON data) for the workflow in `data`, and one line per column it
    made, saying what the column sets."""
    prompt = read_workflow(data, file)
    params: dict[str, dict[str, Any]] = {}
    said: list[str] = []

    def bind(param: str, spec: dict[str, Any], node: str, inp: str) -> None:
        if param not in params:
            params[param] = {**spec, "to": []}
        to = f"{node}.{inp}"
        if to not in params[param]["to"]:
            params[param]["to"].append(to)

    def text_node(link: Any) -> str | None:
        """The CLIPTextEncode-like node whose text feeds a conditioning link."""
        if not is_link(link) or link[0] not in prompt:
            return None
        node = prompt[link[0]]
        text = node.get("inputs", {}).get("text")
        return link[0] if isinstance(text, str) else None

    samplers = [nid for nid, n in prompt.items() if n["class_type"] in SAMPLERS]
    for nid in samplers:
        inputs = prompt[nid]["inputs"]
        positive, negative = text_node(inputs.get("positive")), text_node(inputs.get("negative"))
        if positive:
            bind("prompt", {"type": "text", "required": True,
                            "help": "What to make (the positive prompt)",
                            "example": prompt[positive]["inputs"]["text"].strip()},
                 positive, "text")
        if negative and negative != positive:
            bind("negative", {"type": "text", "default": prompt[negative]["inputs"]["text"],
                              "help": "What to avoid (the negative prompt)"}, negative, "text")
        for key in ("seed", "noise_seed"):
            if isinstance(inputs.get(key), int):
                bind("seed", {"type": "seed", "help": "Empty: a random seed, stored with the "
                              "job"}, nid, key)
        if isinstance(inputs.get("steps"), int):
            bind("steps", {"type": "int", "min": 1, "max": 150, "default": inputs["steps"],
                           "help": "Sampling steps"}, nid, "steps")
        if isinstance(inputs.get("cfg"), (int, float)) and not isinstance(inputs["cfg"], bool):
            bind("cfg", {"type": "float", "min": 0.0, "max": 30.0, "default": inputs["cfg"],
                         "help": "Guidance (CFG)"}, nid, "cfg")
    for nid, node in prompt.items():
        inputs, kind = node["inputs"], node["class_type"]
        if kind in ("EmptyLatentImage", "EmptySD3LatentImage"):
            for key in ("width", "height"):
                if isinstance(inputs.get(key), int):
                    bind(key, {"type": "int", "min": 64, "max": 8192, "default": inputs[key],
                               "help": f"Image {key} in pixels"}, nid, key)
        elif kind == "LoadImage" and isinstance(inputs.get("image"), str):
            column = _free_name("image", params, nid)
            bind(column, {"type": "image", "required": True,
                          "help": f"The picture for {_title(prompt, nid)}",
                          "example": inputs["image"]}, nid, "image")
        elif isinstance(inputs.get("ckpt_name"), str):
            column = _free_name("checkpoint", params, nid)
            bind(column, {"type": "choice", "choices": [inputs["ckpt_name"]],
                          "default": inputs["ckpt_name"],
                          "help": "The checkpoint file on the ComfyUI server (add the others "
                                  "to choices)"}, nid, "ckpt_name")
        if kind == "LoraLoader" and isinstance(inputs.get("lora_name"), str):
            column = _free_name("lora", params, nid)
            bind(column, {"type": "choice", "choices": [inputs["lora_name"]],
                          "default": inputs["lora_name"],
                          "help": "The LoRA file on the ComfyUI server (add the others to "
                                  "choices)"}, nid, "lora_name")
            strength = inputs.get("strength_model")
            if isinstance(strength, (int, float)) and not isinstance(strength, bool):
                bind(f"{column}_strength", {"type": "float", "min": -10.0, "max": 10.0,
                                            "default": strength,
                                            "help": "How strongly the LoRA applies"},
                     nid, "strength_model")
    for param, spec in params.items():
        said.append(f"{param} ({spec['type']}) → "
                    + ", ".join(f"{t} [{_title(prompt, t.partition('.')[0])}]"
                                for t in spec["to"]))
    template = {"name": name, "engine": ENGINE, "workflow": f"{name}.workflow.json",
                "description": f"ComfyUI workflow imported from {Path(file).name}",
                "params": params, "output": "{row}.png"}
    return template, said


def _title(prompt: dict[str, Any], nid: str) -> str:
    node = prompt.get(nid, {})
    return str((node.get("_meta") or {}).get("title") or node.get("class_type") or nid)


def _free_name(base: str, params: dict, nid: str) -> str:
    """`base` for the first such column, then `base_NODEID`."""
    return base if base not in params else f"{base}_{nid}"
