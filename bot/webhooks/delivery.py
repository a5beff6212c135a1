"""Delivery: each owed webhook event signed, posted, and retried until taken or given up.

Signed per Standard Webhooks by the `standardwebhooks` package: headers webhook-id (the
same on every attempt, so the receiver dedupes), webhook-timestamp (this attempt's) and
webhook-signature (`v1,` base64 HMAC-SHA256 of "id.timestamp.body" under the endpoint's
whsec_ secret).

Every endpoint drains in its own task with its own connection pool, at most [webhook]
concurrency deliveries at once, each bounded by [webhook] timeout: a receiver that
hangs costs its own endpoint that long, and no other endpoint or chat message waits.

  2xx                         delivered
  410 Gone                    the endpoint is disabled; its owed deliveries fail
  429 / 503 with Retry-After  again when it says (no attempt used, an hour at most)
  anything else, a timeout    again after 5 s, 25 s, 2 min … ×5 up to 6 h, ±20% jitter,
                              until [webhook] retry_hours have passed; then failed
  a private address           failed: a callback URL may not reach one (bot.outbound)

A delivery is claimed before it is sent (storage.outbox), so of two services on one
database one sends it; one that dies mid-send leaves it to fall due again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver
from standardwebhooks.webhooks import Webhook

from bot.outbound import refusal, session
from bot.settings import WebhookConfig
from bot.webhooks.endpoints import Endpoint, Endpoints
from storage.logs import Retrying
from storage.outbox import Outbox
from storage.records import Message
from storage.webhooks import PLATFORM, Webhooks

log = logging.getLogger("genbot.webhooks")
FIRST_WAIT, GROWTH, LONGEST_WAIT, JITTER = 5.0, 5.0, 6 * 3600.0, 0.2
LONGEST_RETRY_AFTER = 3600.0  # seconds: a receiver's Retry-After is honoured up to this
IDLE = 1.0  # seconds between looks for due deliveries when nothing rang
BATCHES = 4  # deliveries claimed at once, in units of [webhook] concurrency
USER_AGENT = "genbot-webhooks/1"
OUTCOMES = ("delivered", "retried", "failed", "gone")


def backoff(attempts: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds before the next try, after `attempts` tries: 5 s, 25 s, 125 s … ×5 up to
    6 h, each spread ±20% so that deliveries failed together do not return together."""
    wait = min(FIRST_WAIT * GROWTH ** attempts, LONGEST_WAIT)
    return wait * (1 - JITTER + 2 * JITTER * rand())


@dataclass(frozen=True)
class Attempt:
    """How one try went: delivered, retried, failed or gone (410); `status` the HTTP
    status where one came back."""
    outcome: str
    status: int | None = None
    error: str | None = None
    retry_after: float | None = None  # seconds the receiver asked for (429, 503)


