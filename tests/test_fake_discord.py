"""The Discord fake speaks to the real discord.py (2.7.1): login, the gateway (zlib-stream,
HELLO, IDENTIFY, READY and GUILD_CREATE, heartbeats, a RESUME after a drop), interactions
answered with defer / edit / followup, messages with files and a view of buttons, a click,
threads, 429s it waits out and the Cloudflare 429 it does not. And the fake refuses what
Discord refuses, over plain HTTP; its inbound helpers sign interactions as Discord does. If
these fail, tests of genbot's Discord front prove nothing."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import discord
import pytest
import yarl
from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from discord.gateway import DiscordWebSocket
from discord.http import HTTPClient, Route
from PIL import Image

from tests.fakes.discord import (
    APP_ID,
    BOT_ID,
    CDN_GONE,
    EPHEMERAL,
    HAS_THREAD,
    LOADING,
    PUBLIC_KEY,
    TOKEN,
    FakeDiscord,
    NotConnected,
    signed,
)

BOT = {"Authorization": f"Bot {TOKEN}"}
MiB = 1024 * 1024


def png(size: tuple[int, int] = (8, 6)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


PNG = png()


def intents() -> discord.Intents:
    """What genbot's Discord front asks for: guilds, guild and DM messages, message content."""
    value = discord.Intents.none()
    value.guilds = value.guild_messages = value.dm_messages = value.message_content = True
    return value


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    fake = await FakeDiscord().start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
def routed(fake: FakeDiscord) -> Iterator[FakeDiscord]:
    """discord.py at the fake: Route.BASE is the class attribute every REST, callback and
    webhook route is built from; DEFAULT_GATEWAY is where a plain Client connects (it never
    asks GET /gateway/bot). Both are put back after."""
    base, gateway = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    Route.BASE = fake.base
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.gateway)
    try:
        yield fake
    finally:
        Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = base, gateway


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@dataclass
class Answer:
    status: int
    body: Any
    headers: Mapping[str, str]

    def error(self, *path: str | int) -> str:
        """The first error code at `path` in an Invalid Form Body tree."""
        node = self.body["errors"]
        for key in path:
            node = node[str(key)]
        return str(node["_errors"][0]["code"])


async def call(http: aiohttp.ClientSession, method: str, url: str, *, json_body: Any = None,
               data: Any = None, headers: Mapping[str, str] | None = None,
               bot: bool = True) -> Answer:
    sent = (dict(BOT) if bot else {}) | dict(headers or {})
    async with http.request(method, url, json=json_body, data=data, headers=sent) as resp:
        text = await resp.text()
        body = json.loads(text) if resp.content_type == "application/json" else text
        return Answer(resp.status, body, resp.headers)


def form(payload: dict[str, Any] | None, *files: tuple[str, bytes]) -> aiohttp.FormData:
    """multipart/form-data as discord.py builds it: payload_json and files[n]."""
    out = aiohttp.FormData(quote_fields=False)
    if payload is not None:
        out.add_field("payload_json", json.dumps(payload), content_type="application/json")
    for n, (name, data) in enumerate(files):
        out.add_field(f"files[{n}]", io.BytesIO(data), filename=name,
                      content_type="application/octet-stream")
    return out


@contextlib.asynccontextmanager
async def running(client: discord.Client, fake: FakeDiscord) -> AsyncIterator[discord.Client]:
    """The client logged in and connected through the fake's gateway, until on_ready."""
    task = asyncio.create_task(client.start(TOKEN))
    try:
        waiter = asyncio.ensure_future(fake.wait_ready())
        done, _ = await asyncio.wait({task, waiter}, timeout=5,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()
        assert waiter in done, "no READY from the fake"
        await asyncio.wait_for(client.wait_until_ready(), 5)
        yield client
    finally:
        await client.close()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)


def new_client(**options: Any) -> discord.Client:
    # guild_ready_timeout: discord.py holds on_ready until no GUILD_CREATE has come for this
    # long (2 s by default)
    return discord.Client(intents=intents(), guild_ready_timeout=0.05, **options)


# --- discord.py against the fake ----------------------------------------------------------------
async def test_http_client_logs_in_and_a_wrong_token_is_a_login_failure(
        routed: FakeDiscord) -> None:
    fake = routed
    client = HTTPClient(asyncio.get_running_loop())
    try:
        me = await client.static_login(TOKEN)
        assert me["id"] == BOT_ID and me["bot"] is True
        app = await client.application_info()
        assert app["id"] == APP_ID and app["verify_key"] == PUBLIC_KEY
        shards, url, limits = await client.get_bot_gateway()
        assert (shards, url) == (1, fake.gateway) and limits["max_concurrency"] == 1
    finally:
        await client.close()
    wrong = HTTPClient(asyncio.get_running_loop())
    try:
        with pytest.raises(discord.LoginFailure):
            await wrong.static_login("not-the-token")
    finally:
        await wrong.close()


async def test_client_connects_and_answers_a_command_with_defer_edit_and_a_file(
        routed: FakeDiscord) -> None:
    fake = routed
    guild = fake.guild("studio")
    channel = fake.text_channel(guild, "renders")
    alice = fake.user("alice")
    artists = fake.role(guild, "artists")
    membership = fake.member(guild, alice, [artists])
    client = new_client()
    seen: list[discord.Interaction] = []
    errors: list[BaseException] = []
    answered = asyncio.Event()

    @client.event
    async def on_interaction(interaction: discord.Interaction) -> None:
        seen.append(interaction)
        try:
            await interaction.response.defer(thinking=True)
            await interaction.edit_original_response(content="rendering 3 rows")
            await interaction.followup.send("row 1",
                                            file=discord.File(io.BytesIO(PNG), "row-1.png"))
        except Exception as e:
            errors.append(e)
        finally:
            answered.set()

    async with running(client, fake):
        # login read users/@me and oauth2/applications/@me; a plain Client never asks
        # gateway/bot; it connected with zlib-stream and the intents it was given
        assert fake.calls["GET /users/@me"] == 1
        assert fake.calls["GET /oauth2/applications/@me"] == 1
        assert fake.calls["GET /gateway/bot"] == 0
        assert fake.connections[0].compress == "zlib-stream"
        assert fake.identifies[0]["intents"] == intents().value
        assert client.get_channel(int(channel["id"])) is not None  # GUILD_CREATE arrived
        sheet = fake.attach("sheet.xlsx", b"PK\x03\x04 a workbook")
        it = await fake.interaction(fake.command_interaction(
            "gen", {"template": "product_main", "sheet": sheet}, channel=channel,
            member=membership))
        await asyncio.wait_for(answered.wait(), 5)
        assert not errors
        got = seen[0]
        assert got.user.id == int(alice["id"]) and got.locale is discord.Locale.chinese
        assert isinstance(got.user, discord.Member)
        assert [r.name for r in got.user.roles] == ["@everyone", "artists"]
        assert got.channel is not None and got.channel.id == int(channel["id"])
        data: Any = got.data  # a union of TypedDicts in discord.py's stubs
        assert data["name"] == "gen"
        assert data["resolved"]["attachments"][sheet["id"]]["filename"] == "sheet.xlsx"
        assert await client.http.get_from_cdn(sheet["url"]) == b"PK\x03\x04 a workbook"

        assert [(r["type"], r["status"], r["via"]) for r in fake.responses] == [
            (5, 200, "callback")]
        assert it.original_id is not None
        original = fake.message(it.original_id)
        assert original.content == "rendering 3 rows" and not original.loading
        assert [e["via"] for e in original.edits] == ["webhook"]
        posted = fake.messages_in(channel)
        assert [m.id for m in posted] == [original.id, it.followup_ids[0]]
        followup = posted[1]
        assert followup.content == "row 1" and followup.filenames == ["row-1.png"]
        assert followup.attachments[0].content_type == "image/png"
        assert fake.non_image(posted) == [original]
        url = fake.message_object(followup)["attachments"][0]["url"]
        assert await client.http.get_from_cdn(url) == PNG


