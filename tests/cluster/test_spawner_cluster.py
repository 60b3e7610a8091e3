"""ColocatingKubeSpawner.start() against the real kube-apiserver and kube-scheduler.

Every test ends with the invariant (checked by the ``kube`` fixture's teardown): no two pods that
mount the same exclusive claim are bound to different nodes.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from kubespawner import KubeSpawner

from nebari_colocate.spawner import ColocationRefused

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
GPU_PROFILE = {
    "node_selector": {"node-type": "gpu"},
    "tolerations": [GPU_TOLERATION],
    "extra_resource_limits": {"nvidia.com/gpu": "1"},
}


async def cpu_and_gpu_nodes(kube, cpu="4"):
    await kube.create_node("cpu-1", labels={"node-type": "cpu"}, cpu=cpu)
    await kube.create_node(
        "gpu-1",
        labels={"node-type": "gpu"},
        taints=[GPU_TAINT],
        cpu="8",
        extra={"nvidia.com/gpu": "1"},
    )


def metric(name: str, **labels) -> float:
    """A sample of JupyterHub's registry (prometheus_client's default), 0 when absent."""
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


async def pod_of(kube, spawner) -> dict:
    pod = await kube.core.read_namespaced_pod(spawner.pod_name, kube.namespace)
    return kube.api_client.sanitize_for_serialization(pod)


async def pod_names(kube) -> set[str]:
    pods = await kube.core.list_namespaced_pod(kube.namespace)
    return {p.metadata.name for p in pods.items}


async def claim_names(kube) -> set[str]:
    pvcs = await kube.core.list_namespaced_persistent_volume_claim(kube.namespace)
    return {p.metadata.name for p in pvcs.items}


async def test_stock_kubespawner_can_bind_one_users_rwo_servers_to_two_nodes(kube, spawners):
    """The precondition the library exists to prevent: stock KubeSpawner splits an RWO claim."""
    kube.check_split_claims = False
    await kube.create_node("node-a")
    await kube.create_node("node-b")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make(
        "alice", cls=KubeSpawner, node_selector={"kubernetes.io/hostname": "node-a"}
    )
    app = spawners.make(
        "alice",
        "app",
        cls=KubeSpawner,
        node_selector={"kubernetes.io/hostname": "node-b"},
        start_timeout=5,
    )
    await spawners.start(lab)
    # Bound to node-b, it never runs: the attach/detach controller keeps the volume on node-a
    # (test_real_attach.py shows its event); stock KubeSpawner waits out start_timeout.
    with pytest.raises(asyncio.TimeoutError):  # not builtin TimeoutError on Python 3.10
        await spawners.start(app)
    assert (await pod_of(kube, lab))["spec"]["nodeName"] == "node-a"
    assert (await pod_of(kube, app))["spec"]["nodeName"] == "node-b"
    with pytest.raises(AssertionError, match="claim-alice"):
        await kube.assert_no_split_claims()


async def test_twenty_servers_of_one_user_started_at_once_share_one_node(kube, spawners):
    for name in ("node-a", "node-b", "node-c"):
        await kube.create_node(name, cpu="16")
    await kube.create_bound_claim("claim-alice")
    servers = [spawners.make("alice", f"app-{i}") for i in range(20)]
    started = time.perf_counter()
    await asyncio.gather(*(spawners.start(s) for s in servers))
    elapsed = time.perf_counter() - started
    nodes = {(await pod_of(kube, s))["spec"]["nodeName"] for s in servers}
    assert len(nodes) == 1, nodes
    print(f"20 concurrent servers on {nodes} in {elapsed:.1f}s")


async def test_gpu_lab_is_refused_at_once_when_an_app_pins_the_cpu_node(kube, spawners):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    app = spawners.make("alice", "pandas-app", node_selector={"node-type": "cpu"})
    await spawners.start(app)
    assert (await pod_of(kube, app))["spec"]["nodeName"] == "cpu-1"
    before_pods, before_claims = await pod_names(kube), await claim_names(kube)

    lab = spawners.make("alice", **GPU_PROFILE)
    refusals_before = metric("nebari_colocate_decisions_total", verdict="refuse", mode="enforce")
    gpu_before = metric(
        "nebari_colocate_decision_reasons_total",
        verdict="refuse",
        kind="reason",
        reason="insufficient:nvidia.com/gpu",
        mode="enforce",
    )
    started = time.perf_counter()
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(lab)
    elapsed = time.perf_counter() - started
    assert (
        metric("nebari_colocate_decisions_total", verdict="refuse", mode="enforce")
        == refusals_before + 1
    )
    assert (
        metric(
            "nebari_colocate_decision_reasons_total",
            verdict="refuse",
            kind="reason",
            reason="insufficient:nvidia.com/gpu",
            mode="enforce",
        )
        == gpu_before + 1
    )
    assert metric("nebari_colocate_check_duration_seconds_count") >= 2

    decision = refused.value.decision
    assert decision.verdict == "refuse"
    assert decision.node == "cpu-1"
    assert set(decision.reasons) == {"node-selector", "insufficient:nvidia.com/gpu"}
    message = refused.value.jupyterhub_message
    assert "needs a GPU node (nvidia.com/gpu)" in message
    assert "'pandas-app'" in message
    assert "pandas-app" in refused.value.jupyterhub_html_message
    assert refused.value.status_code < 500
    assert await pod_names(kube) == before_pods  # no pod was created for the lab
    assert await claim_names(kube) == before_claims
    print(f"gpu lab refused in {elapsed:.3f}s (stock: start_timeout, 300 s in z2jh)")


async def test_capacity_cap_is_refused_and_the_app_starts_once_the_lab_stops(kube, spawners):
    await kube.create_node("cpu-1", cpu="4")
    await kube.create_node("cpu-2", cpu="4")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", cpu_guarantee=3)
    await spawners.start(lab)
    pinned = (await pod_of(kube, lab))["spec"]["nodeName"]

    app = spawners.make("alice", "big-app", cpu_guarantee=2)
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(app)
    assert refused.value.decision.reasons == ["insufficient:cpu"]
    assert refused.value.decision.node == pinned
    assert "your default server" in refused.value.jupyterhub_message

    await lab.stop(now=True)
    app = spawners.make("alice", "big-app", cpu_guarantee=2)
    await spawners.start(app)
    assert (await pod_of(kube, app))["status"]["phase"] == "Running"


async def test_rwx_home_needs_no_affinity_and_the_gpu_lab_goes_to_the_gpu_node(kube, spawners):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice", access_modes=("ReadWriteMany",))
    rwx = {"storage_access_mode": "ReadWriteMany", "storage_class": "nfs"}
    app = spawners.make("alice", "pandas-app", node_selector={"node-type": "cpu"}, **rwx)
    assert app.get_pvc_manifest().spec.access_modes == ["ReadWriteMany"]
    await spawners.start(app)
    lab = spawners.make("alice", **GPU_PROFILE, **rwx)
    await spawners.start(lab)
    lab_pod = await pod_of(kube, lab)
    assert lab_pod["spec"]["nodeName"] == "gpu-1"
    assert "podAffinity" not in (lab_pod["spec"].get("affinity") or {})
    assert (await pod_of(kube, app))["status"]["phase"] == "Running"


@pytest.mark.parametrize("policy", ["warn", "refuse"])
async def test_premium_guard_on_a_cpu_app_following_a_gpu_lab(kube, spawners, policy, caplog):
    await kube.create_node("cpu-1", labels={"node-type": "cpu"})
    await kube.create_node("gpu-1", labels={"node-type": "gpu"}, extra={"nvidia.com/gpu": "1"})
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make(
        "alice", node_selector={"node-type": "gpu"}, extra_resource_limits={"nvidia.com/gpu": "1"}
    )
    await spawners.start(lab)
    app = spawners.make("alice", "dashboard", premium_node_policy=policy)
    if policy == "refuse":
        with pytest.raises(ColocationRefused) as refused:
            await spawners.start(app)
        assert refused.value.decision.reasons == ["premium-node"]
        assert "GPU node" in refused.value.jupyterhub_message
    else:
        with caplog.at_level(logging.WARNING):
            await spawners.start(app)
        assert (await pod_of(kube, app))["spec"]["nodeName"] == "gpu-1"
        assert any("warnings=premium-node" in r.getMessage() for r in caplog.records)


async def test_a_volume_attachment_without_holders_pins_the_next_pod_to_its_node(kube, spawners):
    await kube.create_node("node-a", cpu="16")
    await kube.create_node("node-b", cpu="1")  # the scheduler alone would prefer node-a
    _, pv = await kube.create_bound_claim("claim-alice")
    await kube.create_volume_attachment(pv["metadata"]["name"], "node-b", attached=True)
    lab = spawners.make("alice")
    await spawners.start(lab)
    pod = await pod_of(kube, lab)
    assert pod["spec"]["nodeName"] == "node-b"
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}
    ]


Z2JH_HUB_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
        "verbs": ["get", "watch", "list", "create", "delete"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
]


async def grant_z2jh_hub_role(kube, username: str) -> None:
    ns = kube.namespace
    await kube.rbac.create_namespaced_role(
        ns, {"metadata": {"name": "hub"}, "rules": Z2JH_HUB_RULES}
    )
    await kube.rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "hub"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hub"},
            "subjects": [
                {"kind": "User", "name": username, "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    )


async def test_with_only_the_z2jh_hub_role_it_colocates_and_refuses_what_it_can_infer(
    kube, spawners
):
    await kube.create_node("cpu-1", labels={"node-type": "cpu"}, cpu="8")
    await kube.create_node("cpu-2", labels={"node-type": "cpu"}, cpu="8")
    await kube.create_node(
        "gpu-1", labels={"node-type": "gpu"}, taints=[GPU_TAINT], extra={"nvidia.com/gpu": "1"}
    )
    await kube.create_bound_claim("claim-alice")
    await grant_z2jh_hub_role(kube, "hub")
    # From here on the spawners talk to the API as "hub", with the namespaced Role only.
    await spawners.use_credentials(kube.user_kubeconfig("hub"))

    lab = spawners.make("alice", node_selector={"node-type": "cpu"})
    await spawners.start(lab)
    node = (await pod_of(kube, lab))["spec"]["nodeName"]

    app = spawners.make("alice", "app")
    await spawners.start(app)
    assert (await pod_of(kube, app))["spec"]["nodeName"] == node

    gpu_lab = spawners.make("alice", "gpu", **GPU_PROFILE)
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(gpu_lab)
    assert refused.value.decision.reasons == ["node-selector"]
    assert refused.value.decision.verified is False
