"""An in-process chat platform for tests: it implements bot.chat.platform.Platform and records
everything posted, with switches for the faults real platforms have."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
from dataclasses import dataclass, field
from pathlib import Path

from bot.chat.platform import DeliveryError, DownloadError, FileRef, Incoming, Outgoing, Platform
from templates.settings import templates_dir
from tests.conftest import migrated_sqlite

MESSAGE_IDS = itertools.count(1)  # unique across instances, as a platform's message ids are


@dataclass
class Post:
    id: str
    conversation: str
    thread: str | None
    text: str
    file: str | None = None  # the file's name
    data: bytes | None = None
    image: bool = False
    mention: str | None = None
    buttons: tuple = ()
    edits: list[str] = field(default_factory=list)

    @property
    def shown(self) -> str:
        """What the message says now (after its edits)."""
        return self.edits[-1] if self.edits else self.text


class MemoryPlatform(Platform):
    def __init__(self, name: str = "test", *, can_edit: bool = True, has_buttons: bool = True,
                 has_threads: bool = True, default_lang: str | None = None,
                 file_hint: str | None = None):
        self.name, self.can_edit, self.has_buttons = name, can_edit, has_buttons
        self.has_threads, self.default_lang, self.file_hint = has_threads, default_lang, file_hint
        self.posts: list[Post] = []
        self.files: dict[str, bytes] = {}
        self.faults: list[BaseException] = []  # raised by the next sends and edits, in order
        self.calls = 0
        self._ids = itertools.count(1)

    # --- what a person does ---------------------------------------------------------
    def upload(self, name: str, data: bytes) -> FileRef:
        key = f"F{len(self.files) + 1}"
        self.files[key] = data
        return FileRef(name, len(data), {"id": key})

    def message(self, text: str = "", *, user: str = "U1", conversation: str = "C1",
                files: tuple[FileRef, ...] = (), thread: str | None = None, **extra) -> Incoming:
        return Incoming(self.name, user, conversation, text, message=f"M{next(MESSAGE_IDS)}",
                        thread=thread, files=files, **extra)

    # --- the interface ---------------------------------------------------------------
    async def _fault(self) -> None:
        self.calls += 1
        if self.faults:
            fault = self.faults.pop(0)
            if isinstance(fault, float):
                await asyncio.sleep(fault)
            else:
                raise fault

    async def send(self, out: Outgoing) -> str:
        await self._fault()
        post = Post(f"P{next(self._ids)}", out.conversation, out.thread, out.text,
                    out.file.name if out.file else None,
                    out.file.read_bytes() if out.file else None, out.image, out.mention,
                    out.buttons)
        self.posts.append(post)
        return post.id

    async def edit(self, message_id: str, out: Outgoing) -> None:
        await self._fault()
        post = next(p for p in self.posts if p.id == message_id)
        post.edits.append(out.text)
        post.buttons = out.buttons

    async def download(self, handle: dict) -> bytes:
        if handle.get("id") not in self.files:
            raise DownloadError("download_failed", reason="the platform no longer has it")
        return self.files[handle["id"]]

    # --- reading what was posted ------------------------------------------------------
    def texts(self, conversation: str | None = None) -> list[str]:
        return [p.shown for p in self.posts if conversation in (None, p.conversation)]

    def in_thread(self, thread: str) -> list[Post]:
        return [p for p in self.posts if p.thread == thread]


class SteeredPlatform(MemoryPlatform):
    """A test platform whose health the test sets: how messages arrive, the connection it
    keeps (`connection`: whether it is up; None: it keeps none), and — through
    `mark_signed_in`, as an adapter's sign-in does — whether its credentials worked."""

    def __init__(self, name: str, inbound: str = "events", connection: bool | None = None,
                 **kw):
        super().__init__(name, **kw)
        self.mode, self.connection = inbound, connection

    @property
    def inbound(self) -> str:
        return self.mode

    def connected(self) -> bool | None:
        return self.connection


def rate_limited(seconds: float = 0.0) -> DeliveryError:
    return DeliveryError("429 rate limited", retry_after=seconds)


def server_error() -> DeliveryError:
    return DeliveryError("500 internal error")


def permanent(reason: str = "channel_not_found") -> DeliveryError:
    return DeliveryError(reason, permanent=True)


def example(name: str) -> bytes:
    return (Path(__file__).resolve().parents[2] / "examples" / name).read_bytes()


