"""classify(): which pod events end a spawn at once, which after a grace period, which wait.

Every message below is in the exact format the upstream component emits (DESIGN section 9):
kube-scheduler FitError, cluster-autoscaler and Karpenter pod events, the attach/detach
controller's Multi-Attach error and the kubelet's image events.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest

from nebari_colocate.events import (
    EVENT_REASON_CODES,
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


PINNED = {"pinned_node": "cpu-1"}

# (test_variation_id, events, options, now (seconds after T0), action, reason, words in the text)
VERDICTS = [
    # --- pinned and unschedulable: fail at once, name the node, say why in words ------------
    (
        "gpu_profile_pinned_to_a_cpu_node_fails_at_once",
        [scheduler(GPU_PROFILE_ON_CPU_NODES, 0)],
        PINNED,
        1,
        "fail",
        "unschedulable-pinned",
        ("node cpu-1", "not enough free GPUs", "not the kind of node"),
    ),
    (
        "cordoned_pinned_node_fails_at_once",
        [scheduler(PINNED_NODE_CORDONED, 0)],
        PINNED,
        1,
        "fail",
        "unschedulable-pinned",
        ("node cpu-1", "cordoned"),
    ),
    (
        "full_pinned_node_fails_at_once",
        [scheduler(PINNED_NODE_FULL, 0)],
        PINNED,
        1,
        "fail",
        "unschedulable-pinned",
        ("not enough free CPU", "as many pods as it may"),
    ),
    (
        "pinned_node_with_an_untolerated_taint_fails_at_once",
        [scheduler(PINNED_NODE_TAINTED, 0)],
        PINNED,
        1,
        "fail",
        "unschedulable-pinned",
        ("taint this server does not tolerate",),
    ),
    (
        "older_taint_wording_on_the_pinned_node_fails_at_once",
        [scheduler(OLDER_TAINT_WORDING, 0)],
        PINNED,
        1,
        "fail",
        "unschedulable-pinned",
        ("taint this server does not tolerate",),
    ),
    (
        "volume_node_affinity_on_the_pinned_node_fails_at_once",
        [scheduler(PINNED_NODE_VOLUME_AFFINITY, 0)],
        PINNED,
        1,
        "fail",
        "unschedulable-pinned",
        ("unable to reach the storage volume",),
    ),
    (
        "read_write_once_pod_conflict_on_the_pinned_node_fails_at_once",
        [scheduler(RWOP_CONFLICT, 0)],
        PINNED,
        1,
        "fail",
        "unschedulable-pinned",
        ("allows a single pod",),
    ),
    (
        "pinned_node_fails_at_once_even_with_the_grace_disabled",
        [scheduler(CPU_FULL, 0)],
        {**PINNED, "unschedulable_grace_seconds": 0},
        1,
        "fail",
        "unschedulable-pinned",
        ("not enough free CPU",),
    ),
    (
        "pinned_node_that_became_free_after_a_failure_waits",
        [scheduler(CPU_FULL, 0), core("Scheduled", SCHEDULED, 20)],
        PINNED,
        30,
        "wait",
        None,
        ("Assigned to a node",),
    ),
    # --- an autoscaler that will not add a node: fail at once -------------------------------
    (
        "cluster_autoscaler_refusal_fails_at_once",
        [scheduler(CPU_FULL, 0), autoscaler("NotTriggerScaleUp", CA_REFUSED, 2)],
        {},
        3,
        "fail",
        "no-scale-up",
        ("cluster autoscaler cannot add one", "maximum size", "not the kind of node"),
    ),
    (
        "older_cluster_autoscaler_refusal_wording_fails_at_once",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            autoscaler("NotTriggerScaleUp", CA_REFUSED_OLDER, 2),
        ],
        {},
        3,
        "fail",
        "no-scale-up",
        ("not enough free GPUs",),
    ),
    (
        "karpenter_incompatible_requirements_fail_at_once",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            karpenter("FailedScheduling", KARPENTER_REQUIREMENTS, 1),
        ],
        {},
        2,
        "fail",
        "no-scale-up",
        ("no node pool offers",),
    ),
    (
        "karpenter_untolerated_taint_fails_at_once",
        [scheduler(GPU_PROFILE_ON_CPU_NODES, 0), karpenter("FailedScheduling", KARPENTER_TAINT, 1)],
        {},
        2,
        "fail",
        "no-scale-up",
        ("reserved for other kinds of servers",),
    ),
    (
        "karpenter_nodepool_limits_fail_at_once",
        [scheduler(CPU_FULL, 0), karpenter("FailedScheduling", KARPENTER_LIMITS, 1)],
        {},
        2,
        "fail",
        "no-scale-up",
        ("reached their size limits",),
    ),
    (
        "karpenter_finding_no_instance_type_fails_at_once",
        [scheduler(CPU_FULL, 0), karpenter("FailedScheduling", KARPENTER_NO_TYPE, 1)],
        {},
        2,
        "fail",
        "no-scale-up",
        ("no machine type",),
    ),
    # --- scale-up in progress: keep waiting --------------------------------------------------
    (
        "triggered_scale_up_after_failed_scheduling_keeps_waiting_for_a_gpu_node",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 5),
        ],
        {},
        600,
        "wait",
        None,
        ("Waiting for a node with a free GPU: the cluster autoscaler is adding one",),
    ),
    (
        "triggered_scale_up_for_cpu_keeps_waiting_for_a_new_node",
        [scheduler(CPU_FULL, 0), autoscaler("TriggeredScaleUp", CA_TRIGGERED, 5)],
        {},
        600,
        "wait",
        None,
        ("Waiting for a new node: the cluster autoscaler is adding one",),
    ),
    (
        "karpenter_nomination_keeps_waiting",
        [scheduler(GPU_PROFILE_ON_CPU_NODES, 0), karpenter("Nominated", KARPENTER_NOMINATED, 2)],
        {},
        600,
        "wait",
        None,
        ("free GPU", "adding one"),
    ),
    (
        "scheduler_retries_while_the_new_node_boots_keep_waiting",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 5),
            scheduler(NODE_BOOTING, 150, last=200, count=3),
        ],
        {},
        260,
        "wait",
        None,
        ("adding one",),
    ),
    (
        "later_failed_scheduling_and_refusal_after_a_scale_up_fail",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 5),
            scheduler(GPU_PROFILE_ON_CPU_NODES, 240),
            autoscaler("NotTriggerScaleUp", CA_BACKOFF, 245),
        ],
        {},
        250,
        "fail",
        "no-scale-up",
        ("a recent attempt to add such a node failed",),
    ),
    (
        "scale_up_after_an_earlier_refusal_keeps_waiting",
        [
            scheduler(CPU_FULL, 0),
            autoscaler("NotTriggerScaleUp", CA_REFUSED, 2),
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 180),
        ],
        {},
        200,
        "wait",
        None,
        ("adding one",),
    ),
    # --- unschedulable with no autoscaler word: the grace period -----------------------------
    (
        "unpinned_unschedulable_waits_within_the_grace",
        [scheduler(CPU_FULL, 0)],
        {},
        59,
        "wait",
        None,
        ("Waiting for a node that can run this server", "3 nodes: not enough free CPU"),
    ),
    (
        "unpinned_unschedulable_fails_once_the_grace_has_passed",
        [scheduler(CPU_FULL, 0)],
        {},
        60,
        "fail",
        "unschedulable",
        ("3 nodes: not enough free CPU", "60 seconds"),
    ),
    (
        "grace_counts_from_the_first_failed_scheduling_not_the_latest",
        [scheduler(CPU_FULL, 0, last=55, count=4)],
        {},
        61,
        "fail",
        "unschedulable",
        ("not enough free CPU",),
    ),
    (
        "a_longer_grace_keeps_waiting",
        [scheduler(CPU_FULL, 0)],
        {"unschedulable_grace_seconds": 300},
        200,
        "wait",
        None,
        ("Waiting for a node",),
    ),
    (
        "zero_grace_waits_for_ever",
        [scheduler(CPU_FULL, 0)],
        {"unschedulable_grace_seconds": 0},
        3600,
        "wait",
        None,
        ("Waiting for a node",),
    ),
    (
        "unrecognised_karpenter_failure_waits_within_the_grace",
        [scheduler(CPU_FULL, 0), karpenter("FailedScheduling", KARPENTER_OTHER, 3)],
        {},
        30,
        "wait",
        None,
        ("Waiting for a node",),
    ),
    (
        "unrecognised_karpenter_failure_fails_once_the_grace_has_passed",
        [scheduler(CPU_FULL, 0), karpenter("FailedScheduling", KARPENTER_OTHER, 3)],
        {},
        61,
        "fail",
        "unschedulable",
        ("not enough free CPU",),
    ),
    # --- the volume is attached elsewhere: fail at once --------------------------------------
    (
        "multi_attach_error_fails_at_once",
        [core("Scheduled", SCHEDULED, 0), attach("FailedAttachVolume", MULTI_ATTACH_MIXED, 1)],
        {},
        2,
        "fail",
        "multi-attach",
        ("2 other servers",),
    ),
    (
        "exclusive_attachment_without_pods_fails_at_once",
        [core("Scheduled", SCHEDULED, 0), attach("FailedAttachVolume", MULTI_ATTACH_EXCLUSIVE, 1)],
        {},
        2,
        "fail",
        "multi-attach",
        ("still attached to another node", "Try again in a minute"),
    ),
    (
        "waiting_for_detach_fails_at_once",
        [
            core("Scheduled", SCHEDULED, 0),
            attach("FailedAttachVolume", WAITING_FOR_DETACH_MIXED, 1),
        ],
        {},
        2,
        "fail",
        "multi-attach",
        ("2 other servers",),
    ),
    (
        "waiting_for_detach_of_an_exclusive_attachment_fails_at_once",
        [
            core("Scheduled", SCHEDULED, 0),
            attach("FailedAttachVolume", WAITING_FOR_DETACH_EXCLUSIVE, 1),
        ],
        {},
        2,
        "fail",
        "multi-attach",
        ("still attached to another node", "Try again in a minute"),
    ),
    (
        "waiting_for_detach_resolved_by_a_later_attach_of_the_same_volume_waits",
        [
            attach("FailedAttachVolume", WAITING_FOR_DETACH_MIXED, 1),
            attach("SuccessfulAttachVolume", ATTACHED_1234, 40),
        ],
        {},
        41,
        "wait",
        None,
        ("Storage volume attached",),
    ),
    (
        "multi_attach_resolved_by_a_later_attach_of_the_same_volume_waits",
        [
            attach("FailedAttachVolume", MULTI_ATTACH_MIXED, 1),
            attach("SuccessfulAttachVolume", ATTACHED_1234, 40),
        ],
        {},
        41,
        "wait",
        None,
        ("Storage volume attached",),
    ),
    (
        "attach_of_another_volume_does_not_resolve_a_multi_attach_error",
        [
            attach("FailedAttachVolume", MULTI_ATTACH_MIXED, 1),
            attach("SuccessfulAttachVolume", ATTACHED_5678, 2),
        ],
        {},
        3,
        "fail",
        "multi-attach",
        (),
    ),
    # --- images ------------------------------------------------------------------------------
    (
        "invalid_image_name_fails_at_once",
        [kubelet("Failed", INVALID_IMAGE_NAME, 0)],
        {},
        1,
        "fail",
        "image-invalid",
        ("image name", "not valid"),
    ),
    (
        "unparseable_image_reference_fails_at_once",
        [kubelet("InspectFailed", DEFAULT_TAG_FAILED, 0), kubelet("Failed", INVALID_IMAGE_NAME, 0)],
        {},
        1,
        "fail",
        "image-invalid",
        ('"quay.io/nebari/Lab:2024.1"', "not valid"),
    ),
    (
        "absent_image_with_pull_policy_never_fails_at_once",
        [kubelet("ErrImageNeverPull", NEVER_PULL, 0), kubelet("Failed", ERR_NEVER_PULL, 0)],
        {},
        1,
        "fail",
        "image-invalid",
        ("pull policy forbids downloading it",),
    ),
    (
        "image_pull_failure_waits_within_the_grace",
        [
            kubelet("Pulling", PULLING, 0),
            kubelet("Failed", PULL_FAILED, 5),
            kubelet("Failed", ERR_IMAGE_PULL, 5),
            kubelet("BackOff", PULL_BACKOFF, 10),
            kubelet("Failed", ERR_PULL_BACKOFF, 10),
        ],
        {},
        120,
        "wait",
        None,
        (f'Retrying the download of image "{IMAGE}"',),
    ),
    (
        "image_pull_failure_fails_once_the_grace_has_passed",
        [
            kubelet("Pulling", PULLING, 0),
            kubelet("Failed", PULL_FAILED, 5),
            kubelet("Failed", ERR_IMAGE_PULL, 5),
            kubelet("BackOff", PULL_BACKOFF, 10, last=100, count=5),
            kubelet("Failed", ERR_PULL_BACKOFF, 10, last=100, count=5),
        ],
        {},
        125,
        "fail",
        "image-pull",
        (f'"{IMAGE}"', "120 seconds", "not found"),
    ),
    (
        "pull_back_off_alone_fails_once_the_grace_has_passed",
        [kubelet("BackOff", PULL_BACKOFF, 0, last=200, count=9)],
        {},
        130,
        "fail",
        "image-pull",
        (f'"{IMAGE}"',),
    ),
    (
        "image_pull_grace_of_zero_waits_for_ever",
        [kubelet("Failed", PULL_FAILED, 0), kubelet("BackOff", PULL_BACKOFF, 10, last=3000)],
        {"image_pull_grace_seconds": 0},
        3600,
        "wait",
        None,
        ("Retrying",),
    ),
    (
        "successful_pull_after_a_failure_ends_the_pull_grace",
        [
            kubelet("Failed", PULL_FAILED, 0),
            kubelet("Failed", ERR_IMAGE_PULL, 0),
            kubelet("Pulled", PULLED, 30),
            kubelet("Pulling", PULLING_INIT, 40),
        ],
        {},
        300,
        "wait",
        None,
        ("Downloading the server image",),
    ),
    (
        "crash_loop_back_off_is_not_an_image_failure",
        [
            kubelet("Started", "Started container notebook", 0),
            kubelet("BackOff", CRASH_LOOP, 5, last=900),
        ],
        {},
        1000,
        "wait",
        None,
        ("Server container started",),
    ),
    # --- everything else waits ---------------------------------------------------------------
    (
        "unrelated_events_wait_with_progress_text",
        [
            core("Scheduled", SCHEDULED, 0),
            kubelet("Pulling", PULLING, 1),
            kubelet("Pulled", PULLED, 60),
            kubelet("Created", "Created container notebook", 61),
            kubelet("Started", "Started container notebook", 61),
        ],
        PINNED,
        62,
        "wait",
        None,
        ("Server container started",),
    ),
    (
        "scheduling_after_a_scale_up_ends_the_scheduling_trouble",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 5),
            core("Scheduled", SCHEDULED, 200),
            kubelet("Pulling", PULLING, 201),
        ],
        {},
        400,
        "wait",
        None,
        ("Downloading the server image",),
    ),
    (
        "kubelet_events_prove_the_pod_is_bound_when_scheduled_was_missed",
        [scheduler(CPU_FULL, 0), kubelet("Pulling", PULLING, 100)],
        {},
        400,
        "wait",
        None,
        ("Downloading the server image",),
    ),
    # --- timestamps --------------------------------------------------------------------------
    (
        "events_without_timestamps_still_fail_at_once",
        [bare("FailedScheduling", PINNED_NODE_CORDONED)],
        PINNED,
        1,
        "fail",
        "unschedulable-pinned",
        ("cordoned",),
    ),
    (
        "failed_scheduling_without_timestamps_never_fails_on_time",
        [bare("FailedScheduling", CPU_FULL)],
        {},
        100_000,
        "wait",
        None,
        ("Waiting for a node",),
    ),
    (
        "events_api_microtime_and_series_are_read",
        [series("FailedScheduling", CPU_FULL, 0.5, last=40)],
        {},
        61,
        "fail",
        "unschedulable",
        ("not enough free CPU",),
    ),
    (
        "events_are_put_in_time_order_before_the_latest_autoscaler_word_decides",
        [
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 180),
            scheduler(CPU_FULL, 0),
            autoscaler("NotTriggerScaleUp", CA_REFUSED, 2),
        ],
        {},
        200,
        "wait",
        None,
        ("adding one",),
    ),
    (
        "a_refusal_that_came_last_fails_whatever_the_input_order",
        [
            autoscaler("NotTriggerScaleUp", CA_REFUSED, 100),
            autoscaler("TriggeredScaleUp", CA_TRIGGERED, 5),
            scheduler(CPU_FULL, 0),
        ],
        {},
        101,
        "fail",
        "no-scale-up",
        (),
    ),
    (
        "no_events_wait_with_nothing_to_say",
        [],
        PINNED,
        0,
        "wait",
        None,
        (),
    ),
]


@pytest.mark.parametrize(
    "test_variation_id, events, options, now, expect_action, expect_reason, expect_words",
    VERDICTS,
    ids=[row[0] for row in VERDICTS],
)
def test_verdict(
    test_variation_id, events, options, now, expect_action, expect_reason, expect_words
):
    verdict = classify(
        events,
        pinned_node=options.get("pinned_node"),
        now=T0 + timedelta(seconds=now),
        **{k: v for k, v in options.items() if k != "pinned_node"},
    )
    assert (verdict.action, verdict.reason) == (expect_action, expect_reason)
    for words in expect_words:
        assert words in verdict.user_message
    # The raw message for the operator is one the cluster wrote, verbatim.
    assert verdict.raw == "" or verdict.raw in [e["message"] for e in events]
    if expect_action == "fail":
        assert verdict.reason in EVENT_REASON_CODES
        assert verdict.user_message and verdict.raw
    # Pod names stay in the operator log, never in the person's text.
    assert "jupyter-" not in verdict.user_message


# (test_variation_id, message, own_servers, holders, words in the text, words never in it)
MULTI_ATTACH_TEXT = [
    (
        "own_app_is_named_and_another_users_pod_only_counted",
        MULTI_ATTACH_MIXED,
        {"jupyter-alice--app": "app"},
        ("jupyter-alice--app", "jupyter-bob"),
        ("in use by 'app' and 1 other server.", "Stop 'app'"),
        ("bob",),
    ),
    (
        "own_default_server_is_named_and_pods_in_other_namespaces_counted",
        MULTI_ATTACH_OTHER_NAMESPACES,
        {"jupyter-alice": ""},
        ("jupyter-alice",),
        ("your default server and 1 other server", "Stop your default server"),
        (),
    ),
    (
        "without_own_servers_every_holder_is_only_counted",
        MULTI_ATTACH_MIXED,
        None,
        ("jupyter-alice--app", "jupyter-bob"),
        ("in use by 2 other servers", "ask your administrator"),
        ("alice", "bob", "Stop"),
    ),
    (
        "holders_only_in_other_namespaces_are_counted",
        MULTI_ATTACH_ONLY_OTHER_NAMESPACES,
        {"jupyter-alice": ""},
        (),
        ("in use by 2 other servers",),
        ("default server",),
    ),
    (
        "several_own_servers_are_listed_default_first",
        'Multi-Attach error for volume "pvc-1234" Volume is already used by pod(s) '
        "jupyter-alice--viz, jupyter-alice, jupyter-alice--app",
        {"jupyter-alice--viz": "viz", "jupyter-alice": "", "jupyter-alice--app": "app"},
        ("jupyter-alice--viz", "jupyter-alice", "jupyter-alice--app"),
        ("in use by your default server, 'app' and 'viz'.",),
        ("other server",),
    ),
    (
        "exclusive_attachment_names_nobody",
        MULTI_ATTACH_EXCLUSIVE,
        {"jupyter-alice": ""},
        (),
        ("still attached to another node",),
        ("default server",),
    ),
    (
        "waiting_for_detach_names_the_users_own_server",
        WAITING_FOR_DETACH_USED,
        {"jupyter-alice--pandas-app": "pandas-app"},
        ("jupyter-alice--pandas-app",),
        ("in use by 'pandas-app'.", "Stop 'pandas-app'"),
        ("other server",),
    ),
    (
        "waiting_for_detach_counts_another_users_pod",
        WAITING_FOR_DETACH_MIXED,
        {"jupyter-alice--app": "app"},
        ("jupyter-alice--app", "jupyter-bob"),
        ("in use by 'app' and 1 other server.", "Stop 'app'"),
        ("bob",),
    ),
    (
        "waiting_for_detach_of_an_exclusive_attachment_names_nobody",
        WAITING_FOR_DETACH_EXCLUSIVE,
        {"jupyter-alice": ""},
        (),
        ("still attached to another node",),
        ("default server",),
    ),
]


@pytest.mark.parametrize(
    "test_variation_id, message, own_servers, expect_holders, expect_words, expect_absent",
    MULTI_ATTACH_TEXT,
    ids=[row[0] for row in MULTI_ATTACH_TEXT],
)
def test_multi_attach_text_names_only_the_users_own_servers(
    test_variation_id, message, own_servers, expect_holders, expect_words, expect_absent
):
    verdict = classify(
        [attach("FailedAttachVolume", message, 0)],
        pinned_node="cpu-1",
        now=T0,
        own_servers=own_servers,
    )
    assert (verdict.action, verdict.reason, verdict.raw) == ("fail", "multi-attach", message)
    assert verdict.holders == expect_holders
    for words in expect_words:
        assert words in verdict.user_message
    for words in expect_absent:
        assert words not in verdict.user_message
    assert "jupyter-" not in verdict.user_message


# (test_variation_id, message, (count, fragment) pairs or None)
FIT_ERRORS = [
    (
        "histogram_before_the_preemption_part",
        GPU_PROFILE_ON_CPU_NODES,
        [
            (1, "Insufficient nvidia.com/gpu"),
            (2, "node(s) didn't match Pod's node affinity/selector"),
        ],
    ),
    (
        "older_taint_fragment_with_its_own_comma",
        "0/2 nodes are available: 1 node(s) had taint {dedicated: gpu}, that the pod didn't "
        "tolerate, 1 node(s) were unschedulable.",
        [
            (1, "node(s) had taint {dedicated: gpu}, that the pod didn't tolerate"),
            (1, "node(s) were unschedulable"),
        ],
    ),
    (
        "prefilter_message_without_a_count",
        RWOP_CONFLICT,
        [(None, RWOP_REASON)],
    ),
    (
        "dynamic_resource_allocation_postfilter_text_is_cut",
        "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector. no new "
        "claims to deallocate, preemption: 0/4 nodes are available: 4 Preemption is not helpful "
        "for scheduling.",
        [(4, "node(s) didn't match Pod's node affinity/selector")],
    ),
    (
        "taint_with_an_empty_value",
        NODE_BOOTING,
        [
            (1, "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"),
            (3, "Insufficient nvidia.com/gpu"),
        ],
    ),
    ("karpenter_message_is_not_a_fit_error", KARPENTER_REQUIREMENTS, None),
    ("binding_error_is_not_a_fit_error", 'running PreBind plugin "VolumeBinding": timed out', None),
]


@pytest.mark.parametrize(
    "test_variation_id, message, expect",
    FIT_ERRORS,
    ids=[row[0] for row in FIT_ERRORS],
)
def test_fit_error_fragments_follow_the_scheduler_format(test_variation_id, message, expect):
    assert fit_error_fragments(message) == expect


UTC = timezone.utc
# (test_variation_id, value, expected datetime or None)
TIMES = [
    ("whole_seconds_with_z", "2024-05-01T12:00:00Z", T0),
    ("microtime_with_z", "2024-05-01T12:00:00.123456Z", T0.replace(microsecond=123456)),
    ("nanoseconds_are_truncated", "2024-05-01T12:00:00.123456789Z", T0.replace(microsecond=123456)),
    ("short_fraction", "2024-05-01T12:00:00.5Z", T0.replace(microsecond=500000)),
    ("numeric_offset", "2024-05-01T14:00:00+02:00", T0),
    ("naive_datetime_means_utc", datetime(2024, 5, 1, 12, 0, 0), T0),
    ("missing_field", None, None),
    ("garbage", "yesterday", None),
    ("impossible_date", "2024-02-30T00:00:00Z", None),
]


@pytest.mark.parametrize("test_variation_id, value, expect", TIMES, ids=[row[0] for row in TIMES])
def test_parse_time_reads_rfc3339_forms(test_variation_id, value, expect):
    assert parse_time(value) == expect


def test_naive_now_is_read_as_utc():
    events = [scheduler(CPU_FULL, 0)]
    naive = (T0 + timedelta(seconds=60)).replace(tzinfo=None)
    assert classify(events, pinned_node=None, now=naive).reason == "unschedulable"


def test_reason_codes_are_exported_in_preference_order():
    assert EVENT_REASON_CODES == (
        "unschedulable-pinned",
        "no-scale-up",
        "multi-attach",
        "image-invalid",
        "unschedulable",
        "image-pull",
    )


def test_verdict_is_immutable():
    verdict = classify([], pinned_node=None, now=T0)
    assert verdict == EventVerdict("wait", None, "", "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.action = "fail"  # type: ignore[misc]


@pytest.mark.parametrize("wants_gpu, expect", [(False, "a new node"), (True, "a free GPU")])
def test_scale_up_text_mentions_a_gpu_when_the_pod_requests_one(wants_gpu, expect):
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
    assert verdict.action == "wait"
    assert expect in verdict.user_message


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

# (test_variation_id, events, options, now, action, reason, causes, words in, words never in)
KARPENTER_VERDICTS = [
    (
        "capacity_cap_names_the_colocation_not_the_taint",
        [scheduler(CPU_FULL, 0), karpenter("FailedScheduling", KARPENTER_CAPACITY_CAP, 1)],
        {},
        2,
        "fail",
        "no-scale-up",
        ("taint", "colocation"),
        ("where your other servers are", "attached to one node at a time", "Stop your other"),
        ("taint", "reserved"),
    ),
    (
        "gpu_lab_blocked_names_the_colocation",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            karpenter("FailedScheduling", KARPENTER_GPU_LAB_BLOCKED, 1),
        ],
        {},
        2,
        "fail",
        "no-scale-up",
        ("colocation",),
        ("where your other servers are",),
        ("kind of node",),
    ),
    (
        "no_machine_type_big_enough_names_what_the_server_asks_for",
        [
            scheduler(CPU_FULL, 0),
            karpenter("FailedScheduling", KARPENTER_NO_POOL_HAS_SO_MANY_GPUS, 1),
        ],
        {},
        2,
        "fail",
        "no-scale-up",
        ("no-instance-type",),
        ("no machine type is big enough", "(8 GPUs)"),
        ("other servers",),
    ),
    (
        "no_pool_of_the_right_kind_says_so_once",
        [
            scheduler(GPU_PROFILE_ON_CPU_NODES, 0),
            karpenter("FailedScheduling", KARPENTER_WRONG_KIND_EVERYWHERE, 1),
        ],
        {},
        2,
        "fail",
        "no-scale-up",
        ("requirements", "taint"),
        ("no node pool offers the kind of node",),
        ("reserved",),
    ),
    (
        "a_reason_not_understood_keeps_waiting_within_the_grace",
        [
            scheduler(CPU_FULL, 0),
            karpenter("FailedScheduling", KARPENTER_ONE_POOL_NOT_UNDERSTOOD, 1),
        ],
        {},
        10,
        "wait",
        None,
        (),
        (),
        (),
    ),
    (
        "karpenter_skipping_a_pinned_pod_is_no_verdict",
        [karpenter("FailedScheduling", KARPENTER_SKIPS_PINNED_POD, 1)],
        {},
        600,
        "wait",
        None,
        (),
        (),
        ("profile", "node pool"),
    ),
    (
        "karpenter_skipping_a_pinned_pod_leaves_the_scheduler_verdict",
        [
            karpenter("FailedScheduling", KARPENTER_SKIPS_PINNED_POD, 0),
            scheduler(PINNED_NODE_FULL, 1),
        ],
        PINNED,
        2,
        "fail",
        "unschedulable-pinned",
        (),
        ("not enough free CPU",),
        ("node pool", "matchFields"),
    ),
    (
        "a_nomination_after_a_refusal_is_a_hint_and_keeps_waiting",
        [
            scheduler(CPU_FULL, 0),
            karpenter("FailedScheduling", KARPENTER_CAPACITY_CAP, 1),
            karpenter("Nominated", KARPENTER_NOMINATED, 2),
        ],
        {},
        3,
        "wait",
        None,
        (),
        ("Waiting for a new node",),
        (),
    ),
]


@pytest.mark.parametrize(
    "test_variation_id, events, options, now, expect_action, expect_reason, expect_causes, "
    "expect_words, expect_absent",
    KARPENTER_VERDICTS,
    ids=[row[0] for row in KARPENTER_VERDICTS],
)
def test_karpenter_reasons_are_each_understood(
    test_variation_id,
    events,
    options,
    now,
    expect_action,
    expect_reason,
    expect_causes,
    expect_words,
    expect_absent,
):
    verdict = classify(
        events,
        pinned_node=options.get("pinned_node"),
        now=T0 + timedelta(seconds=now),
        **{k: v for k, v in options.items() if k != "pinned_node"},
    )
    assert (verdict.action, verdict.reason) == (expect_action, expect_reason)
    assert verdict.causes == expect_causes
    for words in expect_words:
        assert words in verdict.user_message
    for words in expect_absent:
        assert words not in verdict.user_message


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
