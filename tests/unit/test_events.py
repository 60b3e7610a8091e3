"""classify(): which pod events end a spawn at once, which after a grace period, which wait.

One table per rule, each row a sentence: the events, the verdict's code and facts, and words the
person reads (``messages.event_text``).  Every message below is in the exact format the upstream
component emits (docs/troubleshooting.md, "The Kubernetes event messages"): kube-scheduler
FitError, cluster-autoscaler and Karpenter pod events, the attach/detach controller's
Multi-Attach error and the kubelet's image events.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

import pytest

from nebari_colocate import messages
from nebari_colocate.events import (
    EVENT_REASON_CODES,
    FAIL,
    IMAGE_INVALID,
    IMAGE_PULL,
    MULTI_ATTACH,
    NO_NODE_YET,
    NO_SCALE_UP,
    NO_SCHEDULER,
    PROGRESS,
    PROGRESS_EVENTS,
    RETRYING_PULL,
    SCALING_UP,
    UNSCHEDULABLE,
    UNSCHEDULABLE_PINNED,
    WAIT,
    WAIT_CODES,
    EventVerdict,
    classify,
    fit_error_fragments,
    karpenter_reasons,
    parse_time,
)

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def _rfc3339(seconds: float, *, micro: bool = False) -> str:
    t = T0 + timedelta(seconds=seconds)
    if micro:
        return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def core(reason, message, at, *, last=None, count=1, component="default-scheduler", kind="Normal"):
    """A core/v1 Event as the event reflector holds it (first/lastTimestamp, whole seconds)."""
    return {
        "metadata": {"name": f"jupyter-alice.{reason.lower()}", "namespace": "dev"},
        "involvedObject": {"kind": "Pod", "namespace": "dev", "name": "jupyter-alice"},
        "reason": reason,
        "message": message,
        "type": kind,
        "firstTimestamp": _rfc3339(at),
        "lastTimestamp": _rfc3339(at if last is None else last),
        "eventTime": None,
        "count": count,
        "source": {"component": component},
        "reportingComponent": "",
    }


def series(reason, message, at, *, last=None, component="default-scheduler"):
    """An events.k8s.io/v1 Event seen through core/v1: eventTime (MicroTime), no first/last."""
    event = {
        "involvedObject": {"kind": "Pod", "namespace": "dev", "name": "jupyter-alice"},
        "reason": reason,
        "message": message,
        "type": "Warning",
        "firstTimestamp": None,
        "lastTimestamp": None,
        "eventTime": _rfc3339(at, micro=True),
        "reportingComponent": component,
        "source": {},
    }
    if last is not None:
        event["series"] = {"count": 2, "lastObservedTime": _rfc3339(last, micro=True)}
    return event


def bare(reason, message):
    """An event with no timestamps at all."""
    return {"reason": reason, "message": message}


# --- real messages -----------------------------------------------------------------------------

# kube-scheduler FitError ("0/N nodes are available: <histogram>. preemption: ...")
GPU_PROFILE_ON_CPU_NODES = (
    "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node "
    "affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
    "scheduling."
)
PINNED_NODE_CORDONED = (
    "0/2 nodes are available: 1 node(s) didn't satisfy plugin(s) [NodeAffinity], 1 node(s) were "
    "unschedulable. preemption: 0/2 nodes are available: 2 Preemption is not helpful for "
    "scheduling."
)
PINNED_NODE_FULL = (
    "0/4 nodes are available: 1 Insufficient cpu, 1 Too many pods, 3 node(s) didn't satisfy "
    "plugin(s) [NodeAffinity]. preemption: 0/4 nodes are available: 1 No preemption victims "
    "found for incoming pod, 3 Preemption is not helpful for scheduling."
)
PINNED_NODE_TAINTED = (
    "0/2 nodes are available: 1 node(s) didn't satisfy plugin(s) [NodeAffinity], 1 node(s) had "
    "untolerated taint {nvidia.com/gpu: present}. preemption: 0/2 nodes are available: 2 "
    "Preemption is not helpful for scheduling."
)
OLDER_TAINT_WORDING = (
    "0/1 nodes are available: 1 node(s) had taint {dedicated: gpu}, that the pod didn't tolerate."
)
PINNED_NODE_VOLUME_AFFINITY = (
    "0/3 nodes are available: 1 node(s) didn't match PersistentVolume's node affinity, 2 node(s) "
    "didn't satisfy plugin(s) [NodeAffinity]. preemption: 0/3 nodes are available: 3 Preemption "
    "is not helpful for scheduling."
)
RWOP_REASON = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
)
RWOP_CONFLICT = (
    "0/3 nodes are available: node has pod using PersistentVolumeClaim with the same name and "
    "ReadWriteOncePod access mode. preemption: 0/3 nodes are available: 3 Preemption is not "
    "helpful for scheduling."
)
CPU_FULL = (
    "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No "
    "preemption victims found for incoming pod."
)
NODE_BOOTING = (
    "0/4 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
    "3 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 4 Preemption is not "
    "helpful for scheduling."
)

# cluster-autoscaler
CA_REFUSED = (
    "pod didn't trigger scale-up: 2 node(s) didn't match Pod's node affinity/selector, 1 max node "
    "group size reached"
)
CA_REFUSED_OLDER = (
    "pod didn't trigger scale-up (it wouldn't fit if a new node is added): 1 Insufficient "
    "nvidia.com/gpu"
)
CA_BACKOFF = "pod didn't trigger scale-up: 1 in backoff after failed scale-up"
CA_TRIGGERED = "pod triggered scale-up: [{eks-gpu-ng 0->1 (max: 4)}]"

# Karpenter
KARPENTER_REQUIREMENTS = (
    "Failed to schedule pod, incompatible requirements, key nvidia.com/gpu, nvidia.com/gpu In "
    "[true] not in nvidia.com/gpu DoesNotExist"
)
KARPENTER_TAINT = (
    'Failed to schedule pod, incompatible with nodepool "gpu", daemonset overhead={"cpu":"150m",'
    '"pods":"4"}, did not tolerate taint (taint=nvidia.com/gpu=true:NoSchedule)'
)
KARPENTER_LIMITS = (
    "Failed to schedule pod, all available instance types exceed limits for nodepool (NodePool=gpu)"
)
KARPENTER_NO_TYPE = (
    'Failed to schedule pod, incompatible with nodepool "gpu", daemonset overhead={"cpu":"150m",'
    '"pods":"4"}, no instance type met the scheduling requirements or had enough resources, '
    'requirements=nvidia.com/gpu In [true], resources={"cpu":"64","nvidia.com/gpu":"16"}'
)
# A Karpenter failure this module does not treat as final.
KARPENTER_OTHER = 'Failed to schedule pod, nodepool "gpu" not ready'
KARPENTER_NOMINATED = "Pod should schedule on: nodeclaim/gpu-abc12"

# attach/detach controller
MULTI_ATTACH_MIXED = (
    'Multi-Attach error for volume "pvc-1234" Volume is already used by pod(s) '
    "jupyter-alice--app, jupyter-bob"
)
MULTI_ATTACH_OTHER_NAMESPACES = (
    'Multi-Attach error for volume "pvc-1234" Volume is already used by pod(s) jupyter-alice '
    "and 1 pod(s) in different namespaces"
)
MULTI_ATTACH_ONLY_OTHER_NAMESPACES = (
    'Multi-Attach error for volume "pvc-1234" Volume is already used by 2 pod(s) in different '
    "namespaces"
)
MULTI_ATTACH_EXCLUSIVE = (
    'Multi-Attach error for volume "pvc-1234" Volume is already exclusively attached to one node '
    "and can't be attached to another"
)
# kube-controller-manager v1.37.2, as tests/cluster/test_real_attach.py observes it (the wording of
# kubernetes PR #138837): a pod of the user's on another node; no pod left, the volume not detached.
WAITING_FOR_DETACH_USED = (
    'Waiting for detach for volume "pv-t-2668e3a0-claim-alice" Volume is already used by pod(s) '
    "jupyter-alice--pandas-app"
)
WAITING_FOR_DETACH_MIXED = (
    'Waiting for detach for volume "pvc-1234" Volume is already used by pod(s) '
    "jupyter-alice--app, jupyter-bob"
)
WAITING_FOR_DETACH_EXCLUSIVE = (
    'Waiting for detach for volume "pv-t-a6193039-claim-alice" Volume is already exclusively '
    "attached to one node, waiting on detach before it can be attached to another node"
)
ATTACHED_1234 = 'AttachVolume.Attach succeeded for volume "pvc-1234"'
ATTACHED_5678 = 'AttachVolume.Attach succeeded for volume "pvc-5678"'

# kubelet
IMAGE = "quay.io/nebari/lab:2024.1"
PULL_FAILED = (
    f'Failed to pull image "{IMAGE}": rpc error: code = NotFound desc = failed to pull and unpack '
    f'image "{IMAGE}": failed to resolve reference "{IMAGE}": {IMAGE}: not found'
)
ERR_IMAGE_PULL = "Error: ErrImagePull"
PULL_BACKOFF = f'Back-off pulling image "{IMAGE}"'
ERR_PULL_BACKOFF = "Error: ImagePullBackOff"
INVALID_IMAGE_NAME = "Error: InvalidImageName"
DEFAULT_TAG_FAILED = (
    'Failed to apply default image tag "quay.io/nebari/Lab:2024.1": couldn\'t parse image '
    'reference "quay.io/nebari/Lab:2024.1": invalid reference format: repository name must be '
    "lowercase"
)
NEVER_PULL = f'Container image "{IMAGE}" is not present with pull policy of Never'
ERR_NEVER_PULL = "Error: ErrImageNeverPull"
PULLING = f'Pulling image "{IMAGE}"'
PULLED = f'Successfully pulled image "{IMAGE}" in 1m2.5s (1m2.5s including waiting)'
PULLING_INIT = 'Pulling image "quay.io/jupyterhub/k8s-network-tools:4.0.0"'
CRASH_LOOP = "Back-off restarting failed container notebook in pod jupyter-alice_dev(0c1b)"
SCHEDULED = "Successfully assigned dev/jupyter-alice to cpu-1"


def kubelet(reason, message, at, **kw):
    kind = "Warning" if reason in ("Failed", "InspectFailed", "ErrImageNeverPull") else "Normal"
    return core(reason, message, at, component="kubelet", kind=kind, **kw)


def scheduler(message, at, **kw):
    return core("FailedScheduling", message, at, kind="Warning", **kw)


def autoscaler(reason, message, at, **kw):
    return core(reason, message, at, component="cluster-autoscaler", **kw)


def karpenter(reason, message, at, **kw):
    return series(reason, message, at, component="karpenter", **kw)


def attach(reason, message, at):
    kind = "Warning" if reason.startswith("Failed") else "Normal"
    return core(reason, message, at, component="attachdetach-controller", kind=kind)


class Case(NamedTuple):
    """One row of a rule's table: the pod's events, and the verdict they must give."""

    name: str  # what the row shows, as a sentence (the test id)
    events: Sequence[Mapping[str, Any]]
    want_code: str  # the verdict's code (EVENT_REASON_CODES fail, WAIT_CODES wait)
    want_words: tuple[str, ...] = ()  # in what the person reads (messages.event_text)
    want_absent: tuple[str, ...] = ()  # never in it
    want_facts: Mapping[str, Any] = {}  # verdict fields and their values
    pinned_node: str | None = None
    now: float = 1  # seconds after T0
    options: Mapping[str, Any] = {}  # classify's other keyword arguments


def named(case: Case) -> str:
    return case.name


def check(case: Case) -> EventVerdict:
    verdict = classify(
        case.events,
        pinned_node=case.pinned_node,
        now=T0 + timedelta(seconds=case.now),
        **case.options,
    )
    text = messages.event_words(verdict)
    assert verdict.code == case.want_code, (verdict, text)
    assert verdict.action == (FAIL if case.want_code in EVENT_REASON_CODES else WAIT)
    assert verdict.reason == (case.want_code if verdict.action == FAIL else None)
    if verdict.code == UNSCHEDULABLE_PINNED:
        assert verdict.node == case.pinned_node  # the words name the node it is pinned to
    for field, value in case.want_facts.items():
        assert getattr(verdict, field) == value, field
    for words in case.want_words:
        assert words in text
    for words in case.want_absent:
        assert words not in text
    # The raw message for the operator is one the cluster wrote, verbatim.
    assert verdict.raw == "" or verdict.raw in [e["message"] for e in case.events]
    if verdict.action == FAIL:
        # every failure but a scheduler's silence has the event that decided it
        assert text and (verdict.raw or verdict.code == NO_SCHEDULER)
    # Pod names stay in the operator log, never in the person's text.
    assert "jupyter-" not in text
    return verdict


# A pod pinned to its volume's node that the scheduler cannot place there fails at once, naming
# the node and why in words: no autoscaler can help, a new node never holds the volume.
PINNED_NODE = [
    Case(
        "gpu_profile_pinned_to_a_cpu_node_fails_at_once",
        [scheduler(GPU_PROFILE_ON_CPU_NODES, 0)],
        UNSCHEDULABLE_PINNED,
        want_words=("node cpu-1", "not enough free GPUs", "not the kind of node"),
        pinned_node="cpu-1",
    ),
    Case(
        "cordoned_pinned_node_fails_at_once",
        [scheduler(PINNED_NODE_CORDONED, 0)],
        UNSCHEDULABLE_PINNED,
        want_words=("node cpu-1", "cordoned"),
        pinned_node="cpu-1",
    ),
    Case(
        "full_pinned_node_fails_at_once",
        [scheduler(PINNED_NODE_FULL, 0)],
        UNSCHEDULABLE_PINNED,
        want_words=("not enough free CPU", "as many pods as it may"),
        pinned_node="cpu-1",
    ),
    Case(
        "pinned_node_with_an_untolerated_taint_fails_at_once",
        [scheduler(PINNED_NODE_TAINTED, 0)],
        UNSCHEDULABLE_PINNED,
        want_words=("taint this server does not tolerate",),
        pinned_node="cpu-1",
    ),
    Case(
        "older_taint_wording_on_the_pinned_node_fails_at_once",
        [scheduler(OLDER_TAINT_WORDING, 0)],
        UNSCHEDULABLE_PINNED,
        want_words=("taint this server does not tolerate",),
        pinned_node="cpu-1",
    ),
    Case(
        "volume_node_affinity_on_the_pinned_node_fails_at_once",
        [scheduler(PINNED_NODE_VOLUME_AFFINITY, 0)],
        UNSCHEDULABLE_PINNED,
        want_words=("unable to reach the storage volume",),
        pinned_node="cpu-1",
    ),
    Case(
        "read_write_once_pod_conflict_on_the_pinned_node_fails_at_once",
        [scheduler(RWOP_CONFLICT, 0)],
        UNSCHEDULABLE_PINNED,
        want_words=("allows a single pod",),
        pinned_node="cpu-1",
    ),
    Case(
        "pinned_node_fails_at_once_even_with_the_grace_disabled",
        [scheduler(CPU_FULL, 0)],
        UNSCHEDULABLE_PINNED,
        want_words=("not enough free CPU",),
        pinned_node="cpu-1",
        options={"unschedulable_grace_seconds": 0},
    ),
    Case(
        "pinned_node_that_became_free_after_a_failure_waits",
        [scheduler(CPU_FULL, 0), core("Scheduled", SCHEDULED, 20)],
        PROGRESS,
        want_words=("A machine was found for the server",),
        want_facts={"event": "Scheduled"},
        pinned_node="cpu-1",
        now=30,
    ),
]


@pytest.mark.parametrize("case", PINNED_NODE, ids=named)
def test_a_pod_the_scheduler_cannot_place_on_its_volumes_node_fails_at_once(case: Case) -> None:
    check(case)


# An autoscaler that says it will not add a node ends the spawn at once.
AUTOSCALER_REFUSAL = [
    Case(
        "cluster_autoscaler_refusal_fails_at_once",
        [scheduler(CPU_FULL, 0), autoscaler("NotTriggerScaleUp", CA_REFUSED, 2)],
        NO_SCALE_UP,
        want_words=(
            "cluster autoscaler cannot add one",
            "maximum size",
            "not the kind of node",
        ),
        now=3,
    ),
    Case(
        "older_cluster_autoscaler_refusal_wording_fails_at_once",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            autoscaler("NotTriggerScaleUp", CA_REFUSED_OLDER, 2),
        ],
        NO_SCALE_UP,
        want_words=("not enough free GPUs",),
        now=3,
    ),
    Case(
        "karpenter_incompatible_requirements_fail_at_once",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            karpenter("FailedScheduling", KARPENTER_REQUIREMENTS, 1),
        ],
        NO_SCALE_UP,
        want_words=("no node pool offers",),
        now=2,
    ),
    Case(
        "karpenter_untolerated_taint_fails_at_once",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            karpenter("FailedScheduling", KARPENTER_TAINT, 1),
        ],
        NO_SCALE_UP,
        want_words=("reserved for other kinds of servers",),
        now=2,
    ),
    Case(
        "karpenter_nodepool_limits_fail_at_once",
        [scheduler(CPU_FULL, 0), karpenter("FailedScheduling", KARPENTER_LIMITS, 1)],
        NO_SCALE_UP,
        want_words=("reached their size limits",),
        now=2,
    ),
    Case(
        "karpenter_finding_no_instance_type_fails_at_once",
        [scheduler(CPU_FULL, 0), karpenter("FailedScheduling", KARPENTER_NO_TYPE, 1)],
        NO_SCALE_UP,
        want_words=("no machine type",),
        now=2,
    ),
]


@pytest.mark.parametrize("case", AUTOSCALER_REFUSAL, ids=named)
def test_an_autoscaler_refusing_to_add_a_node_ends_the_spawn_at_once(case: Case) -> None:
    check(case)


# A scale-up in progress keeps the spawn waiting, whatever the scheduler says meanwhile.
SCALE_UP = [
    Case(
        "triggered_scale_up_after_failed_scheduling_keeps_waiting_for_a_gpu_node",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 5),
        ],
        SCALING_UP,
        want_words=("Waiting for a node with a free GPU: the cluster autoscaler is adding one",),
        want_facts={"gpu": True},
        now=600,
    ),
    Case(
        "triggered_scale_up_for_cpu_keeps_waiting_for_a_new_node",
        [scheduler(CPU_FULL, 0), autoscaler("TriggeredScaleUp", CA_TRIGGERED, 5)],
        SCALING_UP,
        want_words=("Waiting for a new node: the cluster autoscaler is adding one",),
        want_facts={"gpu": False},
        now=600,
    ),
    Case(
        "karpenter_nomination_keeps_waiting",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            karpenter("Nominated", KARPENTER_NOMINATED, 2),
        ],
        SCALING_UP,
        want_words=("free GPU", "adding one"),
        want_facts={"gpu": True},
        now=600,
    ),
    Case(
        "scheduler_retries_while_the_new_node_boots_keep_waiting",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 5),
            scheduler(NODE_BOOTING, 150, last=200, count=3),
        ],
        SCALING_UP,
        want_words=("adding one",),
        want_facts={"gpu": True},
        now=260,
    ),
    Case(
        "later_failed_scheduling_and_refusal_after_a_scale_up_fail",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 5),
            scheduler(GPU_PROFILE_ON_CPU_NODES, 240),
            autoscaler("NotTriggerScaleUp", CA_BACKOFF, 245),
        ],
        NO_SCALE_UP,
        want_words=("a recent attempt to add such a node failed",),
        now=250,
    ),
    Case(
        "scale_up_after_an_earlier_refusal_keeps_waiting",
        [
            scheduler(CPU_FULL, 0),
            autoscaler("NotTriggerScaleUp", CA_REFUSED, 2),
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 180),
        ],
        SCALING_UP,
        want_words=("adding one",),
        want_facts={"gpu": False},
        now=200,
    ),
]


@pytest.mark.parametrize("case", SCALE_UP, ids=named)
def test_a_scale_up_in_progress_keeps_the_spawn_waiting(case: Case) -> None:
    check(case)


# Unschedulable with no word from an autoscaler: the spawn waits out unschedulable_grace_seconds.
GRACE = [
    Case(
        "unpinned_unschedulable_waits_within_the_grace",
        [scheduler(CPU_FULL, 0)],
        NO_NODE_YET,
        want_words=(
            "Waiting for a node that can run this server",
            "3 nodes: not enough free CPU",
        ),
        now=59,
    ),
    Case(
        "unpinned_unschedulable_fails_once_the_grace_has_passed",
        [scheduler(CPU_FULL, 0)],
        UNSCHEDULABLE,
        want_words=("3 nodes: not enough free CPU", "60 seconds"),
        want_facts={"grace": 60},
        now=60,
    ),
    Case(
        "grace_counts_from_the_first_failed_scheduling_not_the_latest",
        [scheduler(CPU_FULL, 0, last=55, count=4)],
        UNSCHEDULABLE,
        want_words=("not enough free CPU",),
        want_facts={"grace": 60},
        now=61,
    ),
    Case(
        "a_longer_grace_keeps_waiting",
        [scheduler(CPU_FULL, 0)],
        NO_NODE_YET,
        want_words=("Waiting for a node",),
        options={"unschedulable_grace_seconds": 300},
        now=200,
    ),
    Case(
        "zero_grace_waits_for_ever",
        [scheduler(CPU_FULL, 0)],
        NO_NODE_YET,
        want_words=("Waiting for a node",),
        options={"unschedulable_grace_seconds": 0},
        now=3600,
    ),
    Case(
        "unrecognised_karpenter_failure_waits_within_the_grace",
        [scheduler(CPU_FULL, 0), karpenter("FailedScheduling", KARPENTER_OTHER, 3)],
        NO_NODE_YET,
        want_words=("Waiting for a node",),
        now=30,
    ),
    Case(
        "unrecognised_karpenter_failure_fails_once_the_grace_has_passed",
        [scheduler(CPU_FULL, 0), karpenter("FailedScheduling", KARPENTER_OTHER, 3)],
        UNSCHEDULABLE,
        want_words=("not enough free CPU",),
        want_facts={"grace": 60},
        now=61,
    ),
]


@pytest.mark.parametrize("case", GRACE, ids=named)
def test_an_unschedulable_pod_fails_once_its_grace_has_passed(case: Case) -> None:
    check(case)


# The volume is attached to another node (Multi-Attach, Waiting for detach): fail at once, unless
# the same volume attached after it.
ATTACHED_ELSEWHERE = [
    Case(
        "multi_attach_error_fails_at_once",
        [
            core("Scheduled", SCHEDULED, 0),
            attach("FailedAttachVolume", MULTI_ATTACH_MIXED, 1),
        ],
        MULTI_ATTACH,
        want_words=("2 other pod(s)",),
        want_facts={"holders": ("jupyter-alice--app", "jupyter-bob"), "others": 2},
        now=2,
    ),
    Case(
        "exclusive_attachment_without_pods_waits_for_the_detach_within_the_grace",
        [
            core("Scheduled", SCHEDULED, 0),
            attach("FailedAttachVolume", MULTI_ATTACH_EXCLUSIVE, 1),
        ],
        PROGRESS,
        want_words=("Waiting for your home folder to be freed on another machine",),
        now=2,
    ),
    Case(
        "exclusive_attachment_without_pods_fails_once_the_detach_grace_has_passed",
        [
            core("Scheduled", SCHEDULED, 0),
            attach("FailedAttachVolume", MULTI_ATTACH_EXCLUSIVE, 1),
            attach("FailedAttachVolume", MULTI_ATTACH_EXCLUSIVE, 50),
        ],
        MULTI_ATTACH,
        want_words=("still attached to another node", "Try again in a minute"),
        want_facts={"holders": (), "others": 0, "grace": 60},
        now=61,
    ),
    Case(
        "exclusive_attachment_with_the_detach_grace_off_waits_for_start_timeout",
        [attach("FailedAttachVolume", MULTI_ATTACH_EXCLUSIVE, 1)],
        PROGRESS,
        options={"detach_grace_seconds": 0},
        now=3600,
    ),
    Case(
        "waiting_for_detach_fails_at_once",
        [
            core("Scheduled", SCHEDULED, 0),
            attach("FailedAttachVolume", WAITING_FOR_DETACH_MIXED, 1),
        ],
        MULTI_ATTACH,
        want_words=("2 other pod(s)",),
        want_facts={"holders": ("jupyter-alice--app", "jupyter-bob"), "others": 2},
        now=2,
    ),
    Case(
        "waiting_for_detach_of_an_exclusive_attachment_waits_within_the_grace",
        [
            core("Scheduled", SCHEDULED, 0),
            attach("FailedAttachVolume", WAITING_FOR_DETACH_EXCLUSIVE, 1),
        ],
        PROGRESS,
        want_words=("Waiting for your home folder to be freed on another machine",),
        now=59,
    ),
    Case(
        "waiting_for_detach_of_an_exclusive_attachment_fails_once_the_grace_has_passed",
        [
            core("Scheduled", SCHEDULED, 0),
            attach("FailedAttachVolume", WAITING_FOR_DETACH_EXCLUSIVE, 1),
        ],
        MULTI_ATTACH,
        want_words=("still attached to another node", "Try again in a minute"),
        want_facts={"holders": (), "others": 0, "grace": 60},
        now=61,
    ),
    Case(
        "a_detach_that_completes_within_the_grace_lets_the_spawn_go_on",
        [
            attach("FailedAttachVolume", WAITING_FOR_DETACH_EXCLUSIVE, 1),
            attach(
                "SuccessfulAttachVolume",
                'AttachVolume.Attach succeeded for volume "pv-t-a6193039-claim-alice"',
                9,
            ),
        ],
        PROGRESS,
        now=70,
    ),
    Case(
        "waiting_for_detach_resolved_by_a_later_attach_of_the_same_volume_waits",
        [
            attach("FailedAttachVolume", WAITING_FOR_DETACH_MIXED, 1),
            attach("SuccessfulAttachVolume", ATTACHED_1234, 40),
        ],
        PROGRESS,
        want_words=("Your home folder is ready",),
        want_facts={"event": "SuccessfulAttachVolume"},
        now=41,
    ),
    Case(
        "multi_attach_resolved_by_a_later_attach_of_the_same_volume_waits",
        [
            attach("FailedAttachVolume", MULTI_ATTACH_MIXED, 1),
            attach("SuccessfulAttachVolume", ATTACHED_1234, 40),
        ],
        PROGRESS,
        want_words=("Your home folder is ready",),
        want_facts={"event": "SuccessfulAttachVolume"},
        now=41,
    ),
    Case(
        "attach_of_another_volume_does_not_resolve_a_multi_attach_error",
        [
            attach("FailedAttachVolume", MULTI_ATTACH_MIXED, 1),
            attach("SuccessfulAttachVolume", ATTACHED_5678, 2),
        ],
        MULTI_ATTACH,
        want_facts={"holders": ("jupyter-alice--app", "jupyter-bob"), "others": 2},
        now=3,
    ),
]


@pytest.mark.parametrize("case", ATTACHED_ELSEWHERE, ids=named)
def test_a_volume_attached_elsewhere_ends_the_spawn_at_once(case: Case) -> None:
    check(case)


# An invalid image fails at once; a failing pull after image_pull_grace_seconds.
IMAGES = [
    Case(
        "invalid_image_name_fails_at_once",
        [kubelet("Failed", INVALID_IMAGE_NAME, 0)],
        IMAGE_INVALID,
        want_words=("image name", "not valid"),
        want_facts={"image": None, "causes": ("bad-name",)},
    ),
    Case(
        "unparseable_image_reference_fails_at_once",
        [
            kubelet("InspectFailed", DEFAULT_TAG_FAILED, 0),
            kubelet("Failed", INVALID_IMAGE_NAME, 0),
        ],
        IMAGE_INVALID,
        want_words=('"quay.io/nebari/Lab:2024.1"', "not valid"),
        want_facts={"image": "quay.io/nebari/Lab:2024.1", "causes": ("bad-name",)},
    ),
    Case(
        "absent_image_with_pull_policy_never_fails_at_once",
        [
            kubelet("ErrImageNeverPull", NEVER_PULL, 0),
            kubelet("Failed", ERR_NEVER_PULL, 0),
        ],
        IMAGE_INVALID,
        want_words=("pull policy forbids downloading it",),
        want_facts={"image": IMAGE, "causes": ("never-pull",)},
    ),
    Case(
        "image_pull_failure_waits_within_the_grace",
        [
            kubelet("Pulling", PULLING, 0),
            kubelet("Failed", PULL_FAILED, 5),
            kubelet("Failed", ERR_IMAGE_PULL, 5),
            kubelet("BackOff", PULL_BACKOFF, 10),
            kubelet("Failed", ERR_PULL_BACKOFF, 10),
        ],
        RETRYING_PULL,
        want_words=(f'Retrying the download of image "{IMAGE}"',),
        want_facts={"image": IMAGE},
        now=120,
    ),
    Case(
        "image_pull_failure_fails_once_the_grace_has_passed",
        [
            kubelet("Pulling", PULLING, 0),
            kubelet("Failed", PULL_FAILED, 5),
            kubelet("Failed", ERR_IMAGE_PULL, 5),
            kubelet("BackOff", PULL_BACKOFF, 10, last=100, count=5),
            kubelet("Failed", ERR_PULL_BACKOFF, 10, last=100, count=5),
        ],
        IMAGE_PULL,
        want_words=(f'"{IMAGE}"', "120 seconds", "not found"),
        want_facts={"image": IMAGE, "causes": ("not-found",), "grace": 120},
        now=125,
    ),
    Case(
        "pull_back_off_alone_fails_once_the_grace_has_passed",
        [kubelet("BackOff", PULL_BACKOFF, 0, last=200, count=9)],
        IMAGE_PULL,
        want_words=(f'"{IMAGE}"',),
        want_facts={"image": IMAGE, "grace": 120},
        now=130,
    ),
    Case(
        "image_pull_grace_of_zero_waits_for_ever",
        [
            kubelet("Failed", PULL_FAILED, 0),
            kubelet("BackOff", PULL_BACKOFF, 10, last=3000),
        ],
        RETRYING_PULL,
        want_words=("Retrying",),
        want_facts={"image": IMAGE},
        options={"image_pull_grace_seconds": 0},
        now=3600,
    ),
    Case(
        "successful_pull_after_a_failure_ends_the_pull_grace",
        [
            kubelet("Failed", PULL_FAILED, 0),
            kubelet("Failed", ERR_IMAGE_PULL, 0),
            kubelet("Pulled", PULLED, 30),
            kubelet("Pulling", PULLING_INIT, 40),
        ],
        PROGRESS,
        want_words=("Downloading the server's software",),
        want_facts={"event": "Pulling"},
        now=300,
    ),
    Case(
        "crash_loop_back_off_is_not_an_image_failure",
        [
            kubelet("Started", "Started container notebook", 0),
            kubelet("BackOff", CRASH_LOOP, 5, last=900),
        ],
        PROGRESS,
        want_words=("The server started",),
        want_facts={"event": "Started"},
        now=1000,
    ),
]


@pytest.mark.parametrize("case", IMAGES, ids=named)
def test_image_trouble_fails_at_once_or_after_the_pull_grace(case: Case) -> None:
    check(case)


# Everything else waits, saying how far the start got.
EVERYTHING_ELSE = [
    Case(
        "unrelated_events_wait_with_progress_text",
        [
            core("Scheduled", SCHEDULED, 0),
            kubelet("Pulling", PULLING, 1),
            kubelet("Pulled", PULLED, 60),
            kubelet("Created", "Created container notebook", 61),
            kubelet("Started", "Started container notebook", 61),
        ],
        PROGRESS,
        want_words=("The server started",),
        want_facts={"event": "Started"},
        pinned_node="cpu-1",
        now=62,
    ),
    Case(
        "scheduling_after_a_scale_up_ends_the_scheduling_trouble",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 5),
            core("Scheduled", SCHEDULED, 200),
            kubelet("Pulling", PULLING, 201),
        ],
        PROGRESS,
        want_words=("Downloading the server's software",),
        want_facts={"event": "Pulling"},
        now=400,
    ),
    Case(
        "kubelet_events_prove_the_pod_is_bound_when_scheduled_was_missed",
        [scheduler(CPU_FULL, 0), kubelet("Pulling", PULLING, 100)],
        PROGRESS,
        want_words=("Downloading the server's software",),
        want_facts={"event": "Pulling"},
        now=400,
    ),
]


@pytest.mark.parametrize("case", EVERYTHING_ELSE, ids=named)
def test_everything_else_waits_with_progress_words(case: Case) -> None:
    check(case)


# Events are read in time order, whichever of the two Event APIs wrote them, with or without
# times.
TIMESTAMPS = [
    Case(
        "events_without_timestamps_still_fail_at_once",
        [bare("FailedScheduling", PINNED_NODE_CORDONED)],
        UNSCHEDULABLE_PINNED,
        want_words=("cordoned",),
        pinned_node="cpu-1",
    ),
    Case(
        "failed_scheduling_without_timestamps_never_fails_on_time",
        [bare("FailedScheduling", CPU_FULL)],
        NO_NODE_YET,
        want_words=("Waiting for a node",),
        now=100_000,
    ),
    Case(
        "events_api_microtime_and_series_are_read",
        [series("FailedScheduling", CPU_FULL, 0.5, last=40)],
        UNSCHEDULABLE,
        want_words=("not enough free CPU",),
        want_facts={"grace": 60},
        now=61,
    ),
    Case(
        "events_are_put_in_time_order_before_the_latest_autoscaler_word_decides",
        [
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 180),
            scheduler(CPU_FULL, 0),
            autoscaler("NotTriggerScaleUp", CA_REFUSED, 2),
        ],
        SCALING_UP,
        want_words=("adding one",),
        want_facts={"gpu": False},
        now=200,
    ),
    Case(
        "a_refusal_that_came_last_fails_whatever_the_input_order",
        [
            autoscaler("NotTriggerScaleUp", CA_REFUSED, 100),
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 5),
            scheduler(CPU_FULL, 0),
        ],
        NO_SCALE_UP,
        now=101,
    ),
    Case("no_events_wait_with_nothing_to_say", [], PROGRESS, pinned_node="cpu-1", now=0),
]


@pytest.mark.parametrize("case", TIMESTAMPS, ids=named)
def test_events_are_read_in_time_order_with_or_without_timestamps(case: Case) -> None:
    check(case)


class Holders(NamedTuple):
    """A Multi-Attach message, the user's own pods, and who the words may (and may not) name."""

    message: str
    own_servers: Mapping[str, str] | None
    want_holders: tuple[str, ...]
    want_words: tuple[str, ...]
    want_absent: tuple[str, ...] = ()
    #: the namespace's JupyterHub server pods the spawner knows (None: not known)
    servers: tuple[str, ...] | None = ("jupyter-alice", "jupyter-alice--app", "jupyter-bob")


