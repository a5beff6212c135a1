"""Runs the executor as a child process of the service and restarts it when it dies.

The GPU code lives in its own OS process, so a CUDA crash, a segfault or a leak never
takes the chat bot down. A job its executor was running comes back through its lease
and runs again. Restarts back off (1 s, doubling, up to restart_backoff_max); an
executor that ran a while before dying starts again at 1 s. An executor that asks to
be recycled (exit 75) is restarted at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from typing import IO

from storage.config import Config, ServiceConfig
from storage.queue import Queue
from storage.workers import owner_name

log = logging.getLogger("genbot.supervisor")

EXIT_RECYCLE = 75  # executor.worker.EXIT_RECYCLE (not imported: that module loads torch)
EXIT_CONFIG = 2  # the executor refused its configuration: restarting cannot help
STABLE_AFTER = 60.0  # seconds an executor must live for its backoff to reset


class Supervisor:
    def __init__(self, config: Config, *, command: list[str] | None = None,
                 stderr: IO[bytes] | int | None = None, queue: Queue | None = None) -> None:
        self.config, self.queue = config, queue  # queue: to take a dead executor's job back
        self.command = command or self.default_command(config)
        self.stderr = stderr  # where the executor's log goes (default: the service's stderr)
        self.process: asyncio.subprocess.Process | None = None
        self.restarts = 0
        self.gave_up = False
        self._task: asyncio.Task | None = None
        self._stopping = asyncio.Event()

    @staticmethod
    def default_command(config: Config) -> list[str]:
        command = [sys.executable, "-m", "executor.worker"]
        if config.source != "built-in defaults":
            command += ["--config", config.source]
        return command

    @staticmethod
    def comfy_command(config: Config, url: str) -> list[str]:
        """The executor for one ComfyUI server (executor.comfyui.engine)."""
        command = [sys.executable, "-m", "executor.worker", "--comfyui", url]
        if config.source != "built-in defaults":
            command += ["--config", config.source]
        return command

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process and self.process.returncode is None else None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="executor-supervisor")

    async def _run(self) -> None:
        first = min(1.0, self.config[ServiceConfig].restart_backoff_max)
        delay = first
        while not self._stopping.is_set():
            started = time.monotonic()
            # The executor stops if this process dies (it watches for its parent), so a
            # crashed service never leaves an orphan executor on the GPU.
            env = {**os.environ, "GENBOT_SUPERVISOR_PID": str(os.getpid())}
            self.process = await asyncio.create_subprocess_exec(*self.command, env=env,
                                                                stderr=self.stderr)
            log.info("executor started", extra={"pid": self.process.pid})
            code = await self.process.wait()
            if self._stopping.is_set():
                break
            await self._take_back(self.process.pid)
            if code == EXIT_CONFIG:
                log.error("the executor refused its configuration (see above); not restarting "
                          "it until genbot is restarted", extra={"pid": self.process.pid})
                self.gave_up = True
                break
            if code == EXIT_RECYCLE:
                log.info("executor recycled; starting a fresh one", extra={"pid": self.process.pid})
                delay = first
                self.restarts += 1
                continue
            if time.monotonic() - started > STABLE_AFTER:
                delay = first
            log.error("executor died; restarting", extra={
                "pid": self.process.pid, "exit": code, "signal": _signal_name(code),
                "restart_in_s": delay})
            self.restarts += 1
            try:
                async with asyncio.timeout(delay):  # (not wait_for: see storage.wakeup)
                    await self._stopping.wait()
            except TimeoutError:
                pass
            delay = min(delay * 2, self.config[ServiceConfig].restart_backoff_max)

    async def _take_back(self, pid: int) -> None:
        """The executor is dead for sure: its job goes back to the queue now rather than
        when its lease runs out, and the next executor takes it at once."""
        if self.queue is None:
            return
        try:
            if await self.queue.owner_died(owner_name(pid)):
                log.warning("the dead executor's job goes back to the queue", extra={"pid": pid})
        except Exception:  # the database away: the lease brings it back in time anyway
            log.exception("could not hand the dead executor's job back; its lease will")

    async def stop(self, grace: float = 20.0) -> None:
        """SIGTERM: the executor hands its running job back and exits; SIGKILL after `grace`."""
        self._stopping.set()
        process = self.process
        if process and process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), grace)
            except TimeoutError:
                process.kill()
                await process.wait()
        if self._task:
            await self._task


def _signal_name(code: int | None) -> str | None:
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return None
    return None
