"""What the fail fast reads of the server's pod itself, beside its events.

Two rules of :func:`nebari_colocate.events.classify` read the pod, not only its events: a pod
nominated to its node (``status.nominatedNodeName``) waits while the scheduler evicts the
victims of its preemption, and a pod that no scheduler has looked at (no node, no
``PodScheduled`` condition, no event) for ``colocation_unscheduled_timeout`` ends its spawn.
The pod comes from the pod reflector the spawner already has; the moment its create request
succeeded is the spawn's.  Ending a spawn on the pod's silence is confirmed by one read of the
pod by name first: the reflector may be behind (docs/failure-modes.md, "Schedulers").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .events import FAIL, NO_SCHEDULER, EventVerdict
from .kubeapi import read_json_or_none
from .objects import JsonDict


def reflected_pod(reflector: Any, namespace: str, name: str) -> JsonDict | None:
    """The pod ``namespace/name`` as a pod reflector (KubeSpawner's or the shared one) holds
    it, or None (no reflector yet, or the pod not in it)."""
    pods = getattr(reflector, "pods", None)
    if pods is None:
        return None
    pod: JsonDict | None = pods.get(f"{namespace}/{name}")
    return pod


def needs_confirmation(verdict: EventVerdict) -> bool:
    """Whether ending the spawn on ``verdict`` waits for a read of the pod by name: a verdict
    drawn from the pod's silence, which a reflector that is behind would also show."""
    return verdict.action == FAIL and verdict.code == NO_SCHEDULER


async def read_pod(api: Any, namespace: str, name: str, timeout: float) -> JsonDict | None:
    """The pod read by name (raw camelCase), None when it is gone."""
    return await read_json_or_none(
        api.read_namespaced_pod, name, namespace, _request_timeout=timeout
    )


async def confirmed(
    verdict: EventVerdict,
    reread: Callable[[], Awaitable[JsonDict | None]],
    judge: Callable[[JsonDict], EventVerdict],
) -> EventVerdict | None:
    """``verdict``, when it needs no confirmation or the pod read again (``reread``) and
    judged again (``judge``) still fails the same way; else None (keep waiting).  A read that
    fails or finds no pod confirms nothing: the spawn goes on waiting, as without the rule."""
    if not needs_confirmation(verdict):
        return verdict
    try:
        pod = await reread()
    except Exception:
        return None
    if pod is None:
        return None
    again = judge(pod)
    return again if again.action == FAIL and again.code == verdict.code else None
