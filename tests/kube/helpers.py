"""Async helpers for cluster tests against the test control plane (see controlplane.py).

Every helper takes a kubernetes_asyncio ``ApiClient``, or any generated API object (``CoreV1Api``,
``StorageV1Api``, ...) whose ``.api_client`` is used. Objects are returned as camelCase dicts, the
shape the API serves and KubeSpawner's reflectors cache.

There is no kube-controller-manager: nothing binds claims, removes the `pvc-protection` /
`pv-protection` finalizers or finishes namespace deletion, so the helpers do each of those by hand.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import time
from collections.abc import Callable, Iterable

from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

FAKE_CSI_DRIVER = "csi.colocate.test"
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
) -> dict:
    """Create a schedulable Node (no kubelet behind it) and return it.

    Labels: ``kubernetes.io/hostname=name`` plus `labels`. `taints` are Taint dicts
    (``{"key": ..., "value": ..., "effect": "NoSchedule"}``). ``status.capacity`` and
    ``status.allocatable`` are cpu, memory, pods plus `extra` (e.g. ``{"nvidia.com/gpu": "1"}``),
    set through the status subresource with a Ready=True condition.
    """
    core = _core(api)
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"unschedulable": unschedulable, "taints": list(taints or [])},
    }
    await core.create_node(body)
    resources = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    now = _now()
    status = {
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet stub: no kubelet runs in tests",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
        }
    }
    node = await core.patch_node_status(name, status)
    return to_dict(api, node)


async def cordon(api, name: str) -> dict:
    """Mark a Node unschedulable (``kubectl cordon``) and return it."""
    node = await _core(api).patch_node(name, {"spec": {"unschedulable": True}})
    return to_dict(api, node)


async def delete_nodes(api, names: Iterable[str], timeout: float = 30) -> None:
    """Delete Nodes and wait until they are gone."""
    core = _core(api)
    names = list(names)
    for name in names:
        await _ignore_404(core.delete_node(name, grace_period_seconds=0))
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            try:
                await core.read_node(name)
            except ApiException as e:
                if e.status == 404:
                    break
                raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {name} still exists {timeout} s after its deletion")
            await asyncio.sleep(POLL)


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


async def create_bound_claim(
    api,
    namespace: str,
    name: str,
    access_modes: Iterable[str] = ("ReadWriteOnce",),
    *,
    storage_class: str | None = "standard",
    pv_node_affinity=None,
    size: str = "1Gi",
) -> tuple[dict, dict]:
    """Create a PVC and a PV bound to each other as the PV controller would leave them.

    The PV (cluster-scoped, named ``pv-<namespace>-<name>``, labelled with the namespace so
    cleanup() finds it) uses a fake CSI driver. Bound means: PVC ``spec.volumeName`` + annotation
    ``pv.kubernetes.io/bind-completed``, PV ``spec.claimRef`` with the claim's uid, and phase
    Bound on both (status subresource): the scheduler's VolumeBinding plugin then treats the claim
    as bound and only checks the PV's node affinity.

    `pv_node_affinity`: None, a node name or list of names (``kubernetes.io/hostname In``), a
    NodeSelector dict (``{"nodeSelectorTerms": [...]}``) or a full VolumeNodeAffinity.
    Returns (pvc, pv).
    """
    core = _core(api)
    access_modes = list(access_modes)
    pv_name = _short_name("pv", namespace, name)
    pvc_body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {
                "pv.kubernetes.io/bind-completed": "yes",
                "pv.kubernetes.io/bound-by-controller": "yes",
            },
        },
        "spec": {
            "accessModes": access_modes,
            "resources": {"requests": {"storage": size}},
            "storageClassName": storage_class,
            "volumeName": pv_name,
            "volumeMode": "Filesystem",
        },
    }
    pvc = await core.create_namespaced_persistent_volume_claim(namespace, pvc_body)
    pv_body = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": pv_name,
            "labels": {LABEL_NAMESPACE: namespace, LABEL_CLAIM: name},
            "annotations": {"pv.kubernetes.io/provisioned-by": FAKE_CSI_DRIVER},
        },
        "spec": {
            "capacity": {"storage": size},
            "accessModes": access_modes,
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": storage_class,
            "volumeMode": "Filesystem",
            "csi": {"driver": FAKE_CSI_DRIVER, "volumeHandle": pv_name},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": namespace,
                "name": name,
                "uid": pvc.metadata.uid,
            },
        },
    }
    affinity = _volume_node_affinity(pv_node_affinity)
    if affinity is not None:
        pv_body["spec"]["nodeAffinity"] = affinity
    await core.create_persistent_volume(pv_body)
    pv = await core.patch_persistent_volume_status(pv_name, {"status": {"phase": "Bound"}})
    pvc = await core.patch_namespaced_persistent_volume_claim_status(
        name,
        namespace,
        {
            "status": {
                "phase": "Bound",
                "accessModes": access_modes,
                "capacity": {"storage": size},
            }
        },
    )
    return to_dict(api, pvc), to_dict(api, pv)


async def create_volume_attachment(api, pv_name: str, node_name: str, attached: bool = True):
    """Create a storage.k8s.io/v1 VolumeAttachment of a PV to a node; set ``status.attached``.

    Named as the CSI attach/detach controller names them (csi-<sha256(handle+driver+node)>).
    Returns the VolumeAttachment dict.
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


