"""genbot's chat commands as Discord slash commands, made from the one command registry
(bot.chat.commands): a new command there is a new slash command here, in English with
its Chinese name and description (Discord shows each person their client's language).

Every command takes what would follow it typed (`args`, its usage line as the hint);
/gen takes the template from a list Discord fills as the person types (autocomplete,
bot.chat.receive.Chat.suggest), and the sheet and the pictures its rows name as
attachments (/schedule too); the others whose usage names a file (a mask, a workflow)
take one attachment. What arrives is put
back together as the text the person would have typed, so the grammar, permissions and
replies are the core's, the same as on every platform.
"""

from __future__ import annotations

import re
from typing import Any

from bot.chat.grammar import Registry, Spec
from bot.messages import say

STRING, ATTACHMENT = 3, 11  # Discord's option types
NAME = re.compile(r"^[-_\w]{1,32}$")  # a command's or option's name (lowercase)
ZH = ("zh-CN", "zh-TW")  # the Discord locales genbot's Chinese serves
FILE_WORDS = ("FILE", ".png")  # a usage that names a file: the command takes an attachment
PICTURES = 9  # a sheet's command takes this many pictures beside it (10 files, as a message)


def slash_commands(registry: Registry) -> list[dict[str, Any]]:
    """Every command, as Discord's bulk-overwrite body (PUT applications/{app}/commands)."""
    return [slash_command(spec) for spec in registry.specs.values()]


def slash_command(spec: Spec) -> dict[str, Any]:
    options: list[dict[str, Any]] = []
    if spec.name == "gen":
        options.append(option("template", STRING, "template", required=True,
                              autocomplete=True))
    sheet = "TEMPLATE" in spec.usage and "FILE" in spec.usage  # /gen, /schedule
    if sheet:  # the sheet and the pictures its rows name, as a message would carry them
        options.append(option("sheet", ATTACHMENT, "sheet"))
        options += [option(f"picture{i}", ATTACHMENT, "picture") for i in range(1, PICTURES + 1)]
    elif any(word in spec.usage for word in FILE_WORDS):
        options.append(option("file", ATTACHMENT, "file"))
    if spec.usage:
        options.append({"name": "args", "type": STRING,
                        "description": _short(spec.usage),
                        "required": spec.name != "gen" and not spec.usage.startswith("[")})
    options.sort(key=lambda o: not o.get("required"))  # (Discord: required ones first)
    made: dict[str, Any] = {
        "name": spec.name, "type": 1, "description": _short(say(f"help_{spec.name}", "en")),
        "description_localizations": {z: _short(say(f"help_{spec.name}", "zh")) for z in ZH},
        "options": options}
    chinese = next((a for a in spec.aliases if not a.isascii() and NAME.match(a)), None)
    if chinese:
        made["name_localizations"] = {z: chinese for z in ZH}
    return made


def option(name: str, kind: int, described: str, *, required: bool = False,
           autocomplete: bool = False) -> dict[str, Any]:
    made: dict[str, Any] = {
        "name": name, "type": kind, "description": _short(say(f"slash_{described}", "en")),
        "description_localizations": {z: _short(say(f"slash_{described}", "zh")) for z in ZH},
        "required": required}
    if autocomplete:
        made["autocomplete"] = True
    return made


def typed(data: dict[str, Any]) -> tuple[str, list[str]]:
    """What a slash command's `data` stands for, typed: its text ("/gen product_main
    --priority high") and the ids of the attachments it carries."""
    values: dict[str, str] = {}
    files: list[str] = []
    for o in data.get("options") or []:
        if not isinstance(o, dict):
            continue
        if o.get("type") == ATTACHMENT and isinstance(o.get("value"), str):
            files.append(o["value"])
        elif isinstance(o.get("value"), str | int | float):
            values[str(o.get("name"))] = str(o["value"])
    words = [f"/{data.get('name')}", values.get("template", ""), values.get("args", "")]
    return " ".join(w for w in words if w.strip()), files


def focused(data: dict[str, Any]) -> tuple[str, str] | None:
    """The option an autocomplete interaction asks choices for, and what is typed so far."""
    for o in data.get("options") or []:
        if isinstance(o, dict) and o.get("focused"):
            return str(o.get("name")), str(o.get("value") or "")
    return None


def _short(text: str) -> str:
    """Discord's descriptions: 1 to 100 characters, one line."""
    line = " ".join(text.split())
    return line if len(line) <= 100 else line[:99] + "…"