# Only the user's own servers are named; every other pod is counted.
MULTI_ATTACH_HOLDERS = [
    pytest.param(
        Holders(
            MULTI_ATTACH_MIXED,
            {"jupyter-alice--app": "app"},
            want_holders=("jupyter-alice--app", "jupyter-bob"),
            want_words=(
                "in use by 'app' and 1 server(s) of other users.",
                "in use by 'app' on another machine. Stop it",
            ),
            want_absent=("bob",),
        ),
        id="own_app_is_named_and_another_users_pod_only_counted",
    ),
    pytest.param(
        Holders(
            MULTI_ATTACH_OTHER_NAMESPACES,
            {"jupyter-alice": ""},
            want_holders=("jupyter-alice",),
            want_words=(
                "your default server and 1 pod(s) in other namespaces",
                "still in use by your default server on another machine. Stop it",
            ),
        ),
        id="own_default_server_is_named_and_pods_in_other_namespaces_counted",
    ),
    pytest.param(
        Holders(
            MULTI_ATTACH_MIXED,
            None,
            want_holders=("jupyter-alice--app", "jupyter-bob"),
            want_words=("in use by 2 server(s) of other users", "ask your administrator"),
            want_absent=("alice", "bob", "Stop"),
        ),
        id="without_own_servers_every_holder_is_only_counted",
    ),
    pytest.param(
        Holders(
            MULTI_ATTACH_ONLY_OTHER_NAMESPACES,
            {"jupyter-alice": ""},
            want_holders=(),
            want_words=("in use by 2 pod(s) in other namespaces",),
            want_absent=("default server",),
        ),
        id="holders_only_in_other_namespaces_are_counted",
    ),
    pytest.param(
        Holders(
            'Multi-Attach error for volume "pvc-1234" Volume is already used by pod(s) '
            "jupyter-alice--viz, jupyter-alice, jupyter-alice--app",
            {"jupyter-alice--viz": "viz", "jupyter-alice": "", "jupyter-alice--app": "app"},
            want_holders=("jupyter-alice--viz", "jupyter-alice", "jupyter-alice--app"),
            want_words=("in use by your default server, 'app' and 'viz'.",),
            want_absent=("other server",),
        ),
        id="several_own_servers_are_listed_default_first",
    ),
    pytest.param(
        Holders(
            MULTI_ATTACH_EXCLUSIVE,
            {"jupyter-alice": ""},
            want_holders=(),
            want_words=("still attached to another node",),
            want_absent=("default server",),
        ),
        id="exclusive_attachment_names_nobody",
    ),
    pytest.param(
        Holders(
            WAITING_FOR_DETACH_USED,
            {"jupyter-alice--pandas-app": "pandas-app"},
            want_holders=("jupyter-alice--pandas-app",),
            want_words=(
                "in use by 'pandas-app'.",
                "in use by 'pandas-app' on another machine. Stop it",
            ),
            want_absent=("other server",),
        ),
        id="waiting_for_detach_names_the_users_own_server",
    ),
    pytest.param(
        Holders(
            WAITING_FOR_DETACH_MIXED,
            {"jupyter-alice--app": "app"},
            want_holders=("jupyter-alice--app", "jupyter-bob"),
            want_words=(
                "in use by 'app' and 1 server(s) of other users.",
                "in use by 'app' on another machine. Stop it",
            ),
            want_absent=("bob",),
        ),
        id="waiting_for_detach_counts_another_users_pod",
    ),
    pytest.param(
        Holders(
            WAITING_FOR_DETACH_EXCLUSIVE,
            {"jupyter-alice": ""},
            want_holders=(),
            want_words=("still attached to another node",),
            want_absent=("default server",),
        ),
        id="waiting_for_detach_of_an_exclusive_attachment_names_nobody",
    ),
]


