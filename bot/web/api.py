"""The REST API under /api/v1: the queue for scripts, under the same rules as chat.

A Bearer token from [api] tokens acts as api:USER, whose role [chat] gives. Every change
goes through the application layer (bot.app.core.App) — the same permission checks,
ownership, per-person limits and audit log as chat — and a sheet through the same
intake, so its problems come back with the same row and column messages, as JSON. This
module only translates: HTTP in, a call to the app, JSON out; the app's coded errors
become statuses in one place (`coded_errors`). Errors are always
{"error": {"code", "message", ...}}. `/api/v1/openapi.json` describes every route.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from aiohttp import BodyPartReader, WSCloseCode, web
from aiohttp.http_exceptions import HttpProcessingError

from bot.app import values
from bot.app.core import App, CancelTarget, Scheduled, SubmitOptions
from bot.app.permissions import Action, Who
from bot.app.results import CONTACT, RESULTS, XLSX, key_value, write_results
from bot.errors import Coded, Conflict, Invalid, NotFound, Refused
from bot.intake.check import IntakeReport, SheetFile, SheetRows, SheetSource
from bot.intake.images import Attachments
from bot.web.sessions import Sessions, session_secret
from bot.web.shared import Shared
from executor.workflow import Template
from storage.config import Config
from storage.files import batch_folder
from storage.queue import ACTIVE, Status
from storage.records import Job, RunningJob, WorkerInfo
from storage.workers import Workers

log = logging.getLogger("genbot.api")
PREFIX = "/api/v1"
THUMBS = (128, 256, 512)  # a few sizes, each cached once per image: not one per pixel count
PAGE = 100  # jobs per page unless asked for fewer
MAX_JOBS_PAGE, MAX_BATCHES_PAGE = 1000, 500
HEALTH_FRESH = 1.0  # seconds before /healthz asks for a fresher summary
BODY_PICTURES = 10  # the default body limit: a sheet and this many pictures at their limits
EVENTS_POLL = 0.3
# The application layer's errors, as HTTP statuses.
STATUS: dict[type[Coded], int] = {NotFound: 404, Refused: 403, Invalid: 422, Conflict: 409}
STATUS_BY_CODE = {"limit_rate": 429}  # a rate limit: try again later


class ApiError(web.HTTPException):
    def __init__(self, status: int, code: str, message: str, *,
                 headers: dict[str, str] | None = None, **extra: Any):
        self.status_code = status
        text = json.dumps({"error": {"code": code, "message": message, **extra}},
                          ensure_ascii=False)
        super().__init__(text=text.encode("utf-8", "replace").decode(),  # (echoed header
                         content_type="application/json", headers=headers)  # bytes, surrogates)


def body_limit(config: Config) -> int:
    """The largest request body, in bytes: [api] max_body_mb, or a sheet and
    BODY_PICTURES pictures at their [intake] limits."""
    mb = config.api.max_body_mb or (config.intake.max_file_mb
                                    + BODY_PICTURES * config.intake.max_image_mb)
    return int(mb * 2**20)


# aiohttp's own refusals (no route, wrong method, a body too big, a bad upgrade), by code.
HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large",
              400: "bad_request", 415: "bad_content_type"}


def status_of(error: Coded) -> int:
    if error.code in STATUS_BY_CODE:
        return STATUS_BY_CODE[error.code]
    return next((s for kind, s in STATUS.items() if isinstance(error, kind)), 400)


@web.middleware
async def coded_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every error is JSON: the app's (its code, English message and details), aiohttp's
    own (no such route, a body over the limit) and, as a last resort, a bug — logged with
    a reference, never shown. Files are never sniffed into something else."""
    try:
        response = await handler(request)
    except Coded as e:
        raise ApiError(status_of(e), e.code, e.render(), **e.plain()) from None
    except web.HTTPException as e:
        if e.status < 400 or e.content_type == "application/json":
            raise
        headers = {k: v for k, v in e.headers.items()  # Allow, WWW-Authenticate, Retry-After
                   if k.lower() not in ("content-type", "content-length")}
        message = {404: f"no such route: {request.method} {request.path[:100]} (the API's "
                        f"routes: {PREFIX}/openapi.json)",
                   405: f"{request.method} is not allowed here (allowed: "
                        f"{e.headers.get('Allow', '')})"}.get(e.status, e.text or e.reason)
        raise ApiError(e.status, HTTP_CODES.get(e.status, "http_error"), message,
                       headers=headers) from None
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        reference = uuid.uuid4().hex[:8]
        log.exception("internal error on %s %s (reference %s)", request.method,
                      request.path[:200], reference)
        raise ApiError(500, "internal", f"internal error (reference {reference})") from None
    if not response.prepared:  # (a WebSocket has sent its headers already)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


