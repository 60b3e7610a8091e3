"""GPU node kept alive, with Karpenter's real consolidation: stock KubeSpawner against ours.

The deployment lets CPU servers follow a GPU lab onto its node (every user pod tolerates the
GPU pool's taint, as zero-to-jupyterhub's ``singleuser.extraTolerations`` does) and protects
running servers from consolidation with ``karpenter.sh/do-not-disrupt`` (KubeSpawner pods have
no controller: a server Karpenter evicts is simply gone, as the last test shows). Consolidation
runs after 0 s (Karpenter polls every 10 s and re-checks a decision 15 s later), so each test
waits up to two minutes for it.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from kubespawner import KubeSpawner

from nebari_colocate.spawner import ColocationRefused
from tests.support.autoscaler import DO_NOT_DISRUPT, karpenter_nodes, metric, nodeclaims, wait_for
from tests.support.spawning import legacy_affinity

from .test_karpenter import GPU_PROFILE, GPU_TOLERATION, START_TIMEOUT, node_of, start_running

PROTECTED = {"extra_annotations": {DO_NOT_DISRUPT: "true"}}
EVERYWHERE = {"tolerations": [GPU_TOLERATION]}  # singleuser.extraTolerations
APP = {"cpu_guarantee": 0.5}
CONSOLIDATION_TIMEOUT = 120
EVALUATIONS = "karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count"
ELIGIBLE = "karpenter_voluntary_disruption_eligible_nodes"
DISRUPTED_TAINT = "karpenter.sh/disrupted"


@pytest.fixture
def kube(karpenter_kube):
    return karpenter_kube


async def node_events(kube, node_name: str) -> list[dict]:
    events = await kube.core.list_event_for_all_namespaces(
        field_selector=f"involvedObject.name={node_name}"
    )
    return [kube.api_client.sanitize_for_serialization(e) for e in events.items]


async def pod_events(kube, pod_name: str) -> list[dict]:
    events = await kube.core.list_namespaced_event(
        kube.namespace, field_selector=f"involvedObject.name={pod_name}"
    )
    return [kube.api_client.sanitize_for_serialization(e) for e in events.items]


async def gpu_node_names(kube) -> set[str]:
    return {n["metadata"]["name"] for n in await karpenter_nodes(kube.api_client, "gpu")}


async def nodeclaim_of(kube, node_name: str) -> dict | None:
    for claim in await nodeclaims(kube.api_client):
        if (claim.get("status") or {}).get("nodeName") == node_name:
            return claim
    return None


def is_consolidatable(claim: dict | None) -> bool:
    conditions = (claim or {}).get("status", {}).get("conditions") or []
    return any(c.get("type") == "Consolidatable" and c.get("status") == "True" for c in conditions)


async def karpenter_metrics(autoscaler) -> dict:
    return await asyncio.to_thread(autoscaler.metrics)


def consolidation_passes(metrics: dict) -> float:
    """How many times Karpenter has looked for underutilized nodes to consolidate (each pass of
    its disruption loop, every 10 s, runs its multi- and single-node consolidation)."""
    return metric(metrics, EVALUATIONS, reason="underutilized")


async def test_stock_app_forced_onto_the_gpu_node_keeps_it_alive_after_the_lab_stops(
    kube, spawners, autoscaler
):
    """Karpenter's word for this is not an event: it publishes DisruptionBlocked at most once
    per node in two minutes, whatever the message (its recorder dedupes on reason and node
    uid), and the first one is often said while the lab was starting ("Node is nominated for a
    pending pod", "Node isn't initialized"), so the app's "do-not-disrupt" one may come only
    two minutes later. Its consolidation passes are counted, not deduped: after the lab stops
    and the node is consolidatable, Karpenter's passes find no node to consolidate, and the GPU
    node stays, with the app on it."""
    await kube.create_bound_claim("claim-alice")
    stock = {"cls": KubeSpawner, **legacy_affinity("alice"), **PROTECTED}
    lab = spawners.make("alice", start_timeout=START_TIMEOUT, **stock, **GPU_PROFILE)
    gpu = await start_running(spawners, lab, "gpu")
    app = spawners.make("alice", "app", start_timeout=START_TIMEOUT, **stock, **EVERYWHERE, **APP)
    await spawners.start(app)
    name = gpu["metadata"]["name"]
    assert (await node_of(kube, app.pod_name))["metadata"]["name"] == name

    await lab.stop(now=True)

    async def consolidatable():
        return is_consolidatable(await nodeclaim_of(kube, name))

    await wait_for(consolidatable, CONSOLIDATION_TIMEOUT, f"the NodeClaim of {name} Consolidatable")
    before = consolidation_passes(await karpenter_metrics(autoscaler))

    async def two_passes():
        metrics = await karpenter_metrics(autoscaler)
        return metrics if consolidation_passes(metrics) >= before + 2 else None

    metrics = await wait_for(
        two_passes, CONSOLIDATION_TIMEOUT, "two consolidation passes of Karpenter", 0.5
    )
    said = [
        (ev.get("firstTimestamp"), ev.get("reason"), ev.get("message"))
        for ev in await node_events(kube, name)
    ]
    print(f"karpenter, gpu node kept alive; it said about {name}: {said}")
    # Karpenter found no candidate: the node is blocked (the app's do-not-disrupt; without it,
    # the last test of this file shows the app evicted), not merely waiting its turn.
    assert metric(metrics, ELIGIBLE, reason="underutilized") == 0, said
    assert name in await gpu_node_names(kube)
    node = await kube.core.read_node(name)
    assert DISRUPTED_TAINT not in {t.key for t in node.spec.taints or []}
    assert (await node_of(kube, app.pod_name))["metadata"]["name"] == name
    assert is_consolidatable(await nodeclaim_of(kube, name))


async def test_ours_refuses_the_app_on_the_gpu_node_and_karpenter_consolidates_it(kube, spawners):
    await kube.create_bound_claim("claim-alice")
    ours = {"premium_node_policy": "refuse", **PROTECTED}
    lab = spawners.make("alice", start_timeout=START_TIMEOUT, **ours, **GPU_PROFILE)
    gpu = await start_running(spawners, lab, "gpu")
    app = spawners.make("alice", "app", start_timeout=START_TIMEOUT, **ours, **EVERYWHERE, **APP)
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(app)
    assert refused.value.decision.reasons == ["premium-node"]

    await lab.stop(now=True)
    stopped = time.perf_counter()
    name = gpu["metadata"]["name"]

    async def consolidated():
        return name not in await gpu_node_names(kube)

    await wait_for(consolidated, CONSOLIDATION_TIMEOUT, f"{name} to be consolidated", 0.5)
    print(f"gpu node consolidated {time.perf_counter() - stopped:.1f}s after the lab stopped")
    reasons = {ev.get("message") for ev in await node_events(kube, name)}
    assert any(r and r.startswith("Disrupting Node: Empty") for r in reasons), reasons


async def test_with_rwx_storage_the_app_runs_on_a_cpu_node_and_the_gpu_node_goes(kube, spawners):
    # ReadWriteMany: no co-location, so the app needs no blanket GPU toleration to start.
    await kube.create_bound_claim("claim-alice", access_modes=("ReadWriteMany",))
    ours = {"storage_access_mode": "ReadWriteMany", "storage_class": "standard", **PROTECTED}
    lab = spawners.make("alice", start_timeout=START_TIMEOUT, **ours, **GPU_PROFILE)
    gpu = await start_running(spawners, lab, "gpu")
    app = spawners.make("alice", "app", start_timeout=START_TIMEOUT, **ours, **APP)
    await start_running(spawners, app, "cpu")

    await lab.stop(now=True)
    stopped = time.perf_counter()
    name = gpu["metadata"]["name"]

    async def consolidated():
        return name not in await gpu_node_names(kube)

    await wait_for(consolidated, CONSOLIDATION_TIMEOUT, f"{name} to be consolidated", 0.5)
    print(f"rwx: gpu node consolidated {time.perf_counter() - stopped:.1f}s after the lab stopped")


async def test_consolidation_evicts_a_server_without_do_not_disrupt_and_it_is_gone(kube, spawners):
    await kube.create_bound_claim("claim-alice")
    stock = {"cls": KubeSpawner, **legacy_affinity("alice")}
    lab = spawners.make("alice", start_timeout=START_TIMEOUT, **stock, **GPU_PROFILE)
    await start_running(spawners, lab, "gpu")
    app = spawners.make("alice", "app", start_timeout=START_TIMEOUT, **stock, **EVERYWHERE, **APP)
    await spawners.start(app)
    gpu_name = (await node_of(kube, app.pod_name))["metadata"]["name"]

    await lab.stop(now=True)

    async def evicted():
        pods = await kube.core.list_namespaced_pod(kube.namespace)
        if app.pod_name in {p.metadata.name for p in pods.items}:
            return None
        return [ev for ev in await pod_events(kube, app.pod_name) if ev.get("reason") == "Evicted"]

    try:
        events = await wait_for(
            evicted, CONSOLIDATION_TIMEOUT, f"{app.pod_name} to be evicted", 0.5
        )
    except AssertionError as e:
        said = [(ev.get("reason"), ev.get("message")) for ev in await node_events(kube, gpu_name)]
        raise AssertionError(f"{e}; Karpenter said about {gpu_name}: {said}") from None
    print(f"karpenter evicted the app: {events[-1].get('message')}")
    # Nothing recreates it: KubeSpawner's pods have no controller. The hub still thinks it runs
    # until its next poll, which then finds the server gone.
    assert await app.poll() is not None
