"""What Discord sends genbot, read into the chat core's words.

Interactions — a slash command, a button press, an autocomplete — arrive either over the
gateway (discord.py's connection; the default) or as signed POSTs to the app's
Interactions Endpoint URL, never both: both are read here from Discord's own JSON shape,
so the two modes cannot drift (`payload_of` gives a gateway interaction that shape
back). Messages that @-mention the bot arrive over the gateway only (`message_incoming`).

- A person is their user id (`discord:123…` in [chat] roles); their Discord roles give a
  genbot role through [discord] roles, the Administrator permission through
  platform_admins.
- A conversation is the channel; inside a thread, the thread's parent, with the thread
  as the thread (a thread started from a message has that message's id).
- An interaction's token, kept in the reply's context, lets genbot answer it for 15
  minutes (discord.Discord.send).
"""

from __future__ import annotations

import time
from typing import Any

import discord
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bot.chat.discord.commands import typed
from bot.chat.platform import FileRef, Incoming, text_of
from bot.settings import DiscordConfig

THREADS = {10, 11, 12}  # announcement, public and private threads (Discord's channel types)
ADMINISTRATOR = 1 << 3  # the permission bit
TOKEN_LIFE = 15 * 60.0  # s an interaction's token answers (Discord: 15 minutes)


def verified(public_key: str, signature: str, timestamp: str, body: bytes, *,
             now: float | None = None) -> bool:
    """Discord's Ed25519 signature over timestamp + body, by the app's key; and a
    timestamp no older than a token lives (Discord documents no window: a request replayed
    later could not be answered anyway, and is not run)."""
    try:
        key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key))
        key.verify(bytes.fromhex(signature), timestamp.encode() + body)
        sent = float(timestamp)
    except (ValueError, InvalidSignature):
        return False
    return abs((time.time() if now is None else now) - sent) <= TOKEN_LIFE


def incoming(payload: dict[str, Any], settings: DiscordConfig,
             now: float | None = None) -> Incoming | None:
    """A slash command or button press as the core reads it; None for what is not one
    (or lacks a person or a channel)."""
    data = payload.get("data")
    kind = payload.get("type")
    member = payload.get("member") if isinstance(payload.get("member"), dict) else None
    user = (member or {}).get("user") or payload.get("user")
    channel: dict[str, Any] = payload["channel"] if isinstance(payload.get("channel"), dict) \
        else {}
    user_id, channel_id = text_of(user, "id"), text_of(payload, "channel_id") or \
        text_of(channel, "id")
    token, interaction = text_of(payload, "token"), text_of(payload, "id")
    if not (isinstance(data, dict) and user_id and channel_id and token and interaction):
        return None
    files: tuple[FileRef, ...] = ()
    if kind == 2:
        text, ids = typed(data)
        found = (data.get("resolved") or {}).get("attachments") or {}
        files = tuple(f for i in ids if (f := file_ref(found.get(i))) is not None)
    elif kind == 3 and text_of(data, "custom_id"):
        text = str(data["custom_id"])
    else:
        return None
    conversation, thread = where(channel_id, channel)
    return Incoming(
        "discord", user_id, conversation, text, message=f"interaction:{interaction}",
        thread=thread, files=files, workspace=text_of(payload, "guild_id"),
        lang=text_of(payload, "locale"), platform_role=role_of(member, settings),
        context={"interaction": {
            "id": interaction, "token": token, "app": text_of(payload, "application_id"),
            "at": time.time() if now is None else now,
            "kind": "command" if kind == 2 else "press", "channel": channel_id,
            "on": text_of(payload.get("message"), "id")}})


def message_incoming(message: discord.Message, me: int, settings: DiscordConfig
                     ) -> Incoming | None:
    """A message that @-mentions the bot (or is sent to it directly): its words without
    the mention, and its attachments."""
    if message.author.bot or not (message.guild is None or me in message.raw_mentions):
        return None
    text = message.content.replace(f"<@{me}>", " ").replace(f"<@!{me}>", " ").strip()
    files = tuple(f for a in message.attachments if (f := file_ref({
        "id": str(a.id), "filename": a.filename, "size": a.size, "url": a.url})) is not None)
    channel = message.channel
    parent = getattr(channel, "parent_id", None)
    conversation, thread = (str(parent), str(channel.id)) if parent else (str(channel.id), None)
    roles = [str(r.id) for r in getattr(message.author, "roles", ())]
    perms = getattr(message.author, "guild_permissions", None)
    member = {"roles": roles, "permissions": str(perms.value if perms else 0)}
    return Incoming(
        "discord", str(message.author.id), conversation, text, message=str(message.id),
        thread=thread or str(message.id) if message.guild else thread, files=files,
        workspace=str(message.guild.id) if message.guild else None,
        platform_role=role_of(member if message.guild else None, settings))


def where(channel_id: str, channel: dict[str, Any]) -> tuple[str, str | None]:
    """(conversation, thread) of a channel: a thread's parent and the thread itself."""
    parent = text_of(channel, "parent_id")
    if channel.get("type") in THREADS and parent:
        return parent, channel_id
    return channel_id, None


def role_of(member: dict[str, Any] | None, settings: DiscordConfig) -> str | None:
    """The genbot role a guild member's Discord roles (or Administrator) give."""
    if not member:
        return None
    try:
        admin = int(member.get("permissions") or 0) & ADMINISTRATOR
    except (TypeError, ValueError):
        admin = 0
    if admin and settings.platform_admins:
        return "admin"
    roles = member.get("roles")
    return settings.role_of([str(r) for r in roles] if isinstance(roles, list) else [])


def file_ref(attachment: Any) -> FileRef | None:
    url, name = text_of(attachment, "url"), text_of(attachment, "filename")
    if not (url and name):
        return None
    size = attachment.get("size")
    return FileRef(name, size if isinstance(size, int) and size >= 0 else 0,
                   {"url": url, "name": name})


def payload_of(interaction: discord.Interaction) -> dict[str, Any]:
    """A gateway interaction (discord.py's object) in the JSON shape Discord POSTs."""
    channel = interaction.channel
    user = interaction.user
    member = None
    if isinstance(user, discord.Member):
        member = {"user": {"id": str(user.id)}, "roles": [str(r.id) for r in user.roles
                                                           if r.id != interaction.guild_id],
                  "permissions": str(interaction.permissions.value)}
    return {
        "id": str(interaction.id), "type": interaction.type.value, "token": interaction.token,
        "application_id": str(interaction.application_id), "data": interaction.data or {},
        "guild_id": str(interaction.guild_id) if interaction.guild_id else None,
        "channel_id": str(interaction.channel_id) if interaction.channel_id else None,
        "channel": {"id": str(interaction.channel_id), "type": getattr(
            getattr(channel, "type", None), "value", None),
            "parent_id": str(p) if (p := getattr(channel, "parent_id", None)) else None},
        **({"member": member} if member else {"user": {"id": str(user.id)}}),
        "locale": interaction.locale.value,
        **({"message": {"id": str(interaction.message.id)}} if interaction.message else {})}
