"""One ComfyUI server's HTTP and WebSocket API, as its server.py speaks it.

Routes used: POST /prompt, GET /history/{prompt_id}, GET /queue, POST /queue (delete),
POST /interrupt, POST /upload/image, GET /view, GET /object_info, POST /free, and the
WebSocket /ws?clientId=. Whatever cannot reach the server, or a server error, is
`ServerDown` (not the row's fault: the job runs again, no attempt used); what ComfyUI
says is wrong with the prompt is `PromptRefused` (the row's fault: not retried).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp


class ServerDown(Exception):
    """The server cannot be reached, answered 5xx, or lost the prompt (a restart)."""


class PromptRefused(Exception):
    """ComfyUI refused the prompt (400): node errors, said as a person can act on them."""


class ComfyClient:
    def __init__(self, url: str, session: aiohttp.ClientSession, client_id: str):
        self.url, self.session, self.client_id = url.rstrip("/"), session, client_id

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON (or bytes, for /view) of a 2xx answer; ServerDown for anything that
        says the server is not there or broke; a 400's JSON is returned to the caller
        as ("refused", body)."""
        try:
            async with self.session.request(method, f"{self.url}{path}", **kwargs) as r:
                if r.status == 400:
                    try:
                        return ("refused", await r.json(content_type=None))
                    except (ValueError, aiohttp.ContentTypeError):
                        return ("refused", {"error": {"message": (await r.text())[:300]}})
                if r.status >= 300:
                    raise ServerDown(f"{method} {path}: HTTP {r.status} "
                                     f"{(await r.text())[:200]}".rstrip())
                if path.startswith("/view"):
                    return await r.read()
                text = await r.text()
                return json.loads(text) if text.strip() else None
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise ServerDown(f"{method} {path}: {type(e).__name__}: {e}".rstrip(": ")) from None
        except ValueError as e:  # not JSON: not a ComfyUI server, or a broken one
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
        sub = body.get("subfolder") or ""
        return f"{sub}/{body['name']}" if sub else body["name"]

    async def post_prompt(self, prompt: dict[str, Any], prompt_id: str,
                          extra: dict[str, Any]) -> str:
        """Queues the prompt under `prompt_id`; returns the id the server uses (a server
        from before client-made ids makes its own)."""
        body = await self._call("POST", "/prompt", json={
            "prompt": prompt, "client_id": self.client_id, "prompt_id": prompt_id,
            "extra_data": extra})
        if isinstance(body, tuple):
            raise PromptRefused(refusal(body[1], prompt))
        given = body.get("prompt_id") if isinstance(body, dict) else None
        return given if isinstance(given, str) and given else prompt_id

    async def history(self, prompt_id: str) -> dict[str, Any] | None:
        """The prompt's entry, or None while ComfyUI does not know it ({})."""
        body = await self._call("GET", f"/history/{prompt_id}")
        entry = body.get(prompt_id) if isinstance(body, dict) else None
        return entry if isinstance(entry, dict) else None

    async def queued(self, prompt_id: str) -> bool:
        """Is the prompt running or waiting on the server?"""
        body = await self._call("GET", "/queue")
        if not isinstance(body, dict):
            return False
        items = [*body.get("queue_running", []), *body.get("queue_pending", [])]
        return any(isinstance(i, list) and len(i) > 1 and i[1] == prompt_id for i in items)

    async def interrupt(self, prompt_id: str) -> None:
        """Stop the prompt if it runs (a server that predates per-prompt interrupts stops
        whatever runs, which is ours: one executor per server) and drop it if it waits."""
        await self._call("POST", "/interrupt", json={"prompt_id": prompt_id})
        await self._call("POST", "/queue", json={"delete": [prompt_id]})

    async def view(self, image: dict[str, Any]) -> bytes:
        params = {"filename": str(image.get("filename", "")),
                  "subfolder": str(image.get("subfolder", "")),
                  "type": str(image.get("type", "output"))}
        data = await self._call("GET", "/view", params=params)
        if not isinstance(data, bytes):
            raise ServerDown(f"GET /view {params['filename']}: no image")
        return data

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
    for nid, entry in (body.get("node_errors") or {}).items():
        if not isinstance(entry, dict):
            continue
        node = prompt.get(str(nid), {})
        title = (node.get("_meta") or {}).get("title") or node.get("class_type") or ""
        kind = entry.get("class_type") or node.get("class_type") or "?"
        said = "; ".join(
            ": ".join(str(x) for x in (e.get("message"), e.get("details")) if x)
            for e in entry.get("errors", []) if isinstance(e, dict)) or "refused"
        lines.append(f'node {nid} "{title}" ({kind}): {said}' if title and title != kind
                     else f"node {nid} ({kind}): {said}")
    error = body.get("error")
    if not lines:
        if isinstance(error, dict):
            text = ": ".join(str(x) for x in (error.get("message"), error.get("details")) if x)
        else:
            text = str(error or "refused")
        lines.append(text)
    return "ComfyUI refused the workflow: " + " · ".join(lines)
