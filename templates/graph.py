"""A loaded template: its parameters, its nodes in the order they run, its output names.

Made by templates.loader from a checked JSON file; never changed afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from templates.comfy import ComfyGraph
from templates.expressions import BUILTINS, Text, walk
from templates.params import Param, normalize_header
from templates.signatures import OPS


@dataclass(frozen=True)
class Node:
    id: str
    op: str
    inputs: dict[str, Any]  # input name -> expression


@dataclass(frozen=True)
class Keep:
    """A product kept exactly as photographed: its picture's pixels put back over every
    image the template (or an action on its images) makes, inside the product's mask (the
    picture's transparency, or a mask column), the edge blended `blend` px inward, an
    optional soft contact shadow under it."""
    picture: str  # the image parameter holding the product photo
    mask: str | None = None  # an image parameter whose white is the product; None: the alpha
    blend: int = 2  # px of edge blended inward; the mask's interior beyond it is exact
    shadow: float = 0.0  # 0 none … 1 darkest: a soft shadow just below the product


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
    comfy: ComfyGraph | None = None
    vary_strength: float | None = None  # img2img strength of a "vary"; None: the default
    vary_image: str | None = None  # ComfyUI: the image parameter a "vary" feeds; None: the first
    keep: Keep | None = None  # a product photo put back exactly over what it makes
    version: str = ""  # the hash of its file(s) when loaded (templates.loader.version_of)
    number: int = 0  # its version's number (storage.versions); 0 until recorded
    source: Any = field(default=None, compare=False, repr=False)  # the file's JSON, as read

    def param_for(self, key: str) -> Param | None:
        """The parameter a person means by `key`: its name or any of its headers."""
        wanted = normalize_header(key)
        for p in self.params.values():
            if wanted in (normalize_header(n) for n in (p.name, *p.aliases)):
                return p
        return None

    @property
    def columns(self) -> set[str]:
        """Names used in {text} that are neither parameters nor built-ins: sheet columns."""
        names = set(self.output.names)
        for node in self.nodes.values():
            for expr in node.inputs.values():
                names.update(n for e in walk(expr) if isinstance(e, Text) for n in e.names)
        return names - set(self.params) - set(BUILTINS)

    @property
    def models(self) -> list[str]:
        """Literal model names the template uses (e.g. to check them against the config)."""
        return [e for node in self.nodes.values()
                for name, expr in node.inputs.items()
                if OPS[node.op].inputs[name].type == "model"
                for e in walk(expr) if isinstance(e, str) and e]

