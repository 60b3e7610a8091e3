"""The move (I/O): :class:`MoveSteps`, one idempotent step per checkpoint (``_steps``, in the
order of :data:`CHECKPOINTS`), each reading the home again and doing one thing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from .. import messages
from ..kubeapi import (
    DENIED,
    read_json,
    read_json_or_none,
)
from ..objects import (
    MIGRATION_ANNOTATION,
    MIGRATION_STALLED_ANNOTATION,
    MOVING,
    RWX,
    JsonDict,
    attached_nodes,
)
from ..objects import annotations_of as _annotations
from ..objects import meta as _meta
from ..objects import spec as _spec
from .codes import (
    CLAIM_KEY,
    CLASS_KEY,
    COMPONENT,
    COMPONENT_LABEL,
    COPIED,
    COPY_PHASE,
    COPYING,
    DONE,
    FAILED,
    META_KEY,
    MOVE,
    OF_KEY,
    OUT_ALREADY_DONE,
    OUT_BLOCKED,
    OUT_DONE,
    OUT_FAILED,
    OUT_SKIPPED,
    POLICY_KEY,
    PROBLEM_KEY,
    RESULT_KEY,
    RETAINED,
    STEP_KEY,
    SWAP_PHASE,
    SWAPPING,
    TARGET_KEY,
    WAIT_SERVERS,
    CopyRunning,
    LeaseLost,
    MigrateError,
)
from .io import (
    MoverIO,
)
from .manifests import (
    _now,
    claim_metadata,
    copy_pod_manifest,
    copy_result,
    final_claim,
    mark,
    servers_scheduling,
    unmark,
)
from .plan import (
    Home,
    claim_size,
    holders,
    plan_row,
    server_names,
    temporary_name,
)

#: The steps of a move, in order: the checkpoint each reaches (where ``apply`` may be interrupted
#: and resumed; tests inject there) and the method of :class:`MoveSteps` that does it.  The same
#: numbered list is the package's docstring and docs/migrate.md's "What a move does, step by
#: step", and each method's docstring starts with its number (tests/unit/test_migrate_steps.py).
MOVE_STEPS = (
    ("retained", "_retain_old"),
    ("marked", "_mark"),
    ("claim-created", "_create_temporary"),
    ("copy-started", "_start_copy"),
    ("copied", "_wait_copied"),
    ("swapping", "_record_target"),
    ("new-retained", "_retain_new"),
    ("temporary-deleted", "_delete_temporary"),
    ("prebound", "_prebind_new"),
    ("old-deleted", "_delete_old_claim"),
    ("created", "_create_final"),
    ("bound", "_wait_final_bound"),
)
#: the points between steps where ``apply`` may be interrupted and resumed (tests inject here)
CHECKPOINTS = tuple(checkpoint for checkpoint, _ in MOVE_STEPS)


class MoveSteps(MoverIO):
    """The move: one idempotent step per checkpoint."""

    # -- the move: one idempotent step per checkpoint ------------------------------------------

    async def apply(self, claim: str) -> JsonDict:
        """Move one home, or resume its move; a finished move is left alone.  One run at a time
        per home (a lease); every step reads the recorded state again and does one thing.

        Returns the outcome: ``{"claim", "user", "outcome": done|already-done|blocked|failed|
        skipped|held, "reason", "old_volume", "new_volume", ...}``."""
        return await self._holding(claim, lambda: self._move(claim))

    def _steps(self) -> tuple[tuple[str, Callable[[Home], Awaitable[JsonDict | None]]], ...]:
        """The steps of a move (:data:`MOVE_STEPS`), each with the checkpoint it reaches."""
        return tuple((checkpoint, getattr(self, method)) for checkpoint, method in MOVE_STEPS)

    async def _move(self, claim: str) -> JsonDict:
        home = await self.home(claim)
        outcome: JsonDict = {
            "claim": claim,
            "user": home.user,
            "old_volume": _meta(home.old_pv).get("name"),
            "new_volume": None,
        }
        if home.step == DONE:
            return {
                **outcome,
                "outcome": OUT_ALREADY_DONE,
                "new_volume": _annotations(home.old_pv).get(TARGET_KEY),
            }
        if home.step is None:
            row = plan_row(home, self.storage_class)
            if row["action"] != MOVE:
                return {
                    **outcome,
                    "outcome": OUT_SKIPPED,
                    "reason": row["action"],
                    "running": row["running"],
                }
        if home.step in (*COPY_PHASE, COPIED) and home.pods:
            await self._abandon(home, WAIT_SERVERS)
            return {**outcome, **self._blocked(home.pods)}
        switched = await self._switch_class(home)
        if switched:
            outcome["storage_class_changed"] = switched
        if home.pvc is not None and _annotations(home.pvc).get(MIGRATION_STALLED_ANNOTATION):
            # an apply again resumes a move that gave up part-way: it is moving, not stalled
            await self._annotate_pvc(claim, {MIGRATION_STALLED_ANNOTATION: None})
        for name, step in self._steps():
            await self._keep_lease(force=True)  # still ours: nobody else wrote meanwhile
            home = await self.home(claim)
            try:
                stop = await step(home)
            except (LeaseLost, CopyRunning):
                raise
            except MigrateError as exc:
                raise await self._gave_up(claim, exc) from None
            if stop is not None:
                return {**outcome, **stop}
            await self.checkpoint(claim, name)
        await self._keep_lease(force=True)
        new_name = await self._finish(await self.home(claim))
        return {**outcome, "outcome": OUT_DONE, "new_volume": new_name}

    async def _gave_up(self, claim: str, exc: MigrateError) -> MigrateError:
        """A step could not be done.  Before the swap the old claim is in place: unmark it, so
        the user can work, and record the problem; during the swap the mark must stay (the claim
        is being replaced): say how to finish or undo the move."""
        home = await self.home(claim)
        old_name = _meta(home.old_pv).get("name")
        user = home.user or claim
        if (
            home.step in (RETAINED, COPYING)
            and home.pvc is not None
            and old_name
            and _spec(home.pvc).get("volumeName") == old_name
        ):
            await self._abandon(home, f"gave up: {exc}"[:1000])
            return MigrateError(
                messages.migrate_error(
                    "gave-up-unmarked",
                    problem=exc,
                    claim=claim,
                    volume=old_name,
                    user=user,
                    rollback=self._command("rollback", user),
                )
            )
        if home.step in SWAP_PHASE:
            if home.pvc is not None and _annotations(home.pvc).get(MIGRATION_ANNOTATION) == MOVING:
                # the user's refusal says the move stopped and waits for an administrator
                await self._annotate_pvc(claim, {MIGRATION_STALLED_ANNOTATION: _now()})
            return MigrateError(
                messages.migrate_error(
                    "gave-up-marked",
                    problem=exc,
                    claim=claim,
                    user=user,
                    rollback=self._command("rollback", user),
                )
            )
        return exc

    async def _switch_class(self, home: Home) -> JsonDict | None:
        """A ``--storage-class`` other than the one the unfinished move recorded: before the copy
        is verified, start over in the class asked for (the old temporary claim and copy pod are
        deleted; they hold no data of the only copy); after it, refuse."""
        recorded = _annotations(home.old_pv).get(CLASS_KEY)
        asked = self.storage_class
        if home.step in (None, DONE) or not recorded or not asked or recorded == asked:
            return None
        user = home.user or home.claim
        if home.step in SWAP_PHASE:
            raise MigrateError(
                messages.migrate_error(
                    "class-switch-too-late",
                    claim=home.claim,
                    recorded=recorded,
                    step=home.step,
                    asked=asked,
                    apply=self._command("apply", user, recorded),
                    rollback=self._command("rollback", user),
                )
            )
        tmp_name = temporary_name(home.claim)
        if home.copy_pod is not None:
            await self._delete_pod(tmp_name)
        if home.temporary is not None:
            await self._delete_pvc(tmp_name, _meta(home.temporary)["uid"])
        await self._annotate_pv(
            _meta(home.old_pv)["name"],
            {CLASS_KEY: asked, STEP_KEY: RETAINED, RESULT_KEY: None, PROBLEM_KEY: None},
        )
        self.log(f"{self.namespace}/{home.claim}: storage class {recorded} -> {asked}")
        return {"from": recorded, "to": asked}

    async def _abandon(self, home: Home, problem: str) -> None:
        """The copy cannot go on (a server uses the home, or a step gave up): the copy (if any)
        may be stale.  Unmark the claim so the user keeps working; the next ``apply`` copies
        again.  Nothing is deleted but the copy pod."""
        if home.step in (None, FAILED):
            return
        if home.copy_pod is not None:
            await self._delete_pod(temporary_name(home.claim))
        name = _meta(home.old_pv)["name"]
        await self._annotate_pv(name, {STEP_KEY: RETAINED, RESULT_KEY: None, PROBLEM_KEY: problem})
        if home.pvc is not None and _spec(home.pvc).get("volumeName") == name:
            await self._annotate_pvc(
                home.claim,
                unmark(),
            )

    # Each step below reads the home as recorded now, does nothing when its effect is there (or
    # the move is past it), else does its one thing; None to go on, an outcome to stop.

    async def _retain_old(self, home: Home) -> JsonDict | None:
        """1. The old volume ``Retain``, before anything else, and the move recorded on it."""
        if home.step not in COPY_PHASE:
            return None
        claim, pvc = home.claim, home.pvc
        if pvc is None:
            raise MigrateError(
                messages.migrate_error(
                    "claim-gone-before-copy", namespace=self.namespace, claim=claim
                )
            )
        old_name: str | None = _spec(pvc).get("volumeName")
        recorded = _meta(home.old_pv).get("name")
        if home.step is not None and old_name != recorded:
            raise MigrateError(
                messages.migrate_error(
                    "claim-moved-before-retain",
                    namespace=self.namespace,
                    claim=claim,
                    on_volume=old_name,
                    recorded=recorded,
                    rollback=self._command("rollback", home.user or claim),
                )
            )
        old = home.old_pv if recorded == old_name else await self.pv(old_name)
        if old is None or not old_name:
            raise MigrateError(
                messages.migrate_error(
                    "volume-unreadable", namespace=self.namespace, claim=claim, volume=old_name
                )
            )
        annotations = _annotations(old)
        values = {
            CLAIM_KEY: f"{self.namespace}/{claim}",
            POLICY_KEY: annotations.get(POLICY_KEY)
            or _spec(old).get("persistentVolumeReclaimPolicy")
            or "Delete",
            CLASS_KEY: annotations.get(CLASS_KEY) or self.storage_class,
            PROBLEM_KEY: None,
        }
        if not values[CLASS_KEY]:
            raise MigrateError(messages.migrate_error("no-storage-class-for", claim=claim))
        if home.step in (None, FAILED):
            values[STEP_KEY] = RETAINED
            values[RESULT_KEY] = None
        await self._patch_pv(
            old_name,
            {
                "metadata": {"annotations": values},
                "spec": {"persistentVolumeReclaimPolicy": "Retain"},
            },
        )
        return None

    async def _mark(self, home: Home) -> JsonDict | None:
        """2. The claim marked: the spawner refuses this user's spawns from now on."""
        if home.step not in COPY_PHASE:
            return None
        old_name = _meta(home.old_pv).get("name")
        if home.pvc is None or _spec(home.pvc).get("volumeName") != old_name:
            raise MigrateError(
                messages.migrate_error(
                    "claim-moved-before-mark",
                    namespace=self.namespace,
                    claim=home.claim,
                    on_volume=_spec(home.pvc).get("volumeName"),
                    volume=old_name,
                )
            )
        if _annotations(home.pvc).get(MIGRATION_ANNOTATION) != MOVING:
            await self._annotate_pvc(
                home.claim,
                mark(),
            )
        running = holders(await self.pods(), home.claim)
        if running:  # started between the plan and the mark
            await self._abandon(await self.home(home.claim), WAIT_SERVERS)
            return self._blocked(running)
        return None

    async def _create_temporary(self, home: Home) -> JsonDict | None:
        """3. The new ReadWriteMany claim in the target class."""
        if home.step not in COPY_PHASE:
            return None
        claim, old_name = home.claim, _meta(home.old_pv)["name"]
        tmp_name = temporary_name(claim)
        temporary = await self.pvc(tmp_name)
        if temporary is not None and _annotations(temporary).get(OF_KEY) != claim:
            raise MigrateError(
                messages.migrate_error(
                    "temporary-not-ours", namespace=self.namespace, temporary=tmp_name
                )
            )
        if temporary is None:
            await read_json(
                self.core.create_namespaced_persistent_volume_claim,
                self.namespace,
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {
                        "name": tmp_name,
                        "labels": {COMPONENT_LABEL: COMPONENT},
                        "annotations": {OF_KEY: claim},
                    },
                    "spec": {
                        "accessModes": [RWX],
                        "storageClassName": _annotations(home.old_pv)[CLASS_KEY],
                        "resources": {"requests": {"storage": claim_size(home.pvc or {}) or "1Gi"}},
                        "volumeMode": "Filesystem",
                    },
                },
            )
        if home.step != COPYING:
            await self._annotate_pv(old_name, {STEP_KEY: COPYING})
        return None

    async def _start_copy(self, home: Home) -> JsonDict | None:
        """4. The copy pod (an earlier attempt's, finished unverified or going, is replaced)."""
        if home.step != COPYING:
            return None
        tmp_name = temporary_name(home.claim)
        pod = home.copy_pod
        if pod is not None and (
            _meta(pod).get("deletionTimestamp")
            or (copy_result(pod) or {"result": "verified"})["result"] != "verified"
        ):
            await self._delete_pod(tmp_name)
            pod = None
        if pod is None:
            attached = await self._attached_node(_meta(home.old_pv)["name"])
            scheduling = servers_scheduling(await self.pods())
            await read_json(
                self.core.create_namespaced_pod,
                self.namespace,
                copy_pod_manifest(home, self.image, attached, scheduling=scheduling),
            )
        return None

    async def _wait_copied(self, home: Home) -> JsonDict | None:
        """5. The copy finished and verified (recorded), or the move stops for this user."""
        if home.step != COPYING:
            return None
        claim, old_name = home.claim, _meta(home.old_pv)["name"]
        summary = await self._wait_copy(home)
        if summary.get("result") == WAIT_SERVERS:
            await self._abandon(await self.home(claim), WAIT_SERVERS)
            return {"outcome": OUT_BLOCKED, "reason": WAIT_SERVERS, "running": summary["running"]}
        record = json.dumps(
            {
                k: summary.get(k)
                for k in ("result", "entries", "files", "bytes", "digest", "problems")
            }
        )
        if summary.get("result") != "verified":
            # Stop this user's move; the old claim stays in place, in use.
            problem = "; ".join(summary.get("problems") or []) or summary.get("result", "error")
            await self._annotate_pv(
                old_name,
                {
                    STEP_KEY: FAILED,
                    RESULT_KEY: record,
                    PROBLEM_KEY: f"copy {summary.get('result')}: {problem}"[:1000],
                },
            )
            await self._annotate_pvc(
                claim,
                unmark(),
            )
            return {
                "outcome": OUT_FAILED,
                "reason": f"copy-{summary.get('result')}",
                "problems": summary.get("problems") or [],
            }
        await self._annotate_pv(old_name, {STEP_KEY: COPIED, RESULT_KEY: record})
        return None

    async def _attached_node(self, pv_name: str) -> str | None:
        listing = await read_json_or_none(self.storage.list_volume_attachment, none_for=DENIED)
        if listing is None:
            return None
        nodes = sorted(attached_nodes(listing.get("items") or [], pv_name))
        return nodes[0] if len(nodes) == 1 else None

    async def _wait_copy(self, home: Home) -> JsonDict:
        claim = home.claim
        pod_name = temporary_name(claim)
        deadline = time.monotonic() + self.copy_timeout
        unplaced_deadline = time.monotonic() + self.bind_timeout
        while True:
            pod = await self.pod(pod_name)
            if pod is None:
                gone = messages.migrate_error("copy-pod-gone", pod=pod_name)
                return {"result": "error", "problems": [gone]}
            summary = copy_result(pod)
            if summary is not None:
                return summary
            running = holders(await self.pods(), claim)
            if running:
                return {"result": WAIT_SERVERS, "running": server_names(running)}
            if not _spec(pod).get("nodeName") and time.monotonic() > unplaced_deadline:
                why = [
                    c.get("message") or c.get("reason") or ""
                    for c in (pod.get("status") or {}).get("conditions") or []
                    if c.get("type") == "PodScheduled" and c.get("status") == "False"
                ]
                raise MigrateError(
                    messages.migrate_error(
                        "copy-pod-unscheduled",
                        namespace=self.namespace,
                        pod=pod_name,
                        timeout=self.bind_timeout,
                        why=why,
                    )
                )
            if time.monotonic() > deadline:
                user = home.user or claim
                raise CopyRunning(
                    messages.migrate_error(
                        "copy-running",
                        namespace=self.namespace,
                        pod=pod_name,
                        timeout=self.copy_timeout,
                        claim=claim,
                        rollback=self._command("rollback", user),
                    )
                )
            await self._keep_lease()
            await asyncio.sleep(self.copy_poll)

    async def _record_target(self, home: Home) -> JsonDict | None:
        """6. The swap begins: the copy's volume and the claim's metadata recorded."""
        if home.step != COPIED:
            return None
        if home.pods:
            await self._abandon(home, WAIT_SERVERS)
            return self._blocked(home.pods)
        tmp_name = temporary_name(home.claim)
        temporary = await self.pvc(tmp_name)
        if temporary is None or not _spec(temporary).get("volumeName"):
            raise MigrateError(
                messages.migrate_error(
                    "temporary-not-bound", namespace=self.namespace, temporary=tmp_name
                )
            )
        new_name = _spec(temporary)["volumeName"]
        await self._wait(
            lambda: self._bound(tmp_name), self.bind_timeout, f"claim {tmp_name} bound"
        )
        await self._annotate_pv(
            _meta(home.old_pv)["name"],
            {STEP_KEY: SWAPPING, TARGET_KEY: new_name, META_KEY: claim_metadata(home.pvc)},
        )
        return None

    async def _target(self, home: Home) -> tuple[str, JsonDict]:
        """The new volume of a move being swapped."""
        old_name = _meta(home.old_pv)["name"]
        new_name: str | None = _annotations(home.old_pv).get(TARGET_KEY)
        if not new_name:
            raise MigrateError(
                messages.migrate_error("no-target-volume", volume=old_name, claim=home.claim)
            )
        new = home.new_pv if _meta(home.new_pv).get("name") == new_name else await self.pv(new_name)
        if new is None:
            raise MigrateError(
                messages.migrate_error("target-volume-gone", new_volume=new_name, claim=home.claim)
            )
        return new_name, new

    async def _retain_new(self, home: Home) -> JsonDict | None:
        """7. The copy survives its temporary claim: the new volume ``Retain``."""
        if home.step != SWAPPING:
            return None
        new_name, new = await self._target(home)
        if _spec(new).get("persistentVolumeReclaimPolicy") != "Retain":
            await self._patch_pv(
                new_name,
                {
                    "metadata": {
                        "annotations": {
                            POLICY_KEY: _spec(new).get("persistentVolumeReclaimPolicy") or "Delete"
                        }
                    },
                    "spec": {"persistentVolumeReclaimPolicy": "Retain"},
                },
            )
        return None

    async def _delete_temporary(self, home: Home) -> JsonDict | None:
        """8. The copy pod and the temporary claim deleted (the new volume is retained)."""
        if home.step != SWAPPING:
            return None
        tmp_name = temporary_name(home.claim)
        if home.copy_pod is not None:
            await self._delete_pod(tmp_name)
        temporary = await self.pvc(tmp_name)
        if temporary is not None and _annotations(temporary).get(OF_KEY) == home.claim:
            await self._delete_pvc(tmp_name, _meta(temporary)["uid"])
        return None

    def _final(self, home: Home, new_name: str) -> bool:
        return home.pvc is not None and _spec(home.pvc).get("volumeName") == new_name

    async def _prebind_new(self, home: Home) -> JsonDict | None:
        """9. The new volume pre-bound to the home claim's name (no uid: it is recreated)."""
        if home.step != SWAPPING:
            return None
        new_name, new = await self._target(home)
        ref = _spec(new).get("claimRef") or {}
        if not self._final(home, new_name) and (
            ref.get("name") != home.claim
            or ref.get("namespace") != self.namespace
            or ref.get("uid")
        ):
            await self._reserve_for(new_name, new, home.claim)
        return None

    async def _delete_old_claim(self, home: Home) -> JsonDict | None:
        """10. The old claim deleted, only now: its volume is retained and a verified copy
        exists."""
        if home.step != SWAPPING or home.pvc is None:
            return None
        new_name, _ = await self._target(home)
        old_name = _meta(home.old_pv)["name"]
        current = home.pvc
        if _spec(current).get("volumeName") == old_name:
            await self._delete_pvc(home.claim, _meta(current)["uid"])
        elif not self._final(home, new_name):
            raise MigrateError(
                messages.migrate_error(
                    "claim-recreated",
                    namespace=self.namespace,
                    claim=home.claim,
                    on_volume=_spec(current).get("volumeName"),
                    volume=old_name,
                    new_volume=new_name,
                )
            )
        return None

    async def _create_final(self, home: Home) -> JsonDict | None:
        """11. The home claim recreated, ReadWriteMany, on the new volume."""
        if home.step != SWAPPING or home.pvc is not None:
            return None
        new_name, new = await self._target(home)
        await read_json(
            self.core.create_namespaced_persistent_volume_claim,
            self.namespace,
            final_claim(home, new, new_name),
        )
        return None

    async def _wait_final_bound(self, home: Home) -> JsonDict | None:
        """12. The PV controller bound it."""
        if home.step != SWAPPING:
            return None
        new_name, _ = await self._target(home)
        await self._wait(
            lambda: self._bound(home.claim, new_name),
            self.bind_timeout,
            f"claim {home.claim} bound to {new_name}",
        )
        return None

    async def _finish(self, home: Home) -> str:
        """The new volume's reclaim policy restored, the mark removed, the move recorded done."""
        if home.step != SWAPPING:
            raise MigrateError(
                messages.migrate_error("step-after-last", claim=home.claim, at_step=home.step)
            )
        new_name, new = await self._target(home)
        restore = _annotations(new).get(POLICY_KEY)
        if restore:
            await self._patch_pv(
                new_name,
                {
                    "metadata": {"annotations": {POLICY_KEY: None}},
                    "spec": {"persistentVolumeReclaimPolicy": restore},
                },
            )
        await self._annotate_pvc(
            home.claim,
            unmark(),
        )
        await self._annotate_pv(_meta(home.old_pv)["name"], {STEP_KEY: DONE, PROBLEM_KEY: None})
        return new_name
