"""What the autoscalers say about a pending pod: cluster-autoscaler's ``TriggeredScaleUp`` and
``NotTriggerScaleUp``, Karpenter's ``Nominated`` and ``Failed to schedule pod, ...`` (one reason
per NodePool, read into ``KARPENTER_*`` cause codes), and the ``no-scale-up`` verdict.  (pure)
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from . import fit
from .event_stream import TimedEvent
from .event_verdict import FAIL, NO_SCALE_UP, EventVerdict, Fragment
from .fit_error import COUNTED, FRAGMENT_SPLIT, FRAGMENT_SPREAD, read_fragment

KARPENTER_FAILED = "Failed to schedule pod, "
KARPENTER_NOMINATED = "Pod should schedule on: "
CA_NOT_TRIGGERED = "pod didn't trigger scale-up"  # older: "... (it wouldn't fit if ...): ..."
CA_TRIGGERED = "pod triggered scale-up: "

# Karpenter 1.15 "Failed to schedule pod, <why>": <why> joins one reason per NodePool with "; "
# (go.uber.org/multierr). Each reason -> a cause code; the first needle found wins. Every cause
# listed is one no retry changes: Karpenter has simulated every NodePool and none can serve.
KARPENTER_SEPARATOR = "; "
KARPENTER_COLOCATION = "colocation"  # the pod's required pod affinity: no new node holds them
KARPENTER_ANTI_AFFINITY = "anti-affinity"
KARPENTER_SPREAD = FRAGMENT_SPREAD
KARPENTER_LIMITS = "limits"
KARPENTER_NO_INSTANCE_TYPE = "no-instance-type"
KARPENTER_REQUIREMENTS = "requirements"
KARPENTER_TAINT = fit.TAINT
_KARPENTER_CAUSES: tuple[tuple[str, str], ...] = (
    ("unsatisfiable topology constraint for pod affinity", KARPENTER_COLOCATION),
    ("unsatisfiable topology constraint for pod anti-affinity", KARPENTER_ANTI_AFFINITY),
    ("unsatisfiable topology constraint for topology spread", KARPENTER_SPREAD),
    ("exceed limits for nodepool", KARPENTER_LIMITS),
    ("node limits have been exhausted", KARPENTER_LIMITS),
    ("no instance type", KARPENTER_NO_INSTANCE_TYPE),
    ("incompatible requirements", KARPENTER_REQUIREMENTS),
    ("did not tolerate taint", KARPENTER_TAINT),
)
#: Karpenter's provisioner ignores a pod whose node affinity uses ``matchFields`` (the pin to the
#: node holding the volume) and says so: a statement about Karpenter, not about the pod's profile.
KARPENTER_SKIPS_PINNED = "node selector term with matchFields is not supported"
_KARPENTER_RESOURCES = re.compile(r"resources=(\{[^{}]*\})")


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _autoscaler_fragments(message: str) -> tuple[Fragment, ...]:
    """Reason fragments of a NotTriggerScaleUp message, counts dropped (they count node groups)."""
    _, _, tail = message.partition(":")
    fragments = []
    for part in FRAGMENT_SPLIT.split(tail.strip()):
        part = part.strip()
        counted = COUNTED.match(part)
        fragments.append(counted.group(2) if counted else part)
    return tuple(read_fragment(f) for f in fragments if f)


def karpenter_reasons(message: str) -> list[tuple[str | None, str]] | None:
    """``(cause, reason)`` per NodePool reason of a Karpenter ``Failed to schedule pod, ...``.

    ``cause`` is one of the ``KARPENTER_*`` cause codes, or None for a reason not understood.
    None for any other message.
    """
    if not message.startswith(KARPENTER_FAILED):
        return None
    pairs: list[tuple[str | None, str]] = []
    for reason in message[len(KARPENTER_FAILED) :].split(KARPENTER_SEPARATOR):
        reason = reason.strip()
        if reason:
            cause = next((code for needle, code in _KARPENTER_CAUSES if needle in reason), None)
            pairs.append((cause, reason))
    return pairs


def is_karpenter_skip(ev: TimedEvent) -> bool:
    """Karpenter left a pinned pod to the scheduler (``matchFields`` not supported)."""
    return ev.reason == "FailedScheduling" and (
        ev.message.startswith(KARPENTER_FAILED) and KARPENTER_SKIPS_PINNED in ev.message
    )


def _karpenter_final(ev: TimedEvent) -> tuple[str, ...]:
    """The cause codes of a Karpenter FailedScheduling no retry will change; () if not one."""
    if ev.reason != "FailedScheduling":
        return ()
    reasons = karpenter_reasons(ev.message)
    if not reasons or any(cause is None for cause, _ in reasons):
        return ()
    return tuple(_unique([cause for cause, _ in reasons if cause]))


def karpenter_requests(message: str) -> dict[str, str]:
    """The pod requests Karpenter quotes (``resources={...}``) in a reason, if any."""
    for m in _KARPENTER_RESOURCES.finditer(message):
        try:
            value = json.loads(m.group(1))
        except ValueError:
            continue
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
    return {}


def is_negative_autoscaler(ev: TimedEvent) -> bool:
    """An autoscaler will not add a node for the pod (and no retry changes that)."""
    if ev.reason == "NotTriggerScaleUp" or ev.message.startswith(CA_NOT_TRIGGERED):
        return True
    return bool(_karpenter_final(ev))


def is_positive_autoscaler(ev: TimedEvent) -> bool:
    """An autoscaler adds a node for the pod, or Karpenter nominated one."""
    return (ev.reason == "TriggeredScaleUp" and ev.message.startswith(CA_TRIGGERED)) or (
        ev.reason == "Nominated" and ev.message.startswith(KARPENTER_NOMINATED)
    )


def no_scale_up_verdict(ev: TimedEvent) -> EventVerdict:
    """FAIL ``no-scale-up`` with Karpenter's causes, or cluster-autoscaler's fragments."""
    causes = _karpenter_final(ev)
    if causes:
        requests = tuple(karpenter_requests(ev.message).items())
        return EventVerdict(FAIL, NO_SCALE_UP, ev.message, causes=causes, requests=requests)
    return EventVerdict(FAIL, NO_SCALE_UP, ev.message, fragments=_autoscaler_fragments(ev.message))
