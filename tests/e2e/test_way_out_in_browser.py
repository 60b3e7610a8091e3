"""The way out's button on every page a refusal reaches, clicked in headless Chromium
(docs/surfaces.md, "The way out, one click").

alice's app holds her home on the CPU node and she asks for a GPU server: the refusal shows
the button "Stop 'Pandas App' and start …" under its headline; the click POSTs the form (with
the session's ``_xsrf``) to the hub's handler, which stops the app, waits for the real
attach/detach controller to detach the home, starts the GPU server and sends the browser to its
progress page; the server ends running on the GPU node.

- JupyterHub's own pages (every leg): spawn-pending with a refusal held pending (requested
  through the REST API, as other front ends do): the "starting up" words go, the reason is in the
  event log once, and the holder's name is HTML (escaped in the button, no script runs); the
  spawn form re-rendered with the refusal, whose way out turns stale when alice starts another
  server (409 in words, nothing stopped), and the "Spawn failed" page, whose button works again
  once that server is stopped.
- jhub-apps (JupyterHub 5 legs): its home page's banner and its not-running page.

Screenshots: test-artifacts/e2e/jupyterhub-<version>/way-out-*.png.
"""

from __future__ import annotations

import asyncio
import re
from importlib.metadata import PackageNotFoundError, version

import pytest
from playwright.async_api import Page, expect

from tests.support.waiting import wait_until

from .browser import log_in, request_from_spawn_page, screenshot
from .conftest import JUPYTERHUB_MAJOR
from .harness import Hub
from .japps import app_options, open_jhub_apps, start_app_from_home, wait_for_card
from .test_hostile_server_name import HOSTILE
from .test_jhub_apps import _wait_for_detach, blocked_besides_fonts
from .test_refusals_in_browser import CPU_PROFILE, GPU_PROFILE, cpu_and_gpu_nodes
from .test_success_path import user_pods
from .test_way_out import wait_ready

SPAWNER = {"refusal_hold_seconds": 4, "way_out_release_timeout": 90}
VERDICT_MS = 30_000
CLICK_MS = 120_000  # stop, the real detach, the start

try:
    JHUB_APPS = version("jhub-apps")
except PackageNotFoundError:
    JHUB_APPS = ""


async def hub_for_alice(kube, start_hub, **settings) -> Hub:
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(
        profile_list=[CPU_PROFILE, GPU_PROFILE], spawner=SPAWNER, way_out_handler=True, **settings
    )
    await hub.create_user("alice")
    return hub


def way_out(page: Page, within: str = "body"):
    return page.locator(f"{within} form.colocate-way-out-form")


async def click_and_land_running(page: Page, hub: Hub, kube, form, server: str, pending: str):
    """Click the form's button; the browser goes to the started server's progress page (or, the
    start being quick, on to the server); ``server`` ends ready on the GPU node."""
    await form.locator("button").click()
    await page.wait_for_url(lambda url: pending in url or "/user/alice" in url, timeout=CLICK_MS)
    await wait_ready(hub, "alice", server)
    pods = await user_pods(kube, "alice")
    assert set(pods) == {server}, pods
    assert pods[server]["spec"]["nodeName"] == "gpu-1"


async def test_spawn_pending_offers_the_way_out_once_escaped_and_it_starts_the_lab(
    kube, start_hub, browser_page, artifacts
):
    page = browser_page
    hub = await hub_for_alice(kube, start_hub)
    if JUPYTERHUB_MAJOR < 6:
        holder, shown = HOSTILE, HOSTILE
        await hub.start_server("alice", HOSTILE, {"profile": "cpu"})
    else:  # JupyterHub 6: server names are slugs, display names free text
        holder, shown = "evil-app", HOSTILE
        await hub.start_server(
            "alice", "evil-app", {"display_name": HOSTILE, "user_options": {"profile": "cpu"}}
        )
    await log_in(page, hub, "alice")

    # A front end requests the GPU lab through the REST API; the refusal is held pending with
    # its reason in the progress stream while alice has the spawn-pending page open.
    request = asyncio.ensure_future(hub.request_server("alice", "", {"profile": "gpu"}))
    await wait_until(
        lambda: hub.server_model("alice", ""),
        until=lambda model: (model or {}).get("pending"),
        timeout=10,
        what="alice's default server pending",
        interval=0.1,
    )
    await page.goto(f"{hub.url}/hub/spawn-pending/alice")
    form = way_out(page, "#progress-message")
    await expect(form).to_be_visible(timeout=VERDICT_MS)
    button = form.locator("button")
    await expect(button).to_have_text(f"Stop '{shown}' and start your default server")
    # the button says what it stops, once; the headline above it does not repeat it
    headline = await page.locator("#progress-message .colocate-headline").inner_text()
    assert f"'{shown}' uses your home folder" in headline and "Stop" not in headline, headline
    assert await form.locator("input[name=stop]").get_attribute("value") == holder
    # The refusal, not "starting up", even while JupyterHub still counts the spawn as pending.
    await expect(page.get_by_text("Your server is starting up")).to_be_hidden()
    await request
    await expect(page.locator("#progress-bar")).to_have_class(re.compile("bg-danger"))
    await page.locator("#progress-details").evaluate("d => d.open = true")
    await screenshot(page, artifacts / "way-out-spawn-pending.png")
    # The held event and JupyterHub's "failed" event carry the same reason: shown once.
    assert await page.locator("#progress-log .colocate-message").count() == 1
    assert await page.locator("form.colocate-way-out-form:visible").count() == 1
    await expect(page.get_by_text("Your server is starting up")).to_be_hidden()

    await click_and_land_running(page, hub, kube, form, "", "/hub/spawn-pending/alice")
    assert page.dialogs == [] and page.page_errors == []  # no alert(1): the name stayed text
    assert hub.hub.alive()


