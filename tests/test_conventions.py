"""The names bot's parts agree on: built in bot.conventions, read back the same way."""

from __future__ import annotations

from bot.conventions import (
    batch_key,
    batch_thread,
    digest_key,
    is_job_key,
    is_undelivered_key,
    job_key,
    reply_key,
    thread_of,
    thread_root,
    undelivered_key,
)
from storage.records import Batch, Priority
from tests.conftest import ROOT


def batch(batch_id: int, thread: str | None) -> Batch:
    return Batch(batch_id, "t", "slack:U1", "slack", "C1", thread, Priority.NORMAL, None, 1, {},
                 0.0)


def test_a_batch_thread_is_the_one_its_acceptance_starts():
    assert thread_of(batch(7, None)) == batch_thread(7)
    assert thread_of(batch(7, "1712.000100")) == "1712.000100"  # submitted in a thread
    assert thread_root(batch_thread(7)) == batch_key(7, "accepted")
    assert thread_root("1712.000100") is None  # already the platform's own thread


def test_keys_tell_what_they_are_about():
    assert batch_key(3, "summary:results") == "batch:3:summary:results"
    assert is_job_key(job_key(9, "image:0")) and not is_job_key(batch_key(9, "progress"))
    assert reply_key("slack", "C1:1712.1", 0) != reply_key("slack", "C1:1712.1", 1)
    notice = undelivered_key(job_key(9, "image:0"))
    assert is_undelivered_key(notice) and not is_undelivered_key(job_key(9, "image:0"))
    assert digest_key("slack:C1", "2026-12-03") != digest_key("slack:C1", "2026-12-04")


def test_each_convention_is_spelled_in_one_place():
    """The strings live in their module only: storage knows no chat convention, and no
    other module builds an outbox key, an output folder or a stop reason by hand."""
    owners = {'"@batch:': "bot/conventions.py", 'f"batch:{': "bot/conventions.py",
              'f"job:{': "bot/conventions.py", '":undelivered"': "bot/conventions.py",
              '"outputs/batch_': "storage/files.py", '/batch_{': "storage/files.py",
              '"lease lost"': "executor/engine.py"}
    for text, owner in owners.items():
        found = sorted(str(p.relative_to(ROOT))
                       for pkg in ("bot", "executor", "storage", "templates")
                       for p in (ROOT / pkg).rglob("*.py") if text in p.read_text(encoding="utf-8"))
        assert found in ([owner], []), (text, found)
    storage = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "storage").rglob("*.py"))
    assert "@batch" not in storage
