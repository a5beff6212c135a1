"""Pictures of running jobs on their way from the executors to the service: a glimpse of
an image forming, sent and forgotten — never written to the database, never replayed.

Executors on many hosts and the service share only the database, so the picture rides
on it without being stored: on PostgreSQL as a NOTIFY on `genbot_preview_<schema>`
(PostgreSQL refuses a payload of 8000 bytes or more, so a picture is made to fit
`MAX_PICTURE`); on SQLite (one host) as a datagram to every listening service's socket
(storage.wakeup carries both). A picture lost on the way costs nothing: the next one,
or the finished image, follows.

The wire format is one JSON object (`Glimpse`), the picture a WebP small enough for the
budget (`picture_of`), so the dashboard shows it as it comes. Pictures are made only while
someone watches: a service with a dashboard asking for previews says so every
WATCH_EVERY seconds the other way (a second line, the same kinds of wire), and executors
make them for WATCHED_FOR seconds after they last heard it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from storage.wakeup import PostgresWaker, SocketWaker, Waker, waker_for

if TYPE_CHECKING:
    from PIL import Image

    from storage.db import Database

log = logging.getLogger(__name__)

SIDE = 256  # px: the longest side of a preview (a card's thumbnail is 256 px)
MAX_PICTURE = 5_600  # bytes of WebP: base64 and the JSON around it stay under NOTIFY's 8000
QUALITY = 60  # WebP quality of a preview: forming images need no more
KEEPALIVE = 30.0  # s: how often an idle listener makes sure it is still listening
WATCH_EVERY = 5.0  # s: how often a service with someone watching previews says so
WATCHED_FOR = 3 * WATCH_EVERY  # s: an executor makes previews this long after it last heard
WATCHING = b"watching"


class Glimpse(msgspec.Struct, frozen=True):
    """One preview: a job's picture at a step."""
    job_id: int
    batch_id: int
    step: int
    total: int
    at: float
    picture: str  # WebP, base64


def picture_of(image: Image.Image) -> bytes:
    """The image as a preview: at most SIDE px, WebP, and under MAX_PICTURE bytes (smaller
    and smaller until it is: a detailed picture at 256 px may not fit at first)."""
    from PIL import Image
    small = image.convert("RGB")
    side = SIDE
    while True:
        small.thumbnail((side, side), Image.Resampling.BILINEAR)
        out = io.BytesIO()
        small.save(out, "WEBP", quality=QUALITY, method=0)
        if out.tell() <= MAX_PICTURE or side <= 32:
            return out.getvalue()
        side = side * 3 // 4


def encoded(glimpse: Glimpse) -> bytes:
    return msgspec.json.encode(glimpse)


def decoded(data: bytes) -> Glimpse | None:
    """A glimpse, or None for anything else on the wire (an old sender, a stray datagram)."""
    try:
        return msgspec.json.decode(data, type=Glimpse)
    except msgspec.DecodeError:
        return None


class _Line:
    """One direction of messages over the database without storing them: a NOTIFY
    channel (PostgreSQL) or a folder of datagram sockets (SQLite); listening kept alive
    across a dropped LISTEN connection."""

    def __init__(self, db: Database, topic: str) -> None:
        self.db, self.topic = db, topic
        self._listeners: list[Callable[[bytes], None]] = []
        self._wire: Waker | None = None
        self._keeper: asyncio.Task | None = None

    def _make_wire(self, listening: bool) -> Waker:
        return waker_for(self.db, self.topic, prefix=f"genbot_{self.topic}",
                         on_message=self._heard if listening else None)

    async def send(self, payload: bytes) -> None:
        if self._wire is None:
            self._wire = self._make_wire(listening=False)
        if isinstance(self._wire, SocketWaker):
            await self._wire.notify(payload)
        else:
            assert isinstance(self._wire, PostgresWaker)
            await self._wire.notify(payload.decode())

    async def listen(self, on_message: Callable[[bytes], None]) -> None:
        self._listeners.append(on_message)
        if self._keeper is None:
            self._wire = self._make_wire(listening=True)
            await self._wire.listen()
            self._keeper = asyncio.create_task(self._keep())

    async def _keep(self) -> None:
        """Listening again after the database dropped the LISTEN connection (a wait makes
        it again), however long the process runs."""
        assert self._wire is not None
        while True:
            await self._wire.wait(KEEPALIVE)

    def _heard(self, data: bytes) -> None:
        for listener in list(self._listeners):
            listener(data)

    async def close(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
            self._keeper = None
        if self._wire is not None:
            await self._wire.close()
            self._wire = None


class Previews:
    """Previews on one database, both ways: executors send pictures to the services
    (`send`, `listen`); a service with someone watching says so to the executors
    (`watching`, `hear_watchers`), which make pictures only while it does — nobody
    watching, nothing is decoded."""

    def __init__(self, db: Database) -> None:
        self.pictures = _Line(db, "preview")
        self.watch = _Line(db, "preview_watch")

    async def send(self, job_id: int, batch_id: int, step: int, total: int, at: float,
                   picture: bytes) -> None:
        """To every listening service; never raises (a preview is not worth a failure)."""
        if len(picture) > MAX_PICTURE:
            raise ValueError(f"a preview is at most {MAX_PICTURE} bytes, not {len(picture)}")
        try:
            await self.pictures.send(encoded(Glimpse(job_id, batch_id, step, total, at,
                                                     base64.b64encode(picture).decode())))
        except Exception as e:  # noqa: BLE001 - the database away: this picture is lost
            log.debug("preview of job %s not sent: %s", job_id, e)

    async def listen(self, on_glimpse: Callable[[Glimpse], None]) -> None:
        """Call `on_glimpse` with every preview from now on (on this event loop)."""
        def heard(data: bytes) -> None:
            glimpse = decoded(data)
            if glimpse is not None:
                on_glimpse(glimpse)
        await self.pictures.listen(heard)

    async def watching(self) -> None:
        """Someone watches previews here (a service says so every WATCH_EVERY seconds
        while they do); never raises."""
        try:
            await self.watch.send(WATCHING)
        except Exception as e:  # noqa: BLE001 - the database away: said again soon
            log.debug("could not say previews are watched: %s", e)

    async def hear_watchers(self, on_watch: Callable[[], None]) -> None:
        """Call `on_watch` whenever a service says someone watches previews."""
        await self.watch.listen(lambda data: on_watch() if data == WATCHING else None)

    async def close(self) -> None:
        await self.pictures.close()
        await self.watch.close()
