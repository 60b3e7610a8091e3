"""What a home's move would do (pure): reading a claim, its holders and its recorded step, the
plan's row for one home, and whether a storage class can take the moved homes."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

from .. import messages
from ..objects import (
    RWX,
    SERVERNAME_ANNOTATION,
    USERNAME_ANNOTATION,
    JsonDict,
    Obj,
    is_terminal,
    pod_claims,
)
from ..objects import annotations_of as _annotations
from ..objects import meta as _meta
from ..objects import spec as _spec
from .codes import (
    CLAIM_KEY,
    CLASS_KEY,
    COMPONENT,
    COMPONENT_LABEL,
    COPIED,
    COPYING,
    DONE,
    FAILED,
    FINISHED,
    MOVE,
    NO_VOLUME,
    NOT_BOUND,
    OF_KEY,
    OUT_ALREADY_DONE,
    OUT_DONE,
    OUT_NOTHING_TO_ROLL_BACK,
    OUT_ROLLED_BACK,
    OUT_SKIPPED,
    OUT_WOULD_MOVE,
    PROBLEM_KEY,
    RESUME,
    RETAINED,
    RETRY,
    RWO_ONLY_PROVISIONERS,
    SKIP_RWX,
    STATIC_PROVISIONER,
    STEP_KEY,
    STEPS,
    TARGET_KEY,
    WAIT_SERVERS,
)


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


def selected_by_all(home_of: Mapping[str, Home], target_class: str | None) -> list[str]:
    """``apply --all``: every home claim, by name, whose move may start, resume or be retried."""
    return [
        claim
        for claim, home in sorted(home_of.items())
        if plan_row(home, target_class)["action"] in (MOVE, RESUME, RETRY)
    ]


def changes_class(row: Obj, target_class: str | None) -> bool:
    """An unfinished move asked to go to another class than it started with (apply switches it
    before the copy is verified, refuses after): the class asked for is checked first."""
    recorded = row.get("recorded_storage_class")
    return row["action"] == RESUME and bool(target_class and recorded and recorded != target_class)


def checks_class(row: Obj, target_class: str | None) -> bool:
    """Whether applying this row needs the target class checked first: a move that starts again
    (a move under way keeps the class it started with, unless another is asked for)."""
    return row["action"] in (MOVE, RETRY) or changes_class(row, target_class)


def dry_run_row(row: Obj) -> JsonDict:
    """``apply --dry-run``'s result for one plan row: would it move, or why not."""
    return {
        **row,
        "outcome": OUT_WOULD_MOVE if movable(row) else OUT_SKIPPED,
        "reason": row["action"],
    }


def apply_status(results: Iterable[Obj]) -> int:
    """The exit status of ``apply``: 1 when a named home could not move (its servers run, it is
    not bound...); one that is already ReadWriteMany is not a stop."""
    bad = any(
        r["outcome"] not in (OUT_DONE, OUT_ALREADY_DONE, OUT_SKIPPED)
        or (r["outcome"] == OUT_SKIPPED and r.get("reason") != SKIP_RWX)
        for r in results
    )
    return 1 if bad else 0


def rollback_status(results: Iterable[Obj]) -> int:
    """The exit status of ``rollback``: 1 unless every home is back or had nothing to undo."""
    bad = any(r["outcome"] not in (OUT_ROLLED_BACK, OUT_NOTHING_TO_ROLL_BACK) for r in results)
    return 1 if bad else 0
