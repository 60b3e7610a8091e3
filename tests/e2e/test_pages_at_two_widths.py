"""The pages a refusal reaches, at a laptop's width (1280x800) and a phone's (390x844), in
Chromium: what nebari-colocate adds covers no card, button or menu item (a hit test at the
centre of each: ``browser.covered``), and the docs' screenshots are taken here
(``docs_shots``; docs/surfaces.md).

alice's app runs on the GPU node after her GPU lab stopped (premium_node_policy warn): the home
page says it keeps a GPU node running; then she asks for a server on a CPU profile, refused (her
home is held on the GPU node) with the way out "Stop '<app>' and start …":

- JupyterHub's pages (every leg): the home page with the move's notice, the spawn-pending page
  with the held refusal, the way out's page once it is stale (another server started since).
- jhub-apps' home (JupyterHub 5 legs): the move's notice and the refusal's notice, with every
  card, button and open menu item of jhub-apps' own still there to click.
"""

from __future__ import annotations

import asyncio
from importlib.metadata import PackageNotFoundError, version

import pytest
from playwright.async_api import Page, expect

from tests.support.waiting import wait_until

from .browser import VIEWPORTS, covered, log_in, screenshot
from .conftest import JUPYTERHUB_MAJOR
from .docs_shots import docs_shot
from .harness import Hub
from .japps import app_options, card, open_jhub_apps, wait_for_card
from .test_premium_move import ANY_PROFILE
from .test_refusals_in_browser import CPU_PROFILE, GPU_PROFILE, cpu_and_gpu_nodes

SPAWNER = {"refusal_hold_seconds": 4, "way_out_release_timeout": 90}
VERDICT_MS = 30_000

try:
    JHUB_APPS = version("jhub-apps")
except PackageNotFoundError:
    JHUB_APPS = ""


async def app_riding_the_gpu_node(kube, hub: Hub, app: str, body: dict) -> None:
    """alice's GPU lab, then ``app`` (any node: it follows the lab to the GPU node), then the
    lab stopped: the app alone keeps the GPU node."""
    await kube.create_bound_claim("claim-alice")
    await hub.create_user("alice")
    await hub.start_server("alice", "", {"profile": "gpu"})
    await hub.start_server("alice", app, body)
    await hub.stop_server("alice", "")


async def at_both_widths(
    page: Page, surface: str, artifacts, shown: str, widths=VIEWPORTS, ours: str | None = None
):
    """Each width: the docs' screenshot, then the hit tests. Returns what was covered, by
    width (the screenshots come first, so a page that covers something is still shown)."""
    found = {}
    for width in widths:
        await page.set_viewport_size(VIEWPORTS[width])
        await expect(page.locator(shown).first).to_be_visible(timeout=VERDICT_MS)
        await docs_shot(page, surface, width)
        await screenshot(page, artifacts / f"two-widths-{surface}-{width}.png")
        found[width] = await covered(page, ours=ours)
    await page.set_viewport_size(VIEWPORTS["desktop"])
    return {width: hits for width, hits in found.items() if hits}


