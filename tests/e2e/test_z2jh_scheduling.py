"""A hub run as zero-to-jupyterhub with ``scheduling.podPriority.enabled`` and user placeholders:
the user's servers start at the chart's default priority, evicting placeholders (pause pods at
-10) from a full node, and share one node.  Every leg runs this test; the dsp leg runs all of its
hubs so (scripts/test-e2e)."""

from __future__ import annotations

from tests.support.z2jh import DEFAULT_PRIORITY, placeholder

from .test_success_path import user_pods

PLACEHOLDERS = "component=user-placeholder"


async def placeholders(kube) -> set[str]:
    pods = await kube.core.list_namespaced_pod(kube.namespace, label_selector=PLACEHOLDERS)
    return {p.metadata.name for p in pods.items if p.metadata.deletion_timestamp is None}


async def test_servers_start_on_a_node_full_of_placeholders_at_the_charts_priority(kube, start_hub):
    await kube.create_node("cpu-1", cpu="1")
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub(z2jh_scheduling=True)  # the chart's classes and 2 placeholders
    # The class prepared: placeholders hold the rest of the node (2 x 100m from the hub's
    # start, 2 x 400m here).
    for name in ("user-placeholder-big-0", "user-placeholder-big-1"):
        await kube.core.create_namespaced_pod(kube.namespace, placeholder(name, cpu="400m"))
        assert (await kube.wait_for_binding(name)) == "cpu-1"
    before = await placeholders(kube)
    assert len(before) == 4

    await hub.create_user("alice")
    lab = await hub.start_server("alice")
    app = await hub.start_server("alice", "pandas-app")
    assert lab["ready"] and app["ready"]

    pods = await user_pods(kube, "alice")
    assert {pod["spec"]["nodeName"] for pod in pods.values()} == {"cpu-1"}
    for pod in pods.values():
        assert pod["spec"]["priorityClassName"] == DEFAULT_PRIORITY
        assert pod["spec"]["priority"] == 0
    # the real kube-scheduler evicted placeholders to make room: the node could not take both
    # servers (0.1 CPU each) beside all four (1 CPU)
    assert await placeholders(kube) < before
    assert "reason=unschedulable-pinned" not in hub.log()
