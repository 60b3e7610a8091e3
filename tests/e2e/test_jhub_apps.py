"""jhub-apps (PyPI), installed on ColocatingKubeSpawner under zero-to-jupyterhub's settings
(``slow_spawn_timeout`` 0, ``consecutive_failure_limit`` 5), driven in Chromium through its own
pages: the reason of a refusal reaches the page the person lands on.

- "Create app", refused: jhub-apps opens /hub/spawn-pending/<user>/<app>; the spawner holds the
  REST-requested refusal pending for ``refusal_hold_seconds`` with the reason in the progress
  stream, so JupyterHub's spawn-pending page (which jhub-apps does not replace) shows it; coming
  back later, the not_running.html nebari-colocate installs shows it (jhub-apps' own React page
  would navigate home and lose it).
- Home "Start" on an existing app, refused: jhub-apps says "App started successfully"; the home
  page nebari-colocate installs follows the start through the progress stream and shows the
  reason; reloaded, it still does; opening the app's URL shows it too. jhub-apps' card of the
  app says "Ready" (stopped), not "Pending", once the refusal ends; the reason goes from the page
  once the server that held the home has stopped.

JupyterHub 5 only: jhub-apps does not work on JupyterHub 6 (its spawn requests carry
``display_name`` flat in the body, which JupyterHub 6 reads as the new request schema and drops
the app's options), so this module is skipped there, saying so. Screenshots:
test-artifacts/e2e/jupyterhub-<version>/jhub-apps-<version>-*.png.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version

import pytest
from playwright.async_api import expect

from tests.support.waiting import wait_until

from .browser import screenshot
from .conftest import JUPYTERHUB_MAJOR
from .japps import (
    app_options,
    card,
    create_app,
    open_jhub_apps,
    start_app_from_home,
    wait_for_card,
)
from .test_refusals_in_browser import CPU_PROFILE, GPU_PROFILE, cpu_and_gpu_nodes
from .test_success_path import user_pods

pytestmark = pytest.mark.skipif(
    JUPYTERHUB_MAJOR >= 6,
    reason="jhub-apps does not work on JupyterHub 6 (docs/surfaces.md): its e2e runs on 5 only",
)

try:
    JHUB_APPS = version("jhub-apps")
except PackageNotFoundError:  # JupyterHub 6 legs do not install it (skipped above)
    JHUB_APPS = "absent"
#: jhub-apps' theme loads web fonts from Google (themes.DEFAULT_THEME font_url); the browser of
#: these tests reaches loopback only and blocks them, and nothing else may be blocked
FONT_HOSTS = ("https://fonts.googleapis.com/", "https://fonts.gstatic.com/")


def blocked_besides_fonts(page) -> list[str]:
    return [url for url in page.blocked if not url.startswith(FONT_HOSTS)]


VERDICT_MS = 30_000


def shot(artifacts, name: str):
    return artifacts / f"jhub-apps-{JHUB_APPS}-{name}.png"


async def jhub_apps_hub(kube, start_hub):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(
        jhub_apps="colocate",
        z2jh=True,
        consecutive_failure_limit=5,
        profile_list=[CPU_PROFILE, GPU_PROFILE],
    )
    await hub.create_user("alice")
    return hub


async def test_create_app_refused_shows_the_reason(kube, start_hub, browser_page, artifacts):
    page = browser_page
    hub = await jhub_apps_hub(kube, start_hub)
    await hub.start_server("alice", "pandas-app", app_options("pandas-app", "Pandas App", "cpu"))

    await open_jhub_apps(page, hub, "alice")
    await wait_for_card(page, "Pandas App")
    await screenshot(page, shot(artifacts, "home"))
    await create_app(page, hub, "GPU Dashboard", "GPU")

    # Lands on JupyterHub's spawn-pending page; the held refusal arrives in its progress stream.
    await page.wait_for_url(lambda url: "/hub/spawn-pending/alice/gpu-dashboard" in url)
    message = page.locator("#progress-message .colocate-message")
    await expect(message).to_be_visible(timeout=VERDICT_MS)
    # ... and the spawn ends as failed once the hold is over (JupyterHub marks the bar red).
    await expect(page.locator("#progress-bar")).to_have_class(re.compile("bg-danger"))
    await screenshot(page, shot(artifacts, "create-app-refused-spawn-pending"))
    text = await message.inner_text()
    assert "Your server 'GPU Dashboard' cannot start" in text, text
    headline = await message.locator(".colocate-headline").inner_text()
    assert "'Pandas App' uses your home folder on a machine with no GPU" in headline, headline
    details = await message.locator("details.colocate-details li").all_text_contents()
    assert any("needs a GPU node" in line for line in details), details
    await expect(message.locator("details.colocate-details:not([open])")).to_have_count(1)
    assert "gpu-dashboard" not in text and "pandas-app" not in text  # names, not slugs

    # Coming back later: the failed page nebari-colocate installs, not jhub-apps' redirect home.
    await page.reload()
    failed = page.locator("#colocate-failed")
    await expect(failed).to_be_visible(timeout=VERDICT_MS)
    await page.wait_for_timeout(2000)  # jhub-apps' React page would have navigated away by now
    assert "/hub/spawn-pending/alice/gpu-dashboard" in page.url
    await screenshot(page, shot(artifacts, "create-app-refused-reload"))
    assert "Your server 'GPU Dashboard' cannot start" in await failed.inner_text()
    assert (
        "'Pandas App' uses your home folder"
        in await failed.locator(".colocate-headline").inner_text()
    )

    assert set(await user_pods(kube, "alice")) == {"pandas-app"}
    assert hub.hub.alive()
    assert page.dialogs == [] and blocked_besides_fonts(page) == []


async def _wait_for_detach(kube, node: str, timeout: float = 60.0) -> None:
    from kubernetes_asyncio import client as k8s

    storage = k8s.StorageV1Api(kube.api_client)
    await wait_until(
        storage.list_volume_attachment,
        until=lambda found: not any(va.spec.node_name == node for va in found.items),
        timeout=timeout,
        what=f"every volume detached from {node}",
        seen=lambda found: sorted(va.spec.node_name for va in found.items),
        interval=0.5,
    )


async def test_start_on_the_home_page_refused_shows_the_reason(
    kube, start_hub, browser_page, artifacts
):
    page = browser_page
    hub = await jhub_apps_hub(kube, start_hub)
    # An app made earlier: started once on the GPU node, then stopped; then the lab on CPU.
    await hub.start_server(
        "alice", "gpu-dashboard", app_options("gpu-dashboard", "GPU Dashboard", "gpu")
    )
    await hub.stop_server("alice", "gpu-dashboard")
    # The real attach/detach controller detaches the home from gpu-1 a moment after the app
    # stops; until then the lab is rightly refused (pinned by the attachment). Wait it out.
    await _wait_for_detach(kube, "gpu-1")
    await hub.start_server("alice", "", {"profile": "cpu"})

    await open_jhub_apps(page, hub, "alice")
    await start_app_from_home(page, hub, "GPU Dashboard")
    refusal = page.locator('#colocate-refusals .colocate-refusal[data-server="gpu-dashboard"]')
    await expect(refusal).to_be_visible(timeout=VERDICT_MS)
    await screenshot(page, shot(artifacts, "home-start-refused"))
    text = await refusal.inner_text()
    assert "Your server 'GPU Dashboard' cannot start" in text, text
    assert (
        "'JupyterLab' uses your home folder"
        in await refusal.locator(".colocate-headline").inner_text()
    )

    # jhub-apps read the app's state once, right after its start's 202, while the refusal was
    # held pending ("Pending"); told to read again when the spawn ended, its card says what the
    # hub says now: stopped ("Ready", jhub-apps' word for an app one can start).
    badge = card(page, "GPU Dashboard").first
    await expect(badge).to_contain_text("Ready", timeout=VERDICT_MS)
    await expect(badge).not_to_contain_text("Pending")
    status, model = await hub.api("GET", "/users/alice?include_stopped_servers=1")
    assert status == 200, model
    server = model["servers"]["gpu-dashboard"]
    assert (server["pending"], server["ready"], server["stopped"]) == (None, False, True), server

    # Reloaded (or opened later), the home page still says why the last start failed.
    await page.reload()
    await expect(refusal).to_be_visible(timeout=VERDICT_MS)
    await screenshot(page, shot(artifacts, "home-start-refused-reload"))

    # The app's URL on the hub (where /user/alice/gpu-dashboard/ leads while no route exists for
    # it; here the lab's route /user/alice/ would catch it) leads to the failed page.
    await page.goto(f"{hub.url}/hub/user/alice/gpu-dashboard/")
    failed = page.locator("#colocate-failed")
    await expect(failed).to_be_visible(timeout=VERDICT_MS)
    await screenshot(page, shot(artifacts, "home-start-refused-app-url"))
    assert "Your server 'GPU Dashboard' cannot start" in await failed.inner_text()

    # The notice stays until the refusal no longer holds: the lab that held the home stopped
    # (elsewhere, not on this page), it goes from the open page, and from the page reloaded.
    await page.goto(f"{hub.url}/hub/home")
    await expect(refusal).to_be_visible(timeout=VERDICT_MS)
    await hub.stop_server("alice", "")
    await expect(refusal).to_have_count(0, timeout=VERDICT_MS)
    await page.reload()
    await wait_for_card(page, "GPU Dashboard")
    await expect(page.locator("#colocate-refusals .colocate-refusal")).to_have_count(0)

    assert set(await user_pods(kube, "alice")) == set()
    assert hub.hub.alive()
    assert page.dialogs == [] and blocked_besides_fonts(page) == []
