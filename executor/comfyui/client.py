"""One ComfyUI server's HTTP and WebSocket API, as its server.py speaks it.

Routes used: POST /prompt, GET /history/{prompt_id}, GET /queue, POST /queue (delete),
POST /interrupt, POST /upload/image, GET /view, GET /object_info, POST /free, and the
WebSocket /ws?clientId=. Whatever cannot reach the server, or a server error, is
`ServerDown` (not the row's fault: the job runs again, no attempt used); what ComfyUI
says is wrong with the prompt is `PromptRefused` (the row's fault: not retried); an
answer that is not what ComfyUI answers there (a list where an object belongs, an odd
prompt id or file name, a file too big) is `OddAnswer` (the row fails, saying what).

A server is not trusted to write genbot's lines: every message these errors carry is made
one line (`one_line`), whatever text the server put in it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import aiohttp

from storage.names import UnsafeName, checked, one_line, shown

MAX_FILE = 1 << 30  # bytes: an output bigger than this is refused, not read into memory
PROMPT_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")  # a uuid, or an older server's own id


def kind(value: Any) -> str:
    """What a JSON value is, as a message says it."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return "null" if value is None else type(value).__name__


class _OneLine(Exception):
    def __init__(self, message: object):
        super().__init__(one_line(message))


class ServerDown(_OneLine):
    """The server cannot be reached, answered 5xx, or lost the prompt (a restart)."""


class PromptRefused(_OneLine):
    """ComfyUI refused the prompt (400): node errors, said as a person can act on them."""


class OddAnswer(_OneLine):
    """The server answered, but not as ComfyUI does: the row fails, naming what was odd."""


