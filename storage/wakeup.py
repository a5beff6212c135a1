"""Waking an idle executor the moment work arrives, and event readers the moment events
are written, instead of making them poll.

SQLite (one host): each waiting process binds a Unix datagram socket in a folder
derived from the database path; whoever enqueues sends one byte to every socket
there. PostgreSQL (many hosts): LISTEN/NOTIFY on a channel named after the schema.
Either way, polling remains as the fallback, so a lost signal costs at most
`poll_interval`, never a stuck job. The same carries "a running job was asked to
cancel" to busy executors (`Queue.cancel_bell`), so they need not ask after every step.

`EventBell`: on PostgreSQL a trigger NOTIFYs on every insert into `events` (migration
0009), so the service hears state changes and progress from workers on any host at
once; on SQLite readers poll.

A waker made with `on_message` carries a payload instead of a bare signal (a datagram's
bytes, a NOTIFY's text): storage.previews sends pictures of running jobs so.

A LISTEN connection that PostgreSQL drops (a restart, a failover) wakes its waiters at
once (a signal may have been lost with it: they look again) and is made again at the
next wait; while the server is away, waits are cut into short turns that try again, so
listening resumes within about LISTEN_RETRY_MAX seconds of its return. The outage is
told once per process (storage.db.Outage), not once per waiter or per try.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from storage import queries as q
from storage.db import CONNECT_TIMEOUT, connection_lost, outage_of
from storage.logs import Retrying

if TYPE_CHECKING:
    import asyncpg

    from storage.db import Database

log = logging.getLogger(__name__)

LISTEN_RETRY_FIRST, LISTEN_RETRY_MAX = 0.1, 1.0  # seconds between tries to LISTEN again
CLOSE_TIMEOUT = 5.0  # seconds a LISTEN connection's graceful close may take
MAX_DATAGRAM = 65_536  # the most one SocketWaker message carries


class Waker:
    """Signals and awaits "there may be new work". Not started until `listen()`."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._listening = False

    async def listen(self) -> None:
        self._listening = True

    async def notify(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> bool:
        """True if woken, False on timeout. A signal that came before the call counts."""
        if not self._listening:
            # Start listening, then report "maybe work": the caller looks again, so
            # nothing enqueued before the listener existed is missed.
            await self.listen()
            return True
        try:
            # (not asyncio.wait_for: on Python 3.11 it swallows a cancel that arrives as
            # the event is set, and a service stopping then waited forever on this loop)
            async with asyncio.timeout(timeout):
                await self._event.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self._event.clear()

    async def close(self) -> None:
        self._listening = False


class SocketWaker(Waker):
    """Unix datagram sockets in a per-database folder: wakes processes on this host."""

    def __init__(self, db_path: Path, topic: str = "wake", *,
                 on_message: Callable[[bytes], None] | None = None) -> None:
        super().__init__()
        self._on_message = on_message
        digest = hashlib.sha1(str(Path(db_path).resolve()).encode()).hexdigest()[:16]
        # Under the temp dir, not beside the database: socket paths must stay under 108 bytes.
        self.folder = Path(tempfile.gettempdir()) / f"genbot-{topic}-{digest}"
        self._sock: socket.socket | None = None
        self._path: Path | None = None

    async def listen(self) -> None:
        if self._sock is not None:
            return
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._path = self.folder / f"{uuid.uuid4().hex[:12]}.sock"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        sock.bind(str(self._path))
        self._sock = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._drain)
        await super().listen()

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while self._sock is not None:
                data = self._sock.recv(MAX_DATAGRAM)
                if self._on_message is not None:
                    self._on_message(data)
        self._event.set()

    async def notify(self, payload: bytes = b"!") -> None:
        self._event.set()
        try:
            entries = list(os.scandir(self.folder))
        except FileNotFoundError:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as out:
            out.setblocking(False)
            for entry in entries:
                if not entry.name.endswith(".sock"):
                    continue
                try:
                    out.sendto(payload, entry.path)
                except (ConnectionRefusedError, FileNotFoundError):
                    # A listener that died without cleaning up.
                    with contextlib.suppress(FileNotFoundError):
                        Path(entry.path).unlink()
                except (BlockingIOError, OSError):
                    pass  # its buffer is full: it has been woken already

    async def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
            assert self._path is not None  # listen() names the socket before binding it
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()
            with contextlib.suppress(OSError):  # the last one out: no empty folder left
                self.folder.rmdir()
        await super().close()


