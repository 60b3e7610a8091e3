"""Async helpers for cluster tests against the test control plane (see controlplane.py).

Every helper takes a kubernetes_asyncio ``ApiClient``, or any generated API object (``CoreV1Api``,
``StorageV1Api``, ...) whose ``.api_client`` is used. Objects are returned as camelCase dicts, the
shape the API serves and KubeSpawner's reflectors cache.

The cluster does the rest as a real one does: kube-controller-manager's PV controller binds the
claims, its attach/detach controller attaches the volumes of pods bound to nodes (kwok plays the
CSI external-attacher), its protection, namespace and garbage-collector controllers finish
deletions; kwok keeps Nodes Ready and runs bound pods (see controlplane.py).
"""

from __future__ import annotations

import datetime
import hashlib
import time
from collections.abc import Callable, Iterable

from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from tests.support import builders
from tests.support.waiting import wait_until

FAKE_CSI_DRIVER = "csi.colocate.test"
# Static provisioning (an operator creates the PVs): one class that binds at once, one that waits
# for the first pod (the PV controller leaves the claim to kube-scheduler's VolumeBinding plugin).
IMMEDIATE_CLASS = "standard"
WFFC_CLASS = "standard-wffc"
STORAGE_CLASSES = {IMMEDIATE_CLASS: "Immediate", WFFC_CLASS: "WaitForFirstConsumer"}
# What a kubelet puts on the Node it registers when the attach/detach controller is to attach its
# volumes (kubelet --enable-controller-attach-detach, the default): without it the controller
# ignores the node's pods and no VolumeAttachment is ever created for them.
CONTROLLER_MANAGED_ATTACH = "volumes.kubernetes.io/controller-managed-attach-detach"
# Bound pods with this annotation stay Pending (kwok's pod-running Stage skips them): tests of
# events of a kubelet that cannot start a pod. The name is the one the former kubelet stub read.
HOLD_ANNOTATION = "kubelet-stub.nebari.dev/hold"
HOLD = {HOLD_ANNOTATION: "true"}
# Labels on the cluster-scoped objects the helpers create, so cleanup() finds them.
LABEL_NAMESPACE = "colocate.test/namespace"
LABEL_CLAIM = "colocate.test/claim"
LABEL_PV = "colocate.test/pv"
SHARED_ACCESS_MODES = frozenset({"ReadWriteMany", "ReadOnlyMany"})
POLL = 0.1


def api_client_of(api) -> ApiClient:
    """The ApiClient behind `api` (an ApiClient or a generated API object)."""
    if isinstance(api, ApiClient):
        return api
    inner = getattr(api, "api_client", None)
    if isinstance(inner, ApiClient):
        return inner
    raise TypeError(f"expected a kubernetes_asyncio ApiClient or API object, got {api!r}")


def _core(api) -> client.CoreV1Api:
    return client.CoreV1Api(api_client_of(api))


def _storage(api) -> client.StorageV1Api:
    return client.StorageV1Api(api_client_of(api))


def to_dict(api, obj) -> dict:
    """A model object (or dict) as the camelCase dict the API serves."""
    return api_client_of(api).sanitize_for_serialization(obj)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _short_name(prefix: str, *parts: str) -> str:
    """prefix-part-part, or prefix-<hash> when that is not a valid object name."""
    name = "-".join((prefix, *parts))
    if len(name) <= 63:
        return name
    return f"{prefix}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"


async def _ignore_404(coro) -> None:
    try:
        await coro
    except ApiException as e:
        if e.status != 404:
            raise


# ---------------------------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------------------------


async def create_node(
    api,
    name: str,
    *,
    labels: dict[str, str] | None = None,
    taints: list[dict] | None = None,
    unschedulable: bool = False,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: str = "110",
    extra: dict[str, str] | None = None,
    wait_ready: float | None = None,
) -> dict:
    """Create a Node as a kubelet registers one (kwok plays its kubelet) and return it.

    Labels: ``kubernetes.io/hostname=name`` plus `labels`; annotation
    ``volumes.kubernetes.io/controller-managed-attach-detach``. `taints` are Taint dicts
    (``{"key": ..., "value": ..., "effect": "NoSchedule"}``). ``status.capacity`` and
    ``status.allocatable`` are cpu, memory, pods plus `extra` (e.g. ``{"nvidia.com/gpu": "1"}``),
    the InternalIP 127.0.0.1; the Ready condition is kwok's to report. `wait_ready`: seconds to
    wait for it (None: do not wait; kube-scheduler does not wait for it either).
    """
    core = _core(api)
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            "annotations": {CONTROLLER_MANAGED_ATTACH: "true"},
        },
        "spec": {"unschedulable": unschedulable, "taints": list(taints or [])},
    }
    await core.create_node(body)
    resources = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    status = {
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
        }
    }
    node = to_dict(api, await core.patch_node_status(name, status))
    if wait_ready is not None:
        node = await wait_for_node_ready(api, name, wait_ready)
    return node