class Api:
    def __init__(self, app: App):
        self.app, self.config, self.queue = app, app.config, app.queue
        self.store, self.templates = app.store, app.templates
        config = app.config
        self.tokens = {t: u for t, _, u in (e.partition("=") for e in config.api.tokens)}
        self.sessions = Sessions(self.tokens, session_secret(config.api.session_secret,
                                                             config.data_dir),
                                 hours=config.api.session_hours, clock=app.clock,
                                 ended=app.access.session_ended)
        self.workers = Workers.of(app.queue)
        self.streams: set[web.WebSocketResponse] = set()  # open /events, closed at shutdown
        self.summary = Shared(self._queue_summary)  # /queue and /healthz, shared
        self.max_body = body_limit(config)

    def routes(self, app: web.Application) -> None:
        app.middlewares.append(coded_errors)
        app.on_shutdown.append(self._close_streams)
        r = app.router
        r.add_get("/healthz", self.healthz)
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
    async def who(self, request: web.Request) -> Who:
        """api:USER, from a Bearer token or the dashboard's session cookie; 401 before
        anything else is looked at."""
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else ""
        if not token and request.path == f"{PREFIX}/events":
            token = request.query.get("token", "")  # scripts' WebSockets may not set headers
        if token:
            user = self.sessions.user_of(token)
        elif (session := await self.sessions.of(request)) is not None:
            if (why := self.sessions.forged(request, session)) is not None:
                raise ApiError(403, "csrf", why)
            user = session.user
        else:
            user = None
        if user is None:
            raise ApiError(401, "unauthorized", "a valid Bearer token is required",
                           headers_hint="Authorization: Bearer TOKEN")
        return Who("api", user, "api")

    async def allowed(self, request: web.Request, action: Action) -> Who:
        """Who asks, if they may take `action` (a read, or before reading a body)."""
        who = await self.who(request)
        await self.app.permit(who, action)
        return who

    # --- reading ------------------------------------------------------------------------
    async def openapi(self, request: web.Request) -> web.Response:
        from bot.web.openapi import document
        return web.json_response(document())

    async def queue_status(self, request: web.Request) -> web.Response:
        await self.allowed(request, Action.QUEUE)
        return web.json_response(await self.summary.get())

    async def _queue_summary(self) -> dict[str, Any]:
        """The whole /queue answer: computed once for every caller asking meanwhile
        (bot.web.shared), whatever the number of callers."""
        seq = await self.queue.last_event_seq()  # first: the stream from here misses nothing
        state = await self.queue.state()
        active = await self.queue.active_counts()
        return {
            "paused": state.paused, "changed_by": state.changed_by,
            "queued": active.queued, "running": active.running,
            "counts": await self.queue.counts(),
            "eta_seconds": await self.queue.eta(active.queued - 1) if active.queued else 0,
            "jobs": [_running(j) for j in await self.queue.running()],
            "workers": [_worker(w) for w in await self.workers.all() if w.state != "stopped"],
            "seq": seq}

    async def healthz(self, request: web.Request) -> web.Response:
        """Liveness: never waits on the database. It answers from the last /queue
        summary (`age` seconds old) and refreshes that in the background."""
        self.summary.refresh_soon(older_than=HEALTH_FRESH)
        latest = self.summary.latest
        body: dict[str, Any] = {"status": "ok"}
        if latest is not None:
            body |= {"paused": latest["paused"], "queued": latest["queued"],
                     "running": latest["running"],
                     "age": round(time.monotonic() - self.summary.latest_at, 3)}
        return web.json_response(body)

    async def worker_list(self, request: web.Request) -> web.Response:
        """Every executor the registry knows, stopped ones included, on any host."""
        await self.allowed(request, Action.QUEUE)
        return web.json_response({"workers": [_worker(w) for w in await self.workers.all()]})

    async def template_list(self, request: web.Request) -> web.Response:
        await self.allowed(request, Action.TEMPLATES)
        return web.json_response({"templates": [_template(t) for _, t in
                                                sorted(self.templates.items())]})

    async def template(self, request: web.Request) -> web.Response:
        await self.allowed(request, Action.TEMPLATE)
        t = self.templates.get(request.match_info["name"])
        if t is None:
            raise ApiError(404, "no_template", f"no template {request.match_info['name']!r}",
                           templates=sorted(self.templates))
        return web.json_response(_template(t))

    async def batch(self, request: web.Request) -> web.Response:
        await self.allowed(request, Action.STATUS)
        return web.json_response(await self._batch(_in_path(request, "id")))

    async def _batch(self, batch_id: int) -> dict:
        batch = await self.app.batch(batch_id)
        progress = await self.queue.batch_progress(batch_id)
        assert progress is not None
        meta = {k: v for k, v in batch.meta.items() if k != "context"}
        demo = self.config.demo_models(await self.queue.batch_models(batch_id))
        return {"id": batch_id, "template": batch.template, "submitter": batch.submitter,
                "priority": batch.priority.label, "created_at": batch.created_at,
                "total": progress.total, "done": progress.done, "counts": progress.counts,
                "jobs_ahead": progress.jobs_ahead, "eta_seconds": progress.eta_seconds,
                "meta": meta, "demo_models": demo,
                "files": {"contact": f"{PREFIX}/batches/{batch_id}/files/{CONTACT}",
                          "results": f"{PREFIX}/batches/{batch_id}/files/{RESULTS}"}}

    async def batches(self, request: web.Request) -> web.Response:
        """Batches newest first with their jobs counted, a page at a time."""
        await self.allowed(request, Action.STATUS)
        q = request.query
        try:
            limit = _number(q.get("limit", "50"))
            cursor = _number(q["cursor"]) if q.get("cursor") else None
        except ValueError:
            raise ApiError(400, "bad_query", "limit and cursor are whole numbers") from None
        if not 1 <= limit <= MAX_BATCHES_PAGE:
            raise ApiError(400, "bad_query", f"limit is 1 to {MAX_BATCHES_PAGE}")
        rows = await self.queue.page_batches(before=cursor, submitter=q.get("submitter"),
                                             limit=limit)
        return web.json_response({"batches": [{
            "id": b.id, "template": b.template, "submitter": b.submitter,
            "priority": b.priority.label, "created_at": b.created_at,
            "total": b.total_jobs, "counts": r.counts, "sheet": b.meta.get("sheet")}
            for r in rows for b in [r.batch]],
            "next_cursor": rows[-1].batch.id if len(rows) == limit else None})

    async def jobs(self, request: web.Request) -> web.Response:
        """Jobs by id, newest first, a page at a time: `cursor` is the last id seen; or
        `offset` (then `total` comes too), for a view that jumps to any row."""
        await self.allowed(request, Action.STATUS)
        q = request.query
        try:
            limit = _number(q.get("limit", str(PAGE)))
            cursor = _number(q["cursor"]) if q.get("cursor") else None
            batch = _number(q["batch"]) if q.get("batch") else None
            offset = _number(q["offset"]) if q.get("offset") else None
        except ValueError:
            raise ApiError(400, "bad_query", "limit, cursor, offset and batch are whole numbers") \
                from None
        status = q.get("status")
        if status is not None and status not in Status.__members__.values():
            raise ApiError(400, "bad_query",
                           f"status is one of {', '.join(s.value for s in Status)}")
        if not 1 <= limit <= MAX_JOBS_PAGE:
            raise ApiError(400, "bad_query", f"limit is 1 to {MAX_JOBS_PAGE}")
        if offset is not None and cursor is not None:
            raise ApiError(400, "bad_query", "use cursor or offset, not both")
        submitter = q.get("submitter")
        rows = await self.queue.page_jobs(before=cursor, limit=limit, offset=min(
            offset or 0, BIGGEST_OFFSET), batch=batch, status=status, submitter=submitter)
        body: dict[str, Any] = {"jobs": [_job(j, self.templates) for j in rows],
                                "next_cursor": rows[-1].id if len(rows) == limit else None}
        if offset is not None:
            body["total"] = await self.queue.count_jobs(batch=batch, status=status,
                                                        submitter=submitter)
        return web.json_response(body)

    async def job(self, request: web.Request) -> web.Response:
        await self.allowed(request, Action.STATUS)
        return web.json_response(_job(await self.app.job(_in_path(request, "id")), self.templates))

    async def output(self, request: web.Request) -> web.StreamResponse:
        await self.allowed(request, Action.STATUS)
        job = await self.app.job(_in_path(request, "id"))
        index = _in_path(request, "index")
        if index >= len(job.outputs):
            raise ApiError(404, "no_output", f"job {job.id} has {len(job.outputs)} outputs")
        if "size" not in request.query:
            return await self._file(job.outputs[index])
        size = request.query["size"]
        if size not in map(str, THUMBS):
            raise ApiError(400, "bad_query",
                           f"size is one of {', '.join(map(str, THUMBS))} (pixels)")
        return await self._file(await asyncio.to_thread(self._thumbnail, job.outputs[index],
                                                        int(size)))

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
        await self.allowed(request, Action.STATUS)
        batch_id, name = _in_path(request, "id"), request.match_info["name"]
        if name not in (CONTACT, RESULTS):
            raise ApiError(404, "no_file", f"a batch has {CONTACT} and {RESULTS}")
        relative = f"{batch_folder(batch_id)}/{name}"
        if not (await asyncio.to_thread(self.store.path, relative)).is_file():  # made when
            # asked, once the batch is done
            batch = await self.app.batch(batch_id)
            jobs = await self.queue.batch_jobs(batch_id)
            if any(j.status in ACTIVE for j in jobs):
                raise ApiError(404, "not_yet", f"batch {batch_id} is not finished")
            await asyncio.to_thread(write_results, self.store, batch, jobs,
                                    self.templates.get(batch.template), self.config.executor.font)
        if name == RESULTS:
            return await self._file(relative, {
                "Content-Type": XLSX,
                "Content-Disposition": f'attachment; filename="batch-{batch_id}-{RESULTS}"'})
        return await self._file(relative)

    async def _file(self, relative: str,
                    headers: dict[str, str] | None = None) -> web.StreamResponse:
        try:
            path = await asyncio.to_thread(self.store.path, relative)  # (may fetch it)
        except ValueError:
            raise ApiError(404, "no_file", "not in the output store") from None
        if not path.is_file():
            raise ApiError(404, "no_file", f"{relative} is not there (not made yet, or deleted)")
        return web.FileResponse(path, headers=headers)

    async def events(self, request: web.Request) -> web.WebSocketResponse:
        """Queue events as they happen, from `after` (a sequence number) on: a client that
        reconnects with the last seq it saw misses nothing."""
        await self.allowed(request, Action.STATUS)
        try:
            seq = _number(request.query.get("after", "0"))
        except ValueError:
            raise ApiError(400, "bad_query", "after is a sequence number") from None
        ws = web.WebSocketResponse(heartbeat=30)
        if not ws.can_prepare(request).ok:
            raise ApiError(426, "websocket_only", "/events is a WebSocket: connect with "
                           "Upgrade: websocket (a plain GET gets nothing)",
                           headers={"Upgrade": "websocket"})
        await ws.prepare(request)
        closing = asyncio.ensure_future(ws.receive())  # the client's close (it sends nothing else)
        self.streams.add(ws)
        bell = self.queue.bell
        poll = EVENTS_POLL * (10 if bell.live else 1)  # PostgreSQL rings when events come
        try:
            while not closing.done():
                seen = bell.rung
                for event in await self.queue.events_after(seq, 500):
                    seq = event.seq
                    await ws.send_json(event.as_json())
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

    # --- changing: each a call to the application layer --------------------------------
    async def pause(self, request: web.Request) -> web.Response:
        return web.json_response({"paused": True,
                                  "changed": await self.app.pause(await self.who(request))})

    async def resume(self, request: web.Request) -> web.Response:
        return web.json_response({"paused": False,
                                  "changed": await self.app.resume(await self.who(request))})

    async def cancel_batch(self, request: web.Request) -> web.Response:
        who = await self.who(request)
        result = await self.app.cancel(who, CancelTarget.batch(_in_path(request, "id")))
        return web.json_response({"ended": result.ended, "asked": result.asked})

    async def cancel_job(self, request: web.Request) -> web.Response:
        who = await self.who(request)
        result = await self.app.cancel(who, CancelTarget.job(_in_path(request, "id")))
        return web.json_response({"ended": result.ended, "asked": result.asked})

    async def retry(self, request: web.Request) -> web.Response:
        who = await self.who(request)
        again = await self.app.retry(who, _in_path(request, "id"))
        return web.json_response({"batch": again.batch_id, "jobs": again.jobs,
                                  "created": again.created}, status=201 if again.created else 200)

    async def submit(self, request: web.Request) -> web.Response:
        """multipart: template, sheet (a file), priority, not_before, skip_invalid, dry_run;
        or JSON: {template, rows: [{column: value}], …}. Idempotency-Key makes a retry safe."""
        who = await self.allowed(request, Action.GEN)  # before the body is read
        key = request.headers.get("Idempotency-Key")
        if key is not None and not 0 < len(key) <= 150:
            raise ApiError(400, "bad_idempotency_key", "Idempotency-Key is 1 to 150 characters")
        form = await _form(request, self.config, self.max_body)
        name = str(form.get("template") or "")
        self.app.template(name)  # fields are checked in order: the template first
        at = None
        if form.get("not_before"):
            at = values.start_time(str(form["not_before"]), datetime.now(UTC))
        options = SubmitOptions(
            priority=values.priority(str(form.get("priority") or "normal")), at=at,
            skip_invalid=_flag(form.get("skip_invalid")), dry_run=_flag(form.get("dry_run")),
            key=f"api:{who.user}:{key}" if key else None)
        result = await self.app.submit(who, name, _sheet(form), _form_files(form), options)
        if isinstance(result, IntakeReport):
            if not result.jobs:
                raise ApiError(422, "invalid_sheet", result.report(), problems=result.problems())
            return web.json_response({"dry_run": True, "jobs": len(result.jobs),
                                      "problems": result.problems()})
        body = await self._batch(result.batch_id)
        if result.report is not None:  # None: a retried request, answered with its batch
            body["problems"] = result.report.problems()
        return web.json_response(body, status=201 if result.created else 200)

    # --- schedules (the twin of /schedule, /schedules, /unschedule) ---------------------
    async def schedule_list(self, request: web.Request) -> web.Response:
        await self.allowed(request, Action.SCHEDULES)
        now = self.app.clock()
        return web.json_response({"schedules": [{
            "id": r.id, "cron": r.cron, "timezone": r.timezone, "template": r.template,
            "sheet": r.meta.get("sheet"), "submitter": r.submitter,
            "next": _iso(values.next_fire(r.cron, r.timezone, max(r.fired_at, now)))}
            for r in await self.app.schedules.all()]})

    async def schedule(self, request: web.Request) -> web.Response:
        """multipart: cron, template, sheet, its pictures, priority, timezone (IANA; UTC)."""
        who = await self.allowed(request, Action.SCHEDULE)  # before the body is read
        form = await _form(request, self.config, self.max_body)
        sheet = form.get("sheet")
        if not isinstance(sheet, tuple):
            raise ApiError(422, "no_rows", "a schedule needs a sheet file (multipart field sheet)")
        made = await self.app.schedule(
            who, str(form.get("cron") or ""), str(form.get("timezone") or "UTC"),
            str(form.get("template") or ""), SheetFile(*sheet), _form_files(form),
            priority=values.priority(str(form.get("priority") or "normal")))
        if not isinstance(made, Scheduled):
            raise ApiError(422, "invalid_sheet", made.report(), problems=made.problems())
        return web.json_response({"id": made.id, "next": _iso(made.next)}, status=201)

    async def unschedule(self, request: web.Request) -> web.Response:
        who = await self.who(request)
        schedule_id = _in_path(request, "id")
        await self.app.unschedule(who, schedule_id)
        return web.json_response({"removed": schedule_id})


