"""ClusterState: the objects a decision needs, as one immutable snapshot; and the YAML reader.

Two sources fill it: plain objects (tests, benchmarks, a YAML dump read by ``nebari-colocate
simulate``) and the live view of the cluster (:mod:`nebari_colocate.view`, the spawner,
``explain`` and ``audit``).  Objects are kept as the camelCase dicts the API returns.  Every index
is built once, in the constructor, and the snapshot is read-only afterwards (like kube-scheduler's
``NewSnapshot``): a decision costs the user's pods and the pinned node's pods, not the cluster's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

KINDS = ("Node", "Pod", "PersistentVolumeClaim", "PersistentVolume", "VolumeAttachment")

_DEFAULT = object()


class StateError(Exception):
    """The state could not be gathered or read; the message names the source and the problem."""


def _pod_key(pod: Mapping, namespace: str) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or namespace}/{meta.get('name')}"


class ClusterState:
    """What ``decide`` sees: an immutable snapshot, its indexes built once here.

    ``nodes`` / ``volume_attachments`` of ``None`` mean "not readable" (RBAC); the default is
    readable and empty.  ``node_pods_complete``: the pods of *every* namespace on the nodes of
    ``nodes`` are in ``pods`` (False when only the hub namespace's pods could be read).
    ``notes``: what could not be read and why (facts for the operator, not sentences).
    """

    __slots__ = (
        "_attachments_by_pv",
        "_by_claim",
        "_by_node",
        "_frozen",
        "_requests_memo",
        "_usage_memo",
        "namespace",
        "node_pods_complete",
        "nodes",
        "notes",
        "pods",
        "pvcs",
        "pvs",
        "volume_attachments",
    )

    def __init__(
        self,
        pods: Iterable[Mapping] = (),
        pvcs: Mapping[str, Mapping] | None = None,
        pvs: Mapping[str, Mapping] | None = None,
        volume_attachments: Iterable[Mapping] | None = _DEFAULT,  # type: ignore[assignment]
        nodes: Mapping[str, Mapping] | None = _DEFAULT,  # type: ignore[assignment]
        *,
        node_pods_complete: bool = True,
        namespace: str = "default",
        notes: Iterable[str] = (),
    ) -> None:
        set_ = object.__setattr__
        set_(self, "namespace", namespace)
        set_(self, "pods", tuple(pods))
        set_(self, "pvcs", MappingProxyType(dict(pvcs or {})))  # "namespace/name" -> PVC
        set_(self, "pvs", MappingProxyType(dict(pvs or {})))  # name -> PV
        if volume_attachments is _DEFAULT:
            volume_attachments = ()
        set_(
            self,
            "volume_attachments",
            None if volume_attachments is None else tuple(volume_attachments),
        )
        if nodes is _DEFAULT:
            nodes = {}
        set_(self, "nodes", None if nodes is None else MappingProxyType(dict(nodes)))
        set_(self, "node_pods_complete", bool(node_pods_complete))
        set_(self, "notes", tuple(notes))

        by_claim: dict[str, list[dict]] = {}
        by_node: dict[str, list[dict]] = {}
        for pod in self.pods:
            spec = pod.get("spec") or {}
            pod_namespace = (pod.get("metadata") or {}).get("namespace") or namespace
            for volume in spec.get("volumes") or []:
                claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
                if claim:
                    entry = by_claim.setdefault(f"{pod_namespace}/{claim}", [])
                    if not entry or entry[-1] is not pod:
                        entry.append(pod)
            if spec.get("nodeName"):
                by_node.setdefault(spec["nodeName"], []).append(pod)
        by_pv: dict[str, list[dict]] = {}
        for va in self.volume_attachments or ():
            pv = ((va.get("spec") or {}).get("source") or {}).get("persistentVolumeName")
            if pv:
                by_pv.setdefault(pv, []).append(va)
        set_(self, "_by_claim", {k: tuple(v) for k, v in by_claim.items()})
        set_(self, "_by_node", {k: tuple(v) for k, v in by_node.items()})
        set_(self, "_attachments_by_pv", {k: tuple(v) for k, v in by_pv.items()})
        # Memos of values derived from the (immutable) pods: caches, never observable.
        set_(self, "_requests_memo", {})
        set_(self, "_usage_memo", {})
        set_(self, "_frozen", True)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"ClusterState is immutable: build a new one (replace({name}=...))")

    def __repr__(self) -> str:
        nodes = "unreadable" if self.nodes is None else len(self.nodes)
        return (
            f"ClusterState(namespace={self.namespace!r}, pods={len(self.pods)}, "
            f"pvcs={len(self.pvcs)}, pvs={len(self.pvs)}, nodes={nodes})"
        )

    def replace(self, **changes) -> ClusterState:
        """A new snapshot with some fields changed (its indexes built afresh)."""
        fields = {
            "pods": self.pods,
            "pvcs": self.pvcs,
            "pvs": self.pvs,
            "volume_attachments": self.volume_attachments,
            "nodes": self.nodes,
            "node_pods_complete": self.node_pods_complete,
            "namespace": self.namespace,
            "notes": self.notes,
        }
        fields.update(changes)
        return ClusterState(**fields)

    # ----------------------------------------------------------------------------------------
    # reads

    def pods_mounting(self, namespace: str, claim: str) -> tuple[dict, ...]:
        """Pods of ``namespace`` with a volume of claim ``claim``."""
        return self._by_claim.get(f"{namespace}/{claim}", ())

    def pods_on_node(self, node_name: str) -> tuple[dict, ...]:
        """Pods (of every namespace when ``node_pods_complete``) with ``spec.nodeName``."""
        return self._by_node.get(node_name, ())

    def namespace_pods(self, namespace: str | None = None) -> list[dict]:
        """The pods of ``namespace`` (default: the snapshot's namespace)."""
        namespace = namespace or self.namespace
        return [
            p
            for p in self.pods
            if ((p.get("metadata") or {}).get("namespace") or self.namespace) == namespace
        ]

    def claims_of(self, namespace: str | None = None) -> dict[str, dict]:
        """Claim name -> PVC, for the PVCs of ``namespace`` (default: the snapshot's)."""
        prefix = f"{namespace or self.namespace}/"
        return {k[len(prefix) :]: v for k, v in self.pvcs.items() if k.startswith(prefix)}

    def attachments_of(self, pv_name: str | None) -> tuple[dict, ...]:
        """The VolumeAttachments of a PV (empty when unreadable)."""
        return self._attachments_by_pv.get(pv_name, ()) if pv_name else ()

    def requests_of(self, pod: Mapping) -> Mapping[str, int]:
        """``fit.pod_requests`` of a pod of this state, computed once per pod."""
        from .fit import pod_requests

        memo = self._requests_memo
        entry = memo.get(id(pod))
        if entry is None or entry[0] is not pod:
            entry = memo[id(pod)] = (pod, pod_requests(pod))
        return entry[1]

    def node_usage(self, node_name: str, exclude: str | None = None) -> tuple[dict, int]:
        """(requests, pod count) of the non-terminal pods on a node, summed once per node;
        ``exclude`` (``namespace/name``) is a pod not to count (the one being replaced)."""
        from .fit import is_terminal, node_usage

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

    def pvc(self, namespace: str, name: str) -> Mapping | None:
        return self.pvcs.get(f"{namespace}/{name}")

    def bound_pv(self, namespace: str, claim: str) -> Mapping | None:
        pvc = self.pvc(namespace, claim)
        volume = ((pvc or {}).get("spec") or {}).get("volumeName")
        return self.pvs.get(volume) if volume else None

    @classmethod
    def from_objects(
        cls, objects: Iterable[Mapping], *, namespace: str = "default", node_access: bool = True
    ) -> ClusterState:
        """Sort objects by kind; other kinds are ignored.  ``node_access=False`` drops Nodes."""
        pods: list[dict] = []
        pvcs: dict[str, dict] = {}
        pvs: dict[str, dict] = {}
        attachments: list[dict] = []
        nodes: dict[str, dict] = {}
        for obj in objects:
            kind = obj.get("kind")
            meta = obj.get("metadata") or {}
            name = meta.get("name", "")
            if kind == "Pod":
                pods.append(dict(obj))
            elif kind == "PersistentVolumeClaim":
                pvcs[f"{meta.get('namespace') or namespace}/{name}"] = dict(obj)
            elif kind == "PersistentVolume":
                pvs[name] = dict(obj)
            elif kind == "VolumeAttachment":
                attachments.append(dict(obj))
            elif kind == "Node":
                nodes[name] = dict(obj)
        return cls(
            pods, pvcs, pvs, attachments, nodes if node_access else None, namespace=namespace
        )


# --------------------------------------------------------------------------------------------------
# YAML


def flatten_objects(documents: Iterable[object], source: str) -> list[dict]:
    """Objects from YAML documents, expanding ``kind: List`` (and ``PodList`` ...) items."""
    objects: list[dict] = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise StateError(f"{source}: document {index + 1} is not a mapping")
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List"):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise StateError(f"{source}: document {index + 1}: items is not a list")
            item_kind = kind[: -len("List")] or None
            for item in items:
                if not isinstance(item, dict):
                    raise StateError(f"{source}: document {index + 1}: an item is not a mapping")
                if "kind" not in item and item_kind:
                    item = {**item, "kind": item_kind}
                objects.append(item)
        else:
            objects.append(doc)
    return objects


def read_yaml(path: str | Path) -> list[dict]:
    """All objects in a YAML file, or StateError naming the file and the problem."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise StateError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        problem = str(exc).replace("\n", " ")
        raise StateError(f"{path}: not valid YAML: {problem}") from None
    return flatten_objects(documents, str(path))
