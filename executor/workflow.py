"""Workflow templates: load and check a JSON template, and bind one row's values into it.

A template is checked whole when it is loaded, so a broken one is reported with its
file and JSON path and never reaches the queue. Binding is structural: values are
placed into the parsed template as data, never pasted into JSON text, so quotes,
backslashes, newlines, emoji, braces and dollar signs in a cell arrive unchanged.

Input expressions (docs/templates.md):
  "$name"            the whole parameter, keeping its type
  "@node", "@n.out"  another node's output
  "a {name} b"       text with parameters, extra columns, {row} or {template} inside;
                     {{ and }} are literal braces
  "$$x", "@@x"       a literal "$x", "@x"
  anything else      a literal
"""

from __future__ import annotations

import difflib
import json
import re
import secrets
import string
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from executor import comfy_template as comfy
from executor.params import (
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
from executor.signatures import OPS, REQUIRED, SAMPLERS, Input

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NODE_REF = re.compile(r"@([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?")
BUILTINS = ("row", "template")
DEFAULT_OUTPUT = "{row}.png"
TEMPLATE_KEYS = ("name", "description", "params", "nodes", "output")
PARAM_KEYS = ("type", "required", "default", "min", "max", "choices", "aliases", "help",
              "example")
# Which parameter types may feed which input types, by "$name".
FEEDS = {"text": {"text", "model"}, "choice": {"text", "model", "aspect", "sampler"},
         "int": {"int", "float"}, "float": {"float"}, "bool": {"bool"}, "seed": {"seed"},
         "image": {"image"}, "color": {"color"}, "size": {"size"}}
RESERVED_NAMES = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)),
                  *(f"lpt{i}" for i in range(1, 10))}


class TemplateError(Exception):
    """A broken template: which file, where in it (a JSON path), what is wrong."""

    def __init__(self, file: str, path: str, message: str):
        self.file, self.path, self.message = file, path, message
        super().__init__(f"{file}: {path}: {message}" if path else f"{file}: {message}")


# --- Expressions ------------------------------------------------------------------------

@dataclass(frozen=True)
class ParamRef:
    name: str


@dataclass(frozen=True)
class NodeRef:
    node: str
    output: str | None  # None: the node's only output


@dataclass(frozen=True)
class Text:
    """Text with {fields}: literal pieces and names, alternating."""
    parts: tuple[tuple[str, str | None], ...]

    @property
    def names(self) -> list[str]:
        return [name for _, name in self.parts if name is not None]

    def render(self, variables: dict[str, str]) -> str:
        return "".join(text + (variables[name] if name is not None else "")
                       for text, name in self.parts)


def parse_text(value: str) -> Text:
    parts = []
    for literal, name, spec, conversion in string.Formatter().parse(value):
        if name is not None and (spec or conversion or not NAME.fullmatch(name)):
            raise ValueError(f"{{{name}}} is not a name; write {{{{ and }}}} for literal braces")
        parts.append((literal, name))
    return Text(tuple(parts))


def parse_expr(value: Any) -> Any:
    """A template value -> a literal, ParamRef, NodeRef, Text, or list/dict of those."""
    if isinstance(value, str):
        if value.startswith("$$") or value.startswith("@@"):
            return value[1:]
        if value.startswith("$"):
            if not NAME.fullmatch(value[1:]):
                raise ValueError(f'"{value}" is not a parameter reference ($name); '
                                 'write $$ for a literal $')
            return ParamRef(value[1:])
        if value.startswith("@"):
            m = NODE_REF.fullmatch(value)
            if not m:
                raise ValueError(f'"{value}" is not a node reference (@node or @node.output); '
                                 'write @@ for a literal @')
            return NodeRef(m[1], m[2])
        text = parse_text(value)
        return text if text.names else "".join(t for t, _ in text.parts)
    if isinstance(value, list):
        return [parse_expr(v) for v in value]
    if isinstance(value, dict):
        return {k: parse_expr(v) for k, v in value.items()}
    return value


def _walk(expr: Any):
    yield expr
    if isinstance(expr, list):
        for item in expr:
            yield from _walk(item)
    elif isinstance(expr, dict):
        for item in expr.values():
            yield from _walk(item)


# --- Templates --------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    id: str
    op: str
    inputs: dict[str, Any]  # input name -> expression


@dataclass(frozen=True)
class Template:
    name: str
    description: str
    file: str
    params: dict[str, Param]
    nodes: dict[str, Node]
    order: tuple[str, ...]  # nodes in an order that runs every input before it is used
    output: Text
    engine: str = "diffusers"  # or "comfyui": `comfy` is the workflow it runs on a server
    comfy: comfy.ComfyGraph | None = None

    @property
    def columns(self) -> set[str]:
        """Names used in {text} that are neither parameters nor built-ins: sheet columns."""
        names = set(self.output.names)
        for node in self.nodes.values():
            for expr in node.inputs.values():
                names.update(n for e in _walk(expr) if isinstance(e, Text) for n in e.names)
        return names - set(self.params) - set(BUILTINS)

    @property
    def models(self) -> list[str]:
        """Literal model names the template uses (e.g. to check them against the config)."""
        return [e for node in self.nodes.values()
                for name, expr in node.inputs.items()
                if OPS[node.op].inputs[name].type == "model"
                for e in _walk(expr) if isinstance(e, str) and e]


