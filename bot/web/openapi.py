"""The OpenAPI 3 document of /api/v1 (served at /api/v1/openapi.json; kept beside bot/api.py)."""

from __future__ import annotations

from typing import Any

from storage.queue import Priority, Status
from storage.records import DOINGS


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict, description: str = "OK") -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _id(name: str, what: str) -> dict:
    return {"name": name, "in": "path", "required": True, "description": what,
            "schema": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}}


ERRORS = {str(code): {"$ref": f"#/components/responses/Error{code}"}
          for code in (400, 401, 403, 404, 409, 413, 422, 426, 429)}
WHOLE = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}


def _cursor() -> dict:
    return {"name": "cursor", "in": "query", "schema": WHOLE,
            "description": "next_cursor of the previous page"}


def _op(summary: str, ok: dict, *, errors=("401", "403"), **extra) -> dict:
    return {"summary": summary, "responses": {"200": ok, **{e: ERRORS[e] for e in errors}},
            **extra}


def document() -> dict[str, Any]:
    priorities = [p.name.lower() for p in Priority]
    statuses = [s.value for s in Status]
    submission_fields = {
        "template": {"type": "string", "description": "a template's name"},
        "priority": {"type": "string", "enum": priorities, "default": "normal"},
        "not_before": {"type": "string", "description":
                       "start no sooner: 21:30, 2026-12-24T08:00+08:00, +2h (UTC when no zone)"},
        "skip_invalid": {"type": "boolean", "description": "queue the valid rows, report the rest"},
        "dry_run": {"type": "boolean", "description": "check and report; queue nothing"},
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "genbot", "version": "1",
                 "description": "Batch image generation: the queue, for scripts. Every call needs "
                                "`Authorization: Bearer TOKEN` ([api] tokens), or the dashboard's "
                                "session cookie plus X-CSRF-Token for changes; roles and limits "
                                "are the chat's."},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/queue": {"get": _op("Queue state: paused, counts, running jobs, ETA",
                                         _json(_ref("Queue")))},
            "/api/v1/workers": {"get": _op(
                "Executors on every host: device, memory, resident models, what each runs, "
                "and idle, busy, stopped or lost", _json({"type": "object", "properties": {
                    "workers": {"type": "array", "items": _ref("Worker")}}}))},
            "/api/v1/queue/pause": {"post": _op("Pause (admins)", _json(_ref("Paused")))},
            "/api/v1/queue/resume": {"post": _op("Resume (admins)", _json(_ref("Paused")))},
            "/api/v1/templates": {"get": _op("Templates and their parameters", _json(
                {"type": "object", "properties": {"templates": {"type": "array",
                                                                "items": _ref("Template")}}}))},
            "/api/v1/templates/{name}": {"get": _op(
                "One template", _json(_ref("Template")), errors=("401", "403", "404"),
                parameters=[{"name": "name", "in": "path", "required": True,
                             "schema": {"type": "string"}}])},
            "/api/v1/batches": {"get": _op(
                "Batches, newest first, with their jobs counted by status",
                _json(_ref("BatchPage")), errors=("400", "401", "403"), parameters=[
                    _cursor(),
                    {"name": "limit", "in": "query",
                     "schema": {"type": "integer", "minimum": 1, "maximum": 500}},
                    {"name": "submitter", "in": "query", "schema": {"type": "string"}}]),
                                "post": {
                "summary": "Submit a batch: a sheet (multipart) or rows (JSON)",
                "parameters": [{"name": "Idempotency-Key", "in": "header", "required": False,
                                "schema": {"type": "string", "maxLength": 150},
                                "description": "the same key again returns the first batch"}],
                "requestBody": {"required": True, "content": {
                    "multipart/form-data": {"schema": {
                        "type": "object", "required": ["template", "sheet"],
                        "properties": {**submission_fields,
                                       "sheet": {"type": "string", "format": "binary"}}}},
                    "application/json": {"schema": {
                        "type": "object", "required": ["template", "rows"],
                        "properties": {**submission_fields, "rows": {
                            "type": "array", "items": {"type": "object"}}}}}}},
                "responses": {"201": _json(_ref("Batch"), "queued"),
                              "200": _json(_ref("Batch"),
                                           "queued before (Idempotency-Key) or a dry run"),
                              **{e: ERRORS[e] for e in ("400", "401", "403", "409", "413",
                                                        "422", "429")},
                              "415": {"$ref": "#/components/responses/Error400"}}}},
            "/api/v1/batches/{id}": {"get": _op(
                "A batch and its progress", _json(_ref("Batch")), errors=("401", "403", "404"),
                parameters=[_id("id", "batch id")])},
            "/api/v1/batches/{id}/cancel": {"post": _op(
                "Cancel a batch (its submitter or an admin)", _json(_ref("Canceled")),
                errors=("401", "403", "404"), parameters=[_id("id", "batch id")])},
            "/api/v1/batches/{id}/retry": {"post": _op(
                "Queue a batch's failed jobs again, as a new batch", _json(_ref("Retried")),
                errors=("401", "403", "404", "409"), parameters=[_id("id", "batch id")])},
            "/api/v1/batches/{id}/files/{name}": {"get": _op(
                "The batch's contact sheet or results sheet",
                {"description": "the file", "content": {
                    "image/png": {}, "application/vnd.openxmlformats-officedocument."
                                     "spreadsheetml.sheet": {}}},
                errors=("401", "403", "404"), parameters=[
                    _id("id", "batch id"), {"name": "name", "in": "path", "required": True,
                                            "schema": {"type": "string", "enum":
                                                       ["contact.png", "results.xlsx"]}}])},
            "/api/v1/jobs": {"get": _op(
                "Jobs, newest first, a page at a time", _json(_ref("JobPage")),
                errors=("400", "401", "403"), parameters=[
                    _cursor(),
                    {"name": "offset", "in": "query", "schema": {**WHOLE, "maximum": 2**31 - 1},
                     "description": "instead of cursor, not with cursor (400): skip this many "
                                    "(the answer has `total`)"},
                    {"name": "limit", "in": "query",
                     "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                    {"name": "batch", "in": "query", "schema": WHOLE},
                    {"name": "status", "in": "query",
                     "schema": {"type": "string", "enum": statuses}},
                    {"name": "submitter", "in": "query", "schema": {"type": "string"}}])},
            "/api/v1/jobs/{id}": {"get": _op("One job", _json(_ref("Job")),
                                             errors=("401", "403", "404"),
                                             parameters=[_id("id", "job id")])},
            "/api/v1/jobs/{id}/cancel": {"post": _op(
                "Cancel one job", _json(_ref("Canceled")), errors=("401", "403", "404"),
                parameters=[_id("id", "job id")])},
            "/api/v1/jobs/{id}/outputs/{index}": {"get": _op(
                "A finished job's image", {"description": "the image",
                                           "content": {"image/png": {}}},
                errors=("400", "401", "403", "404"),
                parameters=[_id("id", "job id"), _id("index", "which output, from 0"),
                            {"name": "size", "in": "query", "description":
                             "a JPEG thumbnail at most this many pixels wide and high",
                             "schema": {"type": "integer", "enum": [128, 256, 512]}}])},
            "/api/v1/schedules": {
                "get": _op("Recurring batches with their next run", _json(
                    {"type": "object", "properties": {"schedules": {
                        "type": "array", "items": {"type": "object"}}}})),
                "post": {
                    "summary": "Run a sheet on a crontab line (admins)",
                    "requestBody": {"required": True, "content": {"multipart/form-data": {
                        "schema": {"type": "object", "required": ["cron", "template", "sheet"],
                                   "properties": {
                                       "cron": {"type": "string", "example": "0 9 * * 1-5"},
                                       "timezone": {"type": "string", "default": "UTC"},
                                       "template": {"type": "string"},
                                       "priority": {"type": "string", "enum": priorities},
                                       "sheet": {"type": "string", "format": "binary"}}}}}},
                    "responses": {"201": _json({"type": "object", "properties": {
                        "id": {"type": "integer"}, "next": {"type": "string"}}}, "scheduled"),
                                  **{e: ERRORS[e] for e in ("400", "401", "403", "413", "422")},
                                  "415": {"$ref": "#/components/responses/Error400"}}}},
            "/api/v1/schedules/{id}": {"delete": _op(
                "Remove a schedule (admins)", _json({"type": "object", "properties": {
                    "removed": {"type": "integer"}}}), errors=("401", "403", "404"),
                parameters=[_id("id", "schedule id")])},
            "/api/v1/events": {"get": {
                "summary": "WebSocket: queue events and progress from `after` on (resumable)",
                "description": "A WebSocket, not a JSON GET: connect with `Upgrade: websocket`; "
                               "each message is one event as JSON. Scripts that cannot set "
                               "headers on a WebSocket may pass `token` in the query.",
                "parameters": [
                    {"name": "after", "in": "query", "schema": WHOLE,
                     "description": "the last sequence number seen"},
                    {"name": "token", "in": "query", "schema": {"type": "string"},
                     "description": "the Bearer token, for WebSocket clients only"}],
                "responses": {"101": {"description": "switched to a WebSocket"},
                              **{e: ERRORS[e] for e in ("400", "401", "403", "426")}}}},
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {f"Error{code}": _json(_ref("Error"), text) for code, text in (
                (400, "bad request"), (401, "no valid token"),
                (403, "not allowed (role, owner, limit)"),
                (404, "not found"), (409, "conflict (queue full, nothing to retry)"),
                (413, "a file or the whole body is over its limit (the error names the key)"),
                (422, "the sheet or its fields have problems"),
                (426, "a WebSocket endpoint asked with a plain GET"),
                (429, "too many submissions: try again later"))},
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                    "type": "object", "required": ["code", "message"], "properties": {
                        "code": {"type": "string"}, "message": {"type": "string"},
                        "problems": {"type": "array", "items": _ref("Problem")}}}}},
                "Problem": {"type": "object", "properties": {
                    "row": {"type": "integer", "nullable": True},
                    "column": {"type": "string", "nullable": True},
                    "code": {"type": "string"}, "message": {"type": "string"}}},
                "Queue": {"type": "object", "properties": {
                    "paused": {"type": "boolean"}, "queued": {"type": "integer"},
                    "running": {"type": "integer"},
                    "eta_seconds": {"type": "number", "nullable": True},
                    "counts": {"type": "object"},
                    "jobs": {"type": "array", "items": {"type": "object"}},
                    "workers": {"type": "array", "items": _ref("Worker"),
                                "description": "executors not stopped"},
                    "seq": {"type": "integer", "description": "the last event's sequence number: "
                            "/events?after=seq streams what happens from now"}}},
                "Worker": {"type": "object", "properties": {
                    "id": {"type": "string"}, "host": {"type": "string"},
                    "device": {"type": "string"}, "version": {"type": "string"},
                    "state": {"type": "string", "enum": ["idle", "busy", "stopped", "lost"]},
                    "job": {"type": "integer", "nullable": True},
                    "memory_used": {"type": "integer", "nullable": True},
                    "memory_total": {"type": "integer", "nullable": True},
                    "models": {"type": "array", "items": {"type": "string"}},
                    "allow": {"type": "array", "items": {"type": "string"}, "nullable": True},
                    "jobs_run": {"type": "integer"}, "seen_at": {"type": "number"},
                    "doing": {"type": "object", "nullable": True,
                              "description": "what keeps it from its jobs now",
                              "properties": {
                                  "what": {"type": "string", "enum": list(DOINGS)},
                                  "models": {"type": "array", "items": {"type": "string"}}}},
                    "cannot_run": {"type": "object",
                                   "description": "a ComfyUI executor's templates its server "
                                                  "lacks a node class or file for, and what",
                                   "additionalProperties": {"type": "string"}}}},
                "Paused": {"type": "object", "properties": {"paused": {"type": "boolean"},
                                                            "changed": {"type": "boolean"}}},
                "Template": {"type": "object", "properties": {
                    "name": {"type": "string"}, "description": {"type": "string"},
                    "params": {"type": "array", "items": {"type": "object"}}}},
                "Batch": {"type": "object", "properties": {
                    "id": {"type": "integer"}, "template": {"type": "string"},
                    "submitter": {"type": "string"},
                    "priority": {"type": "string", "enum": priorities},
                    "total": {"type": "integer"}, "done": {"type": "integer"},
                    "counts": {"type": "object"},
                    "jobs_ahead": {"type": "integer", "nullable": True},
                    "eta_seconds": {"type": "number", "nullable": True},
                    "demo_models": {"type": "array", "items": {"type": "string"},
                                    "description": "demo models its jobs use: images are noise"},
                    "problems": {"type": "array", "items": _ref("Problem")}}},
                "Job": {"type": "object", "properties": {
                    "id": {"type": "integer"}, "batch": {"type": "integer"},
                    "row": {"type": "integer"},
                    "key": {"type": "string", "nullable": True,
                            "description": "the row's value in the template's key column "
                                           "(e.g. its SKU), as the sheet had it"},
                    "status": {"type": "string", "enum": statuses},
                    "error": {"type": "string", "nullable": True},
                    "outputs": {"type": "array", "items": {"type": "string"}}}},
                "JobPage": {"type": "object", "properties": {
                    "jobs": {"type": "array", "items": _ref("Job")},
                    "next_cursor": {"type": "integer", "nullable": True},
                    "total": {"type": "integer", "description": "with offset: how many match"}}},
                "BatchPage": {"type": "object", "properties": {
                    "batches": {"type": "array", "items": {"type": "object", "properties": {
                        "id": {"type": "integer"}, "template": {"type": "string"},
                        "submitter": {"type": "string"}, "total": {"type": "integer"},
                        "counts": {"type": "object"}}}},
                    "next_cursor": {"type": "integer", "nullable": True}}},
                "Canceled": {"type": "object", "properties": {
                    "ended": {"type": "array", "items": {"type": "integer"}},
                    "asked": {"type": "array", "items": {"type": "integer"}}}},
                "Retried": {"type": "object", "properties": {
                    "batch": {"type": "integer"}, "jobs": {"type": "integer"},
                    "created": {"type": "boolean"}}},
            },
        },
    }
