"""The sales channels and a batch's files for them: GET /channels, a batch's renditions
with what their checks found, each file, and the zip a channel's uploader takes."""

from __future__ import annotations

import asyncio
from pathlib import PurePosixPath
from typing import Annotated, Any

from aiohttp import web
from msgspec import Meta, Struct

from bot.app.application import App
from bot.app.deliveries import delivery, zip_entries
from bot.app.filled import write_filled
from bot.app.permissions import Action
from bot.app.results import XLSX, write_zip
from bot.messages import say
from bot.web.batches import BATCH_ID
from bot.web.callers import Callers
from bot.web.http import (
    PREFIX,
    SERVED_FILE,
    ApiError,
    attachment,
    in_path,
    reader_lang,
    respond,
    stored_file,
)
from bot.web.routes import Answer, Param, Route, Whole
from storage.renditions import Renditions
from storage.states import Status
from templates import layouts
from templates.channels import catalogue
from templates.settings import DeliverConfig, assets_folder

# A file's state (bot.app.deliveries.delivery): it ships, or why it is held — its job not
# (yet) succeeded is "job_<its state>" (storage.states), or "job_gone".
STATES = ("ships", "needs_review", "not_approved",
          *(f"job_{s}" for s in Status if s != Status.SUCCEEDED), "job_gone")
LANG = Param("lang", "query", str, "a language offered (en, zh …); default: Accept-Language's")


class ChannelRendition(Struct):
    name: str
    width: int
    height: int
    fit: str
    background: str
    format: str
    max_kb: int
    text: bool  # words allowed in the picture (the label its channel requires aside)
    fill: float
    file: str  # the file-name pattern


class Channel(Struct):
    name: str
    title: str  # in the reader's language
    label: Annotated[str, Meta(description="the visible AI label: required, or optional "
                                           "(an admin may leave it off: unlabelled)")]
    unlabelled: bool
    renditions: list[ChannelRendition]


class LayoutInfo(Struct):
    name: str
    title: str  # in the reader's language
    aspects: list[str]  # "1:1", "9:16" …: a rendition takes the nearest
    locales: list[str]  # a row's `locale` cell picks one; the first is the default
    columns: list[str]  # the sheet columns its words, prices and logos read
    error: str | None = None  # why it cannot be used now (a broken file), else None


class ChannelList(Struct):
    channels: list[Channel]
    layouts: list[LayoutInfo]


class Finding(Struct):
    check: str
    message: str  # in the reader's language


class RenditionFile(Struct):
    id: int
    job: int
    channel: str
    rendition: str
    name: str  # the file's name for the channel's uploader
    url: str
    width: int
    height: int
    bytes: int
    sha256: str
    state: Annotated[str, Meta(extra_json_schema={"enum": list(STATES)})]
    findings: list[Finding]
    labels: dict[str, Any]


class RenditionList(Struct):
    renditions: list[RenditionFile]
    reviewed: bool  # the batch is under review: only approved images' files ship


