"""What an estimate says: a time only when the queue is moving.

A time computed from recent run times means nothing while the queue is paused or no
executor is running: "done in about 1 min" would be a promise nobody keeps. Every front
that shows an estimate (the acceptance, /status, /queue, the dashboard through the API)
asks `held_by` first and says what the queue waits for instead.
"""

from __future__ import annotations

from typing import Literal

from bot.messages import say
from storage.queue import Queue
from storage.workers import Workers

Held = Literal["paused", "no_executor"]  # what keeps queued jobs from starting


async def held_by(queue: Queue) -> Held | None:
    """Why no queued job starts now, if something says none will: the pause first (it
    holds jobs whatever runs), then the lack of any live executor."""
    if await queue.paused():
        return "paused"
    if not any(w.live for w in await Workers.of(queue).all()):
        return "no_executor"
    return None


def eta(lang: str, seconds: float | None, held: Held | None = None) -> str:
    """"done in about 3 min", or what it waits for ("starts when the queue is resumed")."""
    if held is not None:
        return say(f"eta_{held}", lang)
    if seconds is None:
        return say("eta_unknown", lang)
    return say("eta_minutes", lang, minutes=max(1, round(seconds / 60)))
