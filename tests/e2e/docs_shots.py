"""The screenshots of docs/surfaces.md, taken by the end-to-end tests in Chromium.

With ``NEBARI_COLOCATE_E2E_DOCS_SHOTS=<label>`` (``scripts/docs-screenshots <label>`` sets it),
the tests that show a surface also write what the window shows, at the width the test set, to
``docs/_static/screenshots/<surface>-<width>-<label>.png``; without it they write nothing there
(their own screenshots still go to test-artifacts/e2e/). The window only, not the whole page: it
is what the person sees, and it keeps each image small.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from playwright.async_api import Page

DOCS_SHOTS = os.environ.get("NEBARI_COLOCATE_E2E_DOCS_SHOTS", "")
SHOTS_DIR = Path(__file__).resolve().parents[2] / "docs" / "_static" / "screenshots"
if DOCS_SHOTS and not re.fullmatch(r"[a-z0-9-]+", DOCS_SHOTS):
    raise ValueError(
        f"NEBARI_COLOCATE_E2E_DOCS_SHOTS={DOCS_SHOTS!r}: a label of lower-case letters, digits "
        "and '-' (e.g. 'before', 'after')"
    )


async def docs_shot(page: Page, surface: str, width: str) -> Path | None:
    """Write the window's screenshot for the docs, when asked (``DOCS_SHOTS``)."""
    if not DOCS_SHOTS:
        return None
    SHOTS_DIR.mkdir(parents=True, exist_ok=True)
    path = SHOTS_DIR / f"{surface}-{width}-{DOCS_SHOTS}.png"
    await page.wait_for_timeout(700)  # the progress bar's CSS transition
    await page.screenshot(path=str(path), full_page=False)
    return path
