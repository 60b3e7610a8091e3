"""The reports of ``nebari-colocate explain`` and ``audit``, from plain objects.  (pure)

The CLI reads a :class:`~nebari_colocate.state.ClusterState` through
:mod:`nebari_colocate.view` (camelCase dicts as the API returns them; its ``notes`` say what could
not be read) and a :class:`~nebari_colocate.placement.Decision` from ``placement.decide``; the
functions here turn them into a JSON-ready dict and into plain aligned text.  Quantities in the
JSON are the integers the kube-scheduler compares: cpu in millicores, memory and
ephemeral-storage in bytes, everything else in whole units.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from . import fit, messages, quantity
from .objects import (
    COMPONENT_LABEL,
    RWX,
    SERVER_COMPONENT,
    SERVERNAME_ANNOTATION,
    USERNAME_ANNOTATION,
    USERNAME_LABEL,
    JsonDict,
    Obj,
    holder_nodes,
    holds_volume,
    is_exclusive,
    meta,
    mounts_read_only,
    owned_by,
    pod_claims,
    pod_server,
    pod_user,
    spec,
)
from .placement import Decision, Policy, claim_modes
from .state import ClusterState

#: the name of the pod ``explain`` judges when the server is not running (it matches no real pod)
EXPLAIN_POD_NAME = "nebari-colocate-explain"

_RESOURCE_ORDER = ("cpu", "memory", "ephemeral-storage", "pods")


# --------------------------------------------------------------------------------------------------
# small helpers on plain dicts


def _server_key(pod: Obj) -> tuple[bool, str, str]:
    server = pod_server(pod)
    return (server != "", server, meta(pod).get("name", ""))


def user_pods(pods: Iterable[Obj], username: str, label_value: str) -> list[JsonDict]:
    """The user's pods, default server first, then by server name."""
    return sorted((dict(p) for p in pods if owned_by(p, username, label_value)), key=_server_key)


def user_claims(
    own_pods: Iterable[Obj], pvcs: Mapping[str, Obj], username: str, label_value: str
) -> list[str]:
    """Claims the user's pods mount, plus claims KubeSpawner created for the user (it writes the
    username annotation on the PVCs it creates)."""
    names = {c for p in own_pods for c in pod_claims(p)}
    names.update(n for n, pvc in pvcs.items() if owned_by(pvc, username, label_value))
    return sorted(names)


def _phase(pod: Obj) -> str:
    if meta(pod).get("deletionTimestamp"):
        return "Terminating"
    return (pod.get("status") or {}).get("phase") or "Pending"


def _shared_tolerations(own_pods: Sequence[Obj]) -> list[JsonDict]:
    """Tolerations every one of the user's pods has: the deployment-wide ones (such as
    zero-to-jupyterhub's ``hub.jupyter.org/dedicated=user``), not a profile's."""
    if not own_pods:
        return []
    first = [dict(t) for t in spec(own_pods[0]).get("tolerations") or []]
    return [t for t in first if all(t in (spec(p).get("tolerations") or []) for p in own_pods)]


def minimal_pod(
    username: str,
    label_value: str,
    server: str,
    namespace: str,
    claims: Sequence[str],
    own_pods: Sequence[Obj],
) -> JsonDict:
    """The pod ``explain`` judges without ``--pod``: no requests, no node selection, the user's
    claims, and the tolerations all of the user's running servers share.

    It takes the name of the server's running pod (a restart replaces it) or a name no pod has.
    """
    running = [p for p in own_pods if pod_server(p) == server]
    name = meta(running[0]).get("name") if running else EXPLAIN_POD_NAME
    annotations = {USERNAME_ANNOTATION: username}
    if server:
        annotations[SERVERNAME_ANNOTATION] = server
    spec: JsonDict = {
        "containers": [{"name": "notebook", "image": "nebari-colocate-explain"}],
        "volumes": [
            {"name": f"volume-{i}", "persistentVolumeClaim": {"claimName": c}}
            for i, c in enumerate(claims)
        ],
    }
    tolerations = _shared_tolerations(own_pods)
    if tolerations:
        spec["tolerations"] = tolerations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {USERNAME_LABEL: label_value, COMPONENT_LABEL: SERVER_COMPONENT},
            "annotations": annotations,
        },
        "spec": spec,
    }


# --------------------------------------------------------------------------------------------------
# nodes


def _resource_key(resource: str) -> tuple[int, int, str]:
    if resource in _RESOURCE_ORDER:
        return (0, _RESOURCE_ORDER.index(resource), resource)
    return (1, 0, resource)


