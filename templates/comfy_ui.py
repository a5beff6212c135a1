"""ComfyUI workflows as people share them: the UI format, and images that carry one.

The ComfyUI frontend saves a workflow as its canvas — `nodes` with `widgets_values` in
widget order, and `links` between slots — while a server runs the API format: node id ->
{class_type, inputs by name}. Turning one into the other needs what the frontend knows
from the server's /object_info: each node class's inputs in order, which of them are
widgets, and which widgets carry a hidden companion value (a seed's "control after
generate", an image's upload button). `to_api` does what the frontend's graphToPrompt
does, with that knowledge:

- widget values are matched to the class's widget inputs in order, companions skipped;
- links are followed through Reroute nodes and through bypassed nodes (mode 4: the input
  of the same type passes through), and a PrimitiveNode's value becomes the literal;
- muted nodes (mode 2), notes, reroutes and primitives are not nodes of the prompt; an
  input linked only to a muted node is left out, as the frontend leaves it;
- a node's title becomes its `_meta.title`, which names its columns on import;
- subgraphs are unpacked as ComfyUI runs them: their nodes join the prompt as
  "instance:node" (nested: "a:b:c"), fed through the subgraph's input node by what feeds
  the instance's input of the same name (or by the instance's own widget values, where
  they line up with the subgraph's widget inputs), read out through its output node; a
  muted or bypassed instance is treated as any muted or bypassed node. The old frontend's
  group nodes are refused, saying to convert them.

`from_image` reads the workflow ComfyUI embeds in what it saves: a PNG's `prompt` text
chunk (API format) or `workflow` chunk (UI format); WebP's EXIF ("prompt:{…}" in tag
0x0110, "workflow:{…}" in 0x010F, as SaveAnimatedWEBP writes them).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.names import shown
from templates.comfy import WORKFLOW_MAX_BYTES, WorkflowError, combo_options, read_workflow
from templates.jsonfile import JsonFileError, parse_json

WIDGET_TYPES = ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")
VIRTUAL = ("Reroute", "PrimitiveNode", "Note", "MarkdownNote")  # not nodes of the prompt
MUTED, BYPASSED = 2, 4  # a node's mode: never runs; runs as if it were not there
SEEDS = ("seed", "noise_seed")  # INT widgets the frontend gives a "control after generate"


def is_ui_format(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("nodes"), list) and "links" in data


def widgets(spec: dict[str, Any]) -> list[tuple[str, int]]:
    """A node class's widget inputs in the frontend's order, each with how many values it
    takes in widgets_values (2 where a hidden companion value follows)."""
    inputs = spec.get("input")
    inputs = inputs if isinstance(inputs, dict) else {}
    order = spec.get("input_order")
    order = order if isinstance(order, dict) else {}
    found: list[tuple[str, int]] = []
    for group in ("required", "optional"):
        entries = inputs.get(group)
        entries = entries if isinstance(entries, dict) else {}
        listed = order.get(group)
        names: list[Any] = listed if isinstance(listed, list) else list(entries)
        for name in names:
            entry = entries.get(name)
            if not isinstance(entry, list) or not entry:
                continue
            kind, options = entry[0], entry[1] if len(entry) > 1 and isinstance(
                entry[1], dict) else {}
            if not (isinstance(kind, list) or kind in WIDGET_TYPES):
                continue  # a connection (MODEL, CLIP …): no widget
            takes = 1
            if options.get("control_after_generate") or (kind == "INT" and name in SEEDS):
                takes = 2  # (a number's, or a newer node's choice's)
            if options.get("image_upload") or options.get("video_upload"):
                takes = 2  # the upload button's own value follows
            found.append((name, takes))
    return found


SUBGRAPH_IN, SUBGRAPH_OUT = -10, -20  # a subgraph's own input and output nodes
KEEP = object()  # a subgraph input nothing feeds: the inner widget keeps its own value


@dataclass
class Scope:
    """One graph: the top level, or one instance of a subgraph (its nodes named
    `prefix` + their id, as ComfyUI names them: "19:3", "19:5:2")."""
    prefix: str
    nodes: dict[Any, dict[str, Any]]
    links: dict[Any, tuple[Any, int, Any, int, str]]  # id -> (from, slot, to, slot, type)
    parent: Scope | None = None
    instance: dict[str, Any] | None = None  # the node of `parent` this scope unpacks


def _links(raw: Any) -> dict[Any, tuple[Any, int, Any, int, str]]:
    found: dict[Any, tuple[Any, int, Any, int, str]] = {}
    for link in raw or []:
        if isinstance(link, list) and len(link) >= 6:
            found[link[0]] = (link[1], link[2], link[3], link[4], link[5])
        elif isinstance(link, dict):  # (the newer frontend's object form)
            found[link.get("id")] = (link.get("origin_id"), link.get("origin_slot", 0),
                                     link.get("target_id"), link.get("target_slot", 0),
                                     link.get("type", "*"))
    return found


def to_api(data: dict[str, Any], info: dict[str, Any], file: str) -> dict[str, Any]:
    """The API-format prompt of UI-format workflow `data`, using a server's /object_info;
    else WorkflowError naming the node and what is missing. Subgraphs are unpacked as
    ComfyUI does: their nodes join the prompt as "instance:node", their inputs fed by what
    feeds the instance (or by the widget values it promotes), their outputs taken from
    what feeds the subgraph's output node."""
    definitions = data.get("definitions")
    listed = definitions.get("subgraphs") if isinstance(definitions, dict) else None
    subgraphs = {g["id"]: g for g in listed or [] if isinstance(g, dict) and "id" in g}
    top = Scope("", {n["id"]: n for n in data["nodes"] if isinstance(n, dict) and "id" in n},
                _links(data.get("links")))
    conversion = _Conversion(info, subgraphs, file)
    conversion.add(top)
    if not conversion.prompt:
        raise WorkflowError(f"{file}: no node runs (every node is muted, bypassed or a note)")
    return conversion.prompt


