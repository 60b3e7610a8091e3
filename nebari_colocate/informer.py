"""The watches: collections of the API kept in memory by LIST then WATCH, shared by every spawner
of a hub (the models are kubespawner's ``ResourceReflector`` and dask-gateway's ``Informer``).

- :class:`Collection`: one collection, listed page by page, then watched from its
  resourceVersion with bookmarks; re-listed after a 410 Gone, an error, an API restart, or a
  WATCH quiet for longer than ``stale_after`` (a dead network path can look open).  ``live``
  only while listed and watching with no error since.
- :class:`Index`: objects by claim, by node, by PV and by disk, updated per watch event.
- :class:`HubWatches`: the cluster-wide collections of one hub, one set per event loop whatever
  the number of namespaces, started lazily; and :class:`NamespaceWatches`, a namespace's own
  pods or claims, watched only where RBAC forbids the cluster-wide LIST, and whether what a
  namespace's checks rest on can be trusted now (``problems``, ``live``, ``fresh``).

The readers of :mod:`nebari_colocate.view` read them; the requests go through
:mod:`nebari_colocate.kubeapi`.  Objects are kept slim (:mod:`nebari_colocate.slim`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

from . import metrics
from .admission import AdmissionModels
from .config import DEFAULT_WATCH_STALE_SECONDS, FRESH_SECONDS
from .fit import pod_requests
from .history import premium_pod_ended
from .kubeapi import YIELD_EVERY, ApiCall, ApiError, Apis, forbidden, list_all, watch
from .objects import (
    MIGRATE_COMPONENT,
    MIGRATE_COMPONENT_LABEL,
    JsonDict,
    Obj,
    attachment_pv,
    is_terminal,
    pod_claims,
    volume_identity,
)
from .slim import Shared, slim_node, slim_pod

log = logging.getLogger(__name__)


def cache_key(obj: Obj) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object (client-go's
    ``MetaNamespaceKeyFunc``): the key of the caches and indexes."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


#: keys looked up or computed between two turns of the event loop while a LIST is applied
KEYS_BETWEEN_TURNS = 10 * YIELD_EVERY

# --------------------------------------------------------------------------------------------------
# the garbage collector during a LIST

_gc_pauses = 0
_gc_was_enabled = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection while a collection is listed (and nested LISTs: after an API
    restart every collection lists at once); the collector's state is put back after.

    A LIST of 50,000 pods parses millions of objects, a page at a time.  With the collector
    running, its collections during each parse promote the page's objects to the oldest
    generation, where they die a moment later; once enough have been promoted, CPython runs a
    full collection of the hub's whole heap (0.4 to 0.8 s on the event loop at 50,000 pods).
    Paused, the parsed objects die young by reference counting and nothing is promoted; what
    the LIST keeps is little (the objects listed unchanged are the ones kept already)."""
    global _gc_pauses, _gc_was_enabled
    if _gc_pauses == 0:
        _gc_was_enabled = gc.isenabled()
        gc.disable()
    _gc_pauses += 1
    try:
        yield
    finally:
        _gc_pauses -= 1
        if _gc_pauses == 0 and _gc_was_enabled:
            gc.enable()


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
        key = cache_key(obj)
        old = self.items.get(key)
        self.items[key] = obj
        if self._on_change:
            self._on_change(old, obj)

    def _drop(self, obj: Obj) -> None:
        old = self.items.pop(cache_key(obj), None)
        if old is not None and self._on_change:
            self._on_change(old, None)

    def _replace_all(self, items: Iterable[JsonDict]) -> None:
        fresh: dict[str, JsonDict] = {}
        for obj in items:
            obj = self._transform(obj) if self._transform else dict(obj)
            fresh[cache_key(obj)] = obj
        old_items, self.items = self.items, fresh
        if self._on_change:
            for key, old in old_items.items():
                if key not in fresh:
                    self._on_change(old, None)
            for key, obj in fresh.items():
                self._on_change(old_items.get(key), obj)

    async def _replace_gradually(self, items: Iterable[JsonDict]) -> None:
        """:meth:`_replace_all` for a LIST's (transformed) answer, a few objects between two
        turns of the event loop, so a relist of 50,000 pods never blocks it for long.  New and
        changed objects first, then the ones gone: an object in both lists is never missing
        meanwhile (KubeSpawner's pod reflector reads the store: a server must not look gone).
        Nobody trusts the collection meanwhile: it is not ``live`` while it lists."""
        fresh: dict[str, JsonDict] = {}
        for n, obj in enumerate(items, 1):  # (50,000 keys are tens of milliseconds)
            fresh[cache_key(obj)] = obj
            if n % KEYS_BETWEEN_TURNS == 0:
                await asyncio.sleep(0)
        for n, (key, obj) in enumerate(fresh.items(), 1):
            old = self.items.get(key)
            if old is not obj:  # (the same object: listed again unchanged, see _listed)
                self.items[key] = obj
                if self._on_change:
                    self._on_change(old, obj)
            if n % YIELD_EVERY == 0:
                await asyncio.sleep(0)
        gone = []
        for n, key in enumerate(list(self.items), 1):
            if key not in fresh:
                gone.append(key)
            if n % KEYS_BETWEEN_TURNS == 0:
                await asyncio.sleep(0)
        for n, key in enumerate(gone, 1):
            old = self.items.pop(key)
            if self._on_change:
                self._on_change(old, None)
            if n % YIELD_EVERY == 0:
                await asyncio.sleep(0)

    def _listed(self, obj: JsonDict) -> JsonDict:
        """A listed object as it is kept: the object kept already when the LIST gives the same
        version of it (same uid and resourceVersion), else a new one.  A relist of a large
        collection after a break then keeps almost nothing new: what it parsed dies young, and
        no full garbage collection of the hub's heap is set off by it."""
        have = self.items.get(cache_key(obj))
        if have is not None:
            meta, kept = obj.get("metadata") or {}, have.get("metadata") or {}
            version = meta.get("resourceVersion")
            if (
                version
                and kept.get("resourceVersion") == version
                and kept.get("uid") == meta.get("uid")
            ):
                return have
        return self._transform(obj) if self._transform else dict(obj)

    async def _list(self) -> None:
        # Pages keep the parsed JSON of a large collection small while it is slimmed.
        with collector_paused():
            items, version = await list_all(
                self._method, *self._args, transform=self._listed, page_size=self.page_size
            )
            await self._replace_gradually(items)
        self.resource_version = version
        self.last_seen = time.monotonic()

    async def _watch(self) -> None:
        """One WATCH until the server ends it (normal) or it fails (raises)."""
        async with watch(
            self._method,
            *self._args,
            resource_version=self.resource_version,
            timeout_seconds=self.watch_timeout_seconds,
            sock_read=self.stale_after,
            what=self.name,
        ) as events:
            self._set_live(True)
            self.last_seen = time.monotonic()
            async for event in events:
                self._event(event)

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


