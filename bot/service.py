"""`genbot serve`: the long-running service process.

One aiohttp app. It hosts /healthz over the queue and runs the chat core's delivery
loops (bot.core) for the chat platforms configured; the platforms' endpoints, the API
and the dashboard join this same app and process.
The executor runs beside it as a supervised child process (bot.supervisor), so
the GPU code can crash without taking the service down.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from aiohttp import web

from bot.core import ChatCore
from bot.platform import Platform
from bot.supervisor import Supervisor
from storage.config import Config
from storage.queue import Queue, open_queue

log = logging.getLogger("genbot.service")
QUEUE = web.AppKey("queue", Queue)


async def healthz(request: web.Request) -> web.Response:
    queue = request.app[QUEUE]
    return web.json_response({"status": "ok", "paused": await queue.paused(),
                              **await queue.active_counts()})


def build_app(queue: Queue) -> web.Application:
    app = web.Application()
    app[QUEUE] = queue
    app.router.add_get("/healthz", healthz)
    return app


def load_checked_templates(config: Config) -> dict:
    """Templates are checked at start-up: broken ones are logged, the others serve."""
    from executor.workflow import load_templates
    templates, errors = load_templates(config.templates_dir)
    for error in errors:
        log.error("template not loaded: %s", error)
    log.info("templates: %s", ", ".join(templates) or f"none in {config.templates_dir}")
    return templates


async def serve(config: Config, *, ready: asyncio.Event | None = None,
                executor: bool = True, platforms: list[Platform] | None = None) -> None:
    """Run until SIGINT/SIGTERM. `executor`: also run and supervise an executor process.
    `platforms`: the chat platforms whose messages this service delivers."""
    templates = load_checked_templates(config)
    queue = await open_queue(config)
    core = ChatCore(config, queue, platforms or [], templates=templates)
    runner = web.AppRunner(build_app(queue), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.service.host, config.service.port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        await queue.close()
        raise SystemExit(f"genbot: cannot listen on {config.service.host}:{config.service.port}: "
                         f"{e.strerror or e}") from None
    log.info("genbot serving on http://%s:%s (database %s, config %s)", config.service.host,
             config.service.port, queue.db.display_url, config.source)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    supervisor = None
    if executor:
        supervisor = Supervisor(config)
        supervisor.start()
    core.start()
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        log.info("genbot stopping")
        await core.stop()
        if supervisor:
            await supervisor.stop()
        await runner.cleanup()
        await queue.close()
