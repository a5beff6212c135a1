"""What a ComfyUI server lacks to run a template: a node class, or a model file.

Asked of each server's /object_info when the executor connects, so a job never goes to
a server that would refuse it; the templates it cannot run are said in the log, the
worker registry (`cannot_run`), chat's /queue and the API.
"""

from __future__ import annotations

from typing import Any

from templates.comfy import is_link
from templates.graph import Template


def missing(template: Template, info: dict[str, Any]) -> str | None:
    """Why `template` cannot run on the server whose /object_info is `info`, or None."""
    assert template.comfy is not None
    graph = template.comfy
    bound = {(t.node, t.input): name for name, ts in graph.targets.items() for t in ts}
    for nid, node in graph.prompt.items():
        kind = node["class_type"]
        if kind not in info:
            return f'node {nid} "{graph.title(nid)}" needs {kind}, which this server lacks ' \
                   "(a custom node not installed?)"
        described = info[kind]
        spec = described.get("input") if isinstance(described, dict) else None
        spec = spec if isinstance(spec, dict) else {}
        inputs = {k: v for part in ("optional", "required")
                  if isinstance(spec.get(part), dict) for k, v in spec[part].items()}
        for name, value in node.get("inputs", {}).items():
            choices = _choices(inputs.get(name))
            if choices is None or is_link(value):
                continue
            param = bound.get((nid, name))
            if param is not None:
                p = template.params[param]
                if p.picture:
                    continue  # uploaded with each row
                wanted = list(p.choices) if p.type == "choice" else []
                if p.default is not None and p.default not in wanted:
                    wanted.append(p.default)
            else:
                wanted = [value]
            for want in wanted:
                if want not in choices:
                    return f'node {nid} "{graph.title(nid)}" ({kind}) needs {name} = ' \
                           f'"{want}", which this server does not have'
    return None


def _choices(spec: Any) -> list | None:
    """The values a choice input takes, in either of ComfyUI's ways of saying it."""
    if not isinstance(spec, list) or not spec:
        return None
    if isinstance(spec[0], list):
        return spec[0]
    if spec[0] == "COMBO" and len(spec) > 1 and isinstance(spec[1], dict):
        options = spec[1].get("options")
        return options if isinstance(options, list) else None
    return None