MULTI_ATTACH_HOLDERS += [
    pytest.param(
        Holders(
            'Multi-Attach error for volume "pvc-1234" Volume is already used by pod(s) '
            "backup-alice-29123-x7k2p",
            {"jupyter-alice": ""},
            want_holders=("backup-alice-29123-x7k2p",),
            # the words of a refusal before the spawn (messages._in_use_by) for the same holder
            want_words=(
                "in use by 1 other pod(s) that are not JupyterHub servers (such as a job)",
            ),
            want_absent=("other server", "backup"),
        ),
        id="a_jobs_pod_is_told_as_a_pod_that_is_not_a_server_not_as_a_server",
    ),
    pytest.param(
        Holders(
            WAITING_FOR_DETACH_MIXED,
            {"jupyter-alice--app": "app"},
            want_holders=("jupyter-alice--app", "jupyter-bob"),
            want_words=("in use by 'app' and 1 other pod(s).",),
            want_absent=("bob", "server(s) of other users", "not JupyterHub servers"),
            servers=None,
        ),
        id="without_the_servers_known_another_pod_is_only_a_pod",
    ),
]


@pytest.mark.parametrize("case", MULTI_ATTACH_HOLDERS)
def test_multi_attach_words_name_only_the_users_own_servers(case: Holders) -> None:
    verdict = classify(
        [attach("FailedAttachVolume", case.message, 0)],
        pinned_node="cpu-1",
        # past the detach grace (a volume no pod holds fails only then)
        now=T0 + timedelta(seconds=61),
        own_servers=case.own_servers,
        servers=case.servers,
    )
    assert (verdict.action, verdict.code, verdict.raw) == (FAIL, MULTI_ATTACH, case.message)
    assert verdict.holders == case.want_holders
    text = messages.event_words(verdict)
    for words in case.want_words:
        assert words in text
    for words in case.want_absent:
        assert words not in text
    assert "jupyter-" not in text


