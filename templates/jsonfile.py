"""Reading a JSON file that came from outside (a template, a ComfyUI workflow) so that
whatever it holds ends in one line saying what is wrong and where, never a traceback.

Bounded in size (read no further than the limit: a huge file is refused before it is
parsed), in nesting (json raises RecursionError deep down, and code that walks or copies
the result recurses too), and in encoding (UTF-8, a BOM allowed, as editors save it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from storage.names import shown

MAX_DEPTH = 64  # objects and lists inside one another; real templates and workflows use < 10
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)  # strings skipped, brackets counted


class JsonFileError(ValueError):
    """A file that is not usable JSON: `where` in it (a line, a JSON path; "" for the
    whole file) and what is wrong."""

    def __init__(self, file: str, where: str, message: str):
        self.file, self.where, self.message = file, where, message
        super().__init__(f"{file}: {where}: {message}" if where else f"{file}: {message}")


def read_json(path: Path, max_bytes: int, file: str | None = None) -> tuple[bytes, Any]:
    """The file's bytes and its JSON, or JsonFileError. `file`: how messages name it."""
    file = str(path) if file is None else file
    try:
        if path.exists() and not path.is_file():  # a folder, or a pipe that never ends
            raise OSError(0, "not a regular file")
        with path.open("rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as e:
        raise JsonFileError(file, "", f"cannot read: {e.strerror or e}") from None
    except ValueError as e:  # a NUL in the path
        raise JsonFileError(file, "", f"cannot read: {e}") from None
    if len(raw) > max_bytes:
        raise JsonFileError(file, "", f"larger than {_size(max_bytes)}, the most genbot reads "
                            "of such a file")
    return raw, parse_json(raw, file)


def parse_json(raw: bytes, file: str) -> Any:
    """JSON from bytes, checked for encoding and depth, or JsonFileError."""
    bom = 3 if raw.startswith(b"\xef\xbb\xbf") else 0  # as editors on Windows save UTF-8
    try:
        text = raw[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        at = bom + e.start
        line = raw[:at].count(b"\n") + 1
        raise JsonFileError(file, f"line {line}", f"not UTF-8 text (byte 0x{raw[at]:02x} "
                            f"at offset {at}): save it as UTF-8") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise JsonFileError(file, f"line {e.lineno} column {e.colno}",
                            f"not valid JSON: {e.msg}") from None
    except RecursionError:
        raise JsonFileError(file, _deep_spot(text), f"nested more than {MAX_DEPTH} deep") \
            from None
    too_deep = deeper_than(data, MAX_DEPTH)
    if too_deep is not None:
        raise JsonFileError(file, too_deep, f"nested more than {MAX_DEPTH} deep")
    return data


def deeper_than(data: Any, limit: int) -> str | None:
    """Where `data` first nests more than `limit` deep — the JSON path of its first three
    steps ("6.inputs.text": a workflow's node and input), enough to find it — or None."""
    stack: list[tuple[Any, int, tuple[str, ...]]] = [(data, 1, ())]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, dict):
            items: Any = ((str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            items = ((f"[{i}]", v) for i, v in enumerate(value))
        else:
            continue
        if depth > limit:
            return shown("".join(p if p.startswith("[") or not i else f".{p}"
                                 for i, p in enumerate(path))) or "the top"
        stack.extend((v, depth + 1, path if len(path) == 3 else path + (step,))
                     for step, v in items)
    return None


def _deep_spot(text: str) -> str:
    """Where `text` first nests more than MAX_DEPTH deep, as "line L column C"."""
    depth = 0
    for m in _TOKENS.finditer(text):
        token = m.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, m.start()) + 1
                column = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
                return f"line {line} column {column}"
        elif token in "]}":
            depth -= 1
    return ""


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n:,} bytes"
