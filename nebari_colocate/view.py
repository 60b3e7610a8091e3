"""The readers of the cluster: what the check, ``explain`` and ``audit`` know of it (see
``docs/decisions.md``, "What it reads").

Two readers with one interface, ``await reader.state_for(pod)`` -> :class:`ClusterState`:

- :class:`ClusterView`: the view of one namespace on the watches every spawner of the hub shares
  (:mod:`nebari_colocate.informer`: one set per event loop whatever the number of namespaces,
  started lazily by the first check): every pod and claim (of the cluster where RBAC allows it,
  else of each namespace; whatever its labels: a backup Job's pod holds a claim as surely as a
  server does), and where RBAC allows it Nodes, PersistentVolumes and VolumeAttachments.  It
  reads the watches' indexes by claim, by node and by disk, so a check reads the user's pods and
  the pinned node's pods, never the whole cache; while a watch is broken or silent the view is
  not trusted (:class:`ViewNotLive`) and the check reads the API directly, which the log and a
  metric say.  The few requests a check still needs (a node the watch does not have yet, the
  pinned node's pods of other namespaces, a LIST that confirms an unpinned decision) it makes
  itself.
- :class:`DirectReader`: plain reads for one decision (the fallback, and ``explain`` / ``audit``,
  which run once and need no watch); ``denied`` says which reads RBAC refused.

Every request goes through :mod:`nebari_colocate.kubeapi`.  Objects are the camelCase dicts the
API returns, pods slimmed to what a decision, a message or a report reads
(:mod:`nebari_colocate.slim`).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Iterable
from typing import Any, ClassVar

from .affinity import NODEPOOL_LABEL
from .fit import offered
from .informer import Collection, HubWatches, cache_key, disk_key
from .kubeapi import (
    ApiCall,
    Apis,
    SharedRequest,
    forbidden,
    list_all,
    read_json,
    read_json_or_none,
)
from .objects import (
    HOSTNAME,
    JsonDict,
    Obj,
    attached_nodes,
    attachment_pv,
    claim_ref,
    holds_volume,
    is_server,
    known_shared,
    meta,
    owned_by,
    pod_claims,
    pod_server,
    volume_identity,
)
from .slim import Shared, slim_pod
from .state import ClusterState

log = logging.getLogger(__name__)

#: reads RBAC may deny, as (verb, what) facts; the CLI and the log put them in words
NODES_GET = ("get", "nodes")
NODES_LIST = ("list", "nodes")
PVS_GET = ("get", "persistentvolumes")
PVS_LIST = ("list", "persistentvolumes")
OTHER_PODS_LIST = ("list", "pods in other namespaces")
ATTACHMENTS_LIST = ("list", "volumeattachments")
ALL_PODS_LIST = ("list", "pods in all namespaces")
PRIORITY_CLASSES_LIST = ("list", "priorityclasses")
PDBS_LIST = ("list", "poddisruptionbudgets in all namespaces")


# --------------------------------------------------------------------------------------------------
# what both readers gather


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


def _listed(collection: Collection) -> dict[str, JsonDict] | None:
    """A collection's objects by name, or None while it is forbidden or not listed (an optional
    read: the decision is judged without it)."""
    if collection.forbidden or not collection.live:
        return None
    return {(o.get("metadata") or {}).get("name", ""): o for o in collection.items.values()}


# --------------------------------------------------------------------------------------------------
# direct reads


class DirectReader:
    """Plain API reads for one decision, or for ``explain`` / ``audit``.

    ``denied`` collects the reads RBAC refused, as ``(verb, what)`` facts.
    """

    def __init__(self, api_client: Any, namespace: str) -> None:
        apis = Apis(api_client)
        self.namespace = namespace
        self.core = apis.core
        self.storage = apis.storage
        self.scheduling = apis.scheduling
        self.policy = apis.policy
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

    async def preemption_objects(
        self,
    ) -> tuple[dict[str, JsonDict] | None, list[JsonDict] | None]:
        """(PriorityClasses by name, PodDisruptionBudgets of every namespace), each None when
        RBAC refuses it (noted in ``denied``): what preemption on a pinned node reads."""
        classes, pdbs = await asyncio.gather(
            self._optional(PRIORITY_CLASSES_LIST, self.scheduling.list_priority_class),
            self._optional(PDBS_LIST, self.policy.list_pod_disruption_budget_for_all_namespaces),
        )
        return (
            None
            if classes is None
            else {
                (c.get("metadata") or {}).get("name", ""): dict(c, kind="PriorityClass")
                for c in classes.get("items") or []
            },
            None
            if pdbs is None
            else [dict(p, kind="PodDisruptionBudget") for p in pdbs.get("items") or []],
        )

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
        classes: dict[str, JsonDict] | None = None
        pdbs: list[JsonDict] | None = None
        if nodes:  # a fit check follows: what preemption on the node reads
            classes, pdbs = await self.preemption_objects()
        if nodes:
            seen = {cache_key(p) for p in pods}
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
                    if cache_key(item) not in seen:
                        pods.append(slim_pod(item))
        return ClusterState(
            pods,
            self.pvcs,
            pvs,
            attachments,
            nodes,
            node_pods_complete=complete,
            namespace=self.namespace,
            priority_classes=classes,
            pdbs=pdbs,
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
        #: what preemption reads (None: not readable, or not listed yet)
        self.priority_classes: dict[str, JsonDict] | None = None
        self.pdbs: list[JsonDict] | None = None

    def state(self, namespace: str) -> ClusterState:
        return ClusterState(
            self.pods.values(),
            self.pvcs,
            self.pvs,
            self.attachments,
            self.nodes,
            node_pods_complete=self.complete,
            namespace=namespace,
            priority_classes=self.priority_classes,
            pdbs=self.pdbs,
        )


#: the confirming LISTs of unpinned decisions, one in flight per namespace's watches (pods) and
#: per hub (VolumeAttachments), shared by the checks that ask at once
_POD_LISTS: weakref.WeakKeyDictionary[Any, SharedRequest] = weakref.WeakKeyDictionary()
_ATTACHMENT_LISTS: weakref.WeakKeyDictionary[Any, SharedRequest] = weakref.WeakKeyDictionary()


async def _nothing() -> set[str]:
    return set()


class ViewNotLive(Exception):
    """The view cannot be trusted now (a watch is broken or not listed yet)."""


class ClusterView:
    """The live view of one namespace, shared by every spawner of the hub in one event loop: it
    reads the hub's cluster-wide watches (:class:`~nebari_colocate.informer.HubWatches`, one set
    for every namespace) and this namespace's own pods or claims where RBAC forbids the
    cluster-wide ones (:class:`~nebari_colocate.informer.NamespaceWatches`).  Get it with
    :meth:`shared`."""

    #: seconds the first check waits for the first LISTs before reading the API directly
    first_sync_seconds: ClassVar[float] = 2.0

    @classmethod
    def shared(cls, api_client: Any, namespace: str) -> ClusterView:
        """The view of ``namespace`` for the running event loop, on the one set of cluster-wide
        watches of the loop's hub (created on first use)."""
        return cls(api_client, namespace, hub=HubWatches.of_running_loop(api_client))

    @classmethod
    def hubs(cls) -> list[HubWatches]:
        """The hubs' watches that run (one per event loop): tests and metrics count them."""
        return HubWatches.running()

    @classmethod
    async def stop_all(cls, namespace: str | None = None) -> None:
        """Stop the shared watches (of the hubs that serve ``namespace``, or all): tests and
        benchmarks, to have a hub whose view has not listed yet."""
        await HubWatches.stop_all(namespace)

    def __init__(self, api_client: Any, namespace: str, *, hub: HubWatches | None = None) -> None:
        #: a view made on its own (a benchmark) has watches of its own
        self.hub = hub if hub is not None else HubWatches(api_client)
        self._own_hub = hub is None
        self.namespace = namespace
        self.api_client = api_client
        self.core = Apis(api_client).core
        #: this namespace on the hub's watches (what it keeps: started, ``stale_after``)
        self.watches = self.hub.namespace(namespace)

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
    def pods(self) -> Collection:
        """The pod collection in use."""
        return self.watches.pods

    @property
    def pvcs(self) -> Collection:
        """The claim collection in use."""
        return self.watches.pvcs

    @property
    def stale_after(self) -> float:
        """Seconds without an event or a bookmark after which a watch is listed again."""
        return self.watches.stale_after

    @stale_after.setter
    def stale_after(self, seconds: float) -> None:
        self.watches.stale_after = seconds

    @property
    def _node_pods_listable(self) -> bool | None:
        return self.hub.node_pods_listable

    @_node_pods_listable.setter
    def _node_pods_listable(self, value: bool | None) -> None:
        self.hub.node_pods_listable = value

    # ----------------------------------------------------------------------------------------
    # lifecycle, and whether the watches can be trusted now

    def start(self) -> None:
        """Start the watches (idempotent; the first check calls it)."""
        self.watches.start()

    async def stop(self) -> None:
        await self.watches.stop()
        if self._own_hub:
            await self.hub.stop()

    def problems(self) -> list[str]:
        """Why the view is not live now (empty when it is):
        :meth:`~nebari_colocate.informer.NamespaceWatches.problems`."""
        return self.watches.problems()

    @property
    def live(self) -> bool:
        return self.watches.live

    def fresh(self) -> bool:
        """Nothing can have been missed since the watches' last event or bookmark:
        :meth:`~nebari_colocate.informer.NamespaceWatches.fresh`."""
        return self.watches.fresh()

    async def wait_live(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every watch to be listed and live."""
        return await self.watches.wait_live(timeout)

    def has_pod(self, namespace: str, name: str) -> bool:
        return self.watches.has_pod(namespace, name)

    # ----------------------------------------------------------------------------------------
    # reads

    async def confirm_unpinned(
        self, pod: Obj, claims: Iterable[str], *, attachments: bool = True
    ) -> bool:
        """One namespaced LIST of pods (and with ``attachments`` one of VolumeAttachments, when
        readable) agrees with the view that nothing holds ``claims`` (exclusive claims of
        ``pod``) and no attachment pins them; False when it does not, and the view is listed
        again (its watch missed it)."""
        wanted = set(claims)
        own_name = (pod.get("metadata") or {}).get("name")
        # shared with the checks that confirm at the same time (a burst): one LIST for all
        listed, volumes = await asyncio.gather(
            self._shared(_POD_LISTS, self.watches, self._list_pods).get(),
            self._confirm_attachments(wanted) if attachments else _nothing(),
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

    async def holders_current(self, holders: Iterable[Obj]) -> bool:
        """Whether every pod of ``holders`` (as the view has them) is, read by name now, the
        same pod (its uid) on the same node and still holding its volumes: a refusal that
        names them is then told; else the watch had not brought their deletion yet."""
        known = list(holders)
        if not known:
            return False  # nothing to read by name: the caller reads the API directly

        async def current(held: Obj) -> bool:
            meta = held.get("metadata") or {}
            try:
                now = await read_json_or_none(
                    self.core.read_namespaced_pod, meta.get("name"), meta.get("namespace")
                )
            except Exception as exc:
                if forbidden(exc):  # (a pod of another namespace): the direct reads decide
                    return False
                raise
            return (
                now is not None
                and (now.get("metadata") or {}).get("uid") == meta.get("uid")
                and (now.get("spec") or {}).get("nodeName")
                == (held.get("spec") or {}).get("nodeName")
                and holds_volume(now)
            )

        return all(await asyncio.gather(*(current(p) for p in known)))

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
        listing = await self._shared(_ATTACHMENT_LISTS, self.hub, self._list_attachments).get()
        return {
            pv
            for va in listing.get("items") or []
            if (pv := attachment_pv(va)) in volumes and attached_nodes([va])
        }

    @staticmethod
    def _shared(
        requests: weakref.WeakKeyDictionary[Any, SharedRequest], owner: Any, request: Any
    ) -> SharedRequest:
        shared = requests.get(owner)
        if shared is None:
            shared = requests[owner] = SharedRequest(request)
        return shared

    async def _list_pods(self) -> list[JsonDict]:
        listed, _ = await list_all(
            self.core.list_namespaced_pod, self.namespace, transform=slim_pod
        )
        return listed

    async def _list_attachments(self) -> JsonDict:
        return await read_json(self.hub.storage.list_volume_attachment)

    def known_pods(self, pod: Obj) -> list[JsonDict]:
        """What the view last knew of the pods using ``pod``'s claims, live or not (the safe
        side pins to a known holder's node rather than to none)."""
        return [p for c in pod_claims(pod) for p in self.by_claim.get(f"{self.namespace}/{c}")]

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
        if not self.watches.started or not self.live:
            return None
        gathered = self._gather(pod)
        if gathered.missing_nodes or gathered.node_pods_from is not None:
            return None
        return gathered.state(self.namespace)

    def whole_set_state(self, pod: Obj) -> ClusterState | None:
        """What the move of a user's whole set chooses from (``setmove``): the state of
        :meth:`state_now` with every node the view knows and the pods on them; None when the
        view is not live or the Nodes or the pods of every namespace cannot be read (the room
        on a node would be a guess)."""
        if not self.watches.started or not self.live:
            return None
        if self.nodes.forbidden or self.all_pods.forbidden:
            return None
        gathered = self._gather(pod)
        nodes = self.nodes_by_name() or {}
        gathered.nodes = nodes
        for name in nodes:
            for p in self.by_node.get(name):
                gathered.pods[cache_key(p)] = p
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
                    pods[cache_key(p)] = p
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
                pods[cache_key(p)] = p
            for p in self.hub.by_nominated.get(name):  # they count there (preemption)
                pods[cache_key(p)] = p
        if candidates:
            gathered.priority_classes = _listed(self.hub.priority_classes)
            pdbs = self.hub.pdbs
            gathered.pdbs = None if _listed(pdbs) is None else list(pdbs.items.values())
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
                others.update(cache_key(pv) for pv in self.pvs_by_disk.get(disk_key(disk)))
        others -= volumes
        for name in sorted(others):
            ref = claim_ref(self.pvs.items.get(name))
            for p in self.by_claim.get(ref) if ref else ():
                pods[cache_key(p)] = p
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
            pods.setdefault(cache_key(slim), slim)
        return True

    # ----------------------------------------------------------------------------------------------
    # what the way out reads (the spawner's readers for nebari_colocate.handlers and release)

    def claim_pods(self, claims: Iterable[str]) -> list[JsonDict]:
        """The pods using ``claims`` in this namespace, each once."""
        found = {
            (p.get("metadata") or {}).get("name"): p
            for c in claims
            for p in self.by_claim.get(f"{self.namespace}/{c}")
        }
        return list(found.values())

    def claims_attached_nodes(self, claims: Iterable[str]) -> set[str] | None:
        """The nodes the volumes of ``claims`` are attached to (VolumeAttachments with
        ``status.attached``); None when the view cannot tell (not live, or no permission to
        read VolumeAttachments)."""
        if not self.live or self.attachments.forbidden:
            return None
        nodes: set[str] = set()
        for claim in claims:
            pvc = self.pvcs.items.get(f"{self.namespace}/{claim}")
            pv = ((pvc or {}).get("spec") or {}).get("volumeName")
            if pv:
                nodes |= attached_nodes(self.attachments_by_pv.get(pv), pv)
        return nodes

    def namespace_pods(self) -> list[JsonDict]:
        """Every pod of this namespace the view knows."""
        return [p for p in self.pods.items.values() if meta(p).get("namespace") == self.namespace]

    def nodes_by_name(self) -> dict[str, JsonDict] | None:
        """Every node the view knows, by name; None when the Nodes cannot be read."""
        if self.nodes.forbidden:
            return None
        return {meta(n).get("name", ""): n for n in self.nodes.items.values()}

    def claim_access_modes(self, claim: str) -> list[str] | None:
        """The access modes of this namespace's claim ``claim`` (None: not known)."""
        pvc = self.pvcs.items.get(f"{self.namespace}/{claim}")
        modes = ((pvc or {}).get("spec") or {}).get("accessModes")
        return list(modes) if modes else None

    def premium_nodes(
        self, resources: Iterable[str]
    ) -> tuple[tuple[str, str | None, str | None], ...] | None:
        """Every node offering one of ``resources``, (name, ``kubernetes.io/hostname`` label,
        ``karpenter.sh/nodepool`` label), sorted; None when the Nodes cannot be read."""
        nodes = self.nodes_by_name()
        if nodes is None:
            return None
        found = []
        for node in nodes.values():
            if offered(node, resources):
                labels = meta(node).get("labels") or {}
                name = str(meta(node).get("name", ""))
                found.append((name, labels.get(HOSTNAME), labels.get(NODEPOOL_LABEL)))
        return tuple(sorted(found))

    def servers_claims(self, username: str, label_value: str, servers: Iterable[str]) -> set[str]:
        """The claims the running ``servers`` of user ``username`` (``label_value``: its safe
        slug) mount in this namespace."""
        wanted = set(servers)
        claims: set[str] = set()
        for pod in self.namespace_pods():
            if not is_server(pod):
                continue
            if owned_by(pod, username, label_value) and pod_server(pod) in wanted:
                claims.update(pod_claims(pod))
        return claims
