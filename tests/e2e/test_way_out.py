"""The way out, taken through the hub's handler (docs/decisions.md, "The way out").

A real JupyterHub with the handler ``configure(c)`` installs, a real control plane with the real
attach/detach controller: alice's app runs on the CPU node, her GPU lab is refused, and the
refusal's progress event carries ``way_out``; she POSTs it (her session and its ``_xsrf``
cookie, as a page's form would) and the hub stops the app, waits for the volume to be detached
from the CPU node, and starts the lab, on the GPU node.  The hostile cases: a forged POST for
bob's server (403, nothing of bob's stopped), a POST without the XSRF token (403), a stale way
out (alice started another server in between: 409, nothing stopped) and a double click (one
stop of each server, one start).  No browser: the buttons on the pages are not this test's.
"""

from __future__ import annotations

import asyncio
import html
import json
from urllib.parse import quote

import aiohttp

from tests.support.waiting import wait_until

from .harness import PASSWORD, Hub
from .test_refusals_in_browser import CPU_PROFILE, GPU_PROFILE, cpu_and_gpu_nodes
from .test_success_path import user_pods

SPAWNER = {"refusal_hold_seconds": 5, "way_out_release_timeout": 90}


async def way_out_hub(kube, start_hub) -> Hub:
    await cpu_and_gpu_nodes(kube)
    hub = await start_hub(
        profile_list=[CPU_PROFILE, GPU_PROFILE], spawner=SPAWNER, way_out_handler=True
    )
    for name in ("alice", "bob"):
        await kube.create_bound_claim(f"claim-{name}")
        await hub.create_user(name)
    return hub


async def session_of(hub: Hub, username: str) -> aiohttp.ClientSession:
    """A logged-in session (cookies for 127.0.0.1 need an unsafe jar)."""
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with session.get(f"{hub.url}/hub/login") as r:
        assert r.status == 200, await r.text()
    form = {"username": username, "password": PASSWORD, "_xsrf": xsrf(session)}
    async with session.post(f"{hub.url}/hub/login", data=form, allow_redirects=False) as r:
        assert r.status in (302, 303), (r.status, await r.text())
    async with session.get(f"{hub.url}/hub/home") as r:  # the _xsrf cookie of the session
        assert r.status == 200
    return session


def xsrf(session: aiohttp.ClientSession) -> str:
    for cookie in session.cookie_jar:
        if cookie.key == "_xsrf":
            return cookie.value
    raise AssertionError("no _xsrf cookie")


async def post_way_out(
    hub: Hub, session: aiohttp.ClientSession, user: str, server: str, stop: list[str]
) -> tuple[int, str, str]:
    """(status, Location, body) of the way out's POST."""
    url = f"{hub.url}/hub/colocate/way-out/{quote(user, safe='')}/{quote(server, safe='')}"
    form = [("_xsrf", xsrf(session)), *(("stop", name) for name in stop)]
    async with session.post(url, data=form, allow_redirects=False) as r:
        return r.status, r.headers.get("Location", ""), await r.text()


async def refused_with_way_out(hub: Hub, user: str, server: str, body: dict) -> dict | None:
    """Request ``server`` through the REST API; the ``way_out`` of the refusal's progress event
    (the spawn is held pending ``refusal_hold_seconds`` with the reason in its stream)."""
    request = asyncio.ensure_future(hub.request_server(user, server, body))
    path = f"/users/{quote(user, safe='')}/" + (
        f"servers/{quote(server, safe='')}/progress" if server else "server/progress"
    )
    model = await wait_until(
        lambda: hub.server_model(user, server),
        until=lambda model: (model or {}).get("pending") or request.done(),
        timeout=30,
        what=f"a pending spawn of {user}/{server!r} to read the progress of",
        interval=0.1,
    )
    if not (model or {}).get("pending"):
        raise AssertionError(f"no pending spawn to read the progress of: {request}")
    found: dict | None = None
    seen = False
    async with hub._session.get(f"{hub.url}/hub/api{path}") as r:
        assert r.status == 200, await r.text()
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            event = json.loads(line[len("data:") :])
            if "way_out" in event:
                seen, found = True, event["way_out"]
            if event.get("failed"):
                break
    await request
    await hub.wait_until_ended(user, server)
    assert seen, "no progress event carried way_out"
    return found


