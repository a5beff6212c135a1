"""A webhook receiver on loopback, as a careful integrator writes one: it checks every
request's Standard Webhooks signature with its own HMAC code (not the `standardwebhooks`
package genbot signs with), refuses stale timestamps, and dedupes by webhook-id.

It can misbehave on purpose: fail the first N attempts (500), hang past the sender's
timeout, answer 410 Gone, or ask to wait (429 with Retry-After).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

TOLERANCE = 300  # seconds a timestamp may be off, as the specification suggests


def verify(secret: str, headers: dict[str, str], body: bytes, now: float) -> bool:
    """Standard Webhooks, section "Verifying webhooks", written from the specification."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    msg_id, stamp = headers.get("webhook-id", ""), headers.get("webhook-timestamp", "")
    if not msg_id or not stamp.isdigit() or abs(now - int(stamp)) > TOLERANCE:
        return False
    expected = base64.b64encode(hmac.new(key, f"{msg_id}.{stamp}.".encode() + body,
                                         hashlib.sha256).digest()).decode()
    offered = [s.partition(",")[2] for s in headers.get("webhook-signature", "").split()
               if s.startswith("v1,")]
    return any(hmac.compare_digest(expected, s) for s in offered)


@dataclass
class Receiver:
    secret: str
    fail_first: int = 0  # attempts answered 500 before any is taken
    hang: float = 0.0  # seconds each request waits before answering
    gone: bool = False  # answer 410 Gone
    retry_after: int | None = None  # answer the first attempt 429 with this Retry-After
    now: Callable[[], float] = time.time  # the receiver's clock, for stale timestamps
    attempts: list[dict[str, Any]] = field(default_factory=list)  # every request, in order
    accepted: dict[str, dict[str, Any]] = field(default_factory=dict)  # webhook-id -> body
    duplicates: int = 0  # requests for an id already accepted
    bad_signatures: int = 0

    async def start(self) -> Receiver:
        self.released = asyncio.Event()  # stop() ends every hang at once
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        return self

    async def stop(self) -> None:
        self.released.set()
        await self.runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.attempts.append({"id": headers.get("webhook-id"), "at": time.time(),
                              "path": request.path})
        if self.hang:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.released.wait(), self.hang)
        if not verify(self.secret, headers, body, self.now()):
            self.bad_signatures += 1
            return web.Response(status=401, text="bad signature")
        if self.gone:
            return web.Response(status=410, text="this endpoint is retired")
        if self.retry_after is not None and len(self.attempts) == 1:
            return web.Response(status=429, headers={"Retry-After": str(self.retry_after)})
        if len(self.attempts) <= self.fail_first:
            return web.Response(status=500, text="not today")
        msg_id = headers["webhook-id"]
        if msg_id in self.accepted:
            self.duplicates += 1
        else:
            self.accepted[msg_id] = json.loads(body)
        return web.Response(status=204)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [b for b in self.accepted.values() if kind is None or b["type"] == kind]
