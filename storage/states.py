"""A job's states and how it moves between them: the one table every statement, check
and front reads.

`STATES` says what each state is (does it still count against limits and keep its batch
open; has it ended for good); `MOVES` says where each change takes a job in each state;
a change a state has no row for leaves the job as it is (a late answer from an executor
that lost its lease, a cancel of a finished job). `CANCEL_WINS`: a cancel asked of a
running job does not stop it at once (its executor sees the request between steps) but
wins over however it would otherwise end.

The SQL of storage.queries is written with these names ({queued}, {active},
{terminal}, {cancel_wins}) and filled from here as it loads; migration 0021 makes the
database refuse any other status; tests/test_queue_model.py walks random changes
through both backends against `after`. Adding a state: docs/architecture.md, "a job
state".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


class Status(StrEnum):
    """A job's state, as stored in jobs.status (and read by every front)."""
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


class Change(StrEnum):
    """What can happen to a job (the events of the table)."""
    CLAIM = "claim"  # an executor takes it (or starts the job it claimed ahead)
    SUCCEED = "succeed"  # its images are written
    RETRY = "retry"  # it failed, may be tried again, and has attempts left
    FAIL = "fail"  # it failed for good (not to be retried, or no attempt left)
    RELEASE = "release"  # its executor stops and hands it back (no attempt used)
    EXPIRE = "expire"  # its executor stopped heartbeating; it has attempts left
    EXPIRE_SPENT = "expire_spent"  # ... and it has used all its attempts
    HAND_BACK = "hand_back"  # an operator hands a stuck job back (no attempt used)
    CANCEL = "cancel"  # someone cancels it


@dataclass(frozen=True)
class State:
    active: bool  # waiting or running: counts against queue limits, keeps its batch open
    terminal: bool  # ended for good: no change moves it again
    working: bool = False  # an executor runs it now: its steps show as they come
    produced: bool = False  # it ended with its images: they may be kept and acted on


STATES: dict[Status, State] = {
    Status.QUEUED: State(active=True, terminal=False),
    Status.RUNNING: State(active=True, terminal=False, working=True),
    Status.SUCCEEDED: State(active=False, terminal=True, produced=True),
    Status.FAILED: State(active=False, terminal=True),
    Status.CANCELED: State(active=False, terminal=True),
}

MOVES: dict[tuple[Status, Change], Status] = {
    (Status.QUEUED, Change.CLAIM): Status.RUNNING,
    (Status.QUEUED, Change.CANCEL): Status.CANCELED,
    (Status.RUNNING, Change.SUCCEED): Status.SUCCEEDED,
    (Status.RUNNING, Change.RETRY): Status.QUEUED,
    (Status.RUNNING, Change.FAIL): Status.FAILED,
    (Status.RUNNING, Change.RELEASE): Status.QUEUED,
    (Status.RUNNING, Change.EXPIRE): Status.QUEUED,
    (Status.RUNNING, Change.EXPIRE_SPENT): Status.FAILED,
    (Status.RUNNING, Change.HAND_BACK): Status.QUEUED,
    (Status.RUNNING, Change.CANCEL): Status.RUNNING,  # asked; it ends as CANCEL_WINS says
}

# How a job an executor holds but is not on yet is shown (never stored): claimed ahead
# (still queued), or started with its group (running) while the executor works through
# the group one job at a time. What /queue, the dashboard and /metrics call it.
NEXT = "next"

# A running job asked to cancel ends here at its next change, whatever that change is.
CANCEL_WINS = Status.CANCELED

# The end a job's own run decides, as the job.succeeded and job.failed webhooks say it.
Outcome = Literal["succeeded", "failed"]

TERMINAL = frozenset(s for s, state in STATES.items() if state.terminal)
ACTIVE = frozenset(s for s, state in STATES.items() if state.active)


def after(status: Status, change: Change, *, cancel_asked: bool = False) -> Status:
    """Where `change` takes a job in `status` (itself where the table has no row).
    `cancel_asked`: a cancel was asked of it while it ran."""
    moved = MOVES.get((status, change))
    if moved is None:
        return status
    if cancel_asked and status == Status.RUNNING and change != Change.CANCEL:
        return CANCEL_WINS
    return moved
