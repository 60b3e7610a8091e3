"""Classify a pending pod's events: keep waiting, or fail the spawn now.  (pure)

While ``KubeSpawner.start()`` waits for the pod to run, the spawner passes the pod's events (raw
camelCase dicts from KubeSpawner's event reflector) to :func:`classify`.  Some events prove the
spawn can never succeed, and waiting for ``start_timeout`` (300 s in zero-to-jupyterhub) only
hides the reason from the person on the spawn page:

- ``unschedulable-pinned``: the kube-scheduler cannot place a pod that is pinned to the node
  holding its volume.  No autoscaler can help: a new node never holds the volume.
- ``no-scale-up``: the scheduler cannot place the pod and the cluster autoscaler
  (``NotTriggerScaleUp``) or Karpenter (``Failed to schedule pod, ...``) will not add a node.
  Karpenter gives one reason per NodePool; each is read (:func:`karpenter_reasons`) and the
  verdict carries their cause codes, so the words name the cause that matters (the co-location,
  not the taint of a pool that was never meant for this server).
- ``multi-attach``: the attach/detach controller refused to attach the volume, which another pod
  uses on another node (``Waiting for detach …`` since Kubernetes 1.37, ``Multi-Attach error …``
  before; both occur in the field).
- ``image-invalid``: the image name cannot be parsed, or it is absent with pull policy ``Never``.
- ``unschedulable``: the scheduler cannot place the pod, no autoscaler spoke, and nothing changed
  for ``unschedulable_grace_seconds``.
- ``image-pull``: the image has failed to download for ``image_pull_grace_seconds``.

Messages are matched on the stable prefixes and fragments listed in DESIGN section 9 (taken from
the upstream sources); the raw message is kept for the operator log.  Everything else waits, with
plain progress text where there is something to say.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from . import messages
from .messages import server_label
from .objects import GPU_RESOURCES

WAIT, FAIL = "wait", "fail"

UNSCHEDULABLE_PINNED = "unschedulable-pinned"
NO_SCALE_UP = "no-scale-up"
UNSCHEDULABLE = "unschedulable"
MULTI_ATTACH = "multi-attach"
IMAGE_INVALID = "image-invalid"
IMAGE_PULL = "image-pull"

#: The codes a failing verdict carries, in the order :func:`classify` prefers them when several
#: apply: the fail-at-once rules first, then the grace rules.
EVENT_REASON_CODES = (
    UNSCHEDULABLE_PINNED,
    NO_SCALE_UP,
    MULTI_ATTACH,
    IMAGE_INVALID,
    UNSCHEDULABLE,
    IMAGE_PULL,
)


@dataclass(frozen=True)
class EventVerdict:
    """What the spawner should do now, and the words for the person and the operator."""

    action: str  # "wait" | "fail"
    reason: str | None  # one of EVENT_REASON_CODES when failing; None when waiting
    user_message: str  # spawn-page text (fail) or progress text (wait); "" if nothing to say
    raw: str  # the raw event message that decided it ("" if none), for the operator log
    holders: tuple[str, ...] = ()  # pod names parsed from a Multi-Attach message
    causes: tuple[str, ...] = ()  # Karpenter cause codes (KARPENTER_*) of a no-scale-up verdict


# --- upstream message formats (DESIGN section 9) ---------------------------------------------

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

_RESOURCE_WORDS = {
    "cpu": "CPU",
    "memory": "memory",
    "ephemeral-storage": "local disk",
    "nvidia.com/gpu": "GPUs",
    "amd.com/gpu": "GPUs",
}

# Scheduler (and cluster-autoscaler) reason fragments -> words; the first match wins, so the more
# specific fragments come first.  Anything unknown is shown as the scheduler wrote it.
_FRAGMENT_WORDS: tuple[tuple[str, str], ...] = (
    ("ReadWriteOncePod", "its volume allows a single pod, and another pod uses it"),
    ("didn't satisfy plugin(s)", "ruled out by a pin to one node"),
    ("didn't match pod anti-affinity rules", "kept apart from other pods (anti-affinity)"),
    ("didn't match pod affinity rules", "not the node your other servers run on"),
    ("didn't match Pod's node affinity/selector", "not the kind of node this server asks for"),
    ("untolerated taint", "reserved by a taint this server does not tolerate"),
    ("that the pod didn't tolerate", "reserved by a taint this server does not tolerate"),
    ("were unschedulable", "cordoned (closed to new servers)"),
    ("Too many pods", "already running as many pods as it may"),
    ("PersistentVolume's node affinity", "unable to reach the storage volume"),
    ("volume node affinity conflict", "unable to reach the storage volume"),
    ("didn't have free ports", "the port this server needs is taken"),
    ("topology spread constraints", "would break a spread constraint"),
    ("exceed max volume count", "no room for more volumes"),
    ("unbound immediate PersistentVolumeClaims", "its storage volume is not ready yet"),
    # cluster-autoscaler NotTriggerScaleUp fragments (counts there are node groups)
    ("max node group size reached", "the node groups that fit are at their maximum size"),
    ("in backoff after failed scale-up", "a recent attempt to add such a node failed"),
    ("limit reached", "the cluster has reached its size limit"),
    ("not ready for scale-up", "the node group is not ready to grow"),
)

# Karpenter 1.15 "Failed to schedule pod, <why>": <why> joins one reason per NodePool with "; "
# (go.uber.org/multierr). Each reason -> a cause code; the first needle found wins. Every cause
# listed is one no retry changes: Karpenter has simulated every NodePool and none can serve.
KARPENTER_SEPARATOR = "; "
KARPENTER_COLOCATION = "colocation"  # the pod's required pod affinity: no new node holds them
KARPENTER_ANTI_AFFINITY = "anti-affinity"
KARPENTER_SPREAD = "topology-spread"
KARPENTER_LIMITS = "limits"
KARPENTER_NO_INSTANCE_TYPE = "no-instance-type"
KARPENTER_REQUIREMENTS = "requirements"
KARPENTER_TAINT = "taint"
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

# Progress text for ordinary events (the spawner shows it while waiting).
_PROGRESS = {
    "Scheduled": "Assigned to a node",
    "SuccessfulAttachVolume": "Storage volume attached",
    "FailedMount": "Waiting for the storage volume to be mounted",
    "Pulling": "Downloading the server image",
    "Pulled": "Server image ready",
    "Created": "Server container created",
    "Started": "Server container started",
}

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


def _normalise(events: Sequence[Mapping]) -> list[_Event]:
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
            )
        )
    # sorted() is stable: equal times keep the input order.
    return sorted(out, key=lambda e: e.order)


# --- text helpers ----------------------------------------------------------------------------


def _join(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def fragment_words(fragment: str) -> str:
    """Plain words for one scheduler or cluster-autoscaler reason fragment (without its count)."""
    m = _INSUFFICIENT.search(fragment)
    if m:
        resource = m.group(1)
        return f"not enough free {_RESOURCE_WORDS.get(resource, resource)}"
    for needle, words in _FRAGMENT_WORDS:
        if needle in fragment:
            return words
    return fragment.strip()


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


def _autoscaler_fragments(message: str) -> list[str]:
    """Reason fragments of a NotTriggerScaleUp message, counts dropped (they count node groups)."""
    _, _, tail = message.partition(":")
    fragments = []
    for part in _FRAGMENT_SPLIT.split(tail.strip()):
        part = part.strip()
        counted = _COUNTED.match(part)
        fragments.append(counted.group(2) if counted else part)
    return [f for f in fragments if f]


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


def _pinned_verdict(node: str, ev: _Event) -> EventVerdict:
    # The fragments about other nodes ("didn't satisfy plugin(s) [NodeAffinity]": excluded by
    # the pin before any filter ran) say nothing about the pinned node, so they are dropped.
    fragments = fit_error_fragments(ev.message) or []
    words = _unique(
        [fragment_words(f) for _, f in fragments if "didn't satisfy plugin(s)" not in f]
    )
    why = "; ".join(words) or "the scheduler found no room there"
    text = (
        f"This server cannot start on node {node}, where your storage volume is attached: "
        f"{why}. A new node cannot help, because the volume can be attached to only one node "
        "at a time. Stop your other servers that use the volume, or choose a profile that fits "
        f"on node {node}."
    )
    return EventVerdict(FAIL, UNSCHEDULABLE_PINNED, text, ev.message)


def _no_scale_up_verdict(ev: _Event) -> EventVerdict:
    causes = _karpenter_final(ev)
    if causes:
        text = messages.karpenter_refusal_text(causes, karpenter_requests(ev.message))
        return EventVerdict(FAIL, NO_SCALE_UP, text, ev.message, causes=causes)
    words = _unique([fragment_words(f) for f in _autoscaler_fragments(ev.message)])
    return EventVerdict(FAIL, NO_SCALE_UP, messages.no_scale_up_text(words), ev.message)


def _scheduler_summary(ev: _Event) -> str:
    fragments = fit_error_fragments(ev.message)
    if fragments is None:
        return ""
    parts = []
    for count, fragment in fragments:
        words = fragment_words(fragment)
        parts.append(f"{_plural(count, 'node')}: {words}" if count is not None else words)
    return "; ".join(_unique(parts))


def _unschedulable_verdict(ev: _Event, grace: float) -> EventVerdict:
    summary = _scheduler_summary(ev)
    why = f" ({summary})" if summary else ""
    text = (
        f"No node can run this server{why}, and none became free within {grace:g} seconds. "
        "Choose a smaller profile or try again later; if this keeps happening, tell your "
        "administrator."
    )
    return EventVerdict(FAIL, UNSCHEDULABLE, text, ev.message)


def _schedule(
    events: list[_Event],
    pinned_node: str | None,
    now: datetime,
    grace: float,
    wants_gpu: bool = False,
) -> EventVerdict | None:
    """The verdict of the scheduling phase, or None when the pod is not stuck there."""
    episode = _scheduling_episode(events)
    fit_errors = [ev for ev in episode.failures if _is_fit_error(ev)]

    if pinned_node and fit_errors:
        return _pinned_verdict(pinned_node, fit_errors[-1])

    # The latest autoscaler word decides: a scale-up stays in progress while the scheduler keeps
    # reporting FailedScheduling (it does until the new node is Ready) unless the autoscaler
    # later says no.
    if episode.negative and episode.negative_at > episode.positive_at:
        return _no_scale_up_verdict(episode.negative)
    if episode.positive:
        # A hint only (Karpenter's Nominated names where it expects the pod to go; the
        # scheduler may bind it elsewhere): keep waiting.
        gpu = wants_gpu or any(_wants_gpu(ev.message) for ev in episode.failures)
        text = messages.scale_up_text(gpu=gpu)
        return EventVerdict(WAIT, None, text, episode.positive.message)

    if not episode.failures:
        return None
    latest = fit_errors[-1] if fit_errors else episode.failures[-1]
    starts = [ev.first for ev in episode.failures if ev.first]
    # grace <= 0 waits for ever (start_timeout still ends it); so does an episode whose start
    # is unknown, rather than fail on a guess.
    if grace > 0 and starts and (now - min(starts)).total_seconds() >= grace:
        return _unschedulable_verdict(latest, grace)
    summary = _scheduler_summary(latest)
    text = "Waiting for a node that can run this server"
    if summary:
        text += f" ({summary})"
    return EventVerdict(WAIT, None, text, latest.message)


def _multi_attach(
    events: list[_Event], own_servers: Mapping[str, str] | None
) -> EventVerdict | None:
    """Fail on a Multi-Attach error unless the same volume attached after it."""
    active: dict[str | None, _Event] = {}
    for ev in events:
        m = _VOLUME.search(ev.message)
        volume = m.group(1) if m else None
        if ev.reason == "FailedAttachVolume" and ev.message.startswith(MULTI_ATTACH_PREFIXES):
            active[volume] = ev
        elif ev.reason == "SuccessfulAttachVolume":
            active.pop(volume, None)
    if not active:
        return None
    ev = list(active.values())[-1]
    names: tuple[str, ...] = ()
    others = 0
    used_by = _USED_BY.search(ev.message)
    if used_by:
        names = tuple(n.strip() for n in used_by.group("names").split(",") if n.strip())
        others = int(used_by.group("others") or 0)
    else:
        elsewhere = _USED_ELSEWHERE.search(ev.message)
        others = int(elsewhere.group("others")) if elsewhere else 0
    own = own_servers or {}
    # Only the user's own servers are named; any other pod is only counted.
    mine = sorted({own[n] for n in names if n in own}, key=lambda s: (s != "", s))
    others += sum(1 for n in names if n not in own)
    users = [server_label(s) for s in mine]
    if others:
        users.append(f"{others} other server{'s' if others != 1 else ''}")
    if users:
        # Advise stopping only what the user can stop: their own servers.
        if mine:
            advice = f"Stop {_join([server_label(s) for s in mine])}, then start this one again."
        else:
            advice = "Try again once it is free, or ask your administrator."
        text = (
            "This server cannot start: its storage volume is attached to another node, where it "
            f"is in use by {_join(users)}. The volume can be attached to only one node at a "
            f"time. {advice}"
        )
    else:
        text = (
            "This server cannot start: its storage volume is still attached to another node "
            "(a server that used it may still be shutting down). Try again in a minute, or stop "
            "your other servers first."
        )
    return EventVerdict(FAIL, MULTI_ATTACH, text, ev.message, names)


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


def _pull_hint(raw: str) -> str:
    lowered = raw.lower()
    if "not found" in lowered or "manifest unknown" in lowered:
        return " (the image was not found)"
    if any(w in lowered for w in ("unauthorized", "denied", "forbidden", "401", "403")):
        return " (access to the image was denied)"
    return ""


def _images(events: list[_Event], now: datetime, grace: float) -> EventVerdict | None:
    # Per image: when it started failing (since it last pulled), and the message that best says
    # why: the latest "Failed to pull image" (it carries the registry's error), else the latest.
    # Image-less messages ("Error: ErrImagePull") go under None, which any later pull clears.
    troubles: dict[str | None, tuple[datetime | None, _Event]] = {}
    for ev in events:
        image = _image_name(ev.message)
        if _is_invalid_image(ev):
            shown = f' "{image}"' if image else ""
            if ev.reason == "ErrImageNeverPull" or "ErrImageNeverPull" in ev.message:
                why = (
                    f"its image{shown} is not on the node, and the image pull policy forbids "
                    "downloading it"
                )
            else:
                why = f"its image name{shown} is not valid"
            text = (
                f"This server cannot start: {why}. Choose a different profile, or ask your "
                "administrator."
            )
            return EventVerdict(FAIL, IMAGE_INVALID, text, ev.message)
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
    shown = f' "{image}"' if image else ""
    if grace > 0 and start and (now - start).total_seconds() >= grace:
        text = (
            f"This server cannot start: its image{shown} could not be downloaded for "
            f"{grace:g} seconds{_pull_hint(ev.message)}. Choose a different profile, or ask "
            "your administrator."
        )
        return EventVerdict(FAIL, IMAGE_PULL, text, ev.message)
    return EventVerdict(WAIT, None, f"Retrying the download of image{shown}", ev.message)


def _progress(events: list[_Event]) -> EventVerdict:
    for ev in reversed(events):
        text = _PROGRESS.get(ev.reason)
        if text:
            return EventVerdict(WAIT, None, text, ev.message)
    return EventVerdict(WAIT, None, "", "")


def classify(
    events: Sequence[Mapping],
    *,
    pinned_node: str | None,
    now: datetime,
    unschedulable_grace_seconds: float = 60,
    image_pull_grace_seconds: float = 120,
    own_servers: Mapping[str, str] | None = None,
    wants_gpu: bool = False,
) -> EventVerdict:
    """Decide from one pod's events whether its spawn should keep waiting or fail now.

    ``events`` are raw camelCase Event dicts of this pod, in any order; missing fields are
    tolerated.  ``pinned_node`` is the node the placement decision pinned the pod to (None when
    not pinned).  ``now`` is the current time (naive means UTC).  A grace of 0 (or less) disables
    the rule it belongs to: the spawn then waits for ``start_timeout``.  ``own_servers`` maps the
    user's own pod names to server names (``""`` is the default server); only those are named in
    the text, other pods are counted.  ``wants_gpu``: the pod requests a GPU (the scheduler's
    message may not say so when another filter rejected every node first).

    Fail-at-once rules come first (pinned and unschedulable, autoscaler refusal, Multi-Attach,
    invalid image), then the grace rules (unschedulable, image pull), then progress text.
    """
    now = _aware(now)
    ordered = _normalise(events)

    scheduling = _schedule(ordered, pinned_node, now, unschedulable_grace_seconds, wants_gpu)
    attach = _multi_attach(ordered, own_servers)
    images = _images(ordered, now, image_pull_grace_seconds)

    failures = [v for v in (scheduling, attach, images) if v and v.action == FAIL]
    if failures:
        return min(failures, key=lambda v: EVENT_REASON_CODES.index(v.reason or ""))
    return scheduling or images or _progress(ordered)
