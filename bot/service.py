"""`genbot serve`: the long-running service process.

One aiohttp app: the chat platforms' endpoints, the REST API (with /healthz), the
dashboard and /metrics, with the chat core's delivery loops (bot.chat.hub), the webhooks'
(bot.webhooks) and the scheduler in the same process.
The executor runs beside it as a supervised child process (bot.supervisor), so
the GPU code can crash without taking the service down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Coroutine
from typing import Any

from aiohttp import web

from bot.app.application import App, load_templates
from bot.chat.hub import ChatCore
from bot.chat.platform import Platform
from bot.scheduler import Scheduler
from bot.settings import ApiConfig, DingTalkConfig, DiscordConfig, FeishuConfig, SlackConfig
from bot.supervisor import Supervisor
from bot.web.api import Api, body_limit
from bot.web.dashboard import Dashboard
from bot.web.metrics import Metrics
from bot.web.sessions import local_token
from bot.webhooks.service import WebhookService
from storage.config import Config, DatabaseConfig, QueueConfig, ServiceConfig
from storage.files import open_store
from storage.queue import Queue, open_queue
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
    if config[FeishuConfig].app_id:
        from bot.chat.feishu.adapter import Feishu
        platforms.append(Feishu(config))
    if config[DiscordConfig].token:
        from bot.chat.discord.adapter import Discord
        platforms.append(Discord(config))
    return platforms


class CannotListen(Exception):
    """The service's address is taken or not ours: one line for the operator."""


class Service:
    """The running pieces of `genbot serve`, started and stopped as one."""

    def __init__(self, config: Config, *, executor: bool = True,
                 platforms: list[Platform] | None = None):
        self.config, self.executor = config, executor
        self.platforms = configured_platforms(config) if platforms is None else platforms
        self.supervisor: Supervisor | None = None
        self.comfy: list[Supervisor] = []  # one per [comfyui] server
        # What start() has started so far: stop() stops only those, so a SIGTERM that
        # cuts start-up short still ends in a graceful stop.
        self.queue: Queue | None = None
        self.core: ChatCore | None = None
        self.hooks: WebhookService | None = None
        self.runner: web.AppRunner | None = None
        self.scheduler: Scheduler | None = None

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
        api = Api(self.app, self.hooks,
                  platforms=lambda: [p.health() for p in self.platforms])
        api.routes(app)
        await api.summary.get()  # /healthz answers from it, from the first probe on
        Dashboard(api).routes(app)
        self.metrics = Metrics(self.queue, self.core.outbox, restarts=lambda:
                               sum(s.restarts for s in [self.supervisor, *self.comfy] if s),
                               token=config[ApiConfig].metrics_token,
                               webhooks=(self.hooks.webhooks, self.hooks.deliverer.counts),
                               stuck_after=config[QueueConfig].stuck_after,
                               platforms=lambda: [p.health() for p in self.platforms])
        await self.metrics.start()
        app.router.add_get("/metrics", self.metrics.handler)
        for platform in self.platforms:
            platform.attach(app, self.core.chat)
        logging.getLogger("aiohttp.server").addFilter(quiet_bad_requests)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, config[ServiceConfig].host, config[ServiceConfig].port)
        try:
            await site.start()
        except OSError as e:  # (stop() cleans up what started)
            raise CannotListen(f"genbot: cannot listen on {config[ServiceConfig].host}:"
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
        """Stop what start() started, in reverse, however far it got."""
        log.info("genbot stopping")
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.core is not None:
            await self.core.stop()
        if self.hooks is not None:
            await self.hooks.stop()
        for supervisor in ([self.supervisor] if self.supervisor else []) + self.comfy:
            await supervisor.stop()
        if self.runner is not None:
            await self.runner.cleanup()
        if self.queue is not None:
            await self.queue.close()


async def serve(config: Config, *, ready: asyncio.Event | None = None,
                executor: bool = True, platforms: list[Platform] | None = None) -> None:
    """Run until SIGINT/SIGTERM. `executor`: also run and supervise an executor process.
    `platforms`: the chat platforms (default: those the config turns on).

    The signals are taken before start-up, and a signal during it cuts it short: /healthz
    answers while the rest starts, a rollout or `systemctl stop` may come at any moment
    (even while waiting minutes for a PostgreSQL server), and every one ends in a
    graceful stop of whatever had started."""
    service = Service(config, executor=executor, platforms=platforms)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        if await _until(stop, service.start()):
            if ready is not None:
                ready.set()
            await stop.wait()
        else:
            log.info("genbot: asked to stop while starting")
    except CannotListen as e:
        raise SystemExit(str(e)) from None
    finally:
        await service.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _until(stop: asyncio.Event, work: Coroutine[Any, Any, None]) -> bool:
    """Run `work` unless `stop` is set first (then cancel it); True if it finished."""
    working = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({working, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not working.done():
        working.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await working
        return False
    working.result()  # start-up's own failure (a busy port, a broken config) is raised
    return True