def is_ready(node: dict) -> bool:
    """The Node's Ready condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


async def wait_for_node_ready(api, name: str, timeout: float = 30) -> dict:
    """Wait until the Node reports Ready (kwok's node-ready Stage); return it."""
    core = _core(api)

    async def read() -> dict:
        return to_dict(api, await core.read_node(name))

    return await wait_until(
        read,
        until=is_ready,
        timeout=timeout,
        what=f"node {name} Ready (is kwok running?)",
        seen=lambda node: (node.get("status") or {}).get("conditions"),
        interval=POLL,
    )


async def cordon(api, name: str) -> dict:
    """Mark a Node unschedulable (``kubectl cordon``) and return it."""
    node = await _core(api).patch_node(name, {"spec": {"unschedulable": True}})
    return to_dict(api, node)


async def cordon_seen_by_scheduler(api, namespace: str, name: str, timeout: float = 30) -> dict:
    """Cordon the Node and wait until kube-scheduler has seen the cordon; return the Node.

    kube-scheduler's node and pod informers are separate watches: a pod created right after a
    cordon can reach it before the cordon does and be bound to the cordoned node (seen under
    load). The barrier: a canary pod that only that node could take, created after the cordon,
    until the scheduler says the node is unschedulable (a canary bound in the race is deleted
    and another one tried).
    """
    node = await cordon(api, name)
    core = _core(api)
    deadline = time.monotonic() + timeout
    attempt = 0

    async def verdict(canary: str) -> str | None:
        pod = to_dict(api, await core.read_namespaced_pod(canary, namespace))
        if (pod.get("spec") or {}).get("nodeName"):
            return "bound"
        selector = f"involvedObject.name={canary},reason=FailedScheduling"
        events = await core.list_namespaced_event(namespace, field_selector=selector)
        if any("were unschedulable" in (e.message or "") for e in events.items):
            return "unschedulable"
        return None

    while True:
        attempt += 1
        canary = f"cordon-canary-{attempt}-{hashlib.sha1(name.encode()).hexdigest()[:6]}"
        # pinned by matchFields (metadata.name), as the spawner pins: Karpenter leaves such a
        # pod alone, so the canary never makes it launch a node
        pinned = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [name]}
                            ]
                        }
                    ]
                }
            }
        }
        await core.create_namespaced_pod(
            namespace, builders.kube_pod(canary, spec_fields={"affinity": pinned})
        )
        try:
            seen = await wait_until(
                lambda canary=canary: verdict(canary),
                timeout=max(0.0, deadline - time.monotonic()),
                what=f"kube-scheduler to see node {name} cordoned",
                interval=POLL,
            )
        finally:
            await _ignore_404(core.delete_namespaced_pod(canary, namespace, grace_period_seconds=0))
        if seen == "unschedulable":
            return node


async def delete_nodes(api, names: Iterable[str], timeout: float = 30) -> None:
    """Delete Nodes and wait until they are gone."""
    core = _core(api)
    names = list(names)
    for name in names:
        await _ignore_404(core.delete_node(name, grace_period_seconds=0))
    deadline = time.monotonic() + timeout

    async def gone(name: str) -> bool:
        try:
            await core.read_node(name)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    for name in names:
        await wait_until(
            lambda name=name: gone(name),
            timeout=max(0.0, deadline - time.monotonic()),
            what=f"node {name} gone after its deletion",
            interval=POLL,
        )


# ---------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------


def _volume_node_affinity(spec) -> dict | None:
    """A PV nodeAffinity from: None, a node name, a NodeSelector dict or a VolumeNodeAffinity."""
    if spec is None:
        return None
    if isinstance(spec, str):
        spec = [spec]
    if isinstance(spec, (list, tuple)):
        term = {
            "matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": list(spec)}
            ]
        }
        return {"required": {"nodeSelectorTerms": [term]}}
    if "required" in spec:
        return spec
    if "nodeSelectorTerms" in spec:
        return {"required": spec}
    raise ValueError(f"not a node affinity: {spec!r}")


