"""What the commands that talk to a running genbot over its REST API share (`genbot
submit`, `genbot job`): which server and token, what its answers say, and the exit codes
— 1 the request was refused (the reason printed), 2 the server could not be asked, 3 no
token or a refused one. With no token given, a service on this machine is asked with its
own admin token (data_dir/local-admin.token), as the dashboard's sign-in suggests.

Every `genbot` command imports this module to build its parser; aiohttp, a tenth of a
second to import, is imported by the functions that talk to the server.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiohttp

DEFAULT_SERVER = "http://127.0.0.1:8080"
REFUSED_EXIT, UNREACHABLE_EXIT = 1, 2
TOKEN_EXIT = 3  # no token, or one the server refused: not "unreachable" (2)


def add_server_options(parser: argparse.ArgumentParser) -> None:
    # No --config: the server's config is the server's; this one is a client.
    parser.add_argument("--server", metavar="URL",
                        help="default: $GENBOT_SERVER, else http://127.0.0.1:8080")
    parser.add_argument("--token", metavar="T", help="default: $GENBOT_TOKEN")


def server_of(server: str | None) -> str:
    return (server or os.environ.get("GENBOT_SERVER") or DEFAULT_SERVER).rstrip("/")


def token_for(server: str, token: str | None) -> str | None:
    """The token given, else $GENBOT_TOKEN, else this machine's service's own; None (and
    why, on stderr) when there is none."""
    token = token or os.environ.get("GENBOT_TOKEN") or local_token(server)
    if not token:
        print("genbot: a token is needed: --token T or GENBOT_TOKEN ([api] tokens on the "
              "server; a fresh install's is in its data_dir/local-admin.token)", file=sys.stderr)
    return token


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


def unreachable(server: str, e: BaseException) -> int:
    print(f"genbot: cannot reach {server}: {e or type(e).__name__}", file=sys.stderr)
    return UNREACHABLE_EXIT


async def answer(r: aiohttp.ClientResponse) -> dict:
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


def error(body: dict, status: int) -> int:
    """Say what the server refused, and the exit code for it."""
    detail = (body or {}).get("error", {})
    print(f"genbot: {detail.get('message') or f'HTTP {status}'}", file=sys.stderr)
    if status == 401:
        print("genbot: the token was refused; pass one of the server's [api] tokens (on the "
              "server's machine, a fresh install's is in data_dir/local-admin.token)",
              file=sys.stderr)
        return TOKEN_EXIT
    return REFUSED_EXIT if status in (403, 404, 409, 413, 422, 429) else UNREACHABLE_EXIT
