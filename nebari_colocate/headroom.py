"""Headroom for a user's first server: where the rest of the user's servers will fit.  (pure)

With a ReadWriteOnce home every server of a user runs on the node of the first one, so the first
server's node decides how much the user can run (failure mode 3, ``docs/failure-modes.md``).
zero-to-jupyterhub's user-scheduler packs (NodeResourcesFit ``MostAllocated``), and puts the
first server on the fullest node that still takes it.  With ``colocation_headroom`` on, the
first server gets a *preferred* node affinity toward the nodes that can also hold the user's
usual footprint (``docs/decisions.md``, "Headroom for the first server"):

- the footprint rule (:func:`usual_footprint`): per resource, the larger of the configured
  footprint (``colocation_headroom_footprint``) and the largest set of servers the user has run
  before (the history, :func:`set_footprint` of each set, kept in the spawner state);
- the room needed (:func:`needed_room`): per resource, the larger of the footprint and the
  server's own request; a premium resource (a GPU) the server does not request is left out, so a
  CPU lab is never steered by a GPU set of the past;
- the nodes (:func:`roomy_nodes`): those that pass the server's own filters (the kube-scheduler
  subset of :mod:`nebari_colocate.fit`), are not premium nodes for a server that needs none, and
  have that much free beyond the room promised to the users already there (:func:`promised`:
  each such user's configured footprint beyond what the user runs there now); the best fitting
  first (least room left), at most :data:`MAX_HEADROOM_NODES`;
- the term (:func:`headroom_terms`): one preferred term per node, ``matchFields metadata.name In
  [node]`` (the API takes one value per ``metadata.name`` field requirement), weight
  :data:`HEADROOM_WEIGHT`.  Preferred, never required: a node that cannot take the pod is simply
  not scored, and Karpenter reads only ``matchExpressions`` of a preferred term, so it provisions
  for the pod as if the term were not there.  No term at all when no node has the room, or when
  every node that takes the server has it (the preference would change nothing).

With the user-scheduler's weights (NodeAffinity 14631, NodeResourcesFit 121) the preference
outweighs the packing; with the default scheduler's (NodeAffinity 2, NodeResourcesFit 1) too.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping

from . import quantity
from .fit import INSUFFICIENT, TOO_MANY_PODS, check_fit, node_usage, offered, pod_requests
from .objects import JsonDict, Obj, is_terminal, meta

#: the weight of each headroom term (the most a preferred term may have)
HEADROOM_WEIGHT = 100
#: the most nodes the preference names (one term each): the best fitting ones
MAX_HEADROOM_NODES = 20
#: the key of the user's largest set in the spawner state (``get_state``)
STATE_KEY = "colocation_footprint"
#: resources a footprint never counts: the pod count is no room a set needs beyond its pods
NOT_COUNTED = ("pods",)

Footprint = dict[str, int]


def configured_footprint(value: Mapping[str, object] | None) -> Footprint:
    """``colocation_headroom_footprint`` (resource -> quantity, ``{"cpu": "2", "memory":
    "8Gi"}``) in the scheduler's units (millicores, bytes, whole units); the validator in
    :mod:`nebari_colocate.config` has refused what cannot be read."""
    return {
        str(name): quantity.scheduler_units(str(name), amount)
        for name, amount in (value or {}).items()
        if name not in NOT_COUNTED
    }


def stored_footprint(value: object) -> Footprint:
    """A footprint as the spawner state keeps it (resource -> int); anything else (a state
    written by hand, by another version) reads as no footprint, never as an error."""
    if not isinstance(value, Mapping):
        return {}
    return {
        name: amount
        for name, amount in value.items()
        if isinstance(name, str)
        and isinstance(amount, int)
        and not isinstance(amount, bool)
        and amount > 0
        and name not in NOT_COUNTED
    }


def larger(*footprints: Mapping[str, int]) -> Footprint:
    """Per resource, the largest amount any of ``footprints`` has."""
    merged: Footprint = {}
    for footprint in footprints:
        for name, amount in footprint.items():
            if amount > merged.get(name, 0):
                merged[name] = amount
    return merged


def usual_footprint(
    configured: Mapping[str, int], history: Iterable[Mapping[str, int]]
) -> Footprint:
    """The footprint rule: per resource, the larger of the configured footprint and the largest
    set the user has run before (each entry of ``history`` is one recorded set)."""
    return larger(configured, *history)


def set_footprint(pods: Iterable[Obj]) -> Footprint:
    """What a set of servers requests together: the sum of the requests of those of ``pods``
    not finished (Succeeded / Failed)."""
    total: Footprint = {}
    for pod in pods:
        if is_terminal(pod):
            continue
        for name, amount in pod_requests(pod).items():
            if name not in NOT_COUNTED and amount > 0:
                total[name] = total.get(name, 0) + amount
    return total


def needed_room(
    pod: Obj, footprint: Mapping[str, int], premium_resources: Iterable[str] = ()
) -> Footprint:
    """The free room a node needs for ``pod`` and the rest of the user's usual set: per
    resource, the larger of the footprint and the pod's own request; premium resources the pod
    does not request are left out (a GPU set of the past does not steer a CPU lab)."""
    own = {name: amount for name, amount in pod_requests(pod).items() if name not in NOT_COUNTED}
    premium = set(premium_resources)
    kept = {
        name: amount
        for name, amount in footprint.items()
        if name not in premium or own.get(name, 0) > 0
    }
    return larger(own, kept)


def _free(node: Obj, used: Mapping[str, int], resource: str) -> int:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if resource not in allocatable:
        return 0
    return quantity.scheduler_units(resource, allocatable[resource]) - used.get(resource, 0)


def promised(
    pods: Iterable[Obj], owner: Callable[[Obj], str | None], footprint: Mapping[str, int]
) -> Footprint:
    """The room a node keeps for the users already on it: for each user (``owner(pod)``, None
    for a pod that is no user's server), per resource, what ``footprint`` (the configured one:
    another user's history is not at hand) asks beyond the user's servers there now."""
    sets: dict[str, list[Obj]] = {}
    for pod in pods:
        who = owner(pod)
        if who is not None and not is_terminal(pod):
            sets.setdefault(who, []).append(pod)
    kept: Footprint = {}
    for servers in sets.values():
        running = set_footprint(servers)
        for name, amount in footprint.items():
            short = amount - running.get(name, 0)
            if short > 0:
                kept[name] = kept.get(name, 0) + short
    return kept


def roomy_nodes(
    pod: Obj,
    need: Mapping[str, int],
    nodes: Mapping[str, Obj],
    pods_on: Callable[[str], Iterable[Obj]],
    premium_resources: Iterable[str] = (),
    keep: Callable[[Iterable[Obj]], Mapping[str, int]] = lambda pods: {},
) -> tuple[list[str], list[str]]:
    """(the nodes with ``need`` free, best fitting first, at most :data:`MAX_HEADROOM_NODES`;
    every node that takes ``pod`` itself, sorted by name).

    A node counts only when the pod passes its filters (node selector and affinity, taints,
    cordon, pod count; :func:`nebari_colocate.fit.check_fit`), and, for a pod that requests no
    premium resource, when the node offers none.  ``pods_on(name)``: the pods bound to a node
    (every namespace the caller can see); ``keep(pods)``: the room those pods' users are
    promised there (:func:`promised`), not free for this one.
    """
    premium = tuple(premium_resources)
    needs_premium = any(need.get(r, 0) > 0 for r in premium)
    taking: list[str] = []
    roomy: list[tuple[tuple[int, ...], str]] = []
    for name in sorted(nodes):
        node = nodes[name]
        if not needs_premium and offered(node, premium):
            continue
        on_node = list(pods_on(name))
        usage = node_usage(name, on_node)
        result = check_fit(pod, node, (), usage=usage)
        if any(not r.startswith(INSUFFICIENT) and r != TOO_MANY_PODS for r in result.reasons):
            continue
        if result.reasons:
            continue  # the pod itself does not fit: the scheduler will not score the node
        taking.append(name)
        kept = keep(p for p in on_node if meta(p).get("deletionTimestamp") is None)
        left = tuple(
            _free(node, usage[0], r) - kept.get(r, 0) - amount for r, amount in sorted(need.items())
        )
        if all(room >= 0 for room in left):
            roomy.append((left, name))
    roomy.sort()
    return [name for _, name in roomy[:MAX_HEADROOM_NODES]], taking


def headroom_terms(nodes: Iterable[str]) -> list[JsonDict]:
    """The preferred node affinity terms toward ``nodes``: one per node (the API takes one value
    per ``metadata.name`` field requirement), weight :data:`HEADROOM_WEIGHT`."""
    return [
        {
            "weight": HEADROOM_WEIGHT,
            "preference": {
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]
            },
        }
        for node in nodes
    ]


def chosen_nodes(roomy: list[str], taking: list[str]) -> list[str]:
    """The nodes the preference names: the roomy ones, unless none is roomy or every node that
    takes the pod is (then a preference changes nothing, and none is emitted)."""
    if not roomy or set(roomy) >= set(taking):
        return []
    return roomy


def with_headroom(pod: Obj, terms: Iterable[JsonDict]) -> JsonDict:
    """A copy of ``pod`` with ``terms`` added to its preferred node affinity (the operator's
    and zero-to-jupyterhub's own preferred terms kept); the required affinity is left alone."""
    manifest = copy.deepcopy(dict(pod))
    terms = list(terms)
    if not terms:
        return manifest
    spec = manifest.setdefault("spec", {})
    affinity = dict(spec.get("affinity") or {})
    spec["affinity"] = affinity
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    affinity["nodeAffinity"] = node_affinity
    preferred = list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    preferred += [t for t in terms if t not in preferred]
    node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return manifest


def headroom_for(
    pod: Obj,
    footprint: Mapping[str, int],
    nodes: Mapping[str, Obj],
    pods_on: Callable[[str], Iterable[Obj]],
    premium_resources: Iterable[str] = (),
    *,
    owner: Callable[[Obj], str | None] = lambda pod: None,
    others: Mapping[str, int] | None = None,
) -> tuple[Footprint, list[str]]:
    """(the room needed, the nodes the preference names) for a first server ``pod``: the steps
    above in order (:func:`needed_room`, :func:`roomy_nodes`, :func:`chosen_nodes`).
    ``owner`` tells whose server a pod is and ``others`` (the configured footprint) what each
    user already on a node is promised there (:func:`promised`); by default nothing is."""
    need = needed_room(pod, footprint, premium_resources)
    promise = {k: v for k, v in (others or {}).items() if k in need}

    def keep(pods: Iterable[Obj]) -> Footprint:
        return promised(pods, owner, promise) if promise else {}

    roomy, taking = roomy_nodes(pod, need, nodes, pods_on, premium_resources, keep)
    return need, chosen_nodes(roomy, taking)


def node_names(nodes: Iterable[Obj]) -> dict[str, Obj]:
    """Nodes by name (a helper for callers holding a list)."""
    return {str(meta(node).get("name", "")): node for node in nodes}
