"""A route of /api/v1, declared once beside its handler: aiohttp serves it from the
declaration and the OpenAPI document (bot.web.openapi) is generated from the same one,
so what is served and what is documented cannot drift apart.

Parameters and records are described by their types (msgspec writes the JSON Schema);
the few value types below say, once, what an id, a page size or a priority is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

import msgspec
from aiohttp import web
from msgspec import Meta

from bot.web.http import BIGGEST, PREFIX
from storage.records import Priority

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

Whole = Annotated[int, Meta(ge=0, le=BIGGEST)]  # an id, a cursor, a sequence number
Label = Annotated[str, Meta(extra_json_schema={"enum": [p.label for p in Priority]})]
Binary = Annotated[str, Meta(extra_json_schema={"format": "binary"})]  # a multipart file


def page_size(most: int) -> Any:
    return Annotated[int, Meta(ge=1, le=most)]


@dataclass(frozen=True)
class Param:
    """A path, query or header parameter, described by its type."""
    name: str
    where: str  # path, query or header
    type: Any
    description: str = ""
    default: Any = None


@dataclass(frozen=True)
class Answer:
    """What one status brings back: a record (one type, or a tuple of them for any of
    those), files of these media types, or nothing."""
    description: str
    record: Any = None
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # under PREFIX, each path parameter as {name}, as the document writes it
    handler: Handler
    summary: str
    answers: Mapping[int, Answer]
    errors: tuple[int, ...] = ()  # the error statuses besides 401 and 403, which any
    params: tuple[Param, ...] = ()  # route but a public one may answer
    body: Mapping[str, Any] | None = None  # the request body's record, by media type
    public: bool = False  # no credentials needed
    description: str = ""
    messages: Any = None  # a WebSocket's: the record each message is

    @property
    def documented(self) -> str:
        return PREFIX + self.path

    @property
    def served(self) -> str:
        """The path aiohttp matches: whole-number path parameters as digits only."""
        path = self.documented
        for p in self.params:
            if p.where == "path" and msgspec.json.schema(p.type).get("type") == "integer":
                path = path.replace(f"{{{p.name}}}", f"{{{p.name}:\\d+}}")
        return path

    @property
    def statuses(self) -> tuple[int, ...]:
        """Every status it may answer, errors included."""
        errors = self.errors if self.public else (401, 403, *self.errors)
        return tuple(sorted({*self.answers, *errors}))


class Resource(Protocol):
    """A module's routes: /batches and those under it, say."""

    def routes(self) -> list[Route]: ...


def serve(app: web.Application, routes: list[Route]) -> None:
    for route in routes:
        if route.method == "GET":  # (and HEAD, as aiohttp adds it)
            app.router.add_get(route.served, route.handler)
        else:
            app.router.add_route(route.method, route.served, route.handler)
