"""The failure modes with the real autoscaler: stock KubeSpawner against ours, on Karpenter.

Karpenter (its kwok cloud provider, tests/support/autoscaler.py) runs with two NodePools, ``cpu``
and ``gpu`` (tainted ``nvidia.com/gpu=true:NoSchedule``), and adds a node for every pod the
kube-scheduler cannot place, from the instance types of tests/kube/karpenter/instance-types.json.
Stock KubeSpawner carries the hard pod affinity deployments use today; ours is
ColocatingKubeSpawner with its defaults unless a test says otherwise. No event is written by a
test: every FailedScheduling, Nominated and consolidation event here comes from the real
components.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone

import pytest
from kubespawner import KubeSpawner

from nebari_colocate import messages
from nebari_colocate.events import KARPENTER_FAILED, KARPENTER_SKIPS_PINNED, classify
from nebari_colocate.spawner import ColocationRefused
from tests.support.autoscaler import (
    GPU_TAINT,
    NODEPOOL_LABEL,
    describe,
    karpenter_nodes,
    nodeclaims,
    wait_for,
)
from tests.support.spawning import legacy_affinity

from .test_spawner_cluster import metric

GPU_TOLERATION = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
GPU_PROFILE = {"tolerations": [GPU_TOLERATION], "extra_resource_limits": {"nvidia.com/gpu": "1"}}
# Karpenter must launch a node before the pod runs: more than the 30 s of the base config.
START_TIMEOUT = 90
# How long Karpenter gets to prove it adds no node for a pod (it batches pending pods for at most
# 1 s here, and logs its decision at once).
NO_NODE_WINDOW = 10


@pytest.fixture
def kube(karpenter_kube):
    """This module's cluster is the autoscaler's (the ``spawners`` fixture uses it)."""
    return karpenter_kube


def stock(username: str, **traits) -> dict:
    """Traits of a stock KubeSpawner as deployments run it today: the hard pod affinity."""
    return {"cls": KubeSpawner, **legacy_affinity(username), **traits}


async def events_of(kube, pod_name: str) -> list[dict]:
    events = await kube.core.list_namespaced_event(
        kube.namespace, field_selector=f"involvedObject.name={pod_name}"
    )
    return [kube.api_client.sanitize_for_serialization(e) for e in events.items]


async def karpenter_failure(kube, pod_name: str, timeout: float = 30) -> str:
    """The message of Karpenter's FailedScheduling event on ``pod_name`` (waits for it)."""

    async def found():
        for ev in await events_of(kube, pod_name):
            if ev.get("reason") == "FailedScheduling" and ev.get("message", "").startswith(
                KARPENTER_FAILED
            ):
                return ev["message"]
        return None

    return await wait_for(found, timeout, f"Karpenter's FailedScheduling on {pod_name}")


async def node_of(kube, pod_name: str) -> dict:
    pod = await kube.core.read_namespaced_pod(pod_name, kube.namespace)
    node = await kube.core.read_node(pod.spec.node_name)
    return kube.api_client.sanitize_for_serialization(node)


async def start_running(spawners, spawner, expect_pool: str) -> dict:
    """Start ``spawner`` (Karpenter launches its node) and return the node it runs on."""
    await spawners.start(spawner)
    node = await node_of(spawners.kube, spawner.pod_name)
    labels = node["metadata"]["labels"]
    assert labels.get(NODEPOOL_LABEL) == expect_pool, describe([node])
    # Karpenter's kwok nodes: the hostname label is the NodeClaim's name, not the Node's.
    assert labels["kubernetes.io/hostname"] != node["metadata"]["name"]
    return node


# --- GPU lab blocked --------------------------------------------------------------------------