class Index:
    """key -> {object key: object}, kept up to date from a collection's changes (its
    ``on_change``), so a reader looks up a claim's or a node's pods instead of scanning."""

    def __init__(self, keys_of: Callable[[Obj], Iterable[str]]) -> None:
        self._keys_of = keys_of
        self.entries: dict[str, dict[str, JsonDict]] = {}

    def change(self, old: JsonDict | None, new: JsonDict | None) -> None:
        if old is not None:
            name = cache_key(old)
            for key in self._keys_of(old):
                bucket = self.entries.get(key)
                if bucket is not None:
                    bucket.pop(name, None)
                    if not bucket:
                        del self.entries[key]
        if new is not None:
            name = cache_key(new)
            for key in self._keys_of(new):
                self.entries.setdefault(key, {})[name] = new

    def get(self, key: str) -> list[JsonDict]:
        return list((self.entries.get(key) or {}).values())


def claim_keys(pod: Obj) -> list[str]:
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    return [f"{namespace}/{c}" for c in pod_claims(pod)]


def node_keys(pod: Obj) -> list[str]:
    node = (pod.get("spec") or {}).get("nodeName")
    return [node] if node else []


def nominated_keys(pod: Obj) -> list[str]:
    """The node a pending pod is nominated to (preemption made room for it there)."""
    if (pod.get("spec") or {}).get("nodeName"):
        return []
    node = (pod.get("status") or {}).get("nominatedNodeName")
    return [node] if isinstance(node, str) and node else []


def attachment_keys(va: Obj) -> list[str]:
    pv = attachment_pv(va)
    return [pv] if pv else []


def disk_key(disk: tuple[str, str]) -> str:
    return "^".join(disk)  # kube-controller-manager's unique volume name joins them so


def disk_keys(pv: Obj) -> list[str]:
    disk = volume_identity(pv)
    return [disk_key(disk)] if disk else []


def extended_pod_left(pod: Obj) -> None:
    """A pod bound to a node went (deleted, or finished): when it asked for an extended resource
    (a GPU: a domain-qualified name such as ``nvidia.com/gpu``), the servers still on that node
    ride on it from now (:func:`nebari_colocate.history.premium_pod_ended`; the operator's page
    says for how long)."""
    node = (pod.get("spec") or {}).get("nodeName")
    if not node or is_terminal(pod):
        return
    try:
        requested = pod_requests(pod)
    except ValueError:  # a quantity the API would not have taken: nothing to tell
        return
    if any("/" in name and units > 0 for name, units in requested.items()):
        premium_pod_ended(str(node))


