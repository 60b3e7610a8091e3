"""What admission makes of a pinned pod, reused for pods of the same shape.

A pinned decision is taken again on the pod as kube-apiserver admits it (a server-side dry run:
RuntimeClass overhead, LimitRange defaults, default tolerations, mutating webhooks), because
that is what kube-scheduler will fit on the node.  A hub's pods come from a few profiles: every
user's server of one profile has the same images, resources, node selector, tolerations and
affinity, and differs in its name, labels, environment and claims, which the admission plugins a
hub meets do not read to set what the fit reads.  So one dry run per *shape* (:func:`shape_key`:
the namespace and every field the fit reads, as written) serves every pod of that shape for
``reuse_seconds`` (``colocation_dry_run_reuse_seconds``): its admitted fields (:data:`FIELDS`,
each container's ``resources``) are put on the next pod of the shape (:func:`as_admitted`), and
spawns that ask at once share the dry run in flight (:class:`AdmissionModels`).

Should a webhook set a pod's resources from its user (a label), a reused model could be wrong for
another user; what follows is what followed before the dry run existed: the pod is created
pinned, kube-scheduler says it does not fit, and the spawn ends at once on its FailedScheduling
event, with the scheduler's words.  ``colocation_dry_run_reuse_seconds = 0`` makes a dry run for
every pinned pod.

A pod the hub creates teaches its shape too, at no request (:func:`model_from_created`,
:meth:`AdmissionModels.learn`): kube-apiserver stores a pod as admission made it, and the watch
brings it to the hub.  A user's first server with a ``ReadWriteOnce`` home is not pinned and
makes no dry run; kept as created, it is what the user's next server of the profile (pinned to
the same node) would have dry-run.  What the spawner merged into it (the co-location label and
affinity) is taken out again: when admission left the affinity as it was sent, the shape's
affinity is the one written; when it changed it, the created pod teaches nothing (what it would
make of the affinity as written is not known) and the next pinned pod makes its dry run.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections import OrderedDict
from typing import Any

from .objects import JsonDict, Obj

#: the pod spec fields the fit and the placement read that admission may set, taken whole from
#: the admitted pod (the claims, ``volumes``, stay the pod's own)
FIELDS = (
    "affinity",
    "nodeSelector",
    "tolerations",
    "overhead",
    "resources",
    "runtimeClassName",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "schedulerName",
    "topologySpreadConstraints",
)
#: more spec fields admission plugins and webhooks commonly branch on: part of the shape
CONTEXT_FIELDS = ("serviceAccountName", "securityContext", "hostNetwork")
#: container fields in the shape; ``resources`` (and an init container's ``restartPolicy``, which
#: makes it a sidecar the fit counts) are taken from the admitted pod
CONTAINER_FIELDS = ("name", "image", "resources", "restartPolicy")
TAKEN_CONTAINER_FIELDS = ("resources", "restartPolicy")
#: shapes kept at most (a hub has a few profiles; a long tail of one-off shapes is dropped oldest
#: first)
MAX_SHAPES = 256


def _containers(spec: Obj, field: str) -> list[JsonDict]:
    return [
        {k: c.get(k) for k in CONTAINER_FIELDS if k in c}
        for c in spec.get(field) or []
        if isinstance(c, dict)
    ]


def shape_key(pod: Obj) -> str:
    """The namespace and every field of ``pod`` that admission may read to set what the fit
    reads, as written (names, labels, annotations, environment and claims left out): pods of one
    key are admitted alike.  (pure)"""
    spec = pod.get("spec") or {}
    shape = {
        "namespace": (pod.get("metadata") or {}).get("namespace"),
        "spec": {k: spec.get(k) for k in (*FIELDS, *CONTEXT_FIELDS) if k in spec},
        "containers": _containers(spec, "containers"),
        "initContainers": _containers(spec, "initContainers"),
    }
    return json.dumps(shape, sort_keys=True, default=str)


def as_admitted(pod: Obj, model: Obj) -> JsonDict:
    """``pod`` with the admitted fields of ``model`` (the admitted pod of a pod of the same
    :func:`shape_key`): the :data:`FIELDS` of its spec, and each container's (by name)
    ``resources`` and ``restartPolicy``.  (pure)"""
    out: JsonDict = copy.deepcopy(dict(pod))
    spec = out.setdefault("spec", {})
    model_spec = model.get("spec") or {}
    for field in FIELDS:
        if field in model_spec:
            spec[field] = copy.deepcopy(model_spec[field])
        else:
            spec.pop(field, None)
    for field in ("containers", "initContainers"):
        admitted = {c.get("name"): c for c in model_spec.get(field) or [] if isinstance(c, dict)}
        for container in spec.get(field) or []:
            source = admitted.get(container.get("name"))
            if source is None:
                continue
            for key in TAKEN_CONTAINER_FIELDS:
                if key in source:
                    container[key] = copy.deepcopy(source[key])
                else:
                    container.pop(key, None)
    return out


def model_of(admitted: Obj) -> JsonDict:
    """What is kept of an admitted pod: its spec's admitted fields and containers' (small)."""
    spec = admitted.get("spec") or {}
    kept: JsonDict = {k: copy.deepcopy(spec[k]) for k in FIELDS if k in spec}
    for field in ("containers", "initContainers"):
        kept[field] = [
            {k: copy.deepcopy(c[k]) for k in ("name", *TAKEN_CONTAINER_FIELDS) if k in c}
            for c in spec.get(field) or []
            if isinstance(c, dict)
        ]
    return {"spec": kept}


def model_from_created(created: Obj, written: Obj, sent: Obj) -> JsonDict | None:
    """The model of ``written``'s shape taught by ``created``: the pod kube-apiserver stored
    for ``sent`` (``written`` with the co-location label and affinity merged in), with the
    affinity ``written`` has; None when the stored affinity is not the one sent (admission
    changed it: what it would make of ``written``'s is not known).  (pure)"""
    created_spec = created.get("spec") or {}
    sent_spec = sent.get("spec") or {}
    if (created_spec.get("affinity") or None) != (sent_spec.get("affinity") or None):
        return None
    model = model_of(created)
    written_affinity = (written.get("spec") or {}).get("affinity")
    if written_affinity:
        model["spec"]["affinity"] = copy.deepcopy(written_affinity)
    else:
        model["spec"].pop("affinity", None)
    return model


class AdmissionModels:
    """The admitted fields of the last dry run of each shape (:func:`model_of`), with the
    time it answered, and the dry runs in flight (one per shape: the checks that ask at once
    await it).  One per hub and event loop (``HubWatches.admission``)."""

    def __init__(self, max_shapes: int = MAX_SHAPES) -> None:
        self.max_shapes = max_shapes
        self._models: OrderedDict[str, tuple[float, JsonDict]] = OrderedDict()
        self._pending: dict[str, asyncio.Future[JsonDict | None]] = {}
        #: dry runs made, pinned checks that used another pod's, and shapes learnt from a
        #: created pod (:meth:`learn`)
        self.made = 0
        self.reused = 0
        self.learned = 0

    def model(self, key: str, reuse_seconds: float, now: float | None = None) -> JsonDict | None:
        """The model of ``key`` admitted within ``reuse_seconds``, or None."""
        found = self._models.get(key)
        if found is None:
            return None
        at, model = found
        if (time.monotonic() if now is None else now) - at > reuse_seconds:
            del self._models[key]
            return None
        return model

    def pending(self, key: str) -> asyncio.Future[JsonDict | None] | None:
        return self._pending.get(key)

    def begin(self, key: str) -> asyncio.Future[JsonDict | None]:
        """A dry run of ``key`` starts: the future the others await (its model, or None when
        it was refused or failed: each makes its own then)."""
        future: asyncio.Future[JsonDict | None] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        self.made += 1
        return future

    def wanted(self, key: str, reuse_seconds: float) -> bool:
        """Whether ``key`` has no model admitted within ``reuse_seconds`` and no dry run in
        flight: what a created pod of the shape would teach (:meth:`learn`)."""
        return key not in self._pending and self.model(key, reuse_seconds) is None

    def learn(self, key: str, model: JsonDict, reuse_seconds: float) -> bool:
        """Keep ``model`` (:func:`model_from_created`) for ``key`` unless a fresher one is kept
        or a dry run of it is in flight; whether it was kept."""
        if not self.wanted(key, reuse_seconds):
            return False
        self._keep(key, model)
        self.learned += 1
        return True

    def _keep(self, key: str, model: JsonDict) -> None:
        self._models[key] = (time.monotonic(), model)
        self._models.move_to_end(key)
        while len(self._models) > self.max_shapes:
            self._models.popitem(last=False)

    def end(self, key: str, future: asyncio.Future[JsonDict | None], admitted: Any) -> None:
        """The dry run of ``future`` ended with ``admitted`` (the admitted pod, or None)."""
        model = model_of(admitted) if isinstance(admitted, dict) else None
        if model is not None:
            self._keep(key, model)
        if self._pending.get(key) is future:
            del self._pending[key]
        if not future.done():
            future.set_result(model)
