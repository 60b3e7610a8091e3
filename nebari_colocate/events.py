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
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from . import fit
from .config import (
    DEFAULT_DETACH_GRACE_SECONDS,
    DEFAULT_IMAGE_PULL_GRACE_SECONDS,
    DEFAULT_UNSCHEDULABLE_GRACE_SECONDS,
    DEFAULT_UNSCHEDULED_TIMEOUT_SECONDS,
    PREEMPTION_GRACE_SECONDS,
)
from .objects import GPU_RESOURCES, Obj
from .placement import stopping_helps
from .wayout import UNRESOLVABLE, WayOut, stop_every_holder

WAIT, FAIL = "wait", "fail"

#: the scheduler a pod without ``schedulerName`` gets (API defaulting)
DEFAULT_SCHEDULER = "default-scheduler"

UNSCHEDULABLE_PINNED = "unschedulable-pinned"
PREEMPTION_STALLED = "preemption-stalled"
NO_SCHEDULER = "no-scheduler"
NO_SCALE_UP = "no-scale-up"
UNSCHEDULABLE = "unschedulable"
MULTI_ATTACH = "multi-attach"
IMAGE_INVALID = "image-invalid"
IMAGE_PULL = "image-pull"

#: The codes a failing verdict carries, in the order :func:`classify` prefers them when several
#: apply: the fail-at-once rules first, then the grace rules.
EVENT_REASON_CODES = (
    UNSCHEDULABLE_PINNED,
    PREEMPTION_STALLED,
    NO_SCHEDULER,
    NO_SCALE_UP,
    MULTI_ATTACH,
    IMAGE_INVALID,
    UNSCHEDULABLE,
    IMAGE_PULL,
)

# What a waiting verdict waits for.
SCALING_UP = "scaling-up"  # an autoscaler adds a node (or Karpenter nominated one)
NO_NODE_YET = "no-node-yet"  # unschedulable, within the grace
RETRYING_PULL = "retrying-pull"  # the image pull fails, within the grace
PROGRESS = "progress"  # nothing wrong: the latest ordinary event (``event``), if any
PREEMPTING = "preempting"  # the scheduler makes room on ``node`` by evicting lower-priority pods
WAIT_CODES = (SCALING_UP, NO_NODE_YET, RETRYING_PULL, PROGRESS, PREEMPTING)


@dataclass(frozen=True)
class Fragment:
    """One reason of a kube-scheduler FitError or a cluster-autoscaler refusal, read."""

    count: int | None  # nodes the scheduler counted for it; None without one (or not kept)
    cause: str | None  # one of the FRAGMENT_* codes; None for a reason not understood
    text: str  # the fragment as the component wrote it, without its count
    resource: str = ""  # the resource of an ``Insufficient <resource>`` fragment
    #: the node state (``fit.NODE_STATE_*``) of a cordoned fragment, or of a taint fragment
    #: that names a node-state taint (``{node.kubernetes.io/unreachable: }``); "" otherwise
    node_state: str = ""


