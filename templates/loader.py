"""Load and check a template file whole, so a broken one is reported with its file and
JSON path and never reaches the queue (docs/templates.md).

Two kinds of file: genbot's own graph of ops (`nodes`), and a ComfyUI template
(`"engine": "comfyui"`) whose bindings are checked against the workflow kept beside it.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from importlib.resources import files
from pathlib import Path
from typing import Any, NoReturn

from storage.names import UnsafeName, checked
from templates import comfy
from templates.binding import safe_output_name
from templates.expressions import (
    BUILTINS,
    NAME,
    NodeRef,
    ParamRef,
    Text,
    parse_expr,
    parse_text,
    walk,
)
from templates.graph import Keep, Node, Template
from templates.jsonfile import JsonFileError, read_json
from templates.params import (
    REFERENCE_SCALE,
    SEED_MAX,
    TYPES,
    Param,
    Problem,
    coerce,
    normalize_header,
    parse_aspect,
    parse_color,
    parse_size,
)
from templates.signatures import OPS, SAMPLERS, Input

DEFAULT_OUTPUT = "{row}.png"
TEMPLATE_MAX_BYTES = 4 * 2**20  # a template is kilobytes, even with long lists of choices
WORKFLOW_SUFFIX = ".workflow.json"  # a ComfyUI workflow kept beside its template
TEMPLATE_KEYS = ("name", "description", "params", "nodes", "output", "vary_strength", "keep")
PARAM_KEYS = ("type", "required", "default", "min", "max", "choices", "aliases", "help",
              "example", "scale")
# Which parameter types may feed which input types, by "$name".
FEEDS = {"text": {"text", "model"}, "choice": {"text", "model", "aspect", "sampler"},
         "int": {"int", "float"}, "float": {"float"}, "bool": {"bool"}, "seed": {"seed"},
         "image": {"image"}, "reference": {"image"}, "color": {"color"}, "size": {"size"}}


class TemplateError(Exception):
    """A broken template: which file, where in it (a JSON path), what is wrong."""

    def __init__(self, file: str, path: str, message: str):
        self.file, self.path, self.message = file, path, message
        super().__init__(f"{file}: {path}: {message}" if path else f"{file}: {message}")



def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# What a node input's literal must be, by the input's type. Colours, sizes and aspects are
# parsed instead (LITERAL_PARSERS); an image comes only from a parameter or another node.
LITERAL_CHECKS: dict[str, Callable[[Any], bool]] = {
    "text": lambda v: isinstance(v, str),
    "int": _is_whole,
    "seed": lambda v: _is_whole(v) and 0 <= v <= SEED_MAX,
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "model": lambda v: isinstance(v, str) and v.strip() != "",
    "sampler": lambda v: v in SAMPLERS,
    "loras": lambda v: isinstance(v, list),
}
LITERAL_PARSERS: dict[str, Callable[[Any], Any]] = {
    "color": parse_color, "size": parse_size, "aspect": parse_aspect}


def _literal(kind: str, value: Any) -> tuple[bool, Any]:
    """Whether `value` is a literal of input type `kind`, and the value as the op takes it
    (a colour, size or aspect parsed); what a parser refuses is no literal of its type."""
    try:
        if kind in LITERAL_PARSERS:
            return True, LITERAL_PARSERS[kind](value)
        return LITERAL_CHECKS.get(kind, lambda v: False)(value), value
    except (ValueError, TypeError):
        return False, value


def _suggest(word: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


class _Loader:
    def __init__(self, file: str):
        self.file = file

    def fail(self, path: str, message: str) -> NoReturn:
        raise TemplateError(self.file, path, message)

    def keys(self, obj: Any, allowed: Sequence[str], path: str, what: str) -> dict[str, Any]:
        if not isinstance(obj, dict):
            self.fail(path, f"expected an object for {what}")
        for k in obj:
            if k not in allowed:
                self.fail(f"{path}.{k}" if path else k,
                          f'unknown key "{k}"{_suggest(k, allowed)}; expected one of '
                          + ", ".join(allowed))
        return obj

    # params ------------------------------------------------------------------------
    def param(self, name: str, spec: Any) -> Param:
        """A parameter as the template declares it, every key checked in the order the
        messages have always come in: name, type, choices, bounds, aliases, required,
        help, default."""
        path = f"params.{name}"
        if not NAME.fullmatch(name) or name in BUILTINS:
            self.fail(path, f'"{name}" cannot be a parameter name (letters, digits, _; '
                      f'not {", ".join(BUILTINS)})')
        spec = self.keys(spec, PARAM_KEYS, path, "a parameter")
        kind = spec.get("type")
        if kind not in TYPES:
            self.fail(f"{path}.type",
                      f'"{kind}" is not a parameter type{_suggest(str(kind), TYPES)};'
                      f" expected one of {', '.join(TYPES)}")
        choices = self.param_choices(spec, kind, path)
        self.param_bounds(spec, kind, path)
        aliases = spec.get("aliases", [])
        if not (isinstance(aliases, list)
                and all(isinstance(a, str) and a.strip() for a in aliases)):
            self.fail(f"{path}.aliases", "aliases are a list of column headers")
        required = spec.get("required", False)
        if not isinstance(required, bool):
            self.fail(f"{path}.required", "expected true or false")
        if not isinstance(spec.get("help", ""), str):
            self.fail(f"{path}.help", "expected a string")
        scale = spec.get("scale")
        if scale is not None and (kind != "reference" or isinstance(scale, bool) or
                                  not isinstance(scale, (int, float)) or not 0 <= scale <= 2):
            self.fail(f"{path}.scale", "a reference parameter's scale is a number from 0 to 2 "
                      "(how strongly the picture steers: its scale column's default)")
        param = Param(name=name, type=kind, required=required, min=spec.get("min"),
                      max=spec.get("max"), choices=tuple(choices), aliases=tuple(aliases),
                      help=spec.get("help", ""), example=spec.get("example"),
                      scale=None if scale is None else float(scale))
        return self.param_default(param, spec, path)

    def param_choices(self, spec: dict[str, Any], kind: str, path: str) -> list[str]:
        """A choice parameter's choices: strings no two of which a sheet would read as one
        (headers and cells compare case- and width-free); no other type has any."""
        choices = spec.get("choices", [])
        if kind == "choice":
            if not (isinstance(choices, list) and choices
                    and all(isinstance(c, str) for c in choices)):
                self.fail(f"{path}.choices", "a choice parameter needs a list of strings")
            if len({normalize_header(c) for c in choices}) != len(choices):
                self.fail(f"{path}.choices", "two choices differ only in case or width")
        elif "choices" in spec:
            self.fail(f"{path}.choices", "only a choice parameter has choices")
        return choices

    def param_bounds(self, spec: dict[str, Any], kind: str, path: str) -> None:
        """min and max: numbers, for a number parameter only, and in order."""
        for bound in ("min", "max"):
            if bound in spec and (kind not in ("int", "float") or isinstance(spec[bound], bool)
                                  or not isinstance(spec[bound], (int, float))):
                self.fail(f"{path}.{bound}", "min and max are numbers, for int and float")
        if "min" in spec and "max" in spec and spec["min"] > spec["max"]:
            self.fail(path, f"min {spec['min']} is more than max {spec['max']}")

    def param_default(self, param: Param, spec: dict[str, Any], path: str) -> Param:
        """The parameter with its default, read as a cell holding it would be: a default
        the parameter's own checks refuse is the template's error, not a row's."""
        if "default" in spec and spec["default"] is not None:
            try:
                param = replace(param, default=coerce(param, spec["default"]))
            except Problem as e:
                self.fail(f"{path}.default",
                          f"{spec['default']!r} is not a valid {param.type} ({e.code})")
        if param.default is not None and param.picture:
            self.fail(f"{path}.default", f"a picture parameter ({param.type}) has no default")
        return param

    # node inputs -------------------------------------------------------------------
    def check_literal(self, value: Any, inp: Input, path: str) -> Any:
        """A literal for an input: checked, and normalised (sizes, colours)."""
        if value is None:
            if inp.optional:
                return None
            self.fail(path, "cannot be null")
        kind = inp.type
        ok, value = _literal(kind, value)
        if not ok:
            want = {"image": 'an image from "$param" or "@node"',
                    "sampler": "one of " + ", ".join(SAMPLERS)}.get(kind, f"a {kind}")
            self.fail(path, f"{json.dumps(value, ensure_ascii=False)} is not {want}")
        if inp.choices and value not in inp.choices:
            self.fail(path, f'"{value}" is not one of {", ".join(inp.choices)}')
        if kind in ("int", "float") and ((inp.min is not None and value < inp.min)
                                         or (inp.max is not None and value > inp.max)):
            low = "" if inp.min is None else f"{inp.min:g}"
            high = "" if inp.max is None else f"{inp.max:g}"
            self.fail(path, f"{value} is outside {low}..{high}")
        return value

    def check_expr(self, expr: Any, inp: Input, path: str) -> Any:
        if isinstance(expr, (ParamRef, NodeRef)):
            return expr
        if isinstance(expr, Text):
            if inp.type not in ("text", "model") or inp.choices:
                self.fail(path, f"{{fields}} make text; this input takes a {inp.type}"
                          + (" from a fixed list: use a choice parameter" if inp.choices else ""))
            return expr
        if inp.type == "loras":
            if not isinstance(expr, list):
                self.fail(path, 'expected a list of {"name": ..., "weight": ...}')
            out = []
            for i, item in enumerate(expr):
                ipath = f"{path}[{i}]"
                if not isinstance(item, dict) or set(item) - {"name", "weight"} \
                        or "name" not in item:
                    self.fail(ipath, 'expected {"name": <lora>, "weight": <number>}')
                out.append({"name": self.check_expr(item["name"], Input("model"), f"{ipath}.name"),
                            "weight": self.check_expr(item.get("weight", 1.0),
                                                      Input("float", min=-4, max=4),
                                                      f"{ipath}.weight")})
            return out
        return self.check_literal(expr, inp, path)

    # the whole file ------------------------------------------------------------------
    def load(self, data: Any, stem: str) -> Template:
        data = self.keys(data, TEMPLATE_KEYS, "", "a template")
        name, description = self.head(data, stem)
        raw_params = data.get("params", {})
        if not isinstance(raw_params, dict):
            self.fail("params", "expected an object of parameters")
        params = {n: self.param(n, spec) for n, spec in raw_params.items()}
        self.check_headers(params)

        raw_nodes = data.get("nodes")
        if not isinstance(raw_nodes, dict) or not raw_nodes:
            self.fail("nodes", "expected an object of nodes")
        nodes = {}
        for nid, spec in raw_nodes.items():
            path = f"nodes.{nid}"
            if not NAME.fullmatch(nid):
                self.fail(path, f'"{nid}" cannot be a node id (letters, digits, _)')
            spec = self.keys(spec, ("op", "inputs"), path, "a node")
            op = spec.get("op")
            if op not in OPS:
                self.fail(f"{path}.op", f'unknown op "{op}"{_suggest(str(op), OPS)}; '
                          f"ops: {', '.join(OPS)}")
            sig = OPS[op]
            raw_inputs = spec.get("inputs", {})
            if not isinstance(raw_inputs, dict):
                self.fail(f"{path}.inputs", "expected an object of inputs")
            inputs = {}
            for iname, value in raw_inputs.items():
                ipath = f"{path}.inputs.{iname}"
                if iname not in sig.inputs:
                    self.fail(ipath, f'{op} has no input "{iname}"{_suggest(iname, sig.inputs)}; '
                              f"it takes {', '.join(sig.inputs)}")
                try:
                    expr = parse_expr(value)
                except ValueError as e:
                    self.fail(ipath, str(e))
                for part in walk(expr):
                    if isinstance(part, dict) and "@" in part:
                        self.fail(ipath, 'the key "@" is reserved')
                inputs[iname] = self.check_expr(expr, sig.inputs[iname], ipath)
            missing = [i for i, spec_ in sig.inputs.items() if spec_.required and i not in inputs]
            if missing:
                self.fail(f"{path}.inputs", f"{op} needs {', '.join(missing)}")
            self.reference_scale(params, inputs)
            nodes[nid] = Node(nid, op, inputs)

        output = self.output(data.get("output", DEFAULT_OUTPUT))
        params = self.link(params, nodes, output)
        order = self.order(nodes)
        self.check_images_saved(nodes)
        return Template(name, description, self.file, params, nodes, order, output,
                        vary_strength=self.vary_strength(data), keep=self.keep(data, params))

    def reference_scale(self, params: dict[str, Param], inputs: dict[str, Any]) -> None:
        """A reference parameter fed to a node's IP-Adapter reference brings its scale
        column: <name>_scale (a float, 0 to 2, its `scale` the default), declared here
        unless the template declares it, and wired to the node's reference_scale unless
        the node sets that itself. A sheet may then steer each row's picture by as much
        as it wants, and a sweep vary it (--vary style_scale=0.3,0.6,0.9)."""
        ref = inputs.get("reference")
        if not (isinstance(ref, ParamRef) and ref.name in params
                and params[ref.name].type == "reference") or "reference_scale" in inputs:
            return
        reference = params[ref.name]
        name = f"{ref.name}_scale"
        if name not in params:
            params[name] = Param(
                name, "float", default=REFERENCE_SCALE if reference.scale is None
                else reference.scale, min=0, max=2,
                help=f"how strongly {ref.name} steers the image (0 to 2)")
            self.check_headers(params)
        inputs["reference_scale"] = ParamRef(name)

    def keep(self, data: dict[str, Any], params: dict[str, Param]) -> Keep | None:
        """The product kept intact: "keep": "product_image", or {"picture": …, "mask": …,
        "blend": px, "shadow": 0-1}; each picture named an image parameter."""
        value = data.get("keep")
        if value is None:
            return None
        if isinstance(value, str):
            value = {"picture": value}
        if not isinstance(value, dict) or set(value) - {"picture", "mask", "blend", "shadow"}:
            self.fail("keep", 'expected an image parameter\'s name, or {"picture": …, '
                      '"mask": …, "blend": 2, "shadow": 0.3}')
        for key in ("picture", "mask"):
            name = value.get(key)
            if (key == "picture" or name is not None) and \
                    getattr(params.get(str(name)), "type", None) != "image":
                self.fail(f"keep.{key}", f"expected an image parameter of this template, "
                          f"not {name!r}")
        blend, shadow = value.get("blend", 2), value.get("shadow", 0.0)
        if isinstance(blend, bool) or not isinstance(blend, int) or not 0 <= blend <= 16:
            self.fail("keep.blend", "expected a whole number of pixels, 0 to 16")
        if isinstance(shadow, bool) or not isinstance(shadow, (int, float)) or \
                not 0 <= shadow <= 1:
            self.fail("keep.shadow", "expected a number from 0 (none) to 1")
        return Keep(value["picture"], value.get("mask"), blend, float(shadow))

    def vary_strength(self, data: dict[str, Any]) -> float | None:
        """How much a "vary" of this template's images changes them (img2img strength)."""
        value = data.get("vary_strength")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not 0 < value <= 1:
            self.fail("vary_strength", "expected a number above 0 and at most 1, e.g. 0.35")
        return float(value)

    def head(self, data: dict[str, Any], stem: str) -> tuple[str, str]:
        """The name (the file's) and the description."""
        name = data.get("name")
        if name != stem:
            self.fail("name", f'"{name}" should be "{stem}", the file\'s name')
        description = data.get("description", "")
        if not isinstance(description, str):
            self.fail("description", "expected a string")
        return stem, description

    def check_headers(self, params: dict[str, Param]) -> None:
        seen: dict[str, str] = {}
        for p in params.values():
            for header in (p.name, *p.aliases):
                key = normalize_header(header)
                if key in seen and seen[key] != p.name:
                    self.fail(f"params.{p.name}", f'column "{header}" would also match '
                              f'parameter "{seen[key]}"')
                seen[key] = p.name

    def load_comfy(self, data: Any, stem: str, folder: Path,
                   stored: dict[str, Any] | None = None) -> Template:
        """A ComfyUI template: its workflow file read (or `stored`: a version's copy of
        it) and every binding checked."""
        data = self.keys(data, comfy.TEMPLATE_KEYS, "", "a ComfyUI template")
        name, description = self.head(data, stem)
        wf = data.get("workflow")
        if not isinstance(wf, str) or not wf.strip():
            self.fail("workflow", "expected the API-format workflow's file name, beside this "
                      'template (e.g. "portrait.workflow.json")')
        try:
            path = folder / checked(wf, 'the template\'s "workflow"')
        except UnsafeName as e:
            self.fail("workflow", str(e))
        try:
            prompt = comfy.read_workflow(stored, wf) if stored is not None else \
                comfy.read_workflow_file(path)[1]
        except comfy.WorkflowError as e:
            self.fail("workflow", str(e))
        raw_params = data.get("params", {})
        if not isinstance(raw_params, dict) or not raw_params:
            self.fail("params", "expected an object of parameters, each with \"to\": the "
                      "node inputs it sets")
        params: dict[str, Param] = {}
        targets: dict[str, tuple[comfy.Target, ...]] = {}
        bound: dict[tuple[str, str], str] = {}
        for pname, spec in raw_params.items():
            path_ = f"params.{pname}"
            spec = self.keys(spec, (*PARAM_KEYS, "to"), path_, "a parameter")
            param = self.param(pname, {k: v for k, v in spec.items() if k != "to"})
            if param.type not in comfy.PARAM_TYPES:
                self.fail(f"{path_}.type", f"a ComfyUI template's parameter is one of "
                          f"{', '.join(comfy.PARAM_TYPES)}")
            to = spec.get("to")
            if not isinstance(to, list) or not to or not all(isinstance(t, str) for t in to):
                self.fail(f"{path_}.to", 'expected a list of node inputs, e.g. ["6.text"] or '
                          '["Positive.text"]')
            found = []
            for i, written in enumerate(to):
                try:
                    target = comfy.resolve_target(prompt, written)
                except ValueError as e:
                    self.fail(f"{path_}.to[{i}]", str(e))
                why = comfy.fits(param.type, prompt[target.node]["inputs"][target.input])
                if why:
                    self.fail(f"{path_}.to[{i}]", f'"{written}" {why}')
                key = (target.node, target.input)
                if key in bound:
                    self.fail(f"{path_}.to[{i}]", f'"{written}" is set by parameter '
                              f'"{bound[key]}" too')
                bound[key] = pname
                found.append(target)
            params[pname] = replace(param, uses=tuple(t.written for t in found))
            targets[pname] = tuple(found)
        self.check_headers(params)
        output = self.output(data.get("output", DEFAULT_OUTPUT))
        vary_image = data.get("vary_image")
        if vary_image is not None and (not isinstance(vary_image, str) or
                                       getattr(params.get(vary_image), "type", None) != "image"):
            images = [n for n, p in params.items() if p.type == "image"]  # (not a reference)
            self.fail("vary_image", "expected the name of the image parameter a vary feeds "
                      "the picture into: one of "
                      f"{', '.join(images) or '(none: it has no image input)'}")
        return Template(name, description, self.file, params, {}, (), output, engine=comfy.ENGINE,
                        comfy=comfy.ComfyGraph(wf, prompt, targets), vary_image=vary_image)

    def output(self, pattern: Any) -> Text:
        if not isinstance(pattern, str):
            self.fail("output", "expected a file name pattern such as \"{sku}/{row}.png\"")
        try:
            output = parse_text(pattern)
        except ValueError as e:
            self.fail("output", f"not a file name pattern: {e}")
        try:
            safe_output_name(output.render({n: "x" for n in output.names}))
        except Problem as e:
            self.fail("output", f'"{pattern}" is not a safe file name ({e.code})')
        return output

    def link(self, params: dict[str, Param], nodes: dict[str, Node],
             output: Text) -> dict[str, Param]:
        """Resolve references; tighten each parameter to what the inputs it feeds accept."""
        used: dict[str, list[str]] = {p: [] for p in params}
        for n in output.names:
            if n in used:
                used[n].append("output")
        for node in nodes.values():
            sig = OPS[node.op]
            for iname, expr in node.inputs.items():
                path = f"nodes.{node.id}.inputs.{iname}"
                items = [(expr, sig.inputs[iname], path)]
                if sig.inputs[iname].type == "loras" and isinstance(expr, list):
                    items = [(item[k], Input("model") if k == "name" else
                              Input("float", min=-4, max=4), f"{path}[{i}].{k}")
                             for i, item in enumerate(expr) for k in ("name", "weight")]
                for e, inp, epath in items:
                    if isinstance(e, Text):
                        for n in e.names:
                            if n in used:
                                used[n].append(f"{node.id}.{iname}")
                    elif isinstance(e, ParamRef):
                        params[e.name] = self.feed(params, e.name, inp, epath)
                        used[e.name].append(f"{node.id}.{iname}")
                    elif isinstance(e, NodeRef):
                        self.check_node_ref(nodes, node.id, e, inp, epath)
        for p in params:
            if not used[p]:
                self.fail(f"params.{p}", "is never used by a node")
        return {n: replace(p, uses=tuple(used[n])) for n, p in params.items()}

    def feed(self, params: dict[str, Param], name: str, inp: Input, path: str) -> Param:
        if name not in params:
            self.fail(path, f'"${name}": no such parameter{_suggest(name, params)}')
        p = params[name]
        if inp.type not in FEEDS[p.type]:
            self.fail(path, f'"${name}" is a {p.type} parameter; this input takes a {inp.type}')
        if inp.choices or inp.type in ("aspect", "sampler"):
            allowed = inp.choices or (SAMPLERS if inp.type == "sampler" else None)
            if p.type != "choice":
                self.fail(path, f'"${name}" must be a choice parameter: this input takes '
                          "only certain values")
            for choice in p.choices:
                try:
                    if inp.type == "aspect":
                        parse_aspect(choice)
                    else:
                        assert allowed is not None  # only an aspect input has no list of values
                        if choice not in allowed:
                            raise ValueError
                except ValueError:
                    self.fail(f"params.{name}.choices", f'"{choice}" is not a valid value for '
                              f"{path.removeprefix('nodes.')}")
        lows = [b for b in (p.min, inp.min) if b is not None]
        highs = [b for b in (p.max, inp.max) if b is not None]
        p = replace(p, min=max(lows) if lows else None, max=min(highs) if highs else None)
        if p.required is False and p.default is None and not inp.optional and inp.required \
                and p.type != "seed":
            p = replace(p, required=True)  # nothing to fall back on
        return p

    def check_node_ref(self, nodes: dict[str, Node], source: str, ref: NodeRef, inp: Input,
                       path: str) -> None:
        if ref.node not in nodes:
            self.fail(path, f'"@{ref.node}": no such node{_suggest(ref.node, nodes)}')
        outputs = OPS[nodes[ref.node].op].outputs
        if ref.output is None:
            if len(outputs) != 1:
                self.fail(path, f'"@{ref.node}" has outputs {", ".join(outputs) or "none"}: '
                          f"name one, e.g. @{ref.node}.{next(iter(outputs), 'x')}")
            kind = next(iter(outputs.values()))
        elif ref.output not in outputs:
            self.fail(path, f'"@{ref.node}.{ref.output}": {nodes[ref.node].op} has no output '
                      f'"{ref.output}"{_suggest(ref.output, outputs)}')
        else:
            kind = outputs[ref.output]
        if kind != inp.type:
            self.fail(path, f'"@{ref.node}" gives a {kind}; this input takes a {inp.type}')

    def order(self, nodes: dict[str, Node]) -> tuple[str, ...]:
        deps = {nid: [e.node for expr in n.inputs.values() for e in walk(expr)
                      if isinstance(e, NodeRef)] for nid, n in nodes.items()}
        done: list[str] = []
        state: dict[str, str] = {}

        def visit(nid: str, trail: list[str]) -> None:
            if state.get(nid) == "done":
                return
            if state.get(nid) == "visiting":
                cycle = trail[trail.index(nid):] + [nid]
                self.fail("nodes", "a cycle: " + " -> ".join(cycle))
            state[nid] = "visiting"
            for dep in deps[nid]:
                visit(dep, trail + [nid])
            state[nid] = "done"
            done.append(nid)

        for nid in nodes:
            visit(nid, [])
        return tuple(done)

    def check_images_saved(self, nodes: dict[str, Node]) -> None:
        consumed = {(e.node, e.output or next(iter(OPS[nodes[e.node].op].outputs)))
                    for n in nodes.values() for expr in n.inputs.values()
                    for e in walk(expr) if isinstance(e, NodeRef)}
        for nid, node in nodes.items():
            for out, kind in OPS[node.op].outputs.items():
                if kind == "image" and (nid, out) not in consumed:
                    self.fail(f"nodes.{nid}", f"its {out} is never saved or used "
                              "(add a save node that takes it)")
        if not any(n.op == "save" for n in nodes.values()):
            self.fail("nodes", "nothing is saved: add a save node")


