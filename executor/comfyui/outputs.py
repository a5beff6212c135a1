"""A ComfyUI job's outputs as genbot stores them: what the history entry lists, checked;
each file named by the template and by what its bytes are; genbot's metadata written into
each PNG beside ComfyUI's own (its pixels are not encoded again).

The history entry is the server's word, and a server can be broken or hostile: every part
of it is checked for the shape ComfyUI gives it, every node id and file name before it is
used (storage.names), and whatever is odd is an `OddAnswer` naming the node and the file.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from executor import VERSION
from executor.comfyui.client import OddAnswer, kind
from storage.media import JPEG, Media
from storage.names import UnsafeName, checked, shown
from templates.jobs import ComfyJob

NODE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}")  # "9", and expanded ids ("12:5")
FOLDERS = ("output", "temp", "input")  # where /view reads from


@dataclass(frozen=True)
class Listed:
    """One file an output node made, as the history names it."""
    node: str
    label: str  # "node 9 (SaveImage)", for messages
    filename: str
    subfolder: str
    folder: str  # ComfyUI's "type"


def metadata(job: ComfyJob, batch: int, prompt: dict[str, Any], prompt_id: str, server: str,
             seeds: list[str]) -> dict:
    """What a saved image carries, as for diffusers jobs: enough to make it again.
    `seeds`: the template's seed parameters."""
    params = job.params
    return {"genbot": VERSION, "engine": "comfyui", "template": job.template, "row": job.row,
            "batch": batch, "params": params,
            "seeds": [params[n] for n in seeds if params.get(n) is not None],
            "server": server, "prompt_id": prompt_id, "workflow": prompt}


def status(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry's status ({} for servers from before 2024, which keep none)."""
    found = entry.get("status")
    if found is None:
        return {}
    if not isinstance(found, dict):
        raise OddAnswer(f"the history entry's status is {kind(found)}, not an object")
    return found


def messages(found: dict[str, Any]) -> list:
    said = found.get("messages")
    if said is None:
        return []
    if not isinstance(said, list):
        raise OddAnswer(f"the history entry's status messages are {kind(said)}, not a list")
    return said


def listed(entry: dict[str, Any], prompt: dict[str, Any], server: str) -> list[Listed]:
    """Every file the entry's output nodes name, nodes in id order, each checked."""
    outputs = entry.get("outputs")
    if outputs is None:
        return []
    if not isinstance(outputs, dict):
        raise OddAnswer(f"the history entry's outputs are {kind(outputs)}, not an object")
    for nid in outputs:
        if not NODE_ID.fullmatch(nid):
            raise OddAnswer(f'the history names an output of node "{shown(nid)}", which is no '
                            "node id")
    source = f"ComfyUI server {server}"
    found = []
    for nid in sorted(outputs, key=node_order):
        node = prompt.get(nid)
        label = f"node {nid} ({node['class_type']})" if isinstance(node, dict) and \
            isinstance(node.get("class_type"), str) else f"node {nid}"
        out = outputs[nid]
        if not isinstance(out, dict):
            raise OddAnswer(f"{label}: its output is {kind(out)}, not an object")
        images = out.get("images")
        if images is None:
            continue  # (a node's other outputs: text, latents …)
        if not isinstance(images, list):
            raise OddAnswer(f"{label}: its images are {kind(images)}, not a list")
        for image in images:
            found.append(_file(image, label, nid, source))
    return found


def _file(image: Any, label: str, nid: str, source: str) -> Listed:
    if not isinstance(image, dict):
        raise OddAnswer(f"{label}: an image is {kind(image)}, not an object")
    said = {"filename": image.get("filename"), "subfolder": image.get("subfolder", ""),
            "type": image.get("type", "output")}
    for what, value in said.items():
        if not isinstance(value, str):
            raise OddAnswer(f"{label}: an image's {what} is {kind(value)}, not a string")
    name, sub, folder = str(said["filename"]), str(said["subfolder"]), str(said["type"])
    try:
        checked(name, source)
        if sub:
            checked(sub, source)
    except UnsafeName as e:
        raise OddAnswer(f"{label}: {e}") from None
    if folder not in FOLDERS:
        raise OddAnswer(f'{label}: {name}: its type is "{shown(folder)}", not '
                        f"{', '.join(FOLDERS[:-1])} or {FOLDERS[-1]}")
    return Listed(nid, label, name, sub, folder)


def node_order(node_id: str) -> tuple:
    """Numbered nodes in number order, then the rest by name ("²" is a digit to
    str.isdigit, not to int)."""
    numbered = node_id.isascii() and node_id.isdigit()
    return (0, int(node_id), "") if numbered else (1, 0, node_id)


def named(name: str, media: Media) -> str:
    """The template's name for an output with the suffix its bytes say (a JPEG keeps a
    .jpeg the template chose)."""
    path = PurePosixPath(name)
    if media is JPEG and path.suffix.lower() in (".jpg", ".jpeg"):
        return name
    return str(path.with_suffix(media.suffix))


PNG = b"\x89PNG\r\n\x1a\n"


def with_text(png: bytes, key: str, text: str) -> bytes:
    """`png` with one more iTXt chunk, before its pixels (where readers look first):
    ComfyUI's own chunks (its prompt and workflow) stay, and the pixels are not encoded
    again."""
    body = key.encode("latin-1") + b"\0\0\0\0\0" + text.encode("utf-8")
    chunk = struct.pack(">I", len(body)) + b"iTXt" + body + \
        struct.pack(">I", zlib.crc32(b"iTXt" + body) & 0xFFFFFFFF)
    at = len(PNG)
    while at + 8 <= len(png):  # chunk by chunk: "IDAT" may also be words in a text chunk
        size, name = struct.unpack(">I4s", png[at:at + 8])
        if name == b"IDAT":
            return png[:at] + chunk + png[at:]
        at += 12 + size
    return png


def numbered(name: str, n: int) -> str:
    path = PurePosixPath(name)
    return str(path.with_name(f"{path.stem}-{n}{path.suffix}"))
