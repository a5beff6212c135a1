"""How fast genbot acknowledges Slack, Feishu and Discord while the executor is busy.
Asserts nothing; record results in docs/benchmarks.md.

  python bench/ack_bench.py [--requests 100] [--rounds 3] [--rows 200] [--settle 1]

The real service (HTTP app, chat core, Slack adapter, a supervised executor process)
runs here against a fake Slack Web API on loopback. Signed slash commands
(`/genbot status`, which also makes the core read the queue and post a reply), and
clicks on the Again button under the batch's first image (each asks for a new job;
a click within 10 s of the last is the same ask), are posted one after another and
the time to the HTTP answer is measured — what Slack holds to 3 s. Beside them, the same
on Feishu's HTTP callback (the service has both): `/status 1` as a message event and a
press of that Again as a card.action.trigger, each encrypted and signed as Feishu sends
them (tests/fakes/feishu.py), timed to the answer Feishu holds to 3 s; and on Discord's
interactions endpoint, `/status 1` as a slash command and a press of that Again, each
signed with Ed25519 as Discord sends them (tests/fakes/discord.py), timed to the answer
Discord holds to 3 s. Rounds alternate
between an idle executor (queue paused, nothing running)
and a busy one (product_main on the demo models), so drift on a noisy machine hits both
alike. Prints p50/p99 of each and the busy/idle ratio. Target: p99 < 100 ms busy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.service import Service  # noqa: E402
from executor.models import demo  # noqa: E402
from storage import config as cfg  # noqa: E402
from tests.fakes import discord as fake_discord  # noqa: E402
from tests.fakes import feishu  # noqa: E402
from tests.fakes.slack import BOT, SECRET, TOKEN, FakeSlack, SlackClient  # noqa: E402


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def measure(slack: SlackClient, n: int, under: dict | None = None) -> list[float]:
    """`n` signed `/genbot status 1`, or with `under` (an image's row of buttons) `n`
    clicks on its Again button, each timed to Slack's HTTP answer."""
    out = []
    for _ in range(n):
        start = time.perf_counter()
        if under is None:
            r = await slack.command("/genbot", "status 1", user="BOSS")
        else:
            r = await slack.click(under, user="BOSS", action="image_again")
        out.append((time.perf_counter() - start) * 1000)
        assert r.status == 200
        await asyncio.sleep(0.01)
    return out


async def measure_feishu(session, url: str, fake: feishu.FakeFeishu, n: int,
                         again: str | None = None) -> list[float]:
    """`n` `/status 1` message events, or presses of the button that sends `again` (on a
    card in a thread of the bench's chat), each encrypted, signed and timed to the
    service's answer."""
    out = []
    card = fake.message_event(chat_id="oc_bench", open_id="ou_boss", text="a thread")
    for _ in range(n):
        body = fake.message_event(chat_id="oc_bench", open_id="ou_boss", text="/status 1") \
            if again is None else feishu.card_action_event(
                open_id="ou_boss", chat_id="oc_bench",
                message_id=card["event"]["message"]["message_id"],
                value={"command": again})
        raw, headers = feishu.signed(body)
        start = time.perf_counter()
        async with session.post(f"{url}/feishu/events", data=raw, headers=headers) as r:
            await r.read()
        out.append((time.perf_counter() - start) * 1000)
        assert r.status == 200, r.status
        await asyncio.sleep(0.01)
    return out


async def measure_discord(url: str, fake: fake_discord.FakeDiscord, where: dict, n: int,
                          again: str | None = None) -> list[float]:
    """`n` `/status 1` slash commands, or presses of the button whose custom_id is `again`,
    each signed and timed to the service's answer."""
    out = []
    for _ in range(n):
        payload = fake.command_interaction(
            "status", {"args": "1"}, user=where["user"], guild_id=where["guild_id"],
            channel=where["channel"], locale="en-US") if again is None else \
            fake.button_interaction(again, where["message"], user=where["user"])
        start = time.perf_counter()  # (the fake signs, posts and reads the answer)
        answer = await fake.post_interaction(f"{url}/discord/interactions", payload)
        out.append((time.perf_counter() - start) * 1000)
        assert answer["status"] == 200, answer
        await asyncio.sleep(0.01)
    return out


async def first_buttons(fake: FakeSlack, queue) -> dict:
    """The row of buttons under the batch's first finished image (the executor runs)."""
    await queue.resume(by="bench")
    for _ in range(1200):
        found = [m for m in fake.messages if m.get("blocks")
                 and m["blocks"][-1]["elements"][0]["action_id"] == "image_keep"]
        if found:
            await queue.pause(by="bench")
            return found[0]
        await asyncio.sleep(0.1)
    raise SystemExit("no image was posted within 120 s")


async def main(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="genbot-ack-"))
    demo.place(tmp / "data" / "models" / "demo", args.demo_models)
    fake = await FakeSlack().start()
    lark = await feishu.FakeFeishu().start()
    lark.join("oc_bench")
    cord = await fake_discord.FakeDiscord().start()
    guild = cord.guild()
    channel = cord.text_channel(guild)
    boss = cord.user("boss")
    cord.member(guild, boss)
    where = {"user": boss, "guild_id": guild["id"], "channel": channel}
    (tmp / "config.toml").write_text(  # a file: the executor process reads it too
        f'[service]\ndata_dir = "{tmp / "data"}"\nport = 0\nlog_level = "warning"\n'
        f'[queue]\npoll_interval = 0.1\n[chat]\nadmins = ["slack:BOSS", "feishu:ou_boss", '
        f'"discord:{boss["id"]}"]\n'
        f'[slack]\nbot_token = "{TOKEN}"\nsigning_secret = "{SECRET}"\n'
        f'api_url = "{fake.api_url}"\n'
        f'[feishu]\napp_id = "{feishu.APP_ID}"\napp_secret = "{feishu.APP_SECRET}"\n'
        f'encrypt_key = "{feishu.ENCRYPT_KEY}"\n'
        f'verification_token = "{feishu.VERIFICATION_TOKEN}"\n'
        f'domain = "{lark.base}"\nmode = "callback"\n'
        f'[discord]\ntoken = "{fake_discord.TOKEN}"\nmode = "interactions"\n'
        f'public_key = "{fake_discord.PUBLIC_KEY}"\napi_url = "{cord.base}"\n')
    config = cfg.load(str(tmp / "config.toml"))
    service = Service(config, executor=True)
    await service.start()
    slack = SlackClient(f"http://127.0.0.1:{service.port}", fake)
    url = f"http://127.0.0.1:{service.port}"
    import aiohttp
    session = aiohttp.ClientSession()
    queue = service.queue
    try:
        await queue.pause(by="bench")
        rows = "\n".join(f"SKU-{i},bottle.png,a bottle {i},0.8,1.0" for i in range(args.rows))
        files = [fake.share("many.csv", ("sku,product_image,prompt,control_scale,upscale\n"
                                         + rows).encode()),
                 fake.share("bottle.png", (ROOT / "examples/assets/bottle.png").read_bytes())]
        await slack.message(f"<@{BOT}> gen product_main many.csv", user="BOSS", files=files)
        for _ in range(600):
            if await queue.batches_of("slack:BOSS"):
                break
            await asyncio.sleep(0.1)
        else:
            raise SystemExit(f"the sheet was not queued: {[m['text'] for m in fake.messages]}")
        buttons = await first_buttons(fake, queue)
        first = (await queue.batch_jobs(1))[0]
        again = f"/again j{first.id}"  # what a Feishu image card's Again sends (and Discord's)
        where["message"] = cord.post_as(boss, channel, "an image's message")
        lark_idle: list[float] = []
        lark_busy: list[float] = []
        press_idle: list[float] = []
        press_busy: list[float] = []
        cord_idle: list[float] = []
        cord_busy: list[float] = []
        click_idle: list[float] = []
        click_busy: list[float] = []
        idle: list[float] = []
        busy: list[float] = []
        clicks_idle: list[float] = []
        clicks_busy: list[float] = []
        for _ in range(args.rounds):
            await queue.pause(by="bench")
            while (await queue.active_counts()).running:
                await asyncio.sleep(0.1)
            idle += await measure(slack, args.requests)
            clicks_idle += await measure(slack, args.requests, buttons)
            lark_idle += await measure_feishu(session, url, lark, args.requests)
            press_idle += await measure_feishu(session, url, lark, args.requests, again)
            cord_idle += await measure_discord(url, cord, where, args.requests)
            click_idle += await measure_discord(url, cord, where, args.requests, again)
            await queue.resume(by="bench")
            while not (await queue.active_counts()).running:
                progress = await queue.batch_progress(1)
                if progress.done >= progress.total:
                    jobs = await queue.batch_jobs(1)
                    raise SystemExit(f"the batch ended before the measurement: {progress.counts}"
                                     f" {jobs[0].error}")
                await asyncio.sleep(0.1)
            await asyncio.sleep(args.settle)  # into the denoising loop
            busy += await measure(slack, args.requests)
            clicks_busy += await measure(slack, args.requests, buttons)
            lark_busy += await measure_feishu(session, url, lark, args.requests)
            press_busy += await measure_feishu(session, url, lark, args.requests, again)
            cord_busy += await measure_discord(url, cord, where, args.requests)
            click_busy += await measure_discord(url, cord, where, args.requests, again)
        done = (await queue.batch_progress(1)).done
    finally:
        await session.close()
        await slack.close()
        await service.stop()
        await fake.stop()
        await lark.stop()
        await cord.stop()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print(f"{len(idle)} signed /genbot status per phase; {done} product_main jobs ran meanwhile")
    for name, values in (("idle executor", idle), ("busy executor", busy),
                         ("Again, idle", clicks_idle), ("Again, busy", clicks_busy),
                         ("Feishu, idle", lark_idle), ("Feishu, busy", lark_busy),
                         ("press, idle", press_idle), ("press, busy", press_busy),
                         ("Discord, idle", cord_idle), ("Discord, busy", cord_busy),
                         ("button, idle", click_idle), ("button, busy", click_busy)):
        print(f"{name:14}  p50 {statistics.median(values):6.1f} ms   "
              f"p99 {percentile(values, 99):6.1f} ms   max {max(values):6.1f} ms")
    print(f"busy/idle: p50 x{statistics.median(busy) / statistics.median(idle):.2f}, "
          f"p99 x{percentile(busy, 99) / percentile(idle, 99):.2f}  (target: busy p99 < 100 ms)")
    print(f"Again button busy/idle: p50 "
          f"x{statistics.median(clicks_busy) / statistics.median(clicks_idle):.2f}, p99 "
          f"x{percentile(clicks_busy, 99) / percentile(clicks_idle, 99):.2f}; "
          f"Again/status busy p99 x{percentile(clicks_busy, 99) / percentile(busy, 99):.2f}")
    lark_p50 = statistics.median(lark_busy) / statistics.median(lark_idle)
    lark_p99 = percentile(lark_busy, 99) / percentile(lark_idle, 99)
    print(f"Feishu busy/idle: p50 x{lark_p50:.2f}, p99 x{lark_p99:.2f}; Feishu/Slack "
          f"busy p99 x{percentile(lark_busy, 99) / percentile(busy, 99):.2f}; press busy p99 "
          f"{percentile(press_busy, 99):.1f} ms (target: < 100 ms)")
    cord_p99 = percentile(cord_busy, 99) / percentile(cord_idle, 99)
    print(f"Discord busy/idle: p99 x{cord_p99:.2f}; Discord/Slack busy p99 "
          f"x{percentile(cord_busy, 99) / percentile(busy, 99):.2f}; button busy p99 "
          f"{percentile(click_busy, 99):.1f} ms (target: < 100 ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--settle", type=float, default=1.0, help="seconds the executor is "
                        "busy before the busy phase is measured (the suite's smoke: less)")
    parser.add_argument("--demo-models", type=Path, help="demo models built before (a data "
                        "folder's models/demo): linked, not built again")
    asyncio.run(main(parser.parse_args()))