def node_headroom(node: Obj, pods: Iterable[Obj]) -> dict[str, dict[str, int]]:
    """Per resource: allocatable, requested (by the pods bound to the node that are not finished,
    as the scheduler counts them) and free.  Resources with nothing allocatable or requested are
    left out (kubelets report ``hugepages-*: 0``)."""
    name = meta(node).get("name", "")
    allocatable_raw = (node.get("status") or {}).get("allocatable") or {}
    allocatable = {k: quantity.scheduler_units(k, v) for k, v in allocatable_raw.items()}
    used, count = fit.node_usage(name, pods)
    used = {**used, "pods": count}
    rows = {}
    for resource in sorted(set(allocatable) | set(used), key=_resource_key):
        have, want = allocatable.get(resource, 0), used.get(resource, 0)
        if have == 0 and want == 0:
            continue
        rows[resource] = {"allocatable": have, "requested": want, "free": have - want}
    return rows


# --------------------------------------------------------------------------------------------------
# explain


def explain_report(
    username: str,
    label_value: str,
    snapshot: ClusterState,
    *,
    server: str,
    pod: Obj,
    pod_source: str,
    decision: Decision,
    policy: Policy,
) -> JsonDict:
    """The JSON of ``nebari-colocate explain``: servers, claims, nodes, and the new server."""
    namespace = snapshot.namespace
    pvcs = snapshot.claims_of()
    namespace_pods = snapshot.namespace_pods()
    own = user_pods(namespace_pods, username, label_value)
    claims = user_claims(own, pvcs, username, label_value)
    for claim in pod_claims(pod):
        if claim not in claims:
            claims.append(claim)

    servers = [
        {
            "server": pod_server(p),
            "pod": meta(p).get("name", ""),
            "node": spec(p).get("nodeName"),
            "phase": _phase(p),
            "claims": pod_claims(p),
        }
        for p in own
    ]

    claim_rows = []
    for name in claims:
        pvc = pvcs.get(name)
        modes = claim_modes(pvc, policy)
        volume = spec(pvc).get("volumeName") if pvc else None
        attached = (
            sorted(snapshot.attached_nodes(namespace, name))
            if snapshot.volume_attachments is not None
            else None
        )
        claim_rows.append(
            {
                "claim": name,
                "exists": pvc is not None,
                "access_modes": modes,
                "exclusive": is_exclusive(modes),
                "storage_class": spec(pvc).get("storageClassName") if pvc else None,
                "volume": volume or None,
                "in_use_on": sorted(holder_nodes(namespace_pods, name)),
                "attached_on": attached,
            }
        )

    node_names = {s["node"] for s in servers if s["node"]}
    node_names.update(decision.split_nodes)
    if decision.node:
        node_names.add(decision.node)
    nodes = [_node_row(n, snapshot, policy) for n in sorted(node_names)]

    message = messages.user_message(
        decision, pod, username=username, server_name=server, user_label=label_value
    )
    pod_name = meta(pod).get("name")
    replaces = [p for p in own if meta(p).get("name") == pod_name]
    new_server = {
        **decision.as_json(message),
        "server": server,
        "pod": pod_source,
        "pod_name": pod_name,
        "replaces": pod_name if replaces else None,
        "notes": list(decision.notes),
        "headline": messages.user_headline(
            decision, pod, username=username, server_name=server, user_label=label_value
        ),
        "outcome": messages.outcome_lines(decision, message),
        "operator_line": messages.operator_line(decision, username=username, server_name=server),
    }
    return {
        "user": username,
        "namespace": namespace,
        "servers": servers,
        "claims": claim_rows,
        "pinned_node": decision.node,
        "pinned_by": decision.pinned_by,
        "split_nodes": list(decision.split_nodes),
        "nodes": nodes,
        "new_server": new_server,
        "notes": list(snapshot.notes),
    }


def _node_row(name: str, snapshot: ClusterState, policy: Policy) -> JsonDict:
    row: JsonDict = {
        "name": name,
        "readable": snapshot.nodes is not None,
        "found": None,
        "cordoned": None,
        "premium": None,
        "headroom": None,
        "pods_counted": None,
    }
    if snapshot.nodes is None:
        return row
    node = snapshot.nodes.get(name)
    row["found"] = node is not None
    if node is None:
        return row
    row["cordoned"] = bool(spec(node).get("unschedulable"))
    row["premium"] = fit.offered(node, policy.premium_resources)
    row["headroom"] = node_headroom(node, snapshot.pods_on_node(name))
    row["pods_counted"] = "all namespaces" if snapshot.node_pods_complete else "this namespace"
    return row


# --------------------------------------------------------------------------------------------------
# audit


def _claim_exclusive(
    name: str, pvcs: Mapping[str, Obj], pods: Iterable[Obj], policy: Policy
) -> bool:
    """Exclusive as ``decide`` judges it: read-only everywhere counts for ReadOnlyMany."""
    read_only = all(mounts_read_only(p, name) for p in pods if name in pod_claims(p))
    return is_exclusive(claim_modes(pvcs.get(name), policy), read_only)