class FitError(NamedTuple):
    """A message, and the ``(count, fragment)`` pairs the FitError parser reads from it."""

    message: str
    want: list[tuple[int | None, str]] | None


FIT_ERRORS = [
    pytest.param(
        FitError(
            GPU_PROFILE_ON_CPU_NODES,
            [
                (1, "Insufficient nvidia.com/gpu"),
                (2, "node(s) didn't match Pod's node affinity/selector"),
            ],
        ),
        id="histogram_before_the_preemption_part",
    ),
    pytest.param(
        FitError(
            "0/2 nodes are available: 1 node(s) had taint {dedicated: gpu}, that the pod didn't "
            "tolerate, 1 node(s) were unschedulable.",
            [
                (1, "node(s) had taint {dedicated: gpu}, that the pod didn't tolerate"),
                (1, "node(s) were unschedulable"),
            ],
        ),
        id="older_taint_fragment_with_its_own_comma",
    ),
    pytest.param(
        FitError(RWOP_CONFLICT, [(None, RWOP_REASON)]), id="prefilter_message_without_a_count"
    ),
    pytest.param(
        FitError(
            "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector. no new "
            "claims to deallocate, preemption: 0/4 nodes are available: 4 Preemption is not "
            "helpful for scheduling.",
            [(4, "node(s) didn't match Pod's node affinity/selector")],
        ),
        id="dynamic_resource_allocation_postfilter_text_is_cut",
    ),
    pytest.param(
        FitError(
            NODE_BOOTING,
            [
                (1, "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"),
                (3, "Insufficient nvidia.com/gpu"),
            ],
        ),
        id="taint_with_an_empty_value",
    ),
    pytest.param(FitError(KARPENTER_REQUIREMENTS, None), id="karpenter_message_is_not_a_fit_error"),
    pytest.param(
        FitError('running PreBind plugin "VolumeBinding": timed out', None),
        id="binding_error_is_not_a_fit_error",
    ),
]