async def ensure_storage_classes(api) -> None:
    """Create the StorageClasses of ``STORAGE_CLASSES`` (static provisioning) if missing."""
    storage = _storage(api)
    for name, mode in STORAGE_CLASSES.items():
        body = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": mode,
            "reclaimPolicy": "Retain",
        }
        try:
            await storage.create_storage_class(body)
        except ApiException as e:
            if e.status != 409:
                raise


async def create_claim(
    api,
    namespace: str,
    name: str,
    access_modes: Iterable[str] = ("ReadWriteOnce",),
    *,
    storage_class: str | None = IMMEDIATE_CLASS,
    pv_node_affinity=None,
    size: str = "1Gi",
) -> tuple[dict, dict]:
    """Create a static CSI PersistentVolume and a claim that selects it; return (pvc, pv) as
    created (the claim still Pending: the PV controller or kube-scheduler binds it).

    The PV (cluster-scoped, named ``pv-<namespace>-<name>``, CSI driver ``FAKE_CSI_DRIVER``,
    reclaim policy Retain) carries the labels ``LABEL_NAMESPACE`` and ``LABEL_CLAIM``, which the
    claim's ``spec.selector`` matches: no other claim of the cluster can take it.

    `pv_node_affinity`: None, a node name or list of names (``kubernetes.io/hostname In``), a
    NodeSelector dict (``{"nodeSelectorTerms": [...]}``) or a full VolumeNodeAffinity.
    """
    core = _core(api)
    if storage_class in STORAGE_CLASSES:
        await ensure_storage_classes(api)
    access_modes = list(access_modes)
    pv_name = _short_name("pv", namespace, name)
    labels = {LABEL_NAMESPACE: namespace, LABEL_CLAIM: name}
    pv_body = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "labels": labels},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": access_modes,
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": storage_class,
            "volumeMode": "Filesystem",
            "csi": {"driver": FAKE_CSI_DRIVER, "volumeHandle": pv_name},
        },
    }
    affinity = _volume_node_affinity(pv_node_affinity)
    if affinity is not None:
        pv_body["spec"]["nodeAffinity"] = affinity
    pv = await core.create_persistent_volume(pv_body)
    pvc_body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "accessModes": access_modes,
            "resources": {"requests": {"storage": size}},
            "storageClassName": storage_class,
            "selector": {"matchLabels": labels},
            "volumeMode": "Filesystem",
        },
    }
    pvc = await core.create_namespaced_persistent_volume_claim(namespace, pvc_body)
    return to_dict(api, pvc), to_dict(api, pv)


async def wait_for_claim_bound(api, namespace: str, name: str, timeout: float = 30) -> dict:
    """Wait until the claim is Bound (``status.phase``) and return it."""
    core = _core(api)

    async def read() -> dict:
        return to_dict(api, await core.read_namespaced_persistent_volume_claim(name, namespace))

    return await wait_until(
        read,
        until=lambda pvc: (pvc.get("status") or {}).get("phase") == "Bound",
        timeout=timeout,
        what=f"claim {namespace}/{name} Bound (is the PV controller running?)",
        seen=lambda pvc: {"phase": (pvc.get("status") or {}).get("phase")},
        interval=POLL,
    )


async def create_bound_claim(
    api,
    namespace: str,
    name: str,
    access_modes: Iterable[str] = ("ReadWriteOnce",),
    *,
    storage_class: str | None = IMMEDIATE_CLASS,
    pv_node_affinity=None,
    size: str = "1Gi",
    timeout: float = 30,
) -> tuple[dict, dict]:
    """``create_claim``, then wait until kube-controller-manager's PV controller bound the claim
    to its PV (``spec.volumeName``, ``spec.claimRef`` with the claim's uid, phase Bound on both).
    Returns (pvc, pv) as bound. A claim of ``WFFC_CLASS`` is not bound before a pod uses it:
    use ``create_claim`` for those.
    """
    pvc, pv = await create_claim(
        api,
        namespace,
        name,
        access_modes,
        storage_class=storage_class,
        pv_node_affinity=pv_node_affinity,
        size=size,
    )
    pvc = await wait_for_claim_bound(api, namespace, name, timeout)
    pv = to_dict(api, await _core(api).read_persistent_volume(pv["metadata"]["name"]))
    return pvc, pv


