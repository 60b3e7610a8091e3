"""The move of the whole set onto a node Karpenter adds (docs/decisions.md, "The move of the whole
set"), on the real control plane with Karpenter (kwok provider, tests/support/autoscaler.py).

Every node comes from Karpenter: alice's lab and app run on a small machine (cpu-2x); her 'big'
app does not fit there, and no other node exists. The refusal offers the move onto a new machine
(``node`` null). Taken, one pod that holds the room of all three (``setmove.room_holder``) makes
Karpenter add a machine that holds them, and the set starts there together.

What Karpenter does with pending pods that must share a node (the same required pod affinity,
topology ``kubernetes.io/hostname``), created together while an existing node has room for one of
them, is shown beside it: kube-scheduler binds the first where it alone fits, the others follow
it by affinity and stay Pending, and Karpenter adds no node for them (a new node can never satisfy
an affinity to a pod on another node). So the set is not created together; the room is asked for
by one pod.
"""

from __future__ import annotations

import asyncio

import pytest

from nebari_colocate.set_move_step import move_whole_set
from tests.support.autoscaler import NODEPOOL_LABEL, describe, karpenter_nodes, wait_for
from tests.support.helpers import list_volume_attachments

from .test_karpenter import START_TIMEOUT, events_of, node_of

APP = {"start_timeout": START_TIMEOUT, "way_out_release_timeout": 90}


@pytest.fixture
def kube(karpenter_kube):
    return karpenter_kube


async def test_the_whole_set_moves_onto_a_node_karpenter_adds_for_it(kube, spawners):
    await kube.create_bound_claim("claim-alice")
    servers = {
        "": spawners.make("alice", cpu_guarantee=1, **APP),
        "app": spawners.make("alice", "app", cpu_guarantee=0.5, **APP),
    }
    for server in servers.values():
        await spawners.start(server)
    small = (await node_of(kube, servers[""].pod_name))["metadata"]["name"]
    assert (await node_of(kube, servers["app"].pod_name))["metadata"]["name"] == small
    big = servers["big"] = spawners.make("alice", "big", cpu_guarantee=1.5, **APP)
    with pytest.raises(Exception) as refused:
        await spawners.start(big)
    assert refused.value.decision.reasons == ["insufficient:cpu"]
    move = big.colocation_failure.way_out_json()["move"]
    assert move == {"restart": ["", "app"], "start": "big", "node": None, "new_node": True}
    assert "on a new machine with room for all three" in refused.value.jupyterhub_message

    stopped: list[str] = []

    async def stop_server(name: str) -> None:
        stopped.append(name)
        await servers[name].stop(now=True)

    async def start_server(name: str, options: dict) -> None:
        await spawners.start(servers[name])

    await move_whole_set(
        big,
        ["", "app"],
        "",
        spawner_of=servers.__getitem__,
        is_running=lambda name: name not in stopped,
        stop_server=stop_server,
        start_server=start_server,
        words={"start": "big", "restart": ("", "app")},
    )
    nodes = {name: (await node_of(kube, s.pod_name)) for name, s in servers.items()}
    names = {name: n["metadata"]["name"] for name, n in nodes.items()}
    assert len(set(names.values())) == 1, names
    new = nodes["big"]
    print(f"the set runs together on {describe([new])}")
    assert names["big"] != small
    assert new["metadata"]["labels"][NODEPOOL_LABEL] == "cpu"
    pvc = await kube.core.read_namespaced_persistent_volume_claim("claim-alice", kube.namespace)
    attached = {
        a["spec"]["nodeName"]
        for a in await list_volume_attachments(kube.api_client, pvc.spec.volume_name)
    }
    assert attached == {names["big"]}
    pods = (await kube.core.list_namespaced_pod(kube.namespace)).items
    assert not [p.metadata.name for p in pods if p.metadata.name.startswith("room-for-")]


async def test_pending_pods_that_must_share_a_node_follow_the_first_one_bound(kube):
    """Karpenter with three pods created together, each needing the others' node (required pod
    affinity on their common label, topology hostname), while an existing node has room for one."""
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"set": "alice"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    # an existing machine from Karpenter, with 1 CPU of its 2 taken
    await kube.create_pod("first-tenant", requests={"cpu": "1"})
    tenant_node = await kube.wait_for_binding("first-tenant", timeout=START_TIMEOUT)
    await kube.wait_for_running("first-tenant", timeout=START_TIMEOUT)
    names = [f"member-{i}" for i in range(3)]
    await asyncio.gather(
        *(
            kube.create_pod(n, requests={"cpu": "0.6"}, labels={"set": "alice"}, affinity=affinity)
            for n in names
        )
    )

    async def settled():
        pods = {n: await kube.core.read_namespaced_pod(n, kube.namespace) for n in names}
        bound = {n: p.spec.node_name for n, p in pods.items() if p.spec.node_name}
        karpenter = [
            ev["message"]
            for n in names
            for ev in await events_of(kube, n)
            if ev.get("source", {}).get("component") == "karpenter"
            or ev.get("reportingComponent") == "karpenter"
        ]
        return (bound, karpenter) if bound and karpenter else None

    bound, said = await wait_for(settled, 60, "a member bound and Karpenter's word")
    await asyncio.sleep(10)  # Karpenter's batch window, and a node launch, had they come
    pods = {n: await kube.core.read_namespaced_pod(n, kube.namespace) for n in names}
    bound = {n: p.spec.node_name for n, p in pods.items()}
    nodes = await karpenter_nodes(kube.api_client)
    print(f"members bound: {bound}; tenant on {tenant_node}; Karpenter said: {sorted(set(said))}")
    print(f"nodes: {describe(nodes)}")
    assert sorted(bound.values(), key=str).count(tenant_node) == 1, bound
    assert sum(1 for v in bound.values() if v is None) == 2, bound
    assert len(nodes) == 1, describe(nodes)
