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
import os
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
    """GET /object_info of a ComfyUI server (node class -> its inputs and their limits),
    read in chunks up to OBJECT_INFO_MAX_BYTES; else Invalid("object_info_failed") whose
    `why` says in words what went wrong. Asked here, not through the executor's client:
    the bot never imports the executor."""
    url = server.rstrip("/") + "/object_info"

    def failed(why: str) -> Invalid:
        return Invalid("object_info_failed", server=server, why=why)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http, \
                http.get(url) as answer:
            if answer.status != 200:
                status = f"{answer.status} {answer.reason or ''}".rstrip()
                raise failed(f"GET /object_info answered {status}")
            body = bytearray()
            async for chunk in answer.content.iter_chunked(2**16):
                body += chunk
                if len(body) > OBJECT_INFO_MAX_BYTES:
                    raise failed(f"its /object_info is larger than "
                                 f"{OBJECT_INFO_MAX_BYTES // 2**20} MiB")
    except TimeoutError:
        raise failed("no answer in 60 s") from None
    except aiohttp.ClientConnectorError as e:
        raise failed(f"cannot connect to {e.host}:{e.port} ({_reason(e.os_error)})") from None
    except (aiohttp.ClientError, OSError) as e:
        raise failed(f"the connection failed ({type(e).__name__})") from None
    try:
        info = json.loads(body)
    except (ValueError, RecursionError):
        info = None
    if not isinstance(info, dict):
        raise failed("its /object_info is not a ComfyUI answer (expected a JSON object of "
                     "node classes)")
    return info


def _reason(error: OSError) -> str:
    """"Connection refused", not the library's "Connect call failed ('10.0.0.2', 8188)"."""
    if error.errno and error.errno > 0:
        return os.strerror(error.errno)
    return error.strerror or type(error).__name__  # a name lookup's: "Name or service not known"


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