@pytest.mark.parametrize("case", FIT_ERRORS)
def test_fit_error_fragments_follow_the_scheduler_format(case: FitError) -> None:
    assert fit_error_fragments(case.message) == case.want


UTC = timezone.utc


class Time(NamedTuple):
    """A timestamp as an Event carries it, and the time it means (None: no time)."""

    value: object
    want: datetime | None


TIMES = [
    pytest.param(Time("2024-05-01T12:00:00Z", T0), id="whole_seconds_with_z"),
    pytest.param(
        Time("2024-05-01T12:00:00.123456Z", T0.replace(microsecond=123456)),
        id="microtime_with_z",
    ),
    pytest.param(
        Time("2024-05-01T12:00:00.123456789Z", T0.replace(microsecond=123456)),
        id="nanoseconds_are_truncated",
    ),
    pytest.param(
        Time("2024-05-01T12:00:00.5Z", T0.replace(microsecond=500000)), id="short_fraction"
    ),
    pytest.param(Time("2024-05-01T14:00:00+02:00", T0), id="numeric_offset"),
    pytest.param(Time(datetime(2024, 5, 1, 12, 0, 0), T0), id="naive_datetime_means_utc"),
    pytest.param(Time(None, None), id="missing_field"),
    pytest.param(Time("yesterday", None), id="garbage"),
    pytest.param(Time("2024-02-30T00:00:00Z", None), id="impossible_date"),
]


