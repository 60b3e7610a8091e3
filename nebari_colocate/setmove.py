"""The move of a user's whole set: the node that holds every server of the set at once.  (pure)

Failure mode 3 (``docs/failure-modes.md``): a server does not fit the node its home is pinned to,
although the cluster has room.  Beside the way out that stops some servers, the user may move the
whole set (every running server that mounts the pinned claims, plus the new one) to a node that
holds all of it (``docs/decisions.md``, "The move of the whole set"):

- each server of the set must pass the node's filters as it would alone (:func:`fit.check_fit`:
  cordon, node selection, taints, the volume's node affinity), its own pin to the old node left
  out, and the set's requests, summed, must fit the node's free room, as they would if the
  scheduler placed them there one after another;
- a premium node (one offering a ``premium_resources`` resource) is never chosen for a set that
  requests none of them;
- ties: the fewest pods of others on the node, then the least room left over once the set is
  there (cpu, memory, then the other resources by name), then the node's name.

No node has room: when an autoscaler that adds nodes for pending pods is known to run (a node
carries Karpenter's ``karpenter.sh/nodepool`` label), the set may still move, onto a node it adds
(:attr:`Move.node` None); otherwise there is no move.  The node is asked for by one pod that
holds the room of the whole set (:func:`room_holder`): pods created together, each fitting some
existing node alone, would be bound one by one, the first where it alone fits.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from . import fit, quantity
from .config import DEFAULT_PREMIUM_RESOURCES
from .objects import (
    JsonDict,
    Obj,
    is_terminal,
    labels_of,
    meta,
    owned_by,
    pod_claims,
    pod_server,
    pod_user,
    spec,
)
from .state import ClusterState

#: the label of the pod that asks an autoscaler for a node with room for a whole set, and its
#: image (z2jh's user placeholders' pause image: it does nothing)
ROOM_HOLDER_LABEL = "nebari.dev/room-for"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
#: Karpenter leaves a node alone while a pod with this annotation runs there
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"

#: Karpenter's label of the NodePool a node came from: a node with it shows that Karpenter runs
#: and adds nodes for pending pods
NODEPOOL_LABEL = "karpenter.sh/nodepool"


@dataclass(frozen=True)
class Move:
    """Restart ``restart`` (``""`` is the default server) and start ``start``, all together on
    ``node``; ``node`` None: no node has room now, an autoscaler adds one for the set."""

    restart: tuple[str, ...]
    start: str
    node: str | None
    #: the manifest of the server to start, as it was refused (the move's handler checks
    #: again, before it stops anything, that ``node`` still holds the set)
    pod: Obj | None = field(default=None, compare=False, repr=False)

    def as_json(self) -> JsonDict:
        """``way_out.move`` of ``simulate --json`` (``docs/cli.md``)."""
        return {
            "restart": list(self.restart),
            "start": self.start,
            "node": self.node,
            "new_node": self.node is None,
        }


def _pod_key(pod: Obj, namespace: str) -> str:
    return f"{meta(pod).get('namespace') or namespace}/{meta(pod).get('name')}"


def without_node_pin(pod: Obj) -> Obj:
    """``pod`` without the pins of its required node affinity to named nodes (``matchFields
    metadata.name In``): the pin of a running server to its old node, which a move replaces."""
    terms = (
        ((spec(pod).get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms")
    if not terms:
        return pod
    copied = copy.deepcopy(dict(pod))
    required = copied["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    for term in required["nodeSelectorTerms"]:
        fields = [
            f
            for f in term.get("matchFields") or []
            if not (f.get("key") == "metadata.name" and f.get("operator") == "In")
        ]
        if fields:
            term["matchFields"] = fields
        else:
            term.pop("matchFields", None)
        if not term.get("matchFields") and not term.get("matchExpressions"):
            # a term that was the pin alone (terms are ORed): the server may go to any node
            del copied["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]
            break
    return copied


def _leftover(node: Obj, used: Mapping[str, int], wanted: Mapping[str, int]) -> tuple[int, ...]:
    """The room a node keeps once the set is on it: cpu, memory, then the rest by name."""
    allocatable_raw = (node.get("status") or {}).get("allocatable") or {}
    allocatable = {
        k: quantity.scheduler_units(k, v) for k, v in allocatable_raw.items() if k != "pods"
    }
    left = {
        r: allocatable.get(r, 0) - used.get(r, 0) - wanted.get(r, 0)
        for r in set(allocatable) | set(wanted)
    }
    others = sorted(r for r in left if r not in ("cpu", "memory"))
    return (left.get("cpu", 0), left.get("memory", 0), *(left[r] for r in others))


def holds_set(node_name: str, pods: Sequence[Obj], state: ClusterState) -> bool:
    """Node ``node_name`` holds every pod of ``pods`` at once (the move's re-check)."""
    node = state.nodes.get(node_name) if state.nodes is not None else None
    return node is not None and _holds_set(node, pods, state, state.namespace) is not None


def _holds_set(
    node: Obj, pods: Sequence[Obj], state: ClusterState, namespace: str
) -> tuple[int, ...] | None:
    """The room ``node`` keeps with every pod of ``pods`` on it, or None if one does not fit."""
    name = str(meta(node).get("name"))
    used, count = state.node_usage(name)
    used = dict(used)
    keys = {_pod_key(p, namespace) for p in pods}
    for pod in state.pods_on_node(name):
        # a server of the set already there (it is restarted, so it frees its room first)
        if _pod_key(pod, namespace) in keys and not is_terminal(pod):
            for resource, value in state.requests_of(pod).items():
                used[resource] = used.get(resource, 0) - value
            count -= 1
    wanted: dict[str, int] = {}
    for pod in pods:
        bound_pvs = [pv for pv in (state.bound_pv(namespace, c) for c in pod_claims(pod)) if pv]
        placed = {r: used.get(r, 0) + wanted.get(r, 0) for r in set(used) | set(wanted)}
        result = fit.check_fit(without_node_pin(pod), node, (), bound_pvs, usage=(placed, count))
        if not result.fits:
            return None
        count += 1
        for resource, value in state.requests_of(pod).items():
            wanted[resource] = wanted.get(resource, 0) + value
    return _leftover(node, used, wanted)


def _others_on(node_name: str, state: ClusterState, username: str, label_value: str | None) -> int:
    return sum(
        1
        for p in state.pods_on_node(node_name)
        if not is_terminal(p) and not owned_by(p, username, label_value)
    )


def choose_target(
    pods: Sequence[Obj],
    state: ClusterState,
    *,
    premium_resources: Iterable[str] = DEFAULT_PREMIUM_RESOURCES,
    avoid: Collection[str] = (),
    username: str | None = None,
    label_value: str | None = None,
) -> str | None:
    """The node that holds every pod of ``pods`` (the user's whole set) at once, or None.

    ``avoid``: nodes not to choose (the node the set is pinned to now); ``username`` (default:
    the first pod's KubeSpawner annotation) and ``label_value`` tell the user's own pods from
    others' for the tie rule.  None also when the Nodes are not readable (``state.nodes`` None).
    """
    if state.nodes is None or not pods:
        return None
    resources = tuple(premium_resources)
    needs_premium = any(fit.requests_any(p, resources) for p in pods)
    username = username if username is not None else pod_user(pods[0])
    namespace = state.namespace
    best: tuple[tuple[int, tuple[int, ...], str], str] | None = None
    for name, node in state.nodes.items():
        if name in avoid or (not needs_premium and fit.offered(node, resources)):
            continue
        leftover = _holds_set(node, pods, state, namespace)
        if leftover is None:
            continue
        key = (_others_on(name, state, username, label_value), leftover, name)
        if best is None or key < best[0]:
            best = (key, name)
    return best[1] if best is not None else None


def autoscaler_adds_nodes(state: ClusterState) -> bool:
    """An autoscaler that adds nodes for pending pods is known to run: a node carries
    Karpenter's NodePool label."""
    return state.nodes is not None and any(
        NODEPOOL_LABEL in labels_of(n) for n in state.nodes.values()
    )


def next_target(
    pods: Sequence[Obj],
    state: ClusterState | None,
    *,
    tried: Collection[str],
    premium_resources: Iterable[str] = DEFAULT_PREMIUM_RESOURCES,
    username: str | None = None,
    label_value: str | None = None,
) -> str | None:
    """Where the set goes when the room on the node chosen first could not be held (another
    pod took it since the refusal): the node that holds the whole set now, none of ``tried``
    (the nodes tried, and the node the set is pinned to); ``""`` when no node does and an
    autoscaler adds one; None when neither (the move is stale: nothing was stopped)."""
    if state is None:
        return None
    target = choose_target(
        pods,
        state,
        premium_resources=premium_resources,
        avoid=tried,
        username=username,
        label_value=label_value,
    )
    if target is not None:
        return target
    return "" if autoscaler_adds_nodes(state) else None


def whole_set_move(
    pod: Obj,
    holder_pods: Sequence[Obj],
    state: ClusterState,
    *,
    node_name: str | None,
    premium_resources: Iterable[str] = DEFAULT_PREMIUM_RESOURCES,
    username: str | None = None,
    label_value: str | None = None,
) -> Move | None:
    """The move of ``pod`` with the user's servers ``holder_pods`` (which hold its claims on
    ``node_name``) to a node that holds them all, or to a node an autoscaler adds; None when
    neither is possible, and for a set that mixes servers that need a premium resource and
    servers that need none (the move would keep a premium node running for those: the GPU
    node kept alive).  The caller has checked that every holder is one of the user's own
    servers (the way out's rule)."""
    running = [p for p in holder_pods if not meta(p).get("deletionTimestamp")]
    if not running or len(running) != len(holder_pods):
        return None
    restart = tuple(sorted({pod_server(p) for p in running}))
    start = pod_server(pod)
    if start in restart:
        return None
    resources = tuple(premium_resources)
    wanting = [fit.requests_any(p, resources) for p in [*running, pod]]
    if any(wanting) and not all(wanting):
        # the servers that need no GPU would ride on the GPU node (failure mode 2)
        return None
    target = choose_target(
        [*running, pod],
        state,
        premium_resources=premium_resources,
        avoid=(node_name,) if node_name else (),
        username=username,
        label_value=label_value,
    )
    if target is None and not autoscaler_adds_nodes(state):
        return None
    return Move(restart, start, target, pod)


def room_holder(pods: Sequence[Obj], *, name: str, owner: str) -> JsonDict:
    """A pod that asks, at once, for the room of every pod of ``pods`` (the whole set, the new
    server last): their requests summed, the new server's node selection (its pin left out),
    tolerations, priority and scheduler, a pause container, no volume.  An autoscaler adds a
    node it fits on; its node is then the set's.  ``owner`` (the user's label value) goes on
    label :data:`ROOM_HOLDER_LABEL`."""
    total: dict[str, int] = {}
    for pod in pods:
        for resource, value in fit.pod_requests(pod).items():
            total[resource] = total.get(resource, 0) + value
    requests = {r: (f"{v}m" if r == "cpu" else str(v)) for r, v in sorted(total.items()) if v > 0}
    model = spec(without_node_pin(pods[-1])) if pods else {}
    node_affinity = (model.get("affinity") or {}).get("nodeAffinity")
    copied = {
        "nodeSelector": model.get("nodeSelector"),
        "affinity": {"nodeAffinity": node_affinity} if node_affinity else None,
        "tolerations": model.get("tolerations"),
        "priorityClassName": model.get("priorityClassName"),
        "schedulerName": model.get("schedulerName"),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {ROOM_HOLDER_LABEL: owner},
            "annotations": {DO_NOT_DISRUPT: "true"},
        },
        "spec": {
            **{k: copy.deepcopy(v) for k, v in copied.items() if v},
            "containers": [
                {"name": "room", "image": PAUSE_IMAGE, "resources": {"requests": requests}}
            ],
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "restartPolicy": "Never",
        },
    }


def pinned_holder(pod: Obj, *, node: str, name: str, owner: str) -> JsonDict:
    """A pod that holds ``pod``'s room on node ``node`` (:func:`room_holder` of ``pod`` alone,
    pinned to ``node`` by a required node affinity on its name): the move creates one per
    server of the set before it stops anything, and deletes each just before that server
    starts, so that no other pod takes the room in between."""
    holder = room_holder([pod], name=name, owner=owner)
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = holder["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": []}
    )
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    for term in terms:  # terms are ORed: each carries the pin
        term["matchFields"] = [*(term.get("matchFields") or []), pin]
    return holder
