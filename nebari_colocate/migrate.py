"""``nebari-colocate migrate``: move home claims from ReadWriteOnce to ReadWriteMany.

Access modes of a claim are immutable, so a home moves by copying: per user, while none of the
user's servers runs,

1. the old PersistentVolume is set to ``Retain`` (before anything else: from here on no deletion
   of a claim can delete the data);
2. the home claim is marked (``nebari.dev/migration``): the spawner refuses that user's spawns
   with "your home is being moved" until the move ends;
3. a new ReadWriteMany claim ``migrate-<claim>`` is created in the target storage class;
4. a copy pod mounts the old claim read-only and the new one, runs
   :mod:`nebari_colocate.copy_home` and verifies the copy with a checksum manifest of both sides;
   a failed verification stops this user's move, removes the mark and leaves the old claim in
   place, in use;
5. the new volume is set to ``Retain``, the temporary claim deleted, the new volume pre-bound to
   the home claim's name, the old home claim deleted (only now: its volume is retained and a
   verified copy exists) and recreated with the same name, ReadWriteMany, bound to the new volume;
6. the mark is removed.  The old volume stays (``Retain``, ``Released``) until an operator deletes
   it; the command prints how.

Where a move stands is written on the objects themselves (annotations on the old volume, which
outlives every claim), so an interrupted ``apply`` resumes where it stopped and a second ``apply``
of a finished move does nothing.  ``rollback`` puts the home claim back on its old volume while
that volume exists.  See docs/migrate.md.

The decisions (what a claim's state is, what would happen) are pure functions of the objects;
:class:`Mover` does the I/O, every request through :mod:`nebari_colocate.kubeapi`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import getpass
import hashlib
import json
import os
import re
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import messages
from .kubeapi import (
    CONFLICT,
    DENIED,
    NOT_FOUND,
    ApiError,
    Apis,
    forbidden,
    read_json,
    read_json_or_none,
)
from .lease import HELD, STALE, LeaseObserver, duration_of
from .objects import (
    MIGRATION_ANNOTATION,
    MIGRATION_SINCE_ANNOTATION,
    MIGRATION_STALLED_ANNOTATION,
    MOVING,
    RWO,
    RWX,
    SERVERNAME_ANNOTATION,
    TERMINAL_PHASES,
    USERNAME_ANNOTATION,
    JsonDict,
    Obj,
    attached_nodes,
    is_server,
    is_terminal,
    pod_claims,
)
from .objects import annotations_of as _annotations
from .objects import meta as _meta
from .objects import spec as _spec

# Written on the old PersistentVolume: it outlives the claims, so the move's state lives there.
CLAIM_KEY = "nebari.dev/migrate-claim"  # "<namespace>/<claim>"
STEP_KEY = "nebari.dev/migrate-step"
POLICY_KEY = "nebari.dev/migrate-reclaim-policy"  # the policy before the move (on both PVs)
TARGET_KEY = "nebari.dev/migrate-target-pv"
RESULT_KEY = "nebari.dev/migrate-result"  # the copy's JSON summary
PROBLEM_KEY = "nebari.dev/migrate-problem"
CLASS_KEY = "nebari.dev/migrate-storage-class"
META_KEY = "nebari.dev/migrate-claim-metadata"  # the home claim's labels and annotations (JSON)
# On the temporary claim, the copy pod and the final claim.
OF_KEY = "nebari.dev/migration-of"  # the home claim a temporary object belongs to
FROM_KEY = "nebari.dev/migrated-from-pv"  # on the final claim: the old volume
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "nebari-colocate-migrate"

MOVE_KEYS = (
    CLAIM_KEY,
    STEP_KEY,
    POLICY_KEY,
    TARGET_KEY,
    RESULT_KEY,
    PROBLEM_KEY,
    CLASS_KEY,
    META_KEY,
)

#: the steps recorded on the old volume, in order
RETAINED, COPYING, COPIED, SWAPPING, DONE = "retained", "copying", "copied", "swapping", "done"
FAILED = "failed"
STEPS = (RETAINED, COPYING, COPIED, SWAPPING, DONE)

#: plan actions (codes; messages.py has the words)
MOVE, SKIP_RWX, WAIT_SERVERS, RESUME, FINISHED, RETRY, NOT_BOUND, NO_VOLUME = ACTIONS = (
    "move",
    "already-rwx",
    "servers-running",
    "resume",
    "done",
    "retry",
    "not-bound",
    "no-volume",
)

#: outcomes of ``apply`` and ``rollback`` per claim (codes; messages.py has the words)
(
    OUT_DONE,
    OUT_ALREADY_DONE,
    OUT_BLOCKED,
    OUT_FAILED,
    OUT_SKIPPED,
    OUT_ERROR,
    OUT_ROLLED_BACK,
    OUT_NOTHING_TO_ROLL_BACK,
    OUT_WOULD_MOVE,
    OUT_HELD,
) = OUTCOMES = (
    "done",
    "already-done",
    "blocked",
    "failed",
    "skipped",
    "error",
    "rolled-back",
    "nothing-to-roll-back",
    "would-move",
    "held",  # another run holds this home's lease: nothing done
)

#: the points between steps where ``apply`` may be interrupted and resumed (tests inject here)
CHECKPOINTS = (
    "retained",
    "marked",
    "claim-created",
    "copy-started",
    "copied",
    "swapping",
    "new-retained",
    "temporary-deleted",
    "prebound",
    "old-deleted",
    "created",
    "bound",
)

#: the recorded steps of the copy (the old claim is in place) and of the swap
COPY_PHASE = (None, FAILED, RETAINED, COPYING)
SWAP_PHASE = (COPIED, SWAPPING)

#: a holder renews its lease before every step and every third of this in between; a lease
#: seen unchanged for this long by another run (its own clock) may be taken over
#: (:mod:`nebari_colocate.lease`)
LEASE_SECONDS = 60
#: on the lease, for a person who reads it: the holder's host name and process id (no identity:
#: a container may carry its host's name)
HOST_KEY = "nebari.dev/migrate-host"
PID_KEY = "nebari.dev/migrate-pid"

#: CSI drivers and in-tree plugins that offer no ReadWriteMany filesystem volumes
RWO_ONLY_PROVISIONERS = frozenset(
    {
        "ebs.csi.aws.com",
        "kubernetes.io/aws-ebs",
        "pd.csi.storage.gke.io",
        "kubernetes.io/gce-pd",
        "disk.csi.azure.com",
        "kubernetes.io/azure-disk",
        "cinder.csi.openstack.org",
        "kubernetes.io/cinder",
        "rbd.csi.ceph.com",
        "kubernetes.io/rbd",
        "dobs.csi.digitalocean.com",
        "linodebs.csi.linode.com",
        "csi.hetzner.cloud",
        "rancher.io/local-path",
        "topolvm.io",
        "openebs.io/local",
    }
)
STATIC_PROVISIONER = "kubernetes.io/no-provisioner"

COPY_SCRIPT = Path(__file__).with_name("copy_home.py")
DEFAULT_IMAGE = "python:3.12-slim"
OLD_MOUNT, NEW_MOUNT = "/old", "/new"
POLL = 0.2
#: the most one step waits for a claim to bind, a pod to be placed or deleted (``--timeout``)
BIND_TIMEOUT = 300.0


class MigrateError(Exception):
    """A move cannot go on; the message names the claim and the problem."""


class CopyRunning(MigrateError):
    """The copy pod still runs past ``--copy-timeout``: the move is not given up."""


class LeaseLost(MigrateError):
    """Another run took this home's lease over: this run must write nothing more."""


# --------------------------------------------------------------------------------------------------
# reading objects (pure)


