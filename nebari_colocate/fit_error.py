"""kube-scheduler's FitError read: the per-node histogram ("0/N nodes are available: ...") split
into counted reason fragments, each read into a cause code (``FRAGMENT_*``).  cluster-autoscaler's
refusals use the same fragments (:mod:`nebari_colocate.autoscaler_events`).  (pure)

The message formats are listed in docs/troubleshooting.md ("The Kubernetes event messages").
"""

from __future__ import annotations

import re

from . import fit
from .event_stream import TimedEvent
from .event_verdict import Fragment
from .objects import GPU_RESOURCES

# kube-scheduler FitError: "0/N nodes are available: <count> <reason>, ... ." then an optional
# " preemption: ..." (or, with DRA, " no new claims to deallocate, preemption: ...").
_FIT_ERROR = re.compile(r"0/(\d+) nodes are available:?\s*")
# The per-node histogram ends at the first period followed by a space or the end; fragments hold
# no such period (taint values and resource names cannot contain spaces).
_HISTOGRAM_END = re.compile(r"\.(?:\s|$)")
# Fragments are "<count> <reason>" joined by ", "; the older taint fragment itself contains ", "
# ("had taint {k: v}, that the pod didn't tolerate"), so split only before a count.
FRAGMENT_SPLIT = re.compile(r",\s+(?=\d+\s)")
COUNTED = re.compile(r"(\d+)\s+(.*)", re.DOTALL)
_INSUFFICIENT = re.compile(r"Insufficient (\S+)")
_TAINT_KEY = re.compile(r"taint \{([^:{}]+):")

# Scheduler (and cluster-autoscaler) reason fragments -> cause codes; the first match wins, so the
# more specific fragments come first.  ``Insufficient <resource>`` is FRAGMENT_INSUFFICIENT with
# its resource; anything else is None, shown as the component wrote it.
FRAGMENT_INSUFFICIENT = "insufficient"
FRAGMENT_SINGLE_POD_VOLUME = "single-pod-volume"
FRAGMENT_PINNED_ELSEWHERE = "pinned-elsewhere"
FRAGMENT_ANTI_AFFINITY = "anti-affinity"
FRAGMENT_POD_AFFINITY = "pod-affinity"
FRAGMENT_NODE_SELECTOR = fit.NODE_SELECTOR
FRAGMENT_TAINT = fit.TAINT
FRAGMENT_CORDONED = "cordoned"
FRAGMENT_TOO_MANY_PODS = fit.TOO_MANY_PODS
FRAGMENT_VOLUME_NODE_AFFINITY = fit.VOLUME_NODE_AFFINITY
FRAGMENT_PORTS = "ports"
FRAGMENT_SPREAD = "topology-spread"
FRAGMENT_VOLUME_COUNT = "volume-count"
FRAGMENT_UNBOUND_CLAIM = "unbound-claim"
# cluster-autoscaler NotTriggerScaleUp fragments (counts there are node groups)
FRAGMENT_MAX_SIZE = "max-node-group-size"
FRAGMENT_BACKOFF = "scale-up-backoff"
FRAGMENT_LIMIT = "cluster-limit"
FRAGMENT_NOT_READY = "node-group-not-ready"
# The fragments about the nodes the pin excluded before any filter ran.
OTHER_NODES = "didn't satisfy plugin(s)"
_FRAGMENT_CAUSES: tuple[tuple[str, str], ...] = (
    ("ReadWriteOncePod", FRAGMENT_SINGLE_POD_VOLUME),
    (OTHER_NODES, FRAGMENT_PINNED_ELSEWHERE),
    ("didn't match pod anti-affinity rules", FRAGMENT_ANTI_AFFINITY),
    ("didn't match pod affinity rules", FRAGMENT_POD_AFFINITY),
    ("didn't match Pod's node affinity/selector", FRAGMENT_NODE_SELECTOR),
    ("untolerated taint", FRAGMENT_TAINT),
    ("that the pod didn't tolerate", FRAGMENT_TAINT),
    ("were unschedulable", FRAGMENT_CORDONED),
    ("Too many pods", FRAGMENT_TOO_MANY_PODS),
    ("PersistentVolume's node affinity", FRAGMENT_VOLUME_NODE_AFFINITY),
    ("volume node affinity conflict", FRAGMENT_VOLUME_NODE_AFFINITY),
    ("didn't have free ports", FRAGMENT_PORTS),
    ("topology spread constraints", FRAGMENT_SPREAD),
    ("exceed max volume count", FRAGMENT_VOLUME_COUNT),
    ("unbound immediate PersistentVolumeClaims", FRAGMENT_UNBOUND_CLAIM),
    ("max node group size reached", FRAGMENT_MAX_SIZE),
    ("in backoff after failed scale-up", FRAGMENT_BACKOFF),
    ("limit reached", FRAGMENT_LIMIT),
    ("not ready for scale-up", FRAGMENT_NOT_READY),
)


def read_fragment(fragment: str, count: int | None = None) -> Fragment:
    """The cause of one scheduler or cluster-autoscaler reason fragment (without its count)."""
    m = _INSUFFICIENT.search(fragment)
    if m:
        return Fragment(count, FRAGMENT_INSUFFICIENT, fragment, m.group(1))
    cause = next((code for needle, code in _FRAGMENT_CAUSES if needle in fragment), None)
    state = ""
    if cause == FRAGMENT_CORDONED:
        state = fit.NODE_STATE_CORDONED
    elif cause == FRAGMENT_TAINT:
        # Up to Kubernetes 1.3x the scheduler names the first untolerated taint; newer ones
        # write "untolerated taint(s)" only.
        key = _TAINT_KEY.search(fragment)
        state = (fit.node_state({"key": key.group(1).strip()}) or "") if key else ""
    return Fragment(count, cause, fragment, node_state=state)


def fit_error_fragments(message: str) -> list[tuple[int | None, str]] | None:
    """``(count, fragment)`` pairs of a kube-scheduler FitError, or None for other messages.

    ``count`` is None for a fragment without one (a PreFilter message such as
    "pod has unbound immediate PersistentVolumeClaims").
    """
    m = _FIT_ERROR.match(message)
    if not m:
        return None
    body = message[m.end() :]
    end = _HISTOGRAM_END.search(body)
    if end:
        body = body[: end.start()]
    pairs: list[tuple[int | None, str]] = []
    for part in FRAGMENT_SPLIT.split(body):
        part = part.strip()
        if not part:
            continue
        counted = COUNTED.match(part)
        if counted:
            pairs.append((int(counted.group(1)), counted.group(2).strip()))
        else:
            pairs.append((None, part))
    return pairs


def read_fit_error(message: str) -> tuple[Fragment, ...]:
    """The fragments of a FitError, read; () for other messages."""
    return tuple(read_fragment(f, count) for count, f in fit_error_fragments(message) or [])


def wants_gpu_in(message: str) -> bool:
    """Whether a scheduler message says a GPU was short on some node."""
    return any(f"Insufficient {r}" in message for r in GPU_RESOURCES)


def is_fit_error(ev: TimedEvent) -> bool:
    """Whether ``ev`` is kube-scheduler's FailedScheduling with a FitError's histogram."""
    return ev.reason == "FailedScheduling" and bool(_FIT_ERROR.match(ev.message))