async def wait_ready(hub: Hub, user: str, server: str, timeout: float = 90) -> dict:
    model: dict = await wait_until(
        lambda: hub.server_model(user, server),
        until=lambda model: model and model.get("ready"),
        timeout=timeout,
        what=f"{user}/{server!r} ready",
        interval=0.3,
    )
    return model


async def test_the_way_out_stops_the_app_waits_for_the_detach_and_starts_the_lab(kube, start_hub):
    hub = await way_out_hub(kube, start_hub)
    await hub.start_server("alice", "pandas-app", {"profile": "cpu"})
    await hub.start_server("bob", "notebook", {"profile": "cpu"})
    way_out = await refused_with_way_out(hub, "alice", "", {"profile": "gpu"})
    assert way_out == {"stop": ["pandas-app"], "start": ""}
    alice = await session_of(hub, "alice")
    try:
        # A forged POST for bob's server: alice has no scope on bob's servers.
        status, _, _ = await post_way_out(hub, alice, "bob", "lab", ["notebook"])
        assert status == 403
        assert set(await user_pods(kube, "bob")) == {"notebook"}

        # Without the session's _xsrf: JupyterHub refuses the POST itself.
        url = f"{hub.url}/hub/colocate/way-out/alice/"
        async with alice.post(url, data={"stop": "pandas-app"}, allow_redirects=False) as r:
            assert r.status == 403
        assert set(await user_pods(kube, "alice")) == {"pandas-app"}

        # Stale: alice starts another server in between; the way out stops nothing.
        await hub.start_server("alice", "dash", {"profile": "cpu"})
        status, _, body = await post_way_out(hub, alice, "alice", "", ["pandas-app"])
        assert status == 409, body
        assert "Nothing was stopped" in body
        assert set(await user_pods(kube, "alice")) == {"pandas-app", "dash"}

        # Refused again, the way out lists both; taken, both stop and the lab starts.
        way_out = await refused_with_way_out(hub, "alice", "", {"profile": "gpu"})
        assert way_out == {"stop": ["dash", "pandas-app"], "start": ""}
        # Clicked twice at once: one stop of each server, one start, both sent to its page.
        stops_before = hub.log().count("seconds to stop")
        answers = await asyncio.gather(
            *(post_way_out(hub, alice, "alice", "", ["dash", "pandas-app"]) for _ in range(2))
        )
        for status, location, body in answers:
            assert status == 303, body
            assert location.endswith("/hub/spawn-pending/alice"), location
        await wait_ready(hub, "alice", "")
        pods = await user_pods(kube, "alice")
        assert set(pods) == {""}
        assert pods[""]["spec"]["nodeName"] == "gpu-1"
        assert set(await user_pods(kube, "bob")) == {"notebook"}
        assert hub.log().count("seconds to stop") - stops_before == 2

        # A second click afterwards: the lab is running; nothing is stopped or started again.
        status, location, _ = await post_way_out(hub, alice, "alice", "", ["dash", "pandas-app"])
        assert status == 303 and location.endswith("/hub/spawn-pending/alice")
        assert set(await user_pods(kube, "alice")) == {""}
    finally:
        await alice.close()
    assert hub.hub.alive()


#: a finalizer nobody removes: the pod's delete never finishes (a stuck unmount looks the same)
STUCK = "nebari.dev/test-stuck"


