"""The operator's page as data: who is pinned where, the headroom of those nodes, the refusals
of the last 24 hours, the ways out and moves taken, the migrations in flight and the servers
keeping premium nodes alive.  (pure: plain dicts and the history's records in, one JSON-ready
dict out; no clock read, ``now`` is an argument)

The hub handler (:mod:`nebari_colocate.status_page`) gathers the input from the live view and
:mod:`nebari_colocate.history` and renders the result as HTML or JSON; the schema is in
``docs/reference.md``, "The operator's page".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from . import fit, quantity
from .history import History, RefusalRecord, WayOutRecord
from .objects import (
    GPU_RESOURCES,
    MIGRATE_CLAIM_KEY,
    MIGRATE_HOST_KEY,
    MIGRATE_STEP_KEY,
    MIGRATION_ANNOTATION,
    MIGRATION_OF_KEY,
    MIGRATION_SINCE_ANNOTATION,
    MIGRATION_STALLED_ANNOTATION,
    MOVING,
    ROX,
    RWO,
    JsonDict,
    Obj,
    annotations_of,
    holds_volume,
    is_exclusive,
    is_server,
    labels_of,
    meta,
    mounts_read_only,
    pod_claims,
    pod_server,
    pod_user,
    spec,
)
from .wayout import premium_rides

__all__ = ["SCHEMA_VERSION", "StatusInput", "build", "iso"]

#: the JSON's ``version``: fields are added, never renamed (``docs/reference.md``)
SCHEMA_VERSION = 1

#: the resources the headroom table shows first (others follow, sorted)
HEADROOM_FIRST = ("cpu", "memory", "pods")


@dataclass(frozen=True)
class NamespaceInput:
    """One namespace the hub's servers run in, as the view holds it."""

    name: str
    pods: Sequence[Obj]  # every pod of the namespace
    pvcs: Mapping[str, Obj]  # claim name -> claim


@dataclass(frozen=True)
class StatusInput:
    """What the page is built from: the view's objects, the history, the settings, the time."""

    namespaces: Sequence[NamespaceInput]
    #: node name -> Node; None when the Nodes cannot be read
    nodes: Mapping[str, Obj] | None
    #: node name -> every pod bound there (every namespace the view watches)
    node_pods: Mapping[str, Sequence[Obj]]
    #: PersistentVolumes (for a migration's step); None when they cannot be read
    pvs: Sequence[Obj] | None
    #: the migration's Leases of the hub's namespaces; None when they are not watched
    leases: Sequence[Obj] | None
    history: History
    now: float
    premium_resources: Sequence[str] = GPU_RESOURCES
    #: access modes assumed for a claim the view does not hold (``storage_access_mode``)
    unknown_claim_modes: Sequence[str] = (RWO,)
    #: why the view is not live now (empty when it is)
    problems: Sequence[str] = field(default_factory=tuple)
    #: the pods of other namespaces are not watched: a node's headroom counts only these
    partial_nodes: bool = False
    #: the hub's ``colocation_mode`` (``enforce`` or ``observe``), None when not known
    mode: str | None = None


def iso(seconds: float | None) -> str | None:
    """Seconds since the epoch as RFC 3339 UTC (``2026-12-05T01:02:03Z``), None stays None."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(text: object) -> float | None:
    """An RFC 3339 time the API wrote, as seconds since the epoch; None if unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------------
# who is pinned where


def _exclusive_claims(pod: Obj, pvcs: Mapping[str, Obj], unknown: Sequence[str]) -> list[str]:
    found = []
    for claim in pod_claims(pod):
        pvc = pvcs.get(claim)
        modes = (spec(pvc).get("accessModes") or []) if pvc is not None else unknown
        # whether it is mounted read-only matters for ReadOnlyMany only (read lazily: 10,000
        # pods are read per page view)
        if is_exclusive(modes, ROX in modes and mounts_read_only(pod, claim)):
            found.append(claim)
    return found


#: what ``fit.pod_requests`` reads of a pod's spec
_REQUEST_FIELDS = ("containers", "initContainers", "resources", "overhead")


class _Requests:
    """Pods' requests, computed once per shape per page.  The live view keeps equal
    sub-objects once (``slim.Shared``): pods of one profile share their containers list, so
    10,000 pods are a few shapes; a shape is known by the identity of those sub-objects (kept
    in the entry, so an id is never taken for another object's)."""

    def __init__(self) -> None:
        self._known: dict[tuple[int, ...], tuple[tuple[object, ...], Mapping[str, int]]] = {}

    def __call__(self, pod: Obj) -> Mapping[str, int]:
        pod_spec = spec(pod)
        parts = tuple(pod_spec.get(name) for name in _REQUEST_FIELDS)
        key = tuple(map(id, parts))
        entry = self._known.get(key)
        if entry is None or any(a is not b for a, b in zip(entry[0], parts, strict=True)):
            try:
                found: Mapping[str, int] = fit.pod_requests(pod)
            except ValueError:  # a quantity the API would not have taken: counts as nothing
                found = {}
            entry = self._known[key] = (parts, found)
        return entry[1]


