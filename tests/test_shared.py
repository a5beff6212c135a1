"""Shared: one computation for everyone asking at once, and never a value older than
the question."""

from __future__ import annotations

import asyncio

import pytest

from bot.web.shared import Shared


class Counter:
    """A computation that reads `state` after a pause, counting its runs."""

    def __init__(self) -> None:
        self.state, self.runs, self.gate = 0, 0, asyncio.Event()

    async def __call__(self) -> int:
        self.runs += 1
        seen = self.state
        await self.gate.wait()
        return seen


async def test_many_callers_share_at_most_two_computations():
    counter = Counter()
    shared = Shared(counter)
    first = [asyncio.ensure_future(shared.get()) for _ in range(50)]
    await asyncio.sleep(0)
    later = [asyncio.ensure_future(shared.get()) for _ in range(150)]
    await asyncio.sleep(0)
    counter.gate.set()
    assert await asyncio.gather(*first, *later) == [0] * 200
    assert counter.runs == 2  # one running, one for everyone who came while it ran


async def test_a_caller_never_gets_a_value_computed_before_it_asked():
    counter = Counter()
    shared = Shared(counter)
    early = asyncio.ensure_future(shared.get())
    while counter.runs < 1:  # the computation has read state 0 and waits
        await asyncio.sleep(0)
    counter.state = 1  # a write, then a read that must see it
    late = asyncio.ensure_future(shared.get())
    await asyncio.sleep(0)
    counter.gate.set()
    assert (await early, await late) == (0, 1)
    assert shared.latest == 1


async def test_a_failure_reaches_its_callers_and_the_next_call_tries_again():
    calls = 0

    async def flaky() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("database went away")
        return 7
    shared = Shared(flaky)
    with pytest.raises(ConnectionError):
        await shared.get()
    assert await shared.get() == 7


async def test_refresh_soon_updates_latest_in_the_background():
    counter = Counter()
    counter.gate.set()
    shared = Shared(counter)
    assert shared.latest is None
    shared.refresh_soon(older_than=0)
    await asyncio.sleep(0.01)
    assert (shared.latest, counter.runs) == (0, 1)
    shared.refresh_soon(older_than=60)  # fresh enough: nothing runs
    await asyncio.sleep(0.01)
    assert counter.runs == 1
