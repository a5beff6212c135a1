"""A small client of genbot's REST API for scripts, cron jobs and Airflow or Prefect tasks.

    from bot.client import Client

    with Client("http://genbot:8080", token) as genbot:
        batch = genbot.submit("product_main", "sheet.xlsx", vary=["steps=20,30"])
        batch = batch.wait(progress=lambda b: print(f"{b.done}/{b.total}"))
        batch.download("out/")

`AsyncClient` is the same with `await`. Results are typed (`Batch`, `Job`); a refusal is
a `GenbotError` carrying the server's status, code and message (what chat would have
said), never a bare HTTP error. Importing this module loads neither torch nor the rest of
genbot: only aiohttp, and the sheet reader when a sheet's pictures are looked up.
"""

from __future__ import annotations

import asyncio
import base64
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from storage.states import Status

API = "/api/v1"


class GenbotError(Exception):
    """The server said no: its HTTP status, the error's code and its message."""

    def __init__(self, status: int, code: str, message: str, details: dict | None = None):
        super().__init__(f"{message} (HTTP {status}, {code})")
        self.status, self.code, self.message, self.details = status, code, message, \
            details or {}


@dataclass
class Job:
    id: int
    batch: int
    row: int
    status: str
    error: str | None
    outputs: list[str]  # the API paths of its images
    parent_job_id: int | None = None
    action: str | None = None
    rating: str | None = None
    template_version: int | None = None
    review: str = "unreviewed"  # approved, rejected, changes_requested, unreviewed
    review_note: str | None = None
    stars: int | None = None

    @classmethod
    def of(cls, data: dict[str, Any]) -> Job:
        return cls(data["id"], data["batch"], data["row"], data["status"], data.get("error"),
                   list(data.get("outputs") or []), data.get("parent_job_id"),
                   data.get("action"), data.get("rating"), data.get("template_version"),
                   data.get("review", "unreviewed"), data.get("review_note"),
                   data.get("stars"))


@dataclass
class Batch:
    id: int
    template: str
    total: int
    done: int
    counts: dict[str, int]
    meta: dict[str, Any]
    files: dict[str, str]  # contact, results: their API paths
    client: Any = field(default=None, repr=False, compare=False)  # Client or AsyncClient
    problems: list[dict[str, Any]] = field(default_factory=list)  # rows skipped, and why
    demo_models: list[str] = field(default_factory=list)  # demo models it runs on (noise)

    @property
    def finished(self) -> bool:
        return self.done >= self.total

    @property
    def failed(self) -> int:
        return self.counts.get(Status.FAILED, 0)

    @classmethod
    def of(cls, data: dict[str, Any], client: Any) -> Batch:
        return cls(data["id"], data["template"], data["total"], data["done"],
                   dict(data.get("counts") or {}), dict(data.get("meta") or {}),
                   dict(data.get("files") or {}), client, list(data.get("problems") or []),
                   list(data.get("demo_models") or []))

    # Each of these is the client's: a value with Client, a coroutine with AsyncClient.
    def wait(self, progress: Callable[[Batch], Any] | None = None, *, poll: float = 1.0,
             timeout: float | None = None) -> Any:
        """Until every job has ended; the batch as it ended."""
        return self.client.wait(self.id, progress=progress, poll=poll, timeout=timeout)

    def download(self, folder: str | Path) -> Any:
        """Its images, contact sheet and results sheet into `folder`; their paths."""
        return self.client.download(self.id, folder)

    def jobs(self) -> Any:
        return self.client.jobs(self.id)

    def cancel(self) -> Any:
        return self.client.cancel(self.id)

    def retry(self) -> Any:
        """Its failed jobs again, as a new batch."""
        return self.client.retry(self.id)