Seen = frozenset[tuple[str, Any]]  # the links (scope prefix, link id) a search has followed


class _Conversion:
    """One UI-format workflow becoming a prompt: what every node's conversion needs (the
    server's node classes, the workflow's subgraphs, the file's name for messages) and
    the prompt as it grows."""

    def __init__(self, info: dict[str, Any], subgraphs: dict[Any, dict[str, Any]],
                 file: str) -> None:
        self.info, self.subgraphs, self.file = info, subgraphs, file
        self.prompt: dict[str, Any] = {}

    def add(self, scope: Scope, depth: int = 0) -> None:
        """The nodes of a scope that run, into the prompt; a subgraph instance's own."""
        for node_id, node in scope.nodes.items():
            cls = node.get("type")
            if cls in self.subgraphs:
                if node.get("mode") not in (MUTED, BYPASSED):
                    self.add(self.inner(scope, node, depth), depth + 1)
                continue
            if cls in VIRTUAL or node.get("mode") in (MUTED, BYPASSED):
                continue
            self.prompt[f"{scope.prefix}{node_id}"] = self.api_node(scope, node)

    def inner(self, scope: Scope, node: dict[str, Any], depth: int = 0) -> Scope:
        """The scope of the subgraph that instance `node` unpacks; a bound on nesting keeps
        a subgraph that contains itself from going on for ever."""
        if depth > 16:
            raise WorkflowError(f"{self.file}: subgraphs nested more than 16 deep")
        graph = self.subgraphs[node["type"]]
        return Scope(f"{scope.prefix}{node['id']}:",
                     {n["id"]: n for n in graph.get("nodes") or [] if isinstance(n, dict)},
                     _links(graph.get("links")), scope, node)

    def promoted(self, instance: dict[str, Any], slot: int) -> Any:
        """The value an instance's own widgets give subgraph input `slot`, where its saved
        values line up one to one with the subgraph's widget inputs; else KEEP (frontends
        have saved these differently: the inner node's own value is then what runs)."""
        graph = self.subgraphs[instance["type"]]
        kinds = [i.get("type") if isinstance(i, dict) else None
                 for i in graph.get("inputs") or []]
        widget_slots = [n for n, k in enumerate(kinds) if k in WIDGET_TYPES or
                        isinstance(k, list)]
        values = instance.get("widgets_values")
        if slot in widget_slots and isinstance(values, list) \
                and len(values) == len(widget_slots):
            return values[widget_slots.index(slot)]
        return KEEP

    def origin(self, scope: Scope, link_id: Any, seen: Seen = frozenset()) -> Any:
        """What feeds a link: [node id, slot], a literal (a primitive's or a promoted
        widget's value), KEEP, or None (a muted node, a dangling link)."""
        if link_id is None or link_id not in scope.links or (scope.prefix, link_id) in seen:
            return None
        node_id, slot, _, _, kind = scope.links[link_id]
        seen = seen | {(scope.prefix, link_id)}
        if node_id == SUBGRAPH_IN and scope.parent is not None and scope.instance is not None:
            return self.subgraph_input(scope.parent, scope.instance, slot, seen)
        node = scope.nodes.get(node_id)
        if node is None:
            return None
        if node.get("type") == "Reroute":
            return self.origin(scope, _input_link(node, 0), seen)
        if node.get("type") == "PrimitiveNode":
            values = node.get("widgets_values") or []
            return values[0] if values else None
        if node.get("mode") == MUTED:
            return None
        if node.get("mode") == BYPASSED:
            return self.bypassed(scope, node, slot, kind, seen)
        if node.get("type") in self.subgraphs:
            return self.instance_output(scope, node, slot, seen)
        return [f"{scope.prefix}{node_id}", slot]

    def subgraph_input(self, parent: Scope, instance: dict[str, Any], slot: int,
                       seen: Seen) -> Any:
        """What feeds a subgraph's input `slot`: what feeds the instance's input of that
        name, else the value the instance's widgets promote."""
        link = _fed(self.subgraphs[instance["type"]], instance, slot)
        if link is not None:
            return self.origin(parent, link, seen)
        return self.promoted(instance, slot)

    def bypassed(self, scope: Scope, node: dict[str, Any], slot: int, kind: str,
                 seen: Seen) -> Any:
        """What a bypassed node passes through: what feeds its input of the same type as
        the output asked for, the one in the same slot first."""
        candidates = [i for i in node.get("inputs") or [] if i.get("type") == kind]
        by_slot = (node.get("inputs") or [])[slot:slot + 1]
        for inp in [*[i for i in by_slot if i in candidates], *candidates]:
            found = self.origin(scope, inp.get("link"), seen)
            if found is not None:
                return found
        return None

    def instance_output(self, scope: Scope, node: dict[str, Any], slot: int,
                        seen: Seen) -> Any:
        """A subgraph instance's output `slot`: what feeds it inside, at the subgraph's
        output node."""
        within = self.inner(scope, node, len(seen))
        feeding = next((lid for lid, (_, _, to, to_slot, _) in within.links.items()
                        if to == SUBGRAPH_OUT and to_slot == slot), None)
        return self.origin(within, feeding, seen)

    def api_node(self, scope: Scope, node: dict[str, Any]) -> dict[str, Any]:
        """One node as the API format has it: its widget values and its links by input
        name, its title in _meta; WorkflowError where the server lacks its class."""
        cls = node.get("type")
        where = (f"{self.file}: node {shown(scope.prefix + str(node.get('id')))} "
                 f"({shown(str(cls))})")
        if isinstance(cls, str) and cls.startswith(("workflow>", "workflow/")):
            raise WorkflowError(f"{where}: a group node of the old frontend: in ComfyUI, "
                                "convert it to a subgraph, or Workflow → Export (API)")
        spec = self.info.get(cls) if isinstance(cls, str) else None
        if not isinstance(spec, dict):
            raise WorkflowError(f"{where}: this ComfyUI server has no such node class (a "
                                "custom node it lacks?): install it there, or import a "
                                "workflow of the nodes it has")
        inputs = _widget_inputs(where, spec, node)
        self.link_inputs(scope, node, inputs)
        title = node.get("title") or spec.get("display_name") or cls
        return {"inputs": inputs, "class_type": cls, "_meta": {"title": str(title)}}

    def link_inputs(self, scope: Scope, node: dict[str, Any], inputs: dict[str, Any]) -> None:
        """Set each linked input of `node` in `inputs` to what feeds it; one fed by nothing
        that runs is left out, as the frontend leaves it."""
        for inp in node.get("inputs") or []:
            if not isinstance(inp, dict) or not isinstance(inp.get("name"), str) \
                    or inp.get("link") is None:
                continue
            target = str((inp.get("widget") or {}).get("name", inp["name"]))
            found = self.origin(scope, inp["link"])
            if found is KEEP:
                continue  # a subgraph input nothing feeds: the widget's own value
            if found is None:  # fed by nothing that runs: left out, as the frontend does
                inputs.pop(target, None)
                continue
            inputs[target] = found