async def list_volume_attachments(api, pv_name: str) -> list[dict]:
    """The VolumeAttachments of a PV (made by the attach/detach controller or by hand)."""
    vas = await _storage(api).list_volume_attachment()
    return [
        to_dict(api, va) for va in vas.items if va.spec.source.persistent_volume_name == pv_name
    ]


async def create_volume_attachment(api, pv_name: str, node_name: str, attached: bool = True):
    """Create a storage.k8s.io/v1 VolumeAttachment of a PV to a node by hand; set
    ``status.attached``. Returns the VolumeAttachment dict.

    Named as the attach/detach controller names them (csi-<sha256(handle+driver+node)>). The
    controller reads VolumeAttachments it did not make only when it starts, so it ignores this
    one; kwok's volume-attached Stage turns an ``attached: false`` into true within moments. For
    an attachment as a cluster makes it, run a pod that mounts the claim.
    """
    pv = await _core(api).read_persistent_volume(pv_name)
    driver, handle = FAKE_CSI_DRIVER, pv_name
    if pv.spec.csi is not None:
        driver, handle = pv.spec.csi.driver, pv.spec.csi.volume_handle
    name = "csi-" + hashlib.sha256(f"{handle}{driver}{node_name}".encode()).hexdigest()
    labels = {LABEL_PV: pv_name}
    if pv.metadata.labels and LABEL_NAMESPACE in pv.metadata.labels:
        labels[LABEL_NAMESPACE] = pv.metadata.labels[LABEL_NAMESPACE]
    storage = _storage(api)
    await storage.create_volume_attachment(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "VolumeAttachment",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "attacher": driver,
                "nodeName": node_name,
                "source": {"persistentVolumeName": pv_name},
            },
        }
    )
    va = await storage.patch_volume_attachment_status(name, {"status": {"attached": attached}})
    return to_dict(api, va)


# ---------------------------------------------------------------------------------------------
# Pods
# ---------------------------------------------------------------------------------------------


async def create_pod(api, namespace: str, name: str, **kwargs) -> dict:
    """Create ``builders.kube_pod(name, **kwargs)`` in `namespace`; return the created pod."""
    pod = await _core(api).create_namespaced_pod(namespace, builders.kube_pod(name, **kwargs))
    return to_dict(api, pod)


async def wait_for_pod(
    api,
    namespace: str,
    name: str,
    predicate: Callable[[dict], bool],
    timeout: float = 30,
    what: str = "the condition",
) -> dict:
    """Poll a pod until predicate(pod dict) is true; return the pod. TimeoutError if not."""
    core = _core(api)

    async def read() -> dict | None:
        try:
            return to_dict(api, await core.read_namespaced_pod(name, namespace))
        except ApiException as e:
            if e.status != 404:
                raise
            return None

    def seen(pod: dict | None) -> object:
        if pod is None:
            return "no such pod"
        status = pod.get("status", {})
        return {"phase": status.get("phase"), "conditions": status.get("conditions")}

    return await wait_until(
        read,
        until=lambda pod: pod is not None and predicate(pod),
        timeout=timeout,
        what=f"pod {namespace}/{name} at {what}",
        seen=seen,
        interval=POLL,
    )


async def wait_for_binding(api, namespace: str, pod_name: str, timeout: float = 30) -> str:
    """Wait until the scheduler bound the pod; return its node name."""
    pod = await wait_for_pod(
        api,
        namespace,
        pod_name,
        lambda p: bool(p.get("spec", {}).get("nodeName")),
        timeout,
        "binding",
    )
    return pod["spec"]["nodeName"]


def is_running(pod: dict) -> bool:
    """KubeSpawner's notion of a running pod (phase Running, podIP, every container ready)."""
    status = pod.get("status") or {}
    return (
        status.get("phase") == "Running"
        and bool(status.get("podIP"))
        and "deletionTimestamp" not in pod.get("metadata", {})
        and all(cs.get("ready") for cs in status.get("containerStatuses") or [])
    )


async def wait_for_running(api, namespace: str, pod_name: str, timeout: float = 30) -> dict:
    """Wait until the pod is running (as kwok reports it); return the pod."""
    return await wait_for_pod(api, namespace, pod_name, is_running, timeout, "Running")