async def test_a_way_out_that_stops_one_of_two_servers_says_which_on_the_hubs_error_page(
    kube, start_hub
):
    await cpu_and_gpu_nodes(kube)
    hub = await start_hub(
        profile_list=[CPU_PROFILE, GPU_PROFILE],
        spawner={"refusal_hold_seconds": 5, "way_out_release_timeout": 15},
        way_out_handler=True,
    )
    await kube.create_bound_claim("claim-alice")
    await hub.create_user("alice")
    await hub.start_server("alice", "dash", {"profile": "cpu"})
    await hub.start_server("alice", "pandas-app", {"profile": "cpu"})
    stuck = (await user_pods(kube, "alice"))["pandas-app"]["metadata"]["name"]
    await kube.core.patch_namespaced_pod(
        stuck, kube.namespace, {"metadata": {"finalizers": [STUCK]}}
    )
    alice = await session_of(hub, "alice")
    try:
        way_out = await refused_with_way_out(hub, "alice", "", {"profile": "gpu"})
        assert way_out == {"stop": ["dash", "pandas-app"], "start": ""}
        status, _, body = await post_way_out(hub, alice, "alice", "", ["dash", "pandas-app"])
        assert status == 500, body
        page = html.unescape(body)
        print(f"the hub's error page: {page[page.find('dash') - 1 :][:260]}")
        assert (
            "'dash' stopped, but 'pandas-app' did not stop (it took too long), so your default "
            "server was not started. Stop 'pandas-app' on the home page, then start your "
            "default server again."
        ) in page
        for word in ("RuntimeError", "Traceback", "Exception"):
            assert word not in page
        pods = await user_pods(kube, "alice")
        assert set(pods) == {"pandas-app"}  # 'dash' stopped, 'pandas-app' did not, as said
        assert pods["pandas-app"]["metadata"].get("deletionTimestamp")
    finally:
        await alice.close()
        await kube.core.patch_namespaced_pod(
            stuck, kube.namespace, {"metadata": {"finalizers": None}}
        )
    assert hub.hub.alive()


async def test_a_server_jupyterhub_gave_up_stopping_is_named_as_left_behind_not_as_stopped(
    kube, start_hub
):
    """KubeSpawner's stop gives up after ``start_timeout`` on a pod that does not go away;
    JupyterHub then forgets the server (``User.stop`` clears it whatever the stop did, and
    ``stop_single_user`` swallows the error), so the way out cannot tell from JupyterHub that
    it did not stop: the pods still holding the home after the wait say it."""
    await cpu_and_gpu_nodes(kube)
    hub = await start_hub(
        profile_list=[CPU_PROFILE, GPU_PROFILE],
        start_timeout=12,
        spawner={"refusal_hold_seconds": 5, "way_out_release_timeout": 24},
        way_out_handler=True,
    )
    await kube.create_bound_claim("claim-alice")
    await hub.create_user("alice")
    await hub.start_server("alice", "dash", {"profile": "cpu"})
    await hub.start_server("alice", "pandas-app", {"profile": "cpu"})
    stuck = (await user_pods(kube, "alice"))["pandas-app"]["metadata"]["name"]
    await kube.core.patch_namespaced_pod(
        stuck, kube.namespace, {"metadata": {"finalizers": [STUCK]}}
    )
    alice = await session_of(hub, "alice")
    try:
        way_out = await refused_with_way_out(hub, "alice", "", {"profile": "gpu"})
        assert way_out == {"stop": ["dash", "pandas-app"], "start": ""}
        status, _, body = await post_way_out(hub, alice, "alice", "", ["dash", "pandas-app"])
        assert status == 500, body
        page = html.unescape(body)
        print(f"the hub's error page: {page[page.find('dash') - 1 :][:300]}")
        assert (
            "'dash' stopped, but 'pandas-app' did not stop (it is stuck), so your default server "
            "was not started. Ask an administrator to remove 'pandas-app', then start your "
            "default server again."
        ) in page
        assert (await hub.server_model("alice", "pandas-app") or {}).get("ready") is not True
        assert set(await user_pods(kube, "alice")) == {"pandas-app"}
    finally:
        await alice.close()
        await kube.core.patch_namespaced_pod(
            stuck, kube.namespace, {"metadata": {"finalizers": None}}
        )
    assert hub.hub.alive()