def _widget_inputs(where: str, spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """A node's widget values by input name: saved by name, or in widget order (hidden
    companion values skipped); a widget never set on the canvas takes its default."""
    inputs: dict[str, Any] = {}
    values = node.get("widgets_values")
    if isinstance(values, dict):  # (some nodes save their widgets by name)
        inputs.update({k: v for k, v in values.items() if isinstance(k, str)})
    values = values if isinstance(values, list) else []
    at = 0
    for name, takes in widgets(spec):
        if name in inputs:
            continue
        if at < len(values):
            inputs[name] = values[at]
        elif (default := widget_default(spec, name)) is not None:
            inputs[name] = default  # never set on the canvas: the widget's default
        else:
            raise WorkflowError(
                f"{where}: no value for its input {shown(name)} (saved by another "
                "version of the node?): export the workflow in API format instead")
        at += takes
    return inputs


def widget_default(spec: dict[str, Any], name: str) -> Any:
    """The value a widget starts with: its `default`, else a list's first choice (a
    classic [[…], {…}] or a newer node's ["COMBO", {"options": […]}])."""
    for group in ("required", "optional"):
        entry = (spec.get("input") or {}).get(group, {}).get(name)
        if isinstance(entry, list) and entry:
            options = entry[1] if len(entry) > 1 and isinstance(entry[1], dict) else {}
            if "default" in options:
                return options["default"]
            if listed := combo_options(entry):
                return listed[0]
    return None


def _fed(graph: dict[str, Any], instance: dict[str, Any], slot: int) -> Any:
    """The link into subgraph instance `instance` that feeds its subgraph's input `slot`:
    the instance's input of that input's name — the frontend saves an instance's inputs in
    its own order, often only some of them (those linked, or shown as sockets) — or, where
    they have no names, the one in the same place."""
    listed = graph.get("inputs") or []
    name = listed[slot].get("name") if slot < len(listed) and isinstance(listed[slot],
                                                                         dict) else None
    fed = [i for i in instance.get("inputs") or [] if isinstance(i, dict)]
    if name is not None and any(i.get("name") is not None for i in fed):
        return next((i.get("link") for i in fed if i.get("name") == name), None)
    return _input_link(instance, slot)


def _input_link(node: dict[str, Any], slot: int) -> Any:
    inputs = node.get("inputs") or []
    return inputs[slot].get("link") if slot < len(inputs) and isinstance(
        inputs[slot], dict) else None


def from_image(data: bytes, file: str) -> tuple[str, Any]:
    """("api" | "ui", the workflow) ComfyUI embedded in an image it saved; the API format
    where both are there (it is what ran). Else WorkflowError saying what the image holds."""
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(io.BytesIO(data)) as image:
            text = dict(getattr(image, "text", None) or image.info or {})
            exif = image.getexif()
    except (UnidentifiedImageError, OSError, ValueError):
        raise WorkflowError(f"{file}: not a picture genbot can read (PNG or WebP saved by "
                            "ComfyUI)") from None
    for tag in (0x0110, 0x010F, 0x010E):
        raw = exif.get(tag)
        value = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if isinstance(value, str) and ":" in value:
            key, _, body = value.partition(":")
            text.setdefault(key.strip().lower(), body)
    for key, kind in (("prompt", "api"), ("workflow", "ui")):
        found = text.get(key)
        if isinstance(found, str):
            try:
                return kind, json.loads(found)
            except ValueError:
                raise WorkflowError(f"{file}: its {key} metadata is not JSON") from None
    raise WorkflowError(f"{file}: this picture carries no ComfyUI workflow (ComfyUI's Save "
                        "Image keeps one; a picture resaved elsewhere often loses it)")


IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"RIFF", b"\xff\xd8\xff")  # PNG, WebP, JPEG
NEEDS_SERVER = ("is in the UI format (as the ComfyUI frontend saves it); genbot converts "
                "it with a ComfyUI server's /object_info: pass --server http://HOST:8188, set "
                "[comfyui] servers, or export it in API format (Workflow → Export (API))")