def temporary_name(claim: str) -> str:
    """The temporary claim's (and the copy pod's) name: no KubeSpawner claim name starts with
    ``migrate-``; names too long for a pod are shortened with a hash."""
    name = f"migrate-{claim}"
    if len(name) <= 63:
        return name
    return f"migrate-{claim[:37]}-{hashlib.sha256(claim.encode()).hexdigest()[:16]}"


def label_value(text: str) -> str:
    if len(text) <= 63 and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", text):
        return text
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def claim_user(pvc: Obj, prefix: str = "claim-") -> str:
    """The user of a home claim: KubeSpawner's username annotation, else the name's suffix."""
    user: str | None = _annotations(pvc).get(USERNAME_ANNOTATION)
    if user:
        return user
    name = _meta(pvc).get("name", "")
    return name[len(prefix) :] if name.startswith(prefix) else ""


def is_home_claim(pvc: Obj, prefix: str = "claim-") -> bool:
    if OF_KEY in _annotations(pvc):
        return False  # our temporary claim
    return bool(_annotations(pvc).get(USERNAME_ANNOTATION)) or _meta(pvc).get(
        "name", ""
    ).startswith(prefix)


def claim_size(pvc: Obj) -> str | None:
    capacity = ((pvc.get("status") or {}).get("capacity") or {}).get("storage")
    request = ((_spec(pvc).get("resources") or {}).get("requests") or {}).get("storage")
    return capacity or request


def holders(pods: Iterable[Obj], claim: str) -> list[JsonDict]:
    """Pods that mount ``claim`` and have not finished, bound to a node or not (a pending server
    may start any moment), except the migration's own copy pod."""
    found = []
    for pod in pods:
        if is_terminal(pod):
            continue
        if (_meta(pod).get("labels") or {}).get(COMPONENT_LABEL) == COMPONENT:
            continue
        if claim in pod_claims(pod):
            found.append(dict(pod))
    return sorted(found, key=lambda p: _meta(p).get("name", ""))


def server_names(pods: Iterable[Obj]) -> list[str]:
    """``user/server`` of KubeSpawner pods, else the pod name."""
    names = []
    for pod in pods:
        annotations = _annotations(pod)
        if USERNAME_ANNOTATION in annotations:
            names.append(messages.server_display(annotations.get(SERVERNAME_ANNOTATION, "")))
        else:
            names.append(f"pod {_meta(pod).get('name', '')}")
    return names


def volume_step(pv: Obj | None, namespace: str, claim: str) -> str | None:
    """The step a volume records for ``namespace/claim`` (None: no move of that claim)."""
    annotations = _annotations(pv)
    if annotations.get(CLAIM_KEY) != f"{namespace}/{claim}":
        return None
    return annotations.get(STEP_KEY)


def parse_time(text: str | None) -> datetime | None:
    """An API timestamp (``…Z``, with or without microseconds), None when unreadable."""
    if not text:
        return None
    try:
        found = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return found if found.tzinfo else found.replace(tzinfo=timezone.utc)


def lease_facts(lease: Obj) -> JsonDict:
    """Who holds a home's lease and since when (fields of the ``held`` outcome)."""
    spec = _spec(lease)
    return {
        "holder": spec.get("holderIdentity"),
        "since": spec.get("acquireTime"),
        "renewed": spec.get("renewTime"),
        "lease": _meta(lease).get("name"),
        "lease_seconds": spec.get("leaseDurationSeconds"),
    }


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # a container's uid without a passwd entry
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"


@dataclass
class Home:
    """Everything about one home claim that a move reads."""

    namespace: str
    claim: str
    user: str
    pvc: JsonDict | None = None  # the claim now named ``claim`` (old or final)
    old_pv: JsonDict | None = None  # the volume the move started from
    new_pv: JsonDict | None = None
    temporary: JsonDict | None = None
    copy_pod: JsonDict | None = None
    pods: list[JsonDict] = field(default_factory=list)  # holders

    @property
    def step(self) -> str | None:
        return volume_step(self.old_pv, self.namespace, self.claim)

    @property
    def modes(self) -> list[str]:
        return list(_spec(self.pvc).get("accessModes") or [])


def plan_row(home: Home, target_class: str | None) -> JsonDict:
    """What ``apply`` would do for one home (codes and facts)."""
    pvc, step = home.pvc, home.step
    row = {
        "user": home.user,
        "claim": home.claim,
        "namespace": home.namespace,
        "access_modes": home.modes,
        "size": claim_size(pvc) if pvc else None,
        "storage_class": _spec(pvc).get("storageClassName") if pvc else None,
        "volume": _meta(home.old_pv).get("name") or _spec(pvc).get("volumeName") or None,
        "reclaim_policy": _spec(home.old_pv).get("persistentVolumeReclaimPolicy"),
        "running": server_names(home.pods),
        "step": step,
        "target_storage_class": target_class,
        "action": MOVE,
        "problem": _annotations(home.old_pv).get(PROBLEM_KEY) if step else None,
        # the class an unfinished move started with (a different --storage-class changes it
        # before the copy is verified, and is refused after)
        "recorded_storage_class": _annotations(home.old_pv).get(CLASS_KEY) if step else None,
    }
    if step == DONE:
        row["action"] = FINISHED
        row["new_volume"] = _annotations(home.old_pv).get(TARGET_KEY)
    elif step == FAILED:
        row["action"] = WAIT_SERVERS if home.pods else RETRY
    elif step in STEPS:
        row["action"] = RESUME
        if home.pods and step in (RETAINED, COPYING, COPIED):
            row["action"] = WAIT_SERVERS
    elif pvc is None:
        row["action"] = NO_VOLUME
    elif RWX in home.modes:
        row["action"] = SKIP_RWX
    elif not _spec(pvc).get("volumeName") or (pvc.get("status") or {}).get("phase") != "Bound":
        row["action"] = NOT_BOUND
    elif home.pods:
        row["action"] = WAIT_SERVERS
    return row


def movable(row: Obj) -> bool:
    return row["action"] in (MOVE, RESUME, RETRY)


#: why a storage class cannot hold ReadWriteMany homes (codes; messages.py has the words): it
#: does not exist, its provisioner makes only block volumes, it has no provisioner and no volume
CLASS_MISSING, CLASS_RWO_ONLY, CLASS_NO_VOLUME = CLASS_PROBLEMS = (
    "missing",
    "rwo-only",
    "no-volume",
)


def class_problem(storage_class: Obj | None, name: str, rwx_volumes: int | None) -> str | None:
    """Why ``name`` cannot hold ReadWriteMany homes, when that can be known, else None.

    ``storage_class`` is the StorageClass (None: it does not exist); ``rwx_volumes`` the number
    of Available ReadWriteMany volumes of that class (for a class without a provisioner), None
    when not known."""
    if storage_class is None:
        return messages.storage_class_problem(CLASS_MISSING, name)
    provisioner = storage_class.get("provisioner", "")
    if provisioner in RWO_ONLY_PROVISIONERS:
        return messages.storage_class_problem(CLASS_RWO_ONLY, name, provisioner)
    if provisioner == STATIC_PROVISIONER and rwx_volumes == 0:
        return messages.storage_class_problem(CLASS_NO_VOLUME, name)
    return None


#: the fields of a server pod that place it as the hub places its users' pods (z2jh's
#: ``scheduling.userScheduler`` and ``scheduling.podPriority``): the copy pod carries them too
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
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {
                                    "key": "metadata.name",
                                    "operator": "In",
                                    "values": [attached_node],
                                }
                            ]
                        }
                    ]
                }
            }
        }
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


# --------------------------------------------------------------------------------------------------
# the lease: one run at a time per home (I/O)

#: the lease the running step holds (each home's move runs in its own task)
_HELD: contextvars.ContextVar[MoveLease | None] = contextvars.ContextVar("held", default=None)


