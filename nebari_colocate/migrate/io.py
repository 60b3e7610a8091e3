"""The mover's reads and writes (I/O): :class:`MoverIO` reads homes and their objects, patches,
deletes and waits, every request through :mod:`nebari_colocate.kubeapi`, and runs a move
holding the home's lease."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from .. import messages
from ..kubeapi import (
    CONFLICT,
    NOT_FOUND,
    ApiError,
    Apis,
    forbidden,
    read_json,
    read_json_or_none,
)
from ..objects import (
    RWX,
    USERNAME_ANNOTATION,
    JsonDict,
    Obj,
)
from ..objects import annotations_of as _annotations
from ..objects import meta as _meta
from ..objects import spec as _spec
from .codes import (
    BIND_TIMEOUT,
    CLAIM_KEY,
    DEFAULT_IMAGE,
    FROM_KEY,
    LEASE_SECONDS,
    OF_KEY,
    OUT_BLOCKED,
    OUT_HELD,
    POLL,
    STATIC_PROVISIONER,
    TARGET_KEY,
    WAIT_SERVERS,
    MigrateError,
)
from .manifests import claim_ref_patch
from .movelease import (
    _HELD,
    MoveLease,
)
from .plan import (
    Home,
    claim_user,
    class_problem,
    holders,
    is_home_claim,
    server_names,
    temporary_name,
    volume_step,
)


class MoverIO:
    """Moves home claims of one namespace; every method is safe to run again after a crash."""

    def __init__(
        self,
        api_client: Any,  # kubernetes_asyncio's ApiClient (untyped)
        namespace: str,
        *,
        storage_class: str | None = None,
        image: str = DEFAULT_IMAGE,
        claim_prefix: str = "claim-",
        copy_timeout: float = 3600.0,
        bind_timeout: float = BIND_TIMEOUT,
        lease_seconds: int = LEASE_SECONDS,
        checkpoint: Callable[[str, str], Awaitable[None] | None] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        apis = Apis(api_client)
        self.core = apis.core
        self.storage = apis.storage
        self.coordination = apis.coordination
        self.lease_seconds = lease_seconds
        self.namespace = namespace
        self.storage_class = storage_class
        self.image = image
        self.prefix = claim_prefix
        self.copy_timeout = copy_timeout
        self.bind_timeout = bind_timeout
        self._checkpoint = checkpoint
        #: seconds between looks at the copy pod (and at the servers that may start meanwhile)
        self.copy_poll = 1.0
        self.log = log or (lambda _line: None)

    # -- small API helpers ----------------------------------------------------------------------

    async def pvc(self, name: str) -> JsonDict | None:
        return await read_json_or_none(
            self.core.read_namespaced_persistent_volume_claim, name, self.namespace
        )

    async def pv(self, name: str | None) -> JsonDict | None:
        return await read_json_or_none(self.core.read_persistent_volume, name) if name else None

    async def pod(self, name: str) -> JsonDict | None:
        return await read_json_or_none(self.core.read_namespaced_pod, name, self.namespace)

    async def pods(self) -> list[JsonDict]:
        return (await read_json(self.core.list_namespaced_pod, self.namespace)).get("items") or []

    async def pvcs(self) -> list[JsonDict]:
        listing = await read_json(self.core.list_namespaced_persistent_volume_claim, self.namespace)
        return listing.get("items") or []

    async def pvs(self) -> list[JsonDict]:
        return (await read_json(self.core.list_persistent_volume)).get("items") or []

    async def _patch_pv(self, name: str, body: JsonDict | list[JsonDict]) -> JsonDict:
        return await read_json(self.core.patch_persistent_volume, name, body)

    async def _reserve_for(self, pv_name: str, pv: Obj | None, claim: str) -> JsonDict:
        """Pre-bind the volume to ``claim`` of this namespace by name, without a uid: the claim
        is (re)created under that name next, and the PV controller binds only it."""
        return await self._patch_pv(pv_name, claim_ref_patch(pv, self.namespace, claim))

    async def _annotate_pv(self, name: str, values: Mapping[str, str | None]) -> JsonDict:
        return await self._patch_pv(name, {"metadata": {"annotations": dict(values)}})

    async def _annotate_pvc(self, name: str, values: Mapping[str, str | None]) -> JsonDict:
        return await read_json(
            self.core.patch_namespaced_persistent_volume_claim,
            name,
            self.namespace,
            {"metadata": {"annotations": dict(values)}},
        )

    async def _delete_pvc(self, name: str, uid: str) -> None:
        """Delete the claim with this uid (not one recreated under the name), wait until gone."""
        await read_json_or_none(  # None: gone, or a newer claim under the name
            self.core.delete_namespaced_persistent_volume_claim,
            name,
            self.namespace,
            body={"preconditions": {"uid": uid}},
            none_for=(NOT_FOUND, CONFLICT),
        )
        await self._wait(
            lambda: self._gone(self.pvc(name), uid), self.bind_timeout, f"claim {name} deleted"
        )

    async def _delete_pod(self, name: str) -> None:
        await read_json_or_none(
            self.core.delete_namespaced_pod, name, self.namespace, grace_period_seconds=0
        )
        await self._wait(
            lambda: self._gone(self.pod(name), None), self.bind_timeout, f"pod {name} deleted"
        )

    @staticmethod
    async def _gone(read: Awaitable[JsonDict | None], uid: str | None) -> bool:
        obj = await read
        return obj is None or (uid is not None and _meta(obj).get("uid") != uid)

    async def _wait(self, ready: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not await ready():
            if time.monotonic() > deadline:
                raise MigrateError(messages.migrate_error("timed-out", timeout=timeout, what=what))
            await self._keep_lease()
            await asyncio.sleep(POLL)

    @staticmethod
    async def _keep_lease(force: bool = False) -> None:
        lease = _HELD.get()
        if lease is not None:
            await lease.keep(force)

    async def checkpoint(self, claim: str, name: str) -> None:
        self.log(f"{self.namespace}/{claim}: {name}")
        if self._checkpoint is not None:
            result = self._checkpoint(claim, name)
            if asyncio.iscoroutine(result):
                await result

    # -- reading a home -------------------------------------------------------------------------

    async def homes(self, pvs: list[JsonDict] | None = None) -> list[Home]:
        """Every home claim of the namespace, and every move whose claim is gone mid-swap."""
        pvcs, pods = await asyncio.gather(self.pvcs(), self.pods())
        pvs = await self.pvs() if pvs is None else pvs
        by_name = {pv["metadata"]["name"]: pv for pv in pvs}
        moves = {
            _annotations(pv)[CLAIM_KEY].split("/", 1)[1]: pv
            for pv in pvs
            if _annotations(pv).get(CLAIM_KEY, "").startswith(f"{self.namespace}/")
        }
        claims = {_meta(p)["name"]: p for p in pvcs}
        temporaries = {_annotations(p)[OF_KEY]: p for p in pvcs if _annotations(p).get(OF_KEY)}
        homes = []
        for name in sorted(
            {*(n for n, p in claims.items() if is_home_claim(p, self.prefix)), *moves}
        ):
            pvc = claims.get(name)
            old = moves.get(name)
            if old is None and pvc is not None:
                old = by_name.get(_spec(pvc).get("volumeName") or "")
            user = claim_user(pvc, self.prefix) if pvc else name[len(self.prefix) :]
            home = Home(
                self.namespace, name, user, pvc=pvc, old_pv=old, temporary=temporaries.get(name)
            )
            home.new_pv = by_name.get(_annotations(old).get(TARGET_KEY) or "")
            home.pods = holders(pods, name)
            homes.append(home)
        return homes

    async def home(self, claim: str) -> Home:
        """One home, read by name (a move of many homes does not list every volume per step)."""
        tmp_name = temporary_name(claim)
        pvc, temporary, copy_pod, pods = await asyncio.gather(
            self.pvc(claim), self.pvc(tmp_name), self.pod(tmp_name), self.pods()
        )
        old = None
        if pvc is not None:
            for name in (_annotations(pvc).get(FROM_KEY), _spec(pvc).get("volumeName")):
                candidate = await self.pv(name)
                if volume_step(candidate, self.namespace, claim) is not None or (
                    candidate is not None and name == _spec(pvc).get("volumeName")
                ):
                    old = candidate
                    break
        if old is None or volume_step(old, self.namespace, claim) is None:
            # The claim is gone mid-swap (or was recreated): the move is found on its volume.
            moving = [
                pv for pv in await self.pvs() if volume_step(pv, self.namespace, claim) is not None
            ]
            if moving:
                old = moving[0]
        if pvc is None and old is None:
            raise MigrateError(
                messages.migrate_error("claim-not-found", namespace=self.namespace, claim=claim)
            )
        user = claim_user(pvc, self.prefix) if pvc else claim[len(self.prefix) :]
        if temporary is not None and _annotations(temporary).get(OF_KEY) != claim:
            temporary = None
        home = Home(self.namespace, claim, user, pvc=pvc, old_pv=old, temporary=temporary)
        home.new_pv = await self.pv(_annotations(old).get(TARGET_KEY))
        home.copy_pod = copy_pod
        home.pods = holders(pods, claim)
        return home

    async def resolve(self, names: Iterable[str]) -> list[str]:
        """Claim names for users or claim names given on the command line."""
        homes = await self.homes()
        by_user = {h.user: h.claim for h in homes}
        claims = {h.claim for h in homes}
        found = []
        for name in names:
            if name in claims:
                found.append(name)
            elif name in by_user:
                found.append(by_user[name])
            else:
                raise MigrateError(
                    messages.migrate_error(
                        "no-home-claim",
                        name=name,
                        namespace=self.namespace,
                        prefix=self.prefix,
                        annotation=USERNAME_ANNOTATION,
                    )
                )
        return list(dict.fromkeys(found))

    async def check_storage_class(self) -> list[str]:
        """Raise MigrateError for a target class that cannot work; notes for what is unknown."""
        name = self.storage_class
        if not name:
            raise MigrateError(messages.migrate_error("no-storage-class"))
        try:
            sc = await read_json_or_none(self.storage.read_storage_class, name)
        except ApiError as exc:
            if forbidden(exc):
                return [
                    messages.migrate_error("storage-class-unread", name=name, status=exc.status)
                ]
            raise
        rwx = None
        if sc is not None and sc.get("provisioner") == STATIC_PROVISIONER:
            rwx = sum(
                1
                for pv in await self.pvs()
                if _spec(pv).get("storageClassName") == name
                and RWX in (_spec(pv).get("accessModes") or [])
                and (pv.get("status") or {}).get("phase") == "Available"
            )
        problem = class_problem(sc, name, rwx)
        if problem:
            raise MigrateError(problem)
        return []

    def _user(self, claim: str) -> str:
        return claim[len(self.prefix) :] if claim.startswith(self.prefix) else claim

    def _command(self, verb: str, user: str, storage_class: str | None = None) -> str:
        """The command an operator runs next (shown in problems and refusals)."""
        return messages.migrate_command(verb, user, self.namespace, storage_class)

    async def _holding(self, claim: str, work: Callable[[], Awaitable[JsonDict]]) -> JsonDict:
        """Run ``work`` holding ``claim``'s lease; the ``held`` outcome when another run has it."""
        lease = MoveLease(self.coordination, self.namespace, claim, self.lease_seconds)
        held = await lease.acquire()
        if held is not None:
            return {
                "claim": claim,
                "user": self._user(claim),
                "outcome": OUT_HELD,
                "reason": "held",
                **held,
            }
        if lease.took_over:
            self.log(f"{self.namespace}/{claim}: took the lease over ({lease.took_over})")
        token = _HELD.set(lease)
        renewing = asyncio.ensure_future(lease.renewing())
        try:
            result = await work()
        finally:
            _HELD.reset(token)
            renewing.cancel()
            with contextlib.suppress(BaseException):
                await renewing
            await lease.release()
        if lease.took_over:
            result["took_over"] = lease.took_over
        return result

    @staticmethod
    def _blocked(pods: list[JsonDict]) -> JsonDict:
        return {"outcome": OUT_BLOCKED, "reason": WAIT_SERVERS, "running": server_names(pods)}

    async def _bound(self, claim: str, volume: str | None = None) -> bool:
        pvc = await self.pvc(claim)
        if pvc is None or (pvc.get("status") or {}).get("phase") != "Bound":
            return False
        return volume is None or _spec(pvc).get("volumeName") == volume