async def test_the_spawn_form_and_the_failed_page_offer_the_way_out_and_a_stale_one_stops_nothing(
    kube, start_hub, browser_page, artifacts
):
    page = browser_page
    hub = await hub_for_alice(kube, start_hub)
    await hub.start_server("alice", "pandas-app", {"profile": "cpu"})
    await log_in(page, hub, "alice")
    await request_from_spawn_page(page, hub, "alice", "", "gpu")

    # Refused within the form's wait: the form again, the refusal as HTML, and the button.
    error = page.locator(".spawn-error-msg")
    await expect(error.locator(".colocate-message")).to_be_visible(timeout=VERDICT_MS)
    assert (
        "'pandas-app' uses your home folder"
        in await error.locator(".colocate-headline").inner_text()
    )
    form = way_out(page, ".spawn-error-msg")
    await expect(form.locator("button")).to_have_text(
        "Stop 'pandas-app' and start your default server"
    )
    await screenshot(page, artifacts / "way-out-spawn-form.png")

    # Stale: alice starts another server in between; the click stops nothing and says why.
    await hub.start_server("alice", "dash", {"profile": "cpu"})
    await form.locator("button").click()
    await expect(page.get_by_text("Nothing was stopped")).to_be_visible(timeout=VERDICT_MS)
    await screenshot(page, artifacts / "way-out-stale.png")
    assert set(await user_pods(kube, "alice")) == {"pandas-app", "dash"}

    # dash stopped again, the failed page's button is the way out once more.
    await hub.stop_server("alice", "dash")
    await page.goto(f"{hub.url}/hub/spawn-pending/alice")
    await expect(page.locator("h1", has_text="Spawn failed")).to_be_visible()
    form = way_out(page)
    await expect(form).to_be_visible(timeout=VERDICT_MS)
    await screenshot(page, artifacts / "way-out-spawn-failed.png")
    await click_and_land_running(page, hub, kube, form, "", "/hub/spawn-pending/alice")
    assert page.dialogs == [] and page.page_errors == []
    assert hub.hub.alive()


@pytest.mark.skipif(
    JUPYTERHUB_MAJOR >= 6 or not JHUB_APPS,
    reason="jhub-apps does not work on JupyterHub 6 (docs/surfaces.md): its e2e runs on 5 only",
)
async def test_jhub_apps_home_and_not_running_offer_the_way_out(
    kube, start_hub, browser_page, artifacts
):
    page = browser_page
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
    # An app made earlier, stopped; then the Pandas App on the CPU node.
    await hub.start_server(
        "alice", "gpu-dashboard", app_options("gpu-dashboard", "GPU Dashboard", "gpu")
    )
    await hub.stop_server("alice", "gpu-dashboard")
    await _wait_for_detach(kube, "gpu-1")
    await hub.start_server("alice", "pandas-app", app_options("pandas-app", "Pandas App", "cpu"))

    await open_jhub_apps(page, hub, "alice")
    await wait_for_card(page, "Pandas App")
    await start_app_from_home(page, hub, "GPU Dashboard")
    banner = page.locator('#colocate-refusals .colocate-refusal[data-server="gpu-dashboard"]')
    form = banner.locator("form.colocate-way-out-form")
    await expect(form).to_be_visible(timeout=VERDICT_MS)
    await expect(form.locator("button")).to_have_text("Stop 'Pandas App' and start 'GPU Dashboard'")
    assert "Stop" not in await banner.locator(".colocate-headline").inner_text()
    await screenshot(page, artifacts / f"way-out-jhub-apps-{JHUB_APPS}-home.png")

    # The app's page on the hub: nebari-colocate's not-running page, with the same button.
    await page.goto(f"{hub.url}/hub/spawn-pending/alice/gpu-dashboard")
    failed = page.locator("#colocate-failed")
    await expect(failed.locator("form.colocate-way-out-form")).to_be_visible(timeout=VERDICT_MS)
    await screenshot(page, artifacts / f"way-out-jhub-apps-{JHUB_APPS}-not-running.png")

    # Back home (reloaded, the banner keeps the button), clicked.
    await page.goto(f"{hub.url}/hub/home")
    await expect(form).to_be_visible(timeout=VERDICT_MS)
    await click_and_land_running(
        page, hub, kube, form, "gpu-dashboard", "/hub/spawn-pending/alice/gpu-dashboard"
    )
    assert page.dialogs == [] and blocked_besides_fonts(page) == []
    assert hub.hub.alive()