def pod_manifest(
    name: str,
    *,
    claims: Iterable[str] = (),
    node_selector: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    affinity: dict | None = None,
    tolerations: list[dict] | None = None,
) -> dict:
    """A minimal single-container pod mounting each claim in `claims` (volume name = claim name)."""
    claims = list(claims)
    container = {
        "name": "notebook",
        "image": "quay.io/jupyter/base-notebook:latest",
        "volumeMounts": [{"name": c, "mountPath": f"/mnt/{c}"} for c in claims],
    }
    if requests or limits:
        container["resources"] = {
            k: v for k, v in (("requests", requests), ("limits", limits)) if v
        }
    spec: dict = {
        "containers": [container],
        "volumes": [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims],
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = list(tolerations)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
    }


async def create_pod(api, namespace: str, name: str, **kwargs) -> dict:
    """Create ``pod_manifest(name, **kwargs)`` in `namespace`; return the created pod."""
    pod = await _core(api).create_namespaced_pod(namespace, pod_manifest(name, **kwargs))
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
    deadline = time.monotonic() + timeout
    pod = None
    while True:
        try:
            pod = to_dict(api, await core.read_namespaced_pod(name, namespace))
        except ApiException as e:
            if e.status != 404:
                raise
            pod = None
        if pod is not None and predicate(pod):
            return pod
        if time.monotonic() > deadline:
            status = (pod or {}).get("status", {})
            raise TimeoutError(
                f"pod {namespace}/{name} not at {what} after {timeout} s "
                f"(phase {status.get('phase')}, conditions {status.get('conditions')})"
            )
        await asyncio.sleep(POLL)


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
    """Wait until the pod is running (as the kubelet stub reports it); return the pod."""
    return await wait_for_pod(api, namespace, pod_name, is_running, timeout, "Running")


async def wait_for_failed_scheduling(
    api, namespace: str, pod_name: str, timeout: float = 30
) -> str:
    """Wait for a FailedScheduling event about the pod; return its message (the newest one)."""
    core = _core(api)
    selector = f"involvedObject.name={pod_name},reason=FailedScheduling"
    deadline = time.monotonic() + timeout
    while True:
        events = await core.list_namespaced_event(namespace, field_selector=selector)
        if events.items:
            newest = max(
                events.items,
                key=lambda e: (
                    e.last_timestamp or e.event_time or e.metadata.creation_timestamp,
                    e.metadata.resource_version,
                ),
            )
            return newest.message or ""
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"no FailedScheduling event for {namespace}/{pod_name} in {timeout} s"
            )
        await asyncio.sleep(POLL)


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
    """Delete the namespace's pods (grace 0) and PVCs, the PVs and VolumeAttachments the helpers
    created for it, and the named Nodes (waiting until they are gone). Finalizers that only
    kube-controller-manager would remove are removed by hand."""
    core, storage = _core(api), _storage(api)
    pods = await core.list_namespaced_pod(namespace)
    for pod in pods.items:
        name = pod.metadata.name
        if pod.metadata.finalizers:
            await _drop_finalizers(core.patch_namespaced_pod, name, namespace)
        await _ignore_404(core.delete_namespaced_pod(name, namespace, grace_period_seconds=0))

    pvcs = await core.list_namespaced_persistent_volume_claim(namespace)
    for pvc in pvcs.items:
        name = pvc.metadata.name
        await _drop_finalizers(core.patch_namespaced_persistent_volume_claim, name, namespace)
        await _ignore_404(core.delete_namespaced_persistent_volume_claim(name, namespace))

    selector = f"{LABEL_NAMESPACE}={namespace}"
    pvs = await core.list_persistent_volume(label_selector=selector)
    pv_names = {pv.metadata.name for pv in pvs.items}
    vas = await storage.list_volume_attachment()
    for va in vas.items:
        labels = va.metadata.labels or {}
        if va.spec.source.persistent_volume_name in pv_names or labels.get(LABEL_NAMESPACE) == (
            namespace
        ):
            if va.metadata.finalizers:
                await _drop_finalizers(storage.patch_volume_attachment, va.metadata.name)
            await _ignore_404(storage.delete_volume_attachment(va.metadata.name))
    for name in sorted(pv_names):
        await _drop_finalizers(core.patch_persistent_volume, name)
        await _ignore_404(core.delete_persistent_volume(name))

    await delete_nodes(api, node_names)


async def delete_namespace(api, namespace: str) -> None:
    """Delete a namespace and finish its deletion (no namespace controller runs here)."""
    core = _core(api)
    try:
        await core.delete_namespace(namespace)
        await core.replace_namespace_finalize(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace},
                "spec": {"finalizers": []},
            },
        )
    except ApiException as e:
        if e.status != 404:
            raise
