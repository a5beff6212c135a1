"""GET /api/v1/platforms on the real service: each chat platform it runs, as the platform
itself says it is doing (signed in or why not, its connection), with the messages the real
sender delivered, gave up on or still owes it — and nothing of a platform it does not run."""

from __future__ import annotations

from tests.fakes.api import ADMIN, VIEWER, ApiWorld, api_config
from tests.fakes.chat import SteeredPlatform, permanent, rate_limited

NOBODY = "nobody-token-00001"  # a token whose user has no role


async def test_each_platform_says_how_it_is_doing_and_what_it_owes(tmp_path, demo_models):
    gateway = SteeredPlatform("discord", "gateway", connection=True)
    hooked = SteeredPlatform("dingtalk", "http")  # messages come to the service: no connection
    config = api_config(tmp_path, demo_models, tokens=(f"{NOBODY}=nobody",),
                        default_role="none")
    async with ApiWorld(config, [gateway, hooked]) as w:
        status, body = await w.call("GET", "/platforms", token=VIEWER)
        assert status == 200
        assert body == {"platforms": [
            {"name": "discord", "inbound": "gateway", "signed_in": None, "connected": True,
             "problem": "", "up": False, "messages": {"pending": 0, "sent": 0, "failed": 0}},
            {"name": "dingtalk", "inbound": "http", "signed_in": None, "connected": None,
             "problem": "", "up": False, "messages": {"pending": 0, "sent": 0, "failed": 0}}]}

        # Discord signs in and posts one message, is refused one for good and told to wait
        # an hour with the third (the sender then says in the refused conversation that it
        # could not post there: sent, too); DingTalk's app is refused; the gateway drops.
        gateway.faults = [permanent(), rate_limited(3600)]
        for n in range(3):  # (a conversation each: one message at a time per thread)
            await w.core.outbox.put(f"m{n}", platform="discord", conversation=f"C{n}",
                                    thread=None, kind="text", payload={"text": f"hello {n}"})
        # Owed by platforms this service does not run: a Feishu app configured once, and a
        # webhook delivery. Neither is listed.
        for platform in ("feishu", "webhook:tour"):
            await w.core.outbox.put(f"{platform} m", platform=platform, conversation="C1",
                                    thread=None, kind="text", payload={"text": "hello"})
        gateway.mark_signed_in(True)
        hooked.mark_signed_in(False, "invalid app_secret")
        settled = {("discord", "sent"): 2, ("discord", "failed"): 1, ("discord", "pending"): 1}
        await w.until(lambda: _has(w, settled))  # (the real sender's doing)
        gateway.connection = False

        status, body = await w.call("GET", "/platforms", token=VIEWER)
        assert status == 200
        discord, dingtalk = body["platforms"]
        assert discord == {"name": "discord", "inbound": "gateway", "signed_in": True,
                           "connected": False, "problem": "", "up": False,
                           "messages": {"pending": 1, "sent": 2, "failed": 1}}
        assert dingtalk == {"name": "dingtalk", "inbound": "http", "signed_in": False,
                            "connected": None, "problem": "invalid app_secret", "up": False,
                            "messages": {"pending": 0, "sent": 0, "failed": 0}}
        gateway.connection = True
        status, body = await w.call("GET", "/platforms", token=ADMIN)
        assert [p["up"] for p in body["platforms"]] == [True, False]  # asked afresh each time

        # Who asks is settled first; then only a role that may read the queue may read it.
        status, body = await w.call("GET", "/platforms", token=None)
        assert (status, body["error"]["code"]) == (401, "unauthorized")
        status, body = await w.call("GET", "/platforms", token=NOBODY)
        assert (status, body["error"]["code"]) == (403, "refused_role")


async def _has(w: ApiWorld, wanted: dict[tuple[str, str], int]) -> bool:
    counts = await w.core.outbox.counts_by_platform()
    return all(counts.get(k) == n for k, n in wanted.items())


async def test_a_service_without_chat_platforms_lists_none(tmp_path, demo_models):
    async with ApiWorld(api_config(tmp_path, demo_models)) as w:
        status, body = await w.call("GET", "/platforms", token=VIEWER)
        assert (status, body) == (200, {"platforms": []})