def _too_large(what: str, size: int, limit_mb: float, key: str) -> ApiError:
    return ApiError(413, "too_large", f"{what} is larger than {limit_mb:g} MB ({key})",
                    limit_mb=limit_mb, limit_key=key, size_mb=round(size / 2**20, 2))


async def _form(request: web.Request, config: Config, max_body: int) -> dict[str, Any]:
    """The submission's fields, from multipart or JSON; files as (name, bytes). Each
    file is held to its own limit as it arrives, and the whole body to `max_body`."""
    whole = (max_body, config.api.max_body_mb or max_body / 2**20,
             "[api] max_body_mb" if config.api.max_body_mb else
             f"[intake] max_file_mb + {BODY_PICTURES} × max_image_mb")
    if (request.content_length or 0) > max_body:
        raise _too_large("the request body", request.content_length or 0, *whole[1:])
    if request.content_type == "application/json":
        try:
            body = await request.json()
        except web.HTTPRequestEntityTooLarge:
            raise _too_large("the request body", request.content_length or max_body,
                             *whole[1:]) from None
        except ValueError:
            raise ApiError(400, "bad_json", "the body is not JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "bad_json", "the body is a JSON object")
        return body
    if not request.content_type.startswith("multipart/"):
        raise ApiError(415, "bad_content_type", "send multipart/form-data or application/json")
    form: dict[str, Any] = {"files": {}}
    total = 0
    try:
        async for part in await request.multipart():
            if not isinstance(part, BodyPartReader):
                raise ValueError("a nested multipart body")
            if part.filename:
                filename = unquote(part.filename)  # aiohttp's client percent-encodes "/"
                sheet = part.name == "sheet"
                limit_mb = config.intake.max_file_mb if sheet else config.intake.max_image_mb
                key = "[intake] max_file_mb" if sheet else "[intake] max_image_mb"
                data = bytearray()
                while chunk := await part.read_chunk():
                    data += chunk
                    total += len(chunk)
                    if len(data) > limit_mb * 2**20:
                        raise _too_large(f"{'the sheet' if sheet else 'the file'} "
                                         f"{filename[:80]!r}", len(data), limit_mb, key)
                    if total > max_body:
                        raise _too_large("the request body", total, *whole[1:])
                if sheet:
                    form["sheet"] = (filename, bytes(data))
                else:
                    form["files"][filename] = bytes(data)
            elif part.name:
                text = await part.text()
                total += len(text)
                if total > max_body:
                    raise _too_large("the request body", total, *whole[1:])
                form[part.name] = text
    except web.HTTPRequestEntityTooLarge:
        raise _too_large("a field", max_body, *whole[1:]) from None
    except (ValueError, AssertionError, HttpProcessingError, LookupError) as e:  # malformed
        raise ApiError(400, "bad_multipart", f"the multipart body cannot be read: {e}"[:300]) \
            from None
    return form


def _form_files(form: dict[str, Any]) -> Attachments:
    """The pictures sent along, by name (or by the name's last part)."""
    files = form.get("files") or {}

    async def get(name: str) -> bytes | None:
        from pathlib import PurePosixPath
        return files.get(name) or files.get(PurePosixPath(name).name)
    return get


def _sheet(form: dict[str, Any]) -> SheetSource:
    """The sheet: a file (multipart), or rows (JSON)."""
    sheet = form.get("sheet")
    if isinstance(sheet, tuple):
        return SheetFile(*sheet)
    rows = form.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ApiError(422, "no_rows", "send a sheet file (multipart) or JSON rows: "
                       '{"template": …, "rows": [{"column": "value"}, …]}')
    return SheetRows(rows)


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when else None


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


def _template(t: Template) -> dict:
    return {"name": t.name, "description": t.description,
            "params": [{"name": p.name, "type": p.type,
                        "required": p.required and p.default is None,
                        "default": p.default, "allowed": p.allowed, "aliases": list(p.aliases),
                        "help": p.help} for p in t.params.values()]}


def _job(j: Job, templates: dict[str, Template]) -> dict:
    key = key_value(j, templates.get(j.template or ""))
    return {"id": j.id, "batch": j.batch_id, "row": j.row, "key": key, "status": str(j.status),
            "submitter": j.submitter, "attempts": j.attempts, "error": j.error,
            "outputs": [f"{PREFIX}/jobs/{j.id}/outputs/{i}" for i in range(len(j.outputs))],
            "enqueued_at": j.enqueued_at, "started_at": j.started_at,
            "finished_at": j.finished_at}


def _worker(w: WorkerInfo) -> dict:
    return {"id": w.id, "host": w.host, "pid": w.pid, "device": w.device,
            "version": w.version, "state": w.state, "job": w.job_id,
            "memory_used": w.memory_used, "memory_total": w.memory_total,
            "models": w.models, "allow": w.allow, "jobs_run": w.stats.get("jobs", 0),
            "doing": {"what": w.doing[0], "models": w.doing[1]} if w.doing else None,
            "cannot_run": w.cannot_run,
            "started_at": w.started_at, "seen_at": w.seen_at}


def _running(j: RunningJob) -> dict:
    return {"id": j.id, "batch": j.batch_id, "row": j.row, "template": j.template,
            "submitter": j.submitter, "started_at": j.started_at}
