"""The outbox: every message the bot owes, written before it is sent.

Delivery is a promise like the queue's: a message is a row first, then sent, then
marked with the platform's id. A crash between the two at worst sends it again; in
normal operation nothing is sent twice and nothing owed is lost.

- `put` is idempotent by key (the notifier may replay events after a restart).
- `put_progress` keeps one progress message per batch: a newer state replaces the
  payload and, once the first version is sent, asks for an edit of that message.
- `due` hands out, per thread, only the oldest unsent message, so each thread gets
  its messages in order even while one of them is being retried.
- `claim` gives a due message to one sender only — of this service or of another on the
  same database — for `CLAIM_SECONDS`, which the sender `renew`s while its platform call
  lasts; a sender that dies mid-send leaves the message to fall due again within
  `CLAIM_SECONDS` (sent at least once, never lost).
- `retry` waits as long as the platform's Retry-After says (a rate limit uses no
  attempt), else backs off, doubling; `failed` records a permanent error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from storage.db import Database
from storage.records import Message, encoded

# An outbox row as storage.records.Message reads it (storage.webhooks reads the same rows).
MESSAGE_COLUMNS = ("id, key, platform, conversation, thread, kind, payload, status, attempts, "
            "version, next_at, platform_id, error")

PUT = """
INSERT INTO outbox (key, platform, conversation, thread, kind, payload, status, attempts,
                    version, next_at, created_at, updated_at)
VALUES (:key, :platform, :conversation, :thread, :kind, :payload, 'pending', 0, 0, :now, :now,
        :now)
ON CONFLICT (key) DO NOTHING RETURNING id"""

# A newer progress state: replace the payload; a sent one goes back to pending (an edit),
# due no sooner than the hold its last send set (edits at most every few seconds). The
# same state again changes nothing: no edit that would show what is already shown.
PUT_PROGRESS = """
INSERT INTO outbox (key, platform, conversation, thread, kind, payload, status, attempts,
                    version, next_at, created_at, updated_at)
VALUES (:key, :platform, :conversation, :thread, 'progress', :payload, 'pending', 0, 0, :now,
        :now, :now)
ON CONFLICT (key) DO UPDATE SET payload = excluded.payload, status = 'pending',
  version = outbox.version + 1,
  next_at = CASE WHEN outbox.status = 'pending' OR outbox.next_at > excluded.next_at
                 THEN outbox.next_at ELSE excluded.next_at END,
  updated_at = excluded.updated_at
WHERE outbox.status <> 'failed' AND outbox.payload <> excluded.payload"""

# The oldest unsent message of each thread of one platform, if it is due. Progress edits
# wait for older messages but hold none up: a throttled edit must not delay images.
DUE = f"""
SELECT {MESSAGE_COLUMNS} FROM outbox o
WHERE platform = :platform AND status = 'pending' AND next_at <= :now
  AND NOT EXISTS (SELECT 1 FROM outbox e WHERE e.status = 'pending' AND e.id < o.id
                  AND e.kind <> 'progress'
                  AND e.platform = o.platform AND e.conversation = o.conversation
                  AND COALESCE(e.thread, '') = COALESCE(o.thread, ''))
ORDER BY id LIMIT :limit"""

# When the platform's next message falls due (the sender sleeps until then).
NEXT_DUE = ("SELECT MIN(next_at) AS t FROM outbox WHERE platform = :platform"
            " AND status = 'pending'")

# Only the version that was sent: a newer progress state stays pending, to edit it again.
SENT = """
UPDATE outbox SET status = 'sent', platform_id = COALESCE(:platform_id, platform_id),
  error = NULL, attempts = attempts + 1, updated_at = :now, next_at = :until
WHERE id = :id AND status = 'pending' AND version = :version"""
KEEP_PLATFORM_ID = """
UPDATE outbox SET platform_id = COALESCE(platform_id, :platform_id), next_at = :until
WHERE id = :id"""

RETRY = """
UPDATE outbox SET attempts = attempts + :attempts_used, next_at = :retry_at, error = :error,
  updated_at = :now
WHERE id = :id AND status = 'pending'"""

FAILED = """
UPDATE outbox SET status = 'failed', attempts = attempts + 1, error = :error,
  updated_at = :now