async def test_gpu_lab_blocked_stock_waits_pending_and_karpenter_adds_no_node(kube, spawners):
    await kube.create_bound_claim("claim-alice")
    app = spawners.make("alice", "app", start_timeout=START_TIMEOUT, **stock("alice"))
    cpu_node = await start_running(spawners, app, "cpu")

    lab = spawners.make("alice", start_timeout=START_TIMEOUT, **stock("alice", **GPU_PROFILE))
    start = asyncio.ensure_future(spawners.start(lab))
    try:
        message = await karpenter_failure(kube, lab.pod_name)
        await asyncio.sleep(NO_NODE_WINDOW)
        assert not start.done(), "stock KubeSpawner should still be waiting"
        pod = await kube.core.read_namespaced_pod(lab.pod_name, kube.namespace)
        assert pod.status.phase == "Pending" and not pod.spec.node_name
        assert [n["metadata"]["name"] for n in await karpenter_nodes(kube.api_client)] == [
            cpu_node["metadata"]["name"]
        ]
        # What ours would tell the person from the same real events: the co-location.
        verdict = classify(
            await events_of(kube, lab.pod_name),
            pinned_node=None,
            now=datetime.now(timezone.utc),
        )
        print(f"karpenter, gpu lab blocked: {message}")
        assert verdict.reason == "no-scale-up", verdict
        assert "colocation" in verdict.causes
        assert "where your other servers are" in messages.event_words(verdict)
    finally:
        start.cancel()


async def test_gpu_lab_blocked_ours_refuses_before_any_pod_exists(kube, spawners):
    await kube.create_bound_claim("claim-alice")
    app = spawners.make("alice", "app", start_timeout=START_TIMEOUT)
    cpu_node = await start_running(spawners, app, "cpu")

    lab = spawners.make("alice", start_timeout=START_TIMEOUT, **GPU_PROFILE)
    started = time.perf_counter()
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(lab)
    elapsed = time.perf_counter() - started
    assert refused.value.decision.reasons == ["insufficient:nvidia.com/gpu"]
    assert cpu_node["metadata"]["name"] in refused.value.jupyterhub_message
    pods = await kube.core.list_namespaced_pod(kube.namespace)
    assert lab.pod_name not in {p.metadata.name for p in pods.items}
    print(f"gpu lab refused in {elapsed:.3f}s, no pod created")


async def test_an_unpinned_pod_no_nodepool_can_serve_ends_on_karpenters_event(kube, spawners):
    await kube.create_bound_claim("claim-alice")
    huge = {"tolerations": [GPU_TOLERATION], "extra_resource_limits": {"nvidia.com/gpu": "8"}}
    lab = spawners.make("alice", start_timeout=START_TIMEOUT, unschedulable_grace_seconds=0, **huge)
    started = time.perf_counter()
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(lab)
    elapsed = time.perf_counter() - started
    verdict = refused.value.event_verdict
    print(f"karpenter, no pool can serve: {verdict.raw}")
    assert verdict.reason == "no-scale-up"
    assert verdict.raw.startswith(KARPENTER_FAILED)
    assert verdict.causes == ("no-instance-type",)
    assert "(8 GPUs)" in refused.value.jupyterhub_message
    assert metric("nebari_colocate_event_verdicts_total", reason="no-scale-up", mode="enforce") >= 1
    assert not await nodeclaims(kube.api_client)
    print(f"no pool can serve: verdict {elapsed:.2f}s after the spawn request")


async def test_karpenters_nomination_keeps_the_spawn_waiting_until_its_node_runs_the_pod(
    kube, spawners
):
    await kube.create_bound_claim("claim-alice")
    # A grace shorter than Karpenter takes to bring a node: only the nomination keeps it waiting.
    lab = spawners.make("alice", start_timeout=START_TIMEOUT, unschedulable_grace_seconds=2)
    start = asyncio.ensure_future(spawners.start(lab))
    seen: list[str] = []
    nominated = None
    while not start.done():
        await asyncio.sleep(0.1)
        if lab._colocation_decision is None:
            continue
        verdict = lab.classify_events()
        seen.append(messages.event_text(verdict))
        if verdict.raw.startswith("Pod should schedule on: nodeclaim/"):
            nominated = verdict
    await start
    assert nominated is not None, seen
    assert nominated.action == "wait"
    assert "autoscaler is adding one" in messages.event_words(nominated)
    node = await node_of(kube, lab.pod_name)
    claim = nominated.raw.removeprefix("Pod should schedule on: nodeclaim/").split(",")[0]
    # The nomination names the NodeClaim; the pod runs on the Node Karpenter made for it, whose
    # name differs and whose hostname label is the NodeClaim's name.
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == claim
    assert node["metadata"]["name"] != claim


