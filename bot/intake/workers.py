"""Intake's CPU work off the event loop, and a few submissions checked at a time.

The service answers everyone from one event loop. Reading a sheet (calamine, the CSV
sniffer) and checking its pictures (Pillow decodes each, turns and re-encodes some) is CPU
work: on the loop it would hold /healthz, the dashboard and chat until it is done. So it
runs in a thread pool of its own, [intake] workers threads (one per CPU by default), not
the default executor the rest of the service shares. And at most that many submissions
are checked at once: the rest wait their turn, in order of arrival, so the first in is
the first answered — fifty submissions at once no longer all finish at the same instant,
each having waited on every other's work (issue 42, item 13).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from contextvars import ContextVar
from functools import partial
from typing import TypeVar
from weakref import WeakKeyDictionary

from bot.settings import IntakeConfig

T = TypeVar("T")

_pools: dict[int, ThreadPoolExecutor] = {}
# One semaphore per event loop and size (a semaphore belongs to the loop it first waits on).
_turns: WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Semaphore]] = \
    WeakKeyDictionary()


def workers(settings: IntakeConfig) -> int:
    """Threads, and submissions checked at once: [intake] workers, or one per CPU."""
    return settings.workers or os.cpu_count() or 1


async def run(settings: IntakeConfig, work: Callable[..., T], *args: object) -> T:
    """`work(*args)` in intake's thread pool, the event loop free meanwhile."""
    size = workers(settings)
    pool = _pools.get(size)
    if pool is None:
        pool = _pools.setdefault(size, ThreadPoolExecutor(size, thread_name_prefix="intake"))
    return await asyncio.get_running_loop().run_in_executor(pool, partial(work, *args))


_waiting: WeakKeyDictionary[asyncio.AbstractEventLoop, int] = WeakKeyDictionary()
_holding: ContextVar[bool] = ContextVar("intake_turn", default=False)


@asynccontextmanager
async def turn(settings: IntakeConfig) -> AsyncIterator[None]:
    """A submission's turn: at most `workers` at once, first come first served (asyncio's
    semaphore wakes its waiters in order). Taken once: a front may take it around the
    whole submission (the API: through the answer's database reads, which would
    otherwise interleave with everyone else's), and check_sheet inside then goes on."""
    if _holding.get():
        yield
        return
    size = workers(settings)
    loop = asyncio.get_running_loop()
    semaphore = _turns.setdefault(loop, {}).setdefault(size, asyncio.Semaphore(size))
    _waiting[loop] = _waiting.get(loop, 0) + 1
    try:
        await semaphore.acquire()
    finally:
        _waiting[loop] -= 1
    held = _holding.set(True)
    try:
        yield
    finally:
        _holding.reset(held)
        semaphore.release()


def waiting() -> int:
    """Submissions waiting for their turn in this event loop."""
    return _waiting.get(asyncio.get_running_loop(), 0)
