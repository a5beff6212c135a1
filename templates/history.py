"""What changed between two versions of a template: its parameters, its nodes and their
inputs, its ComfyUI workflow — one line per change, by JSON path, as `genbot template
diff` prints it."""

from __future__ import annotations

import json
from typing import Any

SHOWN = 80  # characters of a value shown


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`old` → `new` (storage.versions contents): "+ path = value", "- path = value",
    "~ path: old → new", in path order."""
    a, b = _flat(old.get("template") or {}), _flat(new.get("template") or {})
    a.update(_flat(old.get("workflow") or {}, "workflow"))
    b.update(_flat(new.get("workflow") or {}, "workflow"))
    lines = []
    for path in sorted(a.keys() | b.keys()):
        if path not in a:
            lines.append(f"+ {path} = {_shown(b[path])}")
        elif path not in b:
            lines.append(f"- {path} = {_shown(a[path])}")
        elif a[path] != b[path]:
            lines.append(f"~ {path}: {_shown(a[path])} → {_shown(b[path])}")
    return lines


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"params.steps.max": 100, …}: every leaf by its path (a list is one leaf)."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flat(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN else text[:SHOWN - 1] + "…"
