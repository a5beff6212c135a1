"""The chat side of a running service: one core over any number of platforms.

`ChatCore` holds the pieces every platform shares over the application layer — the
inbox, the outbox, the command side (`bot.chat.receive.Chat`) — and runs the background
loops that make delivery durable: the notifier (queue events -> owed messages), one
sender per platform (owed messages -> posts), and the inbox's clean-up. `genbot
serve` runs one for Slack and DingTalk; `genbot chat` runs one for the terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from bot.app.application import App
from bot.chat.notifier import Notifier
from bot.chat.platform import Platform
from bot.chat.receive import Chat
from bot.chat.sender import Sender
from bot.settings import ApiConfig, ChatConfig
from storage.config import QueueConfig
from storage.inbox import Inbox
from storage.logs import Retrying
from storage.outbox import Outbox
from templates.settings import ModelsConfig, TemplatesConfig, models

log = logging.getLogger("genbot.core")
NOTIFIER_POLL = 0.3  # seconds between reads of the event log when it had nothing new
# (on PostgreSQL the database rings at once; then this is only the fallback, x10)
PURGE_EVERY = 3600.0
PLACEMENT_EVERY = 5.0  # seconds between looks for batches no running executor can take
STOP_GRACE = 10.0  # seconds a stop waits for the posts under way to finish and be marked


class ChatCore:
    def __init__(self, app: App, platforms: list[Platform]):
        self.app, self.config, self.queue = app, app.config, app.queue
        self.store, self.clock = app.store, app.clock
        config, clock, db = app.config, app.clock, app.queue.db
        self.platforms = {p.name: p for p in platforms}
        self.outbox = Outbox(db, clock=clock)
        self.inbox = Inbox(db, config[ChatConfig].inbox_keep_hours * 3600, clock=clock)
        self.access = app.access
        self.senders = {name: Sender(self.outbox, p, self.store,
                                     attempts=config[ChatConfig].delivery_attempts,
                                     progress_every=config[ChatConfig].progress_every,
                                     claim_seconds=config[ChatConfig].send_claim_seconds,
                                     clock=clock)
                        for name, p in self.platforms.items()}
        self.notifier = Notifier(app.queue, self.outbox, self.store, platforms=self.platforms,
                                 editable=[n for n, p in self.platforms.items() if p.can_edit],
                                 bundles=[n for n, p in self.platforms.items()
                                          if p.bundles_files],
                                 inline=[n for n, p in self.platforms.items()
                                         if p.inline_buttons],
                                 demo=config[ModelsConfig].demo(models(config)),
                                 templates=app.templates, font=config[TemplatesConfig].font,
                                 auto_save=config[QueueConfig].auto_save, clock=clock,
                                 public_url=config[ApiConfig].public_url)
        self.chat = Chat(app, inbox=self.inbox, outbox=self.outbox, platforms=self.platforms,
                         on_owed=self.wake)
        self.tasks: list[asyncio.Task] = []

    def wake(self) -> None:
        for sender in self.senders.values():
            sender.wake.set()

    async def pump(self) -> None:
        """One round of everything: follow the event log, then post what is due."""
        while await self.notifier.run_once():
            pass
        for sender in self.senders.values():
            while await sender.run_once():
                pass

    async def settle(self, timeout: float = 10.0) -> None:
        """Wait (with the loops running) until what is owed now has been posted: the
        terminal prints a command's replies before it reads the next one."""
        deadline = self.clock() + timeout
        while self.clock() < deadline:
            caught_up = await self.outbox.cursor(self.notifier.cursor) >= \
                await self.queue.last_event_seq()
            due = [await self.outbox.next_due(name) for name in self.platforms]
            if caught_up and all(t is None or t > self.clock() for t in due):
                return
            self.wake()
            await asyncio.sleep(0.05)

    def start(self) -> None:
        if not self.platforms:
            return
        self.tasks = [asyncio.create_task(self._notify(), name="notifier"),
                      asyncio.create_task(self._waiting(), name="placement"),
                      asyncio.create_task(self._purge(), name="inbox-purge")]
        for sender in self.senders.values():
            sender.closing = False
        self.tasks += [asyncio.create_task(s.run(), name=f"sender-{n}")
                       for n, s in self.senders.items()]

    async def stop(self) -> None:
        """The senders first let the posts under way finish and be marked sent (a post
        cut off after the platform took it would be posted again on restart), within
        STOP_GRACE seconds; then everything is cancelled."""
        senders = [t for t in self.tasks if t.get_name().startswith("sender-")]
        for sender in self.senders.values():
            sender.close()
        if senders:
            await asyncio.wait(senders, timeout=STOP_GRACE)
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.tasks = []
        for platform in self.platforms.values():
            await platform.close()

    async def _notify(self) -> None:
        """Follow the event log: at once when the database rings (PostgreSQL), else by
        polling; polling stays as the fallback either way."""
        await self.queue.bell.follow(self.notifier.run_once, self.wake, NOTIFIER_POLL,
                                     Retrying(log, "notifier: following the event log"))

    async def _waiting(self) -> None:
        """Batches no running executor can take: looked for every few seconds (executors
        come and go without an event in the log)."""
        retrying = Retrying(log, "notifier: finding batches that wait for an executor")
        while True:
            try:
                if await self.notifier.waiting():
                    self.wake()
                retrying.worked()
            except Exception as e:  # noqa: BLE001 - a background loop: said once by Retrying, tried again
                retrying.failed(e)
            await asyncio.sleep(PLACEMENT_EVERY)

    async def _purge(self) -> None:
        while True:
            try:
                if gone := await self.inbox.purge():
                    log.info("inbox: forgot %d expired uploads", gone)
            except Exception:
                log.exception("inbox: purge failed")
            await asyncio.sleep(PURGE_EVERY)