async def wait_for_failed_scheduling(
    api, namespace: str, pod_name: str, timeout: float = 30
) -> str:
    """Wait for a FailedScheduling event about the pod; return its message (the newest one)."""
    core = _core(api)
    selector = f"involvedObject.name={pod_name},reason=FailedScheduling"
    events = await wait_until(
        lambda: core.list_namespaced_event(namespace, field_selector=selector),
        until=lambda events: bool(events.items),
        timeout=timeout,
        what=f"a FailedScheduling event for {namespace}/{pod_name}",
        seen=lambda events: "no such event",
        interval=POLL,
    )
    newest = max(
        events.items,
        key=lambda e: (
            e.last_timestamp or e.event_time or e.metadata.creation_timestamp,
            e.metadata.resource_version,
        ),
    )
    return newest.message or ""


# ---------------------------------------------------------------------------------------------
# The invariant
# ---------------------------------------------------------------------------------------------


def split_claims(pods: Iterable[dict], pvcs: Iterable[dict]) -> dict[str, dict[str, list[str]]]:
    """Exclusive claims whose bound pods sit on more than one node: claim -> {node: [pods]}.

    Exclusive: the PVC's accessModes have neither ReadWriteMany nor ReadOnlyMany (a claim with no
    PVC object counts as exclusive). Every pod with ``spec.nodeName`` counts, whatever its phase.
    """
    shared = {
        p["metadata"]["name"]
        for p in pvcs
        if SHARED_ACCESS_MODES & set(p.get("spec", {}).get("accessModes") or [])
    }
    holders: dict[str, dict[str, list[str]]] = {}
    for pod in pods:
        node = pod.get("spec", {}).get("nodeName")
        if not node:
            continue
        for volume in pod["spec"].get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and claim not in shared:
                holders.setdefault(claim, {}).setdefault(node, []).append(pod["metadata"]["name"])
    return {
        claim: {node: sorted(names) for node, names in sorted(nodes.items())}
        for claim, nodes in sorted(holders.items())
        if len(nodes) > 1
    }


async def assert_no_split_claims(api, namespace: str) -> None:
    """The invariant of every cluster test: each exclusive claim's bound pods share one node."""
    core = _core(api)
    pods = to_dict(api, await core.list_namespaced_pod(namespace))["items"]
    pvcs = to_dict(api, await core.list_namespaced_persistent_volume_claim(namespace))["items"]
    split = split_claims(pods, pvcs)
    if split:
        lines = [f"  {claim} -> {nodes}" for claim, nodes in split.items()]
        raise AssertionError(
            f"exclusive claims mounted on more than one node in {namespace}:\n" + "\n".join(lines)
        )


# ---------------------------------------------------------------------------------------------
# Cleanup
# ---------------------------------------------------------------------------------------------


async def _drop_finalizers(patch, *args) -> None:
    await _ignore_404(patch(*args, {"metadata": {"finalizers": None}}))


async def cleanup(api, namespace: str, node_names: Iterable[str] = ()) -> None:
    """Delete the namespace's pods (grace 0) and claims, the PVs the helpers made for it, the
    VolumeAttachments of those PVs that were made by hand, and the named Nodes (waiting until they
    are gone). Finalizers a test put on its pods are removed; the protection finalizers of claims
    and PVs are kube-controller-manager's to remove once nothing uses them, and the attach/detach
    controller detaches (deletes) the attachments it made once the pods are gone."""
    core, storage = _core(api), _storage(api)
    pods = await core.list_namespaced_pod(namespace)
    for pod in pods.items:
        name = pod.metadata.name
        if pod.metadata.finalizers:
            await _drop_finalizers(core.patch_namespaced_pod, name, namespace)
        await _ignore_404(core.delete_namespaced_pod(name, namespace, grace_period_seconds=0))

    pvcs = await core.list_namespaced_persistent_volume_claim(namespace)
    for pvc in pvcs.items:
        await _ignore_404(
            core.delete_namespaced_persistent_volume_claim(pvc.metadata.name, namespace)
        )

    selector = f"{LABEL_NAMESPACE}={namespace}"
    pvs = await core.list_persistent_volume(label_selector=selector)
    pv_names = {pv.metadata.name for pv in pvs.items}
    vas = await storage.list_volume_attachment(label_selector=selector)
    for va in vas.items:
        await _ignore_404(storage.delete_volume_attachment(va.metadata.name))
    for name in sorted(pv_names):
        await _ignore_404(core.delete_persistent_volume(name))

    await delete_nodes(api, node_names)


async def delete_namespace(api, namespace: str) -> None:
    """Delete a namespace; kube-controller-manager's namespace controller empties and removes it."""
    await _ignore_404(_core(api).delete_namespace(namespace))
