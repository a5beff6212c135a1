"""The REST API under /api/v1: the queue for scripts, under the same rules as chat.

A Bearer token from [api] tokens acts as api:USER, whose role [chat] gives; the same
Permissions object decides (ownership for cancel and retry, per-person limits, the
audit log). A sheet goes through the same intake as a chat upload, so its problems
come back with the same row and column messages, as JSON. Errors are always
{"error": {"code", "message", ...}}. `/api/v1/openapi.json` describes every route.
"""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any
from urllib.parse import unquote

from aiohttp import WSCloseCode, web
from aiohttp.http_exceptions import HttpProcessingError

from bot.commands import Command, CommandError, parse_time
from bot.messages import say
from bot.permissions import Permissions, Refused, Who
from bot.sessions import Sessions, session_secret
from storage.config import Config
from storage.files import FileStore
from storage.queue import Priority, Queue, QueueFull, Status, Submission
from storage.schedules import Schedules
from storage.workers import Workers

PREFIX = "/api/v1"
THUMB_MIN, THUMB_MAX = 16, 1024
PAGE = 100  # jobs per page unless asked for fewer (at most 1000)
EVENTS_POLL = 0.3


class ApiError(web.HTTPException):
    def __init__(self, status: int, code: str, message: str, **extra: Any):
        self.status_code = status
        super().__init__(text=json.dumps({"error": {"code": code, "message": message, **extra}},
                                         ensure_ascii=False), content_type="application/json")


