"""A spawn the Kubernetes API failed, for the spawner's hooks: a connection error tried again
(an API server restart shorter than ``k8s_api_request_retry_timeout`` must not end a spawn),
the fault told in words and counted, and the sweep of a pod created after the spawn gave up
(docs/decisions.md, "When the API fails").

Which exceptions are faults, and the exception the hub shows, are
:mod:`nebari_colocate.faults`'; the functions here take the spawner itself (KubeSpawner ships
no types: ``Any``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from . import messages, metrics
from .faults import REJECTED, TIMEOUT, UNREACHABLE, KubernetesApiFault, api_fault, connection_failed
from .kubeapi import sweep_late_pod

__all__ = ["fault_error", "stop_sweep", "unless_unreachable"]


async def unless_unreachable(spawner: Any, call: Any, what: str, failed: Any) -> Any:
    """Await ``call``; on a connection error (an API server restart) remember it, log it
    and return ``failed`` so that ``exponential_backoff`` tries again."""
    try:
        return await call
    except Exception as exc:
        if not connection_failed(exc):
            raise
        if failed is False:  # a create: its fault, should the retries run out, is this
            spawner._connection_error = exc
        spawner.log.info(
            "colocate: %s for %s: the API server could not be reached (%s: %s); trying again",
            what,
            spawner.pod_name,
            type(exc).__name__,
            exc,
        )
        return failed


def fault_error(spawner: Any, exc: BaseException, *, started: float) -> KubernetesApiFault | None:
    """The exception the hub shows for a start that ``exc`` ended (None: not an API fault),
    logged and counted; the pod a create may still bring is swept for a while."""
    fault = api_fault(exc)
    if fault is None:
        return None
    if fault[0] == TIMEOUT and spawner._connection_error is not None:
        # The retries ran out on connection errors: say so, not "did not answer".
        error = spawner._connection_error
        fault = (UNREACHABLE, f"{type(error).__name__}: {error}")
    code, detail = fault
    spawner._release_colocation_lock()
    log_message = messages.api_fault_operator_line(
        code, exc, username=spawner.user.name, server_name=spawner.name, pod_name=spawner.pod_name
    )
    spawner.log.warning(log_message)
    metrics.observe_api_fault(code)
    if code != REJECTED:
        task = asyncio.ensure_future(_sweep(spawner, spawner.pod_name, started))
        sweeps = spawner._api_fault_sweeps
        sweeps.add(task)
        task.add_done_callback(sweeps.discard)
        spawner._api_fault_sweep = task
    return KubernetesApiFault(
        messages.api_fault_message(code, server_name=spawner.name, detail=detail),
        messages.api_fault_html(code, server_name=spawner.name, detail=detail),
        log_message,
        code,
    )


def stop_sweep(spawner: Any) -> None:
    """Stop the sweep of an earlier start's late pod (a new start begins)."""
    task = getattr(spawner, "_api_fault_sweep", None)
    if task is not None and not task.done():
        task.cancel()
    spawner._api_fault_sweep = None


async def _sweep(spawner: Any, pod_name: str, started: float) -> None:
    await sweep_late_pod(
        spawner.api,
        spawner.namespace,
        pod_name,
        started=started,
        seconds=spawner.api_fault_sweep_seconds,
        request_timeout=spawner.k8s_api_request_timeout,
        grace_period=spawner.delete_grace_period,
        deleting=lambda created: spawner.log.warning(
            messages.late_pod_delete_line(pod_name, created, started)
        ),
        delete_failed=lambda exc: spawner.log.info(
            messages.late_pod_delete_failed_line(pod_name, exc)
        ),
    )
