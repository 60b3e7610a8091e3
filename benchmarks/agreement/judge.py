"""What the real kube-scheduler did with a scenario's pod, and whether ``decide`` predicted it.

The scheduler's FailedScheduling message is read with the package's own readers
(``nebari_colocate.events.fit_error_fragments`` and ``read_fragment``, the ones the spawner's
fail-fast uses); this module only maps their causes to our reason codes and kube-scheduler's
filter plugins.  Agreement is defined in ``benchmarks/README.md`` (section ``agreement``).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone

from nebari_colocate import fit, preemption
from nebari_colocate.events import (
    FRAGMENT_CORDONED,
    FRAGMENT_INSUFFICIENT,
    FRAGMENT_SINGLE_POD_VOLUME,
    fit_error_fragments,
    parse_time,
    read_fragment,
)
from nebari_colocate.kubeapi import read_json, read_json_or_none
from nebari_colocate.objects import pod_claims
from nebari_colocate.placement import CLAIM_IN_USE, COLOCATE, REFUSE, Decision
from nebari_colocate.state import ClusterState

# kube-scheduler 1.37's filter plugins in the order it runs them
# (pkg/scheduler/apis/config/v1/default_plugins.go), with the reason codes of ours each stands for
# (fit.INSUFFICIENT: every insufficient:<resource>).  split-attachment, premium-node,
# node-not-found and home-being-moved are not scheduler facts: no plugin.
PLUGIN_CODES = {
    "NodeUnschedulable": (fit.NODE_UNSCHEDULABLE,),
    "TaintToleration": (fit.TAINT,),
    "NodeAffinity": (fit.NODE_SELECTOR,),
    "NodeResourcesFit": (fit.TOO_MANY_PODS, fit.INSUFFICIENT),
    "VolumeRestrictions": (CLAIM_IN_USE,),
    "VolumeBinding": (fit.VOLUME_NODE_AFFINITY,),
}
FILTER_ORDER = tuple(PLUGIN_CODES)

# events.read_fragment's causes that are not our reason codes already (node-selector, taint,
# too-many-pods and volume-node-affinity are fit's codes in both; insufficient carries a resource)
OUR_CODES = {
    FRAGMENT_CORDONED: fit.NODE_UNSCHEDULABLE,
    FRAGMENT_SINGLE_POD_VOLUME: CLAIM_IN_USE,
}
# PreFilter rejections: every node gets the same status, no per-node histogram.
PREFILTER_FRAGMENTS = {"pod affinity terms conflict": fit.NODE_SELECTOR}
# The fragment of every node but the one the pod is pinned to.
EXCLUDED_BY_PIN = "node(s) didn't satisfy plugin(s) [NodeAffinity]"


def plugin_of(code: str) -> str | None:
    """The filter plugin that reports reason ``code``; None for codes the scheduler lacks."""
    key = fit.INSUFFICIENT if fit.insufficient_resource(code) is not None else code
    return next((plugin for plugin, codes in PLUGIN_CODES.items() if key in codes), None)


def fragment_code(fragment: str) -> str | None:
    """Our reason code for one fragment of the scheduler's per-node histogram (read by
    events.read_fragment, as the spawner reads it), or None when we have none."""
    read = read_fragment(fragment)
    if read.cause == FRAGMENT_INSUFFICIENT:
        return fit.insufficient(read.resource)
    code = OUR_CODES.get(read.cause or "", read.cause)
    return code if code and plugin_of(code) else None


def parse_failed_scheduling(message: str) -> tuple[str | None, dict[str, int]]:
    """(PreFilter message or None, {fragment: node count}) of a FailedScheduling message."""
    pairs = fit_error_fragments(message.strip())
    if pairs is None:
        return message, {}
    if not pairs or any(count is None for count, _ in pairs):
        return ", ".join(fragment for _, fragment in pairs), {}
    histogram: dict[str, int] = {}
    for count, fragment in pairs:
        histogram[fragment] = histogram.get(fragment, 0) + (count or 0)
    return None, histogram


def judge_refusal(expected: list[str], message: str) -> tuple[bool, str]:
    """Does the scheduler's reason for the pinned node match our reasons, given filter order?"""
    prefilter, histogram = parse_failed_scheduling(message)
    if prefilter is not None:
        code = PREFILTER_FRAGMENTS.get(prefilter)
        if code is None:
            return False, f"PreFilter rejection not modelled: {prefilter!r}"
        if code not in expected:
            return False, f"PreFilter says {code} ({prefilter!r}), we say {expected}"
        return True, f"PreFilter {code}"
    node_reasons = {r: n for r, n in histogram.items() if r != EXCLUDED_BY_PIN}
    codes = {fragment_code(r) for r in node_reasons}
    if None in codes or not codes:
        return False, f"scheduler reasons not modelled: {sorted(node_reasons)}"
    if any(n != 1 for n in node_reasons.values()):
        return False, f"more than the pinned node reported: {histogram}"
    plugins = {plugin_of(c) for c in codes if c}
    if len(plugins) != 1:
        return False, f"reasons of several plugins for one node: {sorted(codes)}"
    (plugin,) = plugins
    ours = [plugin_of(c) for c in expected]
    if None in ours:
        return False, f"reason codes the scheduler does not have: {expected}"
    first = min(ours, key=FILTER_ORDER.index)
    if first != plugin:
        return False, f"scheduler: {plugin} {sorted(codes)}; ours first: {first} {sorted(expected)}"
    if plugin == "NodeResourcesFit":
        resources = {c for c in expected if plugin_of(c) == "NodeResourcesFit"}
        if resources != codes:
            return False, f"scheduler resources {sorted(codes)} != ours {sorted(resources)}"
    return True, f"{plugin} {sorted(codes)}"


