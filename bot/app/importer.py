"""A ComfyUI workflow made a template, for chat and the API (`genbot template import` is
the command line's): an admin sends the workflow — API format, UI format, or a PNG/WebP
ComfyUI saved — and names the template. A UI-format one is converted with the
/object_info of the first of [comfyui] servers, which also gives the columns' limits
and the checkpoint and LoRA files to choose from (templates.comfy_ui, templates.comfy).
The files are installed as the command line installs them (templates.install): loaded
first, nothing half-written, a replaced template kept until the new one is in place.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

import aiohttp

from bot.errors import Conflict, Invalid
from storage.config import Config
from templates.comfy import WorkflowError, import_workflow
from templates.comfy_ui import HOW, api_workflow, shared
from templates.graph import Template
from templates.install import InstallError, install_template
from templates.settings import ComfyUIConfig, TemplatesConfig, templates_dir

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
OBJECT_INFO_MAX_BYTES = 256 * 2**20  # a server with many custom nodes answers megabytes


@dataclass(frozen=True)
class Imported:
    template: Template
    columns: list[str]  # one line per column: what it sets
    how: str  # what the file held: the API format, the UI format, a picture's workflow


async def object_info(server: str) -> dict[str, Any]:
    """GET /object_info of a ComfyUI server, or Invalid saying why it cannot be had."""
    url = server.rstrip("/") + "/object_info"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http, \
                http.get(url) as answer:
            if answer.status != 200:
                raise Invalid("object_info_failed", server=server,
                              why=f"GET /object_info answered {answer.status}")
            body = await answer.content.read(OBJECT_INFO_MAX_BYTES + 1)
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        raise Invalid("object_info_failed", server=server,
                      why=f"cannot connect: {type(e).__name__}") from None
    if len(body) > OBJECT_INFO_MAX_BYTES:
        raise Invalid("object_info_failed", server=server, why="its answer is too large")
    try:
        info = json.loads(body)
    except ValueError:
        info = None
    if not isinstance(info, dict):
        raise Invalid("object_info_failed", server=server, why="its answer is not an object")
    return info


async def import_template(config: Config, templates: dict[str, Template], name: str,
                          file: str, raw: bytes, *, replace: bool = False) -> Imported:
    """Install the workflow in `raw` (sent as `file`) as template `name`; Invalid or
    Conflict, one sentence, with nothing changed."""
    if not config[TemplatesConfig].dir:  # never into the templates shipped in the package
        raise Invalid("template_dir_unset")
    if not NAME.fullmatch(name):
        raise Invalid("template_name_bad", name=name[:80])
    if name in templates and not replace:
        raise Conflict("template_exists", name=name)
    try:
        kind, data = shared(raw, file)
        servers = config[ComfyUIConfig].servers
        info = await object_info(servers[0]) if servers else None
        kept, prompt = api_workflow(raw, kind, data, info, file)
        template, said = import_workflow(prompt, file, name, info)
    except WorkflowError as e:
        raise Invalid("workflow_refused", why=str(e)) from None
    files = {template["workflow"]: kept,
             f"{name}.json": (json.dumps(template, indent=2, ensure_ascii=False) + "\n").encode()}
    try:
        installed = await asyncio.to_thread(install_template, templates_dir(config), name, files)
    except InstallError as e:
        raise Invalid("workflow_refused", why=str(e)) from None
    return Imported(installed, said, HOW[kind])
