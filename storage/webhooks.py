"""Webhook endpoints and their deliveries.

A delivery is an outbox row (storage.outbox) whose platform is `webhook:<endpoint id>`:
written before it is sent, claimed by one sender, retried with backoff, never lost — the
chat's promises, kept by the same SQL. Each delivery is its own thread, so a retried one
holds up none after it. This module adds what webhooks need beyond chat messages: the
endpoints (their address, and whether one is disabled since it answered 410 Gone), the
deliveries listed newest first, and a failed or sent delivery sent again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storage.db import Database
from storage.outbox import MESSAGE_COLUMNS
from storage.records import Message

PLATFORM = "webhook:"  # + the endpoint's id: the outbox platform of its deliveries

UPSERT = """
INSERT INTO webhook_endpoints (id, url, kind, description, created_at)
VALUES (:id, :url, :kind, :description, :now)
ON CONFLICT (id) DO UPDATE SET url = excluded.url, description = excluded.description"""
ENDPOINTS = """
SELECT id, url, kind, description, disabled_at, disabled_reason, created_at
FROM webhook_endpoints ORDER BY kind DESC, id"""
ENDPOINT = """
SELECT id, url, kind, description, disabled_at, disabled_reason, created_at
FROM webhook_endpoints WHERE id = :id"""
DISABLE = """
UPDATE webhook_endpoints SET disabled_at = :now, disabled_reason = :reason
WHERE id = :id AND disabled_at IS NULL"""
ENABLE = """
UPDATE webhook_endpoints SET disabled_at = NULL, disabled_reason = NULL
WHERE id = :id AND disabled_at IS NOT NULL"""
# A disabled endpoint's deliveries still owed fail with it: they would only meet 410 again.
FAIL_OWED = """
UPDATE outbox SET status = 'failed', error = :reason, updated_at = :now
WHERE platform = :platform AND status = 'pending'"""

_COLUMNS = f"{MESSAGE_COLUMNS}, created_at, updated_at"
# Every webhook platform sorts between 'webhook:' and 'webhook;' (';' follows ':').
DELIVERIES = f"""
SELECT {_COLUMNS} FROM outbox
WHERE platform >= 'webhook:' AND platform < 'webhook;' {{where}}
ORDER BY id DESC LIMIT :limit"""
# A filter of DELIVERIES, by the parameter it takes.
FILTERS = {"platform": "AND platform = :platform", "status": "AND status = :status",
           "before_id": "AND id < :before_id"}
DELIVERY = f"""
SELECT {_COLUMNS} FROM outbox
WHERE id = :id AND platform >= 'webhook:' AND platform < 'webhook;'"""
# Sent again as it was, under the same webhook-id: the receiver dedupes if it had it.
REDELIVER = """
UPDATE outbox SET status = 'pending', next_at = :now, error = NULL, updated_at = :now
WHERE id = :id AND status <> 'pending'"""
# An endpoint's deliveries due now, oldest first. Unlike chat messages (storage.outbox.DUE)
# they keep no order among themselves: one being retried holds none of the others back.
DUE = f"""
SELECT {MESSAGE_COLUMNS} FROM outbox
WHERE platform = :platform AND status = 'pending' AND next_at <= :now
ORDER BY id LIMIT :limit"""
# Endpoints with a delivery due now (callback endpoints come and go with submissions).
DUE_ENDPOINTS = """
SELECT DISTINCT platform FROM outbox
WHERE platform >= 'webhook:' AND platform < 'webhook;' AND status = 'pending'
  AND next_at <= :now"""
COUNTS = """
SELECT platform, status, COUNT(*) AS n FROM outbox
WHERE platform >= 'webhook:' AND platform < 'webhook;' GROUP BY platform, status"""


@dataclass(frozen=True)
class Endpoint:
    """Where deliveries go. `kind`: config (a [[webhooks]] entry) or callback (a
    submission's callback_url)."""
    id: str
    url: str
    kind: str
    description: str
    disabled_at: float | None
    disabled_reason: str | None
    created_at: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Endpoint:
        return cls(**{k: row[k] for k in ("id", "url", "kind", "description", "disabled_at",
                                          "disabled_reason", "created_at")})


@dataclass(frozen=True)
class Delivery:
    """One event owed to one endpoint, and how its sending went."""
    message: Message
    created_at: float
    updated_at: float

    @property
    def id(self) -> int:
        return self.message.id

    @property
    def endpoint(self) -> str:
        return self.message.platform.removeprefix(PLATFORM)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Delivery:
        return cls(Message.from_row(row), row["created_at"], row["updated_at"])


def endpoint_of(platform: str) -> str | None:
    """The endpoint id an outbox platform names, or None for a chat platform."""
    return platform.removeprefix(PLATFORM) if platform.startswith(PLATFORM) else None


class Webhooks:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time):
        self.db, self.clock = db, clock

    async def register(self, endpoint_id: str, url: str, kind: str, description: str = "") -> None:
        """Remember an endpoint (again: its address and description are brought up to date;
        whether it is disabled is kept)."""
        await self.db.execute(UPSERT, {"id": endpoint_id, "url": url, "kind": kind,
                                       "description": description, "now": self.clock()})

    async def endpoints(self) -> list[Endpoint]:
        return [Endpoint.from_row(r) for r in await self.db.fetch(ENDPOINTS)]

    async def endpoint(self, endpoint_id: str) -> Endpoint | None:
        row = await self.db.fetchrow(ENDPOINT, {"id": endpoint_id})
        return Endpoint.from_row(row) if row else None

    async def disable(self, endpoint_id: str, reason: str) -> bool:
        """Stop sending to it: its owed deliveries fail with `reason`. False: it was
        disabled already."""
        now = self.clock()
        async with self.db.transaction() as tx:
            if await self.db.execute(DISABLE, {"id": endpoint_id, "now": now, "reason": reason},
                                     client=tx) == 0:
                return False
            await self.db.execute(FAIL_OWED, {"platform": PLATFORM + endpoint_id,
                                              "reason": reason, "now": now}, client=tx)
        return True

    async def enable(self, endpoint_id: str) -> bool:
        return await self.db.execute(ENABLE, {"id": endpoint_id}) > 0

    async def deliveries(self, *, endpoint: str | None = None, status: str | None = None,
                         before: int | None = None, limit: int = 50) -> list[Delivery]:
        """Newest first; `before`: the id the previous page ended at."""
        where: list[str] = []
        params: dict[str, Any] = {"limit": limit}
        for name, value in (("platform", PLATFORM + endpoint if endpoint else None),
                            ("status", status), ("before_id", before)):
            if value is not None:
                params[name] = value
                where.append(FILTERS[name])
        rows = await self.db.fetch(DELIVERIES.format(where=" ".join(where)), params)
        return [Delivery.from_row(r) for r in rows]

    async def delivery(self, delivery_id: int) -> Delivery | None:
        row = await self.db.fetchrow(DELIVERY, {"id": delivery_id})
        return Delivery.from_row(row) if row else None

    async def redeliver(self, delivery_id: int) -> bool:
        """Owe it again, due now, with its webhook-id. False: it is still owed."""
        return await self.db.execute(REDELIVER, {"id": delivery_id, "now": self.clock()}) > 0

    async def due(self, endpoint_id: str, limit: int) -> list[Message]:
        return [Message.from_row(r) for r in
                await self.db.fetch(DUE, {"platform": PLATFORM + endpoint_id,
                                          "now": self.clock(), "limit": limit})]

    async def due_endpoints(self) -> list[str]:
        return sorted(endpoint_of(r["platform"]) or "" for r in
                      await self.db.fetch(DUE_ENDPOINTS, {"now": self.clock()}))

    async def counts(self) -> dict[tuple[str, str], int]:
        """(endpoint id, status) -> deliveries."""
        return {(endpoint_of(r["platform"]) or "", r["status"]): r["n"]
                for r in await self.db.fetch(COUNTS)}