@pytest.mark.parametrize("case", TIMES)
def test_parse_time_reads_rfc3339_forms(case: Time) -> None:
    assert parse_time(case.value) == case.want


def test_naive_now_is_read_as_utc() -> None:
    events = [scheduler(CPU_FULL, 0)]
    naive = (T0 + timedelta(seconds=60)).replace(tzinfo=None)
    assert classify(events, pinned_node=None, now=naive).reason == "unschedulable"


def test_reason_codes_are_exported_in_preference_order() -> None:
    assert EVENT_REASON_CODES == (
        "unschedulable-pinned",
        "preemption-stalled",
        "no-scheduler",
        "no-scale-up",
        "multi-attach",
        "image-invalid",
        "unschedulable",
        "image-pull",
    )


def test_every_code_has_words_and_every_progress_event_too() -> None:
    for code in (*EVENT_REASON_CODES, *WAIT_CODES):
        if code != PROGRESS:
            assert messages.event_text(EventVerdict(FAIL, code, "raw")), code
    for event in PROGRESS_EVENTS:
        assert messages.event_text(EventVerdict(WAIT, PROGRESS, "raw", event=event)), event


def test_every_fragment_cause_has_words() -> None:
    from nebari_colocate import events

    causes = {v for k, v in vars(events).items() if k.startswith("FRAGMENT_")}
    for cause in causes - {events.FRAGMENT_INSUFFICIENT}:
        fragment = events.Fragment(1, cause, "as the scheduler wrote it")
        assert messages.fragment_words(fragment) != "as the scheduler wrote it", cause
    gpu = events.read_fragment("Insufficient amd.com/gpu")
    assert messages.fragment_words(gpu) == "not enough free GPUs"


