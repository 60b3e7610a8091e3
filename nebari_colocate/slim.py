"""What the readers keep of a pod and of a node: the fields a decision, a message or a report
reads (and, of a pod, what KubeSpawner's ``poll()``, ``start()`` and ``stop()`` read from its pod
reflector, which shares the watch: :mod:`nebari_colocate.shared_reflector`), and one copy of
equal sub-objects across pods (a profile's containers and tolerations, a user's volumes), so a
hub watching 10,000 pods stays small.  (pure)

The watches (:mod:`nebari_colocate.informer`) keep every object so; the direct reads
(:mod:`nebari_colocate.view`) slim the pods they list.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from .objects import JsonDict, Obj

_T = TypeVar("_T")


class Shared:
    """Keeps one copy of equal sub-objects of pods (a profile's containers and tolerations, a
    user's volumes): thousands of pods of a few profiles then cost little memory.  The objects
    are never changed after they are stored (the view and ClusterState only read them)."""

    def __init__(self, limit: int = 20000) -> None:
        self._limit = limit
        self._cache: dict[str, Any] = {}

    def __call__(self, value: _T) -> _T:
        if not value:
            return value
        key = json.dumps(value, sort_keys=True, separators=(",", ":"))
        found: _T | None = self._cache.get(key)
        if found is None:
            if len(self._cache) >= self._limit:
                self._cache.clear()
            found = self._cache[key] = value
        return found


def _slim_container(container: Obj) -> JsonDict:
    kept = {"name": container.get("name")}
    # ports: KubeSpawner finds the server's URL by the port named notebook-port
    for key in ("resources", "restartPolicy", "ports"):
        if key in container:
            kept[key] = container[key]
    return kept


#: spec fields a decision reads, and whether equal values are kept once (``Shared``)
_SPEC_KEPT = (
    ("nodeName", False),
    ("nodeSelector", True),
    ("tolerations", True),
    ("affinity", True),
    ("overhead", True),
    ("resources", True),
    ("runtimeClassName", False),
    ("priority", False),
    ("priorityClassName", False),
    ("preemptionPolicy", False),
    ("schedulerName", False),
    ("topologySpreadConstraints", True),
)
_META_KEPT = (
    ("name", False),
    ("namespace", False),
    ("uid", False),
    ("labels", True),
    ("annotations", True),
    ("deletionTimestamp", False),
    ("resourceVersion", False),
)


def _no_share(value: _T) -> _T:
    return value


def _slim_container_status(status: Obj) -> JsonDict:
    """What KubeSpawner reads of a container's status: its name, whether it is ready, which
    state it is in, and a terminated container's exit code (``poll()`` returns it)."""
    state = status.get("state") or {}
    kept_state: JsonDict = {}
    for key, value in state.items():
        if key == "terminated" and isinstance(value, dict):
            kept_state[key] = {k: value[k] for k in ("exitCode", "reason") if k in value}
        else:
            kept_state[key] = {}  # when it started or why it waits: nobody reads it
    return {"name": status.get("name"), "ready": status.get("ready"), "state": kept_state}


def _slim_status(status: Obj, share: Callable[[Any], Any]) -> JsonDict:
    """The phase, the pod IP and the container statuses, each only when the API gave it (as
    KubeSpawner tells a missing key from a present one: ``pod["status"]["podIP"]``,
    ``pod["status"].get("containerStatuses")``); what the fail fast reads of a pending pod's
    scheduling (:mod:`nebari_colocate.pod_scheduling`): the node a preemption nominated it to,
    and whether a scheduler has set its ``PodScheduled`` condition (its type only)."""
    kept: JsonDict = {}
    if status.get("phase"):
        kept["phase"] = status["phase"]
    if any(c.get("type") == "PodScheduled" for c in status.get("conditions") or ()):
        kept["conditions"] = [{"type": "PodScheduled"}]
    if "podIP" in status:
        kept["podIP"] = status["podIP"]
    # preemption: where a pending pod waits for room, and which victim is older
    for key in ("nominatedNodeName", "startTime"):
        if status.get(key):
            kept[key] = status[key]
    statuses = status.get("containerStatuses")
    if statuses is not None:
        # equal across a profile's running servers once start times are dropped: kept once
        kept["containerStatuses"] = share([_slim_container_status(c) for c in statuses])
    unique = "podIP" in kept or "startTime" in kept or "nominatedNodeName" in kept
    return kept if unique else share(kept)


def slim_pod(pod: Obj, share: Callable[[Any], Any] = _no_share) -> JsonDict:
    """The fields of a pod a decision, a message or a report reads: who owns it, where it is
    bound, its claims, what it requests and how it selects nodes, its phase, and what
    KubeSpawner reads of a server pod (uid, pod IP, container readiness and exit codes).  (pure)

    ``share`` (a :class:`Shared`) keeps equal sub-objects once across pods.
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    slim_spec = {k: (share(spec[k]) if s else spec[k]) for k, s in _SPEC_KEPT if k in spec}
    if isinstance(slim_spec.get("nodeName"), str):
        slim_spec["nodeName"] = sys.intern(slim_spec["nodeName"])
    volumes = [v for v in spec.get("volumes") or [] if "persistentVolumeClaim" in v]
    if volumes:
        slim_spec["volumes"] = share(volumes)
    for key in ("containers", "initContainers"):
        if spec.get(key):
            slim_spec[key] = share([_slim_container(c) for c in spec[key]])
    slim_meta = {k: (share(meta[k]) if s else meta[k]) for k, s in _META_KEPT if k in meta}
    return {
        "kind": "Pod",
        "metadata": slim_meta,
        "spec": slim_spec,
        "status": _slim_status(pod.get("status") or {}, share),
    }


def slim_node(node: Obj) -> JsonDict:
    """The fields of a Node the fit check and the reports read: name, labels, taints, cordon,
    allocatable.  (pure)"""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    return {
        "kind": "Node",
        "metadata": {k: meta[k] for k in ("name", "labels", "resourceVersion") if k in meta},
        "spec": {k: spec[k] for k in ("unschedulable", "taints") if k in spec},
        "status": {"allocatable": (node.get("status") or {}).get("allocatable") or {}},
    }
