"""The live view of the cluster: the only module that talks to the Kubernetes API for the check,
``explain`` and ``audit`` (see ``docs/decisions.md``, "What it reads").

Two readers with one interface, ``await reader.state_for(pod)`` -> :class:`ClusterState`:

- :class:`ClusterView`: the view of one namespace on watches shared by every spawner of the hub
  (:class:`HubWatches`: one set per event loop whatever the number of namespaces, started
  lazily by the first check): every pod and claim (of the cluster where RBAC allows it, else of
  each namespace; whatever its labels: a backup Job's pod holds a claim as surely as a server
  does), and where RBAC allows it Nodes, PersistentVolumes and VolumeAttachments.  Indexes by
  claim, by node and by disk are updated per watch event, so a check reads the user's pods and
  the pinned node's pods, never the whole cache.  A collection whose watch broke (connection
  error, API restart, 410 Gone) or went silent (no event or bookmark for ``stale_after``) is
  re-listed; until it is live again the view is not trusted and the check reads the API
  directly, which the log and a metric say.
- :class:`DirectReader`: plain reads for one decision (the fallback, and ``explain`` / ``audit``,
  which run once and need no watch).

Objects are kept as the camelCase dicts the API returns; the view keeps of each pod only the
fields a decision, a message or a report reads (:func:`slim_pod`), which keeps a hub watching
10,000 pods small.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

from . import metrics
from .config import DEFAULT_WATCH_STALE_SECONDS, FRESH_SECONDS
from .kubeapi import ApiCall, ApiError, forbidden, list_all, read_json, read_json_or_none
from .objects import (
    JsonDict,
    Obj,
    attached_nodes,
    attachment_pv,
    claim_ref,
    holds_volume,
    known_shared,
    pod_claims,
    volume_identity,
)
from .state import ClusterState

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: reads RBAC may deny, as (verb, what) facts; the CLI and the log put them in words
NODES_GET = ("get", "nodes")
NODES_LIST = ("list", "nodes")
PVS_GET = ("get", "persistentvolumes")
PVS_LIST = ("list", "persistentvolumes")
OTHER_PODS_LIST = ("list", "pods in other namespaces")
ATTACHMENTS_LIST = ("list", "volumeattachments")
ALL_PODS_LIST = ("list", "pods in all namespaces")


# --------------------------------------------------------------------------------------------------
# what the view keeps of a pod


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
    for key in ("resources", "restartPolicy"):
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
    ("schedulerName", False),
)
_META_KEPT = (
    ("name", False),
    ("namespace", False),
    ("labels", True),
    ("annotations", True),
    ("deletionTimestamp", False),
    ("resourceVersion", False),
)


def _no_share(value: _T) -> _T:
    return value


def slim_pod(pod: Obj, share: Callable[[Any], Any] = _no_share) -> JsonDict:
    """The fields of a pod a decision, a message or a report reads: who owns it, where it is
    bound, its claims, what it requests and how it selects nodes, and its phase.  (pure)

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
    phase = (pod.get("status") or {}).get("phase")
    slim_meta = {k: (share(meta[k]) if s else meta[k]) for k, s in _META_KEPT if k in meta}
    return {
        "kind": "Pod",
        "metadata": slim_meta,
        "spec": slim_spec,
        "status": share({"phase": phase} if phase else {}),
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


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


# --------------------------------------------------------------------------------------------------
# one watched collection


class Collection:
    """One collection kept by LIST, then WATCH from its resourceVersion; re-listed after a 410
    or any error.  ``live`` only while listed and watching with no error since."""

    #: seconds kube-apiserver keeps one WATCH open (it ends it; we watch again at once)
    watch_timeout_seconds: ClassVar[int] = 300
    #: seconds between attempts while the API fails, doubling up to ``max_backoff``
    min_backoff: ClassVar[float] = 0.2
    max_backoff: ClassVar[float] = 10.0
    #: after a 403, ask again this much later (RBAC may be granted while the hub runs)
    forbidden_retry_seconds: ClassVar[float] = 600.0
    #: objects per page of a LIST
    page_size: ClassVar[int] = 500
    #: seconds without an event or a bookmark after which a WATCH counts as dead (its network
    #: path may be gone while the connection looks open): kube-apiserver sends a bookmark about
    #: every minute even when nothing changes.  The view sets it (``stale_after``).
    stale_after: float = DEFAULT_WATCH_STALE_SECONDS

    def __init__(
        self,
        name: str,
        method: ApiCall,
        args: tuple[Any, ...] = (),
        *,
        transform: Callable[[JsonDict], JsonDict] | None = None,
        on_change: Callable[[JsonDict | None, JsonDict | None], None] | None = None,
        on_forbidden: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        #: called on a 401/403 instead of asking again later (the collection stops)
        self._on_forbidden = on_forbidden
        self._method = method
        self._args = args
        self._transform = transform
        self._on_change = on_change
        self.items: dict[str, JsonDict] = {}
        self.live = False
        self.forbidden = False
        #: set once the first LIST answered (listed, or forbidden)
        self.settled = asyncio.Event()
        self.error: str | None = None
        self.resyncs = 0
        self.resource_version: str | None = None
        #: time.monotonic() of the last proof that the watch's path carries data: the LIST, the
        #: WATCH's answer, any event or bookmark (None before the first)
        self.last_seen: float | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    def quiet_seconds(self) -> float:
        """Seconds since the last event or bookmark (or LIST); infinite before the first."""
        return float("inf") if self.last_seen is None else time.monotonic() - self.last_seen

    def relist(self) -> None:
        """Drop the current WATCH and list again (it may be silent on a dead path); not live
        until the LIST answered."""
        if self._task is None or self._task.done() or self.forbidden:
            return
        self._task.cancel()
        self._task = None
        self._set_live(False)
        self.error = f"no event or bookmark for {self.quiet_seconds():.0f} s: listing again"
        self.last_seen = None
        self.resyncs += 1
        metrics.observe_view_resync(self.name)
        log.warning("colocate: watch of %s is quiet; %s", self.name, self.error)
        self.start()

    async def stop(self) -> None:
        task, self._task = self._task, None
        self._set_live(False)
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    def _set_live(self, live: bool) -> None:
        if live != self.live:
            self.live = live
            metrics.observe_view_live(self.name, live)

    def _put(self, obj: JsonDict) -> None:
        obj = self._transform(obj) if self._transform else dict(obj)
        key = _key(obj)
        old = self.items.get(key)
        self.items[key] = obj
        if self._on_change:
            self._on_change(old, obj)

    def _drop(self, obj: Obj) -> None:
        old = self.items.pop(_key(obj), None)
        if old is not None and self._on_change:
            self._on_change(old, None)

    def _replace_all(self, items: Iterable[JsonDict], transformed: bool = False) -> None:
        fresh: dict[str, JsonDict] = {}
        for obj in items:
            if not transformed:
                obj = self._transform(obj) if self._transform else dict(obj)
            fresh[_key(obj)] = obj
        old_items, self.items = self.items, fresh
        if self._on_change:
            for key, old in old_items.items():
                if key not in fresh:
                    self._on_change(old, None)
            for key, obj in fresh.items():
                self._on_change(old_items.get(key), obj)

    async def _list(self) -> None:
        # Pages keep the parsed JSON of a large collection small while it is slimmed.
        items, version = await list_all(
            self._method, *self._args, transform=self._transform, page_size=self.page_size
        )
        self._replace_all(items, transformed=True)
        self.resource_version = version
        self.last_seen = time.monotonic()

    async def _watch(self) -> None:
        """One WATCH until the server ends it (normal) or it fails (raises)."""
        import aiohttp

        response = await self._method(
            *self._args,
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout_seconds,
            _request_timeout=aiohttp.ClientTimeout(
                total=self.watch_timeout_seconds + 30, sock_read=self.stale_after
            ),
            _preload_content=False,
        )
        try:
            if response.status != 200:
                raise ApiError(response.status, response.reason or "", f"watch {self.name}")
            self._set_live(True)
            self.last_seen = time.monotonic()
            buffer = b""
            async for chunk in response.content.iter_any():
                lines = (buffer + chunk).split(b"\n")
                buffer = lines.pop()  # the start of the next event, or b""
                for line in lines:
                    if line.strip():
                        self._event(json.loads(line))
        finally:
            response.release()

    def _event(self, event: Obj) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "ERROR":
            raise ApiError(obj.get("code") or 500, obj.get("reason") or "", obj.get("message", ""))
        if kind in ("ADDED", "MODIFIED"):
            self._put(obj)
        elif kind == "DELETED":
            self._drop(obj)
        if version:
            self.resource_version = version
        self.last_seen = time.monotonic()  # an event or a bookmark: the path carries data

    async def _run(self) -> None:
        backoff = self.min_backoff
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    self.forbidden = False
                    need_list = False
                    self.settled.set()
                await self._watch()
                backoff = self.min_backoff  # the server ended the WATCH: watch again
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._set_live(False)
                self.error = f"{type(exc).__name__}: {exc}"
                if forbidden(exc):
                    self.forbidden = True
                    self._replace_all([])
                    self.settled.set()
                    if self._on_forbidden is not None:
                        self._on_forbidden()
                        return
                    await asyncio.sleep(self.forbidden_retry_seconds)
                    need_list = True
                    continue
                # 410 Gone (the version is compacted), an API restart, a dropped connection:
                # whatever happened while we were away is unknown, so list again.
                need_list = True
                self.resyncs += 1
                metrics.observe_view_resync(self.name)
                log.warning(
                    "colocate: watch of %s broke (%s); the live view is not trusted until it is "
                    "listed again",
                    self.name,
                    self.error,
                )
                await asyncio.sleep(backoff * (1 + random.random() / 2))
                backoff = min(backoff * 2, self.max_backoff)


# --------------------------------------------------------------------------------------------------
# indexes


class _Index:
    """key -> {object key: object}, kept up to date from a collection's changes."""

    def __init__(self, keys_of: Callable[[Obj], Iterable[str]]) -> None:
        self._keys_of = keys_of
        self.entries: dict[str, dict[str, JsonDict]] = {}

    def change(self, old: JsonDict | None, new: JsonDict | None) -> None:
        if old is not None:
            name = _key(old)
            for key in self._keys_of(old):
                bucket = self.entries.get(key)
                if bucket is not None:
                    bucket.pop(name, None)
                    if not bucket:
                        del self.entries[key]
        if new is not None:
            name = _key(new)
            for key in self._keys_of(new):
                self.entries.setdefault(key, {})[name] = new

    def get(self, key: str) -> list[JsonDict]:
        return list((self.entries.get(key) or {}).values())


def _claim_keys(pod: Obj) -> list[str]:
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    return [f"{namespace}/{c}" for c in pod_claims(pod)]


def _node_keys(pod: Obj) -> list[str]:
    node = (pod.get("spec") or {}).get("nodeName")
    return [node] if node else []


def _attachment_keys(va: Obj) -> list[str]:
    pv = attachment_pv(va)
    return [pv] if pv else []


def _disk_key(disk: tuple[str, str]) -> str:
    return "^".join(disk)  # kube-controller-manager's unique volume name joins them so


def _disk_keys(pv: Obj) -> list[str]:
    disk = volume_identity(pv)
    return [_disk_key(disk)] if disk else []


def _pv_names(pvcs: Iterable[Obj]) -> set[str]:
    return {name for p in pvcs if (name := (p.get("spec") or {}).get("volumeName"))}


def _modes(pvc: Obj | None) -> list[str] | None:
    """A claim's access modes; None when the claim is not known."""
    return None if pvc is None else list((pvc.get("spec") or {}).get("accessModes") or [])


def _candidate_nodes(claims_pods: Iterable[Obj], attachments: Iterable[Obj]) -> set[str]:
    """Nodes a decision may pin to: of the pods holding the claims, else of attachments."""
    # a pod that holds a volume is bound: its nodeName is set
    nodes: set[str] = {p["spec"]["nodeName"] for p in claims_pods if holds_volume(p)}
    return nodes or attached_nodes(attachments)


# --------------------------------------------------------------------------------------------------
# direct reads


class DirectReader:
    """Plain API reads for one decision, or for ``explain`` / ``audit``.

    ``denied`` collects the reads RBAC refused, as ``(verb, what)`` facts.
    """

    def __init__(self, api_client: Any, namespace: str) -> None:
        from kubernetes_asyncio import client

        self.namespace = namespace
        self.core = client.CoreV1Api(api_client)
        self.storage = client.StorageV1Api(api_client)
        self.denied: list[tuple[str, str]] = []
        self.pods: list[JsonDict] | None = None
        self.pvcs: dict[str, JsonDict] | None = None

    def _deny(self, fact: tuple[str, str]) -> None:
        if fact not in self.denied:
            self.denied.append(fact)

    async def _optional(
        self, fact: tuple[str, str], call: ApiCall, *args: Any, **kwargs: Any
    ) -> JsonDict | None:
        """None for 404 or when RBAC refuses (noted in ``denied``)."""
        try:
            return await read_json_or_none(call, *args, **kwargs)
        except Exception as exc:
            if forbidden(exc):
                self._deny(fact)
                return None
            raise

    async def read_namespace(self) -> None:
        """The namespace's pods and claims (errors propagate: nothing works without them)."""
        if self.pods is not None:
            return
        shared = Shared()
        (pods, _), (pvcs, _) = await asyncio.gather(
            list_all(
                self.core.list_namespaced_pod,
                self.namespace,
                transform=lambda p: slim_pod(p, shared),
            ),
            list_all(self.core.list_namespaced_persistent_volume_claim, self.namespace),
        )
        self.pods = pods
        self.pvcs = {
            f"{self.namespace}/{(p.get('metadata') or {}).get('name')}": dict(
                p, kind="PersistentVolumeClaim"
            )
            for p in pvcs
        }

    async def attachments(self) -> list[JsonDict] | None:
        listing = await self._optional(ATTACHMENTS_LIST, self.storage.list_volume_attachment)
        return None if listing is None else listing.get("items") or []

    async def state_for(
        self,
        pod: Obj,
        *,
        extra_claims: Iterable[str] = (),
        extra_nodes: Iterable[str] = (),
    ) -> ClusterState:
        """The state for deciding on ``pod`` (and, for ``explain``, on the user's other claims
        and nodes): the namespace's pods and claims, the claims' PVs and attachments, the node
        they pin to with every pod bound there."""
        await self.read_namespace()
        assert self.pods is not None and self.pvcs is not None
        claims = list(dict.fromkeys([*pod_claims(pod), *extra_claims]))
        own = [self.pvcs[k] for c in claims if (k := f"{self.namespace}/{c}") in self.pvcs]
        volumes = _pv_names(own)
        # Modes first: only the pods of exclusive claims pin, so only their nodes are read.
        exclusive = [
            c
            for c in claims
            if not known_shared(_modes(self.pvcs.get(f"{self.namespace}/{c}")), pod, c, self.pods)
        ]
        claimers = [p for p in self.pods if set(pod_claims(p)) & set(exclusive)]
        exclusive_volumes = _pv_names(
            self.pvcs[k] for c in exclusive if (k := f"{self.namespace}/{c}") in self.pvcs
        )
        # the same disks through other PVs (same CSI driver and handle) hold them as surely
        sharers, known_pvs = await self._same_disk(exclusive_volumes)
        exclusive_volumes |= known_pvs.keys()
        volumes |= known_pvs.keys()
        claimers += sharers
        attachments: list[JsonDict] | None = []
        holders = _candidate_nodes(claimers, [])
        if (exclusive_volumes and not holders) or (volumes and extra_claims):
            attachments = await self.attachments()
        attachments_of = [va for va in attachments or [] if attachment_pv(va) in exclusive_volumes]
        names = sorted(_candidate_nodes(claimers, attachments_of) | set(extra_nodes))
        found_nodes: dict[str, JsonDict] = {}
        nodes: dict[str, JsonDict] | None = found_nodes  # None: Nodes may not be read
        for name in names:
            node = await self._optional(NODES_GET, self.core.read_node, name)
            if NODES_GET in self.denied:
                nodes = None
                break
            if node is not None:
                found_nodes[name] = node
        pvs: dict[str, JsonDict] = dict(known_pvs)
        for volume in sorted(volumes - pvs.keys()):
            if PVS_GET in self.denied:
                break
            pv = await self._optional(PVS_GET, self.core.read_persistent_volume, volume)
            if pv is not None:
                pvs[volume] = pv
        pods = list(self.pods)
        pods += [p for p in sharers if (p.get("metadata") or {}).get("namespace") != self.namespace]
        complete = True
        if nodes:
            seen = {_key(p) for p in pods}
            for name in sorted(nodes):
                listing = await self._optional(
                    ALL_PODS_LIST,
                    self.core.list_pod_for_all_namespaces,
                    field_selector=f"spec.nodeName={name}",
                )
                if listing is None:
                    complete = False
                    break
                for item in listing.get("items") or []:
                    if _key(item) not in seen:
                        pods.append(slim_pod(item))
        return ClusterState(
            pods,
            self.pvcs,
            pvs,
            attachments,
            nodes,
            node_pods_complete=complete,
            namespace=self.namespace,
        )

    async def _same_disk(self, volumes: set[str]) -> tuple[list[JsonDict], dict[str, JsonDict]]:
        """The disks of ``volumes`` through other PVs (same CSI driver and handle): the pods
        mounting the claims those PVs are bound to, and every PV read (``volumes``' own included),
        by name.  Nothing when PVs may not be listed (noted in ``denied``)."""
        own: dict[str, JsonDict] = {}
        for volume in sorted(volumes):
            pv = await self._optional(PVS_GET, self.core.read_persistent_volume, volume)
            if pv is not None:
                own[volume] = dict(pv, kind="PersistentVolume")
        disks = {d for pv in own.values() if (d := volume_identity(pv))}
        if not disks:
            return [], own
        listing = await self._optional(PVS_LIST, self.core.list_persistent_volume)
        others = {
            str(name): dict(pv, kind="PersistentVolume")
            for pv in (listing or {}).get("items") or []
            if (name := (pv.get("metadata") or {}).get("name"))
            and name not in own
            and volume_identity(pv) in disks
        }
        pods: list[JsonDict] = []
        for name in sorted(others):
            ref = claim_ref(others[name])
            if ref is None:
                continue
            namespace, _, claim = ref.partition("/")
            if namespace == self.namespace:
                assert self.pods is not None
                pods += [p for p in self.pods if claim in pod_claims(p)]
                continue
            found = await self._optional(OTHER_PODS_LIST, self.core.list_namespaced_pod, namespace)
            pods += [
                slim_pod(p) for p in (found or {}).get("items") or [] if claim in pod_claims(p)
            ]
        return pods, {**own, **others}

    async def everything(self) -> ClusterState:
        """For ``audit``: the namespace's pods and claims, every Node and VolumeAttachment."""
        await self.read_namespace()
        listing, attachments = await asyncio.gather(
            self._optional(NODES_LIST, self.core.list_node), self.attachments()
        )
        nodes: dict[str, JsonDict] | None = None
        if listing is not None:
            nodes = {(n.get("metadata") or {}).get("name", ""): n for n in listing["items"] or []}
        assert self.pods is not None
        return ClusterState(
            self.pods,
            self.pvcs,
            {},
            attachments,
            nodes,
            node_pods_complete=False,
            namespace=self.namespace,
        )


# --------------------------------------------------------------------------------------------------
# the live view


class _Gathered:
    """What a check reads from the view, before the snapshot is built."""

    def __init__(self) -> None:
        self.pods: dict[str, JsonDict] = {}
        self.pvcs: dict[str, JsonDict] = {}
        self.pvs: dict[str, JsonDict] = {}
        self.attachments: list[JsonDict] | None = []
        self.nodes: dict[str, JsonDict] | None = {}
        self.complete = True
        #: nodes a watch does not have (just created, or deleted): ask the API
        self.missing_nodes: list[str] = []
        #: the pinned node whose pods of other namespaces need one field-selector LIST
        self.node_pods_from: str | None = None

    def state(self, namespace: str) -> ClusterState:
        return ClusterState(
            self.pods.values(),
            self.pvcs,
            self.pvs,
            self.attachments,
            self.nodes,
            node_pods_complete=self.complete,
            namespace=namespace,
        )


class ViewNotLive(Exception):
    """The view cannot be trusted now (a watch is broken or not listed yet)."""


class HubWatches:
    """The cluster-wide watches of one hub, in one event loop, whatever the number of
    namespaces its servers run in (``enable_user_namespaces``): every pod and every claim of the
    cluster when RBAC allows it, Nodes, PersistentVolumes, VolumeAttachments, and the indexes on
    them.  Each namespace's :class:`ClusterView` reads them; a namespace watches its own pods or
    claims only when the cluster-wide LIST is forbidden."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes_asyncio import client

        self.api_client = api_client
        self._loop = asyncio.get_running_loop()
        self.closed = False
        self._started = False
        core = client.CoreV1Api(api_client)
        storage = client.StorageV1Api(api_client)
        self.core = core
        self.storage = storage
        #: the namespaces' views reading these watches
        self.views: dict[str, ClusterView] = {}
        self.by_claim = _Index(_claim_keys)
        self.by_node = _Index(_node_keys)
        self.attachments_by_pv = _Index(_attachment_keys)
        self.pvs_by_disk = _Index(_disk_keys)
        self.shared = Shared()

        def with_kind(kind: str) -> Callable[[Obj], JsonDict]:
            return lambda obj: dict(obj, kind=kind)

        self.all_pods = Collection(
            "pods (all namespaces)",
            core.list_pod_for_all_namespaces,
            transform=self.slim,
            on_change=self.pods_changed,
            on_forbidden=self._namespace_pods_only,
        )
        self.all_pvcs = Collection(
            "persistentvolumeclaims (all namespaces)",
            core.list_persistent_volume_claim_for_all_namespaces,
            transform=with_kind("PersistentVolumeClaim"),
            on_forbidden=self._namespace_claims_only,
        )
        self.nodes = Collection("nodes", core.list_node, transform=slim_node)
        self.pvs = Collection(
            "persistentvolumes",
            core.list_persistent_volume,
            transform=with_kind("PersistentVolume"),
            on_change=self.pvs_by_disk.change,
        )
        self.attachments = Collection(
            "volumeattachments",
            storage.list_volume_attachment,
            transform=with_kind("VolumeAttachment"),
            on_change=self.attachments_by_pv.change,
        )
        #: whether a field-selector LIST of pods of all namespaces is allowed (None: unknown)
        self.node_pods_listable: bool | None = None

    def slim(self, pod: Obj) -> JsonDict:
        return slim_pod(pod, self.shared)

    def pods_changed(self, old: JsonDict | None, new: JsonDict | None) -> None:
        self.by_claim.change(old, new)
        self.by_node.change(old, new)

    def collections(self) -> list[Collection]:
        """The cluster-wide collections (each one LIST and one WATCH at a time)."""
        return [self.all_pods, self.all_pvcs, self.nodes, self.pvs, self.attachments]

    def usable_in(self, loop: asyncio.AbstractEventLoop) -> bool:
        return self._loop is loop and not self.closed

    def start(self) -> None:
        """Start the watches (idempotent; the first check calls it)."""
        if self._started:
            return
        self._started = True
        for collection in self.collections():
            collection.start()

    def set_stale_after(self, seconds: float) -> None:
        for collection in self.collections():
            collection.stale_after = seconds
        for view in self.views.values():
            for collection in (view.ns_pods, view.ns_pvcs):
                collection.stale_after = seconds

    def _namespace_pods_only(self) -> None:
        """Pods of all namespaces may not be listed or watched: each namespace watches its own."""
        if not self.closed:
            for view in self.views.values():
                view.ns_pods.start()

    def _namespace_claims_only(self) -> None:
        if not self.closed:
            for view in self.views.values():
                view.ns_pvcs.start()

    async def stop(self) -> None:
        self.closed = True
        for collection in self.collections():
            await collection.stop()
        for view in list(self.views.values()):
            await view.stop()


class ClusterView:
    """The live view of one namespace, shared by every spawner of the hub in one event loop:
    the hub's cluster-wide watches (:class:`HubWatches`, one set for every namespace), and this
    namespace's own pods or claims only where RBAC forbids the cluster-wide ones.  Get it with
    :meth:`shared`."""

    _hubs: ClassVar[dict[int, HubWatches]] = {}
    #: seconds the first check waits for the first LISTs before reading the API directly
    first_sync_seconds: ClassVar[float] = 2.0
    #: seconds since a watch's last event or bookmark within which an unpinned decision is taken
    #: from memory alone (else confirmed by one namespaced LIST)
    fresh_seconds: ClassVar[float] = FRESH_SECONDS

    @classmethod
    def shared(cls, api_client: Any, namespace: str) -> ClusterView:
        """The view of ``namespace`` for the running event loop (created on first use), on the
        one set of cluster-wide watches of the loop's hub."""
        loop = asyncio.get_running_loop()
        hub = cls._hubs.get(id(loop))
        if hub is None or not hub.usable_in(loop):
            hub = cls._hubs[id(loop)] = HubWatches(api_client)
        view = hub.views.get(namespace)
        if view is None:
            view = cls(api_client, namespace, hub=hub)
        return view

    @classmethod
    def hubs(cls) -> list[HubWatches]:
        """The hubs' watches that run (one per event loop): tests and metrics count them."""
        return [h for h in cls._hubs.values() if not h.closed]

    @classmethod
    async def stop_all(cls, namespace: str | None = None) -> None:
        """Stop the shared watches (of the hubs that serve ``namespace``, or all): tests and
        benchmarks, to have a hub whose view has not listed yet."""
        for key, hub in list(cls._hubs.items()):
            if namespace is None or namespace in hub.views:
                cls._hubs.pop(key, None)
                await hub.stop()

    def __init__(self, api_client: Any, namespace: str, *, hub: HubWatches | None = None) -> None:
        from kubernetes_asyncio import client

        #: a view made on its own (a benchmark) has watches of its own
        self.hub = hub if hub is not None else HubWatches(api_client)
        self._own_hub = hub is None
        self.namespace = namespace
        self.api_client = api_client
        self._closed = False
        core = client.CoreV1Api(api_client)
        self.core = core
        self.stale_after = DEFAULT_WATCH_STALE_SECONDS
        self.ns_pods = Collection(
            f"pods ({namespace})",
            core.list_namespaced_pod,
            (namespace,),
            transform=self.hub.slim,
            on_change=self.hub.pods_changed,
        )
        self.ns_pvcs = Collection(
            f"persistentvolumeclaims ({namespace})",
            core.list_namespaced_persistent_volume_claim,
            (namespace,),
            transform=lambda obj: dict(obj, kind="PersistentVolumeClaim"),
        )
        self.hub.views[namespace] = self
        self._started = False

    # the hub's collections and indexes, read through this view
    all_pods = property(lambda self: self.hub.all_pods)
    nodes = property(lambda self: self.hub.nodes)
    pvs = property(lambda self: self.hub.pvs)
    attachments = property(lambda self: self.hub.attachments)
    by_claim = property(lambda self: self.hub.by_claim)
    by_node = property(lambda self: self.hub.by_node)
    attachments_by_pv = property(lambda self: self.hub.attachments_by_pv)
    pvs_by_disk = property(lambda self: self.hub.pvs_by_disk)

    @property
    def _node_pods_listable(self) -> bool | None:
        return self.hub.node_pods_listable

    @_node_pods_listable.setter
    def _node_pods_listable(self, value: bool | None) -> None:
        self.hub.node_pods_listable = value

    # ----------------------------------------------------------------------------------------
    # lifecycle

    def start(self) -> None:
        """Start the watches (idempotent; the first check calls it)."""
        self.hub.start()
        if self._started:
            return
        self._started = True
        if self.hub.all_pods.forbidden:
            self.ns_pods.start()
        if self.hub.all_pvcs.forbidden:
            self.ns_pvcs.start()

    async def stop(self) -> None:
        self._closed = True
        if self.hub.views.get(self.namespace) is self:
            del self.hub.views[self.namespace]
        for collection in (self.ns_pods, self.ns_pvcs):
            await collection.stop()
        if self._own_hub:
            await self.hub.stop()

    def _collections(self) -> list[Collection]:
        return [*self.hub.collections(), self.ns_pods, self.ns_pvcs]

    @property
    def pods(self) -> Collection:
        """The pod collection in use."""
        return self.ns_pods if self.hub.all_pods.forbidden else self.hub.all_pods

    @property
    def pvcs(self) -> Collection:
        """The claim collection in use."""
        return self.ns_pvcs if self.hub.all_pvcs.forbidden else self.hub.all_pvcs

    def problems(self) -> list[str]:
        """Why the view is not live now (empty when it is).  A watch quiet for longer than
        ``stale_after`` (no event, no bookmark: kube-apiserver sends one about every minute) may
        be a dead network path that looks open: it is listed again, and not trusted till then."""
        if not self._started:
            return ["not started"]
        self.hub.set_stale_after(self.stale_after)
        found = []
        for collection in (self.pods, self.pvcs, self.nodes, self.pvs, self.attachments):
            if collection.forbidden and collection not in (self.pods, self.pvcs):
                continue
            if not collection.live:
                found.append(f"{collection.name}: {collection.error or 'not listed yet'}")
            elif collection.quiet_seconds() > self.stale_after:
                found.append(
                    f"{collection.name}: no event or bookmark for "
                    f"{collection.quiet_seconds():.0f} s (more than {self.stale_after:g} s)"
                )
                collection.relist()
        return found

    @property
    def live(self) -> bool:
        return not self.problems()

    def fresh(self) -> bool:
        """The watches an unpinned decision rests on (pods, attachments) had an event or a
        bookmark within ``fresh_seconds``: nothing can have been missed since."""
        watched = [self.pods] + ([] if self.attachments.forbidden else [self.attachments])
        return all(c.quiet_seconds() <= self.fresh_seconds for c in watched)

    async def confirm_unpinned(self, pod: Obj, claims: Iterable[str]) -> bool:
        """One namespaced LIST of pods (and one of VolumeAttachments, when readable) agrees with
        the view that nothing holds ``claims`` (exclusive claims of ``pod``) and no attachment
        pins them; False when it does not, and the view is listed again (its watch missed it)."""
        wanted = set(claims)
        own_name = (pod.get("metadata") or {}).get("name")
        (listed, _), volumes = await asyncio.gather(
            list_all(self.core.list_namespaced_pod, self.namespace, transform=slim_pod),
            self._confirm_attachments(wanted),
        )
        held = [
            p
            for p in listed
            if (p.get("metadata") or {}).get("name") != own_name
            and holds_volume(p)
            and wanted.intersection(pod_claims(p))
        ]
        if not held and not volumes:
            return True
        missed = [(p.get("metadata") or {}).get("name") for p in held] + sorted(volumes)
        log.warning(
            "colocate: the live view of %s missed %s (a quiet watch); listing it again",
            self.namespace,
            ", ".join(str(m) for m in missed),
        )
        self.pods.relist()
        if volumes:
            self.attachments.relist()
        return False

    async def _confirm_attachments(self, claims: set[str]) -> set[str]:
        """The PVs of ``claims`` (and of their disks) that a VolumeAttachment says are attached."""
        if self.attachments.forbidden:
            return set()
        volumes = _pv_names(
            pvc for c in claims if (pvc := self.pvcs.items.get(f"{self.namespace}/{c}"))
        )
        volumes |= self._same_disk(volumes, {})
        if not volumes:
            return set()
        listing = await read_json(self.hub.storage.list_volume_attachment)
        return {
            pv
            for va in listing.get("items") or []
            if (pv := attachment_pv(va)) in volumes and attached_nodes([va])
        }

    async def wait_live(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every watch to be listed and live."""
        deadline = time.monotonic() + timeout
        while not self.live:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def has_pod(self, namespace: str, name: str) -> bool:
        return f"{namespace}/{name}" in self.pods.items

    def known_pods(self, pod: Obj) -> list[JsonDict]:
        """What the view last knew of the pods using ``pod``'s claims, live or not (the safe
        side pins to a known holder's node rather than to none)."""
        return [p for c in pod_claims(pod) for p in self.by_claim.get(f"{self.namespace}/{c}")]

    # ----------------------------------------------------------------------------------------
    # reads

    async def state_for(self, pod: Obj, *, first_sync: float | None = None) -> ClusterState:
        """The state for deciding on ``pod`` from the watches; :class:`ViewNotLive` when they
        cannot be trusted (the caller reads the API directly)."""
        self.start()
        if not self.live:
            wait = self.first_sync_seconds if first_sync is None else first_sync
            if not await self.wait_live(wait):
                raise ViewNotLive("; ".join(self.problems()))
        gathered = self._gather(pod)
        # (a node is missing only when Nodes are watched: gathered.nodes is a dict then)
        for name in gathered.missing_nodes:
            node = await self._confirm_node(name)
            if node is not None and gathered.nodes is not None:
                gathered.nodes[name] = node
        if gathered.node_pods_from is not None:
            gathered.complete = await self._add_node_pods(gathered.node_pods_from, gathered.pods)
        return gathered.state(self.namespace)

    def state_now(self, pod: Obj) -> ClusterState | None:
        """The state from memory alone, without yielding to the event loop (so nothing changes
        the view while the check reads it); None when the view is not live or the check needs an
        API request (a node the watch does not have, the node's pods by a field-selector LIST)."""
        if not self._started or not self.live:
            return None
        gathered = self._gather(pod)
        if gathered.missing_nodes or gathered.node_pods_from is not None:
            return None
        return gathered.state(self.namespace)

    def _gather(self, pod: Obj) -> _Gathered:
        namespace = self.namespace
        gathered = _Gathered()
        pods = gathered.pods
        exclusive: list[JsonDict] = []
        for claim in pod_claims(pod):
            key = f"{namespace}/{claim}"
            pvc = self.pvcs.items.get(key)
            if pvc is not None:
                gathered.pvcs[key] = pvc
            # Modes first: the pods of a shared claim (on Nebari, every user's) pin nothing,
            # so they, their nodes and those nodes' pods are not gathered.
            claimers = self.by_claim.get(key)
            if not known_shared(_modes(pvc), pod, claim, claimers):
                for p in claimers:
                    pods[_key(p)] = p
                if pvc is not None:
                    exclusive.append(pvc)
        exclusive_volumes = _pv_names(exclusive)
        # the same disks through other PVs (same CSI driver and handle) hold them as surely
        exclusive_volumes |= self._same_disk(exclusive_volumes, pods)
        volumes = _pv_names(gathered.pvcs.values()) | exclusive_volumes
        if self.attachments.forbidden:
            gathered.attachments = None
        else:
            gathered.attachments = [
                va for v in sorted(volumes) for va in self.attachments_by_pv.get(v)
            ]
        if not self.pvs.forbidden:
            gathered.pvs = {v: self.pvs.items[v] for v in volumes if v in self.pvs.items}
        candidates = _candidate_nodes(
            pods.values(),
            [va for va in gathered.attachments or [] if attachment_pv(va) in exclusive_volumes],
        )
        if self.nodes.forbidden:
            gathered.nodes = None
            return gathered
        nodes: dict[str, JsonDict] = {}
        gathered.nodes = nodes
        for name in sorted(candidates):
            node = self.nodes.items.get(name)
            if node is None:
                gathered.missing_nodes.append(name)
            else:
                nodes[name] = node
            for p in self.by_node.get(name):
                pods[_key(p)] = p
        if (
            self.all_pods.forbidden
            and len(candidates) == 1
            and self._node_pods_listable is not False
        ):
            gathered.node_pods_from = next(iter(candidates))
        elif self.all_pods.forbidden and candidates:
            gathered.complete = False
        return gathered

    def _same_disk(self, volumes: set[str], pods: dict[str, JsonDict]) -> set[str]:
        """The other PVs exposing the disks of ``volumes`` (same CSI driver and handle), and
        into ``pods`` the pods mounting the claims those PVs are bound to (any namespace the
        pod watch covers): they hold the disk as surely as a pod of the claim itself."""
        others: set[str] = set()
        for volume in volumes:
            disk = volume_identity(self.pvs.items.get(volume))
            if disk is not None:
                others.update(_key(pv) for pv in self.pvs_by_disk.get(_disk_key(disk)))
        others -= volumes
        for name in sorted(others):
            ref = claim_ref(self.pvs.items.get(name))
            for p in self.by_claim.get(ref) if ref else ():
                pods[_key(p)] = p
        return others

    async def _confirm_node(self, name: str) -> JsonDict | None:
        """A node the watch does not have: just created (the watch lags) or deleted.  Ask."""
        node = await read_json_or_none(self.core.read_node, name)
        return None if node is None else dict(node, kind="Node")

    async def _add_node_pods(self, node: str, pods: dict[str, JsonDict]) -> bool:
        """The pinned node's pods of other namespaces, by one field-selector LIST (when only the
        namespace is watched); False when RBAC does not allow it."""
        if self._node_pods_listable is False:
            return False
        try:
            listing = await read_json(
                self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}"
            )
        except Exception as exc:
            if not forbidden(exc):
                raise
            self._node_pods_listable = False
            return False
        self._node_pods_listable = True
        for item in listing.get("items") or []:
            slim = slim_pod(item)
            pods.setdefault(_key(slim), slim)
        return True
