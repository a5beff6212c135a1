"""An engine whose runs go exactly as a test says, one step at a time: the stand-in for a
GPU (which cannot run here) under the executor's real loop.

`ScriptedEngine` satisfies executor.engine.Engine. Its `generate` holds the group on the
"device" until the test moves it: `step()` reports a step of every live run (progress)
and lets each notice a stop the loop gave it, as a real engine does between denoising
steps; `end(outcome)` ends the group — "ok", "error" (the row failed, retryable) or
"give back" (the engine's own trouble: no attempt used). Each run's `finish` then waits
for `finish_next(outcome)`: "ok" stores its image (its name says which run made it:
job id and the first characters of the lease token), "disk full" raises OSError as a
full disk does. Nothing touches the database: that is the loop's.
"""

from __future__ import annotations

import asyncio
import errno
from typing import Any

from executor.engine import Control, Run, Wanted
from storage.queue import Lease, LeaseKey

OUTCOMES = ("ok", "error", "give back")


def image_of(run: Run) -> str:
    """The stored name of a run's image: which job, under which lease."""
    return f"{run.id}-{run.lease.token[:8]}.png"


class ScriptedEngine:
    kind = "scripted"
    claims_ahead = True

    def __init__(self, max_batch: int = 1):
        self.max_batch = max_batch
        self.control: Control | None = None
        self.group: list[Run] = []  # on the device now
        self.moved = asyncio.Event()
        self.ending: str | None = None  # how the group on the device ends, once told
        self.steps = 0
        self.waiting: list[tuple[Run, asyncio.Future]] = []  # finishes, oldest first
        self.generated: list[LeaseKey] = []  # runs that left the device with no error
        self.stored: list[LeaseKey] = []  # runs whose image was stored

    # --- what a test does -------------------------------------------------------------
    def step(self) -> bool:
        """One step of the group on the device; False: none is there."""
        if not self.group:
            return False
        self.moved.set()
        return True

    def end(self, outcome: str) -> bool:
        """The group on the device ends with `outcome`; False: none is there."""
        assert outcome in OUTCOMES
        if not self.group:
            return False
        self.ending = outcome
        self.moved.set()
        return True

    def finish_next(self, outcome: str) -> bool:
        """The oldest finish waiting ends: "ok" or "disk full"; False: none waits."""
        while self.waiting:
            run, done = self.waiting.pop(0)
            if not done.done():
                done.set_result(outcome)
                return True
        return False

    # --- the Engine protocol ------------------------------------------------------------
    async def start(self, control: Control) -> None:
        self.control = control

    async def ready(self) -> bool:
        return True

    def backoff(self) -> float:
        return 0.1

    def wanted(self) -> Wanted | None:
        return Wanted()

    def interrupted(self) -> asyncio.Future[Any] | None:
        return None

    def prepare(self, lease: Lease) -> Run:
        return Run(lease)

    async def generate(self, runs: list[Run]) -> None:
        assert self.control is not None
        self.group, self.ending = runs, None
        try:
            while True:
                await self.moved.wait()
                self.moved.clear()
                self.steps += 1
                live = [r for r in runs if r.live]
                if live and self.ending is None:
                    self.control.step(live, "generate", self.steps, 1000)
                for run in live:
                    if reason := self.control.stop_reason(run):
                        run.stopped = reason
                if self.ending is not None or not any(r.live for r in runs):
                    break
            for run in runs:
                if not run.live:
                    continue
                if self.ending == "error":
                    run.fail("row failed on the device (scripted)", retry=True)
                elif self.ending == "give back":
                    run.give_back = "the device went away (scripted)"
                else:
                    self.generated.append(run.key)
        finally:
            self.group, self.ending = [], None

    async def finish(self, run: Run) -> None:
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.waiting.append((run, done))
        if await done == "disk full":
            raise OSError(errno.ENOSPC, "No space left on device (scripted)")
        run.outputs = [image_of(run)]
        self.stored.append(run.key)

    async def after(self, runs: list[Run], taken: int) -> bool:
        return False

    def presence(self) -> dict[str, Any]:
        return {"device": "scripted", "memory_used": 0, "memory_total": None, "models": [],
                "allow": None, "stats": {}}

    async def close(self, *, recycling: bool) -> None:
        for _, done in self.waiting:
            if not done.done():
                done.cancel()
