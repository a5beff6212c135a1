"""GET /platforms: the chat platforms this service runs, how each is doing, what it owes.

Each configured platform says how messages reach it (its [platform] mode), whether its
credentials worked at start (and why not), and whether the connection it keeps open — a
gateway, a stream, Socket Mode — is up; beside that, its outbox messages by state. A
platform only the outbox names (configured once, not now) is not listed, nor are webhook
deliveries. bot.web imports no chat module (tests/test_layout.py): the service hands in a
callable that asks each of its platforms (bot.chat.platform.Platform.health), read at
each request and each scrape (bot.web.metrics).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Protocol

import msgspec
from aiohttp import web
from msgspec import Meta, Struct

from bot.app.application import App
from bot.app.permissions import Action
from bot.web.callers import Callers
from bot.web.http import respond
from bot.web.routes import Answer, Route
from storage.outbox import Outbox


class Health(Protocol):
    """What bot.chat.platform.Health says of one platform."""

    @property
    def platform(self) -> str: ...
    @property
    def inbound(self) -> str: ...
    @property
    def signed_in(self) -> bool | None: ...
    @property
    def connected(self) -> bool | None: ...
    @property
    def problem(self) -> str: ...


Healths = Callable[[], Sequence[Health]]  # the service's platforms, each asked afresh


def nothing() -> Sequence[Health]:
    """No chat platform: a service (or a test) that runs none."""
    return ()


def up(health: Health) -> bool:
    """Signed in and, where it keeps a connection open, connected: a platform that can
    take and answer messages now (genbot_chat_platform_up)."""
    return health.signed_in is True and health.connected is not False


class Messages(Struct):
    """A platform's outbox messages by state (storage.outbox)."""
    pending: int = 0  # owed: still to post (waiting for a retry included)
    sent: int = 0
    failed: int = 0  # given up after retries, or refused for good


class ChatPlatform(Struct):
    """A chat platform this service runs, as it sees it now."""
    name: str
    inbound: Annotated[str, Meta(description=(
        "how messages arrive: its [platform] mode (socket_mode or events_api, stream or "
        "http, long_connection or callback, gateway or interactions)"))]
    signed_in: Annotated[bool | None, Meta(description=(
        "its credentials worked at start; null: not known yet"))]
    connected: Annotated[bool | None, Meta(description=(
        "the connection it keeps open is up; null: it keeps none (messages come to this "
        "service's own endpoint)"))]
    problem: str  # why it could not sign in, in one line ("" when it could)
    up: Annotated[bool, Meta(description=(
        "signed in and, where it keeps a connection, connected (genbot_chat_platform_up)"))]
    messages: Messages

    @classmethod
    def of(cls, health: Health, counts: dict[tuple[str, str], int]) -> ChatPlatform:
        name = health.platform
        by_state = {state: n for (platform, state), n in counts.items() if platform == name}
        return cls(name=name, inbound=health.inbound, signed_in=health.signed_in,
                   connected=health.connected, problem=health.problem, up=up(health),
                   messages=msgspec.convert(by_state, Messages))


class PlatformList(Struct):
    platforms: list[ChatPlatform]  # in the order the service started them


class PlatformRoutes:
    def __init__(self, app: App, callers: Callers, platforms: Healths):
        self.callers, self.platforms = callers, platforms
        self.outbox = Outbox(app.queue.db)

    def routes(self) -> list[Route]:
        return [Route("GET", "/platforms", self.listing,
                      "The chat platforms this service runs: how messages arrive, signed in "
                      "or why not, the connection up, and messages owed, sent and failed",
                      {200: Answer("OK", PlatformList)})]

    async def listing(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.QUEUE)
        counts = await self.outbox.counts_by_platform()
        return respond(PlatformList([ChatPlatform.of(h, counts) for h in self.platforms()]))