def _suggest(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


class _Loader:
    def __init__(self, file: str):
        self.file = file

    def fail(self, path: str, message: str) -> NoReturn:
        raise TemplateError(self.file, path, message)

    def keys(self, obj: Any, allowed, path: str, what: str) -> dict:
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
        choices = spec.get("choices", [])
        if kind == "choice":
            if not (isinstance(choices, list) and choices
                    and all(isinstance(c, str) for c in choices)):
                self.fail(f"{path}.choices", "a choice parameter needs a list of strings")
            if len({normalize_header(c) for c in choices}) != len(choices):
                self.fail(f"{path}.choices", "two choices differ only in case or width")
        elif "choices" in spec:
            self.fail(f"{path}.choices", "only a choice parameter has choices")
        for bound in ("min", "max"):
            if bound in spec:
                if kind not in ("int", "float") or isinstance(spec[bound], bool) \
                        or not isinstance(spec[bound], (int, float)):
                    self.fail(f"{path}.{bound}", "min and max are numbers, for int and float")
        if "min" in spec and "max" in spec and spec["min"] > spec["max"]:
            self.fail(path, f"min {spec['min']} is more than max {spec['max']}")
        aliases = spec.get("aliases", [])
        if not (isinstance(aliases, list)
                and all(isinstance(a, str) and a.strip() for a in aliases)):
            self.fail(f"{path}.aliases", "aliases are a list of column headers")
        required = spec.get("required", False)
        if not isinstance(required, bool):
            self.fail(f"{path}.required", "expected true or false")
        if not isinstance(spec.get("help", ""), str):
            self.fail(f"{path}.help", "expected a string")
        param = Param(name=name, type=kind, required=required, min=spec.get("min"),
                      max=spec.get("max"), choices=tuple(choices), aliases=tuple(aliases),
                      help=spec.get("help", ""), example=spec.get("example"))
        if "default" in spec and spec["default"] is not None:
            try:
                param = replace(param, default=coerce(param, spec["default"]))
            except Problem as e:
                self.fail(f"{path}.default",
                          f"{spec['default']!r} is not a valid {kind} ({e.code})")
        if param.default is not None and kind == "image":
            self.fail(f"{path}.default", "an image parameter has no default")
        return param

    # node inputs -------------------------------------------------------------------
    def check_literal(self, value: Any, inp: Input, path: str) -> Any:
        """A literal for an input: checked, and normalised (sizes, colours)."""
        if value is None:
            if inp.optional:
                return None
            self.fail(path, "cannot be null")
        kind = inp.type
        try:
            if kind == "text":
                ok = isinstance(value, str)
            elif kind in ("int", "seed"):
                ok = isinstance(value, int) and not isinstance(value, bool)
                if ok and kind == "seed":
                    ok = 0 <= value <= SEED_MAX
            elif kind == "float":
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            elif kind == "bool":
                ok = isinstance(value, bool)
            elif kind == "color":
                value = parse_color(value)
                ok = True
            elif kind == "size":
                value = parse_size(value)
                ok = True
            elif kind == "aspect":
                value = parse_aspect(value)
                ok = True
            elif kind == "model":
                ok = isinstance(value, str) and value.strip() != ""
            elif kind == "sampler":
                ok = value in SAMPLERS
            elif kind == "loras":
                ok = isinstance(value, list)
            else:  # image: only from a parameter or another node
                ok = False
        except (ValueError, TypeError):
            ok = False
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
                for part in _walk(expr):
                    if isinstance(part, dict) and "@" in part:
                        self.fail(ipath, 'the key "@" is reserved')
                inputs[iname] = self.check_expr(expr, sig.inputs[iname], ipath)
            missing = [i for i, spec_ in sig.inputs.items() if spec_.required and i not in inputs]
            if missing:
                self.fail(f"{path}.inputs", f"{op} needs {', '.join(missing)}")
            nodes[nid] = Node(nid, op, inputs)

        output = self.output(data.get("output", DEFAULT_OUTPUT))
        params = self.link(params, nodes, output)
        order = self.order(nodes)
        self.check_images_saved(nodes)
        return Template(name, description, self.file, params, nodes, order, output)

    def head(self, data: dict, stem: str) -> tuple[str, str]:
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

    def load_comfy(self, data: Any, stem: str, folder: Path) -> Template:
        """A ComfyUI template: its workflow file read and every binding checked."""
        data = self.keys(data, comfy.TEMPLATE_KEYS, "", "a ComfyUI template")
        name, description = self.head(data, stem)
        wf = data.get("workflow")
        if not isinstance(wf, str) or not wf.strip():
            self.fail("workflow", "expected the API-format workflow's file name, beside this "
                      'template (e.g. "portrait.workflow.json")')
        path = folder / wf
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except OSError as e:
            self.fail("workflow", f"cannot read {path}: {e.strerror or e}")
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            self.fail("workflow", f"{path} is not JSON: {e}")
        try:
            prompt = comfy.read_workflow(raw, str(path))
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
        return Template(name, description, self.file, params, {}, (), output, engine=comfy.ENGINE,
                        comfy=comfy.ComfyGraph(wf, prompt, targets))

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

    def check_node_ref(self, nodes, source: str, ref: NodeRef, inp: Input, path: str) -> None:
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
        deps = {nid: [e.node for expr in n.inputs.values() for e in _walk(expr)
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
                    for e in _walk(expr) if isinstance(e, NodeRef)}
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
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TemplateError(file, "", f"cannot read: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TemplateError(file, f"line {e.lineno} column {e.colno}",
                            f"not valid JSON: {e.msg}") from None
    if isinstance(data, dict) and data.get("engine") == comfy.ENGINE:
        return _Loader(file).load_comfy(data, path.stem, path.parent)
    return _Loader(file).load(data, path.stem)


def load_templates(folder: Path) -> tuple[dict[str, Template], list[TemplateError]]:
    """Every *.json in `folder`; a broken one is reported and the others still load. The
    ComfyUI workflows templates name (kept beside them) are not templates themselves."""
    templates, errors = {}, []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            templates[path.stem] = load_template(path)
        except TemplateError as e:
            errors.append(e)
    workflows = {(Path(folder) / t.comfy.file).resolve() for t in templates.values() if t.comfy}
    workflows |= {path.resolve() for path in Path(folder).glob("*.workflow.json")}
    return templates, [e for e in errors if Path(e.file).resolve() not in workflows]


# --- Binding -----------------------------------------------------------------------------

def safe_output_name(name: str, fmt: str | None = None) -> str:
    """A relative path that stays inside the batch's output folder, or Problem("output_…")."""
    def refuse(code: str, part: str = ""):
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


def _as_text(value: Any) -> str:
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
         extras: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fully resolved workflow for one row: stored on its job, enough to reproduce it.

    `values`: each parameter's typed value (see executor.params.coerce); a seed left
    empty (None) is drawn here and stored. `extras`: the row's other columns.
    Raises Problem("output_…") for an output name that would leave the batch folder.
    """
    values = dict(values)
    for p in t.params.values():
        if p.type == "seed" and values.get(p.name) is None:
            values[p.name] = secrets.randbelow(SEED_MAX + 1)
    variables = {normalize_header(k): _as_text(v) for k, v in (extras or {}).items()}
    variables = {**{n: variables.get(normalize_header(n), "") for n in t.columns},
                 **{n: _as_text(values.get(n)) for n in t.params},
                 "row": str(row), "template": t.name}
    if t.comfy is not None:  # a ComfyUI workflow: its images are named by the pattern
        return {"template": t.name, "engine": comfy.ENGINE, "row": row, "params": values,
                **comfy.bind_comfy(t.comfy, t.params, values),
                "outputs": {"images": safe_output_name(t.output.render(variables), "png")}}

    def value_of(expr: Any) -> Any:
        if isinstance(expr, ParamRef):
            return values.get(expr.name)
        if isinstance(expr, NodeRef):
            out = expr.output or next(iter(OPS[t.nodes[expr.node].op].outputs))
            return {"@": f"{expr.node}.{out}"}
        if isinstance(expr, Text):
            return expr.render(variables)
        if isinstance(expr, list):
            return [value_of(e) for e in expr]
        if isinstance(expr, dict):
            return {k: value_of(e) for k, e in expr.items()}
        return expr

    nodes, outputs = [], {}
    for nid in t.order:
        node = t.nodes[nid]
        inputs = {}
        for iname, spec in OPS[node.op].inputs.items():
            value = value_of(node.inputs[iname]) if iname in node.inputs else None
            if spec.type == "loras" and value:  # a row that leaves a LoRA blank uses none
                value = [lora for lora in value if lora.get("name")]
            if value is None and not spec.optional and spec.default is not REQUIRED:
                value = spec.default  # a blank cell falls back on the input's own default
            if iname in node.inputs or spec.default is not REQUIRED:
                inputs[iname] = value
        if node.op == "save":
            pattern = inputs.get("name") or t.output.render(variables)
            inputs["name"] = outputs[nid] = safe_output_name(pattern, inputs["format"])
        nodes.append({"id": nid, "op": node.op, "inputs": inputs})
    if len(set(outputs.values())) != len(outputs):
        raise Problem("output_same_in_row", name=", ".join(outputs.values()))
    return {"template": t.name, "row": row, "params": values, "nodes": nodes,
            "outputs": outputs}


def affinity(workflow: dict[str, Any]) -> str | None:
    """The model a bound workflow needs first: lets a claim prefer jobs for a loaded model.
    A ComfyUI job's is "comfyui:TEMPLATE": only ComfyUI executors that can run that
    template claim it."""
    if workflow.get("engine") == comfy.ENGINE:
        return comfy_affinity(workflow["template"])
    for node in workflow["nodes"]:
        if node["op"] == "generate" and isinstance(node["inputs"].get("model"), str):
            return node["inputs"]["model"]
    return None


def comfy_affinity(template: str) -> str:
    return f"{comfy.ENGINE}:{template}"
