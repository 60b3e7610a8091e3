"""Apply a Decision to a pod manifest.  (pure)

The pod affinity keeps every server of a user on the node of the others (the scheduler's first-pod
rule lets the first one land anywhere and makes concurrent spawns converge).  When the node is known
a required node affinity ``matchFields metadata.name In [N]`` is ANDed into every existing
nodeSelectorTerm: terms are ORed, so appending a term of its own would loosen the profile's
selection instead of narrowing it.  Preferred affinities and everything else are left alone.

A required pod-affinity term that already selects on our label key (a hand-written co-location
rule, such as data-science-pack's ``extra_pod_config`` one with the ``{username}`` escape-slug
value) is replaced by ours, never ANDed with it: its value may differ from ours for the same user,
and two terms that cannot both match make every first pod of that user unschedulable.  So is any
other user co-location term (:func:`is_colocation_term`: on ``hub.jupyter.org/username`` or
``nebari.dev/colocate-user``, topology ``kubernetes.io/hostname``).  With no co-location needed
(``skip``) such terms are dropped: a ReadWriteMany home must not keep a user's servers together.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping

from .config import DEFAULT_LABEL_KEY
from .objects import HOSTNAME, USERNAME_LABEL, JsonDict, Obj
from .placement import COLOCATE, SKIP, Decision


def colocation_term(label_key: str, label_value: str) -> JsonDict:
    """The required pod affinity term that keeps a user's pods on one node."""
    return {
        "labelSelector": {"matchLabels": {label_key: label_value}},
        "topologyKey": HOSTNAME,
    }


def node_pin(node_name: str) -> JsonDict:
    return {"key": "metadata.name", "operator": "In", "values": [node_name]}


def _field(obj: object, camel: str, snake: str) -> object:
    """A field by its API name, or by the Python client's name: KubeSpawner's
    ``pod_affinity_required`` takes either (``topologyKey`` / ``topology_key``)."""
    if not isinstance(obj, Mapping):
        return None
    return obj[camel] if camel in obj else obj.get(snake)


def selects_on(term: object, label_key: str) -> bool:
    """Does a pod-affinity term's labelSelector select on ``label_key``?"""
    selector = _field(term, "labelSelector", "label_selector")
    if not isinstance(selector, Mapping):
        return False
    labels = _field(selector, "matchLabels", "match_labels")
    if isinstance(labels, Mapping) and label_key in labels:
        return True
    expressions = _field(selector, "matchExpressions", "match_expressions")
    return isinstance(expressions, list) and any(
        isinstance(e, Mapping) and e.get("key") == label_key for e in expressions
    )


def colocation_keys(term: object, label_key: str) -> list[str]:
    """The user label keys a required pod-affinity term keeps a user's pods together on, one
    node each (topology ``kubernetes.io/hostname``): ``label_key``, ``nebari.dev/colocate-user``,
    ``hub.jupyter.org/username``.  Empty for any other term."""
    if _field(term, "topologyKey", "topology_key") != HOSTNAME:
        return []
    keys = dict.fromkeys((label_key, DEFAULT_LABEL_KEY, USERNAME_LABEL))
    return [key for key in keys if selects_on(term, key)]


def is_colocation_term(term: object, label_key: str) -> bool:
    """A required pod-affinity term that keeps a user's pods on one node (a hand-written
    co-location rule): see :func:`colocation_keys`."""
    return bool(colocation_keys(term, label_key))


def user_term_keys(term: object, label_key: str) -> list[str]:
    """The label keys of a term that ours replaces: a co-location term
    (:func:`colocation_keys`), or one selecting on ``label_key`` whatever its topology.
    Empty for any other term."""
    keys = colocation_keys(term, label_key)
    if not keys and selects_on(term, label_key):
        keys = [label_key]
    return keys


def is_user_colocation_term(term: object, label_key: str) -> bool:
    """A term that ours replaces, in a manifest or a hub config: see :func:`user_term_keys`."""
    return bool(user_term_keys(term, label_key))


