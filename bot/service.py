"""`genbot serve`: the long-running service process.

One aiohttp app: /healthz, the chat platforms' endpoints, the REST API, the dashboard
and /metrics, with the chat core's delivery loops (bot.core) and the scheduler in the
same process.
The executor runs beside it as a supervised child process (bot.supervisor), so
the GPU code can crash without taking the service down.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal

from aiohttp import web

from bot.api import Api
from bot.core import ChatCore
from bot.dashboard import Dashboard
from bot.metrics import Metrics
from bot.schedules import Scheduler
from bot.sessions import local_token
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


def configured_platforms(config: Config) -> list[Platform]:
    """The chat platforms the config turns on."""
    platforms: list[Platform] = []
    if config.slack.bot_token:
        from bot.slack import Slack
        platforms.append(Slack(config))
    if config.dingtalk.app_key:
        from bot.dingtalk import DingTalk
        platforms.append(DingTalk(config))
    return platforms


class Service:
    """The running pieces of `genbot serve`, started and stopped as one."""

    def __init__(self, config: Config, *, executor: bool = True,
                 platforms: list[Platform] | None = None):
        self.config, self.executor = config, executor
        self.platforms = configured_platforms(config) if platforms is None else platforms
        self.supervisor: Supervisor | None = None

    async def start(self) -> None:
        config = self.config
        local_admins: tuple[str, ...] = ()
        if not config.api.tokens:  # a fresh install: one admin token, kept in data_dir
            token = local_token(config.data_dir)
            config = dataclasses.replace(config, api=dataclasses.replace(
                config.api, tokens=[f"{token}=local"]))
            local_admins = ("api:local",)
        templates = load_checked_templates(config)
        self.queue = await open_queue(config)
        self.core = ChatCore(config, self.queue, self.platforms, templates=templates,
                             local_admins=local_admins)
        app = build_app(self.queue)
        api = Api(config, self.queue, self.core.chat.permissions, self.core.store, templates)
        api.routes(app)
        Dashboard(api).routes(app)
        self.metrics = Metrics(self.queue, self.core.outbox, restarts=lambda:
                               self.supervisor.restarts if self.supervisor else 0,
                               token=config.api.metrics_token)
        await self.metrics.start()
        app.router.add_get("/metrics", self.metrics.handler)
        for platform in self.platforms:
            platform.attach(app, self.core.chat.receive)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, config.service.host, config.service.port)
        try:
            await site.start()
        except OSError as e:
            await self.runner.cleanup()
            await self.queue.close()
            raise SystemExit(f"genbot: cannot listen on {config.service.host}:"
                             f"{config.service.port}: {e.strerror or e}") from None
        self.port = self.runner.addresses[0][1]
        log.info("genbot serving on http://%s:%s (database %s, config %s, chat: %s)",
                 config.service.host, self.port, self.queue.db.display_url, config.source,
                 ", ".join(p.name for p in self.platforms) or "none configured")
        log.info("dashboard: http://%s:%s/dashboard/%s", config.service.host, self.port,
                 f" (no [api] tokens configured: sign in as admin with the token in "
                 f"{config.data_dir / 'local-admin.token'})" if local_admins else "")
        if self.executor:
            self.supervisor = Supervisor(config, queue=self.queue)
            self.supervisor.start()
        self.core.start()
        self.scheduler = Scheduler(config, self.queue, self.core.store, templates,
                                   outbox=self.core.outbox)
        self.scheduler.start()
        for platform in self.platforms:
            await platform.start()

    async def stop(self) -> None:
        log.info("genbot stopping")
        self.scheduler.stop()
        await self.core.stop()
        if self.supervisor:
            await self.supervisor.stop()
        await self.runner.cleanup()
        await self.queue.close()


async def serve(config: Config, *, ready: asyncio.Event | None = None,
                executor: bool = True, platforms: list[Platform] | None = None) -> None:
    """Run until SIGINT/SIGTERM. `executor`: also run and supervise an executor process.
    `platforms`: the chat platforms (default: those the config turns on)."""
    service = Service(config, executor=executor, platforms=platforms)
    await service.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        await service.stop()
