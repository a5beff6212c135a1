"""Trouble told once per episode, in one line: what failed, for which job, and why.

An executor meets the same trouble many times in a row: a database away for a minute
fails every claim, completion and heartbeat it tries; a full disk fails every job's
save. Each kind of trouble (claiming, recording a job's end, storing images …) is told
by the first failure of an episode — one line, naming the job — and its repeats go to
debug, counted, until one succeeds: that says it works again and how many failed
meanwhile. Every job's own outcome is still recorded on the job.

Which level: the database unreachable is an info line here, since storage.db warns of
the outage itself (once per outage, for the whole process); trouble of the machine's
that a person can fix and the job survives (a full disk, a store away: `expected`) is a
warning; anything else is a bug, told with its traceback.

Thread-safe: the diffusers engine's finish threads tell through it too.
"""

from __future__ import annotations

import logging
import threading

from storage.db import connection_lost


class Told:
    def __init__(self, log: logging.Logger):
        self.log = log
        self.failing: dict[str, int] = {}  # what -> failures in this episode
        self.lock = threading.Lock()

    def failed(self, what: str, error: BaseException, *, job: int | None = None,
               expected: bool = False) -> None:
        """`what` failed (e.g. "recording the end of a job"), for `job`, because of `error`."""
        with self.lock:
            count = self.failing.get(what, 0)
            self.failing[what] = count + 1
        extra = {"job": job} if job is not None else {}
        for_job = f" (job {job})" if job is not None else ""
        if count:
            self.log.debug("%s failed again%s: %s", what, for_job, error, extra=extra)
        elif connection_lost(error):
            self.log.info("%s failed%s: %s; trying again once the database answers", what,
                          for_job, error, extra=extra)
        elif expected:
            self.log.warning("%s failed%s: %s: %s", what, for_job, type(error).__name__, error,
                             extra=extra)
        else:
            self.log.error("%s failed%s", what, for_job, exc_info=error, extra=extra)

    def worked(self, what: str) -> None:
        """`what` succeeded: an episode of its trouble, if one was under way, is over."""
        with self.lock:
            count = self.failing.pop(what, 0)
        if count:
            self.log.info("%s works again (%d failed meanwhile)", what, count)