class DeliveryRoutes:
    def __init__(self, app: App, callers: Callers):
        self.app, self.callers, self.queue = app, callers, app.queue
        self.renditions = Renditions(app.queue.db)

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/channels", self.channels,
                  "Sales channels: the files each takes (size, fit, background, format, "
                  "largest file, words allowed, file-name pattern) and its AI label rule; and "
                  "the layouts their files may carry",
                  {200: Answer("OK", ChannelList)}, params=(LANG,)),
            Route("GET", "/batches/{id}/renditions", self.listing,
                  "A batch's files for its sales channels: each one's name, checks, labels "
                  "and whether it ships", {200: Answer("OK", RenditionList)}, errors=(404,),
                  params=(BATCH_ID, LANG)),
            Route("GET", "/renditions/{id}", self.file, "One channel's file, as it ships",
                  {200: Answer("the file", files=("image/jpeg", "image/png", "image/webp"))},
                  errors=(404,), params=(Param("id", "path", Whole, "the rendition"),)),
            Route("GET", "/batches/{id}/sheet", self.sheet,
                  "The sheet as it was sent (.xlsx, .csv), the results appended to the right "
                  "of its header on its own rows: status, images, review, each channel's "
                  "files", {200: Answer("the file", files=(XLSX, "text/csv"))},
                  errors=(404,),
                  params=(BATCH_ID,)),
            Route("GET", "/batches/{id}/deliverables.zip", self.zip,
                  "The files that ship, one folder per channel, named for its uploader; "
                  "?channel=taobao: that channel's only",
                  {200: Answer("the zip", files=("application/zip",))}, errors=(400, 404),
                  params=(BATCH_ID, Param("channel", "query", str, "one channel")))]

    async def channels(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.STATUS)
        lang = reader_lang(request)
        settings = self.app.config[DeliverConfig]
        return respond(ChannelList([
            Channel(c.name, c.title_zh if lang.startswith("zh") else c.title, c.label,
                    c.name in settings.unlabelled,
                    [ChannelRendition(r.name, *r.size, r.fit, r.background, r.format, r.max_kb,
                                      r.text, r.fill, r.file) for r in c.renditions])
            for c in catalogue(settings.channels).values()], self._layouts(lang)))

    def _layouts(self, lang: str) -> list[LayoutInfo]:
        folder = assets_folder(self.app.config)
        out = []
        for name in layouts.catalogue(folder):
            try:
                found = layouts.chosen(name, folder)
            except layouts.LayoutError as e:
                out.append(LayoutInfo(name, name, [], [], [], str(e)))
                continue
            out.append(LayoutInfo(name, found.title_zh if lang.startswith("zh") else found.title,
                                  list(found.aspects), list(found.locales),
                                  layouts.layout_columns(found)))
        return out

    async def listing(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.STATUS)
        lang = reader_lang(request)
        batch = await self.app.batch(in_path(request, "id"))
        found = delivery(batch, await self.queue.batch_jobs(batch.id),
                         await self.renditions.of_batch(batch.id))
        state = {r.id: "ships" for r in found.ships} | {r.id: why for r, why in found.held}
        return respond(RenditionList([
            RenditionFile(r.id, r.job_id, r.channel, r.rendition, r.name,
                          f"{PREFIX}/renditions/{r.id}", r.width, r.height, r.bytes, r.sha256,
                          state[r.id], [Finding(f["check"], say(
                              f"check_{f['check']}", lang,
                              **{k: v for k, v in f.items() if k != "check"}))
                              for f in r.findings], r.labels)
            for r in [*found.ships, *(r for r, _ in found.held)]], found.reviewed))

    async def file(self, request: web.Request) -> web.StreamResponse:
        await self.callers.allowed(request, Action.STATUS)
        r = await self.renditions.get(in_path(request, "id"))
        if r is None:
            raise ApiError(404, "no_rendition", f"no rendition {in_path(request, 'id')}")
        return await stored_file(self.app.store, r.path, r.name)

    async def sheet(self, request: web.Request) -> web.StreamResponse:
        await self.callers.allowed(request, Action.STATUS)
        batch = await self.app.batch(in_path(request, "id"))
        path = await asyncio.to_thread(
            write_filled, self.app.store, batch, await self.queue.batch_jobs(batch.id),
            await self.renditions.of_batch(batch.id))
        if path is None:
            raise ApiError(404, "no_sheet", f"batch {batch.id} kept no .xlsx or .csv sheet to "
                           "fill (rows sent as JSON, or another kind of file): its results "
                           "sheet has the same")
        name = PurePosixPath(path).name
        return web.FileResponse(self.app.store.local(path), headers={
            **SERVED_FILE, "Content-Type": "text/csv" if name.endswith(".csv")
            else XLSX, "Content-Disposition": attachment(f"batch-{batch.id}-{name}")})

    async def zip(self, request: web.Request) -> web.StreamResponse:
        await self.callers.allowed(request, Action.STATUS)
        batch = await self.app.batch(in_path(request, "id"))
        channel = request.query.get("channel") or None
        made = await self.renditions.of_batch(batch.id)
        if channel is not None and channel not in {r.channel for r in made}:
            have = ", ".join(sorted({r.channel for r in made})) or "none"
            raise ApiError(400, "bad_query", f"batch {batch.id} has no files for channel "
                           f"{channel!r} (it has: {have})")
        found = delivery(batch, await self.queue.batch_jobs(batch.id), made, channel)
        if not found.ships:
            raise ApiError(404, "nothing_ships", f"batch {batch.id} has no file that ships"
                           + (f" for {channel}" if channel else "")
                           + (f" ({len(found.held)} held: see /batches/{batch.id}/renditions)"
                              if found.held else ""))
        name = f"deliverables-{channel}.zip" if channel else "deliverables.zip"
        path = await asyncio.to_thread(write_zip, self.app.store, batch,
                                       zip_entries(found.ships), name)
        return web.FileResponse(path, headers={
            **SERVED_FILE, "Content-Type": "application/zip",
            "Content-Disposition": attachment(f"batch-{batch.id}-{name}")})
