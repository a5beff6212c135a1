"""The terminal as a chat platform (`genbot chat`, bot.cli.chat): posts are printed,
and a file is attached by giving its path, e.g. `/gen social_thumb
examples/social_thumb.xlsx` (the path becomes an upload named social_thumb.xlsx, and
image cells may name the files beside it).

A terminal obeys control characters: an escape sequence in a cell or an executor's error
could recolour the screen, retitle the window or print a link (OSC 8) in genbot's voice.
So every line is printed with them shown as escapes (storage.names.shown), the
terminal's rule under bot.chat.markup."""

from __future__ import annotations

import asyncio
import shlex
import sys
from functools import partial
from pathlib import Path
from typing import TextIO

from bot.chat.markup import Markup
from bot.chat.platform import DownloadError, FileRef, Outgoing, Platform
from storage.names import shown

NAME = "terminal"
CONVERSATION = "terminal"
SCREEN = Markup(escape=partial(shown, limit=sys.maxsize))  # whole lines, controls shown


class Terminal(Platform):
    """Posts are printed; a progress message is printed again when it changes."""

    name = NAME
    can_edit = True

    def __init__(self, out: TextIO | None = None):
        self.out = out or sys.stdout
        self.count = 0

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    async def send(self, out: Outgoing) -> str:
        self.count += 1
        if out.file is not None:
            label = "image" if out.image else "file"
            text = SCREEN.render(out.text)
            self._print(f"{label}: {SCREEN.escape(str(out.file))}" + (f"  {text}" if text else ""))
        else:
            self._print(SCREEN.render(out.text))
        return str(self.count)

    async def edit(self, message_id: str, out: Outgoing) -> None:
        self._print(SCREEN.render(out.text))

    async def download(self, handle: dict) -> bytes:
        try:
            return await asyncio.to_thread(Path(handle["path"]).read_bytes)
        except OSError as e:
            raise DownloadError("download_failed", reason=e.strerror or str(e)) from None


def attach(text: str) -> tuple[str, tuple[FileRef, ...]]:
    """Arguments that are paths of files become uploads named by their file name."""
    try:
        tokens = shlex.split(text)
    except ValueError:
        return text, ()  # the grammar explains the quote
    files = []
    for i, token in enumerate(tokens[1:], start=1):
        path = Path(token).expanduser()
        try:
            is_file = not token.startswith("-") and path.is_file()
        except (OSError, ValueError):  # longer than a name can be, or a NUL: not a path
            is_file = False
        if is_file:
            path = path.resolve()
            files.append(FileRef(path.name, path.stat().st_size,
                                 {"path": str(path), "folder": str(path.parent)}))
            tokens[i] = path.name
    return (shlex.join(tokens) if files else text), tuple(files)
