"""A named server added on the hub's home page, on a hub without profiles (capacity cap).

JupyterHub 5's "Add New Server" opens /hub/spawn/<user>/<name>. JupyterHub 6's creates the
server through the REST API (PUT, no start) and reloads the page, where the new row's "start"
link opens /hub/spawn/<user>/<name>. With no options form that URL spawns at once and, refused
within JupyterHub's 1 s wait, answers with JupyterHub's error page (error.html, which prefers the
HTML message over the text).
"""

from __future__ import annotations

from playwright.async_api import expect

from .browser import log_in, screenshot, wait_for_verdict
from .conftest import JUPYTERHUB_MAJOR
from .test_success_path import user_pods


async def test_add_new_server_on_the_home_page(kube, start_hub, browser_page, artifacts):
    page = browser_page
    await kube.create_node("cpu-1", cpu="3")
    await kube.create_node("cpu-2", cpu="3")
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(spawner={"cpu_guarantee": 2})
    await hub.create_user("alice")
    await hub.start_server("alice")

    await log_in(page, hub, "alice")
    await page.goto(f"{hub.url}/hub/home")
    # the button's handler is bound by the home page's scripts once they have loaded: on a
    # loaded machine a click before that did nothing (the page stayed on /hub/home)
    await page.wait_for_load_state("networkidle")
    await page.fill(".new-server-name", "big-app")
    await page.click(".new-server-btn")
    if JUPYTERHUB_MAJOR >= 6:
        start = page.locator("#start-big-app")
        await expect(start).to_be_visible()
        await screenshot(page, artifacts / "home-add-new-server-created.png")
        await start.click()
    verdict = await wait_for_verdict(page)
    await screenshot(page, artifacts / f"home-add-new-server-{verdict.page}.png")

    assert verdict.page == "error-page"
    await expect(page.locator("div.error h1")).to_have_text("400 : Bad Request")
    assert "Your server 'big-app' cannot start" in verdict.text
    assert "Your default server uses your home folder" in verdict.headline
    assert any("It needs 2 CPU but node" in line for line in verdict.details), verdict.details
    assert not verdict.details_open and "cpu-1" not in verdict.text

    assert set(await user_pods(kube, "alice")) == {""}
    assert page.dialogs == []
    assert page.blocked == []
