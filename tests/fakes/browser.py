"""A real headless Chromium for the dashboard tests: Debian's package, driven by playwright.

Playwright's own browser download cannot work here (no route to it), so the tests use
/usr/bin/chromium and install it from Debian's packages when it is missing and this
user may (root, with apt-get). Where it cannot be had the tests skip — except under
CI=true, where a browser test that does not run is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
# Headless as root in a sandbox-less container, and quiet: this machine has no route out,
# and Chromium's background fetches would otherwise fail at every start.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


def chromium() -> Path:
    """Where Chromium is, installing Debian's package first if need be."""
    if not CHROMIUM.exists() and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]
        if subprocess.run(install, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
            subprocess.run(install, env=env, capture_output=True)
    if not CHROMIUM.exists():
        why = f"no Chromium at {CHROMIUM} (Debian package `chromium`) and it could not be installed"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return CHROMIUM


@asynccontextmanager
async def launched():
    from playwright.async_api import async_playwright
    path = chromium()
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(path), args=FLAGS)
        try:
            yield browser
        finally:
            await browser.close()
