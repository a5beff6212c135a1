"""Sales channels as data: the files each channel takes, read from TOML.

A channel (Taobao, Douyin, Amazon …) is a list of renditions — the exact files that go
live there: a size, how the picture is fitted to it, a background rule, a format and
quality, a largest file size, whether words may appear in the picture, the share of the
frame the product must fill, the margins a label keeps clear of, and the pattern its
file is named by (`{sku}_{channel}_{n}.jpg`: sheet columns and these words). Shipped
presets live in templates/shipped/channels.toml, each rule with its source; a team's own
file ([deliver] channels) adds channels and replaces presets of the same name.

Everything here is data and checks: nothing is drawn (templates.renditions makes the
files, the executor runs it after a job's generation). A job carries its renditions
already bound (`Deliverable`: the channel's rendition, its file name for that row, and
the AI-content label it gets), so an executor needs no channel file of its own.

The AI-content label (GB 45438-2025, 《人工智能生成合成内容标识办法》): every rendition
carries the implicit label in its metadata; the explicit one — visible words such as
"AI生成" — is drawn unless the channel's preset makes it optional AND an admin lists the
channel in [deliver] unlabelled (a shop outside China that forbids words on its main
image, such as Amazon's).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import msgspec

from templates.layouts import Binder, Overlay
from templates.patterns import Unknown, pattern_fields

FITS = ("crop", "pad", "extend")  # crop around the product, pad around it with the
# background, or extend: the canvas grown to the rendition's aspect by the fill model
BACKGROUNDS = ("any", "white")  # "white": pure RGB 255 wherever the product is not
FORMATS = {"jpg": "JPEG", "webp": "WEBP", "png": "PNG"}
LABEL_RULES = ("required", "optional")
CORNERS = ("bottom_right", "bottom_left", "top_right", "top_left")
LABEL_HEIGHT = 0.05  # GB 45438-2025: the words at least 5 % of the picture's short side high
# The words a file pattern may use besides the sheet's columns.
PATTERN_WORDS = ("channel", "rendition", "n", "row", "batch", "job", "template", "ext")
MAX_RENDITIONS = 12  # per channel: a pack is made beside the next generation, not instead


class ChannelError(Exception):
    """A channels file that cannot be used, said with its file, channel and key."""

    def __init__(self, file: str, where: str, message: str):
        super().__init__(f"{file}: {where}: {message}")
        self.file, self.where, self.message = file, where, message


class AiLabel(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The visible AI-content label: its words, corner, and height over the short side."""
    text: str = "AI生成"
    position: Literal["bottom_right", "bottom_left", "top_right", "top_left"] = "bottom_right"
    height: float = LABEL_HEIGHT


