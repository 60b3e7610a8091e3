"""decide(pod, state, policy) -> Decision: the decision contract.  (pure)

Read top to bottom in the order of the contract (``docs/decisions.md``, "The contract, in
order"): a home being moved, claims, holders, pinned node, not pinned, pinned (fit or infer),
premium guard.  The safe side (step 7) is :func:`safe_side`, used by the spawner when the state
could not be gathered.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from . import fit, preemption, setmove
from .config import (
    DEFAULT_PREMIUM_NODE_POLICY,
    DEFAULT_PREMIUM_RESOURCES,
    POLICY_REFUSE,
    POLICY_WARN,
)
from .objects import (
    MIGRATION_ANNOTATION,
    MIGRATION_SINCE_ANNOTATION,
    MIGRATION_STALLED_ANNOTATION,
    MOVING,
    RWO,
    RWOP,
    USERNAME_ANNOTATION,
    USERNAME_LABEL,
    JsonDict,
    Obj,
    annotations_of,
    has_owner,
    holders,
    holds_volume,
    is_exclusive,
    is_server,
    is_terminal,
    known_shared,
    labels_of,
    meta,
    mounts_read_only,
    owned_by,
    pod_claims,
    spec,
)
from .state import ClusterState
from .wayout import RELEASE, ROOM, UNRESOLVABLE, WayOut, way_out

SKIP, COLOCATE, REFUSE = "skip", "colocate", "refuse"

#: what pins a decision to its node (``Decision.pinned_by``)
PINNED_BY_HOLDERS, PINNED_BY_ATTACHMENT = "holders", "attachment"

# The reason codes of ``decide``'s own steps (the fit check's are in ``fit`` beside each filter).
#: 0. the claim's data is being moved to other storage (``nebari-colocate migrate``)
HOME_BEING_MOVED = "home-being-moved"
#: 2. a ReadWriteOncePod claim is in use by another pod
CLAIM_IN_USE = "claim-in-use"
#: 3. an exclusive claim is in use, or attached, on more than one node
SPLIT_ATTACHMENT = "split-attachment"
#: 5. the pinned node does not exist any more (its holders or attachment outlived it)
NODE_NOT_FOUND = "node-not-found"
#: 6. a pod that requests no premium resource, pinned to a premium node
PREMIUM_NODE = "premium-node"

#: every reason code a Decision may carry (the ``simulate --json`` contract: extend, never
#: rename); ``insufficient:<resource>`` stands for one code per resource
REASON_CODES = (
    *fit.FIT_REASONS,
    CLAIM_IN_USE,
    SPLIT_ATTACHMENT,
    PREMIUM_NODE,
    NODE_NOT_FOUND,
    HOME_BEING_MOVED,
)

#: whether stopping the user's own servers that hold the volume can let the refused server
#: start, declared beside every reason code as kube-scheduler's filters return
#: ``Unschedulable`` or ``UnschedulableAndUnresolvable`` beside their reason (``wayout``:
#: RELEASE, stop them all and the server may go to any node; ROOM, stopping some on the pinned
#: node may free enough; UNRESOLVABLE, nothing the user stops helps). The way out of a decision
#: and of an event verdict read it; ``fit.INSUFFICIENT_ANY`` stands for every resource.
STOPPING_HELPS: Mapping[str, str] = {
    fit.NODE_UNSCHEDULABLE: RELEASE,
    fit.NODE_SELECTOR: RELEASE,
    fit.TAINT: RELEASE,
    fit.INSUFFICIENT_ANY: ROOM,
    fit.TOO_MANY_PODS: ROOM,
    # the volume's own node affinity excludes the node its holders use: no stop changes that
    fit.VOLUME_NODE_AFFINITY: UNRESOLVABLE,
    CLAIM_IN_USE: RELEASE,
    SPLIT_ATTACHMENT: UNRESOLVABLE,  # already broken: an administrator must look
    PREMIUM_NODE: RELEASE,
    NODE_NOT_FOUND: UNRESOLVABLE,  # the volume must be released from a node that is gone
    HOME_BEING_MOVED: UNRESOLVABLE,  # the move ends it, not a stop
}


def stopping_helps(code: str | None) -> str | None:
    """What :data:`STOPPING_HELPS` declares for ``code`` (any ``insufficient:<resource>``);
    None for a code it does not know (a scheduler fragment's cause that is not a reason code)."""
    if code is None:
        return None
    if fit.insufficient_resource(code) is not None:
        return STOPPING_HELPS[fit.INSUFFICIENT_ANY]
    return STOPPING_HELPS.get(code)


def is_reason_code(code: str) -> bool:
    """``code`` is one of :data:`REASON_CODES` (any ``insufficient:<resource>``), or the
    warning ``preempts:<n>`` (:mod:`nebari_colocate.preemption`)."""
    return (
        code in REASON_CODES
        or bool(fit.insufficient_resource(code))
        or preemption.preempts_count(code) is not None
    )


@dataclass(frozen=True)
class Policy:
    """The configuration ``decide`` needs (the spawner builds it from its traits)."""

    storage_access_mode: str = RWO
    premium_resources: tuple[str, ...] = DEFAULT_PREMIUM_RESOURCES
    premium_node_policy: str = DEFAULT_PREMIUM_NODE_POLICY  # allow | warn | refuse


@dataclass
class Decision:
    """What to do with a new pod, and the facts a person needs to understand why."""

    verdict: str
    node: str | None = None
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    holder_pods: list[Obj] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)
    #: the nodes a split claim is used on, for split-attachment
    split_nodes: list[str] = field(default_factory=list)
    #: claims behind claim-in-use
    busy_claims: list[str] = field(default_factory=list)
    pinned_by: str | None = None  # "holders" | "attachment" | None
    fit: fit.FitResult | None = None
    #: False when the node could not be read and the fit was inferred from the holders
    verified: bool = True
    #: why the decision took the safe side or is unverified (operator log)
    notes: list[str] = field(default_factory=list)
    #: for home-being-moved: when the move started (ISO 8601, UTC), if recorded
    moving_since: str | None = None
    #: for home-being-moved: the move gave up part-way and waits for an administrator (when)
    moving_stalled: str | None = None
    #: for a refusal: the user's own servers to stop so that this one can start, if any
    way_out: WayOut | None = None
    #: what kube-scheduler would evict on the pinned node to make room (warning
    #: ``preempts:<n>``), or, refused, what it would evict that holds the claim
    preemption: preemption.Preemption | None = None
    #: the safe side on claims whose access modes are not known: co-location is preferred (the
    #: scheduler's soft pod affinity), never required, and no node is pinned
    preferred: bool = False

    @property
    def holders(self) -> list[str]:
        return sorted({meta(p).get("name", "") for p in self.holder_pods})

    def as_json(self, message: str = "") -> JsonDict:
        """The ``simulate --json`` object (``docs/cli.md``: extend, never rename); its reasons
        and warnings are codes of :data:`REASON_CODES`, or ValueError."""
        unknown = [c for c in (*self.reasons, *self.warnings) if not is_reason_code(c)]
        if unknown:
            raise ValueError(f"reason codes {unknown} are not in REASON_CODES")
        return {
            "verdict": self.verdict,
            "node": self.node,
            "reasons": sorted(self.reasons),
            "warnings": sorted(self.warnings),
            "holders": self.holders,
            "message": message,
            "verified": self.verified,
            "pinned_by": self.pinned_by,
            "claims": sorted(self.claims),
            "way_out": self.way_out.as_json() if self.way_out is not None else None,
            "preemption": self.preemption.as_json() if self.preemption is not None else None,
        }


