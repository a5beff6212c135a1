"""Webhook fan-out benchmark: events of a finished batch owed and delivered to local
receivers. Prints figures; asserts nothing. Record results in docs/benchmarks.md.

  python bench/webhook_bench.py [--events 1000] [--endpoints 3] [--rounds 2]

A batch of `--events` − 2 jobs is queued and finished on a SQLite queue (so the event log
holds its batch.queued, a job.succeeded per job and its batch.finished: `--events` in
all); then the webhook service starts and the clock runs until every receiver (real
HTTP servers on loopback, each checking every signature with its own HMAC code) has
taken every event. Beside it, in the same run, the same log delivered to one endpoint:
the ratio says what fanning out costs. Target: 1,000 events to 3 endpoints in < 5 s.
Rounds alternate the two sides, so drift on a noisy machine hits both.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.app.application import Accepted, App, SubmitOptions, load_templates  # noqa: E402
from bot.app.permissions import Who  # noqa: E402
from bot.intake.check import SheetFile  # noqa: E402
from bot.webhooks.endpoints import new_secret  # noqa: E402
from bot.webhooks.service import WebhookService  # noqa: E402
from storage import config as cfg  # noqa: E402
from storage.files import open_store  # noqa: E402
from storage.queue import open_queue  # noqa: E402
from tests.fakes.webhooks import Receiver  # noqa: E402

ME = Who("cli", "bench")


async def fan_out(events: int, endpoints: int) -> float:
    """Seconds from the webhook service's start until every receiver took every event."""
    receivers = [await Receiver(new_secret()).start() for _ in range(endpoints)]
    folder = tempfile.mkdtemp(prefix="genbot-webhook-bench-")
    config = cfg.from_dict({
        "service": {"data_dir": folder}, "chat": {"admins": ["cli:bench"]},
        "intake": {"assets_dir": str(ROOT / "examples" / "assets")},
        "webhooks": [{"name": f"r{i}", "url": r.url, "secret": r.secret}
                     for i, r in enumerate(receivers)]})
    queue = await open_queue(config)
    try:
        app = App(config, queue, open_store(config), load_templates(config))
        hooks = WebhookService(app)
        await hooks.announcer.start()
        rows = "".join(f"bottle.png,caption {i}\n" for i in range(events - 2))
        done = await app.submit(ME, "social_thumb", SheetFile("b.csv", (
            "image,title\n" + rows).encode()), options=SubmitOptions(wait_for_executor=True))
        assert isinstance(done, Accepted), done
        while (lease := await queue.claim("bench")) is not None:
            await queue.complete(lease, [])
        start = time.perf_counter()
        await hooks.start()
        try:
            async with asyncio.timeout(600):
                while any(len(r.accepted) < events for r in receivers):
                    await asyncio.sleep(0.01)
        finally:
            await hooks.stop()
        took = time.perf_counter() - start
        assert all(r.bad_signatures == 0 and r.duplicates == 0 for r in receivers)
        return took
    finally:
        await queue.close()
        for r in receivers:
            await r.stop()


async def main(args) -> None:
    wide, one = [], []
    for n in range(args.rounds):
        pair = [(wide, args.endpoints), (one, 1)]
        for into, endpoints in pair if n % 2 == 0 else pair[::-1]:
            into.append(await fan_out(args.events, endpoints))
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, SQLite")
    rate = args.events * args.endpoints / statistics.median(wide)
    print(f"{args.events:,} events to {args.endpoints} endpoints: median "
          f"{statistics.median(wide):.3f} s ({rate:,.0f} deliveries/s); to 1 endpoint: "
          f"{statistics.median(one):.3f} s")
    print(f"fan-out {args.endpoints}/1 x{statistics.median(wide) / statistics.median(one):.2f} "
          f"(rounds: {', '.join(f'{w:.3f}' for w in wide)} / "
          f"{', '.join(f'{o:.3f}' for o in one)})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--endpoints", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    asyncio.run(main(parser.parse_args()))
