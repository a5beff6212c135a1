"""`genbot submit TEMPLATE SHEET`: a sheet to a running genbot, over the REST API.

The pictures the sheet's image cells name are found beside it and sent along (the
template says which columns hold images). With --wait a live progress bar follows the
batch; the exit code says how it went: 0 every job succeeded, 1 some did not (or the
sheet was refused), 2 the server could not be asked, 3 no token or a refused one.
With no token given, a service on this machine is asked with its own admin token
(data_dir/local-admin.token), as the dashboard's sign-in suggests.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import aiohttp

DEFAULT_SERVER = "http://127.0.0.1:8080"
TOKEN_EXIT = 3  # no token, or one the server refused: not "unreachable" (2)


def local_token(server: str) -> str | None:
    """The admin token a service on this machine keeps for its own user, if any."""
    from urllib.parse import urlsplit

    from storage.config import ConfigError, load
    if urlsplit(server).hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    try:
        path = load().data_dir / "local-admin.token"
        return path.read_text().strip() or None
    except (ConfigError, OSError):
        return None


def submit(template: str, sheet: Path, *, server: str | None, token: str | None,
           priority: str, wait: bool, key: str | None = None) -> int:
    server = (server or os.environ.get("GENBOT_SERVER") or DEFAULT_SERVER).rstrip("/")
    token = token or os.environ.get("GENBOT_TOKEN") or local_token(server)
    if not token:
        print("genbot: a token is needed: --token T or GENBOT_TOKEN ([api] tokens on the "
              "server; a fresh install's is in its data_dir/local-admin.token)", file=sys.stderr)
        return TOKEN_EXIT
    try:
        return asyncio.run(_submit(template, sheet, server, token, priority, wait, key))
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        print(f"genbot: cannot reach {server}: {e or type(e).__name__}", file=sys.stderr)
        return 2


async def _submit(template: str, sheet: Path, server: str, token: str, priority: str,
                  wait: bool, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    if key:
        headers["Idempotency-Key"] = key
    async with aiohttp.ClientSession(server, headers=headers) as http:
        async with http.get(f"/api/v1/templates/{template}") as r:
            info = await _answer(r)
            if r.status != 200:
                return _error(info, r.status)
        form = aiohttp.FormData()
        form.add_field("template", template)
        form.add_field("priority", priority)
        form.add_field("sheet", sheet.read_bytes(), filename=sheet.name)
        for name, data in pictures(sheet, info):
            form.add_field("pictures", data, filename=name)
        async with http.post("/api/v1/batches", data=form) as r:
            batch = await _answer(r)
            if r.status not in (200, 201):
                return _error(batch, r.status)
        for problem in batch.get("problems", []):
            print(f"skipped: {problem['message']}", file=sys.stderr)
        print(f"batch {batch['id']}: {batch['total']} {template} jobs "
              f"({server}/api/v1/batches/{batch['id']})", flush=True)
        if batch.get("demo_models"):
            print(f"note: demo model ({', '.join(batch['demo_models'])}) — images are noise; "
                  "see README, Models, for real ones", flush=True)
        if not wait:
            return 0
        code = await follow(http, batch["id"], batch["total"])
        print(f"results: {server}/api/v1/batches/{batch['id']}/files/results.xlsx")
        print(f"images:  {server}/dashboard/#/batches/{batch['id']} (each at "
              f"{server}/api/v1/jobs?batch={batch['id']})")
        return code


async def follow(http: aiohttp.ClientSession, batch_id: int, total: int) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    with Progress(TextColumn(f"batch {batch_id}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[failed]}"), TimeElapsedColumn(),
                  transient=not sys.stdout.isatty()) as bar:
        task = bar.add_task("", total=total, failed="")
        while True:
            async with http.get(f"/api/v1/batches/{batch_id}") as r:
                state = await _answer(r)
                if r.status != 200:
                    return _error(state, r.status)
            counts = state["counts"]
            bad = counts.get("failed", 0) + counts.get("canceled", 0)
            bar.update(task, completed=state["done"], failed=f"{bad} failed" if bad else "")
            if state["done"] >= state["total"]:
                break
            await asyncio.sleep(1.0)
    ok = counts.get("succeeded", 0)
    print(f"batch {batch_id}: {ok} of {state['total']} succeeded"
          + (f", {bad} failed or canceled" if bad else ""))
    return 0 if ok == state["total"] else 1


def pictures(sheet: Path, template_info: dict) -> list[tuple[str, bytes]]:
    """The files beside the sheet that its image cells name."""
    from bot.intake.images import relative_name
    from bot.intake.sheets import SheetError, read_sheet
    from executor.params import normalize_header
    columns = {normalize_header(h) for p in template_info["params"] if p["type"] == "image"
               for h in (p["name"], *p["aliases"])}
    try:
        grid = read_sheet(sheet.name, sheet.read_bytes(), max_unpacked_bytes=512 * 2**20)
    except SheetError:
        return []  # the server says what is wrong with it
    wanted = [i for i, h in enumerate(grid.headers) if normalize_header(h) in columns]
    root = sheet.resolve().parent
    found: dict[str, bytes] = {}
    for _, cells in grid.rows:
        for i in wanted:
            name = relative_name(str(cells[i])) if i < len(cells) and cells[i] else None
            if name is None or name in found:
                continue
            try:
                path = (root / name).resolve()
                if path.is_relative_to(root) and path.is_file():
                    found[name] = path.read_bytes()
            except (OSError, ValueError):  # not a name this file system can hold
                continue
    return sorted(found.items())


async def _answer(r: aiohttp.ClientResponse) -> dict:
    """The JSON answer; anything else (a proxy's HTML page, plain text) as an error
    carrying the first line of what came back."""
    text = await r.text(errors="replace")
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    first = text.strip().splitlines()[0][:200] if text.strip() else ""
    return {"error": {"message": f"HTTP {r.status} {r.reason or ''}".strip()
                      + (f": {first}" if first else "")}}


def _error(body: dict, status: int) -> int:
    error = (body or {}).get("error", {})
    print(f"genbot: {error.get('message') or f'HTTP {status}'}", file=sys.stderr)
    if status == 401:
        print("genbot: the token was refused; pass one of the server's [api] tokens (on the "
              "server's machine, a fresh install's is in data_dir/local-admin.token)",
              file=sys.stderr)
        return TOKEN_EXIT
    return 1 if status in (403, 404, 409, 413, 422, 429) else 2
