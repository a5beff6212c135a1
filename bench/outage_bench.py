"""The outage drill, run over and over: PostgreSQL cut, restarted and crashed under a
working fleet (tests/fakes/drill.py), with real `genbot serve --no-executor` and two
`genbot worker` processes on the demo models. Record results in docs/benchmarks.md.

  python bench/outage_bench.py [--runs 20] [--rows 12] [--steps 6] [--lease 6]
                               [--heartbeat 1.5] [--down 12] [--quick]

Each run: a database of its own on one private cluster, the processes started afresh,
`--rows` product_main rows of `--steps` steps; once 2, 4 and 6 jobs have succeeded:
every connection cut, `pg_ctl restart -m fast`, then `pg_ctl stop -m immediate` with
the server away `--down` seconds (longer than the lease and than a statement's 10 s
patience); then SIGTERM to every process.

Reported per run and over all runs: whether every job succeeded exactly once, the
processes' exits, tracebacks in any log, jobs stranded, the attempts jobs took, and how
long after the server came back from the crash the first job completed and the batch
finished. Exits 1 if any run broke a promise (the suite runs it with --quick).
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
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from tests.fakes.drill import Drill  # noqa: E402
from tests.fakes.pgcluster import PgCluster  # noqa: E402


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return (f"median {statistics.median(values):.2f} s, min {min(values):.2f}, "
            f"max {max(values):.2f}")


async def main(args: argparse.Namespace) -> int:
    from executor.models import demo
    from executor.worker import quiet_libraries
    quiet_libraries()
    folder = Path(tempfile.mkdtemp(prefix="genbot-outage-"))
    models = folder / "models" / "demo"
    demo.place(models, args.demo_models)
    print(f"outage drill: {args.runs} run(s) of {args.rows} rows ({args.steps} steps), "
          f"lease {args.lease:g} s, heartbeat {args.heartbeat:g} s, server away "
          f"{args.down:g} s; {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    attempts: Counter = Counter()
    recovery, drained, took = [], [], []
    failed = 0
    with PgCluster() as cluster:
        for run in range(1, args.runs + 1):
            here = folder / f"run{run}"
            here.mkdir()
            result = await Drill(here, models, cluster=cluster, rows=args.rows,
                                 steps=args.steps, lease=args.lease, heartbeat=args.heartbeat,
                                 down=args.down, every=max(1, args.rows // 6)).run()
            attempts += result.attempts
            took.append(result.seconds)
            if result.recovery is not None:
                recovery.append(result.recovery)
            if result.drained is not None:
                drained.append(result.drained)
            status = "ok" if result.ok else "BROKEN: " + "; ".join(result.problems())
            failed += not result.ok
            print(f"run {run:2}: {status}; attempts {dict(sorted(result.attempts.items()))}, "
                  f"re-runs {result.reruns}, first job {result.recovery or 0:.2f} s and "
                  f"batch done {result.drained or 0:.2f} s after the server was back, "
                  f"exits {sorted(set(result.exits.values()), key=str)}, "
                  f"{result.seconds:.0f} s", flush=True)
            if not result.ok:
                print(f"  logs kept in {here}")
    jobs = sum(attempts.values())
    print(f"\nruns without a broken promise: {args.runs - failed}/{args.runs}")
    print(f"attempts per job over {jobs} jobs: "
          + ", ".join(f"{n}: {k} ({k / jobs:.0%})" for n, k in sorted(attempts.items())))
    print(f"first job completed after the server was back: {spread(recovery)}")
    print(f"batch finished after the server was back: {spread(drained)}")
    print(f"one drill (processes started to stopped): {spread(took)}")
    print(f"every job succeeded exactly once: {'yes' if not failed else 'NO'}")
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rows", type=int, default=12)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--lease", type=float, default=6.0)
    parser.add_argument("--heartbeat", type=float, default=1.5)
    parser.add_argument("--down", type=float, default=12.0)
    parser.add_argument("--demo-models", type=Path, help="demo models built before (a data "
                        "folder's models/demo): linked, not built again")
    parser.add_argument("--quick", action="store_true",
                        help="one short run (the suite's smoke test): 6 rows of 2 steps, "
                             "lease 3 s, server away 11 s (past the lease and the 10 s "
                             "patience of a statement, as in the full drill)")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.rows, args.steps, args.lease, args.heartbeat, args.down = \
            1, 6, 2, 3.0, 0.75, 11.0
    started = time.monotonic()
    code = asyncio.run(main(args))
    print(f"({time.monotonic() - started:.0f} s)")
    sys.exit(code)
