"""Each failure mode of docs/failure-modes.md, as a person meets it in headless Chromium.

The preconditions (the user's other servers) are started through the hub's REST API, so the hub
knows them; then the person logs in, opens the spawn page, chooses a profile, presses Start and
reads the verdict. Two timings, two pages:

- ``spawn-pending``: the hub config's pre_spawn_hook takes 1.5 s (as a deployment's hooks do), so
  JupyterHub's spawn form gives up waiting after 1 s and redirects to /hub/spawn-pending, where the
  progress stream delivers the failure with its HTML (``html_message``). Reloading then shows
  JupyterHub's "Spawn failed" page, again with the HTML.
- ``spawn-form``: no hook; the refusal comes within JupyterHub's 1 s, and the spawn form is
  re-rendered with the error. That template shows the *text* message whenever there is one, so the
  reasons and the user's servers appear as one sentence, not as HTML lists.

Screenshots go to test-artifacts/e2e/jupyterhub-<version>/<scenario>-<page>.png.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from playwright.async_api import expect

from .browser import log_in, request_from_spawn_page, screenshot, wait_for_verdict
from .test_success_path import user_pods

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

CPU_PROFILE = {
    "display_name": "CPU",
    "slug": "cpu",
    "default": True,
    "kubespawner_override": {"node_selector": {"node-type": "cpu"}},
}
GPU_PROFILE = {
    "display_name": "GPU",
    "slug": "gpu",
    "kubespawner_override": {
        "node_selector": {"node-type": "gpu"},
        "tolerations": [GPU_TOLERATION],
        "extra_resource_limits": {"nvidia.com/gpu": "1"},
    },
}


@dataclass
class Scenario:
    name: str
    nodes: Callable[[object], Awaitable[None]]
    profile_list: list[dict]
    preconditions: list[tuple[str, str]]  # (server name, profile slug), started via REST
    request: tuple[str, str]  # (server name, profile slug), requested in the browser
    phrases: list[str]  # must appear in the message text
    holders: list[str]  # the user's servers the message names, as it names them
    details: list[str] = field(default_factory=list)  # in the technical facts (Details)
    spawner: dict = field(default_factory=dict)


async def cpu_and_gpu_nodes(kube, gpu_taint: bool = True) -> None:
    await kube.create_node("cpu-1", labels={"node-type": "cpu"}, cpu="4")
    await kube.create_node(
        "gpu-1",
        labels={"node-type": "gpu"},
        taints=[GPU_TAINT] if gpu_taint else [],
        cpu="8",
        extra={"nvidia.com/gpu": "1"},
    )


async def two_cpu_nodes(kube) -> None:
    await kube.create_node("cpu-1", cpu="4")
    await kube.create_node("cpu-2", cpu="4")


async def cpu_and_untainted_gpu_nodes(kube) -> None:
    await cpu_and_gpu_nodes(kube, gpu_taint=False)


def cpu_profile(slug: str, cpus: int, default: bool = False) -> dict:
    return {
        "display_name": f"{cpus} CPU",
        "slug": slug,
        "default": default,
        "kubespawner_override": {"cpu_guarantee": cpus},
    }


SCENARIOS = [
    Scenario(
        name="gpu-lab-blocked",
        nodes=cpu_and_gpu_nodes,
        profile_list=[CPU_PROFILE, GPU_PROFILE],
        preconditions=[("pandas-app", "cpu")],
        request=("", "gpu"),
        phrases=[
            "Your default server cannot start",
            "'pandas-app' uses your home folder on a machine with no GPU",
        ],
        details=["It needs a GPU node (nvidia.com/gpu); node cpu-1 has none."],
        holders=["'pandas-app'"],
    ),
    Scenario(
        name="capacity-cap",
        nodes=two_cpu_nodes,
        profile_list=[
            cpu_profile("small", 1, default=True),
            cpu_profile("medium", 2),
            cpu_profile("large", 3),
        ],
        preconditions=[("", "large")],
        request=("big-app", "medium"),
        phrases=[
            "Your server 'big-app' cannot start",
            "Your default server uses your home folder on a machine without enough free CPU",
        ],
        details=["where your volume is attached, has only"],
        holders=["your default server"],
    ),
    Scenario(
        name="premium-node-refused",
        nodes=cpu_and_untainted_gpu_nodes,
        profile_list=[
            {"display_name": "Standard", "slug": "standard", "default": True},
            GPU_PROFILE,
        ],
        preconditions=[("", "gpu")],
        request=("dashboard", "standard"),
        phrases=[
            "Your server 'dashboard' cannot start",
            "It needs no GPU, but your default server uses your home folder on a GPU machine",
            "choose a GPU profile",
        ],
        details=["Node gpu-1, where your volume is attached, is a GPU node"],
        holders=["your default server"],
        spawner={"premium_node_policy": "refuse"},
    ),
]

PAGES = {"spawn-pending": 1.5, "spawn-form": 0}


@pytest.mark.parametrize("path", list(PAGES))
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
async def test_refusal_is_shown_on_the_spawn_page(
    scenario, path, kube, start_hub, browser_page, artifacts
):
    page = browser_page
    await scenario.nodes(kube)
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(
        profile_list=scenario.profile_list,
        spawner=scenario.spawner,
        pre_spawn_delay=PAGES[path],
    )
    await hub.create_user("alice")
    for server, profile in scenario.preconditions:
        await hub.start_server("alice", server, {"profile": profile})
    before = set(await user_pods(kube, "alice"))
    assert before == {server for server, _ in scenario.preconditions}

    await log_in(page, hub, "alice")
    server, profile = scenario.request
    await request_from_spawn_page(page, hub, "alice", server, profile)
    verdict = await wait_for_verdict(page)
    shot = await screenshot(page, artifacts / f"{scenario.name}-{verdict.page}.png")
    print(f"{scenario.name}: verdict on {verdict.page} after {verdict.seconds:.2f}s -> {shot}")

    assert verdict.page == path, f"expected the verdict on {path}, got it on {verdict.page}"
    for phrase in scenario.phrases:
        assert phrase in verdict.text, f"{phrase!r} not in the message: {verdict.text!r}"
    if path == "spawn-pending":
        # The HTML message: the plain headline, the technical facts under a closed Details.
        for holder in scenario.holders:
            assert holder in verdict.headline.lower(), verdict.headline
        for line in scenario.details:
            assert any(line in shown for shown in verdict.details), verdict.details
        assert not verdict.details_open
        assert "node" not in verdict.text.lower().replace("nodes", ""), verdict.text
        await expect(page.locator("#progress-message details.colocate-details")).to_be_visible()
        await expect(page.locator("#progress-bar")).to_have_class(re.compile("bg-danger"))

        # Coming back to the page later: JupyterHub's "Spawn failed" page, with the same HTML.
        await page.reload()
        failed = await wait_for_verdict(page)
        await screenshot(page, artifacts / f"{scenario.name}-{failed.page}.png")
        assert failed.page == "spawn-failed"
        assert failed.headline == verdict.headline
        assert failed.details == verdict.details and not failed.details_open
    else:
        # JupyterHub's spawn.html prefers the text message ("Error: ...") over the HTML one:
        # the user's servers are named in the sentence, and no HTML list is rendered.
        assert verdict.text.startswith("Error: ")
        for holder in scenario.holders:
            assert f"in use by {holder}" in verdict.text
        assert verdict.headline == ""
        # The form is there to choose another profile.
        await expect(page.locator("#spawn_form button[type=submit]")).to_be_visible()

    # Refused before any pod or claim was created; nothing ran in the page.
    assert set(await user_pods(kube, "alice")) == before
    assert page.dialogs == []
    assert page.blocked == []
