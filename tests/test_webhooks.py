"""Outgoing webhooks: signed per Standard Webhooks, owed from the event log into the durable
outbox, delivered at least once under one webhook-id, backed off, disabled by 410, and
refused for private callback addresses. Receivers are real HTTP servers on loopback that
check signatures with their own code (tests/fakes/webhooks.py)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import io
import json
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import aiohttp
import msgspec
import pytest
from aiohttp.abc import AbstractResolver
from PIL import Image
from standardwebhooks.webhooks import Webhook

from bot.app.application import App, SubmitOptions, load_templates
from bot.app.permissions import Who
from bot.errors import Invalid, Refused
from bot.webhooks.delivery import backoff
from bot.webhooks.endpoints import new_secret
from bot.webhooks.payloads import EVENTS
from bot.webhooks.service import WebhookService
from storage import config as cfg
from storage.config import ConfigError
from storage.files import open_store
from storage.queue import open_queue
from tests.conftest import FakeClock
from tests.fakes.apps import ALICE, BOSS, PRODUCTS, pictures
from tests.fakes.webhooks import Receiver, verify

SPEC = {"secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "timestamp": 1614265330, "body": '{"test": 2432232314}',
        "signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}
DAY = 86_400.0


def test_signatures_match_the_specifications_published_example():
    """The example of the Standard Webhooks specification, signed by the package genbot
    uses and checked by the receiver's own HMAC code."""
    at = datetime.fromtimestamp(SPEC["timestamp"], UTC)
    assert Webhook(SPEC["secret"]).sign(SPEC["id"], at, SPEC["body"]) == SPEC["signature"]
    headers = {"webhook-id": SPEC["id"], "webhook-timestamp": str(SPEC["timestamp"]),
               "webhook-signature": f"v1,bm90IHRoaXMgb25l {SPEC['signature']}"}  # rotated keys
    assert verify(SPEC["secret"], headers, SPEC["body"].encode(), now=SPEC["timestamp"] + 60)
    assert not verify(SPEC["secret"], headers, SPEC["body"].encode() + b" ",
                      now=SPEC["timestamp"])
    assert not verify(SPEC["secret"], headers, SPEC["body"].encode(),
                      now=SPEC["timestamp"] + 301)  # stale: a replayed request


def test_backoff_grows_fivefold_with_jitter_up_to_six_hours_and_spans_a_day():
    assert [round(backoff(n, lambda: 0.5)) for n in range(7)] == \
        [5, 25, 125, 625, 3125, 15625, 21600]
    assert backoff(0, lambda: 0.0) == pytest.approx(4.0) and \
        backoff(0, lambda: 1.0) == pytest.approx(6.0)
    tries, waited = 0, 0.0
    while waited < DAY:
        waited += backoff(tries, lambda: 0.0)
        tries += 1
    assert 8 <= tries <= 12  # a day of retries is about ten tries, not hundreds


@pytest.mark.parametrize("entry, says", [
    ({"url": "ftp://x.example/h", "secret": SPEC["secret"]}, "url: expected http(s)"),
    ({"url": "https://x.example/h", "secret": "hunter2"}, "secret: expected whsec_"),
    ({"url": "https://x.example/h", "secret": SPEC["secret"], "events": ["batch.done"]},
     "events: expected a list of batch.queued"),
    ({"url": "https://x.example/h", "secret": SPEC["secret"], "evnts": []},
     "did you mean events?"),
])
def test_a_bad_webhooks_entry_stops_start_up_naming_it(entry, says):
    with pytest.raises(ConfigError, match="webhooks\\]\\] #1") as e:
        cfg.from_dict({"webhooks": [entry]})
    assert says in str(e.value)


def test_an_entrys_secret_may_come_from_the_environment():
    config = cfg.from_dict({"webhooks": [{"url": "https://x.example/h", "name": "dam"}]},
                           env={"GENBOT_WEBHOOKS_SECRET_DAM": SPEC["secret"]})
    (entry,) = config.webhooks.entries
    assert (entry.id, entry.secret) == ("dam", SPEC["secret"])


class Pinned(AbstractResolver):
    """DNS that answers each name from a script: the first answer, then the next …"""

    def __init__(self, answers: dict[str, list[str]]):
        self.answers = {name: list(ips) for name, ips in answers.items()}

    async def resolve(self, host, port=0, family=0):
        ips = self.answers[host]
        if not ips:
            raise OSError(f"{host}: no such name")
        ip = ips.pop(0) if len(ips) > 1 else ips[0]
        return [{"hostname": host, "host": ip, "port": port, "family": 2, "proto": 0,
                 "flags": 0}]

    async def close(self):
        pass