class MoveLease:
    """This run's hold on one home: a ``coordination.k8s.io`` Lease named like the temporary
    claim.  Created, or taken over (with a resourceVersion precondition) once another run's
    record has stayed unchanged for its duration by this run's clock (:mod:`.lease`), before
    the first write; renewed with a resourceVersion precondition before every step and, while
    held, every third of its duration (:meth:`renewing`), deleted at the end.  A renewal that
    finds the lease changed means another run took it over: this one stops at once."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        claim: str,
        seconds: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.namespace, self.claim = api, namespace, claim
        self.name = temporary_name(claim)
        self.seconds = int(seconds)
        self.identity = f"{_who()} {secrets.token_hex(3)}"
        self.body: JsonDict | None = None
        self.took_over: JsonDict | None = None
        self._clock = clock
        self._renewed = 0.0
        self._writing = asyncio.Lock()
        #: set when a renewal found the lease taken over (the next step raises it)
        self.lost: LeaseLost | None = None

    def _fresh(self, resource_version: str | None = None) -> JsonDict:
        now = _micro_now()
        metadata: JsonDict = {
            "name": self.name,
            "labels": {COMPONENT_LABEL: COMPONENT},
            "annotations": {
                OF_KEY: self.claim,
                HOST_KEY: socket.gethostname(),
                PID_KEY: str(os.getpid()),
            },
        }
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.seconds,
                "acquireTime": now,
                "renewTime": now,
            },
        }

    async def read(self) -> JsonDict | None:
        return await read_json_or_none(self.api.read_namespaced_lease, self.name, self.namespace)

    async def acquire(self) -> JsonDict | None:
        """None when this run holds the lease now; else who holds it (``lease_facts``).

        A lease held by another run is read again (every ``min(2 s, duration / 10)``) until its
        record changes (its holder lives: it is held) or has stayed the same for its whole
        duration by this run's clock (it is taken over)."""
        observer = LeaseObserver(self._clock)
        found: JsonDict | None = None
        writes = 0
        while writes < 3:  # each miss is another run's write in between: read again
            found = await self.read()
            state = STALE if found is None else observer.judge(found)
            if found is not None and state == HELD:
                if observer.renewed:
                    return lease_facts(found)
                await asyncio.sleep(min(2.0, duration_of(found) / 10))
                continue
            writes += 1
            try:
                if found is None:
                    self.body = await read_json(
                        self.api.create_namespaced_lease, self.namespace, self._fresh()
                    )
                else:
                    self.body = await read_json(
                        self.api.replace_namespaced_lease,
                        self.name,
                        self.namespace,
                        self._fresh(_meta(found).get("resourceVersion")),
                    )
                    if _spec(found).get("holderIdentity"):
                        self.took_over = {
                            **lease_facts(found),
                            "state": state,
                            "unchanged_seconds": round(observer.unchanged_for(), 1),
                        }
            except ApiError as exc:
                if exc.status in (NOT_FOUND, CONFLICT):
                    continue
                raise
            self._renewed = time.monotonic()
            return None
        return lease_facts(found) if found else {"holder": "another run", "lease": self.name}

    async def keep(self, force: bool = True) -> None:
        """Renew (only when a third of the lease has passed, unless ``force``); LeaseLost when
        another run holds it now."""
        async with self._writing:
            if self.lost is not None:
                raise self.lost
            if self.body is None or (
                not force and time.monotonic() - self._renewed < self.seconds / 3
            ):
                return
            body = json.loads(json.dumps(self.body))
            body["spec"]["renewTime"] = _micro_now()
            try:
                self.body = await read_json(
                    self.api.replace_namespaced_lease, self.name, self.namespace, body
                )
            except ApiError as exc:
                if exc.status not in (NOT_FOUND, CONFLICT):
                    raise
                now = await self.read()
                self.body = None
                holder = _spec(now).get("holderIdentity") if now else None
                self.lost = LeaseLost(
                    messages.migrate_error(
                        "lease-lost",
                        namespace=self.namespace,
                        lease=self.name,
                        claim=self.claim,
                        holder=holder,
                    )
                )
                raise self.lost from None
            self._renewed = time.monotonic()

    async def renewing(self) -> None:
        """Renew every third of the lease while this run holds it, whatever its step waits
        on (client-go's leader election renews the same way); ends when the lease is lost or
        released.  A renewal the API fails is tried again a second later."""
        while self.body is not None and self.lost is None:
            wait = self.seconds / 3 - (time.monotonic() - self._renewed)
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            try:
                await self.keep(force=False)
            except LeaseLost:
                return
            except Exception:  # (the step's own renewal before its next write raises it)
                await asyncio.sleep(1.0)

    async def release(self) -> None:
        if self.body is None:
            return
        body, self.body = self.body, None
        # Best effort: a lease left behind is taken over by the next run once it has seen it
        # unchanged for its duration.  Never let this hide the outcome of the move.
        with contextlib.suppress(Exception):
            await read_json(
                self.api.delete_namespaced_lease,
                self.name,
                self.namespace,
                body={"preconditions": {"resourceVersion": _meta(body).get("resourceVersion")}},
            )


# --------------------------------------------------------------------------------------------------
# the mover (I/O)


