"""The ComfyUI executor: genbot's queue above a team's own ComfyUI server.

ComfyUI's own queue is lost on restart and has no fairness; genbot's is durable and
fair, so ComfyUI gets one prompt at a time from here. One executor per server (a
supervised child of `genbot serve` for each of `[comfyui] servers`, or `genbot worker
--comfyui URL`). Read `ComfyWorker.run` top to bottom:

  connect: /object_info says which templates this server can run (every node class and
           model file they need); their jobs are the only ones it claims
  claim -> upload the row's pictures (once each, by content) -> POST /prompt with a
           genbot-made prompt_id -> follow the WebSocket (progress, the end) while
           heartbeating and watching for a cancel -> read the outcome from /history
           (never from silence) -> fetch each image by /view -> store it with genbot's
           metadata -> complete

A server that is down, restarts or loses the prompt is not the row's fault: the job
goes back to the queue without using an attempt and the executor backs off, saying
"server down" in the worker registry. Nothing here loads torch.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import socket
import struct
import sys
import time
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import aiohttp

from executor import VERSION
from executor.comfy_client import ComfyClient, PromptRefused, ServerDown
from executor.comfy_template import is_link
from executor.workflow import Template, comfy_affinity, load_templates
from storage.config import Config
from storage.files import FileStore, batch_folder, open_store
from storage.logs import setup_logging
from storage.queue import Lease, Queue, open_queue
from storage.workers import Workers, owner_name

log = logging.getLogger("genbot.comfyui")

EXIT_RECYCLE = 75  # as executor.worker: "start me again"
TICK = 0.25  # seconds between looks at cancels, progress and the socket while a job runs
SILENCE = 5.0  # seconds without a word on the socket before /history is asked anyway
LOST_LIMIT = 3  # a row whose prompt the server loses this often fails (a crashing node?)
OOM = re.compile(r"out of memory|OutOfMemory|Allocation on device", re.IGNORECASE)


class Canceled(Exception):
    """Someone canceled the job; it is recorded already."""


class LeaseLost(Exception):
    """Another executor may run the job now: this one records nothing."""


class RowFailed(Exception):
    def __init__(self, message: str, *, retry: bool, oom: bool = False):
        super().__init__(message)
        self.retry, self.oom = retry, oom


@dataclass
class Prompt:
    """What the socket has said about one prompt."""
    id: str
    step: int = 0
    total: int = 0
    node: str = ""  # executing now
    step_node: str = ""  # whose steps `step` counts
    heard: float = field(default_factory=time.monotonic)
    ended: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class ComfyWorker:
    config: Config
    queue: Queue
    url: str
    owner: str = field(default_factory=owner_name)

    def __post_init__(self):
        self.url = self.url.rstrip("/")
        self.settings = self.config.comfyui
        self.store: FileStore = open_store(self.config)
        self.workers = Workers.of(self.queue)
        self.client_id = uuid.uuid4().hex
        self.stopping = asyncio.Event()
        self.templates = {n: t for n, t in load_templates(self.config.templates_dir)[0].items()
                          if t.comfy is not None}
        self.runnable: list[str] = []  # affinities of the templates this server can run
        self.cannot: dict[str, str] = {}  # template -> why it cannot run here
        self.prompts: dict[str, Prompt] = {}
        self.uploaded: dict[str, str] = {}  # picture sha256 -> its name on the server
        self.reader: asyncio.Task | None = None
        self.down: str | None = "not connected yet"
        self.failures = 0
        self.job: int | None = None
        self.stats: Counter = Counter()
        self.lost: Counter = Counter()  # job id -> times the server lost its prompt
        self.started_at = time.time()
        self.exit_code = 0

    # --- the loop --------------------------------------------------------------------
    async def run(self) -> int:
        timeout = aiohttp.ClientTimeout(total=None, connect=self.settings.connect_timeout,
                                        sock_read=max(60.0, self.settings.connect_timeout))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self.client = ComfyClient(self.url, session, self.client_id)
            beating = asyncio.create_task(self.beat_forever())
            try:
                while not self.stopping.is_set():
                    if not await self.connected():
                        await self.sleep(self.backoff())
                        continue
                    lease = await self.queue.claim(self.owner, only=self.runnable, engine=True) \
                        if self.runnable else None
                    if lease is None:
                        await self.idle()
                        continue
                    await self.execute(lease)
                    await self.hygiene()
                    if self.exit_code:
                        break
                    if self.config.queue.batch_delay:
                        await self.sleep(self.config.queue.batch_delay)
            finally:
                beating.cancel()
                if self.reader:
                    self.reader.cancel()
                with contextlib.suppress(Exception):  # the database may be what failed
                    await self.workers.stopped(self.owner)
        return self.exit_code

    async def connected(self) -> bool:
        """The socket is open and this server's templates are known; else (re)connect:
        check what it can run (/object_info), open the socket. False: it is down."""
        if self.reader is not None and not self.reader.done() and self.down is None:
            return True
        try:
            info = await self.client.object_info()
            ws = await self.client.socket(self.settings.connect_timeout)
        except ServerDown as e:
            await self.went_down(str(e))
            return False
        self.placement(info)
        self.uploaded.clear()  # a new server (or a restarted one) may not have them
        self.reader = asyncio.create_task(self.read(ws))
        if self.down is not None:
            log.info("ComfyUI server connected", extra={
                "server": self.url, "runs": sorted(self.templates.keys() - self.cannot.keys()),
                "cannot_run": self.cannot})
        self.down, self.failures = None, 0
        await self.beat()
        return True

    def placement(self, info: dict[str, Any]) -> None:
        """Which templates this server can run: every node class, and every file a choice
        input names (checkpoints, LoRAs, pictures not bound to a column), on it."""
        cannot = {name: why for name, t in self.templates.items() if (why := missing(t, info))}
        for name, why in cannot.items():
            if self.cannot.get(name) != why:
                log.warning("template cannot run on this ComfyUI server; its jobs are left to "
                            "others", extra={"template": name, "server": self.url, "why": why})
        self.cannot = cannot
        self.runnable = [comfy_affinity(n) for n in sorted(self.templates) if n not in cannot]

    async def went_down(self, why: str) -> None:
        self.failures += 1
        if self.down is None or self.failures == 1:
            log.warning("ComfyUI server down; retrying with backoff",
                        extra={"server": self.url, "error": why,
                               "retry_in": round(self.backoff(), 1)})
        self.down = why
        if self.reader is not None:
            self.reader.cancel()
            self.reader = None
        await self.beat()

    def backoff(self) -> float:
        return min(self.settings.backoff_max, 2.0 ** max(0, self.failures - 1))

    async def idle(self) -> None:
        waiting = asyncio.ensure_future(self.queue.wait_for_work())
        stopping = asyncio.ensure_future(self.stopping.wait())
        # (the reader ends when the socket closes: then reconnect at once)
        await asyncio.wait({t for t in (waiting, stopping, self.reader) if t},
                           return_when=asyncio.FIRST_COMPLETED)
        for task in (waiting, stopping):
            task.cancel()

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    # --- the socket ------------------------------------------------------------------
    async def read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """Every message, to the prompt it is about. Returns when the socket closes."""
        try:
            async with ws:
                async for msg in ws:
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        continue  # binary previews
                    with contextlib.suppress(ValueError, AttributeError, TypeError):
                        self.heard(json.loads(msg.data))
        except (aiohttp.ClientError, OSError) as e:
            log.info("ComfyUI socket closed: %s", e, extra={"server": self.url})

    def heard(self, message: dict[str, Any]) -> None:
        kind, data = message.get("type"), message.get("data") or {}
        prompt = self.prompts.get(str(data.get("prompt_id")))
        if prompt is None:
            return
        prompt.heard = time.monotonic()
        if kind == "progress":
            prompt.step, prompt.total = int(data.get("value", 0)), int(data.get("max", 0))
            prompt.step_node = str(data.get("node") or prompt.node)
        elif kind == "executing":
            if data.get("node") is None:
                prompt.ended.set()  # (older servers end a prompt so)
            else:
                prompt.node = str(data["node"])
        elif kind in ("execution_success", "execution_error", "execution_interrupted"):
            prompt.ended.set()

    # --- one job ---------------------------------------------------------------------
    async def execute(self, lease: Lease) -> None:
        self.job = lease.job_id
        await self.beat()
        started = time.monotonic()
        extra = {"batch": lease.batch_id, "job": lease.job_id, "server": self.url}
        try:
            outputs = await self.generate(lease)
        except ServerDown as e:
            self.lost[lease.job_id] += 1
            if self.lost[lease.job_id] >= LOST_LIMIT:  # the row itself may bring it down
                await self.queue.fail(lease, f"the ComfyUI server went down {LOST_LIMIT} times "
                                      f"while running this row (last: {e})", retry=False)
            else:
                await self.queue.release(lease, f"ComfyUI server {self.url} down: {e}; the "
                                         "job will run again")
            if self.down is None:
                await self.went_down(str(e))
        except RowFailed as e:
            status = await self.queue.fail(lease, str(e), retry=e.retry)
            log.warning("job failed", extra={**extra, "status": status, "error": str(e)})
        except (Canceled, LeaseLost):
            pass
        else:
            status = await self.queue.complete(lease, outputs)
            log.info("job done", extra={**extra, "status": status, "outputs": outputs,
                                        "seconds": round(time.monotonic() - started, 3)})
        finally:
            self.job = None
        self.stats["jobs"] += 1

    async def generate(self, lease: Lease) -> list[str]:
        """The row's images, stored; an out-of-memory error is tried once more after the
        server frees its memory (as the diffusers executor retries at batch size 1)."""
        try:
            return await self.attempt(lease)
        except RowFailed as e:
            if not e.oom:
                raise
            log.warning("out of memory on the ComfyUI server; freeing it and trying once more",
                        extra={"job": lease.job_id, "server": self.url})
            await self.client.free()
            try:
                return await self.attempt(lease)
            except RowFailed as again:
                raise RowFailed(f"{again} (out of memory, also after freeing the server's "
                                "memory)", retry=False) from None

    async def attempt(self, lease: Lease) -> list[str]:
        workflow = lease.workflow
        prompt = json.loads(json.dumps(workflow["prompt"]))  # a copy to fill in
        for node, name, stored in workflow.get("uploads", []):
            try:
                prompt[node]["inputs"][name] = await self.upload(stored)
            except PromptRefused as e:
                raise RowFailed(f"the ComfyUI server refused the picture for {node}.{name}: "
                                f"{e}", retry=True) from None
        pid = str(uuid.uuid4())
        state = self.prompts[pid] = Prompt(pid)
        try:
            given = await self.client.post_prompt(prompt, pid, {"genbot": {
                "job": lease.job_id, "batch": lease.batch_id, "row": lease.row}})
        except PromptRefused as e:
            del self.prompts[pid]
            raise RowFailed(str(e), retry=False) from None
        if given != pid:  # an older server named it itself
            self.prompts[given] = self.prompts.pop(pid)
            pid = state.id = given
        try:
            entry = await self.follow(lease, state, prompt)
        finally:
            self.prompts.pop(pid, None)
        return await self.save(lease, entry, prompt, pid)

    async def follow(self, lease: Lease, state: Prompt, prompt: dict[str, Any]) -> dict:
        """Until the prompt's /history entry says it ended: progress out, heartbeats in,
        cancels and timeouts acted on, a dropped socket re-opened."""
        s, started = self.config.queue, time.monotonic()
        beat = last_progress = time.monotonic()
        shown = (0, 0)
        check_at = float("inf")  # when to ask /history again after an end it did not show
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.ended.wait(), TICK)
            now = time.monotonic()
            if (state.step, state.total) != shown and state.total and (
                    state.step == state.total
                    or now - last_progress >= self.config.executor.progress_interval):
                shown, last_progress = (state.step, state.total), now
                node = prompt.get(state.step_node, {})
                title = (node.get("_meta") or {}).get("title") or node.get("class_type") or "?"
                await self.queue.progress(lease, {"node": title, "step": state.step,
                                                  "total": state.total, "row": lease.row})
            if now - beat >= s.heartbeat_seconds:
                beat = now
                if not (await self.queue.heartbeat(lease)).held:
                    await self.stop_prompt(state.id)
                    log.warning("lease lost: another executor may run the job",
                                extra={"job": lease.job_id})
                    raise LeaseLost
            if lease.job_id in await self.queue.cancels_asked(self.owner) or \
                    self.stopping.is_set():
                await self.stop_prompt(state.id)
                if self.stopping.is_set():
                    await self.queue.release(lease, "executor stopped; the job will run again")
                else:
                    await self.queue.fail(lease, f"canceled at step {state.step} of "
                                          f"{state.total}", retry=False)
                    log.info("job canceled", extra={"job": lease.job_id, "step": state.step})
                raise Canceled
            if now - started > self.config.executor.job_timeout:
                await self.stop_prompt(state.id)
                raise RowFailed(f"timed out after {self.config.executor.job_timeout:g} s "
                                "([executor] job_timeout)", retry=False)
            socket_gone = self.reader is None or self.reader.done()
            if socket_gone and not await self.connected():
                raise ServerDown(self.down or "the socket closed")
            if state.ended.is_set() or socket_gone or now - state.heard > SILENCE \
                    or now >= check_at:
                entry = await self.outcome(state)
                if entry is not None:
                    return entry
                check_at = now + 0.5 if state.ended.is_set() else float("inf")
                state.ended.clear()
                state.heard = now

    async def outcome(self, state: Prompt) -> dict | None:
        """The prompt's /history entry once it has ended; None while it runs or waits.
        ComfyUI writes history just after the socket says the prompt ended, so an empty
        answer is asked again before anything is concluded; a prompt neither in the
        history nor in the queue was lost (a restart)."""
        for wait in (0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.5):
            await asyncio.sleep(wait)
            entry = await self.client.history(state.id)
            status = (entry or {}).get("status") or {}
            if entry is not None and ("status" not in entry or status.get("completed") or
                                      status.get("status_str") in ("success", "error")):
                return entry  # (servers before 2024 keep no status: in the history = ended)
            if await self.client.queued(state.id):
                return None  # running or waiting: silence is not an end
        raise ServerDown("the server no longer knows the prompt (it restarted?)")

    async def stop_prompt(self, prompt_id: str) -> None:
        with contextlib.suppress(ServerDown):
            await self.client.interrupt(prompt_id)

    async def upload(self, stored: str) -> str:
        """A stored picture's name on the server: sent once per content."""
        data = await asyncio.to_thread(self.store.path(stored).read_bytes)
        digest = hashlib.sha256(data).hexdigest()
        if digest not in self.uploaded:
            self.uploaded[digest] = await self.client.upload_image(
                data, f"genbot-{digest[:24]}{PurePosixPath(stored).suffix or '.png'}")
        return self.uploaded[digest]

    async def save(self, lease: Lease, entry: dict, prompt: dict[str, Any],
                   pid: str) -> list[str]:
        """Each image the workflow's output nodes made, fetched and stored under the
        template's name for it; or the row's error, as ComfyUI said it."""
        status = entry.get("status") or {}
        if status.get("status_str") == "error":
            raise failure(status.get("messages") or [])
        images = [img for _, out in sorted((entry.get("outputs") or {}).items(),
                                           key=lambda kv: _order(kv[0]))
                  for img in (out.get("images") or []) if isinstance(img, dict)]
        if not images:
            raise RowFailed("the workflow made no image (does it end in a SaveImage or "
                            "PreviewImage node?)", retry=False)
        base = lease.workflow["outputs"]["images"]
        template = self.templates.get(lease.workflow.get("template", ""))
        seeds = [n for n, p in template.params.items() if p.type == "seed"] if template else []
        meta = metadata(lease, prompt, pid, self.url, seeds)
        paths = []
        for i, image in enumerate(images):
            data = await self.client.view(image)
            name = base if i == 0 else _numbered(base, i + 1)
            suffix = PurePosixPath(str(image.get("filename", ""))).suffix.lower()
            if data[:8] == PNG:
                data = with_text(data, "genbot", json.dumps(meta, ensure_ascii=False,
                                                            separators=(",", ":")))
            elif suffix:  # another format (a custom save node): kept as made
                name = str(PurePosixPath(name).with_suffix(suffix))
            paths.append(await asyncio.to_thread(
                self.store.write, f"{batch_folder(lease.batch_id)}/{name}", data))
        return paths

    # --- between jobs ----------------------------------------------------------------
    async def hygiene(self) -> None:
        jobs = self.stats["jobs"]
        every = self.settings.free_after_jobs
        if every and jobs % every == 0:
            with contextlib.suppress(ServerDown):
                await self.client.free()
                log.info("asked the ComfyUI server to free its memory",
                         extra={"server": self.url, "jobs": jobs})
        limit = self.config.executor.recycle_after_jobs
        if limit and jobs >= limit:
            with contextlib.suppress(ServerDown):
                await self.client.free()
            log.info("recycling the executor", extra={"jobs": jobs})
            self.exit_code = EXIT_RECYCLE

    async def beat_forever(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(self.config.queue.heartbeat_seconds)

    async def beat(self) -> None:
        """This executor's row in the registry: the server it drives, the templates it
        takes, and "server down" while it cannot reach it."""
        doing = {"what": "server_down", "models": [self.url]} if self.down else None
        try:
            await self.workers.beat(
                self.owner, host=socket.gethostname(), pid=os.getpid(), device=self.url,
                version=VERSION, job=self.job, allow=self.runnable, started_at=self.started_at,
                stats={"doing": doing, "jobs": self.stats["jobs"], "engine": "comfyui",
                       "server_error": self.down, "cannot_run": self.cannot})
        except Exception as e:  # noqa: BLE001 - the database away for a moment: next beat
            log.warning("cannot write to the worker registry: %s", e)


# --- what a server lacks ------------------------------------------------------------------

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
        spec = info[kind].get("input") or {}
        inputs = {**(spec.get("optional") or {}), **(spec.get("required") or {})}
        for name, value in node.get("inputs", {}).items():
            choices = _choices(inputs.get(name))
            if choices is None or is_link(value):
                continue
            param = bound.get((nid, name))
            if param is not None:
                p = template.params[param]
                if p.type == "image":
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


def failure(messages: list) -> RowFailed:
    """The row's error from a history entry's messages: the node, its class and what it
    raised; an interrupt nobody here asked for (someone in ComfyUI's UI) runs again."""
    for kind, data in (m for m in messages if isinstance(m, list) and len(m) == 2):
        if kind == "execution_error" and isinstance(data, dict):
            text = f"{data.get('exception_type', 'error')}: {data.get('exception_message', '')}"
            oom = bool(OOM.search(text))
            return RowFailed(f"node {data.get('node_id')} ({data.get('node_type')}): "
                             f"{text.strip()}", retry=False, oom=oom)
        if kind == "execution_interrupted":
            return RowFailed("interrupted on the ComfyUI server", retry=True)
    return RowFailed("ComfyUI says the prompt failed, without saying why", retry=True)


def metadata(lease: Lease, prompt: dict[str, Any], prompt_id: str, server: str,
             seeds: list[str]) -> dict:
    """What a saved image carries, as for diffusers jobs: enough to make it again.
    `seeds`: the template's seed parameters."""
    wf = lease.workflow
    params = wf.get("params") or {}
    return {"genbot": VERSION, "engine": "comfyui", "template": wf.get("template"),
            "row": wf.get("row"), "batch": lease.batch_id, "params": params,
            "seeds": [params[n] for n in seeds if params.get(n) is not None],
            "server": server, "prompt_id": prompt_id, "workflow": prompt}


PNG = b"\x89PNG\r\n\x1a\n"


def with_text(png: bytes, key: str, text: str) -> bytes:
    """`png` with one more iTXt chunk, before its pixels (where readers look first):
    ComfyUI's own chunks (its prompt and workflow) stay, and the pixels are not encoded
    again."""
    body = key.encode("latin-1") + b"\0\0\0\0\0" + text.encode("utf-8")
    chunk = struct.pack(">I", len(body)) + b"iTXt" + body + \
        struct.pack(">I", zlib.crc32(b"iTXt" + body) & 0xFFFFFFFF)
    at = png.find(b"IDAT") - 4
    return png[:at] + chunk + png[at:] if at > 8 else png


def _numbered(name: str, n: int) -> str:
    path = PurePosixPath(name)
    return str(path.with_name(f"{path.stem}-{n}{path.suffix}"))


def _order(node_id: str) -> tuple:
    return (0, int(node_id), "") if node_id.isdigit() else (1, 0, node_id)


# --- process entry -------------------------------------------------------------------------

async def serve_comfy(config: Config, url: str) -> int:
    from executor.worker import _stop_when_orphaned
    queue = await open_queue(config)
    try:
        worker = ComfyWorker(config, queue, url)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, worker.stopping.set)
        orphan_watch = asyncio.create_task(_stop_when_orphaned(worker))  # type: ignore[arg-type]
        try:
            return await worker.run()
        finally:
            orphan_watch.cancel()
    finally:
        await queue.close()


def main(argv: list[str] | None = None) -> int:
    from storage import config as cfg
    parser = argparse.ArgumentParser(prog="genbot worker --comfyui",
                                     description="Run one executor for a ComfyUI server.")
    parser.add_argument("--config", help="config file (default: $GENBOT_CONFIG or ./config.toml)")
    parser.add_argument("--url", required=True, help="the ComfyUI server, http://host:8188")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", args.url):
        print(f"genbot: {args.url!r} is not a ComfyUI server's address (http://host:8188)",
              file=sys.stderr)
        return 2
    try:
        config = cfg.load(args.config, dict(os.environ))
    except cfg.ConfigError as e:
        print(f"genbot: {e}", file=sys.stderr)
        return 2
    setup_logging(config.service.log_level, config.service.log_format)
    return asyncio.run(serve_comfy(config, args.url))


if __name__ == "__main__":
    sys.exit(main())
