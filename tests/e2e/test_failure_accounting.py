"""Refusals and JupyterHub's consecutive_failure_limit (zero-to-jupyterhub sets 5).

JupyterHub 6 counts only server errors toward the limit; a refusal is a 400 SpawnException, so
six refusals in a row leave the hub running. JupyterHub 5 counts every failed spawn and stops the
hub (exit status 1, two seconds after the spawn that reached the limit). The README's mitigation
on 5 is ``c.Spawner.consecutive_failure_limit = 0``.
"""

from __future__ import annotations

import asyncio

import pytest

from .conftest import JUPYTERHUB_MAJOR
from .harness import is_proxy
from .test_refusals_in_browser import CPU_PROFILE, GPU_PROFILE, cpu_and_gpu_nodes
from .test_success_path import user_pods

JH5_WARNING = "counts refused spawns toward consecutive_failure_limit"


async def six_refusals(hub) -> list[tuple[int, str]]:
    answers = []
    for _ in range(6):
        if not hub.hub.alive():
            break
        try:
            status, body = await hub.request_server("alice", "", {"profile": "gpu"})
        except Exception as e:  # the hub went away in the middle of a request
            answers.append((0, repr(e)))
            break
        answers.append((status, body.get("message", "") if isinstance(body, dict) else body))
    return answers


@pytest.mark.parametrize("limit", [5, 0])
async def test_six_refusals_in_a_row(limit, kube, start_hub):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(profile_list=[CPU_PROFILE, GPU_PROFILE], consecutive_failure_limit=limit)
    await hub.create_user("alice")
    await hub.start_server("alice", "pandas-app", {"profile": "cpu"})

    answers = await six_refusals(hub)
    assert answers, "no request reached the hub"
    assert [status for status, _ in answers] == [400] * len(answers), answers

    if JUPYTERHUB_MAJOR < 6 and limit == 5:
        # JupyterHub 5: the fifth refusal reaches the limit; the hub exits two seconds later.
        returncode = await hub.hub.wait(15)
        assert returncode == 1, f"the hub is still running ({returncode})"
        assert "Aborting due to 5 consecutive spawn failures" in hub.log()
        assert not await hub.responds()
        # It exits without cleaning up: the user's app pod stays (on Kubernetes the hub pod is
        # restarted and finds it again); the proxy it started here outlives it too.
        assert "Cleaning up single-user servers" not in hub.log()
        assert set(await user_pods(kube, "alice")) == {"pandas-app"}
        pid = hub.proxy_pid()
        assert pid and is_proxy(pid), "the proxy the hub started is still running"
    else:
        await asyncio.sleep(3)  # longer than JupyterHub's two-second delay before it aborts
        assert hub.hub.alive()
        assert await hub.responds()
        assert len(answers) == 6
        assert "Aborting" not in hub.log()
        model = await hub.server_model("alice", "pandas-app")
        assert model and model["ready"], "the app kept running"

    # The spawner tells the operator of JupyterHub 5 about the limit, once, at the first spawn.
    warned = JH5_WARNING in hub.log()
    assert warned == (JUPYTERHUB_MAJOR < 6 and limit > 0)


async def test_rest_api_refusal_carries_the_user_message(kube, start_hub):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(profile_list=[CPU_PROFILE, GPU_PROFILE])
    await hub.create_user("alice")
    await hub.start_server("alice", "pandas-app", {"profile": "cpu"})

    status, body = await hub.request_server("alice", "", {"profile": "gpu"})
    assert status == 400, body
    message = body["message"]
    assert message.startswith("Your default server cannot start:"), message
    assert "in use by 'pandas-app'" in message
    assert "verdict=" not in message and "jupyter-alice" not in message
