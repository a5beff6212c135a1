"""The REST API under /api/v1: the queue for scripts, under the same rules as chat.

A Bearer token from [api] tokens acts as api:USER, whose role [chat] gives
(bot.web.callers). Every change goes through the application layer (bot.app.application.App) —
the same permission checks, ownership, per-person limits and audit log as chat — and a
sheet through the same intake. Each resource has its module (queue, workers, platforms,
templates, batches, jobs, iterate, events, schedules) that only translates: HTTP in, a
call to the app, a typed record out (bot.web.http). The app's coded errors become
statuses in one place (`coded_errors`); every error is an Error record. Each route is
declared once (bot.web.routes), and `/api/v1/openapi.json` is generated from those declarations.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from aiohttp import web

from bot.app.application import App
from bot.errors import Coded, Conflict, Invalid, NotFound, Refused
from bot.web.batches import BatchRoutes
from bot.web.callers import Callers
from bot.web.deliveries import DeliveryRoutes
from bot.web.events import EventRoutes
from bot.web.http import PREFIX, ApiError
from bot.web.iterate import IterateRoutes
from bot.web.jobs import JobRoutes
from bot.web.me import MeRoutes
from bot.web.openapi import OpenApi
from bot.web.platforms import Healths, PlatformRoutes, nothing
from bot.web.queue import QueueRoutes
from bot.web.review import ReviewRoutes
from bot.web.routes import Resource, serve
from bot.web.schedules import ScheduleRoutes
from bot.web.templates import TemplateRoutes
from bot.web.uploads import body_limit
from bot.web.vocabulary import VocabularyRoutes
from bot.web.webhooks import WebhookRoutes
from bot.web.workers import WorkerRoutes
from bot.webhooks.payloads import DESCRIPTIONS, EVENTS
from bot.webhooks.service import WebhookService
from storage.db import DatabaseUnavailable

__all__ = ["Api", "body_limit", "coded_errors", "status_of"]  # body_limit: `genbot serve`
# sizes the app's client_max_size with it
log = logging.getLogger("genbot.api")
# The application layer's errors, as HTTP statuses.
STATUS: dict[type[Coded], int] = {NotFound: 404, Refused: 403, Invalid: 422, Conflict: 409}
STATUS_BY_CODE = {"limit_rate": 429}  # a rate limit: try again later
# aiohttp's own refusals (no route, wrong method, a body too big, a bad upgrade), by code.
HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large",
              400: "bad_request", 415: "bad_content_type"}


def status_of(error: Coded) -> int:
    if error.code in STATUS_BY_CODE:
        return STATUS_BY_CODE[error.code]
    return next((s for kind, s in STATUS.items() if isinstance(error, kind)), 400)


@web.middleware
async def coded_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every error is an Error: the app's (its code, English message and details),
    aiohttp's own (no such route, a body over the limit) and, as a last resort, a bug —
    logged with a reference, never shown. Files are never sniffed into something else."""
    try:
        response = await handler(request)
    except Coded as e:
        raise ApiError(status_of(e), e.code, e.render(), details=e.plain()) from None
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
    except DatabaseUnavailable as e:
        log.warning("%s %s: %s", request.method, request.path[:200], e)
        raise ApiError(503, "database_unavailable", "genbot's database cannot be reached "
                       "just now; try again shortly (a submission sent with an "
                       "Idempotency-Key is safe to send again)",
                       headers={"Retry-After": "5"}) from None
    except Exception:
        reference = uuid.uuid4().hex[:8]
        log.exception("internal error on %s %s (reference %s)", request.method,
                      request.path[:200], reference)
        raise ApiError(500, "internal", f"internal error (reference {reference})") from None
    if not response.prepared:  # (a WebSocket has sent its headers already)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


class Api:
    """Every resource of /api/v1 over one application layer, and who is asking."""

    def __init__(self, app: App, hooks: WebhookService, platforms: Healths = nothing):
        """`hooks`: the service's webhooks, whose admin actions /webhooks offers;
        `platforms`: how each of its chat platforms is doing, asked at each /platforms."""
        self.app, self.hooks = app, hooks
        self.callers = Callers(app)
        self.sessions = self.callers.sessions  # (the dashboard signs in with them)
        self.queue = QueueRoutes(app, self.callers)
        self.summary = self.queue.summary  # /queue's, which /healthz answers from
        self.events = EventRoutes(app, self.callers)
        self.resources: list[Resource] = [
            self.queue, WorkerRoutes(app, self.callers),
            PlatformRoutes(app, self.callers, platforms), TemplateRoutes(app, self.callers),
            BatchRoutes(app, self.callers), JobRoutes(app, self.callers),
            IterateRoutes(app, self.callers), ReviewRoutes(app, self.callers), self.events,
            ScheduleRoutes(app, self.callers),
            WebhookRoutes(self.hooks, self.callers), VocabularyRoutes(),
            MeRoutes(app, self.callers), DeliveryRoutes(app, self.callers)]

    def routes(self, app: web.Application) -> None:
        """Each resource's routes as declared, and the document generated from them."""
        app.middlewares.append(coded_errors)
        app.on_shutdown.append(self.events.close_streams)
        app.router.add_get("/healthz", self.queue.healthz)
        routes = [route for resource in self.resources for route in resource.routes()]
        serve(app, [*routes, OpenApi(routes, webhooks={
            name: (record, DESCRIPTIONS[name]) for name, record in EVENTS.items()}).route])