def audit_report(
    snapshot: ClusterState, policy: Policy, *, deployment_mode_given: bool
) -> JsonDict:
    """The JSON of ``nebari-colocate audit``.

    ``policy.storage_access_mode`` is the deployment's mode; RWO claims left in a ReadWriteMany
    deployment are listed only when it was given (``deployment_mode_given``) and is RWX.
    """
    pods = snapshot.namespace_pods()
    pvcs = snapshot.claims_of()
    live = [p for p in pods if holds_volume(p)]
    all_claims = sorted({c for p in pods for c in pod_claims(p)} | set(pvcs))
    exclusive = {c for c in all_claims if _claim_exclusive(c, pvcs, pods, policy)}

    # Users pinned by exclusive claims: their bound pods that mount one.
    pinned: dict[str, JsonDict] = {}
    for pod in sorted(live, key=lambda p: (pod_user(p), *_server_key(p))):
        user = pod_user(pod)
        claims = [c for c in pod_claims(pod) if c in exclusive]
        if not user or not claims:
            continue
        entry = pinned.setdefault(user, {"user": user, "nodes": [], "servers": [], "claims": []})
        node = spec(pod)["nodeName"]
        if node not in entry["nodes"]:
            entry["nodes"].append(node)
        entry["servers"].append(
            {"server": pod_server(pod), "pod": meta(pod).get("name", ""), "node": node}
        )
        entry["claims"] = sorted(set(entry["claims"]) | set(claims))
    pinned_users = [pinned[u] for u in sorted(pinned)]
    for entry in pinned_users:
        entry["nodes"].sort()

    stranded = _stranded_pods(live, snapshot, policy)

    rwo_claims = None
    if deployment_mode_given and policy.storage_access_mode == RWX:
        rwo_claims = []
        for name in sorted(pvcs):
            pvc = pvcs[name]
            holders = [p for p in live if name in pod_claims(p)]
            users = {pod_user(pvc)} - {""}
            users.update(pod_user(p) for p in pods if name in pod_claims(p) and pod_user(p))
            if not users or name not in exclusive:
                continue
            rwo_claims.append(
                {
                    "claim": name,
                    "users": sorted(users),
                    "access_modes": claim_modes(pvc, policy),
                    "storage_class": spec(pvc).get("storageClassName"),
                    "in_use_by": sorted(meta(p).get("name", "") for p in holders),
                    "nodes": sorted({spec(p)["nodeName"] for p in holders}),
                }
            )

    splits = []
    for name in sorted(exclusive):
        by_node = holder_nodes(live, name)
        attached = (
            sorted(snapshot.attached_nodes(snapshot.namespace, name))
            if snapshot.volume_attachments is not None
            else []
        )
        nodes = sorted(set(by_node) | set(attached))
        if len(nodes) > 1:
            splits.append(
                {
                    "claim": name,
                    "nodes": nodes,
                    "pods": by_node,
                    "attached_on": attached if snapshot.volume_attachments is not None else None,
                }
            )

    return {
        "namespace": snapshot.namespace,
        "storage_access_mode": policy.storage_access_mode if deployment_mode_given else None,
        "premium_resources": list(policy.premium_resources),
        "node_access": snapshot.nodes is not None,
        "attachment_access": snapshot.volume_attachments is not None,
        "pinned_users": pinned_users,
        "stranded_pods": stranded,
        "rwo_claims": rwo_claims,
        "rwo_claims_next": messages.MIGRATE_PLAN_COMMAND if rwo_claims else None,
        "split_attachments": splits,
        "notes": list(snapshot.notes),
    }


def _stranded_pods(live: list[Obj], snapshot: ClusterState, policy: Policy) -> list[JsonDict]:
    """User pods on premium nodes that request no premium resource (``docs/failure-modes.md``,
    "2. GPU node kept alive").

    Without Node access a node counts as premium only when a pod of the namespace bound to it
    requests a premium resource (so a pod left alone there is not found).
    """
    resources = policy.premium_resources
    by_node: dict[str, list[Obj]] = {}
    for pod in live:
        by_node.setdefault(spec(pod)["nodeName"], []).append(pod)
    result = []
    for node_name in sorted(by_node):
        on_node = by_node[node_name]
        premium_pods = sorted(
            meta(p).get("name", "") for p in on_node if fit.requests_any(p, resources)
        )
        if snapshot.nodes is not None:
            node = snapshot.nodes.get(node_name)
            premium = fit.offered(node, resources) if node is not None else {}
            inferred = False
        else:
            premium = {r: 0 for r in resources if any(fit.requests_any(p, [r]) for p in on_node)}
            inferred = True
        if not premium:
            continue
        for pod in sorted(on_node, key=lambda p: (pod_user(p), *_server_key(p))):
            if not pod_user(pod) or fit.requests_any(pod, resources):
                continue
            result.append(
                {
                    "user": pod_user(pod),
                    "server": pod_server(pod),
                    "pod": meta(pod).get("name", ""),
                    "node": node_name,
                    "node_premium": premium,
                    "premium_pods_on_node": premium_pods,
                    "inferred": inferred,
                }
            )
    return result