# --------------------------------------------------------------------------------------------------
# the watches of a hub

#: the label selector of ``nebari-colocate migrate``'s Leases
MIGRATION_LEASES = f"{MIGRATE_COMPONENT_LABEL}={MIGRATE_COMPONENT}"


class NamespaceWatches:
    """One namespace on the hub's watches: its own pods or claims, watched only where RBAC
    forbids the cluster-wide ones, and whether the collections its checks rest on can be trusted
    now.  Get it with :meth:`HubWatches.namespace`."""

    #: seconds since a watch's last event or bookmark within which the view is fresh
    #: (:data:`~nebari_colocate.config.FRESH_SECONDS`)
    fresh_seconds: ClassVar[float] = FRESH_SECONDS

    def __init__(self, hub: HubWatches, namespace: str) -> None:
        self.hub = hub
        self.namespace = namespace
        #: seconds without an event or a bookmark after which a watch is not trusted and listed
        #: again (the spawner sets it from ``colocation_watch_stale_seconds``)
        self.stale_after = DEFAULT_WATCH_STALE_SECONDS
        self.own_pods = Collection(
            f"pods ({namespace})",
            hub.core.list_namespaced_pod,
            (namespace,),
            transform=hub.slim,
            on_change=hub.pods_changed,
        )
        self.own_pvcs = Collection(
            f"persistentvolumeclaims ({namespace})",
            hub.core.list_namespaced_persistent_volume_claim,
            (namespace,),
            transform=lambda obj: dict(obj, kind="PersistentVolumeClaim"),
        )
        #: the Leases of ``nebari-colocate migrate`` here, watched only where RBAC forbids the
        #: cluster-wide watch of them (optional, for the operator's page only)
        self.own_leases = Collection(
            f"migration leases ({namespace})",
            functools.partial(
                hub.coordination.list_namespaced_lease, label_selector=MIGRATION_LEASES
            ),
            (namespace,),
            transform=lambda obj: dict(obj, kind="Lease"),
        )
        self.started = False

    def start(self) -> None:
        """Start the watches (idempotent; the first check calls it)."""
        self.hub.start()
        if self.started:
            return
        self.started = True
        if self.hub.all_pods.forbidden:
            self.own_pods.start()
        if self.hub.all_pvcs.forbidden:
            self.own_pvcs.start()
        if self.hub.all_leases.forbidden:
            self.own_leases.start()

    async def stop(self) -> None:
        if self.hub.namespaces.get(self.namespace) is self:
            del self.hub.namespaces[self.namespace]
        for collection in (self.own_pods, self.own_pvcs, self.own_leases):
            await collection.stop()

    @property
    def pods(self) -> Collection:
        """The pod collection in use."""
        return self.own_pods if self.hub.all_pods.forbidden else self.hub.all_pods

    @property
    def pvcs(self) -> Collection:
        """The claim collection in use."""
        return self.own_pvcs if self.hub.all_pvcs.forbidden else self.hub.all_pvcs

    @property
    def leases(self) -> Collection:
        """The migration Lease collection in use (``nebari-colocate migrate``'s)."""
        return self.own_leases if self.hub.all_leases.forbidden else self.hub.all_leases

    def problems(self) -> list[str]:
        """Why the watches are not live now (empty when they are).  A watch quiet for longer
        than ``stale_after`` (no event, no bookmark: kube-apiserver sends one about every minute)
        may be a dead network path that looks open: it is listed again, and not trusted till
        then."""
        if not self.started:
            return ["not started"]
        hub = self.hub
        hub.set_stale_after(self.stale_after)
        found = []
        for collection in (self.pods, self.pvcs, hub.nodes, hub.pvs, hub.attachments):
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
        attachments = self.hub.attachments
        watched = [self.pods] + ([] if attachments.forbidden else [attachments])
        return all(c.quiet_seconds() <= self.fresh_seconds for c in watched)

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