# --------------------------------------------------------------------------------------------------
# helpers on plain dicts


def claim_modes(pvc: Obj | None, policy: Policy) -> list[str]:
    """Access modes of a claim; one not (yet) in the state has the configured mode."""
    if pvc is None:
        return [policy.storage_access_mode]
    return list(spec(pvc).get("accessModes") or [])


def _moving(pvc: Obj | None) -> bool:
    return (meta(pvc or {}).get("annotations") or {}).get(MIGRATION_ANNOTATION) == MOVING


# --------------------------------------------------------------------------------------------------
# the contract


def _judge_pinned_node(
    pod: Obj, decision: Decision, state: ClusterState, policy: Policy, all_claims: list[str]
) -> bool:
    """Step 5 of :func:`decide` on ``decision.node``: the fit as the scheduler would judge it
    (reasons, warnings and notes added to ``decision``), or what can be told without the Node;
    returns whether the node is premium (step 6)."""
    namespace = meta(pod).get("namespace") or state.namespace
    own_name = meta(pod).get("name")
    holding = decision.holder_pods
    node_name = str(decision.node)
    bound_pvs = [pv for pv in (state.bound_pv(namespace, c) for c in all_claims) if pv]
    node = state.nodes.get(node_name) if state.nodes is not None else None
    if node is not None:
        own_key = f"{namespace}/{own_name}"
        admitted = preemption.admitted_priority(pod, state.priority_classes)
        usage, _ = preemption.node_usage(pod, state, node_name, admitted.priority, own_key)
        decision.fit = fit.check_fit(pod, node, (), bound_pvs, usage=usage)
        # 5b. Preemption: kube-scheduler evicts pods of lower priority when that makes room;
        #     never the user's own servers that hold the claim without their consent.
        if not decision.fit.fits:
            decision.preemption = preemption.on_pinned_node(
                pod,
                node,
                state,
                decision.fit,
                admitted=admitted,
                bound_pvs=bound_pvs,
                exclude=own_key,
                holders=holding,
            )
        taken = decision.preemption
        if taken is None or taken.holders:
            decision.reasons.extend(decision.fit.reasons)
        else:
            decision.warnings.append(preemption.preempts(len(taken.victims)))
        if taken is not None:
            decision.notes.append(taken.note)
        premium = bool(fit.offered(node, policy.premium_resources))
        if not state.node_pods_complete:
            decision.notes.append(f"pods of other namespaces on {node_name} were not readable")
    elif state.nodes is not None:
        # The node is gone (a reclaimed spot node) while a pod or an attachment still holds the
        # volume there: no capacity question, an operator must look.
        decision.verified = False
        decision.notes.append(f"node {node_name} not found: it was deleted")
        decision.reasons.append(NODE_NOT_FOUND)
        premium = False
    else:
        decision.verified = False
        decision.notes.append(
            f"node {node_name} not readable: fit inferred from the holders' specs"
        )
        decision.reasons.extend(_inferred_misfit(pod, node_name, holding, bound_pvs))
        premium = any(fit.requests_any(h, policy.premium_resources) for h in holding)
    return premium


