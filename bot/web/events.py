"""GET /events: the event log as a WebSocket, from a sequence number on, so a client
that reconnects with the last seq it saw misses nothing.

With `previews=1` the same socket also carries pictures of running jobs forming
(storage.previews: from the executors, never stored): an Event of kind "preview" with seq
0, which is not in the log and never replayed — a client that falls behind gets the
newest picture of each job, not every one."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import WSCloseCode, web
from msgspec import Struct

from bot.app.application import App
from bot.app.permissions import Action
from bot.web.callers import Callers
from bot.web.http import ApiError, encoded, flag, number
from bot.web.routes import Answer, Param, Route, Whole
from storage.previews import WATCH_EVERY, Glimpse

EVENTS_POLL = 0.3


class Event(Struct):
    """One message of /events: an entry of the event log."""
    seq: int  # 0: a preview, which is not in the log
    at: float
    kind: str  # submitted, a job status, progress, paused, resumed, worker_lost, preview
    batch_id: int | None
    job_id: int | None
    data: dict[str, Any]


class Watcher:
    """One stream's previews still to send: the newest of each job (latest wins)."""

    def __init__(self) -> None:
        self.pending: dict[int, Glimpse] = {}
        self.ready = asyncio.Event()

    def heard(self, glimpse: Glimpse) -> None:
        self.pending[glimpse.job_id] = glimpse
        self.ready.set()

    def take(self) -> list[Glimpse]:
        self.ready.clear()
        taken, self.pending = list(self.pending.values()), {}
        return taken


def preview_event(g: Glimpse) -> Event:
    return Event(0, g.at, "preview", g.batch_id, g.job_id, {
        "step": g.step, "total": g.total, "picture": f"data:image/webp;base64,{g.picture}"})


class EventRoutes:
    def __init__(self, app: App, callers: Callers):
        self.queue, self.callers = app.queue, callers
        self.streams: set[web.WebSocketResponse] = set()  # open ones, closed at shutdown
        self.watchers: set[Watcher] = set()  # streams that asked for previews
        self.listening = False
        self.saying: asyncio.Task | None = None  # "someone watches", to the executors

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
                    Param("previews", "query", Whole,
                          "1: also pictures of running jobs forming (kind preview, seq 0, "
                          "data: step, total, picture as a data: URL; not in the log)"),
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
        watcher = Watcher() if flag(request.query.get("previews", "")) else None
        if watcher is not None:
            await self.watch(watcher)
        bell = self.queue.bell
        poll = EVENTS_POLL * (10 if bell.live else 1)  # PostgreSQL rings when events come
        try:
            while not closing.done():
                seen = bell.rung
                for e in await self.queue.events_after(seq, 500):
                    seq = e.seq
                    await ws.send_str(encoded(Event(e.seq, e.at, e.kind, e.batch_id,
                                                    e.job_id, e.data)).decode())
                for g in watcher.take() if watcher else ():
                    await ws.send_str(encoded(preview_event(g)).decode())
                rang = asyncio.ensure_future(bell.wait(seen, poll))
                waits = [closing, rang]
                if watcher is not None:
                    waits.append(asyncio.ensure_future(watcher.ready.wait()))
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for w in waits[1:]:
                    w.cancel()
        finally:
            self.streams.discard(ws)
            if watcher is not None:
                self.watchers.discard(watcher)
            closing.cancel()
            await ws.close()
        return ws

    async def watch(self, watcher: Watcher) -> None:
        """Previews from now on to this stream (the service starts hearing them with the
        first stream that asks), and the executors told someone watches — at once, then
        every WATCH_EVERY seconds while any stream does."""
        self.watchers.add(watcher)
        if not self.listening:
            self.listening = True
            await self.queue.previews.listen(self.heard)
        await self.queue.previews.watching()
        if self.saying is None or self.saying.done():
            self.saying = asyncio.create_task(self.say_watched())

    async def say_watched(self) -> None:
        while self.watchers:
            await asyncio.sleep(WATCH_EVERY)
            if self.watchers:
                await self.queue.previews.watching()

    def heard(self, glimpse: Glimpse) -> None:
        for watcher in self.watchers:
            watcher.heard(glimpse)

    async def close_streams(self, app: web.Application) -> None:
        """A stopping service says goodbye to event streams (a dashboard reconnects to the
        next one) rather than waiting for each to hang up."""
        if self.saying is not None:
            self.saying.cancel()
        for ws in list(self.streams):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"service stopping")
