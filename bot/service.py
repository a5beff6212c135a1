"""`genbot serve`: the long-running service process.

One aiohttp app: the chat platforms' endpoints, the REST API (with /healthz), the
dashboard and /metrics, with the chat core's delivery loops (bot.chat.hub), the webhooks'
(bot.webhooks) and the scheduler in the same process.
The executor runs beside it as a supervised child process (bot.supervisor), so
the GPU code can crash without taking the service down.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket

from aiohttp import web

from bot.app.application import App, load_templates
from bot.chat.hub import ChatCore
from bot.chat.platform import Platform
from bot.scheduler import Scheduler
from bot.settings import ApiConfig, DingTalkConfig, SlackConfig
from bot.supervisor import Supervisor
from bot.web.api import Api, body_limit
from bot.web.dashboard import Dashboard
from bot.web.metrics import Metrics
from bot.web.sessions import local_token
from bot.webhooks.service import WebhookService
from storage.config import Config, DatabaseConfig, QueueConfig, ServiceConfig
from storage.files import open_store
from storage.queue import open_queue
from templates.settings import ComfyUIConfig

log = logging.getLogger("genbot.service")


def quiet_bad_requests(record: logging.LogRecord) -> bool:
    """A request aiohttp cannot even parse (raw bytes in its URL, a broken header line)
    is answered 400 by aiohttp; it is the sender's fault, so it is logged as one warning
    line, not as an error with a traceback."""
    from aiohttp.http_exceptions import HttpProcessingError
    error = record.exc_info[1] if record.exc_info else None
    if isinstance(error, HttpProcessingError):
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg, record.args = "refused a malformed HTTP request: %s", (
            f"{type(error).__name__}: {error.message}"[:200],)
        record.exc_info = record.exc_text = None
    return True


def configured_platforms(config: Config) -> list[Platform]:
    """The chat platforms the config turns on."""
    platforms: list[Platform] = []
    if config[SlackConfig].bot_token:
        from bot.chat.slack import Slack
        platforms.append(Slack(config))
    if config[DingTalkConfig].app_key:
        from bot.chat.dingtalk.adapter import DingTalk
        platforms.append(DingTalk(config))
    return platforms


class Service:
    """The running pieces of `genbot serve`, started and stopped as one."""

    def __init__(self, config: Config, *, executor: bool = True,
                 platforms: list[Platform] | None = None):
        self.config, self.executor = config, executor
        self.platforms = configured_platforms(config) if platforms is None else platforms
        self.supervisor: Supervisor | None = None
        self.comfy: list[Supervisor] = []  # one per [comfyui] server

    async def start(self) -> None:
        config = self.config
        local_admins: tuple[str, ...] = ()
        if not config[ApiConfig].tokens:  # a fresh install: one admin token, kept in data_dir
            token = local_token(config.data_dir)
            config = config.replaced(ApiConfig, tokens=(f"{token}=local",))
            local_admins = ("api:local",)
        templates = load_templates(config)
        self.queue = await open_queue(config, wait=config[DatabaseConfig].open_wait)
        self.app = App(config, self.queue, open_store(config), templates,
                       local_admins=local_admins)
        await self.app.record_versions(f"the service on {socket.gethostname()}")
        self.core = ChatCore(self.app, self.platforms)
        self.hooks = WebhookService(self.app)
        app = web.Application(client_max_size=body_limit(config))
        api = Api(self.app, self.hooks)
        api.routes(app)
        await api.summary.get()  # /healthz answers from it, from the first probe on
        Dashboard(api).routes(app)
        self.metrics = Metrics(self.queue, self.core.outbox, restarts=lambda:
                               sum(s.restarts for s in [self.supervisor, *self.comfy] if s),
                               token=config[ApiConfig].metrics_token,
                               webhooks=(self.hooks.webhooks, self.hooks.deliverer.counts),
                               stuck_after=config[QueueConfig].stuck_after)
        await self.metrics.start()
        app.router.add_get("/metrics", self.metrics.handler)
        for platform in self.platforms:
            platform.attach(app, self.core.chat.receive)
        logging.getLogger("aiohttp.server").addFilter(quiet_bad_requests)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, config[ServiceConfig].host, config[ServiceConfig].port)
        try:
            await site.start()
        except OSError as e:
            await self.runner.cleanup()
            await self.queue.close()
            raise SystemExit(f"genbot: cannot listen on {config[ServiceConfig].host}:"
                             f"{config[ServiceConfig].port}: {e.strerror or e}") from None
        self.port = self.runner.addresses[0][1]
        log.info("genbot serving on http://%s:%s (database %s, config %s, chat: %s)",
                 config[ServiceConfig].host, self.port, self.queue.db.display_url, config.source,
                 ", ".join(p.name for p in self.platforms) or "none configured")
        log.info("dashboard: http://%s:%s/dashboard/%s", config[ServiceConfig].host, self.port,
                 f" (no [api] tokens configured: sign in as admin with the token in "
                 f"{config.data_dir / 'local-admin.token'})" if local_admins else "")
        if self.executor:
            self.supervisor = Supervisor(config, queue=self.queue)
            self.supervisor.start()
            self.app.executor_starting = True
            for url in config[ComfyUIConfig].servers:  # ComfyUI's executors need no GPU here
                supervisor = Supervisor(config, queue=self.queue,
                                        command=Supervisor.comfy_command(config, url))
                supervisor.start()
                self.comfy.append(supervisor)
        self.core.start()
        await self.hooks.start()
        self.scheduler = Scheduler(self.app, outbox=self.core.outbox)
        self.scheduler.start()
        for platform in self.platforms:
            await platform.start()

    async def stop(self) -> None:
        log.info("genbot stopping")
        self.scheduler.stop()
        await self.core.stop()
        await self.hooks.stop()
        for supervisor in ([self.supervisor] if self.supervisor else []) + self.comfy:
            await supervisor.stop()
        await self.runner.cleanup()
        await self.queue.close()


async def serve(config: Config, *, ready: asyncio.Event | None = None,
                executor: bool = True, platforms: list[Platform] | None = None) -> None:
    """Run until SIGINT/SIGTERM. `executor`: also run and supervise an executor process.
    `platforms`: the chat platforms (default: those the config turns on)."""
    service = Service(config, executor=executor, platforms=platforms)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before start: /healthz answers while the
        loop.add_signal_handler(sig, stop.set)  # rest starts, and a SIGTERM then must stop it
    await service.start()
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        await service.stop()