def pinned(ns: NamespaceInput, unknown: Sequence[str]) -> list[JsonDict]:
    """Per user, per exclusive claim held: the node(s) it is held on and by which servers (a
    pod that is not a server, a backup Job's, is named by its pod name)."""
    rows: dict[tuple[str, str], JsonDict] = {}
    for pod in ns.pods:
        if not holds_volume(pod):
            continue
        for claim in _exclusive_claims(pod, ns.pvcs, unknown):
            pvc = ns.pvcs.get(claim)
            owner = pod_user(pvc) if pvc is not None and pod_user(pvc) else pod_user(pod)
            row = rows.setdefault(
                (owner, claim),
                {"namespace": ns.name, "user": owner, "claim": claim, "nodes": {}, "others": []},
            )
            node = str(spec(pod).get("nodeName"))
            if is_server(pod):
                row["nodes"].setdefault(node, []).append(pod_server(pod))
            else:
                row["others"].append(str(meta(pod).get("name", "")))
                row["nodes"].setdefault(node, [])
    found = []
    for _key, row in sorted(rows.items(), key=lambda kv: kv[0]):
        nodes = row.pop("nodes")
        row["node"] = next(iter(nodes)) if len(nodes) == 1 else None
        row["split"] = sorted(nodes) if len(nodes) > 1 else []
        row["servers"] = sorted({s for servers in nodes.values() for s in servers})
        row["others"] = sorted(row["others"])
        found.append(row)
    return found


# --------------------------------------------------------------------------------------------------
# the headroom of a node


def _resource_order(name: str) -> tuple[int, str]:
    return (HEADROOM_FIRST.index(name) if name in HEADROOM_FIRST else len(HEADROOM_FIRST), name)


def headroom(
    name: str,
    node: Obj | None,
    pods: Iterable[Obj],
    premium: Sequence[str],
    requests_of: Callable[[Obj], Mapping[str, int]] = fit.pod_requests,
) -> JsonDict:
    """What node ``name`` can still give a new pod, as kube-scheduler counts it: allocatable
    minus the requests of every unfinished pod bound there (scheduler units: cpu in millicores,
    memory in bytes, ``pods`` a count); ``known`` False when the Node cannot be read."""
    if node is None:
        return {"node": name, "known": False, "premium": None, "resources": []}
    allocatable_raw = (node.get("status") or {}).get("allocatable") or {}
    allocatable = {}
    for resource, value in allocatable_raw.items():
        try:
            allocatable[resource] = quantity.scheduler_units(resource, value)
        except quantity.QuantityError:
            continue
    used, count = fit.node_usage(name, pods, requests_of=requests_of)
    used = dict(used, pods=count)
    rows = []
    for resource in sorted(allocatable, key=_resource_order):
        have = allocatable[resource]
        if have <= 0 and resource not in HEADROOM_FIRST:
            continue
        taken = used.get(resource, 0)
        rows.append(
            {
                "resource": resource,
                "allocatable": have,
                "requested": taken,
                "free": have - taken,
                "free_text": fit.format_units(resource, have - taken),
                "allocatable_text": fit.format_units(resource, have),
            }
        )
    return {
        "node": name,
        "known": True,
        "premium": bool(fit.offered(node, premium)),
        "cordoned": bool(spec(node).get("unschedulable")),
        "resources": rows,
    }


# --------------------------------------------------------------------------------------------------
# what the history holds


def refusal_json(record: RefusalRecord) -> JsonDict:
    return {
        "at": iso(record.at),
        "user": record.user,
        "server": record.server,
        "reasons": list(record.reasons),
        "message": record.message,
        "node": record.node,
        "way_out": record.way_out,
        "source": record.source,
        "mode": record.mode,
    }


def way_out_json(record: WayOutRecord) -> JsonDict:
    return {
        "at": iso(record.at),
        "user": record.user,
        "kind": record.kind,
        "outcome": record.outcome,
        "server": record.server,
        "servers": list(record.servers),
        "mode": record.mode,
    }


def refusals(history: History, now: float) -> JsonDict:
    """The refusals of the last 24 hours, newest first, and their count by reason and mode."""
    recent = history.recent_refusals(now)
    by_reason: dict[str, dict[str, int]] = {}
    for record in recent:
        for reason in record.reasons or ("unknown",):
            counts = by_reason.setdefault(reason, {"enforce": 0, "observe": 0})
            counts[record.mode] = counts.get(record.mode, 0) + 1
    return {
        "window_hours": 24,
        "kept": history.refusals.maxlen,
        "by_reason": [
            {"reason": reason, **counts}
            for reason, counts in sorted(
                by_reason.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])
            )
        ],
        "items": [refusal_json(r) for r in recent],
    }


# --------------------------------------------------------------------------------------------------
# migrations in flight


