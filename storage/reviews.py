"""An image's review: the one table of its states, as stored in jobs.rating and read by
every front (chat, the API, the dashboard, the results sheet, webhooks).

A finished image is unreviewed until someone approves it (what "keep" has always
stored: approved images are a batch's picks), rejects it (with a reason, or none), or
requests changes (with a note: the change is queued as an edit of the image, or a new
try where no edit model is configured). A batch may be signed off once every image it
made is reviewed. `stars` (1-5) are a separate, finer grade a reviewer may add.

Adding a state: a member here with its stored code, its words in bot/messages.py
(review_<state>, dash_review_<state>), and what it means for sign-off (`reviewed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Review(StrEnum):
    APPROVED = "approved"
    REJECTED = "rejected"
    CHANGES = "changes_requested"
    UNREVIEWED = "unreviewed"


@dataclass(frozen=True)
class ReviewState:
    code: int | None  # jobs.rating; None: NULL
    reviewed: bool  # counts towards sign-off
    pick: bool = False  # the batch's picks (the contact sheet of kept images)
    note: bool = False  # carries words: a reason (may be empty) or a note (must not be)
    note_required: bool = False


REVIEWS: dict[Review, ReviewState] = {
    Review.APPROVED: ReviewState(1, reviewed=True, pick=True),
    Review.REJECTED: ReviewState(-1, reviewed=True, note=True),
    Review.CHANGES: ReviewState(2, reviewed=True, note=True, note_required=True),
    Review.UNREVIEWED: ReviewState(None, reviewed=False),
}
BY_CODE: dict[int | None, Review] = {s.code: r for r, s in REVIEWS.items()}
MAX_NOTE = 500  # characters of a reason or a note
MAX_STARS = 5


def code_of(review: Review) -> int:
    """The stored code of a reviewed state (unreviewed is stored as NULL: not this)."""
    code = REVIEWS[review].code
    if code is None:
        raise ValueError(f"{review} is stored as NULL, not a code")
    return code


def review_of(code: int | None) -> Review:
    """The state a stored rating stands for (an unknown code reads as unreviewed)."""
    return BY_CODE.get(code, Review.UNREVIEWED)

# The queue's event log kinds a batch's sign-off writes (the announcer and the chat read them).
SIGNED_OFF = "signed_off"
REOPENED = "reopened"
