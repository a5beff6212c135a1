"""Template versions: each distinct content of a template, numbered per name, and the labels
that name one of them (production …). Kept in the database, so every host sees one list.

`record` is idempotent on (name, content hash): a service that starts again, or a second
host loading the same files, finds the version already there. Two hosts seeing a new
content at once race for its number; the loser reads the winner's row.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storage.db import Database
from storage.records import decoded, encoded

BY_HASH = "SELECT * FROM template_versions WHERE name = :name AND hash = :hash"
ONE = "SELECT * FROM template_versions WHERE name = :name AND number = :number"
LATEST = "SELECT * FROM template_versions WHERE name = :name ORDER BY number DESC LIMIT 1"
HISTORY = "SELECT * FROM template_versions WHERE name = :name ORDER BY number"
ADD = """
INSERT INTO template_versions (name, number, hash, content, source, created_at)
SELECT CAST(:name AS VARCHAR(200)), COALESCE(MAX(number), 0) + 1, :hash, :content, :source, :now
FROM template_versions WHERE name = CAST(:name AS VARCHAR(200))
ON CONFLICT DO NOTHING RETURNING *"""
LABELS = "SELECT label, number, moved_by, moved_at FROM template_labels WHERE name = :name " \
         "ORDER BY label"
LABEL = "SELECT number FROM template_labels WHERE name = :name AND label = :label"
MOVE = """
INSERT INTO template_labels (name, label, number, moved_by, moved_at)
VALUES (:name, :label, :number, :by, :now)
ON CONFLICT (name, label) DO UPDATE SET number = excluded.number,
    moved_by = excluded.moved_by, moved_at = excluded.moved_at"""


@dataclass(frozen=True)
class Version:
    name: str
    number: int
    hash: str
    content: dict[str, Any]  # {"template": the file's JSON, "workflow": ComfyUI's or None}
    source: str
    created_at: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Version:
        return cls(row["name"], row["number"], row["hash"], decoded(row["content"]) or {},
                   row["source"], row["created_at"])


@dataclass(frozen=True)
class Label:
    label: str
    number: int
    moved_by: str
    moved_at: float


class TemplateVersions:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time):
        self.db, self.clock = db, clock

    async def record(self, name: str, hash: str, content: dict[str, Any],
                     source: str) -> Version:
        """The version of `name` with this content: the one seen before, or a new number."""
        for _ in range(5):  # (another host may take the number first: then read again)
            row = await self.db.fetchrow(BY_HASH, {"name": name, "hash": hash})
            if row is not None:
                return Version.from_row(row)
            row = await self.db.fetchrow(ADD, {
                "name": name, "hash": hash, "content": encoded(content),
                "source": source[:300], "now": self.clock()})
            if row is not None:
                return Version.from_row(row)
        raise RuntimeError(f"template {name}: could not number a new version")

    async def get(self, name: str, number: int) -> Version | None:
        row = await self.db.fetchrow(ONE, {"name": name, "number": number})
        return Version.from_row(row) if row else None

    async def latest(self, name: str) -> Version | None:
        row = await self.db.fetchrow(LATEST, {"name": name})
        return Version.from_row(row) if row else None

    async def history(self, name: str) -> list[Version]:
        return [Version.from_row(r) for r in await self.db.fetch(HISTORY, {"name": name})]

    async def labelled(self, name: str, label: str) -> int | None:
        """The version number `label` names, or None."""
        return await self.db.fetchval(LABEL, {"name": name, "label": label})

    async def labels(self, name: str) -> list[Label]:
        return [Label(r["label"], r["number"], r["moved_by"], r["moved_at"])
                for r in await self.db.fetch(LABELS, {"name": name})]

    async def promote(self, name: str, number: int, label: str, by: str) -> None:
        """Point `label` at version `number` of `name` (which must exist)."""
        await self.db.execute(MOVE, {"name": name, "label": label, "number": number, "by": by,
                                     "now": self.clock()})