def user_colocation_keys(pod: Obj, label_key: str, label_value: str) -> list[str]:
    """The label keys of the user co-location terms in ``pod``'s required pod affinity that
    :func:`apply_decision` takes out (our own term aside), for the hub log."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    affinity = spec.get("affinity") if isinstance(spec, Mapping) else None
    pod_affinity = affinity.get("podAffinity") if isinstance(affinity, Mapping) else None
    if not isinstance(pod_affinity, Mapping):
        return []
    ours = colocation_term(label_key, label_value)
    keys: dict[str, None] = {}
    for term in pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []:
        if term != ours:
            keys.update(dict.fromkeys(user_term_keys(term, label_key)))
    return list(keys)


def drop_pod_affinity_terms(affinity: JsonDict, drop: Callable[[object], bool]) -> bool:
    """Take the required pod-affinity terms ``drop`` picks out of ``affinity`` (in place; a
    podAffinity left empty goes too); returns whether any was taken out."""
    pod_affinity = affinity.get("podAffinity")
    if not isinstance(pod_affinity, Mapping):
        return False
    required = list(pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    kept = [t for t in required if not drop(t)]
    if len(kept) == len(required):
        return False
    pod_affinity = dict(pod_affinity)
    if kept:
        pod_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = kept
    else:
        pod_affinity.pop("requiredDuringSchedulingIgnoredDuringExecution", None)
    if pod_affinity:
        affinity["podAffinity"] = pod_affinity
    else:
        affinity.pop("podAffinity", None)
    return True


def apply_decision(pod: Obj, decision: Decision, label_key: str, label_value: str) -> JsonDict:
    """A copy of ``pod`` labelled for co-location, with the affinity the decision calls for.

    Every user pod gets the label (so later pods can find it); only ``colocate`` adds affinity.
    Refusals never reach here: the spawner raises instead.  A ``preferred`` decision (the safe
    side on claims whose access modes are not known) adds the term as a preferred one (weight
    100) and pins no node.
    """
    if decision.verdict not in (COLOCATE, SKIP):
        raise ValueError(f"cannot apply a {decision.verdict!r} decision to a pod")
    manifest = copy.deepcopy(dict(pod))
    metadata = manifest.setdefault("metadata", {})
    metadata.setdefault("labels", {})
    metadata["labels"] = {**(metadata["labels"] or {}), label_key: label_value}
    spec = manifest.setdefault("spec", {})
    if isinstance(spec.get("affinity"), Mapping):
        spec["affinity"] = dict(spec["affinity"])
        drop_pod_affinity_terms(spec["affinity"], lambda t: is_user_colocation_term(t, label_key))
        if not spec["affinity"]:
            del spec["affinity"]
    if decision.verdict != COLOCATE:
        return manifest

    affinity = spec.get("affinity") or {}
    spec["affinity"] = affinity

    pod_affinity = affinity.get("podAffinity") or {}
    affinity["podAffinity"] = pod_affinity
    if decision.preferred:
        # the safe side on claims of unknown access modes: together where the scheduler can
        preferred = list(pod_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
        weighted = {"weight": 100, "podAffinityTerm": colocation_term(label_key, label_value)}
        if weighted not in preferred:
            preferred.append(weighted)
        pod_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
        return manifest
    required = list(pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    term = colocation_term(label_key, label_value)
    if term not in required:
        required.append(term)
    pod_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required

    if decision.node:
        node_affinity = affinity.get("nodeAffinity") or {}
        affinity["nodeAffinity"] = node_affinity
        selector = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        terms = [dict(t) for t in selector.get("nodeSelectorTerms") or []] or [{}]
        pin = node_pin(decision.node)
        for t in terms:
            fields = list(t.get("matchFields") or [])
            if pin not in fields:
                fields.append(pin)
            t["matchFields"] = fields
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            **selector,
            "nodeSelectorTerms": terms,
        }
    return manifest


#: Karpenter's label of the NodePool a node came from (a label Karpenter lets pods select on)
NODEPOOL_LABEL = "karpenter.sh/nodepool"


def avoid_nodes(pod: Obj, nodes: Iterable[tuple[str, str | None, str | None]]) -> JsonDict:
    """A copy of ``pod`` that no node of ``nodes`` admits: the move off a premium node
    (``docs/decisions.md``).  Each node is (name, ``kubernetes.io/hostname`` label,
    ``karpenter.sh/nodepool`` label), the labels None when the node has none.

    Every existing nodeSelectorTerm (terms are ORed) is narrowed by what an autoscaler can
    still read: Karpenter ignores a pod whose node selection uses ``matchFields`` or
    ``kubernetes.io/hostname`` (it adds no node for it), so a Karpenter node is kept off by its
    NodePool (``karpenter.sh/nodepool NotIn [pools]``: no machine of that pool again); another
    node by ``kubernetes.io/hostname NotIn [labels]``; a node without either label by
    ``matchFields metadata.name NotIn [names]``, which kube-scheduler honours.
    """
    nodes = list(nodes)
    pools = sorted({p for _, _, p in nodes if p})
    hostnames = sorted({h for _, h, p in nodes if h and not p})
    names = sorted({n for n, h, p in nodes if not h and not p})
    manifest = copy.deepcopy(dict(pod))
    if not pools and not hostnames and not names:
        return manifest
    expressions_to_add = [
        {"key": key, "operator": "NotIn", "values": values}
        for key, values in ((NODEPOOL_LABEL, pools), (HOSTNAME, hostnames))
        if values
    ]
    spec = manifest.setdefault("spec", {})
    affinity = dict(spec.get("affinity") or {})
    spec["affinity"] = affinity
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    affinity["nodeAffinity"] = node_affinity
    selector = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = [dict(t) for t in selector.get("nodeSelectorTerms") or []] or [{}]
    for t in terms:
        if expressions_to_add:
            expressions = list(t.get("matchExpressions") or [])
            expressions += [e for e in expressions_to_add if e not in expressions]
            t["matchExpressions"] = expressions
        if names:
            off = {"key": "metadata.name", "operator": "NotIn", "values": names}
            fields = list(t.get("matchFields") or [])
            if off not in fields:
                fields.append(off)
            t["matchFields"] = fields
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        **selector,
        "nodeSelectorTerms": terms,
    }
    return manifest
