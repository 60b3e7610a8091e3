"""ClusterState: the objects a decision needs, as one immutable snapshot.  (pure)

Two sources fill it: plain objects (tests, benchmarks, a dump that :mod:`nebari_colocate.dumps`
read for ``nebari-colocate simulate``) and the live view of the cluster
(:mod:`nebari_colocate.view`, the spawner, ``explain`` and ``audit``).  Objects are kept as the
camelCase dicts the API returns.  Every index is built once, in the constructor, and the
snapshot is read-only afterwards (like kube-scheduler's ``NewSnapshot``): a decision costs the
user's pods and the pinned node's pods, not the cluster's.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from .fit import node_usage, pod_requests
from .objects import (
    JsonDict,
    Obj,
    attached_nodes,
    attachment_identity,
    attachment_pv,
    claim_ref,
    is_terminal,
    meta,
    pod_claims,
    spec,
    volume_identity,
)


class _Readable(enum.Enum):
    """The default of ``nodes`` and ``volume_attachments``: readable, and none (None means
    "not readable")."""

    EMPTY = "readable and empty"


class StateError(Exception):
    """The state could not be gathered or read; the message names the source and the problem."""


def _pod_key(pod: Obj, namespace: str) -> str:
    return f"{meta(pod).get('namespace') or namespace}/{meta(pod).get('name')}"


class ClusterState:
    """What ``decide`` sees: an immutable snapshot, its indexes built once here.

    ``nodes`` / ``volume_attachments`` of ``None`` mean "not readable" (RBAC); the default is
    readable and empty.  ``node_pods_complete``: the pods of *every* namespace on the nodes of
    ``nodes`` are in ``pods`` (False when only the hub namespace's pods could be read).
    ``notes``: what could not be read and why (facts for the operator, not sentences).
    ``priority_classes`` (name -> PriorityClass) and ``pdbs`` (PodDisruptionBudgets of every
    namespace read) are what preemption reads (``docs/decisions.md``, "Priority and
    preemption"); ``None``: not readable (judged without them).
    """

    __slots__ = (
        "_attachments_by_disk",
        "_attachments_by_pv",
        "_by_claim",
        "_by_node",
        "_by_nominated",
        "_pvs_by_disk",
        "_requests_memo",
        "_usage_memo",
        "namespace",
        "node_pods_complete",
        "nodes",
        "notes",
        "pdbs",
        "pods",
        "priority_classes",
        "pvcs",
        "pvs",
        "volume_attachments",
    )
    namespace: str
    pods: tuple[Obj, ...]
    pvcs: Mapping[str, Obj]  # "namespace/name" -> PVC
    pvs: Mapping[str, Obj]  # name -> PV
    volume_attachments: tuple[Obj, ...] | None
    nodes: Mapping[str, Obj] | None
    node_pods_complete: bool
    notes: tuple[str, ...]
    priority_classes: Mapping[str, Obj] | None
    pdbs: tuple[Obj, ...] | None
    _by_claim: Mapping[str, tuple[Obj, ...]]
    _by_node: Mapping[str, tuple[Obj, ...]]
    _by_nominated: Mapping[str, tuple[Obj, ...]]
    _attachments_by_pv: Mapping[str, tuple[Obj, ...]]
    _attachments_by_disk: Mapping[tuple[str, str], tuple[Obj, ...]]
    _pvs_by_disk: Mapping[tuple[str, str], tuple[str, ...]]
    _requests_memo: dict[int, tuple[Obj, Mapping[str, int]]]
    _usage_memo: dict[str, tuple[dict[str, int], int]]

    def __init__(
        self,
        pods: Iterable[Obj] = (),
        pvcs: Mapping[str, Obj] | None = None,
        pvs: Mapping[str, Obj] | None = None,
        volume_attachments: Iterable[Obj] | _Readable | None = _Readable.EMPTY,
        nodes: Mapping[str, Obj] | _Readable | None = _Readable.EMPTY,
        *,
        node_pods_complete: bool = True,
        namespace: str = "default",
        notes: Iterable[str] = (),
        priority_classes: Mapping[str, Obj] | None = None,
        pdbs: Iterable[Obj] | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "namespace", namespace)
        set_(self, "pods", tuple(pods))
        set_(self, "pvcs", MappingProxyType(dict(pvcs or {})))
        set_(self, "pvs", MappingProxyType(dict(pvs or {})))
        if isinstance(volume_attachments, _Readable):
            volume_attachments = ()
        set_(
            self,
            "volume_attachments",
            None if volume_attachments is None else tuple(volume_attachments),
        )
        if isinstance(nodes, _Readable):
            nodes = {}
        set_(self, "nodes", None if nodes is None else MappingProxyType(dict(nodes)))
        set_(self, "node_pods_complete", bool(node_pods_complete))
        set_(self, "notes", tuple(notes))
        set_(
            self,
            "priority_classes",
            None if priority_classes is None else MappingProxyType(dict(priority_classes)),
        )
        set_(self, "pdbs", None if pdbs is None else tuple(pdbs))

        by_claim: dict[str, list[Obj]] = {}
        by_node: dict[str, list[Obj]] = {}
        by_nominated: dict[str, list[Obj]] = {}
        for pod in self.pods:
            pod_namespace = meta(pod).get("namespace") or namespace
            for claim in pod_claims(pod):
                by_claim.setdefault(f"{pod_namespace}/{claim}", []).append(pod)
            node_name = spec(pod).get("nodeName")
            if node_name:
                by_node.setdefault(node_name, []).append(pod)
            else:
                nominated = (pod.get("status") or {}).get("nominatedNodeName")
                if nominated and isinstance(nominated, str):
                    by_nominated.setdefault(nominated, []).append(pod)
        by_pv: dict[str, list[Obj]] = {}
        by_disk: dict[tuple[str, str], list[Obj]] = {}
        for va in self.volume_attachments or ():
            pv = attachment_pv(va)
            if pv:
                by_pv.setdefault(pv, []).append(va)
            inline = attachment_identity(va)
            if inline:
                by_disk.setdefault(inline, []).append(va)
        # One disk may be exposed by several PVs (a second PV with the same CSI driver and
        # handle, in another namespace): kube-controller-manager attaches it once, by that pair.
        pvs_by_disk: dict[tuple[str, str], list[str]] = {}
        for pv_name, pv_obj in self.pvs.items():
            disk = volume_identity(pv_obj)
            if disk:
                pvs_by_disk.setdefault(disk, []).append(pv_name)
        set_(self, "_by_claim", {k: tuple(v) for k, v in by_claim.items()})
        set_(self, "_by_node", {k: tuple(v) for k, v in by_node.items()})
        set_(self, "_by_nominated", {k: tuple(v) for k, v in by_nominated.items()})
        set_(self, "_attachments_by_pv", {k: tuple(v) for k, v in by_pv.items()})
        set_(self, "_attachments_by_disk", {k: tuple(v) for k, v in by_disk.items()})
        set_(self, "_pvs_by_disk", {k: tuple(sorted(v)) for k, v in pvs_by_disk.items()})
        # Memos of values derived from the (immutable) pods: caches, never observable.
        set_(self, "_requests_memo", {})
        set_(self, "_usage_memo", {})

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ClusterState is immutable: build a new one (replace({name}=...))")

    def __repr__(self) -> str:
        nodes = "unreadable" if self.nodes is None else len(self.nodes)
        return (
            f"ClusterState(namespace={self.namespace!r}, pods={len(self.pods)}, "
            f"pvcs={len(self.pvcs)}, pvs={len(self.pvs)}, nodes={nodes})"
        )

    def replace(self, **changes: Any) -> ClusterState:
        """A new snapshot with some fields changed (its indexes built afresh)."""
        fields: dict[str, Any] = {
            "pods": self.pods,
            "pvcs": self.pvcs,
            "pvs": self.pvs,
            "volume_attachments": self.volume_attachments,
            "nodes": self.nodes,
            "node_pods_complete": self.node_pods_complete,
            "namespace": self.namespace,
            "notes": self.notes,
            "priority_classes": self.priority_classes,
            "pdbs": self.pdbs,
        }
        fields.update(changes)
        return ClusterState(**fields)

    # ----------------------------------------------------------------------------------------
    # reads

    def pods_mounting(self, namespace: str, claim: str) -> tuple[Obj, ...]:
        """Pods of ``namespace`` with a volume of claim ``claim``."""
        return self._by_claim.get(f"{namespace}/{claim}", ())

    def pods_on_node(self, node_name: str) -> tuple[Obj, ...]:
        """Pods (of every namespace when ``node_pods_complete``) with ``spec.nodeName``."""
        return self._by_node.get(node_name, ())

    def pods_nominated_to(self, node_name: str) -> tuple[Obj, ...]:
        """Pods not bound yet whose ``status.nominatedNodeName`` is ``node_name`` (preemption
        made room for them there)."""
        return self._by_nominated.get(node_name, ())

    def namespace_pods(self, namespace: str | None = None) -> list[Obj]:
        """The pods of ``namespace`` (default: the snapshot's namespace)."""
        namespace = namespace or self.namespace
        return [p for p in self.pods if (meta(p).get("namespace") or self.namespace) == namespace]

    def claims_of(self, namespace: str | None = None) -> dict[str, Obj]:
        """Claim name -> PVC, for the PVCs of ``namespace`` (default: the snapshot's)."""
        prefix = f"{namespace or self.namespace}/"
        return {k[len(prefix) :]: v for k, v in self.pvcs.items() if k.startswith(prefix)}

    def attachments_of(self, pv_name: str | None) -> tuple[Obj, ...]:
        """The VolumeAttachments of a PV (empty when unreadable)."""
        return self._attachments_by_pv.get(pv_name, ()) if pv_name else ()

    def requests_of(self, pod: Obj) -> Mapping[str, int]:
        """``fit.pod_requests`` of a pod of this state, computed once per pod."""
        memo = self._requests_memo
        entry = memo.get(id(pod))
        if entry is None or entry[0] is not pod:
            entry = memo[id(pod)] = (pod, pod_requests(pod))
        return entry[1]

    def node_usage(self, node_name: str, exclude: str | None = None) -> tuple[dict[str, int], int]:
        """(requests, pod count) of the non-terminal pods on a node, summed once per node;
        ``exclude`` (``namespace/name``) is a pod not to count (the one being replaced)."""
        memo = self._usage_memo
        if node_name not in memo:
            memo[node_name] = node_usage(
                node_name, self.pods_on_node(node_name), requests_of=self.requests_of
            )
        used, count = memo[node_name]
        if exclude is not None:
            for pod in self.pods_on_node(node_name):
                if _pod_key(pod, self.namespace) != exclude or is_terminal(pod):
                    continue
                used = dict(used)
                for name, value in self.requests_of(pod).items():
                    used[name] = used.get(name, 0) - value
                count -= 1
        return used, count

    def same_disk(self, pv_name: str | None) -> tuple[str, ...]:
        """The PVs (of this state) that expose the disk of PV ``pv_name``, itself included:
        those with its CSI driver and volume handle; just ``pv_name`` without a CSI source."""
        if not pv_name:
            return ()
        disk = volume_identity(self.pvs.get(pv_name))
        found = self._pvs_by_disk.get(disk, ()) if disk else ()
        return found if pv_name in found else (pv_name, *found)

    def disk_attachments(self, pv_name: str | None) -> tuple[Obj, ...]:
        """The VolumeAttachments of the disk of PV ``pv_name``, whichever PV (or inline volume)
        they name; empty when unreadable."""
        if not pv_name:
            return ()
        found = [va for name in self.same_disk(pv_name) for va in self.attachments_of(name)]
        disk = volume_identity(self.pvs.get(pv_name))
        if disk:
            found.extend(self._attachments_by_disk.get(disk, ()))
        return tuple({id(va): va for va in found}.values())

    def attached_nodes(self, namespace: str, claim: str) -> set[str]:
        """Nodes the disk bound to ``claim`` is attached to (a detach may still be in
        progress), through any PV that exposes it; empty when the attachments are unreadable."""
        pvc = self.pvc(namespace, claim)
        volume = spec(pvc).get("volumeName") if pvc is not None else None
        return attached_nodes(self.disk_attachments(volume))

    def pods_sharing_disk(self, namespace: str, claim: str) -> tuple[Obj, ...]:
        """Pods that mount *another* claim bound to a PV exposing the disk of ``claim`` (the same
        disk through a second PV, in this namespace or another): they hold it as surely."""
        pvc = self.pvc(namespace, claim)
        volume = spec(pvc).get("volumeName") if pvc is not None else None
        own = f"{namespace}/{claim}"
        found: list[Obj] = []
        for name in self.same_disk(volume):
            ref = claim_ref(self.pvs.get(name))
            if ref and ref != own:
                found.extend(self._by_claim.get(ref, ()))
        return tuple(found)

    def pvc(self, namespace: str, name: str) -> Obj | None:
        return self.pvcs.get(f"{namespace}/{name}")

    def bound_pv(self, namespace: str, claim: str) -> Obj | None:
        pvc = self.pvc(namespace, claim)
        volume = spec(pvc).get("volumeName")
        return self.pvs.get(volume) if volume else None

    @classmethod
    def from_objects(
        cls, objects: Iterable[Obj], *, namespace: str = "default", node_access: bool = True
    ) -> ClusterState:
        """Sort objects by kind; other kinds are ignored.  ``node_access=False`` drops Nodes."""
        pods: list[JsonDict] = []
        classes: dict[str, JsonDict] = {}
        pdbs: list[JsonDict] = []
        pvcs: dict[str, JsonDict] = {}
        pvs: dict[str, JsonDict] = {}
        attachments: list[JsonDict] = []
        nodes: dict[str, JsonDict] = {}
        for obj in objects:
            kind = obj.get("kind")
            metadata = meta(obj)
            name = metadata.get("name", "")
            if kind == "Pod":
                pods.append(dict(obj))
            elif kind == "PersistentVolumeClaim":
                pvcs[f"{metadata.get('namespace') or namespace}/{name}"] = dict(obj)
            elif kind == "PersistentVolume":
                pvs[name] = dict(obj)
            elif kind == "VolumeAttachment":
                attachments.append(dict(obj))
            elif kind == "Node":
                nodes[name] = dict(obj)
            elif kind == "PriorityClass":
                classes[name] = dict(obj)
            elif kind == "PodDisruptionBudget":
                pdbs.append(dict(obj))
        return cls(
            pods,
            pvcs,
            pvs,
            attachments,
            nodes if node_access else None,
            namespace=namespace,
            priority_classes=classes,
            pdbs=pdbs,
        )
