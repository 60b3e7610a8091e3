"""Event-driven fail fast: start() ends hopeless spawns from real pod events.

The scheduler's FailedScheduling comes from the real kube-scheduler, the attach/detach
controller's FailedAttachVolume from the real kube-controller-manager (test_real_attach.py). The
events of a kubelet that cannot parse an image name come from kwok, which plays the kubelets
(tests/kube/kwok-stages.yaml, stage pod-image-invalid), through its event recorder. Autoscaler
verdicts are tested on the real Karpenter (test_karpenter.py); the cluster-autoscaler's texts
only in the classifier's unit tables (tests/unit/test_events.py).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from nebari_colocate.spawner import ColocationRefused
from tests.support.waiting import wait_until

#: kwok gives a bound pod with it a kubelet's events for an image name it cannot parse
IMAGE_INVALID = {"kubelet-stub.nebari.dev/image-invalid": "true"}


async def wait_for_pod(kube, name: str, timeout: float = 20) -> None:
    await wait_until(
        lambda: kube.core.list_namespaced_pod(kube.namespace),
        until=lambda pods: any(p.metadata.name == name for p in pods.items),
        timeout=timeout,
        what=f"pod {name} created",
        seen=lambda pods: sorted(p.metadata.name for p in pods.items),
        interval=0.1,
    )


async def assert_pod_gone(kube, name: str) -> None:
    pods = await kube.core.list_namespaced_pod(kube.namespace)
    assert name not in {p.metadata.name for p in pods.items}


async def test_pinned_pod_made_unschedulable_after_the_decision_fails_on_the_scheduler_event(
    kube, spawners
):
    await kube.create_node("cpu-1", cpu="4")
    await kube.create_node("cpu-2", cpu="4")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice")
    await spawners.start(lab)
    pinned = (await kube.core.read_namespaced_pod(lab.pod_name, kube.namespace)).spec.node_name

    async def cordon_after_the_decision(spawner, pod):
        # Runs after get_pod_manifest (the decision said: fits on the pinned node) and before the
        # pod is created: the node is cordoned in between, as an operator draining it would.
        await kube.cordon_seen_by_scheduler(pinned)
        return pod

    app = spawners.make("alice", "app", modify_pod_hook=cordon_after_the_decision)
    started = time.perf_counter()
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(app)
    elapsed = time.perf_counter() - started
    verdict = refused.value.event_verdict
    assert verdict.reason == "unschedulable-pinned"
    assert verdict.raw.startswith("0/2 nodes are available")
    assert pinned in refused.value.jupyterhub_message
    assert refused.value.status_code < 500
    await assert_pod_gone(kube, app.pod_name)
    print(f"pinned+cordoned: verdict {elapsed:.2f}s after the spawn request")


async def test_an_unschedulable_pod_with_no_autoscaler_fails_after_the_grace_period(kube, spawners):
    await kube.create_node("cpu-1", labels={"node-type": "cpu"})
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", node_selector={"node-type": "gpu"}, unschedulable_grace_seconds=2)
    started = time.perf_counter()
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(lab)
    elapsed = time.perf_counter() - started
    assert refused.value.event_verdict.reason == "unschedulable"
    assert 2 <= elapsed < 15
    print(f"unschedulable, 2 s grace: verdict {elapsed:.2f}s after the spawn request")
    await assert_pod_gone(kube, lab.pod_name)


async def test_an_invalid_image_name_ends_the_spawn_at_once(kube, spawners):
    """kwok plays the kubelet (stage pod-image-invalid): InspectFailed, then Failed."""
    await kube.create_node("node-a")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", image="Quay.io/Bad:Name", extra_annotations=IMAGE_INVALID)
    started = time.perf_counter()
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(lab)
    print(f"invalid image: verdict {time.perf_counter() - started:.2f}s after the spawn request")
    assert refused.value.event_verdict.reason == "image-invalid"
    await assert_pod_gone(kube, lab.pod_name)
    events = await kube.core.list_namespaced_event(kube.namespace)
    sent = {
        (e.reason, e.source.component)
        for e in events.items
        if e.involved_object.name == lab.pod_name
    }
    assert ("InspectFailed", "kwok_controller") in sent, sent


async def test_fail_fast_can_be_turned_off(kube, spawners):
    await kube.create_node("cpu-1", labels={"node-type": "cpu"})
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make(
        "alice",
        node_selector={"node-type": "gpu"},
        unschedulable_grace_seconds=1,
        fail_fast_on_events=False,
        start_timeout=4,
    )
    with pytest.raises(asyncio.TimeoutError):
        await spawners.start(lab)
