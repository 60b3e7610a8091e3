"""What holds the home now, for the wait after a stop: the way out's and the move's
(``docs/decisions.md``, "The way out").

After the stop, the way out waits until the home is released
(:func:`nebari_colocate.wayout.home_released`): no stopped server's pod holds it and, when every
holder was stopped, no VolumeAttachment is attached on the old node.  The live view tells that from
memory while it is fresh (:meth:`nebari_colocate.view.ClusterView.fresh`).  A watch silent on a
dead flow (a dropped NAT or load-balancer flow) still looks live for ``stale_after`` seconds, and
shows the stopped pod and the attachment for ever meanwhile: so while the view is not fresh,
:class:`HomeRelease` reads by name the pods it last knew to hold the claims and the claims'
VolumeAttachments (those the view knows, and the one the attach/detach controller names for the
old node's disk), as the stop itself reads the pod it waits on
(:mod:`nebari_colocate.shared_reflector`).  A pod read gone stays gone for the rest of the wait.
A look whose reads fail gives the view's answer (the wait goes on).
"""

from __future__ import annotations

import asyncio
import logging

from .informer import cache_key
from .kubeapi import Apis, forbidden, read_json_or_none
from .objects import JsonDict, attached_nodes, csi_attachment_name, meta, spec
from .seam import HandlerSpawner
from .slim import slim_pod
from .view import ClusterView

log = logging.getLogger(__name__)

#: seconds one read by name may take
READ_TIMEOUT = 10.0


class HomeRelease:
    """The pods holding ``claims`` of ``spawner``'s namespace and the nodes their volumes are
    attached to, looked at again and again while the way out waits for their release."""

    def __init__(self, spawner: HandlerSpawner, claims: list[str], node: str | None) -> None:
        self.spawner = spawner
        self.claims = list(claims)
        self.node = node
        #: ``namespace/name`` of the pods a read by name found gone
        self.gone: set[str] = set()
        #: reads by name made (tests and benchmarks count them)
        self.reads = 0
        #: whether the view's watches were listed again because a read found them behind
        self.relisted = False

    @property
    def namespace(self) -> str:
        return str(self.spawner.namespace)

    async def look(self) -> tuple[list[JsonDict], set[str] | None]:
        """(the pods holding the claims, the nodes their volumes are attached to, None when
        that cannot be told): from the view while it is live and fresh, else read by name."""
        known = self.spawner.home_pods(self.claims)
        attached = self.spawner.home_attached_nodes(self.claims)
        view: ClusterView = self.spawner.colocation_view()
        if view.live and view.fresh():
            return known, attached
        try:
            pods, nodes = await asyncio.gather(self._pods(known), self._attached(view))
        except Exception as exc:  # the next look tries again; the watch may come back first
            log.info(
                "colocate: could not read %s's home by name while the view is quiet: %s: %s",
                self.namespace,
                type(exc).__name__,
                exc,
            )
            return [p for p in known if cache_key(p) not in self.gone], attached
        self._catch_up(view, known, pods, attached, nodes)
        return pods, nodes

    def _catch_up(
        self,
        view: ClusterView,
        known: list[JsonDict],
        pods: list[JsonDict],
        attached: set[str] | None,
        nodes: set[str] | None,
    ) -> None:
        """Reads that found gone a pod the view still has, or detached a volume it still
        shows attached, prove its watch missed them: list it again (once), so that the start
        after the wait decides on what the API says."""
        if self.relisted:
            return
        read = {cache_key(p) for p in pods}
        missed = [
            key
            for p in known
            if (key := cache_key(p)) not in read and view.has_pod(*key.split("/", 1))
        ]
        detached = sorted(attached - nodes) if attached is not None and nodes is not None else []
        if not missed and not detached:
            return
        self.relisted = True
        log.warning(
            "colocate: the live view of %s missed %s (a quiet watch); listing it again",
            self.namespace,
            ", ".join([*missed, *(f"the detach from {n}" for n in detached)]),
        )
        if missed:
            view.pods.relist()
        if detached:
            view.attachments.relist()

    async def _pods(self, known: list[JsonDict]) -> list[JsonDict]:
        core = Apis(self.spawner.api.api_client).core
        found = []
        for pod in known:
            key = cache_key(pod)
            if key in self.gone:
                continue
            self.reads += 1
            now = await read_json_or_none(
                core.read_namespaced_pod,
                meta(pod).get("name"),
                meta(pod).get("namespace") or self.namespace,
                _request_timeout=READ_TIMEOUT,
            )
            if now is None:
                self.gone.add(key)
            else:
                found.append(slim_pod(now))
        return found

    async def _attached(self, view: ClusterView) -> set[str] | None:
        if view.attachments.forbidden:
            return None
        apis = Apis(self.spawner.api.api_client)
        nodes: set[str] = set()
        for claim in self.claims:
            pvc = view.pvcs.items.get(f"{self.namespace}/{claim}")
            if pvc is None:
                self.reads += 1
                pvc = await read_json_or_none(
                    apis.core.read_namespaced_persistent_volume_claim,
                    claim,
                    self.namespace,
                    _request_timeout=READ_TIMEOUT,
                )
            pv = spec(pvc).get("volumeName")
            if not pv:
                continue
            names = {meta(va).get("name") for va in view.attachments_by_pv.get(pv)}
            if self.node:
                names.add(csi_attachment_name(view.pvs.items.get(pv), self.node))
            for name in sorted(n for n in names if n):
                self.reads += 1
                try:
                    va = await read_json_or_none(
                        apis.storage.read_volume_attachment, name, _request_timeout=READ_TIMEOUT
                    )
                except Exception as exc:
                    if forbidden(exc):
                        return None
                    raise
                if va is not None:
                    nodes |= attached_nodes([va], pv)
        return nodes