async def test_client_resumes_after_a_drop_and_gets_what_it_missed(routed: FakeDiscord) -> None:
    fake = routed
    fake.heartbeat_interval_ms = 50
    channel = fake.text_channel(fake.guild())
    client = new_client()
    resumed = asyncio.Event()
    clicks: list[str] = []
    clicked = asyncio.Event()

    @client.event
    async def on_resumed() -> None:
        resumed.set()

    @client.event
    async def on_interaction(interaction: discord.Interaction) -> None:
        assert interaction.data is not None
        clicks.append(str(interaction.data.get("custom_id")))
        clicked.set()

    async with running(client, fake):
        await asyncio.sleep(0.2)
        assert fake.heartbeats >= 3  # one at once after HELLO, then every 50 ms, each ACKed
        posted = fake.post_as(fake.user("bob"), channel, "a message with a button")
        assert await fake.drop(4000) == 1
        # while discord.py is away: the session keeps the event for the RESUME's replay
        await fake.dispatch("INTERACTION_CREATE", fake.button_interaction("retry", posted))
        await asyncio.wait_for(resumed.wait(), 5)
        await asyncio.wait_for(clicked.wait(), 5)
        assert clicks == ["retry"]
        assert fake.resumes == 1 and fake.connected == 2 and len(fake.identifies) == 1
        assert len(fake.sessions) == 1
        resumed.clear()
        await fake.drop(None)  # the TCP connection cut, no close frame: resumed as well
        await asyncio.wait_for(resumed.wait(), 5)
        assert fake.resumes == 2 and len(fake.identifies) == 1
        # (after INVALID_SESSION discord.py identifies anew, but only after the 5 s its
        # before_identify_hook sleeps before any IDENTIFY but the first: tested raw below)


async def test_partial_messageable_files_view_thread_and_a_click(routed: FakeDiscord) -> None:
    fake = routed
    guild = fake.guild()
    channel = fake.text_channel(guild, "batches")
    clicked = asyncio.Event()

    class Batch(discord.ui.View):
        def __init__(self) -> None:
            super().__init__(timeout=None)
            self.add_item(discord.ui.Button(label="Sheet", url="https://example.invalid/s"))

        @discord.ui.button(label="Rerun", custom_id="rerun:7",
                           style=discord.ButtonStyle.primary)
        async def rerun(self, interaction: discord.Interaction,
                        button: discord.ui.Button[Batch]) -> None:
            await interaction.response.edit_message(content="rerunning batch 7", view=None)
            clicked.set()

    async with running(new_client(), fake) as client:
        target = client.get_partial_messageable(int(channel["id"]), guild_id=int(guild["id"]),
                                                type=discord.ChannelType.text)
        message = await target.send("batch 7", view=Batch(), files=[
            discord.File(io.BytesIO(PNG), "cover.png"),
            discord.File(io.BytesIO(b"sku,title\n1,mug\n"), "rows.csv")])
        stored = fake.message(message.id)
        assert stored.by_bot and stored.filenames == ["cover.png", "rows.csv"]
        assert [a.content_type for a in stored.attachments] == ["image/png", "text/csv"]
        [row] = stored.components
        assert row["type"] == 1 and [(b["style"], b.get("custom_id"), b.get("url"))
                                     for b in row["components"]] == [
            (1, "rerun:7", None), (5, None, "https://example.invalid/s")]
        assert message.attachments[0].width == 8 and await message.attachments[1].read() == \
            b"sku,title\n1,mug\n"

        thread = await message.create_thread(name="batch 7", auto_archive_duration=1440)
        assert thread.id == message.id and thread.parent_id == int(channel["id"])
        assert fake.threads[0]["type"] == 11 and stored.thread_id == str(message.id)
        await thread.send("row 1 done")
        [in_thread] = fake.messages_in(thread.id)
        assert in_thread.content == "row 1 done" and in_thread.parent_id == channel["id"]
        with pytest.raises(discord.HTTPException) as again:
            await message.create_thread(name="again")
        assert again.value.code == 160004

        # a click: discord.py's view store hands it to the button's callback, which answers
        # type 7 (UPDATE_MESSAGE)
        await fake.interaction(fake.button_interaction("rerun:7", stored))
        await asyncio.wait_for(clicked.wait(), 5)
        assert fake.responses[-1]["type"] == 7 and fake.responses[-1]["status"] == 200
        assert stored.content == "rerunning batch 7" and stored.components == []
        assert stored.edits[-1]["via"] == "interaction"