def _bound_pvs(pod: dict, state: ClusterState) -> list:
    namespace = pod["metadata"]["namespace"]
    return [pv for pv in (state.bound_pv(namespace, c) for c in pod_claims(pod)) if pv]


def fit_nodes(pod: dict, state: ClusterState) -> set[str]:
    """Nodes of the state where fit.check_fit admits the pod (the whole filter subset), the pods
    nominated there that the scheduler counts included."""
    bound = _bound_pvs(pod, state)
    priority = preemption.admitted_priority(pod, state.priority_classes).priority
    admitted = set()
    for name, node in (state.nodes or {}).items():
        usage, _ = preemption.node_usage(pod, state, name, priority, "")
        if fit.check_fit(pod, node, (), bound, usage=usage).fits:
            admitted.add(name)
    return admitted


#: how the scheduler's FailedScheduling ends when it preempts (kube-scheduler 1.37)
PREEMPTING = "preemption: found a potential placement for pod on node "


#: what it says while a pod it nominated waits for its victims to go (a victim held by a
#: finalizer stays terminating): the pod keeps its nomination
WAITING_FOR_VICTIMS = "preemption: not eligible due to a terminating pod on the nominated node"


def preempting_on(message: str) -> str | None:
    """The node a FailedScheduling message says the scheduler preempts on, or None."""
    at = message.find(PREEMPTING)
    if at < 0:
        return None
    return message[at + len(PREEMPTING) :].split(",", 1)[0].strip()


def expected_reasons(decision: Decision, pod: dict, state: ClusterState, node: str) -> list[str]:
    """Our reason codes for the node a refused pod is pinned to.  ``claim-in-use`` is decided
    before the fit (decide stops there), so the fit's own reasons are added for the order check."""
    reasons = list(decision.reasons)
    if CLAIM_IN_USE in reasons and state.nodes and node in state.nodes:
        bound = _bound_pvs(pod, state)
        reasons += fit.check_fit(pod, state.nodes[node], state.pods, bound).reasons
    return reasons


def _holder_below(decision: Decision, pod: dict, state: ClusterState) -> bool:
    """claim-in-use, and a pod holding the busy claim has a lower priority than ``pod``."""
    if CLAIM_IN_USE not in decision.reasons:
        return False
    priority = preemption.admitted_priority(pod, state.priority_classes).priority
    busy = set(decision.busy_claims)
    return any(
        preemption.pod_priority(h) < priority
        for h in decision.holder_pods
        if busy & set(pod_claims(h))
    )


