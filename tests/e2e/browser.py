"""What a person does in the browser, and what the hub's pages show (Playwright, async API)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from playwright.async_api import Page, expect

from .harness import PASSWORD, Hub

VERDICT_TIMEOUT_MS = 30_000


async def log_in(page: Page, hub: Hub, username: str) -> None:
    await page.goto(f"{hub.url}/hub/login")
    await page.fill("#username_input", username)
    await page.fill("#password_input", PASSWORD)
    await page.click("#login_submit")
    # Logged in: JupyterHub redirects to the user's server (/user/<name>/, here the stub's
    # answer) or to the spawn page.
    await page.wait_for_url(lambda url: "/hub/login" not in url)


def spawn_url(hub: Hub, username: str, server: str = "") -> str:
    url = f"{hub.url}/hub/spawn/{quote(username, safe='')}"
    return f"{url}/{quote(server, safe='')}" if server else url


async def request_from_spawn_page(
    page: Page, hub: Hub, username: str, server: str, profile: str
) -> None:
    """Open the spawn page, choose `profile` in KubeSpawner's form and press Start."""
    await page.goto(spawn_url(hub, username, server))
    await page.check(f"input[name=profile][value={profile}]")
    await page.click("#spawn_form button[type=submit]")


@dataclass
class Verdict:
    """Which page showed the verdict, and the element holding it."""

    page: str  # a key of MESSAGE_SELECTORS
    seconds: float
    text: str  # the visible text of the message element
    headline: str  # the visible text of .colocate-headline, when rendered as HTML ("" if not)
    #: the technical facts under the closed "Details" (textContent: shown or not), when rendered
    #: as HTML
    details: list[str]
    details_open: bool  # whether a "Details" disclosure is open (never, until clicked)


MESSAGE_SELECTORS = {
    # JupyterHub's spawn.html re-rendered with the error (the spawn failed within ~1 s)
    "spawn-form": ".spawn-error-msg",
    # spawn_pending.html, filled from the progress event stream
    "spawn-pending": "#progress-message",
    # not_running.html for a failed spawn ("Spawn failed")
    "spawn-failed": "div.container div.text-center",
    # error.html: GET /hub/spawn/<user>/<server> with no options form, refused within ~1 s
    "error-page": "div.error",
}


async def wait_for_verdict(page: Page, phrase: str = "cannot start") -> Verdict:
    """Wait until one of the pages of MESSAGE_SELECTORS shows a message containing `phrase`."""
    started = time.monotonic()
    deadline = started + VERDICT_TIMEOUT_MS / 1000
    while True:
        for name, selector in MESSAGE_SELECTORS.items():
            if (
                name == "spawn-failed"
                and not await page.locator("h1", has_text="Spawn failed").count()
            ):
                continue
            element = page.locator(selector).first
            if await element.count() and phrase in (await element.inner_text()):
                await expect(element).to_be_visible()
                return Verdict(
                    page=name,
                    seconds=time.monotonic() - started,
                    text=await element.inner_text(),
                    headline=" ".join(
                        await element.locator(".colocate-headline").all_inner_texts()
                    ),
                    details=await element.locator(
                        "details.colocate-details li"
                    ).all_text_contents(),
                    details_open=await element.locator("details.colocate-details[open]").count()
                    > 0,
                )
        if time.monotonic() > deadline:
            body = await page.locator("body").inner_text()
            raise AssertionError(
                f"no verdict containing {phrase!r} within {VERDICT_TIMEOUT_MS / 1000:.0f} s on "
                f"{page.url}; the page says:\n{body[:2000]}"
            )
        await page.wait_for_timeout(100)


async def screenshot(page: Page, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    await page.wait_for_timeout(700)  # let the progress bar's CSS transition finish
    await page.screenshot(path=str(path), full_page=True)
    return path


#: the two widths the pages are checked and shown at (docs/surfaces.md): a laptop and a phone
VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
#: what a person clicks or reads as one thing: cards, buttons, menu items, links styled as buttons
CLICKABLE = ".card, button, a.btn, [role=button], [role=menuitem], input[type=submit]"

_COVERED_JS = """
([selector, scroll, ours]) => {
  const mine = ours ? Array.prototype.slice.call(document.querySelectorAll(ours)) : [];
  const inOurs = (el) => !ours || mine.some((m) => m.contains(el));
  const name = (el) => {
    if (!el) return "nothing";
    const label = (el.getAttribute("aria-label") || el.innerText || "").trim().slice(0, 40);
    const cls = typeof el.className === "string" ? el.className.trim().split(/\\s+/)[0] : "";
    return `${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""}${cls ? "." + cls : ""}` +
      (label ? ` '${label.replace(/\\s+/g, " ")}'` : "");
  };
  const covered = [];
  for (const el of document.querySelectorAll(selector)) {
    const style = window.getComputedStyle(el);
    if (style.visibility === "hidden" || style.display === "none") continue;
    if (scroll) el.scrollIntoView({ block: "center", inline: "center" });
    const r = el.getBoundingClientRect();
    if (r.width < 1 || r.height < 1) continue;  // not rendered
    const x = r.left + r.width / 2, y = r.top + r.height / 2;
    if (x < 0 || y < 0 || x >= window.innerWidth || y >= window.innerHeight) {
      if (inOurs(el)) covered.push(`${name(el)} cannot be scrolled into view`);
      continue;
    }
    const hit = document.elementFromPoint(x, y);
    if (hit !== el && !el.contains(hit) && (inOurs(el) || (hit && inOurs(hit)))) {
      covered.push(`${name(el)} covered by ${name(hit)}`);
    }
  }
  if (scroll) window.scrollTo(0, 0);
  return covered;
}
"""


async def covered(
    page: Page, selector: str = CLICKABLE, scroll: bool = True, ours: str | None = None
) -> list[str]:
    """Every element of ``selector`` that is shown, scrolled to the middle of the window (unless
    ``scroll`` is false: an open menu stays where it is), and hit-tested at its centre
    (``document.elementFromPoint``): those whose centre answers with something else than the
    element or one of its descendants, named with what covers them. With ``ours`` (a selector
    of what nebari-colocate adds to another's page), only what covers or is covered by it: the
    page's own overlaps are its own."""
    return await page.evaluate(_COVERED_JS, [selector, scroll, ours])
