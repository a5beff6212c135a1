"""Putting a template's files into the templates folder so that it is never left
half-made, and a template being replaced is never lost.

The new files are written to a temporary folder inside the templates folder (the same
file system, so a rename moves them) and the template is loaded from there, with every
check any template gets. Only then are they renamed into place, the template file last;
the files they replace are kept aside (a hard link, else a copy) until both renames are
done, and put back if anything fails on the way — an error, or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from storage.names import UnsafeName, checked, shown
from templates.graph import Template
from templates.loader import TemplateError, load_template


class InstallError(Exception):
    """The template was not installed, and the folder is as it was: one line saying why."""


def install_template(folder: Path, name: str, files: dict[str, bytes]) -> Template:
    """Install `files` (file name -> bytes; `NAME.json` is the template, the others what
    it names beside it, such as its ComfyUI workflow) in `folder`, replacing the files of
    those names; the template as loaded, or InstallError with nothing changed."""
    main = f"{name}.json"
    if main not in files:
        raise InstallError(f"{main} is not among the files to install")
    for file in files:
        try:
            if len(checked(file, "the template's files").parts) != 1:
                raise InstallError(f'"{shown(file)}": a template\'s files lie in the '
                                   "templates folder itself")
        except UnsafeName as e:
            raise InstallError(str(e)) from None
    order = [f for f in files if f != main] + [main]  # the template last: it names the rest
    try:
        folder.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".install-{name}-", dir=folder))
    except OSError as e:
        raise InstallError(f"cannot write in {folder}: {e.strerror or e}") from None
    try:
        for file in order:
            _write(staging / file, files[file])
        try:
            template = load_template(staging / main)
        except TemplateError as e:
            where = f"{e.path}: " if e.path else ""
            raise InstallError(f"the template does not load: {folder / main}: {where}"
                               f"{e.message}".replace(str(staging), str(folder))) from None
        _swap(folder, staging, order)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return template


def _write(path: Path, data: bytes) -> None:
    """The file written and on disk (fsync) before any rename makes it the real one."""
    try:
        with path.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise InstallError(f"cannot write {path.name} in {path.parent.parent}: "
                           f"{e.strerror or e}") from None


def _swap(folder: Path, staging: Path, order: list[str]) -> None:
    """Rename the staged files over the folder's; on any failure put back what was there."""
    kept: dict[str, Path] = {}  # file -> its old content, kept aside in the staging folder
    moved: list[str] = []
    current = order[0]
    try:
        for current in order:
            target = folder / current
            if target.is_file() or target.is_symlink():  # a link is kept as a link
                aside = staging / f"{current}.replaced"
                try:
                    os.link(target, aside, follow_symlinks=False)
                except OSError:  # a file system without hard links
                    shutil.copy2(target, aside, follow_symlinks=False)
                kept[current] = aside
        for current in order:
            (staging / current).replace(folder / current)
            moved.append(current)
        _sync(folder)
    except BaseException as e:
        for file in reversed(moved):
            with contextlib.suppress(OSError):
                if file in kept:
                    kept[file].replace(folder / file)
                else:
                    (folder / file).unlink()
        if isinstance(e, OSError):
            raise InstallError(f"cannot replace {folder / current}: {e.strerror or e}") \
                from None
        raise


def _sync(folder: Path) -> None:
    """The renames on disk (where the system lets a folder be synced)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