@asynccontextmanager
async def world(tmp_path, receivers: dict[str, Receiver], *, clock=None,
                events: dict[str, list[str]] | None = None, deliver: dict | None = None,
                **webhook):
    """An app on a SQLite file with `receivers` as [[webhooks]] (name -> receiver; `events`:
    name -> the events it asks for, default all), and its webhook service (not started:
    tests pump it)."""
    config = cfg.from_dict({
        "service": {"data_dir": str(tmp_path / "data")},
        "chat": {"admins": ["test:BOSS"], "submitters": ["test:ALICE"],
                 "submitter_per_minute": 100},
        "webhook": {"timeout": 2.0, **webhook}, "deliver": deliver or {},
        "webhooks": [{"name": name, "url": r.url, "secret": r.secret,
                      **({"events": events[name]} if events and name in events else {})}
                     for name, r in receivers.items()]})
    clock = clock or FakeClock(datetime.now(UTC).timestamp())
    queue = await open_queue(config, clock=clock)
    try:
        app = App(config, queue, open_store(config), load_templates(config), clock=clock)
        hooks = WebhookService(app)
        await hooks.announcer.start()
        await hooks.shipper.start()
        yield app, hooks
    finally:
        await queue.close()


async def receiver(clock=None, **misbehave) -> Receiver:
    r = Receiver(new_secret(), **misbehave)
    if clock is not None:
        r.now = clock
    return await r.start()


async def submit(app: App, **options) -> int:
    done = await app.submit(ALICE, "product_main", PRODUCTS, pictures,
                            SubmitOptions(wait_for_executor=True, **options))
    return done.batch_id  # type: ignore[union-attr]


async def run_batch(app: App, *, fail_second: bool = False) -> None:
    """Finish the queue's jobs as an executor would: a small image each; the second job
    fails for good when asked."""
    n = 0
    while (lease := await app.queue.claim("test-executor")) is not None:
        n += 1
        if fail_second and n == 2:
            await app.queue.fail(lease, "CUDA out of memory", retry=False)
            continue
        buf = io.BytesIO()
        Image.new("RGB", (32, 32), "red").save(buf, "PNG")
        path = app.store.write(f"outputs/batch_{lease.batch_id}/{lease.job_id}.png",
                               buf.getvalue())
        await app.queue.complete(lease, [path])


async def test_each_endpoint_hears_the_events_it_asked_for_once_signed_and_typed(tmp_path):
    every, finished = await receiver(), await receiver()
    try:
        async with world(tmp_path, {"every": every, "finished": finished},
                         events={"finished": ["batch.finished"]}) as (app, hooks):
            batch = await submit(app)
            await run_batch(app, fail_second=True)
            await hooks.pump()
            assert sorted(b["type"] for b in every.events()) == \
                ["batch.finished", "batch.queued", "job.failed", "job.succeeded"]
            assert [b["type"] for b in finished.events()] == ["batch.finished"]
            (queued,) = every.events("batch.queued")
            assert queued["data"]["batch"] == batch and queued["data"]["jobs"] == 2
            assert queued["data"]["sheet"] == "p.csv"
            (done,) = every.events("batch.finished")
            data = done["data"]
            assert data["jobs"] == 2 and data["counts"] == {
                "queued": 0, "running": 0, "succeeded": 1, "failed": 1, "canceled": 0}
            # the fixed fields before counts, kept until 0.2
            assert (data["succeeded"], data["failed"], data["canceled"]) == (1, 1, 0)
            assert data["summary"].startswith(f"Batch {batch} (product_main) ended in")
            assert data["links"]["results"] == f"/api/v1/batches/{batch}/files/results.xlsx"
            (out,) = data["outputs"]
            assert out["url"] == f"/api/v1/jobs/{out['job']}/outputs/0" and out["row"] == 2
            (failed,) = every.events("job.failed")
            assert failed["data"]["error"] == "CUDA out of memory"
            assert failed["data"]["values"]["sku"] == "A2"
            (made,) = every.events("job.succeeded")  # a sheet's row: made by no action
            assert (made["data"]["action"], made["data"]["parent_job"],
                    made["data"]["instruction"]) == (None, None, None)
            assert done["timestamp"].endswith("Z")
            assert every.bad_signatures == 0 and every.duplicates == 0
            for body in every.events():  # each strictly its documented record
                msgspec.convert(body, EVENTS[body["type"]])

            # A restart replays the log from an older cursor: nothing is owed twice.
            await hooks.outbox.advance("webhooks", 0)
            await hooks.pump()
            assert len(every.attempts) == 4 and len(finished.attempts) == 1

            # An image changed by a sentence: its job.succeeded says the action, the image
            # it was made from and the sentence.
            from bot.app.iterate import ActionRequest
            edited = await app.act(ALICE, made["data"]["job"], ActionRequest(
                "edit", instruction="把背景换成海滩", wait_for_executor=True))
            await run_batch(app)
            await hooks.pump()
            (child,) = [b for b in every.events("job.succeeded")
                        if b["data"]["batch"] == edited.batch_id]
            assert (child["data"]["action"], child["data"]["parent_job"],
                    child["data"]["instruction"]) == ("edit", made["data"]["job"],
                                                      "把背景换成海滩")
            msgspec.convert(child, EVENTS["job.succeeded"])
    finally:
        await every.stop()
        await finished.stop()


