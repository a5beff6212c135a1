"""The service from outside, as a test drives it: `genbot serve` as a child process, its
/healthz, requests written byte for byte, and what it logged as a fault."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request

from tests.conftest import PYTHON, ROOT, python_env


def write_config(path, data_dir, port: int, lease: float = 3.0, **tables: str) -> None:
    """A config file for `genbot serve` (and the commands beside it) on `data_dir`, quick
    to notice things; `tables`: more TOML, by table name."""
    path.write_text(f"""
[service]
data_dir = "{data_dir}"
port = {port}
[queue]
lease_seconds = {lease}
heartbeat_seconds = 0.5
poll_interval = 0.2
[executor]
progress_interval = 0.0
""" + "".join(f"[{name}]\n{body}\n" for name, body in tables.items()))


async def start_serve(config_file, log, *options: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        PYTHON, "-m", "bot.cli", "serve", "--config", str(config_file), *options, cwd=ROOT,
        env=python_env(), stdout=log, stderr=log)


async def healthy(url: str, timeout: float = 60) -> None:
    import aiohttp
    async with asyncio.timeout(timeout), aiohttp.ClientSession() as s:
        while True:
            try:
                async with s.get(f"{url}/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.status, json.loads(response.read())


async def raw_post(url: str, path: str, headers: bytes = b"", body: bytes = b"{}",
                   ) -> tuple[int, bytes]:
    """One POST written byte for byte (`headers`: lines ending in CRLF): aiohttp's client
    refuses the header bytes a prober sends. The status and the body."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n%s\r\n%s" % (path.encode(), len(body), headers, body))
        async with asyncio.timeout(10):
            answer = await reader.read()
    finally:
        writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), payload


def tracebacks(caplog) -> list[str]:
    """What was logged as an error or with a traceback: hostile input is no server fault."""
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records
            if r.levelno >= logging.ERROR or r.exc_info]
