"""A real headless Chromium for the dashboard tests: Debian's package, driven by playwright.

Playwright's own browser download cannot work here (no route to it), so the tests use
/usr/bin/chromium, installed from Debian's packages when it is missing (tests.fakes.debian).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

from tests.fakes.debian import debian

CHROMIUM = Path("/usr/bin/chromium")
# Headless as root in a sandbox-less container, and quiet: this machine has no route out,
# and Chromium's background fetches would otherwise fail at every start.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


def chromium() -> Path:
    """Where Chromium is, installing Debian's package first if need be."""
    return debian(CHROMIUM, "chromium")


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