class PostgresWaker(Waker):
    """LISTEN/NOTIFY: wakes executors on every host sharing the database."""

    def __init__(self, url: str, run_notify: Callable[[str, str], Awaitable[Any]] | None, *,
                 prefix: str = "genbot_queue", on_notify: Callable[[], None] | None = None,
                 on_message: Callable[[bytes], None] | None = None) -> None:
        super().__init__()
        self._on_message = on_message
        parts = urlsplit(url.replace("postgresql://", "postgres://", 1))
        query = parse_qs(parts.query)
        schema = query.pop("schema", ["public"])[-1]
        self.channel = f"{prefix}_{schema}"[:63]
        self._on_signal = on_notify or self._event.set
        self._dsn = urlunsplit(parts._replace(scheme="postgresql",
                                              query=urlencode(query, doseq=True)))
        self._run_notify = run_notify
        self._conn: asyncpg.Connection | None = None
        self._outage = outage_of(url)
        self._failing = False  # the last try to LISTEN failed (told once until it works)
        self._retry = LISTEN_RETRY_FIRST

    @property
    def connected(self) -> bool:
        """LISTENing now (a connection that PostgreSQL has not dropped)."""
        return self._conn is not None and not self._conn.is_closed()

    @property
    def down(self) -> bool:
        """Started, but not LISTENing now: signals are not heard, only polling works."""
        return self._listening and not self.connected

    async def listen(self) -> None:
        import asyncpg
        if self.connected:
            return
        self._conn = None
        try:
            conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT)
            try:
                await conn.add_listener(self.channel, self._on_notify)
            except BaseException:
                with contextlib.suppress(Exception):
                    await conn.close()
                raise
            conn.add_termination_listener(self._dropped)
            self._conn = conn
        except Exception as e:  # noqa: BLE001 - never fatal: polling is the fallback
            self._cannot_listen(e)
        else:
            if self._failing:
                log.info("listening on %s again", self.channel)
            self._failing, self._retry = False, LISTEN_RETRY_FIRST
            self._outage.reached()
        await super().listen()

    def _cannot_listen(self, error: Exception) -> None:
        """Told once until LISTEN works again: a warning, unless it is the database being
        unreachable, which storage.db.Outage tells (once for the whole process)."""
        lost = connection_lost(error)
        if lost:
            self._outage.failed(error, self._dsn)
        if self._failing:
            log.debug("cannot LISTEN on %s yet: %s", self.channel, error)
            return
        self._failing = True
        log.log(logging.INFO if lost else logging.WARNING,
                "cannot LISTEN on %s (polling instead until it can): %s", self.channel,
                f"{type(error).__name__}: {error}")

    def _dropped(self, conn: Any) -> None:
        """PostgreSQL closed the LISTEN connection: waiters look again now (a signal may
        have gone with it), and the next wait makes it again."""
        if conn is not self._conn or not self._listening:
            return  # an old one, or closed by `close`
        log.debug("the LISTEN connection on %s was dropped", self.channel)
        self._on_signal()

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if self._on_message is not None:
            self._on_message(payload.encode())
        self._on_signal()

    async def notify(self, payload: str = "") -> None:
        self._event.set()
        if self._run_notify is None:  # a listener only (EventBell's): it signals nothing
            return
        try:
            await self._run_notify(self.channel, payload)
        except Exception as e:
            if not connection_lost(e):
                raise
            # A lost signal costs a poll interval, never a job: listeners poll meanwhile.
            log.debug("could not NOTIFY %s: %s", self.channel, e)

    async def relisten(self) -> bool:
        """Listen if not yet, or again if the listening connection was lost; True when it
        just started (a signal may have been missed meanwhile: look again)."""
        if self._listening and self.connected:
            return False
        first = not self._listening
        await self.listen()
        return first or self.connected

    async def wait(self, timeout: float) -> bool:
        if await self.relisten():
            return True
        if self.connected:
            return await super().wait(timeout)
        # Not listening (the database away): short turns, trying to LISTEN between them,
        # so a long wait (a busy executor's cancel bell) hears again soon after it is back.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0:
            if await super().wait(min(left, self._retry)):
                return True
            self._retry = min(self._retry * 2, LISTEN_RETRY_MAX)
            if await self.relisten():
                return True
        return False

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        await super().close()
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.remove_termination_listener(self._dropped)
            try:  # (a graceful close waits on the server: never for long at shutdown)
                await asyncio.wait_for(conn.close(), CLOSE_TIMEOUT)
            except Exception:  # noqa: BLE001 - TimeoutError, or a connection already gone
                conn.terminate()