async def test_a_receiver_failing_three_times_takes_each_event_exactly_once(tmp_path):
    clock = FakeClock(datetime.now(UTC).timestamp())
    flaky = await receiver(clock, fail_first=3)
    try:
        async with world(tmp_path, {"flaky": flaky}, clock=clock) as (app, hooks):
            await submit(app)
            await hooks.pump()
            for _ in range(4):  # each retry falls due after its backoff, never before
                (d,) = await hooks.webhooks.deliveries(status="pending")
                assert d.message.next_at > clock()
                clock.advance(d.message.next_at - clock() + 0.001)
                await hooks.pump()
                if not await hooks.webhooks.deliveries(status="pending"):
                    break
            assert len(flaky.attempts) == 4
            assert len({a["id"] for a in flaky.attempts}) == 1  # one webhook-id, every try
            assert [b["type"] for b in flaky.events()] == ["batch.queued"]
            (d,) = await hooks.webhooks.deliveries()
            assert (d.message.status, d.message.attempts, d.message.platform_id) == \
                ("sent", 4, "204")
            assert hooks.deliverer.counts == {("flaky", "retried"): 3, ("flaky", "delivered"): 1}
    finally:
        await flaky.stop()


async def test_retries_stop_after_retry_hours_and_redeliver_sends_it_again(tmp_path):
    clock = FakeClock(datetime.now(UTC).timestamp())
    down = await receiver(clock, fail_first=1000)
    try:
        async with world(tmp_path, {"down": down}, clock=clock, retry_hours=1.0) as (app, hooks):
            await submit(app)
            await hooks.pump()
            while pending := await hooks.webhooks.deliveries(status="pending"):
                clock.advance(pending[0].message.next_at - clock() + 0.001)
                await hooks.pump()
            (d,) = await hooks.webhooks.deliveries()
            assert d.message.status == "failed" and "gave up after" in (d.message.error or "")
            assert d.message.attempts == len(down.attempts) < 8
            down.fail_first = 0
            with pytest.raises(Refused):
                await hooks.redeliver(ALICE, d.id)  # admins only
            again = await hooks.redeliver(BOSS, d.id)
            assert again.message.status == "sent" and len(down.accepted) == 1
            assert {a["id"] for a in down.attempts} == {d.message.payload["id"]}
    finally:
        await down.stop()


async def test_410_gone_disables_the_endpoint_until_an_admin_enables_it(tmp_path):
    gone = await receiver(gone=True)
    try:
        async with world(tmp_path, {"gone": gone}) as (app, hooks):
            await submit(app)
            await hooks.pump()
            (state,) = await hooks.endpoints_of(BOSS)
            assert state.endpoint.disabled_at is not None and "410" in \
                (state.endpoint.disabled_reason or "")
            await run_batch(app)
            await hooks.pump()
            assert len(gone.attempts) == 1  # nothing more is sent to it, nor owed
            assert await hooks.webhooks.deliveries(status="pending") == []
            gone.gone = False
            assert await hooks.enable(BOSS, "gone")
            test = await hooks.test(BOSS, "gone")
            assert test.message.status == "sent" and gone.events("webhook.test")
    finally:
        await gone.stop()