@dataclass(frozen=True)
class EventVerdict:
    """What the spawner should do now (``action``), why (``code``) and the facts behind it.

    The words for the person are :func:`nebari_colocate.messages.event_text`'s; ``raw`` is for
    the operator log.
    """

    action: str  # WAIT | FAIL
    code: str  # FAIL: one of EVENT_REASON_CODES; WAIT: one of WAIT_CODES
    raw: str = ""  # the raw event message that decided it ("" if none)
    node: str | None = None  # UNSCHEDULABLE_PINNED: the node the pod is pinned to
    fragments: tuple[Fragment, ...] = ()  # the scheduler's or cluster-autoscaler's reasons
    #: UNSCHEDULABLE, IMAGE_PULL, MULTI_ATTACH of a detach under way: the grace that ran out (s)
    grace: float = 0.0
    causes: tuple[str, ...] = ()  # NO_SCALE_UP: KARPENTER_*; IMAGE_*: IMAGE_CAUSES
    requests: tuple[tuple[str, str], ...] = ()  # NO_SCALE_UP: the requests Karpenter quoted
    holders: tuple[str, ...] = ()  # MULTI_ATTACH: pod names parsed from the message
    servers: tuple[str, ...] = ()  # MULTI_ATTACH: the user's own among them, as the user
    #                                knows them ("" the default server), default first
    others: int = 0  # MULTI_ATTACH: the other pods using the volume (counted, never named)
    #: MULTI_ATTACH, of ``others``: other users' servers, pods known not to be servers (a Job's),
    #: and pods in other namespaces; the rest are pods of an unknown kind
    other_servers: int = 0
    not_servers: int = 0
    elsewhere: int = 0
    image: str | None = None  # IMAGE_*, RETRYING_PULL: the image, when the event names it
    gpu: bool = False  # SCALING_UP: the pod asks for a GPU
    event: str = ""  # PROGRESS: the reason of the latest ordinary event ("" if none)
    #: FAIL (MULTI_ATTACH, UNSCHEDULABLE_PINNED): the user's own servers to stop so that this
    #: one can start, when every pod holding the home is one of them (``wayout``); else None
    way_out: WayOut | None = None
    #: the scheduler that spoke (the FailedScheduling's reporting component) or, NO_SCHEDULER,
    #: the one the pod names and nobody runs; "" when unknown
    scheduler: str = ""
    #: PREEMPTING, PREEMPTION_STALLED, and an UNSCHEDULABLE_PINNED whose preemption was given
    #: up: the victims the scheduler's last placement by preemption counted (0: none seen)
    victims: int = 0

    @property
    def reason(self) -> str | None:
        """The reason code of a failing verdict; None while waiting."""
        return self.code if self.action == FAIL else None


# --- upstream message formats (docs/troubleshooting.md) --------------------------------------

# kube-scheduler FitError: "0/N nodes are available: <count> <reason>, ... ." then an optional
# " preemption: ..." (or, with DRA, " no new claims to deallocate, preemption: ...").
_FIT_ERROR = re.compile(r"0/(\d+) nodes are available:?\s*")
# The per-node histogram ends at the first period followed by a space or the end; fragments hold
# no such period (taint values and resource names cannot contain spaces).
_HISTOGRAM_END = re.compile(r"\.(?:\s|$)")
# Fragments are "<count> <reason>" joined by ", "; the older taint fragment itself contains ", "
# ("had taint {k: v}, that the pod didn't tolerate"), so split only before a count.
_FRAGMENT_SPLIT = re.compile(r",\s+(?=\d+\s)")
_COUNTED = re.compile(r"(\d+)\s+(.*)", re.DOTALL)
_INSUFFICIENT = re.compile(r"Insufficient (\S+)")
_TAINT_KEY = re.compile(r"taint \{([^:{}]+):")

# kube-scheduler's DefaultPreemption (framework/preemption, defaultpreemption, v1.37): the
# PostFilter's message after the histogram. A placement found: the victims are being evicted and
# the pod is nominated to the node; while they terminate, the next attempts say "not eligible".
_PREEMPTION_FOUND = re.compile(
    r"preemption: found a potential placement for pod on node (?P<node>[^\s,]+), "
    r"preempting (?P<victims>\d+) victims?"
)
PREEMPTION_TERMINATING = "not eligible due to a terminating pod on the nominated node"

KARPENTER_FAILED = "Failed to schedule pod, "
KARPENTER_NOMINATED = "Pod should schedule on: "
CA_NOT_TRIGGERED = "pod didn't trigger scale-up"  # older: "... (it wouldn't fit if ...): ..."
CA_TRIGGERED = "pod triggered scale-up: "