def test_the_operator_line_keeps_the_raw_event() -> None:
    verdict = classify([scheduler(CPU_FULL, 0)], pinned_node="cpu-1", now=T0)
    assert messages.event_operator_line(
        verdict, username="alice", server_name="", pod_name="jupyter-alice"
    ) == (
        f"colocate event-verdict=fail reason=unschedulable-pinned user='alice' server='' "
        f"pod=jupyter-alice scheduler='default-scheduler' event={CPU_FULL!r}"
    )


def test_verdict_is_immutable() -> None:
    verdict = classify([], pinned_node=None, now=T0)
    assert verdict == EventVerdict(WAIT, PROGRESS)
    assert messages.event_words(verdict) == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.code = FAIL  # type: ignore[misc]


@pytest.mark.parametrize("wants_gpu, expect", [(False, "a new node"), (True, "a free GPU")])
def test_scale_up_words_mention_a_gpu_when_the_pod_requests_one(
    wants_gpu: bool, expect: str
) -> None:
    # The selector filter rejected every node first, so the scheduler never said "Insufficient
    # nvidia.com/gpu"; the spawner knows the pod asks for one.
    events = [
        scheduler(
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
            "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
            0,
        ),
        autoscaler("TriggeredScaleUp", "pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]", 1),
    ]
    verdict = classify(events, pinned_node=None, now=T0 + timedelta(seconds=5), wants_gpu=wants_gpu)
    assert (verdict.action, verdict.code, verdict.gpu) == (WAIT, SCALING_UP, wants_gpu)
    assert expect in messages.event_words(verdict)


