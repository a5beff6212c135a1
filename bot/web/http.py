"""What every /api/v1 route shares: answers as typed records, errors as one record, files
from the output store, and the few ways a path or query value is read.

A stored file was made from what others sent (a ComfyUI server's output, a sheet's
values): it is served as what its bytes are (storage.media), never as what its name
says, with headers that keep a browser from running it on genbot's origin (nosniff, a
sandboxing Content-Security-Policy), and anything but an image is a download.

An answer is a msgspec Struct, the same record the OpenAPI document describes
(bot.web.openapi), encoded once here: what a handler returns and what the document says
it returns are one declaration. Every error is an `Error`, whoever raises it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec
from aiohttp import web
from msgspec import UNSET, Struct, UnsetType

from bot.conventions import API_PREFIX
from storage.files import FileStore
from storage.media import sniff_file

PREFIX = API_PREFIX
BIGGEST = 2**63 - 1  # ids are 64-bit in the database
SMALL_BODY = 64 * 1024  # a JSON body of fields alone (an action, a rating): no files in it
T = TypeVar("T")


class Problem(Struct):
    """One problem of a sheet: where (row, column; null for the whole file or row) and
    what, with its code and message exactly as chat reports it."""
    row: int | None
    column: str | None
    code: str
    message: str


class ErrorDetail(Struct):
    """What went wrong: a stable code and an English message. An error of the application
    layer adds its own details beside them (bot.errors.Coded.plain), each a plain value."""
    code: str
    message: str
    problems: list[Problem] | UnsetType = UNSET  # a sheet's, by row and column
    limit_mb: float | UnsetType = UNSET  # 413: the limit, its config key, the size sent
    limit_key: str | UnsetType = UNSET
    size_mb: float | UnsetType = UNSET
    templates: list[str] | UnsetType = UNSET  # no such template: the ones there are
    headers_hint: str | UnsetType = UNSET  # 401: how to send a token


class Error(Struct):
    """Every error's body, the API's own and aiohttp's refusals alike."""
    error: ErrorDetail


def encoded(record: Any) -> bytes:
    """A record as JSON. Undecodable request bytes echoed in a message (kept as lone
    surrogates) come out as "?" rather than failing the answer."""
    try:
        return msgspec.json.encode(record)
    except UnicodeEncodeError:
        text = json.dumps(msgspec.to_builtins(record), ensure_ascii=False)
        return text.encode("utf-8", "replace")


def respond(record: Any, status: int = 200) -> web.Response:
    return web.Response(body=encoded(record), status=status, content_type="application/json",
                        charset="utf-8")


class ApiError(web.HTTPException):
    """An error answered at once as an `Error`; `details` are an application error's own."""

    def __init__(self, status: int, code: str, message: str, *,
                 headers: dict[str, str] | None = None, details: dict[str, Any] | None = None,
                 **fields: Any):
        self.status_code = status
        record = Error(ErrorDetail(code, message, **fields))
        body = encoded({"error": msgspec.to_builtins(record.error) | details} if details
                       else record)
        super().__init__(text=body.decode(), content_type="application/json", headers=headers)


def problems(found: list[dict[str, Any]]) -> list[Problem]:
    """An intake report's problems (bot.intake.check.IntakeReport.problems) as records."""
    return msgspec.convert(found, list[Problem])


# On every stored file served: no type guessed from the bytes by the browser, and were it
# opened as a page anyway, nothing it says may load or run (a sandbox, a unique origin).
SERVED_FILE = {"X-Content-Type-Options": "nosniff",
               "Content-Security-Policy": "default-src 'none'; sandbox"}
_PLAIN_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class _ExactFile(web.FileResponse):
    """The file itself: never a `.gz` / `.br` file beside it, which aiohttp would send in
    its place (bytes other than those the Content-Type was told from)."""

    def _get_file_path_stat_encoding(self, accept_encoding: str) -> tuple[
            Path | None, os.stat_result, str | None]:
        return super()._get_file_path_stat_encoding("")


