"""What a pending pod's events decide, as codes and facts: the verdict's codes (fail or wait),
a scheduler's reason :class:`Fragment`, the :class:`EventVerdict` and the event reasons the rules
read.  (pure)

The rules are in :mod:`nebari_colocate.events` (and the readers it combines); the words are
:func:`nebari_colocate.messages.event_text`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from .wayout import WayOut

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
#: the rules of :mod:`nebari_colocate.events` read).
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
