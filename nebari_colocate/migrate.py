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
:class:`Mover` does the I/O with kubernetes_asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .objects import (
    MIGRATION_ANNOTATION,
    MIGRATION_SINCE_ANNOTATION,
    MOVING,
    RWO,
    RWX,
    SERVERNAME_ANNOTATION,
    TERMINAL_PHASES,
    USERNAME_ANNOTATION,
    JsonDict,
    Obj,
    attached_nodes,
    is_terminal,
    pod_claims,
)
from .objects import annotations_of as _annotations
from .objects import meta as _meta
from .objects import spec as _spec
from .view import ApiError, read_json

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


class MigrateError(Exception):
    """A move cannot go on; the message names the claim and the problem."""


class Interrupted(Exception):
    """Raised by a test hook at a checkpoint (stands for the process being killed)."""


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
            server = annotations.get(SERVERNAME_ANNOTATION, "")
            names.append(server or "(default)")
        else:
            names.append(f"pod {_meta(pod).get('name', '')}")
    return names


def volume_step(pv: Obj | None, namespace: str, claim: str) -> str | None:
    """The step a volume records for ``namespace/claim`` (None: no move of that claim)."""
    annotations = _annotations(pv)
    if annotations.get(CLAIM_KEY) != f"{namespace}/{claim}":
        return None
    return annotations.get(STEP_KEY)


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


def class_problem(storage_class: Obj | None, name: str, rwx_volumes: int | None) -> str | None:
    """Why ``name`` cannot hold ReadWriteMany homes, when that can be known, else None.

    ``storage_class`` is the StorageClass (None: it does not exist); ``rwx_volumes`` the number
    of Available ReadWriteMany volumes of that class (for a class without a provisioner), None
    when not known."""
    if storage_class is None:
        return f"storage class {name!r} does not exist"
    provisioner = storage_class.get("provisioner", "")
    if provisioner in RWO_ONLY_PROVISIONERS:
        return (
            f"storage class {name!r} is provisioned by {provisioner}, which offers no "
            "ReadWriteMany file system volumes"
        )
    if provisioner == STATIC_PROVISIONER and rwx_volumes == 0:
        return f"storage class {name!r} has no provisioner and no Available ReadWriteMany volume"
    return None


