"""Names that come from outside (a model hub or mirror, a ComfyUI server, a sheet) checked
before they become paths.

A name is used only as a relative path under a folder genbot chose: no `..`, nothing
absolute, no drive letter or backslash, no NUL or other control character, no empty or
dot-only part, within length limits. `inside` also refuses a path that a symlink
already on disk would lead out of the folder. The refusal is one line naming the file
and where the name came from, fit for a log, a chat reply or a failed row.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path, PurePosixPath

MAX_PART = 255  # bytes in one path part: what most file systems hold
MAX_NAME = 1024  # bytes in the whole relative name
_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = {"Cc", "Cf", "Cs", "Zl", "Zp"}  # controls, invisible format marks, line breaks


class UnsafeName(ValueError):
    """A name from outside that must not become a path."""


def shown(name: str, limit: int = 80) -> str:
    """`name` safe to quote in one line: control and invisible format characters
    escaped, cut to `limit` characters."""
    out = "".join(ch.encode("unicode_escape").decode("ascii")
                  if unicodedata.category(ch) in _CONTROL else ch for ch in name)
    return out if len(out) <= limit else out[:limit - 1] + "…"


def one_line(text: object, limit: int = 2000) -> str:
    """Text from outside (a server's error, an exception's message) fit for one line of a
    log, a job's error or a chat message: line breaks and other runs of white space made
    one space, every other control or invisible character escaped, cut at `limit`."""
    return shown(" ".join(str(text).split()), limit)


def checked(name: str, source: str) -> PurePosixPath:
    """`name` as a relative path with one or more parts, or UnsafeName saying why.
    `source`: who gave the name ("the hub's file list for org/model", "ComfyUI server
    http://…"), for the message."""
    def refuse(why: str) -> UnsafeName:
        return UnsafeName(f'refused the file name "{shown(str(name))}" from {source}: {why}')

    if not isinstance(name, str):
        raise refuse(f"it is {type(name).__name__}, not text")
    if not name:
        raise refuse("it is empty")
    if any(unicodedata.category(ch) in _CONTROL for ch in name):
        raise refuse("it holds a control or invisible character")
    if "\\" in name:
        raise refuse("it holds a backslash")
    if name.startswith("/"):
        raise refuse("it is an absolute path")
    if _DRIVE.match(name):
        raise refuse("it names a drive")
    if len(name.encode()) > MAX_NAME:
        raise refuse(f"it is longer than {MAX_NAME} bytes")
    parts = name.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise refuse("it leads out of its folder" if part == ".." else
                         "it has an empty part")
        if len(part.encode()) > MAX_PART:
            raise refuse(f"one part is longer than {MAX_PART} bytes")
        if part != part.strip() or part.endswith("."):
            raise refuse("a part starts or ends with a space or ends with a dot")
    return PurePosixPath(*parts)


def inside(folder: Path, name: str, source: str) -> Path:
    """The path for `name` under `folder`, checked: `name` is safe (see `checked`), and
    no symlink already under `folder` takes it elsewhere."""
    relative = checked(name, source)
    base = Path(os.path.realpath(folder))
    target = base.joinpath(*relative.parts)
    if os.path.commonpath([base, os.path.realpath(target)]) != str(base):
        raise UnsafeName(f'refused the file name "{shown(name)}" from {source}: '
                         "a link on disk leads it out of its folder")
    return target
