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
from .objects import JsonDict, Obj

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

    def __init__(self, label: str, saturated: list[str] | None = None) -> None:
        self.label = label
        #: where a quantity beyond int64 is recorded (one line each) instead of refused: an
        #: object the decision does not read, whose quantities the scheduler only sums
        self.saturated = saturated

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
            if self.saturated is not None and quantity.saturates(name, amount):
                self.saturated.append(
                    f"{self.label}: {path}.{_key(name)}: {_shown(amount)} is beyond what "
                    "Kubernetes can count: counted as the scheduler counts it (unbounded)"
                )
                found[name] = quantity.parse_nanos(amount)
                continue
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


def check_pod(pod: Obj, *, name_required: bool = True, saturated: list[str] | None = None) -> None:
    """A Pod; ``name_required=False`` for a manifest whose name the spawner sets; with
    ``saturated``, quantities beyond int64 are recorded there instead of refused."""
    c = _Checker(_label("Pod", pod), saturated)
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


def check_node(node: Obj, *, saturated: list[str] | None = None) -> None:
    c = _Checker(_label("Node", node), saturated)
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


def check_runtime_class(runtime_class: Obj) -> None:
    c = _Checker(_label("RuntimeClass", runtime_class))
    c.metadata(runtime_class, name_required=True)
    overhead = c.mapping(runtime_class.get("overhead"), "overhead")
    c.resources(overhead.get("podFixed"), "overhead.podFixed")
    scheduling = c.mapping(runtime_class.get("scheduling"), "scheduling")
    c.string_map(scheduling.get("nodeSelector"), "scheduling.nodeSelector")
    tolerations = c.sequence(scheduling.get("tolerations"), "scheduling.tolerations")
    for i, toleration in enumerate(tolerations):
        path = f"scheduling.tolerations[{i}]"
        toleration = c.mapping(toleration, path)
        for key in ("key", "value", "effect", "operator"):
            c.string(toleration.get(key), f"{path}.{key}")


CHECKS: dict[str, Callable[[Obj], None]] = {
    "Pod": check_pod,
    "Node": check_node,
    "PersistentVolumeClaim": check_pvc,
    "PersistentVolume": check_pv,
    "VolumeAttachment": check_volume_attachment,
    "RuntimeClass": check_runtime_class,
}
#: the kinds whose quantities may saturate in an object the decision does not read
_SATURATING: dict[str, Callable[..., None]] = {"Pod": check_pod, "Node": check_node}


def check_object(index: int, obj: object, *, lenient: bool = False) -> list[str]:
    """Object ``index`` (counted from 0) of a file, checked as :func:`check_objects` checks it;
    kinds the decision ignores are not.  ``lenient``: a quantity beyond int64 in a Pod or a Node
    is not refused but returned, one line each (see :func:`check_objects`)."""
    if not isinstance(obj, Mapping):
        raise InvalidObject(f"object {index + 1} is not a mapping")
    kind = obj.get("kind")
    check = CHECKS.get(kind) if isinstance(kind, str) else None
    if check is None:
        return []
    saturating = _SATURATING.get(str(kind)) if lenient else None
    try:
        if saturating is None:
            check(obj)
            return []
        found: list[str] = []
        saturating(obj, saturated=found)
    except InvalidObject as exc:
        raise InvalidObject(f"object {index + 1}, {exc}") from None
    return [f"object {index + 1}, {line}" for line in found]


def check_objects(
    objects: Iterable[object],
    *,
    read: Callable[[Obj], bool] | None = None,
    saturated: list[str] | None = None,
) -> None:
    """Every object of a kind the decision reads; others are ignored (as ``simulate`` ignores
    them).  The message of the first problem says which object (by kind, name and position).

    ``read``: which objects the decision reads itself (the new pod's claims, their holders);
    with it, a quantity beyond int64 in any other Pod or Node (one kube-apiserver accepts and
    stores, ``cpu: 10e399``) is not refused but recorded in ``saturated`` (one line each): the
    scheduler counts it saturated, and so does the decision."""
    for index, obj in enumerate(objects):
        lenient = saturated is not None and isinstance(obj, Mapping) and not reads(read, obj)
        found = check_object(index, obj, lenient=lenient)
        if saturated is not None:
            saturated.extend(found)


def reads(read: Callable[[Obj], bool] | None, obj: Obj) -> bool:
    """Whether ``read`` says the decision reads ``obj`` itself (None: it reads everything)."""
    if read is None:
        return True
    try:
        return read(obj)
    except (TypeError, AttributeError, ValueError, KeyError):
        return True  # malformed: checked in full, which names the problem


# --------------------------------------------------------------------------------------------------
# admission: what kube-apiserver adds to a pod before anything schedules it


def admit_runtime_class(
    pod: JsonDict, runtime_classes: Mapping[str, Obj]
) -> tuple[JsonDict, str | None]:
    """The pod as the RuntimeClass admission plugin leaves it, and a note when it could not be
    applied (the dump lacks the RuntimeClass the pod names).

    A pod naming ``spec.runtimeClassName`` gets its class's ``overhead.podFixed`` as
    ``spec.overhead`` (which the scheduler adds to its requests), the class's
    ``scheduling.nodeSelector`` merged into its ``nodeSelector`` and its
    ``scheduling.tolerations`` added; where the API would refuse the pod (its own overhead or
    node selector conflicts with the class's), :class:`InvalidObject` says why.
    """
    spec = pod.get("spec") or {}
    name = spec.get("runtimeClassName")
    if not name:
        return pod, None
    c = _Checker(_label("Pod", pod))
    c.string(name, "spec.runtimeClassName")
    runtime_class = runtime_classes.get(name)
    if runtime_class is None:
        return pod, (
            f"the pod names RuntimeClass {name!r}, which the dump does not contain: its "
            "overhead and scheduling are not counted (add kubectl get runtimeclasses -o yaml)"
        )
    admitted = {**pod, "spec": dict(spec)}
    new_spec = admitted["spec"]
    overhead = (runtime_class.get("overhead") or {}).get("podFixed")
    if overhead:
        own = spec.get("overhead")
        if own is not None and own != overhead:
            c.fail("spec.overhead", f"does not match RuntimeClass {name!r}'s overhead")
        new_spec["overhead"] = dict(overhead)
    scheduling = runtime_class.get("scheduling") or {}
    selector = dict(spec.get("nodeSelector") or {})
    for key, value in (scheduling.get("nodeSelector") or {}).items():
        if key in selector and selector[key] != value:
            c.fail(
                f"spec.nodeSelector.{_key(key)}",
                f"conflicts with RuntimeClass {name!r}'s node selector {key}={value}",
            )
        selector[key] = value
    if selector:
        new_spec["nodeSelector"] = selector
    tolerations = list(spec.get("tolerations") or [])
    for toleration in scheduling.get("tolerations") or []:
        if toleration not in tolerations:
            tolerations.append(toleration)
    if tolerations:
        new_spec["tolerations"] = tolerations
    return admitted, None