class HubWatches:
    """The cluster-wide watches of one hub, in one event loop, whatever the number of
    namespaces its servers run in (``enable_user_namespaces``): every pod and every claim of the
    cluster when RBAC allows it, Nodes, PersistentVolumes, VolumeAttachments, and the indexes on
    them.  A namespace (:class:`NamespaceWatches`) watches its own pods or claims only when the
    cluster-wide LIST is forbidden.  Get the running loop's with :meth:`of_running_loop`."""

    _hubs: ClassVar[dict[int, HubWatches]] = {}

    @classmethod
    def of_running_loop(cls, api_client: Any) -> HubWatches:
        """The watches of the running event loop's hub (created on first use)."""
        loop = asyncio.get_running_loop()
        hub = cls._hubs.get(id(loop))
        if hub is None or not hub.usable_in(loop):
            hub = cls._hubs[id(loop)] = cls(api_client)
        return hub

    @classmethod
    def running(cls) -> list[HubWatches]:
        """The hubs' watches that run (one per event loop): tests and metrics count them."""
        return [h for h in cls._hubs.values() if not h.closed]

    @classmethod
    async def stop_all(cls, namespace: str | None = None) -> None:
        """Stop the shared watches (of the hubs that serve ``namespace``, or all)."""
        for key, hub in list(cls._hubs.items()):
            if namespace is None or namespace in hub.namespaces:
                cls._hubs.pop(key, None)
                await hub.stop()

    def __init__(self, api_client: Any) -> None:
        apis = Apis(api_client)
        self.api_client = api_client
        self._loop = asyncio.get_running_loop()
        self.closed = False
        self._started = False
        core = apis.core
        self.core = core
        self.storage = apis.storage
        self.coordination = apis.coordination
        #: the namespaces the hub's checks read
        self.namespaces: dict[str, NamespaceWatches] = {}
        self.by_claim = Index(claim_keys)
        self.by_node = Index(node_keys)
        self.by_nominated = Index(nominated_keys)
        self.attachments_by_pv = Index(attachment_keys)
        self.pvs_by_disk = Index(disk_keys)
        self.shared = Shared()
        #: more readers of every pod change (KubeSpawner's pod reflector shares these watches:
        #: :mod:`nebari_colocate.shared_reflector`), by a key of their own
        self.pod_listeners: dict[object, Callable[[JsonDict | None, JsonDict | None], None]] = {}
        #: what admission made of pinned pods, by shape (the dry runs pinned checks reuse)
        self.admission = AdmissionModels()

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
            apis.storage.list_volume_attachment,
            transform=with_kind("VolumeAttachment"),
            on_change=self.attachments_by_pv.change,
        )
        # What preemption reads (optional, like Nodes; not part of whether the view is live:
        # without them a decision is judged as if there were none, ``docs/decisions.md``).
        self.priority_classes = Collection(
            "priorityclasses",
            apis.scheduling.list_priority_class,
            transform=with_kind("PriorityClass"),
        )
        self.pdbs = Collection(
            "poddisruptionbudgets (all namespaces)",
            apis.policy.list_pod_disruption_budget_for_all_namespaces,
            transform=with_kind("PodDisruptionBudget"),
        )
        #: ``nebari-colocate migrate``'s Leases (who moves a home now): optional, for the
        #: operator's page only, a few objects whatever the cluster's other Leases
        self.all_leases = Collection(
            "migration leases (all namespaces)",
            functools.partial(
                apis.coordination.list_lease_for_all_namespaces, label_selector=MIGRATION_LEASES
            ),
            transform=with_kind("Lease"),
            on_forbidden=self._namespace_leases_only,
        )
        #: whether a field-selector LIST of pods of all namespaces is allowed (None: unknown)
        self.node_pods_listable: bool | None = None

    def namespace(self, namespace: str) -> NamespaceWatches:
        """The watches of ``namespace`` (created on first use)."""
        watches = self.namespaces.get(namespace)
        if watches is None:
            watches = self.namespaces[namespace] = NamespaceWatches(self, namespace)
        return watches

    def slim(self, pod: Obj) -> JsonDict:
        return slim_pod(pod, self.shared)

    def pods_changed(self, old: JsonDict | None, new: JsonDict | None) -> None:
        self.by_claim.change(old, new)
        self.by_node.change(old, new)
        self.by_nominated.change(old, new)
        if old is not None and (new is None or is_terminal(new)):
            extended_pod_left(old)
        for listener in self.pod_listeners.values():
            listener(old, new)

    def collections(self) -> list[Collection]:
        """The cluster-wide collections (each one LIST and one WATCH at a time)."""
        return [
            self.all_pods,
            self.all_pvcs,
            self.nodes,
            self.pvs,
            self.attachments,
            self.priority_classes,
            self.pdbs,
            self.all_leases,
        ]

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
        for watches in self.namespaces.values():
            for collection in (watches.own_pods, watches.own_pvcs, watches.own_leases):
                collection.stale_after = seconds

    def _namespace_pods_only(self) -> None:
        """Pods of all namespaces may not be listed or watched: each namespace watches its own."""
        if not self.closed:
            for watches in self.namespaces.values():
                watches.own_pods.start()

    def _namespace_claims_only(self) -> None:
        if not self.closed:
            for watches in self.namespaces.values():
                watches.own_pvcs.start()

    def _namespace_leases_only(self) -> None:
        if not self.closed:
            for watches in self.namespaces.values():
                watches.own_leases.start()

    async def stop(self) -> None:
        self.closed = True
        for collection in self.collections():
            await collection.stop()
        for watches in list(self.namespaces.values()):
            await watches.stop()