class Api:
    def __init__(self, config: Config, queue: Queue, permissions: Permissions, store: FileStore,
                 templates: dict):
        self.config, self.queue, self.permissions = config, queue, permissions
        self.store, self.templates = store, templates
        self.tokens = {t: u for t, _, u in (e.partition("=") for e in config.api.tokens)}
        self.sessions = Sessions(self.tokens, session_secret(config.api.session_secret,
                                                             config.data_dir),
                                 hours=config.api.session_hours, clock=queue.clock)
        self.schedules = Schedules(queue.db, clock=queue.clock)
        self.workers = Workers.of(queue)
        self.streams: set[web.WebSocketResponse] = set()  # open /events, closed at shutdown

    def routes(self, app: web.Application) -> None:
        app.on_shutdown.append(self._close_streams)
        r = app.router
        r.add_get(f"{PREFIX}/openapi.json", self.openapi)
        r.add_get(f"{PREFIX}/queue", self.queue_status)
        r.add_post(f"{PREFIX}/queue/pause", self.pause)
        r.add_post(f"{PREFIX}/queue/resume", self.resume)
        r.add_get(f"{PREFIX}/workers", self.worker_list)
        r.add_get(f"{PREFIX}/templates", self.template_list)
        r.add_get(f"{PREFIX}/templates/{{name}}", self.template)
        r.add_get(f"{PREFIX}/batches", self.batches)
        r.add_post(f"{PREFIX}/batches", self.submit)
        r.add_get(f"{PREFIX}/batches/{{id:\\d+}}", self.batch)
        r.add_post(f"{PREFIX}/batches/{{id:\\d+}}/cancel", self.cancel_batch)
        r.add_post(f"{PREFIX}/batches/{{id:\\d+}}/retry", self.retry)
        r.add_get(f"{PREFIX}/batches/{{id:\\d+}}/files/{{name}}", self.batch_file)
        r.add_get(f"{PREFIX}/jobs", self.jobs)
        r.add_get(f"{PREFIX}/jobs/{{id:\\d+}}", self.job)
        r.add_post(f"{PREFIX}/jobs/{{id:\\d+}}/cancel", self.cancel_job)
        r.add_get(f"{PREFIX}/jobs/{{id:\\d+}}/outputs/{{index:\\d+}}", self.output)
        r.add_get(f"{PREFIX}/events", self.events)
        r.add_get(f"{PREFIX}/schedules", self.schedule_list)
        r.add_post(f"{PREFIX}/schedules", self.schedule)
        r.add_delete(f"{PREFIX}/schedules/{{id:\\d+}}", self.unschedule)

    # --- who is asking ---------------------------------------------------------------------
    def who(self, request: web.Request) -> Who:
        """api:USER, from a Bearer token or the dashboard's session cookie."""
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else ""
        if not token and request.path == f"{PREFIX}/events":
            token = request.query.get("token", "")  # scripts' WebSockets may not set headers
        if token:
            user = self.sessions.user_of(token)
        elif (session := self.sessions.of(request)) is not None:
            if (why := self.sessions.forged(request, session)) is not None:
                raise ApiError(403, "csrf", why)
            user = session.user
        else:
            user = None
        if user is None:
            raise ApiError(401, "unauthorized", "a valid Bearer token is required",
                           headers_hint="Authorization: Bearer TOKEN")
        return Who("api", user, "api")

    async def allowed(self, request: web.Request, name: str, args: dict | None = None, *,
                      owner: str | None = None) -> tuple[Who, str]:
        who = self.who(request)
        try:
            role = await self.permissions.check(who, Command(name, args or {}, {}), owner=owner)
        except Refused as e:
            raise ApiError(403, e.code, e.render(), **_plain(e.details)) from None
        return who, role

    # --- reading ------------------------------------------------------------------------
    async def openapi(self, request: web.Request) -> web.Response:
        from bot.openapi import document
        return web.json_response(document())

    async def queue_status(self, request: web.Request) -> web.Response:
        await self.allowed(request, "queue")
        state = await self.queue.state()
        active = await self.queue.active_counts()
        return web.json_response({
            "paused": state["paused"], "changed_by": state["changed_by"],
            "queued": active["queued"], "running": active["running"],
            "counts": await self.queue.counts(),
            "eta_seconds": await self.queue.eta(active["queued"] - 1) if active["queued"] else 0,
            "jobs": [_running(j) for j in await self.queue.running()],
            "workers": [_worker(w) for w in await self.workers.all() if w["state"] != "stopped"],
            "seq": await self.queue.last_event_seq()})

    async def worker_list(self, request: web.Request) -> web.Response:
        """Every executor the registry knows, stopped ones included, on any host."""
        await self.allowed(request, "queue")
        return web.json_response({"workers": [_worker(w) for w in await self.workers.all()]})

    async def template_list(self, request: web.Request) -> web.Response:
        await self.allowed(request, "templates")
        return web.json_response({"templates": [_template(t) for _, t in
                                                sorted(self.templates.items())]})

    async def template(self, request: web.Request) -> web.Response:
        await self.allowed(request, "template")
        t = self.templates.get(request.match_info["name"])
        if t is None:
            raise ApiError(404, "no_template", f"no template {request.match_info['name']!r}",
                           templates=sorted(self.templates))
        return web.json_response(_template(t))

    async def batch(self, request: web.Request) -> web.Response:
        await self.allowed(request, "status")
        return web.json_response(await self._batch(_in_path(request, "id")))

    async def _batch(self, batch_id: int) -> dict:
        batch = await self.queue.batch(batch_id)
        if batch is None:
            raise ApiError(404, "no_batch", f"there is no batch {batch_id}")
        progress = await self.queue.batch_progress(batch_id)
        meta = {k: v for k, v in batch["meta"].items() if k != "context"}
        return {"id": batch_id, "template": batch["template"], "submitter": batch["submitter"],
                "priority": Priority(batch["priority"]).name.lower(), "created_at":
                batch["created_at"], "total": progress.total, "done": progress.done,
                "counts": progress.counts, "jobs_ahead": progress.jobs_ahead,
                "eta_seconds": progress.eta_seconds, "meta": meta,
                "files": {"contact": f"{PREFIX}/batches/{batch_id}/files/contact.png",
                          "results": f"{PREFIX}/batches/{batch_id}/files/results.xlsx"}}

    async def batches(self, request: web.Request) -> web.Response:
        """Batches newest first with their jobs counted, a page at a time."""
        await self.allowed(request, "status")
        q = request.query
        try:
            limit = min(int(q.get("limit", 50)), 500)
            cursor = _number(q["cursor"]) if q.get("cursor") else None
        except ValueError:
            raise ApiError(400, "bad_query", "limit and cursor are whole numbers") from None
        if limit < 1:
            raise ApiError(400, "bad_query", "limit is at least 1")
        rows = await self.queue.page_batches(before=cursor, submitter=q.get("submitter"),
                                             limit=limit)
        return web.json_response({"batches": [{
            "id": b["id"], "template": b["template"], "submitter": b["submitter"],
            "priority": Priority(b["priority"]).name.lower(), "created_at": b["created_at"],
            "total": b["total_jobs"], "counts": b["counts"], "sheet": b["meta"].get("sheet")}
            for b in rows], "next_cursor": rows[-1]["id"] if len(rows) == limit else None})

    async def _owner(self, batch_id: int) -> str:
        """Who submitted a batch (for cancel and retry): one row, no progress to compute."""
        batch = await self.queue.batch(batch_id)
        if batch is None:
            raise ApiError(404, "no_batch", f"there is no batch {batch_id}")
        return batch["submitter"]

    async def jobs(self, request: web.Request) -> web.Response:
        """Jobs by id, newest first, a page at a time: `cursor` is the last id seen; or
        `offset` (then `total` comes too), for a view that jumps to any row."""
        await self.allowed(request, "status")
        q = request.query
        try:
            limit = min(int(q.get("limit", PAGE)), 1000)
            cursor = _number(q["cursor"]) if q.get("cursor") else None
            batch = _number(q["batch"]) if q.get("batch") else None
            offset = _number(q["offset"]) if q.get("offset") else None
        except ValueError:
            raise ApiError(400, "bad_query", "limit, cursor, offset and batch are whole numbers") \
                from None
        status = q.get("status")
        if status is not None and status not in Status.__members__.values():
            raise ApiError(400, "bad_query", f"status is one of {', '.join(s.value for s in Status)}")
        if limit < 1:
            raise ApiError(400, "bad_query", "limit is at least 1")
        if offset is not None and cursor is not None:
            raise ApiError(400, "bad_query", "use cursor or offset, not both")
        filters = {"batch": batch, "status": status, "submitter": q.get("submitter")}
        rows = await self.queue.page_jobs(before=cursor, limit=limit, offset=min(
            offset or 0, BIGGEST_OFFSET), **filters)
        body = {"jobs": [_job(j) for j in rows],
                "next_cursor": rows[-1]["id"] if len(rows) == limit else None}
        if offset is not None:
            body["total"] = await self.queue.count_jobs(**filters)
        return web.json_response(body)

    async def job(self, request: web.Request) -> web.Response:
        await self.allowed(request, "status")
        job = await self._job(_in_path(request, "id"))
        return web.json_response(_job(job))

    async def _job(self, job_id: int) -> dict:
        job = await self.queue.job(job_id)
        if job is None:
            raise ApiError(404, "no_job", f"there is no job {job_id}")
        return job

    async def output(self, request: web.Request) -> web.StreamResponse:
        await self.allowed(request, "status")
        job = await self._job(_in_path(request, "id"))
        index = _in_path(request, "index")
        if index >= len(job["outputs"]):
            raise ApiError(404, "no_output", f"job {job['id']} has {len(job['outputs'])} outputs")
        if "size" not in request.query:
            return await self._file(job["outputs"][index])
        try:
            size = int(request.query["size"])
        except ValueError:
            size = 0
        if not THUMB_MIN <= size <= THUMB_MAX:
            raise ApiError(400, "bad_query", f"size is {THUMB_MIN} to {THUMB_MAX} pixels")
        return await self._file(await asyncio.to_thread(self._thumbnail, job["outputs"][index],
                                                        size))

    def _thumbnail(self, relative: str, size: int) -> str:
        """A JPEG at most size×size beside the image, made once (retention removes it with
        the batch's folder)."""
        from PIL import Image, UnidentifiedImageError
        thumb = f"{relative.rsplit('.', 1)[0]}.thumb{size}.jpg"
        try:
            if self.store.path(thumb).is_file():
                return thumb
            with Image.open(self.store.path(relative)) as im:
                im.thumbnail((size, size))
                buf = io.BytesIO()
                im.convert("RGB").save(buf, "JPEG", quality=82)
        except (ValueError, OSError, UnidentifiedImageError):
            return relative  # not there, or not a picture: _file says which
        self.store.write(thumb, buf.getvalue())
        return thumb

    async def batch_file(self, request: web.Request) -> web.StreamResponse:
        await self.allowed(request, "status")
        batch_id, name = _in_path(request, "id"), request.match_info["name"]
        if name not in ("contact.png", "results.xlsx"):
            raise ApiError(404, "no_file", "a batch has contact.png and results.xlsx")
        relative = f"outputs/batch_{batch_id}/{name}"
        if not (await asyncio.to_thread(self.store.path, relative)).is_file():  # made when
            # asked, once the batch is done
            batch = await self._batch(batch_id)
            if batch["done"] < batch["total"]:
                raise ApiError(404, "not_yet", f"batch {batch_id} is not finished")
            from bot.notifier import columns_of, summary_files
            raw = await self.queue.batch(batch_id)
            jobs = await self.queue.batch_jobs(batch_id)
            await asyncio.to_thread(summary_files, self.store, raw, jobs, columns_of(
                self.templates.get(raw["template"]), jobs), self.config.executor.font)
        return await self._file(relative)

    async def _file(self, relative: str) -> web.StreamResponse:
        try:
            path = await asyncio.to_thread(self.store.path, relative)  # (may fetch it)
        except ValueError:
            raise ApiError(404, "no_file", "not in the output store") from None
        if not path.is_file():
            raise ApiError(404, "no_file", f"{relative} is not there (not made yet, or deleted)")
        return web.FileResponse(path)

    async def events(self, request: web.Request) -> web.WebSocketResponse:
        """Queue events as they happen, from `after` (a sequence number) on: a client that
        reconnects with the last seq it saw misses nothing."""
        await self.allowed(request, "status")
        try:
            seq = _number(request.query.get("after", "0"))
        except ValueError:
            raise ApiError(400, "bad_query", "after is a sequence number") from None
        ws = web.WebSocketResponse(heartbeat=30)
        await ws.prepare(request)
        closing = asyncio.ensure_future(ws.receive())  # the client's close (it sends nothing else)
        self.streams.add(ws)
        bell = self.queue.bell
        poll = EVENTS_POLL * (10 if bell.live else 1)  # PostgreSQL rings when events come
        try:
            while not closing.done():
                seen = bell.rung
                for event in await self.queue.events_after(seq, 500):
                    seq = event["seq"]
                    await ws.send_json(event)
                rang = asyncio.ensure_future(bell.wait(seen, poll))
                await asyncio.wait([closing, rang], return_when=asyncio.FIRST_COMPLETED)
                rang.cancel()
        finally:
            self.streams.discard(ws)
            closing.cancel()
            await ws.close()
        return ws

    async def _close_streams(self, app: web.Application) -> None:
        """A stopping service says goodbye to event streams (a dashboard reconnects to the
        next one) rather than waiting for each to hang up."""
        for ws in list(self.streams):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"service stopping")

    # --- changing ------------------------------------------------------------------------
    async def pause(self, request: web.Request) -> web.Response:
        who, _ = await self.allowed(request, "pause")
        return web.json_response({"paused": True, "changed": await self.queue.pause(by=who.id)})

    async def resume(self, request: web.Request) -> web.Response:
        who, _ = await self.allowed(request, "resume")
        return web.json_response({"paused": False, "changed": await self.queue.resume(by=who.id)})

    async def cancel_batch(self, request: web.Request) -> web.Response:
        batch_id = _in_path(request, "id")
        owner = await self._owner(batch_id)
        who, _ = await self.allowed(request, "cancel", {"target": ("batch", batch_id)}, owner=owner)
        result = await self.queue.cancel(batch=batch_id, by=who.id)
        return web.json_response({"ended": result.ended, "asked": result.asked})

    async def cancel_job(self, request: web.Request) -> web.Response:
        job = await self._job(_in_path(request, "id"))
        who, _ = await self.allowed(request, "cancel", {"target": ("job", job["id"])},
                                    owner=job["submitter"])
        result = await self.queue.cancel(job=job["id"], by=who.id)
        return web.json_response({"ended": result.ended, "asked": result.asked})

    async def retry(self, request: web.Request) -> web.Response:
        batch_id = _in_path(request, "id")
        owner = await self._owner(batch_id)
        who, _ = await self.allowed(request, "retry", {"batch": batch_id}, owner=owner)
        try:
            again = await self.queue.retry_failed(batch_id, by=who.id)
        except QueueFull as e:
            raise ApiError(409, "queue_full", str(e)) from None
        if again is None:
            raise ApiError(409, "nothing_to_retry", say("nothing_to_retry", batch=batch_id))
        return web.json_response({"batch": again.batch_id, "jobs": again.jobs,
                                  "created": again.created}, status=201 if again.created else 200)

    async def submit(self, request: web.Request) -> web.Response:
        """multipart: template, sheet (a file), priority, not_before, skip_invalid, dry_run;
        or JSON: {template, rows: [{column: value}], …}. Idempotency-Key makes a retry safe."""
        who, role = await self.allowed(request, "gen")
        key = request.headers.get("Idempotency-Key")
        if key is not None and not 0 < len(key) <= 150:
            raise ApiError(400, "bad_idempotency_key", "Idempotency-Key is 1 to 150 characters")
        key = f"api:{who.user}:{key}" if key else None
        if key and (earlier := await self.queue.batch_by_key(key)) is not None:
            return web.json_response(await self._batch(earlier))  # a retried request: the same batch
        form = await _form(request)
        name = str(form.get("template") or "")
        template = self.templates.get(name)
        if template is None:
            raise ApiError(422, "no_template", f"no template {name!r}", templates=sorted(self.templates))
        priority = str(form.get("priority") or "normal").lower()
        if priority.upper() not in Priority.__members__:
            raise ApiError(422, "bad_priority", say("bad_priority", value=priority[:40]))
        not_before = 0.0
        if form.get("not_before"):
            from datetime import datetime, timezone
            try:
                not_before = parse_time(str(form["not_before"]),
                                        datetime.now(timezone.utc)).timestamp()
            except CommandError as e:
                raise ApiError(422, e.code, say(e.code, **e.details)) from None
        result = await self._intake(template, form, _flag(form.get("skip_invalid")))
        problems = [{"row": i.row, "column": i.column, "code": i.code, "message": i.render()}
                    for i in result.file_issues + result.issues]
        if not result.jobs:
            raise ApiError(422, "invalid_sheet", result.report(), problems=problems)
        if _flag(form.get("dry_run")):
            return web.json_response({"dry_run": True, "jobs": len(result.jobs),
                                      "problems": problems})
        try:
            await self.permissions.check_submission(who, role, len(result.jobs))
        except Refused as e:
            raise ApiError(429 if e.code == "limit_rate" else 403, e.code, e.render(),
                           **_plain(e.details)) from None
        try:
            done = await self.queue.enqueue(Submission(
                name, who.id, result.jobs, platform="api", priority=Priority[priority.upper()],
                idempotency_key=key, not_before=not_before,
                meta={"sheet": result.filename, "lang": "en"}))
        except QueueFull as e:
            raise ApiError(409, "queue_full", str(e), free=e.free, limit=e.limit) from None
        body = await self._batch(done.batch_id)
        body["problems"] = problems
        return web.json_response(body, status=201 if done.created else 200)

    # --- schedules (the twin of /schedule, /schedules, /unschedule) ---------------------
    async def schedule_list(self, request: web.Request) -> web.Response:
        from bot.schedules import next_fire
        await self.allowed(request, "schedules")
        now = self.queue.clock()
        return web.json_response({"schedules": [{
            "id": r["id"], "cron": r["cron"], "timezone": r["timezone"], "template": r["template"],
            "sheet": r["meta"].get("sheet"), "submitter": r["submitter"],
            "next": next_fire(r["cron"], r["timezone"], max(r["fired_at"], now)).isoformat()}
            for r in await self.schedules.all()]})

    async def schedule(self, request: web.Request) -> web.Response:
        """multipart: cron, template, sheet, its pictures, priority, timezone (IANA; UTC)."""
        from bot.schedules import make, next_fire, trigger
        who, _ = await self.allowed(request, "schedule")
        form = await _form(request)
        cron, zone = str(form.get("cron") or ""), str(form.get("timezone") or "UTC")
        try:
            trigger(cron, zone)
        except (ValueError, KeyError):
            raise ApiError(422, "bad_cron", say("bad_cron", value=cron[:60]) +
                           f" (time zone {zone[:40]})") from None
        template = self.templates.get(str(form.get("template") or ""))
        if template is None:
            raise ApiError(422, "no_template", f"no template {form.get('template')!r}",
                           templates=sorted(self.templates))
        priority = str(form.get("priority") or "normal").upper()
        if priority not in Priority.__members__:
            raise ApiError(422, "bad_priority", say("bad_priority", value=priority[:40]))
        if not isinstance(form.get("sheet"), tuple):
            raise ApiError(422, "no_rows", "a schedule needs a sheet file (multipart field sheet)")
        fetched: dict[str, bytes] = {}
        result = await self._intake(template, form, False, fetched)
        if not result.ok:
            raise ApiError(422, "invalid_sheet", result.report(), problems=[
                {"row": i.row, "column": i.column, "code": i.code, "message": i.render()}
                for i in result.file_issues + result.issues])
        name, data = form["sheet"]
        schedule_id = await make(self.schedules, self.store, cron=cron, timezone=zone,
                                 template=template.name, sheet_name=name, sheet=data,
                                 pictures=fetched, submitter=who.id, platform="api",
                                 conversation=None, priority=int(Priority[priority]), lang="en")
        return web.json_response({"id": schedule_id, "next": next_fire(
            cron, zone, self.queue.clock()).isoformat()}, status=201)

    async def unschedule(self, request: web.Request) -> web.Response:
        await self.allowed(request, "unschedule")
        schedule_id = _in_path(request, "id")
        if not await self.schedules.remove(schedule_id):
            raise ApiError(404, "no_schedule", f"there is no schedule {schedule_id}")
        return web.json_response({"removed": schedule_id})

    async def _intake(self, template, form: dict, skip: bool,
                      fetched: dict[str, bytes] | None = None):
        from bot.images import ImageResolver, recording
        from bot.intake import intake, intake_sheet
        from bot.sheets import Sheet
        files = _form_files(form)
        if fetched is not None:
            files = recording(files, fetched)
        images = ImageResolver(self.config.intake, self.store, assets_dir=self.config.assets_dir,
                               attachments=files)
        settings = self.config.intake
        sheet = form.get("sheet")
        if isinstance(sheet, tuple):
            filename, data = sheet
            return await intake(template, filename, data, settings=settings, images=images,
                                skip_invalid=skip)
        rows = form.get("rows")
        if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
            raise ApiError(422, "no_rows", "send a sheet file (multipart) or JSON rows: "
                           '{"template": …, "rows": [{"column": "value"}, …]}')
        headers = list(dict.fromkeys(k for r in rows for k in r))
        grid = Sheet("rows.json", 1, headers,
                     [(i + 2, [r.get(h) for h in headers]) for i, r in enumerate(rows)])
        return await intake_sheet(template, grid, settings=settings, images=images,
                                  skip_invalid=skip)