async def stored_file(store: FileStore, relative: str,
                      filename: str | None = None) -> web.StreamResponse:
    """A file of the output store, or a 404 that says why not: its Content-Type told by
    its bytes; an image shown inline, anything else (a video, a sheet, bytes of no known
    kind) an attachment named `filename` (default: its own name)."""
    try:
        path = await asyncio.to_thread(store.path, relative)  # (may fetch it)
    except ValueError:
        raise ApiError(404, "no_file", "not in the output store") from None
    if not path.is_file():
        raise ApiError(404, "no_file", f"{relative} is not there (not made yet, or deleted)")
    kind = await asyncio.to_thread(sniff_file, path)
    headers = {**SERVED_FILE,
               "Content-Type": kind.mime if kind else "application/octet-stream"}
    if kind is None or kind.kind != "image":
        headers["Content-Disposition"] = attachment(filename or path.name)
    return _ExactFile(path, headers=headers)


def attachment(name: str) -> str:
    """A download's Content-Disposition: a plain ASCII name, and the name itself (RFC 6266)."""
    plain = _PLAIN_NAME.sub("_", name).strip("._") or "file"
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"


async def json_body(request: web.Request, record: type[T], most: int = SMALL_BODY) -> T:
    """A small JSON body read as `record`: 413 past `most` bytes, 400 when it is not a JSON
    object, 422 when a field is not of its type (the message says which). What the values
    mean is the application layer's to judge."""
    if (request.content_length or 0) > most:
        raise ApiError(413, "too_large", f"the body is larger than {most // 1024} KB")
    data = b""
    while len(data) <= most and (chunk := await request.content.read(most + 1 - len(data))):
        data += chunk
    if len(data) > most:
        raise ApiError(413, "too_large", f"the body is larger than {most // 1024} KB")
    try:
        body = msgspec.json.decode(data)
    except msgspec.DecodeError:
        raise ApiError(400, "bad_json", "the body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "bad_json", "the body is a JSON object")
    try:
        return msgspec.convert(body, record)
    except msgspec.ValidationError as e:
        raise ApiError(422, "bad_field", str(e)[:300]) from None


def number(text: str) -> int:
    """A whole number the database can hold (ValueError otherwise; routes match digits only,
    so a path id that is too big is simply not found)."""
    value = int(text)
    if not 0 <= value <= BIGGEST:
        raise ValueError(f"{text} is out of range")
    return value


def page_of(request: web.Request, most: int) -> tuple[int, int | None]:
    """A page's `limit` (default 50) and `cursor` (where the last page ended), or 400."""
    q = request.query
    try:
        limit = number(q.get("limit", "50"))
        cursor = number(q["cursor"]) if q.get("cursor") else None
    except ValueError:
        raise ApiError(400, "bad_query", "limit and cursor are whole numbers") from None
    if not 1 <= limit <= most:
        raise ApiError(400, "bad_query", f"limit is 1 to {most}")
    return limit, cursor


def in_path(request: web.Request, name: str) -> int:
    try:
        return number(request.match_info[name])
    except ValueError:
        raise ApiError(404, "not_found", f"no such {name}: {request.match_info[name][:30]}") \
            from None


def flag(value: Any) -> bool:
    return value is True or str(value).lower() in ("1", "true", "yes", "on")


def iso(when: datetime | None) -> str | None:
    return when.isoformat() if when else None


def reader_lang(request: web.Request) -> str:
    """The language to answer in: ?lang= where it is offered, else the first
    Accept-Language asks for that is, else the catalog's source (English)."""
    from bot import i18n
    offered = i18n.languages()
    asked = request.query.get("lang")
    language = offered.find(asked) if asked else \
        offered.negotiate(request.headers.get("Accept-Language"))
    return language.code if language else i18n.SOURCE
