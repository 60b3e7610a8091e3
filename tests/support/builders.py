"""The one set of builders for the camelCase dicts the Kubernetes API returns (Node, Pod, PVC, PV,
VolumeAttachment), for the unit, cluster, fault and end-to-end tests and the benchmarks.

Only the fields a decision reads are filled in; everything else a test needs goes in by keyword
(the idea of kube-scheduler's ``MakePod`` test wrapper, as keywords).  Standard library only and
Python 3.10: the end-to-end legs import it in virtualenvs of their own.  It is part of the
test-support package: ``from tests.support.builders import pod`` (pytest's ``pythonpath`` puts
the repository root first; benchmarks run from it as ``python -m benchmarks.<name>``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nebari_colocate.state import ClusterState

NAMESPACE = "dev"
USERNAME_KEY = "hub.jupyter.org/username"
SERVERNAME_KEY = "hub.jupyter.org/servername"


def node(
    name: str = "cpu-1",
    *,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Mapping] = (),
    unschedulable: bool = False,
    allocatable: Mapping[str, object] | None = None,
) -> dict:
    """A Node with 4 CPU, 16Gi and 110 pods allocatable; an ``allocatable`` entry of None drops."""
    resources: dict[str, object] = {"cpu": "4", "memory": "16Gi", "pods": "110"}
    resources.update(allocatable or {})
    spec: dict = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": {k: v for k, v in resources.items() if v is not None}},
    }


def gpu_node(name: str = "gpu-1", **kwargs) -> dict:
    """A node labelled as the GPU node type with one nvidia.com/gpu allocatable."""
    kwargs.setdefault("labels", {"nebari.dev/node-type": "gpu"})
    kwargs["allocatable"] = {"cpu": "8", "memory": "60Gi", "nvidia.com/gpu": "1"} | dict(
        kwargs.get("allocatable") or {}
    )
    return node(name, **kwargs)


def taint(key: str, value: str | None = None, effect: str = "NoSchedule") -> dict:
    result = {"key": key, "effect": effect}
    if value is not None:
        result["value"] = value
    return result


def toleration(
    key: str | None = None, operator: str | None = None, value=None, effect=None
) -> dict:
    """A toleration with only the fields given (an omitted operator means Equal)."""
    fields = {"key": key, "operator": operator, "value": value, "effect": effect}
    return {k: v for k, v in fields.items() if v is not None}


IMAGE = "quay.io/nebari/nebari-jupyterlab:2026.11.1"
#: the image of pods created in the test control plane (kwok runs them; nothing pulls it)
KUBE_IMAGE = "quay.io/jupyter/base-notebook:latest"


def container(
    name: str = "notebook",
    *,
    requests: Mapping[str, object] | None = None,
    limits: Mapping[str, object] | None = None,
    restart_policy: str | None = None,
    image: str = IMAGE,
) -> dict:
    result: dict = {"name": name, "image": image}
    resources = {}
    if requests is not None:
        resources["requests"] = dict(requests)
    if limits is not None:
        resources["limits"] = dict(limits)
    if resources:
        result["resources"] = resources
    if restart_policy is not None:
        result["restartPolicy"] = restart_policy
    return result


def sidecar(name: str = "sidecar", **kwargs) -> dict:
    """An init container with ``restartPolicy: Always``: it runs beside the main containers."""
    return container(name, restart_policy="Always", **kwargs)


def pod(
    name: str = "jupyter-alice",
    *,
    namespace: str | None = NAMESPACE,
    claims: Iterable[str] = (),
    node_name: str | None = None,
    phase: str | None = None,
    requests: Mapping[str, object] | None = None,
    limits: Mapping[str, object] | None = None,
    containers: Iterable[Mapping] | None = None,
    init_containers: Iterable[Mapping] | None = None,
    node_selector: Mapping[str, str] | None = None,
    affinity: Mapping | None = None,
    tolerations: Iterable[Mapping] | None = None,
    overhead: Mapping[str, object] | None = None,
    resources: Mapping | None = None,
    user: str | None = None,
    server: str | None = None,
    deleting: bool = False,
    read_only: bool = False,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    mount_claims: bool = False,
    image: str = IMAGE,
    spec_fields: Mapping | None = None,
) -> dict:
    """A Pod; ``user``/``server`` add the labels and annotations KubeSpawner writes;
    ``read_only`` mounts every claim ``readOnly``; ``labels`` and ``annotations`` are added as
    given; ``mount_claims`` mounts each claim in the first container at ``/mnt/<claim>`` (a pod
    that runs); ``spec_fields`` are further spec fields, as given."""
    metadata: dict = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if user is not None:
        owner = {USERNAME_KEY: user, SERVERNAME_KEY: server or ""}
        metadata["labels"] = {"component": "singleuser-server", **owner}
        metadata["annotations"] = dict(owner)
    if labels:
        metadata["labels"] = {**metadata.get("labels", {}), **labels}
    if annotations:
        metadata["annotations"] = {**metadata.get("annotations", {}), **annotations}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if containers is None:
        containers = [container(requests=requests, limits=limits, image=image)]
    spec: dict = {"containers": [dict(c) for c in containers]}
    if init_containers is not None:
        spec["initContainers"] = [dict(c) for c in init_containers]
    claims = list(claims)
    if claims:
        spec["volumes"] = [
            {
                "name": f"v{i}",
                "persistentVolumeClaim": {
                    "claimName": c,
                    **({"readOnly": True} if read_only else {}),
                },
            }
            for i, c in enumerate(claims)
        ]
        if mount_claims:
            spec["containers"][0]["volumeMounts"] = [
                {"name": f"v{i}", "mountPath": f"/mnt/{c}"} for i, c in enumerate(claims)
            ]
    optional = {
        "nodeName": node_name,
        "nodeSelector": node_selector,
        "affinity": affinity,
        "tolerations": tolerations,
        "overhead": overhead,
        "resources": resources,
    }
    spec.update({k: (list(v) if k == "tolerations" else v) for k, v in optional.items() if v})
    spec.update(spec_fields or {})
    result = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if phase is not None:
        result["status"] = {"phase": phase}
    return result


def running(name: str, node_name: str, **kwargs) -> dict:
    """A pod bound to ``node_name`` in phase Running."""
    return pod(name, node_name=node_name, phase="Running", **kwargs)


#: spec fields of every pod a test creates in the control plane: no service account token (the
#: test control plane runs no token controller) and deleted at once
KUBE_POD_FIELDS = {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": 0}


def kube_pod(name: str, **kwargs) -> dict:
    """A pod to create in the test control plane: no namespace (the create call gives it), each
    claim mounted, the base-notebook image and :data:`KUBE_POD_FIELDS`; ``pod``'s keywords."""
    kwargs.setdefault("namespace", None)
    kwargs.setdefault("mount_claims", True)
    kwargs.setdefault("image", KUBE_IMAGE)
    kwargs["spec_fields"] = {**KUBE_POD_FIELDS, **(kwargs.get("spec_fields") or {})}
    return pod(name, **kwargs)


