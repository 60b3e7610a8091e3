"""ClusterState: the objects a decision needs, as one immutable snapshot; and the YAML reader.

Two sources fill it: plain objects (tests, benchmarks, a YAML dump read by ``nebari-colocate
simulate``) and the live view of the cluster (:mod:`nebari_colocate.view`, the spawner,
``explain`` and ``audit``).  Objects are kept as the camelCase dicts the API returns.  Every index
is built once, in the constructor, and the snapshot is read-only afterwards (like kube-scheduler's
``NewSnapshot``): a decision costs the user's pods and the pinned node's pods, not the cluster's.
"""

from __future__ import annotations

import contextlib
import enum
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

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
from .validate import InvalidObject, check_objects

if TYPE_CHECKING:  # imported when a file is read: the pure core never needs it
    import yaml

KINDS = (
    "Node",
    "Pod",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "VolumeAttachment",
    "RuntimeClass",  # its overhead, which admission adds to a pod naming it
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
    """

    __slots__ = (
        "_attachments_by_disk",
        "_attachments_by_pv",
        "_by_claim",
        "_by_node",
        "_pvs_by_disk",
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
    namespace: str
    pods: tuple[Obj, ...]
    pvcs: Mapping[str, Obj]  # "namespace/name" -> PVC
    pvs: Mapping[str, Obj]  # name -> PV
    volume_attachments: tuple[Obj, ...] | None
    nodes: Mapping[str, Obj] | None
    node_pods_complete: bool
    notes: tuple[str, ...]
    _by_claim: Mapping[str, tuple[Obj, ...]]
    _by_node: Mapping[str, tuple[Obj, ...]]
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

        by_claim: dict[str, list[Obj]] = {}
        by_node: dict[str, list[Obj]] = {}
        for pod in self.pods:
            pod_namespace = meta(pod).get("namespace") or namespace
            for claim in pod_claims(pod):
                by_claim.setdefault(f"{pod_namespace}/{claim}", []).append(pod)
            node_name = spec(pod).get("nodeName")
            if node_name:
                by_node.setdefault(node_name, []).append(pod)
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
        return cls(
            pods, pvcs, pvs, attachments, nodes if node_access else None, namespace=namespace
        )


# --------------------------------------------------------------------------------------------------
# YAML


def flatten_objects(documents: Iterable[object], source: str) -> list[JsonDict]:
    """Objects from YAML documents, expanding ``kind: List`` (and ``PodList`` ...) items."""
    objects: list[JsonDict] = []
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


#: the largest file read: a 20,000-pod dump is about 60 MB
MAX_FILE_BYTES = 256 * 2**20
#: aliases may repeat at most this many nodes beyond the document's own (an alias bomb
#: expands a few hundred bytes into billions)
MAX_ALIAS_EXPANSION = 100_000
_ANCHOR = re.compile(r"(?:^|[\s\[{,])&[^\s]")
#: integer scalars longer than this stay text (int() of a huge literal is quadratic in 3.10)
_LONGEST_INT = 100


def _loader() -> type[yaml.SafeLoader | yaml.CSafeLoader]:
    """The C YAML loader (libyaml) when PyYAML has it, else the pure-Python one; both safe."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    # A subclass of its own, so the constructor below does not change PyYAML's loaders.
    loader = cast("type[yaml.SafeLoader | yaml.CSafeLoader]", type("Loader", (base,), {}))

    def construct_int(constructor: yaml.SafeLoader, node: yaml.ScalarNode) -> int | str:
        if len(node.value) > _LONGEST_INT:
            return str(node.value)  # a quantity reader takes the text (and saturates it)
        return yaml.SafeLoader.construct_yaml_int(constructor, node)

    loader.add_constructor("tag:yaml.org,2002:int", construct_int)
    return loader


def _expansion_problem(documents: list[Any]) -> str | None:
    """Why the documents' aliases make them unreadable (recursion, an alias bomb), or None.

    Counts the nodes of the tree with every alias expanded, in time proportional to the distinct
    nodes: each shared mapping or list is sized once.
    """
    sizes: dict[int, int] = {}
    distinct = 0
    on_path: set[int] = set()
    stack: list[tuple[object, bool]] = [(doc, False) for doc in documents]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        key = id(node)
        items = list(node.values()) if isinstance(node, dict) else node
        if children_done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes.get(id(i), 1) for i in items)
            continue
        if key in sizes:
            continue
        if key in on_path:
            return "an alias refers to an object that contains it (recursive YAML)"
        distinct += 1
        on_path.add(key)
        stack.append((node, True))
        stack.extend((i, False) for i in items if isinstance(i, (dict, list)))
    expanded = sum(sizes.get(id(d), 1) for d in documents)
    if expanded > 2 * distinct + MAX_ALIAS_EXPANSION:
        return (
            f"its aliases expand {distinct} mappings and lists into {expanded} "
            "(an alias bomb?); kubectl never writes aliases: expand them or remove them"
        )
    return None


