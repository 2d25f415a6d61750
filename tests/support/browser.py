"""A real headless Chromium for the console's tests (Debian's `chromium`, driven by Playwright),
and helpers to sign in and take the screenshots docs/console.md shows."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from playwright.async_api import Browser, BrowserContext, Page, async_playwright

ROOT = Path(__file__).resolve().parents[2]
# Screenshots of every page the tests visit; docs/console.md shows the main ones (copied to docs/console/).
SHOTS = Path(os.environ.get("CAIRN_TEST_SCREENSHOTS", ROOT / "build" / "console-screenshots"))
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",  # no calls home on a closed network
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LAPTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}


def chromium_path() -> str:
    """The Chromium binary (`CAIRN_TEST_CHROMIUM`, else `chromium` on the PATH); `dev.py test`
    installs Debian's package when it is missing."""
    path = os.environ.get("CAIRN_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        raise RuntimeError("No Chromium found: run `python3 dev.py test` (it installs Debian's chromium package)")
    return path


@asynccontextmanager
async def launched() -> AsyncIterator[Browser]:
    """A headless Chromium driven by Playwright, closed on exit."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            await browser.close()


@asynccontextmanager
async def new_page(browser: Browser, viewport: dict[str, int] | None = None) -> AsyncIterator[Page]:
    """A page in a fresh browser context (its own cookies), closed on exit."""
    context: BrowserContext = await browser.new_context(viewport=viewport or LAPTOP)  # type: ignore[arg-type]
    context.set_default_timeout(20_000)
    try:
        yield await context.new_page()
    finally:
        await context.close()


async def sign_in(page: Page, base_url: str, key: str, path: str = "/ui/") -> None:
    """Sign in through the console's form and land on `path`."""
    await page.goto(f"{base_url}/ui/login?next={path}")
    await page.fill("#key", key)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base_url}{path}*")


async def shot(page: Page, name: str) -> Path:
    """Save a full-page screenshot as `<name>.png` among the test screenshots."""
    path = SHOTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)  # Playwright makes the folder
    return path
