"""Template expressions: what a node input, an output pattern or a {field} may say.

  "$name"            the whole parameter, keeping its type
  "@node", "@n.out"  another node's output
  "a {name} b"       text with parameters, extra columns, {row} or {template} inside;
                     {{ and }} are literal braces
  "$$x", "@@x"       a literal "$x", "@x"
  anything else      a literal
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NODE_REF = re.compile(r"@([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?")
BUILTINS = ("row", "template")


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




def walk(expr: Any) -> Iterator[Any]:
    yield expr
    if isinstance(expr, list):
        for item in expr:
            yield from walk(item)
    elif isinstance(expr, dict):
        for item in expr.values():
            yield from walk(item)

