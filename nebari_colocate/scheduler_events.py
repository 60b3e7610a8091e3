"""The scheduling phase of a pending pod: kube-scheduler's FailedScheduling episode since the pod
was last bound, a pinned pod its node cannot take, a placement by preemption waited on (and
given up), the autoscalers' latest word, and a pod no scheduler has looked at.  (pure)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from .autoscaler_events import (
    is_karpenter_skip,
    is_negative_autoscaler,
    is_positive_autoscaler,
    no_scale_up_verdict,
)
from .config import PREEMPTION_GRACE_SECONDS
from .event_stream import BOUND_REASONS, TimedEvent, aware
from .event_verdict import (
    DEFAULT_SCHEDULER,
    FAIL,
    NO_NODE_YET,
    NO_SCHEDULER,
    PREEMPTING,
    PREEMPTION_STALLED,
    SCALING_UP,
    UNSCHEDULABLE,
    UNSCHEDULABLE_PINNED,
    WAIT,
    EventVerdict,
)
from .fit_error import OTHER_NODES, is_fit_error, read_fit_error, wants_gpu_in
from .objects import Obj

# kube-scheduler's DefaultPreemption (framework/preemption, defaultpreemption, v1.37): the
# PostFilter's message after the histogram. A placement found: the victims are being evicted and
# the pod is nominated to the node; while they terminate, the next attempts say "not eligible".
_PREEMPTION_FOUND = re.compile(
    r"preemption: found a potential placement for pod on node (?P<node>[^\s,]+), "
    r"preempting (?P<victims>\d+) victims?"
)
PREEMPTION_TERMINATING = "not eligible due to a terminating pod on the nominated node"


@dataclass
class _Scheduling:
    """The current unscheduled episode: everything since the pod was last seen bound."""

    failures: list[TimedEvent]  # FailedScheduling events (scheduler and non-final Karpenter ones)
    positive: TimedEvent | None = None  # latest TriggeredScaleUp / Nominated
    negative: TimedEvent | None = None  # latest NotTriggerScaleUp / final Karpenter failure
    positive_at: int = -1
    negative_at: int = -1


def _scheduling_episode(events: list[TimedEvent]) -> _Scheduling:
    episode = _Scheduling(failures=[])
    for i, ev in enumerate(events):
        if ev.reason in BOUND_REASONS:
            # Bound to a node: earlier scheduling trouble is over.
            episode = _Scheduling(failures=[])
        elif is_karpenter_skip(ev):
            # Karpenter left a pinned pod to the scheduler: no word on whether it can run.
            continue
        elif is_negative_autoscaler(ev):
            episode.negative, episode.negative_at = ev, i
        elif is_positive_autoscaler(ev):
            episode.positive, episode.positive_at = ev, i
        elif ev.reason == "FailedScheduling":
            episode.failures.append(ev)
    return episode


def _pinned_verdict(node: str, ev: TimedEvent, victims: int = 0) -> EventVerdict:
    # The fragments about other nodes ("didn't satisfy plugin(s) [NodeAffinity]": excluded by
    # the pin before any filter ran) say nothing about the pinned node, so they are dropped.
    fragments = tuple(f for f in read_fit_error(ev.message) if OTHER_NODES not in f.text)
    return EventVerdict(
        FAIL,
        UNSCHEDULABLE_PINNED,
        ev.message,
        node=node,
        fragments=fragments,
        scheduler=ev.component,
        victims=victims,
    )


def _placement(ev: TimedEvent) -> tuple[str, int] | None:
    """(node, victims) of a FailedScheduling whose preemption found a placement, else None."""
    m = _PREEMPTION_FOUND.search(ev.message)
    return (m.group("node"), int(m.group("victims"))) if m else None


def _preemption(
    fit_errors: list[TimedEvent],
    pinned_node: str | None,
    nominated: str | None,
    now: datetime,
    grace: float,
) -> EventVerdict | None:
    """WAIT while the scheduler makes room for the pod by preemption, FAIL once that has lasted
    ``grace`` seconds (``grace`` <= 0: wait for start_timeout); None when it does not.

    The pod is preempting when the scheduler's latest word found a placement by preemption (on
    the pinned node, for a pinned pod), when the pod is nominated to that node
    (``status.nominatedNodeName``), or when its latest word is that the victims of an earlier
    placement are still terminating.  The scheduler drops a nomination it cannot keep (a
    FailedScheduling without a placement and the nomination cleared): the pod is then judged as
    any other."""
    latest = fit_errors[-1]
    placed = _placement(latest)
    found = [p for p in map(_placement, fit_errors) if p and p[0] == (pinned_node or p[0])]
    target = pinned_node or (placed[0] if placed else None) or nominated
    terminating = PREEMPTION_TERMINATING in latest.message
    if not (
        (placed is not None and placed[0] == target)
        or (nominated is not None and nominated == target)
        or (terminating and found)
    ):
        return None
    # The current run of preempting words: back to the latest word that was neither.
    run = []
    for ev in reversed(fit_errors):
        if _placement(ev) is None and PREEMPTION_TERMINATING not in ev.message:
            break
        run.append(ev)
    starts = [t for ev in (run or [latest]) for t in (ev.first or ev.last,) if t]
    victims = found[-1][1] if found else 0
    waiting = EventVerdict(
        WAIT, PREEMPTING, latest.message, node=target, scheduler=latest.component, victims=victims
    )
    if grace > 0 and starts and (now - min(starts)).total_seconds() >= grace:
        return replace(waiting, action=FAIL, code=PREEMPTION_STALLED, grace=grace)
    return waiting


def scheduling_verdict(
    events: list[TimedEvent],
    pinned_node: str | None,
    now: datetime,
    grace: float,
    wants_gpu: bool = False,
    nominated: str | None = None,
    preemption_grace: float = PREEMPTION_GRACE_SECONDS,
) -> EventVerdict | None:
    """The verdict of the scheduling phase, or None when the pod is not stuck there."""
    episode = _scheduling_episode(events)
    fit_errors = [ev for ev in episode.failures if is_fit_error(ev)]

    preempting = (
        _preemption(fit_errors, pinned_node, nominated, now, preemption_grace)
        if fit_errors
        else None
    )
    if preempting is not None:
        return preempting
    if pinned_node and fit_errors:
        # A placement by preemption given up since still says so (its victims).
        found = [p for p in map(_placement, fit_errors) if p and p[0] == pinned_node]
        return _pinned_verdict(pinned_node, fit_errors[-1], found[-1][1] if found else 0)

    # The latest autoscaler word decides: a scale-up stays in progress while the scheduler keeps
    # reporting FailedScheduling (it does until the new node is Ready) unless the autoscaler
    # later says no.
    if episode.negative and episode.negative_at > episode.positive_at:
        return no_scale_up_verdict(episode.negative)
    if episode.positive:
        # A hint only (Karpenter's Nominated names where it expects the pod to go; the
        # scheduler may bind it elsewhere): keep waiting.
        gpu = wants_gpu or any(wants_gpu_in(ev.message) for ev in episode.failures)
        return EventVerdict(WAIT, SCALING_UP, episode.positive.message, gpu=gpu)

    if not episode.failures:
        return None
    latest = fit_errors[-1] if fit_errors else episode.failures[-1]
    fragments = read_fit_error(latest.message)
    starts = [ev.first for ev in episode.failures if ev.first]
    # grace <= 0 waits for ever (start_timeout still ends it); so does an episode whose start
    # is unknown, rather than fail on a guess.
    if grace > 0 and starts and (now - min(starts)).total_seconds() >= grace:
        return EventVerdict(FAIL, UNSCHEDULABLE, latest.message, fragments=fragments, grace=grace)
    return EventVerdict(WAIT, NO_NODE_YET, latest.message, fragments=fragments)


def unscheduled_verdict(
    events: list[TimedEvent],
    pod: Obj | None,
    created: datetime | None,
    now: datetime,
    timeout: float,
) -> EventVerdict | None:
    """FAIL NO_SCHEDULER when no scheduler has looked at the pod for ``timeout`` seconds since
    it was ``created``: not bound, not nominated, no ``PodScheduled`` condition (kube-scheduler
    sets one on every failed attempt) and not one event.  A scheduler that runs binds a pod or
    says why not within a second; one that does not run says nothing at all.  None otherwise,
    and whenever the pod or its creation time is unknown (``timeout`` <= 0: never)."""
    if timeout <= 0 or pod is None or created is None or events:
        return None
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    if spec.get("nodeName") or status.get("nominatedNodeName"):
        return None
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    if status.get("phase") not in (None, "Pending"):
        return None
    conditions = status.get("conditions") or []
    if any(isinstance(c, Mapping) and c.get("type") == "PodScheduled" for c in conditions):
        return None
    if (now - aware(created)).total_seconds() < timeout:
        return None
    scheduler = str(spec.get("schedulerName") or DEFAULT_SCHEDULER)
    return EventVerdict(FAIL, NO_SCHEDULER, grace=timeout, scheduler=scheduler)