def decide(pod: Obj, state: ClusterState, policy: Policy) -> Decision:
    """Decide skip / colocate / refuse for ``pod`` given ``state`` (``docs/decisions.md``)."""
    namespace = meta(pod).get("namespace") or state.namespace
    own_name = meta(pod).get("name")

    all_claims = pod_claims(pod)

    # 0. A home being moved to other storage (nebari-colocate migrate): nothing starts on it.
    moving = [c for c in all_claims if _moving(state.pvc(namespace, c))]
    if moving:
        marks = meta(state.pvc(namespace, moving[0])).get("annotations") or {}
        return Decision(
            REFUSE,
            reasons=[HOME_BEING_MOVED],
            claims=moving,
            moving_since=marks.get(MIGRATION_SINCE_ANNOTATION),
            moving_stalled=marks.get(MIGRATION_STALLED_ANNOTATION),
        )

    # 1. Claims: only exclusive claims constrain placement.
    modes = {c: claim_modes(state.pvc(namespace, c), policy) for c in all_claims}
    exclusive = [
        c
        for c in all_claims
        if is_exclusive(modes[c], _read_only_everywhere(pod, c, state, namespace, own_name))
    ]
    if not exclusive:
        return Decision(SKIP)

    # 2. Holders: pods of the namespace that mount one of those claims and sit on a node, and
    #    pods that hold the same disk through another PV (same CSI driver and handle).
    candidates = {id(p): p for c in exclusive for p in state.pods_mounting(namespace, c)}
    holding = holders(candidates.values(), exclusive, exclude=own_name)
    sharing = {
        c: [p for p in state.pods_sharing_disk(namespace, c) if holds_volume(p)] for c in exclusive
    }
    for pod_sharing in {id(p): p for c in exclusive for p in sharing[c]}.values():
        if all(pod_sharing is not h for h in holding):
            holding.append(pod_sharing)
    decision = Decision(COLOCATE, holder_pods=holding, claims=exclusive)
    busy = sorted(
        c
        for c in exclusive
        if RWOP in modes[c] and (sharing[c] or any(c in pod_claims(h) for h in holding))
    )
    if busy:
        decision.verdict, decision.busy_claims = REFUSE, busy
        decision.reasons.append(CLAIM_IN_USE)
        busy_holders = [h for h in holding if set(busy) & set(pod_claims(h))]
        decision.way_out = _way_out(pod, decision, busy_holders, state, namespace, pinned=True)
        return decision

    # 3. Pinned node: the holders' node, else a volume still attached somewhere.
    nodes = sorted({spec(h)["nodeName"] for h in holding})
    if nodes:
        decision.pinned_by = PINNED_BY_HOLDERS
    else:
        nodes = sorted(set().union(*(state.attached_nodes(namespace, c) for c in exclusive)))
        decision.pinned_by = PINNED_BY_ATTACHMENT if nodes else None
    if len(nodes) > 1:
        decision.verdict, decision.split_nodes = REFUSE, nodes
        decision.reasons.append(SPLIT_ATTACHMENT)
        return decision

    # 4. Not pinned: the pod affinity alone; the scheduler's first-pod rule places it anywhere.
    if not nodes:
        return decision

    # 5. Pinned to node N: would the scheduler admit the pod there? (5b: by preemption?)
    decision.node = nodes[0]
    premium = _judge_pinned_node(pod, decision, state, policy, all_claims)

    # 6. Premium guard: keep pods that need no GPU off a GPU node.
    if premium and not fit.requests_any(pod, policy.premium_resources):
        if policy.premium_node_policy == POLICY_REFUSE:
            decision.reasons.append(PREMIUM_NODE)
        elif policy.premium_node_policy == POLICY_WARN:
            decision.warnings.append(PREMIUM_NODE)

    if decision.reasons:
        decision.verdict = REFUSE
        decision.way_out = _way_out(pod, decision, holding, state, namespace, policy=policy)
    return decision


