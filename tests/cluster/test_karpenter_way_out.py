"""The way out and the move off a premium node, on Karpenter (docs/decisions.md).

The real control plane (kube-controller-manager's attach/detach controller, kwok) with Karpenter:
the steps the hub's handlers run (:func:`nebari_colocate.handlers.take_way_out` and
:func:`~nebari_colocate.handlers.move_off_premium`, the coroutines ``POST /hub/colocate/...``
calls after its scope checks) run here with real spawners: the stop is the spawner's stop, the
start its start, as JupyterHub's ``stop_single_user`` and ``spawn_single_user`` call them.
Nothing of Kubernetes is mocked: every node comes from Karpenter, every attachment from the
attach/detach controller, and the GPU node's end from Karpenter's consolidation.
"""

from __future__ import annotations

import time

import pytest

from nebari_colocate.handlers import move_off_premium, take_way_out
from nebari_colocate.objects import HOSTNAME
from nebari_colocate.spawner import ColocationRefused
from tests.support.autoscaler import NODEPOOL_LABEL, karpenter_nodes, wait_for
from tests.support.helpers import assert_no_split_claims, list_volume_attachments

from .test_karpenter import GPU_PROFILE, GPU_TOLERATION, START_TIMEOUT, node_of, start_running
from .test_karpenter_consolidation import CONSOLIDATION_TIMEOUT, PROTECTED, gpu_node_names

EVERYWHERE = {"tolerations": [GPU_TOLERATION]}  # singleuser.extraTolerations: apps may ride
APP = {"cpu_guarantee": 0.5}
RELEASE = {"way_out_release_timeout": 90}


@pytest.fixture
def kube(karpenter_kube):
    return karpenter_kube


async def attached_nodes(kube, claim: str) -> set[str]:
    pvc = await kube.core.read_namespaced_persistent_volume_claim(claim, kube.namespace)
    return {
        a["spec"]["nodeName"]
        for a in await list_volume_attachments(kube.api_client, pvc.spec.volume_name)
        if (a.get("status") or {}).get("attached")
    }


def stopper(*spawners):
    by_name = {s.name: s for s in spawners}
    stopped: list[str] = []

    async def stop_server(name: str) -> None:
        stopped.append(name)
        await by_name[name].stop(now=True)

    return stop_server, stopped


async def test_the_way_out_stops_the_app_the_volume_detaches_and_the_lab_runs_on_a_new_gpu_node(
    kube, spawners
):
    await kube.create_bound_claim("claim-alice")
    app = spawners.make("alice", "app", start_timeout=START_TIMEOUT, **RELEASE, **APP)
    cpu = (await start_running(spawners, app, "cpu"))["metadata"]["name"]
    assert await attached_nodes(kube, "claim-alice") == {cpu}

    lab = spawners.make("alice", start_timeout=START_TIMEOUT, **RELEASE, **GPU_PROFILE)
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(lab)
    assert refused.value.decision.reasons == ["insufficient:nvidia.com/gpu"]
    assert lab.colocation_failure.way_out_json() == {"stop": ["app"], "start": ""}

    stop_server, stopped = stopper(app)
    clicked = time.perf_counter()
    await take_way_out(
        lab,
        ["app"],
        is_running=lambda name: name == "app" and name not in stopped,
        stop_server=stop_server,
        start_server=lambda options: spawners.start(lab),
        words={"start": "", "stop": ("app",)},
    )
    running = time.perf_counter() - clicked
    assert stopped == ["app"]
    node = await node_of(kube, lab.pod_name)
    assert node["metadata"]["labels"][NODEPOOL_LABEL] == "gpu"
    assert node["metadata"]["name"] != cpu
    # the real attach/detach controller moved the volume: detached from the CPU node first
    attached = await attached_nodes(kube, "claim-alice")
    assert cpu not in attached, attached
    await assert_no_split_claims(kube.api_client, kube.namespace)
    print(f"way out on karpenter: click to the lab running on a new GPU node {running:.1f}s")


