"""ClusterState: the objects a decision needs, and the loaders that fill it.

Three sources: plain objects (tests, benchmarks), a YAML dump (``kubectl get ... -o yaml``, used by
``nebari-colocate simulate``) and the Kubernetes API (the spawner, ``explain``).  Objects are kept
as the camelCase dicts the API returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("Node", "Pod", "PersistentVolumeClaim", "PersistentVolume", "VolumeAttachment")


class StateError(Exception):
    """The state could not be gathered or read; the message names the source and the problem."""


@dataclass
class ClusterState:
    """What ``decide`` sees.  ``None`` for nodes / volume_attachments means "not readable"."""

    pods: list[dict] = field(default_factory=list)
    pvcs: dict[str, dict] = field(default_factory=dict)  # "namespace/name" -> PVC
    pvs: dict[str, dict] = field(default_factory=dict)  # name -> PV
    volume_attachments: list[dict] | None = field(default_factory=list)
    nodes: dict[str, dict] | None = field(default_factory=dict)
    #: the pods of *every* namespace on the pinned node are in ``pods``
    node_pods_complete: bool = True
    namespace: str = "default"

    def _index(self) -> tuple[dict, dict]:
        """Pods by ``namespace/claim`` and by node, built once per pod list (decide stays
        proportional to the user's pods and the pinned node's pods, not the cluster's)."""
        key = (id(self.pods), len(self.pods))
        cached = self.__dict__.get("_index_cache")
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        by_claim: dict[str, list[dict]] = {}
        by_node: dict[str, list[dict]] = {}
        for pod in self.pods:
            spec = pod.get("spec") or {}
            namespace = (pod.get("metadata") or {}).get("namespace") or self.namespace
            for volume in spec.get("volumes") or []:
                claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
                if claim:
                    by_claim.setdefault(f"{namespace}/{claim}", []).append(pod)
            if spec.get("nodeName"):
                by_node.setdefault(spec["nodeName"], []).append(pod)
        self.__dict__["_index_cache"] = (key, by_claim, by_node)
        return by_claim, by_node

    def pods_mounting(self, namespace: str, claim: str) -> list[dict]:
        """Pods of ``namespace`` with a volume of claim ``claim``."""
        return self._index()[0].get(f"{namespace}/{claim}", [])

    def pods_on_node(self, node_name: str) -> list[dict]:
        """Pods (any namespace) with ``spec.nodeName == node_name``."""
        return self._index()[1].get(node_name, [])

    def requests_of(self, pod: Mapping) -> Mapping[str, int]:
        """``fit.pod_requests`` of a pod of this state, computed once per pod."""
        from .fit import pod_requests

        memo = self.__dict__.setdefault("_requests_memo", {})
        entry = memo.get(id(pod))
        if entry is None or entry[0] is not pod:
            entry = memo[id(pod)] = (pod, pod_requests(pod))
        return entry[1]

    def node_usage(self, node_name: str, exclude: str | None = None) -> tuple[dict, int]:
        """(requests, pod count) of the non-terminal pods on a node, summed once per node;
        ``exclude`` (``namespace/name``) is a pod not to count (the one being replaced)."""
        from .fit import node_usage

        memo = self.__dict__.setdefault("_usage_memo", {})
        key = (node_name, id(self.pods), len(self.pods))
        if key not in memo:
            memo[key] = node_usage(
                node_name, self.pods_on_node(node_name), requests_of=self.requests_of
            )
        used, count = memo[key]
        if exclude is not None:
            for pod in self.pods_on_node(node_name):
                meta = pod.get("metadata") or {}
                if f"{meta.get('namespace')}/{meta.get('name')}" != exclude:
                    continue
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                used = dict(used)
                for name, value in self.requests_of(pod).items():
                    used[name] = used.get(name, 0) - value
                count -= 1
        return used, count

    def pvc(self, namespace: str, name: str) -> dict | None:
        return self.pvcs.get(f"{namespace}/{name}")

    def bound_pv(self, namespace: str, claim: str) -> dict | None:
        pvc = self.pvc(namespace, claim)
        volume = ((pvc or {}).get("spec") or {}).get("volumeName")
        return self.pvs.get(volume) if volume else None

    @classmethod
    def from_objects(
        cls, objects: Iterable[Mapping], *, namespace: str = "default", node_access: bool = True
    ) -> ClusterState:
        """Sort objects by kind; other kinds are ignored.  ``node_access=False`` drops Nodes."""
        state = cls(namespace=namespace, nodes={} if node_access else None)
        for obj in objects:
            kind = obj.get("kind")
            meta = obj.get("metadata") or {}
            name = meta.get("name", "")
            if kind == "Pod":
                state.pods.append(dict(obj))
            elif kind == "PersistentVolumeClaim":
                state.pvcs[f"{meta.get('namespace') or namespace}/{name}"] = dict(obj)
            elif kind == "PersistentVolume":
                state.pvs[name] = dict(obj)
            elif kind == "VolumeAttachment":
                assert state.volume_attachments is not None
                state.volume_attachments.append(dict(obj))
            elif kind == "Node" and state.nodes is not None:
                state.nodes[name] = dict(obj)
        return state


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


#: the largest file read: a 20,000-pod dump is about 60 MB
MAX_FILE_BYTES = 256 * 2**20
#: aliases may repeat at most this many nodes beyond the document's own (an alias bomb
#: expands a few hundred bytes into billions)
MAX_ALIAS_EXPANSION = 100_000
_ANCHOR = re.compile(r"(?:^|[\s\[{,])&[^\s]")
#: integer scalars longer than this stay text (int() of a huge literal is quadratic in 3.10)
_LONGEST_INT = 100


def _loader():
    """The C YAML loader (libyaml) when PyYAML has it, else the pure-Python one; both safe."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):
        pass

    def construct_int(loader, node):
        if len(node.value) > _LONGEST_INT:
            return node.value  # a quantity reader takes the text (and saturates it)
        return yaml.SafeLoader.construct_yaml_int(loader, node)

    Loader.add_constructor("tag:yaml.org,2002:int", construct_int)
    return Loader


def _expansion_problem(documents: list) -> str | None:
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


def _fast_documents(text: str) -> list | None:
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
def _quiet_stderr():
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


def parse_documents(text: str, source: str) -> list:
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
        problem = _expansion_problem(documents)
        if problem:
            raise StateError(f"{source}: {problem}")
    return documents


def read_yaml(path: str | Path) -> list[dict]:
    """All objects in a YAML or JSON file, or StateError naming the file and the problem."""
    text = read_text(path)
    return flatten_objects(parse_documents(text, str(path)), str(path))


def read_objects(path: str | Path) -> list[dict]:
    """The objects of the kinds the decision reads (:data:`KINDS`) in a YAML or JSON file, each
    validated as the API would (``nebari_colocate.validate``); StateError names the file, the
    object and the problem."""
    from .validate import InvalidObject, check_objects

    objects = read_yaml(path)
    try:
        check_objects(objects)
    except InvalidObject as exc:
        raise StateError(f"{path}: {exc}") from None
    return [o for o in objects if o.get("kind") in KINDS]


# --------------------------------------------------------------------------------------------------
# Kubernetes API


async def read_json(call, *args, **kwargs) -> dict:
    """Call a kubernetes_asyncio method and return the raw camelCase JSON.

    With ``_preload_content=False`` kubernetes_asyncio returns error responses instead of raising
    (its status check runs only when it preloads), so check the status here.
    """
    from kubernetes_asyncio.client.exceptions import ApiException

    response = await call(*args, _preload_content=False, **kwargs)
    try:
        body = await response.read()
        if not 200 <= response.status <= 299:
            raise ApiException(status=response.status, reason=response.reason)
        return json.loads(body)
    finally:
        response.release()


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status", None)


async def _optional(call, *args, **kwargs) -> dict | None:
    """None for 404 (absent); ``PermissionError`` for 401/403 (not readable)."""
    try:
        return await read_json(call, *args, **kwargs)
    except Exception as exc:
        status = _status(exc)
        if status == 404:
            return None
        if status in (401, 403):
            raise PermissionError(str(status)) from exc
        raise


async def load_from_api(
    api_client,
    pod: Mapping,
    *,
    namespace: str,
    cached_pods: Iterable[Mapping] | None = None,
    read_cluster: bool = True,
) -> ClusterState:
    """Gather the state for one decision.

    ``cached_pods``: the pod reflector's cache when it runs (saves the namespaced list call).
    ``read_cluster``: try Nodes, PVs and VolumeAttachments (cluster-scoped; a 403 just marks them
    unreadable).  Other API errors propagate: the caller takes the safe side.
    """
    from kubernetes_asyncio import client

    from .placement import holds_volume, pod_claims

    core = client.CoreV1Api(api_client)
    storage = client.StorageV1Api(api_client)
    state = ClusterState(namespace=namespace)

    claims = pod_claims(pod)

    async def read_claim(name: str) -> None:
        try:
            pvc = await _optional(core.read_namespaced_persistent_volume_claim, name, namespace)
        except PermissionError:
            pvc = None
        if pvc is not None:
            state.pvcs[f"{namespace}/{name}"] = pvc

    async def read_pods() -> None:
        if cached_pods is not None:
            state.pods = [
                p
                for p in cached_pods
                if p.get("metadata", {}).get("namespace") in (None, namespace)
            ]
        else:
            listing = await read_json(core.list_namespaced_pod, namespace)
            state.pods = listing.get("items") or []

    await asyncio.gather(read_pods(), *(read_claim(c) for c in claims))

    own = (pod.get("metadata") or {}).get("name")
    holder_nodes = {
        p["spec"]["nodeName"]
        for p in state.pods
        if holds_volume(p)
        and p.get("metadata", {}).get("name") != own
        and set(pod_claims(p)) & set(claims)
    }
    volume_names = {(pvc.get("spec") or {}).get("volumeName") for pvc in state.pvcs.values()} - {
        None,
        "",
    }

    if not read_cluster:
        state.nodes, state.volume_attachments = None, None
        return state

    if not holder_nodes and volume_names:
        try:
            listing = await read_json(storage.list_volume_attachment)
            state.volume_attachments = listing.get("items") or []
        except Exception as exc:
            if _status(exc) not in (401, 403):
                raise
            state.volume_attachments = None
        holder_nodes = {
            va["spec"].get("nodeName")
            for va in state.volume_attachments or []
            if (va.get("spec", {}).get("source") or {}).get("persistentVolumeName") in volume_names
            and (va.get("status") or {}).get("attached") is True
        } - {None}

    if len(holder_nodes) != 1:
        return state
    (node_name,) = holder_nodes

    async def read_node() -> None:
        try:
            node = await _optional(core.read_node, node_name)
        except PermissionError:
            state.nodes = None
            return
        if node is not None and state.nodes is not None:
            state.nodes[node_name] = node

    async def read_node_pods() -> None:
        try:
            listing = await read_json(
                core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node_name}"
            )
        except Exception as exc:
            if _status(exc) not in (401, 403):
                raise
            state.node_pods_complete = False
            return
        seen = {(p["metadata"].get("namespace"), p["metadata"]["name"]) for p in state.pods}
        for item in listing.get("items") or []:
            if (item["metadata"].get("namespace"), item["metadata"]["name"]) not in seen:
                state.pods.append(item)

    async def read_pv(name: str) -> None:
        try:
            pv = await _optional(core.read_persistent_volume, name)
        except PermissionError:
            return
        if pv is not None:
            state.pvs[name] = pv

    await asyncio.gather(read_node(), *(read_pv(v) for v in sorted(volume_names)))
    if state.nodes is not None:
        await read_node_pods()
    return state
