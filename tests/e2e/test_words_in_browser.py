"""The words a person reads, on every page a refusal reaches, in Chromium at two widths
(docs/surfaces.md, "How the words are written").

alice's app holds her home on the CPU node and she asks for a GPU server. On each page: the
plain headline ("... cannot start. '<app>' uses your home folder on a machine with no GPU."), no
node or label in what shows, the technical facts under a "Details" disclosure that is closed
until clicked, the way out's button once (and the stop said nowhere else), the app's name
escaped (on JupyterHub's pages it carries HTML: no script runs, no image loads), and on the
spawn-pending page the reason once in the event log. At 1280x800 and at a phone's 390x844
nothing of it runs off the screen. Pages: JupyterHub's spawn-pending page with the refusal held
pending (requested through the REST API, as other front ends and jhub-apps do), its "Spawn
failed" page (the same URL reloaded), the spawn form re-rendered with the refusal; on the
jhub-apps legs, its home page's banner and the not-running page nebari-colocate installs.
Screenshots: test-artifacts/e2e/jupyterhub-<version>/words-<width>-*.png.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from playwright.async_api import Locator, Page, expect

from tests.support.waiting import wait_until

from .browser import log_in, request_from_spawn_page, screenshot
from .conftest import JUPYTERHUB_MAJOR
from .test_hostile_server_name import HOSTILE
from .test_refusals_in_browser import CPU_PROFILE, GPU_PROFILE, cpu_and_gpu_nodes
from .test_way_out_in_browser import JHUB_APPS, SPAWNER, VERDICT_MS, hub_for_alice

WIDTHS = {"desktop": (1280, 800), "phone": (390, 844)}
#: what a person must not have to read before opening Details
JARGON = re.compile(r"\b(node|nodes|pod|pvc|claim|label|taint|affinity|volume)\b", re.I)


async def check_surface(page: Page, within: Locator, holder_shown: str, width: int) -> None:
    """One page's refusal: the headline, the closed Details, the button once, on screen."""
    message = within.locator(".colocate-message").first
    await expect(message).to_be_visible(timeout=VERDICT_MS)
    headline = message.locator(".colocate-headline")
    await expect(headline).to_be_visible()
    said = await headline.inner_text()
    assert "cannot start." in said, said
    assert f"'{holder_shown}' uses your home folder on a machine with no GPU." in said, said
    assert "Stop" not in said, said  # the button says it

    details = message.locator("details.colocate-details")
    await expect(details).to_have_count(1)
    assert await details.evaluate("d => d.open") is False
    await expect(details.locator("summary")).to_have_text("Details")
    await expect(details.locator("li").first).to_be_hidden()
    facts = " ".join(await details.locator("li").all_text_contents())
    assert "node cpu-1" in facts and "nvidia.com/gpu" in facts, facts

    shown = await message.inner_text()  # what reads before Details is opened
    assert not JARGON.search(shown.replace("Details", "")), shown
    assert len(re.findall(r"\bStop\b", shown)) == 1, shown
    buttons = message.locator("button.colocate-way-out-button:visible")
    await expect(buttons).to_have_count(1)
    await expect(buttons).to_have_text(re.compile(r"^Stop '.*' and start "))

    for part in (headline, buttons.first):  # nothing runs off the screen
        box = await part.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 1, box
    await details.locator("summary").click()  # and opens when asked
    await expect(details.locator("li").first).to_be_visible()
    await details.locator("summary").click()
    assert await message.locator("img").count() == 0