def copy_pod_manifest(
    home: Home, image: str, attached_node: str | None, script: str | None = None
) -> JsonDict:
    """The pod that copies ``home``'s claim into the temporary claim (see copy_home.py)."""
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
        and k not in (MIGRATION_ANNOTATION, MIGRATION_SINCE_ANNOTATION, FROM_KEY)
    }
    labels = dict(_meta(pvc).get("labels") or {})
    return json.dumps({"labels": labels, "annotations": annotations}, sort_keys=True)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        bind_timeout: float = 300.0,
        checkpoint: Callable[[str, str], Awaitable[None] | None] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        from kubernetes_asyncio import client

        self.core = client.CoreV1Api(api_client)
        self.storage = client.StorageV1Api(api_client)
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

    async def _get(self, call: Callable[..., Awaitable[Any]], *args: Any) -> JsonDict | None:
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            return await read_json(call, *args)
        except (ApiException, ApiError) as exc:
            if exc.status == 404:
                return None
            raise

    async def pvc(self, name: str) -> JsonDict | None:
        return await self._get(
            self.core.read_namespaced_persistent_volume_claim, name, self.namespace
        )

    async def pv(self, name: str | None) -> JsonDict | None:
        return await self._get(self.core.read_persistent_volume, name) if name else None

    async def pod(self, name: str) -> JsonDict | None:
        return await self._get(self.core.read_namespaced_pod, name, self.namespace)

    async def pods(self) -> list[JsonDict]:
        return (await read_json(self.core.list_namespaced_pod, self.namespace)).get("items") or []

    async def pvcs(self) -> list[JsonDict]:
        listing = await read_json(self.core.list_namespaced_persistent_volume_claim, self.namespace)
        return listing.get("items") or []

    async def pvs(self) -> list[JsonDict]:
        return (await read_json(self.core.list_persistent_volume)).get("items") or []

    async def _patch_pv(self, name: str, body: JsonDict | list[JsonDict]) -> JsonDict:
        return await read_json(self.core.patch_persistent_volume, name, body)

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
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            await read_json(
                self.core.delete_namespaced_persistent_volume_claim,
                name,
                self.namespace,
                body={"preconditions": {"uid": uid}},
            )
        except (ApiException, ApiError) as exc:
            if exc.status not in (404, 409):  # gone, or a newer claim under the name
                raise
        await self._wait(
            lambda: self._gone(self.pvc(name), uid), self.bind_timeout, f"claim {name} deleted"
        )

    async def _delete_pod(self, name: str) -> None:
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            await read_json(
                self.core.delete_namespaced_pod, name, self.namespace, grace_period_seconds=0
            )
        except (ApiException, ApiError) as exc:
            if exc.status != 404:
                raise
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
                raise MigrateError(f"timed out after {timeout:g} s waiting for {what}")
            await asyncio.sleep(POLL)

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
            raise MigrateError(f"claim {self.namespace}/{claim} not found")
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
                    f"no home claim for {name!r} in namespace {self.namespace} (give a username "
                    f"or a claim name; home claims are those named {self.prefix}* or carrying "
                    f"the {USERNAME_ANNOTATION} annotation)"
                )
        return list(dict.fromkeys(found))

    async def check_storage_class(self) -> list[str]:
        """Raise MigrateError for a target class that cannot work; notes for what is unknown."""
        from kubernetes_asyncio.client.exceptions import ApiException

        name = self.storage_class
        if not name:
            raise MigrateError(
                "no target storage class: pass --storage-class (the class the hub creates "
                "ReadWriteMany homes in, helm custom.storage-class)"
            )
        try:
            sc = await self._get(self.storage.read_storage_class, name)
        except (ApiException, ApiError) as exc:
            if exc.status in (401, 403):
                return [f"cannot read storage class {name} ({exc.status}): not checked"]
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

    # -- the move -------------------------------------------------------------------------------

    async def apply(self, claim: str) -> JsonDict:
        """Move one home, or resume its move; a finished move is left alone.

        Returns the outcome: ``{"claim", "user", "outcome": done|already-done|blocked|failed|
        skipped, "reason", "old_volume", "new_volume", ...}``."""
        home = await self.home(claim)
        outcome = {
            "claim": claim,
            "user": home.user,
            "old_volume": _meta(home.old_pv).get("name"),
            "new_volume": None,
        }
        step = home.step
        if step == DONE:
            return {
                **outcome,
                "outcome": OUT_ALREADY_DONE,
                "new_volume": _annotations(home.old_pv).get(TARGET_KEY),
            }
        if step is None:
            row = plan_row(home, self.storage_class)
            if row["action"] != MOVE:
                return {
                    **outcome,
                    "outcome": OUT_SKIPPED,
                    "reason": row["action"],
                    "running": row["running"],
                }
        if step in (None, FAILED, RETAINED, COPYING, COPIED) and home.pods:
            await self._abandon(home, WAIT_SERVERS)
            return {
                **outcome,
                "outcome": OUT_BLOCKED,
                "reason": WAIT_SERVERS,
                "running": server_names(home.pods),
            }

        if step in (None, FAILED, RETAINED, COPYING):
            result = await self._copy(home)
            if result is not None:
                return {**outcome, **result}
            home = await self.home(claim)
        if home.step == COPIED and home.pods:
            await self._abandon(home, WAIT_SERVERS)
            return {
                **outcome,
                "outcome": OUT_BLOCKED,
                "reason": WAIT_SERVERS,
                "running": server_names(home.pods),
            }
        new_pv = await self._swap(home)
        return {**outcome, "outcome": OUT_DONE, "new_volume": new_pv}

    async def _abandon(self, home: Home, problem: str) -> None:
        """A server uses the home: the copy (if any) may be stale.  Unmark the claim so the user
        keeps working; the next ``apply`` copies again.  Nothing is deleted but the copy pod."""
        if home.step in (None, FAILED):
            return
        if home.copy_pod is not None:
            await self._delete_pod(temporary_name(home.claim))
        name = _meta(home.old_pv)["name"]
        await self._annotate_pv(name, {STEP_KEY: RETAINED, RESULT_KEY: None, PROBLEM_KEY: problem})
        if home.pvc is not None and _spec(home.pvc).get("volumeName") == name:
            await self._annotate_pvc(
                home.claim, {MIGRATION_ANNOTATION: None, MIGRATION_SINCE_ANNOTATION: None}
            )

    async def _copy(self, home: Home) -> JsonDict | None:
        """Steps 1-4; None when the copy is verified, else the outcome that stops the move."""
        claim, pvc = home.claim, home.pvc
        if pvc is None:
            raise MigrateError(f"claim {self.namespace}/{claim} is gone before its copy was made")
        old_name: str | None = _spec(pvc).get("volumeName")
        old = home.old_pv if _meta(home.old_pv).get("name") == old_name else await self.pv(old_name)
        if old is None or not old_name:
            raise MigrateError(
                f"claim {self.namespace}/{claim}: its volume {old_name} is not readable"
            )
        # 1. Retain, before anything else.
        policy = _spec(old).get("persistentVolumeReclaimPolicy") or "Delete"
        annotations = _annotations(old)
        values = {
            CLAIM_KEY: f"{self.namespace}/{claim}",
            POLICY_KEY: annotations.get(POLICY_KEY, policy),
            CLASS_KEY: annotations.get(CLASS_KEY) or self.storage_class,
            PROBLEM_KEY: None,
        }
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
        await self.checkpoint(claim, "retained")
        target_class = values[CLASS_KEY]
        if not target_class:
            raise MigrateError(f"no target storage class for {claim}: pass --storage-class")

        # 2. Mark the claim: the spawner refuses this user's spawns from now on.
        if _annotations(pvc).get(MIGRATION_ANNOTATION) != MOVING:
            await self._annotate_pvc(
                claim, {MIGRATION_ANNOTATION: MOVING, MIGRATION_SINCE_ANNOTATION: _now()}
            )
        await self.checkpoint(claim, "marked")
        running = holders(await self.pods(), claim)
        if running:  # started between the plan and the mark
            home.pods = running
            home.old_pv = await self.pv(old_name)
            home.copy_pod = await self.pod(temporary_name(claim))
            await self._abandon(home, WAIT_SERVERS)
            return {
                "outcome": OUT_BLOCKED,
                "reason": WAIT_SERVERS,
                "running": server_names(running),
            }

        # 3. The new claim.
        tmp_name = temporary_name(claim)
        temporary = await self.pvc(tmp_name)
        if temporary is not None and _annotations(temporary).get(OF_KEY) != claim:
            raise MigrateError(f"claim {self.namespace}/{tmp_name} exists and is not this move's")
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
                        "storageClassName": target_class,
                        "resources": {"requests": {"storage": claim_size(pvc) or "1Gi"}},
                        "volumeMode": "Filesystem",
                    },
                },
            )
        await self._annotate_pv(old_name, {STEP_KEY: COPYING})
        await self.checkpoint(claim, "claim-created")

        # 4. Copy and verify.
        pod = await self.pod(tmp_name)
        if pod is not None and (home.step == FAILED or _meta(pod).get("deletionTimestamp")):
            await self._delete_pod(tmp_name)  # an earlier attempt's pod: copy again
            pod = None
        if pod is None:
            attached = await self._attached_node(old_name)
            await read_json(
                self.core.create_namespaced_pod,
                self.namespace,
                copy_pod_manifest(home, self.image, attached),
            )
        await self.checkpoint(claim, "copy-started")
        summary = await self._wait_copy(claim, tmp_name)
        if summary.get("result") == WAIT_SERVERS:
            home = await self.home(claim)
            await self._abandon(home, WAIT_SERVERS)
            return {
                "outcome": OUT_BLOCKED,
                "reason": WAIT_SERVERS,
                "running": summary["running"],
            }
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
                claim, {MIGRATION_ANNOTATION: None, MIGRATION_SINCE_ANNOTATION: None}
            )
            return {
                "outcome": OUT_FAILED,
                "reason": f"copy-{summary.get('result')}",
                "problems": summary.get("problems") or [],
            }
        await self._annotate_pv(old_name, {STEP_KEY: COPIED, RESULT_KEY: record})
        await self.checkpoint(claim, "copied")
        return None

    async def _attached_node(self, pv_name: str) -> str | None:
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            listing = await read_json(self.storage.list_volume_attachment)
        except (ApiException, ApiError) as exc:
            if exc.status in (401, 403):
                return None
            raise
        nodes = sorted(attached_nodes(listing.get("items") or [], pv_name))
        return nodes[0] if len(nodes) == 1 else None

    async def _wait_copy(self, claim: str, pod_name: str) -> JsonDict:
        deadline = time.monotonic() + self.copy_timeout
        unplaced_deadline = time.monotonic() + self.bind_timeout
        while True:
            pod = await self.pod(pod_name)
            if pod is None:
                return {"result": "error", "problems": [f"the copy pod {pod_name} disappeared"]}
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
                    f"the copy pod {self.namespace}/{pod_name} is not scheduled after "
                    f"{self.bind_timeout:g} s ({'; '.join(why) or 'no reason given'}): is the "
                    f"new claim {pod_name} bound (kubectl describe pvc {pod_name})? It stays; "
                    "apply again to wait for it, or roll back"
                )
            if time.monotonic() > deadline:
                raise MigrateError(
                    f"the copy pod {self.namespace}/{pod_name} did not finish within "
                    f"{self.copy_timeout:g} s (--copy-timeout); it keeps running, apply again "
                    "to wait for it"
                )
            await asyncio.sleep(self.copy_poll)

    async def _swap(self, home: Home) -> str:
        """Steps 5-6: ``claim`` bound to the new volume.  Each sub-step checks what is done."""
        claim = home.claim
        old_name = _meta(home.old_pv)["name"]
        tmp_name = temporary_name(claim)
        new_name: str | None = _annotations(home.old_pv).get(TARGET_KEY)
        if home.step == COPIED:
            temporary = await self.pvc(tmp_name)
            if temporary is None or not _spec(temporary).get("volumeName"):
                raise MigrateError(
                    f"claim {self.namespace}/{tmp_name} holds the copy but is not bound"
                )
            new_name = _spec(temporary)["volumeName"]
            await self._wait(
                lambda: self._bound(tmp_name), self.bind_timeout, f"claim {tmp_name} bound"
            )
            await self._annotate_pv(
                old_name,
                {STEP_KEY: SWAPPING, TARGET_KEY: new_name, META_KEY: claim_metadata(home.pvc)},
            )
        await self.checkpoint(claim, "swapping")
        if not new_name:
            raise MigrateError(f"volume {old_name} records no target volume for {claim}")
        new = await self.pv(new_name)
        if new is None:
            raise MigrateError(f"volume {new_name}, the copy of {claim}, is gone; roll back")

        # The copy must survive its temporary claim.
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
        await self.checkpoint(claim, "new-retained")
        if await self.pod(tmp_name) is not None:
            await self._delete_pod(tmp_name)
        temporary = await self.pvc(tmp_name)
        if temporary is not None:
            await self._delete_pvc(tmp_name, _meta(temporary)["uid"])
        await self.checkpoint(claim, "temporary-deleted")

        # Pre-bind the new volume to the home claim's name (no uid: the claim is recreated).
        new = await self.pv(new_name)
        ref = _spec(new).get("claimRef") or {}
        current = await self.pvc(claim)
        final = current is not None and _spec(current).get("volumeName") == new_name
        if not final and (
            ref.get("name") != claim or ref.get("namespace") != self.namespace or ref.get("uid")
        ):
            await self._patch_pv(
                new_name,
                [
                    {
                        "op": "replace" if "claimRef" in _spec(new) else "add",
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
        await self.checkpoint(claim, "prebound")

        # The old claim goes only now: its volume is retained and a verified copy exists.
        if current is not None and _spec(current).get("volumeName") == old_name:
            await self._delete_pvc(claim, _meta(current)["uid"])
            current = None
        elif current is not None and not final:
            raise MigrateError(
                f"claim {self.namespace}/{claim} was recreated meanwhile (bound to "
                f"{_spec(current).get('volumeName') or 'nothing'}), not by this move: both "
                f"volumes ({old_name}, {new_name}) are retained; see docs/migrate.md"
            )
        await self.checkpoint(claim, "old-deleted")
        if current is None:
            await read_json(
                self.core.create_namespaced_persistent_volume_claim,
                self.namespace,
                self._final_claim(home, new, new_name),
            )
        await self.checkpoint(claim, "created")
        await self._wait(
            lambda: self._bound(claim, new_name),
            self.bind_timeout,
            f"claim {claim} bound to {new_name}",
        )
        await self.checkpoint(claim, "bound")

        new = await self.pv(new_name)
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
            claim, {MIGRATION_ANNOTATION: None, MIGRATION_SINCE_ANNOTATION: None}
        )
        await self._annotate_pv(old_name, {STEP_KEY: DONE, PROBLEM_KEY: None})
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

    # -- the way back -----------------------------------------------------------------------------

    async def rollback(self, claim: str) -> JsonDict:
        """Put ``claim`` back on its old volume.  The copy is kept when it may hold newer data
        (the move was done and the user may have worked since)."""
        home = await self.home(claim)
        step = home.step
        old_name: str | None = _meta(home.old_pv).get("name")
        outcome = {"claim": claim, "user": home.user, "old_volume": old_name}
        if step is None:
            return {**outcome, "outcome": OUT_NOTHING_TO_ROLL_BACK}
        # a step is read from the old volume's annotations: that volume, and its name, exist
        assert old_name is not None
        if home.pods:
            return {
                **outcome,
                "outcome": OUT_BLOCKED,
                "reason": WAIT_SERVERS,
                "running": server_names(home.pods),
            }
        tmp_name = temporary_name(claim)
        if home.copy_pod is not None:
            await self._delete_pod(tmp_name)
        kept = None
        if step in (SWAPPING, DONE):
            new_name = _annotations(home.old_pv).get(TARGET_KEY)
            current = await self.pvc(claim)
            if current is not None and _spec(current).get("volumeName") != old_name:
                # The new volume holds the user's data since the move: keep it (Retain).
                if new_name:
                    new = await self.pv(new_name)
                    if (
                        new is not None
                        and _spec(new).get("persistentVolumeReclaimPolicy") != "Retain"
                    ):
                        await self._patch_pv(
                            new_name, {"spec": {"persistentVolumeReclaimPolicy": "Retain"}}
                        )
                    kept = new_name
                await self._annotate_pvc(
                    claim, {MIGRATION_ANNOTATION: MOVING, MIGRATION_SINCE_ANNOTATION: _now()}
                )
                await self._delete_pvc(claim, _meta(current)["uid"])
                current = None
            if current is None:
                old = await self.pv(old_name)
                await self._patch_pv(
                    old_name,
                    [
                        {
                            "op": "replace" if "claimRef" in _spec(old) else "add",
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
                body = self._final_claim(home, old, old_name)
                body["spec"]["accessModes"] = list(_spec(old).get("accessModes") or [RWO])
                body["metadata"]["annotations"].pop(FROM_KEY, None)
                await read_json(
                    self.core.create_namespaced_persistent_volume_claim, self.namespace, body
                )
            await self._wait(
                lambda: self._bound(claim, old_name),
                self.bind_timeout,
                f"claim {claim} bound to {old_name}",
            )
        temporary = await self.pvc(tmp_name)
        if temporary is not None:
            await self._delete_pvc(tmp_name, _meta(temporary)["uid"])
        new_name = _annotations(home.old_pv).get(TARGET_KEY)
        new = await self.pv(new_name) if step in (SWAPPING, DONE) else None
        # (pv() reads nothing for a missing name: `new` is there only when new_name is)
        if (
            new_name
            and new is not None
            and _spec(new).get("persistentVolumeReclaimPolicy") == "Retain"
        ):
            # A retained copy: kept for the operator; no longer reserved for the home claim.
            ref = _spec(new).get("claimRef")
            if ref is not None and not ref.get("uid"):
                await self._patch_pv(new_name, [{"op": "remove", "path": "/spec/claimRef"}])
            kept = new_name
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
            claim, {MIGRATION_ANNOTATION: None, MIGRATION_SINCE_ANNOTATION: None, FROM_KEY: None}
        )
        return {**outcome, "outcome": OUT_ROLLED_BACK, "kept_volume": kept}

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
                }
            )
        return rows


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
                return {"claim": claim, "outcome": OUT_ERROR, "reason": str(exc)}

    return list(await asyncio.gather(*(one(c) for c in claims)))
