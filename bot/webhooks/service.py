"""Webhooks in a running genbot: the loops that announce and deliver, and what an admin
may do with them — list endpoints and deliveries, send a test, redeliver, re-enable one
a 410 disabled — written once for the API, the CLI and chat, each checked as
Action.WEBHOOKS (admins)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from aiohttp.abc import AbstractResolver

from bot.app.application import App
from bot.app.deliveries import Shipper, drops
from bot.app.permissions import Action, Who
from bot.errors import Conflict, NotFound
from bot.settings import EVENTS, ApiConfig, WebhookConfig
from bot.webhooks import payloads
from bot.webhooks.announcer import Announcer
from bot.webhooks.delivery import Deliverer
from bot.webhooks.endpoints import Endpoints
from storage.logs import Retrying
from storage.outbox import Outbox
from storage.webhooks import Delivery, Endpoint, Webhooks

log = logging.getLogger("genbot.webhooks")
ANNOUNCE_POLL = 0.3  # seconds between reads of the event log when it had nothing new


@dataclass(frozen=True)
class EndpointState:
    """An endpoint as an admin sees it: where, what it hears, and how its deliveries went."""
    endpoint: Endpoint
    events: tuple[str, ...]
    counts: dict[str, int]  # deliveries by status: pending, sent, failed


class WebhookService:
    def __init__(self, app: App, *, dns: AbstractResolver | None = None):
        self.app, db, clock = app, app.queue.db, app.clock
        self.settings = app.config[WebhookConfig]
        self.outbox = Outbox(db, clock=clock)
        self.webhooks = Webhooks(db, clock=clock)
        self.endpoints = Endpoints(app.config)
        self.announcer = Announcer(app.queue, self.outbox, self.webhooks, self.endpoints,
                                   payloads.Links(app.config[ApiConfig].public_url), clock=clock)
        self.deliverer = Deliverer(self.outbox, self.webhooks, self.endpoints, self.settings,
                                   dns=dns, clock=clock)
        # (shipping a batch's channel files comes before the webhook that says so)
        self.shipper = Shipper(app.queue, app.store, self.outbox, drops(app.config), app=app)
        self.tasks: list[asyncio.Task] = []

    # --- running -------------------------------------------------------------------------
    async def start(self) -> None:
        await self.announcer.start()
        await self.shipper.start()
        self.tasks = [asyncio.create_task(self._announce(), name="webhook-announcer"),
                      asyncio.create_task(self._ship(), name="channel-shipper"),
                      asyncio.create_task(self.deliverer.run(), name="webhook-deliverer")]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []

    async def pump(self) -> None:
        """One round of everything, in the caller's task (tests, `genbot run`)."""
        while await self.shipper.run_once():
            pass
        while await self.announcer.run_once():
            pass
        await self.deliverer.run_once()
        await asyncio.gather(*self.deliverer.draining.values())

    async def _announce(self) -> None:
        """Follow the event log: at once when the database rings (PostgreSQL), else by
        polling; a delivery owed wakes the deliverer."""
        await self.app.queue.bell.follow(self.announcer.run_once, self.deliverer.wake.set,
                                         ANNOUNCE_POLL,
                                         Retrying(log, "webhooks: following the event log"))

    async def _ship(self) -> None:
        """Follow the event log for batches whose channel files ship; a drop that is away
        (a bucket, a folder's server) is tried again, the cursor not moved past it."""
        await self.app.queue.bell.follow(self.shipper.run_once, lambda: None, ANNOUNCE_POLL,
                                         Retrying(log, "deliveries: putting files that ship"))

    # --- for admins ----------------------------------------------------------------------
    async def endpoints_of(self, who: Who) -> list[EndpointState]:
        await self.app.permit(who, Action.WEBHOOKS)
        counts = await self.webhooks.counts()
        known = {e.id: e for e in await self.webhooks.endpoints()}
        for e in self.endpoints.configured.values():  # (before the service first ran)
            known.setdefault(e.id, Endpoint(e.id, e.url, e.kind, e.description, None, None,
                                            self.app.clock()))
        return [EndpointState(e, self.endpoints.configured[e.id].events
                              if e.id in self.endpoints.configured else EVENTS,
                              {s: n for (i, s), n in counts.items() if i == e.id})
                for e in known.values()]

    async def deliveries(self, who: Who, *, endpoint: str | None = None,
                         status: str | None = None, before: int | None = None,
                         limit: int = 50) -> list[Delivery]:
        await self.app.permit(who, Action.WEBHOOKS)
        return await self.webhooks.deliveries(endpoint=endpoint, status=status, before=before,
                                              limit=limit)

    async def delivery(self, who: Who, delivery_id: int) -> Delivery:
        await self.app.permit(who, Action.WEBHOOKS)
        found = await self.webhooks.delivery(delivery_id)
        if found is None:
            raise NotFound("no_delivery", delivery=delivery_id)
        return found

    async def test(self, who: Who, endpoint_id: str) -> Delivery:
        """Send `webhook.test` to an endpoint now, as any event is sent (signed, recorded
        among its deliveries), and answer how it went."""
        await self.app.permit(who, Action.WEBHOOKS)
        endpoint = self.endpoints.configured.get(endpoint_id)
        if endpoint is None:
            known = await self.webhooks.endpoint(endpoint_id)
            endpoint = self.endpoints.get(endpoint_id, known.url if known else None)
        if endpoint is None:
            raise NotFound("no_endpoint", endpoint=endpoint_id[:40],
                           endpoints=", ".join(self.endpoints.configured) or "-")
        now = self.app.clock()
        data = payloads.Test(endpoint.id, f"a test from genbot, sent by {who.id}")
        key = await self.announcer.owe_now(endpoint, "webhook.test", f"t{time.time_ns()}", now,
                                          data)
        await self.deliverer.now(key)
        return await self._by_key(key)

    async def redeliver(self, who: Who, delivery_id: int) -> Delivery:
        """Send a delivery again, now, with its webhook-id (the receiver dedupes)."""
        found = await self.delivery(who, delivery_id)
        if not await self.webhooks.redeliver(delivery_id):
            raise Conflict("delivery_owed", delivery=delivery_id)
        await self.app.permissions.allowed(who, Action.WEBHOOKS, what="redeliver",
                                           subject=delivery_id)
        await self.deliverer.now(found.message.key)
        return await self._by_key(found.message.key)

    async def enable(self, who: Who, endpoint_id: str) -> bool:
        """Turn an endpoint a 410 disabled back on; False: it was not disabled."""
        await self.app.permit(who, Action.WEBHOOKS)
        if await self.webhooks.endpoint(endpoint_id) is None:
            raise NotFound("no_endpoint", endpoint=endpoint_id[:40],
                           endpoints=", ".join(self.endpoints.configured) or "-")
        await self.app.permissions.allowed(who, Action.WEBHOOKS, what="enable",
                                           endpoint=endpoint_id)
        return await self.webhooks.enable(endpoint_id)

    async def _by_key(self, key: str) -> Delivery:
        message = await self.outbox.get(key)
        assert message is not None, "a delivery just owed is there"
        found = await self.webhooks.delivery(message.id)
        assert found is not None
        return found