async def _form(request: web.Request) -> dict[str, Any]:
    """The submission's fields, from multipart or JSON; files as (name, bytes)."""
    if request.content_type == "application/json":
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "bad_json", "the body is not JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "bad_json", "the body is a JSON object")
        return body
    if not request.content_type.startswith("multipart/"):
        raise ApiError(415, "bad_content_type", "send multipart/form-data or application/json")
    form: dict[str, Any] = {"files": {}}
    try:
        async for part in await request.multipart():
            if part.filename:
                data = bytes(await part.read())
                filename = unquote(part.filename)  # aiohttp's client percent-encodes "/"
                if part.name == "sheet":
                    form["sheet"] = (filename, data)
                else:
                    form["files"][filename] = data
            elif part.name:
                form[part.name] = await part.text()
    except (ValueError, AssertionError, HttpProcessingError) as e:  # a malformed body
        raise ApiError(400, "bad_multipart", f"the multipart body cannot be read: {e}"[:300]) \
            from None
    return form


def _form_files(form: dict):
    files = form.get("files") or {}

    async def get(name: str) -> bytes | None:
        from pathlib import PurePosixPath
        return files.get(name) or files.get(PurePosixPath(name).name)
    return get


BIGGEST = 2**63 - 1  # ids are 64-bit in the database
BIGGEST_OFFSET = 2**31 - 1  # past any real row; SQLite's OFFSET is a 64-bit integer too


