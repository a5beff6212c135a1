"""Webhooks, for admins: the endpoints and how their deliveries went, a delivery sent again,
a test sent now, an endpoint a 410 disabled turned back on (bot.webhooks.service). What
each event's body is, is in the document's `webhooks` section."""

from __future__ import annotations

from typing import Annotated, Literal

from aiohttp import web
from msgspec import Meta, Struct

from bot.web.callers import Callers
from bot.web.http import ApiError, in_path, page_of, respond
from bot.web.routes import Answer, Param, Route, Whole, page_size
from bot.webhooks.payloads import timestamp
from bot.webhooks.service import WebhookService
from storage.webhooks import Delivery as Row

MAX_PAGE = 500
ENDPOINT_ID = Param("endpoint", "path", Annotated[str, Meta(pattern=r"^[a-z0-9_-]{1,24}$")],
                    "endpoint id: its [[webhooks]] name, or the one `genbot webhooks list` shows")
DELIVERY_ID = Param("id", "path", Whole, "delivery id")
State = Literal["pending", "sent", "failed"]


class Endpoint(Struct):
    id: str
    url: str
    kind: Annotated[str, Meta(description="config: a [[webhooks]] entry; callback: a "
                                          "submission's callback_url")]
    description: str
    events: list[str]
    disabled: Annotated[str | None, Meta(description="why it is off (it answered 410 Gone), "
                                                     "and since when; null: on")]
    deliveries: Annotated[dict[str, int], Meta(description="its deliveries by state")]


class EndpointList(Struct):
    endpoints: list[Endpoint]


class Delivery(Struct):
    id: int
    endpoint: str
    type: Annotated[str, Meta(description="the event: batch.finished, job.succeeded …")]
    webhook_id: Annotated[str, Meta(description="the webhook-id header: the same on every try")]
    status: State
    attempts: int
    last_error: str | None
    response: Annotated[str | None, Meta(description="the HTTP status that took it")]
    created_at: str
    updated_at: str
    next_attempt_at: str | None  # while pending


class DeliveryPage(Struct):
    deliveries: list[Delivery]
    next_cursor: int | None  # pass as cursor for the next (older) page


class Enabled(Struct):
    endpoint: str
    enabled: bool  # false: it was on already


def delivery(row: Row) -> Delivery:
    m = row.message
    return Delivery(m.id, row.endpoint, m.payload.get("type", ""), m.payload.get("id", ""),
                    m.status, m.attempts, m.error,  # type: ignore[arg-type]
                    m.platform_id if m.status == "sent" else None, timestamp(row.created_at),
                    timestamp(row.updated_at),
                    timestamp(m.next_at) if m.status == "pending" else None)


class WebhookRoutes:
    def __init__(self, hooks: WebhookService, callers: Callers):
        self.hooks, self.callers = hooks, callers

    def routes(self) -> list[Route]:
        one = {200: Answer("how it went (status sent, or pending with its error)", Delivery)}
        return [
            Route("GET", "/webhooks", self.listing, "Webhook endpoints and their deliveries' "
                  "states (admins)", {200: Answer("OK", EndpointList)}),
            Route("GET", "/webhooks/deliveries", self.page, "Webhook deliveries, newest first "
                  "(admins)", {200: Answer("OK", DeliveryPage)}, errors=(400,), params=(
                      Param("endpoint", "query", str, "only this endpoint's"),
                      Param("status", "query", State, "only those in this state"),
                      Param("limit", "query", page_size(MAX_PAGE), default=50),
                      Param("cursor", "query", Whole, "next_cursor of the previous page"))),
            Route("GET", "/webhooks/deliveries/{id}", self.one, "One delivery (admins)",
                  {200: Answer("OK", Delivery)}, errors=(404,), params=(DELIVERY_ID,)),
            Route("POST", "/webhooks/deliveries/{id}/redeliver", self.redeliver,
                  "Send a delivery again now, with its webhook-id (admins)", one,
                  errors=(404, 409), params=(DELIVERY_ID,)),
            Route("POST", "/webhooks/endpoints/{endpoint}/test", self.test,
                  "Send webhook.test to an endpoint now (admins)", one, errors=(404,),
                  params=(ENDPOINT_ID,)),
            Route("POST", "/webhooks/endpoints/{endpoint}/enable", self.enable,
                  "Turn on an endpoint a 410 Gone turned off (admins)",
                  {200: Answer("OK", Enabled)}, errors=(404,), params=(ENDPOINT_ID,))]

    async def listing(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        return respond(EndpointList([
            Endpoint(s.endpoint.id, s.endpoint.url, s.endpoint.kind, s.endpoint.description,
                     list(s.events), f"{s.endpoint.disabled_reason} (since "
                     f"{timestamp(s.endpoint.disabled_at)})" if s.endpoint.disabled_at else None,
                     s.counts)
            for s in await self.hooks.endpoints_of(who)]))

    async def page(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        q = request.query
        limit, cursor = page_of(request, MAX_PAGE)
        status = q.get("status")
        if status is not None and status not in ("pending", "sent", "failed"):
            raise ApiError(400, "bad_query", "status is pending, sent or failed")
        rows = await self.hooks.deliveries(who, endpoint=q.get("endpoint"), status=status,
                                           before=cursor, limit=limit)
        return respond(DeliveryPage([delivery(r) for r in rows],
                                    rows[-1].id if len(rows) == limit else None))

    async def one(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        return respond(delivery(await self.hooks.delivery(who, in_path(request, "id"))))

    async def redeliver(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        return respond(delivery(await self.hooks.redeliver(who, in_path(request, "id"))))

    async def test(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        return respond(delivery(await self.hooks.test(who, request.match_info["endpoint"])))

    async def enable(self, request: web.Request) -> web.Response:
        who = await self.callers.who(request)
        endpoint = request.match_info["endpoint"]
        return respond(Enabled(endpoint, await self.hooks.enable(who, endpoint)))