class AsyncClient:
    def __init__(self, url: str, token: str, *, timeout: float = 120.0):
        self.url, self.token = url.rstrip("/"), token
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                self.url, timeout=self.timeout,
                headers={"Authorization": f"Bearer {self.token}"})
        return self._session

    async def call(self, method: str, path: str, **kw: Any) -> Any:
        """The JSON answer, or GenbotError with the server's words."""
        async with self.session.request(method, f"{API}{path}", **kw) as r:
            try:
                body = await r.json(content_type=None)
            except ValueError:
                text = (await r.text(errors="replace")).strip()
                body = {"error": {"code": "not_json", "message": text.splitlines()[0][:200]
                                  if text else f"HTTP {r.status}"}}
            if r.status >= 400:
                error = (body or {}).get("error") or {}
                raise GenbotError(r.status, error.get("code") or "error",
                                  error.get("message") or f"HTTP {r.status}", error)
            return body

    async def _bytes(self, path: str) -> bytes:
        async with self.session.get(path) as r:
            if r.status >= 400:
                raise GenbotError(r.status, "download_failed", f"{path}: HTTP {r.status}")
            return await r.read()

    # --- submitting ---------------------------------------------------------------------
    async def submit(self, template: str, sheet: str | Path, *,
                     pictures: Iterable[str | Path] | None = None,
                     vary: Iterable[str] = (), seeds: int = 1, grid: Iterable[str] = (),
                     compare: Iterable[str] = (), priority: str = "normal",
                     not_before: str | None = None, skip_invalid: bool = False,
                     wait_for_executor: bool = False, key: str | None = None,
                     callback_url: str | None = None, channels: Iterable[str] = (),
                     layout: str | None = None) -> Batch:
        """One batch of `template` (NAME, NAME@N) over the rows of `sheet`. `pictures`:
        the files its image cells name; None: those beside the sheet that it names.
        `key`: an idempotency key, so a retried call returns the first batch.
        `callback_url`: told of the batch's events by signed webhooks. `channels`: sales
        channels each row's image is also made into files for (taobao, douyin …);
        `layout`: the headline, price, badge and logo drawn on them (launch …)."""
        path = Path(sheet)
        form = aiohttp.FormData()
        form.add_field("template", template)
        form.add_field("priority", priority)
        for name, value in (("not_before", not_before), ("seeds", seeds if seeds != 1 else None),
                            ("grid", ",".join(grid) or None), ("callback_url", callback_url),
                            ("channels", ",".join(channels) or None),
                            ("layout", layout or None)):
            if value is not None:
                form.add_field(name, str(value))
        for axis in vary:
            form.add_field("vary", axis)
        for other in compare:
            form.add_field("compare", other)
        for flag, on in (("skip_invalid", skip_invalid),
                         ("wait_for_executor", wait_for_executor)):
            if on:
                form.add_field(flag, "true")
        form.add_field("sheet", path.read_bytes(), filename=path.name)
        if pictures is None:
            info = await self.call("GET", f"/templates/{template.partition('@')[0]}")
            files = await asyncio.to_thread(beside, path, info)
        else:
            files = [(Path(p).name, Path(p).read_bytes()) for p in pictures]
        for name, data in files:
            form.add_field("pictures", data, filename=name)
        body = await self.call("POST", "/batches", data=form,
                               headers={"Idempotency-Key": key} if key else {})
        return Batch.of(body, self)

    async def me(self) -> dict[str, Any]:
        """Who the token acts as: its role, what it may do, and `priorities`, those it
        may submit with (the most urgent first; a more urgent one is refused)."""
        found: dict[str, Any] = await self.call("GET", "/me")
        return found

    # --- reading and acting -------------------------------------------------------------
    async def batch(self, batch_id: int) -> Batch:
        return Batch.of(await self.call("GET", f"/batches/{batch_id}"), self)

    async def jobs(self, batch_id: int) -> list[Job]:
        found: list[Job] = []
        cursor = None
        while True:
            page = await self.call("GET", "/jobs", params={
                "batch": batch_id, "limit": 500, **({"cursor": cursor} if cursor else {})})
            found += [Job.of(j) for j in page["jobs"]]
            cursor = page.get("next_cursor")
            if not cursor:
                return sorted(found, key=lambda j: (j.row, j.id))

    async def wait(self, batch_id: int, *, progress: Callable[[Batch], Any] | None = None,
                   poll: float = 1.0, timeout: float | None = None) -> Batch:
        deadline = None if timeout is None else time.monotonic() + timeout
        last = None
        while True:
            batch = await self.batch(batch_id)
            if progress is not None and (batch.done, batch.counts) != last:
                last = (batch.done, batch.counts)
                progress(batch)
            if batch.finished:
                return batch
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"batch {batch_id}: {batch.done}/{batch.total} done after "
                                   f"{timeout:g} s")
            await asyncio.sleep(poll)

    async def download(self, batch_id: int, folder: str | Path) -> list[Path]:
        """Every finished image (job-N-I.EXT), then contact.png and results.xlsx."""
        target = Path(folder)
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for job in await self.jobs(batch_id):
            for i, url in enumerate(job.outputs if job.status == Status.SUCCEEDED else []):
                async with self.session.get(url) as r:
                    if r.status >= 400:
                        raise GenbotError(r.status, "download_failed", f"{url}: HTTP {r.status}")
                    data = await r.read()
                    kind = (r.content_type or "").rpartition("/")[2] or "bin"
                ext = {"jpeg": "jpg"}.get(kind, kind)
                written.append(_write(target / f"row{job.row}-job{job.id}-{i}.{ext}", data))
        batch = await self.batch(batch_id)
        for name in ("contact", "results"):
            file = batch.files.get(name)
            if file:
                try:
                    data = await self._bytes(file)
                except GenbotError as e:
                    if e.status == 404:  # no image at all: no contact sheet
                        continue
                    raise
                written.append(_write(target / file.rpartition("/")[2], data))
        return written

    async def cancel(self, batch_id: int) -> dict[str, list[int]]:
        return await self.call("POST", f"/batches/{batch_id}/cancel")

    async def retry(self, batch_id: int) -> Batch:
        body = await self.call("POST", f"/batches/{batch_id}/retry")
        return await self.batch(body["batch"])

    async def act(self, job_id: int, action: str, **fields: Any) -> Batch:
        """An action on a finished job's image (again, vary, upscale, edit, repaint,
        extend …; fields as the API takes them, a repaint's `mask` as bytes or a Path):
        the new batch."""
        mask = fields.get("mask")
        if isinstance(mask, (bytes, Path)):
            data = mask if isinstance(mask, bytes) else await asyncio.to_thread(mask.read_bytes)
            fields["mask"] = base64.b64encode(data).decode()
        body = await self.call("POST", f"/jobs/{job_id}/actions",
                               json={"action": action, **fields})
        return await self.batch(body["batch"])

    async def act_on_kept(self, batch_id: int, action: str, **fields: Any) -> Batch:
        """The action on every kept image of a batch (edit them all by one instruction):
        the new batch."""
        body = await self.call("POST", f"/batches/{batch_id}/kept/actions",
                               json={"action": action, **fields})
        return await self.batch(body["batch"])

    async def rate(self, job_id: int, rating: str | None) -> Job:
        """keep, reject, or None to take the rating back."""
        return Job.of(await self.call("PUT", f"/jobs/{job_id}/rating", json={"rating": rating}))

    async def review(self, job_id: int, state: str, note: str = "") -> Job:
        """approved, rejected (note: the reason), changes_requested (note: what to change,
        queued as an edit of the image, as its owner's) or unreviewed."""
        body = await self.call("PUT", f"/jobs/{job_id}/review", json={"state": state,
                                                                      "note": note})
        return Job.of(body["job"])

    async def stars(self, job_id: int, stars: int | None) -> Job:
        return Job.of(await self.call("PUT", f"/jobs/{job_id}/stars", json={"stars": stars}))

    async def sign_off(self, batch_id: int) -> dict[str, Any]:
        """Once every image of the batch is reviewed: who signed off, and its reviews."""
        return dict(await self.call("POST", f"/batches/{batch_id}/signoff"))

    async def move(self, batch_id: int, to: str = "front") -> int:
        """Admins: the batch's waiting jobs to the front or the back of its submitter's."""
        return int((await self.call("POST", f"/batches/{batch_id}/move", json={"to": to}))
                   ["moved"])


