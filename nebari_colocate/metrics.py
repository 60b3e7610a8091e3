"""Prometheus metrics, on prometheus_client's default registry: JupyterHub serves that registry
on ``/hub/metrics``, so these series appear beside JupyterHub's own.

Created on first use and looked up again if the registry has them already, so a hub config that
is executed twice in one process (jhub-apps does so) never registers a metric twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .config import MODE_ENFORCE

if TYPE_CHECKING:
    from .placement import Decision

PREFIX = "nebari_colocate"


def _get_or_create(
    cls: Any, name: str, documentation: str, labelnames: Sequence[str] = (), **kwargs: Any
) -> Any:
    from prometheus_client import REGISTRY

    existing = REGISTRY._names_to_collectors.get(name)  # no public lookup by name
    if existing is not None:
        return existing
    return cls(name, documentation, labelnames, **kwargs)


@lru_cache(maxsize=1)
def collectors() -> dict[str, Any]:
    """The metric objects, created once per process."""
    from prometheus_client import Counter, Histogram

    return {
        "decisions": _get_or_create(
            Counter,
            f"{PREFIX}_decisions_total",
            "Pre-spawn co-location decisions, by verdict (skip, colocate, refuse) and mode "
            "(enforce; observe: what enforce would have done, not done)",
            ("verdict", "mode"),
        ),
        "reasons": _get_or_create(
            Counter,
            f"{PREFIX}_decision_reasons_total",
            "Reason codes of refusals and warnings of co-location decisions, by mode (enforce, "
            "observe)",
            ("verdict", "kind", "reason", "mode"),
        ),
        "safe_side": _get_or_create(
            Counter,
            f"{PREFIX}_safe_side_total",
            "Decisions taken on the safe side because the cluster state could not be gathered, by "
            "mode (enforce, observe)",
            ("mode",),
        ),
        "check_seconds": _get_or_create(
            Histogram,
            f"{PREFIX}_check_duration_seconds",
            "Duration of the pre-spawn co-location check (state gathering and decision)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        ),
        "api_faults": _get_or_create(
            Counter,
            f"{PREFIX}_api_faults_total",
            "Spawns the Kubernetes API failed (unreachable, overloaded, server-error, timeout, "
            "rejected), by fault",
            ("fault",),
        ),
        "event_verdicts": _get_or_create(
            Counter,
            f"{PREFIX}_event_verdicts_total",
            "Spawns ended early by pod events (fail fast), by reason code and mode (observe: "
            "spawns enforce would have ended, left to wait)",
            ("reason", "mode"),
        ),
        "refusals": _get_or_create(
            Counter,
            f"{PREFIX}_refusals_total",
            "Refusals raised to JupyterHub (enforce mode), by family (colocate-volume-pinned, "
            "colocate-no-room, ...): the spawns JupyterHub 5 counts as failed that are refusals",
            ("family",),
        ),
        "way_out": _get_or_create(
            Counter,
            f"{PREFIX}_way_out_total",
            "Ways out taken (stop what blocks a start, then start it), by outcome (started, "
            "forbidden, stale, busy, stop-failed, release-timeout, start-failed)",
            ("outcome",),
        ),
    }


def observe_refusal(family: str) -> None:
    """Count a refusal raised to JupyterHub (``jupyterhub.before_raising``)."""
    collectors()["refusals"].labels(family=family).inc()


def observe_way_out(outcome: str) -> None:
    collectors()["way_out"].labels(outcome=outcome).inc()


def observe_decision(
    decision: Decision, seconds: float, *, safe_side: bool = False, mode: str = MODE_ENFORCE
) -> None:
    """Count a decision; ``mode`` is ``colocation_mode`` (observe: enforce would have done it)."""
    m = collectors()
    m["decisions"].labels(verdict=decision.verdict, mode=mode).inc()
    for code in decision.reasons:
        m["reasons"].labels(verdict=decision.verdict, kind="reason", reason=code, mode=mode).inc()
    for code in decision.warnings:
        # preempts:<n> counts once as "preempts" (a label value per n would only add series)
        reason = "preempts" if code.startswith("preempts:") else code
        m["reasons"].labels(
            verdict=decision.verdict, kind="warning", reason=reason, mode=mode
        ).inc()
    if safe_side:
        m["safe_side"].labels(mode=mode).inc()
    m["check_seconds"].observe(seconds)


def observe_event_verdict(reason: str, mode: str = MODE_ENFORCE) -> None:
    collectors()["event_verdicts"].labels(reason=reason, mode=mode).inc()


def observe_api_fault(fault: str) -> None:
    collectors()["api_faults"].labels(fault=fault).inc()


@lru_cache(maxsize=1)
def view_collectors() -> dict[str, Any]:
    """The live view's metrics (its watches, nebari_colocate.informer; the spawner's fallbacks to
    direct reads), created once per process."""
    from prometheus_client import Counter, Gauge

    return {
        "live": _get_or_create(
            Gauge,
            f"{PREFIX}_view_live",
            "1 while a watched collection of the live view is listed and watching, else 0",
            ("collection",),
        ),
        "resyncs": _get_or_create(
            Counter,
            f"{PREFIX}_view_resyncs_total",
            "Watches of the live view that broke and were listed again, by collection",
            ("collection",),
        ),
        "fallbacks": _get_or_create(
            Counter,
            f"{PREFIX}_view_fallbacks_total",
            "Checks that read the API directly because the live view was not live",
        ),
        "dry_runs": _get_or_create(
            Counter,
            f"{PREFIX}_dry_runs_total",
            "Server-side dry runs of a pinned pod, by outcome (admitted, refused, failed; reused: "
            "a pinned check took the last dry run of a pod of the same shape)",
            ("outcome",),
        ),
    }


def observe_view_live(collection: str, live: bool) -> None:
    view_collectors()["live"].labels(collection=collection).set(1 if live else 0)


def observe_view_resync(collection: str) -> None:
    view_collectors()["resyncs"].labels(collection=collection).inc()


def observe_view_fallback() -> None:
    view_collectors()["fallbacks"].inc()


def observe_dry_run(outcome: str) -> None:
    view_collectors()["dry_runs"].labels(outcome=outcome).inc()