async def test_a_hanging_receiver_holds_up_no_other_endpoint(tmp_path):
    hangs, quick = await receiver(hang=30), await receiver()
    try:
        async with world(tmp_path, {"hangs": hangs, "quick": quick}, timeout=5.0) as (app, hooks):
            await hooks.start()
            try:
                await submit(app)
                async with asyncio.timeout(4):  # well inside the hanging one's timeout
                    while not quick.events("batch.queued"):
                        await asyncio.sleep(0.05)
                assert hangs.attempts and not hangs.accepted
            finally:
                await hooks.stop()
    finally:
        await hangs.stop()
        await quick.stop()


async def test_a_429_waits_as_long_as_the_receiver_says_without_using_a_try(tmp_path):
    clock = FakeClock(datetime.now(UTC).timestamp())
    busy = await receiver(clock, retry_after=120)
    try:
        async with world(tmp_path, {"busy": busy}, clock=clock) as (app, hooks):
            await submit(app)
            await hooks.pump()
            (d,) = await hooks.webhooks.deliveries()
            assert d.message.next_at == pytest.approx(clock() + 120)
            assert d.message.attempts == 0 and "HTTP 429" in (d.message.error or "")
    finally:
        await busy.stop()


async def test_a_callback_url_hears_its_own_batch_signed_with_the_callback_secret(tmp_path):
    cb = await receiver()
    try:
        async with world(tmp_path, {}, callback_allowlist=["127.0.0.1"]) as (app, hooks):
            cb.secret = hooks.endpoints.callback_secret
            mine = await submit(app, callback_url=cb.url)
            await submit(app)  # another batch, without a callback
            await run_batch(app)
            await hooks.pump()
            assert {b["data"]["batch"] for b in cb.events()} == {mine}
            assert sorted(b["type"] for b in cb.events()) == \
                ["batch.finished", "batch.queued", "job.succeeded", "job.succeeded"]
            assert cb.bad_signatures == 0
            (state,) = await hooks.endpoints_of(BOSS)
            assert state.endpoint.kind == "callback" and state.counts == {"sent": 4}
    finally:
        await cb.stop()


@pytest.mark.parametrize("url, code", [
    ("http://127.0.0.1:9/hook", "callback_url_private"),
    ("http://[::1]/hook", "callback_url_private"),
    ("http://[::ffff:127.0.0.1]/hook", "callback_url_private"),
    ("http://169.254.169.254/latest/meta-data/", "callback_url_private"),
    ("http://10.1.2.3/hook", "callback_url_private"),
    ("http://inside.example/hook", "callback_url_private"),  # a name for a private address
    ("file:///etc/passwd", "callback_url_bad"),
    ("http://user:pw@hooks.example/hook", "callback_url_bad"),
    ("http://hooks.example:99999/hook", "callback_url_bad"),
    ("http://nowhere.example/hook", "callback_url_unresolved"),
])
async def test_a_callback_to_a_private_address_is_refused_before_anything_queues(
        tmp_path, url, code):
    async with world(tmp_path, {}) as (app, hooks):
        app.dns = Pinned({"inside.example": ["10.0.0.7"], "nowhere.example": []})
        with pytest.raises(Invalid) as e:
            await submit(app, callback_url=url)
        assert e.value.code == code
        assert "callback" in e.value.render("en") and "回调" in e.value.render("zh")
        assert await app.queue.last_event_seq() == 0


async def test_dns_rebinding_after_the_check_is_refused_on_the_connection(tmp_path):
    """A name that answers a public address when the URL is checked and 127.0.0.1 when
    genbot connects: the connection's own lookup refuses it."""
    cb = await receiver()
    try:
        async with world(tmp_path, {}) as (app, hooks):
            rebinding = Pinned({"rebind.example": ["93.184.216.34", "127.0.0.1"]})
            app.dns = hooks.deliverer.dns = rebinding
            url = cb.url.replace("127.0.0.1", "rebind.example")
            await submit(app, callback_url=url)
            await hooks.pump()
            (d,) = await hooks.webhooks.deliveries()
            assert d.message.status == "failed" and "private" in (d.message.error or "")
            assert cb.attempts == []
    finally:
        await cb.stop()


