"""/metrics on the real service: queue depth, job durations and waits, delivery state, and
what the executor reports of its memory and model cache."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bot.settings import ApiConfig
from tests.conftest import ROOT
from tests.fakes.api import ALICE, ApiWorld, api_config
from tests.fakes.chat import SteeredPlatform


def samples(text: str) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_metrics_after_a_batch(tmp_path, demo_models):
    async with ApiWorld(api_config(tmp_path, demo_models)) as w:
        form = aiohttp.FormData()
        form.add_field("template", "product_main")
        form.add_field("sheet", (ROOT / "examples/product_main.xlsx").read_bytes(),
                       filename="product_main.xlsx")
        form.add_field("pictures", (ROOT / "examples/assets/bottle.png").read_bytes(),
                       filename="bottle.png")
        status, batch = await w.call("POST", "/batches", ALICE, data=form)
        assert status == 201, batch
        async with w.http.get("/metrics") as r:
            before = samples(await r.text())
        assert before[("genbot_jobs", (("priority", "normal"), ("status", "queued")))] == 2
        assert before[("genbot_queue_paused", ())] == 0
        ready = {dict(labels)["affinity"]: v for (name, labels), v in before.items()
                 if name == "genbot_placement_jobs" and ("state", "ready") in labels
                 and ("engine", "diffusers") in labels}
        assert sum(ready.values()) == 2, ready  # what a scaler sizes the pool by
        assert before[("genbot_table_bytes", (("table", "jobs"),))] > 0  # (SQLite: dbstat)
        assert all(before[("genbot_oldest_ready_seconds", (("affinity", a),
                                                           ("engine", "diffusers")))] >= 0
                   for a in ready)
        w.start_executor()
        await w.finish(timeout=120)
        async with w.http.get("/metrics") as r:
            assert r.headers["Content-Type"].startswith("text/plain")
            after = samples(await r.text())
    assert after[("genbot_jobs", (("priority", "normal"), ("status", "succeeded")))] == 2
    assert after[("genbot_jobs", (("priority", "normal"), ("status", "queued")))] == 0
    assert after[("genbot_job_duration_seconds_count", (("status", "succeeded"),))] == 2
    assert after[("genbot_job_wait_seconds_count", ())] == 2
    executor = (("executor", "test-executor"),)
    assert after[("genbot_model_cache", executor + (("kind", "loads"),))] >= 1
    assert after[("genbot_executor_memory_bytes",
                  (("device", "cpu"), ("executor", "test-executor"), ("what", "in_use")))] > 0
    assert after[("genbot_executor_restarts", ())] == 0
    assert not any(name == "genbot_placement_jobs" and v for (name, _), v in after.items())
    assert sum(v for (name, labels), v in after.items() if name == "genbot_executors"
               and ("engine", "diffusers") in labels) == 1  # the one executor, idle or busy


async def test_a_metrics_token_is_asked_of_every_scrape(tmp_path, demo_models):
    config = api_config(tmp_path, demo_models)
    config = config.replaced(ApiConfig, metrics_token="scrape-me")
    async with ApiWorld(config) as w:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {ALICE}"},
                        {"Authorization": "scrape-me"}):
            async with w.http.get("/metrics", headers=headers) as r:
                assert r.status == 401, headers
                assert r.headers["WWW-Authenticate"].startswith("Bearer")
                assert "genbot_jobs" not in await r.text()
        async with w.http.get("/metrics", headers={"Authorization": "Bearer scrape-me"}) as r:
            assert r.status == 200
            assert ("genbot_queue_paused", ()) in samples(await r.text())
        async with w.http.get("/healthz") as r:  # probes stay open
            assert r.status == 200


async def test_each_chat_platform_is_up_when_signed_in_and_connected(tmp_path, demo_models):
    """genbot_chat_platform_up: signed in and, where a connection is kept, connected;
    genbot_chat_platform_connected only for those that keep one; read from the platforms
    at each scrape, the database down or not; a platform the service does not run (one
    the outbox still names) has neither."""
    gateway = SteeredPlatform("discord", "gateway", connection=True)  # signed in, connected
    hooked = SteeredPlatform("slack", "events_api")  # signed in, keeps no connection
    refused = SteeredPlatform("feishu", "long_connection", connection=False)
    stream = SteeredPlatform("dingtalk", "stream", connection=False)  # not signed in yet
    async with ApiWorld(api_config(tmp_path, demo_models),
                        [gateway, hooked, refused, stream]) as w:
        gateway.mark_signed_in(True)
        hooked.mark_signed_in(True)
        refused.mark_signed_in(False, "app_secret wrong")
        await w.core.outbox.put("once", platform="teams", conversation="C1", thread=None,
                                kind="text", payload={"text": "owed by a platform gone"})

        async def scrape() -> dict[str, dict[str, float]]:
            async with w.http.get("/metrics") as r:
                found = samples(await r.text())
            assert found[("genbot_outbox_messages", (("platform", "teams"),
                                                     ("status", "pending")))] == 1
            return {metric: {dict(labels)["platform"]: v for (name, labels), v in found.items()
                             if name == metric}
                    for metric in ("genbot_chat_platform_up", "genbot_chat_platform_connected")}

        assert await scrape() == {
            "genbot_chat_platform_up": {"discord": 1, "slack": 1, "feishu": 0, "dingtalk": 0},
            "genbot_chat_platform_connected": {"discord": 1, "feishu": 0, "dingtalk": 0}}
        gateway.connection, stream.connection = False, True  # the gateway drops, the stream
        stream.mark_signed_in(True)  # comes up and signs in
        after = {
            "genbot_chat_platform_up": {"discord": 0, "slack": 1, "feishu": 0, "dingtalk": 1},
            "genbot_chat_platform_connected": {"discord": 0, "feishu": 0, "dingtalk": 1}}
        assert await scrape() == after

        async def unreachable(timeout: float) -> bool:
            return False
        w.queue.db.ping = unreachable  # the database away: the platforms are still told
        hooked.mark_signed_in(False, "token revoked")
        after["genbot_chat_platform_up"]["slack"] = 0
        assert await scrape() == after


def test_the_grafana_dashboard_only_uses_metrics_the_service_exports():
    import json
    import re

    from bot.web.metrics import Metrics
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    used = {name for p in dashboard["panels"] for t in p["targets"]
            for name in re.findall(r"genbot_[a-z_]+", t["expr"])}
    from types import SimpleNamespace
    queue = SimpleNamespace(db=None, settings=SimpleNamespace(lease_seconds=10), clock=None)
    metrics = Metrics(queue, None)
    exported = set()
    for family in metrics.registry.collect():
        suffixes = ("_bucket", "_count", "_sum") if family.type == "histogram" else ("",)
        exported |= {family.name + suffix for suffix in suffixes}
    assert used and used <= exported, used - exported
