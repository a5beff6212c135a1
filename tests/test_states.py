"""The transition table (storage.states) is whole and consistent: what the SQL, the
database's CHECK and every front are built from. (tests/test_queue_model.py walks it
through both backends.)"""

from __future__ import annotations

from storage.states import (
    ACTIVE,
    CANCEL_WINS,
    MOVES,
    STATES,
    TERMINAL,
    Change,
    Status,
    after,
)


def test_every_state_is_described_once_and_is_active_or_ended():
    assert set(STATES) == set(Status)
    assert set(Status) == ACTIVE | TERMINAL and not ACTIVE & TERMINAL


def test_an_ended_job_never_moves_and_every_waiting_job_can_end():
    assert not [key for key in MOVES if key[0] in TERMINAL]
    for status in ACTIVE:
        reach, seen = {status}, set()
        while reach - seen:
            state = (reach - seen).pop()
            seen.add(state)
            reach |= {to for (at, _), to in MOVES.items() if at == state}
        assert reach & TERMINAL, f"{status} can never end"
    assert CANCEL_WINS in TERMINAL


def test_a_cancel_asked_of_a_running_job_wins_over_however_it_ends():
    assert after(Status.RUNNING, Change.CANCEL, cancel_asked=True) == Status.RUNNING
    for change in Change:
        if change != Change.CANCEL and (Status.RUNNING, change) in MOVES:
            assert after(Status.RUNNING, change, cancel_asked=True) == CANCEL_WINS
    assert after(Status.QUEUED, Change.CANCEL) == Status.CANCELED


def test_a_change_with_no_row_leaves_the_job_as_it_is():
    assert after(Status.SUCCEEDED, Change.FAIL) == Status.SUCCEEDED  # a late answer
    assert after(Status.QUEUED, Change.SUCCEED) == Status.QUEUED  # a lease lost
