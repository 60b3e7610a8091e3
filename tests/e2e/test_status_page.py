"""The operator's page in a real hub, in Chromium (nebari_colocate.status_page).

alice's home is held on cpu-1 by a server whose name is HTML (a pod as KubeSpawner under
JupyterHub 5 leaves it, tests/e2e/test_hostile_server_name.py); her GPU lab is refused.  Then:

- root, a JupyterHub admin, finds "Co-location" in the navbar of a hub page, opens it and sees
  alice pinned to cpu-1 and her refusal (its reason and the words she read), the hostile name
  as text, no script run;
- bob, a plain user, has no link and gets 403;
- carol, no admin but granted ``custom:colocate:read`` by a role, has the link and the page;
- a script with a token of the same role reads the JSON (``?format=json``).

Two hubs: JupyterHub's own pages (what ``configure(c)`` installs: every leg), and
data-science-pack's (jhub-apps' page.html replaces the navbar with a profile menu: the legs with
jhub-apps, 5 and dsp).
"""

from __future__ import annotations

import importlib.util

import pytest
from playwright.async_api import expect

from tests.support.waiting import wait_until

from .browser import log_in, screenshot
from .test_data_science_pack import helm_values
from .test_hostile_server_name import HOSTILE, legacy_pod_named
from .test_refusals_in_browser import CPU_PROFILE, GPU_PROFILE, cpu_and_gpu_nodes

READERS = {
    "name": "colocate-readers",
    "scopes": ["custom:colocate:read"],
    "users": ["carol"],
    "services": ["e2e-tests"],
}
HAS_JHUB_APPS = importlib.util.find_spec("jhub_apps") is not None


async def status_json(hub) -> tuple[int, object]:
    async with hub._session.get(f"{hub.url}/hub/colocate/status?format=json") as r:
        return r.status, (await r.json() if r.status == 200 else await r.text())


async def open_from_navbar(page, hub, user: str) -> None:
    """Log in as ``user``, open a hub page (the token page: JupyterHub's page.html, or the
    theme's), click the navbar's link."""
    await page.goto(f"{hub.url}/hub/logout")
    await log_in(page, hub, user)
    await page.goto(f"{hub.url}/hub/token")
    link = page.locator("#colocate-status-link")
    await expect(link).to_have_count(1)
    await expect(link).to_be_visible()
    await link.click()
    await page.wait_for_url(f"{hub.url}/hub/colocate/status")


async def run(kube, hub, page, artifacts, name: str) -> None:
    for user in ("alice", "bob", "carol", "root"):
        await hub.create_user(user)
    await legacy_pod_named(kube, "alice", HOSTILE, "cpu-1")
    status, body = await hub.request_server("alice", "gpu-lab", {"profile": "gpu"})
    assert status in (202, 400), body
    await hub.wait_until_ended("alice", "gpu-lab")
    found = await wait_until(
        lambda: status_json(hub),
        until=lambda got: got[0] == 200 and got[1]["refusals"]["items"] and got[1]["pinned"],
        timeout=30,
        what="the refusal and alice pinned in the page's JSON (the script's token)",
    )
    data = found[1]
    (pin,) = data["pinned"]
    assert (pin["user"], pin["node"], pin["servers"]) == ("alice", "cpu-1", [HOSTILE])
    (refusal,) = data["refusals"]["items"]
    assert (refusal["user"], refusal["server"]) == ("alice", "gpu-lab")
    assert HOSTILE in refusal["message"]

    await open_from_navbar(page, hub, "root")
    section = page.locator("#colocate-status")
    await expect(section.locator("#colocate-pinned")).to_contain_text("cpu-1")
    await expect(section.locator("#colocate-pinned")).to_contain_text(HOSTILE)  # as text
    refusals = section.locator("#colocate-refusals")
    await expect(refusals).to_contain_text("gpu-lab")
    await expect(refusals).to_contain_text(refusal["reasons"][0])
    await expect(refusals.locator(".colocate-words")).to_contain_text(refusal["message"][:40])
    assert await section.locator("img").count() == 0
    await screenshot(page, artifacts / f"status-page-{name}-admin.png")

    await page.goto(f"{hub.url}/hub/logout")
    await log_in(page, hub, "bob")
    await page.goto(f"{hub.url}/hub/token")
    assert await page.locator("#colocate-status-link").count() == 0
    response = await page.goto(f"{hub.url}/hub/colocate/status")
    assert response is not None and response.status == 403
    assert await page.locator("#colocate-status").count() == 0
    await screenshot(page, artifacts / f"status-page-{name}-forbidden.png")

    await open_from_navbar(page, hub, "carol")
    await expect(page.locator("#colocate-pinned")).to_contain_text("alice")

    assert page.dialogs == [], f"a script ran: {page.dialogs}"
    # (jhub-apps' theme asks for web fonts: blocked, as every request off loopback is)
    assert [u for u in page.blocked if "fonts.g" not in u] == []


async def test_the_operators_page_from_the_navbar_of_jupyterhubs_pages(
    kube, start_hub, browser_page, artifacts
):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(
        profile_list=[CPU_PROFILE, GPU_PROFILE],
        way_out_handler=True,
        admin_users=["root"],
        roles=[READERS],
    )
    await run(kube, hub, browser_page, artifacts, "jupyterhub")


@pytest.mark.skipif(not HAS_JHUB_APPS, reason="this leg has no jhub-apps (legs 5 and dsp do)")
async def test_the_operators_page_from_the_profile_menu_of_data_science_packs_hub(
    kube, start_hub, browser_page, artifacts
):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    await kube.create_bound_claim("nebi-workspaces-alice")
    hub = await start_hub(
        jhub_apps="data-science-pack",
        z2jh=True,
        helm_values=helm_values(),
        admin_users=["root"],
        roles=[READERS],
    )
    await run(kube, hub, browser_page, artifacts, "data-science-pack")