async def test_karpenter_skipping_a_pinned_pod_is_no_verdict_the_scheduler_decides(kube, spawners):
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", start_timeout=START_TIMEOUT)
    node = await start_running(spawners, lab, "cpu")

    made = []

    async def cordon_after_the_decision(spawner, pod):
        # After the decision (fits on the lab's node), before the pod exists: an operator
        # cordons the node. The pod is pinned there by matchFields, which Karpenter ignores.
        await kube.cordon_seen_by_scheduler(node["metadata"]["name"])
        made.append(kube.api_client.sanitize_for_serialization(pod))
        return pod

    app = spawners.make(
        "alice", "app", start_timeout=START_TIMEOUT, modify_pod_hook=cordon_after_the_decision
    )
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(app)
    verdict = refused.value.event_verdict
    assert verdict.reason == "unschedulable-pinned", verdict
    assert "node pool" not in messages.event_text(verdict)
    # What Karpenter says of that pod. The spawner deletes its pod on kube-scheduler's word, which
    # may come before Karpenter's next batch looks at pending pods (then Karpenter says nothing
    # of it): the same manifest again, left pending, is the pod Karpenter is asked about.
    again = made[-1]
    again["metadata"] = {**again["metadata"], "name": f"{app.pod_name}-again"}
    await kube.core.create_namespaced_pod(kube.namespace, again)
    skipped = await karpenter_failure(kube, again["metadata"]["name"], timeout=60)
    print(f"karpenter, pinned pod: {skipped}")
    assert skipped == f"{KARPENTER_FAILED}{KARPENTER_SKIPS_PINNED}"


# --- capacity cap -----------------------------------------------------------------------------

# The first server takes most of the smallest CPU machine (cpu-2x: 1.9 CPU allocatable).
LAB_CPU = {"cpu_guarantee": 1.5}
APP_CPU = {"cpu_guarantee": 1.0}


async def test_capacity_cap_stock_waits_and_karpenter_names_the_colocation(kube, spawners):
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", start_timeout=START_TIMEOUT, **stock("alice", **LAB_CPU))
    first = await start_running(spawners, lab, "cpu")

    app = spawners.make("alice", "app", start_timeout=START_TIMEOUT, **stock("alice", **APP_CPU))
    start = asyncio.ensure_future(spawners.start(app))
    try:
        message = await karpenter_failure(kube, app.pod_name)
        await asyncio.sleep(NO_NODE_WINDOW)
        assert not start.done(), "stock KubeSpawner should still be waiting"
        names = [n["metadata"]["name"] for n in await karpenter_nodes(kube.api_client)]
        assert names == [first["metadata"]["name"]]
        print(f"karpenter, capacity cap: {message}")
        verdict = classify(
            await events_of(kube, app.pod_name), pinned_node=None, now=datetime.now(timezone.utc)
        )
        assert verdict.reason == "no-scale-up", verdict
        assert "colocation" in verdict.causes
        # The person is told about the co-location, not about the GPU pool's taint.
        words = messages.event_words(verdict)
        assert "must run beside your other servers" in messages.event_text(verdict)
        assert "where your other servers are" in words
        assert "taint" not in words and "reserved" not in words
    finally:
        start.cancel()


async def test_capacity_cap_ours_refuses_with_insufficient_cpu_at_once(kube, spawners):
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", start_timeout=START_TIMEOUT, **LAB_CPU)
    first = await start_running(spawners, lab, "cpu")

    app = spawners.make("alice", "app", start_timeout=START_TIMEOUT, **APP_CPU)
    started = time.perf_counter()
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(app)
    elapsed = time.perf_counter() - started
    assert refused.value.decision.reasons == ["insufficient:cpu"]
    assert refused.value.decision.node == first["metadata"]["name"]
    print(f"capacity cap refused in {elapsed:.3f}s")
