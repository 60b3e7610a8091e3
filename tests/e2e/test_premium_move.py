"""The move off a premium node on the home page, in Chromium (docs/decisions.md, "The move off a
premium node").

alice's GPU lab runs on the GPU node; an app of hers that needs no GPU (its profile tolerates
the GPU taint, as ``singleuser.extraTolerations`` makes every pod do) follows it there
(``premium_node_policy`` warn); the lab stops. JupyterHub's home page (and, on JupyterHub 5,
jhub-apps' home) shows "'<app>' keeps a GPU machine running: move it to a standard machine";
the click stops the app, waits until the real attach/detach controller has detached the home
from the GPU node, starts the app again with its options, and it runs on the CPU node. bob
sees no notice; a POST of bob's for alice's app is refused (403) and stops nothing. The app's
server name is harmless here (JupyterHub's names are restricted); its display name on jhub-apps
carries HTML, shown escaped.
Screenshots: test-artifacts/e2e/jupyterhub-<version>/premium-move-*.png.
"""

from __future__ import annotations

import time
from urllib.parse import quote

import pytest
from playwright.async_api import expect

from tests.support.waiting import wait_until

from .browser import log_in, screenshot
from .conftest import JUPYTERHUB_MAJOR
from .japps import open_jhub_apps
from .test_refusals_in_browser import GPU_PROFILE, GPU_TOLERATION, cpu_and_gpu_nodes
from .test_way_out import session_of, xsrf

ANY_PROFILE = {
    "display_name": "Any node",
    "slug": "any",
    "kubespawner_override": {"tolerations": [GPU_TOLERATION]},
}
SPAWNER = {"way_out_release_timeout": 90}


async def pod_node(kube, pod_name: str) -> str | None:
    pod = await kube.core.read_namespaced_pod(pod_name, kube.namespace)
    return pod.spec.node_name


async def riding_app(kube, hub, app_body: dict) -> None:
    for name in ("alice", "bob"):
        await kube.create_bound_claim(f"claim-{name}")
        await hub.create_user(name)
    await hub.start_server("alice", "", {"profile": "gpu"})
    await hub.start_server("alice", "app", app_body)
    assert await pod_node(kube, "jupyter-alice--app") == "gpu-1"
    await hub.stop_server("alice", "")


async def click_the_move(page, hub, kube, artifacts, name: str, shown: str) -> None:
    notice = page.locator(".colocate-premium-ride")
    await expect(notice).to_contain_text(f"{shown} keeps a GPU machine running:")
    await screenshot(page, artifacts / f"premium-move-{name}-notice.png")
    clicked = time.monotonic()
    await notice.locator("button.colocate-move-button").click()
    await page.wait_for_url(f"{hub.url}/hub/home", timeout=120_000)
    await wait_until(
        lambda: hub.server_model("alice", "app"),
        until=lambda model: model and model.get("ready"),
        timeout=90,
        what="the app started again",
        interval=0.3,
    )
    print(f"premium move ({name}): the app ready again {time.monotonic() - clicked:.1f}s after")
    assert await pod_node(kube, "jupyter-alice--app") == "cpu-1"
    await page.goto(f"{hub.url}/hub/home")
    await expect(page.locator(".colocate-premium-ride")).to_have_count(0)
    await screenshot(page, artifacts / f"premium-move-{name}-moved.png")
    assert page.blocked == [] or all("fonts.g" in u for u in page.blocked), page.blocked
    assert page.dialogs == []


async def test_the_move_on_jupyterhubs_home_page(kube, start_hub, browser_page, artifacts):
    await cpu_and_gpu_nodes(kube)
    hub = await start_hub(
        profile_list=[GPU_PROFILE, ANY_PROFILE],
        spawner=SPAWNER,
        way_out_handler=True,
    )
    await riding_app(kube, hub, {"profile": "any"})

    # bob: no notice, and a forged POST for alice's app is refused, nothing stopped
    await log_in(browser_page, hub, "bob")
    await browser_page.goto(f"{hub.url}/hub/home")
    await expect(browser_page.locator(".colocate-premium-ride")).to_have_count(0)
    session = await session_of(hub, "bob")
    try:
        form = [("_xsrf", xsrf(session)), ("node", "gpu-1"), ("server", "app")]
        async with session.post(
            f"{hub.url}/hub/colocate/move/alice", data=form, allow_redirects=False
        ) as r:
            assert r.status == 403, await r.text()
        # alice's own POST without the XSRF token: 403 as well
    finally:
        await session.close()
    alice = await session_of(hub, "alice")
    try:
        async with alice.post(
            f"{hub.url}/hub/colocate/move/{quote('alice')}",
            data=[("node", "gpu-1"), ("server", "app")],
            allow_redirects=False,
        ) as r:
            assert r.status == 403, await r.text()
    finally:
        await alice.close()
    assert (await hub.server_model("alice", "app") or {}).get("ready")

    await browser_page.context.clear_cookies()
    await log_in(browser_page, hub, "alice")
    await browser_page.goto(f"{hub.url}/hub/home")
    await click_the_move(browser_page, hub, kube, artifacts, "jupyterhub", "'app'")


@pytest.mark.skipif(JUPYTERHUB_MAJOR >= 6, reason="jhub-apps does not work on JupyterHub 6")
async def test_the_move_on_jhub_apps_home_page(kube, start_hub, browser_page, artifacts):
    await cpu_and_gpu_nodes(kube)
    hub = await start_hub(
        jhub_apps="colocate",
        z2jh=True,
        consecutive_failure_limit=5,
        profile_list=[GPU_PROFILE, ANY_PROFILE],
        spawner=SPAWNER,
    )
    shown = "<b>Pandas</b> App"
    await riding_app(kube, hub, {"profile": "any", "display_name": shown, "jhub_app": False})
    # jhub-apps' launcher asks once for OAuth access to its service, then renders its home
    await open_jhub_apps(browser_page, hub, "alice")
    await expect(browser_page.locator(".colocate-premium-ride b")).to_have_count(0)
    await click_the_move(browser_page, hub, kube, artifacts, "jhub-apps", f"'{shown}'")
