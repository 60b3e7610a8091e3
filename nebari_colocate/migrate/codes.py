"""The move's vocabulary (pure): the annotations it writes on the volumes, claims and pods, the
steps it records, the plan's action and the outcome codes (their words are in
:mod:`nebari_colocate.messages`), its settings' defaults and its errors."""

from __future__ import annotations

from pathlib import Path

from ..objects import (
    MIGRATE_CLAIM_KEY,
    MIGRATE_COMPONENT,
    MIGRATE_COMPONENT_LABEL,
    MIGRATE_HOST_KEY,
    MIGRATE_STEP_KEY,
    MIGRATION_OF_KEY,
)

# Written on the old PersistentVolume: it outlives the claims, so the move's state lives there.
CLAIM_KEY = MIGRATE_CLAIM_KEY  # "<namespace>/<claim>"
STEP_KEY = MIGRATE_STEP_KEY
POLICY_KEY = "nebari.dev/migrate-reclaim-policy"  # the policy before the move (on both PVs)
TARGET_KEY = "nebari.dev/migrate-target-pv"
RESULT_KEY = "nebari.dev/migrate-result"  # the copy's JSON summary
PROBLEM_KEY = "nebari.dev/migrate-problem"
CLASS_KEY = "nebari.dev/migrate-storage-class"
META_KEY = "nebari.dev/migrate-claim-metadata"  # the home claim's labels and annotations (JSON)
# On the temporary claim, the copy pod and the final claim.
OF_KEY = MIGRATION_OF_KEY  # the home claim a temporary object belongs to
FROM_KEY = "nebari.dev/migrated-from-pv"  # on the final claim: the old volume
COMPONENT_LABEL = MIGRATE_COMPONENT_LABEL
COMPONENT = MIGRATE_COMPONENT

MOVE_KEYS = (
    CLAIM_KEY,
    STEP_KEY,
    POLICY_KEY,
    TARGET_KEY,
    RESULT_KEY,
    PROBLEM_KEY,
    CLASS_KEY,
    META_KEY,
)

#: the steps recorded on the old volume, in order
RETAINED, COPYING, COPIED, SWAPPING, DONE = "retained", "copying", "copied", "swapping", "done"
FAILED = "failed"
STEPS = (RETAINED, COPYING, COPIED, SWAPPING, DONE)

#: plan actions (codes; messages.py has the words)
MOVE, SKIP_RWX, WAIT_SERVERS, RESUME, FINISHED, RETRY, NOT_BOUND, NO_VOLUME = ACTIONS = (
    "move",
    "already-rwx",
    "servers-running",
    "resume",
    "done",
    "retry",
    "not-bound",
    "no-volume",
)

#: outcomes of ``apply`` and ``rollback`` per claim (codes; messages.py has the words)
(
    OUT_DONE,
    OUT_ALREADY_DONE,
    OUT_BLOCKED,
    OUT_FAILED,
    OUT_SKIPPED,
    OUT_ERROR,
    OUT_ROLLED_BACK,
    OUT_NOTHING_TO_ROLL_BACK,
    OUT_WOULD_MOVE,
    OUT_HELD,
) = OUTCOMES = (
    "done",
    "already-done",
    "blocked",
    "failed",
    "skipped",
    "error",
    "rolled-back",
    "nothing-to-roll-back",
    "would-move",
    "held",  # another run holds this home's lease: nothing done
)

#: the recorded steps of the copy (the old claim is in place) and of the swap
COPY_PHASE = (None, FAILED, RETAINED, COPYING)
SWAP_PHASE = (COPIED, SWAPPING)

#: a holder renews its lease before every step and every third of this in between; a lease
#: seen unchanged for this long by another run (its own clock) may be taken over
#: (:mod:`nebari_colocate.lease`)
LEASE_SECONDS = 60
#: on the lease, for a person who reads it: the holder's host name and process id (no identity:
#: a container may carry its host's name)
HOST_KEY = MIGRATE_HOST_KEY
PID_KEY = "nebari.dev/migrate-pid"

#: CSI drivers and in-tree plugins that offer no ReadWriteMany filesystem volumes
RWO_ONLY_PROVISIONERS = frozenset(
    {
        "ebs.csi.aws.com",
        "kubernetes.io/aws-ebs",
        "pd.csi.storage.gke.io",
        "kubernetes.io/gce-pd",
        "disk.csi.azure.com",
        "kubernetes.io/azure-disk",
        "cinder.csi.openstack.org",
        "kubernetes.io/cinder",
        "rbd.csi.ceph.com",
        "kubernetes.io/rbd",
        "dobs.csi.digitalocean.com",
        "linodebs.csi.linode.com",
        "csi.hetzner.cloud",
        "rancher.io/local-path",
        "topolvm.io",
        "openebs.io/local",
    }
)
STATIC_PROVISIONER = "kubernetes.io/no-provisioner"

COPY_SCRIPT = Path(__file__).parent.with_name("copy_home.py")
DEFAULT_IMAGE = "python:3.12-slim"
OLD_MOUNT, NEW_MOUNT = "/old", "/new"
POLL = 0.2
#: the most one step waits for a claim to bind, a pod to be placed or deleted (``--timeout``)
BIND_TIMEOUT = 300.0


class MigrateError(Exception):
    """A move cannot go on; the message names the claim and the problem."""


class CopyRunning(MigrateError):
    """The copy pod still runs past ``--copy-timeout``: the move is not given up."""


class LeaseLost(MigrateError):
    """Another run took this home's lease over: this run must write nothing more."""
