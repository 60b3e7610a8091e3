"""Objects from user-supplied files, checked as the API checks them.  (pure)

``simulate`` and ``explain --pod`` read pods, nodes, claims, volumes and attachments that no API
server has validated.  Before anything decides on them, every field the decision reads is checked
for its type, and the rules the API itself enforces are applied: a pod has containers with names;
quantities are valid, not negative, whole where the resource needs it, within int64 and requests
not above limits; label keys and values, selector values and annotations are strings; access
modes are a list of known modes; node selector operators are known.  A problem is raised as
:class:`InvalidObject` with one line saying which object, which field and what is wrong (see
``docs/cli.md``).  Kinds the decision ignores are not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

from . import quantity
from .objects import Obj

ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class InvalidObject(ValueError):
    """An object the API would refuse; the message is one line: object, field, problem."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _key(key: str) -> str:
    """A mapping key in a field path: as it is when plain, quoted otherwise."""
    return key if key and all(c.isalnum() or c in "._/-" for c in key) else repr(key)


def _type_name(value: object) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


class _Checker:
    """Checks one object; ``fail`` raises with the object's name and the field path."""

    def __init__(self, label: str) -> None:
        self.label = label

    def fail(self, path: str, problem: str) -> NoReturn:
        where = f"{path}: " if path else ""
        # One line, whatever the keys hold (a key may be any string, newlines included).
        text = f"{self.label}: {where}{problem}"
        raise InvalidObject("".join(c if c.isprintable() else repr(c)[1:-1] for c in text))

    def mapping(self, value: object, path: str, *, required: bool = False) -> Obj:
        if value is None:
            if required:
                self.fail(path, "is missing")
            return {}
        if not isinstance(value, Mapping):
            self.fail(path, f"must be a mapping, not {_type_name(value)} {_shown(value)}")
        return value

    def sequence(self, value: object, path: str, *, required: bool = False) -> list[Any]:
        if value is None:
            if required:
                self.fail(path, "is missing")
            return []
        if not isinstance(value, list):
            self.fail(path, f"must be a list, not {_type_name(value)} {_shown(value)}")
        return value

    def string(self, value: object, path: str, *, required: bool = False) -> str:
        if value is None:
            if required:
                self.fail(path, "is missing")
            return ""
        if not isinstance(value, str):
            self.fail(path, f"must be a string, not {_type_name(value)} {_shown(value)}")
        return value

    def boolean(self, value: object, path: str) -> None:
        if value is not None and not isinstance(value, bool):
            self.fail(path, f"must be true or false, not {_shown(value)}")

    def string_map(self, value: object, path: str) -> None:
        for key, item in self.mapping(value, path).items():
            if not isinstance(key, str):
                self.fail(path, f"key {_shown(key)} must be a string")
            if not isinstance(item, str):
                self.fail(
                    f"{path}.{_key(key)}",
                    f"must be a string, not {_type_name(item)} {_shown(item)}",
                )

    def choice(self, value: object, path: str, choices: Iterable[str]) -> None:
        if value is None:
            return
        choices = tuple(choices)
        if value not in choices:
            self.fail(path, f"{_shown(value)} is not one of {', '.join(choices)}")

    def resources(self, value: object, path: str) -> dict[str, int]:
        """A resource list (name -> quantity); returns nano-units by name."""
        found: dict[str, int] = {}
        for name, amount in self.mapping(value, path).items():
            if not isinstance(name, str) or not name:
                self.fail(path, f"resource name {_shown(name)} must be a non-empty string")
            problem = quantity.problem(name, amount)
            if problem:
                self.fail(f"{path}.{_key(name)}", problem)
            found[name] = quantity.parse_nanos(amount)
        return found

    def requirements(self, value: object, path: str) -> None:
        """requests and limits; requests may not exceed limits (as the API requires)."""
        resources = self.mapping(value, path)
        requests = self.resources(resources.get("requests"), f"{path}.requests")
        limits = self.resources(resources.get("limits"), f"{path}.limits")
        for name, request in requests.items():
            if name in limits and request > limits[name]:
                self.fail(
                    f"{path}.requests.{name}",
                    f"{_shown(resources['requests'][name])} is more than its limit "
                    f"{_shown(resources['limits'][name])}",
                )

    def node_selector(self, value: object, path: str) -> None:
        """A NodeSelector: nodeSelectorTerms of matchExpressions / matchFields."""
        selector = self.mapping(value, path)
        terms = self.sequence(selector.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
        for t, term in enumerate(terms):
            term_path = f"{path}.nodeSelectorTerms[{t}]"
            term = self.mapping(term, term_path)
            for part in ("matchExpressions", "matchFields"):
                for r, requirement in enumerate(
                    self.sequence(term.get(part), f"{term_path}.{part}")
                ):
                    req_path = f"{term_path}.{part}[{r}]"
                    requirement = self.mapping(requirement, req_path)
                    self.string(requirement.get("key"), f"{req_path}.key", required=True)
                    self.string(requirement.get("operator"), f"{req_path}.operator", required=True)
                    self.choice(
                        requirement.get("operator"), f"{req_path}.operator", SELECTOR_OPERATORS
                    )
                    for v, item in enumerate(
                        self.sequence(requirement.get("values"), f"{req_path}.values")
                    ):
                        self.string(item, f"{req_path}.values[{v}]")

    def metadata(self, obj: Obj, *, name_required: bool) -> Obj:
        meta = self.mapping(obj.get("metadata"), "metadata", required=name_required)
        self.string(meta.get("name"), "metadata.name", required=name_required)
        if name_required and not meta.get("name"):
            self.fail("metadata.name", "must not be empty")
        self.string(meta.get("namespace"), "metadata.namespace")
        self.string_map(meta.get("labels"), "metadata.labels")
        self.string_map(meta.get("annotations"), "metadata.annotations")
        return meta


def _label(kind: str, obj: Obj) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return kind
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name:
        return kind
    shown = f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name
    return f"{kind} {_shown(shown)[1:-1]}"


def _check_container(c: _Checker, container: object, path: str) -> None:
    container = c.mapping(container, path)
    c.string(container.get("name"), f"{path}.name", required=True)
    c.string(container.get("restartPolicy"), f"{path}.restartPolicy")
    c.requirements(container.get("resources"), f"{path}.resources")


def check_pod(pod: Obj, *, name_required: bool = True) -> None:
    """A Pod; ``name_required=False`` for a manifest whose name the spawner sets."""
    c = _Checker(_label("Pod", pod))
    c.metadata(pod, name_required=name_required)
    spec = c.mapping(pod.get("spec"), "spec", required=True)
    containers = c.sequence(spec.get("containers"), "spec.containers", required=True)
    if not containers:
        c.fail("spec.containers", "a pod needs at least one container")
    for i, container in enumerate(containers):
        _check_container(c, container, f"spec.containers[{i}]")
    for i, container in enumerate(c.sequence(spec.get("initContainers"), "spec.initContainers")):
        _check_container(c, container, f"spec.initContainers[{i}]")
    c.requirements(spec.get("resources"), "spec.resources")
    c.resources(spec.get("overhead"), "spec.overhead")
    c.string(spec.get("nodeName"), "spec.nodeName")
    c.string_map(spec.get("nodeSelector"), "spec.nodeSelector")
    for i, volume in enumerate(c.sequence(spec.get("volumes"), "spec.volumes")):
        path = f"spec.volumes[{i}]"
        volume = c.mapping(volume, path)
        c.string(volume.get("name"), f"{path}.name", required=True)
        claim = c.mapping(volume.get("persistentVolumeClaim"), f"{path}.persistentVolumeClaim")
        if "persistentVolumeClaim" in volume:
            c.string(
                claim.get("claimName"), f"{path}.persistentVolumeClaim.claimName", required=True
            )
            c.boolean(claim.get("readOnly"), f"{path}.persistentVolumeClaim.readOnly")
    for i, toleration in enumerate(c.sequence(spec.get("tolerations"), "spec.tolerations")):
        path = f"spec.tolerations[{i}]"
        toleration = c.mapping(toleration, path)
        for key in ("key", "value", "effect", "operator"):
            c.string(toleration.get(key), f"{path}.{key}")
        c.choice(toleration.get("operator"), f"{path}.operator", TOLERATION_OPERATORS)
    affinity = c.mapping(spec.get("affinity"), "spec.affinity")
    for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
        c.mapping(affinity.get(kind), f"spec.affinity.{kind}")
    node_affinity = c.mapping(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    if node_affinity.get(required) is not None:
        c.node_selector(node_affinity[required], f"spec.affinity.nodeAffinity.{required}")
    status = c.mapping(pod.get("status"), "status")
    c.string(status.get("phase"), "status.phase")


def check_node(node: Obj) -> None:
    c = _Checker(_label("Node", node))
    c.metadata(node, name_required=True)
    spec = c.mapping(node.get("spec"), "spec")
    c.boolean(spec.get("unschedulable"), "spec.unschedulable")
    for i, taint in enumerate(c.sequence(spec.get("taints"), "spec.taints")):
        path = f"spec.taints[{i}]"
        taint = c.mapping(taint, path)
        c.string(taint.get("key"), f"{path}.key", required=True)
        c.string(taint.get("value"), f"{path}.value")
        c.string(taint.get("effect"), f"{path}.effect", required=True)
        c.choice(taint.get("effect"), f"{path}.effect", TAINT_EFFECTS)
    status = c.mapping(node.get("status"), "status")
    c.resources(status.get("allocatable"), "status.allocatable")
    c.resources(status.get("capacity"), "status.capacity")


def _access_modes(c: _Checker, spec: Obj) -> None:
    for i, mode in enumerate(c.sequence(spec.get("accessModes"), "spec.accessModes")):
        c.string(mode, f"spec.accessModes[{i}]")
        c.choice(mode, f"spec.accessModes[{i}]", ACCESS_MODES)


def check_pvc(pvc: Obj) -> None:
    c = _Checker(_label("PersistentVolumeClaim", pvc))
    c.metadata(pvc, name_required=True)
    spec = c.mapping(pvc.get("spec"), "spec")
    _access_modes(c, spec)
    c.string(spec.get("volumeName"), "spec.volumeName")


def check_pv(pv: Obj) -> None:
    c = _Checker(_label("PersistentVolume", pv))
    c.metadata(pv, name_required=True)
    spec = c.mapping(pv.get("spec"), "spec")
    _access_modes(c, spec)
    node_affinity = c.mapping(spec.get("nodeAffinity"), "spec.nodeAffinity")
    if node_affinity.get("required") is not None:
        c.node_selector(node_affinity["required"], "spec.nodeAffinity.required")


def check_volume_attachment(attachment: Obj) -> None:
    c = _Checker(_label("VolumeAttachment", attachment))
    c.metadata(attachment, name_required=False)
    spec = c.mapping(attachment.get("spec"), "spec")
    c.string(spec.get("nodeName"), "spec.nodeName")
    source = c.mapping(spec.get("source"), "spec.source")
    c.string(source.get("persistentVolumeName"), "spec.source.persistentVolumeName")
    status = c.mapping(attachment.get("status"), "status")
    c.boolean(status.get("attached"), "status.attached")


CHECKS: dict[str, Callable[[Obj], None]] = {
    "Pod": check_pod,
    "Node": check_node,
    "PersistentVolumeClaim": check_pvc,
    "PersistentVolume": check_pv,
    "VolumeAttachment": check_volume_attachment,
}


def check_objects(objects: Iterable[object]) -> None:
    """Every object of a kind the decision reads; others are ignored (as ``simulate`` ignores
    them).  The message of the first problem says which object (by kind, name and position)."""
    for index, obj in enumerate(objects):
        if not isinstance(obj, Mapping):
            raise InvalidObject(f"object {index + 1} is not a mapping")
        kind = obj.get("kind")
        check = CHECKS.get(kind) if isinstance(kind, str) else None
        if check is None:
            continue
        try:
            check(obj)
        except InvalidObject as exc:
            raise InvalidObject(f"object {index + 1}, {exc}") from None