async def test_jupyterhubs_pages_cover_nothing_at_two_widths(
    kube, start_hub, browser_page, artifacts
):
    page = browser_page
    await cpu_and_gpu_nodes(kube)
    hub = await start_hub(
        profile_list=[CPU_PROFILE, GPU_PROFILE, ANY_PROFILE], spawner=SPAWNER, way_out_handler=True
    )
    await app_riding_the_gpu_node(kube, hub, "app", {"profile": "any"})
    await log_in(page, hub, "alice")
    problems = {}

    await page.goto(f"{hub.url}/hub/home")
    problems["home"] = await at_both_widths(
        page, "home", artifacts, ".colocate-premium-ride", widths=["desktop"]
    )

    # A front end asks for the lab on a CPU profile through the REST API: held, then refused.
    request = asyncio.ensure_future(hub.request_server("alice", "", {"profile": "cpu"}))
    await wait_until(
        lambda: hub.server_model("alice", ""),
        until=lambda model: (model or {}).get("pending"),
        timeout=10,
        what="alice's default server pending",
        interval=0.1,
    )
    await page.goto(f"{hub.url}/hub/spawn-pending/alice")
    await expect(page.locator("#progress-message form.colocate-way-out-form")).to_be_visible(
        timeout=VERDICT_MS
    )
    await request
    await page.locator("#progress-bar.bg-danger").wait_for(timeout=VERDICT_MS)
    problems["spawn-pending"] = await at_both_widths(
        page, "spawn-pending", artifacts, "#progress-message form.colocate-way-out-form"
    )

    # Another server started since: the way out is stale, stops nothing, and says so.
    await hub.start_server("alice", "dash", {"profile": "any"})
    await page.locator("#progress-message form.colocate-way-out-form button").click()
    await expect(page.get_by_text("Nothing was stopped")).to_be_visible(timeout=VERDICT_MS)
    problems["way-out"] = await at_both_widths(
        page, "way-out", artifacts, "text=Nothing was stopped", widths=["desktop"]
    )

    assert {k: v for k, v in problems.items() if v} == {}
    assert page.dialogs == [] and page.page_errors == []
    assert hub.hub.alive()


@pytest.mark.skipif(
    JUPYTERHUB_MAJOR >= 6 or not JHUB_APPS,
    reason="jhub-apps does not work on JupyterHub 6 (docs/surfaces.md): its e2e runs on 5 only",
)
async def test_jhub_apps_home_notices_cover_no_card_button_or_menu_at_two_widths(
    kube, start_hub, browser_page, artifacts
):
    page = browser_page
    await cpu_and_gpu_nodes(kube)
    hub = await start_hub(
        jhub_apps="colocate",
        z2jh=True,
        consecutive_failure_limit=5,
        profile_list=[CPU_PROFILE, GPU_PROFILE, ANY_PROFILE],
        spawner=SPAWNER,
    )
    await app_riding_the_gpu_node(
        kube, hub, "pandas-app", app_options("pandas-app", "Pandas App", "any")
    )
    # An app on the CPU profile, started through jhub-apps' service (the REST API): refused,
    # the home held on the GPU node by 'Pandas App'.
    status, body = await hub.request_server(
        "alice", "cpu-dashboard", app_options("cpu-dashboard", "CPU Dashboard", "cpu")
    )
    assert status == 202, body
    await hub.wait_until_ended("alice", "cpu-dashboard")

    await open_jhub_apps(page, hub, "alice")
    await wait_for_card(page, "CPU Dashboard")
    notice = '#colocate-refusals .colocate-refusal[data-server="cpu-dashboard"]'
    await expect(page.locator(".colocate-premium-ride")).to_be_visible(timeout=VERDICT_MS)
    # jhub-apps' page has overlaps of its own (its grid/list toggle's button lies under a wrapper
    # of its own; JupyterHub's hidden error dialog, unstyled there, lies under its sidebar):
    # what counts is what the notices cover, and that nothing covers them.
    ours = "#colocate-notices, #colocate-refusals, .colocate-home-notice"
    problems = {"home": await at_both_widths(page, "jhub-apps-home", artifacts, notice, ours=ours)}

    # The refused app's card menu, open: its items are not covered either.
    menus = {}
    for width in VIEWPORTS:
        await page.set_viewport_size(VIEWPORTS[width])
        await card(page, "CPU Dashboard").first.get_by_label("Menu options").click()
        await expect(page.get_by_role("menuitem").first).to_be_visible()
        hits = await covered(page, "[role=menuitem]", scroll=False, ours=ours)
        await screenshot(page, artifacts / f"two-widths-jhub-apps-home-menu-{width}.png")
        if hits:
            menus[width] = hits
        await page.keyboard.press("Escape")
        await expect(page.get_by_role("menuitem")).to_have_count(0)
    problems["menu"] = menus

    assert {k: v for k, v in problems.items() if v} == {}
    assert page.dialogs == []
    assert hub.hub.alive()