def migrations(
    ns: NamespaceInput, pvs: Sequence[Obj] | None, leases: Sequence[Obj] | None
) -> list[JsonDict]:
    """The claims marked as being moved (``nebari-colocate migrate``): since when, whether the
    move stalled, its step (on the old volume, when the PersistentVolumes can be read) and who
    holds its lease (when the Leases are watched)."""
    steps: dict[str, str] = {}
    for pv in pvs or ():
        found = annotations_of(pv)
        if found.get(MIGRATE_CLAIM_KEY) and found.get(MIGRATE_STEP_KEY):
            steps[str(found[MIGRATE_CLAIM_KEY])] = str(found[MIGRATE_STEP_KEY])
    holders: dict[str, Obj] = {}
    for lease in leases or ():
        of = annotations_of(lease).get(MIGRATION_OF_KEY)
        if of and meta(lease).get("namespace") == ns.name:
            holders[str(of)] = lease
    rows = []
    for name, pvc in sorted(ns.pvcs.items()):
        found = annotations_of(pvc)
        if found.get(MIGRATION_ANNOTATION) != MOVING:
            continue
        held = holders.get(name)
        lease_spec = spec(held)
        rows.append(
            {
                "namespace": ns.name,
                "claim": name,
                "user": pod_user(pvc) or None,
                "since": found.get(MIGRATION_SINCE_ANNOTATION),
                "stalled": found.get(MIGRATION_STALLED_ANNOTATION),
                "step": steps.get(f"{ns.name}/{name}") if pvs is not None else None,
                "holder": lease_spec.get("holderIdentity"),
                "holder_host": annotations_of(held).get(MIGRATE_HOST_KEY),
                "held_since": lease_spec.get("acquireTime"),
                "renewed": lease_spec.get("renewTime"),
            }
        )
    return rows


# --------------------------------------------------------------------------------------------------
# servers keeping premium nodes alive


def rides(
    ns: NamespaceInput,
    nodes: Mapping[str, Obj] | None,
    history: History,
    now: float,
    premium: Sequence[str],
) -> list[JsonDict]:
    """Per user, the premium nodes their servers keep running with none of them needing it
    (:func:`nebari_colocate.wayout.premium_rides`), and since when: the moment the last pod
    that asked for a premium resource left the node, when this hub saw it; else ``since`` is
    None and ``at_least_since`` the start of this hub's records."""
    if nodes is None:
        return []
    premium_nodes = {name for name, node in nodes.items() if fit.offered(node, premium)}
    by_user: dict[str, list[Obj]] = {}
    riding: set[str] = set()
    for pod in ns.pods:
        if is_server(pod):
            user = pod_user(pod)
            by_user.setdefault(user, []).append(pod)
            if spec(pod).get("nodeName") in premium_nodes:
                riding.add(user)
    rows = []
    for user in sorted(riding):
        pods = by_user[user]
        label = labels_of(pods[0]).get("hub.jupyter.org/username")
        for ride in premium_rides(
            pods, nodes, username=user, label_value=label, premium_resources=premium
        ):
            since = history.premium_idle_since(ride.node)
            rows.append(
                {
                    "namespace": ns.name,
                    "user": user,
                    "node": ride.node,
                    "servers": list(ride.servers),
                    "since": iso(since),
                    "seconds": round(now - since, 1) if since is not None else None,
                    "at_least_since": iso(history.started) if since is None else None,
                }
            )
    return rows


# --------------------------------------------------------------------------------------------------
# the page


def build(facts: StatusInput) -> JsonDict:
    """The operator's page as one JSON-ready dict (``docs/reference.md``)."""
    requests_of = _Requests()
    pins: list[JsonDict] = []
    moving: list[JsonDict] = []
    riding: list[JsonDict] = []
    for ns in facts.namespaces:
        pins.extend(pinned(ns, facts.unknown_claim_modes))
        moving.extend(migrations(ns, facts.pvs, facts.leases))
        riding.extend(rides(ns, facts.nodes, facts.history, facts.now, facts.premium_resources))
    pinned_nodes = sorted(
        {p["node"] for p in pins if p["node"]} | {n for p in pins for n in p["split"]}
    )
    nodes = facts.nodes
    return {
        "version": SCHEMA_VERSION,
        "generated_at": iso(facts.now),
        "mode": facts.mode,
        "view": {
            "live": not facts.problems,
            "problems": list(facts.problems),
            "namespaces": [ns.name for ns in facts.namespaces],
            "nodes_readable": nodes is not None,
            "other_namespaces_counted": not facts.partial_nodes,
            "records_since": iso(facts.history.started),
        },
        "pinned": pins,
        "nodes": [
            headroom(
                name,
                nodes.get(name) if nodes is not None else None,
                facts.node_pods.get(name, ()),
                facts.premium_resources,
                requests_of,
            )
            for name in pinned_nodes
        ],
        "refusals": refusals(facts.history, facts.now),
        "ways_out": {
            "kept": facts.history.ways_out.maxlen,
            "items": [way_out_json(r) for r in facts.history.recent_ways_out()],
        },
        "migrations": moving,
        "premium_rides": riding,
    }