async def test_command_tree_syncs_and_runs_a_command_with_a_file(routed: FakeDiscord) -> None:
    """discord.py's app_commands: the commands it syncs pass the fake's checks, and an
    INTERACTION_CREATE reaches the command with its attachment resolved; autocomplete too."""
    fake = routed
    guild = fake.guild()
    channel = fake.text_channel(guild)
    client = new_client()
    tree = discord.app_commands.CommandTree(client)
    ran = asyncio.Event()
    read: list[bytes] = []

    async def templates(interaction: discord.Interaction,
                        current: str) -> list[discord.app_commands.Choice[str]]:
        return [discord.app_commands.Choice(name=n, value=n)
                for n in ("product_main", "product_side", "banner") if n.startswith(current)]

    @tree.command(description="Render a sheet")
    @discord.app_commands.describe(template="Which template", sheet="The spreadsheet")
    @discord.app_commands.autocomplete(template=templates)
    async def gen(interaction: discord.Interaction, sheet: discord.Attachment,
                  template: str = "product_main") -> None:
        read.append(await sheet.read())
        await interaction.response.send_message(
            f"{template}: {sheet.filename}", file=discord.File(io.BytesIO(PNG), "preview.png"))
        ran.set()

    async with running(client, fake):
        synced = await tree.sync()
        assert [c.name for c in synced] == ["gen"]
        assert [o["type"] for o in fake.commands[None][0]["options"]] == [11, 3]
        assert [c.name for c in await tree.sync(guild=discord.Object(int(guild["id"])))] == []

        await fake.interaction(fake.autocomplete_interaction(focused="template",
                                                             value="product"))
        await _until(lambda: len(fake.responses) == 1)
        assert fake.responses[0]["type"] == 8 and fake.responses[0]["data"]["choices"] == [
            {"name": "product_main", "value": "product_main"},
            {"name": "product_side", "value": "product_side"}]

        sheet = fake.attach("sheet.xlsx", b"PK workbook")
        it = await fake.interaction(fake.command_interaction(
            "gen", {"sheet": sheet, "template": "banner"}, channel=channel))
        await asyncio.wait_for(ran.wait(), 5)
        assert read == [b"PK workbook"]
        assert (fake.responses[1]["type"], fake.responses[1]["files"]) == (4, ["preview.png"])
        original = fake.message(str(it.original_id))
        assert original.content == "banner: sheet.xlsx" and original.filenames == [
            "preview.png"]
        assert original.type == 20 and not original.ephemeral


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_discord_py_waits_out_a_429_but_not_a_cloudflare_ban(routed: FakeDiscord) -> None:
    fake = routed
    channel = fake.text_channel(fake.guild())
    client = new_client()
    await client.login(TOKEN)
    try:
        target = client.get_partial_messageable(int(channel["id"]))
        fake.limit("/messages", retry_after=0.2)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await target.send("after the wait")
        assert loop.time() - started >= 0.2
        assert fake.throttled == 1 and fake.calls["POST /channels/{channel_id}/messages"] == 2
        assert [m.content for m in fake.messages_in(channel)] == ["after the wait"]

        fake.limit(global_=True, retry_after=0.05)  # the global limit: waited out as well
        await target.send("after the global wait")
        assert fake.throttled == 2

        fake.cloudflare("/messages")  # 429 with no Via: a ban, raised at once
        with pytest.raises(discord.HTTPException) as banned:
            await target.send("banned")
        assert banned.value.status == 429 and fake.throttled == 3

        fake.fail("/messages", status=503)
        with pytest.raises(discord.DiscordServerError):
            await target.send("down")
        assert len(fake.messages_in(channel)) == 2
    finally:
        await client.close()


def test_patch_discord_py_points_and_restores() -> None:
    fake = FakeDiscord()
    fake.base, fake.gateway = "http://127.0.0.1:1/api/v10", "ws://127.0.0.1:1/gateway"
    before = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    with fake.patch_discord_py():
        assert fake.base == Route.BASE
        assert fake.gateway == str(DiscordWebSocket.DEFAULT_GATEWAY)
    assert before == (Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)


