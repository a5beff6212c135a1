"""The Discord adapter's pieces that need no Discord: the slash commands made from the
command registry, an interaction read into the core's words, Ed25519 signatures, the
escaping and the 2,000-character split."""

from __future__ import annotations

import re
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bot.chat.commands import COMMANDS
from bot.chat.discord.adapter import CONTENT_MAX, chunks
from bot.chat.discord.commands import ATTACHMENT, STRING, slash_commands, typed
from bot.chat.discord.inbound import incoming, verified
from bot.chat.discord.markup import MARKDOWN
from bot.messages import say
from bot.settings import DiscordConfig
from storage.config import ConfigError

NAME = re.compile(r"^[-_\w]{1,32}$")
TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GaBcDe.abcdefghijklmnopqrstuvwxyz0123456789ABCD"


def test_every_command_is_a_slash_command_discord_takes_with_its_chinese_name():
    made = {c["name"]: c for c in slash_commands(COMMANDS)}
    assert set(made) == set(COMMANDS.specs) and len(made) <= 100  # Discord's global limit
    for c in made.values():
        assert NAME.match(c["name"]) and c["name"] == c["name"].lower()
        assert 1 <= len(c["description"]) <= 100
        assert all(1 <= len(d) <= 100 for d in c["description_localizations"].values())
        assert len(c["options"]) <= 25
        required = [o.get("required", False) for o in c["options"]]
        assert required == sorted(required, reverse=True)  # required ones first
    gen = made["gen"]
    assert gen["name_localizations"]["zh-CN"] == "生成"
    assert [(o["name"], o["type"], o.get("autocomplete", False), o["required"])
            for o in gen["options"]] == [("template", STRING, True, True),
                                         ("sheet", ATTACHMENT, False, False),
                                         *[(f"picture{i}", ATTACHMENT, False, False)
                                           for i in range(1, 10)],
                                         ("args", STRING, False, False)]
    assert [o["name"] for o in made["schedule"]["options"]][:2] == ["args", "sheet"]
    assert made["queue"]["description_localizations"]["zh-CN"] == say("help_queue", "zh")
    assert made["queue"]["description"] == say("help_queue", "en")
    assert [o["name"] for o in made["repaint"]["options"]] == ["args", "file"]
    assert made["retry"]["options"][0]["required"] and \
        not made["status"]["options"][0]["required"]  # "BATCH" vs "[BATCH]"
    assert "options" in made["pause"] and made["pause"]["options"] == []


def test_a_slash_command_is_read_back_as_the_text_typed():
    data = {"name": "gen", "options": [
        {"name": "sheet", "type": 11, "value": "900"},
        {"name": "template", "type": 3, "value": "product_main"},
        {"name": "args", "type": 3, "value": "--priority high"}]}
    assert typed(data) == ("/gen product_main --priority high", ["900"])
    assert typed({"name": "queue"}) == ("/queue", [])
    assert typed({"name": "status", "options": [{"name": "args", "type": 3, "value": "7"},
                                                "junk", {"type": 11, "value": 5}]}) == \
        ("/status 7", [])


def signed(key: Ed25519PrivateKey, body: bytes, ts: str) -> str:
    return key.sign(ts.encode() + body).hex()


def test_a_signature_covers_the_body_and_the_timestamp_and_goes_stale():
    key = Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes_raw().hex()
    body, now = b'{"type": 1}', time.time()
    ts = str(int(now))
    sig = signed(key, body, ts)
    assert verified(public, sig, ts, body, now=now)
    assert not verified(public, sig, str(int(now) + 1), body, now=now)  # timestamp changed
    assert not verified(public, sig, ts, body + b" ", now=now)
    assert not verified(Ed25519PrivateKey.generate().public_key().public_bytes_raw().hex(),
                        sig, ts, body, now=now)  # another app's key
    assert not verified(public, "zz", ts, body, now=now)  # not hex
    assert not verified(public, sig, "", body, now=now) and not verified("", sig, ts, body)
    old = str(int(now) - 16 * 60)
    assert not verified(public, signed(key, body, old), old, body, now=now)  # stale