# --- Karpenter 1.15: one reason per NodePool, joined by "; " -----------------------------------
# The texts below were observed on the real Karpenter (tests/cluster/test_karpenter.py, NodePools
# "cpu" and "gpu" tainted nvidia.com/gpu=true:NoSchedule).
KARPENTER_CAPACITY_CAP = (
    "Failed to schedule pod, did not tolerate taint (taint=nvidia.com/gpu=true:NoSchedule); "
    "unsatisfiable topology constraint for pod affinity, key=kubernetes.io/hostname (counts = "
    "cpu-ml4sp: 1, podDomains = kubernetes.io/hostname Exists, nodeDomains = "
    "kubernetes.io/hostname In [hostname-placeholder-0006]"
)
# The GPU profile asks for no node label: both pools fail on the co-location first.
KARPENTER_GPU_LAB_BLOCKED = (
    "Failed to schedule pod, unsatisfiable topology constraint for pod affinity, "
    "key=kubernetes.io/hostname (counts = cpu-tb7xd: 1, podDomains = kubernetes.io/hostname "
    "Exists, nodeDomains = kubernetes.io/hostname In [hostname-placeholder-0003]; unsatisfiable "
    "topology constraint for pod affinity, key=kubernetes.io/hostname (counts = cpu-tb7xd: 1, "
    "podDomains = kubernetes.io/hostname Exists, nodeDomains = kubernetes.io/hostname In "
    "[hostname-placeholder-0004]"
)
KARPENTER_NO_POOL_HAS_SO_MANY_GPUS = (
    "Failed to schedule pod, no instance type has enough resources, requirements=colocate.test/"
    "pool In [gpu], karpenter.kwok.sh/instance-family In [gpu], karpenter.kwok.sh/kwoknodeclass "
    "In [default], karpenter.sh/capacity-type In [on-demand], karpenter.sh/initialized In [true], "
    'karpenter.sh/nodepool In [gpu], karpenter.sh/registered In [true], resources={"cpu":'
    '"100m","memory":"134217728","nvidia.com/gpu":"8","pods":"1"}; no instance type has enough '
    "resources, requirements=colocate.test/pool In [cpu], karpenter.kwok.sh/instance-family In "
    "[cpu], karpenter.kwok.sh/kwoknodeclass In [default], karpenter.sh/capacity-type In "
    "[on-demand], karpenter.sh/initialized In [true], karpenter.sh/nodepool In [cpu], "
    'karpenter.sh/registered In [true], resources={"cpu":"100m","memory":"134217728",'
    '"nvidia.com/gpu":"8","pods":"1"}'
)
# Not observed here (no test sets up such pools): the format of the source, two pools.
KARPENTER_WRONG_KIND_EVERYWHERE = (
    "Failed to schedule pod, incompatible requirements, key node-type, node-type In [gpu] not in "
    "node-type In [cpu]; did not tolerate taint (taint=nvidia.com/gpu=true:NoSchedule)"
)
KARPENTER_ONE_POOL_NOT_UNDERSTOOD = (
    "Failed to schedule pod, did not tolerate taint (taint=nvidia.com/gpu=true:NoSchedule); "
    'nodepool "cpu" not ready'
)
KARPENTER_SKIPS_PINNED_POD = (
    "Failed to schedule pod, node selector term with matchFields is not supported"
)

# Karpenter 1.15: one reason per NodePool, each read into a cause; the words name the one that
# matters.
KARPENTER = [
    Case(
        "capacity_cap_names_the_colocation_not_the_taint",
        [
            scheduler(CPU_FULL, 0),
            karpenter("FailedScheduling", KARPENTER_CAPACITY_CAP, 1),
        ],
        NO_SCALE_UP,
        want_words=(
            "where your other servers are",
            "attached to one node at a time",
            "Stop your other",
        ),
        want_absent=("taint", "reserved"),
        want_facts={"causes": ("taint", "colocation")},
        now=2,
    ),
    Case(
        "gpu_lab_blocked_names_the_colocation",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            karpenter("FailedScheduling", KARPENTER_GPU_LAB_BLOCKED, 1),
        ],
        NO_SCALE_UP,
        want_words=("where your other servers are",),
        want_absent=("kind of node",),
        want_facts={"causes": ("colocation",)},
        now=2,
    ),
    Case(
        "no_machine_type_big_enough_names_what_the_server_asks_for",
        [
            scheduler(CPU_FULL, 0),
            karpenter("FailedScheduling", KARPENTER_NO_POOL_HAS_SO_MANY_GPUS, 1),
        ],
        NO_SCALE_UP,
        want_words=("no machine type is big enough", "(8 GPUs)"),
        want_absent=("other servers",),
        want_facts={"causes": ("no-instance-type",)},
        now=2,
    ),
    Case(
        "no_pool_of_the_right_kind_says_so_once",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            karpenter("FailedScheduling", KARPENTER_WRONG_KIND_EVERYWHERE, 1),
        ],
        NO_SCALE_UP,
        want_words=("no node pool offers the kind of node",),
        want_absent=("reserved",),
        want_facts={"causes": ("requirements", "taint")},
        now=2,
    ),
    Case(
        "a_reason_not_understood_keeps_waiting_within_the_grace",
        [
            scheduler(CPU_FULL, 0),
            karpenter("FailedScheduling", KARPENTER_ONE_POOL_NOT_UNDERSTOOD, 1),
        ],
        NO_NODE_YET,
        want_facts={"causes": ()},
        now=10,
    ),
    Case(
        "karpenter_skipping_a_pinned_pod_is_no_verdict",
        [karpenter("FailedScheduling", KARPENTER_SKIPS_PINNED_POD, 1)],
        PROGRESS,
        want_absent=("profile", "node pool"),
        want_facts={"causes": ()},
        now=600,
    ),
    Case(
        "karpenter_skipping_a_pinned_pod_leaves_the_scheduler_verdict",
        [
            karpenter("FailedScheduling", KARPENTER_SKIPS_PINNED_POD, 0),
            scheduler(PINNED_NODE_FULL, 1),
        ],
        UNSCHEDULABLE_PINNED,
        want_words=("not enough free CPU",),
        want_absent=("node pool", "matchFields"),
        want_facts={"causes": ()},
        pinned_node="cpu-1",
        now=2,
    ),
    Case(
        "a_nomination_after_a_refusal_is_a_hint_and_keeps_waiting",
        [
            scheduler(CPU_FULL, 0),
            karpenter("FailedScheduling", KARPENTER_CAPACITY_CAP, 1),
            karpenter("Nominated", KARPENTER_NOMINATED, 2),
        ],
        SCALING_UP,
        want_words=("Waiting for a new node",),
        want_facts={"causes": ()},
        now=3,
    ),
]


@pytest.mark.parametrize("case", KARPENTER, ids=named)
def test_karpenter_reasons_are_each_understood(case: Case) -> None:
    check(case)


def test_karpenter_reasons_split_one_per_nodepool():
    assert karpenter_reasons(KARPENTER_CAPACITY_CAP) == [
        ("taint", "did not tolerate taint (taint=nvidia.com/gpu=true:NoSchedule)"),
        ("colocation", KARPENTER_CAPACITY_CAP.split("; ", 1)[1]),
    ]
    assert karpenter_reasons(KARPENTER_ONE_POOL_NOT_UNDERSTOOD)[1] == (
        None,
        'nodepool "cpu" not ready',
    )
    assert karpenter_reasons(CPU_FULL) is None
