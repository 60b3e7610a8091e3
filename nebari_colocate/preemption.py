"""Preemption on the pinned node, as kube-scheduler's DefaultPreemption does.  (pure, no I/O)

A pod that does not fit its pinned node by resources or pod count is still bound there when
evicting pods of strictly lower priority makes room: zero-to-jupyterhub's user placeholders
(priority -10) hold room this way for real users (priority 0).  This module answers what the
scheduler would do on that one node (``docs/decisions.md``, "Priority and preemption"), read
from kube-scheduler v1.37's ``defaultpreemption`` and ``framework/preemption``:

- the pod's priority is ``spec.priority`` as admission set it, else what the Priority admission
  plugin would set from its ``priorityClassName`` (:func:`admitted_priority`);
- ``preemptionPolicy: Never`` preempts nothing;
- pods nominated to the node (``status.nominatedNodeName``, not yet bound) with a priority at
  least the pod's count as using it, in the plain fit as in preemption (the scheduler's
  ``RunFilterPluginsWithNominatedPods``);
- only resource and pod-count misfits can be cured, and not a request larger than the node's
  whole allocatable (``Unresolvable`` in NodeResourcesFit); a taint, a selector, a cordon or a
  volume's node affinity cannot (:func:`may_help`);
- ``selectVictimsOnNode``: remove every pod of lower priority, check the fit, then give back as
  many as still fit, most important first (higher priority, then the one started earlier),
  those whose eviction would violate a PodDisruptionBudget first (violations are minimised,
  not forbidden).

What the scheduler does not know and the decision must: the victims may include a pod that holds
the claim (the user's own server); :class:`Preemption` says so and ``decide`` then refuses
rather than let the scheduler stop it unasked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from . import fit
from .objects import JsonDict, Obj, is_terminal, labels_of, meta, spec
from .state import ClusterState

#: ``spec.preemptionPolicy``: the default, and the one that preempts nothing
PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER = "PreemptLowerPriority", "Never"
#: the classes kube-apiserver creates itself (admission knows them even if a dump lacks them)
SYSTEM_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}
#: the scheduler's name for a pod that names none
DEFAULT_SCHEDULER = "default-scheduler"

#: the warning code of a colocate that evicts ``<n>`` pods of lower priority on the pinned node
PREEMPTS = "preempts:"


def preempts(count: int) -> str:
    """The warning code of a colocate that evicts ``count`` pods (``preempts:2``)."""
    return f"{PREEMPTS}{count}"


def preempts_count(code: str) -> int | None:
    """The count of a ``preempts:<n>`` code, else None."""
    if not code.startswith(PREEMPTS):
        return None
    count = code[len(PREEMPTS) :]
    return int(count) if count.isdigit() else None


# --------------------------------------------------------------------------------------------------
# priorities


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def pod_priority(pod: Obj) -> int:
    """The priority the scheduler uses (component-helpers' ``PodPriority``): ``spec.priority``,
    0 when absent."""
    return _int(spec(pod).get("priority")) or 0


def global_default(classes: Mapping[str, Obj]) -> Obj | None:
    """The class admission gives a pod that names none: the ``globalDefault`` one (of several,
    after a race, the lowest value, as the admission plugin picks)."""
    defaults = [c for c in classes.values() if isinstance(c, Mapping) and c.get("globalDefault")]
    return min(defaults, key=lambda c: _int(c.get("value")) or 0, default=None)


@dataclass(frozen=True)
class Admitted:
    """A pod's priority and preemption policy as admission sets them, and the class it names
    that the known classes lack (admission would refuse the pod; a dump may just omit it)."""

    priority: int
    policy: str
    missing_class: str | None = None


def admitted_priority(pod: Obj, classes: Mapping[str, Obj] | None) -> Admitted:
    """``spec.priority`` and ``spec.preemptionPolicy`` where admission set them (the dry run);
    else from the class the pod names, or the global default class, as the Priority admission
    plugin sets them; else priority 0.  ``classes`` None: PriorityClasses not readable."""
    pod_spec = spec(pod)
    name = pod_spec.get("priorityClassName")
    name = name if isinstance(name, str) else ""
    known = classes if classes is not None else {}
    klass: Obj | None = known.get(name) if name else global_default(known)
    klass = klass if isinstance(klass, Mapping) else None
    missing = name if classes is not None and name and klass is None else None
    if missing in SYSTEM_CLASSES:
        missing = None
    value = _int(pod_spec.get("priority"))
    if value is None:
        value = _int((klass or {}).get("value"))
    if value is None:
        value = SYSTEM_CLASSES.get(name, 0)
    policy = pod_spec.get("preemptionPolicy") or (klass or {}).get("preemptionPolicy")
    return Admitted(value, str(policy or PREEMPT_LOWER_PRIORITY), missing)


# --------------------------------------------------------------------------------------------------
# nominated pods


def scheduler_of(pod: Obj) -> str:
    return spec(pod).get("schedulerName") or DEFAULT_SCHEDULER


def nominated_node(pod: Obj) -> str | None:
    """The node a pod waits for (preemption nominated it there), while it is not bound."""
    if spec(pod).get("nodeName") or is_terminal(pod):
        return None
    node = (pod.get("status") or {}).get("nominatedNodeName")
    return node if isinstance(node, str) and node else None


def counted_nominated(pod: Obj, priority: int, candidates: Iterable[Obj]) -> list[Obj]:
    """The pods nominated to a node that the scheduler counts there when it fits ``pod``: those
    of priority >= ``priority`` (``pod`` must not take room freed for them), other than ``pod``,
    that the same scheduler queues (a scheduler knows only its own nominations)."""
    own = (meta(pod).get("namespace"), meta(pod).get("name"))
    scheduler = scheduler_of(pod)
    return [
        p
        for p in candidates
        if (meta(p).get("namespace"), meta(p).get("name")) != own
        and nominated_node(p)
        and pod_priority(p) >= priority
        and scheduler_of(p) == scheduler
    ]


def with_pods(
    usage: tuple[Mapping[str, int], int],
    pods: Iterable[Obj],
    requests_of: Callable[[Obj], Mapping[str, int]] = fit.pod_requests,
) -> tuple[dict[str, int], int]:
    """A node's (requests, pod count) with ``pods`` added."""
    used, count = dict(usage[0]), usage[1]
    for pod in pods:
        for name, value in requests_of(pod).items():
            used[name] = used.get(name, 0) + value
        count += 1
    return used, count


# --------------------------------------------------------------------------------------------------
# PodDisruptionBudgets


def _selector_matches(selector: object, labels: Mapping[str, str]) -> bool:
    """A LabelSelector; an empty, null or invalid one matches nothing (as for a PDB)."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        return False
    if not match_labels and not expressions:
        return False
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for expression in expressions:
        if not isinstance(expression, Mapping):
            return False
        key, operator = str(expression.get("key")), expression.get("operator")
        values = expression.get("values") or []
        if operator == "In":
            ok = key in labels and labels[key] in values
        elif operator == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif operator == "Exists":
            ok = key in labels
        elif operator == "DoesNotExist":
            ok = key not in labels
        else:
            return False
        if not ok:
            return False
    return True


def split_by_pdb(
    victims: list[Obj], pdbs: Iterable[Obj]
) -> tuple[list[tuple[Obj, int]], list[Obj]]:
    """(violating, non-violating) victims, in the given order, as the scheduler's
    ``FilterVictimsWithPDBViolation``: each PDB of the victim's namespace whose selector matches
    its labels has its ``disruptionsAllowed`` spent, victim by victim; a victim is violating
    when one runs below zero (a pod already in the PDB's ``disruptedPods`` spends nothing)."""
    budgets = [p for p in pdbs if isinstance(p, Mapping)]
    allowed = [_int((b.get("status") or {}).get("disruptionsAllowed")) or 0 for b in budgets]
    violating: list[tuple[Obj, int]] = []
    fine: list[Obj] = []
    for victim in victims:
        labels = labels_of(victim)
        hit = False
        if labels:
            for i, budget in enumerate(budgets):
                if meta(budget).get("namespace") != meta(victim).get("namespace"):
                    continue
                if not _selector_matches(spec(budget).get("selector"), labels):
                    continue
                disrupted = (budget.get("status") or {}).get("disruptedPods") or {}
                if isinstance(disrupted, Mapping) and meta(victim).get("name") in disrupted:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    hit = True
                    break
        if hit:
            violating.append((victim, 1))
        else:
            fine.append(victim)
    return violating, fine


# --------------------------------------------------------------------------------------------------
# victims on the pinned node


#: the fit check's codes preemption may cure (NodeResourcesFit's); any other misfit stays
CURABLE = (fit.TOO_MANY_PODS,)


def may_help(result: fit.FitResult) -> bool:
    """Whether evicting pods could make the pod fit: every reason is NodeResourcesFit's, and no
    request exceeds the node's whole allocatable (the scheduler's ``Unresolvable``)."""
    if result.fits:
        return False
    for code in result.reasons:
        if code not in CURABLE and fit.insufficient_resource(code) is None:
            return False
    return all(s.requested <= s.allocatable for s in result.shortfalls)


def _importance(pod: Obj) -> tuple[int, bool, str]:
    """Sort key, most important first: higher priority, then started earlier (a pod not started
    yet counts as started now, the latest)."""
    started = (pod.get("status") or {}).get("startTime")
    started = started if isinstance(started, str) else ""
    return (-pod_priority(pod), not started, started)


def _key(pod: Obj) -> str:
    return f"{meta(pod).get('namespace')}/{meta(pod).get('name')}"


@dataclass
class Preemption:
    """What the scheduler would evict on the pinned node so that the pod fits there."""

    node: str
    #: the pods evicted, most important first
    victims: list[Obj] = field(default_factory=list)
    #: victims whose eviction violates a PodDisruptionBudget (the scheduler allows it)
    pdb_violations: int = 0
    #: victims that hold the pod's claim (the user's own servers): then no colocate
    holders: list[Obj] = field(default_factory=list)
    #: pods nominated to the node that were counted there
    nominated: list[Obj] = field(default_factory=list)

    @property
    def victim_keys(self) -> list[str]:
        return sorted(_key(v) for v in self.victims)

    @property
    def note(self) -> str:
        """The fact for the hub log: what is preempted, or which holders it would take."""
        if self.holders:
            names = ", ".join(sorted(meta(h).get("name", "") for h in self.holders))
            return f"fits on {self.node} only by preempting its holders: {names}"
        return f"preempts on {self.node}: {', '.join(self.victim_keys)}"

    def as_json(self) -> JsonDict:
        return {
            "node": self.node,
            "victims": self.victim_keys,
            "pdb_violations": self.pdb_violations,
            "holders": sorted(meta(h).get("name", "") for h in self.holders),
        }


def select_victims(
    pod: Obj,
    node: Obj,
    node_pods: Iterable[Obj],
    *,
    priority: int,
    nominated: Iterable[Obj] = (),
    pdbs: Iterable[Obj] = (),
    bound_pvs: Iterable[Obj] = (),
    exclude: Iterable[str] = (),
    requests_of: Callable[[Obj], Mapping[str, int]] = fit.pod_requests,
) -> tuple[list[Obj], int] | None:
    """The scheduler's ``selectVictimsOnNode`` for ``pod`` (of ``priority``) on ``node``: the
    pods to evict, most important first, and how many of them violate a PodDisruptionBudget;
    None when evicting every pod of lower priority still does not make it fit (or there is
    none).  ``node_pods``: the pods bound to the node
    (others are ignored); ``nominated``: the pods nominated there that count
    (:func:`counted_nominated`); ``exclude``: ``namespace/name`` of pods not counted (the pod
    being replaced)."""
    name = meta(node).get("name")
    excluded = set(exclude)
    bound = [
        p
        for p in node_pods
        if spec(p).get("nodeName") == name and not is_terminal(p) and _key(p) not in excluded
    ]
    potential = sorted((p for p in bound if pod_priority(p) < priority), key=_importance)
    if not potential:
        return None
    bound_pvs = list(bound_pvs)
    staying = [p for p in bound if pod_priority(p) >= priority]
    used, count = with_pods(({}, 0), [*staying, *nominated], requests_of)

    def fits() -> bool:
        return fit.check_fit(pod, node, (), bound_pvs, usage=(used, count)).fits

    if not fits():
        return None

    def add(victim: Obj, sign: int) -> None:
        nonlocal count
        for resource, value in requests_of(victim).items():
            used[resource] = used.get(resource, 0) + sign * value
        count += sign

    violating, fine = split_by_pdb(potential, pdbs)
    victims: list[Obj] = []
    violations = 0
    for victim, violates in [*violating, *((v, 0) for v in fine)]:
        add(victim, +1)
        if not fits():  # it must go: evict it after all
            add(victim, -1)
            victims.append(victim)
            violations += violates
    if violating and fine:
        victims.sort(key=_importance)
    return victims, violations


# --------------------------------------------------------------------------------------------------
# what decide asks


def node_usage(
    pod: Obj, state: ClusterState, node_name: str, priority: int, exclude: str
) -> tuple[tuple[dict[str, int], int], list[Obj]]:
    """The node's (requests, pod count) as the scheduler fits ``pod`` of ``priority`` there:
    its bound pods (``exclude``: the pod being replaced) and the pods nominated to it that
    count (:func:`counted_nominated`); and those nominated pods."""
    nominated = counted_nominated(pod, priority, state.pods_nominated_to(node_name))
    usage = with_pods(state.node_usage(node_name, exclude=exclude), nominated, state.requests_of)
    return usage, nominated


def on_pinned_node(
    pod: Obj,
    node: Obj,
    state: ClusterState,
    result: fit.FitResult,
    *,
    admitted: Admitted,
    bound_pvs: Iterable[Obj],
    exclude: str,
    holders: Iterable[Obj],
) -> Preemption | None:
    """What the scheduler would evict on ``node`` for ``pod``, which does not fit there
    (``result``); None when it would not preempt (``preemptionPolicy: Never``, a misfit
    preemption cannot cure, no pod of lower priority, or not enough room even without them)."""
    if admitted.policy == PREEMPT_NEVER or not may_help(result):
        return None
    node_name = meta(node).get("name", "")
    nominated = counted_nominated(pod, admitted.priority, state.pods_nominated_to(node_name))
    found = select_victims(
        pod,
        node,
        state.pods_on_node(node_name),
        priority=admitted.priority,
        nominated=nominated,
        pdbs=state.pdbs or (),
        bound_pvs=bound_pvs,
        exclude=[exclude],
        requests_of=state.requests_of,
    )
    if found is None:
        return None
    victims, violations = found
    holding = {_key(h) for h in holders}
    return Preemption(
        node_name,
        victims,
        violations,
        holders=[v for v in victims if _key(v) in holding],
        nominated=nominated,
    )
