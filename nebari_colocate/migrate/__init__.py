"""``nebari-colocate migrate``: move home claims from ReadWriteOnce to ReadWriteMany.

Access modes of a claim are immutable, so a home moves by copying: per user, while none of the
user's servers runs (any pod that mounts the claim counts), one idempotent step after another,
each named by the checkpoint it reaches (:data:`MOVE_STEPS`; docs/migrate.md has the same list):

1. ``retained``: the old PersistentVolume is set to ``Retain`` before anything else (from here
   on no deletion of a claim can delete the data), the move recorded on it;
2. ``marked``: the home claim is marked (``nebari.dev/migration``): the spawner refuses that
   user's spawns with "your home is being moved" until the move ends;
3. ``claim-created``: a new ReadWriteMany claim ``migrate-<claim>`` in the target storage class;
4. ``copy-started``: a copy pod mounts the old claim read-only and the new one and runs
   :mod:`nebari_colocate.copy_home`;
5. ``copied``: the copy is verified with a checksum manifest of both sides and recorded; a
   failed verification stops this user's move, removes the mark and leaves the old claim in
   place, in use;
6. ``swapping``: the swap begins, the copy's volume and the claim's metadata recorded;
7. ``new-retained``: the new volume is set to ``Retain``;
8. ``temporary-deleted``: the copy pod and the temporary claim are deleted;
9. ``prebound``: the new volume is pre-bound to the home claim's name;
10. ``old-deleted``: the old home claim is deleted (only now: its volume is retained and a
    verified copy exists);
11. ``created``: the home claim is recreated with the same name, ReadWriteMany, on the new volume;
12. ``bound``: the PV controller has bound it.

Then the mark is removed.  The old volume stays (``Retain``, ``Released``) until an operator
deletes it; the command prints how.

Where a move stands is written on the objects themselves (annotations on the old volume, which
outlives every claim), so an interrupted ``apply`` resumes where it stopped and a second ``apply``
of a finished move does nothing.  ``rollback`` puts the home claim back on its old volume while
that volume exists.  See docs/migrate.md.

The decisions (what a claim's state is, what would happen) are pure functions of the objects;
:class:`Mover` does the I/O, every request through :mod:`nebari_colocate.kubeapi`.  The
modules: ``codes`` (the vocabulary), ``plan`` and ``manifests`` (pure), ``movelease``, ``io``,
``steps`` and ``mover`` (I/O).
"""

