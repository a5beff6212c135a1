"""The images a sheet's cells name: found, checked, normalised and stored before anything queues.

A cell may name a file sent with the sheet, a file under the assets folder, a picture
the template's own examples name (bot.intake.examples: on genbot's own example sheets
only, bot.intake.example_mark), or an http(s) link on the
allow-list — nothing else: no file://, no absolute paths, no "..", and no downloads from
private or loopback addresses unless configured. Every image is size-checked before it
is decoded (decompression bombs), turned upright (EXIF), put on white where it is
transparent, converted to RGB and stored once under its content hash; a transparent
picture's alpha is stored beside it as a mask (a template's `keep` puts the product back
by it).
"""

from __future__ import annotations

import asyncio
import io
import ipaddress
import re
from collections.abc import Awaitable, Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver

from bot.intake import workers
from bot.messages import Phrase
from bot.outbound import PrivateAddress, is_public, refusal, session
from bot.settings import IntakeConfig
from storage.files import FileStore
from templates.params import Problem

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

# name -> bytes, or None when there is no such file. Fronts supply one for "files sent
# with the sheet": the chat inbox, or the sheet's own folder for the CLI.
Attachments = Callable[[str], Awaitable[bytes | None]]
MAX_REDIRECTS = 3
ORIENTATION = 0x0112  # the EXIF tag that says which way up a photo was taken


NAME_MAX = 255  # bytes in one part of a path, on every common file system


def relative_name(ref: str) -> str | None:
    """A safe relative file name, or None (absolute, drive letter, "..", empty, or a part
    longer than a file name can be, control characters: any cell text is a valid input,
    and only a name is looked up)."""
    name = ref.replace("\\", "/").strip()
    if not name or name.startswith("/") or re.match(r"^[A-Za-z]:", name) \
            or not name.isprintable():
        return None
    parts = PurePosixPath(name).parts
    if any(part in ("..", "") or len(part.encode("utf-8", "surrogatepass")) > NAME_MAX
           for part in parts):
        return None
    return "/".join(parts)


def folder_attachments(folder: Path) -> Attachments:
    """Files under `folder`, by relative name; nothing outside it. (`get.folder` names
    it, for a message that says where a missing picture was looked for.)"""
    root = Path(folder).resolve()

    async def get(name: str) -> bytes | None:
        try:
            path = (root / name).resolve()
            if not path.is_relative_to(root) or not path.is_file():
                return None
            return await asyncio.to_thread(path.read_bytes)
        except (OSError, ValueError):  # a name the file system refuses: no such file
            return None
    get.folder = root  # type: ignore[attr-defined]
    return get


def recording(attachments: Attachments, into: dict[str, bytes]) -> Attachments:
    """`attachments` that also keep what they found in `into` (a schedule stores the
    pictures its sheet named)."""
    async def get(name: str) -> bytes | None:
        data = await attachments(name)
        if data is not None:
            into[name] = data
        return data
    return get


def _already_normal(image: PILImage) -> bool:
    """A still RGB PNG, opaque and upright: what normalising would make of it anyway."""
    return image.format == "PNG" and image.mode == "RGB" and "transparency" not in image.info \
        and not getattr(image, "is_animated", False) and image.getexif().get(ORIENTATION, 1) == 1


