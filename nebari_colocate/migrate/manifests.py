"""The objects a move writes (pure): the copy pod, its summary read back, and the home claim
recreated on its new volume with the old claim's labels and annotations."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone

from ..objects import (
    MIGRATION_ANNOTATION,
    MIGRATION_SINCE_ANNOTATION,
    MIGRATION_STALLED_ANNOTATION,
    MOVING,
    RWX,
    TERMINAL_PHASES,
    USERNAME_ANNOTATION,
    JsonDict,
    Obj,
    is_server,
)
from ..objects import annotations_of as _annotations
from ..objects import meta as _meta
from ..objects import spec as _spec
from .codes import (
    COMPONENT,
    COMPONENT_LABEL,
    COPY_SCRIPT,
    FROM_KEY,
    META_KEY,
    NEW_MOUNT,
    OF_KEY,
    OLD_MOUNT,
)
from .plan import (
    Home,
    claim_size,
    label_value,
    temporary_name,
)

SCHEDULING_FIELDS = ("schedulerName", "priorityClassName")


def servers_scheduling(pods: Iterable[Obj]) -> dict[str, str]:
    """The ``schedulerName`` and ``priorityClassName`` the namespace's server pods agree on
    (a field is left out when they differ or none has it): the hub's, as it places a user's
    pods.  (pure)"""
    seen: dict[str, set[str]] = {key: set() for key in SCHEDULING_FIELDS}
    for pod in pods:
        if is_server(pod):
            for key in SCHEDULING_FIELDS:
                seen[key].add(str(_spec(pod).get(key) or ""))
    return {
        key: values.pop() for key, values in seen.items() if len(values) == 1 and "" not in values
    }


def _on_node(node: str) -> JsonDict:
    """A required node affinity for the node named ``node`` (by field: no label is assumed)."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    required = {"nodeSelectorTerms": [term]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def copy_pod_manifest(
    home: Home,
    image: str,
    attached_node: str | None,
    script: str | None = None,
    scheduling: Mapping[str, str] | None = None,
) -> JsonDict:
    """The pod that copies ``home``'s claim into the temporary claim (see copy_home.py),
    scheduled as the user's pods are (``scheduling``: their ``schedulerName`` and
    ``priorityClassName``, :func:`servers_scheduling`): z2jh's user-scheduler places it, and
    at the users' priority it may preempt z2jh's placeholders as a user's server would."""
    name = temporary_name(home.claim)
    source = script if script is not None else COPY_SCRIPT.read_text()
    spec: JsonDict = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # Ownership and modes are copied as they are: root in the pod, with only the
        # capabilities that takes (all of them allowed by the "baseline" Pod Security level).
        "securityContext": {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False},
        "containers": [
            {
                "name": "copy",
                "image": image,
                "command": [
                    "python3",
                    "-c",
                    source,
                    OLD_MOUNT,
                    NEW_MOUNT,
                    "--replace-destination",
                    "--summary-file",
                    "/dev/termination-log",
                ],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "volumeMounts": [
                    {"name": "old", "mountPath": OLD_MOUNT, "readOnly": True},
                    {"name": "new", "mountPath": NEW_MOUNT},
                ],
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {
                        "drop": ["ALL"],
                        "add": [
                            "CHOWN",
                            "DAC_OVERRIDE",
                            "FOWNER",
                            "FSETID",
                            "MKNOD",
                            "SETFCAP",
                        ],
                    },
                },
            }
        ],
        "volumes": [
            {"name": "old", "persistentVolumeClaim": {"claimName": home.claim, "readOnly": True}},
            {"name": "new", "persistentVolumeClaim": {"claimName": name}},
        ],
    }
    if attached_node:
        # The old volume is still attached there (a detach in progress): start beside it, on
        # whatever taints that node has.
        spec["affinity"] = _on_node(attached_node)
        spec["tolerations"] = [{"operator": "Exists"}]
    for key in SCHEDULING_FIELDS:
        if (scheduling or {}).get(key):
            spec[key] = (scheduling or {})[key]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": home.namespace,
            "labels": {
                "app.kubernetes.io/name": "nebari-colocate",
                COMPONENT_LABEL: COMPONENT,
                "nebari.dev/migrate-claim": label_value(home.claim),
            },
            "annotations": {OF_KEY: home.claim},
        },
        "spec": spec,
    }