# the lease's states, as before the package (tests and the command read migrate.STALE)
from ..lease import HELD as HELD
from ..lease import STALE as STALE
from .codes import ACTIONS as ACTIONS
from .codes import BIND_TIMEOUT as BIND_TIMEOUT
from .codes import CLAIM_KEY as CLAIM_KEY
from .codes import CLASS_KEY as CLASS_KEY
from .codes import COMPONENT as COMPONENT
from .codes import COMPONENT_LABEL as COMPONENT_LABEL
from .codes import COPIED as COPIED
from .codes import COPY_PHASE as COPY_PHASE
from .codes import COPY_SCRIPT as COPY_SCRIPT
from .codes import COPYING as COPYING
from .codes import DEFAULT_IMAGE as DEFAULT_IMAGE
from .codes import DONE as DONE
from .codes import FAILED as FAILED
from .codes import FINISHED as FINISHED
from .codes import FROM_KEY as FROM_KEY
from .codes import HOST_KEY as HOST_KEY
from .codes import LEASE_SECONDS as LEASE_SECONDS
from .codes import META_KEY as META_KEY
from .codes import MOVE as MOVE
from .codes import MOVE_KEYS as MOVE_KEYS
from .codes import NEW_MOUNT as NEW_MOUNT
from .codes import NO_VOLUME as NO_VOLUME
from .codes import NOT_BOUND as NOT_BOUND
from .codes import OF_KEY as OF_KEY
from .codes import OLD_MOUNT as OLD_MOUNT
from .codes import OUT_ALREADY_DONE as OUT_ALREADY_DONE
from .codes import OUT_BLOCKED as OUT_BLOCKED
from .codes import OUT_DONE as OUT_DONE
from .codes import OUT_ERROR as OUT_ERROR
from .codes import OUT_FAILED as OUT_FAILED
from .codes import OUT_HELD as OUT_HELD
from .codes import OUT_NOTHING_TO_ROLL_BACK as OUT_NOTHING_TO_ROLL_BACK
from .codes import OUT_ROLLED_BACK as OUT_ROLLED_BACK
from .codes import OUT_SKIPPED as OUT_SKIPPED
from .codes import OUT_WOULD_MOVE as OUT_WOULD_MOVE
from .codes import OUTCOMES as OUTCOMES
from .codes import PID_KEY as PID_KEY
from .codes import POLICY_KEY as POLICY_KEY
from .codes import POLL as POLL
from .codes import PROBLEM_KEY as PROBLEM_KEY
from .codes import RESULT_KEY as RESULT_KEY
from .codes import RESUME as RESUME
from .codes import RETAINED as RETAINED
from .codes import RETRY as RETRY
from .codes import RWO_ONLY_PROVISIONERS as RWO_ONLY_PROVISIONERS
from .codes import SKIP_RWX as SKIP_RWX
from .codes import STATIC_PROVISIONER as STATIC_PROVISIONER
from .codes import STEP_KEY as STEP_KEY
from .codes import STEPS as STEPS
from .codes import SWAP_PHASE as SWAP_PHASE
from .codes import SWAPPING as SWAPPING
from .codes import TARGET_KEY as TARGET_KEY
from .codes import WAIT_SERVERS as WAIT_SERVERS
from .codes import CopyRunning as CopyRunning
from .codes import LeaseLost as LeaseLost
from .codes import MigrateError as MigrateError
from .io import MoverIO as MoverIO
from .manifests import SCHEDULING_FIELDS as SCHEDULING_FIELDS
from .manifests import claim_metadata as claim_metadata
from .manifests import claim_ref_patch as claim_ref_patch
from .manifests import copy_pod_manifest as copy_pod_manifest
from .manifests import copy_result as copy_result
from .manifests import final_claim as final_claim
from .manifests import mark as mark
from .manifests import servers_scheduling as servers_scheduling
from .manifests import unmark as unmark
from .movelease import MoveLease as MoveLease
from .movelease import _who as _who
from .mover import Mover as Mover
from .mover import apply_many as apply_many
from .mover import hub_storage_class as hub_storage_class
from .plan import CLASS_MISSING as CLASS_MISSING
from .plan import CLASS_NO_VOLUME as CLASS_NO_VOLUME
from .plan import CLASS_PROBLEMS as CLASS_PROBLEMS
from .plan import CLASS_RWO_ONLY as CLASS_RWO_ONLY
from .plan import Home as Home
from .plan import apply_status as apply_status
from .plan import changes_class as changes_class
from .plan import checks_class as checks_class
from .plan import claim_size as claim_size
from .plan import claim_user as claim_user
from .plan import class_problem as class_problem
from .plan import dry_run_row as dry_run_row
from .plan import holders as holders
from .plan import is_home_claim as is_home_claim
from .plan import label_value as label_value
from .plan import lease_facts as lease_facts
from .plan import movable as movable
from .plan import parse_time as parse_time
from .plan import plan_row as plan_row
from .plan import rollback_status as rollback_status
from .plan import selected_by_all as selected_by_all
from .plan import server_names as server_names
from .plan import temporary_name as temporary_name
from .plan import volume_step as volume_step
from .run import run as run
from .steps import CHECKPOINTS as CHECKPOINTS
from .steps import MOVE_STEPS as MOVE_STEPS
from .steps import MoveSteps as MoveSteps
