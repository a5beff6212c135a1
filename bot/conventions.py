"""The names bot's parts agree on, in one place: outbox keys, thread references and
where the API lives.

The notifier owes messages under these keys and the sender reads them back; a key is
what makes owing a message twice a no-op, so each is built here and nowhere else.

A thread reference is where a batch's messages go before the platform has a thread id
for them: "@batch:N" is the thread that batch N's acceptance message starts. The sender
resolves it once that message is posted (its platform id is the thread).

Two conventions live with the layer that owns them: where a batch's files go in the
output store (storage.files.batch_folder), and why a running job stops
(executor.diffusers.runner.Stop).
"""

from __future__ import annotations

from storage.records import Batch

API_PREFIX = "/api/v1"  # the REST API's paths, and the links webhooks carry
_BATCH_THREAD = "@batch:"
_UNDELIVERED = ":undelivered"


# --- outbox keys --------------------------------------------------------------------------

def batch_key(batch_id: int, what: str) -> str:
    """A message about a whole batch: accepted, progress, milestone:25, summary …"""
    return f"batch:{batch_id}:{what}"


def webhook_key(endpoint: str, event_type: str, subject: str) -> str:
    """An event owed to one webhook endpoint: subject b7 (batch 7), j12 (job 12) …"""
    return f"webhook:{endpoint}:{event_type}:{subject}"


def job_key(job_id: int, what: str) -> str:
    """A message about one job: image:0, failed."""
    return f"job:{job_id}:{what}"


def is_job_key(key: str) -> bool:
    return key.startswith("job:")


def subject_of(key: str) -> tuple[str, int] | None:
    """("batch", N) or ("job", N): what a message owed under `key` is about."""
    kind, _, rest = key.partition(":")
    number = rest.split(":", 1)[0]
    return (kind, int(number)) if kind in ("batch", "job") and number.isdigit() else None


def reply_key(platform: str, message: str, index: int) -> str:
    """The `index`th reply to a person's message: a retried webhook owes nothing new."""
    return f"reply:{platform}:{message}:{index}"


def digest_key(where: str, day: str) -> str:
    """The daily digest for `where` (platform:conversation) on `day`: owed once a day."""
    return f"digest:{where}:{day}"


def undelivered_key(key: str) -> str:
    """The notice that the message under `key` could not be delivered."""
    return key + _UNDELIVERED


def is_undelivered_key(key: str) -> bool:
    return key.endswith(_UNDELIVERED)


# --- thread references --------------------------------------------------------------------

def batch_thread(batch_id: int) -> str:
    """The thread batch `batch_id`'s acceptance message starts."""
    return f"{_BATCH_THREAD}{batch_id}"


def thread_of(batch: Batch) -> str:
    """Where a batch's messages go: the thread it was submitted in, else the one its
    acceptance starts."""
    return batch.thread or batch_thread(batch.id)


def thread_root(thread: str) -> str | None:
    """The outbox key of the message that starts a referenced thread; None when `thread`
    is already the platform's own thread id."""
    if not thread.startswith(_BATCH_THREAD):
        return None
    return batch_key(int(thread.removeprefix(_BATCH_THREAD)), "accepted")
