"""The file store: input images and, later, outputs. A local folder for now.

Every write is atomic (a temp file, then rename), so a crash never leaves half a file
under a name someone will read. Paths handed out are relative to the store's root,
so what the database records stays valid if the folder moves.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


class FileStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, relative: str) -> Path:
        full = (self.root / relative).resolve()
        if not full.is_relative_to(self.root.resolve()):
            raise ValueError(f"{relative!r} is outside the file store")
        return full

    def write(self, relative: str, data: bytes) -> str:
        target = self.path(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return relative

    def delete(self, relative: str) -> bool:
        """Remove a file (e.g. an image once delivered, when auto_save is off)."""
        try:
            self.path(relative).unlink()
        except FileNotFoundError:
            return False
        return True

    def delete_folder(self, relative: str) -> bool:
        """Remove a folder and all in it (a forgotten batch's outputs)."""
        import shutil
        target = self.path(relative)
        if not target.is_dir():
            return False
        shutil.rmtree(target)
        return True

    def put_input(self, data: bytes, suffix: str = ".png") -> str:
        """Store an input file under its content hash: the same image is stored once."""
        relative = f"inputs/{hashlib.sha256(data).hexdigest()}{suffix}"
        if not self.path(relative).exists():
            self.write(relative, data)
        return relative
