"""The command grammar every front shares: Slack, DingTalk, the terminal.

A `Registry` holds each command declared once — its name and aliases (Chinese too), its
usage line, the arguments and options it takes, the action it performs (and so the role
it needs) and its handler — and parses text against them: `/gen …`, `gen …` and
`@bot gen …` all work; full-width characters and the em dash a phone makes of "--" are
understood. `parse` returns a Command or raises CommandError with a code the fronts
render (bot.messages) together with the command's usage line; it raises nothing else,
whatever the text.
"""

from __future__ import annotations

import difflib
import re
import shlex
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.app.permissions import Role, needs
from bot.errors import Invalid
from bot.messages import say

# A command's handler: a coroutine given the turn and the parsed command.
Handler = Callable[..., Awaitable[None]]

Read = Callable[[str, datetime], Any]  # raw text, the reader's clock -> value (or Invalid)
QUOTES = str.maketrans("“”‘’", "\"\"''")  # phones curl quotes


@dataclass(frozen=True)
class Arg:
    name: str
    optional: bool = False
    read: Read | None = None  # None: the text as typed
    words: int = 1  # the most words it may take (joined by a space), e.g. "job 7"
    rest: bool = False  # the last argument: every word left, as a list (each read alone)


@dataclass(frozen=True)
class Option:
    read: Read | None = None  # None: a flag, True when given
    default: Any = None
    repeat: bool = False  # may be given again and again: a tuple of every value, in order


@dataclass(frozen=True)
class Command:
    name: str
    args: dict[str, Any]
    options: dict[str, Any]


@dataclass(frozen=True)
class Spec:
    """One command, declared once."""
    name: str
    usage: str  # after the command name; the same in both languages
    action: str  # what it does (an Action or an image action), and so the role it needs
    handler: Callable[..., Awaitable[None]]
    args: tuple[Arg, ...] = ()
    options: dict[str, Option] = field(default_factory=dict)  # "--skip-invalid" -> Option
    aliases: tuple[str, ...] = ()

    @property
    def role(self) -> Role:
        return needs(self.action)

    @property
    def line(self) -> str:
        return f"/{self.name} {self.usage}".rstrip()


class CommandError(Invalid):
    """What was wrong with what was typed; `usage` is the command's usage line to show."""

    def __init__(self, code: str, /, usage: str | None = None, **details: Any):
        super().__init__(code, **details)
        self.usage = usage

    def render(self, lang: str = "en") -> str:
        text = super().render(lang)
        return f"{text}\n{say('usage', lang, usage=self.usage)}" if self.usage else text


class Registry:
    """The commands, by name: what the grammar, permissions and dispatch read."""

    def __init__(self) -> None:
        self.specs: dict[str, Spec] = {}
        self.names: dict[str, str] = {}  # every name and alias -> the command's name

    def command(self, name: str, usage: str = "", *, args: tuple[Arg, ...] = (),
                options: dict[str, Option] | None = None, aliases: tuple[str, ...] = (),
                action: str | None = None) -> Callable[[Handler], Handler]:
        """Declare a command; the decorated coroutine handles it."""
        def register(handler: Handler) -> Handler:
            spec = Spec(name, usage, action or name, handler, args, options or {},
                        aliases)
            needs(spec.action)  # (an action no role table knows fails here, not when used)
            for word in (name, *aliases):
                if word in self.names:
                    raise ValueError(f"/{word} is declared twice")
                self.names[word] = name
            self.specs[name] = spec
            return handler
        return register

    def __getitem__(self, name: str) -> Spec:
        return self.specs[name]

    # --- reading text ------------------------------------------------------------------
    def parse(self, text: Any, *, now: datetime) -> Command:
        """The command in `text` (addressed to the bot), or CommandError. `now` (aware)
        is the reader's clock and time zone, for times."""
        if not isinstance(text, str):
            raise CommandError("empty_command")
        tokens = _tokens(_normalize(text))
        while tokens and _is_mention(tokens[0]):
            tokens.pop(0)
        if not tokens:
            raise CommandError("empty_command")
        word = tokens[0].lstrip("/").lower()
        if word not in self.names:
            close = difflib.get_close_matches(word, list(self.specs), n=1, cutoff=0.6)
            if close:
                raise CommandError("unknown_command_close", word=tokens[0][:40],
                                   name=f"/{close[0]}")
            raise CommandError("unknown_command", word=tokens[0][:40])
        spec = self.specs[self.names[word]]
        try:
            given, flags = _split(spec, tokens[1:])
            return Command(spec.name, _args(spec, given, now), _options(spec, flags, now))
        except CommandError as e:
            e.usage = spec.line
            raise
        except Invalid as e:  # a value a reader refused
            raise CommandError(e.code, spec.line, **e.details) from None

    # --- what a person reads -----------------------------------------------------------
    def usage(self, name: str, lang: str = "en") -> str:
        return say("usage", lang, usage=self.specs[name].line)

    def help(self, name: str | None = None, lang: str = "en") -> str:
        """`/help`: every command with what it does; `/help NAME`: that one, with its usage."""
        if name:
            return f"{self.usage(name, lang)}\n{say('help_' + name, lang)}"
        lines = [say("help_intro", lang)]
        lines += [f"{s.line} — {say('help_' + s.name, lang)}" for s in self.specs.values()]
        return "\n".join(lines)