class World:
    """A chat core over test platforms on one data folder, with an in-process executor."""

    def __init__(self, config, platforms: list[MemoryPlatform] | None = None, *, clock=None,
                 local_admins: tuple[str, ...] = ()):
        import time
        self.config = config
        self.platforms = platforms or [MemoryPlatform()]
        self.platform = self.platforms[0]
        self.clock = clock or time.time
        self.local_admins = local_admins
        self.task = None

    async def __aenter__(self) -> World:
        from bot.app.application import App
        from bot.chat.hub import ChatCore
        from storage.files import open_store
        from storage.queue import open_queue
        from templates.loader import load_templates
        migrated_sqlite(self.config.database_url)  # a first open, without its migrations' CPU
        self.queue = await open_queue(self.config, clock=self.clock)
        templates, _ = load_templates(templates_dir(self.config))
        self.app = App(self.config, self.queue, open_store(self.config), templates,
                       clock=self.clock, local_admins=self.local_admins)
        self.core = ChatCore(self.app, self.platforms)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop_executor()
        await self.queue.close()

    async def send(self, text: str = "", *, platform: MemoryPlatform | None = None,
                   **fields) -> list[Post]:
        """A person writes; returns what the bot posted in answer (after one pump)."""
        p = platform or self.platform
        before = len(p.posts)
        await self.core.chat.receive(p.message(text, **fields))
        await self.core.pump()
        return p.posts[before:]

    def start_executor(self) -> None:
        from executor.worker import executor_loop
        self.worker = executor_loop(self.config, self.queue, owner="test-executor")
        self.task = asyncio.create_task(self.worker.run())

    async def stop_executor(self) -> None:
        if self.task:
            self.worker.stopping.set()
            await self.task
            self.task = None

    async def finish(self, timeout: float = 60) -> None:
        """Until no job is queued or running and everything owed has been posted; past
        `timeout`, fails saying which of those is still owed (and, if even that cannot be
        read within 20 s, what every task of the service was waiting on)."""
        try:
            await self._finish(timeout)
        except TimeoutError:
            owed = await bounded(self.unfinished(), 20, "reading what is unfinished")
            raise AssertionError(f"not finished after {timeout:g} s: {owed}") from None

    async def unfinished(self) -> str:
        """What `finish` still waits for: jobs not ended, messages owed, events unseen."""
        jobs = [f"job {j.id}: {j.status} lease={j.lease_owner} attempts={j.attempts}"
                for status in ("queued", "running")
                for j in await self.queue.page_jobs(status=status, limit=20)]
        due = {p.name: await self.core.outbox.next_due(p.name) for p in self.platforms}
        seen = await self.core.outbox.cursor(self.core.notifier.cursor)
        return (f"{'; '.join(jobs) or 'no job active'}; next message due by platform: {due}; "
                f"events seen {seen} of {await self.queue.last_event_seq()}")

    async def _finish(self, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while True:
                if self.task and self.task.done():
                    self.task.result()
                await self.core.pump()
                active = await self.queue.active_counts()
                pending = [await self.core.outbox.next_due(p.name) for p in self.platforms]
                caught_up = await self.core.outbox.cursor(self.core.notifier.cursor) >= \
                    await self.queue.last_event_seq()
                if not active.total and caught_up and \
                        all(t is None for t in pending):
                    return
                await asyncio.sleep(0.05)


class ServiceWorld(World):
    """The real service (HTTP app, chat core, the platforms given, else those the config
    turns on) with an in-process executor started on demand."""

    def __init__(self, config, platforms: list[MemoryPlatform] | None = None, **kw):
        super().__init__(config, platforms, **kw)
        self.given = platforms

    async def __aenter__(self) -> ServiceWorld:
        from bot.service import Service
        migrated_sqlite(self.config.database_url)
        self.service = Service(self.config, executor=False, platforms=self.given)
        await self.service.start()
        self.queue, self.core, self.app = self.service.queue, self.service.core, self.service.app
        self.platforms = list(self.service.platforms)
        self.url = f"http://127.0.0.1:{self.service.port}"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop_executor()
        await self.service.stop()

    async def until(self, check, timeout: float = 30.0):
        """Until check() (plain or async) returns something truthy; returns it."""
        async with asyncio.timeout(timeout):
            while not (found := await _value(check())):
                await asyncio.sleep(0.02)
        return found


async def _value(x):
    return await x if inspect.isawaitable(x) else x


def tasks_waiting() -> str:
    """Every asyncio task of this loop and where it waits: what a hang report needs."""
    import io
    out = io.StringIO()
    for task in asyncio.all_tasks():
        out.write(f"--- {task.get_name()}\n")
        task.print_stack(limit=8, file=out)
    return out.getvalue()


def awaiting(coro) -> str:
    """Where a coroutine waits, down its chain of awaits (a task's own stack stops at its
    first frame)."""
    lines = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} in "
                         f"{frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return "\n".join(lines)


async def bounded(work, seconds: float, what: str):
    """`work` within `seconds`, or an AssertionError naming `what`, where it waits and
    every task's stack (a stage of a test that hangs says where, before pytest's own
    limit kills it blind)."""
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        where = awaiting(task.get_coro())
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise AssertionError(f"{what}: not done after {seconds:g} s; waiting at:\n{where}\n"
                             f"tasks:\n{tasks_waiting()[-8000:]}")
    return task.result()
