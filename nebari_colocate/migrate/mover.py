""":class:`Mover`: the move (:mod:`.steps`), the way back (``rollback``) and ``status``; and
:func:`apply_many`, several homes at a time."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable

from .. import messages
from ..kubeapi import (
    ApiError,
    forbidden,
    read_json,
)
from ..objects import (
    MIGRATION_ANNOTATION,
    MOVING,
    RWO,
    JsonDict,
)
from ..objects import annotations_of as _annotations
from ..objects import meta as _meta
from ..objects import spec as _spec
from .codes import (
    FROM_KEY,
    MOVE_KEYS,
    OUT_ERROR,
    OUT_NOTHING_TO_ROLL_BACK,
    OUT_ROLLED_BACK,
    POLICY_KEY,
    PROBLEM_KEY,
    RESULT_KEY,
    TARGET_KEY,
    MigrateError,
)
from .manifests import (
    final_claim,
    mark,
    unmark,
)
from .movelease import (
    MoveLease,
)
from .plan import (
    Home,
    lease_facts,
    server_names,
    temporary_name,
)
from .steps import (
    MoveSteps,
)


class Mover(MoveSteps):
    """Moves home claims of one namespace; every method is safe to run again after a crash."""

    # -- the way back: the same shape, decided by where the claim really is ----------------------

    async def rollback(self, claim: str) -> JsonDict:
        """Put ``claim`` back on its old volume, holding the home's lease.  The copy is kept when
        it may hold newer data (the claim was on it: the user may have worked since).  Each step
        reads the claim again; the old volume gets its reclaim policy back only once the claim is
        bound to it again."""
        return await self._holding(claim, lambda: self._roll_back(claim))

    async def _roll_back(self, claim: str) -> JsonDict:
        home = await self.home(claim)
        old_name: str | None = _meta(home.old_pv).get("name")
        outcome: JsonDict = {"claim": claim, "user": home.user, "old_volume": old_name}
        if home.step is None:
            return {**outcome, "outcome": OUT_NOTHING_TO_ROLL_BACK}
        # a step is read from the old volume's annotations: that volume, and its name, exist
        assert old_name is not None
        if home.pods:
            return {**outcome, **self._blocked(home.pods)}
        kept: list[str] = []
        for step in (
            self._back_stop_copy,
            self._back_off_other_volume,
            self._back_recreate_on_old,
            self._back_wait_bound,
            self._back_delete_temporary,
            self._back_release_copy,
            self._back_restore_old,
        ):
            await self._keep_lease(force=True)
            await step(await self.home(claim), kept)
        current = await self.pvc(claim)
        old = await self.pv(old_name)
        return {
            **outcome,
            "outcome": OUT_ROLLED_BACK,
            "kept_volume": kept[-1] if kept else None,
            # where the home is now, as read (not as planned), and what guards the old volume
            "volume": _spec(current).get("volumeName") or None,
            "old_reclaim_policy": _spec(old).get("persistentVolumeReclaimPolicy"),
        }

    async def _back_stop_copy(self, home: Home, kept: list[str]) -> None:
        if home.copy_pod is not None:
            await self._delete_pod(temporary_name(home.claim))

    async def _back_off_other_volume(self, home: Home, kept: list[str]) -> None:
        """The claim is on another volume (the move swapped it, whatever step is recorded):
        that volume holds the user's data since, so it is retained and kept, and the claim is
        deleted to be recreated on the old one."""
        old_name = _meta(home.old_pv)["name"]
        current = home.pvc
        if current is None or _spec(current).get("volumeName") in (None, "", old_name):
            return
        other = _spec(current)["volumeName"]
        volume = await self.pv(other)
        if volume is not None and _spec(volume).get("persistentVolumeReclaimPolicy") != "Retain":
            await self._patch_pv(other, {"spec": {"persistentVolumeReclaimPolicy": "Retain"}})
        if volume is not None:
            kept.append(other)
        await self._annotate_pvc(
            home.claim,
            mark(),
        )
        await self._delete_pvc(home.claim, _meta(current)["uid"])

    async def _back_recreate_on_old(self, home: Home, kept: list[str]) -> None:
        if home.pvc is not None:
            return
        old_name = _meta(home.old_pv)["name"]
        old = home.old_pv
        await self._reserve_for(old_name, old, home.claim)
        body = final_claim(home, old, old_name)
        body["spec"]["accessModes"] = list(_spec(old).get("accessModes") or [RWO])
        body["metadata"]["annotations"].pop(FROM_KEY, None)
        await read_json(self.core.create_namespaced_persistent_volume_claim, self.namespace, body)

    async def _back_wait_bound(self, home: Home, kept: list[str]) -> None:
        old_name = _meta(home.old_pv)["name"]
        await self._wait(
            lambda: self._on_old(home.claim, old_name),
            self.bind_timeout,
            f"claim {home.claim} bound to {old_name}",
        )

    async def _on_old(self, claim: str, old_name: str) -> bool:
        """The claim bound to the old volume, and the old volume bound to that claim."""
        pvc, old = await asyncio.gather(self.pvc(claim), self.pv(old_name))
        if pvc is None or old is None or _spec(pvc).get("volumeName") != old_name:
            return False
        if (pvc.get("status") or {}).get("phase") != "Bound":
            return False
        ref = _spec(old).get("claimRef") or {}
        phase = (old.get("status") or {}).get("phase")
        return phase == "Bound" and ref.get("uid") == _meta(pvc).get("uid")

    async def _back_delete_temporary(self, home: Home, kept: list[str]) -> None:
        tmp_name = temporary_name(home.claim)
        if home.temporary is not None:
            await self._delete_pvc(tmp_name, _meta(home.temporary)["uid"])

    async def _back_release_copy(self, home: Home, kept: list[str]) -> None:
        """A retained copy is kept for the operator, no longer reserved for the home claim."""
        new_name = _annotations(home.old_pv).get(TARGET_KEY)
        new = await self.pv(new_name)
        if (
            not new_name
            or new is None
            or _spec(new).get("persistentVolumeReclaimPolicy") != "Retain"
        ):
            return
        ref = _spec(new).get("claimRef")
        if ref is not None and not ref.get("uid"):
            await self._patch_pv(new_name, [{"op": "remove", "path": "/spec/claimRef"}])
        if new_name not in kept:
            kept.append(new_name)

    async def _back_restore_old(self, home: Home, kept: list[str]) -> None:
        """The old volume's reclaim policy back, only while the claim is bound to it: a Released
        or unbound volume with ``Delete`` would be deleted, and it is the way back."""
        old_name = _meta(home.old_pv)["name"]
        if not await self._on_old(home.claim, old_name):
            current = await self.pvc(home.claim)
            raise MigrateError(
                messages.migrate_error(
                    "claim-not-on-old",
                    namespace=self.namespace,
                    claim=home.claim,
                    on_volume=_spec(current).get("volumeName"),
                    volume=old_name,
                )
            )
        old = await self.pv(old_name)
        policy = _annotations(old).get(POLICY_KEY) or _spec(old).get(
            "persistentVolumeReclaimPolicy"
        )
        await self._patch_pv(
            old_name,
            {
                "metadata": {"annotations": dict.fromkeys(MOVE_KEYS)},
                "spec": {"persistentVolumeReclaimPolicy": policy},
            },
        )
        await self._annotate_pvc(
            home.claim,
            {**unmark(), FROM_KEY: None},
        )

    # -- status ---------------------------------------------------------------------------------

    async def status(self, claims: Iterable[str] | None = None) -> list[JsonDict]:
        wanted = set(claims) if claims else None
        rows = []
        for home in await self.homes():
            if wanted is not None and home.claim not in wanted:
                continue
            if wanted is None and home.step is None:
                continue
            home.copy_pod = await self.pod(temporary_name(home.claim))
            annotations = _annotations(home.old_pv)
            result = None
            with contextlib.suppress(ValueError, TypeError):
                result = json.loads(annotations.get(RESULT_KEY) or "null")
            rows.append(
                {
                    "user": home.user,
                    "claim": home.claim,
                    "step": home.step,
                    "access_modes": home.modes,
                    "old_volume": _meta(home.old_pv).get("name"),
                    "old_reclaim_policy": _spec(home.old_pv).get("persistentVolumeReclaimPolicy"),
                    "new_volume": annotations.get(TARGET_KEY)
                    or _spec(home.temporary).get("volumeName")
                    or None,
                    "copy_pod": (home.copy_pod.get("status") or {}).get("phase")
                    if home.copy_pod
                    else None,
                    "copy": result,
                    "marked": _annotations(home.pvc).get(MIGRATION_ANNOTATION) == MOVING,
                    "running": server_names(home.pods),
                    "problem": annotations.get(PROBLEM_KEY),
                    "held_by": await self._lease_holder(home.claim),
                }
            )
        return rows

    async def _lease_holder(self, claim: str) -> JsonDict | None:
        """Who runs this home's move now (None: no run holds it, or the lease is not readable)."""
        try:
            lease = await MoveLease(self.coordination, self.namespace, claim, 0).read()
        except ApiError as exc:
            if forbidden(exc):
                return None
            raise
        return lease_facts(lease) if lease and _spec(lease).get("holderIdentity") else None


def hub_storage_class() -> str | None:
    """The hub's ``custom.storage-class`` when run inside the hub image (z2jh), else None."""
    try:
        from z2jh import get_config
    except ImportError:
        return None
    value = get_config("custom.storage-class", None)
    return value or None


async def apply_many(mover: Mover, claims: list[str], concurrency: int) -> list[JsonDict]:
    """Move several homes, at most ``concurrency`` at a time; one user's failure stops only
    that user's move."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(claim: str) -> JsonDict:
        async with gate:
            try:
                return await mover.apply(claim)
            except MigrateError as exc:
                user = mover._user(claim)
                return {"claim": claim, "user": user, "outcome": OUT_ERROR, "reason": str(exc)}

    return list(await asyncio.gather(*(one(c) for c in claims)))
