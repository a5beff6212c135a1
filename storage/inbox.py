"""The attachment inbox: every file a person sends the bot, kept for a while.

Slack slash commands cannot carry files and DingTalk bots get files only in a 1:1
chat, so `/gen product_main sheet.xlsx` usually names a file sent earlier, maybe in
another conversation. `find_sheet` applies one rule for every platform:

  FILE given:   that name in the same message, else the person's latest upload of
                that name in this conversation, else in any conversation.
  FILE omitted: the one spreadsheet in the same message (several: ambiguous), else
                the person's latest spreadsheet in this conversation, else anywhere.

When nothing (or more than one thing) fits, the lookup carries what the person has
sent lately, for the reply to list. Names match after NFKC and case folding, so
"Sheet.XLSX" and "ｓｈｅｅｔ.xlsx" name the same file.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Callable
from typing import Any

from storage.db import Database
from storage.records import Lookup, Upload, encoded

SHEET_SUFFIXES = (".xlsx", ".xlsm", ".xls", ".ods", ".csv", ".tsv")
RECENT = 10  # uploads a "none or several" reply lists

_COLUMNS = ("id, platform, user_id, conversation, message_id, name, size, handle, "
            "received_at")

RECORD = f"""
INSERT INTO attachments (platform, user_id, conversation, message_id, name, name_key, size,
                         handle, received_at, expires_at)
VALUES (:platform, :user, :conversation, :message, :name, :name_key, :size, :handle, :now,
        :expires_at) RETURNING {_COLUMNS}"""

# A person's uploads not expired by :now; the statements below add to it (newest first).
_MINE = f"""
SELECT {_COLUMNS}, name_key FROM attachments
WHERE platform = :platform AND user_id = :user AND expires_at > :now"""

IN_MESSAGE = _MINE + " AND message_id = :message ORDER BY received_at DESC, id DESC"
BY_NAME = (_MINE + " AND name_key = :name_key"
           " ORDER BY (conversation = :conversation) DESC, received_at DESC, id DESC LIMIT 1")
RECENT_UPLOADS = (_MINE + " ORDER BY (conversation = :conversation) DESC, received_at DESC,"
                  " id DESC LIMIT :limit")

MESSAGE_FILES = f"""
SELECT {_COLUMNS} FROM attachments WHERE platform = :platform AND message_id = :message
  AND expires_at > :now
ORDER BY id"""

PURGE = "DELETE FROM attachments WHERE expires_at <= :now"


def name_key(name: str) -> str:
    return unicodedata.normalize("NFKC", name).strip().casefold()


def is_sheet(name: str) -> bool:
    return name_key(name).endswith(SHEET_SUFFIXES)


class Inbox:
    def __init__(self, db: Database, keep_seconds: float, *,
                 clock: Callable[[], float] = time.time):
        self.db, self.keep_seconds, self.clock = db, keep_seconds, clock

    async def record(self, *, platform: str, user: str, conversation: str, name: str, size: int,
                     handle: dict[str, Any], message: str | None = None) -> Upload:
        now = self.clock()
        row = await self.db.fetchrow(RECORD, {
            "platform": platform, "user": user, "conversation": conversation,
            "message": message, "name": name, "name_key": name_key(name), "size": size,
            "handle": encoded(handle), "now": now, "expires_at": now + self.keep_seconds})
        assert row is not None  # INSERT ... RETURNING gives back the new row
        return Upload.from_row(row)

    async def find_sheet(self, *, platform: str, user: str, conversation: str,
                         name: str | None = None, message: str | None = None) -> Lookup:
        now = self.clock()
        in_message = [] if message is None else [
            Upload.from_row(r)
            for r in await self.db.fetch(IN_MESSAGE, {"platform": platform, "user": user,
                                                      "now": now, "message": message})]
        if name is not None:
            key = name_key(name)
            same = [u for u in in_message if name_key(u.name) == key]
            if same:
                return Lookup(same[0])
            row = await self.db.fetchrow(BY_NAME, {
                "platform": platform, "user": user, "now": now, "name_key": key,
                "conversation": conversation})
            if row:
                return Lookup(Upload.from_row(row))
        else:
            sheets = [u for u in in_message if is_sheet(u.name)]
            if len(sheets) == 1:
                return Lookup(sheets[0])
            if len(sheets) > 1:
                return Lookup(None, ambiguous=True, candidates=tuple(sheets))
            recent = await self.recent(platform=platform, user=user, conversation=conversation)
            latest = next((u for u in recent if is_sheet(u.name)), None)
            if latest:
                return Lookup(latest)
            return Lookup(None, candidates=tuple(recent))
        return Lookup(None, candidates=tuple(await self.recent(
            platform=platform, user=user, conversation=conversation)))

    async def recent(self, *, platform: str, user: str, conversation: str,
                     limit: int = RECENT) -> list[Upload]:
        """The person's latest uploads, this conversation's first."""
        return [Upload.from_row(r) for r in await self.db.fetch(RECENT_UPLOADS, {
            "platform": platform, "user": user, "now": self.clock(),
            "conversation": conversation, "limit": limit})]

    async def message_files(self, *, platform: str, message: str) -> list[Upload]:
        """Everything sent with one message: the images a sheet's rows may name."""
        return [Upload.from_row(r) for r in await self.db.fetch(MESSAGE_FILES, {
            "platform": platform, "message": message, "now": self.clock()})]

    async def purge(self) -> int:
        """Forget uploads past their keep time; returns how many."""
        return await self.db.execute(PURGE, {"now": self.clock()})
