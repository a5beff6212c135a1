"""Programs the tests need from Debian's packages (Chromium, exiftool): installed when
missing and this user may (root, with apt-get). Where one cannot be had its tests skip —
except under CI=true, where a test that does not run is a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def debian(program: Path, package: str) -> Path:
    """`program`, installing Debian's `package` first if need be."""
    if not program.exists() and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
        if subprocess.run(install, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
            subprocess.run(install, env=env, capture_output=True)
    if not program.exists():
        why = f"no {program} (Debian package `{package}`) and it could not be installed"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return program


def exiftool() -> Path:
    """An independent reader of a file's metadata (XMP, EXIF, ICC)."""
    return debian(Path("/usr/bin/exiftool"), "libimage-exiftool-perl")
