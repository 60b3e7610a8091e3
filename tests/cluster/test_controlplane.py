"""The cluster fixtures work: kube-apiserver, kube-scheduler, kube-controller-manager and kwok do
what a cluster's components do."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import time

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.support import helpers
from tests.support.controlplane import ControlPlane
from tests.support.waiting import wait_until

# zero-to-jupyterhub's hub Role (namespaced only).
Z2JH_HUB_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
        "verbs": ["get", "watch", "list", "create", "delete"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
]


async def test_kwok_keeps_nodes_ready_with_leases(kube):
    node = await kube.create_node("node-a")
    assert helpers.is_ready(node)
    assert node["metadata"]["annotations"][helpers.CONTROLLER_MANAGED_ATTACH] == "true"
    coordination = client.CoordinationV1Api(kube.api_client)

    async def lease_or_none():
        try:
            return await coordination.read_namespaced_lease("node-a", "kube-node-lease")
        except ApiException as e:
            if e.status != 404:
                raise
            return None

    lease = await wait_until(lease_or_none, timeout=20, what="kwok's lease of node-a", interval=0.1)
    assert lease.spec.holder_identity  # kwok's own identity, where a kubelet puts the node name
    assert lease.spec.renew_time is not None
    assert lease.metadata.owner_references[0].name == "node-a"


async def test_scheduler_binds_and_kwok_runs_pod(kube, control_plane):
    from kubespawner.spawner import KubeSpawner

    await kube.create_node("node-a")
    await kube.create_node("node-b")
    await kube.create_pod("free")

    node = await kube.wait_for_binding("free")
    assert node in {"node-a", "node-b"}

    pod = await kube.wait_for_running("free")
    status = pod["status"]
    assert status["phase"] == "Running"
    ip = ipaddress.ip_address(status["podIP"])
    assert ip in ipaddress.ip_network(control_plane.pod_cidr)
    assert ip in ipaddress.ip_network("127.0.0.0/8")
    assert status["hostIP"] == "127.0.0.1"
    assert {c["type"] for c in status["conditions"] if c["status"] == "True"} >= {
        "PodScheduled",
        "PodReadyToStartContainers",
        "ContainersReady",
        "Ready",
    }
    # KubeSpawner's own check (it never reads `self`).
    assert KubeSpawner.is_pod_running(None, pod)


async def test_a_graceful_delete_finishes(kube):
    await kube.create_node("node-a")
    await kube.create_pod("short-lived")
    await kube.wait_for_running("short-lived")
    await kube.core.delete_namespaced_pod("short-lived", kube.namespace, grace_period_seconds=30)
    await wait_until(
        lambda: kube.core.list_namespaced_pod(kube.namespace),
        until=lambda pods: not pods.items,
        timeout=10,
        what="kwok to finish the graceful delete",
        seen=lambda pods: [p.metadata.name for p in pods.items],
        interval=0.1,
    )


async def test_the_pv_controller_binds_a_static_claim(kube):
    pvc, pv = await kube.create_bound_claim("claim-alice")
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pvc["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"
    assert pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
    assert pv["status"]["phase"] == "Bound"
    assert "kubernetes.io/pvc-protection" in pvc["metadata"]["finalizers"]


async def test_a_wait_for_first_consumer_claim_is_bound_when_its_pod_is_scheduled(kube):
    await kube.create_node("node-a")
    await kube.create_claim("claim-alice", storage_class=helpers.WFFC_CLASS)
    await asyncio.sleep(1)
    pvc = await kube.core.read_namespaced_persistent_volume_claim("claim-alice", kube.namespace)
    assert pvc.status.phase == "Pending"  # nothing binds it before a pod needs it
    await kube.create_pod("lab", claims=["claim-alice"])
    assert await kube.wait_for_binding("lab") == "node-a"
    bound = await kube.wait_for_claim_bound("claim-alice")  # by the scheduler's VolumeBinding
    assert bound["spec"]["volumeName"] == helpers._short_name("pv", kube.namespace, "claim-alice")
    await kube.wait_for_running("lab")


async def test_a_running_pod_gets_its_volume_attached_by_the_controller(kube):
    await kube.create_node("node-a")
    _, pv = await kube.create_bound_claim("claim-alice")
    await kube.create_pod("lab", claims=["claim-alice"])
    await kube.wait_for_running("lab")
    [va] = await kube.volume_attachments(pv["metadata"]["name"])
    assert va["spec"]["nodeName"] == "node-a"
    assert va["spec"]["attacher"] == helpers.FAKE_CSI_DRIVER
    assert va["status"]["attached"] is True
    node = await kube.core.read_node("node-a")
    assert [v.name for v in node.status.volumes_attached] == [
        f"kubernetes.io/csi/{helpers.FAKE_CSI_DRIVER}^{pv['metadata']['name']}"
    ]

    # The pod goes, the volume is detached: the controller deletes its VolumeAttachment.
    await kube.core.delete_namespaced_pod("lab", kube.namespace)
    await wait_until(
        lambda: kube.volume_attachments(pv["metadata"]["name"]),
        until=lambda attachments: not attachments,
        timeout=20,
        what="the volume detached (its VolumeAttachment deleted)",
        interval=0.1,
    )


async def test_unschedulable_pod_gets_failed_scheduling_event(kube):
    await kube.create_node("node-a")
    await kube.create_node("node-b")
    await kube.create_pod("lost", node_selector={"colocate.test/pool": "nowhere"})

    message = await kube.wait_for_failed_scheduling("lost")
    assert message.startswith("0/2 nodes are available"), message
    assert "didn't match Pod's node affinity/selector" in message
    pod = await kube.core.read_namespaced_pod("lost", kube.namespace)
    assert not pod.spec.node_name


async def test_split_claim_is_detected(kube):
    kube.check_split_claims = False  # this test breaks the invariant on purpose
    await kube.create_node("node-a")
    await kube.create_node("node-b")
    await kube.create_bound_claim("claim-alice")
    for pod, node in (("lab", "node-a"), ("app", "node-b")):
        await kube.create_pod(
            pod, claims=["claim-alice"], node_selector={"kubernetes.io/hostname": node}
        )
    # The scheduler does not enforce ReadWriteOnce co-location: both pods get bound.
    assert await kube.wait_for_binding("lab") == "node-a"
    assert await kube.wait_for_binding("app") == "node-b"

    with pytest.raises(AssertionError) as excinfo:
        await kube.assert_no_split_claims()
    text = str(excinfo.value)
    assert "claim-alice" in text and "'node-a': ['lab']" in text and "'node-b': ['app']" in text


async def test_shared_claim_on_two_nodes_is_fine(kube):
    await kube.create_node("node-a")
    await kube.create_node("node-b")
    await kube.create_bound_claim("shared", access_modes=["ReadWriteMany"])
    for pod, node in (("lab", "node-a"), ("app", "node-b")):
        await kube.create_pod(
            pod, claims=["shared"], node_selector={"kubernetes.io/hostname": node}
        )
        assert await kube.wait_for_binding(pod) == node
    await kube.assert_no_split_claims()


async def test_a_hand_made_volume_attachment_is_acknowledged(kube):
    await kube.create_node("node-b")
    _, pv = await kube.create_bound_claim("claim-bob")
    await kube.create_volume_attachment(pv["metadata"]["name"], "node-b", attached=False)
    [va] = await wait_until(
        lambda: kube.volume_attachments(pv["metadata"]["name"]),
        until=lambda vas: len(vas) == 1 and (vas[0].get("status") or {}).get("attached"),
        timeout=10,
        what="kwok to acknowledge the VolumeAttachment",
        interval=0.1,
    )
    assert va["spec"]["source"]["persistentVolumeName"] == pv["metadata"]["name"]


async def test_bound_claim_pv_node_affinity_and_cordon(kube):
    await kube.create_node("node-a")
    await kube.create_node("node-b")
    await kube.create_bound_claim("claim-bob", pv_node_affinity="node-b")

    # The claim counts as bound: the scheduler follows the PV's node affinity.
    await kube.create_pod("lab", claims=["claim-bob"])
    assert await kube.wait_for_binding("lab") == "node-b"
    await kube.create_pod(
        "app", claims=["claim-bob"], node_selector={"kubernetes.io/hostname": "node-a"}
    )
    message = await kube.wait_for_failed_scheduling("app")
    assert message.startswith("0/2 nodes are available"), message
    assert "1 node(s) didn't match PersistentVolume's node affinity" in message, message

    # A cordoned node (spec.unschedulable, as `kubectl cordon` writes it). Created so, not
    # cordoned after: the scheduler's node and pod informers are separate watches, and a pod
    # created right after a cordon can reach the scheduler before the cordon does (seen under
    # load: "late" was bound to the node just cordoned). A node that is unschedulable from its
    # first version can never be seen schedulable.
    await kube.create_node("node-c", unschedulable=True)
    assert (await kube.cordon("node-c"))["spec"]["unschedulable"] is True
    await kube.create_pod("late", node_selector={"kubernetes.io/hostname": "node-c"})
    # Until the scheduler has seen node-c at all, the pod matches no node; then, unschedulable.
    events = await wait_until(
        lambda: kube.core.list_namespaced_event(
            kube.namespace, field_selector="involvedObject.name=late,reason=FailedScheduling"
        ),
        until=lambda events: any("were unschedulable" in (e.message or "") for e in events.items),
        timeout=30,
        what="a FailedScheduling event for late naming the cordoned node",
        seen=lambda events: [e.message for e in events.items],
    )
    message = next(e.message for e in events.items if "were unschedulable" in (e.message or ""))
    assert "1 node(s) were unschedulable" in message, message


async def test_hub_role_cannot_list_nodes(kube):
    from kubernetes_asyncio import client

    await kube.create_node("node-a")
    await kube.rbac.create_namespaced_role(
        kube.namespace,
        {"metadata": {"name": "hub"}, "rules": Z2JH_HUB_RULES},
    )
    await kube.rbac.create_namespaced_role_binding(
        kube.namespace,
        {
            "metadata": {"name": "hub"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hub"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "hub"}],
        },
    )
    hub_client = await kube.user_client("hub", groups=["hub-users"])
    async with hub_client:
        core = client.CoreV1Api(hub_client)
        pods = await core.list_namespaced_pod(kube.namespace)  # allowed: authenticated as `hub`
        assert pods.items == []
        with pytest.raises(ApiException) as excinfo:
            await core.list_node()
        assert excinfo.value.status == 403
        with pytest.raises(ApiException) as excinfo:
            await core.list_persistent_volume()
        assert excinfo.value.status == 403


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stop_leaves_no_process(kube_bin_dir, tmp_path):
    t0 = time.monotonic()
    cp = ControlPlane(kube_bin_dir, tmp_path)
    try:
        cp.start()
        pids = cp.pids
        assert set(pids) == {
            "etcd",
            "apiserver",
            "scheduler",
            "controller-manager",
            "kwok",
            "volume-gate",
        }
        assert all(_alive(pid) for pid in pids.values())
        workdir = cp.dir
        assert workdir.is_dir()
    finally:
        cp.stop()
    assert not [name for name, pid in pids.items() if _alive(pid)]
    assert not workdir.exists()
    cp.stop()  # idempotent
    total = time.monotonic() - t0
    print(f"second control plane: up in {cp.startup_seconds:.1f} s, start+stop {total:.1f} s")