def _number(text: str) -> int:
    """A whole number the database can hold (ValueError otherwise; routes match digits only,
    so a path id that is too big is simply not found)."""
    value = int(text)
    if not 0 <= value <= BIGGEST:
        raise ValueError(f"{text} is out of range")
    return value


def _in_path(request: web.Request, name: str) -> int:
    try:
        return _number(request.match_info[name])
    except ValueError:
        raise ApiError(404, "not_found", f"no such {name}: {request.match_info[name][:30]}") \
            from None


def _flag(value: Any) -> bool:
    return value is True or str(value).lower() in ("1", "true", "yes", "on")


def _plain(details: dict) -> dict:
    return {k: v for k, v in details.items() if isinstance(v, (str, int, float, bool, type(None)))}


def _template(t) -> dict:
    return {"name": t.name, "description": t.description,
            "params": [{"name": p.name, "type": p.type, "required": p.required and p.default is None,
                        "default": p.default, "allowed": p.allowed, "aliases": list(p.aliases),
                        "help": p.help} for p in t.params.values()]}


def _job(j: dict) -> dict:
    return {"id": j["id"], "batch": j["batch_id"], "row": j["row"], "status": j["status"],
            "submitter": j["submitter"], "attempts": j["attempts"], "error": j["error"],
            "outputs": [f"{PREFIX}/jobs/{j['id']}/outputs/{i}" for i in range(len(j["outputs"]))],
            "enqueued_at": j["enqueued_at"], "started_at": j["started_at"],
            "finished_at": j["finished_at"]}


def _worker(w: dict) -> dict:
    return {"id": w["id"], "host": w["host"], "pid": w["pid"], "device": w["device"],
            "version": w["version"], "state": w["state"], "job": w["job_id"],
            "memory_used": w["memory_used"], "memory_total": w["memory_total"],
            "models": w["models"], "allow": w["allow"], "jobs_run": w["stats"].get("jobs", 0),
            "started_at": w["started_at"], "seen_at": w["seen_at"]}


def _running(j: dict) -> dict:
    return {"id": j["id"], "batch": j["batch_id"], "row": j["row"], "template": j["template"],
            "submitter": j["submitter"], "started_at": j["started_at"]}