async def start_riding_app(kube, spawners, **ours):
    """alice's GPU lab (Karpenter adds a GPU node), then an app that follows it there
    (``premium_node_policy`` warn, the default), then the lab stops: the app keeps the node."""
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", start_timeout=START_TIMEOUT, **PROTECTED, **GPU_PROFILE, **ours)
    gpu = (await start_running(spawners, lab, "gpu"))["metadata"]["name"]
    app = spawners.make(
        "alice", "app", start_timeout=START_TIMEOUT, **PROTECTED, **EVERYWHERE, **APP, **ours
    )
    await spawners.start(app)
    assert (await node_of(kube, app.pod_name))["metadata"]["name"] == gpu
    assert app._colocation_decision.warnings == ["premium-node"]
    await lab.stop(now=True)
    return lab, app, gpu


async def test_the_move_puts_the_app_on_a_cpu_node_and_karpenter_consolidates_the_gpu_node(
    kube, spawners
):
    _lab, app, gpu = await start_riding_app(kube, spawners, **RELEASE)

    async def ride():
        return app.premium_rides()

    rides = await wait_for(ride, 10, "the app's ride on the GPU node in the live view")
    assert [(r.node, r.servers) for r in rides] == [(gpu, ("app",))]
    hostname = (await node_of(kube, app.pod_name))["metadata"]["labels"][HOSTNAME]
    assert rides[0].hostname == hostname != gpu  # Karpenter's kwok nodes

    stop_server, stopped = stopper(app)
    clicked = time.perf_counter()
    await move_off_premium(
        app,
        gpu,
        ["app"],
        spawner_of={"app": app}.__getitem__,
        stop_server=stop_server,
        start_server=lambda name, options: spawners.start(app),
        words={"servers": ("app",)},
    )
    moved = time.perf_counter() - clicked
    assert stopped == ["app"]
    node = await node_of(kube, app.pod_name)
    assert node["metadata"]["labels"][NODEPOOL_LABEL] == "cpu", node["metadata"]
    pod = await kube.core.read_namespaced_pod(app.pod_name, kube.namespace)
    terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    away = [e for t in terms.node_selector_terms for e in t.match_expressions or []]
    # by its NodePool: Karpenter ignores a pod that selects on kubernetes.io/hostname
    assert [(e.key, e.operator, e.values) for e in away] == [(NODEPOOL_LABEL, "NotIn", ["gpu"])]
    assert app.colocation_move_off == ()  # for that start only
    assert not app.premium_rides()
    assert gpu not in await attached_nodes(kube, "claim-alice")
    await assert_no_split_claims(kube.api_client, kube.namespace)

    async def consolidated():
        return gpu not in await gpu_node_names(kube)

    await wait_for(consolidated, CONSOLIDATION_TIMEOUT, f"{gpu} to be consolidated", 0.5)
    gone = time.perf_counter() - clicked
    print(f"move on karpenter: app running on a CPU node {moved:.1f}s after the click, GPU node")
    print(f"  consolidated {gone:.1f}s after the click")
    assert [n["metadata"]["name"] for n in await karpenter_nodes(kube.api_client, "gpu")] == []


async def test_a_plain_restart_puts_the_app_back_on_the_gpu_node(kube, spawners):
    """Why the move keeps the pod off the premium node: stopped and started again without it,
    the app (which tolerates the GPU taint) goes straight back to the empty GPU node, the only
    node there is, and keeps it running."""
    _lab, app, gpu = await start_riding_app(kube, spawners, **RELEASE)
    await app.stop(now=True)

    async def released():
        return gpu not in await attached_nodes(kube, "claim-alice")

    await wait_for(released, 90, "the volume to be detached from the GPU node", 0.5)
    await spawners.start(app)
    assert (await node_of(kube, app.pod_name))["metadata"]["name"] == gpu
    assert [r.node for r in app.premium_rides()] == [gpu]


async def test_a_stale_move_stops_nothing(kube, spawners):
    """The lab started again between the notice and the click: nothing rides alone on the GPU
    node any more, so the move stops nothing (409 in the handler)."""
    from nebari_colocate.handlers import MoveFailed

    lab, app, gpu = await start_riding_app(kube, spawners, **RELEASE)
    await spawners.start(lab)
    stop_server, stopped = stopper(app, lab)
    with pytest.raises(MoveFailed) as failed:
        await move_off_premium(
            app,
            gpu,
            ["app"],
            spawner_of={"app": app}.__getitem__,
            stop_server=stop_server,
            start_server=lambda name, options: spawners.start(app),
            words={"servers": ("app",)},
        )
    assert (failed.value.status_code, failed.value.outcome) == (409, "stale")
    assert stopped == []
    assert (await node_of(kube, app.pod_name))["metadata"]["name"] == gpu
