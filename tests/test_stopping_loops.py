"""A service's background loops stop when canceled, even when the cancel comes in the
very turn their wake-up event is set (a job just ended as SIGTERM arrives).

On Python 3.11, `asyncio.wait_for(event.wait(), t)` returns normally in that turn,
swallowing the cancel; each loop then waited again and `Service.stop` hung until the
process was killed (seen once in CI, in the supervisor test). The loops wait with
`asyncio.timeout` instead."""

from __future__ import annotations

import asyncio

import pytest

from storage.wakeup import Waker


async def cancel_as_it_wakes(task: asyncio.Task, wake) -> None:
    await asyncio.sleep(0.05)  # waiting now
    wake()
    task.cancel()  # in the same turn
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)


async def test_the_queue_bell_stops_when_canceled_as_it_rings():
    waker = Waker()
    await waker.listen()

    async def loop() -> None:  # as EventBell.follow waits between reads
        while True:
            await waker.wait(10)
    await cancel_as_it_wakes(asyncio.create_task(loop()), waker._event.set)


async def test_the_webhook_deliverer_stops_when_canceled_as_it_is_woken(tmp_path):
    from bot.webhooks.delivery import Deliverer

    class Nothing:
        async def due_endpoints(self):
            return []
    deliverer = Deliverer.__new__(Deliverer)
    deliverer.webhooks, deliverer.wake, deliverer.draining = Nothing(), asyncio.Event(), {}
    await cancel_as_it_wakes(asyncio.create_task(deliverer.run()), deliverer.wake.set)


async def test_the_event_log_follower_stops_when_canceled_as_the_bell_rings():
    from storage.wakeup import EventBell
    bell = EventBell.__new__(EventBell)
    bell.listener, bell.rung, bell._changed = None, 0, asyncio.Event()

    async def loop() -> None:  # as EventBell.follow waits between reads
        while True:
            await bell.wait(bell.rung, 10)
    await cancel_as_it_wakes(asyncio.create_task(loop()), bell.ring)
