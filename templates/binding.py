"""Bind one row's values into a template: the typed job stored on the queue.

Binding is structural: values are placed into the parsed template as data, never
pasted into JSON text, so quotes, backslashes, newlines, emoji, braces and dollar
signs in a cell arrive unchanged.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, NoReturn

from templates import comfy
from templates.expressions import NodeRef, ParamRef, Text
from templates.graph import Keep
from templates.jobs import BoundJob, ComfyJob, DiffusersJob, Step, Upload
from templates.params import Problem, draw_seed, normalize_header
from templates.signatures import OPS, REQUIRED

if TYPE_CHECKING:
    from templates.graph import Node, Template

RESERVED_NAMES = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)),
                  *(f"lpt{i}" for i in range(1, 10))}



def safe_output_name(name: str, fmt: str | None = None) -> str:
    """A relative path that stays inside the batch's output folder, or Problem("output_…")."""
    def refuse(code: str, part: str = "") -> NoReturn:
        raise Problem(f"output_{code}", name=name, part=part)
    if any(ord(c) < 32 for c in name):
        refuse("control")
    path = name.replace("\\", "/")
    if path.startswith("/"):
        refuse("absolute")
    if re.match(r"^[A-Za-z]:", path):
        refuse("drive")
    for part in path.split("/"):
        if part == "..":
            refuse("parent")
        if part in ("", "."):
            refuse("empty_part")
        if part.split(".")[0].strip().lower() in RESERVED_NAMES:
            refuse("reserved", part)
        if part != part.rstrip(" ."):
            refuse("trailing", part)
        if re.search(r'[<>:"|?*]', part):
            refuse("bad_char", part)
    if len(path.encode()) > 240:
        refuse("too_long")
    if fmt and not path.lower().endswith(f".{fmt}") \
            and not (fmt == "jpg" and path.lower().endswith(".jpeg")):
        path = f"{path}.{fmt}"
    return path


def as_text(value: Any) -> str:
    """A value as a person types it in a cell, and as {name} puts it in text: 1024x768,
    7.5, true; empty for none."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list) and len(value) == 2:  # a size
        return f"{value[0]}x{value[1]}"
    return str(value)


def bind(t: Template, values: dict[str, Any], *, row: int,
         extras: dict[str, Any] | None = None) -> BoundJob:
    """The fully resolved workflow for one row: stored on its job, enough to reproduce it.

    `values`: each parameter's typed value (see templates.params.coerce); a seed left
    empty (None) is drawn here and stored. `extras`: the row's other columns.
    Raises Problem("output_…") for an output name that would leave the batch folder.
    """
    values = _with_drawn_seeds(t, values)
    variables = _text_variables(t, values, row=row, extras=extras or {})
    columns = {n: variables[n] for n in sorted(t.columns) if variables.get(n)}
    if t.comfy is not None:  # a ComfyUI workflow: its images are named by the pattern
        prompt, uploads = comfy.bind_comfy(t.comfy, t.params, values)
        return ComfyJob(template=t.name, row=row, params=values, prompt=prompt,
                        uploads=[Upload(*u) for u in uploads], columns=columns,
                        version=t.version, revision=t.number,
                        outputs={"images": safe_output_name(t.output.render(variables), "png")})
    nodes, outputs = _steps(t, values, variables)
    return DiffusersJob(template=t.name, row=row, params=values, nodes=nodes, outputs=outputs,
                        columns=columns, version=t.version, revision=t.number)


def _with_drawn_seeds(t: Template, values: dict[str, Any]) -> dict[str, Any]:
    """The row's values with every empty seed drawn: the job stores the seed it ran with,
    so that it can be made again."""
    values = dict(values)
    for p in t.params.values():
        if p.type == "seed" and values.get(p.name) is None:
            values[p.name] = draw_seed()
    return values


def _text_variables(t: Template, values: dict[str, Any], *, row: int,
                    extras: dict[str, Any]) -> dict[str, str]:
    """What {name} may stand for in text and output names: the template's columns (blank
    when the row has none), its parameters as typed, the row's number and the template's
    name — a parameter wins over a column of the same name."""
    given = {normalize_header(k): as_text(v) for k, v in extras.items()}
    return {**{n: given.get(normalize_header(n), "") for n in t.columns},
            **{n: as_text(values.get(n)) for n in t.params},
            "row": str(row), "template": t.name}


def kept(keep: Keep, values: dict[str, Any], image: Any, before: str, name: str) -> Step:
    """The step that puts the product photo back over `image` before the save `before`
    (a template's `keep`), which writes `name`: what it writes is the product exactly as
    photographed (a mask cut out for it is saved beside)."""
    return Step(f"keep_{before}", "keep_product", {
        "image": image, "product": values.get(keep.picture),
        "mask": values.get(keep.mask) if keep.mask else None, "blend": keep.blend,
        "shadow": keep.shadow, "beside": name})


def _steps(t: Template, values: dict[str, Any],
           variables: dict[str, str]) -> tuple[list[Step], dict[str, str]]:
    """The template's nodes in running order with their inputs resolved, and the file each
    save writes (node id -> name): two saves of one row may not write the same file."""
    nodes: list[Step] = []
    outputs: dict[str, str] = {}
    for nid in t.order:
        node = t.nodes[nid]
        inputs = _inputs(t, node, values, variables)
        if node.op == "save":
            pattern = inputs.get("name") or t.output.render(variables)
            inputs["name"] = outputs[nid] = safe_output_name(pattern, inputs["format"])
        if node.op == "save" and t.keep is not None:
            nodes.append(kept(t.keep, values, inputs["image"], nid, inputs["name"]))
            inputs["image"] = {"@": f"{nodes[-1].id}.image"}
        nodes.append(Step(nid, node.op, inputs))
    if len(set(outputs.values())) != len(outputs):
        raise Problem("output_same_in_row", name=", ".join(outputs.values()))
    return nodes, outputs


def _inputs(t: Template, node: Node, values: dict[str, Any],
            variables: dict[str, str]) -> dict[str, Any]:
    """One node's inputs as its op takes them: every expression resolved, blank LoRAs
    dropped, and a blank optional input given the op's default."""
    inputs = {}
    for iname, spec in OPS[node.op].inputs.items():
        value = _resolved(node.inputs[iname], t, values, variables) \
            if iname in node.inputs else None
        if spec.type == "loras" and value:  # a row that leaves a LoRA blank uses none
            value = [lora for lora in value if lora.get("name")]
        if value is None and not spec.optional and spec.default is not REQUIRED:
            value = spec.default  # a blank cell falls back on the input's own default
        if iname in node.inputs or spec.default is not REQUIRED:
            inputs[iname] = value
    return inputs


def _resolved(expr: Any, t: Template, values: dict[str, Any],
              variables: dict[str, str]) -> Any:
    """An input's expression as data: a parameter's value, a reference to another node's
    output ({"@": "node.output"}), text with its {names} filled in, or a literal — inside
    lists and objects too."""
    if isinstance(expr, ParamRef):
        return values.get(expr.name)
    if isinstance(expr, NodeRef):
        out = expr.output or next(iter(OPS[t.nodes[expr.node].op].outputs))
        return {"@": f"{expr.node}.{out}"}
    if isinstance(expr, Text):
        return expr.render(variables)
    if isinstance(expr, list):
        return [_resolved(e, t, values, variables) for e in expr]
    if isinstance(expr, dict):
        return {k: _resolved(e, t, values, variables) for k, e in expr.items()}
    return expr