class ImageResolver:
    """`dns` answers downloads' host lookups (default: aiohttp's DefaultResolver, one per
    download); tests pass their own. `connect_timeout` bounds each TCP connect, in seconds."""

    def __init__(self, settings: IntakeConfig, store: FileStore, *, assets_dir: Path,
                 attachments: Attachments | None = None, examples: Attachments | None = None,
                 dns: AbstractResolver | None = None, connect_timeout: float = 10.0):
        self.settings = settings
        self.store = store
        self.assets = folder_attachments(assets_dir)
        self.attachments = attachments
        self.examples = examples
        self.used_examples: list[str] = []  # names answered by `examples`
        self.dns = dns
        self.connect_timeout = connect_timeout
        self._done: dict[str, str | Problem] = {}

    async def resolve(self, ref: str) -> str:
        """The stored image's path (relative to the file store) for a cell's reference."""
        if ref not in self._done:
            try:
                self._done[ref] = await self._resolve(ref)
            except Problem as p:
                self._done[ref] = p
        result = self._done[ref]
        if isinstance(result, Problem):
            raise result
        return result

    async def _resolve(self, ref: str) -> str:
        data: bytes | None
        if "://" in ref:
            data = await self._download(ref)
        else:
            name = relative_name(ref)
            if name is None:
                raise Problem("image_bad_reference", ref=ref)
            data = None
            if self.attachments is not None:
                data = await self.attachments(name)
            if data is None:
                data = await self.assets(name)
            if data is None and self.examples is not None:
                data = await self.examples(name)
                if data is not None:
                    self.used_examples.append(ref)
            if data is None:
                folder = getattr(self.attachments, "folder", None)
                assets = str(getattr(self.assets, "folder", ""))
                if folder is not None:  # files beside the sheet (genbot run, validate)
                    raise Problem("image_not_found_here", ref=ref, folder=str(folder),
                                  assets=assets)
                raise Problem("image_not_found", ref=ref, assets=assets)
        self._check_size(ref, len(data))
        png, mask = await workers.run(self.settings, self._normalise, ref, data)
        stored = await workers.run(self.settings, self.store.put_input, png)
        if mask is not None and not self.store.path(self.store.mask_of(stored)).exists():
            await workers.run(self.settings, self.store.write, self.store.mask_of(stored), mask)
        return stored

    def _check_size(self, ref: str, size: int) -> None:
        limit = self.settings.max_image_mb * 2**20
        if size > limit:
            raise Problem("image_too_big", ref=ref, size_mb=size / 2**20,
                          max_mb=self.settings.max_image_mb)

    def _normalise(self, ref: str, data: bytes) -> tuple[bytes, bytes | None]:
        """The picture as an opaque, upright RGB PNG, and its transparency as a mask PNG
        (white where opaque) where it had any."""
        from PIL import Image, ImageOps, UnidentifiedImageError
        mask = None
        try:
            image: Image.Image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > self.settings.max_image_pixels:
                raise Problem("image_too_many_pixels", ref=ref, width=width, height=height,
                              max=self.settings.max_image_pixels)
            if self.store.has_input(data):  # these very bytes: checked and normal already
                return data, None
            if _already_normal(image):  # kept as sent: normalising would not change it
                image.load()  # every pixel decoded: a damaged file is refused here
                return data, None
            image = ImageOps.exif_transpose(image)
            if image.mode in ("RGBA", "LA", "PA") \
                    or (image.mode == "P" and "transparency" in image.info):
                rgba = image.convert("RGBA")
                image = Image.new("RGB", rgba.size, "white")
                image.paste(rgba, mask=rgba.getchannel("A"))
                alpha = io.BytesIO()
                rgba.getchannel("A").save(alpha, format="PNG", compress_level=1)
                mask = alpha.getvalue()
            else:
                image = image.convert("RGB")
        except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
            raise Problem("not_an_image", ref=ref) from None
        out = io.BytesIO()
        image.save(out, format="PNG", compress_level=1)  # fast: a working copy, not an archive
        return out.getvalue(), mask

    def _check_host(self, host: str) -> None:
        """The allow-list, and an IP literal's address (aiohttp connects to a literal without
        asking the resolver, so CheckedResolver never sees it). Names are checked by
        CheckedResolver on the very lookup the connection uses."""
        allowed = {h.lower() for h in self.settings.url_allowlist}
        if host.lower() not in allowed:
            raise Problem("image_url_not_allowed", host=host)
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return  # a name
        if not self.settings.allow_private_urls and not is_public(host):
            raise Problem("image_private_address", host=host)

    async def _download(self, url: str) -> bytes:
        limit = int(self.settings.max_image_mb * 2**20)
        timeout = aiohttp.ClientTimeout(total=60, sock_connect=self.connect_timeout)
        async with session(allow_private=self.settings.allow_private_urls, dns=self.dns,
                           timeout=timeout) as client:
            return await self._fetch(client, url, limit)

    async def _fetch(self, session: aiohttp.ClientSession, url: str, limit: int) -> bytes:
        for _ in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise Problem("image_bad_reference", ref=url)
            self._check_host(parts.hostname)
            try:
                async with session.get(url, allow_redirects=False) as response:
                    if response.status in (301, 302, 303, 307, 308):
                        url = urljoin(url, response.headers.get("Location", ""))
                        continue  # the next hop is checked like the first
                    if response.status != 200:
                        raise Problem("image_download_failed", ref=url,
                                      reason=f"HTTP {response.status}")
                    if (response.content_length or 0) > limit:
                        self._check_size(url, response.content_length or 0)
                    data = bytearray()
                    async for chunk in response.content.iter_chunked(65536):
                        data += chunk
                        self._check_size(url, len(data))
                    return bytes(data)
            except (TimeoutError, aiohttp.ClientError, PrivateAddress) as e:
                refused = refusal(e)
                if refused is not None:
                    raise Problem("image_private_address", host=refused.host) from None
                raise Problem("image_download_failed", ref=url,
                              reason=Phrase("download_network",
                                            source=str(e) or type(e).__name__)) from None
        raise Problem("image_download_failed", ref=url,
                      reason=Phrase("download_redirects"))