WHERE id = :id AND status = 'pending'"""

# Compare-and-set on the next_at and version `due` read: of two senders, one moves it on.
CLAIM = """
UPDATE outbox SET next_at = :until WHERE id = :id AND status = 'pending'
  AND next_at = :next_at AND version = :version"""
# Holding on: only the claimer's own last claim time matches, so a renewal that lands after
# the send was recorded (a retry time set, or sent) changes nothing.
RENEW = """
UPDATE outbox SET next_at = :until WHERE id = :id AND status = 'pending'
  AND next_at = :held"""
CLAIM_SECONDS = 30.0  # how soon the message of a sender that died mid-send falls due again

MARK = "UPDATE outbox SET platform_id = :platform_id WHERE id = :id AND status = 'pending'"

BY_KEY = f"SELECT {MESSAGE_COLUMNS} FROM outbox WHERE key = :key"
# Which message of ours a platform's id names (a thread someone wrote in, a message they
# reacted to): the outbox key says what it was about.
BY_PLATFORM_ID = """
SELECT key FROM outbox WHERE platform = :platform AND conversation = :conversation
  AND platform_id = :platform_id
ORDER BY id LIMIT 1"""
COUNTS = "SELECT status, COUNT(*) AS n FROM outbox GROUP BY status"
# Messages sent or given up on before :before, :limit at a time (retention).
FORGET_DONE = """
DELETE FROM outbox WHERE id IN (
  SELECT id FROM outbox WHERE status IN ('sent', 'failed') AND updated_at < :before
  LIMIT :limit)"""
COUNTS_BY_PLATFORM = """
SELECT platform, status, COUNT(*) AS n FROM outbox GROUP BY platform, status"""

CURSOR = "SELECT seq FROM cursors WHERE name = :name"
SET_CURSOR = """
INSERT INTO cursors (name, seq) VALUES (:name, :seq)
ON CONFLICT (name) DO UPDATE SET seq = excluded.seq"""


class Outbox:
    def __init__(self, db: Database, *, backoff: float = 2.0, backoff_max: float = 300.0,
                 clock: Callable[[], float] = time.time):
        self.db, self.backoff, self.backoff_max, self.clock = db, backoff, backoff_max, clock

    async def put(self, key: str, *, platform: str, conversation: str, thread: str | None,
                  kind: str, payload: dict[str, Any]) -> bool:
        """Owe a message. False: one with this key was owed already."""
        return await self.db.fetchrow(PUT, {
            "key": key, "platform": platform, "conversation": conversation,
            "thread": thread, "kind": kind, "payload": encoded(payload),
            "now": self.clock()}) is not None

    async def put_progress(self, key: str, *, platform: str, conversation: str,
                           thread: str | None, payload: dict[str, Any]) -> None:
        await self.db.execute(PUT_PROGRESS, {
            "key": key, "platform": platform, "conversation": conversation,
            "thread": thread, "payload": encoded(payload), "now": self.clock()})

    async def due(self, platform: str, limit: int = 50) -> list[Message]:
        return [Message.from_row(r)
                for r in await self.db.fetch(DUE, {"platform": platform, "now": self.clock(),
                                                   "limit": limit})]

    async def put_many(self, rows: list[dict[str, Any]],
                       cursor: tuple[str, int] | None = None) -> None:
        """Owe many messages (each as `put` takes it, by keyword) and, in the same
        transaction, move a reader's cursor past the events that owed them: one commit
        for a whole chunk of the event log, and never a cursor ahead of what it owed."""
        now = self.clock()
        async with self.db.transaction() as tx:
            for r in rows:
                await self.db.execute(PUT, {
                    "key": r["key"], "platform": r["platform"],
                    "conversation": r["conversation"], "thread": r["thread"],
                    "kind": r["kind"], "payload": encoded(r["payload"]), "now": now},
                    client=tx)
            if cursor is not None:
                name, seq = cursor
                await self.db.execute(SET_CURSOR, {"name": name, "seq": seq}, client=tx)

    async def claim_many(self, messages: list[Message],
                         seconds: float = CLAIM_SECONDS) -> list[Message]:
        """`claim` for several, in one transaction: those now this sender's."""
        until = self.clock() + seconds
        mine = []
        async with self.db.transaction() as tx:
            for m in messages:
                if await self.db.execute(CLAIM, {"id": m.id, "next_at": m.next_at,
                                                 "until": until, "version": m.version},
                                         client=tx) > 0:
                    mine.append(m)
        return mine

    async def claim(self, message: Message, seconds: float = CLAIM_SECONDS) -> float | None:
        """Mine to send now, until the time returned; None: another sender took it, or it
        changed since `due`."""
        until = self.clock() + seconds
        return until if await self.db.execute(CLAIM, {
            "id": message.id, "next_at": message.next_at, "until": until,
            "version": message.version}) > 0 else None

    async def renew(self, message: Message, held: float,
                    seconds: float = CLAIM_SECONDS) -> float | None:
        """Hold the claim that lasts until `held` for longer: the send is still under way.
        None: the claim is no longer this sender's (sent, set to retry, or taken over)."""
        until = self.clock() + seconds
        return until if await self.db.execute(RENEW, {
            "id": message.id, "held": held, "until": until}) > 0 else None

    async def next_due(self, platform: str) -> float | None:
        return await self.db.fetchval(NEXT_DUE, {"platform": platform})

    async def sent(self, message: Message, platform_id: str | None, *, hold: float = 0.0,
                   client: Any = None) -> bool:
        """Mark sent with the platform's message or file id. `hold`: seconds before a
        newer progress state may edit it. False: a newer progress state came in
        meanwhile; it stays pending and will edit the message sent, after the hold."""
        until = self.clock() + hold
        if await self.db.execute(SENT, {
                "id": message.id, "platform_id": platform_id, "now": self.clock(),
                "version": message.version, "until": until}, client=client) > 0:
            return True
        await self.db.execute(KEEP_PLATFORM_ID, {
            "id": message.id, "platform_id": platform_id, "until": until}, client=client)
        return False

    async def mark(self, message: Message, platform_id: str) -> None:
        """Record a first part as posted (a caption sent before its image), so a retry
        posts only the rest."""
        await self.db.execute(MARK, {"id": message.id, "platform_id": platform_id})

    async def retry(self, message: Message, error: str, retry_after: float | None = None, *,
                    wait: float | None = None, client: Any = None) -> None:
        """Try again later: when the platform said (a rate limit, which is not the
        message's fault and uses no attempt), else after `wait` seconds or a doubling
        backoff."""
        if retry_after is not None:
            await self.db.execute(RETRY, {
                "id": message.id, "retry_at": self.clock() + retry_after, "error": error,
                "now": self.clock(), "attempts_used": 0}, client=client)
            return
        if wait is None:
            wait = min(self.backoff * 2 ** message.attempts, self.backoff_max)
        await self.db.execute(RETRY, {
            "id": message.id, "retry_at": self.clock() + wait, "error": error,
            "now": self.clock(), "attempts_used": 1}, client=client)

    async def failed(self, message: Message, error: str, *, client: Any = None) -> None:
        await self.db.execute(FAILED, {"id": message.id, "error": error, "now": self.clock()},
                              client=client)

    async def key_of(self, platform: str, conversation: str, platform_id: str) -> str | None:
        """The key of the message we posted that the platform calls `platform_id`."""
        return await self.db.fetchval(BY_PLATFORM_ID, {
            "platform": platform, "conversation": conversation, "platform_id": platform_id})

    async def get(self, key: str) -> Message | None:
        row = await self.db.fetchrow(BY_KEY, {"key": key})
        return Message.from_row(row) if row else None

    async def forget_done(self, before: float, limit: int = 5000) -> int:
        """Delete messages sent or given up on before `before`, `limit` at a time;
        returns how many. (A forgotten message's key could be put again: retention
        keeps months, no retry comes that late.)"""
        total = 0
        while n := await self.db.execute(FORGET_DONE, {"before": before, "limit": limit}):
            total += n
        return total

    async def counts(self) -> dict[str, int]:
        return {r["status"]: r["n"] for r in await self.db.fetch(COUNTS)}

    async def counts_by_platform(self) -> dict[tuple[str, str], int]:
        """(platform, status) -> messages."""
        return {(r["platform"], r["status"]): r["n"]
                for r in await self.db.fetch(COUNTS_BY_PLATFORM)}

    async def cursor(self, name: str, default: Any = 0) -> Any:
        """The last event seq `name` has handled (`default` before it first read any)."""
        seq = await self.db.fetchval(CURSOR, {"name": name})
        return default if seq is None else seq

    async def advance(self, name: str, seq: int) -> None:
        await self.db.execute(SET_CURSOR, {"name": name, "seq": seq})
