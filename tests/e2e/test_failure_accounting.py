"""Refusals and JupyterHub's consecutive_failure_limit (zero-to-jupyterhub sets 5).

A refused spawn is the user's to fix, not a broken hub: JupyterHub 6 does not count it (a 400
SpawnException), and on JupyterHub 5, which counts every failed spawn, the spawner takes it back
out of the count (nebari_colocate/jupyterhub.py). Six refusals in a row with the limit at 5
leave the hub running on both lines. Five real spawn failures in a row (a server that crashes at
start: nothing answers, the hub gives up after http_timeout) still stop the hub, as the operator
configured, on both lines. The hub runs with zero-to-jupyterhub's settings
(``slow_spawn_timeout`` 0: every REST spawn answers 202 at once).
"""

from __future__ import annotations

import asyncio

from nebari_colocate.jupyterhub import JUPYTERHUB_MAJOR
from tests.support.waiting import wait_until

from .harness import is_proxy
from .test_refusals_in_browser import CPU_PROFILE, GPU_PROFILE, cpu_and_gpu_nodes
from .test_success_path import user_pods

CRASH_PROFILE = {
    "display_name": "Crashes at start",
    "slug": "crash",
    "kubespawner_override": {
        "node_selector": {"node-type": "cpu"},
        "extra_annotations": {"e2e.nebari.dev/crash": "true"},
    },
}


async def test_six_refusals_in_a_row_leave_the_hub_running(kube, start_hub):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(
        profile_list=[CPU_PROFILE, GPU_PROFILE], consecutive_failure_limit=5, z2jh=True
    )
    await hub.create_user("alice")
    await hub.start_server("alice", "pandas-app", {"profile": "cpu"})

    for attempt in range(6):
        assert hub.hub.alive(), f"the hub stopped after {attempt} refusals"
        status, body = await hub.request_server("alice", "", {"profile": "gpu"})
        # slow_spawn_timeout 0: accepted, then refused. (JupyterHub 6 answers 201 for a spawn
        # that replaces a failed one although it is still pending.)
        assert status in (202, 201), body
        model = await hub.wait_until_ended("alice", "")
        assert model is None or not model.get("ready"), model

    await asyncio.sleep(3)  # longer than JupyterHub's two-second delay before it aborts
    assert hub.hub.alive()
    assert await hub.responds()
    log = hub.log()
    assert log.count("colocate verdict=refuse") >= 6
    assert "Aborting" not in log
    assert "consecutive spawns failed" not in log  # JupyterHub's own warning: nothing counted
    model = await hub.server_model("alice", "pandas-app")
    assert model and model["ready"], "the app kept running"
    # The advice to turn the limit off is gone: nothing tells the operator to.
    assert "consecutive_failure_limit = 0" not in log


async def test_five_crashing_servers_in_a_row_still_stop_the_hub(kube, start_hub):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(
        profile_list=[CPU_PROFILE, CRASH_PROFILE],
        consecutive_failure_limit=5,
        z2jh=True,
        http_timeout=2,
    )
    await hub.create_user("alice")

    failures = 0
    while hub.hub.alive() and failures < 5:
        status, body = await hub.request_server("alice", "", {"profile": "crash"})
        assert status in (202, 201), body
        model = await hub.wait_until_ended("alice", "")
        assert model is None or not model.get("ready"), model
        failures += 1

    assert failures == 5
    returncode = await hub.hub.wait(15)
    assert returncode == 1, f"the hub is still running ({returncode})"
    log = hub.log()
    assert "Aborting due to 5 consecutive spawn failures" in log
    assert "colocate verdict=refuse" not in log  # real failures, no refusal among them
    assert not await hub.responds()
    assert set(await user_pods(kube, "alice")) <= {""}
    pid = hub.proxy_pid()
    assert pid and is_proxy(pid), "the proxy the hub started outlives it (harness stops it)"


async def test_rest_api_refusal_carries_the_user_message(kube, start_hub):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(profile_list=[CPU_PROFILE, GPU_PROFILE])
    await hub.create_user("alice")
    await hub.start_server("alice", "pandas-app", {"profile": "cpu"})

    # Without zero-to-jupyterhub's slow_spawn_timeout 0 the REST API waits (10 s by default)
    # and answers the refusal, which arrives after the spawner's hold, with its text.
    status, body = await hub.request_server("alice", "", {"profile": "gpu"})
    assert status == 400, body
    message = body["message"]
    assert message.startswith("Your default server cannot start."), message
    assert "in use by 'pandas-app'" in message
    assert "verdict=" not in message and "jupyter-alice" not in message


def _sum(metrics: dict, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, got), v in metrics.items() if n == name and wanted <= got)


async def test_jupyterhubs_own_metric_tells_a_refusal_from_a_spawn_that_broke(kube, start_hub):
    """One refusal and one server that crashes at start, on a hub as zero-to-jupyterhub runs it.
    JupyterHub 6 files the refusal as status="failure" with its family as the reason and the
    crash as status="error"; on JupyterHub 5 both are status="failure", and the library's own
    refusal counter is what examples/prometheus-alerts.yaml subtracts to leave the crash."""
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(
        profile_list=[CPU_PROFILE, GPU_PROFILE, CRASH_PROFILE], z2jh=True, http_timeout=2
    )
    await hub.create_user("alice")
    await hub.start_server("alice", "pandas-app", {"profile": "cpu"})
    before = await hub.metrics()
    spawns = "jupyterhub_server_spawn_duration_seconds_count"
    refusals = "nebari_colocate_refusals_total"

    def grew(after: dict, name: str, **labels: str) -> float:
        return _sum(after, name, **labels) - _sum(before, name, **labels)

    status, body = await hub.request_server("alice", "", {"profile": "gpu"})
    assert status in (202, 201), body
    await hub.wait_until_ended("alice", "")
    status, body = await hub.request_server("alice", "crash", {"profile": "crash"})
    assert status in (202, 201), body
    after = await wait_until(
        hub.metrics,
        until=lambda m: grew(m, spawns, status="failure") + grew(m, spawns, status="error") >= 2,
        timeout=90,
        what="JupyterHub to count both spawns",
    )

    family = "colocate-volume-pinned"  # the GPU lab's node is the app's CPU node
    assert grew(after, refusals, family=family) == 1
    assert grew(after, refusals) == 1, "the crash is no refusal"
    if JUPYTERHUB_MAJOR >= 6:
        assert grew(after, spawns, status="failure", reason=family) == 1
        assert grew(after, spawns, status="failure") == 1
        assert grew(after, spawns, status="error") == 1, "the crash is a spawn that broke"
    else:
        assert not any(dict(labels).get("reason") for name, labels in after if name == spawns)
        assert grew(after, spawns, status="failure") == 2, "JupyterHub 5 counts both"
    # what the alert's recording rule computes: the spawns that broke, refusals left out
    real = grew(after, spawns, status="error") or (
        grew(after, spawns, status="failure") - grew(after, refusals)
    )
    assert real == 1
