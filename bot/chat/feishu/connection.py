"""Feishu's long connection: events over a WebSocket genbot opens, so no public URL is
needed (self-built apps only; docs/feishu.md).

The protocol is lark-oapi's ws client's, spoken here on the service's own event loop:
the SDK's `ws.Client` takes a loop at import time, calls `run_until_complete` on it (it
cannot start inside a running loop) and fetches its endpoint with a blocking `requests`
call. Its frames (`pbbp2.Frame`), constants and answer model are the SDK's:

  1. POST {domain}/callback/ws/endpoint {"AppID", "AppSecret"} -> data.URL (wss://…
     ?device_id=…&service_id=…) and data.ClientConfig (ping interval, reconnect interval)
  2. connect; DATA frames carry events (header type "event"; `sum`/`seq` split a large
     one, joined here by message_id); each is answered with the same frame, payload
     {"code": 200} (and the callback's answer, base64, for a card press) — within 3 s,
     or Feishu pushes it again
  3. a PING control frame every PingInterval; a PONG may carry a new ClientConfig
  4. a dropped connection: the endpoint asked again and a new socket opened, waiting
     the ReconnectInterval (at least 1 s, doubling while it keeps failing, up to 60 s)

Payloads are plaintext (no encryption or signature on this channel): the SDK's
dispatcher reads them without validation, and genbot's handlers hand the work to the core.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import parse_qs, urlparse

import aiohttp
from lark_oapi.ws.const import (
    GEN_ENDPOINT_URI,
    HEADER_BIZ_RT,
    HEADER_MESSAGE_ID,
    HEADER_SEQ,
    HEADER_SUM,
    HEADER_TYPE,
    SERVICE_ID,
)
from lark_oapi.ws.enum import FrameType, MessageType
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from bot.settings import FeishuConfig

log = logging.getLogger("genbot.feishu")
BACKOFF_MAX = 60.0
PARTS_KEEP = 5.0  # s: the parts of a split event wait this long for the rest (as the SDK)


class LongConnection:
    """`events`: the SDK's dispatcher the adapter registered its handlers on; `spawn`: the
    adapter's way to run work in the background (kept, and canceled when it closes)."""

    def __init__(self, settings: FeishuConfig, events: Any,
                 spawn: Callable[[Coroutine[Any, Any, None]], Any]):
        self.settings, self.events, self.spawn = settings, events, spawn
        self.ping_every = 120.0
        self.reconnect_every = 1.0
        self.connected = asyncio.Event()
        self.connections = 0
        self.parts: dict[str, tuple[float, list[bytes | None]]] = {}

    async def endpoint(self, session: aiohttp.ClientSession) -> str:
        s = self.settings
        async with session.post(f"{s.base}{GEN_ENDPOINT_URI}", headers={"locale": "zh"},
                                json={"AppID": s.app_id, "AppSecret": s.app_secret}) as r:
            try:
                body = await r.json(content_type=None)
            except ValueError:
                body = {}
        if r.status != 200 or not isinstance(body, dict) or body.get("code") != 0:
            said = body.get("msg") if isinstance(body, dict) else None
            raise ConnectionError(f"callback/ws/endpoint answered HTTP {r.status}, code "
                                  f"{body.get('code') if isinstance(body, dict) else '?'}: "
                                  f"{said or 'no reason'}")
        data = body.get("data") or {}
        self.configure(data.get("ClientConfig") or {})
        return str(data["URL"])

    def configure(self, conf: dict[str, Any]) -> None:
        if isinstance(conf.get("PingInterval"), int | float) and conf["PingInterval"] > 0:
            self.ping_every = float(conf["PingInterval"])
        if isinstance(conf.get("ReconnectInterval"), int | float):
            self.reconnect_every = max(1.0, float(conf["ReconnectInterval"]))

    async def run(self) -> None:
        delay = None
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    url = await self.endpoint(session)
                    service = int(parse_qs(urlparse(url).query).get(SERVICE_ID, ["0"])[0])
                    async with session.ws_connect(url, heartbeat=None, max_msg_size=0) as ws:
                        self.connections += 1
                        self.connected.set()
                        delay = None
                        log.info("feishu: long connection open")
                        pinging = asyncio.ensure_future(self.ping(ws, service))
                        try:
                            async for msg in ws:
                                if msg.type == aiohttp.WSMsgType.BINARY:
                                    self.spawn(self.handle(ws, msg.data))
                                elif msg.type in (aiohttp.WSMsgType.ERROR,
                                                  aiohttp.WSMsgType.CLOSED):
                                    break
                        finally:
                            pinging.cancel()
                    log.warning("feishu: long connection closed; connecting again")
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - any failure of the connection: again
                    log.warning("feishu: long connection failed (%s); again in %.0f s",
                                str(e)[:200] or type(e).__name__,
                                delay or self.reconnect_every)
                self.connected.clear()
                delay = self.reconnect_every if delay is None else min(delay * 2, BACKOFF_MAX)
                await asyncio.sleep(delay)

    async def ping(self, ws: aiohttp.ClientWebSocketResponse, service: int) -> None:
        while not ws.closed:
            frame = Frame()  # (SeqID and LogID are required fields: zero, as the SDK's)
            frame.SeqID, frame.LogID = 0, 0
            frame.method, frame.service = FrameType.CONTROL.value, service
            header = frame.headers.add()
            header.key, header.value = HEADER_TYPE, MessageType.PING.value
            try:
                await ws.send_bytes(frame.SerializeToString())
            except ConnectionError:
                return
            except Exception:  # noqa: BLE001 - a ping that cannot be made: said, not silent
                log.exception("feishu: cannot ping the long connection")
                return
            await asyncio.sleep(self.ping_every)

    async def handle(self, ws: aiohttp.ClientWebSocketResponse, raw: bytes) -> None:
        """One frame: a control frame read, an event handed to the core and answered."""
        frame = Frame()
        try:
            frame.ParseFromString(raw)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError: not a frame, ignored
            log.warning("feishu: a frame that does not parse; ignored")
            return
        headers = {h.key: h.value for h in frame.headers}
        if frame.method == FrameType.CONTROL.value:
            if headers.get(HEADER_TYPE) == MessageType.PONG.value and frame.payload:
                with contextlib.suppress(ValueError):
                    self.configure(json.loads(frame.payload))
            return
        payload = self.joined(headers, bytes(frame.payload))
        if payload is None:
            return  # (more parts to come)
        started = time.monotonic()
        answer: dict[str, Any] = {"code": 200}
        if headers.get(HEADER_TYPE) == MessageType.EVENT.value:
            try:
                result = self.events._do_without_validation(payload)
            except Exception as e:  # noqa: BLE001 - an event genbot does not read: taken
                log.info("feishu: event not handled (%s)", str(e)[:200])
                result = None
            if result is not None:
                from lark_oapi.core.json import JSON
                answer["data"] = base64.b64encode(JSON.marshal(result).encode()).decode()
        header = frame.headers.add()
        header.key, header.value = HEADER_BIZ_RT, str(round((time.monotonic() - started) * 1000))
        frame.payload = json.dumps(answer).encode()
        try:
            await ws.send_bytes(frame.SerializeToString())
        except ConnectionError:
            log.info("feishu: the connection closed before an event was answered; Feishu "
                     "pushes it again and it is handled once")

    def joined(self, headers: dict[str, str], payload: bytes) -> bytes | None:
        """A whole event: one frame's payload, or every part of a split one by its seq."""
        try:
            total, seq = int(headers.get(HEADER_SUM, "1")), int(headers.get(HEADER_SEQ, "0"))
        except ValueError:
            return None
        if total <= 1:
            return payload
        key, now = headers.get(HEADER_MESSAGE_ID, ""), time.monotonic()
        self.parts = {k: v for k, v in self.parts.items() if v[0] > now}
        until, parts = self.parts.setdefault(key, (now + PARTS_KEEP, [None] * total))
        if not 0 <= seq < len(parts):
            return None
        parts[seq] = payload
        if any(p is None for p in parts):
            return None
        del self.parts[key]
        return b"".join(p for p in parts if p is not None)
