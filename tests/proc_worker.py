"""A queue client in its own OS process, for the crash, fencing, concurrency and
durability tests. It reports what it did, one line at a time, on stdout (flushed),
so the test knows exactly how far it got when it is killed.

  drain   claim and complete until the queue stays empty; "ran JOB ATTEMPT" per job
  hold    claim one job, say "claimed JOB", then sleep (to be SIGKILLed)
  stall   claim one job, say "claimed JOB", wait for a line on stdin (the test
          SIGSTOPs and SIGCONTs it meanwhile), then heartbeat and complete it,
          saying what each returned
  --ahead as an executor does: hold the next job claimed ahead while one "runs" (drain:
          each completion claims the next ahead in the same round trip, then starts it;
          hold and stall: claim one more ahead and say "ahead JOB")
  wait    wait for work (poll interval 60 s), then claim; "claimed JOB"
  enqueue submit 50-job batches forever; "acked BATCH" after each commit
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from storage.config import QueueConfig
from storage.db import Database
from storage.queue import Claim, NewJob, Queue, Submission


def say(*parts) -> None:
    print(*parts, flush=True)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("mode", choices=["drain", "hold", "stall", "wait", "enqueue"])
    p.add_argument("--owner", default="worker")
    p.add_argument("--lease", type=float, default=30.0)
    p.add_argument("--idle-exit", type=float, default=1.0,
                   help="drain: stop after the queue was empty this long")
    p.add_argument("--ahead", action="store_true", help="claim the next job ahead")
    args = p.parse_args()
    settings = QueueConfig(lease_seconds=args.lease, heartbeat_seconds=args.lease / 4,
                           max_queue_size=10_000_000, poll_interval=60.0)
    db = await Database(args.url).open()
    queue = Queue(db, settings)
    say("ready")
    try:
        if args.mode == "drain":
            idle_since = None
            loop = asyncio.get_running_loop()
            lease = None
            while True:
                lease = lease or await queue.claim(args.owner)
                if lease is None:
                    idle_since = idle_since or loop.time()
                    if loop.time() - idle_since > args.idle_exit:
                        break
                    await asyncio.sleep(0.02)
                    continue
                idle_since = None
                say("ran", lease.job_id, lease.attempts)
                ran, outputs = lease.job_id, [f"{lease.job_id}.png"]
                if args.ahead:
                    status, ahead = await queue.complete_and_claim(
                        lease, outputs, Claim(args.owner, ahead=True))
                    started = await queue.start([ahead]) if ahead else []
                    lease = started[0] if started else None
                else:
                    status, lease = await queue.complete(lease, outputs), None
                if status is None:
                    say("lost", ran)
        elif args.mode in ("hold", "stall"):
            while (lease := await queue.claim(args.owner)) is None:
                await asyncio.sleep(0.05)
            say("claimed", lease.job_id, lease.attempts)
            ahead = await queue.claim(args.owner, ahead=True) if args.ahead else None
            if ahead:
                say("ahead", ahead.job_id, ahead.attempts)
            if args.mode == "hold":
                await asyncio.sleep(3600)
            await asyncio.to_thread(sys.stdin.readline)
            state = await queue.heartbeat(lease)
            say("heartbeat", "held" if state.held else "lost")
            if ahead:
                say("start", len(await queue.start([ahead])))
            say("complete", await queue.complete(lease, ["stale.png"]))
        elif args.mode == "wait":
            await queue.wait_for_work()  # starts listening
            say("listening")
            while (lease := await queue.claim(args.owner)) is None:
                await queue.wait_for_work()
            say("claimed", lease.job_id)
        elif args.mode == "enqueue":
            while True:
                result = await queue.enqueue(Submission(
                    "t", "burst", [NewJob(i, {"i": i}) for i in range(50)]))
                say("acked", result.batch_id)
    finally:
        await queue.close()


if __name__ == "__main__":
    asyncio.run(main())
