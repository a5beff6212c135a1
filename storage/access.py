"""Roles given by /grant, the audit log of refusals and admin actions, and the dashboard
sessions ended by signing out.

The rules themselves (who may do what) live in bot.app.permissions; this module only
keeps what they need to remember.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from storage.db import Database
from storage.records import AuditEntry, Grant, Priority

SET_GRANT = """
INSERT INTO grants (platform, user_id, role, granted_by, granted_at, max_priority)
VALUES (:platform, :user, :role, :by, :now, :priority)
ON CONFLICT (platform, user_id) DO UPDATE
SET role = excluded.role, granted_by = excluded.granted_by, granted_at = excluded.granted_at,
    max_priority = excluded.max_priority"""
COLUMNS = "platform, user_id, role, granted_by, granted_at, max_priority"
GRANT_OF = f"SELECT {COLUMNS} FROM grants WHERE platform = :platform AND user_id = :user"
REVOKE = "DELETE FROM grants WHERE platform = :platform AND user_id = :user"
GRANTS = f"SELECT {COLUMNS} FROM grants ORDER BY platform, user_id"

AUDIT = """
INSERT INTO audit (at, platform, user_id, conversation, action, allowed, detail)
VALUES (:now, :platform, :user, :conversation, :action, :allowed, :detail)"""
AUDIT_RECENT = """
SELECT at, platform, user_id, conversation, action, allowed, detail FROM audit
ORDER BY id DESC LIMIT :limit"""

END_SESSION = """
INSERT INTO ended_sessions (nonce, expires_at) VALUES (:nonce, :expires_at)
ON CONFLICT (nonce) DO NOTHING"""
SESSION_ENDED = "SELECT 1 AS ended FROM ended_sessions WHERE nonce = :nonce"
FORGET_ENDED = "DELETE FROM ended_sessions WHERE expires_at < :now"


class Access:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time):
        self.db, self.clock = db, clock

    async def grant(self, platform: str, user: str, role: str, by: str,
                    max_priority: Priority | None = None) -> None:
        """`max_priority`: the most urgent priority they may use, when above the role's."""
        await self.db.execute(SET_GRANT, {
            "platform": platform, "user": user, "role": role, "by": by, "now": self.clock(),
            "priority": None if max_priority is None else int(max_priority)})

    async def granted(self, platform: str, user: str) -> Grant | None:
        row = await self.db.fetchrow(GRANT_OF, {"platform": platform, "user": user})
        return None if row is None else Grant.from_row(row)

    async def revoke(self, platform: str, user: str) -> bool:
        """False: the user had no granted role."""
        return await self.db.execute(REVOKE, {"platform": platform, "user": user}) > 0

    async def grants(self) -> list[Grant]:
        return [Grant.from_row(r) for r in await self.db.fetch(GRANTS)]

    async def audit(self, *, platform: str, user: str, conversation: str | None, action: str,
                    allowed: bool, **detail: Any) -> None:
        await self.db.execute(AUDIT, {
            "now": self.clock(), "platform": platform, "user": user,
            "conversation": conversation, "action": action, "allowed": allowed,
            "detail": json.dumps(detail, ensure_ascii=False, default=str)})

    async def audit_log(self, limit: int = 100) -> list[AuditEntry]:
        """Newest first."""
        return [AuditEntry.from_row(r) for r in await self.db.fetch(AUDIT_RECENT, {"limit": limit})]

    async def end_session(self, nonce: str, expires_at: float) -> None:
        """Refuse this session from now on; forget sessions that have expired anyway."""
        await self.db.execute(FORGET_ENDED, {"now": self.clock()})
        await self.db.execute(END_SESSION, {"nonce": nonce, "expires_at": expires_at})

    async def session_ended(self, nonce: str) -> bool:
        return await self.db.fetchval(SESSION_ENDED, {"nonce": nonce}) is not None