def judge(
    decision: Decision, pod: dict, state: ClusterState, pin: str | None, said: str, detail: str
) -> tuple[bool, str]:
    """(agree, why) for the scheduler's verdict ``said``/``detail`` (see :func:`first_verdict`)
    on ``pod`` created with the affinity of ``decision`` (a refusal: pinned to ``pin``)."""
    taken = decision.preemption
    if decision.verdict == REFUSE:
        if said != "failed":
            return False, f"we refuse {sorted(decision.reasons)}; scheduler {said} {detail}"
        preempts = preempting_on(detail)
        if taken is not None and taken.holders:
            # refused on purpose: the scheduler would preempt the user's own holder there
            agree = preempts == pin
            return agree, f"we refuse (preempting holders {taken.holders}); scheduler: {detail}"
        if preempts is not None and preempts == pin and _holder_below(decision, pod, state):
            # claim-in-use: only the holder's eviction frees the claim; the scheduler would
            # preempt it (the user's own server, at a lower priority): refused on purpose
            return True, f"we refuse {sorted(decision.reasons)} (a holder of lower priority)"
        if preempts is not None:
            return False, f"we refuse {sorted(decision.reasons)}; scheduler preempts: {detail}"
        return judge_refusal(expected_reasons(decision, pod, state, pin), detail)
    if decision.verdict == COLOCATE and decision.node:
        agree = said in ("bound", "nominated") and detail == decision.node
        if said == "nominated" and taken is None:
            agree = False
        return agree, f"colocate on {decision.node}; scheduler {said} {detail}"
    # colocate unpinned, skip: anywhere the filter subset admits it
    admitted = fit_nodes(pod, state)
    if admitted:
        agree = said == "bound" and detail in admitted
        return agree, f"{decision.verdict}: fits {sorted(admitted)}; scheduler {said} {detail}"
    return said == "failed", f"{decision.verdict}: fits nowhere; scheduler {said} {detail}"


_NEVER = datetime.min.replace(tzinfo=timezone.utc)


def _first_seen(event: dict) -> tuple[datetime, int]:
    when = parse_time(event.get("firstTimestamp")) or parse_time(event.get("eventTime"))
    return when or _NEVER, int(event["metadata"].get("resourceVersion", "0"))


async def preemption_verdict(
    api_client, namespace: str, name: str, node: str, victims: list[str], timeout: float
) -> tuple[str, str]:
    """For a pod decided to fit ``node`` by preempting ``victims`` (``namespace/name``): ("bound",
    node) once bound; ("nominated", node) once nominated there with every victim evicted (a
    victim held by a finalizer never goes); ("failed", message) for a FailedScheduling that does
    not say it preempts on ``node``; ("timeout", why)."""
    from kubernetes_asyncio import client

    core = client.CoreV1Api(api_client)
    selector = f"involvedObject.name={name},reason=FailedScheduling"
    deadline = time.monotonic() + timeout
    while True:
        pod = await read_json(core.read_namespaced_pod, name, namespace)
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            return "bound", bound
        listing = await read_json(core.list_namespaced_event, namespace, field_selector=selector)
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        for event in sorted(listing["items"], key=_first_seen):
            message = event.get("message") or ""
            waiting = nominated == node and WAITING_FOR_VICTIMS in message
            if preempting_on(message) != node and not waiting:
                return "failed", message
        if nominated == node and not await still_there(api_client, victims):
            return "nominated", node
        if time.monotonic() > deadline:
            return "timeout", f"neither bound nor FailedScheduling after {timeout:.0f} s"
        await asyncio.sleep(0.1)


async def still_there(api_client, victims: list[str]) -> list[str]:
    """The pods of ``victims`` (``namespace/name``) that exist and are not going: not evicted by
    the scheduler (no DisruptionTarget condition of reason PreemptionByScheduler) and not
    terminating (a victim that was terminating already gets no condition: kube-scheduler 1.37
    waits for it)."""
    from kubernetes_asyncio import client

    core = client.CoreV1Api(api_client)
    left = []
    for key in victims:
        namespace, name = key.split("/", 1)
        pod = await read_json_or_none(core.read_namespaced_pod, name, namespace)
        if pod is not None and not going(pod):
            left.append(key)
    return left


def going(pod: dict) -> bool:
    """Terminating, or marked for eviction by the scheduler."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp")) or preempted_by_scheduler(pod)


def preempted_by_scheduler(pod: dict) -> bool:
    """kube-scheduler marked the pod for eviction (preemption's DisruptionTarget condition)."""
    return any(
        c.get("type") == "DisruptionTarget"
        and c.get("status") == "True"
        and c.get("reason") == "PreemptionByScheduler"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


async def first_verdict(api_client, namespace: str, name: str, timeout: float) -> tuple[str, str]:
    """("bound", node) or ("failed", message): whichever the scheduler said first; ("timeout",
    why) when it said neither in ``timeout`` seconds."""
    from kubernetes_asyncio import client

    core = client.CoreV1Api(api_client)
    selector = f"involvedObject.name={name},reason=FailedScheduling"
    deadline = time.monotonic() + timeout
    while True:
        pod = await read_json(core.read_namespaced_pod, name, namespace)
        listing = await read_json(core.list_namespaced_event, namespace, field_selector=selector)
        events = listing["items"]
        if events:
            return "failed", min(events, key=_first_seen).get("message") or ""
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            return "bound", node
        if time.monotonic() > deadline:
            return "timeout", f"neither bound nor FailedScheduling after {timeout:.0f} s"
        await asyncio.sleep(0.1)
