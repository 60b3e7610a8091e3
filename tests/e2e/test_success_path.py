"""A user's lab and an app start through the hub's REST API and share one node."""

from __future__ import annotations

import ipaddress
from urllib.parse import quote

from tests.support import helpers


async def user_pods(kube, username: str) -> dict[str, dict]:
    """Server name -> pod, for the user's pods (by KubeSpawner's raw-name annotations)."""
    pods = helpers.to_dict(kube.api_client, await kube.core.list_namespaced_pod(kube.namespace))
    own = {}
    for pod in pods["items"]:
        annotations = pod["metadata"].get("annotations") or {}
        if annotations.get("hub.jupyter.org/username") == username:
            own[annotations.get("hub.jupyter.org/servername", "")] = pod
    return own


async def test_lab_and_app_start_through_the_hub_and_share_one_node(kube, start_hub):
    # Two equal nodes: without the co-location affinity the scheduler spreads the second pod.
    await kube.create_node("node-a", cpu="8")
    await kube.create_node("node-b", cpu="8")
    await kube.create_bound_claim("claim-alice")
    hub = await start_hub()
    await hub.create_user("alice")

    lab = await hub.start_server("alice")
    app = await hub.start_server("alice", "pandas-app")
    assert lab["ready"] and app["ready"]

    pods = await user_pods(kube, "alice")
    assert set(pods) == {"", "pandas-app"}
    nodes = {pod["spec"]["nodeName"] for pod in pods.values()}
    assert len(nodes) == 1, nodes
    affinity = pods["pandas-app"]["spec"]["affinity"]
    assert affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]

    # The hub routed each server to its pod's IP: the proxy reaches the stub serving that pod.
    for server, pod in pods.items():
        prefix = f"/user/alice/{quote(server, safe='')}/" if server else "/user/alice/"
        status, body = await hub.proxied(prefix + "api")
        assert status == 200, body
        assert body["pod"] == pod["metadata"]["name"]
        assert body["podIP"] == pod["status"]["podIP"]
        assert ipaddress.ip_address(body["podIP"]) in ipaddress.ip_network("127.0.0.0/8")

    await hub.stop_server("alice", "pandas-app")
    assert set(await user_pods(kube, "alice")) == {""}
