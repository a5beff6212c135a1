"""The sheet a chat command names, and the pictures its rows name, from the inbox.

Slack slash commands carry no files and DingTalk bots get files only in 1:1 chats, so a
command names a file sent earlier (storage.inbox says which one fits); this module
downloads it through the platform, and offers the files sent with it to intake as its
attachments.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from bot.chat.platform import DownloadError
from bot.chat.turn import Turn
from bot.intake.check import SheetFile
from bot.intake.images import Attachments, folder_attachments
from bot.messages import say
from storage.inbox import name_key
from storage.records import Upload


async def sheet_for(turn: Turn, template: str, file: str | None) -> tuple[Upload, SheetFile] | None:
    """The sheet a command names (or the person's latest) and its bytes; or None, with
    the reason replied (nothing fits, several do, the download failed)."""
    msg = turn.msg
    lookup = await turn.inbox.find_sheet(platform=msg.platform, user=msg.user,
                                         conversation=msg.conversation, name=file,
                                         message=msg.message)
    upload = lookup.found
    if upload is None:
        if lookup.ambiguous:
            turn.say("file_ambiguous", names=", ".join(
                u.name for u in sorted(lookup.candidates, key=lambda u: u.id)),
                template=template)
            return None
        if file:
            turn.say("file_not_found", file=file[:120])
        else:
            turn.say("no_sheet", template=template)
        if lookup.candidates:
            now = turn.app.clock()
            turn.add("recent_files", files=", ".join(
                say("file_age", turn.lang, name=u.name,
                    minutes=max(0, round((now - u.received_at) / 60)))
                for u in lookup.candidates))
        platform = turn.platforms.get(msg.platform)
        if platform is not None and platform.file_hint:
            turn.add(platform.file_hint)
        return None
    try:
        data = await turn.platforms[upload.platform].download(upload.handle)
    except DownloadError as e:
        turn.say(e.code, **{"file": upload.name, **e.details})
        return None
    return upload, SheetFile(upload.name, data)


async def picture_for(turn: Turn, name: str | None, command: str) -> bytes | None:
    """A picture a command names (a repaint's mask.png: sent with it or lately), else the
    one picture sent with it; None, with the reason replied. (Never "the latest picture"
    unnamed: that may well be the product photo a sheet named.)"""
    msg = turn.msg
    found: Upload | None = None
    if name is not None:
        found = (await turn.inbox.find_sheet(platform=msg.platform, user=msg.user,
                                             conversation=msg.conversation, name=name,
                                             message=msg.message)).found
    elif msg.message is not None:
        sent = await turn.inbox.message_files(platform=msg.platform, message=msg.message)
        pictures = [u for u in sent if is_picture(u.name)]
        found = pictures[0] if len(pictures) == 1 else None
    if found is None:
        turn.say("picture_not_found" if name else "picture_none", file=(name or "")[:120],
                 command=command)
        platform = turn.platforms.get(msg.platform)
        if platform is not None and platform.file_hint:
            turn.add(platform.file_hint)
        return None
    try:
        return await turn.platforms[found.platform].download(found.handle)
    except DownloadError as e:
        turn.say(e.code, **{"file": found.name, **e.details})
        return None


def is_picture(name: str) -> bool:
    return name_key(name).endswith((".png", ".jpg", ".jpeg", ".webp"))


def attachments(turn: Turn, upload: Upload) -> Attachments:
    """The files sent with a sheet, by name, for the image cells of its rows: those of
    its message, else the person's latest upload of that name (platforms that carry one
    file per message). A local upload (the terminal) also offers the files beside it,
    as `genbot run` does."""
    cache: dict[str, list[Upload]] = {}

    async def get(name: str) -> bytes | None:
        if "files" not in cache:
            cache["files"] = [] if upload.message is None else await turn.inbox.message_files(
                platform=upload.platform, message=upload.message)
        base = PurePosixPath(name).name
        found = next((f for key in (name_key(name), name_key(base))
                      for f in cache["files"] if name_key(f.name) == key), None)
        if found is None:  # sent on its own (DingTalk: one file per message)
            found = (await turn.inbox.find_sheet(
                platform=upload.platform, user=upload.user,
                conversation=upload.conversation, name=base)).found
        if found is not None and found.id != upload.id:
            try:
                return await turn.platforms[upload.platform].download(found.handle)
            except DownloadError:
                return None
        folder = upload.handle.get("folder")
        if folder:
            return await folder_attachments(Path(folder))(name)
        return None
    return get


def quoted(name: str) -> str:
    """A file name as it would be typed in a command."""
    return f'"{name}"' if re.search(r"\s", name) else name
