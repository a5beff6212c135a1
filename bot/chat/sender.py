"""The sender: posts what the outbox owes on one platform, and marks it sent.

One sender per platform, so a rate-limited Slack never holds up DingTalk. Each round
takes the due messages — at most the oldest of each thread, so threads stay in order —
and posts them concurrently (different threads only). A message the platform refuses
for now goes back: after its Retry-After (a rate limit: no attempt used), or with a
doubling backoff (5xx, a timeout); one it refuses for good, or that fails `attempts`
times, is recorded as failed and reported in its conversation. Progress messages are
edited in place where the platform can, at most every `progress_every` seconds.

A crash between posting and marking sent posts that one message again on restart:
at least once, in normal operation exactly once. A stop is normal operation: `close`
lets the posts under way finish and be marked (within a grace) before anything is
cancelled, so a message the platform took is never owed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable

import aiohttp

from bot.chat.platform import Button, DeliveryError, Outgoing, Platform
from bot.conventions import is_job_key, is_undelivered_key, thread_root, undelivered_key
from bot.messages import say
from storage.files import FileStore
from storage.logs import Retrying
from storage.outbox import CLAIM_SECONDS, Outbox
from storage.records import Message

log = logging.getLogger("genbot.sender")
TIMEOUT = 120.0  # seconds one platform call may take before it counts as a failed try


class Sender:
    def __init__(self, outbox: Outbox, platform: Platform, store: FileStore, *,
                 attempts: int = 12, progress_every: float = 3.0, concurrency: int = 4,
                 claim_seconds: float = CLAIM_SECONDS, clock: Callable[[], float] = time.time):
        self.outbox, self.platform, self.store = outbox, platform, store
        self.claim_seconds = claim_seconds
        self.attempts, self.progress_every, self.clock = attempts, progress_every, clock
        self.limit = asyncio.Semaphore(concurrency)
        self.wake = asyncio.Event()
        self.inflight: set[int] = set()  # a round started while another still posts skips these
        self.closing = False  # stopping: no new post starts; those under way finish

    async def run_once(self, limit: int = 50) -> int:
        """Post every message due now (one per thread); returns how many were tried."""
        due = await self.outbox.due(self.platform.name, limit)
        await asyncio.gather(*(self.deliver(m) for m in due))
        return len(due)

    async def run(self, idle: float = 1.0) -> None:
        """Forever: deliver, then sleep until the next message falls due or `wake` is set."""
        retrying = Retrying(log, f"sender {self.platform.name}: reading the outbox")
        while not self.closing:
            try:
                if await self.run_once():
                    retrying.worked()
                    continue
                next_at = await self.outbox.next_due(self.platform.name)
                retrying.worked()
            except Exception as e:  # noqa: BLE001 - the database away for a moment: try again shortly
                retrying.failed(e)
                next_at = None
            wait = idle if next_at is None else min(idle, max(0.0, next_at - self.clock()))
            self.wake.clear()
            with contextlib.suppress(TimeoutError):  # (asyncio.timeout: see Waker.wait)
                async with asyncio.timeout(max(wait, 0.05)):
                    await self.wake.wait()

    def close(self) -> None:
        """Stop starting posts; `run` returns once those under way are marked."""
        self.closing = True
        self.wake.set()

    async def deliver(self, m: Message) -> None:
        if m.id in self.inflight or self.closing:
            return
        self.inflight.add(m.id)
        try:
            held = await self.outbox.claim(m, self.claim_seconds)
            if held is None:  # another round or service has it
                return
            holding = asyncio.create_task(self.hold(m, held))
            try:
                await self._deliver(m)
            finally:
                holding.cancel()
        finally:
            self.inflight.discard(m.id)

    async def hold(self, m: Message, held: float) -> None:
        """Renew the claim on m while it is being sent, however long an upload takes; a
        sender that dies stops renewing, and m falls due again soon after."""
        while True:
            await asyncio.sleep(self.claim_seconds / 3)
            try:
                renewed = await self.outbox.renew(m, held, self.claim_seconds)
            except Exception:  # the database away for a moment: the claim has time left
                log.warning("sender %s: could not renew the claim on %s", self.platform.name,
                            m.key, exc_info=True)
                continue
            if renewed is None:
                return
            held = renewed

    async def _deliver(self, m: Message) -> None:
        async with self.limit:
            try:
                out = await self.outgoing(m)
                captioned = self.platform.captions and (out.image or self.platform.file_captions)
                if out.file is not None and out.text and not captioned:
                    if m.platform_id is None:  # the caption goes first, once
                        first = await asyncio.wait_for(self.platform.send(
                            dataclasses.replace(out, file=None, image=False)), TIMEOUT)
                        await self.outbox.mark(m, first)
                    out = dataclasses.replace(out, text="")
                # A progress message posted already is edited in place, where it can be.
                edit = m.platform_id if m.kind == "progress" and self.platform.can_edit else None
                call = self.platform.edit(edit, out) if edit else self.platform.send(out)
                sent_id = await asyncio.wait_for(call, TIMEOUT)
            except DeliveryError as e:
                await self.failed_try(m, e.reason, e.retry_after, e.permanent)
                return
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                await self.failed_try(m, f"{type(e).__name__}: {e}"[:500], None, False)
                return
            except Exception as e:  # a bug in an adapter: keep trying, then record it
                log.exception("sender %s: %s failed", self.platform.name, m.key)
                await self.failed_try(m, f"{type(e).__name__}: {e}"[:500], None, False)
                return
            if edit:
                sent_id = edit
            hold = self.progress_every if m.kind == "progress" else 0.0
            await self.outbox.sent(m, sent_id, hold=hold)
            for path in m.payload.get("delete_after") or ():
                await asyncio.to_thread(self.store.delete, path)

    async def outgoing(self, m: Message) -> Outgoing:
        p = m.payload
        thread = await self.thread(m)
        path = p.get("path")
        mention = p.get("mention")
        text = p.get("text", "")
        if not self.platform.has_threads and p.get("batch") and is_job_key(m.key):
            # no thread says it
            text = say("batch_prefix", p.get("lang", "en"), batch=p["batch"]) + text
        return Outgoing(
            conversation=m.conversation, thread=thread, text=text,
            file=await asyncio.to_thread(self.store.path, path) if path else None,
            files=tuple([await asyncio.to_thread(self.store.path, f)
                         for f in p.get("paths") or ()]),
            image=m.kind == "image",
            mention=mention.split(":", 1)[1] if mention and ":" in mention else mention,
            buttons=tuple(Button.of(b) for b in p.get("buttons", ()))
            if self.platform.has_buttons or self.platform.inline_buttons else (),
            context=p.get("context") or {}, progress=m.kind == "progress",
            private=bool(p.get("private")), key=m.key)

    async def thread(self, m: Message) -> str | None:
        """The platform's thread id. A batch's thread reference (bot.conventions) is the
        thread its acceptance starts: that message itself posts to the conversation, the
        others under it (the outbox hands them out only after it, being older in the same
        thread)."""
        if not self.platform.has_threads or m.thread is None:
            return None
        root_key = thread_root(m.thread)
        if root_key is None:
            return m.thread
        if m.key == root_key:
            return None
        root = await self.outbox.get(root_key)
        return root.platform_id if root else None  # none: post in the conversation

    async def failed_try(self, m: Message, error: str, retry_after: float | None,
                         permanent: bool) -> None:
        if not permanent and (retry_after is not None or m.attempts + 1 < self.attempts):
            log.info("sender %s: %s not delivered (try %d): %s", self.platform.name, m.key,
                     m.attempts + 1, error)
            await self.outbox.retry(m, error, retry_after)
            return
        log.warning("sender %s: %s failed for good: %s", self.platform.name, m.key, error)
        await self.outbox.failed(m, error)
        if not is_undelivered_key(m.key) and m.kind != "progress":
            lang = m.payload.get("lang", "en")
            what = (say("what_image", lang, row=m.payload["row"]) if m.payload.get("row")
                    else say("what_message", lang))
            await self.outbox.put(undelivered_key(m.key), platform=m.platform,
                                  conversation=m.conversation, thread=m.thread, kind="text",
                                  payload={"text": say("undelivered", lang, what=what,
                                                       error=error[:300]),
                                           "lang": lang, "context": m.payload.get("context")})
