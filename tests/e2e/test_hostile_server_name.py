"""A server name that is HTML appears on the spawn pages as text, and no script runs.

JupyterHub 5 accepts any server name without '/', so the app is started through the REST API
with the name ``<img src=x onerror=alert(1)>``. JupyterHub 6 refuses that name (server names must
be safe slugs: lowercase letters, digits, single hyphens, 1-30 characters) but lets the *display
name* be free text, and keeps serving servers created before the upgrade under their old names
(``allow_invalid_named_server_start``); their pods carry the raw name in the
``hub.jupyter.org/servername`` annotation, which is where the refusal message reads server names
from. So on 6 the test starts ``evil-app`` with the hostile display name through the REST API,
and adds a pod such as JupyterHub 5 + KubeSpawner left running under the hostile name.

The hub's pre_spawn_hook takes 1.5 s so the verdict arrives on /hub/spawn-pending, where
JupyterHub inserts ``html_message`` as raw HTML: the escaping is the spawner's.
"""

from __future__ import annotations

from tests.support import builders

from .browser import log_in, request_from_spawn_page, screenshot, wait_for_verdict
from .conftest import JUPYTERHUB_MAJOR
from .test_refusals_in_browser import CPU_PROFILE, GPU_PROFILE, cpu_and_gpu_nodes

HOSTILE = "<img src=x onerror=alert(1)>"


async def legacy_pod_named(kube, username: str, server: str, node: str) -> None:
    """A running pod as KubeSpawner under JupyterHub 5 creates it for `server`."""
    pod = builders.kube_pod(
        f"jupyter-{username}--legacy",
        claims=[f"claim-{username}"],
        node_selector={"kubernetes.io/hostname": node},
        labels={
            "component": "singleuser-server",
            "hub.jupyter.org/username": username,
            "hub.jupyter.org/servername": "img-src-x-onerror-alert-1---a1b2c3d4",
        },
        annotations={"hub.jupyter.org/username": username, "hub.jupyter.org/servername": server},
    )
    await kube.core.create_namespaced_pod(kube.namespace, pod)
    await kube.wait_for_running(pod["metadata"]["name"])


async def test_hostile_app_name_is_text_on_every_page(kube, start_hub, browser_page, artifacts):
    page = browser_page
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(profile_list=[CPU_PROFILE, GPU_PROFILE], pre_spawn_delay=1.5)
    await hub.create_user("alice")

    if JUPYTERHUB_MAJOR < 6:
        await hub.start_server("alice", HOSTILE, {"profile": "cpu"})
        expected_holders = [f"'{HOSTILE}'"]
    else:
        status, body = await hub.request_server("alice", HOSTILE, {"profile": "cpu"})
        assert status == 400, body
        assert "Invalid server_name" in body["message"]
        await hub.start_server(
            "alice", "evil-app", {"display_name": HOSTILE, "user_options": {"profile": "cpu"}}
        )
        await legacy_pod_named(kube, "alice", HOSTILE, "cpu-1")
        # evil-app is called by its display name, the hostile one: as text, twice.
        expected_holders = [f"'{HOSTILE}'", f"'{HOSTILE}'"]

    await log_in(page, hub, "alice")
    await page.goto(f"{hub.url}/hub/home")
    await screenshot(page, artifacts / "hostile-name-home.png")

    await request_from_spawn_page(page, hub, "alice", "", "gpu")
    verdict = await wait_for_verdict(page)
    await screenshot(page, artifacts / f"hostile-name-{verdict.page}.png")
    assert verdict.page == "spawn-pending"
    for holder in set(expected_holders):
        assert holder in verdict.headline, verdict.headline
    assert verdict.details and not verdict.details_open
    assert HOSTILE in verdict.text
    assert await page.locator("#progress-message img, #progress-log img").count() == 0

    await page.reload()
    failed = await wait_for_verdict(page)
    await screenshot(page, artifacts / f"hostile-name-{failed.page}.png")
    assert failed.page == "spawn-failed"
    for holder in set(expected_holders):
        assert holder in failed.headline, failed.headline
    assert await page.locator("div.container img").count() == 0

    assert page.dialogs == [], f"a script ran: {page.dialogs}"
    assert page.blocked == []