def load_template(path: Path) -> Template:
    file = str(path)
    try:
        raw, data = read_json(path, TEMPLATE_MAX_BYTES)
    except JsonFileError as e:
        raise TemplateError(file, e.where, e.message) from None
    if isinstance(data, dict) and data.get("engine") == comfy.ENGINE:
        t = _Loader(file).load_comfy(data, path.stem, path.parent)
    else:
        t = _Loader(file).load(data, path.stem)
    return replace(t, version=version_of(raw, t), source=data)


def template_from(name: str, number: int, hash: str, content: dict[str, Any]) -> Template:
    """A stored version of a template (storage.versions), loaded as its file once was."""
    data, workflow = content.get("template"), content.get("workflow")
    file = f"{name}@{number}"
    if isinstance(data, dict) and data.get("engine") == comfy.ENGINE:
        t = _Loader(file).load_comfy(data, name, Path(), stored=workflow or {})
    else:
        t = _Loader(file).load(data, name)
    return replace(t, version=hash, number=number, source=data)


def version_content(t: Template) -> dict[str, Any]:
    """What a version keeps of a template: its file's JSON, and its ComfyUI workflow."""
    return {"template": t.source, "workflow": t.comfy.prompt if t.comfy else None}


def version_of(raw: bytes, t: Template) -> str:
    """What a template was when it bound a job: the hash of its file (and of its ComfyUI
    workflow), so an image names the exact template that made it even after an edit."""
    digest = hashlib.sha256(raw)
    if t.comfy is not None:
        digest.update(json.dumps(t.comfy.prompt, sort_keys=True).encode())
    return digest.hexdigest()[:12]


def load_templates(folder: Path) -> tuple[dict[str, Template], list[TemplateError]]:
    """Every *.json in `folder`; a broken one is reported and the others still load. The
    ComfyUI workflows templates name (kept beside them) are not templates themselves:
    `*.workflow.json` is never read as one, any other a template names is not reported."""
    templates, errors = {}, []
    for path in sorted(Path(folder).glob("*.json")):
        if path.name.endswith(WORKFLOW_SUFFIX):
            continue
        try:
            templates[path.stem] = load_template(path)
        except TemplateError as e:
            errors.append(e)
    workflows = {(Path(folder) / t.comfy.file).resolve() for t in templates.values() if t.comfy}
    return templates, [e for e in errors if Path(e.file).resolve() not in workflows]


def shipped_dir() -> Path:
    """The templates genbot ships, as package data (a wheel has them too)."""
    return Path(str(files("templates") / "shipped"))
