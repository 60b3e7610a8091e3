"""Classify a pending pod's events: keep waiting, or fail the spawn now.  (pure)

While ``KubeSpawner.start()`` waits for the pod to run, the spawner passes the pod's events (raw
camelCase dicts from KubeSpawner's event reflector) to :func:`classify`.  Some events prove the
spawn can never succeed, and waiting for ``start_timeout`` (300 s in zero-to-jupyterhub) only
hides the reason from the person on the spawn page:

- ``unschedulable-pinned``: the kube-scheduler cannot place a pod that is pinned to the node
  holding its volume.  No autoscaler can help: a new node never holds the volume.  A pod the
  scheduler is making room for by preemption (its FailedScheduling says it found a placement
  "preempting K victims", or the pod is nominated to that node) waits instead (``preempting``),
  and fails as ``preemption-stalled`` if it is still not bound ``preemption_grace_seconds`` later.
- ``no-scheduler``: no scheduler has looked at the pod (no node, no ``PodScheduled`` condition, no
  event) for ``unscheduled_timeout_seconds``: its ``schedulerName`` is served by no running
  scheduler (z2jh's user-scheduler down, a typo).
- ``no-scale-up``: the scheduler cannot place the pod and the cluster autoscaler
  (``NotTriggerScaleUp``) or Karpenter (``Failed to schedule pod, ...``) will not add a node.
  Karpenter gives one reason per NodePool; each is read (:func:`karpenter_reasons`) and the
  verdict carries their cause codes, so the words name the cause that matters (the co-location,
  not the taint of a pool that was never meant for this server).
- ``multi-attach``: the attach/detach controller refused to attach the volume, which another pod
  uses on another node (``Waiting for detach …`` since Kubernetes 1.37, ``Multi-Attach error …``
  before; both occur in the field); a volume no pod uses but still attached elsewhere (a detach
  under way) only after ``detach_grace_seconds``.
- ``image-invalid``: the image name cannot be parsed, or it is absent with pull policy ``Never``.
- ``unschedulable``: the scheduler cannot place the pod, no autoscaler spoke, and nothing changed
  for ``unschedulable_grace_seconds``.
- ``image-pull``: the image has failed to download for ``image_pull_grace_seconds``.

Messages are matched on the stable prefixes and fragments listed in docs/troubleshooting.md ("The
Kubernetes event messages", taken from the upstream sources); the raw message is kept for the
operator log.  Everything else waits, with a code saying what for.  A verdict is codes and facts,
as a placement ``Decision`` is; :func:`nebari_colocate.messages.event_text` writes its words.

Each source is read in its own module (``scheduler_events``, ``autoscaler_events``,
``attach_events``, ``image_events``, with ``fit_error``, ``event_stream`` and ``event_verdict``
beneath them); this one combines their verdicts, and ``events.<name>`` reaches every name.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from .attach_events import MULTI_ATTACH_PREFIXES, attach_verdict, used_by_names
from .autoscaler_events import (
    CA_NOT_TRIGGERED,
    CA_TRIGGERED,
    KARPENTER_ANTI_AFFINITY,
    KARPENTER_COLOCATION,
    KARPENTER_FAILED,
    KARPENTER_LIMITS,
    KARPENTER_NO_INSTANCE_TYPE,
    KARPENTER_NOMINATED,
    KARPENTER_REQUIREMENTS,
    KARPENTER_SEPARATOR,
    KARPENTER_SKIPS_PINNED,
    KARPENTER_SPREAD,
    KARPENTER_TAINT,
    karpenter_reasons,
    karpenter_requests,
)
from .config import (
    DEFAULT_DETACH_GRACE_SECONDS,
    DEFAULT_IMAGE_PULL_GRACE_SECONDS,
    DEFAULT_UNSCHEDULABLE_GRACE_SECONDS,
    DEFAULT_UNSCHEDULED_TIMEOUT_SECONDS,
    PREEMPTION_GRACE_SECONDS,
)
from .event_stream import TimedEvent, aware, normalise, parse_time
from .event_verdict import (
    DEFAULT_SCHEDULER,
    EVENT_REASON_CODES,
    FAIL,
    IMAGE_BAD_NAME,
    IMAGE_CAUSES,
    IMAGE_INVALID,
    IMAGE_NEVER_PULL,
    IMAGE_PULL,
    MULTI_ATTACH,
    NO_NODE_YET,
    NO_SCALE_UP,
    NO_SCHEDULER,
    PLAIN_LANGUAGE_EVENTS,
    PREEMPTING,
    PREEMPTION_STALLED,
    PROGRESS,
    PROGRESS_EVENTS,
    PULL_DENIED,
    PULL_NOT_FOUND,
    RETRYING_PULL,
    SCALING_UP,
    UNSCHEDULABLE,
    UNSCHEDULABLE_PINNED,
    WAIT,
    WAIT_CODES,
    EventVerdict,
    Fragment,
)
from .fit_error import (
    FRAGMENT_ANTI_AFFINITY,
    FRAGMENT_BACKOFF,
    FRAGMENT_CORDONED,
    FRAGMENT_INSUFFICIENT,
    FRAGMENT_LIMIT,
    FRAGMENT_MAX_SIZE,
    FRAGMENT_NODE_SELECTOR,
    FRAGMENT_NOT_READY,
    FRAGMENT_PINNED_ELSEWHERE,
    FRAGMENT_POD_AFFINITY,
    FRAGMENT_PORTS,
    FRAGMENT_SINGLE_POD_VOLUME,
    FRAGMENT_SPREAD,
    FRAGMENT_TAINT,
    FRAGMENT_TOO_MANY_PODS,
    FRAGMENT_UNBOUND_CLAIM,
    FRAGMENT_VOLUME_COUNT,
    FRAGMENT_VOLUME_NODE_AFFINITY,
    fit_error_fragments,
    read_fragment,
)
from .image_events import (
    DEFAULT_TAG_FAILED_PREFIX,
    PULL_BACKOFF_PREFIX,
    PULL_FAILED_PREFIX,
    image_verdict,
)
from .objects import Obj
from .placement import stopping_helps
from .scheduler_events import PREEMPTION_TERMINATING, scheduling_verdict, unscheduled_verdict
from .wayout import UNRESOLVABLE, WayOut, stop_every_holder

#: the names other modules, tests and benchmarks read as ``events.<name>``
__all__ = [
    "CA_NOT_TRIGGERED",
    "CA_TRIGGERED",
    "DEFAULT_SCHEDULER",
    "DEFAULT_TAG_FAILED_PREFIX",
    "EVENT_REASON_CODES",
    "FAIL",
    "FRAGMENT_ANTI_AFFINITY",
    "FRAGMENT_BACKOFF",
    "FRAGMENT_CORDONED",
    "FRAGMENT_INSUFFICIENT",
    "FRAGMENT_LIMIT",
    "FRAGMENT_MAX_SIZE",
    "FRAGMENT_NODE_SELECTOR",
    "FRAGMENT_NOT_READY",
    "FRAGMENT_PINNED_ELSEWHERE",
    "FRAGMENT_POD_AFFINITY",
    "FRAGMENT_PORTS",
    "FRAGMENT_SINGLE_POD_VOLUME",
    "FRAGMENT_SPREAD",
    "FRAGMENT_TAINT",
    "FRAGMENT_TOO_MANY_PODS",
    "FRAGMENT_UNBOUND_CLAIM",
    "FRAGMENT_VOLUME_COUNT",
    "FRAGMENT_VOLUME_NODE_AFFINITY",
    "IMAGE_BAD_NAME",
    "IMAGE_CAUSES",
    "IMAGE_INVALID",
    "IMAGE_NEVER_PULL",
    "IMAGE_PULL",
    "KARPENTER_ANTI_AFFINITY",
    "KARPENTER_COLOCATION",
    "KARPENTER_FAILED",
    "KARPENTER_LIMITS",
    "KARPENTER_NOMINATED",
    "KARPENTER_NO_INSTANCE_TYPE",
    "KARPENTER_REQUIREMENTS",
    "KARPENTER_SEPARATOR",
    "KARPENTER_SKIPS_PINNED",
    "KARPENTER_SPREAD",
    "KARPENTER_TAINT",
    "MULTI_ATTACH",
    "MULTI_ATTACH_PREFIXES",
    "NO_NODE_YET",
    "NO_SCALE_UP",
    "NO_SCHEDULER",
    "PLAIN_LANGUAGE_EVENTS",
    "PREEMPTING",
    "PREEMPTION_STALLED",
    "PREEMPTION_TERMINATING",
    "PROGRESS",
    "PROGRESS_EVENTS",
    "PULL_BACKOFF_PREFIX",
    "PULL_DENIED",
    "PULL_FAILED_PREFIX",
    "PULL_NOT_FOUND",
    "RETRYING_PULL",
    "SCALING_UP",
    "UNSCHEDULABLE",
    "UNSCHEDULABLE_PINNED",
    "WAIT",
    "WAIT_CODES",
    "EventVerdict",
    "Fragment",
    "classify",
    "event_way_out",
    "fit_error_fragments",
    "karpenter_reasons",
    "karpenter_requests",
    "parse_time",
    "read_fragment",
    "told_in_words",
    "used_by_names",
]


def _progress(events: list[TimedEvent]) -> EventVerdict:
    for ev in reversed(events):
        if ev.reason in PROGRESS_EVENTS:
            return EventVerdict(WAIT, PROGRESS, ev.message, event=ev.reason)
    return EventVerdict(WAIT, PROGRESS)


def classify(
    events: Sequence[Obj],
    *,
    pinned_node: str | None,
    now: datetime,
    unschedulable_grace_seconds: float = DEFAULT_UNSCHEDULABLE_GRACE_SECONDS,
    image_pull_grace_seconds: float = DEFAULT_IMAGE_PULL_GRACE_SECONDS,
    detach_grace_seconds: float = DEFAULT_DETACH_GRACE_SECONDS,
    own_servers: Mapping[str, str] | None = None,
    wants_gpu: bool = False,
    servers: Collection[str] | None = None,
    server_name: str | None = None,
    own_server_names: Mapping[str, str] | None = None,
    pinned_holders: Sequence[str] = (),
    pod: Obj | None = None,
    created: datetime | None = None,
    unscheduled_timeout_seconds: float = DEFAULT_UNSCHEDULED_TIMEOUT_SECONDS,
    preemption_grace_seconds: float = PREEMPTION_GRACE_SECONDS,
) -> EventVerdict:
    """Decide from one pod's events whether its spawn should keep waiting or fail now.

    ``events`` are raw camelCase Event dicts of this pod, in any order; missing fields are
    tolerated.  ``pinned_node`` is the node the placement decision pinned the pod to (None when
    not pinned).  ``now`` is the current time (naive means UTC).  A grace of 0 (or less) disables
    the rule it belongs to: the spawn then waits for ``start_timeout``.  ``own_servers`` maps the
    user's own pod names to server names (``""`` is the default server); only those are named in
    the words, other pods are counted.  ``wants_gpu``: the pod requests a GPU (the scheduler's
    message may not say so when another filter rejected every node first).  ``servers``: the
    names of the namespace's JupyterHub server pods, when known (the pod reflector's): another
    pod is then counted as a server of another user or as a pod that is not a server.

    The way out (``way_out`` of a failing verdict) needs ``server_name`` (the server being
    started) and ``own_server_names`` (the user's own server pods -> their server names);
    ``pinned_holders`` are the pods whose hold on the home pinned the pod to ``pinned_node``.

    ``pod`` is the pod as the pod reflector holds it (``spec.nodeName``, ``spec.schedulerName``,
    ``status.nominatedNodeName``, ``status.conditions``), None while unknown; ``created`` when
    its create request succeeded.  A pod nominated to its node waits on the preemption for
    ``preemption_grace_seconds``; a pod no scheduler looked at fails after
    ``unscheduled_timeout_seconds`` (0 or less: never).

    Fail-at-once rules come first (pinned and unschedulable, autoscaler refusal, Multi-Attach,
    invalid image), then the grace rules (unschedulable, image pull), then progress.
    """
    now = aware(now)
    ordered = normalise(events)

    nominated = ((pod or {}).get("status") or {}).get("nominatedNodeName") or None
    scheduling = scheduling_verdict(
        ordered,
        pinned_node,
        now,
        unschedulable_grace_seconds,
        wants_gpu,
        nominated=nominated,
        preemption_grace=preemption_grace_seconds,
    ) or unscheduled_verdict(ordered, pod, created, now, unscheduled_timeout_seconds)
    attach = attach_verdict(ordered, own_servers, servers, now, detach_grace_seconds)
    images = image_verdict(ordered, now, image_pull_grace_seconds)

    failures = [v for v in (scheduling, attach, images) if v and v.action == FAIL]
    if failures:
        verdict = min(failures, key=lambda v: EVENT_REASON_CODES.index(v.code))
        if server_name is None:
            return verdict
        found = event_way_out(
            verdict, start=server_name, own=own_server_names or {}, pinned_holders=pinned_holders
        )
        return replace(verdict, way_out=found) if found is not None else verdict
    return scheduling or images or attach or _progress(ordered)


def event_way_out(
    verdict: EventVerdict,
    *,
    start: str,
    own: Mapping[str, str],
    pinned_holders: Sequence[str] = (),
) -> WayOut | None:
    """The way out of a failing verdict whose cause is the user's own servers holding the home
    (``wayout.stop_every_holder``): a Multi-Attach whose every holder is one of ``own`` (pod
    name -> server name); a pinned pod the pinned node cannot take, pinned by ``pinned_holders``
    all of ``own``, unless a reason is one that stopping servers cannot change (the volume's
    own node affinity).  None otherwise."""
    if verdict.action != FAIL:
        return None
    if verdict.code == MULTI_ATTACH:
        return stop_every_holder(verdict.holders, own, start=start, others=verdict.others)
    if verdict.code == UNSCHEDULABLE_PINNED:
        if any(stopping_helps(f.cause) == UNRESOLVABLE for f in verdict.fragments):
            return None
        return stop_every_holder(pinned_holders, own, start=start)
    return None


def told_in_words(event: Obj) -> bool:
    """Whether the spawn page shows the verdict's words instead of this event's raw message."""
    return event.get("reason") in PLAIN_LANGUAGE_EVENTS