class Deliverer:
    def __init__(self, outbox: Outbox, webhooks: Webhooks, endpoints: Endpoints,
                 settings: WebhookConfig, *, dns: AbstractResolver | None = None,
                 clock: Callable[[], float] = time.time):
        self.outbox, self.webhooks, self.endpoints = outbox, webhooks, endpoints
        self.settings, self.dns, self.clock = settings, dns, clock
        self.counts: Counter[tuple[str, str]] = Counter()  # (endpoint, outcome) -> tries
        self.wake = asyncio.Event()
        self.draining: dict[str, asyncio.Task] = {}

    # --- the loop -------------------------------------------------------------------------
    async def run(self) -> None:
        """Forever: each endpoint with a delivery due gets a task that drains it."""
        try:
            retrying = Retrying(log, "webhooks: reading the deliveries owed")
            while True:
                try:
                    await self.run_once()
                    retrying.worked()
                except Exception as e:  # noqa: BLE001 - a background loop: said once by Retrying, tried again
                    retrying.failed(e)
                with contextlib.suppress(TimeoutError):  # (asyncio.timeout: see Waker.wait)
                    async with asyncio.timeout(IDLE):
                        await self.wake.wait()
                self.wake.clear()
        finally:
            for task in self.draining.values():
                task.cancel()
            await asyncio.gather(*self.draining.values(), return_exceptions=True)

    async def run_once(self) -> int:
        """Start draining every endpoint with a delivery due that is not draining yet."""
        started = 0
        for endpoint_id in await self.webhooks.due_endpoints():
            task = self.draining.get(endpoint_id)
            if task is None or task.done():
                self.draining[endpoint_id] = asyncio.create_task(
                    self.drain(endpoint_id), name=f"webhook-{endpoint_id}")
                started += 1
        return started

    async def drain(self, endpoint_id: str) -> None:
        """Send what is due to one endpoint until none is: a few batches' worth claimed
        at once, `concurrency` in flight, outcomes written together (one commit each way
        per batch, not per delivery)."""
        n = self.settings.concurrency
        due = await self.webhooks.due(endpoint_id, limit=n * BATCHES)
        if not due:
            return
        # A callback endpoint is known by the URL its deliveries carry: whether its host
        # is allow-listed (may resolve to a private address) is read from it.
        endpoint = self.endpoints.get(endpoint_id, due[0].payload.get("url"))
        async with self.client(endpoint) as client:
            while due:
                await self.send(due, client)
                due = await self.webhooks.due(endpoint_id, limit=n * BATCHES)

    async def send(self, due: list[Message], client: aiohttp.ClientSession) -> list[Attempt]:
        """Claim, post and record these deliveries of one endpoint; the tries of those
        this sender claimed."""
        mine = await self.outbox.claim_many(due, seconds=self.settings.timeout + 30)
        if not mine:
            return []
        endpoint_id = mine[0].platform.removeprefix(PLATFORM)
        state = await self.webhooks.endpoint(endpoint_id)
        disabled = state.disabled_reason if state and state.disabled_at else None
        flight = asyncio.Semaphore(self.settings.concurrency)

        async def one(message: Message) -> Attempt:
            async with flight:
                try:
                    return await self.post(message, client, disabled)
                except Exception as e:  # a bug must not leave it claimed in silence
                    log.exception("webhooks: delivery %s to %s", message.id, endpoint_id)
                    return Attempt("retried", error=f"{type(e).__name__}: {e}")

        tried = await asyncio.gather(*(one(m) for m in mine))
        await self.record(list(zip(mine, tried, strict=True)))
        return tried

    def client(self, endpoint: Endpoint | None) -> contextlib.AbstractAsyncContextManager[
            aiohttp.ClientSession]:
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout)
        return session(allow_private=endpoint.allow_private if endpoint else False,
                       dns=self.dns, timeout=timeout)

    # --- one try ---------------------------------------------------------------------------
    async def post(self, message: Message, client: aiohttp.ClientSession,
                   disabled: str | None) -> Attempt:
        p = message.payload
        endpoint = self.endpoints.get(message.platform.removeprefix(PLATFORM), p.get("url"))
        if endpoint is None:
            return Attempt("failed", error="the endpoint is no longer configured")
        if disabled is not None:
            return Attempt("failed", error=f"the endpoint is disabled: {disabled}")
        now = self.clock()
        signature = Webhook(endpoint.secret).sign(p["id"], datetime.fromtimestamp(now, UTC),
                                                  p["body"])
        headers = {"webhook-id": p["id"], "webhook-timestamp": str(int(now)),
                   "webhook-signature": signature, "content-type": "application/json",
                   "user-agent": USER_AGENT}
        try:
            async with client.post(endpoint.url, data=p["body"].encode(), headers=headers,
                                   allow_redirects=False) as r:
                if 200 <= r.status < 300:
                    return Attempt("delivered", r.status)
                text = (await r.content.read(300)).decode("utf-8", "replace").strip()
                error = f"HTTP {r.status}" + (f": {text}" if text else "")
                if r.status == 410:
                    return Attempt("gone", r.status, error)
                wait = r.headers.get("Retry-After", "")
                if r.status in (429, 503) and wait.isdigit():
                    return Attempt("retried", r.status, error,
                                   min(float(wait), LONGEST_RETRY_AFTER))
                return Attempt("retried", r.status, error)
        except TimeoutError:
            return Attempt("retried", error=f"no answer in {self.settings.timeout:g} s")
        except (aiohttp.ClientError, OSError) as e:
            refused = refusal(e)
            if refused is not None:
                return Attempt("failed", error=str(refused))
            return Attempt("retried", error=f"{type(e).__name__}: {e}"[:300])

    async def record(self, tried: list[tuple[Message, Attempt]]) -> None:
        """How each try went, in one transaction; then an endpoint that said 410 Gone is
        disabled (its owed deliveries fail with it)."""
        gone: set[str] = set()
        async with self.outbox.db.transaction() as tx:
            for message, attempt in tried:
                endpoint_id = message.platform.removeprefix(PLATFORM)
                self.counts[(endpoint_id, attempt.outcome)] += 1
                if attempt.outcome == "gone":
                    gone.add(endpoint_id)
                await self.outcome(message, attempt, tx)
        for endpoint_id in gone:
            if await self.webhooks.disable(endpoint_id, f"answered 410 Gone at "
                                                        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"):
                log.warning("webhooks: endpoint %s answered 410 Gone: disabled (genbot "
                            "webhooks enable %s turns it back on)", endpoint_id, endpoint_id)

    async def outcome(self, message: Message, tried: Attempt, tx: Any) -> None:
        if tried.outcome == "delivered":
            await self.outbox.sent(message, str(tried.status), client=tx)
            return
        error = tried.error or "failed"
        owed_for = self.clock() - float(message.payload.get("owed_at", self.clock()))
        if tried.outcome in ("failed", "gone") or owed_for > self.settings.retry_hours * 3600:
            gave_up = "" if tried.outcome != "retried" else \
                f"gave up after {message.attempts + 1} tries over {owed_for / 3600:.1f} h: "
            await self.outbox.failed(message, gave_up + error, client=tx)
            return
        await self.outbox.retry(message, error, tried.retry_after,
                                wait=backoff(message.attempts), client=tx)

    # --- now, for a person (genbot webhooks test | redeliver) ------------------------------
    async def now(self, key: str, wait: float | None = None) -> Message | None:
        """Send the delivery under `key` now and return it as it ended up; if another
        sender has it, wait (up to `wait` seconds) for that one's outcome."""
        message = await self.outbox.get(key)
        if message is None or message.status != "pending":
            return message
        async with self.client(self.endpoints.get(message.conversation,
                                                  message.payload.get("url"))) as client:
            if await self.send([message], client):
                return await self.outbox.get(key)
        deadline = self.clock() + (wait if wait is not None else self.settings.timeout + 5)
        while self.clock() < deadline:
            found = await self.outbox.get(key)
            if found is None or found.status != "pending" or found.attempts > message.attempts:
                return found
            await asyncio.sleep(0.2)
        return await self.outbox.get(key)
