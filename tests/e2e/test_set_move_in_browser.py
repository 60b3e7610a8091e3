"""The move of the whole set's button, clicked in headless Chromium (docs/surfaces.md, "The move of
the whole set: a second button").

alice's default server and an app (1.5 CPU each) fill node cpu-1 (4 CPU); she asks for 'big'
(2 CPU). Refused for lack of room; node cpu-2 (8 CPU, added after her servers started) holds all
three, so the refusal shows a second button beside the way out's: "Restart … together on a
machine with room for all three, then start …". The click POSTs it (with the session's
``_xsrf``) to the hub's handler, which stops her two servers, waits for the real attach/detach
controller to detach the home from cpu-1, and starts the three on cpu-2; the browser lands on
'big''s progress page. The app's name is HTML: escaped in the words and the button, no script runs.

- JupyterHub's spawn form (every leg), re-rendered with the refusal;
- jhub-apps' home page (JupyterHub 5 legs, real jhub-apps): the banner of the refused app.

Screenshots: test-artifacts/e2e/jupyterhub-<version>/set-move-*.png.
"""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from .browser import log_in, request_from_spawn_page, screenshot
from .conftest import JUPYTERHUB_MAJOR
from .harness import Hub
from .japps import app_options, open_jhub_apps, start_app_from_home, wait_for_card
from .test_hostile_server_name import HOSTILE
from .test_jhub_apps import blocked_besides_fonts
from .test_success_path import user_pods
from .test_way_out import wait_ready
from .test_way_out_in_browser import CLICK_MS, JHUB_APPS, SPAWNER, VERDICT_MS

SMALL = {
    "display_name": "Small",
    "slug": "small",
    "default": True,
    "kubespawner_override": {"node_selector": {"node-type": "cpu"}, "cpu_guarantee": 1.5},
}
BIG = {
    "display_name": "Big",
    "slug": "big",
    "kubespawner_override": {"node_selector": {"node-type": "cpu"}, "cpu_guarantee": 2},
}


async def full_node_then_a_roomy_one(kube, hub: Hub, start) -> None:
    """alice's two servers on cpu-1 (created first, alone), then cpu-2."""
    await start()
    await kube.create_node("cpu-2", labels={"node-type": "cpu"}, cpu="8")


def move_form(page: Page, within: str = "body"):
    return page.locator(f"{within} form.colocate-set-move-form")


async def click_and_land_together(page: Page, hub: Hub, kube, form, servers: set[str], new: str):
    await form.locator("button").click()
    await page.wait_for_url(
        lambda url: f"/spawn-pending/alice/{new}" in url or f"/user/alice/{new}" in url,
        timeout=CLICK_MS,
    )
    for server in servers:
        await wait_ready(hub, "alice", server)
    pods = await user_pods(kube, "alice")
    assert set(pods) == servers, pods
    assert {p["spec"]["nodeName"] for p in pods.values()} == {"cpu-2"}, pods


async def test_the_spawn_form_offers_the_move_and_the_set_runs_together_on_the_roomy_node(
    kube, start_hub, browser_page, artifacts
):
    page = browser_page
    await kube.create_node("cpu-1", labels={"node-type": "cpu"}, cpu="4")
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(profile_list=[SMALL, BIG], spawner=SPAWNER, way_out_handler=True)
    await hub.create_user("alice")
    if JUPYTERHUB_MAJOR < 6:
        app, shown = HOSTILE, HOSTILE
        options = {"profile": "small"}
    else:  # JupyterHub 6: server names are slugs, display names free text
        app, shown = "evil-app", HOSTILE
        options = {"display_name": HOSTILE, "user_options": {"profile": "small"}}

    async def start() -> None:
        await hub.start_server("alice", "", {"profile": "small"})
        await hub.start_server("alice", app, options)

    await full_node_then_a_roomy_one(kube, hub, start)
    await log_in(page, hub, "alice")
    await request_from_spawn_page(page, hub, "alice", "big", "big")

    error = page.locator(".spawn-error-msg")
    await expect(error.locator(".colocate-message")).to_be_visible(timeout=VERDICT_MS)
    form = move_form(page, ".spawn-error-msg")
    button = form.locator("button")
    names = sorted(["your default server", f"'{shown}'"], key=lambda n: n != "your default server")
    await expect(button).to_have_text(
        f"Restart {names[0]} and {names[1]} together on a machine with room for all three, "
        "then start 'big'"
    )
    assert sorted(
        await form.locator("input[name=restart]").evaluate_all("inputs => inputs.map(i => i.value)")
    ) == sorted(["", app])
    assert await form.locator("input[name=node]").get_attribute("value") == "cpu-2"
    # what the person consents to is said beside the button
    await expect(form.locator(".colocate-set-move-note")).to_have_text("Running kernels restart.")
    assert await page.locator("form.colocate-way-out-form:visible").count() == 2  # both ways out
    await screenshot(page, artifacts / "set-move-spawn-form.png")

    await click_and_land_together(page, hub, kube, form, {"", app, "big"}, "big")
    assert page.dialogs == [] and page.page_errors == []  # no alert(1): the name stayed text
    assert hub.hub.alive()


@pytest.mark.skipif(
    JUPYTERHUB_MAJOR >= 6 or not JHUB_APPS,
    reason="jhub-apps does not work on JupyterHub 6 (docs/surfaces.md): its e2e runs on 5 only",
)
async def test_jhub_apps_home_offers_the_move_and_the_set_runs_together(
    kube, start_hub, browser_page, artifacts
):
    page = browser_page
    await kube.create_node("cpu-1", labels={"node-type": "cpu"}, cpu="4")
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(
        jhub_apps="colocate",
        z2jh=True,
        consecutive_failure_limit=5,
        profile_list=[SMALL, BIG],
        spawner=SPAWNER,
    )
    await hub.create_user("alice")
    # 'Big <App>' made earlier and stopped; then the lab and the Pandas App on cpu-1.
    await hub.start_server("alice", "big-app", app_options("big-app", HOSTILE + " Big", "big"))
    await hub.stop_server("alice", "big-app")

    async def start() -> None:
        await hub.start_server("alice", "", {"profile": "small"})
        await hub.start_server(
            "alice", "pandas-app", app_options("pandas-app", "Pandas App", "small")
        )

    await full_node_then_a_roomy_one(kube, hub, start)
    await open_jhub_apps(page, hub, "alice")
    await wait_for_card(page, "Pandas App")
    await start_app_from_home(page, hub, HOSTILE + " Big")
    banner = page.locator('#colocate-refusals .colocate-refusal[data-server="big-app"]')
    form = banner.locator("form.colocate-set-move-form")
    await expect(form).to_be_visible(timeout=VERDICT_MS)
    await expect(form.locator("button")).to_have_text(
        "Restart 'JupyterLab' and 'Pandas App' together on a machine with room for all three, "
        f"then start '{HOSTILE} Big'"
    )
    await expect(form.locator(".colocate-set-move-note")).to_have_text("Running kernels restart.")
    await screenshot(page, artifacts / f"set-move-jhub-apps-{JHUB_APPS}-home.png")
    await click_and_land_together(page, hub, kube, form, {"", "pandas-app", "big-app"}, "big-app")
    # (jhub-apps' own React pages log errors of their own: what counts is no dialog, nothing
    # blocked)
    assert page.dialogs == [] and blocked_besides_fonts(page) == []
    assert hub.hub.alive()
