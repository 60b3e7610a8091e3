"""Would the kube-scheduler admit this pod on this node?  (pure, no I/O)

The subset of kube-scheduler filter plugins that decides whether a pod pinned to one node can run
there: NodeUnschedulable, NodeAffinity (nodeSelector and required node affinity), TaintToleration,
NodeResourcesFit and VolumeBinding (a bound PV's node affinity).  Inputs are camelCase dicts as the
Kubernetes API returns them.  :func:`check_fit` returns reason codes (``docs/decisions.md``, "The
fit check" and "Reason codes"; each code is defined beside its filter) rather than booleans so the
caller can tell a person *why*.  :func:`label_matches` and :func:`field_matches` are the node
affinity matching ``decide`` shares when it infers a node's labels (as kube-scheduler's
NodeAffinity and VolumeBinding plugins share component-helpers' ``nodeaffinity``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from . import quantity
from .objects import JsonDict, Obj, is_terminal, meta, spec

# --------------------------------------------------------------------------------------------------
# quantities are nebari_colocate.quantity's (the API's grammar and bounds, in bounded time)


def format_units(resource: str, units: int) -> str:
    """Human text for a scheduler integer (``1500`` cpu -> ``1.5 CPU``, bytes -> ``2 GiB``)."""
    if resource == "cpu":
        cores = Decimal(units) / 1000
        return f"{cores.normalize():f} CPU"
    if resource in ("memory", "ephemeral-storage"):
        for suffix, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if abs(units) >= size:
                return f"{Decimal(units) / size:.1f} {suffix}".replace(".0 ", " ")
        return f"{units} bytes"
    return str(units)


# --------------------------------------------------------------------------------------------------
# resource requests


def _container_requests(container: Obj) -> dict[str, int]:
    """A container's requests after API defaulting (a limit without a request requests it), in
    nano-units."""
    resources = container.get("resources") or {}
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return {name: quantity.parse_nanos(value) for name, value in merged.items()}


def _add(total: JsonDict, more: Obj) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value


def _max_into(total: JsonDict, other: Obj) -> None:
    for name, value in other.items():
        total[name] = max(total.get(name, 0), value)


def _pod_level_resource(name: str) -> bool:
    """Resources ``spec.resources`` may set (component-helpers IsSupportedPodLevelResource)."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def pod_requests(pod: Obj) -> dict[str, int]:
    """What the scheduler charges a node for this pod, in scheduler units.

    max(sum of containers + sidecars, largest init container + the sidecars started before it),
    plus ``spec.overhead``; pod-level ``spec.resources`` replaces the container sum for the
    resources it names.  Sidecars are init containers with ``restartPolicy: Always``.
    Quantities are summed exactly and rounded once per pod, as the scheduler does.
    """
    pod_spec = spec(pod)
    total: dict[str, int] = {}  # nano-units: exact sums of what the API stored
    for container in pod_spec.get("containers") or []:
        _add(total, _container_requests(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in pod_spec.get("initContainers") or []:
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
        else:
            during = dict(sidecars)
            _add(during, requests)
            _max_into(init_peak, during)
    _max_into(total, init_peak)
    # API defaulting of pod-level requests: an explicit request; else, for a resource the
    # containers request (cpu, memory), their aggregate; else the pod-level limit.
    pod_resources = pod_spec.get("resources") or {}
    pod_level = dict(pod_resources.get("requests") or {})
    for name, value in (pod_resources.get("limits") or {}).items():
        if name not in pod_level and (name not in total or name.startswith("hugepages-")):
            pod_level[name] = value
    for name, value in pod_level.items():
        if _pod_level_resource(name):
            total[name] = quantity.parse_nanos(value)
    for name, value in (pod_spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + quantity.parse_nanos(value)
    return {name: quantity.units(name, value) for name, value in total.items()}


def requests_any(pod: Obj, resources: Iterable[str]) -> bool:
    """The pod requests some of ``resources`` (a premium resource, a GPU)."""
    requested = pod_requests(pod)
    return any(requested.get(r, 0) > 0 for r in resources)


def offered(node: Obj, resources: Iterable[str]) -> dict[str, int]:
    """Those of ``resources`` the node offers (allocatable > 0), in scheduler units."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    found = {}
    for resource in resources:
        if resource in allocatable:
            units = quantity.scheduler_units(resource, allocatable[resource])
            if units > 0:
                found[resource] = units
    return found


# --------------------------------------------------------------------------------------------------
# node selection


_INT64 = re.compile(r"[+-]?[0-9]+")


def _parse_int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``: no spaces or underscores, int64 range; else None."""
    if not isinstance(text, str) or not _INT64.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def label_matches(requirement: Obj, labels: Mapping[str, str]) -> bool:
    key = requirement.get("key", "")
    operator = requirement.get("operator")
    values = requirement.get("values") or []
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        have, want = _parse_int64(labels[key]), _parse_int64(values[0])
        if have is None or want is None:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def field_matches(requirement: Obj, node_name: str) -> bool:
    if requirement.get("key") != "metadata.name":
        return False
    values = requirement.get("values") or []
    if requirement.get("operator") == "In":
        return node_name in values
    if requirement.get("operator") == "NotIn":
        return node_name not in values
    return False


def term_matches(term: Obj, node: Obj) -> bool:
    """One nodeSelectorTerm: its expressions and fields are ANDed; an empty term matches nothing.

    A node without a name has no fields, and then ``matchFields`` are not checked at all (as in
    component-helpers' nodeaffinity: VolumeBinding matches a PV against the node's labels only).
    """
    expressions = term.get("matchExpressions") or []
    field_reqs = term.get("matchFields") or []
    if not expressions and not field_reqs:
        return False
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    name = metadata.get("name") or ""
    if not all(label_matches(r, labels) for r in expressions):
        return False
    return not name or all(field_matches(r, name) for r in field_reqs)


def selector_matches(node_selector: Obj | None, node: Obj) -> bool:
    """A NodeSelector: its terms are ORed.  ``None`` (no selector) matches every node."""
    if node_selector is None:
        return True
    return any(term_matches(t, node) for t in node_selector.get("nodeSelectorTerms") or [])


def required_node_affinity(pod: Obj) -> Obj | None:
    affinity = (spec(pod).get("affinity") or {}).get("nodeAffinity") or {}
    return affinity.get("requiredDuringSchedulingIgnoredDuringExecution")


#: NodeAffinity: the node fails ``spec.nodeSelector`` or the required node affinity
NODE_SELECTOR = "node-selector"


def node_selector_ok(pod: Obj, node: Obj) -> bool:
    """NodeAffinity filter: ``spec.nodeSelector`` AND the required node affinity."""
    labels = meta(node).get("labels") or {}
    selector = spec(pod).get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    return selector_matches(required_node_affinity(pod), node)


# --------------------------------------------------------------------------------------------------
# taints


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """kube's ToleratesTaint: effect and key must match unless empty; Exists ignores the value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


#: TaintToleration: the node has a NoSchedule / NoExecute taint the pod does not tolerate
TAINT = "taint"


def untolerated_taints(pod: Obj, node: Obj) -> list[JsonDict]:
    """The NoSchedule / NoExecute taints of the node that no toleration of the pod matches."""
    tolerations = spec(pod).get("tolerations") or []
    return [
        taint
        for taint in spec(node).get("taints") or []
        if taint.get("effect") in ("NoSchedule", "NoExecute")
        and not any(tolerates(t, taint) for t in tolerations)
    ]


#: Taints Kubernetes and the autoscalers put on a node for its state, not for a kind of workload
#: (taint key -> the node's state): no profile tolerates them, so no profile makes a pod fit such a
#: node, and a node that is not reachable cannot confirm its pods have stopped.
NODE_STATE_UNREACHABLE = "unreachable"  # the node lifecycle controller lost its kubelet
NODE_STATE_NOT_READY = "not-ready"
NODE_STATE_CORDONED = "cordoned"
NODE_STATE_PRESSURE = "pressure"  # memory, disk or PID pressure
NODE_STATE_NO_NETWORK = "network-unavailable"
NODE_STATE_OUT_OF_SERVICE = "out-of-service"  # an operator marked it shut down for good
NODE_STATE_STARTING = "starting"  # the cloud provider has not initialised it yet
NODE_STATE_SHUT_DOWN = "shut-down"  # the cloud provider reports the machine shut down
NODE_STATE_BEING_REMOVED = "being-removed"  # an autoscaler is draining it to delete it
NODE_STATE_TAINTS = {
    "node.kubernetes.io/unreachable": NODE_STATE_UNREACHABLE,
    "node.kubernetes.io/not-ready": NODE_STATE_NOT_READY,
    "node.kubernetes.io/unschedulable": NODE_STATE_CORDONED,
    "node.kubernetes.io/memory-pressure": NODE_STATE_PRESSURE,
    "node.kubernetes.io/disk-pressure": NODE_STATE_PRESSURE,
    "node.kubernetes.io/pid-pressure": NODE_STATE_PRESSURE,
    "node.kubernetes.io/network-unavailable": NODE_STATE_NO_NETWORK,
    "node.kubernetes.io/out-of-service": NODE_STATE_OUT_OF_SERVICE,
    "node.cloudprovider.kubernetes.io/uninitialized": NODE_STATE_STARTING,
    "node.cloudprovider.kubernetes.io/shutdown": NODE_STATE_SHUT_DOWN,
    "ToBeDeletedByClusterAutoscaler": NODE_STATE_BEING_REMOVED,
    "karpenter.sh/disrupted": NODE_STATE_BEING_REMOVED,
}
#: states in which the node's kubelet cannot be relied on to stop its pods (they stay
#: Terminating, still holding the volume, until the node is back or an operator acts)
NODE_STATES_UNRESPONSIVE = frozenset(
    {NODE_STATE_UNREACHABLE, NODE_STATE_NOT_READY, NODE_STATE_SHUT_DOWN, NODE_STATE_OUT_OF_SERVICE}
)


def node_state(taint: Obj) -> str | None:
    """The node state a taint stands for (``NODE_STATE_*``), or None for a workload taint."""
    return NODE_STATE_TAINTS.get(taint.get("key") or "")


def node_states(result: FitResult) -> list[str]:
    """The states of the node behind a misfit (cordoned, unreachable, ...), in order, once each:
    a misfit no profile can cure."""
    states = [NODE_STATE_CORDONED] if NODE_UNSCHEDULABLE in result.reasons else []
    states += [s for s in map(node_state, result.taints) if s]
    return list(dict.fromkeys(states))


UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
#: NodeUnschedulable: the node is cordoned
NODE_UNSCHEDULABLE = "node-unschedulable"


def unschedulable(pod: Obj, node: Obj) -> bool:
    """NodeUnschedulable: a cordoned node takes only pods that tolerate the unschedulable taint."""
    if not spec(node).get("unschedulable"):
        return False
    tolerations = spec(pod).get("tolerations") or []
    return not any(tolerates(t, UNSCHEDULABLE_TAINT) for t in tolerations)


# --------------------------------------------------------------------------------------------------
# the whole filter


#: NodeResourcesFit: the node already runs as many pods as its allocatable ``pods``
TOO_MANY_PODS = "too-many-pods"
#: NodeResourcesFit: the prefix of ``insufficient:<resource>`` (see :func:`insufficient`)
INSUFFICIENT = "insufficient:"
#: how :data:`FIT_REASONS` lists the ``insufficient:<resource>`` codes, one per resource
INSUFFICIENT_ANY = f"{INSUFFICIENT}<resource>"
#: VolumeBinding: a bound PersistentVolume's node affinity excludes the node
VOLUME_NODE_AFFINITY = "volume-node-affinity"
#: every code :func:`check_fit` returns (``insufficient:<resource>`` stands for one per resource)
FIT_REASONS = (
    NODE_UNSCHEDULABLE,
    NODE_SELECTOR,
    TAINT,
    INSUFFICIENT_ANY,
    TOO_MANY_PODS,
    VOLUME_NODE_AFFINITY,
)


def insufficient(resource: str) -> str:
    """The reason code of a resource the node cannot give (``insufficient:nvidia.com/gpu``)."""
    return f"{INSUFFICIENT}{resource}"


def insufficient_resource(code: str) -> str | None:
    """The resource of an ``insufficient:<resource>`` code, else None."""
    return code[len(INSUFFICIENT) :] if code.startswith(INSUFFICIENT) else None


@dataclass
class Shortfall:
    """One resource the node cannot give: what the pod asks, what the node has free, in units."""

    resource: str
    requested: int
    free: int
    allocatable: int


@dataclass
class FitResult:
    """Reason codes (empty: the pod fits) and the facts behind them, for messages."""

    reasons: list[str] = field(default_factory=list)
    taints: list[JsonDict] = field(default_factory=list)
    shortfalls: list[Shortfall] = field(default_factory=list)
    max_pods: int | None = None

    @property
    def fits(self) -> bool:
        return not self.reasons


def node_usage(
    node_name: str,
    pods: Iterable[Obj],
    *,
    exclude: Iterable[str] = (),
    requests_of: Callable[[Obj], Mapping[str, int]] = pod_requests,
) -> tuple[dict[str, int], int]:
    """Sum of requests and count of non-terminal pods bound to ``node_name`` (every namespace).

    ``exclude`` holds ``namespace/name`` keys of pods that must not be counted (the pod being
    replaced).  Terminating pods still count: the scheduler keeps them until they are gone.
    """
    excluded = set(exclude)
    used: dict[str, int] = {}
    count = 0
    for pod in pods:
        if spec(pod).get("nodeName") != node_name or is_terminal(pod):
            continue
        pod_meta = meta(pod)
        if f"{pod_meta.get('namespace')}/{pod_meta.get('name')}" in excluded:
            continue
        count += 1
        _add(used, requests_of(pod))
    return used, count


def check_fit(
    pod: Obj,
    node: Obj,
    node_pods: Iterable[Obj],
    bound_pvs: Iterable[Obj] = (),
    *,
    exclude: Iterable[str] = (),
    requests_of: Callable[[Obj], Mapping[str, int]] = pod_requests,
    usage: tuple[Mapping[str, int], int] | None = None,
) -> FitResult:
    """Run the filter subset for ``pod`` on ``node``; ``node_pods`` may include pods elsewhere.

    ``usage``: the node's (requests, pod count) when the caller has it already (then
    ``node_pods`` and ``exclude`` are not read).
    """
    result = FitResult()
    if unschedulable(pod, node):
        result.reasons.append(NODE_UNSCHEDULABLE)
    if not node_selector_ok(pod, node):
        result.reasons.append(NODE_SELECTOR)
    result.taints = untolerated_taints(pod, node)
    if result.taints:
        result.reasons.append(TAINT)

    name = meta(node).get("name", "")
    allocatable_raw = (node.get("status") or {}).get("allocatable") or {}
    allocatable = {k: quantity.scheduler_units(k, v) for k, v in allocatable_raw.items()}
    if usage is None:
        usage = node_usage(name, node_pods, exclude=exclude, requests_of=requests_of)
    used, count = usage
    requested = pod_requests(pod)
    max_pods = allocatable.get("pods", 0)
    if count + 1 > max_pods:
        result.reasons.append(TOO_MANY_PODS)
        result.max_pods = max_pods
    for resource in sorted(requested):
        want = requested[resource]
        if resource == "pods" or want <= 0:
            continue
        have = allocatable.get(resource, 0)
        free = have - used.get(resource, 0)
        if want > free:
            result.reasons.append(insufficient(resource))
            result.shortfalls.append(Shortfall(resource, want, free, have))

    # VolumeBinding matches a PV's node affinity against the node's labels only (a node object
    # with no name), so a PV's matchFields constrain nothing there.
    labels_only = {"metadata": {"labels": meta(node).get("labels") or {}}}
    for pv in bound_pvs:
        pv_affinity = (spec(pv).get("nodeAffinity") or {}).get("required")
        if pv_affinity is not None and not selector_matches(pv_affinity, labels_only):
            result.reasons.append(VOLUME_NODE_AFFINITY)
            break
    return result