def _normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    # Phones turn "--" into an em or en dash; quotes into curly ones.
    text = re.sub(r"(^|\s)[—–]+(?=\w)", r"\1--", text)
    return text.translate(QUOTES)


def _tokens(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        raise CommandError("unbalanced_quote") from None


def only_mentions(text: str) -> bool:
    """Nothing but mentions of the bot (a file shared with "@genbot"): no command."""
    return all(_is_mention(token) for token in _normalize(text).split())


def _is_mention(token: str) -> bool:
    """@genbot, @机器人, <@U024BE7LH> (Slack): a mention of the bot ahead of the command.
    (The platform adapter has already decided the message is addressed to the bot.)"""
    return bool(re.fullmatch(r"<@[^>]+>", token)) or (token.startswith("@") and len(token) > 1)


def _split(spec: Spec, tokens: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Positional words, and the options given (a flag as True; a repeated option as the
    list of its values)."""
    given: list[str] = []
    flags: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.startswith("--") and len(token) > 2:
            name, _, inline = token.partition("=")
            name = name.lower()
            if name not in spec.options:
                raise CommandError("unknown_option", option=name[:40])
            option = spec.options[name]
            value: Any = True  # a flag
            if option.read is not None:
                if inline:
                    value = inline
                elif i + 1 < len(tokens):
                    i += 1
                    value = tokens[i]
                else:
                    raise CommandError("option_needs_value", option=name)
            if option.repeat:
                flags.setdefault(name, []).append(value)
            else:
                flags[name] = value
        else:
            given.append(token)
        i += 1
    return given, flags


def _args(spec: Spec, given: list[str], now: datetime) -> dict[str, Any]:
    required = [a for a in spec.args if not a.optional]
    if len(given) < len(required):
        raise CommandError("missing_argument", name=required[len(given)].name.upper())
    args: dict[str, Any] = {a.name: None for a in spec.args}
    rest = list(given)
    for i, arg in enumerate(spec.args):
        if arg.rest:
            args[arg.name] = [arg.read(word, now) if arg.read else word for word in rest]
            rest = []
            break
        if not rest:
            break
        after = len(spec.args) - i - 1  # the words the arguments after this one may take
        take = max(1, min(arg.words, len(rest) - after))
        raw, rest = " ".join(rest[:take]), rest[take:]
        args[arg.name] = arg.read(raw, now) if arg.read else raw
    if rest:
        raise CommandError("extra_argument", value=rest[0][:40])
    return args


def _options(spec: Spec, flags: dict[str, Any], now: datetime) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, option in spec.options.items():
        key = name.lstrip("-").replace("-", "_")
        if name not in flags:
            out[key] = False if option.read is None else option.default
        elif option.read is None:
            out[key] = True
        elif option.repeat:
            out[key] = tuple(option.read(str(v), now) for v in flags[name])
        else:
            out[key] = option.read(str(flags[name]), now)
    return out