class Rendition(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One file a channel takes."""
    name: str  # "main", "white", "cover": unique within its channel
    size: tuple[int, int]  # width, height in pixels
    fit: Literal["crop", "pad", "extend"] = "crop"
    background: Literal["any", "white"] = "any"
    format: Literal["jpg", "webp", "png"] = "jpg"
    quality: int = 90  # JPEG/WebP; lowered, down to 60, to meet max_kb
    max_kb: int = 0  # largest file in KiB; 0: no limit
    text: bool = True  # words may appear in it (a label its channel requires aside)
    fill: float = 0.0  # least share of the frame the product's box covers; 0: no rule
    safe: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # top right bottom left
    file: str = "{sku}_{channel}_{n}.{ext}"

    @property
    def ext(self) -> str:
        return self.format


class Channel(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    title: str  # as people read it, English
    title_zh: str  # and Chinese
    renditions: list[Rendition]
    label: Literal["required", "optional"] = "required"  # the explicit AI label
    ai_label: AiLabel = AiLabel()
    name: str = ""  # its key in the file (set when loaded)
    source: str = ""  # the file it came from


class Deliverable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One rendition bound to one job: what the executor makes after its generation."""
    channel: str
    rendition: Rendition
    file: str  # the file name, the pattern filled in for this row
    label: AiLabel | None  # the explicit label to draw; None: an admin turned it off
    overlay: Overlay | None = None  # the layout's words, price, badge and logo for this row
    picture: str = ""  # an extend's: the job's picture grown to its aspect (its file name in
    #   the batch's folder); "": the job's first picture


PRESETS = Path(str(files("templates") / "shipped" / "channels.toml"))


def load_file(path: Path) -> dict[str, Channel]:
    """The channels of one TOML file, each checked; ChannelError names what is wrong."""
    file = str(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ChannelError(file, "-", f"cannot be read: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ChannelError(file, "-", f"is not TOML: {e}") from None
    return {name: _channel(file, name, body) for name, body in raw.items()}


def _channel(file: str, name: str, body: Any) -> Channel:
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", name):
        raise ChannelError(file, f"[{name}]", "a channel's name is lowercase letters, digits "
                           "and _ (at most 40), starting with a letter: it is typed in "
                           "/gen … --channels and names folders")
    if not isinstance(body, dict):
        raise ChannelError(file, name, "expected a table [name] with title, title_zh and "
                           "[[name.renditions]]")
    try:
        channel = msgspec.convert({**body, "name": name, "source": file}, Channel)
    except msgspec.ValidationError as e:
        raise ChannelError(file, f"[{name}]", _said(str(e))) from None
    _check(file, channel)
    return channel


def _said(error: str) -> str:
    """msgspec's words, its `$.` path made the file's keys (renditions[0].size)."""
    message, _, where = error.partition(" - at `$")
    return f"{where.rstrip('`').lstrip('.')}: {message}" if where else message


def _check(file: str, ch: Channel) -> None:
    where = f"[{ch.name}]"
    if not ch.renditions:
        raise ChannelError(file, where, "has no renditions: add at least one "
                           f"[[{ch.name}.renditions]]")
    if len(ch.renditions) > MAX_RENDITIONS:
        raise ChannelError(file, where, f"has {len(ch.renditions)} renditions; at most "
                           f"{MAX_RENDITIONS}")
    if not 0.01 <= ch.ai_label.height <= 0.5:
        raise ChannelError(file, f"{where} ai_label.height", f"{ch.ai_label.height}: "
                           "expected a share of the short side from 0.01 to 0.5 "
                           f"(GB 45438-2025 asks for at least {LABEL_HEIGHT})")
    if not ch.ai_label.text.strip():
        raise ChannelError(file, f"{where} ai_label.text", "is empty: the label must say "
                           "the picture is AI-generated")
    seen: set[str] = set()
    for i, r in enumerate(ch.renditions):
        at = f"{where} renditions[{i}]"
        if r.name in seen:
            raise ChannelError(file, f"{at} name", f'"{r.name}" twice in one channel')
        seen.add(r.name)
        _check_rendition(file, at, r)


def _check_rendition(file: str, at: str, r: Rendition) -> None:
    """One rendition's values, each in its range; its file pattern one that can be filled."""
    if not re.fullmatch(r"[a-z0-9_]{1,40}", r.name):
        raise ChannelError(file, f"{at} name", f'"{r.name}": lowercase letters, digits '
                           "and _, at most 40")
    if not all(16 <= side <= 10_000 for side in r.size):
        raise ChannelError(file, f"{at} size", f"{list(r.size)}: each side from 16 to "
                           "10000 pixels")
    if not 30 <= r.quality <= 100:
        raise ChannelError(file, f"{at} quality", f"{r.quality}: expected 30 to 100")
    if r.max_kb < 0:
        raise ChannelError(file, f"{at} max_kb", f"{r.max_kb}: expected 0 (no limit) "
                           "or a size in KiB")
    if not 0 <= r.fill < 1:
        raise ChannelError(file, f"{at} fill", f"{r.fill}: expected a share from 0 "
                           "(no rule) to below 1, such as 0.85")
    if not all(0 <= s < 0.5 for s in r.safe):
        raise ChannelError(file, f"{at} safe", f"{list(r.safe)}: each margin a share "
                           "from 0 to below 0.5 (top, right, bottom, left)")
    try:
        pattern_fields(r.file)
    except ValueError as e:
        raise ChannelError(file, f"{at} file", f'"{r.file}": {e}') from None
    if not r.file.lower().endswith(("." + r.format, ".{ext}")) and \
            not (r.format == "jpg" and r.file.lower().endswith(".jpeg")):
        raise ChannelError(file, f"{at} file", f'"{r.file}" does not end in '
                           f'".{r.format}" (its format) or ".{{ext}}"')
    if "/" in r.file or "\\" in r.file or r.file.startswith("."):
        raise ChannelError(file, f"{at} file", f'"{r.file}": a file name, no folders')


@cache
def presets() -> dict[str, Channel]:
    return load_file(PRESETS)


def catalogue(team_file: str = "") -> dict[str, Channel]:
    """The shipped presets with the team's own channels over them (a team's channel of a
    preset's name replaces it whole). The team's file is read again when it changes."""
    found = dict(presets())
    if team_file:
        path = Path(team_file)
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            stamp = -1  # (load_file says why it cannot be read)
        found.update(_team(path, stamp))
    return found


@lru_cache(maxsize=8)
def _team(path: Path, stamp: int) -> dict[str, Channel]:
    return load_file(path)


def chosen(names: Iterable[str], known: Mapping[str, Channel]) -> list[Channel]:
    """The channels named (comma lists allowed, case and spaces ignored, each once, in the
    order first named); Unknown for a name the catalogue lacks."""
    out: dict[str, Channel] = {}
    for part in names:
        for name in (n.strip().lower() for n in str(part).split(",")):
            if not name:
                continue
            if name not in known:
                raise Unknown(name, known)
            out.setdefault(name, known[name])
    return list(out.values())


_UNSAFE = re.compile(r'[\\/:*?"<>|\x00-\x1f]+')


class Missing(Exception):
    """A file pattern's field the row has no value for (no such column, or an empty cell)."""

    def __init__(self, field_name: str, channel: str):
        super().__init__(field_name)
        self.field, self.channel = field_name, channel


def _cell(value: Any) -> str:
    """A cell as its file name shows it: a whole number without ".0"."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def file_name(rendition: Rendition, channel: str, n: int, values: Mapping[str, Any]) -> str:
    """The rendition's file name for one row: its pattern filled with the row's columns
    (`values`, sheet column -> cell) and the channel's words (Missing: a field the row has
    no value for). What a file system or a zip could not hold is replaced by "_"."""
    words = {str(k).strip().lower(): v for k, v in values.items()}
    words.update(channel=channel, rendition=rendition.name, n=n, ext=rendition.ext)
    filled = {}
    for field_name in pattern_fields(rendition.file):
        key = field_name.lower()
        if key not in words or _cell(words[key]) == "":
            raise Missing(field_name, channel)
        filled[field_name] = _cell(words[key])
    name = _UNSAFE.sub("_", rendition.file.format(**filled)).strip(". ")
    return name[:180] or f"{channel}_{n}.{rendition.ext}"


def missing_fields(channels: Iterable[Channel], columns: Iterable[str]) -> list[tuple[str, str]]:
    """(channel, field) for each pattern field that is neither a sheet column nor one of
    the channel's words: said at submission, before anything is queued."""
    have = {c.lower() for c in columns} | set(PATTERN_WORDS)
    out = []
    for ch in channels:
        for r in ch.renditions:
            out += [(ch.name, f) for f in pattern_fields(r.file) if f.lower() not in have]
    return list(dict.fromkeys(out))


# --- a submission's channels ------------------------------------------------------------

CHANNELS_COLUMNS = ("channels", "渠道")  # a sheet column of each row's own channels
WORD_OPS = ("text", "watermark")  # ops that put words in the picture


class Conflict(Exception):
    """A channel's rule no picture of this template can meet: `code` names the message."""

    def __init__(self, code: str, channel: str, rendition: str, **details: Any):
        super().__init__(code)
        self.code, self.channel, self.rendition = code, channel, rendition
        self.details = {"channel": channel, "rendition": rendition, **details}


@dataclass(frozen=True)
class Plan:
    """What a submission asked of its channels, checked once: the catalogue, the channels
    every row gets, which channels go without the visible label, and the template's ops
    that put words in its pictures."""
    known: Mapping[str, Channel]
    every_row: tuple[Channel, ...] = ()
    unlabelled: frozenset[str] = frozenset()
    word_ops: tuple[str, ...] = ()
    layout: Binder | None = None  # the layout drawn on each rendition that allows words
    fill_model: str | None = None  # what an extend grows the canvas on; None: none to be had
    engine: str = "diffusers"  # the template's: a ComfyUI workflow's steps are its own

    def conflicts(self, channels: Iterable[Channel]) -> None:
        """Conflict for the first rendition no picture can meet: one that allows no words,
        while the template writes some, or while a label the channel could go without
        would be drawn on it. (A label the channel requires is the law's, not the
        picture's words: a Chinese shop's no-words rule does not refuse it.)"""
        for ch in channels:
            for r in ch.renditions:
                if r.fit == "extend" and self.engine != "diffusers":
                    raise Conflict("channel_extend_comfy", ch.name, r.name)
                if r.fit == "extend" and not self.fill_model:
                    raise Conflict("channel_extend_no_model", ch.name, r.name)
                if r.text:
                    continue
                if self.word_ops:
                    raise Conflict("channel_words", ch.name, r.name,
                                   ops=", ".join(self.word_ops))
                if ch.label == "optional" and ch.name not in self.unlabelled:
                    raise Conflict("channel_label_words", ch.name, r.name)

    def columns(self) -> list[str]:
        """The sheet columns this plan reads besides the template's: its channels' file
        names' and its layout's."""
        names = [f for ch in self.every_row for r in ch.renditions
                 for f in pattern_fields(r.file) if f not in PATTERN_WORDS]
        return list(dict.fromkeys([*names, *(self.layout.columns() if self.layout else ())]))

    def for_row(self, cell: Any) -> list[Channel]:
        """The row's channels: every row's, then those its channels cell names (Unknown,
        Conflict)."""
        extra = chosen([str(cell)], self.known) if cell not in (None, "") else []
        self.conflicts(c for c in extra if c not in self.every_row)
        return list({c.name: c for c in [*self.every_row, *extra]}.values())

    def bind(self, channels: Iterable[Channel], values: Mapping[str, Any]) -> list[Deliverable]:
        """The row's deliverables, file names filled from its cells (Missing), the layout
        bound on each that allows words (LayoutProblem: a cell it cannot use, words that
        do not fit)."""
        out = []
        for ch in channels:
            label = None if ch.name in self.unlabelled else ch.ai_label
            for n, r in enumerate(ch.renditions, 1):
                overlay = None
                if self.layout is not None and r.text:
                    overlay = self.layout.bind(values, r.size, r.safe, f"{ch.name} {r.name}")
                out.append(Deliverable(ch.name, r, file_name(r, ch.name, n, values), label,
                                       overlay))
        return out


def plan(known: Mapping[str, Channel], names: Iterable[str], *, unlabelled: Iterable[str] = (),
         word_ops: Iterable[str] = (), layout: Binder | None = None,
         fill_model: str | None = None, engine: str = "diffusers") -> Plan:
    """The submission's plan (Unknown, Conflict), before its sheet is read."""
    p = Plan(known, tuple(chosen(names, known)), frozenset(unlabelled), tuple(word_ops),
             layout, fill_model, engine)
    p.conflicts(p.every_row)
    return p


def aspect_of(size: tuple[int, int]) -> tuple[int, int]:
    """A size's proportion in lowest terms: (1080, 1920) -> (9, 16)."""
    from math import gcd
    k = gcd(*size)
    return size[0] // k, size[1] // k


def distinct(files: Iterable[tuple[str, str]]) -> list[str]:
    """(channel, file) in job order -> each file's name, a repeat within a channel given
    -2, -3 … before its extension (a sweep's or an A/B run's jobs of one row)."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for channel, name in files:
        k = seen[(channel, name)] = seen.get((channel, name), 0) + 1
        if k > 1:
            stem, dot, ext = name.rpartition(".")
            name = f"{stem}-{k}.{ext}" if dot else f"{name}-{k}"
        out.append(name)
    return out
