"""`genbot worker`: one executor process — the loop over one engine.

One process per GPU (the diffusers engine), or per ComfyUI server (`--comfyui URL`):
`genbot worker` anywhere, or a supervised child of `genbot serve` (bot.supervisor runs
`python -m executor.worker`), so a CUDA crash, a segfault or a leak never takes the
chat bot down; a job whose executor died comes back through its lease. Under the
supervisor the executor stops (handing its jobs back) when the service is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import re
import signal
import sys
import warnings

from executor.diffusers import quantizers
from executor.engine import Engine
from executor.loop import EXIT_RECYCLE, Loop
from executor.settings import ExecutorConfig, add_lifetime_options
from storage import config as cfg
from storage.config import DatabaseConfig, ServiceConfig
from storage.logs import setup_logging
from storage.queue import Queue, open_queue
from templates.settings import models

__all__ = ["EXIT_RECYCLE", "executor_loop", "main", "make_engine", "quiet_libraries", "serve"]

log = logging.getLogger("genbot.executor")


def quiet_libraries() -> None:
    """Strictly offline, and no progress bars or chatter from the libraries."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore", module="peft")
    warnings.filterwarnings("ignore", category=FutureWarning)
    for name in ("diffusers", "transformers", "peft", "accelerate", "huggingface_hub"):
        logging.getLogger(name).setLevel(logging.ERROR)


def make_engine(config: cfg.Config, comfyui: str | None = None) -> Engine:
    """The engine this process runs: a ComfyUI server's, or genbot's own on a GPU."""
    if comfyui:
        from executor.comfyui.engine import ComfyEngine
        return ComfyEngine(config, comfyui)
    from executor.diffusers.engine import DiffusersEngine
    return DiffusersEngine(config)


def executor_loop(config: cfg.Config, queue: Queue, *, comfyui: str | None = None,
                  owner: str | None = None) -> Loop:
    """An executor: the loop over its engine (not started)."""
    engine = make_engine(config, comfyui)
    return Loop(config, queue, engine, owner)


async def serve(config: cfg.Config, *, comfyui: str | None = None) -> int:
    queue = await open_queue(config, wait=config[DatabaseConfig].open_wait)
    try:
        loop = executor_loop(config, queue, comfyui=comfyui)
        running = asyncio.get_running_loop()
        # A standalone worker drains (Kubernetes scaling down, a node drained); under
        # `genbot serve` the service is going down: hand back at once. And the service
        # keeps its executor: one that left when idle would only be started again.
        supervised = bool(os.environ.get("GENBOT_SUPERVISOR_PID"))
        grace = 0.0 if supervised else config[ExecutorConfig].drain_seconds
        if supervised:
            loop.settings = dataclasses.replace(loop.settings, exit_when_idle=0.0)
        for sig in (signal.SIGINT, signal.SIGTERM):
            running.add_signal_handler(sig, loop.drain, grace)
        orphan_watch = asyncio.create_task(stop_when_orphaned(loop))
        try:
            return await loop.run()
        finally:
            orphan_watch.cancel()
    finally:
        await queue.close()


async def stop_when_orphaned(loop: Loop) -> None:
    """Under `genbot serve`: stop (handing the job back) if the service process is gone."""
    parent = os.environ.get("GENBOT_SUPERVISOR_PID")
    if not parent:
        return
    while os.getppid() == int(parent):
        await asyncio.sleep(1.0)
    log.warning("the service that started this executor is gone; stopping")
    loop.stopping.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="genbot worker", description="Run one executor.")
    parser.add_argument("--config", help="config file (default: $GENBOT_CONFIG or ./config.toml)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--device", help="override [executor] device, e.g. cuda:1")
    which.add_argument("--comfyui", "--url", dest="comfyui", metavar="URL",
                       help="drive this ComfyUI server instead (http://host:8188)")
    add_lifetime_options(parser)
    args = parser.parse_args(argv)
    if args.comfyui and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", args.comfyui):
        print(f"genbot: {args.comfyui!r} is not a ComfyUI server's address "
              "(http://host:8188)", file=sys.stderr)
        return 2
    if not args.comfyui:
        quiet_libraries()
    env = dict(os.environ)
    if args.device:
        env["GENBOT_EXECUTOR_DEVICE"] = args.device
    if args.exit_when_idle is not None:
        env["GENBOT_EXECUTOR_EXIT_WHEN_IDLE"] = str(args.exit_when_idle)
    if args.drain_seconds is not None:
        env["GENBOT_EXECUTOR_DRAIN_SECONDS"] = str(args.drain_seconds)
    try:
        config = cfg.load(args.config, env)
        setup_logging(config[ServiceConfig].log_level, config[ServiceConfig].log_format)
        if not args.comfyui:  # (this process is the executor: nothing imported diffusers yet)
            left = quantizers.leave_unused(e.quantize for e in models(config).values())
            if left:
                log.info("not loading %s: no model is quantized with them", ", ".join(left))
        return asyncio.run(serve(config, comfyui=args.comfyui))
    except cfg.ConfigError as e:
        print(f"genbot: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