def pvc(
    name: str,
    *,
    namespace: str = NAMESPACE,
    modes: Iterable[str] = ("ReadWriteOnce",),
    volume: str | None = "",
) -> dict:
    """A claim; bound to PV ``pv-<name>`` unless ``volume`` says otherwise (None: unbound)."""
    spec: dict = {"accessModes": list(modes), "resources": {"requests": {"storage": "10Gi"}}}
    if volume is not None:
        spec["volumeName"] = volume or f"pv-{name}"
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def pv(
    name: str,
    *,
    terms: Iterable[Mapping] | None = None,
    csi: tuple[str, str] | None = None,
    claim: str | None = None,
) -> dict:
    """A PV; ``terms`` become its required node affinity, ``csi`` is its (driver, volume
    handle), ``claim`` (``namespace/name``) its claimRef."""
    spec: dict = {"capacity": {"storage": "10Gi"}}
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    if claim is not None:
        namespace, _, claim_name = claim.partition("/")
        spec["claimRef"] = {
            "kind": "PersistentVolumeClaim",
            "namespace": namespace,
            "name": claim_name,
        }
    if terms is not None:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [dict(t) for t in terms]}}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": spec,
    }


def volume_attachment(pv_name: str, node_name: str, *, attached: bool = True) -> dict:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": f"csi-{pv_name}-{node_name}"},
        "spec": {
            "attacher": "driver.example",
            "nodeName": node_name,
            "source": {"persistentVolumeName": pv_name},
        },
        "status": {"attached": attached},
    }


def expr(key: str, operator: str, *values: str) -> dict:
    """A nodeSelectorRequirement."""
    result: dict = {"key": key, "operator": operator}
    if values:
        result["values"] = list(values)
    return result


def term(*expressions: Mapping, fields: Iterable[Mapping] = ()) -> dict:
    """A nodeSelectorTerm: its expressions and fields are ANDed."""
    result: dict = {}
    if expressions:
        result["matchExpressions"] = [dict(e) for e in expressions]
    fields = list(fields)
    if fields:
        result["matchFields"] = [dict(f) for f in fields]
    return result


def name_is(*names: str, operator: str = "In") -> dict:
    """A matchFields requirement on ``metadata.name``."""
    return {"key": "metadata.name", "operator": operator, "values": list(names)}


def required_affinity(*terms: Mapping) -> dict:
    """An affinity with a required node affinity made of ``terms`` (ORed)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [dict(t) for t in terms]
            }
        }
    }


def state(*objects: Mapping, node_access: bool = True, namespace: str = NAMESPACE) -> ClusterState:
    """The objects as the decision reads them (imported here: the rest is standard library)."""
    from nebari_colocate.state import ClusterState

    return ClusterState.from_objects(objects, namespace=namespace, node_access=node_access)