def interaction(**more) -> dict:
    return {"id": "5001", "type": 2, "token": "tok", "application_id": "42",
            "channel_id": "C1", "channel": {"id": "C1", "type": 0}, "guild_id": "G1",
            "locale": "zh-CN", "member": {"user": {"id": "U1"}, "roles": ["777"],
                                         "permissions": "0"},
            "data": {"name": "status", "options": []}, **more}


def test_an_interaction_is_a_person_in_a_channel_with_the_role_their_roles_give():
    settings = DiscordConfig(roles=("777000000000000000=reviewer",))
    msg = incoming(interaction(), DiscordConfig(), now=100.0)
    assert msg is not None
    assert (msg.platform, msg.user, msg.conversation, msg.thread, msg.text, msg.lang,
            msg.workspace, msg.platform_role, msg.message) == (
        "discord", "U1", "C1", None, "/status", "zh-CN", "G1", None, "interaction:5001")
    assert msg.context["interaction"] == {"id": "5001", "token": "tok", "app": "42",
                                          "at": 100.0, "kind": "command", "channel": "C1",
                                          "on": None}
    role = "777000000000000000"
    mapped = incoming(interaction(member={"user": {"id": "U1"}, "roles": [role, "1"],
                                          "permissions": "8"}), settings)
    assert mapped is not None and mapped.platform_role == "reviewer"
    admins = DiscordConfig(roles=settings.roles, platform_admins=True)
    boss = incoming(interaction(member={"user": {"id": "U1"}, "roles": [], "permissions": "8"}),
                    admins)
    assert boss is not None and boss.platform_role == "admin"
    # In a thread: the conversation is its channel, the thread the thread.
    inside = incoming(interaction(channel_id="T9", channel={"id": "T9", "type": 11,
                                                            "parent_id": "C1"}), settings)
    assert inside is not None and (inside.conversation, inside.thread) == ("C1", "T9")
    # A DM: a user, no member, no roles.
    dm = incoming({**interaction(), "member": None, "user": {"id": "U2"}, "guild_id": None},
                  settings)
    assert dm is not None and (dm.user, dm.platform_role, dm.workspace) == ("U2", None, None)
    press = incoming(interaction(type=3, data={"custom_id": "/keep j4", "component_type": 2},
                                 message={"id": "M7"}), settings)
    assert press is not None and press.text == "/keep j4" and \
        press.context["interaction"]["kind"] == "press" and \
        press.context["interaction"]["on"] == "M7"
    for broken in ({**interaction(), "token": None}, {**interaction(), "data": "x"},
                   {**interaction(), "member": None}, interaction(type=3, data={}),
                   interaction(type=9)):
        assert incoming(broken, settings) is None


def test_text_from_outside_cannot_format_ping_or_hide_a_link():
    shown = MARKDOWN.render("# *bold* @everyone <@123456789012345678> [sign in](https://x.y)\n"
                            "1. one\n-# small", mention="55")
    assert shown.startswith("<@55> \\# \\*bold\\* @\u200beveryone <@\u200b123456789012345678>"
                            " \\[sign in](https://x.y)")
    assert shown.splitlines()[1:] == ["1\\. one", "\\-# small"]


def test_long_text_is_split_between_lines_into_messages_discord_takes():
    lines = [f"line {i} " + "x" * 90 for i in range(60)]
    parts = chunks("\n".join(lines))
    assert all(len(p) <= CONTENT_MAX for p in parts) and len(parts) == 3
    assert "\n".join(parts) == "\n".join(lines)
    one = "y" * (CONTENT_MAX * 2 + 5)
    assert [len(p) for p in chunks(one)] == [CONTENT_MAX, CONTENT_MAX, 5]
    assert chunks("short") == ["short"]


@pytest.mark.parametrize("settings, says", [
    ({"token": "abc"}, "expected a bot token"),
    ({"token": TOKEN, "mode": "interactions"}, "expected public_key"),
    ({"token": TOKEN, "guilds": ("my server",)}, "is not a server id"),
    ({"token": TOKEN, "roles": ("Moderators=admin",)}, "ROLE_ID=admin"),
    ({"token": TOKEN, "api_url": "http://discord.example"}, "https://"),
])
def test_check_config_says_what_is_malformed(settings, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        DiscordConfig(**settings).check("genbot.toml")
    DiscordConfig(token=TOKEN, mode="interactions", public_key="ab" * 32,
                  roles=("123456789012345678=viewer",)).check("genbot.toml")