def copy_result(pod: Obj) -> JsonDict | None:
    """The copy's JSON summary from a finished copy pod (None while it runs)."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase not in TERMINAL_PHASES:
        return None
    for cs in status.get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or {}
        message = terminated.get("message") or ""
        try:
            summary = json.loads(message)
        except ValueError:
            summary = None
        if isinstance(summary, dict) and "result" in summary:
            if phase == "Failed" and summary.get("result") == "verified":
                summary = {**summary, "result": "error"}
            return summary
        return {
            "result": "verified" if phase == "Succeeded" and not message else "error",
            "problems": [
                f"the copy pod ended {phase} with exit code {terminated.get('exitCode')}"
                + (f": {message[:300]}" if message else "")
            ],
            "digest": "",
        }
    return {"result": "error", "problems": [f"the copy pod ended {phase}"], "digest": ""}


#: annotation prefixes the API server and the PV controller own: not carried to a new claim
_SYSTEM_ANNOTATIONS = (
    "pv.kubernetes.io/",
    "volume.kubernetes.io/",
    "volume.beta.kubernetes.io/",
    "kubectl.kubernetes.io/last-applied-configuration",
)


def claim_metadata(pvc: Obj | None) -> str:
    """The labels and annotations a recreated claim keeps, as JSON (without the mark)."""
    annotations = {
        k: v
        for k, v in _annotations(pvc).items()
        if not k.startswith(_SYSTEM_ANNOTATIONS)
        and k
        not in (
            MIGRATION_ANNOTATION,
            MIGRATION_SINCE_ANNOTATION,
            MIGRATION_STALLED_ANNOTATION,
            FROM_KEY,
        )
    }
    labels = dict(_meta(pvc).get("labels") or {})
    return json.dumps({"labels": labels, "annotations": annotations}, sort_keys=True)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    """A Lease's MicroTime."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def final_claim(home: Home, volume: Obj | None, volume_name: str) -> JsonDict:
    """The home claim recreated on ``volume``, with the old claim's labels and annotations
    (recorded on the old volume before the old claim was deleted)."""
    try:
        meta = json.loads(_annotations(home.old_pv).get(META_KEY) or "null")
    except ValueError:
        meta = None
    if not isinstance(meta, dict):
        meta = json.loads(claim_metadata(home.pvc))
    annotations = dict(meta.get("annotations") or {})
    if home.user and not home.pvc:
        annotations.setdefault(USERNAME_ANNOTATION, home.user)
    annotations.update(
        {
            MIGRATION_ANNOTATION: MOVING,
            MIGRATION_SINCE_ANNOTATION: _now(),
            FROM_KEY: _meta(home.old_pv)["name"],
        }
    )
    size = (_spec(volume).get("capacity") or {}).get("storage")
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": home.claim,
            "labels": dict(meta.get("labels") or {}),
            "annotations": annotations,
        },
        "spec": {
            "accessModes": [RWX],
            "storageClassName": _spec(volume).get("storageClassName"),
            "resources": {"requests": {"storage": size or claim_size(home.pvc or {}) or "1Gi"}},
            "volumeName": volume_name,
            "volumeMode": "Filesystem",
        },
    }


def mark() -> dict[str, str | None]:
    """The annotations that mark a home claim as being moved (the spawner refuses its user's
    spawns, :mod:`nebari_colocate.placement`), since now; a stall noted earlier is cleared."""
    return {
        MIGRATION_ANNOTATION: MOVING,
        MIGRATION_SINCE_ANNOTATION: _now(),
        MIGRATION_STALLED_ANNOTATION: None,
    }


def unmark() -> dict[str, str | None]:
    """The merge patch that removes the mark (:func:`mark`) from a home claim."""
    return {
        MIGRATION_ANNOTATION: None,
        MIGRATION_SINCE_ANNOTATION: None,
        MIGRATION_STALLED_ANNOTATION: None,
    }


def claim_ref_patch(pv: Obj | None, namespace: str, claim: str) -> list[JsonDict]:
    """The JSON patch that pre-binds a volume to ``namespace/claim`` by name, without a uid."""
    return [
        {
            "op": "replace" if "claimRef" in _spec(pv) else "add",
            "path": "/spec/claimRef",
            "value": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": namespace,
                "name": claim,
            },
        }
    ]