# --- the gateway, raw ---------------------------------------------------------------------------
class Gateway:
    """A raw gateway client: zlib-stream frames (one inflate context per connection, each
    message ending in Z_SYNC_FLUSH's 00 00 ff ff) or text."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws, self.inflate = ws, zlib.decompressobj()

    async def recv(self) -> dict[str, Any]:
        msg = await self.ws.receive(timeout=2)
        if msg.type == aiohttp.WSMsgType.BINARY:
            assert msg.data.endswith(b"\x00\x00\xff\xff")
            return dict(json.loads(self.inflate.decompress(msg.data)))
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        return dict(json.loads(msg.data))

    async def closed_with(self) -> int | None:
        msg = await self.ws.receive(timeout=2)
        assert msg.type == aiohttp.WSMsgType.CLOSE, msg
        return self.ws.close_code


def identify(intents: int, token: str = TOKEN) -> dict[str, Any]:
    return {"op": 2, "d": {"token": token, "intents": intents,
                           "properties": {"os": "linux", "browser": "t", "device": "t"}}}


async def test_gateway_handshake_heartbeat_and_refusals(fake: FakeDiscord,
                                                        http: aiohttp.ClientSession) -> None:
    url = fake.gateway + "?v=10&encoding=json&compress=zlib-stream"
    async with http.ws_connect(url) as ws:
        gw = Gateway(ws)
        hello = await gw.recv()
        assert hello["op"] == 10 and hello["d"]["heartbeat_interval"] == 41250
        await ws.send_json({"op": 1, "d": None})
        assert (await gw.recv())["op"] == 11
        await ws.send_json(identify(513, token="wrong"))
        assert await gw.closed_with() == 4004
    async with http.ws_connect(url) as ws:  # GUILD_MEMBERS is not switched on for the app
        gw = Gateway(ws)
        await gw.recv()
        await ws.send_json(identify(1 | (1 << 1)))
        assert await gw.closed_with() == 4014
    async with http.ws_connect(url) as ws:
        gw = Gateway(ws)
        await gw.recv()
        await ws.send_json({"op": 3, "d": {"status": "online"}})
        assert await gw.closed_with() == 4003
    async with http.ws_connect(fake.gateway + "?v=9&encoding=json") as ws:
        assert await Gateway(ws).closed_with() == 4012
    async with http.ws_connect(fake.gateway + "?v=10&encoding=json") as ws:  # text frames
        gw = Gateway(ws)
        await gw.recv()
        await ws.send_json({"op": 6, "d": {"token": TOKEN, "session_id": "nope", "seq": 3}})
        assert await gw.recv() == {"op": 9, "d": False, "s": None, "t": None}


async def test_gateway_ready_guilds_and_the_message_content_intent(
        fake: FakeDiscord, http: aiohttp.ClientSession) -> None:
    guild = fake.guild("studio")
    channel = fake.text_channel(guild, "renders")
    bob = fake.user("bob")
    dm = fake.dm_channel(bob)
    async with http.ws_connect(fake.gateway + "?v=10&encoding=json") as ws:
        gw = Gateway(ws)
        await gw.recv()
        await ws.send_json(identify(1 | (1 << 9) | (1 << 12)))  # no MESSAGE_CONTENT
        ready = await gw.recv()
        assert (ready["t"], ready["s"]) == ("READY", 1)
        assert ready["d"]["guilds"] == [{"id": guild["id"], "unavailable": True}]
        assert ready["d"]["resume_gateway_url"] == fake.gateway
        assert ready["d"]["application"] == {"id": APP_ID, "flags": 1 << 19}
        created = await gw.recv()
        assert (created["t"], created["s"]) == ("GUILD_CREATE", 2)
        assert [c["id"] for c in created["d"]["channels"]] == [channel["id"]]
        assert [m["user"]["id"] for m in created["d"]["members"]] == [BOT_ID]

        fake.member(guild, bob)
        for where in (channel, dm):
            assert await fake.deliver(fake.post_as(bob, where, "hello bot")) == 1
        in_guild, in_dm = await gw.recv(), await gw.recv()
        assert in_guild["t"] == "MESSAGE_CREATE" and in_guild["d"]["guild_id"] == guild["id"]
        assert in_guild["d"]["member"]["roles"] == []
        assert in_guild["d"]["content"] == "" and in_dm["d"]["content"] == "hello bot"
        assert in_dm["s"] == 4 and len(fake.sessions) == 1
        await fake.invalidate_sessions()
        assert await gw.recv() == {"op": 9, "d": False, "s": None, "t": None}
        assert fake.sessions == {}
        with pytest.raises(NotConnected):
            await FakeDiscord().interaction({})


# --- REST: refusals and records, over plain HTTP -------------------------------------------------
async def test_bot_routes_want_the_bot_token(fake: FakeDiscord,
                                             http: aiohttp.ClientSession) -> None:
    channel = fake.text_channel(fake.guild())
    url = f"{fake.base}/channels/{channel['id']}/messages"
    for headers in ({}, {"Authorization": "Bearer x"}, {"Authorization": TOKEN}):
        got = await call(http, "POST", url, json_body={"content": "hi"}, headers=headers,
                         bot=False)
        assert (got.status, got.body) == (401, {"message": "401: Unauthorized", "code": 0})
    got = await call(http, "POST", f"{fake.base}/channels/1/messages", json_body={"content": "x"})
    assert (got.status, got.body["code"], got.body["message"]) == (404, 10003, "Unknown Channel")
    got = await call(http, "GET", f"{fake.base}/channels/{channel['id']}/messages/1")
    assert (got.status, got.body["code"]) == (404, 10008)
    got = await call(http, "GET", f"{fake.base}/nowhere")
    assert (got.status, got.body) == (404, {"message": "404: Not Found", "code": 0})
    assert fake.messages == []


def row(*children: dict[str, Any]) -> dict[str, Any]:
    return {"type": 1, "components": list(children)}


def button(custom_id: str | None = "go", *, style: int = 1, label: str = "Go",
           **extra: Any) -> dict[str, Any]:
    out = {"type": 2, "style": style, "label": label, **extra}
    if custom_id is not None:
        out["custom_id"] = custom_id
    return out


@pytest.mark.parametrize(("payload", "code", "path", "error"), [
    pytest.param({"content": "x" * 2001}, 50035, ("content",), "BASE_TYPE_MAX_LENGTH",
                 id="content-2001"),
    pytest.param({}, 50006, None, None, id="empty"),
    pytest.param({"content": "", "embeds": [], "components": [], "attachments": []}, 50006,
                 None, None, id="empty-fields"),
    pytest.param({"embeds": [{"title": "t"}] * 11}, 50035, ("embeds",),
                 "BASE_TYPE_MAX_LENGTH", id="11-embeds"),
    pytest.param({"embeds": [{"description": "x" * 4000}, {"description": "y" * 2001}]}, 50035,
                 ("embeds",), "MAX_EMBED_SIZE_EXCEEDED", id="embeds-over-6000"),
    pytest.param({"content": "c", "components": [row(button(f"b{i}")) for i in range(6)]},
                 50035, ("components",), "BASE_TYPE_MAX_LENGTH", id="6-rows"),
    pytest.param({"content": "c", "components": [row(*(button(f"b{i}") for i in range(6)))]},
                 50035, ("components", 0, "components"), "BASE_TYPE_MAX_LENGTH",
                 id="6-buttons"),
    pytest.param({"content": "c", "components": [button("b")]}, 50035,
                 ("components", 0, "type"), "BASE_TYPE_CHOICES", id="button-outside-a-row"),
    pytest.param({"content": "c", "components": [row(button("x" * 101))]}, 50035,
                 ("components", 0, "components", 0, "custom_id"), "BASE_TYPE_BAD_LENGTH",
                 id="custom-id-101"),
    pytest.param({"content": "c", "components": [row(button(""))]}, 50035,
                 ("components", 0, "components", 0, "custom_id"), "BASE_TYPE_BAD_LENGTH",
                 id="custom-id-empty"),
    pytest.param({"content": "c", "components": [row(button("same")), row(button("same"))]},
                 50035, ("components", 1, "components", 0, "custom_id"),
                 "COMPONENT_CUSTOM_ID_DUPLICATED", id="custom-id-twice"),
    pytest.param({"content": "c", "components": [row(button(label="x" * 81))]}, 50035,
                 ("components", 0, "components", 0, "label"), "BASE_TYPE_MAX_LENGTH",
                 id="label-81"),
    pytest.param({"content": "c", "components": [row(button(None))]}, 50035,
                 ("components", 0, "components", 0, "custom_id"), "BASE_TYPE_REQUIRED",
                 id="primary-without-custom-id"),
    pytest.param({"content": "c", "components": [row(button(None, style=5))]}, 50035,
                 ("components", 0, "components", 0, "url"), "BASE_TYPE_REQUIRED",
                 id="link-without-url"),
    pytest.param({"content": "c", "components": [row(button("l", style=5, url="https://x"))]},
                 50035, ("components", 0, "components", 0, "custom_id"),
                 "BUTTON_COMPONENT_CUSTOM_ID_NOT_ALLOWED", id="link-with-custom-id"),
])
async def test_a_message_discord_refuses(fake: FakeDiscord, http: aiohttp.ClientSession,
                                         payload: dict[str, Any], code: int,
                                         path: tuple[str | int, ...] | None,
                                         error: str | None) -> None:
    channel = fake.text_channel(fake.guild())
    got = await call(http, "POST", f"{fake.base}/channels/{channel['id']}/messages",
                     json_body=payload)
    assert (got.status, got.body["code"]) == (400, code)
    if path is not None:
        assert got.body["message"] == "Invalid Form Body" and got.error(*path) == error
    else:
        assert got.body["message"] == "Cannot send an empty message"
    assert fake.messages == []


async def test_a_message_at_every_limit_is_taken(fake: FakeDiscord,
                                                 http: aiohttp.ClientSession) -> None:
    channel = fake.text_channel(fake.guild())
    rows = [row(*(button(f"{r}-{b}" + "x" * 90, label="l" * 80) for b in range(5)))
            for r in range(5)]
    got = await call(http, "POST", f"{fake.base}/channels/{channel['id']}/messages",
                     json_body={"content": "x" * 2000, "embeds": [{"title": "t"}] * 10,
                                "components": rows})
    assert got.status == 200, got.body
    assert got.headers["Content-Type"] == "application/json"  # exactly: discord.py compares
    [m] = fake.messages_in(channel)
    assert len(m.content) == 2000 and len(m.components) == 5 and m.by_bot


async def test_bodies_content_types_and_sizes(fake: FakeDiscord,
                                              http: aiohttp.ClientSession) -> None:
    channel = fake.text_channel(fake.guild())
    url = f"{fake.base}/channels/{channel['id']}/messages"
    got = await call(http, "POST", url, data=b"content=hi",
                     headers={"Content-Type": "text/plain"})
    assert (got.status, got.body["code"], got.error()) == (400, 50035, "CONTENT_TYPE_INVALID")
    got = await call(http, "POST", url, data=b'{"content": ',
                     headers={"Content-Type": "application/json"})
    assert (got.status, got.body) == (400, {"message": "The request body contains invalid "
                                                       "JSON.", "code": 50109})
    got = await call(http, "POST", url, data=form({"content": "big"},
                                                  ("big.bin", b"\0" * (10 * MiB + 1))))
    assert (got.status, got.body["code"]) == (413, 40005)
    got = await call(http, "POST", url, data=form({"content": "huge"}, *(
        (f"part{n}.bin", b"\0" * (9 * MiB)) for n in range(3))))
    assert (got.status, got.body) == (413, {"message": "Request entity too large",
                                            "code": 40005})
    assert fake.messages == []


async def test_files_the_cdn_and_editing_which_to_keep(fake: FakeDiscord,
                                                       http: aiohttp.ClientSession) -> None:
    channel = fake.text_channel(fake.guild())
    url = f"{fake.base}/channels/{channel['id']}/messages"
    got = await call(http, "POST", url, data=form(
        {"content": "two files", "attachments": [
            {"id": 0, "filename": "cover.png", "description": "the cover"},
            {"id": 1, "filename": "rows.csv"}]},
        ("upload-name.png", PNG), ("rows.csv", b"a,b\n")))
    assert got.status == 200, got.body
    cover, rows = got.body["attachments"]
    assert (cover["filename"], cover["description"], cover["size"], cover["width"],
            cover["content_type"]) == ("cover.png", "the cover", len(PNG), 8, "image/png")
    assert rows["filename"] == "rows.csv" and "/media/attachments/" in rows["proxy_url"]
    # the CDN: no auth header; a forged or unsigned URL is gone
    async with http.get(cover["url"]) as resp:
        assert resp.status == 200 and await resp.read() == PNG
        assert resp.headers["Content-Type"] == "image/png"
    for bad in (cover["url"].replace("hm=", "hm=0"), cover["url"].split("?")[0]):
        async with http.get(bad) as resp:
            assert (resp.status, await resp.text()) == (404, CDN_GONE)

    mid = got.body["id"]
    got = await call(http, "PATCH", f"{url}/{mid}",
                     json_body={"attachments": [{"id": cover["id"]}]})
    assert [a["filename"] for a in got.body["attachments"]] == ["cover.png"]
    got = await call(http, "PATCH", f"{url}/{mid}", data=form(
        {"content": "three", "attachments": [{"id": cover["id"]}, {"id": 0}]},
        ("more.png", PNG)))
    assert [a["filename"] for a in got.body["attachments"]] == ["cover.png", "more.png"]
    assert [e["attachments"] for e in fake.edits_of(mid)] == [
        ["cover.png"], ["cover.png", "more.png"]]
    assert fake.message(mid).content == "three"
    got = await call(http, "PATCH", f"{url}/{mid}", json_body={"attachments": [{"id": "99"}]})
    assert (got.status, got.error("attachments", 0, "id")) == (400, "ATTACHMENT_NOT_FOUND")

    fake.advance(25 * 3600)  # past ex
    async with http.get(cover["url"]) as resp:
        assert resp.status == 404
    fresh = (await call(http, "GET", f"{url}/{mid}")).body["attachments"][0]["url"]
    async with http.get(fresh) as resp:
        assert resp.status == 200


async def test_only_the_bots_own_messages_are_edited(fake: FakeDiscord,
                                                     http: aiohttp.ClientSession) -> None:
    channel = fake.text_channel(fake.guild())
    theirs = fake.post_as(fake.user("bob"), channel, "mine")
    url = f"{fake.base}/channels/{channel['id']}/messages/{theirs.id}"
    got = await call(http, "PATCH", url, json_body={"content": "edited"})
    assert (got.status, got.body["code"]) == (403, 50005)
    got = await call(http, "DELETE", url)
    assert (got.status, got.body["code"]) == (403, 50013)
    assert theirs.content == "mine" and theirs.edits == []


async def test_threads_from_messages(fake: FakeDiscord, http: aiohttp.ClientSession) -> None:
    guild = fake.guild()
    channel = fake.text_channel(guild)
    base = f"{fake.base}/channels/{channel['id']}/messages"
    mid = (await call(http, "POST", base, json_body={"content": "batch 7"})).body["id"]
    other = (await call(http, "POST", base, json_body={"content": "batch 8"})).body["id"]
    got = await call(http, "POST", f"{base}/{other}/threads", json_body={"name": ""})
    assert (got.status, got.error("name")) == (400, "BASE_TYPE_BAD_LENGTH")
    got = await call(http, "POST", f"{base}/{other}/threads",
                     json_body={"name": "x", "auto_archive_duration": 30})
    assert got.error("auto_archive_duration") == "BASE_TYPE_CHOICES"
    got = await call(http, "POST", f"{base}/1/threads", json_body={"name": "x"})
    assert (got.status, got.body["code"]) == (404, 10008)

    got = await call(http, "POST", f"{base}/{mid}/threads",
                     json_body={"name": "batch 7", "auto_archive_duration": 60})
    assert got.status == 201
    thread = got.body
    assert (thread["id"], thread["type"], thread["parent_id"], thread["guild_id"]) == (
        mid, 11, channel["id"], guild["id"])
    assert thread["thread_metadata"]["auto_archive_duration"] == 60
    got = await call(http, "POST", f"{base}/{mid}/threads", json_body={"name": "again"})
    assert (got.status, got.body["code"], got.body["message"]) == (
        400, 160004, "A thread has already been created for this message")
    assert (await call(http, "GET", f"{fake.base}/channels/{mid}")).body["type"] == 11
    source = (await call(http, "GET", f"{base}/{mid}")).body
    assert source["flags"] & HAS_THREAD and source["thread"]["id"] == mid

    got = await call(http, "POST", f"{fake.base}/channels/{mid}/messages",
                     json_body={"content": "row 1"})
    assert got.body["channel_id"] == mid
    assert [m.content for m in fake.messages_in(mid)] == ["row 1"]
    assert [m.content for m in fake.messages_in(channel)] == ["batch 7", "batch 8"]

    dm = fake.dm_channel(fake.user("bob"))
    in_dm = (await call(http, "POST", f"{fake.base}/channels/{dm['id']}/messages",
                        json_body={"content": "hi"})).body["id"]
    got = await call(http, "POST", f"{fake.base}/channels/{dm['id']}/messages/{in_dm}/threads",
                     json_body={"name": "x"})
    assert (got.status, got.body["code"]) == (400, 50024)
    assert len(fake.threads) == 1


GEN = {"name": "gen", "description": "Render a sheet", "type": 1,
       "name_localizations": {"zh-CN": "生成"},
       "description_localizations": {"zh-CN": "渲染表格", "en-US": "Render a sheet"},
       "options": [{"type": 11, "name": "sheet", "description": "The spreadsheet",
                    "required": True},
                   {"type": 3, "name": "template", "description": "Which template",
                    "autocomplete": True, "name_localizations": {"zh-CN": "模板"}}]}


def gen(**changes: Any) -> dict[str, Any]:
    return json.loads(json.dumps(GEN)) | changes


@pytest.mark.parametrize(("commands", "path", "error"), [
    pytest.param([gen(name="Gen")], (0, "name"), "APPLICATION_COMMAND_INVALID_NAME",
                 id="uppercase"),
    pytest.param([gen(name="gen sheet")], (0, "name"), "APPLICATION_COMMAND_INVALID_NAME",
                 id="space"),
    pytest.param([gen(name="g" * 33)], (0, "name"), "BASE_TYPE_BAD_LENGTH", id="name-33"),
    pytest.param([gen(description="d" * 101)], (0, "description"), "BASE_TYPE_BAD_LENGTH",
                 id="description-101"),
    pytest.param([gen(description="")], (0, "description"), "BASE_TYPE_BAD_LENGTH",
                 id="description-empty"),
    pytest.param([gen(options=[{"type": 3, "name": f"o{i}", "description": "d"}
                               for i in range(26)])], (0, "options"), "BASE_TYPE_MAX_LENGTH",
                 id="26-options"),
    pytest.param([gen(name_localizations={"zh": "生成"})], (0, "name_localizations", "zh"),
                 "BASE_TYPE_CHOICES", id="locale-zh"),
    pytest.param([gen(description_localizations={"zh-CN": "x" * 101})],
                 (0, "description_localizations", "zh-CN"), "BASE_TYPE_BAD_LENGTH",
                 id="localized-description-101"),
    pytest.param([gen(options=[{"type": 11, "name": "sheet", "description": "d",
                                "autocomplete": True}])], (0, "options", 0, "autocomplete"),
                 "APPLICATION_COMMAND_OPTION_AUTOCOMPLETE_INVALID_TYPE",
                 id="autocomplete-on-attachment"),
    pytest.param([gen(options=[{"type": 12, "name": "x", "description": "d"}])],
                 (0, "options", 0, "type"), "BASE_TYPE_CHOICES", id="option-type-12"),
    pytest.param([gen(options=[{"type": 3, "name": "a", "description": "d"},
                               {"type": 11, "name": "b", "description": "d",
                                "required": True}])], (0, "options", 1),
                 "APPLICATION_COMMAND_OPTIONS_ORDER_INVALID", id="required-after-optional"),
    pytest.param([gen(), gen()], (1, "name"), "APPLICATION_COMMANDS_DUPLICATE_NAME",
                 id="same-name-twice"),
])
async def test_commands_discord_refuses(fake: FakeDiscord, http: aiohttp.ClientSession,
                                        commands: list[dict[str, Any]],
                                        path: tuple[str | int, ...], error: str) -> None:
    got = await call(http, "PUT", f"{fake.base}/applications/{APP_ID}/commands",
                     json_body=commands)
    assert (got.status, got.body["code"], got.error(*path)) == (400, 50035, error)
    assert fake.commands == {}


async def test_commands_are_stored_and_keep_their_ids(fake: FakeDiscord,
                                                      http: aiohttp.ClientSession) -> None:
    url = f"{fake.base}/applications/{APP_ID}/commands"
    got = await call(http, "PUT", url, json_body=[GEN])
    assert got.status == 200, got.body
    [stored] = got.body
    assert (stored["name"], stored["application_id"]) == ("gen", APP_ID)
    assert stored["name_localizations"] == {"zh-CN": "生成"}
    again = (await call(http, "PUT", url, json_body=[GEN])).body
    assert again[0]["id"] == stored["id"]
    plain = (await call(http, "GET", url)).body
    assert "name_localizations" not in plain[0] and plain[0]["id"] == stored["id"]
    full = (await call(http, "GET", f"{url}?with_localizations=true")).body
    assert full[0]["options"][1]["name_localizations"] == {"zh-CN": "模板"}

    guild = fake.guild()
    got = await call(http, "PUT", f"{fake.base}/applications/{APP_ID}/guilds/{guild['id']}"
                                  "/commands", json_body=[gen(name="重做")])
    assert got.status == 200 and got.body[0]["guild_id"] == guild["id"]
    got = await call(http, "PUT", f"{fake.base}/applications/{APP_ID}/guilds/1/commands",
                     json_body=[GEN])
    assert (got.status, got.body["code"]) == (403, 50001)
    payload = fake.command_interaction("gen")
    assert payload["data"]["id"] == stored["id"]


# --- interactions: the callback and the webhook routes ------------------------------------------
async def test_the_initial_response(fake: FakeDiscord, http: aiohttp.ClientSession) -> None:
    def callback(payload: dict[str, Any], query: str = "") -> str:
        it = fake.issue(payload)
        return f"{fake.base}/interactions/{it.id}/{it.token}/callback{query}"

    url = callback(fake.command_interaction("gen", {"template": "a"}))
    got = await call(http, "POST", url, json_body={"type": 5, "data": {"flags": 4}}, bot=False)
    assert (got.status, got.error("data", "flags")) == (400, "INTERACTION_RESPONSE_FLAGS_INVALID")
    got = await call(http, "POST", url, json_body={"type": 5, "data": {"flags": EPHEMERAL}},
                     bot=False, headers={"Authorization": "anything"})
    assert (got.status, got.body) == (204, "")
    got = await call(http, "POST", url, json_body={"type": 4, "data": {"content": "x"}})
    assert (got.status, got.body) == (400, {"message": "Interaction has already been "
                                                       "acknowledged.", "code": 40060})

    url = callback(fake.command_interaction("gen"), "?with_response=true")
    got = await call(http, "POST", url, json_body={"type": 4, "data": {"content": "on it"}})
    assert got.status == 200
    assert got.body["interaction"]["type"] == 2
    assert got.body["resource"]["type"] == 4
    assert got.body["resource"]["message"]["content"] == "on it"
    assert got.body["interaction"]["response_message_id"] == got.body["resource"]["message"]["id"]

    late = fake.issue(fake.command_interaction("gen"))
    fake.advance(3.1)
    got = await call(http, "POST", f"{fake.base}/interactions/{late.id}/{late.token}/callback",
                     json_body={"type": 5})
    assert (got.status, got.body) == (404, {"message": "Unknown interaction", "code": 10062})
    got = await call(http, "GET", f"{fake.base}/webhooks/{APP_ID}/{late.token}/messages/@original")
    assert (got.status, got.body["code"]) == (404, 10015)  # the token was invalidated
    got = await call(http, "POST", f"{fake.base}/interactions/{late.id}/wrong/callback",
                     json_body={"type": 5})
    assert got.body["code"] == 10062

    url = callback(fake.autocomplete_interaction(focused="template", value="pro"))
    got = await call(http, "POST", url, json_body={"type": 4, "data": {"content": "no"}})
    assert (got.status, got.error("type")) == (400, "INTERACTION_RESPONSE_TYPE_INVALID")
    too_many = [{"name": f"product_{i}", "value": f"product_{i}"} for i in range(26)]
    got = await call(http, "POST", url, json_body={"type": 8, "data": {"choices": too_many}})
    assert got.error("data", "choices") == "BASE_TYPE_MAX_LENGTH"
    got = await call(http, "POST", url, json_body={"type": 8, "data": {"choices": too_many[:25]}})
    assert got.status == 204

    channel = fake.text_channel(fake.guild())
    batch = fake.post_as(fake.bot_user, channel, "batch 7")
    url = callback(fake.button_interaction("rerun:7", batch))
    got = await call(http, "POST", url, json_body={"type": 6})
    assert got.status == 204 and batch.edits == []  # DEFERRED_UPDATE: nothing shown yet
    url = callback(fake.command_interaction("gen", channel=channel))
    got = await call(http, "POST", url, json_body={"type": 6})
    assert got.error("type") == "INTERACTION_RESPONSE_TYPE_INVALID"  # not for a command
    got = await call(http, "POST", url + "?with_response=1", data=form(
        {"type": 4, "data": {"content": "here", "attachments": [{"id": 0,
                                                                "filename": "a.png"}]}},
        ("upload.png", PNG)))
    assert got.body["resource"]["message"]["attachments"][0]["filename"] == "a.png"
    assert fake.messages_in(channel)[-1].filenames == ["a.png"]

    url = callback(fake.command_interaction("gen"))
    got = await call(http, "POST", url, json_body={"type": 9, "data": {
        "custom_id": "rename", "title": "Rename the batch", "components": [row({
            "type": 4, "custom_id": "name", "style": 1, "label": "Name"})]}})
    assert got.status == 204
    assert [(r["type"], r["status"], r["code"]) for r in fake.responses] == [
        (5, 400, 50035), (5, 200, None), (4, 400, 40060), (4, 200, None), (5, 404, 10062),
        (4, 400, 50035), (8, 400, 50035), (8, 200, None), (6, 200, None), (6, 400, 50035),
        (4, 200, None), (9, 200, None)]  # (a wrong token
    # names no interaction: nothing to record)


async def test_followups_and_the_original_through_the_webhook_routes(
        fake: FakeDiscord, http: aiohttp.ClientSession) -> None:
    guild = fake.guild()
    channel = fake.text_channel(guild)
    thread = fake.thread(channel, "batch 7")
    it = fake.issue(fake.command_interaction("gen", channel=thread))
    assert it.payload["channel"]["parent_id"] == channel["id"]
    hook = f"{fake.base}/webhooks/{APP_ID}/{it.token}"
    got = await call(http, "GET", f"{hook}/messages/@original", bot=False)
    assert (got.status, got.body["code"]) == (404, 10008)
    got = await call(http, "POST", hook, json_body={"content": "too soon"}, bot=False)
    assert (got.status, got.body["code"]) == (404, 10015)

    await call(http, "POST", f"{fake.base}/interactions/{it.id}/{it.token}/callback",
               json_body={"type": 5})
    got = await call(http, "GET", f"{hook}/messages/@original", bot=False)
    assert got.body["flags"] == LOADING and got.body["content"] == ""
    assert got.body["interaction_metadata"]["id"] == it.id
    # right after a defer a followup edits the "thinking" original (documented, deprecated)
    got = await call(http, "POST", f"{hook}?wait=true", json_body={"content": "done"})
    assert got.body["id"] == it.original_id and got.body["flags"] == 0
    got = await call(http, "POST", hook, data=form({"content": "row 1"}, ("row-1.png", PNG)))
    followup = got.body["id"]
    assert followup != it.original_id and it.followup_ids == [followup]
    assert [m.content for m in fake.messages_in(thread)] == ["done", "row 1"]
    got = await call(http, "PATCH", f"{hook}/messages/@original", json_body={"content": "3/3"})
    assert got.body["content"] == "3/3"
    got = await call(http, "PATCH", f"{hook}/messages/{followup}",
                     json_body={"content": "row 1 ✓"})
    assert got.status == 200 and fake.message(followup).content == "row 1 ✓"
    got = await call(http, "GET", f"{hook}/messages/1")
    assert (got.status, got.body["code"]) == (404, 10008)
    assert (await call(http, "DELETE", f"{hook}/messages/{followup}")).status == 204
    assert [m.content for m in fake.messages_in(thread)] == ["3/3"]
    got = await call(http, "GET", f"{fake.base}/webhooks/1/{it.token}/messages/@original")
    assert (got.status, got.body["code"]) == (404, 10015)
    got = await call(http, "GET", f"{fake.base}/webhooks/{APP_ID}/nope/messages/@original")
    assert (got.status, got.body["code"]) == (401, 50027)

    fake.advance(15 * 60 + 1)
    got = await call(http, "PATCH", f"{hook}/messages/@original", json_body={"content": "late"})
    assert (got.status, got.body) == (401, {"message": "Invalid Webhook Token", "code": 50027})


async def test_rate_limit_headers_and_switches(fake: FakeDiscord,
                                               http: aiohttp.ClientSession) -> None:
    me = f"{fake.base}/users/@me"
    got = await call(http, "GET", me)
    assert got.headers["Via"] == "1.1 google"
    assert (got.headers["X-RateLimit-Limit"], got.headers["X-RateLimit-Remaining"]) == ("50",
                                                                                        "49")
    assert float(got.headers["X-RateLimit-Reset-After"]) <= 1.0
    assert float(got.headers["X-RateLimit-Reset"]) > 1e9 and got.headers["X-RateLimit-Bucket"]

    fake.limit("/users/@me", times=2, retry_after=1.5, scope="shared")
    for _ in range(2):
        got = await call(http, "GET", me)
        assert (got.status, got.body) == (429, {"message": "You are being rate limited.",
                                                "retry_after": 1.5, "global": False})
        assert (got.headers["Retry-After"], got.headers["X-RateLimit-Scope"]) == ("2", "shared")
        assert got.headers["Via"] and "X-RateLimit-Global" not in got.headers
    assert (await call(http, "GET", me)).status == 200
    fake.limit(global_=True)
    got = await call(http, "GET", me)
    assert got.headers["X-RateLimit-Global"] == "true" and got.body["global"] is True
    fake.cloudflare()
    got = await call(http, "GET", me)
    assert got.status == 429 and "Via" not in got.headers and "1015" in got.body
    fake.fail(status=502)
    got = await call(http, "GET", me)
    assert (got.status, got.body) == (502, {"message": "502: Bad Gateway", "code": 0})
    assert fake.throttled == 4 and fake.calls["GET /users/@me"] == 7

    fake.bucket_limit = 2  # the real bucket: a third request in the window is refused
    fake._windows.clear()
    statuses = [(await call(http, "GET", me)).status for _ in range(3)]
    assert statuses == [200, 200, 429] and fake.throttled == 5


# --- inbound over HTTP: signing and posting to an Interactions Endpoint URL ---------------------
def test_signed_requests_verify_with_the_public_key() -> None:
    raw, headers = signed({"type": 1, "id": "1"}, timestamp=1_700_000_000)
    public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(PUBLIC_KEY))
    signature = bytes.fromhex(headers["X-Signature-Ed25519"])
    assert headers["X-Signature-Timestamp"] == "1700000000"
    public.verify(signature, b"1700000000" + raw)  # raises if it does not verify
    with pytest.raises(InvalidSignature):
        public.verify(signature, b"1700000001" + raw)  # the signature covers the timestamp
    with pytest.raises(InvalidSignature):
        public.verify(signature, b"1700000000" + raw + b" ")
    _, forged = signed({"type": 1}, timestamp=1, key=Ed25519PrivateKey.generate())
    with pytest.raises(InvalidSignature):
        public.verify(bytes.fromhex(forged["X-Signature-Ed25519"]), b"1" + b'{"type":1}')


@contextlib.asynccontextmanager
async def endpoint(answer: Callable[[dict[str, Any]], Awaitable[web.StreamResponse]]
                   ) -> AsyncIterator[str]:
    """An app's Interactions Endpoint URL on loopback: it verifies each request as Discord
    tells apps to (401 if the signature fails) and answers with `answer`."""
    public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(PUBLIC_KEY))

    async def handle(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            public.verify(bytes.fromhex(request.headers["X-Signature-Ed25519"]),
                          request.headers["X-Signature-Timestamp"].encode() + raw)
        except (InvalidSignature, KeyError, ValueError):
            return web.Response(status=401, text="invalid request signature")
        body = json.loads(raw)
        if body["type"] == 1:
            return web.json_response({"type": 1})
        return await answer(body)

    app = web.Application()
    app.router.add_post("/interactions", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/interactions"
    finally:
        await runner.cleanup()


async def test_post_interaction_to_an_endpoint(fake: FakeDiscord,
                                               http: aiohttp.ClientSession) -> None:
    delay = 0.0

    async def answer(body: dict[str, Any]) -> web.StreamResponse:
        await asyncio.sleep(delay)
        if body["type"] == 3:
            return web.json_response({"type": 5, "data": {"flags": 4}})  # refused: flags
        return web.json_response({"type": 5})

    async with endpoint(answer) as url:
        pong = await fake.post_interaction(url, fake.ping())
        assert pong["status"] == 200 and pong["pong"] is True
        payload = fake.command_interaction("gen", {"sheet": fake.attach("s.xlsx", b"PK")})
        got = await fake.post_interaction(url, payload)
        assert (got["status"], got["json"], got["error"]) == (200, {"type": 5}, None)
        assert [(r["type"], r["via"], r["status"]) for r in fake.responses] == [
            (5, "http", 200)]
        it = fake.interaction_of(payload["token"])
        assert it.via == "http" and fake.message(str(it.original_id)).loading
        hook = f"{fake.base}/webhooks/{APP_ID}/{payload['token']}/messages/@original"
        done = await call(http, "PATCH", hook, json_body={"content": "rendered"}, bot=False)
        assert done.status == 200 and not fake.message(str(it.original_id)).loading

        forged = await fake.post_interaction(url, fake.command_interaction("gen"),
                                             key=Ed25519PrivateKey.generate())
        assert forged["status"] == 401 and len(fake.responses) == 1
        clicked = fake.button_interaction("rerun:7", fake.message(str(it.original_id)))
        refused = await fake.post_interaction(url, clicked)
        assert refused["refusal"]["code"] == 50035 and fake.responses[-1]["status"] == 400
        delay = 0.3
        slow = await fake.post_interaction(url, fake.command_interaction("gen"), timeout=0.1)
        assert slow["error"] == "timeout" and slow["status"] is None
    assert len(fake.http_answers) == 5