class Mover:
    """Moves home claims of one namespace; every method is safe to run again after a crash."""

    def __init__(
        self,
        api_client: Any,  # kubernetes_asyncio's ApiClient (untyped)
        namespace: str,
        *,
        storage_class: str | None = None,
        image: str = DEFAULT_IMAGE,
        claim_prefix: str = "claim-",
        copy_timeout: float = 3600.0,
        bind_timeout: float = BIND_TIMEOUT,
        lease_seconds: int = LEASE_SECONDS,
        checkpoint: Callable[[str, str], Awaitable[None] | None] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        apis = Apis(api_client)
        self.core = apis.core
        self.storage = apis.storage
        self.coordination = apis.coordination
        self.lease_seconds = lease_seconds
        self.namespace = namespace
        self.storage_class = storage_class
        self.image = image
        self.prefix = claim_prefix
        self.copy_timeout = copy_timeout
        self.bind_timeout = bind_timeout
        self._checkpoint = checkpoint
        #: seconds between looks at the copy pod (and at the servers that may start meanwhile)
        self.copy_poll = 1.0
        self.log = log or (lambda _line: None)

    # -- small API helpers ----------------------------------------------------------------------

    async def pvc(self, name: str) -> JsonDict | None:
        return await read_json_or_none(
            self.core.read_namespaced_persistent_volume_claim, name, self.namespace
        )

    async def pv(self, name: str | None) -> JsonDict | None:
        return await read_json_or_none(self.core.read_persistent_volume, name) if name else None

    async def pod(self, name: str) -> JsonDict | None:
        return await read_json_or_none(self.core.read_namespaced_pod, name, self.namespace)

    async def pods(self) -> list[JsonDict]:
        return (await read_json(self.core.list_namespaced_pod, self.namespace)).get("items") or []

    async def pvcs(self) -> list[JsonDict]:
        listing = await read_json(self.core.list_namespaced_persistent_volume_claim, self.namespace)
        return listing.get("items") or []

    async def pvs(self) -> list[JsonDict]:
        return (await read_json(self.core.list_persistent_volume)).get("items") or []

    async def _patch_pv(self, name: str, body: JsonDict | list[JsonDict]) -> JsonDict:
        return await read_json(self.core.patch_persistent_volume, name, body)

    async def _reserve_for(self, pv_name: str, pv: Obj | None, claim: str) -> JsonDict:
        """Pre-bind the volume to ``claim`` of this namespace by name, without a uid: the claim
        is (re)created under that name next, and the PV controller binds only it."""
        return await self._patch_pv(
            pv_name,
            [
                {
                    "op": "replace" if "claimRef" in _spec(pv) else "add",
                    "path": "/spec/claimRef",
                    "value": {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "namespace": self.namespace,
                        "name": claim,
                    },
                }
            ],
        )

    async def _annotate_pv(self, name: str, values: Mapping[str, str | None]) -> JsonDict:
        return await self._patch_pv(name, {"metadata": {"annotations": dict(values)}})

    async def _annotate_pvc(self, name: str, values: Mapping[str, str | None]) -> JsonDict:
        return await read_json(
            self.core.patch_namespaced_persistent_volume_claim,
            name,
            self.namespace,
            {"metadata": {"annotations": dict(values)}},
        )

    async def _delete_pvc(self, name: str, uid: str) -> None:
        """Delete the claim with this uid (not one recreated under the name), wait until gone."""
        await read_json_or_none(  # None: gone, or a newer claim under the name
            self.core.delete_namespaced_persistent_volume_claim,
            name,
            self.namespace,
            body={"preconditions": {"uid": uid}},
            none_for=(NOT_FOUND, CONFLICT),
        )
        await self._wait(
            lambda: self._gone(self.pvc(name), uid), self.bind_timeout, f"claim {name} deleted"
        )

    async def _delete_pod(self, name: str) -> None:
        await read_json_or_none(
            self.core.delete_namespaced_pod, name, self.namespace, grace_period_seconds=0
        )
        await self._wait(
            lambda: self._gone(self.pod(name), None), self.bind_timeout, f"pod {name} deleted"
        )

    @staticmethod
    async def _gone(read: Awaitable[JsonDict | None], uid: str | None) -> bool:
        obj = await read
        return obj is None or (uid is not None and _meta(obj).get("uid") != uid)

    async def _wait(self, ready: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not await ready():
            if time.monotonic() > deadline:
                raise MigrateError(messages.migrate_error("timed-out", timeout=timeout, what=what))
            await self._keep_lease()
            await asyncio.sleep(POLL)

    @staticmethod
    async def _keep_lease(force: bool = False) -> None:
        lease = _HELD.get()
        if lease is not None:
            await lease.keep(force)

    async def checkpoint(self, claim: str, name: str) -> None:
        self.log(f"{self.namespace}/{claim}: {name}")
        if self._checkpoint is not None:
            result = self._checkpoint(claim, name)
            if asyncio.iscoroutine(result):
                await result

    # -- reading a home -------------------------------------------------------------------------

    async def homes(self, pvs: list[JsonDict] | None = None) -> list[Home]:
        """Every home claim of the namespace, and every move whose claim is gone mid-swap."""
        pvcs, pods = await asyncio.gather(self.pvcs(), self.pods())
        pvs = await self.pvs() if pvs is None else pvs
        by_name = {pv["metadata"]["name"]: pv for pv in pvs}
        moves = {
            _annotations(pv)[CLAIM_KEY].split("/", 1)[1]: pv
            for pv in pvs
            if _annotations(pv).get(CLAIM_KEY, "").startswith(f"{self.namespace}/")
        }
        claims = {_meta(p)["name"]: p for p in pvcs}
        temporaries = {_annotations(p)[OF_KEY]: p for p in pvcs if _annotations(p).get(OF_KEY)}
        homes = []
        for name in sorted(
            {*(n for n, p in claims.items() if is_home_claim(p, self.prefix)), *moves}
        ):
            pvc = claims.get(name)
            old = moves.get(name)
            if old is None and pvc is not None:
                old = by_name.get(_spec(pvc).get("volumeName") or "")
            user = claim_user(pvc, self.prefix) if pvc else name[len(self.prefix) :]
            home = Home(
                self.namespace, name, user, pvc=pvc, old_pv=old, temporary=temporaries.get(name)
            )
            home.new_pv = by_name.get(_annotations(old).get(TARGET_KEY) or "")
            home.pods = holders(pods, name)
            homes.append(home)
        return homes

    async def home(self, claim: str) -> Home:
        """One home, read by name (a move of many homes does not list every volume per step)."""
        tmp_name = temporary_name(claim)
        pvc, temporary, copy_pod, pods = await asyncio.gather(
            self.pvc(claim), self.pvc(tmp_name), self.pod(tmp_name), self.pods()
        )
        old = None
        if pvc is not None:
            for name in (_annotations(pvc).get(FROM_KEY), _spec(pvc).get("volumeName")):
                candidate = await self.pv(name)
                if volume_step(candidate, self.namespace, claim) is not None or (
                    candidate is not None and name == _spec(pvc).get("volumeName")
                ):
                    old = candidate
                    break
        if old is None or volume_step(old, self.namespace, claim) is None:
            # The claim is gone mid-swap (or was recreated): the move is found on its volume.
            moving = [
                pv for pv in await self.pvs() if volume_step(pv, self.namespace, claim) is not None
            ]
            if moving:
                old = moving[0]
        if pvc is None and old is None:
            raise MigrateError(
                messages.migrate_error("claim-not-found", namespace=self.namespace, claim=claim)
            )
        user = claim_user(pvc, self.prefix) if pvc else claim[len(self.prefix) :]
        if temporary is not None and _annotations(temporary).get(OF_KEY) != claim:
            temporary = None
        home = Home(self.namespace, claim, user, pvc=pvc, old_pv=old, temporary=temporary)
        home.new_pv = await self.pv(_annotations(old).get(TARGET_KEY))
        home.copy_pod = copy_pod
        home.pods = holders(pods, claim)
        return home

    async def resolve(self, names: Iterable[str]) -> list[str]:
        """Claim names for users or claim names given on the command line."""
        homes = await self.homes()
        by_user = {h.user: h.claim for h in homes}
        claims = {h.claim for h in homes}
        found = []
        for name in names:
            if name in claims:
                found.append(name)
            elif name in by_user:
                found.append(by_user[name])
            else:
                raise MigrateError(
                    messages.migrate_error(
                        "no-home-claim",
                        name=name,
                        namespace=self.namespace,
                        prefix=self.prefix,
                        annotation=USERNAME_ANNOTATION,
                    )
                )
        return list(dict.fromkeys(found))

    async def check_storage_class(self) -> list[str]:
        """Raise MigrateError for a target class that cannot work; notes for what is unknown."""
        name = self.storage_class
        if not name:
            raise MigrateError(messages.migrate_error("no-storage-class"))
        try:
            sc = await read_json_or_none(self.storage.read_storage_class, name)
        except ApiError as exc:
            if forbidden(exc):
                return [
                    messages.migrate_error("storage-class-unread", name=name, status=exc.status)
                ]
            raise
        rwx = None
        if sc is not None and sc.get("provisioner") == STATIC_PROVISIONER:
            rwx = sum(
                1
                for pv in await self.pvs()
                if _spec(pv).get("storageClassName") == name
                and RWX in (_spec(pv).get("accessModes") or [])
                and (pv.get("status") or {}).get("phase") == "Available"
            )
        problem = class_problem(sc, name, rwx)
        if problem:
            raise MigrateError(problem)
        return []

    # -- the move: one idempotent step per checkpoint ------------------------------------------

    def _user(self, claim: str) -> str:
        return claim[len(self.prefix) :] if claim.startswith(self.prefix) else claim

    def _command(self, verb: str, user: str, storage_class: str | None = None) -> str:
        """The command an operator runs next (shown in problems and refusals)."""
        return messages.migrate_command(verb, user, self.namespace, storage_class)

    async def _holding(self, claim: str, work: Callable[[], Awaitable[JsonDict]]) -> JsonDict:
        """Run ``work`` holding ``claim``'s lease; the ``held`` outcome when another run has it."""
        lease = MoveLease(self.coordination, self.namespace, claim, self.lease_seconds)
        held = await lease.acquire()
        if held is not None:
            return {
                "claim": claim,
                "user": self._user(claim),
                "outcome": OUT_HELD,
                "reason": "held",
                **held,
            }
        if lease.took_over:
            self.log(f"{self.namespace}/{claim}: took the lease over ({lease.took_over})")
        token = _HELD.set(lease)
        renewing = asyncio.ensure_future(lease.renewing())
        try:
            result = await work()
        finally:
            _HELD.reset(token)
            renewing.cancel()
            with contextlib.suppress(BaseException):
                await renewing
            await lease.release()
        if lease.took_over:
            result["took_over"] = lease.took_over
        return result

    async def apply(self, claim: str) -> JsonDict:
        """Move one home, or resume its move; a finished move is left alone.  One run at a time
        per home (a lease); every step reads the recorded state again and does one thing.

        Returns the outcome: ``{"claim", "user", "outcome": done|already-done|blocked|failed|
        skipped|held, "reason", "old_volume", "new_volume", ...}``."""
        return await self._holding(claim, lambda: self._move(claim))

    def _steps(self) -> tuple[tuple[str, Callable[[Home], Awaitable[JsonDict | None]]], ...]:
        """The steps of a move, named by the checkpoint reached after each (CHECKPOINTS)."""
        steps = (
            ("retained", self._retain_old),
            ("marked", self._mark),
            ("claim-created", self._create_temporary),
            ("copy-started", self._start_copy),
            ("copied", self._wait_copied),
            ("swapping", self._record_target),
            ("new-retained", self._retain_new),
            ("temporary-deleted", self._delete_temporary),
            ("prebound", self._prebind_new),
            ("old-deleted", self._delete_old_claim),
            ("created", self._create_final),
            ("bound", self._wait_final_bound),
        )
        assert tuple(name for name, _ in steps) == CHECKPOINTS
        return steps

    async def _move(self, claim: str) -> JsonDict:
        home = await self.home(claim)
        outcome: JsonDict = {
            "claim": claim,
            "user": home.user,
            "old_volume": _meta(home.old_pv).get("name"),
            "new_volume": None,
        }
        if home.step == DONE:
            return {
                **outcome,
                "outcome": OUT_ALREADY_DONE,
                "new_volume": _annotations(home.old_pv).get(TARGET_KEY),
            }
        if home.step is None:
            row = plan_row(home, self.storage_class)
            if row["action"] != MOVE:
                return {
                    **outcome,
                    "outcome": OUT_SKIPPED,
                    "reason": row["action"],
                    "running": row["running"],
                }
        if home.step in (*COPY_PHASE, COPIED) and home.pods:
            await self._abandon(home, WAIT_SERVERS)
            return {**outcome, **self._blocked(home.pods)}
        switched = await self._switch_class(home)
        if switched:
            outcome["storage_class_changed"] = switched
        if home.pvc is not None and _annotations(home.pvc).get(MIGRATION_STALLED_ANNOTATION):
            # an apply again resumes a move that gave up part-way: it is moving, not stalled
            await self._annotate_pvc(claim, {MIGRATION_STALLED_ANNOTATION: None})
        for name, step in self._steps():
            await self._keep_lease(force=True)  # still ours: nobody else wrote meanwhile
            home = await self.home(claim)
            try:
                stop = await step(home)
            except (LeaseLost, CopyRunning):
                raise
            except MigrateError as exc:
                raise await self._gave_up(claim, exc) from None
            if stop is not None:
                return {**outcome, **stop}
            await self.checkpoint(claim, name)
        await self._keep_lease(force=True)
        new_name = await self._finish(await self.home(claim))
        return {**outcome, "outcome": OUT_DONE, "new_volume": new_name}

    @staticmethod
    def _blocked(pods: list[JsonDict]) -> JsonDict:
        return {"outcome": OUT_BLOCKED, "reason": WAIT_SERVERS, "running": server_names(pods)}

    async def _gave_up(self, claim: str, exc: MigrateError) -> MigrateError:
        """A step could not be done.  Before the swap the old claim is in place: unmark it, so
        the user can work, and record the problem; during the swap the mark must stay (the claim
        is being replaced): say how to finish or undo the move."""
        home = await self.home(claim)
        old_name = _meta(home.old_pv).get("name")
        user = home.user or claim
        if (
            home.step in (RETAINED, COPYING)
            and home.pvc is not None
            and old_name
            and _spec(home.pvc).get("volumeName") == old_name
        ):
            await self._abandon(home, f"gave up: {exc}"[:1000])
            return MigrateError(
                messages.migrate_error(
                    "gave-up-unmarked",
                    problem=exc,
                    claim=claim,
                    volume=old_name,
                    user=user,
                    rollback=self._command("rollback", user),
                )
            )
        if home.step in SWAP_PHASE:
            if home.pvc is not None and _annotations(home.pvc).get(MIGRATION_ANNOTATION) == MOVING:
                # the user's refusal says the move stopped and waits for an administrator
                await self._annotate_pvc(claim, {MIGRATION_STALLED_ANNOTATION: _now()})
            return MigrateError(
                messages.migrate_error(
                    "gave-up-marked",
                    problem=exc,
                    claim=claim,
                    user=user,
                    rollback=self._command("rollback", user),
                )
            )
        return exc

    async def _switch_class(self, home: Home) -> JsonDict | None:
        """A ``--storage-class`` other than the one the unfinished move recorded: before the copy
        is verified, start over in the class asked for (the old temporary claim and copy pod are
        deleted; they hold no data of the only copy); after it, refuse."""
        recorded = _annotations(home.old_pv).get(CLASS_KEY)
        asked = self.storage_class
        if home.step in (None, DONE) or not recorded or not asked or recorded == asked:
            return None
        user = home.user or home.claim
        if home.step in SWAP_PHASE:
            raise MigrateError(
                messages.migrate_error(
                    "class-switch-too-late",
                    claim=home.claim,
                    recorded=recorded,
                    step=home.step,
                    asked=asked,
                    apply=self._command("apply", user, recorded),
                    rollback=self._command("rollback", user),
                )
            )
        tmp_name = temporary_name(home.claim)
        if home.copy_pod is not None:
            await self._delete_pod(tmp_name)
        if home.temporary is not None:
            await self._delete_pvc(tmp_name, _meta(home.temporary)["uid"])
        await self._annotate_pv(
            _meta(home.old_pv)["name"],
            {CLASS_KEY: asked, STEP_KEY: RETAINED, RESULT_KEY: None, PROBLEM_KEY: None},
        )
        self.log(f"{self.namespace}/{home.claim}: storage class {recorded} -> {asked}")
        return {"from": recorded, "to": asked}

    async def _abandon(self, home: Home, problem: str) -> None:
        """The copy cannot go on (a server uses the home, or a step gave up): the copy (if any)
        may be stale.  Unmark the claim so the user keeps working; the next ``apply`` copies
        again.  Nothing is deleted but the copy pod."""
        if home.step in (None, FAILED):
            return
        if home.copy_pod is not None:
            await self._delete_pod(temporary_name(home.claim))
        name = _meta(home.old_pv)["name"]
        await self._annotate_pv(name, {STEP_KEY: RETAINED, RESULT_KEY: None, PROBLEM_KEY: problem})
        if home.pvc is not None and _spec(home.pvc).get("volumeName") == name:
            await self._annotate_pvc(
                home.claim,
                {
                    MIGRATION_ANNOTATION: None,
                    MIGRATION_SINCE_ANNOTATION: None,
                    MIGRATION_STALLED_ANNOTATION: None,
                },
            )

    # Each step below reads the home as recorded now, does nothing when its effect is there (or
    # the move is past it), else does its one thing; None to go on, an outcome to stop.

    async def _retain_old(self, home: Home) -> JsonDict | None:
        """1. The old volume ``Retain``, before anything else, and the move recorded on it."""
        if home.step not in COPY_PHASE:
            return None
        claim, pvc = home.claim, home.pvc
        if pvc is None:
            raise MigrateError(
                messages.migrate_error(
                    "claim-gone-before-copy", namespace=self.namespace, claim=claim
                )
            )
        old_name: str | None = _spec(pvc).get("volumeName")
        recorded = _meta(home.old_pv).get("name")
        if home.step is not None and old_name != recorded:
            raise MigrateError(
                messages.migrate_error(
                    "claim-moved-before-retain",
                    namespace=self.namespace,
                    claim=claim,
                    on_volume=old_name,
                    recorded=recorded,
                    rollback=self._command("rollback", home.user or claim),
                )
            )
        old = home.old_pv if recorded == old_name else await self.pv(old_name)
        if old is None or not old_name:
            raise MigrateError(
                messages.migrate_error(
                    "volume-unreadable", namespace=self.namespace, claim=claim, volume=old_name
                )
            )
        annotations = _annotations(old)
        values = {
            CLAIM_KEY: f"{self.namespace}/{claim}",
            POLICY_KEY: annotations.get(POLICY_KEY)
            or _spec(old).get("persistentVolumeReclaimPolicy")
            or "Delete",
            CLASS_KEY: annotations.get(CLASS_KEY) or self.storage_class,
            PROBLEM_KEY: None,
        }
        if not values[CLASS_KEY]:
            raise MigrateError(messages.migrate_error("no-storage-class-for", claim=claim))
        if home.step in (None, FAILED):
            values[STEP_KEY] = RETAINED
            values[RESULT_KEY] = None
        await self._patch_pv(
            old_name,
            {
                "metadata": {"annotations": values},
                "spec": {"persistentVolumeReclaimPolicy": "Retain"},
            },
        )
        return None

    async def _mark(self, home: Home) -> JsonDict | None:
        """2. The claim marked: the spawner refuses this user's spawns from now on."""
        if home.step not in COPY_PHASE:
            return None
        old_name = _meta(home.old_pv).get("name")
        if home.pvc is None or _spec(home.pvc).get("volumeName") != old_name:
            raise MigrateError(
                messages.migrate_error(
                    "claim-moved-before-mark",
                    namespace=self.namespace,
                    claim=home.claim,
                    on_volume=_spec(home.pvc).get("volumeName"),
                    volume=old_name,
                )
            )
        if _annotations(home.pvc).get(MIGRATION_ANNOTATION) != MOVING:
            await self._annotate_pvc(
                home.claim,
                {
                    MIGRATION_ANNOTATION: MOVING,
                    MIGRATION_SINCE_ANNOTATION: _now(),
                    MIGRATION_STALLED_ANNOTATION: None,
                },
            )
        running = holders(await self.pods(), home.claim)
        if running:  # started between the plan and the mark
            await self._abandon(await self.home(home.claim), WAIT_SERVERS)
            return self._blocked(running)
        return None

    async def _create_temporary(self, home: Home) -> JsonDict | None:
        """3. The new ReadWriteMany claim in the target class."""
        if home.step not in COPY_PHASE:
            return None
        claim, old_name = home.claim, _meta(home.old_pv)["name"]
        tmp_name = temporary_name(claim)
        temporary = await self.pvc(tmp_name)
        if temporary is not None and _annotations(temporary).get(OF_KEY) != claim:
            raise MigrateError(
                messages.migrate_error(
                    "temporary-not-ours", namespace=self.namespace, temporary=tmp_name
                )
            )
        if temporary is None:
            await read_json(
                self.core.create_namespaced_persistent_volume_claim,
                self.namespace,
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {
                        "name": tmp_name,
                        "labels": {COMPONENT_LABEL: COMPONENT},
                        "annotations": {OF_KEY: claim},
                    },
                    "spec": {
                        "accessModes": [RWX],
                        "storageClassName": _annotations(home.old_pv)[CLASS_KEY],
                        "resources": {"requests": {"storage": claim_size(home.pvc or {}) or "1Gi"}},
                        "volumeMode": "Filesystem",
                    },
                },
            )
        if home.step != COPYING:
            await self._annotate_pv(old_name, {STEP_KEY: COPYING})
        return None

    async def _start_copy(self, home: Home) -> JsonDict | None:
        """4. The copy pod (an earlier attempt's, finished unverified or going, is replaced)."""
        if home.step != COPYING:
            return None
        tmp_name = temporary_name(home.claim)
        pod = home.copy_pod
        if pod is not None and (
            _meta(pod).get("deletionTimestamp")
            or (copy_result(pod) or {"result": "verified"})["result"] != "verified"
        ):
            await self._delete_pod(tmp_name)
            pod = None
        if pod is None:
            attached = await self._attached_node(_meta(home.old_pv)["name"])
            scheduling = servers_scheduling(await self.pods())
            await read_json(
                self.core.create_namespaced_pod,
                self.namespace,
                copy_pod_manifest(home, self.image, attached, scheduling=scheduling),
            )
        return None

    async def _wait_copied(self, home: Home) -> JsonDict | None:
        """5. The copy finished and verified (recorded), or the move stops for this user."""
        if home.step != COPYING:
            return None
        claim, old_name = home.claim, _meta(home.old_pv)["name"]
        summary = await self._wait_copy(home)
        if summary.get("result") == WAIT_SERVERS:
            await self._abandon(await self.home(claim), WAIT_SERVERS)
            return {"outcome": OUT_BLOCKED, "reason": WAIT_SERVERS, "running": summary["running"]}
        record = json.dumps(
            {
                k: summary.get(k)
                for k in ("result", "entries", "files", "bytes", "digest", "problems")
            }
        )
        if summary.get("result") != "verified":
            # Stop this user's move; the old claim stays in place, in use.
            problem = "; ".join(summary.get("problems") or []) or summary.get("result", "error")
            await self._annotate_pv(
                old_name,
                {
                    STEP_KEY: FAILED,
                    RESULT_KEY: record,
                    PROBLEM_KEY: f"copy {summary.get('result')}: {problem}"[:1000],
                },
            )
            await self._annotate_pvc(
                claim,
                {
                    MIGRATION_ANNOTATION: None,
                    MIGRATION_SINCE_ANNOTATION: None,
                    MIGRATION_STALLED_ANNOTATION: None,
                },
            )
            return {
                "outcome": OUT_FAILED,
                "reason": f"copy-{summary.get('result')}",
                "problems": summary.get("problems") or [],
            }
        await self._annotate_pv(old_name, {STEP_KEY: COPIED, RESULT_KEY: record})
        return None

    async def _attached_node(self, pv_name: str) -> str | None:
        listing = await read_json_or_none(self.storage.list_volume_attachment, none_for=DENIED)
        if listing is None:
            return None
        nodes = sorted(attached_nodes(listing.get("items") or [], pv_name))
        return nodes[0] if len(nodes) == 1 else None

    async def _wait_copy(self, home: Home) -> JsonDict:
        claim = home.claim
        pod_name = temporary_name(claim)
        deadline = time.monotonic() + self.copy_timeout
        unplaced_deadline = time.monotonic() + self.bind_timeout
        while True:
            pod = await self.pod(pod_name)
            if pod is None:
                gone = messages.migrate_error("copy-pod-gone", pod=pod_name)
                return {"result": "error", "problems": [gone]}
            summary = copy_result(pod)
            if summary is not None:
                return summary
            running = holders(await self.pods(), claim)
            if running:
                return {"result": WAIT_SERVERS, "running": server_names(running)}
            if not _spec(pod).get("nodeName") and time.monotonic() > unplaced_deadline:
                why = [
                    c.get("message") or c.get("reason") or ""
                    for c in (pod.get("status") or {}).get("conditions") or []
                    if c.get("type") == "PodScheduled" and c.get("status") == "False"
                ]
                raise MigrateError(
                    messages.migrate_error(
                        "copy-pod-unscheduled",
                        namespace=self.namespace,
                        pod=pod_name,
                        timeout=self.bind_timeout,
                        why=why,
                    )
                )
            if time.monotonic() > deadline:
                user = home.user or claim
                raise CopyRunning(
                    messages.migrate_error(
                        "copy-running",
                        namespace=self.namespace,
                        pod=pod_name,
                        timeout=self.copy_timeout,
                        claim=claim,
                        rollback=self._command("rollback", user),
                    )
                )
            await self._keep_lease()
            await asyncio.sleep(self.copy_poll)

    async def _record_target(self, home: Home) -> JsonDict | None:
        """6. The swap begins: the copy's volume and the claim's metadata recorded."""
        if home.step != COPIED:
            return None
        if home.pods:
            await self._abandon(home, WAIT_SERVERS)
            return self._blocked(home.pods)
        tmp_name = temporary_name(home.claim)
        temporary = await self.pvc(tmp_name)
        if temporary is None or not _spec(temporary).get("volumeName"):
            raise MigrateError(
                messages.migrate_error(
                    "temporary-not-bound", namespace=self.namespace, temporary=tmp_name
                )
            )
        new_name = _spec(temporary)["volumeName"]
        await self._wait(
            lambda: self._bound(tmp_name), self.bind_timeout, f"claim {tmp_name} bound"
        )
        await self._annotate_pv(
            _meta(home.old_pv)["name"],
            {STEP_KEY: SWAPPING, TARGET_KEY: new_name, META_KEY: claim_metadata(home.pvc)},
        )
        return None

    async def _target(self, home: Home) -> tuple[str, JsonDict]:
        """The new volume of a move being swapped."""
        old_name = _meta(home.old_pv)["name"]
        new_name: str | None = _annotations(home.old_pv).get(TARGET_KEY)
        if not new_name:
            raise MigrateError(
                messages.migrate_error("no-target-volume", volume=old_name, claim=home.claim)
            )
        new = home.new_pv if _meta(home.new_pv).get("name") == new_name else await self.pv(new_name)
        if new is None:
            raise MigrateError(
                messages.migrate_error("target-volume-gone", new_volume=new_name, claim=home.claim)
            )
        return new_name, new

    async def _retain_new(self, home: Home) -> JsonDict | None:
        """7. The copy survives its temporary claim: the new volume ``Retain``."""
        if home.step != SWAPPING:
            return None
        new_name, new = await self._target(home)
        if _spec(new).get("persistentVolumeReclaimPolicy") != "Retain":
            await self._patch_pv(
                new_name,
                {
                    "metadata": {
                        "annotations": {
                            POLICY_KEY: _spec(new).get("persistentVolumeReclaimPolicy") or "Delete"
                        }
                    },
                    "spec": {"persistentVolumeReclaimPolicy": "Retain"},
                },
            )
        return None

    async def _delete_temporary(self, home: Home) -> JsonDict | None:
        """8. The copy pod and the temporary claim deleted (the new volume is retained)."""
        if home.step != SWAPPING:
            return None
        tmp_name = temporary_name(home.claim)
        if home.copy_pod is not None:
            await self._delete_pod(tmp_name)
        temporary = await self.pvc(tmp_name)
        if temporary is not None and _annotations(temporary).get(OF_KEY) == home.claim:
            await self._delete_pvc(tmp_name, _meta(temporary)["uid"])
        return None

    def _final(self, home: Home, new_name: str) -> bool:
        return home.pvc is not None and _spec(home.pvc).get("volumeName") == new_name

    async def _prebind_new(self, home: Home) -> JsonDict | None:
        """9. The new volume pre-bound to the home claim's name (no uid: it is recreated)."""
        if home.step != SWAPPING:
            return None
        new_name, new = await self._target(home)
        ref = _spec(new).get("claimRef") or {}
        if not self._final(home, new_name) and (
            ref.get("name") != home.claim
            or ref.get("namespace") != self.namespace
            or ref.get("uid")
        ):
            await self._reserve_for(new_name, new, home.claim)
        return None

    async def _delete_old_claim(self, home: Home) -> JsonDict | None:
        """10. The old claim deleted, only now: its volume is retained and a verified copy
        exists."""
        if home.step != SWAPPING or home.pvc is None:
            return None
        new_name, _ = await self._target(home)
        old_name = _meta(home.old_pv)["name"]
        current = home.pvc
        if _spec(current).get("volumeName") == old_name:
            await self._delete_pvc(home.claim, _meta(current)["uid"])
        elif not self._final(home, new_name):
            raise MigrateError(
                messages.migrate_error(
                    "claim-recreated",
                    namespace=self.namespace,
                    claim=home.claim,
                    on_volume=_spec(current).get("volumeName"),
                    volume=old_name,
                    new_volume=new_name,
                )
            )
        return None

    async def _create_final(self, home: Home) -> JsonDict | None:
        """11. The home claim recreated, ReadWriteMany, on the new volume."""
        if home.step != SWAPPING or home.pvc is not None:
            return None
        new_name, new = await self._target(home)
        await read_json(
            self.core.create_namespaced_persistent_volume_claim,
            self.namespace,
            self._final_claim(home, new, new_name),
        )
        return None

    async def _wait_final_bound(self, home: Home) -> JsonDict | None:
        """12. The PV controller bound it."""
        if home.step != SWAPPING:
            return None
        new_name, _ = await self._target(home)
        await self._wait(
            lambda: self._bound(home.claim, new_name),
            self.bind_timeout,
            f"claim {home.claim} bound to {new_name}",
        )
        return None

    async def _finish(self, home: Home) -> str:
        """The new volume's reclaim policy restored, the mark removed, the move recorded done."""
        if home.step != SWAPPING:
            raise MigrateError(
                messages.migrate_error("step-after-last", claim=home.claim, at_step=home.step)
            )
        new_name, new = await self._target(home)
        restore = _annotations(new).get(POLICY_KEY)
        if restore:
            await self._patch_pv(
                new_name,
                {
                    "metadata": {"annotations": {POLICY_KEY: None}},
                    "spec": {"persistentVolumeReclaimPolicy": restore},
                },
            )
        await self._annotate_pvc(
            home.claim,
            {
                MIGRATION_ANNOTATION: None,
                MIGRATION_SINCE_ANNOTATION: None,
                MIGRATION_STALLED_ANNOTATION: None,
            },
        )
        await self._annotate_pv(_meta(home.old_pv)["name"], {STEP_KEY: DONE, PROBLEM_KEY: None})
        return new_name

    def _final_claim(self, home: Home, volume: Obj | None, volume_name: str) -> JsonDict:
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

    async def _bound(self, claim: str, volume: str | None = None) -> bool:
        pvc = await self.pvc(claim)
        if pvc is None or (pvc.get("status") or {}).get("phase") != "Bound":
            return False
        return volume is None or _spec(pvc).get("volumeName") == volume

    # -- the way back: the same shape, decided by where the claim really is ----------------------

    async def rollback(self, claim: str) -> JsonDict:
        """Put ``claim`` back on its old volume, holding the home's lease.  The copy is kept when
        it may hold newer data (the claim was on it: the user may have worked since).  Each step
        reads the claim again; the old volume gets its reclaim policy back only once the claim is
        bound to it again."""
        return await self._holding(claim, lambda: self._roll_back(claim))

    async def _roll_back(self, claim: str) -> JsonDict:
        home = await self.home(claim)
        old_name: str | None = _meta(home.old_pv).get("name")
        outcome: JsonDict = {"claim": claim, "user": home.user, "old_volume": old_name}
        if home.step is None:
            return {**outcome, "outcome": OUT_NOTHING_TO_ROLL_BACK}
        # a step is read from the old volume's annotations: that volume, and its name, exist
        assert old_name is not None
        if home.pods:
            return {**outcome, **self._blocked(home.pods)}
        kept: list[str] = []
        for step in (
            self._back_stop_copy,
            self._back_off_other_volume,
            self._back_recreate_on_old,
            self._back_wait_bound,
            self._back_delete_temporary,
            self._back_release_copy,
            self._back_restore_old,
        ):
            await self._keep_lease(force=True)
            await step(await self.home(claim), kept)
        current = await self.pvc(claim)
        old = await self.pv(old_name)
        return {
            **outcome,
            "outcome": OUT_ROLLED_BACK,
            "kept_volume": kept[-1] if kept else None,
            # where the home is now, as read (not as planned), and what guards the old volume
            "volume": _spec(current).get("volumeName") or None,
            "old_reclaim_policy": _spec(old).get("persistentVolumeReclaimPolicy"),
        }

    async def _back_stop_copy(self, home: Home, kept: list[str]) -> None:
        if home.copy_pod is not None:
            await self._delete_pod(temporary_name(home.claim))

    async def _back_off_other_volume(self, home: Home, kept: list[str]) -> None:
        """The claim is on another volume (the move swapped it, whatever step is recorded):
        that volume holds the user's data since, so it is retained and kept, and the claim is
        deleted to be recreated on the old one."""
        old_name = _meta(home.old_pv)["name"]
        current = home.pvc
        if current is None or _spec(current).get("volumeName") in (None, "", old_name):
            return
        other = _spec(current)["volumeName"]
        volume = await self.pv(other)
        if volume is not None and _spec(volume).get("persistentVolumeReclaimPolicy") != "Retain":
            await self._patch_pv(other, {"spec": {"persistentVolumeReclaimPolicy": "Retain"}})
        if volume is not None:
            kept.append(other)
        await self._annotate_pvc(
            home.claim,
            {
                MIGRATION_ANNOTATION: MOVING,
                MIGRATION_SINCE_ANNOTATION: _now(),
                MIGRATION_STALLED_ANNOTATION: None,
            },
        )
        await self._delete_pvc(home.claim, _meta(current)["uid"])

    async def _back_recreate_on_old(self, home: Home, kept: list[str]) -> None:
        if home.pvc is not None:
            return
        old_name = _meta(home.old_pv)["name"]
        old = home.old_pv
        await self._reserve_for(old_name, old, home.claim)
        body = self._final_claim(home, old, old_name)
        body["spec"]["accessModes"] = list(_spec(old).get("accessModes") or [RWO])
        body["metadata"]["annotations"].pop(FROM_KEY, None)
        await read_json(self.core.create_namespaced_persistent_volume_claim, self.namespace, body)

    async def _back_wait_bound(self, home: Home, kept: list[str]) -> None:
        old_name = _meta(home.old_pv)["name"]
        await self._wait(
            lambda: self._on_old(home.claim, old_name),
            self.bind_timeout,
            f"claim {home.claim} bound to {old_name}",
        )

    async def _on_old(self, claim: str, old_name: str) -> bool:
        """The claim bound to the old volume, and the old volume bound to that claim."""
        pvc, old = await asyncio.gather(self.pvc(claim), self.pv(old_name))
        if pvc is None or old is None or _spec(pvc).get("volumeName") != old_name:
            return False
        if (pvc.get("status") or {}).get("phase") != "Bound":
            return False
        ref = _spec(old).get("claimRef") or {}
        phase = (old.get("status") or {}).get("phase")
        return phase == "Bound" and ref.get("uid") == _meta(pvc).get("uid")

    async def _back_delete_temporary(self, home: Home, kept: list[str]) -> None:
        tmp_name = temporary_name(home.claim)
        if home.temporary is not None:
            await self._delete_pvc(tmp_name, _meta(home.temporary)["uid"])

    async def _back_release_copy(self, home: Home, kept: list[str]) -> None:
        """A retained copy is kept for the operator, no longer reserved for the home claim."""
        new_name = _annotations(home.old_pv).get(TARGET_KEY)
        new = await self.pv(new_name)
        if (
            not new_name
            or new is None
            or _spec(new).get("persistentVolumeReclaimPolicy") != "Retain"
        ):
            return
        ref = _spec(new).get("claimRef")
        if ref is not None and not ref.get("uid"):
            await self._patch_pv(new_name, [{"op": "remove", "path": "/spec/claimRef"}])
        if new_name not in kept:
            kept.append(new_name)

    async def _back_restore_old(self, home: Home, kept: list[str]) -> None:
        """The old volume's reclaim policy back, only while the claim is bound to it: a Released
        or unbound volume with ``Delete`` would be deleted, and it is the way back."""
        old_name = _meta(home.old_pv)["name"]
        if not await self._on_old(home.claim, old_name):
            current = await self.pvc(home.claim)
            raise MigrateError(
                messages.migrate_error(
                    "claim-not-on-old",
                    namespace=self.namespace,
                    claim=home.claim,
                    on_volume=_spec(current).get("volumeName"),
                    volume=old_name,
                )
            )
        old = await self.pv(old_name)
        policy = _annotations(old).get(POLICY_KEY) or _spec(old).get(
            "persistentVolumeReclaimPolicy"
        )
        await self._patch_pv(
            old_name,
            {
                "metadata": {"annotations": dict.fromkeys(MOVE_KEYS)},
                "spec": {"persistentVolumeReclaimPolicy": policy},
            },
        )
        await self._annotate_pvc(
            home.claim,
            {
                MIGRATION_ANNOTATION: None,
                MIGRATION_SINCE_ANNOTATION: None,
                MIGRATION_STALLED_ANNOTATION: None,
                FROM_KEY: None,
            },
        )

    # -- status ---------------------------------------------------------------------------------

    async def status(self, claims: Iterable[str] | None = None) -> list[JsonDict]:
        wanted = set(claims) if claims else None
        rows = []
        for home in await self.homes():
            if wanted is not None and home.claim not in wanted:
                continue
            if wanted is None and home.step is None:
                continue
            home.copy_pod = await self.pod(temporary_name(home.claim))
            annotations = _annotations(home.old_pv)
            result = None
            with contextlib.suppress(ValueError, TypeError):
                result = json.loads(annotations.get(RESULT_KEY) or "null")
            rows.append(
                {
                    "user": home.user,
                    "claim": home.claim,
                    "step": home.step,
                    "access_modes": home.modes,
                    "old_volume": _meta(home.old_pv).get("name"),
                    "old_reclaim_policy": _spec(home.old_pv).get("persistentVolumeReclaimPolicy"),
                    "new_volume": annotations.get(TARGET_KEY)
                    or _spec(home.temporary).get("volumeName")
                    or None,
                    "copy_pod": (home.copy_pod.get("status") or {}).get("phase")
                    if home.copy_pod
                    else None,
                    "copy": result,
                    "marked": _annotations(home.pvc).get(MIGRATION_ANNOTATION) == MOVING,
                    "running": server_names(home.pods),
                    "problem": annotations.get(PROBLEM_KEY),
                    "held_by": await self._lease_holder(home.claim),
                }
            )
        return rows

    async def _lease_holder(self, claim: str) -> JsonDict | None:
        """Who runs this home's move now (None: no run holds it, or the lease is not readable)."""
        try:
            lease = await MoveLease(self.coordination, self.namespace, claim, 0).read()
        except ApiError as exc:
            if forbidden(exc):
                return None
            raise
        return lease_facts(lease) if lease and _spec(lease).get("holderIdentity") else None


def hub_storage_class() -> str | None:
    """The hub's ``custom.storage-class`` when run inside the hub image (z2jh), else None."""
    try:
        from z2jh import get_config
    except ImportError:
        return None
    value = get_config("custom.storage-class", None)
    return value or None


async def apply_many(mover: Mover, claims: list[str], concurrency: int) -> list[JsonDict]:
    """Move several homes, at most ``concurrency`` at a time; one user's failure stops only
    that user's move."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(claim: str) -> JsonDict:
        async with gate:
            try:
                return await mover.apply(claim)
            except MigrateError as exc:
                user = mover._user(claim)
                return {"claim": claim, "user": user, "outcome": OUT_ERROR, "reason": str(exc)}

    return list(await asyncio.gather(*(one(c) for c in claims)))