# kube-controller-manager's attach/detach controller, FailedAttachVolume: "Waiting for detach"
# since kubernetes PR #138837 (v1.37, backported to earlier lines), "Multi-Attach error" before.
MULTI_ATTACH_PREFIXES = ("Waiting for detach", "Multi-Attach error")
_USED_BY = re.compile(
    r"Volume is already used by pod\(s\) (?P<names>.*?)"
    r"(?: and (?P<others>\d+) pod\(s\) in different namespaces)?\s*$",
    re.DOTALL,
)
_USED_ELSEWHERE = re.compile(r"Volume is already used by (?P<others>\d+) pod\(s\) in different")
_VOLUME = re.compile(r'for volume "([^"]+)"')

PULL_FAILED_PREFIX = "Failed to pull image"
PULL_BACKOFF_PREFIX = "Back-off pulling image"
DEFAULT_TAG_FAILED_PREFIX = "Failed to apply default image tag"
_IMAGE = re.compile(r'image(?: tag)? "([^"]+)"')


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
_OTHER_NODES = "didn't satisfy plugin(s)"
_FRAGMENT_CAUSES: tuple[tuple[str, str], ...] = (
    ("ReadWriteOncePod", FRAGMENT_SINGLE_POD_VOLUME),
    (_OTHER_NODES, FRAGMENT_PINNED_ELSEWHERE),
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

#: Ordinary events that say how far a start got: the latest is a PROGRESS verdict's ``event``.
PROGRESS_EVENTS = frozenset(
    {
        "Scheduled",
        "SuccessfulAttachVolume",
        "FailedMount",
        "Pulling",
        "Pulled",
        "Created",
        "Started",
    }
)

#: Events whose raw message the spawn page replaces with the verdict's plain words (the events
#: the rules below read).
PLAIN_LANGUAGE_EVENTS = frozenset(
    {
        "FailedScheduling",
        "NotTriggerScaleUp",
        "TriggeredScaleUp",
        "Nominated",
        "FailedAttachVolume",
        "Failed",
        "BackOff",
        "InspectFailed",
        "ErrImageNeverPull",
    }
)

# Why an image cannot be used (IMAGE_INVALID) or downloaded (IMAGE_PULL): the verdict's causes.
IMAGE_NEVER_PULL = "never-pull"  # absent from the node, and the pull policy is Never
IMAGE_BAD_NAME = "bad-name"  # the reference cannot be parsed
PULL_NOT_FOUND = "not-found"  # the registry has no such image
PULL_DENIED = "denied"  # the registry refused access
IMAGE_CAUSES = (IMAGE_NEVER_PULL, IMAGE_BAD_NAME, PULL_NOT_FOUND, PULL_DENIED)

# Events only a bound pod gets (kubelet, attach/detach controller): they end a scheduling episode
# even when the reflector missed the ``Scheduled`` event itself.
_BOUND_REASONS = frozenset(
    {
        "Scheduled",
        "SuccessfulAttachVolume",
        "FailedAttachVolume",
        "FailedMount",
        "Pulling",
        "Pulled",
        "Failed",
        "BackOff",
        "InspectFailed",
        "ErrImageNeverPull",
        "Created",
        "Started",
    }
)


# --- time ------------------------------------------------------------------------------------

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:([Zz])|([+-])(\d{2}):?(\d{2}))?$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _aware(value: datetime) -> datetime:
    # The API speaks UTC; a naive value from a caller means UTC too.
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp (``...Z``, fractional seconds, offsets) or datetime; else None.

    Python 3.10's ``fromisoformat`` rejects ``Z`` and MicroTime's variable fractions, hence this.
    """
    if isinstance(value, datetime):
        return _aware(value)
    if not isinstance(value, str):
        return None
    m = _RFC3339.match(value.strip())
    if not m:
        return None
    year, month, day, hour, minute, second, frac, _z, sign, off_h, off_m = m.groups()
    tz = timezone.utc
    if sign:
        offset = timedelta(hours=int(off_h), minutes=int(off_m))
        tz = timezone(offset if sign == "+" else -offset)
    try:
        return datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int((frac or "0")[:6].ljust(6, "0")),
            tzinfo=tz,
        )
    except ValueError:
        return None


@dataclass(frozen=True)
class _Event:
    reason: str
    message: str
    first: datetime | None  # first occurrence
    last: datetime | None  # latest occurrence
    order: datetime  # sort key: ``last``, or the previous event's key when it has no time
    component: str = ""  # reportingComponent (events.k8s.io) or source.component (core/v1)


def _normalise(events: Sequence[Obj]) -> list[_Event]:
    """Events in time order, tolerating missing fields (see the comments inside)."""
    out: list[_Event] = []
    carried = _EPOCH
    for ev in events:
        series = ev.get("series") or {}
        # Core/v1 events carry first/lastTimestamp; events.k8s.io/v1 ones (kube-scheduler,
        # Karpenter) carry eventTime (the first occurrence) and series.lastObservedTime.
        first_candidates = [parse_time(ev.get("firstTimestamp")), parse_time(ev.get("eventTime"))]
        last_candidates = [
            parse_time(ev.get("lastTimestamp")),
            parse_time(series.get("lastObservedTime")),
            *first_candidates,
        ]
        known_first = [t for t in first_candidates if t]
        known_last = [t for t in last_candidates if t]
        last = max(known_last) if known_last else None
        first = min(known_first) if known_first else last
        # An event without any time keeps its place after its predecessor in the input (the
        # reflector's order), instead of jumping to the start or the end.
        carried = last or carried
        out.append(
            _Event(
                reason=str(ev.get("reason") or ""),
                message=str(ev.get("message") or ""),
                first=first,
                last=last,
                order=carried,
                component=str(
                    ev.get("reportingComponent") or (ev.get("source") or {}).get("component") or ""
                ),
            )
        )
    # sorted() is stable: equal times keep the input order.
    return sorted(out, key=lambda e: e.order)


# --- reading the messages --------------------------------------------------------------------


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


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
    for part in _FRAGMENT_SPLIT.split(body):
        part = part.strip()
        if not part:
            continue
        counted = _COUNTED.match(part)
        if counted:
            pairs.append((int(counted.group(1)), counted.group(2).strip()))
        else:
            pairs.append((None, part))
    return pairs


def _fit_error(message: str) -> tuple[Fragment, ...]:
    return tuple(read_fragment(f, count) for count, f in fit_error_fragments(message) or [])


def _autoscaler_fragments(message: str) -> tuple[Fragment, ...]:
    """Reason fragments of a NotTriggerScaleUp message, counts dropped (they count node groups)."""
    _, _, tail = message.partition(":")
    fragments = []
    for part in _FRAGMENT_SPLIT.split(tail.strip()):
        part = part.strip()
        counted = _COUNTED.match(part)
        fragments.append(counted.group(2) if counted else part)
    return tuple(read_fragment(f) for f in fragments if f)


def _wants_gpu(message: str) -> bool:
    return any(f"Insufficient {r}" in message for r in GPU_RESOURCES)


# --- the rules -------------------------------------------------------------------------------


def _is_fit_error(ev: _Event) -> bool:
    return ev.reason == "FailedScheduling" and bool(_FIT_ERROR.match(ev.message))


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


def _is_karpenter_skip(ev: _Event) -> bool:
    return ev.reason == "FailedScheduling" and (
        ev.message.startswith(KARPENTER_FAILED) and KARPENTER_SKIPS_PINNED in ev.message
    )


def _karpenter_final(ev: _Event) -> tuple[str, ...]:
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


def _is_negative_autoscaler(ev: _Event) -> bool:
    if ev.reason == "NotTriggerScaleUp" or ev.message.startswith(CA_NOT_TRIGGERED):
        return True
    return bool(_karpenter_final(ev))


def _is_positive_autoscaler(ev: _Event) -> bool:
    return (ev.reason == "TriggeredScaleUp" and ev.message.startswith(CA_TRIGGERED)) or (
        ev.reason == "Nominated" and ev.message.startswith(KARPENTER_NOMINATED)
    )


@dataclass
class _Scheduling:
    """The current unscheduled episode: everything since the pod was last seen bound."""

    failures: list[_Event]  # FailedScheduling events (scheduler and non-final Karpenter ones)
    positive: _Event | None = None  # latest TriggeredScaleUp / Nominated
    negative: _Event | None = None  # latest NotTriggerScaleUp / final Karpenter failure
    positive_at: int = -1
    negative_at: int = -1


def _scheduling_episode(events: list[_Event]) -> _Scheduling:
    episode = _Scheduling(failures=[])
    for i, ev in enumerate(events):
        if ev.reason in _BOUND_REASONS:
            # Bound to a node: earlier scheduling trouble is over.
            episode = _Scheduling(failures=[])
        elif _is_karpenter_skip(ev):
            # Karpenter left a pinned pod to the scheduler: no word on whether it can run.
            continue
        elif _is_negative_autoscaler(ev):
            episode.negative, episode.negative_at = ev, i
        elif _is_positive_autoscaler(ev):
            episode.positive, episode.positive_at = ev, i
        elif ev.reason == "FailedScheduling":
            episode.failures.append(ev)
    return episode


def _pinned_verdict(node: str, ev: _Event, victims: int = 0) -> EventVerdict:
    # The fragments about other nodes ("didn't satisfy plugin(s) [NodeAffinity]": excluded by
    # the pin before any filter ran) say nothing about the pinned node, so they are dropped.
    fragments = tuple(f for f in _fit_error(ev.message) if _OTHER_NODES not in f.text)
    return EventVerdict(
        FAIL,
        UNSCHEDULABLE_PINNED,
        ev.message,
        node=node,
        fragments=fragments,
        scheduler=ev.component,
        victims=victims,
    )


def _placement(ev: _Event) -> tuple[str, int] | None:
    """(node, victims) of a FailedScheduling whose preemption found a placement, else None."""
    m = _PREEMPTION_FOUND.search(ev.message)
    return (m.group("node"), int(m.group("victims"))) if m else None


def _preemption(
    fit_errors: list[_Event],
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


def _no_scale_up_verdict(ev: _Event) -> EventVerdict:
    causes = _karpenter_final(ev)
    if causes:
        requests = tuple(karpenter_requests(ev.message).items())
        return EventVerdict(FAIL, NO_SCALE_UP, ev.message, causes=causes, requests=requests)
    return EventVerdict(FAIL, NO_SCALE_UP, ev.message, fragments=_autoscaler_fragments(ev.message))


def _schedule(
    events: list[_Event],
    pinned_node: str | None,
    now: datetime,
    grace: float,
    wants_gpu: bool = False,
    nominated: str | None = None,
    preemption_grace: float = PREEMPTION_GRACE_SECONDS,
) -> EventVerdict | None:
    """The verdict of the scheduling phase, or None when the pod is not stuck there."""
    episode = _scheduling_episode(events)
    fit_errors = [ev for ev in episode.failures if _is_fit_error(ev)]

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
        return _no_scale_up_verdict(episode.negative)
    if episode.positive:
        # A hint only (Karpenter's Nominated names where it expects the pod to go; the
        # scheduler may bind it elsewhere): keep waiting.
        gpu = wants_gpu or any(_wants_gpu(ev.message) for ev in episode.failures)
        return EventVerdict(WAIT, SCALING_UP, episode.positive.message, gpu=gpu)

    if not episode.failures:
        return None
    latest = fit_errors[-1] if fit_errors else episode.failures[-1]
    fragments = _fit_error(latest.message)
    starts = [ev.first for ev in episode.failures if ev.first]
    # grace <= 0 waits for ever (start_timeout still ends it); so does an episode whose start
    # is unknown, rather than fail on a guess.
    if grace > 0 and starts and (now - min(starts)).total_seconds() >= grace:
        return EventVerdict(FAIL, UNSCHEDULABLE, latest.message, fragments=fragments, grace=grace)
    return EventVerdict(WAIT, NO_NODE_YET, latest.message, fragments=fragments)


def _unscheduled(
    events: list[_Event],
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
    if (now - _aware(created)).total_seconds() < timeout:
        return None
    scheduler = str(spec.get("schedulerName") or DEFAULT_SCHEDULER)
    return EventVerdict(FAIL, NO_SCHEDULER, grace=timeout, scheduler=scheduler)


def _multi_attach(
    events: list[_Event],
    own_servers: Mapping[str, str] | None,
    servers: Collection[str] | None = None,
    now: datetime | None = None,
    detach_grace: float = DEFAULT_DETACH_GRACE_SECONDS,
) -> EventVerdict | None:
    """Fail on a Multi-Attach error unless the same volume attached after it.

    A volume that no pod uses any more but that is still attached to another node (the
    controller's "exclusively attached" wording) is being detached: that usually ends in
    seconds (the old node's kubelet unmounts, the controller detaches), so the spawn waits,
    and fails only when it has lasted ``detach_grace`` seconds (an unmount that hangs)."""
    active: dict[str | None, _Event] = {}
    since: dict[str | None, datetime | None] = {}
    for ev in events:
        m = _VOLUME.search(ev.message)
        volume = m.group(1) if m else None
        if ev.reason == "FailedAttachVolume" and ev.message.startswith(MULTI_ATTACH_PREFIXES):
            if volume not in active:
                since[volume] = ev.first or ev.last
            active[volume] = ev
        elif ev.reason == "SuccessfulAttachVolume":
            active.pop(volume, None)
            since.pop(volume, None)
    if not active:
        return None
    volume, ev = list(active.items())[-1]
    names: tuple[str, ...] = ()
    elsewhere = 0
    used_by = _USED_BY.search(ev.message)
    if used_by:
        names = used_by_names(ev.message)
        elsewhere = int(used_by.group("others") or 0)
    else:
        found = _USED_ELSEWHERE.search(ev.message)
        elsewhere = int(found.group("others")) if found else 0
        if not found:
            # no pod holds it: a detach under way
            start = since.get(volume)
            lasted = (now - start).total_seconds() if now is not None and start else 0.0
            if detach_grace <= 0 or lasted < detach_grace:
                return EventVerdict(WAIT, PROGRESS, ev.message, event=ev.reason)
    own = own_servers or {}
    # Only the user's own servers are named; any other pod is only counted.
    mine = sorted({own[n] for n in names if n in own}, key=lambda s: (s != "", s))
    strangers = [n for n in names if n not in own]
    other_servers = sum(1 for n in strangers if servers is not None and n in servers)
    not_servers = len(strangers) - other_servers if servers is not None else 0
    return EventVerdict(
        FAIL,
        MULTI_ATTACH,
        ev.message,
        holders=names,
        servers=tuple(mine),
        others=elsewhere + len(strangers),
        other_servers=other_servers,
        not_servers=not_servers,
        grace=0.0 if names or elsewhere else detach_grace,
        elsewhere=elsewhere,
    )


def used_by_names(message: str) -> tuple[str, ...]:
    """The pod names an attach/detach controller message lists ("Volume is already used by
    pod(s) a, b"), in its order; () for other messages."""
    used_by = _USED_BY.search(message)
    if not used_by:
        return ()
    return tuple(n.strip() for n in used_by.group("names").split(",") if n.strip())


def _image_name(message: str) -> str | None:
    m = _IMAGE.search(message)
    return m.group(1) if m else None


def _is_invalid_image(ev: _Event) -> bool:
    if ev.reason == "ErrImageNeverPull":
        return True
    if ev.reason == "InspectFailed" and ev.message.startswith(DEFAULT_TAG_FAILED_PREFIX):
        return True
    return ev.reason in ("Failed", "InspectFailed") and (
        "InvalidImageName" in ev.message or "ErrImageNeverPull" in ev.message
    )


def _is_pull_failure(ev: _Event) -> bool:
    if ev.reason == "BackOff":
        # BackOff also means CrashLoopBackOff ("Back-off restarting failed container").
        return ev.message.startswith(PULL_BACKOFF_PREFIX)
    return ev.reason == "Failed" and (
        ev.message.startswith(PULL_FAILED_PREFIX)
        or "ErrImagePull" in ev.message
        or "ImagePullBackOff" in ev.message
    )


def _pull_causes(raw: str) -> tuple[str, ...]:
    """Why the registry would not give the image, when its error says so."""
    lowered = raw.lower()
    if "not found" in lowered or "manifest unknown" in lowered:
        return (PULL_NOT_FOUND,)
    if any(w in lowered for w in ("unauthorized", "denied", "forbidden", "401", "403")):
        return (PULL_DENIED,)
    return ()


def _images(events: list[_Event], now: datetime, grace: float) -> EventVerdict | None:
    # Per image: when it started failing (since it last pulled), and the message that best says
    # why: the latest "Failed to pull image" (it carries the registry's error), else the latest.
    # Image-less messages ("Error: ErrImagePull") go under None, which any later pull clears.
    troubles: dict[str | None, tuple[datetime | None, _Event]] = {}
    for ev in events:
        image = _image_name(ev.message)
        if _is_invalid_image(ev):
            never = ev.reason == "ErrImageNeverPull" or "ErrImageNeverPull" in ev.message
            cause = IMAGE_NEVER_PULL if never else IMAGE_BAD_NAME
            return EventVerdict(FAIL, IMAGE_INVALID, ev.message, causes=(cause,), image=image)
        if _is_pull_failure(ev):
            previous = troubles.get(image)
            starts = [t for t in (previous[0] if previous else None, ev.first) if t]
            telling = ev
            if (
                previous
                and previous[1].message.startswith(PULL_FAILED_PREFIX)
                and not ev.message.startswith(PULL_FAILED_PREFIX)
            ):
                telling = previous[1]
            troubles[image] = (min(starts) if starts else None, telling)
        elif ev.reason == "Pulled":
            troubles.pop(image, None)
            troubles.pop(None, None)
    if not troubles:
        return None
    # Prefer the image that has been failing longest; named images over image-less messages.
    image, (start, ev) = min(
        troubles.items(),
        key=lambda kv: (kv[0] is None, kv[1][0] or datetime.max.replace(tzinfo=timezone.utc)),
    )
    if grace > 0 and start and (now - start).total_seconds() >= grace:
        causes = _pull_causes(ev.message)
        return EventVerdict(FAIL, IMAGE_PULL, ev.message, grace=grace, causes=causes, image=image)
    return EventVerdict(WAIT, RETRYING_PULL, ev.message, image=image)


def _progress(events: list[_Event]) -> EventVerdict:
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
    now = _aware(now)
    ordered = _normalise(events)

    nominated = ((pod or {}).get("status") or {}).get("nominatedNodeName") or None
    scheduling = _schedule(
        ordered,
        pinned_node,
        now,
        unschedulable_grace_seconds,
        wants_gpu,
        nominated=nominated,
        preemption_grace=preemption_grace_seconds,
    ) or _unscheduled(ordered, pod, created, now, unscheduled_timeout_seconds)
    attach = _multi_attach(ordered, own_servers, servers, now, detach_grace_seconds)
    images = _images(ordered, now, image_pull_grace_seconds)

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