def _way_out(
    pod: Obj,
    decision: Decision,
    holding: list[Obj],
    state: ClusterState,
    namespace: str,
    *,
    pinned: bool = False,
    policy: Policy | None = None,
) -> WayOut | None:
    """Step 8 (``docs/decisions.md``, "The way out"): the user's own servers to stop; where
    the pinned node lacks room only, also the move of the whole set (``setmove``)."""
    found = way_out(
        pod,
        remedies=[stopping_helps(code) for code in decision.reasons],
        holder_pods=holding,
        node_name=decision.node,
        pinned_by_holders=pinned or decision.pinned_by == PINNED_BY_HOLDERS,
        state=state,
        namespace=namespace,
        label_value=(meta(pod).get("labels") or {}).get(USERNAME_LABEL),
    )
    if found is not None and policy is not None:
        found = with_move(pod, decision, found, state, policy)
    return found


def move_may_help(decision: Decision) -> bool:
    """The refusal is for lack of room on the pinned node only (every reason :data:`ROOM`):
    the move of the whole set may help (``setmove``)."""
    return {stopping_helps(code) for code in decision.reasons} == {ROOM}


def with_move(
    pod: Obj, decision: Decision, found: WayOut, state: ClusterState, policy: Policy
) -> WayOut:
    """``found`` (the refusal's way out) with the move of the whole set (``setmove``) when the
    pinned node lacks room only (every reason :data:`ROOM`) and a node holds the set, or an
    autoscaler can add one; ``state`` must hold the nodes to choose from and their pods."""
    if not move_may_help(decision):
        return found
    move = setmove.whole_set_move(
        pod,
        decision.holder_pods,
        state,
        node_name=decision.node,
        premium_resources=policy.premium_resources,
        label_value=(meta(pod).get("labels") or {}).get(USERNAME_LABEL),
    )
    return WayOut(found.stop, found.start, move) if move is not None else found