async def test_a_delivery_claimed_by_a_sender_that_died_is_sent_by_the_next(tmp_path):
    """A service killed mid-send: the delivery stays owed, falls due once the dead one's
    claim runs out, and the next service sends it under the same webhook-id."""
    clock = FakeClock(datetime.now(UTC).timestamp())
    r = await receiver(clock)
    try:
        async with world(tmp_path, {"r": r}, clock=clock) as (app, hooks):
            await submit(app)
            while await hooks.announcer.run_once():
                pass
            (d,) = await hooks.webhooks.deliveries()
            assert await hooks.outbox.claim(d.message, seconds=40) is not None  # and died
            restarted = WebhookService(app)
            await restarted.pump()
            assert r.attempts == []  # its claim still holds
            clock.advance(41)
            await restarted.pump()
            assert [a["id"] for a in r.attempts] == [d.message.payload["id"]]
    finally:
        await r.stop()


def test_an_independent_hmac_agrees_with_what_genbot_sends():
    secret = new_secret()
    key = base64.b64decode(secret.removeprefix("whsec_"))
    body = json.dumps({"type": "batch.queued"})
    at = datetime.now(UTC)
    signed = Webhook(secret).sign("msg_1", at, body)
    mac = hmac.new(key, f"msg_1.{int(at.timestamp())}.{body}".encode(), hashlib.sha256)
    assert signed == "v1," + base64.b64encode(mac.digest()).decode()


async def test_only_admins_see_endpoints_and_deliveries(tmp_path):
    async with world(tmp_path, {}) as (app, hooks):
        for call in (hooks.endpoints_of(ALICE), hooks.deliveries(ALICE),
                     hooks.test(Who("test", "VIC", "C1"), "x")):
            with pytest.raises(Refused):
                await call


async def test_a_service_restarted_before_it_first_read_the_log_still_owes_what_happened(
        tmp_path):
    """The announcer starts at the log's end only the very first time (a new endpoint
    hears of events from then on, not of all history); after that it resumes, even from
    a cursor that never moved."""
    r = await receiver()
    try:
        async with world(tmp_path, {"r": r}) as (app, hooks):  # (its first start: cursor 0)
            await submit(app)  # logged while no service runs
            restarted = WebhookService(app)
            await restarted.announcer.start()
            await restarted.pump()
            assert [b["type"] for b in r.events()] == ["batch.queued"]
    finally:
        await r.stop()


@pytest.mark.slow
async def test_in_the_service_a_hanging_receiver_delays_no_chat_message(tmp_path, demo_models):
    """`genbot serve` with Slack and an endpoint that never answers in time: the batch's
    every message and file reach Slack while the webhook is still waiting, and /metrics
    shows the delivery owed."""
    from tests.fakes.slack import FakeSlack, SlackWorld, six_thumbs, slack_config
    hangs, fake = await receiver(hang=120), await FakeSlack().start()
    try:
        config = slack_config(tmp_path, demo_models, fake, sections={
            "webhook": {"timeout": 110.0},
            "webhooks": [{"name": "hangs", "url": hangs.url, "secret": hangs.secret}]})
        async with SlackWorld(config, fake) as w:
            await w.slack.message("", channel="D1", im=True, files=six_thumbs(fake))
            await w.until(lambda: fake.top("D1"))
            await w.slack.command("/gen", "social_thumb six.csv")
            await w.until(lambda: fake.top("C1"))
            w.start_executor()
            await w.finish(timeout=45)  # (a chat that waited on the webhook: over 110 s)
            await w.until(lambda: [f for f in fake.files if f["name"] == "results.xlsx"])
            assert hangs.attempts and not hangs.accepted  # its first try still hangs
            async with aiohttp.ClientSession() as http, \
                    http.get(f"{w.url}/metrics") as r:
                metrics = await r.text()
            assert 'genbot_webhook_deliveries{endpoint="hangs",status="pending"}' in metrics
    finally:
        await hangs.stop()
        await fake.stop()


async def test_an_allow_listed_callback_host_may_resolve_to_a_private_address(tmp_path):
    """An internal service named in [webhook] callback_allowlist: its name resolves to a
    private address when the batch is submitted and on every delivery, and both let it."""
    cb = await receiver()
    try:
        async with world(tmp_path, {}, callback_allowlist=["hooks.internal"]) as (app, hooks):
            cb.secret = hooks.endpoints.callback_secret
            app.dns = hooks.deliverer.dns = Pinned({"hooks.internal": ["127.0.0.1"]})
            await submit(app, callback_url=cb.url.replace("127.0.0.1", "hooks.internal"))
            await hooks.pump()
            assert [b["type"] for b in cb.events()] == ["batch.queued"]
    finally:
        await cb.stop()