def read_text(path: str | Path, *, max_bytes: int | None = None) -> str:
    """The text of a user-supplied file, or StateError naming the file and the problem
    (unreadable, larger than ``max_bytes`` (default :data:`MAX_FILE_BYTES`), not UTF-8 text)."""
    path = Path(path)
    max_bytes = MAX_FILE_BYTES if max_bytes is None else max_bytes
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise StateError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise StateError(
            f"{path}: larger than {max_bytes // 2**20} MiB; split the dump (one namespace, or "
            "only the nodes and pods involved)"
        )
    if b"\0" in data:
        raise StateError(f"{path}: a binary file (NUL byte at offset {data.index(0)}), not YAML")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise StateError(f"{path}: not UTF-8 text (invalid byte at offset {exc.start})") from None


#: below this size PyYAML's C loader is fast enough; above it rapidyaml is used when installed
FAST_YAML_BYTES = 1 << 20
# Plain scalars that YAML 1.1 (PyYAML, and Kubernetes' own YAML reader) types differently from
# rapidyaml's JSON output: yes/no/on/off, ~, octal, hexadecimal, sexagesimal, .inf/.nan, dates,
# underscores in numbers, exponents without a dot, and numbers JSON does not have (+1, 01, .5).
_YAML_1_1_BODY = (
    r"(?=[-+.~0-9yYnNoOTF])(?:(?:[yYnN]|[yY]es|YES|[nN]o|NO|[oO]n|ON|[oO]ff|OFF|True|TRUE|False"
    r"|FALSE|Null|NULL|~|[-+]?0b[01_]+|[-+]?0[0-7_]+|[-+]?0x[0-9a-fA-F_]+"
    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?|[-+]?[0-9][0-9_]*_[0-9_]*(?:\.[0-9_]*)?"
    r"|\+[0-9.][0-9_.eE+-]*|[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF|nan|NaN|NAN)"
    r"|[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+|[-+]?[0-9]+\."
    r")(?=[ \t]*(?:$|[,\]}]|[ \t]#))|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2})"
)
# A mapping value or a sequence item; each pattern starts with a literal, which the regular
# expression engine finds at memchr speed (one alternation of both is five times slower).
_YAML_1_1_ONLY = tuple(re.compile(p + _YAML_1_1_BODY, re.MULTILINE) for p in (": ", "- "))
_TAG = re.compile(r"(?:^|[\s\[{,])!")