def _read_only_everywhere(
    pod: Obj, claim: str, state: ClusterState, namespace: str, own_name: str | None
) -> bool:
    """The new pod and every other pod of the namespace that uses ``claim`` mount it read-only."""
    if not mounts_read_only(pod, claim):
        return False
    return all(
        mounts_read_only(p, claim)
        for p in state.pods_mounting(namespace, claim)
        if meta(p).get("name") != own_name and not is_terminal(p)
    )


# --------------------------------------------------------------------------------------------------
# without Node access: what the holders' own specs prove about the node


def _known_labels(holders: Iterable[Obj]) -> dict[str, str]:
    """A pod bound to a node with ``nodeSelector {k: v}`` proves the node has label k=v."""
    known: dict[str, str] = {}
    for holder in holders:
        known.update(spec(holder).get("nodeSelector") or {})
    return known


def _requirement_known(req: Obj, labels: Mapping[str, str]) -> bool | None:
    """Three-valued: True / False when the known labels decide it, None when they cannot."""
    key = req.get("key", "")
    if key not in labels:
        return None
    return fit.label_matches(req, labels)


def _term_known(term: Obj, labels: Mapping[str, str], node_name: str) -> bool | None:
    """``node_name`` empty: a PV's term, whose matchFields VolumeBinding never checks."""
    expressions = term.get("matchExpressions") or []
    field_reqs = term.get("matchFields") or []
    if not expressions and not field_reqs:
        return False
    results = [_requirement_known(r, labels) for r in expressions]
    if node_name:
        results += [fit.field_matches(r, node_name) for r in field_reqs]
    if False in results:
        return False
    return None if None in results else True


def _inferred_misfit(
    pod: Obj, node_name: str, holders: list[Obj], bound_pvs: list[Obj]
) -> list[str]:
    """Reasons that are certain without reading the Node (labels proven by holders)."""
    labels = _known_labels(holders)
    reasons = []
    selector = spec(pod).get("nodeSelector") or {}
    mismatch = any(k in labels and labels[k] != v for k, v in selector.items())
    required = fit.required_node_affinity(pod)
    if required is not None:
        terms = required.get("nodeSelectorTerms") or []
        if all(_term_known(t, labels, node_name) is False for t in terms):
            mismatch = True
    if mismatch:
        reasons.append(fit.NODE_SELECTOR)
    labels_only = {"metadata": {"labels": labels}}
    for pv in bound_pvs:
        required_pv = (spec(pv).get("nodeAffinity") or {}).get("required")
        if required_pv is None:
            continue
        terms = required_pv.get("nodeSelectorTerms") or []
        if all(_term_known(t, labels, "") is False for t in terms) and not fit.selector_matches(
            required_pv, labels_only
        ):
            reasons.append(fit.VOLUME_NODE_AFFINITY)
            break
    return reasons


# --------------------------------------------------------------------------------------------------
# 7. the safe side


