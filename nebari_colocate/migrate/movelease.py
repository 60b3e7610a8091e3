"""One run at a time per home (I/O): :class:`MoveLease`, this run's ``coordination.k8s.io``
Lease on a home, judged by :mod:`nebari_colocate.lease`."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import getpass
import json
import os
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any

from .. import messages
from ..kubeapi import (
    CONFLICT,
    NOT_FOUND,
    ApiError,
    read_json,
    read_json_or_none,
)
from ..lease import HELD, STALE, LeaseObserver, duration_of
from ..objects import (
    JsonDict,
)
from ..objects import meta as _meta
from ..objects import spec as _spec
from .codes import (
    COMPONENT,
    COMPONENT_LABEL,
    HOST_KEY,
    OF_KEY,
    PID_KEY,
    LeaseLost,
)
from .manifests import (
    _micro_now,
)
from .plan import (
    lease_facts,
    temporary_name,
)


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # a container's uid without a passwd entry
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"


#: the lease the running step holds (each home's move runs in its own task)
_HELD: contextvars.ContextVar[MoveLease | None] = contextvars.ContextVar("held", default=None)


class MoveLease:
    """This run's hold on one home: a ``coordination.k8s.io`` Lease named like the temporary
    claim.  Created, or taken over (with a resourceVersion precondition) once another run's
    record has stayed unchanged for its duration by this run's clock (:mod:`.lease`), before
    the first write; renewed with a resourceVersion precondition before every step and, while
    held, every third of its duration (:meth:`renewing`), deleted at the end.  A renewal that
    finds the lease changed means another run took it over: this one stops at once."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        claim: str,
        seconds: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.namespace, self.claim = api, namespace, claim
        self.name = temporary_name(claim)
        self.seconds = int(seconds)
        self.identity = f"{_who()} {secrets.token_hex(3)}"
        self.body: JsonDict | None = None
        self.took_over: JsonDict | None = None
        self._clock = clock
        self._renewed = 0.0
        self._writing = asyncio.Lock()
        #: set when a renewal found the lease taken over (the next step raises it)
        self.lost: LeaseLost | None = None

    def _fresh(self, resource_version: str | None = None) -> JsonDict:
        now = _micro_now()
        metadata: JsonDict = {
            "name": self.name,
            "labels": {COMPONENT_LABEL: COMPONENT},
            "annotations": {
                OF_KEY: self.claim,
                HOST_KEY: socket.gethostname(),
                PID_KEY: str(os.getpid()),
            },
        }
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.seconds,
                "acquireTime": now,
                "renewTime": now,
            },
        }

    async def read(self) -> JsonDict | None:
        return await read_json_or_none(self.api.read_namespaced_lease, self.name, self.namespace)

    async def acquire(self) -> JsonDict | None:
        """None when this run holds the lease now; else who holds it (``lease_facts``).

        A lease held by another run is read again (every ``min(2 s, duration / 10)``) until its
        record changes (its holder lives: it is held) or has stayed the same for its whole
        duration by this run's clock (it is taken over)."""
        observer = LeaseObserver(self._clock)
        found: JsonDict | None = None
        writes = 0
        while writes < 3:  # each miss is another run's write in between: read again
            found = await self.read()
            state = STALE if found is None else observer.judge(found)
            if found is not None and state == HELD:
                if observer.renewed:
                    return lease_facts(found)
                await asyncio.sleep(min(2.0, duration_of(found) / 10))
                continue
            writes += 1
            try:
                if found is None:
                    self.body = await read_json(
                        self.api.create_namespaced_lease, self.namespace, self._fresh()
                    )
                else:
                    self.body = await read_json(
                        self.api.replace_namespaced_lease,
                        self.name,
                        self.namespace,
                        self._fresh(_meta(found).get("resourceVersion")),
                    )
                    if _spec(found).get("holderIdentity"):
                        self.took_over = {
                            **lease_facts(found),
                            "state": state,
                            "unchanged_seconds": round(observer.unchanged_for(), 1),
                        }
            except ApiError as exc:
                if exc.status in (NOT_FOUND, CONFLICT):
                    continue
                raise
            self._renewed = time.monotonic()
            return None
        return lease_facts(found) if found else {"holder": "another run", "lease": self.name}

    async def keep(self, force: bool = True) -> None:
        """Renew (only when a third of the lease has passed, unless ``force``); LeaseLost when
        another run holds it now."""
        async with self._writing:
            if self.lost is not None:
                raise self.lost
            if self.body is None or (
                not force and time.monotonic() - self._renewed < self.seconds / 3
            ):
                return
            body = json.loads(json.dumps(self.body))
            body["spec"]["renewTime"] = _micro_now()
            try:
                self.body = await read_json(
                    self.api.replace_namespaced_lease, self.name, self.namespace, body
                )
            except ApiError as exc:
                if exc.status not in (NOT_FOUND, CONFLICT):
                    raise
                now = await self.read()
                self.body = None
                holder = _spec(now).get("holderIdentity") if now else None
                self.lost = LeaseLost(
                    messages.migrate_error(
                        "lease-lost",
                        namespace=self.namespace,
                        lease=self.name,
                        claim=self.claim,
                        holder=holder,
                    )
                )
                raise self.lost from None
            self._renewed = time.monotonic()

    async def renewing(self) -> None:
        """Renew every third of the lease while this run holds it, whatever its step waits
        on (client-go's leader election renews the same way); ends when the lease is lost or
        released.  A renewal the API fails is tried again a second later."""
        while self.body is not None and self.lost is None:
            wait = self.seconds / 3 - (time.monotonic() - self._renewed)
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            try:
                await self.keep(force=False)
            except LeaseLost:
                return
            except Exception:  # (the step's own renewal before its next write raises it)
                await asyncio.sleep(1.0)

    async def release(self) -> None:
        if self.body is None:
            return
        body, self.body = self.body, None
        # Best effort: a lease left behind is taken over by the next run once it has seen it
        # unchanged for its duration.  Never let this hide the outcome of the move.
        with contextlib.suppress(Exception):
            await read_json(
                self.api.delete_namespaced_lease,
                self.name,
                self.namespace,
                body={"preconditions": {"resourceVersion": _meta(body).get("resourceVersion")}},
            )