def shared(raw: bytes, file: str) -> tuple[str, Any]:
    """What a shared file holds: ("api" | "ui" | "api-image" | "ui-image", the workflow);
    else WorkflowError, one line."""
    if len(raw) > WORKFLOW_MAX_BYTES:
        raise WorkflowError(f"{file}: larger than {WORKFLOW_MAX_BYTES // 2**20} MiB, the most "
                            "genbot reads of a workflow")
    if raw.startswith(IMAGE_MAGIC):
        kind, data = from_image(raw, file)
        return f"{kind}-image", data
    try:
        data = parse_json(raw, file)
    except JsonFileError as e:
        raise WorkflowError(str(e)) from None
    return ("ui" if is_ui_format(data) else "api"), data


HOW = {"api": "the API format", "ui": "the UI format",
       "api-image": "the API-format workflow in the picture",
       "ui-image": "the UI-format workflow in the picture"}


def api_workflow(raw: bytes, kind: str, data: Any, info: dict[str, Any] | None,
                 file: str) -> tuple[bytes, dict[str, Any]]:
    """(the bytes to keep as NAME.workflow.json, the API-format prompt) of what `shared`
    found: an API-format file byte for byte, anything else written out. A UI-format one
    needs a server's /object_info (`info`; None: WorkflowError saying how to get one)."""
    if kind.startswith("ui"):
        if info is None:
            raise WorkflowError(f"{file}: {NEEDS_SERVER}")
        prompt = to_api(data, info, file)
    else:
        prompt = read_workflow(data, file)
    kept = raw if kind == "api" else \
        json.dumps(prompt, indent=2, ensure_ascii=False).encode() + b"\n"
    return kept, prompt


def read_shared(path: Path, info: Callable[[], dict[str, Any] | None],
                file: str | None = None) -> tuple[bytes, dict[str, Any], str]:
    """`shared` and `api_workflow` on a file: (bytes to keep, prompt, how it came). `info`
    is asked only for a UI-format workflow."""
    file = str(path) if file is None else file
    try:
        if not path.is_file():
            raise WorkflowError(f"{file}: no such file")
        with path.open("rb") as f:
            raw = f.read(WORKFLOW_MAX_BYTES + 1)
    except OSError as e:
        raise WorkflowError(f"{file}: cannot read: {e.strerror or e}") from None
    kind, data = shared(raw, file)
    kept, prompt = api_workflow(raw, kind, data, info() if kind.startswith("ui") else None,
                                file)
    return kept, prompt, HOW[kind]
