"""The ComfyUI engine: genbot's queue above a team's own ComfyUI server.

ComfyUI's own queue is lost on restart and has no fairness; genbot's is durable and
fair, so ComfyUI gets one prompt at a time from here. One executor per server (a
supervised child of `genbot serve` for each of `[comfyui] servers`, or `genbot worker
--comfyui URL`); the loop (executor.loop) does the queue's side, as for diffusers. A
job here:

  connect:  /object_info says which templates this server can run (every node class and
            model file they need); their jobs are the only ones it claims
  generate: upload the row's pictures (once each, by content) -> POST /prompt with a
            genbot-made prompt_id -> follow the WebSocket (progress; a stop the loop
            asks for interrupts the prompt) -> the outcome from /history (never from
            silence)
  finish:   fetch each file by /view -> check what its bytes are -> store it, named by
            them, with genbot's metadata

A server that is down, restarts or loses the prompt is not the row's fault: the job is
given back without using an attempt and the executor backs off, saying "server down"
in the worker registry. A server that answers oddly (a history of the wrong shape, a
file name with a NUL or `..`, an output that is no image or video, a bomb) fails that
row, saying what was odd; the executor goes on with the next. Nothing here loads torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import aiohttp

from executor.comfyui import outputs, previews
from executor.comfyui.client import ComfyClient, OddAnswer, PromptRefused, ServerDown
from executor.comfyui.placement import missing
from executor.engine import Control, Run, Wanted
from storage import media
from storage.config import Config
from storage.files import FileStore, batch_folder, open_store
from storage.names import one_line, shown
from storage.queue import Lease
from templates import jobs
from templates.graph import Template
from templates.jobs import comfy_affinity
from templates.loader import load_templates
from templates.settings import ComfyUIConfig, templates_dir

log = logging.getLogger("genbot.comfyui")

TICK = 0.25  # seconds between looks at stops, progress and the socket while a job runs
SILENCE = 5.0  # seconds without a word on the socket before /history is asked anyway
LOST_LIMIT = 3  # a row whose prompt the server loses this often fails (a crashing node?)
OOM = re.compile(r"out of memory|OutOfMemory|Allocation on device", re.IGNORECASE)


ODD = "odd answer from the ComfyUI server: "


class RowFailed(Exception):
    """The row's own failure, in one line whatever the server said."""

    def __init__(self, message: str, *, retry: bool, oom: bool = False):
        super().__init__(one_line(message))
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
    run: Run | None = None  # the job it runs (its previews are the job's)


@dataclass
class ComfyRun(Run):
    job: jobs.ComfyJob = field(kw_only=True)
    prompt: dict[str, Any] = field(default_factory=dict)  # as posted
    prompt_id: str = ""
    entry: dict[str, Any] = field(default_factory=dict)  # its /history entry