def waker_for(db: Database, topic: str, *, prefix: str,
              on_message: Callable[[bytes], None] | None = None) -> Waker:
    """The database's kind of waker for `topic`: sockets in a folder (SQLite, one host),
    or a NOTIFY channel `<prefix>_<schema>` (PostgreSQL, many hosts)."""
    if db.dialect == "sqlite":
        assert db.path is not None  # a SQLite database is a file
        return SocketWaker(db.path, topic, on_message=on_message)
    return PostgresWaker(db.url, lambda channel, payload: db.execute(
        q.NOTIFY, {"channel": channel, "payload": payload}), prefix=prefix,
        on_message=on_message)


class EventBell:
    """"New rows in the event log", told to every reader in this process at once.

    A reader notes `rung` before it reads the log and passes it to `wait`: a ring that
    came in between returns at once, so none is missed. With no listener (SQLite) it
    only times out, and readers poll."""

    def __init__(self, url: str | None = None) -> None:
        """`url`: a PostgreSQL database to LISTEN on; None (SQLite): polling only."""
        self.rung = 0
        self._changed = asyncio.Event()
        self.listener = None if url is None else PostgresWaker(
            url, None, prefix="genbot_events", on_notify=self.ring)

    @property
    def live(self) -> bool:
        """Rings when events come (PostgreSQL, LISTENing or not started yet): readers may
        wait longer between reads. False while the LISTEN connection is down."""
        return self.listener is not None and not self.listener.down

    def ring(self) -> None:
        self.rung += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait(self, seen: int, timeout: float) -> bool:
        """Until the bell rings after `seen`, or `timeout`; True if it rang."""
        if self.listener is not None and await self.listener.relisten():
            return True
        if self.rung != seen:
            return True
        if self.listener is not None and self.listener.down:
            timeout = min(timeout, LISTEN_RETRY_MAX)  # try to LISTEN again soon
        changed = self._changed
        try:
            async with asyncio.timeout(timeout):  # (not wait_for: see Waker.wait)
                await changed.wait()
            return True
        except TimeoutError:
            return False

    async def follow(self, step: Callable[[], Awaitable[Any]], found: Callable[[], None],
                     poll: float, retrying: Retrying) -> None:
        """Forever, a reader of the event log: `step` reads once (true when it found
        something, and then `found` is called and it reads again at once); otherwise it
        waits for the bell, or `poll` seconds (ten times that while the database rings).
        A failing read is told once per run of failures and tried again."""
        while True:
            seen = self.rung
            try:
                if await step():
                    found()
                    retrying.worked()
                    continue
                retrying.worked()
            except Exception as e:  # noqa: BLE001 - the database away: the next round
                retrying.failed(e)
            await self.wait(seen, poll * (10 if self.live else 1))

    async def close(self) -> None:
        if self.listener is not None:
            await self.listener.close()