class ComfyClient:
    def __init__(self, url: str, session: aiohttp.ClientSession, client_id: str):
        self.url, self.session, self.client_id = url.rstrip("/"), session, client_id

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON of a 2xx answer; ServerDown for anything that says the server is not
        there or broke; a 400's JSON is returned to the caller as ("refused", body)."""
        try:
            async with self.session.request(method, f"{self.url}{path}", **kwargs) as r:
                if r.status == 400:
                    try:
                        return ("refused", await r.json(content_type=None))
                    except (ValueError, RecursionError, aiohttp.ContentTypeError):
                        return ("refused", {"error": {"message": (await r.text())[:300]}})
                if r.status >= 300:
                    raise ServerDown(f"{method} {path}: HTTP {r.status} "
                                     f"{(await r.text())[:200]}".rstrip())
                text = await r.text()
                return json.loads(text) if text.strip() else None
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise ServerDown(f"{method} {path}: {type(e).__name__}: {e}".rstrip(": ")) from None
        except (ValueError, RecursionError) as e:  # not JSON: not a ComfyUI server, or broken
            raise ServerDown(f"{method} {path}: not a ComfyUI answer ({e})") from None

    async def object_info(self) -> dict[str, Any]:
        info = await self._call("GET", "/object_info")
        if not isinstance(info, dict):  # (a refusal comes back as a tuple)
            raise ServerDown("GET /object_info: not a ComfyUI answer")
        return info

    async def upload_image(self, data: bytes, name: str) -> str:
        """Stores the picture in the server's input folder; the name to bind."""
        form = aiohttp.FormData()
        form.add_field("image", data, filename=name, content_type="image/png")
        form.add_field("overwrite", "true")
        form.add_field("type", "input")
        body = await self._call("POST", "/upload/image", data=form)
        if isinstance(body, tuple):
            raise PromptRefused(f"{body[1]!r:.200}")
        if not isinstance(body, dict) or "name" not in body:
            raise ServerDown(f"POST /upload/image {name}: not a ComfyUI answer")
        given, sub = body["name"], body.get("subfolder") or ""
        if not isinstance(given, str) or not isinstance(sub, str):
            raise OddAnswer(f"POST /upload/image {name}: the name it gives is "
                            f"{kind(given if not isinstance(given, str) else sub)}")
        stored = f"{sub}/{given}" if sub else given
        try:
            checked(stored, f"ComfyUI server {self.url}")
        except UnsafeName as e:
            raise OddAnswer(f"POST /upload/image {name}: {e}") from None
        return stored

    async def post_prompt(self, prompt: dict[str, Any], prompt_id: str,
                          extra: dict[str, Any]) -> str:
        """Queues the prompt under `prompt_id`; returns the id the server uses (a server
        from before client-made ids makes its own)."""
        body = await self._call("POST", "/prompt", json={
            "prompt": prompt, "client_id": self.client_id, "prompt_id": prompt_id,
            "extra_data": extra})
        if isinstance(body, tuple):
            raise PromptRefused(refusal(body[1], prompt))
        if not isinstance(body, dict):
            raise OddAnswer(f"POST /prompt: {kind(body)}, not an object")
        given = body.get("prompt_id")
        if given is None:
            return prompt_id
        if not isinstance(given, str) or not PROMPT_ID.fullmatch(given):
            raise OddAnswer(f'POST /prompt: the prompt_id "{shown(str(given))}" is no prompt id')
        return given

    async def history(self, prompt_id: str) -> dict[str, Any] | None:
        """The prompt's entry, or None while ComfyUI does not know it ({})."""
        body = await self._call("GET", f"/history/{prompt_id}")
        if not isinstance(body, dict):
            raise OddAnswer(f"GET /history/{prompt_id}: {kind(body)}, not an object")
        entry = body.get(prompt_id)
        if entry is not None and not isinstance(entry, dict):
            raise OddAnswer(f"the history entry is {kind(entry)}, not an object")
        return entry

    async def queued(self, prompt_id: str) -> bool:
        """Is the prompt running or waiting on the server?"""
        body = await self._call("GET", "/queue")
        if not isinstance(body, dict):
            raise OddAnswer(f"GET /queue: {kind(body)}, not an object")
        items = [i for key in ("queue_running", "queue_pending")
                 if isinstance(body.get(key), list) for i in body[key]]
        return any(isinstance(i, list) and len(i) > 1 and i[1] == prompt_id for i in items)

    async def interrupt(self, prompt_id: str) -> None:
        """Stop the prompt if it runs (a server that predates per-prompt interrupts stops
        whatever runs, which is ours: one executor per server) and drop it if it waits."""
        await self._call("POST", "/interrupt", json={"prompt_id": prompt_id})
        await self._call("POST", "/queue", json={"delete": [prompt_id]})

    async def view(self, filename: str, subfolder: str, folder: str) -> bytes:
        """A file the history names (its names checked by the caller), no bigger than
        MAX_FILE: a 4xx for it is odd (the history just named it), a 5xx the server's."""
        params = {"filename": filename, "subfolder": subfolder, "type": folder}
        too_big = f"GET /view answers more than {MAX_FILE >> 20} MB"
        try:
            async with self.session.get(f"{self.url}/view", params=params) as r:
                if 400 <= r.status < 500:
                    raise OddAnswer(f"GET /view: HTTP {r.status} for a file the history names")
                if r.status >= 300:
                    raise ServerDown(f"GET /view {filename}: HTTP {r.status}")
                if (r.content_length or 0) > MAX_FILE:
                    raise OddAnswer(too_big)
                data = bytearray()
                async for chunk in r.content.iter_chunked(1 << 20):
                    data += chunk
                    if len(data) > MAX_FILE:
                        raise OddAnswer(too_big)
                return bytes(data)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise ServerDown(f"GET /view {filename}: {type(e).__name__}: {e}".rstrip(": ")) \
                from None

    async def free(self) -> None:
        await self._call("POST", "/free", json={"unload_models": True, "free_memory": True})

    async def socket(self, timeout: float) -> aiohttp.ClientWebSocketResponse:
        try:
            return await self.session.ws_connect(
                f"{self.url}/ws", params={"clientId": self.client_id}, heartbeat=30,
                timeout=aiohttp.ClientWSTimeout(ws_close=timeout), max_msg_size=0)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise ServerDown(f"WebSocket /ws: {type(e).__name__}: {e}".rstrip(": ")) from None


def refusal(body: Any, prompt: dict[str, Any]) -> str:
    """ComfyUI's 400 as one line: each node's title, class and what it said."""
    body = body if isinstance(body, dict) else {}
    lines = []
    node_errors = body.get("node_errors")
    for nid, entry in (node_errors.items() if isinstance(node_errors, dict) else ()):
        if not isinstance(entry, dict):
            continue
        node = prompt.get(str(nid), {})
        title = (node.get("_meta") or {}).get("title") or node.get("class_type") or ""
        node_kind = entry.get("class_type") or node.get("class_type") or "?"
        errors = entry.get("errors")
        said = "; ".join(
            ": ".join(str(x) for x in (e.get("message"), e.get("details")) if x)
            for e in (errors if isinstance(errors, list) else ()) if isinstance(e, dict)) \
            or "refused"
        lines.append(f'node {nid} "{title}" ({node_kind}): {said}'
                     if title and title != node_kind else f"node {nid} ({node_kind}): {said}")
    error = body.get("error")
    if not lines:
        if isinstance(error, dict):
            text = ": ".join(str(x) for x in (error.get("message"), error.get("details")) if x)
        else:
            text = str(error or "refused")
        lines.append(text)
    return "ComfyUI refused the workflow: " + " · ".join(lines)