def beside(sheet: Path, template_info: dict) -> list[tuple[str, bytes]]:
    """The files beside the sheet that its image cells name."""
    from bot.intake.images import relative_name
    from bot.intake.sheets import SheetError, read_sheet
    from templates.params import PICTURES, normalize_header
    columns = {normalize_header(h) for p in template_info["params"] if p["type"] in PICTURES
               for h in (p["name"], *p["aliases"])}
    try:
        grid = read_sheet(sheet.name, sheet.read_bytes(), max_unpacked_bytes=512 * 2**20)
    except SheetError:
        return []  # the server says what is wrong with it
    wanted = [i for i, h in enumerate(grid.headers) if normalize_header(h) in columns]
    root = sheet.resolve().parent
    found: dict[str, bytes] = {}
    for _, cells in grid.rows:
        for i in wanted:
            name = relative_name(str(cells[i])) if i < len(cells) and cells[i] else None
            if name is None or name in found:
                continue
            try:
                path = (root / name).resolve()
                if path.is_relative_to(root) and path.is_file():
                    found[name] = path.read_bytes()
            except (OSError, ValueError):  # not a name this file system can hold
                continue
    return sorted(found.items())



def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


class Client:
    """AsyncClient's calls, each run to its end: for code with no event loop of its own."""

    def __init__(self, url: str, token: str, *, timeout: float = 120.0):
        self._loop = asyncio.new_event_loop()
        self._async = AsyncClient(url, token, timeout=timeout)
        # A script that never calls close() (no `with`) still closes its connections: when
        # the client is collected, else at exit, before aiohttp would warn of them.
        self._closer = weakref.finalize(self, _shut, self._loop, self._async)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._closer()

    def _run(self, coro: Any) -> Any:
        found = self._loop.run_until_complete(coro)
        if isinstance(found, Batch):
            found.client = self
        return found

    def submit(self, template: str, sheet: str | Path, **options: Any) -> Batch:
        return self._run(self._async.submit(template, sheet, **options))

    def me(self) -> dict[str, Any]:
        return self._run(self._async.me())

    def batch(self, batch_id: int) -> Batch:
        return self._run(self._async.batch(batch_id))

    def jobs(self, batch_id: int) -> list[Job]:
        return self._run(self._async.jobs(batch_id))

    def wait(self, batch_id: int, **options: Any) -> Batch:
        progress = options.pop("progress", None)
        sync = (lambda b: progress(_owned(b, self))) if progress else None
        return self._run(self._async.wait(batch_id, progress=sync, **options))

    def download(self, batch_id: int, folder: str | Path) -> list[Path]:
        return self._run(self._async.download(batch_id, folder))

    def cancel(self, batch_id: int) -> dict[str, list[int]]:
        return self._run(self._async.cancel(batch_id))

    def retry(self, batch_id: int) -> Batch:
        return self._run(self._async.retry(batch_id))

    def act(self, job_id: int, action: str, **fields: Any) -> Batch:
        return self._run(self._async.act(job_id, action, **fields))

    def act_on_kept(self, batch_id: int, action: str, **fields: Any) -> Batch:
        return self._run(self._async.act_on_kept(batch_id, action, **fields))

    def rate(self, job_id: int, rating: str | None) -> Job:
        return self._run(self._async.rate(job_id, rating))

    def review(self, job_id: int, state: str, note: str = "") -> Job:
        return self._run(self._async.review(job_id, state, note))

    def stars(self, job_id: int, stars: int | None) -> Job:
        return self._run(self._async.stars(job_id, stars))

    def sign_off(self, batch_id: int) -> dict[str, Any]:
        return self._run(self._async.sign_off(batch_id))

    def move(self, batch_id: int, to: str = "front") -> int:
        return self._run(self._async.move(batch_id, to))


def _shut(loop: asyncio.AbstractEventLoop, client: AsyncClient) -> None:
    """The session's connections closed, then the loop (never the client itself: the
    finalizer holding it would keep it alive). Not where another loop runs this thread
    (collected inside async code): none can be run there, and aiohttp's warning stays."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        if not loop.is_closed():
            loop.run_until_complete(client.close())
            loop.close()


def _owned(batch: Batch, client: Client) -> Batch:
    batch.client = client
    return batch