def _fast_documents(text: str) -> list[Any] | None:
    """The documents of a big dump through rapidyaml (C++) and the json module, ten to twenty
    times faster than PyYAML's C loader; None where it does not apply (not installed, a small
    file, anchors, tags, or a plain scalar YAML 1.1 reads differently), or fails."""
    if len(text) < FAST_YAML_BYTES:
        return None
    try:
        import ryml
    except ImportError:
        return None
    if _ANCHOR.search(text) or _TAG.search(text) or any(p.search(text) for p in _YAML_1_1_ONLY):
        return None
    try:
        with _quiet_stderr():  # rapidyaml reports its errors on file descriptor 2 as well
            # Parsed in place (no copy into an arena); the tree and the buffer are dropped
            # before the JSON becomes Python objects, which keeps the peak memory down.
            buffer = bytearray(text, "utf-8")
            tree = ryml.parse_in_place(buffer)
            root = tree.root_id()
            ids = [root]
            if tree.is_stream(root):
                ids, child = [], tree.first_child(root)
                while child != ryml.NONE:
                    ids.append(child)
                    child = tree.next_sibling(child)
            emitted = [ryml.emit_json_malloc(tree, i) for i in ids]
        del tree, buffer
        return [json.loads(emitted.pop(0)) for _ in range(len(emitted))]
    except Exception:  # a parse or depth error: PyYAML reads it again and names the problem
        return None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def parse_documents(text: str, source: str) -> list[Any]:
    """YAML (or JSON, which is YAML) documents of ``text``; StateError names ``source``."""
    import yaml

    stripped = text.lstrip()
    try:
        if stripped[:1] in ("{", "["):
            # JSON: the json module is several times faster than any YAML loader.
            try:
                return [json.loads(text)]
            except ValueError:
                pass  # flow-style YAML, or broken JSON: let the YAML loader say where
        fast = _fast_documents(text)
        if fast is not None:
            return fast
        documents = list(yaml.load_all(text, Loader=_loader()))
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise StateError(f"{source}: not valid YAML: {problem}") from None
    except RecursionError:
        raise StateError(f"{source}: nested too deeply to be a Kubernetes object") from None
    if _ANCHOR.search(text):  # no anchor, no alias: nothing to expand
        expansion = _expansion_problem(documents)
        if expansion:
            raise StateError(f"{source}: {expansion}")
    return documents


def read_yaml(path: str | Path) -> list[JsonDict]:
    """All objects in a YAML or JSON file, or StateError naming the file and the problem."""
    text = read_text(path)
    return flatten_objects(parse_documents(text, str(path)), str(path))


def read_objects(
    path: str | Path,
    *,
    read: Callable[[Obj], bool] | None = None,
    saturated: list[str] | None = None,
) -> list[JsonDict]:
    """The objects of the kinds the decision reads (:data:`KINDS`) in a YAML or JSON file, each
    validated as the API would (``nebari_colocate.validate``); StateError names the file, the
    object and the problem.  ``read`` and ``saturated``: see ``validate.check_objects`` (a
    quantity beyond int64 in an object the decision does not read is recorded, not refused)."""
    return checked_objects(read_yaml(path), path, read=read, saturated=saturated)


def checked_objects(
    objects: list[JsonDict],
    path: str | Path,
    *,
    read: Callable[[Obj], bool] | None = None,
    saturated: list[str] | None = None,
) -> list[JsonDict]:
    """:func:`read_objects` on objects already read from ``path`` (the same checks and names)."""
    found: list[str] = []
    try:
        check_objects(objects, read=read, saturated=found if read is not None else None)
    except InvalidObject as exc:
        raise StateError(f"{path}: {exc}") from None
    if saturated is not None:
        saturated.extend(f"{path}: {line}" for line in found)
    return [o for o in objects if o.get("kind") in KINDS]


def read_by_decision(pod: Obj, namespace: str) -> Callable[[Obj], bool]:
    """Whether the decision on ``pod`` reads an object itself, rather than only summing it into
    a node's usage: the pod's claims and the pods of its namespace that mount them."""
    claims = set(pod_claims(pod))

    def read(obj: Obj) -> bool:
        if (meta(obj).get("namespace") or namespace) != namespace:
            return False
        if obj.get("kind") == "PersistentVolumeClaim":
            return meta(obj).get("name") in claims
        if obj.get("kind") == "Pod":
            return bool(claims.intersection(pod_claims(obj)))
        return False

    return read
