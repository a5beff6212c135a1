"""A submission's body, multipart or JSON, read within its limits: each file is held to
its own limit as it arrives and the whole body to `body_limit`, so what is over is
refused as it comes (413, naming the limit's config key), never buffered first."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from bot.intake.check import SheetFile, SheetRows, SheetSource
from bot.intake.images import Attachments
from bot.settings import ApiConfig, IntakeConfig
from bot.web.http import ApiError
from storage.config import Config

BODY_PICTURES = 10  # the default body limit: a sheet and this many pictures at their limits


def body_limit(config: Config) -> int:
    """The largest request body, in bytes: [api] max_body_mb, or a sheet and
    BODY_PICTURES pictures at their [intake] limits."""
    mb = config[ApiConfig].max_body_mb or (config[IntakeConfig].max_file_mb
                                    + BODY_PICTURES * config[IntakeConfig].max_image_mb)
    return int(mb * 2**20)


def too_large(what: str, size: int, limit_mb: float, key: str) -> ApiError:
    return ApiError(413, "too_large", f"{what} is larger than {limit_mb:g} MB ({key})",
                    limit_mb=limit_mb, limit_key=key, size_mb=round(size / 2**20, 2))


REPEATED = frozenset({"vary", "compare"})  # multipart fields given once per value


async def read_form(request: web.Request, config: Config) -> dict[str, Any]:
    """The submission's fields, from multipart or JSON; files as (name, bytes)."""
    limit = _BodyLimit(config)
    if (request.content_length or 0) > limit.bytes:
        raise limit.passed(request.content_length or 0)
    if request.content_type == "application/json":
        return await _json_form(request, limit)
    if not request.content_type.startswith("multipart/"):
        raise ApiError(415, "bad_content_type", "send multipart/form-data or application/json")
    form: dict[str, Any] = {"files": {}}
    try:
        async for part in await request.multipart():
            if not isinstance(part, BodyPartReader):
                raise ValueError("a nested multipart body")
            if part.filename:
                await _file_part(part, config, limit, form)
            elif part.name:
                text = await part.text()
                limit.add(len(text))
                if part.name in REPEATED:  # a field that may be sent again and again
                    form.setdefault(part.name, []).append(text)
                else:
                    form[part.name] = text
    except web.HTTPRequestEntityTooLarge:
        raise limit.passed(limit.bytes, "a field") from None
    except (ValueError, AssertionError, HttpProcessingError, LookupError) as e:  # malformed
        raise ApiError(400, "bad_multipart", f"the multipart body cannot be read: {e}"[:300]) \
            from None
    return form


class _BodyLimit:
    """The most a submission's body may hold, the key that says so, and what has come."""

    def __init__(self, config: Config) -> None:
        api = config[ApiConfig]
        self.bytes = body_limit(config)
        self.mb = api.max_body_mb or self.bytes / 2**20
        self.key = "[api] max_body_mb" if api.max_body_mb else \
            f"[intake] max_file_mb + {BODY_PICTURES} × max_image_mb"
        self.total = 0

    def passed(self, size: int, what: str = "the request body") -> ApiError:
        return too_large(what, size, self.mb, self.key)

    def add(self, size: int) -> None:
        self.total += size
        if self.total > self.bytes:
            raise self.passed(self.total)


async def _json_form(request: web.Request, limit: _BodyLimit) -> dict[str, Any]:
    try:
        body = await request.json()
    except web.HTTPRequestEntityTooLarge:
        raise limit.passed(request.content_length or limit.bytes) from None
    except ValueError:
        raise ApiError(400, "bad_json", "the body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "bad_json", "the body is a JSON object")
    return body


async def _file_part(part: BodyPartReader, config: Config, limit: _BodyLimit,
                     form: dict[str, Any]) -> None:
    """A file of the form, read within its own limit (a sheet's, a picture's) and the
    body's: "sheet" is the sheet, any other the pictures it names."""
    filename = unquote(part.filename or "")  # aiohttp's client percent-encodes "/"
    sheet = part.name == "sheet"
    intake = config[IntakeConfig]
    limit_mb = intake.max_file_mb if sheet else intake.max_image_mb
    key = "[intake] max_file_mb" if sheet else "[intake] max_image_mb"
    data = bytearray()
    while chunk := await part.read_chunk():
        data += chunk
        if len(data) > limit_mb * 2**20:
            raise too_large(f"{'the sheet' if sheet else 'the file'} {filename[:80]!r}",
                            len(data), limit_mb, key)
        limit.add(len(chunk))
    if sheet:
        form["sheet"] = (filename, bytes(data))
    else:
        form["files"][filename] = bytes(data)


def sweep_axes(value: Any, field: str = "vary", what: str = "KEY=V1,V2 strings") -> tuple[str, ...]:
    """`vary` (or `compare`): one string, or a list of them."""
    if value is None or value == "":
        return ()
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ApiError(422, "bad_field", f"{field} is a list of {what}")
    return tuple(values)


def names_list(value: Any, field: str = "grid") -> tuple[str, ...]:
    """`grid` (or `channels`): "A,B", or a list of names."""
    if value is None or value == "":
        return ()
    keys = value.split(",") if isinstance(value, str) else value
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ApiError(422, "bad_field", f"{field} is A,B or a list of names")
    return tuple(k.strip() for k in keys if k.strip())


def sweep_seeds(value: Any) -> int:
    """`seeds`: a whole number (the templates say which are allowed)."""
    if value is None or value == "":
        return 1
    if isinstance(value, bool) or not isinstance(value, (int, str)) or \
            not str(value).strip().isdigit():
        raise ApiError(422, "bad_field", f"seeds is a whole number, not {str(value)[:40]!r}")
    return int(value)


def form_files(form: dict[str, Any]) -> Attachments:
    """The pictures sent along, by name (or by the name's last part)."""
    files = form.get("files") or {}

    async def get(name: str) -> bytes | None:
        return files.get(name) or files.get(PurePosixPath(name).name)
    return get


def form_sheet(form: dict[str, Any]) -> SheetSource:
    """The sheet: a file (multipart), or rows (JSON)."""
    sheet = form.get("sheet")
    if isinstance(sheet, tuple):
        return SheetFile(*sheet)
    rows = form.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ApiError(422, "no_rows", "send a sheet file (multipart) or JSON rows: "
                       '{"template": …, "rows": [{"column": "value"}, …]}')
    return SheetRows(rows)