def safe_side(
    pod: Obj,
    known_pods: Iterable[Obj],
    why: str,
    *,
    namespace: str | None = None,
    known_modes: Mapping[str, Sequence[str]] | None = None,
    exclusive_by_config: Collection[str] | None = None,
) -> Decision:
    """When the state could not be gathered: a required co-location only where the storage is
    known to need it; pinned to a holder's node if one is known.

    ``known_pods`` is whatever is at hand (the live view's last known pods, the pod reflector's
    cache, possibly empty).  ``namespace`` is the hub's: KubeSpawner's manifest has no
    ``metadata.namespace``, so the manifest's own field cannot be relied on.  ``known_modes``
    (claim -> access modes) is what earlier reads saw: modes never change, so a claim known to
    be shared (ReadWriteMany; ReadOnlyMany mounted read-only by every known pod) constrains
    nothing, and a claim known to be exclusive is co-located and pinned as its holders say.

    A claim whose modes are not known (the hub's first check, the API not answering):

    - held by servers of other users: taken to be shared (a per-user home is not mounted by
      other users' servers; a claim every user mounts, as Nebari's, is): nothing required;
    - one the configuration says is exclusive (``exclusive_by_config``: the claim this hub
      creates itself with a ReadWriteOnce ``storage_access_mode``): taken to be exclusive;
    - otherwise: co-location only preferred (:attr:`Decision.preferred`): a required term the
      storage may not need would keep a GPU lab off the GPU node for good, while a wrong guess
      the other way ends in a Multi-Attach event the event check reports at once.

    ``exclusive_by_config`` None (no configuration at hand) takes every such claim to be
    exclusive.  ``Decision.notes`` say, claim by claim, what was assumed (the hub log).
    """
    namespace = namespace or meta(pod).get("namespace")
    own_name = meta(pod).get("name")
    claims = pod_claims(pod)
    modes = dict(known_modes or {})
    in_namespace = [
        p
        for p in known_pods
        if namespace is None or (meta(p).get("namespace") or namespace) == namespace
    ]
    shared = [c for c in claims if known_shared(modes.get(c), pod, c, in_namespace)]
    notes = [why]
    if claims and len(shared) == len(claims):
        notes.append(f"claims known to be shared ({', '.join(shared)}): nothing to co-locate")
        return Decision(SKIP, verified=False, notes=notes)
    username = annotations_of(pod).get(USERNAME_ANNOTATION)
    label = labels_of(pod).get(USERNAME_LABEL)
    pinning: list[Obj] = []
    required: list[str] = []
    preferred: list[str] = []
    for claim in claims:
        if claim in shared:
            continue
        held = holders(in_namespace, [claim], exclude=own_name)
        if claim in modes:
            required.append(claim)
            pinning.extend(held)
            continue
        others = [
            h
            for h in held
            if is_server(h) and has_owner(h) and not (username and owned_by(h, username, label))
        ]
        if others:
            notes.append(
                f"access modes of claim {claim} unknown; {len(others)} server(s) of other users "
                "hold it, so it is taken to be shared: nothing required"
            )
        elif exclusive_by_config is None or claim in exclusive_by_config:
            required.append(claim)
            pinning.extend(held)
            notes.append(
                f"access modes of claim {claim} unknown: taken to be exclusive"
                + ("" if exclusive_by_config is None else " (storage_access_mode)")
            )
        else:
            preferred.append(claim)
            notes.append(
                f"access modes of claim {claim} unknown and not a claim this hub creates "
                "ReadWriteOnce: co-location with this user's servers preferred, not required"
            )
    if not required and not preferred:
        if claims:
            notes.append("no claim known or taken to be exclusive: nothing to co-locate")
        return Decision(SKIP, verified=False, notes=notes)
    if not required:
        return Decision(COLOCATE, claims=preferred, verified=False, notes=notes, preferred=True)
    holding = list({id(p): p for p in pinning}.values())
    nodes = sorted({spec(h)["nodeName"] for h in holding})
    decision = Decision(COLOCATE, holder_pods=holding, claims=required, verified=False, notes=notes)
    if len(nodes) == 1:
        decision.node, decision.pinned_by = nodes[0], PINNED_BY_HOLDERS
    return decision
