"""The OpenAPI 3.1 document of /api/v1, generated, never written by hand: the records'
JSON Schemas come from msgspec (components.schemas), the paths from the routes' own
declarations (bot.web.routes), so the document says what the handlers do. Served at
/api/v1/openapi.json, without credentials."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from aiohttp import web

from bot.web.http import Error
from bot.web.routes import Answer, Route

REF = "#/components/schemas/{name}"
ERRORS = {
    400: "bad request: a query, header or body that cannot be read",
    401: "no valid token",
    403: "not allowed: a role, an owner, a limit, a priority above the caller's (GET /me), "
         "or a session cookie without its CSRF token",
    404: "not found",
    409: "conflict: the queue is full, nothing is left to retry, or an image is not "
         "finished or not there to act on",
    413: "a file or the whole body is over its limit (the error names it, and its config "
         "key where it has one)",
    415: "neither multipart/form-data nor application/json",
    422: "what was sent cannot be used: a template, priority, time or cron line, an "
         "action's or a rating's values, or a sheet's problems by row and column",
    426: "a WebSocket asked with a plain GET",
    429: "too many submissions (or actions) this minute: try again later",
}
SIGNED = ("Signed per Standard Webhooks (docs/webhooks.md); retried until a 2XX for up to "
          "[webhook] retry_hours with the same webhook-id, so dedupe by it.")
SIGNATURE_HEADERS = {
    "webhook-id": "the event's id (msg_…): the same on every try",
    "webhook-timestamp": "this try's time, in Unix seconds: refuse one more than 5 minutes off",
    "webhook-signature": "v1, then base64 of HMAC-SHA256 over \"id.timestamp.body\" keyed with "
                         "the base64-decoded part of the endpoint's whsec_ secret"}
DESCRIPTION = (
    "Batch image generation: the queue, for scripts. Every call needs `Authorization: Bearer "
    "TOKEN` ([api] tokens), or the dashboard's session cookie plus X-CSRF-Token for changes; "
    "roles and limits are the chat's. Every error is an Error.")


def document(routes: Sequence[Route],
             webhooks: Mapping[str, tuple[Any, str]] | None = None) -> dict[str, Any]:
    """`webhooks`: event type -> (the record its body is, what it means): the POSTs genbot
    makes to receivers (OpenAPI 3.1's webhooks section)."""
    webhooks = webhooks or {}
    wanted: dict[Any, None] = {Error: None}  # every type described, in order, once
    for record, _ in webhooks.values():
        wanted.setdefault(record)
    for route in routes:
        for t in [p.type for p in route.params] + [*(route.body or {}).values()] + \
                [r for a in route.answers.values() for r in _records(a)] + \
                ([route.messages] if route.messages is not None else []):
            wanted.setdefault(t)
    schemas, components = msgspec.json.schema_components(wanted, ref_template=REF)
    schema = dict(zip(wanted, schemas))
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        op: dict[str, Any] = {"summary": route.summary}
        if route.description:
            op["description"] = route.description
        if route.params:
            op["parameters"] = [{
                "name": p.name, "in": p.where, "required": p.where == "path",
                "schema": schema[p.type] | ({} if p.default is None else {"default": p.default}),
                **({"description": p.description} if p.description else {})}
                for p in route.params]
        if route.body:
            op["requestBody"] = {"required": True, "content": {
                kind: {"schema": schema[t]} for kind, t in route.body.items()}}
        op["responses"] = {
            str(s): _answer(route.answers[s], schema) if s in route.answers
            else {"$ref": f"#/components/responses/Error{s}"} for s in route.statuses}
        if route.public:
            op["security"] = []
        if route.messages is not None:
            op["x-websocket-message"] = schema[route.messages]
        paths.setdefault(route.documented, {})[route.method.lower()] = op
    hooks = {name: {"post": {
        "summary": name, "description": f"{text} {SIGNED}",
        "parameters": [{"name": h, "in": "header", "required": True, "schema": {"type": "string"},
                        "description": d} for h, d in SIGNATURE_HEADERS.items()],
        "requestBody": {"required": True,
                        "content": {"application/json": {"schema": schema[record]}}},
        "responses": {"2XX": {"description": "taken: not sent again"},
                      "410": {"description": "the endpoint is retired: genbot disables it"},
                      "default": {"description": "sent again later, with backoff"}}}}
        for name, (record, text) in webhooks.items()}
    return {
        "openapi": "3.1.0",
        "info": {"title": "genbot", "version": "1", "description": DESCRIPTION},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        **({"webhooks": hooks} if hooks else {}),
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {f"Error{s}": {"description": text, "content": {
                "application/json": {"schema": schema[Error]}}} for s, text in ERRORS.items()},
            "schemas": components}}


def _records(answer: Answer) -> tuple[Any, ...]:
    record = answer.record
    return record if isinstance(record, tuple) else () if record is None else (record,)


def _answer(answer: Answer, schema: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {"description": answer.description}
    if answer.files:
        body["content"] = {kind: {"schema": {"type": "string", "format": "binary"}}
                           for kind in answer.files}
    elif records := _records(answer):
        one = schema[records[0]] if len(records) == 1 else {
            "anyOf": [schema[r] for r in records]}
        body["content"] = {"application/json": {"schema": one}}
    return body


class OpenApi:
    """GET /openapi.json: the document of every route, its own included, made once."""

    def __init__(self, routes: Sequence[Route],
                 webhooks: Mapping[str, tuple[Any, str]] | None = None):
        self.route = Route("GET", "/openapi.json", self.serve, "This document",
                           {200: Answer("the OpenAPI document", dict[str, Any])}, public=True)
        self.body = msgspec.json.encode(document([*routes, self.route], webhooks))

    async def serve(self, request: web.Request) -> web.Response:
        return web.Response(body=self.body, content_type="application/json", charset="utf-8")