async def test_a_sign_off_is_announced_once_as_batch_approved(tmp_path):
    """batch.approved: who signed off and each image's review, approved first; a replay
    owes nothing twice; reopened and signed off again is a new event."""
    from storage.reviews import Review
    every = await receiver()
    try:
        async with world(tmp_path, {"every": every}) as (app, hooks):
            batch = await submit(app)
            await run_batch(app)
            first, second = await app.queue.batch_jobs(batch)
            await app.review(BOSS, second.id, Review.APPROVED)
            await app.review(BOSS, first.id, Review.REJECTED, "label misspelt")
            await app.stars(BOSS, second.id, 5)
            await app.sign_off(BOSS, batch)
            await hooks.pump()
            (approved,) = every.events("batch.approved")
            data = msgspec.convert(approved, EVENTS["batch.approved"]).data
            assert (data.batch, data.signed_off_by) == (batch, "test:BOSS")
            assert data.reviews == {Review.APPROVED: 1, Review.REJECTED: 1}
            assert [(i.job, i.review, i.note, i.stars) for i in data.images] == [
                (second.id, Review.APPROVED, None, 5),
                (first.id, Review.REJECTED, "label misspelt", None)]
            assert data.images[0].outputs == [f"/api/v1/jobs/{second.id}/outputs/0"]
            assert data.summary == (f"✅ Batch {batch} signed off by test:BOSS: 1 approved, "
                                    "1 rejected.")
            await hooks.outbox.advance("webhooks", 0)  # a replay: nothing owed twice
            await hooks.pump()
            assert len(every.events("batch.approved")) == 1
            await app.reopen(BOSS, batch)
            await app.sign_off(BOSS, batch)
            await hooks.pump()
            assert len(every.events("batch.approved")) == 2
    finally:
        await every.stop()


async def test_a_batchs_channel_files_are_put_in_its_drops_and_announced_once(tmp_path):
    """batch.delivered: once the batch ends, unreviewed, its files that ship are in the
    shared folder and the webhook lists each (checksum, labels, where it was put); a
    replay of the event log puts the same bytes again and owes nothing twice."""
    from executor.deliver import pack
    from storage.renditions import Renditions
    from templates.jobs import decode
    from templates.provenance import Signer, local_credentials
    from tests.fakes.media import product_png
    every = await receiver()
    share = tmp_path / "share"
    try:
        async with world(tmp_path, {"every": every}, deliver={"folder": str(share)}) \
                as (app, hooks):
            batch = await submit(app, channels=("jd", "douyin"))
            signer = Signer(local_credentials(tmp_path / "c2pa"))
            while (lease := await app.queue.claim("test-executor")) is not None:
                path = app.store.write(f"outputs/batch_{batch}/{lease.job_id}.png",
                                       product_png())
                job = decode(lease.workflow)
                await Renditions(app.queue.db).record(lease.job_id, pack(
                    app.store, job, lease.job_id, batch, [path], producer="genbot",
                    signer=signer))
                await app.queue.complete(lease, [path])
            await hooks.pump()
            (delivered,) = every.events("batch.delivered")
            data = msgspec.convert(delivered, EVENTS["batch.delivered"]).data
            assert (data.batch, data.trigger, data.held) == (batch, "end", 0)
            assert sorted(f.name for f in data.files) == [
                "A1_douyin_1.jpg", "A1_jd_1.jpg", "A2_douyin_1.jpg", "A2_jd_1.jpg"]
            for f in data.files:
                placed = share / f"batch_{batch}" / f.channel / f.name
                assert f.placed == [str(placed)]
                assert hashlib.sha256(placed.read_bytes()).hexdigest() == f.sha256
                assert f.labels["explicit"] == "AI生成" and f.labels["c2pa"]["signer"] == "local"
                assert f.url.endswith(f"/renditions/{f.url.rsplit('/', 1)[1]}")
            await app.queue.db.execute("UPDATE cursors SET seq = 0 WHERE name = 'deliveries'")
            hooks.shipper.ended.clear()  # a restart: the log read again from the start
            await hooks.pump()
            assert len(every.events("batch.delivered")) == 1
    finally:
        await every.stop()