class ComfyEngine:
    kind = "comfyui"
    max_batch = 1
    claims_ahead = False  # a prompt takes seconds: the claim after it costs nothing

    def __init__(self, config: Config, url: str):
        self.config, self.url = config, url.rstrip("/")
        self.settings = config[ComfyUIConfig]
        self.store: FileStore = open_store(config)
        self.client_id = uuid.uuid4().hex
        self.templates: dict[str, Template] = {
            n: t for n, t in load_templates(templates_dir(config))[0].items() if t.comfy}
        self.runnable: list[str] = []  # affinities of the templates this server can run
        self.cannot: dict[str, str] = {}  # template -> why it cannot run here
        self.prompts: dict[str, Prompt] = {}
        self.uploaded: dict[str, str] = {}  # picture sha256 -> its name on the server
        self.reader: asyncio.Task | None = None
        self.down: str | None = "not connected yet"
        self.failures = 0
        self.lost: Counter = Counter()  # job id -> times the server lost its prompt
        self.session: aiohttp.ClientSession | None = None
        self.control: Control | None = None
        self.showing: set[asyncio.Future] = set()  # previews being decoded

    # --- the server ----------------------------------------------------------------------
    async def start(self, control: Control) -> None:
        self.control = control
        timeout = aiohttp.ClientTimeout(total=None, connect=self.settings.connect_timeout,
                                        sock_read=max(60.0, self.settings.connect_timeout))
        self.session = aiohttp.ClientSession(timeout=timeout)
        self.client = ComfyClient(self.url, self.session, self.client_id)

    async def ready(self) -> bool:
        """The socket is open and this server's templates are known; else (re)connect:
        check what it can run (/object_info), open the socket. False: it is down."""
        if self.reader is not None and not self.reader.done() and self.down is None:
            return True
        try:
            info = await self.client.object_info()
            ws = await self.client.socket(self.settings.connect_timeout)
        except ServerDown as e:
            self.went_down(str(e))
            return False
        self.placement(info)
        self.uploaded.clear()  # a new server (or a restarted one) may not have them
        with contextlib.suppress(aiohttp.ClientError, ConnectionError, RuntimeError):
            # previews that name their prompt, not only "whatever runs now"
            await ws.send_json({"type": "feature_flags",
                                "data": {"supports_preview_metadata": True}})
        self.reader = asyncio.create_task(self.read(ws))
        if self.down is not None:
            log.info("ComfyUI server connected", extra={
                "server": self.url, "runs": sorted(self.templates.keys() - self.cannot.keys()),
                "cannot_run": self.cannot})
        self.down, self.failures = None, 0
        self.say_doing()
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

    def went_down(self, why: str) -> None:
        self.failures += 1
        if self.down is None or self.failures == 1:
            log.warning("ComfyUI server down; retrying with backoff",
                        extra={"server": self.url, "error": why,
                               "retry_in": round(self.backoff(), 1)})
        self.down = why
        if self.reader is not None:
            self.reader.cancel()
            self.reader = None
        self.say_doing()

    def say_doing(self) -> None:
        if self.control is not None:
            self.control.doing({"what": "server_down", "models": [self.url]} if self.down
                               else None)

    def backoff(self) -> float:
        return min(self.settings.backoff_max, 2.0 ** max(0, self.failures - 1))

    def wanted(self) -> Wanted | None:
        return Wanted(only=self.runnable, engine=True) if self.runnable else None

    def interrupted(self) -> asyncio.Task | None:
        return self.reader  # ends when the socket closes: then reconnect at once

    # --- the socket ----------------------------------------------------------------------
    async def read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """Every message, to the prompt it is about. Returns when the socket closes."""
        try:
            async with ws:
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        self.glimpsed(msg.data)
                        continue
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        continue
                    with contextlib.suppress(ValueError, AttributeError, TypeError,
                                             OverflowError, RecursionError):
                        self.heard(json.loads(msg.data))
        except (aiohttp.ClientError, OSError) as e:
            log.info("ComfyUI socket closed: %s", e, extra={"server": self.url})

    def glimpsed(self, data: bytes) -> None:
        """A binary message: a preview of a prompt's image forming goes to its job's
        watchers (decoded and made small off the event loop), when one is due."""
        found = previews.frame(data)
        if found is None or self.control is None:
            return
        if found.prompt_id is not None:
            prompt = self.prompts.get(found.prompt_id)
        else:  # an older server: the prompt executing now (one at a time here)
            prompt = next((p for p in self.prompts.values() if p.node), None)
        if prompt is None or prompt.run is None or not self.control.preview_due(prompt.run):
            return
        run, control, step, total = prompt.run, self.control, prompt.step, prompt.total

        def show() -> None:
            pictured = previews.picture(found.picture)
            if pictured is not None:
                control.preview(run, pictured, step, total)
        task = asyncio.get_running_loop().run_in_executor(None, show)
        self.showing.add(task)
        task.add_done_callback(self.showing.discard)

    def heard(self, message: dict[str, Any]) -> None:
        """(A message of the wrong shape raises, and is dropped by `read`.)"""
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

    # --- one job -------------------------------------------------------------------------
    def prepare(self, lease: Lease) -> Run:
        job = jobs.decode(lease.workflow)
        if not isinstance(job, jobs.ComfyJob):  # claims take only comfyui:… affinities
            raise TypeError(f"job {lease.job_id} is a {type(job).__name__}")
        return ComfyRun(lease, job=job)

    async def generate(self, runs: list[Run]) -> None:
        for run in runs:
            assert isinstance(run, ComfyRun)
            try:
                await self.run_prompt(run)
            except ServerDown as e:
                self.server_lost(run, e)
            except OddAnswer as e:
                run.fail(f"{ODD}{e}")
            except RowFailed as e:
                run.fail(str(e), retry=e.retry)

    def server_lost(self, run: Run, e: ServerDown) -> None:
        """The job runs again without using an attempt, but not forever: a row whose run
        the server loses LOST_LIMIT times fails (it may bring the server down itself)."""
        self.lost[run.id] += 1
        if self.lost[run.id] >= LOST_LIMIT:
            run.fail(f"the ComfyUI server went down {LOST_LIMIT} times while running "
                     f"this row (last: {e})")
        else:
            run.give_back = f"ComfyUI server {self.url} down: {e}; the job will run again"
        if self.down is None:
            self.went_down(str(e))

    async def run_prompt(self, run: ComfyRun) -> None:
        """The row's prompt, to its end; an out-of-memory error is tried once more after
        the server frees its memory (as the diffusers engine retries at batch size 1)."""
        try:
            return await self.attempt(run)
        except RowFailed as e:
            if not e.oom:
                raise
            log.warning("out of memory on the ComfyUI server; freeing it and trying once more",
                        extra={"job": run.id, "server": self.url})
            await self.client.free()
            try:
                return await self.attempt(run)
            except RowFailed as again:
                raise RowFailed(f"{again} (out of memory, also after freeing the server's "
                                "memory)", retry=False) from None

    async def attempt(self, run: ComfyRun) -> None:
        prompt = json.loads(json.dumps(run.job.prompt))  # a copy to fill in
        for up in run.job.uploads:
            try:
                prompt[up.node]["inputs"][up.input] = await self.upload(up.stored)
            except PromptRefused as e:
                raise RowFailed(f"the ComfyUI server refused the picture for {up.node}."
                                f"{up.input}: {e}", retry=True) from None
        pid = str(uuid.uuid4())
        state = self.prompts[pid] = Prompt(pid, run=run)
        try:
            given = await self.client.post_prompt(prompt, pid, {"genbot": {
                "job": run.id, "batch": run.batch_id, "row": run.lease.row}})
        except PromptRefused as e:
            del self.prompts[pid]
            raise RowFailed(str(e), retry=False) from None
        if given != pid:  # an older server named it itself
            self.prompts[given] = self.prompts.pop(pid)
            pid = state.id = given
        try:
            entry = await self.follow(run, state, prompt)
        finally:
            self.prompts.pop(pid, None)
        if entry is None:
            return  # stopped: the loop records why
        status = outputs.status(entry)
        if status.get("status_str") == "error":
            raise failure(outputs.messages(status))
        run.prompt, run.prompt_id, run.entry = prompt, pid, entry

    async def follow(self, run: ComfyRun, state: Prompt,
                     prompt: dict[str, Any]) -> dict | None:
        """Until the prompt's /history entry says it ended (None: the loop stopped it):
        progress out, a stop acted on at once, a dropped socket re-opened."""
        assert self.control is not None
        shown = (0, 0)
        check_at = float("inf")  # when to ask /history again after an end it did not show
        while True:
            with contextlib.suppress(TimeoutError):  # (not wait_for: storage.wakeup)
                async with asyncio.timeout(TICK):
                    await state.ended.wait()
            now = time.monotonic()
            if (state.step, state.total) != shown and state.total:
                shown = (state.step, state.total)
                node = prompt.get(state.step_node, {})
                title = (node.get("_meta") or {}).get("title") or node.get("class_type") or "?"
                self.control.step([run], title, state.step, state.total)
            if reason := self.control.stop_reason(run):
                await self.stop_prompt(state.id)
                run.stopped = reason
                return None
            socket_gone = self.reader is None or self.reader.done()
            if socket_gone and not await self.ready():
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
            status = outputs.status(entry) if entry is not None else {}
            if entry is not None and ("status" not in entry or status.get("completed") is True or
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

    async def finish(self, run: Run) -> None:
        """Each file the workflow's output nodes made, fetched, checked by its bytes and
        stored under the template's name for it."""
        assert isinstance(run, ComfyRun)
        try:
            run.outputs = await self.save(run)
        except ServerDown as e:
            self.server_lost(run, e)
        except OddAnswer as e:
            run.fail(f"{ODD}{e}")
        except RowFailed as e:
            run.fail(str(e), retry=e.retry)

    async def save(self, run: ComfyRun) -> list[str]:
        """Every file is fetched and checked before any is stored: a row with one file
        that is no image or video stores nothing."""
        files = outputs.listed(run.entry, run.prompt, self.url)
        if not files:
            raise RowFailed("the workflow made no image (does it end in a SaveImage or "
                            "PreviewImage node?)", retry=False)
        base = run.job.image_name
        template = self.templates.get(run.job.template)
        seeds = [n for n, p in template.params.items() if p.type == "seed"] if template else []
        meta = outputs.metadata(run.job, run.batch_id, run.prompt, run.prompt_id, self.url,
                                seeds)
        made = []
        for i, listed in enumerate(files):
            where = f"{listed.label}: {shown(listed.filename)}"
            try:
                data = await self.client.view(listed.filename, listed.subfolder, listed.folder)
            except OddAnswer as e:
                raise OddAnswer(f"{where}: {e}") from None
            try:
                kind = await asyncio.to_thread(media.output, data)
            except media.NotMedia as e:
                raise RowFailed(f"{where}: {e}", retry=False) from None
            if kind is media.PNG:
                data = outputs.with_text(data, "genbot", json.dumps(
                    meta, ensure_ascii=False, separators=(",", ":")))
            name = outputs.named(base if i == 0 else outputs.numbered(base, i + 1), kind)
            made.append((name, data))
        return [await asyncio.to_thread(
            self.store.write, f"{batch_folder(run.batch_id)}/{name}", data)
            for name, data in made]

    # --- between jobs --------------------------------------------------------------------
    async def after(self, runs: list[Run], taken: int) -> bool:
        every = self.settings.free_after_jobs
        if every and taken % every == 0:
            with contextlib.suppress(ServerDown):
                await self.client.free()
                log.info("asked the ComfyUI server to free its memory",
                         extra={"server": self.url, "jobs": taken})
        return False

    def presence(self) -> dict[str, Any]:
        return {"device": self.url, "allow": self.runnable,
                "stats": {"server_error": self.down, "cannot_run": self.cannot}}

    async def close(self, *, recycling: bool) -> None:
        if recycling:
            with contextlib.suppress(ServerDown):
                await self.client.free()
        if self.reader:
            self.reader.cancel()
        if self.session is not None:
            await self.session.close()


def failure(messages: list) -> RowFailed:
    """The row's error from a history entry's messages: the node, its class and what it
    raised (in one line: ComfyUI's texts hold line breaks, and a server may put anything
    in them); an interrupt nobody here asked for (someone in ComfyUI's UI) runs again."""
    for kind, data in (m for m in messages if isinstance(m, list) and len(m) == 2):
        if kind == "execution_error" and isinstance(data, dict):
            text = f"{data.get('exception_type', 'error')}: {data.get('exception_message', '')}"
            oom = bool(OOM.search(text))
            return RowFailed(f"node {data.get('node_id')} ({data.get('node_type')}): "
                             f"{text}", retry=False, oom=oom)
        if kind == "execution_interrupted":
            return RowFailed("interrupted on the ComfyUI server", retry=True)
    return RowFailed("ComfyUI says the prompt failed, without saying why", retry=True)