@pytest.mark.parametrize("width", list(WIDTHS))
async def test_every_page_says_the_headline_then_the_button_once_details_closed(
    width, kube, start_hub, browser_page, artifacts
):
    page = browser_page
    w, h = WIDTHS[width]
    await page.set_viewport_size({"width": w, "height": h})
    hub = await hub_for_alice(kube, start_hub)
    if JUPYTERHUB_MAJOR < 6:
        await hub.start_server("alice", HOSTILE, {"profile": "cpu"})
    else:  # JupyterHub 6: server names are slugs, display names free text
        await hub.start_server(
            "alice", "evil-app", {"display_name": HOSTILE, "user_options": {"profile": "cpu"}}
        )
    await log_in(page, hub, "alice")

    # spawn-pending, the refusal held pending with its reason in the progress stream
    request = asyncio.ensure_future(hub.request_server("alice", "", {"profile": "gpu"}))
    await wait_until(
        lambda: hub.server_model("alice", ""),
        until=lambda model: (model or {}).get("pending"),
        timeout=10,
        what="alice's default server pending",
        interval=0.1,
    )
    await page.goto(f"{hub.url}/hub/spawn-pending/alice")
    await expect(page.locator("#progress-message .colocate-message")).to_be_visible(
        timeout=VERDICT_MS
    )
    await request
    await expect(page.locator("#progress-bar")).to_have_class(re.compile("bg-danger"))
    await check_surface(page, page.locator("#progress-message"), HOSTILE, w)
    # JupyterHub opens the event log on a failure: the reason is in it once
    log = page.locator("#progress-log")
    await page.locator("#progress-details").evaluate("d => d.open = true")
    await expect(log.locator(".colocate-message")).to_have_count(1)
    assert (await log.inner_text()).count("cannot start") == 1, await log.inner_text()
    await screenshot(page, artifacts / f"words-{width}-spawn-pending.png")

    # the same URL later: JupyterHub's "Spawn failed" page
    await page.reload()
    await expect(page.locator("h1", has_text="Spawn failed")).to_be_visible(timeout=VERDICT_MS)
    await check_surface(page, page.locator("div.container"), HOSTILE, w)
    await screenshot(page, artifacts / f"words-{width}-spawn-failed.png")

    # the spawn form, refused within its wait
    await request_from_spawn_page(page, hub, "alice", "", "gpu")
    await check_surface(page, page.locator(".spawn-error-msg"), HOSTILE, w)
    await screenshot(page, artifacts / f"words-{width}-spawn-form.png")

    assert page.dialogs == [] and page.page_errors == []  # the name stayed text
    assert hub.hub.alive()


@pytest.mark.skipif(
    JUPYTERHUB_MAJOR >= 6 or not JHUB_APPS,
    reason="jhub-apps runs on JupyterHub 5 only (docs/surfaces.md): the 5 and dsp legs",
)
@pytest.mark.parametrize("width", list(WIDTHS))
async def test_jhub_apps_pages_say_the_headline_then_the_button_once_details_closed(
    width, kube, start_hub, browser_page, artifacts
):
    from .japps import app_options, open_jhub_apps, start_app_from_home, wait_for_card
    from .test_jhub_apps import _wait_for_detach, blocked_besides_fonts

    page = browser_page
    w, h = WIDTHS[width]
    await page.set_viewport_size({"width": w, "height": h})
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(
        jhub_apps="colocate",
        z2jh=True,
        consecutive_failure_limit=5,
        profile_list=[CPU_PROFILE, GPU_PROFILE],
        spawner=SPAWNER,
    )
    await hub.create_user("alice")
    shown = "Pandas App"  # a hostile name is the JupyterHub pages' test's (above)
    # the GPU app runs once, so that its card is there to start; then the CPU app takes the home
    await hub.start_server(
        "alice", "gpu-dashboard", app_options("gpu-dashboard", "GPU Dashboard", "gpu")
    )
    await hub.stop_server("alice", "gpu-dashboard")
    await _wait_for_detach(kube, "gpu-1")
    await hub.start_server("alice", "pandas-app", app_options("pandas-app", shown, "cpu"))

    await open_jhub_apps(page, hub, "alice")
    await wait_for_card(page, shown)
    await start_app_from_home(page, hub, "GPU Dashboard")
    banner = page.locator('.colocate-refusal[data-server="gpu-dashboard"]')
    await check_surface(page, banner, shown, w)
    await screenshot(page, artifacts / f"words-{width}-jhub-apps-{JHUB_APPS}-home.png")

    await page.goto(f"{hub.url}/hub/spawn-pending/alice/gpu-dashboard")
    await check_surface(page, page.locator("#colocate-failed"), shown, w)
    await screenshot(page, artifacts / f"words-{width}-jhub-apps-{JHUB_APPS}-not-running.png")

    assert page.dialogs == [] and blocked_besides_fonts(page) == []
    assert hub.hub.alive()
