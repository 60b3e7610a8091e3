"""The vocabulary of the API objects the library reads.  (pure, imports nothing of the package)

Access modes, the label and annotation keys KubeSpawner, zero-to-jupyterhub and ``nebari-colocate
migrate`` write, and small readers of Pods, PVCs and VolumeAttachments kept as the camelCase dicts
the Kubernetes API returns.  Every other module reads objects through these, so a rule about an
object (when a pod holds a volume, who owns it, where a volume is attached) is written once;
``docs/decisions.md`` says how the decision uses them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

#: an API object as the Kubernetes API returns it (camelCase keys), read-only
Obj = Mapping[str, Any]
#: an API object being built (a manifest, a JSON answer)
JsonDict = dict[str, Any]

# --------------------------------------------------------------------------------------------------
# access modes

RWO, RWX, ROX, RWOP = "ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"

# --------------------------------------------------------------------------------------------------
# labels and annotations

#: KubeSpawner's annotation with the raw username (the label holds a safe slug of it)
USERNAME_ANNOTATION = "hub.jupyter.org/username"
USERNAME_LABEL = "hub.jupyter.org/username"
#: KubeSpawner's annotation with the raw server name (absent for the default server)
SERVERNAME_ANNOTATION = "hub.jupyter.org/servername"
SERVERNAME_LABEL = "hub.jupyter.org/servername"
#: KubeSpawner's ``component`` label, and its value on server pods
COMPONENT_LABEL = "component"
SERVER_COMPONENT = "singleuser-server"
#: the node label the kubelet sets to the node's name: the topology of "one node"
HOSTNAME = "kubernetes.io/hostname"

#: on a claim whose data ``nebari-colocate migrate`` is moving to other storage: no server may
#: start with it until the move ends (value MOVING; the start time in MIGRATION_SINCE_ANNOTATION)
MIGRATION_ANNOTATION = "nebari.dev/migration"
MIGRATION_SINCE_ANNOTATION = "nebari.dev/migration-started"
MOVING = "moving"
#: on a marked claim whose move gave up part-way (the claim was being swapped): an administrator
#: must finish the move or roll it back; the value says when it stopped (ISO 8601, UTC)
MIGRATION_STALLED_ANNOTATION = "nebari.dev/migration-stalled"
#: what a move records where the hub's watches see it (``nebari_colocate.migrate.codes`` names
#: them too): on the old volume, its claim ("<namespace>/<claim>") and step; on the move's
#: Lease, its label, the claim it moves and the host of the run holding it
MIGRATE_CLAIM_KEY = "nebari.dev/migrate-claim"
MIGRATE_STEP_KEY = "nebari.dev/migrate-step"
MIGRATION_OF_KEY = "nebari.dev/migration-of"
MIGRATE_HOST_KEY = "nebari.dev/migrate-host"
MIGRATE_COMPONENT_LABEL = "app.kubernetes.io/component"
MIGRATE_COMPONENT = "nebari-colocate-migrate"

#: the extended resources of the GPU device plugins (NVIDIA, AMD)
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")

#: pod phases after which a pod holds no node resources and no volume
TERMINAL_PHASES = ("Succeeded", "Failed")

# --------------------------------------------------------------------------------------------------
# readers


def meta(obj: Obj | None) -> Obj:
    """``metadata`` of an object (empty when missing or null)."""
    return (obj or {}).get("metadata") or {}


def spec(obj: Obj | None) -> Obj:
    """``spec`` of an object (empty when missing or null)."""
    return (obj or {}).get("spec") or {}


def annotations_of(obj: Obj | None) -> Obj:
    return meta(obj).get("annotations") or {}


def labels_of(obj: Obj | None) -> Obj:
    return meta(obj).get("labels") or {}


def pod_claims(pod: Obj) -> list[str]:
    """Names of the PVCs a pod mounts, in volume order, without duplicates."""
    names: list[str] = []
    for volume in spec(pod).get("volumes") or []:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim and claim not in names:
            names.append(claim)
    return names


def mounts_read_only(pod: Obj, claim: str) -> bool:
    """Every volume of ``pod`` that uses ``claim`` says ``readOnly: true`` (what the attach of
    the volume follows; a container's read-only mount does not make the attachment read-only)."""
    volumes = [
        v.get("persistentVolumeClaim") or {}
        for v in spec(pod).get("volumes") or []
        if (v.get("persistentVolumeClaim") or {}).get("claimName") == claim
    ]
    return bool(volumes) and all(v.get("readOnly") is True for v in volumes)


def is_exclusive(modes: Iterable[str], read_only: bool = False) -> bool:
    """Exclusive unless ``ReadWriteMany``, or ``ReadOnlyMany`` with every pod involved mounting
    it read-only (``read_only``): ``[ReadWriteOnce, ReadOnlyMany]`` mounted read-write still
    attaches read-write to one node only (GCE PD, Azure Disk)."""
    modes = list(modes)
    if RWX in modes:
        return False
    return not (ROX in modes and read_only)


def known_shared(
    modes: Iterable[str] | None, pod: Obj, claim: str, mounting: Iterable[Obj] = ()
) -> bool:
    """``claim`` is known to be shared: its access modes are known (``modes`` not None) and not
    exclusive, the read-only test (:func:`is_exclusive`) taken over ``pod`` and the other pods of
    ``mounting`` that use it (finished pods and ``pod``'s own name apart).  Unknown modes are
    never shared: the caller decides what unknown means."""
    if modes is None:
        return False
    modes = list(modes)
    if RWX in modes:
        return True
    own = meta(pod).get("name")
    read_only = mounts_read_only(pod, claim) and all(
        mounts_read_only(p, claim)
        for p in mounting
        if meta(p).get("name") != own and not is_terminal(p) and claim in pod_claims(p)
    )
    return not is_exclusive(modes, read_only)


def is_terminal(pod: Obj) -> bool:
    """Succeeded and Failed pods hold no node resources and no volume."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def holds_volume(pod: Obj) -> bool:
    """Bound and not finished: terminating pods still hold the volume."""
    return bool(spec(pod).get("nodeName")) and not is_terminal(pod)


def holders(pods: Iterable[Obj], claims: Iterable[str], *, exclude: str | None = None) -> list[Obj]:
    """The pods of ``pods`` that hold a volume of one of ``claims`` (:func:`holds_volume`), in
    their order; ``exclude`` is the name of a pod not to count (the one being judged)."""
    wanted = set(claims)
    return [
        p
        for p in pods
        if (exclude is None or meta(p).get("name") != exclude)
        and holds_volume(p)
        and wanted.intersection(pod_claims(p))
    ]


def holder_nodes(pods: Iterable[Obj], claim: str) -> dict[str, list[str]]:
    """Node -> names of the pods holding ``claim`` there, both sorted."""
    nodes: dict[str, list[str]] = {}
    for pod in holders(pods, [claim]):
        nodes.setdefault(spec(pod)["nodeName"], []).append(meta(pod).get("name", ""))
    return {n: sorted(names) for n, names in sorted(nodes.items())}


def attachment_pv(attachment: Obj) -> str | None:
    """The PersistentVolume a VolumeAttachment attaches."""
    return (spec(attachment).get("source") or {}).get("persistentVolumeName") or None


def volume_identity(pv: Obj | None) -> tuple[str, str] | None:
    """The disk a PersistentVolume exposes: its CSI driver and volume handle, the pair
    kube-controller-manager's attach/detach controller names a volume by (two PVs with the same
    pair, in any namespaces, are one disk attached once); None for a PV without a CSI source."""
    csi = spec(pv).get("csi") or {}
    driver, handle = csi.get("driver"), csi.get("volumeHandle")
    return (str(driver), str(handle)) if driver and handle else None


def csi_attachment_name(pv: Obj | None, node: str) -> str | None:
    """The name the attach/detach controller gives the VolumeAttachment of ``pv``'s disk on
    ``node`` (``csi-`` and the SHA-256 of volume handle, driver and node name, as
    kube-controller-manager's CSI attacher writes it); None for a PV without a CSI source."""
    disk = volume_identity(pv)
    if disk is None:
        return None
    driver, handle = disk
    return "csi-" + hashlib.sha256(f"{handle}{driver}{node}".encode()).hexdigest()


def attachment_identity(attachment: Obj) -> tuple[str, str] | None:
    """The disk an attachment of an inline CSI volume attaches (driver and handle), read from
    the attachment itself; None when it names a PersistentVolume (look that PV up)."""
    inline = (spec(attachment).get("source") or {}).get("inlineVolumeSpec")
    return volume_identity({"spec": inline}) if inline else None


def claim_ref(pv: Obj | None) -> str | None:
    """``namespace/name`` of the claim a PersistentVolume is bound (or reserved) to, or None."""
    ref = spec(pv).get("claimRef") or {}
    if ref.get("name") and ref.get("namespace"):
        return f"{ref['namespace']}/{ref['name']}"
    return None


def attached_nodes(attachments: Iterable[Obj], pv_name: str | None = None) -> set[str]:
    """Nodes the attachments say are attached (a detach may still be in progress); with
    ``pv_name``, only the attachments of that PersistentVolume."""
    return {
        spec(va)["nodeName"]
        for va in attachments
        if (pv_name is None or attachment_pv(va) == pv_name)
        and (va.get("status") or {}).get("attached") is True
        and spec(va).get("nodeName")
    }


# --------------------------------------------------------------------------------------------------
# who owns a pod (or a claim KubeSpawner created)


def pod_user(obj: Obj) -> str:
    """The username of a user pod: the raw-name annotation, else the (slugged) label; else ""."""
    found = annotations_of(obj)
    if USERNAME_ANNOTATION in found:
        return str(found[USERNAME_ANNOTATION])
    return str(labels_of(obj).get(USERNAME_LABEL, ""))


def pod_server(obj: Obj) -> str:
    """The server name of a user pod (``""`` for the default server)."""
    found = annotations_of(obj)
    if SERVERNAME_ANNOTATION in found:
        return str(found[SERVERNAME_ANNOTATION] or "")
    if USERNAME_ANNOTATION in found:
        return ""  # KubeSpawner writes no servername annotation for the default server
    return str(labels_of(obj).get(SERVERNAME_LABEL, ""))


def has_owner(obj: Obj) -> bool:
    """It names a user, in the annotation or the label KubeSpawner writes."""
    return USERNAME_ANNOTATION in annotations_of(obj) or USERNAME_LABEL in labels_of(obj)


def owned_by(obj: Obj, username: str, label_value: str | None) -> bool:
    """Owned by ``username``: by the raw-name annotation; without one (objects made by older
    versions), by the ``hub.jupyter.org/username`` label, KubeSpawner's safe slug of the name."""
    found = annotations_of(obj)
    if USERNAME_ANNOTATION in found:
        return bool(found[USERNAME_ANNOTATION] == username)
    return bool(label_value) and labels_of(obj).get(USERNAME_LABEL) == label_value


def is_server(pod: Obj) -> bool:
    """A JupyterHub server pod: KubeSpawner's ``component`` label, or (older pods without one)
    the username annotation KubeSpawner writes."""
    component = labels_of(pod).get(COMPONENT_LABEL)
    if component is not None:
        return bool(component == SERVER_COMPONENT)
    return USERNAME_ANNOTATION in annotations_of(pod)
