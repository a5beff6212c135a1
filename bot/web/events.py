"""GET /events: the event log as a WebSocket, from a sequence number on, so a client
that reconnects with the last seq it saw misses nothing."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import WSCloseCode, web
from msgspec import Struct

from bot.app.application import App
from bot.app.permissions import Action
from bot.web.callers import Callers
from bot.web.http import ApiError, encoded, number
from bot.web.routes import Answer, Param, Route, Whole

EVENTS_POLL = 0.3


class Event(Struct):
    """One message of /events: an entry of the event log."""
    seq: int
    at: float
    kind: str  # submitted, a job status, progress, paused, resumed, worker_lost
    batch_id: int | None
    job_id: int | None
    data: dict[str, Any]


class EventRoutes:
    def __init__(self, app: App, callers: Callers):
        self.queue, self.callers = app.queue, callers
        self.streams: set[web.WebSocketResponse] = set()  # open ones, closed at shutdown

    def routes(self) -> list[Route]:
        return [Route(
            "GET", "/events", self.stream,
            "WebSocket: queue events and progress from `after` on (resumable)",
            {101: Answer("switched to a WebSocket; each message is an Event")},
            errors=(400, 426), messages=Event, description=(
                "A WebSocket, not a JSON GET: connect with `Upgrade: websocket`; each message "
                "is one Event as JSON. Scripts that cannot set headers on a WebSocket may pass "
                "`token` in the query."),
            params=(Param("after", "query", Whole, "the last sequence number seen"),
                    Param("token", "query", str,
                          "the Bearer token, for WebSocket clients only")))]

    async def stream(self, request: web.Request) -> web.WebSocketResponse:
        await self.callers.allowed(request, Action.STATUS)
        try:
            seq = number(request.query.get("after", "0"))
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
                for e in await self.queue.events_after(seq, 500):
                    seq = e.seq
                    await ws.send_str(encoded(Event(e.seq, e.at, e.kind, e.batch_id,
                                                    e.job_id, e.data)).decode())
                rang = asyncio.ensure_future(bell.wait(seen, poll))
                await asyncio.wait([closing, rang], return_when=asyncio.FIRST_COMPLETED)
                rang.cancel()
        finally:
            self.streams.discard(ws)
            closing.cancel()
            await ws.close()
        return ws

    async def close_streams(self, app: web.Application) -> None:
        """A stopping service says goodbye to event streams (a dashboard reconnects to the
        next one) rather than waiting for each to hang up."""
        for ws in list(self.streams):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"service stopping")
